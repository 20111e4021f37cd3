"""What the outlier channels cost (issue 19; docs/OUTLIER_COST.md): int8 activations with outlier
channels (the default) against plain int8 activations on the same model file, in one process. Each
repetition times, for both settings in alternating order, a prefill of --prompt tokens of an eval
text (after BOS) and then --gen single-token evals of the text's next tokens (the same tokens for
both: no sampling); a fresh session per measurement, its creation not timed. Prints the medians and
the on/off ratios.

    PYTHONPATH=bindings_py CISM_LIB=build/release/libcism/libcism.so build/venv/bin/python \\
        tools/bench_outliers.py --model build/cache/smol-q8.cism --threads 1,2 --reps 7
"""
import argparse

import cism
from bench_pair import add_run_args, alternated_medians, text_tokens, time_session


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, help="a .cism or .gguf file")
    add_run_args(ap)
    a = ap.parse_args()
    with cism.Model(a.model) as m:
        toks = text_tokens(ap, a, m)
        print(f"model {a.model}, prefill {a.prompt} tokens, decode {a.gen} tokens, {a.reps} alternated repetitions,"
              f" tier {cism.kernel_tiers()[-1]}, libcism {cism.library_version()}")
        print(f"{'threads':>7} {'prefill on':>11} {'off':>9} {'on/off':>7} {'decode on':>10} {'off':>8} {'on/off':>7}")
        for th in (int(x) for x in a.threads.split(",")):
            med = alternated_medians(a.reps, True, False,
                                     lambda mode: time_session(m, toks, a.prompt, th, act_outliers=mode))
            print(f"{th:>7} {med[True][0]:>11.1f} {med[False][0]:>9.1f} {med[True][0] / med[False][0]:>7.3f}"
                  f" {med[True][1]:>10.1f} {med[False][1]:>8.1f} {med[True][1] / med[False][1]:>7.3f}")


if __name__ == "__main__":
    main()
