"""Where the int8-activation error of a real model comes from, per matrix class.

    python tools/act_quant_breakdown.py [--gguf FILE] [--tokens 2048] [--ctx 512]

From the real SmolLM2-135M-Instruct GGUF (tests/python/peer_sources.real_gguf,
pinned) it writes two imports: the exact f32 one (the reference) and the
default one (Q8_0 -> q8x16, Q4_1 -> q4a, both lossless), then, per matrix
class (Q/K/V, attention output, gate/up, down, the output head), a model whose
matrices of that class come from the default import and every other matrix
from the f32 one. Packed matrices take int8 activations and float ones never
do, and the packed weights are exactly the f32 ones, so the only difference
between such a model and the reference is int8 activations on the inputs of
that class: its KL divergence against f32 is that class's share. Each is
measured with outlier channels off and on (CISM_PARAM_ACT_OUTLIERS), plus
the whole default import both ways and with float activations (which shows
the weights themselves add nothing). The eval texts of ../shared/models/eval,
the first --tokens tokens of each, windows of --ctx, f16 KV as llama.cpp.
Prints a table; docs/QUANTIZATION.md quotes it.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "bindings_py"))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "python"))

CLASSES = {
    "qkv": ("attn_q", "attn_k", "attn_v"),
    "attn_output": ("attn_output",),
    "gate_up": ("ffn_gate", "ffn_up"),
    "down": ("ffn_down",),
    "head": ("output", "token_embd"),   # SmolLM2 ties its head to the embedding
}
TEXTS = ["tinystories_valid_excerpt.txt", "war_and_peace_excerpt.txt"]


def _class_of(name: str) -> str:
    leaf = name.split(".")[-1] if name.startswith("blk.") else name
    for c, leaves in CLASSES.items():
        if leaf in leaves:
            return c
    return ""


def mixed(f32_path: str, native_path: str, cls: str, out: str) -> None:
    """f32_path's file with the matrices of class `cls` taken from native_path."""
    from cism.format import CismFile, Writer
    a, b = CismFile(f32_path), CismFile(native_path)
    pick = {n: (b if _class_of(n) == cls else a) for n in a.tensors}
    w = Writer(a.metadata)
    for n in a.tensors:
        t = pick[n].tensors[n]
        w.add(n, t.dtype, t.shape, t.nbytes)
    with w.open(out, overwrite=True) as f:
        for n in a.tensors:
            f.write_tensor(n, pick[n].raw(n))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gguf", help="the GGUF (default: the pinned real model, downloaded once)")
    ap.add_argument("--tokens", type=int, default=2048, help="tokens of each eval text (default 2048)")
    ap.add_argument("--ctx", type=int, default=512)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    import cism
    from cism.convert import convert
    from cism.ppl import kl_divergence
    gguf = args.gguf
    if not gguf:
        from peer_sources import real_gguf
        gguf = real_gguf()
    shared = os.path.join(HERE, "..", "..", "shared", "models", "eval")
    with tempfile.TemporaryDirectory() as d:
        f32, native = os.path.join(d, "f32.cism"), os.path.join(d, "native.cism")
        convert(gguf, f32, dtype="f32", progress=None)
        convert(gguf, native, progress=None)
        with cism.Model(f32) as ref:
            texts = []
            for name in TEXTS:
                with open(os.path.join(shared, name), encoding="utf-8") as fh:
                    texts.append(ref.tokenizer.encode(fh.read())[:args.tokens])

        def kld(path: str, **kw):
            rs = [kl_divergence(path, f32, tokens=t, ctx=args.ctx, kv_f16=True, n_threads=args.threads, **kw)
                  for t in texts]
            n = [r.model.n_scored for r in rs]
            return (sum(r.kld_mean * k for r, k in zip(rs, n)) / sum(n),
                    sum(r.same_top * k for r, k in zip(rs, n)) / sum(n))

        rows = []
        for cls in CLASSES:
            p = os.path.join(d, f"{cls}.cism")
            mixed(f32, native, cls, p)
            rows.append((f"int8 inputs of {cls} only", kld(p, act_outliers=False), kld(p, act_outliers=True)))
            os.remove(p)
        rows.append(("all (the default import)", kld(native, act_outliers=False), kld(native, act_outliers=True)))
        flt = kld(native, act_quant=False)
        base_f16 = kld(f32)
    print(f"real SmolLM2-135M-Instruct ({os.path.basename(gguf)}), {len(texts)} texts x {args.tokens} tokens, "
          f"ctx {args.ctx}, f16 KV; KL divergence against the f32 import (f32 KV)")
    print(f"{'int8 activations on':<32} {'KLD, no outliers':>17} {'same top':>9} {'KLD, outliers':>14} {'same top':>9}")
    for name, off, on in rows:
        print(f"{name:<32} {off[0]:>17.6f} {100 * off[1]:>8.2f}% {on[0]:>14.6f} {100 * on[1]:>8.2f}%")
    print(f"{'none (default import, float act.)':<32} {flt[0]:>17.6f} {100 * flt[1]:>8.2f}%")
    print(f"{'none (f32 import, f16 KV)':<32} {base_f16[0]:>17.6f} {100 * base_f16[1]:>8.2f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
