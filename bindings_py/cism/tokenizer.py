"""Text <-> token ids, behind a small interface.

Today the only implementation wraps a Hugging Face `tokenizers.Tokenizer`
built from the model file's `tokenizer.hf_json` metadata. A tokenizer in the
C library will become the default later; code outside this module only uses
`Tokenizer` (encode, decode, bos/eos ids, add_bos, incremental_decoder) and
`from_model`, so that switch is local to this file.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, List, Optional, Sequence

if TYPE_CHECKING:
    from .model import Model


class TokenizerError(ValueError):
    """The model carries no usable tokenizer."""


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
        self.ids.append(int(token))
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
        ids = self.hf.encode(text, add_special_tokens=False).ids if text else []
        if (self.add_bos if add_bos is None else add_bos) and self.bos_id >= 0:
            ids = [self.bos_id] + ids
        return ids

    def decode(self, ids: Sequence[int], skip_special: bool = True) -> str:
        return self.hf.decode([int(i) for i in ids], skip_special_tokens=skip_special)

    def token_text(self, token: int) -> Optional[str]:
        return self.hf.id_to_token(int(token))


def from_model(model: "Model") -> Tokenizer:
    """The tokenizer stored in a model file. BOS handling: `tokenizer.add_bos`
    metadata when present, else whatever the HF post-processor does."""
    meta = model.metadata
    if "tokenizer.hf_json" not in meta:
        raise TokenizerError(f"{model.path}: the model file has no tokenizer (tokenizer.hf_json); "
                             "pass token ids instead of text, or convert the model with its tokenizer")
    raw = meta["tokenizer.hf_json"]
    text = raw.decode("utf-8") if isinstance(raw, bytes) else raw
    add_bos = bool(meta["tokenizer.add_bos"]) if "tokenizer.add_bos" in meta else None
    return HFTokenizer(text, bos_id=model.bos_id, eos_ids=model.eos_ids, add_bos=add_bos)
