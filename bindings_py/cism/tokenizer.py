"""Text <-> token ids, behind a small interface.

Two implementations: `CTokenizer`, the C library's own tokenizer (the
default: token-for-token identical to Hugging Face tokenizers, no Python
dependency, streams through the C detokenizer), used when the model file
carries the compact tokenizer keys `cism convert` writes; and `HFTokenizer`,
a Hugging Face `tokenizers.Tokenizer` built from the file's verbatim
`tokenizer.hf_json` (for older files, and as the reference). Choose with
`from_model(model, backend)` or the CISM_TOKENIZER environment variable
(`auto`, `c` or `hf`). Code outside this module only uses `Tokenizer`
(encode, decode, bos/eos ids, add_bos, incremental_decoder) and `from_model`.
"""
from __future__ import annotations

import ctypes
import os
import weakref
from typing import TYPE_CHECKING, List, Optional, Sequence

from . import _lib
from .errors import TokenRangeError, check, token_id

if TYPE_CHECKING:
    from .model import Model


class TokenizerError(ValueError):
    """The model carries no usable tokenizer."""


def _text(text) -> str:
    """text itself if it is a str (TypeError otherwise: None or bytes would encode as nothing or fail deep inside)."""
    if not isinstance(text, str):
        raise TypeError(f"text to encode must be a str (got {type(text).__name__})")
    return text


class Tokenizer:
    """The interface every tokenizer implementation provides."""

    bos_id: int = -1
    eos_ids: List[int] = []
    add_bos: bool = False  # whether encode() prepends BOS by default

    def encode(self, text: str, add_bos: Optional[bool] = None) -> List[int]:
        """Token ids of `text`; BOS is prepended when add_bos (default: self.add_bos)."""
        raise NotImplementedError

    def decode(self, ids: Sequence[int], skip_special: bool = True) -> str:
        raise NotImplementedError

    @property
    def vocab_size(self) -> int:
        raise NotImplementedError

    @property
    def n_ids(self) -> int:
        """1 + the largest id the tokenizer knows: text generation samples only
        ids below it (a file's embedding may have more rows than the tokenizer
        has tokens, docs/FORMAT.md)."""
        return self.vocab_size

    def incremental_decoder(self, context: Sequence[int] = ()) -> "IncrementalDecoder":
        """A decoder for streaming: feed ids one at a time, get text that is
        complete (never half a UTF-8 character). `context` are ids already
        shown (e.g. the end of the prompt); they set spacing, not output."""
        return IncrementalDecoder(self, context)


class IncrementalDecoder:
    """Turns a growing list of ids into text pieces.

    Decodes a short window of ids (some already shown, plus the new ones) and
    emits what the new ids added. Text ending in U+FFFD (an incomplete
    multi-byte character, e.g. a byte-fallback token) is held back until the
    character is complete or flush() is called. Decoding a window instead of
    single ids keeps the spacing right for decoders that strip a leading
    space from the first token (sentencepiece style).
    """

    CONTEXT = 4  # ids of the prompt kept as left context

    def __init__(self, tokenizer: Tokenizer, context: Sequence[int] = ()):
        self.tok = tokenizer
        ctx = list(context)[-self.CONTEXT:]
        self.ids: List[int] = ctx
        self.prefix = 0          # window start
        self.read = len(ctx)     # ids before this index have been emitted

    def push(self, token: int) -> str:
        self.ids.append(token_id(token))
        return self._emit(final=False)

    def flush(self) -> str:
        return self._emit(final=True)

    def _emit(self, final: bool) -> str:
        if self.read >= len(self.ids):
            return ""
        shown = self.tok.decode(self.ids[self.prefix:self.read])
        full = self.tok.decode(self.ids[self.prefix:])
        if not final and (len(full) <= len(shown) or full.endswith("\ufffd")):
            return ""
        if not full.startswith(shown):
            # the decoder rewrote earlier text (rare); emit from the common prefix
            n = 0
            while n < min(len(full), len(shown)) and full[n] == shown[n]:
                n += 1
            piece = full[n:]
        else:
            piece = full[len(shown):]
        self.prefix = self.read
        self.read = len(self.ids)
        # keep the window short
        if self.read - self.prefix > 8:
            self.prefix = self.read - 8
        return piece


