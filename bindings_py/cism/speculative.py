"""Speculative decoding: exact, several tokens per forward pass of the model
(cism_generate_spec; docs/SPECULATIVE.md).

    import cism
    from cism.speculative import Speculator
    with cism.Model("model.cism") as model, model.session() as s, Speculator("lookup") as spec:
        ids = spec.generate_ids(s, model.tokenizer.encode(text, add_bos=True), 128, temperature=0)
        print(spec.stats)

A Speculator drafts by prompt lookup ("lookup": the tokens that followed the
most recent earlier occurrence of the text's last n-gram) or with a draft model
(a smaller or quantized model with the target's vocabulary: a cism.Model or a
path, plus target=the target Model; a mismatch raises InvalidArgumentError).
Greedy output is token for token that of Session.generate_ids; sampled output
follows the target's distribution exactly (reproducible for a seed).
"""
from __future__ import annotations

import ctypes
import os
import time
import weakref
from typing import TYPE_CHECKING, Callable, Dict, List, Optional, Sequence, Union

from . import _lib
from .errors import check
from .params import Params
from .sampler import Sampler
from .session import STOP_REASONS, as_token_array

if TYPE_CHECKING:
    from .model import Model
    from .session import Session

STAT_NAMES = {"steps": _lib.SPEC_STAT_STEPS, "verify_steps": _lib.SPEC_STAT_VERIFY, "drafted": _lib.SPEC_STAT_DRAFTED,
              "accepted": _lib.SPEC_STAT_ACCEPTED, "draft_evals": _lib.SPEC_STAT_DRAFT_EVALS,
              "generated": _lib.SPEC_STAT_GENERATED}


def _free_spec(handle: int) -> None:
    _lib.lib.cism_spec_free(handle)


