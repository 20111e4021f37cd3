"""Does rotating the weights help our formats without training? (issue 15: "evidence
says rotating weights does not help without training: measure that claim on our
formats once, and record the result either way".)

For each model and format, every layer matrix W (rows x cols; the embeddings and
the output head are left at f32) is replaced by
    plain:    deq(quant(W))
    rotated:  deq(quant(W H)) H^T
where H is the orthonormal Walsh-Hadamard matrix along the input dimension,
block-diagonal in blocks of B = the largest power of two dividing cols, at most
--block (QuaRot-style, without its learned parts). An engine would compute
(W H)(H^T x); in float math that equals W x, so the only difference between the
two rows is the quantization of W against that of W H. Both are scored against the
f32 model with float activations on the f32 kernels (mean KLD over the eval text's
windows, top-1 agreement) beside the relative weight error ||W_hat - W|| / ||W||.
Rounding is data-free (no calibration) in both rows.

    python tools/weight_rotation.py --models stories260K-hf,babyllama-tok105-hf,build/cache/smollm2-135m-instruct-f32-hf \
        --noise 0.5 --formats q4s,q4a,q4 --work build/quality-rotation

(the compare extra is imported by tools/quality.py: run it with the python that has gguf and
llama-cpp-python, e.g. the peer venv, PYTHONPATH=bindings_py.)
"""
from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bindings_py"))
sys.path.insert(0, os.path.join(ROOT, "tools"))

from cism import format as fmt  # noqa: E402
from cism import quant as q  # noqa: E402
from cism.convert import convert  # noqa: E402
from quality import kld_vs, logp_cism, noisy_copy  # noqa: E402


def hadamard(n: int) -> np.ndarray:
    h = np.ones((1, 1), dtype=np.float64)
    while h.shape[0] < n:
        h = np.block([[h, h], [h, -h]])
    return h / np.sqrt(n)


def block_of(cols: int, cap: int) -> int:
    b = 1
    while cols % (2 * b) == 0 and 2 * b <= cap:
        b *= 2
    return b


def rotate(w: np.ndarray, h: np.ndarray, inverse: bool = False) -> np.ndarray:
    """w (rows, cols) times the block-diagonal H (or H^T), blocks along cols."""
    b = h.shape[0]
    r = w.astype(np.float64).reshape(w.shape[0], -1, b)
    r = r @ (h.T if inverse else h)
    return r.reshape(w.shape).astype(np.float32)


def rebuilt(f32_path: str, out: str, dtype: str, rotated: bool, cap: int):
    """f32 .cism with every layer matrix replaced; returns the relative weight error"""
    f = fmt.CismFile(f32_path)
    num = den = 0.0
    arrays = {}
    for n, t in f.tensors.items():
        if len(t.shape) == 2 and n.startswith("blk."):
            w = np.asarray(f.array(n), dtype=np.float32).reshape(t.shape)
            cols = t.shape[1]
            if rotated:
                h = hadamard(block_of(cols, cap))
                wr = rotate(w, h)
                wh = rotate(q.dequantize(q.quantize(wr, dtype), dtype, cols).reshape(t.shape), h, inverse=True)
            else:
                wh = q.dequantize(q.quantize(w, dtype), dtype, cols).reshape(t.shape)
            num += float(((wh.astype(np.float64) - w) ** 2).sum())
            den += float((w.astype(np.float64) ** 2).sum())
            arrays[n] = wh.astype("<f4")
    if not os.path.exists(out):
        fmt.write_with_f32(f, out, arrays)
    return float(np.sqrt(num / den))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="stories260K-hf,babyllama-tok105-hf")
    ap.add_argument("--formats", default="q4s,q4a,q4")
    ap.add_argument("--block", type=int, default=256, help="largest Hadamard block")
    ap.add_argument("--noise", type=float, default=0.0, help="also each model with its Q4_1 grid broken")
    ap.add_argument("--text", default="tinystories_valid_excerpt.txt")
    ap.add_argument("--ctx", type=int, default=256)
    ap.add_argument("--max-windows", type=int, default=16)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--work", default="/tmp/cism-rotation")
    a = ap.parse_args()
    shared = os.path.join(ROOT, "..", "shared", "models")
    text = open(os.path.join(shared, "eval", a.text), encoding="utf-8").read()
    os.makedirs(a.work, exist_ok=True)
    cache_path = os.path.join(a.work, "results.json")
    cache = json.load(open(cache_path)) if os.path.exists(cache_path) else {}
    models = []
    for m in a.models.split(","):
        folder = m if os.path.isdir(m) else os.path.join(shared, m)
        label = os.path.basename(os.path.normpath(folder))
        if not label.startswith("smollm2"):
            models.append((label, folder))
        if a.noise > 0:  # the real model only with its grid broken: on the grid, q4a holds it exactly
            noisy = os.path.join(a.work, f"{label}+noise{a.noise:g}")
            noisy_copy(folder, noisy, a.noise)
            models.append((f"{label}+noise{a.noise:g}", noisy))
    print(f"| model | format | rotation | rel. weight error | mean KLD | same top |")
    print("|---|---|---|---:|---:|---:|")
    from tokenizers import Tokenizer
    for label, folder in models:
        toks = Tokenizer.from_file(os.path.join(folder, "tokenizer.json")).encode(text, add_special_tokens=False).ids
        f32 = os.path.join(a.work, f"{label}.f32.cism")
        if not os.path.exists(f32):
            convert(folder, f32, dtype="f32", overwrite=True, progress=None)
        base = logp_cism(f32, toks, a.ctx, 1, a.max_windows, False, a.threads)
        for dt in a.formats.split(","):
            for rot in (False, True):
                key = f"{label}|{dt}|{'rot' if rot else 'plain'}|{a.block}|{a.ctx}|{a.max_windows}|{a.text}"
                if key not in cache:
                    path = os.path.join(a.work, f"{label}.{dt}.{'rot' if rot else 'plain'}{a.block}.cism")
                    err = rebuilt(f32, path, dt, rot, a.block)
                    kld, top = kld_vs(base, logp_cism(path, toks, a.ctx, 1, a.max_windows, False, a.threads))
                    cache[key] = [err, kld, top]
                    json.dump(cache, open(cache_path, "w"), indent=1)
                err, kld, top = cache[key]
                print(f"| {label} | {dt} | {'Hadamard ≤ %d' % a.block if rot else 'none'} | {err:.4f} | {kld:.5f} | "
                      f"{100 * top:.2f}% |", flush=True)


if __name__ == "__main__":
    main()
