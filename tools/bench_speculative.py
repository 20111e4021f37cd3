#!/usr/bin/env python3
"""Decode speed of plain greedy decoding against speculative decoding (issue 13).

    PYTHONPATH=bindings_py python tools/bench_speculative.py -m smollm2-q8.cism [-t 1] [-n 128] [-r 3]
        [--draft draft.cism] [--json]

For each prompt (fixed below, committed before any tuning: six input-grounded
tasks, where the answer repeats much of the input, and three free ones) the
prompt is evaluated first (not timed), then the decode is timed: plain
(cism_generate_v2), prompt lookup, and with --draft a draft model, in
alternated repetitions (plain, lookup, draft, plain, ...); the median of each
is reported in tokens/s, with the speculative run's tokens per target eval
and its draft acceptance. Greedy, so every variant yields the same tokens
(checked). Not a test: the numbers depend on the machine and its load.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bindings_py"))

import cism  # noqa: E402
from cism.speculative import Speculator  # noqa: E402

PASSAGE = ("The lighthouse keeper climbed the spiral stairs every evening at dusk. He wound the clockwork, "
           "trimmed the wick and polished the great lens until it shone, and then he sat by the window with a "
           "mug of tea, watching the ships pass safely along the rocky coast.")
CODE = ("def average(values):\n    total = 0\n    count = 0\n    for v in values:\n        total = total + v\n"
        "        count = count + 1\n    if count == 0:\n        return 0\n    return total / count\n")
GROUNDED = {
    "repeat": "Repeat this passage word for word:\n\n" + PASSAGE,
    "fix-spelling": ("Correct the spelling in this paragraph and write the whole paragraph out again:\n\n"
                     "The lighthuose keeper climbed the spirall stairs every evenning at dusk. He wound the "
                     "clockwork, trimed the wick and polished the great lense until it shone."),
    "rewrite-code": "Rewrite this Python function with type hints and a docstring:\n\n" + CODE,
    "summarize-quotes": "Summarize this text in two sentences, quoting it where you can:\n\n" + PASSAGE,
    "continue-list": ("Continue this list with five more items in the same format:\n"
                      "1. Apple - a round red fruit that grows on trees.\n"
                      "2. Banana - a long yellow fruit that grows in bunches.\n"
                      "3. Cherry - a small red fruit with a stone inside.\n"),
    "json-fields": ('Write this record out again with the same fields, changing the city to "Paris":\n\n'
                    '{"name": "Alice Smith", "age": 34, "city": "London", "email": "alice@example.com", '
                    '"languages": ["English", "French"], "active": true}'),
}
FREE = {
    "story": "Write a short story about a dragon who learns to cook.",
    "explain": "Explain how rainbows form.",
    "advice": "Give me three tips for sleeping better.",
}


def _chat(model, text):
    from cism.chat import prompt_tokens
    return prompt_tokens(model, [{"role": "user", "content": text}])


def _run(model, ids, n_gen, threads, spec=None):
    """(generated ids, decode seconds, stats or None)"""
    with model.session(n_threads=threads) as s, cism.Sampler() as smp:
        s.eval(ids)
        for t in ids:
            smp.accept(t)
        t0 = time.perf_counter()
        if spec is None:
            out = s.generate_ids([], n_gen, smp)
        else:
            out = spec.generate_ids(s, [], n_gen, smp)
        dt = time.perf_counter() - t0
        return out, dt, (spec.stats if spec is not None else None)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-m", "--model", required=True, help="the target .cism model (a chat model)")
    ap.add_argument("--draft", help="also a draft model (.cism, the same vocabulary)")
    ap.add_argument("-t", "--threads", type=int, default=1)
    ap.add_argument("-n", "--gen-tokens", type=int, default=128)
    ap.add_argument("-r", "--reps", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    rows = []
    with cism.Model(args.model) as model:
        lookup = Speculator("lookup")
        draft = Speculator(args.draft, target=model, n_threads=args.threads) if args.draft else None
        variants = [("plain", None), ("lookup", lookup)] + ([("draft", draft)] if draft else [])
        for group, prompts in (("grounded", GROUNDED), ("free", FREE)):
            for name, text in prompts.items():
                ids = _chat(model, text)
                times = {v: [] for v, _ in variants}
                outs, stats = {}, {}
                _run(model, ids, 8, args.threads)  # warm the caches
                for _ in range(args.reps):
                    for v, spec in variants:
                        out, dt, st = _run(model, ids, args.gen_tokens, args.threads, spec)
                        times[v].append(len(out) / dt)
                        outs[v], stats[v] = out, st
                ok = all(outs[v] == outs["plain"] for v in outs)
                row = {"group": group, "prompt": name, "tokens": len(outs["plain"]), "identical": ok}
                for v, _ in variants:
                    row[v + "_tps"] = statistics.median(times[v])
                    if stats[v]:
                        row[v + "_per_eval"] = stats[v]["tokens_per_step"]
                        row[v + "_acceptance"] = stats[v]["acceptance"]
                        row[v + "_speedup"] = row[v + "_tps"] / row["plain_tps"]
                rows.append(row)
                if not args.json:
                    line = f"{group:<9} {name:<17} {row['tokens']:>4} tok  plain {row['plain_tps']:7.1f} t/s"
                    for v, _ in variants[1:]:
                        line += (f" | {v} {row[v + '_tps']:7.1f} t/s x{row[v + '_speedup']:.2f} "
                                 f"({row[v + '_per_eval']:.2f}/eval, {100 * row[v + '_acceptance']:.0f}% acc)")
                    print(line + ("" if ok else "  OUTPUT DIFFERS"), flush=True)
        lookup.close()
        if draft:
            draft.close()
    summary = {}
    for group in ("grounded", "free"):
        for v, _ in variants[1:]:
            sp = [r[v + "_speedup"] for r in rows if r["group"] == group]
            summary[f"{group}_{v}_median_speedup"] = statistics.median(sp)
    if args.json:
        print(json.dumps({"rows": rows, "summary": summary}, indent=1))
    else:
        print("median speedup: " + ", ".join(f"{k} x{v:.2f}" for k, v in summary.items()))
        print(f"(threads {args.threads}, {args.gen_tokens} tokens, median of {args.reps} alternated repetitions; "
              f"{cism.system_info().splitlines()[0] if cism.system_info() else ''})")
    return 0 if all(r["identical"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
