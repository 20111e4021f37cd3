"""Decode speed at long context per KV type (docs/KV_CACHE.md): one session per entry, prefilled
with ctx-1 tokens of an eval text after BOS; each repetition rewinds to that prefix and decodes
--gen greedy tokens; entries alternate (forward, then backward order), median tokens/s.

    PYTHONPATH=bindings_py CISM_LIB=build/release/libcism/libcism.so build/venv/bin/python \
        tools/kv_cache_speed.py --model build/cache/smol-q8.cism --ctx 2048 --gen 64 --reps 5 --kv f16,q8,q4a

A model without a tokenizer (a synthetic preset: cism.synthetic.get_synthetic) is prefilled with seeded
random token ids instead of the text. --probe also reads the read probe (cism.read_bandwidth at
--threads) right after every run and prints each run's bytes per token (the file plus the K and V rows
read at that context) times tokens/s as a share of that reading, and the median share: issue 18's
decode line.
"""
import argparse
import json
import os
import statistics
import time

import numpy as np

import cism


def kv_row_bytes(m, kv):
    """Bytes of the K and V rows of one position over every layer and KV head (kv: TYPE or K/V)."""
    per_dim = {"f32": 4.0, "f16": 2.0, "q8": 34 / 32, "q4a": 20 / 32}  # blocks of 32: q8 fp16 scale, q4a scale+min
    k, v = kv.split("/") if "/" in kv else (kv, kv)
    return m.n_layers * m.n_kv_heads * m.head_dim * (per_dim[k] + per_dim[v])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--ctx", type=int, default=2048, help="positions in the cache before decoding")
    ap.add_argument("--gen", type=int, default=64)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--kv", default="f16,q8,q4a", help="KV_TYPE or KV_TYPE:ROTATE entries")
    ap.add_argument("--probe", action="store_true", help="also print the read probe and each entry's share of it")
    ap.add_argument("--seed", type=int, default=0, help="seed of the random token ids (models without a tokenizer)")
    ap.add_argument("--text", default=os.path.join(os.path.dirname(__file__), "..", "..", "shared", "models", "eval",
                                                   "war_and_peace_excerpt.txt"))
    a = ap.parse_args()
    kinds = a.kv.split(",")
    with cism.Model(a.model) as m:
        try:
            tok = m.tokenizer
        except cism.TokenizerError:  # no tokenizer in the file: random ids
            tok = None
        if tok is not None:
            with open(a.text, encoding="utf-8") as f:
                toks = [m.bos_id] + list(tok.encode(f.read(), add_bos=False))[:a.ctx - 1]
        else:
            toks = [int(t) for t in np.random.default_rng(a.seed).integers(0, m.vocab_size, a.ctx)]
        sessions = {}
        for k in kinds:
            kv, rot = k.split(":") if ":" in k else (k, None)
            s = m.session(kv_type=kv, kv_rotate=None if rot is None else bool(int(rot)), n_ctx=len(toks) + a.gen + 8,
                          n_threads=a.threads)
            s.eval(toks)
            sessions[k] = s
        res = {k: [] for k in kinds}
        share = {k: [] for k in kinds}
        per_token = {k: os.path.getsize(a.model) + int(kv_row_bytes(m, k.split(":")[0]) * len(toks)) for k in kinds}
        probes = []
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
                if a.probe:  # the read probe right after each run: on a shared VM it moves by tens of %
                    probes.append(cism.read_bandwidth(a.threads))
                    share[k].append(res[k][-1] * per_token[k] / probes[-1])
        for k in kinds:
            row = {"kv": k, "ctx": len(toks), "gen": a.gen, "threads": a.threads,
                   "tok_s_median": round(statistics.median(res[k]), 2), "all": [round(x, 2) for x in res[k]]}
            if a.probe:
                row.update({"bytes_per_token": per_token[k],
                            "probe_gb_s": [round(min(probes) / 1e9, 1), round(max(probes) / 1e9, 1)],
                            "of_probe_median": round(statistics.median(share[k]), 3),
                            "of_probe": [round(x, 3) for x in share[k]]})
            print(json.dumps(row))
        for s in sessions.values():
            s.close()


if __name__ == "__main__":
    main()
