"""JSON mode: generation constrained to one JSON object, any object or one a
JSON schema describes (json_schema.py: what text may come next).

`JsonConstraint` applies it to sampling: the sampler draws from the logits as
usual, and a token whose text cannot continue the object is masked (its logit
set to -inf) and the draw repeated. Repeating the draw with the rejected
tokens masked gives exactly the distribution "mask every invalid token, then
sample" (greedy: the most likely valid token) without testing the whole
vocabulary at each step; after REJECT_LIMIT rejections the tokens are tried in
logit order instead. Special tokens (end of turn, BOS) are never valid inside
the object, so generation ends when the object closes (or at max_tokens, when
the text is an unfinished object).
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Union

import numpy as np

from .json_schema import WHITESPACE, JsonPrefix, read_schema

REJECT_LIMIT = 64


def response_schema(response_format: Optional[Dict[str, Any]]) -> Union[None, bool, Dict[str, Any]]:
    """What an OpenAI-style response_format asks for: None (text), True (any JSON
    object) or a JSON schema (dict). Accepted: {"type": "text"}, {"type":
    "json_object"}, {"type": "json_object", "schema": {...}} (llama-cpp-python's
    form) and {"type": "json_schema", "json_schema": {"schema": {...}, ...}}
    (OpenAI's); ValueError otherwise."""
    if response_format is None:
        return None
    if isinstance(response_format, dict):
        t = response_format.get("type")
        if t == "text" and len(response_format) == 1:
            return None
        if t == "json_object" and set(response_format) <= {"type", "schema"}:
            schema = response_format.get("schema")
            return True if schema is None else schema
        if t == "json_schema" and set(response_format) == {"type", "json_schema"}:
            js = response_format["json_schema"]
            if isinstance(js, dict) and isinstance(js.get("schema"), dict):
                return js["schema"]
            raise ValueError("response_format json_schema must hold {\"json_schema\": {\"name\": ..., \"schema\": {...}}}")
    raise ValueError(f"response_format must be {{\"type\": \"text\"}}, {{\"type\": \"json_object\"}} or "
                     f"{{\"type\": \"json_schema\", \"json_schema\": {{\"schema\": ...}}}} (got {response_format!r:.80})")


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


def _missing_punctuation(tokenizer, texts: List[Optional[str]]) -> List[str]:
    """The characters of { } " : , that no token begins with; once per tokenizer."""
    missing = getattr(tokenizer, "_json_missing", None)
    if missing is None:
        firsts = {t.lstrip(WHITESPACE)[:1] for t in texts if t}
        missing = tokenizer._json_missing = [ch for ch in '{}":,' if ch not in firsts]
    return missing


class JsonDeadEnd(ValueError):
    """No token of the vocabulary continues the object (a vocabulary without some of JSON's characters)."""


class JsonConstraint:
    """Sampling constrained to a JSON object (see the module's docstring): any
    object (schema True) or one the schema (a dict, json_schema.py) accepts. A
    schema it cannot follow, or a vocabulary that cannot write an object's
    punctuation, is refused here (ValueError)."""

    def __init__(self, tokenizer, schema: Union[bool, Dict[str, Any]] = True):
        root = None if schema is True else read_schema(schema)   # SchemaError (a ValueError) first: no vocabulary pass
        self.texts = token_texts(tokenizer)
        self.state = JsonPrefix(root)
        missing = _missing_punctuation(tokenizer, self.texts)
        if missing:
            raise ValueError("JSON mode: this model's vocabulary has no token beginning with "
                             + " or ".join(repr(ch) for ch in missing) + ", so it cannot write a JSON object")

    @property
    def complete(self) -> bool:
        return self.state.complete

    def _text(self, tok: int) -> Optional[str]:
        return self.texts[tok] if 0 <= tok < len(self.texts) else None

    def allows(self, tok: int) -> bool:
        text = self._text(tok)
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
        text = self._text(tok)
        if not text or not self.state.feed(text):
            raise ValueError(f"JSON mode: token {tok} does not continue the object")
