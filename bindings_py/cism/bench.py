"""`cism bench`: prefill and decode speed of a model.

Prefill: evaluate n_prompt random token ids in one call on an empty session.
Decode: from a one-token context, generate n_gen tokens greedily with
cism_generate (end-of-sequence ignored), i.e. n_gen single-token steps plus
sampling. Each test runs `reps` times after one warm-up; the median is
reported, with the spread. Models: a .cism file, or a synthetic preset
(cism.synthetic) generated once into the cache folder.

Pieces are separate functions (measure_prefill, measure_decode, bench_model,
format_table) so other reports (bandwidth, a comparison with another engine)
can reuse them.
"""
from __future__ import annotations

import argparse
import ctypes
import json
import statistics
import sys
import time
from dataclasses import asdict, dataclass, field
from typing import List, Optional

import numpy as np

from . import _lib
from .actmodes import ACT_HELP, FLOAT_WEIGHTS, act_kwargs, act_label, act_mode_arg
from .errors import check
from .kvtypes import kv_type_arg


@dataclass
class TestResult:
    test: str                  # "prefill" or "decode"
    n_tokens: int
    seconds: List[float] = field(default_factory=list)

    @property
    def median(self) -> float:
        return statistics.median(self.seconds)

    @property
    def tokens_per_second(self) -> float:
        return self.n_tokens / self.median

    @property
    def ms_per_token(self) -> float:
        return 1000.0 * self.median / self.n_tokens

    def spread(self) -> float:
        """(max - min) / median of the tokens/s over the repetitions."""
        if len(self.seconds) < 2:
            return 0.0
        tps = [self.n_tokens / s for s in self.seconds]
        return (max(tps) - min(tps)) / self.tokens_per_second


@dataclass
class BenchReport:
    model: str
    description: str
    threads: int
    kv_type: str
    results: List[TestResult]
    tier: str = "auto"         # kernel tier asked for ("auto": the library's choice)
    prefill_macs: float = 0.0  # multiply-adds per prefill token (weights and attention, the test's mean context)
    mac_peak: float = 0.0      # int8 multiply-adds per second of one core (cism.int8_mac_peak); 0: not shown
    threads_used: int = 0      # the session's thread count (the peak's multiple)
    act: str = "auto"          # activations asked for (cism.actmodes)
    act_runs: str = ""         # the activations the sessions ran (cism.actmodes.act_label)

    def to_json(self) -> str:
        d = asdict(self)
        for r, dr in zip(self.results, d["results"]):
            dr.update(median_s=r.median, tokens_per_second=r.tokens_per_second, ms_per_token=r.ms_per_token)
        return json.dumps(d, indent=1)


def _random_tokens(vocab: int, n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, vocab, n, dtype=np.int32)


def measure_prefill(session, tokens: np.ndarray) -> float:
    """Seconds to evaluate `tokens` on an emptied session."""
    session.reset()
    t0 = time.perf_counter()
    session.eval(tokens)
    return time.perf_counter() - t0


def measure_decode(session, sampler, first_token: int, n_gen: int) -> float:
    """Seconds for n_gen greedy decode steps after a one-token context."""
    session.reset()
    session.eval([first_token])
    n = ctypes.c_int32()
    t0 = time.perf_counter()
    st = _lib.lib.cism_generate(session.handle, sampler.handle, None, 0, n_gen, _lib.GENERATE_IGNORE_EOS,
                                _lib.cism_token_callback(), None, ctypes.byref(n))
    dt = time.perf_counter() - t0
    check(st)
    if n.value != n_gen:
        raise RuntimeError(f"decode produced {n.value} tokens, expected {n_gen}")
    return dt


def bench_model(model, n_prompt: int = 512, n_gen: int = 128, threads: int = 0, reps: int = 3,
                kv_type: str = "f16", n_batch: Optional[int] = None, seed: int = 0,
                kernel_tier: str = "auto", act: str = "auto") -> List[TestResult]:
    """Runs the prefill and decode tests on a loaded cism.Model (act: cism.actmodes)."""
    from .sampler import Sampler
    from .session import Session
    n_ctx = min(max(n_prompt, n_gen + 1, 16), model.context_length)
    if n_prompt > n_ctx or n_gen + 1 > n_ctx:
        raise ValueError(f"the model has {model.context_length} positions; -p {n_prompt} / -n {n_gen} do not fit")
    tokens = _random_tokens(model.vocab_size, max(n_prompt, 1), seed)
    results = []
    with Session(model, n_ctx=n_ctx, n_threads=threads, kv_type=kv_type, n_batch=n_batch,
                 kernel_tier=kernel_tier, **act_kwargs(act)) as s, Sampler() as smp:
        # warm-up: pages the weights in and starts the threads
        s.eval(tokens[:min(len(tokens), 8)])
        if n_prompt > 0:
            r = TestResult("prefill", n_prompt)
            for _ in range(reps):
                r.seconds.append(measure_prefill(s, tokens[:n_prompt]))
            results.append(r)
        if n_gen > 0:
            r = TestResult("decode", n_gen)
            for _ in range(reps):
                r.seconds.append(measure_decode(s, smp, int(tokens[0]), n_gen))
            results.append(r)
    return results


