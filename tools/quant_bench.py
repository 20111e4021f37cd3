"""Quantization speed: a synthetic Llama-3.2-1B-shaped weight set through
cism_quantize (the converter's path), per dtype and thread count.

One layer's seven matrices (q, k, v, o, gate, up, down) and the 128256 x 2048
embedding are quantized and timed; the 1B total is embedding + 16 x layer.
With --gram G the 4-bit dtypes also go through cism_quantize_gram (GPTQ within
blocks of G columns; statistics of random correlated inputs). --calibrate
times the calibration itself (cism.calibrate on the synthetic Llama-3.2-1B of
`cism bench`, bf16: "auto" generates, a text file is prefilled).
A benchmark, not a test: the numbers depend on the machine and its load.

    python tools/quant_bench.py [--threads 1,2] [--dtypes q8,q4,q4s,nl4,fp4] [--gram 128]
    python tools/quant_bench.py --calibrate auto[,TEXT] [--threads 2]   (TEXT: never the evaluation text)
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

GRAM_SAMPLES = 512

DIM, FFN, KV, VOCAB, LAYERS = 2048, 8192, 512, 128256, 16


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--dtypes", default="q8,q4s,q4,nl4,fp4")
    ap.add_argument("--gram", type=int, default=0, help="also time cism_quantize_gram with Gram blocks of G columns")
    ap.add_argument("--calibrate", default="", help="time cism.calibrate on the synthetic 1B: auto and/or text files")
    a = ap.parse_args()
    if a.calibrate:
        return bench_calibrate(a)
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
            if a.gram and dt != "q8":
                grams = {c: gram_blocks(rng, c, a.gram) for c in (DIM, FFN)}
                t0 = time.perf_counter()
                for m in mats:
                    quantize(m, QUANT_DTYPES[dt], n_threads=nt, gram=grams[m.shape[1]])
                t_layer = time.perf_counter() - t0
                t0 = time.perf_counter()
                quantize(emb, QUANT_DTYPES[dt], n_threads=nt, gram=grams[DIM])
                t_emb = time.perf_counter() - t0
                est = t_emb + LAYERS * t_layer
                print(f"{dt:4s} threads {nt}, Gram blocks of {a.gram}: layer {t_layer:.2f} s, embedding {t_emb:.2f} s "
                      f"-> 1B model {est:.1f} s ({1e9 * est / total:.1f} ns/weight)", flush=True)


def gram_blocks(rng, cols, g):
    """Blocks along the diagonal of the second moments of correlated random inputs."""
    x = rng.standard_normal((GRAM_SAMPLES, 16)) @ rng.standard_normal((16, cols)) + rng.standard_normal((GRAM_SAMPLES, cols))
    nb = -(-cols // g)
    out = np.zeros((nb, g, g))
    for k in range(nb):
        blk = x[:, k * g:(k + 1) * g]
        out[k, :blk.shape[1], :blk.shape[1]] = blk.T @ blk / GRAM_SAMPLES
    return out


def bench_calibrate(a):
    """The synthetic Llama-3.2-1B (bf16) with BOS and, when ../shared/models is
    there, the Llama 3 tokenizer (text calibration needs one)."""
    import dataclasses
    from cism import format as fmt
    from cism.calibrate import calibrate
    from cism.synthetic import PRESETS, cache_dir, write_synthetic
    extra = dict(PRESETS["llama3.2-1b"].extra)
    extra["tokenizer.bos_id"] = 128000
    tok = os.path.join(ROOT, "..", "shared", "models", "tokenizers", "llama3", "tokenizer.json")
    if os.path.exists(tok):
        extra["tokenizer.hf_json"] = fmt.Bytes(open(tok, "rb").read())
    path = os.path.join(cache_dir(), "synthetic-llama3.2-1b-bf16-calibration-bench.cism")
    if not os.path.exists(path):
        write_synthetic(dataclasses.replace(PRESETS["llama3.2-1b"], extra=extra), path, "bf16")
    nt = int(a.threads.split(",")[-1])
    for src in a.calibrate.split(","):
        r = calibrate(path, src, n_threads=nt)
        print(f"calibration on the synthetic Llama-3.2-1B (bf16), {nt} threads: {r.seconds:.1f} s for {r.n_tokens} "
              f"tokens ({r.description})", flush=True)


if __name__ == "__main__":
    main()
