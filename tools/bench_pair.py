"""Two model files on the same tokens, in one process: for each repetition, in alternating
order, a prefill of --prompt tokens of an eval text (after BOS) and then --gen single-token
evals of the text's next tokens (no sampling), a fresh session per measurement (its creation
not timed). Prints the medians and the ratios B / A. Used for layouts of the same values
(e.g. the default GGUF import, q4ax16, against `layout="rows"`, q4a; docs/PERFORMANCE.md).
Its helpers (the run arguments, the tokens, the alternated medians) serve
tools/bench_outliers.py too.

    PYTHONPATH=bindings_py CISM_LIB=build/release/libcism/libcism.so build/venv/bin/python \\
        tools/bench_pair.py --a rows.cism --b native.cism --threads 1,2 --reps 7
"""
import argparse
import os
import random
import statistics
import time

import cism


def add_run_args(ap):
    """The arguments of one timed run: prompt and decode lengths, repetitions, threads, text."""
    ap.add_argument("--prompt", type=int, default=256, help="prefill tokens (including BOS)")
    ap.add_argument("--gen", type=int, default=64, help="single-token evals after the prefill")
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--threads", default="1", help="comma-separated thread counts")
    ap.add_argument("--text", default=os.path.join(os.path.dirname(__file__), "..", "..", "shared", "models", "eval",
                                                   "war_and_peace_excerpt.txt"))


def text_tokens(ap, a, m):
    """BOS and the first --prompt + --gen - 1 tokens of --text (an argparse error if it is shorter); for
    a model without a tokenizer (the synthetic presets of `cism bench`), seeded random token ids."""
    if a.prompt < 1 or a.gen < 1 or a.reps < 1:
        ap.error("--prompt, --gen and --reps must be at least 1")
    try:
        m.tokenizer
    except cism.TokenizerError:
        rng = random.Random(0)
        print(f"{m.path}: no tokenizer, {a.prompt + a.gen} seeded random token ids")
        return [rng.randrange(m.vocab_size) for _ in range(a.prompt + a.gen)]
    with open(a.text, encoding="utf-8") as f:
        toks = [m.bos_id] + list(m.tokenizer.encode(f.read(), add_bos=False))[:a.prompt + a.gen - 1]
    if len(toks) < a.prompt + a.gen:
        ap.error(f"the text has only {len(toks)} tokens")
    return toks


def time_session(m, toks, n_prompt, threads, **session_args):
    """Prefill and decode tokens/s of one fresh session."""
    s = m.session(n_ctx=len(toks) + 8, n_threads=threads, **session_args)
    try:
        t0 = time.perf_counter()
        s.eval(toks[:n_prompt])
        t1 = time.perf_counter()
        for t in toks[n_prompt:]:
            s.eval([t])
        t2 = time.perf_counter()
    finally:
        s.close()
    return n_prompt / (t1 - t0), (len(toks) - n_prompt) / (t2 - t1)


def alternated_medians(reps, first, second, measure):
    """measure(key) -> (prefill, decode) tokens/s for the two keys, their order swapped
    every repetition; the medians per key."""
    res = {first: ([], []), second: ([], [])}
    for r in range(reps):
        for k in ((first, second) if r % 2 == 0 else (second, first)):
            pp, tg = measure(k)
            res[k][0].append(pp)
            res[k][1].append(tg)
    return {k: (statistics.median(v[0]), statistics.median(v[1])) for k, v in res.items()}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--a", required=True, help="the baseline .cism file")
    ap.add_argument("--b", required=True, help="the .cism file compared with it")
    add_run_args(ap)
    a = ap.parse_args()
    with cism.Model(a.a) as ma, cism.Model(a.b) as mb:
        toks = text_tokens(ap, a, ma)
        if toks != text_tokens(ap, a, mb):
            ap.error("the two models tokenize the text differently")
        print(f"A {a.a}\nB {a.b}\nprefill {a.prompt} tokens, decode {a.gen} tokens, {a.reps} alternated repetitions,"
              f" tier {cism.kernel_tiers()[-1]}, libcism {cism.library_version()}")
        print(f"{'threads':>7} {'prefill A':>10} {'B':>8} {'B/A':>6} {'decode A':>9} {'B':>8} {'B/A':>6}")
        for th in (int(x) for x in a.threads.split(",")):
            med = alternated_medians(a.reps, "a", "b", lambda k: time_session(ma if k == "a" else mb, toks, a.prompt, th))
            print(f"{th:>7} {med['a'][0]:>10.1f} {med['b'][0]:>8.1f} {med['b'][0] / med['a'][0]:>6.3f}"
                  f" {med['a'][1]:>9.1f} {med['b'][1]:>8.1f} {med['b'][1] / med['a'][1]:>6.3f}")


if __name__ == "__main__":
    main()
