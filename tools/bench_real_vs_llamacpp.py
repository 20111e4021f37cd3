"""The real SmolLM2-135M-Instruct through libcism and llama.cpp's `llama-bench`, alternated
(docs/PEERS.md, "The real model against llama-bench"). Each round runs, for each thread
count, llama-bench once (`-p P -n N -r 1`, its defaults otherwise: random tokens, the prefill
and the decode each from an empty context) and libcism once (a fresh session per test: a
P-token prefill of the War and Peace excerpt, then, in another fresh session, N single-token
evals of the text's tokens from position 0), the order swapped every round (bench_pair's
alternated_medians, one thread count after the other). Prints the medians
and the ratio libcism / llama.cpp per test and thread count.

libcism reads the default import of the pinned GGUF (--model, made from it if missing:
q8x16 tied embedding/head, q4ax16 layers, the same weight bytes as the Q4_1 file);
llama-bench reads the GGUF itself.

--llama-bench EXE runs another llama-bench instead of the pinned one, e.g. ik_llama.cpp's
(fetched and built beside the project: docs/PEERS.md, "The real model against
ik_llama.cpp"), --peer-args adds its flags (ik_llama.cpp: "-rtr 1", its run-time repacking);
the header then names that binary and the build commit it reports; --peer-depth gp makes
--depth use ik_llama.cpp's `-gp D,N -fa 1` (it has no -d).

--depth D1,D2,... measures decode at long context instead (issue 18): N single-token evals
after a context of D tokens, llama-bench `-p 0 -n N -d D -fa on` (flash attention on, its
f16 KV cache) against a libcism session (f16 KV, its default) that evaluated the text's
first D tokens untimed and then decodes the next N, alternated the same way.

    tools/build_llama_tools.sh        # once: llama-bench from the pinned llama-cpp-python sdist
    PYTHONPATH=bindings_py CISM_LIB=build/release/libcism/libcism.so build/venv/bin/python \\
        tools/bench_real_vs_llamacpp.py --threads 1,2 --rounds 5
    ... tools/bench_real_vs_llamacpp.py --threads 2 --gen 32 --depth 512,2048,8000 --rounds 3
"""
import argparse
import json
import os
import subprocess
import sys
import time

import cism
from cism import llamacpp
from cism.convert_gguf import convert_gguf
from bench_pair import alternated_medians

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "python"))
from peer_sources import LLAMA_CPP_PYTHON, real_gguf  # noqa: E402  (the pinned peer; the GGUF, cached in build/cache)


def run_peer(cmd):
    """llama-bench's JSON rows; its failure as a readable error, not a traceback."""
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        tail = "\n".join((r.stderr or r.stdout).strip().splitlines()[-5:])
        sys.exit(f"error: the peer failed (exit {r.returncode}): {' '.join(cmd)}\n{tail}")
    return json.loads(r.stdout)


def llama_bench(exe, gguf, p, n, threads, extra=()):
    """llama-bench's prefill and decode tokens/s and its build description."""
    rows = run_peer([exe, "-m", gguf, "-p", str(p), "-n", str(n), "-t", str(threads), "-r", "1", "-o", "json", *extra])
    pp = next(r for r in rows if r["n_prompt"] == p and r["n_gen"] == 0)
    tg = next(r for r in rows if r["n_gen"] == n and r["n_prompt"] == 0)
    info = {k: pp.get(k) for k in ("build_commit", "build_number", "cpu_info", "model_type", "n_batch", "n_ubatch",
                                   "flash_attn", "type_k", "type_v")}
    return pp["avg_ts"], tg["avg_ts"], info


def llama_bench_depth(exe, gguf, n, depth, threads, extra=(), style="d"):
    """llama-bench's decode tokens/s after a context of depth tokens, flash attention on: llama.cpp's
    `-d D -fa on`, or (style "gp") ik_llama.cpp's `-gp D,N -fa 1` (a D-token prompt, untimed, then N)."""
    if style == "gp":
        rows = run_peer([exe, "-m", gguf, "-p", "0", "-n", "0", "-gp", f"{depth},{n}", "-fa", "1", "-t", str(threads),
                         "-r", "1", "-o", "json", *extra])
        row = next(r for r in rows if r["n_gen"] == n and r["n_prompt"] == depth)
    else:
        rows = run_peer([exe, "-m", gguf, "-p", "0", "-n", str(n), "-d", str(depth), "-fa", "on", "-t", str(threads),
                         "-r", "1", "-o", "json", *extra])
        row = next(r for r in rows if r["n_gen"] == n and r.get("n_depth") == depth)
    info = {k: row.get(k) for k in ("build_commit", "build_number", "cpu_info", "model_type", "n_batch", "n_ubatch",
                                    "flash_attn", "type_k", "type_v")}
    return row["avg_ts"], info


def ours_depth(m, toks, n, depth, threads):
    """libcism's decode tokens/s after evaluating toks[:depth] (untimed), in a fresh session."""
    s = m.session(n_ctx=depth + n + 8, n_threads=threads)
    try:
        s.eval(toks[:depth])
        t0 = time.perf_counter()
        for t in toks[depth:depth + n]:
            s.eval([t])
        return n / (time.perf_counter() - t0)
    finally:
        s.close()


