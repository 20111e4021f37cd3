"""JSON mode: generation constrained to one JSON object (RFC 8259).

`JsonPrefix` follows the text generated so far, character by character, and
says whether a piece of text can continue it toward a valid JSON object; the
object is complete when its closing brace arrives. `JsonConstraint` applies
it to sampling: the sampler draws from the logits as usual, and a token whose
text cannot continue the object is masked (its logit set to -inf) and the
draw repeated. Repeating the draw with the rejected tokens masked gives
exactly the distribution "mask every invalid token, then sample" (greedy: the
most likely valid token) without testing the whole vocabulary at each step;
after REJECT_LIMIT rejections the tokens are tried in logit order instead.

What the object may hold is any JSON: nested objects and arrays, strings with
escapes, numbers in JSON's grammar, true/false/null. Outside strings at most
MAX_BLANKS whitespace characters follow one another (a model can otherwise
loop on newlines); special tokens (end of turn, BOS) are never valid inside
the object, so generation ends when the object closes (or at max_tokens, when
the text is an unfinished object).
"""
from __future__ import annotations

from typing import List, Optional

import numpy as np

MAX_BLANKS = 48
REJECT_LIMIT = 64

_WS = " \t\n\r"
_ESC = '"\\/bfnrtu'
_HEX = "0123456789abcdefABCDEF"
_DIGITS = "0123456789"

# modes (what the next character may be)
_START = 0        # before the object: whitespace or '{'
_KEY_OR_END = 1   # after '{': a key string or '}'
_KEY = 2          # after ',' in an object: a key string
_COLON = 3        # after a key
_VALUE = 4        # a value
_VALUE_OR_END = 5 # after '[': a value or ']'
_NEXT = 6         # after a value inside a container: ',' or its closing bracket
_STRING = 7       # inside a string (key or value)
_ESCAPE = 8       # after a backslash in a string
_UHEX = 9         # inside \\uXXXX (count in aux)
_NUMBER = 10      # inside a number (its state in aux)
_LITERAL = 11     # inside true / false / null (the rest in aux)
_DONE = 12        # the object is closed

# number states: which characters may follow, and whether it may end there
_N_MINUS, _N_ZERO, _N_INT, _N_DOT, _N_FRAC, _N_E, _N_ESIGN, _N_EXP = range(8)
_N_ENDS = (_N_ZERO, _N_INT, _N_FRAC, _N_EXP)


class JsonPrefix:
    """The state of a JSON object's text read so far. feed(text) reads more
    (False, state unchanged, when the text cannot continue a valid object);
    `complete` once the object is closed."""

    __slots__ = ("mode", "aux", "stack", "key", "blanks")

    def __init__(self):
        self.mode = _START
        self.aux = 0          # number state, hex digits left, or the literal's rest
        self.stack: List[str] = []   # the open containers, '{' or '['
        self.key = False      # the string being read is an object key
        self.blanks = 0       # whitespace characters in a row, outside strings

    def copy(self) -> "JsonPrefix":
        c = JsonPrefix.__new__(JsonPrefix)
        c.mode, c.aux, c.stack, c.key, c.blanks = self.mode, self.aux, list(self.stack), self.key, self.blanks
        return c

    @property
    def complete(self) -> bool:
        return self.mode == _DONE

    def feed(self, text: str) -> bool:
        c = self.copy()
        for ch in text:
            if not c._char(ch):
                return False
        self.mode, self.aux, self.stack, self.key, self.blanks = c.mode, c.aux, c.stack, c.key, c.blanks
        return True

    # ---- one character ----
    def _after_value(self) -> None:
        self.mode = _NEXT if self.stack else _DONE

    def _open(self, ch: str) -> None:
        self.stack.append(ch)
        self.mode = _KEY_OR_END if ch == "{" else _VALUE_OR_END

    def _close(self, ch: str) -> bool:
        if not self.stack or self.stack[-1] != ("{" if ch == "}" else "["):
            return False
        self.stack.pop()
        self._after_value()
        return True

    def _value_start(self, ch: str) -> bool:
        if ch in "{[":
            self._open(ch)
        elif ch == '"':
            self.mode, self.key = _STRING, False
        elif ch == "-":
            self.mode, self.aux = _NUMBER, _N_MINUS
        elif ch in _DIGITS:
            self.mode, self.aux = _NUMBER, _N_ZERO if ch == "0" else _N_INT
        elif ch in "tfn":
            self.mode, self.aux = _LITERAL, {"t": "rue", "f": "alse", "n": "ull"}[ch]
        else:
            return False
        return True

    def _number(self, ch: str) -> Optional[bool]:
        """True/False: ch continues the number or cannot; None: the number ended before ch."""
        s = self.aux
        if ch in _DIGITS:
            if s in (_N_MINUS,):
                self.aux = _N_ZERO if ch == "0" else _N_INT
            elif s == _N_ZERO:
                return False   # no leading zeros
            elif s in (_N_DOT, _N_FRAC):
                self.aux = _N_FRAC
            elif s in (_N_E, _N_ESIGN, _N_EXP):
                self.aux = _N_EXP
            return True
        if ch == "." and s in (_N_ZERO, _N_INT):
            self.aux = _N_DOT
            return True
        if ch in "eE" and s in (_N_ZERO, _N_INT, _N_FRAC):
            self.aux = _N_E
            return True
        if ch in "+-" and s == _N_E:
            self.aux = _N_ESIGN
            return True
        if s in _N_ENDS:
            return None
        return False

    def _char(self, ch: str) -> bool:
        m = self.mode
        if m == _STRING:
            if ch == '"':
                if self.key:
                    self.mode = _COLON
                else:
                    self._after_value()
                self.blanks = 0
            elif ch == "\\":
                self.mode = _ESCAPE
            elif ord(ch) < 0x20:
                return False
            return True
        if m == _ESCAPE:
            if ch not in _ESC:
                return False
            self.mode, self.aux = (_UHEX, 4) if ch == "u" else (_STRING, 0)
            return True
        if m == _UHEX:
            if ch not in _HEX:
                return False
            self.aux -= 1
            if self.aux == 0:
                self.mode = _STRING
            return True
        if m == _LITERAL:
            if not self.aux or ch != self.aux[0]:
                return False
            self.aux = self.aux[1:]
            if not self.aux:
                self._after_value()
            return True
        if m == _NUMBER:
            r = self._number(ch)
            if r is not None:
                return r
            self._after_value()   # the number ended: ch belongs to what follows
            m = self.mode
        if ch in _WS:
            if m == _DONE:
                return False
            self.blanks += 1
            return self.blanks <= MAX_BLANKS
        self.blanks = 0
        if m == _START:
            if ch != "{":
                return False
            self._open(ch)
            return True
        if m in (_KEY_OR_END, _KEY):
            if ch == '"':
                self.mode, self.key = _STRING, True
                return True
            return m == _KEY_OR_END and ch == "}" and self._close(ch)
        if m == _COLON:
            if ch != ":":
                return False
            self.mode = _VALUE
            return True
        if m in (_VALUE, _VALUE_OR_END):
            if m == _VALUE_OR_END and ch == "]":
                return self._close(ch)
            return self._value_start(ch)
        if m == _NEXT:
            if ch == ",":
                self.mode = _KEY if self.stack[-1] == "{" else _VALUE
                return True
            if ch in "}]":
                return self._close(ch)
        return False


