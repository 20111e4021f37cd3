#!/usr/bin/env python3
"""llama.cpp's prompt-lookup decoding on the prompts of tools/bench_speculative.py (the peer
of issue 13's benchmark). Run it with a Python that has llama-cpp-python (pinned 0.3.36) and
this checkout's cism package (for the prompts' chat-formatted token ids, so both engines get
the same tokens):

    PYTHONPATH=bindings_py /path/to/peer/python tools/bench_lookup_llamacpp.py \\
        -m SmolLM2-135M-Instruct.Q4_1.gguf -c model.cism [-t 1] [-n 128] [-r 3]

For each prompt, greedy decoding with llama-cpp-python's default decode and with its
`LlamaPromptLookupDecoding` draft model (num_pred_tokens 10, max_ngram_size 2: its defaults),
in alternated repetitions; decode tokens/s from the first generated token to the last (the
prompt's evaluation is not counted, as in bench_speculative.py). Prints per-prompt medians,
the speedup, whether lookup kept the plain tokens, and the medians of the speedups. Not a
test: the numbers depend on the machine and its load.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from bench_speculative import FREE, GROUNDED, _chat  # noqa: E402


def _decode(llm, ids, n_gen):
    """(generated tokens, decode seconds after the first token)"""
    out, t_first = [], None
    llm.reset()
    for tok in llm.generate(ids, temp=0.0, top_k=1, reset=True):
        if t_first is None:
            t_first = time.perf_counter()
        if tok == llm.token_eos() or len(out) >= n_gen:
            break
        out.append(tok)
    return out, time.perf_counter() - (t_first or time.perf_counter())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-m", "--gguf", required=True, help="the GGUF model llama.cpp runs")
    ap.add_argument("-c", "--cism", required=True, help="a .cism of the same model (its chat template and tokenizer)")
    ap.add_argument("-t", "--threads", type=int, default=1)
    ap.add_argument("-n", "--gen-tokens", type=int, default=128)
    ap.add_argument("-r", "--reps", type=int, default=3)
    args = ap.parse_args()
    import cism
    import llama_cpp
    from llama_cpp.llama_speculative import LlamaPromptLookupDecoding
    with cism.Model(args.cism) as m:
        prompts = [("grounded", k, _chat(m, v)) for k, v in GROUNDED.items()] + \
                  [("free", k, _chat(m, v)) for k, v in FREE.items()]
    kw = dict(n_ctx=1024, n_threads=args.threads, n_threads_batch=args.threads, verbose=False, logits_all=False)
    plain = llama_cpp.Llama(args.gguf, **kw)
    lookup = llama_cpp.Llama(args.gguf, draft_model=LlamaPromptLookupDecoding(), **kw)
    speed = {"grounded": [], "free": []}
    for kind, name, ids in prompts:
        rates = {"plain": [], "lookup": []}
        toks = {}
        for _ in range(args.reps):
            for label, llm in (("plain", plain), ("lookup", lookup)):
                out, dt = _decode(llm, ids, args.gen_tokens)
                toks[label] = out
                rates[label].append((len(out) - 1) / dt if dt > 0 and len(out) > 1 else float("nan"))
        p, q = statistics.median(rates["plain"]), statistics.median(rates["lookup"])
        speed[kind].append(q / p)
        print(f"{kind:9s} {name:18s} {len(toks['plain']):4d} tok  plain {p:7.1f} t/s | lookup {q:7.1f} t/s "
              f"x{q / p:.2f}  same tokens: {toks['plain'] == toks['lookup']}")
    print(f"median speedup: grounded x{statistics.median(speed['grounded']):.2f}, "
          f"free x{statistics.median(speed['free']):.2f}")
    print(f"(llama-cpp-python {llama_cpp.__version__}, LlamaPromptLookupDecoding defaults, threads {args.threads}, "
          f"n_ctx 1024, {args.gen_tokens} tokens, median of {args.reps} alternated repetitions)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
