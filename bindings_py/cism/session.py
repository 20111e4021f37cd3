"""Session: one conversation on a model (KV cache, scratch buffers, logits)."""
from __future__ import annotations

import ctypes
import os
import threading
import weakref
from typing import TYPE_CHECKING, Callable, List, Optional, Sequence, Union

import numpy as np

from . import _lib
from .errors import StateError, TokenRangeError, check
from .params import Params

if TYPE_CHECKING:
    from .model import Model
    from .sampler import Sampler

Tokens = Union[Sequence[int], np.ndarray, int]
# cism_stop_reason -> the finish_reason words of Generation.stop_reason (OpenAI's "length" for both limits)
STOP_REASONS = {_lib.STOP_EOS: "eos", _lib.STOP_MAX_TOKENS: "length", _lib.STOP_CONTEXT_FULL: "length",
                _lib.STOP_CALLBACK: "callback", _lib.STOP_CANCELLED: "cancelled"}


def _free_session(handle: int) -> None:
    _lib.lib.cism_session_free(handle)


def as_token_array(tokens: Tokens) -> np.ndarray:
    """tokens as a contiguous int32 array. Values int32 cannot hold are refused
    here (instead of wrapping around); the vocabulary range is checked by the
    library, whose message names the token and its index."""
    a = np.asarray(tokens)
    if a.ndim == 0:
        a = a.reshape(1)
    if a.ndim != 1:
        raise ValueError(f"tokens must be a 1-D sequence of ints (got shape {a.shape})")
    if a.size == 0:
        return np.zeros(0, dtype=np.int32)
    if a.dtype.kind not in "iu":
        if a.dtype != object or not all(isinstance(t, (int, np.integer)) for t in a.tolist()):
            raise TypeError(f"token ids must be integers (got {a.dtype})")
    if a.dtype != np.int32:
        lo, hi = int(a.min()), int(a.max())
        if lo < -2 ** 31 or hi >= 2 ** 31:
            bad = lo if lo < -2 ** 31 else hi
            raise TokenRangeError(f"token {bad} is outside the vocabulary (it does not even fit in int32)")
    return np.ascontiguousarray(a, dtype=np.int32)


def _state_path(path) -> bytes:
    p = os.fspath(path)
    if (isinstance(p, str) and "\0" in p) or (isinstance(p, bytes) and b"\0" in p):
        raise ValueError(f"state path {p!r} contains a NUL character")
    return os.fsencode(p)


class _LogitsBuffer:
    """Exposes borrowed logits memory to numpy and keeps the session alive.
    Every numpy view (and view of a view) holds it as its base, so while one
    exists the session counts it (Session._n_views): it then refuses what would free
    or move that memory (an eval needing more rows, trim) and close() defers
    freeing the C session until the last view is gone."""

    def __init__(self, session: "Session", address: int, shape):
        self.session = session
        self.__array_interface__ = {"shape": tuple(shape), "typestr": "<f4", "data": (address, True), "version": 3}


