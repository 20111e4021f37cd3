"""Encode throughput of the C tokenizer against Hugging Face tokenizers, in
the same run on the same texts (prints, never asserts), and the model load
time the tokenizer adds.

    python tests/tokenizer/bench_tokenizer.py LIBCISM.so FIXTURE_DIR SHARED_DIR [names...]

FIXTURE_DIR is the folder make_tokenizer_fixtures.py wrote (the .cism files)."""
import ctypes
import json
import os
import sys
import time

from tokenizers import Tokenizer

lib_path, fx, shared = sys.argv[1:4]
names = sys.argv[4:] or ["gpt2", "smollm", "qwen2", "llama3", "llama2", "stories260K-llama2c"]
lib = ctypes.CDLL(lib_path)
lib.cism_model_load.argtypes = [ctypes.c_char_p, ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p)]
lib.cism_model_load.restype = ctypes.c_int32
lib.cism_model_free.argtypes = [ctypes.c_void_p]
lib.cism_tokenize.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_uint32,
                              ctypes.POINTER(ctypes.c_int32), ctypes.c_int32, ctypes.POINTER(ctypes.c_int32)]
lib.cism_tokenize.restype = ctypes.c_int32

texts = []
for name in ("tinystories_valid_excerpt.txt", "war_and_peace_excerpt.txt"):
    with open(os.path.join(shared, "models", "eval", name), encoding="utf-8") as f:
        whole = f.read()
    texts += [p for p in whole.split("\n\n") if p]
data = [t.encode("utf-8") for t in texts]
total = sum(len(b) for b in data)
buf = (ctypes.c_int32 * (1 << 20))()
n = ctypes.c_int32()

hf_dirs = {"gpt2": "tokenizers/gpt2", "smollm": "tokenizers/smollm", "qwen2": "tokenizers/qwen2",
           "llama3": "tokenizers/llama3", "llama2": "tokenizers/llama2", "stories260K-llama2c": "stories260K-hf"}
print(f"{len(texts)} paragraphs, {total / 1e6:.2f} MB; one thread each")
print(f"{'tokenizer':<22}{'C MB/s':>9}{'HF MB/s':>9}{'HF batch':>10}{'C/HF':>7}{'load ms':>9}")
for name in names:
    m = ctypes.c_void_p()
    t0 = time.perf_counter()
    st = lib.cism_model_load(os.path.join(fx, name + ".cism").encode(), None, ctypes.byref(m))
    load = time.perf_counter() - t0
    assert st == 0, st
    hf = Tokenizer.from_file(os.path.join(shared, "models", hf_dirs[name], "tokenizer.json"))
    best_c = best_hf = best_batch = 1e9
    for _ in range(3):
        t0 = time.perf_counter()
        for b in data:
            lib.cism_tokenize(m, b, len(b), 2, buf, 1 << 20, ctypes.byref(n))
        best_c = min(best_c, time.perf_counter() - t0)
        t0 = time.perf_counter()
        for t in texts:
            hf.encode(t, add_special_tokens=False)
        best_hf = min(best_hf, time.perf_counter() - t0)
        t0 = time.perf_counter()
        hf.encode_batch(texts, add_special_tokens=False)
        best_batch = min(best_batch, time.perf_counter() - t0)
    print(f"{name:<22}{total / 1e6 / best_c:9.1f}{total / 1e6 / best_hf:9.1f}{total / 1e6 / best_batch:10.1f}"
          f"{best_hf / best_c:7.2f}{load * 1e3:9.1f}")
    lib.cism_model_free(m)
