"""Writes the seed corpora of the C fuzz targets (tests/fuzz/fuzz_*.c), which
tests/c/CMakeLists.txt replays under ctest and tests/fuzz/run_fuzz.sh starts
libFuzzer from:

  corpus_loader/     tiny synthetic .cism models (random weights, our own
                     tokenizers), one per weight format and option the loader
                     branches on, and one of format version 2 (no checksums);
                     fuzz_loader also uses them as they are
  corpus_tokenizer/  texts: ASCII, multi-byte UTF-8, invalid UTF-8, special
                     tokens written out, long runs, digits, whitespace
  corpus_chat/       inputs in fuzz_chat.c's layout (a control byte, then
                     messages separated by 0xFF)

    CISM_LIB=build/release/libcism/libcism.so PYTHONPATH=bindings_py \
        build/venv/bin/python tests/fuzz/make_corpus.py

(the quantized seeds are packed by libcism, hence CISM_LIB). Deterministic:
rerunning it rewrites the same bytes."""
import dataclasses
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "python"))
sys.path.insert(0, os.path.join(ROOT, "bindings_py"))

import numpy as np  # noqa: E402
from cism import format as fmt  # noqa: E402
from cism.synthetic import write_synthetic  # noqa: E402
from helpers import tiny_preset  # noqa: E402
from helpers import ASCII_VOCAB, BYTE_VOCAB  # noqa: E402


def fresh(name):
    d = os.path.join(HERE, name)
    os.makedirs(d, exist_ok=True)
    for f in os.listdir(d):
        os.remove(os.path.join(d, f))
    return d


def loader_corpus():
    d = fresh("corpus_loader")
    small = dict(dim=32, n_layers=1, n_heads=2, n_kv_heads=1, head_dim=16, ffn=32, ctx=64)
    models = {
        # name: (dtype, preset options)
        "ascii-f32": ("f32", dict(tokenizer="ascii", vocab=ASCII_VOCAB)),
        "ascii-f16-chatml": ("f16", dict(tokenizer="ascii", vocab=ASCII_VOCAB, **{
            "tokenizer.chat_format": "chatml", "tokenizer.chat_default_system": "You are a test."})),
        "bytes-bf16-tied": ("bf16", dict(tokenizer=True, vocab=BYTE_VOCAB, tied=True)),
        "notok-q8": ("q8", dict(tokenizer=False, vocab=64)),
        "notok-q4-gqa": ("q4", dict(tokenizer=False, vocab=64, n_heads=4, n_kv_heads=2, head_dim=8)),
    }
    for name, (dtype, kw) in models.items():
        opts = dict(small)
        opts.update(kw)
        tied = opts.pop("tied", False)
        preset = tiny_preset(name=name, **opts)
        if tied:
            preset = dataclasses.replace(preset, tied=True)
        write_synthetic(preset, os.path.join(d, name + ".cism"), dtype, seed=1)
    # regression seed: a norm so small (subnormal) that the int8 activations of
    # the q8 matmuls after it have a block max below 127 / FLT_MAX, whose inverse
    # overflowed (UB and tier-dependent codes; fuzz_loader found it, docs/FUZZING.md)
    src, dst = os.path.join(d, "notok-q8.cism"), os.path.join(d, "regress-tiny-norm-q8.cism")
    data = bytearray(open(src, "rb").read())
    t = fmt.CismFile(src).tensors["blk.0.attn_norm"]
    data[t.offset:t.offset + t.nbytes] = np.full(t.shape, 1e-39, "<f4").tobytes()
    with open(dst, "wb") as f:
        f.write(bytes(data))
    fmt.reseal(dst)  # the edit is the point: checksums that match it (fuzz_loader verifies them for some inputs)
    # a file of format version 2, as written before checksums (no header checksum to stop a mutation)
    with open(os.path.join(d, "legacy-v2-q8.cism"), "wb") as f:
        f.write(fmt.legacy_bytes(open(src, "rb").read(), 2))


TEXTS = {
    "ascii": b"Hello, world! The quick brown fox jumps over the lazy dog.",
    "utf8": "caf\u00e9 \u00fcber \u65e5\u672c\u8a9e \U0001F600 \u0928\u092e\u0938\u094d\u0924\u0947".encode(),
    "invalid-utf8": b"ok \xff\xfe \xc3( \xe2\x82 \xf0\x9f\x98 end",
    "specials": b"<s>[INST] hi [/INST]</s><|im_start|>user\nyo<|im_end|><|endoftext|><unk>",
    "spaces": b"  two  spaces\tand\ttabs\n\n\r\nnew lines   ",
    "digits": b"3.14159 2024-01-01 1234567890 0x1F",
    "long-run": b"a" * 600 + b" " + b"ab" * 200,
    "contractions": b"I'm you're he'll they've DON'T it's",
    "nul": b"a\x00b\x00\x00c",
    "empty": b"",
}


def tokenizer_corpus():
    d = fresh("corpus_tokenizer")
    for name, data in TEXTS.items():
        with open(os.path.join(d, name), "wb") as f:
            f.write(data)


def chat(control, *messages):
    """fuzz_chat.c's layout: control byte, then role 0xFE content pairs joined by 0xFF"""
    return bytes([control]) + b"\xff".join(r + b"\xfe" + c for r, c in messages)


def chat_corpus():
    d = fresh("corpus_chat")
    sysm, user, asst = (b"system", b"You are terse."), (b"user", b"  Hi there!  "), (b"assistant", b"Hello.")
    seeds = {
        # control: bits 0-2 format (0 = the model's), bit 3 generation prompt, bit 4 no model, bits 5-7 capacity
        "chatml": chat(0x09, sysm, user, asst, user),
        "llama3": chat(0x0A, sysm, user),
        "llama2": chat(0x0B, sysm, user, asst, user),
        "mistral": chat(0x04, user, asst),
        "zephyr-nomodel": chat(0x1D, sysm, user),
        "model-format": chat(0x08, user),
        "llama2-bad-order": chat(0x03, user, user),
        "small-capacity": chat(0x21, sysm, user),
        "utf8": chat(0x0A, (b"user", "\u00e9t\u00e9 \u65e5\u672c \u2003 ".encode())),
        "invalid-utf8": chat(0x01, (b"user", b"\xc3(")),
        "empty": b"",
    }
    for name, data in seeds.items():
        with open(os.path.join(d, name), "wb") as f:
            f.write(data)


if __name__ == "__main__":
    loader_corpus()
    tokenizer_corpus()
    chat_corpus()
    for n in ("corpus_loader", "corpus_tokenizer", "corpus_chat"):
        d = os.path.join(HERE, n)
        print(n, len(os.listdir(d)), "files,", sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d)), "bytes")