def prefill_macs_per_token(model, n_prompt: int) -> float:
    """Multiply-adds per token of a prefill of n_prompt tokens: every matrix once
    (the embedding table only as the tied head) and attention's q.k and p.v over
    the mean causal context, (n_prompt + 1) / 2 positions."""
    weights = model.n_params - (0 if model.tied_embeddings else model.vocab_size * model.dim)
    attention = 2 * model.n_layers * model.n_heads * model.head_dim * (n_prompt + 1) / 2
    return float(weights + attention)


def format_table(report: BenchReport) -> str:
    lines = [f"model:   {report.description}",
             f"threads: {report.threads or 'default'}   kv cache: {report.kv_type}   kernel tier: {report.tier}"
             f"   activations: {report.act_runs or report.act}"]
    if report.mac_peak:
        lines.append(f"int8 multiply-add peak: {report.mac_peak / 1e9:.1f} G MAC/s per core (cism.int8_mac_peak); "
                     "prefill's share of it per thread")
    lines.append(f"{'test':<8} {'tokens':>7} {'tokens/s':>10} {'ms/token':>10} {'reps':>5} {'spread':>7}"
                 + ("   G MAC/s" if report.prefill_macs else ""))
    for r in report.results:
        line = (f"{r.test:<8} {r.n_tokens:>7} {r.tokens_per_second:>10.2f} {r.ms_per_token:>10.3f} "
                f"{len(r.seconds):>5} {100 * r.spread():>6.1f}%")
        if r.test == "prefill" and report.prefill_macs:
            macs = report.prefill_macs * r.tokens_per_second
            line += f" {macs / 1e9:>9.1f}"
            if report.mac_peak:
                line += f" ({100 * macs / (report.mac_peak * max(report.threads_used, 1)):.0f}% of {report.threads_used} x peak)"
        lines.append(line)
    return "\n".join(lines)


def describe(model, label: str) -> str:
    return (f"{label} ({model.architecture}, {model.n_params / 1e6:.1f}M parameters, {model.weight_dtype}, "
            f"{model.weight_bytes / 1e6:.0f} MB of weights)")


def add_arguments(p: argparse.ArgumentParser) -> None:
    from .synthetic import PRESETS
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--preset", choices=sorted(PRESETS), help="a synthetic model of this shape (random weights)")
    src.add_argument("--model", "-m", help="a .cism file")
    from .quant import RECIPES
    p.add_argument("--dtype", default="f32", metavar="DTYPE",
                   help="weights of a synthetic model: f32 (default), f16, bf16, or a quantization recipe ("
                        + ", ".join(RECIPES) + "); with --vs a comma-separated list")
    p.add_argument("-p", "--prompt-tokens", type=int, default=512, help="prefill test length (default 512; 0 skips)")
    p.add_argument("-n", "--gen-tokens", type=int, default=128, help="decode test length (default 128; 0 skips)")
    p.add_argument("-t", "--threads", type=int, default=0, help="threads (default: the library's choice)")
    p.add_argument("-r", "--reps", type=int, default=3, help="repetitions of each test; the median is shown (default 3)")
    p.add_argument("--kv-type", default="f16", type=kv_type_arg, metavar="{f16,f32,q8,q4a,K/V}",
                   help="KV cache type (default f16; q8, q4a: quantized; K/V such as q8/q4a: K cache q8, "
                        "V cache q4a; docs/KV_CACHE.md)")
    p.add_argument("-b", "--batch", type=int, default=None, help="tokens per internal prefill step (default: library's)")
    p.add_argument("--seed", type=int, default=0, help="seed of the synthetic weights and the prompt tokens")
    p.add_argument("--act", default="auto", type=act_mode_arg, metavar="{auto,outliers,int8,float}", help=ACT_HELP)
    p.add_argument("--tier", default="auto", help="kernel tier: auto (default) or one of cism.kernel_tiers(), "
                                                   "e.g. scalar, avx2, avx512, neon")
    p.add_argument("--json", action="store_true", help="print the results as JSON")
    p.add_argument("--parallel", metavar="N,M", help="decode N, M, ... sequences at once through one batch "
                                                       "(aggregate tokens/s, ms per step; -p prompt and -n generated "
                                                       "tokens per sequence), e.g. 1,2,4,8")
    p.add_argument("--plot", metavar="FILE", help="with --parallel: also draw aggregate tokens/s against the number "
                                                  "of sequences into FILE (PNG; needs the plot extra: "
                                                  "pip install './bindings_py[plot]')")
    v = p.add_argument_group("comparison with another engine (needs the compare extra: pip install './bindings_py[compare]')")
    v.add_argument("--vs", metavar="ENGINE", help="run the same weights through ENGINE (llama.cpp) in the same process, "
                                                   "alternating the two rep by rep, and print the ratio")
    v.add_argument("--vs-type", metavar="TYPES", help="llama.cpp file types to compare with, one per --dtype entry "
                                                      "(F16, Q8_0, Q4_0, Q4_K_M, IQ4_NL; default: f16->F16, q8->Q8_0, "
                                                      "4bit/q4s/q4->Q4_0, nl4->IQ4_NL, mix->Q4_K_M)")
    v.add_argument("--threads-list", metavar="N,M", help="with --vs: thread counts to run (default: -t, or 1)")


