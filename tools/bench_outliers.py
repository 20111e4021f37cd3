"""What the outlier channels cost (issue 19; docs/PERFORMANCE.md "What the outlier channels
cost"): int8 activations with outlier channels (the default) against plain int8 activations on
the same model file, in one process. Each repetition times, for both settings in alternating
order, a prefill of --prompt tokens of an eval text (after BOS) and then --gen single-token
evals of the text's next tokens (the same tokens for both: no sampling); a fresh session per
measurement, its creation not timed. Prints the medians and the on/off ratios.

    PYTHONPATH=bindings_py CISM_LIB=build/release/libcism/libcism.so build/venv/bin/python \\
        tools/bench_outliers.py --model build/cache/smol-q8.cism --threads 1,2 --reps 7
"""
import argparse
import os
import statistics

import cism
from bench_pair import time_session


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, help="a .cism or .gguf file")
    ap.add_argument("--prompt", type=int, default=256, help="prefill tokens (including BOS)")
    ap.add_argument("--gen", type=int, default=64, help="single-token evals after the prefill")
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--threads", default="1", help="comma-separated thread counts")
    ap.add_argument("--text", default=os.path.join(os.path.dirname(__file__), "..", "..", "shared", "models", "eval",
                                                   "war_and_peace_excerpt.txt"))
    a = ap.parse_args()
    if a.prompt < 1 or a.gen < 1 or a.reps < 1:
        ap.error("--prompt, --gen and --reps must be at least 1")
    with cism.Model(a.model) as m, open(a.text, encoding="utf-8") as f:
        toks = [m.bos_id] + list(m.tokenizer.encode(f.read(), add_bos=False))[:a.prompt + a.gen - 1]
        if len(toks) < a.prompt + a.gen:
            ap.error(f"the text has only {len(toks)} tokens")
        print(f"model {a.model}, prefill {a.prompt} tokens, decode {a.gen} tokens, {a.reps} alternated repetitions,"
              f" tier {cism.kernel_tiers()[-1]}, libcism {cism.library_version()}")
        print(f"{'threads':>7} {'prefill on':>11} {'off':>9} {'on/off':>7} {'decode on':>10} {'off':>8} {'on/off':>7}")
        for th in (int(x) for x in a.threads.split(",")):
            res = {True: ([], []), False: ([], [])}
            for r in range(a.reps):
                for mode in ((True, False) if r % 2 == 0 else (False, True)):
                    pp, tg = time_session(m, toks, a.prompt, th, act_outliers=mode)
                    res[mode][0].append(pp)
                    res[mode][1].append(tg)
            med = {k: (statistics.median(v[0]), statistics.median(v[1])) for k, v in res.items()}
            print(f"{th:>7} {med[True][0]:>11.1f} {med[False][0]:>9.1f} {med[True][0] / med[False][0]:>7.3f}"
                  f" {med[True][1]:>10.1f} {med[False][1]:>8.1f} {med[True][1] / med[False][1]:>7.3f}")


if __name__ == "__main__":
    main()
