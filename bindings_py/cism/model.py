"""Model: a loaded .cism file (weights, hyper-parameters, metadata, tokenizer)."""
from __future__ import annotations

import ctypes
import os
import weakref
from typing import TYPE_CHECKING, Any, Dict, Iterator, List, Mapping, Optional, Union

import numpy as np

from . import _lib
from .errors import StateError, check
from .params import Params, dtype_name

if TYPE_CHECKING:
    from .session import Session

PathLike = Union[str, "os.PathLike[str]"]


def _free_model(handle: int) -> None:
    _lib.lib.cism_model_free(handle)


class Metadata(Mapping[str, Any]):
    """The file's metadata (docs/FORMAT.md) as a read-only mapping. Values are
    copied out: int, float, str, bytes, numpy int64/float32 arrays, or a list
    of bytes for string arrays."""

    def __init__(self, model: "Model"):
        # a weak reference: Model -> Metadata -> Model would be a cycle that
        # keeps the file mapped after `del model` until the cyclic GC runs
        self._model_ref = weakref.ref(model)

    @property
    def _model(self) -> "Model":
        m = self._model_ref()
        if m is None:
            raise StateError("the model of this metadata is gone")
        return m

    @staticmethod
    def _key(key: object) -> bytes:
        """key as the C API's NUL-terminated ASCII; KeyError for anything no
        metadata key can be (keys are ASCII, docs/FORMAT.md)."""
        if not isinstance(key, str) or "\0" in key or not key.isascii():
            raise KeyError(key)
        return key.encode("ascii")

    def __len__(self) -> int:
        return int(_lib.lib.cism_model_meta_count(self._model._h()))

    def __iter__(self) -> Iterator[str]:
        h = self._model._h()
        for i in range(_lib.lib.cism_model_meta_count(h)):
            k = _lib.lib.cism_model_meta_key(h, i)
            if k is not None:
                yield k.decode("ascii")

    def __contains__(self, key: object) -> bool:
        try:
            return self.type(key) != _lib.META_NONE  # type: ignore[arg-type]
        except KeyError:
            return False

    def type(self, key: str) -> int:
        """The CISM_META_* type of `key` (META_NONE when absent; KeyError for a
        key that is not an ASCII str without NUL)."""
        return int(_lib.lib.cism_model_meta_type(self._model._h(), self._key(key)))

    def __getitem__(self, key: str) -> Any:
        k = self._key(key)
        h = self._model._h()
        t = self.type(key)
        if t == _lib.META_NONE:
            raise KeyError(key)
        if t == _lib.META_INT:
            v = ctypes.c_int64()
            check(_lib.lib.cism_model_meta_int(h, k, ctypes.byref(v)))
            return v.value
        if t == _lib.META_FLOAT:
            d = ctypes.c_double()
            check(_lib.lib.cism_model_meta_float(h, k, ctypes.byref(d)))
            return d.value
        if t in (_lib.META_STRING, _lib.META_BYTES):
            p, n = ctypes.c_void_p(), ctypes.c_int64()
            check(_lib.lib.cism_model_meta_bytes(h, k, ctypes.byref(p), ctypes.byref(n)))
            raw = ctypes.string_at(p.value, n.value) if n.value else b""
            return raw.decode("utf-8", "replace") if t == _lib.META_STRING else raw
        p, count, size = ctypes.c_void_p(), ctypes.c_int64(), ctypes.c_int64()
        check(_lib.lib.cism_model_meta_array(h, k, ctypes.byref(p), ctypes.byref(count), ctypes.byref(size)))
        raw = ctypes.string_at(p.value, size.value) if size.value else b""
        if t == _lib.META_INT_ARRAY:
            return np.frombuffer(raw, "<i8", count.value).astype(np.int64)
        if t == _lib.META_FLOAT_ARRAY:
            return np.frombuffer(raw, "<f4", count.value).astype(np.float32)
        if t == _lib.META_STRING_ARRAY:
            out: List[bytes] = []
            pos = 0
            for _ in range(count.value):
                ln = int.from_bytes(raw[pos:pos + 4], "little")
                out.append(raw[pos + 4:pos + 4 + ln])
                pos += 4 + ln
            return out
        raise KeyError(f"{key}: unknown metadata type {t}")

    def summary(self, width: int = 60) -> Dict[str, str]:
        """key -> short printable description (long strings and bytes are abbreviated)."""
        out = {}
        for k in self:
            v = self[k]
            if isinstance(v, bytes):
                s = f"<{len(v)} bytes>"
            elif isinstance(v, str):
                s = repr(v) if len(v) <= width else f"<{len(v)} chars> {v[:width - 20]!r}..."
            elif isinstance(v, np.ndarray):
                s = f"[{', '.join(str(x) for x in v[:8])}{', ...' if v.size > 8 else ''}] ({v.size})"
            elif isinstance(v, list):
                s = f"<{len(v)} strings>"
            else:
                s = repr(v)
            out[k] = s
        return out


