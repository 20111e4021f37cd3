"""Quantization speed: a synthetic Llama-3.2-1B-shaped weight set through
cism_quantize (the converter's path), per dtype and thread count.

One layer's seven matrices (q, k, v, o, gate, up, down) and the 128256 x 2048
embedding are quantized and timed; the 1B total is embedding + 16 x layer.
A benchmark, not a test: the numbers depend on the machine and its load.

    python tools/quant_bench.py [--threads 1,2] [--dtypes q8,q4,q4s,nl4,fp4]
"""
import argparse
import os
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bindings_py"))
_built = os.path.join(ROOT, "build", "release", "libcism", "libcism.so")
if os.path.exists(_built):
    os.environ.setdefault("CISM_LIB", _built)  # a source checkout: use its build
from cism.quant import QUANT_DTYPES, quantize  # noqa: E402

DIM, FFN, KV, VOCAB, LAYERS = 2048, 8192, 512, 128256, 16


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--dtypes", default="q8,q4s,q4,nl4,fp4")
    a = ap.parse_args()
    rng = np.random.default_rng(0)
    layer = [(DIM, DIM), (KV, DIM), (KV, DIM), (DIM, DIM), (FFN, DIM), (FFN, DIM), (DIM, FFN)]
    mats = [(rng.standard_normal(s, dtype=np.float32) * 0.02) for s in layer]
    emb = rng.standard_normal((VOCAB, DIM), dtype=np.float32) * 0.02
    n_layer = sum(m.size for m in mats)
    total = emb.size + LAYERS * n_layer
    print(f"1B-shaped set: {total / 1e9:.3f} B weights (embedding {emb.size / 1e6:.0f} M + {LAYERS} x {n_layer / 1e6:.1f} M)")
    for dt in a.dtypes.split(","):
        for nt in (int(t) for t in a.threads.split(",")):
            t0 = time.perf_counter()
            for m in mats:
                quantize(m, QUANT_DTYPES[dt], n_threads=nt)
            t_layer = time.perf_counter() - t0
            t0 = time.perf_counter()
            quantize(emb, QUANT_DTYPES[dt], n_threads=nt)
            t_emb = time.perf_counter() - t0
            est = t_emb + LAYERS * t_layer
            print(f"{dt:4s} threads {nt}: layer {t_layer:.2f} s, embedding {t_emb:.2f} s -> 1B model {est:.1f} s "
                  f"({1e9 * est / total:.1f} ns/weight)", flush=True)


if __name__ == "__main__":
    main()
