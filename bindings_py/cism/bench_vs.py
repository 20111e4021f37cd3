"""`cism bench --vs llama.cpp`: libcism and llama.cpp on the same weights, in
one process, alternating rep by rep.

For every pairing (a libcism dtype or recipe against a llama.cpp file type,
e.g. q8 against Q8_0) and every thread count: both engines load the same
synthetic weights (cism.synthetic's values; llama.cpp's GGUF written from them
and quantized by llama.cpp itself), then each repetition runs prefill and
decode on one engine and then the other (the order flips every repetition),
so slow drift from other load on the machine hits both alike. Reported: each
engine's median tokens/s with min-max, ms/token, weight bytes read per decoded
token (what each engine's own file holds: every matrix, the output head
included, one embedding row when the head is separate) plus the KV cache at
the mean position, the effective GB/s, and its share of the read bandwidth
measured by libcism's probe at the same thread count; and the ratio
libcism / llama.cpp per repetition with median, min and max.
"""
from __future__ import annotations

import json
import os
import statistics
import time
from dataclasses import asdict, dataclass, field
from typing import Dict, List, Optional, Tuple

import numpy as np

from .bench import _random_tokens, measure_decode, measure_prefill


@dataclass
class Side:
    engine: str
    label: str                 # dtype / recipe or llama.cpp type
    detail: str                # matrices by type
    bytes_per_token: int       # weights read per decoded token
    seconds: List[float] = field(default_factory=list)

    def tps(self, n: int) -> List[float]:
        return [n / s for s in self.seconds]


@dataclass
class Row:
    pair: str
    threads: int
    test: str                  # "pp512", "tg128"
    n_tokens: int
    ours: Side
    peer: Side
    kv_bytes: int              # KV cache read per decoded token at the mean position (both engines: f16)
    bandwidth: float           # bytes/s measured at this thread count

    def ratios(self) -> List[float]:
        return [p / o for o, p in zip(self.ours.seconds, self.peer.seconds)]

    def summary(self) -> Dict[str, float]:
        d: Dict[str, float] = {}
        for name, side in (("ours", self.ours), ("peer", self.peer)):
            t = side.tps(self.n_tokens)
            med = statistics.median(t)
            d[f"{name}_tps"] = med
            d[f"{name}_min"] = min(t)
            d[f"{name}_max"] = max(t)
            d[f"{name}_ms"] = 1000.0 / med
            if self.test.startswith("tg"):
                gbs = (side.bytes_per_token + self.kv_bytes) * med / 1e9
                d[f"{name}_gbs"] = gbs
                d[f"{name}_bw"] = gbs * 1e9 / self.bandwidth if self.bandwidth else 0.0
        r = self.ratios()
        d.update(ratio=statistics.median(r), ratio_min=min(r), ratio_max=max(r))
        return d


def cism_bytes_per_token(path: str) -> Tuple[int, str]:
    """Weight bytes a decoded token reads from a .cism file, and its matrices by dtype."""
    from . import format as fmt
    f = fmt.CismFile(path)
    total, types = 0, {}
    tied = "output" not in f.tensors
    for name, t in f.tensors.items():
        if len(t.shape) != 2:
            continue
        dt = fmt.DTYPE_NAMES.get(t.dtype, str(t.dtype))
        types[dt] = types.get(dt, 0) + 1
        total += t.nbytes // t.shape[0] if name == "token_embd" and not tied else t.nbytes
    return total, ", ".join(f"{k} {v}" for k, v in sorted(types.items()))