class Session:
    """A conversation: evaluates tokens, exposes logits, generates.

    Parameters: n_ctx (0 = min(model context, 4096)), n_threads (0 = library
    default), kv_type ("f16", "f32", a quantized cache "q8" / "q4a", or "K/V" such as "q8/q4a":
    K cache q8, V cache q4a; docs/KV_CACHE.md),
    kv_rotate (None: the KV type's default, rotated for q8 and q4a; False/True: the
    Walsh-Hadamard rotation of a quantized cache off/on), n_batch (tokens per internal step),
    logits_all (keep the logits of every evaluated position, for perplexity),
    kernel_tier ("auto", or one of cism.kernel_tiers() to force an instruction
    set: every tier is tested against "scalar"),
    act_quant (None: the library default, int8 activations and integer dot
    products for packed weights; False: float activations; True: int8).
    act_outliers (None: the library default, on: with int8 activations up to
    10 channels of a row that dominate their blocks of 32 are computed
    exactly in float, docs/QUANTIZATION.md "Outlier channels"; False: off).
    act_stats (experimental, quantization calibration: 1 sums the squares of
    every matrix's inputs per column, read by act_stats(); G >= 2 also the
    G x G blocks along the diagonal of their Gram matrix, read by act_gram()).

    A session is used by one thread at a time (calls are serialized by a
    lock); cancel() may be called from any thread.
    """

    def __init__(self, model: "Model", *, n_ctx: int = 0, n_threads: int = 0, kv_type: str = "f16",
                 n_batch: Optional[int] = None, logits_all: bool = False, kernel_tier: Union[str, int] = "auto",
                 act_quant: Optional[bool] = None, act_stats: int = 0, act_outliers: Optional[bool] = None,
                 kv_rotate: Optional[bool] = None):
        self.model = model
        h = _lib.cism_session_p()
        with Params(n_ctx=n_ctx, n_threads=n_threads, kv_type=kv_type, n_batch=n_batch,
                    logits_all=int(logits_all), kernel_tier=kernel_tier,
                    act_quant=None if act_quant is None else int(act_quant),
                    act_stats=int(act_stats) if act_stats else None,
                    act_outliers=None if act_outliers is None else int(act_outliers),
                    kv_rotate=None if kv_rotate is None else int(kv_rotate)) as p:
            check(_lib.lib.cism_session_create(model.handle, p.handle, ctypes.byref(h)))
        self._handle: Optional[int] = h.value
        self._finalizer = weakref.finalize(self, _free_session, h.value)
        self._lock = threading.RLock()
        self.vocab_size = model.vocab_size
        self.logits_all = bool(logits_all)
        self.n_rows = 0          # logits rows available from the last eval
        self._cancel = threading.Event()
        self._act_gram_block = int(act_stats)
        self._n_views = 0        # live logits views (_LogitsBuffer objects)
        self._logits_cap = 1     # rows of the C logits buffer (it grows with logits_all, trim shrinks it)
        self.stop_reason: Optional[str] = None  # why the last generate_ids ended

    # ---- lifetime ----
    def _h(self) -> int:
        if not self._handle:
            raise StateError("the session is closed")
        return self._handle

    @property
    def handle(self) -> int:
        return self._h()

    def close(self) -> None:
        """Frees the session; while logits views of it are alive the memory they
        show is kept until the last one is gone (the session is closed at once)."""
        with self._lock:
            self._handle = None
            if not self._n_views:
                self._finalizer()

    def _new_view(self, address: int, shape) -> np.ndarray:
        buf = _LogitsBuffer(self, address, shape)
        self._n_views += 1
        weakref.finalize(buf, self._view_gone)
        return np.asarray(buf)

    def _view_gone(self) -> None:
        # the last view of a closed session frees it (close() left that to it)
        self._n_views -= 1
        if not self._n_views and not self._handle:
            self._finalizer()

    def _guard_views(self, why: str) -> None:
        """StateError if a logits view is alive: `why` would free or move its memory."""
        n = self._n_views
        if n:
            raise StateError(f"{why}, which would free the memory that {n} logits view(s) of this session still "
                             "show: copy them (np.array(view), or use logits()) or delete them first")

    def trim(self) -> None:
        """Frees the scratch buffers and every logits row but the last
        (cism_session_trim); the conversation continues."""
        with self._lock:
            if self._logits_cap > 1:
                self._guard_views("trim() shrinks the logits buffer")
            check(_lib.lib.cism_session_trim(self._h()))
            self._logits_cap = 1
            self.n_rows = min(self.n_rows, 1)

    @property
    def closed(self) -> bool:
        return not self._handle

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        if self.closed:
            return "<cism.Session (closed)>"
        return f"<cism.Session n_past={self.n_past} n_ctx={self.n_ctx}>"

    # ---- state ----
    @property
    def n_past(self) -> int:
        """Tokens in the KV cache."""
        return int(_lib.lib.cism_session_n_past(self._h()))

    @property
    def n_ctx(self) -> int:
        """Capacity of the KV cache in tokens."""
        return int(_lib.lib.cism_session_n_ctx(self._h()))

    def memory_bytes(self) -> int:
        """Bytes this session holds: KV cache, scratch, logits, token ids."""
        return int(_lib.lib.cism_session_memory_bytes(self._h()))

    def reset(self) -> None:
        """Forgets every evaluated token."""
        with self._lock:
            check(_lib.lib.cism_session_reset(self._h()))
            self.n_rows = 0

    def rewind(self, n_keep: int) -> None:
        """Keeps the first n_keep evaluated tokens and forgets the rest."""
        with self._lock:
            check(_lib.lib.cism_session_rewind(self._h(), int(n_keep)))
            self.n_rows = 0

    def save(self, path, sampler: Optional["Sampler"] = None) -> None:
        """Saves the conversation (KV cache rows in use, position and tokens, the last
        eval's logits and, when given, the sampler's parameters, random
        generator and penalty history) to `path` (cism_session_save,
        docs/SESSION_STATE.md). Atomic: a temporary file in the same folder is
        written, flushed and renamed over `path`; on failure (CismIOError)
        whatever was at `path` is untouched."""
        with self._lock:
            check(_lib.lib.cism_session_save(self._h(), sampler.handle if sampler is not None else None,
                                             _state_path(path)))

    def load(self, path, sampler: Optional["Sampler"] = None) -> None:
        """Restores a state written by save() (into `sampler` too when given);
        the session then continues bit for bit as the saved one would have.
        Refused, with the session and sampler unchanged: another model
        (InvalidArgumentError), another KV type (InvalidArgumentError), more
        positions than n_ctx (ContextFullError), another layout version
        (UnsupportedError), a truncated or corrupted file (FormatError)."""
        p = _state_path(path)
        with self._lock:
            if self.logits_all:  # the restored rows may need a larger logits buffer
                self._guard_views("load() may replace the logits buffer")
            check(_lib.lib.cism_session_load(self._h(), sampler.handle if sampler is not None else None, p))
            self.n_rows = self._restored_rows()
            if self.logits_all:
                self._logits_cap = max(self._logits_cap, self.n_rows)

    def tokens(self) -> List[int]:
        """The token ids in the context, oldest first (n_past of them; restored
        by load(), so a resumed conversation knows what it holds)."""
        with self._lock:
            n = int(_lib.lib.cism_session_n_past(self._h()))
            out = np.zeros(max(n, 1), dtype=np.int32)
            got = ctypes.c_int32()
            check(_lib.lib.cism_session_tokens(self._h(), out.ctypes.data_as(ctypes.POINTER(ctypes.c_int32)), n,
                                               ctypes.byref(got)))
            return out[: got.value].tolist()

    def _restored_rows(self) -> int:
        """Logits rows available after a load: 0 when the state had none, else
        all of the last eval's (logits_all) or 1."""
        ptr, n = ctypes.POINTER(ctypes.c_float)(), ctypes.c_int32()
        if _lib.lib.cism_session_logits(self._h(), -1, ctypes.byref(ptr), ctypes.byref(n)) != _lib.OK:
            return 0
        if not self.logits_all:
            return 1
        rows = 1
        while _lib.lib.cism_session_logits(self._h(), rows, ctypes.byref(ptr), ctypes.byref(n)) == _lib.OK:
            rows += 1
        return rows

    def set_logits_all(self, on: bool) -> None:
        """Switches logits_all for the next evals (also in a cism.Batch): on, they keep
        every row's logits; off, only the last row's. The last eval's rows stay
        readable until the next eval."""
        with self._lock:
            check(_lib.lib.cism_session_set_logits_all(self._h(), int(bool(on))))
            self.logits_all = bool(on)

    def cancel(self) -> None:
        """Stops a running eval (CancelledError) or generation (ends it) soon.
        Thread-safe. Cleared when the next eval or generation starts."""
        self._cancel.set()
        h = self._handle
        if h:
            _lib.lib.cism_session_cancel(h)

    def act_stats(self, tensor: str):
        """(sums, n_rows): per-column sums of the squares of the inputs weight
        matrix `tensor` ("blk.0.ffn_down", "output", a tied "token_embd") was
        multiplied with since the session was created (needs act_stats >= 1)."""
        return self._f64_stats(_lib.lib.cism_session_act_stats, tensor)

    def act_gram(self, tensor: str):
        """(blocks [n_blocks, G, G], n_rows): the G x G blocks along the diagonal
        of the Gram matrix (sum of x x^T) of `tensor`'s inputs since the session
        was created (needs act_stats=G >= 2)."""
        out, rows = self._f64_stats(_lib.lib.cism_session_act_gram, tensor)
        g = self._act_gram_block
        return out.reshape(-1, g, g), rows

    def key_sums(self, layer: int):
        """(sums [n_kv_heads * head_dim], n_rows): the sum of attention layer
        `layer`'s keys after RoPE over the tokens evaluated since the session was
        created (needs act_stats); sums / n_rows is the layer's key offset
        (docs/KV_CACHE.md, "Key offsets")."""
        return self._f64_stats(_lib.lib.cism_session_key_sums, int(layer))

    def query_sums(self, layer: int):
        """(values [n_heads * (head_dim + 1)], n_rows): attention layer `layer`'s
        queries after RoPE, summed per head and element (the first n_heads *
        head_dim values), then each head's sum of squares (needs act_stats)."""
        return self._f64_stats(_lib.lib.cism_session_query_sums, int(layer))

    def _f64_stats(self, fn, tensor):
        """(values, n_rows) of a statistics call of the form fn(session, name, buf, cap, &n, &rows):
        asked once for its size (CISM_ERR_BUFFER_SMALL), then filled."""
        n, rows = ctypes.c_int64(), ctypes.c_int64()
        name = tensor.encode() if isinstance(tensor, str) else tensor
        with self._lock:
            st = fn(self._h(), name, None, 0, ctypes.byref(n), ctypes.byref(rows))
            if st != _lib.ERR_BUFFER_SMALL:
                check(st)
            out = np.zeros(n.value, dtype=np.float64)
            check(fn(self._h(), name, out.ctypes.data_as(ctypes.POINTER(ctypes.c_double)), out.size,
                     ctypes.byref(n), ctypes.byref(rows)))
        return out, int(rows.value)

    # ---- evaluation ----
    def eval(self, tokens: Tokens, on_progress: Optional[Callable[[int, int], Optional[bool]]] = None) -> None:
        """Evaluates tokens after those already in the cache. On error the
        session is unchanged (a cancelled multi-chunk prefill keeps the chunks
        completed before the stop).

        on_progress(done, total), if given, is called after each internal step
        of n_batch tokens (the last call has done == total); returning True
        stops the eval there (CancelledError, the completed steps kept), as
        cancel() does. An exception it raises stops the eval the same way and
        is raised from eval()."""
        a = as_token_array(tokens)
        with self._lock:
            self._cancel.clear()
            self._eval_locked(a, on_progress)

    def _grows_logits(self, n_tokens: int) -> None:
        """Before evaluating n_tokens: refuses if that moves the logits buffer under a live view."""
        if self.logits_all and n_tokens > self._logits_cap:
            self._guard_views(f"evaluating {n_tokens} tokens with logits_all needs a larger logits buffer")

    def _grown_logits(self, n_tokens: int, status: int) -> None:
        """After an eval call: the C buffer has grown unless the call was refused before that."""
        if self.logits_all and status not in (_lib.ERR_INVALID_ARG, _lib.ERR_TOKEN_RANGE, _lib.ERR_CONTEXT_FULL,
                                              _lib.ERR_OUT_OF_MEMORY):
            self._logits_cap = max(self._logits_cap, n_tokens)

    def _eval_locked(self, a: np.ndarray, on_progress=None) -> None:
        h, n = self._h(), int(a.size)
        self._grows_logits(n)
        before, prev_rows = int(_lib.lib.cism_session_n_past(h)), self.n_rows
        self.n_rows = 0
        raised: List[BaseException] = []
        if on_progress is not None:
            def progress(_user, done, total):
                try:
                    return 1 if on_progress(int(done), int(total)) or self._cancel.is_set() else 0
                except BaseException as e:  # never across the C frames: stop, re-raise below
                    raised.append(e)
                    return 1
            cb = _lib.cism_progress_callback(progress)
            check(_lib.lib.cism_session_set_progress_callback(h, cb, None))
        try:
            st = _lib.lib.cism_session_eval(h, a.ctypes.data_as(ctypes.POINTER(ctypes.c_int32)), n)
        finally:
            if on_progress is not None:
                _lib.lib.cism_session_set_progress_callback(h, _lib.cism_progress_callback(), None)
        self._grown_logits(n, st)
        if st == _lib.ERR_CANCELLED:  # whole chunks were kept, with the logits of the last kept token
            kept = int(_lib.lib.cism_session_n_past(h)) - before
            self.n_rows = prev_rows if kept == 0 else (kept if self.logits_all else 1)
            if raised:
                raise raised[0]
        check(st)
        self.n_rows = n if self.logits_all else 1

    def _logits_ptr(self, index: int):
        ptr = ctypes.POINTER(ctypes.c_float)()
        n = ctypes.c_int32()
        check(_lib.lib.cism_session_logits(self._h(), int(index), ctypes.byref(ptr), ctypes.byref(n)))
        return ptr, n.value

    def logits(self, index: int = -1) -> np.ndarray:
        """A copy of the logits of row `index` of the last eval (-1 = last).
        Rows other than the last need logits_all=True."""
        return self.logits_view(index).copy()

    def logits_view(self, index: int = -1) -> np.ndarray:
        """A read-only view of the logits without copying. Its numbers are
        those of the last eval only until the next eval/reset/rewind/generate
        on this session (it then shows other numbers); its memory stays valid:
        while it is alive, close() keeps the memory until the view is gone, and
        an eval that needs a larger logits buffer (logits_all) or trim() raise
        StateError instead of freeing it."""
        with self._lock:
            ptr, n = self._logits_ptr(index)
            address = ctypes.cast(ptr, ctypes.c_void_p).value
            return self._new_view(address, (n,))

    def all_logits(self) -> np.ndarray:
        """A copy of every row of the last eval, shape [n_tokens, vocab]
        (needs logits_all=True)."""
        if not self.logits_all:
            raise StateError("all_logits() needs a session created with logits_all=True")
        with self._lock:
            if self.n_rows == 0:
                raise StateError("no logits: nothing has been evaluated since the last reset")
            ptr, n = self._logits_ptr(0)
            address = ctypes.cast(ptr, ctypes.c_void_p).value
            return np.asarray(_LogitsBuffer(self, address, (self.n_rows, n))).copy()

    def all_logits_view(self) -> np.ndarray:
        """Like all_logits, but a read-only view without copying, valid only
        until the next eval/reset/rewind/generate on this session."""
        if not self.logits_all:
            raise StateError("all_logits_view() needs a session created with logits_all=True")
        with self._lock:
            if self.n_rows == 0:
                raise StateError("no logits: nothing has been evaluated since the last reset")
            ptr, n = self._logits_ptr(0)
            address = ctypes.cast(ptr, ctypes.c_void_p).value
            return self._new_view(address, (self.n_rows, n))

    # ---- generation ----
    def generate(self, prompt: Union[str, Tokens], max_tokens: int = 128, **kwargs):
        """Streams text pieces continuing `prompt` (text, or token ids) from the
        session's current state. See cism.generate.Generation for the keyword
        arguments (sampling parameters, sampler=, ignore_eos=, stop=, add_bos=)."""
        from .generate import run_in_session
        return run_in_session(self, prompt, max_tokens, **kwargs)

    def generate_tokens(self, prompt: Tokens, max_tokens: int = 128, **kwargs):
        """Like generate, but yields token ids (no tokenizer needed)."""
        from .generate import Generation
        return Generation(self, prompt, max_tokens, text=False, **kwargs)

    def generate_ids(self, prompt: Tokens, max_tokens: int, sampler: "Sampler", *, ignore_eos: bool = False,
                     callback: Optional[Callable[[int], Optional[bool]]] = None) -> List[int]:
        """Runs the whole loop in C (cism_generate_v2) and returns the generated ids.
        `callback(token)` is called for each; returning True stops. Afterwards
        `self.stop_reason` says why it ended: "eos", "length" (max_tokens
        reached or the context full, as OpenAI's finish_reason) or "callback".
        A prompt that does not fit in the context raises ContextFullError
        before anything is evaluated; cancel() raises CancelledError (the ids
        produced so far are in the exception's `tokens` attribute)."""
        a = as_token_array(prompt)
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
        with self._lock:
            self._grows_logits(int(a.size))
            self._cancel.clear()
            self.n_rows = 0
            st = _lib.lib.cism_generate_v2(self._h(), sampler.handle,
                                           a.ctypes.data_as(ctypes.POINTER(ctypes.c_int32)), int(a.size),
                                           int(max_tokens), _lib.GENERATE_IGNORE_EOS if ignore_eos else 0,
                                           cb, None, ctypes.byref(n), ctypes.byref(why))
            self._grown_logits(int(a.size), st)
            self.n_rows = 1 if self.n_past > 0 else 0
            self.stop_reason = STOP_REASONS.get(why.value)
        if error:
            raise error[0]
        try:
            check(st)
        except Exception as e:
            e.tokens = out  # type: ignore[attr-defined]
            raise
        return out