class Model:
    """A loaded .cism model. Immutable and safe to share between threads.

    >>> with cism.Model("stories260K.cism") as m:
    ...     print("".join(m.generate("Once upon a time", max_tokens=20)))

    Sessions created from a model keep the C model alive, so closing the
    model while sessions exist is safe.
    """

    def __init__(self, path: PathLike, *, use_mmap: bool = True, check_weights: bool = False,
                 verify_checksums: bool = False):
        """check_weights: scan every weight for NaN/Inf. verify_checksums: compare every
        tensor with its checksum (format version 3; reads the whole file; files of older
        versions have none and load as without it). The header, metadata and tensor
        directory of a version 3 file are checked on every load."""
        self.path = os.fspath(path)
        if ("\0" if isinstance(self.path, str) else b"\0") in self.path:
            # the C API takes a NUL-terminated path: it would open another file
            raise ValueError(f"model path {self.path!r} contains a NUL character")
        h = _lib.cism_model_p()
        with Params(use_mmap=int(use_mmap), check_weights=int(check_weights),
                    verify_checksums=int(verify_checksums)) as p:
            check(_lib.lib.cism_model_load(os.fsencode(self.path), p.handle, ctypes.byref(h)))
        self._handle: Optional[int] = h.value
        self._finalizer = weakref.finalize(self, _free_model, h.value)
        self._tokenizer = None
        self.metadata = Metadata(self)

    # ---- lifetime ----
    def _h(self) -> int:
        if not self._handle:
            raise StateError("the model is closed")
        return self._handle

    @property
    def handle(self) -> int:
        """The raw cism_model* (for calling _lib functions directly)."""
        return self._h()

    def close(self) -> None:
        """Releases this reference to the C model (sessions keep their own)."""
        self._handle = None
        self._finalizer()

    @property
    def closed(self) -> bool:
        return not self._handle

    def __enter__(self) -> "Model":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        if self.closed:
            return f"<cism.Model {self.path!r} (closed)>"
        return (f"<cism.Model {self.path!r} {self.architecture} layers={self.n_layers} dim={self.dim} "
                f"vocab={self.vocab_size} {self.weight_dtype}>")

    # ---- hyper-parameters ----
    def info(self, key: int) -> int:
        v = ctypes.c_int64()
        check(_lib.lib.cism_model_get_info(self._h(), key, ctypes.byref(v)))
        return v.value

    @property
    def architecture(self) -> str:
        return _lib.lib.cism_model_architecture(self._h()).decode()

    vocab_size = property(lambda self: self.info(_lib.INFO_VOCAB_SIZE))
    dim = property(lambda self: self.info(_lib.INFO_DIM))
    n_layers = property(lambda self: self.info(_lib.INFO_N_LAYERS))
    n_heads = property(lambda self: self.info(_lib.INFO_N_HEADS))
    n_kv_heads = property(lambda self: self.info(_lib.INFO_N_KV_HEADS))
    head_dim = property(lambda self: self.info(_lib.INFO_HEAD_DIM))
    ffn_dim = property(lambda self: self.info(_lib.INFO_FFN_DIM))
    context_length = property(lambda self: self.info(_lib.INFO_CONTEXT_LEN))
    bos_id = property(lambda self: self.info(_lib.INFO_BOS_ID))
    eos_id = property(lambda self: self.info(_lib.INFO_EOS_ID))
    pad_id = property(lambda self: self.info(_lib.INFO_PAD_ID))
    n_params = property(lambda self: self.info(_lib.INFO_N_PARAMS))
    weight_bytes = property(lambda self: self.info(_lib.INFO_WEIGHT_BYTES))
    file_bytes = property(lambda self: self.info(_lib.INFO_FILE_BYTES))
    tied_embeddings = property(lambda self: bool(self.info(_lib.INFO_TIED_EMBEDDINGS)))

    @property
    def weight_dtype(self) -> str:
        return dtype_name(self.info(_lib.INFO_WEIGHT_DTYPE))

    @property
    def eos_ids(self) -> List[int]:
        n = ctypes.c_int32()
        check(_lib.lib.cism_model_eos_ids(self._h(), None, 0, ctypes.byref(n)))
        buf = (ctypes.c_int32 * max(n.value, 1))()
        check(_lib.lib.cism_model_eos_ids(self._h(), buf, n.value, ctypes.byref(n)))
        return list(buf[:n.value])

    def hparams(self) -> Dict[str, Any]:
        """Every hyper-parameter as a dict (for printing)."""
        return {
            "architecture": self.architecture, "vocab_size": self.vocab_size, "dim": self.dim,
            "n_layers": self.n_layers, "n_heads": self.n_heads, "n_kv_heads": self.n_kv_heads,
            "head_dim": self.head_dim, "ffn_dim": self.ffn_dim, "context_length": self.context_length,
            "tied_embeddings": self.tied_embeddings, "bos_id": self.bos_id, "eos_ids": self.eos_ids,
            "pad_id": self.pad_id, "n_params": self.n_params, "weight_dtype": self.weight_dtype,
            "weight_bytes": self.weight_bytes, "file_bytes": self.file_bytes,
        }

    # ---- text ----
    @property
    def tokenizer(self):
        """The model's tokenizer (cism.tokenizer.Tokenizer); raises if the file has none."""
        if self._tokenizer is None:
            from .tokenizer import from_model
            self._tokenizer = from_model(self)
        return self._tokenizer

    def session(self, **kwargs) -> "Session":
        """A new Session on this model (keyword arguments as Session)."""
        from .session import Session
        return Session(self, **kwargs)

    def generate(self, prompt: Union[str, List[int]], max_tokens: int = 128, *, n_ctx: int = 0,
                 n_threads: int = 0, kv_type: str = "f16", **kwargs):
        """Streams the continuation of `prompt` as text pieces, in a fresh session
        closed at the end. Keyword arguments: those of Session.generate (sampling
        parameters, sampler=, ignore_eos=, stop=, add_bos=)."""
        from .session import Session
        from .generate import run_in_session
        session = Session(self, n_ctx=n_ctx, n_threads=n_threads, kv_type=kv_type)
        try:
            return run_in_session(session, prompt, max_tokens, close_session=True, **kwargs)
        except BaseException:
            session.close()
            raise

    def create_chat_completion(self, messages, **kwargs):
        """An OpenAI-style chat completion of `messages` ([{"role", "content"}])
        in the model's own chat template, as llama-cpp-python's: a
        "chat.completion" dict, or with stream=True an iterator of
        "chat.completion.chunk" dicts. Keyword arguments (max_tokens,
        temperature, top_p, top_k, min_p, repeat_penalty, seed, stop, ...):
        see cism.chat.create_chat_completion."""
        from .chat import create_chat_completion
        return create_chat_completion(self, messages, **kwargs)

    chat = create_chat_completion