class Speculator:
    """A cism_spec: the drafter and its settings, reused across generations.

    draft       "lookup" (default) or a draft model (cism.Model or a .cism path)
    target      the target cism.Model (required with a draft model: the
                vocabularies are compared here)
    draft_max   most tokens drafted per step (library default: 8 lookup, 4 draft)
    ngram_min, ngram_max  n-gram sizes prompt lookup matches (default 2..4)
    adaptive    2 (default): the depth from recent acceptance and, greedy, measured
                costs, down to plain decode; 1: from acceptance alone (the same
                steps every run); 0: always draft_max
    n_threads, n_ctx, kernel_tier, act_quant  the draft model's session
    """

    def __init__(self, draft: Union[str, "Model", None] = "lookup", *, target: Optional["Model"] = None,
                 draft_max: Optional[int] = None, ngram_min: Optional[int] = None, ngram_max: Optional[int] = None,
                 adaptive: Optional[int] = None, n_threads: int = 0, n_ctx: int = 0, kernel_tier: Union[str, int] = "auto",
                 act_quant: Optional[bool] = None):
        h = _lib.cism_spec_p()
        self._draft_model = None
        self.kind = "lookup"
        if draft is None or (isinstance(draft, str) and draft == "lookup"):
            check(_lib.lib.cism_spec_create_lookup(ctypes.byref(h)))
        else:
            from .model import Model
            if target is None:
                raise TypeError("a draft model needs target= (the cism.Model it drafts for)")
            own = not isinstance(draft, Model)
            dm = Model(os.fspath(draft)) if own else draft
            try:
                with Params(n_ctx=n_ctx, n_threads=n_threads, kernel_tier=kernel_tier,
                            act_quant=None if act_quant is None else int(act_quant)) as p:
                    check(_lib.lib.cism_spec_create_draft(target.handle, dm.handle, p.handle, ctypes.byref(h)))
            finally:
                if own:
                    dm.close()  # the spec's draft session keeps the C model alive
            self.kind = "draft"
            self._draft_model = None if own else dm
        self._handle: Optional[int] = h.value
        self._finalizer = weakref.finalize(self, _free_spec, h.value)
        self.draft_max = draft_max if draft_max is not None else (8 if self.kind == "lookup" else 4)
        for key, value in ((_lib.SPEC_DRAFT_MAX, draft_max), (_lib.SPEC_NGRAM_MIN, ngram_min),
                           (_lib.SPEC_NGRAM_MAX, ngram_max), (_lib.SPEC_ADAPTIVE, adaptive)):
            if value is not None:
                check(_lib.lib.cism_spec_set_int(self._handle, key, int(value)))
        self.seconds = 0.0  # of the last generate_ids

    def _h(self) -> int:
        if not self._handle:
            from .errors import StateError
            raise StateError("the speculator is closed")
        return self._handle

    def close(self) -> None:
        self._handle = None
        self._finalizer()

    def __enter__(self) -> "Speculator":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def stats(self) -> Dict[str, float]:
        """Counts of the last generation: steps (target evals after the prompt),
        verify_steps (of them with drafts), drafted, accepted, draft_evals,
        generated; and acceptance (accepted / drafted) and tokens_per_step
        (generated / steps)."""
        out: Dict[str, float] = {}
        v = ctypes.c_int64()
        for name, key in STAT_NAMES.items():
            check(_lib.lib.cism_spec_stat_get(self._h(), key, ctypes.byref(v)))
            out[name] = v.value
        out["acceptance"] = out["accepted"] / out["drafted"] if out["drafted"] else 0.0
        out["tokens_per_step"] = out["generated"] / out["steps"] if out["steps"] else 0.0
        return out

    def generate_ids(self, session: "Session", prompt: Sequence[int], max_tokens: int,
                     sampler: Optional[Sampler] = None, *, ignore_eos: bool = False,
                     callback: Optional[Callable[[int], Optional[bool]]] = None, **sampling) -> List[int]:
        """As Session.generate_ids, with speculation: the generated ids.
        `callback(token)` is called for each (True stops). `session.stop_reason`
        says why it ended. Without `sampler`, one is made from the sampling
        keywords (temperature, top_k, ..., seed; default greedy)."""
        a = as_token_array(prompt)
        own = sampler is None
        smp = Sampler(**sampling) if own else sampler
        if not own and sampling:
            smp.set(**sampling)
        out: List[int] = []
        error: List[BaseException] = []

        def on_token(_user, token):
            out.append(token)
            if callback is None:
                return 0
            try:
                return 1 if callback(token) else 0
            except BaseException as e:  # never let an exception cross the C frames
                error.append(e)
                return 1

        cb = _lib.cism_token_callback(on_token)
        n = ctypes.c_int32()
        why = ctypes.c_int32()
        rows = self.draft_max + 1  # verification keeps this many logits rows
        try:
            with session._lock:
                session._grows_logits(int(a.size))
                if rows > session._logits_cap:
                    session._guard_views(f"speculative decoding keeps {rows} rows of logits")
                session._cancel.clear()
                session.n_rows = 0
                t0 = time.perf_counter()
                st = _lib.lib.cism_generate_spec(self._h(), session._h(), smp.handle,
                                                 a.ctypes.data_as(ctypes.POINTER(ctypes.c_int32)), int(a.size),
                                                 int(max_tokens), _lib.GENERATE_IGNORE_EOS if ignore_eos else 0,
                                                 cb, None, ctypes.byref(n), ctypes.byref(why))
                self.seconds = time.perf_counter() - t0
                session._grown_logits(int(a.size), st)
                session._logits_cap = max(session._logits_cap, rows)
                session.n_rows = 1 if st == _lib.OK and session.n_past > 0 else 0
                session.stop_reason = STOP_REASONS.get(why.value)
        finally:
            if own:
                smp.close()
        if error:
            raise error[0]
        try:
            check(st)
        except Exception as e:
            e.tokens = out  # type: ignore[attr-defined]
            raise
        return out


def generate(session: "Session", prompt: Union[str, Sequence[int]], max_tokens: int = 128, *,
             speculative: Union[str, "Model", Speculator] = "lookup", **kwargs) -> List[int]:
    """Generated ids of `prompt` (text: tokenized with BOS by the tokenizer's
    rule when the session is empty) with speculative decoding: `speculative`
    is "lookup", a draft cism.Model, or a Speculator. Other keywords as
    Speculator.generate_ids."""
    if isinstance(prompt, str):
        tok = session.model.tokenizer
        prompt = tok.encode(prompt, add_bos=tok.add_bos and session.n_past == 0)
    if isinstance(speculative, Speculator):
        return speculative.generate_ids(session, prompt, max_tokens, **kwargs)
    with Speculator(speculative, target=session.model) as spec:
        return spec.generate_ids(session, prompt, max_tokens, **kwargs)