def token_texts(tokenizer) -> List[Optional[str]]:
    """Each id's text as it reads after other text (a leading space kept), None for
    special tokens; cached on the tokenizer."""
    cached = getattr(tokenizer, "_json_texts", None)
    if cached is not None:
        return cached
    n = tokenizer.n_ids
    lead = tokenizer.encode("a", add_bos=False)
    lead = lead[-1:] if lead else []
    base = tokenizer.decode(lead, skip_special=False)
    texts: List[Optional[str]] = []
    for t in range(n):
        full = tokenizer.decode(lead + [t], skip_special=True)
        # a special token decodes to nothing when skipped; an ordinary one never does
        texts.append(full[len(base):] if len(full) > len(base) and full.startswith(base) else None)
    tokenizer._json_texts = texts
    return texts


class JsonDeadEnd(ValueError):
    """No token of the vocabulary continues the object (a vocabulary without some of JSON's characters)."""


class JsonConstraint:
    """Sampling constrained to a JSON object (see the module's docstring). A
    vocabulary that cannot write an object's punctuation is refused here."""

    def __init__(self, tokenizer):
        self.texts = token_texts(tokenizer)
        self.state = JsonPrefix()
        firsts = {t.lstrip(_WS)[:1] for t in self.texts if t}
        missing = [ch for ch in '{}":,' if ch not in firsts]
        if missing:
            raise ValueError("JSON mode: this model's vocabulary has no token beginning with "
                             + " or ".join(repr(ch) for ch in missing) + ", so it cannot write a JSON object")

    @property
    def complete(self) -> bool:
        return self.state.complete

    def allows(self, tok: int) -> bool:
        text = self.texts[tok] if 0 <= tok < len(self.texts) else None
        return bool(text) and self.state.copy().feed(text)

    def sample(self, sampler, logits: np.ndarray) -> int:
        """A token from sampler over logits with the tokens that cannot continue the object masked."""
        tok = sampler.sample(logits)
        if self.allows(tok):
            return tok
        masked = np.array(logits[:len(self.texts)], dtype=np.float32, copy=True)
        for _ in range(REJECT_LIMIT):
            if 0 <= tok < masked.size:
                masked[tok] = -np.inf
            if not np.isfinite(masked).any():
                break
            tok = sampler.sample(masked)
            if self.allows(tok):
                return tok
        for t in np.argsort(-masked, kind="stable"):
            if masked[t] > -np.inf and self.allows(int(t)):
                return int(t)
        for t in range(len(self.texts)):   # every likely token was refused: any that continues the object
            if self.allows(t):
                return t
        raise JsonDeadEnd(f"JSON mode: no token of this model's vocabulary continues the object after "
                          f"{len(self.texts)} candidates")

    def accept(self, tok: int) -> None:
        text = self.texts[tok] if 0 <= tok < len(self.texts) else None
        if not text or not self.state.feed(text):
            raise ValueError(f"JSON mode: token {tok} does not continue the object")