class HFTokenizer(Tokenizer):
    """A Hugging Face `tokenizers.Tokenizer` from a tokenizer.json document."""

    def __init__(self, json_text: str, bos_id: int = -1, eos_ids: Sequence[int] = (), add_bos: Optional[bool] = None):
        try:
            from tokenizers import Tokenizer as _HF
        except ImportError as e:  # pragma: no cover - a runtime dependency
            raise TokenizerError("the `tokenizers` package is required for text input/output") from e
        try:
            self.hf = _HF.from_str(json_text)
        except Exception as e:  # tokenizers raises plain Exception
            raise TokenizerError(f"the model's tokenizer.json cannot be loaded: {e}") from None
        self.bos_id = int(bos_id)
        self.eos_ids = [int(x) for x in eos_ids]
        if add_bos is None:
            add_bos = self._post_processor_adds_bos()
        self.add_bos = bool(add_bos) and self.bos_id >= 0

    def _post_processor_adds_bos(self) -> bool:
        """Whether the HF post-processor prepends the BOS id (e.g. TemplateProcessing "<s> $A")."""
        if self.bos_id < 0:
            return False
        with_special = self.hf.encode("a", add_special_tokens=True).ids
        plain = self.hf.encode("a", add_special_tokens=False).ids
        return len(with_special) > len(plain) and with_special[0] == self.bos_id and (not plain or plain[0] != self.bos_id)

    @property
    def vocab_size(self) -> int:
        return self.hf.get_vocab_size(with_added_tokens=True)

    def encode(self, text: str, add_bos: Optional[bool] = None) -> List[int]:
        ids = self.hf.encode(text, add_special_tokens=False).ids if _text(text) else []
        if (self.add_bos if add_bos is None else add_bos) and self.bos_id >= 0:
            ids = [self.bos_id] + ids
        return ids

    @property
    def n_ids(self) -> int:
        if getattr(self, "_n_ids", None) is None:
            vocab = self.hf.get_vocab(with_added_tokens=True)
            self._n_ids = max(vocab.values()) + 1 if vocab else 0
        return self._n_ids

    def _id(self, token) -> int:
        t = token_id(token)
        n = self.n_ids
        if t >= n:
            raise TokenRangeError(f"token {t} is outside the tokenizer's vocabulary (0..{n - 1})")
        return t

    def decode(self, ids: Sequence[int], skip_special: bool = True) -> str:
        return self.hf.decode([self._id(i) for i in ids], skip_special_tokens=skip_special)

    def token_text(self, token: int) -> Optional[str]:
        return self.hf.id_to_token(self._id(token))


class CTokenizer(Tokenizer):
    """The C library's tokenizer of a loaded model (cism_tokenize & co)."""

    def __init__(self, model: "Model", add_bos: Optional[bool] = None):
        if not _lib.lib.cism_model_has_tokenizer(model.handle):
            raise TokenizerError(f"{model.path}: the model file has no C tokenizer (convert it again with this "
                                 "version of `cism convert`)")
        # A detokenizer holds a reference to the C model: the tokenizer stays
        # usable after Model.close(), like a session.
        keeper = ctypes.c_void_p()
        check(_lib.lib.cism_detokenizer_create(model.handle, 0, ctypes.byref(keeper)))
        self._model_h = model.handle
        self._finalizer = weakref.finalize(self, _free_detok, keeper.value)
        flags = model.metadata["tokenizer.token_flags"]
        self._n_tokens = sum(1 for f in flags if f)
        self._n_ids = len(flags)
        self.bos_id = model.bos_id
        self.eos_ids = model.eos_ids
        if add_bos is None:
            with_special = self._encode("a", _lib.TOKENIZE_ADD_SPECIAL | _lib.TOKENIZE_PARSE_SPECIAL)
            add_bos = self.bos_id >= 0 and len(with_special) > 1 and with_special[0] == self.bos_id
        self.add_bos = bool(add_bos) and self.bos_id >= 0

    def _encode(self, text: str, flags: int) -> List[int]:
        b = text.encode("utf-8")
        n = ctypes.c_int32()
        st = _lib.lib.cism_tokenize(self._model_h, b, len(b), flags, None, 0, ctypes.byref(n))
        if st != _lib.ERR_BUFFER_SMALL:
            check(st)
        buf = (ctypes.c_int32 * max(n.value, 1))()
        check(_lib.lib.cism_tokenize(self._model_h, b, len(b), flags, buf, n.value, ctypes.byref(n)))
        return list(buf[:n.value])

    @property
    def vocab_size(self) -> int:
        return self._n_tokens

    @property
    def n_ids(self) -> int:
        return self._n_ids

    def encode(self, text: str, add_bos: Optional[bool] = None, parse_special: bool = True) -> List[int]:
        ids = self._encode(text, _lib.TOKENIZE_PARSE_SPECIAL if parse_special else 0) if _text(text) else []
        if (self.add_bos if add_bos is None else add_bos) and self.bos_id >= 0:
            ids = [self.bos_id] + ids
        return ids

    def decode(self, ids: Sequence[int], skip_special: bool = True) -> str:
        arr = (ctypes.c_int32 * max(len(ids), 1))(*[token_id(i) for i in ids])
        n = ctypes.c_size_t()
        flags = _lib.DETOKENIZE_SKIP_SPECIAL if skip_special else 0
        st = _lib.lib.cism_detokenize(self._model_h, arr, len(ids), flags, None, 0, ctypes.byref(n))
        if st != _lib.ERR_BUFFER_SMALL:
            check(st)
        out = ctypes.create_string_buffer(n.value + 1)
        check(_lib.lib.cism_detokenize(self._model_h, arr, len(ids), flags, out, n.value, ctypes.byref(n)))
        return out.raw[:n.value].decode("utf-8")

    def token_text(self, token: int) -> Optional[str]:
        p, n = ctypes.c_void_p(), ctypes.c_size_t()
        if _lib.lib.cism_token_to_piece(self._model_h, token_id(token), ctypes.byref(p), ctypes.byref(n)) != _lib.OK:
            return None
        return ctypes.string_at(p, n.value).decode("utf-8")

    def incremental_decoder(self, context: Sequence[int] = ()) -> "CIncrementalDecoder":
        return CIncrementalDecoder(self, context)


