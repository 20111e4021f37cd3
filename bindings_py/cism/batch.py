"""Several sessions' tokens in one forward pass (cism_batch in cism.h).

    batch = cism.Batch(model, n_threads=2, max_tokens=64)
    errors = batch.eval([(s1, [tok]), (s2, [tok]), (s3, prompt_chunk)])

Every weight matrix is read once for all the rows, so decoding N sessions
costs about one pass over the weights instead of N; each session ends with
the bits `session.eval(tokens)` would give it. Sessions must share the batch's
model and its kv_type, kernel_tier, act_quant and act_outliers (the C library
refuses others with a clear message)."""
from __future__ import annotations

import ctypes
import weakref
from typing import TYPE_CHECKING, List, Optional, Sequence, Tuple, Union

import numpy as np

from . import _lib
from .errors import CismError, check, error_for
from .params import Params
from .session import Session, Tokens, as_token_array

if TYPE_CHECKING:
    from .model import Model


def _free_batch(handle: int) -> None:
    _lib.lib.cism_batch_free(handle)


class Batch:
    """Evaluates tokens of several sessions of one model together.

    Parameters: n_threads (the batch's own worker pool; 0 = library default),
    max_tokens (the most tokens one eval() takes in all), n_ctx (a hint for
    the attention scratch; it grows to the largest member's context), and
    kv_type, kv_rotate, kernel_tier, act_quant, act_outliers, which must be those the
    member sessions were created with (same meaning as in Session).
    One thread at a time; a member may be cancelled (Session.cancel) from any
    thread while eval() runs: that member keeps nothing of the eval."""

    def __init__(self, model: "Model", *, n_threads: int = 0, max_tokens: int = 256, n_ctx: int = 0,
                 kv_type: str = "f16", kernel_tier: Union[str, int] = "auto", act_quant: Optional[bool] = None,
                 act_outliers: Optional[bool] = None, kv_rotate: Optional[bool] = None):
        self.model = model
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int):
            raise TypeError(f"Batch: max_tokens must be an int, got {type(max_tokens).__name__}")
        if not 1 <= max_tokens <= 65536:
            raise ValueError(f"Batch: max_tokens must be between 1 and 65536 (the most tokens one eval() takes "
                             f"in all), got {max_tokens}")
        h = _lib.cism_batch_p()
        with Params(n_threads=n_threads, n_batch=int(max_tokens), n_ctx=n_ctx, kv_type=kv_type,
                    kernel_tier=kernel_tier, act_quant=None if act_quant is None else int(act_quant),
                    act_outliers=None if act_outliers is None else int(act_outliers),
                    kv_rotate=None if kv_rotate is None else int(kv_rotate)) as p:
            check(_lib.lib.cism_batch_create(model.handle, p.handle, ctypes.byref(h)))
        self._handle: Optional[int] = h.value
        self._finalizer = weakref.finalize(self, _free_batch, h.value)
        self.max_tokens = int(max_tokens)

    def _h(self) -> int:
        if not self._handle:
            raise CismError("the batch is closed")
        return self._handle

    def close(self) -> None:
        self._handle = None
        self._finalizer()

    def __enter__(self) -> "Batch":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def eval(self, pairs: Sequence[Tuple[Session, Tokens]]) -> List[Optional[CismError]]:
        """Evaluates each (session, tokens) pair; returns, per pair, None or the
        error that member ended with (e.g. CancelledError; the session is then as
        before). A request the batch cannot take at all (a session of another
        model or with other parameters, tokens out of range, more than
        max_tokens in all, an empty list) raises instead, evaluating nothing."""
        h = self._h()
        members = [_pair(p) for p in pairs]
        if not members:
            raise ValueError("Batch.eval: give at least one (session, tokens) pair")
        seen = set()
        for s, a in members:
            if id(s) in seen:
                raise ValueError("Batch.eval: a session appears twice; give it all its tokens in one pair")
            seen.add(id(s))
        locked: List[Session] = []
        try:
            for s, _ in sorted(members, key=lambda m: id(m[0])):  # one order for every caller: no deadlock
                s._lock.acquire()
                locked.append(s)
            check(_lib.lib.cism_batch_clear(h))
            for s, a in members:
                s._grows_logits(int(a.size))
                s._cancel.clear()
                check(_lib.lib.cism_batch_add(h, s._h(), a.ctypes.data_as(ctypes.POINTER(ctypes.c_int32)), int(a.size)))
            st = _lib.lib.cism_batch_eval(h)
            if st != _lib.OK and _lib.lib.cism_batch_size(h) != 0:
                check(st)  # refused before any member ran (the members are still pending)
            out: List[Optional[CismError]] = []
            for i, (s, a) in enumerate(members):
                mst = _lib.lib.cism_batch_member_status(h, i) if st != _lib.OK else _lib.OK
                s._grown_logits(int(a.size), mst)
                if mst == _lib.OK:
                    s.n_rows = int(a.size) if s.logits_all else 1
                    out.append(None)
                else:
                    out.append(error_for(mst, _member_message(i, mst)))
            return out
        finally:
            for s in locked:
                s._lock.release()


def _pair(p) -> Tuple[Session, "object"]:
    """One (session, tokens) pair of Batch.eval, its tokens as an array."""
    if isinstance(p, Session):
        raise TypeError("Batch.eval: expected (Session, tokens) pairs, got a Session alone; "
                        "give it with its tokens: batch.eval([(session, tokens)])")
    if not isinstance(p, (tuple, list)) or len(p) != 2:
        raise TypeError(f"Batch.eval: expected (Session, tokens) pairs, got a {type(p).__name__}"
                        + (f" of {len(p)}" if isinstance(p, (tuple, list)) else ""))
    if not isinstance(p[0], Session):
        raise TypeError(f"Batch.eval: expected (Session, tokens) pairs, got a {type(p[0]).__name__} "
                        "where the Session goes")
    return p[0], as_token_array(p[1])


def _member_message(index: int, status: int) -> str:
    if status == _lib.ERR_CANCELLED:
        return f"member {index} of the batch was cancelled: none of its tokens were kept"
    return f"member {index} of the batch failed: {_lib.status_str(status)}"