def ours(m, toks, p, n, threads):
    """libcism's prefill and decode tokens/s (fresh sessions)."""
    s = m.session(n_ctx=max(p, n) + 8, n_threads=threads)
    try:
        t0 = time.perf_counter()
        s.eval(toks[:p])
        pp = p / (time.perf_counter() - t0)
    finally:
        s.close()
    s = m.session(n_ctx=max(p, n) + 8, n_threads=threads)
    try:
        t0 = time.perf_counter()
        for t in toks[:n]:
            s.eval([t])
        tg = n / (time.perf_counter() - t0)
    finally:
        s.close()
    return pp, tg


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=os.path.join(ROOT, "build", "cache", "smol-default.cism"),
                    help="libcism's file (made from the GGUF with the default import if missing)")
    ap.add_argument("--prompt", type=int, default=256)
    ap.add_argument("--gen", type=int, default=64)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--depth", default="", help="decode at these context lengths instead (comma-separated)")
    ap.add_argument("--llama-bench", default="", help="this llama-bench binary instead of the pinned llama.cpp's")
    ap.add_argument("--peer-depth", choices=("d", "gp"), default="d",
                    help="how the peer takes --depth: llama.cpp's -d (default) or ik_llama.cpp's -gp")
    ap.add_argument("--peer-args", default="", help="extra llama-bench flags, e.g. \"-rtr 1\" for ik_llama.cpp")
    ap.add_argument("--text", default=os.path.join(ROOT, "..", "shared", "models", "eval", "war_and_peace_excerpt.txt"))
    a = ap.parse_args()
    if a.prompt < 1 or a.gen < 1 or a.rounds < 1:
        ap.error("--prompt, --gen and --rounds must be at least 1")
    if a.llama_bench:
        exe = os.path.abspath(a.llama_bench)
        if not os.access(exe, os.X_OK):
            ap.error(f"--llama-bench {a.llama_bench}: not an executable file")
        peer = f"llama-bench {exe}"
    else:
        try:
            exe = llamacpp.tool("llama-bench")
        except llamacpp.MissingExtra as e:
            ap.error(f"{e} (build it with tools/build_llama_tools.sh)")
        peer = f"llama.cpp llama-bench as vendored in llama-cpp-python {LLAMA_CPP_PYTHON}"
    a.peer, a.extra = peer + (f" {a.peer_args}" if a.peer_args else ""), a.peer_args.split()
    gguf = real_gguf()
    if not os.path.exists(a.model):
        convert_gguf(gguf, a.model)
    threads = [int(x) for x in a.threads.split(",")]
    depths = [int(x) for x in a.depth.split(",")] if a.depth else []
    need = max(a.prompt, a.gen) if not depths else max(depths) + a.gen
    with cism.Model(a.model) as m:
        with open(a.text, encoding="utf-8") as f:
            toks = [m.bos_id] + list(m.tokenizer.encode(f.read(), add_bos=False))[:need - 1]
        if len(toks) < need:
            ap.error(f"the text has only {len(toks)} tokens")
        info = {}
        if depths:
            return depth_table(a, m, toks, exe, gguf, threads, depths)

        def measure(th, eng):
            if eng == "cism":
                return ours(m, toks, a.prompt, a.gen, th)
            pp, tg, info_ = llama_bench(exe, gguf, a.prompt, a.gen, th, a.extra)
            info.update(info_)
            return pp, tg

        med = {th: alternated_medians(a.rounds, "cism", "llama", lambda eng: measure(th, eng)) for th in threads}
        print(f"model: SmolLM2-135M-Instruct; libcism {cism.library_version()} ({a.model}, tier "
              f"{cism.kernel_tiers()[-1]}); {a.peer} (build {info['build_commit']}), "
              f"{info['model_type']}, n_batch {info['n_batch']}, n_ubatch {info['n_ubatch']}, flash_attn "
              f"{info['flash_attn']}, KV {info['type_k']}/{info['type_v']}; cpu {info['cpu_info']}")
        print(f"prefill {a.prompt} tokens, decode {a.gen} tokens from an empty context; {a.rounds} alternated rounds, medians")
        print(f"{'threads':>7} {'test':>8} {'libcism':>9} {'peer':>10} {'ratio':>6}")
        for th in threads:
            for i, test in enumerate(("prefill", "decode")):
                c, l = med[th]["cism"][i], med[th]["llama"][i]
                print(f"{th:>7} {test:>8} {c:>9.1f} {l:>10.1f} {c / l:>6.2f}")


def depth_table(a, m, toks, exe, gguf, threads, depths):
    info = {}

    def measure(th, d, eng):
        if eng == "cism":
            return 0.0, ours_depth(m, toks, a.gen, d, th)  # (no prefill, decode): bench_pair's pairs
        tg, info_ = llama_bench_depth(exe, gguf, a.gen, d, th, a.extra, a.peer_depth)
        info.update(info_)
        return 0.0, tg

    med = {(th, d): alternated_medians(a.rounds, "cism", "llama", lambda eng: measure(th, d, eng))
           for th in threads for d in depths}
    print(f"model: SmolLM2-135M-Instruct; libcism {cism.library_version()} ({a.model}, tier "
          f"{cism.kernel_tiers()[-1]}, KV f16); {a.peer} (build {info['build_commit']}), "
          f"{info['model_type']}, flash_attn {info['flash_attn']}, "
          f"KV {info['type_k']}/{info['type_v']}; cpu {info['cpu_info']}")
    print(f"decode {a.gen} tokens after a context of D tokens; {a.rounds} alternated rounds, medians")
    print(f"{'threads':>7} {'depth':>6} {'libcism':>9} {'peer':>10} {'ratio':>6}")
    for th in threads:
        for d in depths:
            c, l = med[(th, d)]["cism"][1], med[(th, d)]["llama"][1]
            print(f"{th:>7} {d:>6} {c:>9.1f} {l:>10.1f} {c / l:>6.2f}")
    return 0


if __name__ == "__main__":
    main()
