"""What a quantized KV cache costs (docs/KV_CACHE.md): perplexity and KL divergence of each KV type
against the f16 cache of the same model, with cism.ppl.kl_divergence (method full).

    PYTHONPATH=bindings_py CISM_LIB=build/release/libcism/libcism.so build/venv/bin/python \
        tools/kv_cache_quality.py --model build/cache/smol-q8.cism --ctx 2048 --windows 2 \
        --texts war_and_peace_excerpt,tinystories_valid_excerpt --kv q8:0,q8:1,q4a:0,q4a:1

--kv: KV_TYPE:ROTATE entries (ROTATE 0, 1, or d for the type's default). One JSON line per text and entry.
"""
import argparse
import json
import os
import time

import cism
from cism.ppl import kl_divergence


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--ctx", type=int, default=2048)
    ap.add_argument("--windows", type=int, default=2, help="windows of ctx-1 tokens per text (0 = all)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--eval-dir", default=os.path.join(os.path.dirname(__file__), "..", "..", "shared", "models", "eval"))
    ap.add_argument("--texts", default="war_and_peace_excerpt,tinystories_valid_excerpt")
    ap.add_argument("--kv", default="q8:0,q8:1,q4a:0,q4a:1")
    a = ap.parse_args()
    with cism.Model(a.model) as m:
        for name in a.texts.split(","):
            with open(os.path.join(a.eval_dir, name + ".txt"), encoding="utf-8") as f:
                text = f.read()
            for entry in a.kv.split(","):
                kv, rot = entry.split(":") if ":" in entry else (entry, "d")
                t0 = time.time()
                r = kl_divergence(m, m, text=text, ctx=a.ctx, method="full", n_threads=a.threads, max_windows=a.windows,
                                  kv_type=kv, kv_rotate=None if rot == "d" else bool(int(rot)), base_kv_type="f16")
                print(json.dumps({"text": name, "kv": kv, "rot": rot, "ctx": a.ctx, "scored": r.model.n_scored,
                                  "ppl": round(r.model.ppl, 4), "ppl_f16": round(r.base.ppl, 4),
                                  "dppl_pct": round(100 * (r.model.ppl / r.base.ppl - 1), 3),
                                  "kld": round(r.kld_mean, 6), "kld_se": round(r.kld_stderr, 6),
                                  "same_top_pct": round(100 * r.same_top, 2), "seconds": round(time.time() - t0, 1)}),
                      flush=True)


if __name__ == "__main__":
    main()
