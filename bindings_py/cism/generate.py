"""Streaming generation: the sample/evaluate loop, driven from Python so it
can be a plain iterator (stop with `break`, cancel from another thread).

The loop is the same as cism_generate's: evaluate the prompt, then per step
sample from the last logits, accept the token into the sampler's history,
stop at an end-of-generation id (not evaluated) unless ignore_eos, otherwise
evaluate the token so the session can continue from it.
"""
from __future__ import annotations

import time
from typing import TYPE_CHECKING, Callable, Iterator, List, Optional, Sequence, Union

import numpy as np

from .errors import CancelledError, ContextFullError
from .json_mode import JsonConstraint
from .sampler import PARAMS as SAMPLER_PARAMS, Sampler
from .session import as_token_array

if TYPE_CHECKING:
    from .session import Session


def stop_strings(stop) -> List[str]:
    """The non-empty stop strings of `stop`: None, one string, or a list or tuple of strings."""
    if isinstance(stop, str):
        stop = [stop]
    if stop is not None and (not isinstance(stop, (list, tuple)) or not all(isinstance(x, str) for x in stop)):
        raise TypeError(f"stop must be a string or a list of strings (got {stop!r:.60})")
    return [s for s in (stop or []) if s]


class Generation:
    """An iterator over generated text pieces (or token ids with text=False).

    Keyword arguments:
      sampler      a cism.Sampler to use (its history and seed state carry on);
                   otherwise one is made from the sampling parameters
                   (temperature, top_k, top_p, min_p, repeat_penalty,
                   frequency_penalty, presence_penalty, penalty_last_n, seed)
      ignore_eos   keep going past end-of-generation tokens
      stop         a string or a list of strings that end generation (not included in the output)
      stop_tokens  more ids that end generation like an end-of-generation id
                   (e.g. a chat template's end-of-turn token), even with ignore_eos
      add_bos      prepend BOS to a text prompt (default: the tokenizer's rule,
                   and only when the session is empty)
      truncate_prompt  a prompt longer than the room left in the context is
                   cut from the left (BOS kept), leaving room for up to
                   max_tokens (at most half the room); `truncated` counts the
                   dropped tokens. Without it such a prompt raises
                   ContextFullError here, before anything is evaluated.
      json         True: the output is one JSON object; a dict: one object that
                   JSON schema accepts (json_schema.py has the keywords it
                   follows). Tokens that cannot continue it are masked before
                   sampling (json_mode.py); generation ends when it closes,
                   stop_reason "eos"; at max_tokens it is unfinished. The prompt
                   should ask for JSON: the model still chooses what it says.
      on_prefill   callback(done, total) called after each internal step of
                   the prompt's evaluation (the session's n_batch tokens;
                   cism_session_set_progress_callback), for a progress display

    After iteration: `tokens` (generated ids), `prompt_tokens`, `text` (the
    text yielded so far) and `stop_reason`: "eos", "length" (max_tokens
    reached, or the context full: then `context_full` is True), "stop",
    "cancelled" or None while running. `prompt_seconds` and `gen_seconds`
    time the prompt evaluation and the generation loop.
    """

    def __init__(self, session: "Session", prompt: Union[str, Sequence[int]], max_tokens: int = 128, *,
                 text: bool = True, sampler: Optional[Sampler] = None, ignore_eos: bool = False,
                 stop: Optional[Sequence[str]] = None, stop_tokens: Sequence[int] = (),
                 add_bos: Optional[bool] = None,
                 close_session: bool = False, truncate_prompt: bool = False,
                 on_prefill: Optional[Callable[[int, int], None]] = None, json: Union[bool, dict] = False,
                 **sampling):
        unknown = [k for k in sampling if k not in SAMPLER_PARAMS]
        if unknown:
            raise TypeError(f"unknown argument(s) {', '.join(unknown)}")
        if max_tokens < 0:
            raise ValueError(f"max_tokens {max_tokens} is negative")
        self.session = session
        self.max_tokens = int(max_tokens)
        self.ignore_eos = ignore_eos
        self.stop = stop_strings(stop)
        self.text_mode = text
        self.tokens: List[int] = []
        self.text = ""
        self.stop_reason: Optional[str] = None
        self._close_session = close_session
        if not isinstance(json, (bool, dict)):
            raise TypeError(f"json must be True, False or a JSON schema (a dict) (got {json!r:.60})")
        self._tokenizer = session.model.tokenizer if (text or json or isinstance(prompt, str)) else None
        if isinstance(prompt, str):
            if add_bos is None:
                add_bos = self._tokenizer.add_bos and session.n_past == 0
            ids = self._tokenizer.encode(prompt, add_bos=add_bos)
        else:
            ids = as_token_array(prompt).tolist()
        if not ids and session.n_past == 0:
            raise ValueError("empty prompt: give some text or token ids (the model adds no BOS here)")
        ids = list(ids)
        self.truncated = 0
        self.context_full = False
        self.prompt_seconds = 0.0
        self.gen_seconds = 0.0
        self._on_prefill = on_prefill
        room = session.n_ctx - session.n_past
        if len(ids) > room:
            if not truncate_prompt:
                used = f", {session.n_past} already used" if session.n_past else ""
                raise ContextFullError(
                    f"the prompt is {len(ids)} tokens but the context has room for {room} ({session.n_ctx} "
                    f"positions{used}): shorten the prompt, use a longer context (n_ctx, `-c`; this model allows "
                    f"{session.model.context_length}), or truncate it from the left (truncate_prompt=True, "
                    f"`--truncate-prompt`)")
            ids, self.truncated = truncate_left(ids, room, self.max_tokens, self._tokenizer)
        self.prompt_tokens: List[int] = ids
        self._own_sampler = sampler is None
        self.sampler = sampler if sampler is not None else Sampler(**sampling)
        if sampler is not None and sampling:
            sampler.set(**sampling)
        self._eos = (set() if ignore_eos else set(session.model.eos_ids)) | {int(t) for t in stop_tokens}
        self._json = JsonConstraint(self._tokenizer, json) if json is not False else None
        self._it = self._run()

    def __iter__(self) -> "Generation":
        return self

    def __next__(self):
        return next(self._it)

    def close(self) -> None:
        """Stops early and releases what the generation owns."""
        self._it.close()

    def __enter__(self) -> "Generation":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ---- the loop ----
    def _run(self) -> Iterator:
        s = self.session
        dec = None
        held = ""
        t1 = None
        try:
            t0 = time.perf_counter()
            with s._lock:
                s._cancel.clear()
                if self.prompt_tokens:
                    self._eval_prompt()
                    for t in self.prompt_tokens:
                        self.sampler.accept(t)
            t1 = time.perf_counter()
            self.prompt_seconds = t1 - t0
            if self.text_mode:
                dec = self._tokenizer.incremental_decoder(self.prompt_tokens)
            while True:
                if len(self.tokens) >= self.max_tokens:
                    self.stop_reason = "length"
                    break
                if s._cancel.is_set():
                    self.stop_reason = "cancelled"
                    break
                with s._lock:
                    ptr, n = s._logits_ptr(-1)
                    # text: never an id past the tokenizer (the embedding may have more rows)
                    n = min(n, self._tokenizer.n_ids) if self.text_mode or self._json is not None else n
                    if self._json is not None:
                        tok = self._json.sample(self.sampler, np.ctypeslib.as_array(ptr, shape=(n,)))
                        self._json.accept(tok)
                    else:
                        tok = self.sampler.sample_ptr(ptr, n)
                    self.sampler.accept(tok)
                    self.tokens.append(tok)
                    if tok in self._eos:
                        self.stop_reason = "eos"
                        break
                    closed = self._json is not None and self._json.complete  # its last token is kept and evaluated
                    if s.n_past >= s.n_ctx:  # a normal end, as max_tokens: the token is reported, not evaluated
                        self.stop_reason = "eos" if closed else "length"
                        self.context_full = not closed
                    else:
                        try:
                            s._eval_locked(as_token_array([tok]))
                        except CancelledError:
                            self.stop_reason = "cancelled"
                    if closed and self.stop_reason is None:
                        self.stop_reason = "eos"
                if not self.text_mode:
                    yield tok
                else:
                    held += dec.push(tok)
                    out, held, hit = self._split_stop(held, final=False)
                    if out:
                        self.text += out
                        yield out
                    if hit:
                        self.stop_reason = "stop"
                        return
                if self.stop_reason is not None:
                    break
            if self.text_mode:
                held += dec.flush()
                out, held, hit = self._split_stop(held, final=True)
                if hit:
                    self.stop_reason = "stop"
                if out:
                    self.text += out
                    yield out
        finally:
            if t1 is not None:
                self.gen_seconds = time.perf_counter() - t1
            if self._own_sampler:
                self.sampler.close()
            if self._close_session:
                s.close()

    def _eval_prompt(self) -> None:
        """Evaluates the prompt (session lock held); on_prefill(done, total)
        after each of the library's internal steps (the session's n_batch)."""
        self.session._eval_locked(as_token_array(self.prompt_tokens), self._on_prefill)

    def _split_stop(self, buf: str, final: bool):
        """(text to emit, text to hold back, stop string found)."""
        if not self.stop:
            return buf, "", False
        cut = min((i for i in (buf.find(x) for x in self.stop) if i >= 0), default=-1)
        if cut >= 0:
            return buf[:cut], "", True
        if final:
            return buf, "", False
        keep = 0  # longest tail of buf that starts some stop string
        for x in self.stop:
            for k in range(min(len(x) - 1, len(buf)), keep, -1):
                if buf.endswith(x[:k]):
                    keep = k
                    break
        return buf[:len(buf) - keep], buf[len(buf) - keep:], False


def truncate_left(ids: List[int], room: int, max_tokens: int, tokenizer=None):
    """(ids cut from the left to leave room for generation, tokens dropped).
    Keeps a leading BOS; keeps room - min(max_tokens, room // 2) tokens, at least 1."""
    keep = max(1, room - min(max(max_tokens, 1), room // 2))
    bos = getattr(tokenizer, "bos_id", None) if tokenizer is not None else None
    head = ids[:1] if bos is not None and ids and ids[0] == bos and keep > 1 else []
    kept = head + ids[len(ids) - (keep - len(head)):]
    return kept, len(ids) - len(kept)


def run_in_session(session: "Session", prompt, max_tokens: int, **kwargs) -> Generation:
    return Generation(session, prompt, max_tokens, text=True, **kwargs)