def kv_bytes(preset, n_gen: int) -> int:
    """f16 K and V read per decoded token at the mean position of an n_gen-token decode from one token."""
    return 2 * preset.n_layers * preset.n_kv_heads * preset.head_dim * 2 * (1 + n_gen // 2)


def parse_pairs(dtypes: str, peers: Optional[str]) -> List[Tuple[str, str]]:
    from .llamacpp import DEFAULT_PEER, FTYPES
    ours = [d for d in dtypes.split(",") if d]
    if peers:
        theirs = [p for p in peers.split(",") if p]
        if len(theirs) == 1:
            theirs = theirs * len(ours)
        if len(ours) == 1:
            ours = ours * len(theirs)
        if len(theirs) != len(ours):
            raise ValueError(f"--dtype lists {len(ours)} formats, --vs-type {len(theirs)}: give one each or equal lists")
    else:
        theirs = [DEFAULT_PEER.get(d) for d in ours]
    for o, t in zip(ours, theirs):
        if t not in FTYPES:
            raise ValueError(f"no llama.cpp type for {o!r}: name one with --vs-type ({', '.join(FTYPES)})")
    return list(zip(ours, theirs))


def run_vs(args) -> int:
    from . import _lib, llamacpp as lc, read_bandwidth, system_info
    from .actmodes import act_kwargs
    from .model import Model
    from .sampler import Sampler
    from .session import Session
    from .synthetic import PRESETS, get_synthetic
    lc.require()
    if args.vs != "llama.cpp":
        raise ValueError(f"--vs {args.vs!r}: the only peer is llama.cpp")
    if not args.preset:
        raise ValueError("--vs needs --preset (the same synthetic weights are written for both engines)")
    preset = PRESETS[args.preset]
    pairs = parse_pairs(args.dtype, args.vs_type)
    threads = [int(t) for t in str(args.threads_list or args.threads or 1).split(",")]
    n_pp, n_gen, reps = args.prompt_tokens, args.gen_tokens, args.reps
    n_ctx = max(n_pp, n_gen + 1, 16)
    tokens = _random_tokens(preset.vocab_size, max(n_pp, 1), args.seed)
    load0 = os.getloadavg()
    bw = {n: read_bandwidth(n) for n in threads}
    rows: List[Row] = []
    gap = 0.02  # seconds between engines: lets the other's spinning threads go to sleep
    for ours_name, peer_name in pairs:
        path = get_synthetic(args.preset, ours_name, args.seed)
        gpath = lc.get_gguf(args.preset, peer_name, args.seed)
        ob, odetail = cism_bytes_per_token(path)
        pb = lc.gguf_bytes_per_token(gpath)
        _, ptypes = lc.gguf_info(gpath)
        pdetail = ", ".join(f"{k} {v}" for k, v in sorted(ptypes.items()))
        with Model(path) as model:
            for nth in threads:
                made = {}
                for test, n in (("pp", n_pp), ("tg", n_gen)):
                    if n > 0:
                        made[test] = Row(f"{ours_name} / {peer_name}", nth, f"{test}{n}", n,
                                         Side("libcism", ours_name, odetail, ob), Side("llama.cpp", peer_name, pdetail, pb),
                                         kv_bytes(preset, n_gen), bw[nth])
                with Session(model, n_ctx=n_ctx, n_threads=nth, kv_type="f16", kernel_tier=args.tier,
                             **act_kwargs(args.act)) as s, \
                        Sampler() as smp, lc.Runner(gpath, nth, n_ctx) as lr:
                    s.eval(tokens[:8])            # warm-up: page the weights in, start the threads
                    lr.prefill(tokens[:8].tolist())
                    if n_gen > 0:
                        measure_decode(s, smp, int(tokens[0]), min(n_gen, 8))
                        lr.decode(int(tokens[0]), min(n_gen, 8))
                    for rep in range(reps):
                        order = ("ours", "peer") if rep % 2 == 0 else ("peer", "ours")
                        for test in ("pp", "tg"):
                            if test not in made:
                                continue
                            row = made[test]
                            for who in order:
                                time.sleep(gap)
                                if who == "ours":
                                    t = (measure_prefill(s, tokens[:n_pp]) if test == "pp"
                                         else measure_decode(s, smp, int(tokens[0]), n_gen))
                                    row.ours.seconds.append(t)
                                else:
                                    t = (lr.prefill(tokens[:n_pp].tolist()) if test == "pp"
                                         else lr.decode(int(tokens[0]), n_gen))
                                    row.peer.seconds.append(t)
                rows.extend(made.values())
    load1 = os.getloadavg()
    info = {"system": system_info(), "llama_cpp": f"llama-cpp-python {lc.version()}; {lc.system_info()}",
            "preset": args.preset, "n_params": preset.n_params(), "reps": reps, "threads": threads,
            "bandwidth": {str(k): v for k, v in bw.items()}, "load_start": load0, "load_end": load1,
            "kernel_tier": args.tier if args.tier != "auto" else f"auto ({_lib.lib.cism_kernel_tier_name(0).decode()})",
            "activations": args.act}
    if args.json:
        print(json.dumps({"info": info, "rows": [dict(asdict(r), **r.summary()) for r in rows]}, indent=1))
    else:
        print(format_vs(info, rows))
    return 0


def _f(x: float) -> str:
    return f"{x:.0f}" if x >= 100 else f"{x:.1f}" if x >= 10 else f"{x:.2f}"


def _span(med: float, lo: float, hi: float) -> str:
    return f"{_f(med)} ({_f(lo)}-{_f(hi)})"


def format_vs(info: Dict, rows: List[Row]) -> str:
    bw = ", ".join(f"{float(v) / 1e9:.1f} GB/s ({k} thread{'s' if k != '1' else ''})" for k, v in info["bandwidth"].items())
    out = [f"system:    {info['system']}",
           f"peer:      {info['llama_cpp']}",
           f"machine:   read bandwidth {bw}; load average {info['load_start'][0]:.2f} at start, "
           f"{info['load_end'][0]:.2f} at end",
           f"preset:    synthetic {info['preset']} ({info['n_params'] / 1e6:.1f}M parameters), {info['reps']} repetitions "
           f"alternated, kernel tier {info['kernel_tier']}, libcism's activations {info['activations']}; "
           "t/s = median (min-max); ratio = libcism/llama.cpp per repetition",
           ""]
    seen = set()
    for r in rows:
        if r.pair not in seen:
            seen.add(r.pair)
            out.append(f"{r.pair}: libcism {r.ours.label} [{r.ours.detail}] {r.ours.bytes_per_token / 1e6:.1f} MB/token; "
                       f"llama.cpp {r.peer.label} [{r.peer.detail}] {r.peer.bytes_per_token / 1e6:.1f} MB/token "
                       f"(+{r.kv_bytes / 1e6:.2f} MB of KV cache at the mean decode position)")
    out.append("")
    hdr = (f"{'pair':<16} {'thr':>3} {'test':>6} | {'libcism t/s':>18} {'ms/tok':>7} | {'llama.cpp t/s':>18} {'ms/tok':>7} | "
           f"{'ratio (min-max)':>18} | {'GB/s':>11} {'of BW':>9}")
    out.append(hdr)
    out.append("-" * len(hdr))
    for r in rows:
        s = r.summary()
        ours = _span(s["ours_tps"], s["ours_min"], s["ours_max"])
        peer = _span(s["peer_tps"], s["peer_min"], s["peer_max"])
        ratio = f"{s['ratio']:.2f} ({s['ratio_min']:.2f}-{s['ratio_max']:.2f})"
        line = (f"{r.pair:<16} {r.threads:>3} {r.test:>6} | {ours:>18} {s['ours_ms']:>7.2f} | {peer:>18} {s['peer_ms']:>7.2f} | "
                f"{ratio:>18} |")
        if "ours_gbs" in s:
            line += f" {s['ours_gbs']:>4.1f} / {s['peer_gbs']:<4.1f} {100 * s['ours_bw']:>3.0f}% / {100 * s['peer_bw']:.0f}%"
        out.append(line)
    return "\n".join(out)
