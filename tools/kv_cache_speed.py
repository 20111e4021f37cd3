"""Decode speed at long context per KV type (docs/KV_CACHE.md): one session per entry, prefilled
with ctx-1 tokens of an eval text after BOS; each repetition rewinds to that prefix and decodes
--gen greedy tokens; entries alternate (forward, then backward order), median tokens/s.

    PYTHONPATH=bindings_py CISM_LIB=build/release/libcism/libcism.so build/venv/bin/python \
        tools/kv_cache_speed.py --model build/cache/smol-q8.cism --ctx 2048 --gen 64 --reps 5 --kv f16,q8,q4a
"""
import argparse
import json
import os
import time

import numpy as np

import cism


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--ctx", type=int, default=2048, help="positions in the cache before decoding")
    ap.add_argument("--gen", type=int, default=64)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--kv", default="f16,q8,q4a", help="KV_TYPE or KV_TYPE:ROTATE entries")
    ap.add_argument("--text", default=os.path.join(os.path.dirname(__file__), "..", "..", "shared", "models", "eval",
                                                   "war_and_peace_excerpt.txt"))
    a = ap.parse_args()
    kinds = a.kv.split(",")
    with cism.Model(a.model) as m:
        with open(a.text, encoding="utf-8") as f:
            toks = [m.bos_id] + list(m.tokenizer.encode(f.read(), add_bos=False))[:a.ctx - 1]
        sessions = {}
        for k in kinds:
            kv, rot = k.split(":") if ":" in k else (k, None)
            s = m.session(kv_type=kv, kv_rotate=None if rot is None else bool(int(rot)), n_ctx=len(toks) + a.gen + 8,
                          n_threads=a.threads)
            s.eval(toks)
            sessions[k] = s
        res = {k: [] for k in kinds}
        for r in range(a.reps):
            for k in (kinds if r % 2 == 0 else kinds[::-1]):
                s = sessions[k]
                s.rewind(len(toks))
                t = int(toks[-1])
                t0 = time.perf_counter()
                for _ in range(a.gen):
                    s.eval([t])
                    t = int(np.argmax(s.logits()))
                res[k].append(a.gen / (time.perf_counter() - t0))
        for k in kinds:
            v = sorted(res[k])
            print(json.dumps({"kv": k, "ctx": len(toks), "gen": a.gen, "threads": a.threads,
                              "tok_s_median": round(v[len(v) // 2], 2), "all": [round(x, 2) for x in res[k]]}))
        for s in sessions.values():
            s.close()


if __name__ == "__main__":
    main()