def _free_detok(handle: int) -> None:
    _lib.lib.cism_detokenizer_free(handle)


class CIncrementalDecoder:
    """The C streaming detokenizer: text comes out as soon as it is complete
    UTF-8. `context` ids (already shown) are fed first and their text dropped,
    so the spacing of the first new token is right."""

    CONTEXT = 4

    def __init__(self, tokenizer: CTokenizer, context: Sequence[int] = ()):
        self.tok = tokenizer
        h = ctypes.c_void_p()
        check(_lib.lib.cism_detokenizer_create(tokenizer._model_h, _lib.DETOKENIZE_SKIP_SPECIAL, ctypes.byref(h)))
        self._h = h.value
        self._finalizer = weakref.finalize(self, _free_detok, h.value)
        for t in list(context)[-self.CONTEXT:]:
            self._push(t)

    def _push(self, token: int) -> str:
        p, n = ctypes.c_void_p(), ctypes.c_size_t()
        check(_lib.lib.cism_detokenizer_push(self._h, int(token), ctypes.byref(p), ctypes.byref(n)))
        return ctypes.string_at(p, n.value).decode("utf-8") if n.value else ""

    def push(self, token: int) -> str:
        return self._push(token_id(token))

    def flush(self) -> str:
        p, n = ctypes.c_void_p(), ctypes.c_size_t()
        check(_lib.lib.cism_detokenizer_flush(self._h, ctypes.byref(p), ctypes.byref(n)))
        return ctypes.string_at(p, n.value).decode("utf-8") if n.value else ""


def from_model(model: "Model", backend: Optional[str] = None) -> Tokenizer:
    """The tokenizer stored in a model file. backend: "c" (the C library's),
    "hf" (Hugging Face tokenizers over tokenizer.hf_json) or "auto" (C when the
    file carries it; default, or the CISM_TOKENIZER environment variable).
    BOS handling: `tokenizer.add_bos` metadata when present, else whatever the
    post-processor does."""
    meta = model.metadata
    backend = (backend or os.environ.get("CISM_TOKENIZER") or "auto").lower()
    if backend not in ("auto", "c", "hf"):
        raise ValueError(f"tokenizer backend {backend!r}: use auto, c or hf")
    add_bos = bool(meta["tokenizer.add_bos"]) if "tokenizer.add_bos" in meta else None
    if backend == "c" or (backend == "auto" and _lib.lib.cism_model_has_tokenizer(model.handle)):
        return CTokenizer(model, add_bos=add_bos)
    if "tokenizer.hf_json" not in meta:
        raise TokenizerError(f"{model.path}: the model file has no tokenizer (tokenizer.hf_json); "
                             "pass token ids instead of text, or convert the model with its tokenizer")
    raw = meta["tokenizer.hf_json"]
    text = raw.decode("utf-8") if isinstance(raw, bytes) else raw
    return HFTokenizer(text, bos_id=model.bos_id, eos_ids=model.eos_ids, add_bos=add_bos)
