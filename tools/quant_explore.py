"""Format exploration by simulation ("fake quantization"), used to choose libcism's
4-bit formats (docs/QUANTIZATION.md, "How the formats were chosen").

Each candidate format quantizes and dequantizes every weight matrix of a model
in numpy; the result is written as an f32 .cism file and its perplexity is
measured with libcism. Dequantized weights give the same logits as the packed
kernels up to float rounding, so the ranking carries over to the real formats.

    python tools/quant_explore.py --out /tmp/explore [--windows 120]
"""
from __future__ import annotations

import argparse
import os
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bindings_py"))
_built = os.path.join(ROOT, "build", "release", "libcism", "libcism.so")
if os.path.exists(_built):
    os.environ.setdefault("CISM_LIB", _built)  # a source checkout: use its build
from cism import format as fmt  # noqa: E402
from cism.convert import convert  # noqa: E402
from cism.ppl import perplexity  # noqa: E402

# ---- scale encodings ------------------------------------------------------------
E4M3 = np.array([(m / 8.0) * 2.0 ** -6 if e == 0 else (1 + m / 8.0) * 2.0 ** (e - 7)
                 for e in range(16) for m in range(8)][:127])  # 0x00..0x7E, no NaN


def enc_f16(d):
    return d.astype(np.float16).astype(np.float64)


def enc_e4m3(d, shift=-7):
    """nearest UE4M3 value times 2^shift (ties to the larger)"""
    v = E4M3 * 2.0 ** shift
    i = np.clip(np.searchsorted(v, d), 1, len(v) - 1)
    lo, hi = v[i - 1], v[i]
    return np.where(d - lo < hi - d, lo, hi)


def enc_e8m0(d):
    """power of two at or above d (no clipping of the block maximum)"""
    return 2.0 ** np.ceil(np.log2(np.maximum(d, 1e-30)))


SCALES = {"f16": enc_f16, "e4m3": enc_e4m3, "e8m0": enc_e8m0, "f32": lambda d: d}


# ---- codebooks (level values; the quantizer scales them) ---------------------------
INT4 = np.arange(-8, 8, dtype=np.float64)
E2M1 = np.array([-6, -4, -3, -2, -1.5, -1, -0.5, 0, 0.5, 1, 1.5, 2, 3, 4, 6], dtype=np.float64)


