"""`cism bench --parallel 1,2,4,8`: decode of several sequences at once.

For each count P: P sessions each prefill their own prompt (n_prompt random
tokens), then decode n_gen tokens greedily together, one cism_batch step per
token (every weight read once for the P rows). Reported per P: aggregate
tokens/s (P * n_gen / seconds), per-sequence latency (ms per step) and the
aggregate's ratio to P = 1 measured in the same run. The counts are measured
in alternation, `reps` rounds after a warm-up; medians are shown. "sequential"
is the same P sessions stepped one eval each (what a server without batching
pays), for comparison.
"""
from __future__ import annotations

import statistics
import time
from typing import Dict, List

import numpy as np


def _decode_round(model, batch, sessions, prompts, n_gen: int, batched: bool) -> float:
    for s, p in zip(sessions, prompts):
        s.reset()
        s.eval(p)
    nxt = [int(np.argmax(s.logits_view())) for s in sessions]
    t0 = time.perf_counter()
    for _ in range(n_gen):
        if batched:
            errs = batch.eval([(s, [t]) for s, t in zip(sessions, nxt)])
            bad = [e for e in errs if e is not None]
            if bad:
                raise bad[0]
        else:
            for s, t in zip(sessions, nxt):
                s.eval([t])
        nxt = [int(np.argmax(s.logits_view())) for s in sessions]
    return time.perf_counter() - t0


def bench_parallel(model, counts: List[int], n_prompt: int = 128, n_gen: int = 64, threads: int = 0, reps: int = 3,
                   kv_type: str = "f16", kernel_tier: str = "auto", seed: int = 0, sequential: bool = True,
                   act: str = "auto") -> Dict:
    from .actmodes import act_kwargs
    from .batch import Batch
    from .session import Session
    if not counts or min(counts) < 1:
        raise ValueError("--parallel: give counts of at least 1, e.g. 1,2,4,8")
    n_ctx = n_prompt + n_gen + 1
    if n_ctx > model.context_length:
        raise ValueError(f"the model has {model.context_length} positions; -p {n_prompt} + -n {n_gen} do not fit")
    rng = np.random.default_rng(seed)
    pmax = max(counts)
    prompts = [rng.integers(0, model.vocab_size, max(n_prompt, 1), dtype=np.int32) for _ in range(pmax)]
    act_args = act_kwargs(act)
    sessions = [Session(model, n_ctx=n_ctx, n_threads=threads, kv_type=kv_type, kernel_tier=kernel_tier, **act_args)
                for _ in range(pmax)]
    batch = Batch(model, n_threads=threads, max_tokens=max(pmax, 1), n_ctx=n_ctx, kv_type=kv_type,
                  kernel_tier=kernel_tier, **act_args)
    modes = [(p, True) for p in counts] + ([(p, False) for p in counts if p > 1] if sequential else [])
    times: Dict[tuple, List[float]] = {m: [] for m in modes}
    try:
        _decode_round(model, batch, sessions[:pmax], prompts, min(n_gen, 4), True)  # warm-up
        for _ in range(reps):
            for p, batched in modes:
                times[(p, batched)].append(_decode_round(model, batch, sessions[:p], prompts[:p], n_gen, batched))
    finally:
        batch.close()
        for s in sessions:
            s.close()
    rows = []
    base = None
    for p, batched in modes:
        med = statistics.median(times[(p, batched)])
        agg = p * n_gen / med
        if p == 1 and batched:
            base = agg
        rows.append({"sequences": p, "mode": "batched" if batched else "sequential", "seconds": times[(p, batched)],
                     "aggregate_tokens_per_second": agg, "ms_per_step": 1000.0 * med / n_gen})
    for r in rows:
        r["vs_one"] = r["aggregate_tokens_per_second"] / base if base else None
    return {"n_prompt": n_prompt, "n_gen": n_gen, "threads": threads, "kv_type": kv_type, "act": act, "reps": reps,
            "rows": rows}


def format_parallel(res: Dict, description: str) -> str:
    lines = [f"model:   {description}",
             f"threads: {res['threads'] or 'default'}   kv cache: {res['kv_type']}   "
             f"activations: {res.get('act_runs') or res['act']}   "
             f"prompt {res['n_prompt']} tokens, "
             f"{res['n_gen']} generated per sequence, median of {res['reps']} alternated rounds",
             f"{'seqs':>5} {'mode':<11} {'aggregate t/s':>14} {'ms/step':>9} {'vs 1 seq':>9}"]
    for r in res["rows"]:
        lines.append(f"{r['sequences']:>5} {r['mode']:<11} {r['aggregate_tokens_per_second']:>14.1f} "
                     f"{r['ms_per_step']:>9.2f} {r['vs_one']:>8.2f}x")
    return "\n".join(lines)


def plot_parallel(res: Dict, description: str, path: str) -> None:
    """`cism bench --parallel ... --plot FILE`: aggregate tokens/s against the
    number of sequences, batched and sequential, with the ideal (P times one
    sequence) as a dotted line. Needs matplotlib (the plot extra)."""
    try:
        import matplotlib
        matplotlib.use("Agg")   # files only, no display
        import matplotlib.pyplot as plt
    except ImportError:
        raise RuntimeError("--plot needs matplotlib: pip install './bindings_py[plot]'") from None
    fig, ax = plt.subplots(figsize=(6, 4), dpi=100)
    labels = {"batched": "libcism, one batch per step", "sequential": "libcism, one eval per sequence"}
    for mode, style in (("batched", "o-"), ("sequential", "s--")):
        rows = sorted((r for r in res["rows"] if r["mode"] == mode), key=lambda r: r["sequences"])
        if rows:
            ax.plot([r["sequences"] for r in rows], [r["aggregate_tokens_per_second"] for r in rows], style,
                    label=labels[mode])
    one = [r for r in res["rows"] if r["mode"] == "batched" and r["sequences"] == 1]
    if one:
        ps = sorted({r["sequences"] for r in res["rows"]})
        ax.plot(ps, [one[0]["aggregate_tokens_per_second"] * p for p in ps], ":", color="gray",
                label="P x one sequence (ideal)")
    ax.set_xscale("log", base=2)
    xs = sorted({r["sequences"] for r in res["rows"]})
    ax.set_xticks(xs, [str(x) for x in xs])
    ax.set_ylim(bottom=0)
    ax.set_xlabel("sequences decoded at once (P)")
    ax.set_ylabel("aggregate decode tokens/s")
    import textwrap
    ax.set_title(f"{textwrap.fill(description, 80)}\nthreads {res['threads'] or 'default'}, prompt {res['n_prompt']}, "
                 f"{res['n_gen']} tokens per sequence, median of {res['reps']}", fontsize=8)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, metadata={"Software": None})   # no version stamp: the same data gives the same file
    plt.close(fig)
