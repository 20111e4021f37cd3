"""Quantization on the families beyond the Llama layout: KL divergence of the
`q8` and `4bit` recipes against f32, with float and int8 activations.

    python tools/family_quality.py [--tokens 2048] [--ctx 256]

Each family's first parity case (tests/python/test_parity_families.py and the
other test_parity_*.py files that define CASES) is built as a tiny random
checkpoint by transformers (as the tests build it), converted to f32, q8 and
4bit, and scored on the same random token ids (every position of windows of
--ctx). Random weights are not trained ones: the numbers show that every
recipe runs on every family and how it compares across families, not how a
trained model of the family quantizes. Prints a markdown table
(docs/QUALITY.md quotes it).
"""
from __future__ import annotations

import argparse
import importlib
import os
import sys
import tempfile
from pathlib import Path

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "bindings_py"))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "python"))

MODULES = ("test_parity_families", "test_parity_lfm2", "test_parity_qwen35")


def cases():
    """(family, case name, module) of each family's first case."""
    seen = {}
    for mod_name in MODULES:
        try:
            mod = importlib.import_module(mod_name)
        except ImportError:
            continue
        for case in mod.CASES:
            fam = case.split("-")[0]
            if fam not in seen:
                seen[fam] = (case, mod)
    return seen


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tokens", type=int, default=2048)
    ap.add_argument("--ctx", type=int, default=256)
    args = ap.parse_args()
    import numpy as np
    from cism.convert import convert
    from cism.ppl import kl_divergence
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for fam, (case, mod) in cases().items():
            folder = os.path.join(tmp, case)
            mod.make(case, Path(folder), seed=sum(map(ord, case)))
            f32 = os.path.join(tmp, f"{case}.f32.cism")
            convert(folder, f32, progress=None)
            vocab = mod.VOCAB
            tokens = np.random.default_rng(0).integers(3, vocab, args.tokens).tolist()
            for recipe in ("q8", "4bit"):
                path = os.path.join(tmp, f"{case}.{recipe}.cism")
                convert(folder, path, quant=recipe, progress=None)
                for act in (False, True):
                    r = kl_divergence(path, f32, tokens=tokens, ctx=args.ctx, act_quant=act)
                    rows.append((fam, case, recipe, "int8" if act else "float", r))
    print("| family | case | recipe | activations | mean KLD | same top |")
    print("|---|---|---|---|---:|---:|")
    for fam, case, recipe, act, r in rows:
        print(f"| {fam} | {case} | {recipe} | {act} | {r.kld_mean:.6f} ± {r.kld_stderr:.6f} | {100 * r.same_top:.2f}% |")


if __name__ == "__main__":
    main()