def lloyd_levels(block=32, n=16, samples=400000, seed=1, iters=60):
    """16 levels for Gaussian blocks normalized so the block's largest-magnitude
    element is +1 (levels in [-1, 1], one of them exactly 1)."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((samples // block, block))
    i = np.abs(x).argmax(1)
    x = x / x[np.arange(len(x)), i][:, None]
    v = np.sort(x.ravel())
    lv = np.quantile(v, np.linspace(0.01, 0.99, n))
    lv[-1] = 1.0
    for _ in range(iters):
        th = (lv[1:] + lv[:-1]) / 2
        idx = np.searchsorted(th, v)
        for k in range(n - 1):
            sel = v[idx == k]
            if len(sel):
                lv[k] = sel.mean()
        lv[-1] = 1.0
        lv.sort()
    return lv


def nearest(levels, y):
    th = (levels[1:] + levels[:-1]) / 2
    return np.searchsorted(th, y)


def fake_quant_blocks(x, levels, scale_enc, search=True, min_offset=False, weight=None):
    """x: [n_blocks, B] -> dequantized. Scale search: candidates map the block's
    largest-magnitude element to various points of the codebook's range; the
    least-squares scale of each candidate assignment is kept if it lowers the
    squared error; the final scale is encoded, then elements re-rounded."""
    nb, B = x.shape
    i = np.abs(x).argmax(1)
    xm = x[np.arange(nb), i]                       # signed max
    lmax, lmin = levels.max(), levels.min()
    if min_offset:                                  # asymmetric: x = d*q + m, q in 0..15
        mn, mx = x.min(1), x.max(1)
        d = scale_enc(np.maximum((mx - mn) / 15.0, 1e-30))
        m = scale_enc(np.abs(mn)) * np.sign(mn)
        q = np.clip(np.round((x - m[:, None]) / d[:, None]), 0, 15)
        return q * d[:, None] + m[:, None]
    # candidate targets for the signed max: +lmax side or -lmin side, shrunk/stretched
    cands = []
    fracs = [1.0] if not search else list(np.linspace(0.80, 1.10, 13))
    for f in fracs:
        for tgt in (lmax, lmin):
            cands.append(xm / (tgt * f))
    best_err = np.full(nb, np.inf)
    best_d = np.ones(nb)
    W = np.ones_like(x) if weight is None else weight
    for s in cands:
        s = np.where(s == 0, 1e-30, s)
        q = levels[nearest(levels, x / s[:, None])]
        if search:
            num = (W * x * q).sum(1)
            den = (W * q * q).sum(1)
            d = np.where(den > 0, num / np.maximum(den, 1e-30), s)
        else:
            d = s
        err = (W * (x - d[:, None] * q) ** 2).sum(1)
        better = err < best_err
        best_err = np.where(better, err, best_err)
        best_d = np.where(better, d, best_d)
    sign = np.sign(best_d)
    dq = scale_enc(np.abs(best_d)) * sign
    dq = np.where(dq == 0, 1e-30, dq)
    q = levels[nearest(levels, x / dq[:, None])]
    return dq[:, None] * q


WEIGHTING = None


def fake_quant_matrix(w, spec):
    block, levels, scale, search, minoff = spec
    rows, cols = w.shape
    pad = (-cols) % block
    xr = np.pad(w.astype(np.float64), ((0, 0), (0, pad)))
    x = xr.reshape(-1, block)
    W = None
    if WEIGHTING:
        s2 = (xr ** 2).sum(1, keepdims=True) / cols
        full = {"x2": xr ** 2 + 1e-12, "sqrt": np.sqrt(2 * s2 + xr ** 2),
                "x2s": xr ** 2 + s2}[WEIGHTING]
        W = np.broadcast_to(full, xr.shape).reshape(-1, block)
    y = fake_quant_blocks(x, levels, SCALES[scale], search, minoff, W)
    return y.reshape(rows, cols + pad)[:, :cols].astype(np.float32)


def bits(spec, cols):
    block, levels, scale, search, minoff = spec
    nb = -(-cols // block)
    sbits = {"f16": 16, "e4m3": 8, "e8m0": 8, "f32": 32}[scale] * (2 if minoff else 1)
    return nb * (block * 4 + sbits) / cols


def specs():
    nl32 = lloyd_levels(32)
    nl16 = lloyd_levels(16)
    return {
        "int4/32 f16 amax (Q4_0 rule)": (32, INT4, "f16", False, False),
        "int4/32 f16 mse-search": (32, INT4, "f16", True, False),
        "int4/32 f16 +min (Q4_1 rule)": (32, INT4, "f16", False, True),
        "int4/16 e4m3 mse-search": (16, INT4, "e4m3", True, False),
        "e2m1/16 e4m3 amax": (16, E2M1, "e4m3", False, False),
        "e2m1/16 e4m3 mse-search": (16, E2M1, "e4m3", True, False),
        "e2m1/16 e8m0 amax": (16, E2M1, "e8m0", False, False),
        "e2m1/32 e8m0 amax (MXFP4)": (32, E2M1, "e8m0", False, False),
        "nl4/32 f16 mse-search": (32, nl32 * 8, "f16", True, False),
        "nl4/16 e4m3 mse-search": (16, nl16 * 8, "e4m3", True, False),
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="/tmp/cism-explore")
    ap.add_argument("--windows", type=int, default=0)
    ap.add_argument("--models", default="stories260K-hf,babyllama-tok105-hf")
    ap.add_argument("--only", default="")
    ap.add_argument("--weighting", default="", help="x2, sqrt or x2s: error weights of the scale search")
    a = ap.parse_args()
    global WEIGHTING
    WEIGHTING = a.weighting or None
    shared = os.path.join(ROOT, "..", "shared", "models")
    text = open(os.path.join(shared, "eval", "tinystories_valid_excerpt.txt"), encoding="utf-8").read()
    os.makedirs(a.out, exist_ok=True)
    for mname in a.models.split(","):
        base = os.path.join(a.out, mname + ".f32.cism")
        convert(os.path.join(shared, mname), base, overwrite=True, progress=None)
        from cism.ppl import tokenize
        toks = tokenize(base, text)
        r0 = perplexity(base, tokens=toks, ctx=256, method="half", max_windows=a.windows)
        print(f"{mname} f32: PPL {r0.ppl:.4f}", flush=True)
        src = fmt.CismFile(base)
        for name, spec in specs().items():
            if a.only and a.only not in name:
                continue
            path = os.path.join(a.out, mname + ".fq.cism")
            with open(base, "rb") as f:
                blob = bytearray(f.read())
            nbits = nparams = 0
            for t in src.tensors.values():
                if len(t.shape) != 2:
                    continue
                w = src.array(t.name)
                y = fake_quant_matrix(w, spec)
                blob[t.offset:t.offset + t.nbytes] = y.astype("<f4").tobytes()
                nbits += bits(spec, t.shape[1]) * w.size
                nparams += w.size
            with open(path, "wb") as f:
                f.write(blob)
            r = perplexity(path, tokens=toks, ctx=256, method="half", max_windows=a.windows)
            print(f"{mname} {name:32s} {nbits / nparams:5.2f} bpw(matrices)  PPL {r.ppl:.4f}  "
                  f"{100 * (r.ppl / r0.ppl - 1):+6.2f}%", flush=True)


if __name__ == "__main__":
    main()