def run(args: argparse.Namespace) -> int:
    from . import system_info
    from .model import Model
    if args.reps < 1:
        raise ValueError("--reps must be at least 1")
    if args.prompt_tokens < 0 or args.gen_tokens < 0:
        raise ValueError(f"-p {args.prompt_tokens} / -n {args.gen_tokens}: token counts must be 0 or more")
    if args.prompt_tokens == 0 and args.gen_tokens == 0:
        raise ValueError("nothing to measure: -p and -n are both 0 (give a prefill or a decode length)")
    if args.plot and not args.parallel:
        raise ValueError("--plot draws the --parallel results: add --parallel N,M,...")
    if args.vs:
        from .bench_vs import run_vs
        return run_vs(args)
    if args.preset:
        from .synthetic import get_synthetic
        path = get_synthetic(args.preset, args.dtype, args.seed)
        label = f"synthetic {args.preset}"
    else:
        path = args.model
        label = args.model
    if args.parallel:
        return _run_parallel(args, path, label)
    with Model(path) as model:
        results = bench_model(model, args.prompt_tokens, args.gen_tokens, args.threads, args.reps, args.kv_type,
                              args.batch, args.seed, args.tier, args.act)
        tier = args.tier if args.tier != "auto" else f"auto ({_lib.lib.cism_kernel_tier_name(0).decode()})"
        report = BenchReport(path, describe(model, label), args.threads, args.kv_type, results, tier, act=args.act,
                             act_runs=act_label(args.act, model.weight_dtype))
        if args.prompt_tokens > 0:
            from . import int8_mac_peak
            report.prefill_macs = prefill_macs_per_token(model, args.prompt_tokens)
            report.threads_used = args.threads or int(_lib.lib.cism_default_n_threads())
            if model.weight_dtype not in FLOAT_WEIGHTS and args.act != "float":  # the int8 peak: the ceiling
                report.mac_peak = int8_mac_peak(args.tier)
    if args.json:
        print(report.to_json())
    else:
        print(f"system:  {system_info()}")
        print(format_table(report))
    return 0


def _run_parallel(args: argparse.Namespace, path: str, label: str) -> int:
    from . import system_info
    from .bench_parallel import bench_parallel, format_parallel
    from .model import Model
    try:
        counts = [int(x) for x in args.parallel.split(",") if x.strip()]
    except ValueError:
        raise ValueError(f"--parallel: expected counts like 1,2,4,8, got {args.parallel!r}") from None
    with Model(path) as model:
        res = bench_parallel(model, counts, args.prompt_tokens, args.gen_tokens, args.threads, args.reps,
                             args.kv_type, args.tier, args.seed, act=args.act)
        res["act_runs"] = act_label(args.act, model.weight_dtype)
        desc = describe(model, label)
    if args.json:
        res["model"] = path
        print(json.dumps(res, indent=1))
    else:
        print(f"system:  {system_info()}")
        print(format_parallel(res, desc))
    if args.plot:
        from .bench_parallel import plot_parallel
        plot_parallel(res, desc, args.plot)
        print(f"plot:    {args.plot}", file=sys.stderr)
    return 0
