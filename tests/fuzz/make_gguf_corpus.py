"""Writes the GGUF fuzz seed corpus (tests/fuzz/gguf_corpus): a few small files
< 20 KB, valid ones and near-misses, from tests/python/gguf_build.py."""
import os
import struct
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
import gguf_build as B  # noqa: E402


def main() -> None:
    out = os.path.join(HERE, "gguf_corpus")
    os.makedirs(out, exist_ok=True)
    rng = np.random.default_rng(0)
    files = {"small.gguf": B.small_file(0)}
    # every dequantizable block type, one row each
    sizes = {0: (1, 4), 1: (1, 2), 30: (1, 2), 2: (32, 18), 3: (32, 20), 6: (32, 22), 7: (32, 24), 8: (32, 34),
             10: (256, 84), 11: (256, 110), 12: (256, 144), 13: (256, 176), 14: (256, 210)}
    tensors = []
    for t, (be, bb) in sizes.items():
        n = 256 if be == 1 else be
        tensors.append((f"t{t}.weight", (n,), t, rng.integers(0, 256, n // be * bb, dtype=np.uint8).tobytes()))
    files["types.gguf"] = B.build([B.kv("general.architecture", B.STR, "llama"),
                                   B.kv("general.alignment", B.U32, 64)], tensors, alignment=64)
    files["version2.gguf"] = B.build([B.kv("a", B.U64, 1)], [("x", (8,), 0, b"\0" * 32)], version=2)
    files["tokenizer.gguf"] = B.build([B.kv("tokenizer.ggml.model", B.STR, "gpt2"),
                                       B.kv("tokenizer.ggml.tokens", B.ARR, ["a", "b", "ab", "<s>"], B.STR),
                                       B.kv("tokenizer.ggml.token_type", B.ARR, [1, 1, 1, 3], B.I32),
                                       B.kv("tokenizer.ggml.merges", B.ARR, ["a b"], B.STR)], [])
    files["truncated.gguf"] = B.small_file(1)[:300]
    files["empty-header.gguf"] = b"GGUF" + struct.pack("<IQQ", 3, 0, 0)
    for name, data in files.items():
        assert len(data) < 20000
        with open(os.path.join(out, name), "wb") as f:
            f.write(data)


if __name__ == "__main__":
    main()
