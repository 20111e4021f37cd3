"""Small model files made on the fly for the API tests (no downloads)."""
from __future__ import annotations

import json

from cism import format as fmt
from cism.synthetic import Preset, write_synthetic

BYTE_VOCAB = 3 + 256  # <unk> <s> </s>, then one token per byte


def byte_tokenizer_json() -> str:
    """A byte-fallback BPE tokenizer.json: every character is spelled in UTF-8
    byte tokens, so one character can span several tokens; the post-processor
    prepends <s>."""
    from tokenizers import Tokenizer, decoders, models, processors
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    vocab.update({f"<0x{b:02X}>": 3 + b for b in range(256)})
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="<unk>", byte_fallback=True))
    tok.decoder = decoders.Sequence([decoders.ByteFallback(), decoders.Fuse()])
    tok.add_special_tokens(["<unk>", "<s>", "</s>"])
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    return tok.to_str()


ASCII_VOCAB = 3 + 95  # <unk> <s> </s>, then the printable ASCII characters


def ascii_tokenizer_json() -> str:
    """One token per printable ASCII character: any id sequence decodes to valid text."""
    from tokenizers import Tokenizer, decoders, models, processors
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    vocab.update({chr(c): 3 + c - 32 for c in range(32, 127)})
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="<unk>"))
    tok.decoder = decoders.Fuse()
    tok.add_special_tokens(["<unk>", "<s>", "</s>"])
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    return tok.to_str()


def tiny_preset(name="tiny-test", vocab=BYTE_VOCAB, dim=64, n_layers=2, n_heads=4, n_kv_heads=2, head_dim=16,
                ffn=128, ctx=256, tokenizer=True, **extra) -> Preset:
    meta = dict(extra)
    if tokenizer:
        js = ascii_tokenizer_json() if tokenizer == "ascii" else byte_tokenizer_json()
        meta.update({"tokenizer.hf_json": fmt.Bytes(js.encode()), "tokenizer.bos_id": 1,
                     "tokenizer.eos_id": 2})
    return Preset(name, "tests", "llama", vocab, dim, n_layers, n_heads, n_kv_heads, head_dim, ffn, ctx, 10000.0,
                  1e-5, False, meta)


def make_model(path: str, seed: int = 0, **kw) -> str:
    return write_synthetic(tiny_preset(**kw), str(path), "f32", seed)


def read_json(path: str):
    with open(path, encoding="utf-8") as f:
        return json.load(f)
