"""Shared fixtures of the pytest suites.

- `shared_models`: ../shared/models (or $CISM_SHARED_DIR/models). Tests using
  it skip when it is absent, and fail when CISM_REQUIRE_SHARED=1 (CI).
- `record_parity`: tests report their max |logit error| here; the table is
  printed at the end of the run (pytest_terminal_summary), so it is in the CI log.
- `run_cli`: runs `python -m cism ...` in a subprocess.
"""
from __future__ import annotations

import os
import subprocess
import sys
from typing import List, Tuple

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PARITY: List[Tuple[str, str, str, float, str]] = []


def shared_dir() -> str:
    return os.environ.get("CISM_SHARED_DIR") or os.path.join(os.path.dirname(ROOT), "shared")


@pytest.fixture(scope="session")
def shared_models() -> str:
    d = os.path.join(shared_dir(), "models")
    if not os.path.isdir(d):
        msg = f"{d} is absent"
        if os.environ.get("CISM_REQUIRE_SHARED") == "1":
            pytest.fail(msg + " and CISM_REQUIRE_SHARED=1")
        pytest.skip(msg)
    return d


@pytest.fixture(scope="session")
def record_parity():
    def record(case: str, arch: str, dtype: str, max_err: float, greedy: str) -> None:
        PARITY.append((case, arch, dtype, float(max_err), greedy))
    return record


@pytest.fixture
def run_cli():
    def run(*args: str, check: bool = True, input: str = None, env: dict = None) -> subprocess.CompletedProcess:
        e = dict(os.environ)
        e.update(env or {})
        p = subprocess.run([sys.executable, "-m", "cism", *args], capture_output=True, text=True, input=input,
                           env=e, timeout=600)
        if check and p.returncode != 0:
            raise AssertionError(f"cism {' '.join(args)} failed ({p.returncode}):\n{p.stdout}\n{p.stderr}")
        return p
    return run


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if not PARITY:
        return
    tr = terminalreporter
    tr.section("fp32 parity against Hugging Face transformers (eager, fp32)")
    tr.write_line(f"{'case':<42} {'arch':<8} {'weights':<8} {'max |logit err|':>16}  greedy 32")
    for case, arch, dtype, err, greedy in PARITY:
        tr.write_line(f"{case:<42} {arch:<8} {dtype:<8} {err:>16.3e}  {greedy}")
    worst = max(p[3] for p in PARITY)
    tr.write_line(f"worst: {worst:.3e} (limit 1e-4)")


@pytest.fixture(scope="session")
def real_gguf() -> str:
    """The real SmolLM2-135M-Instruct Q4_1 GGUF (pinned; downloaded once into the build folder's cache)."""
    from peer_sources import real_gguf as get
    return get()


@pytest.fixture(scope="session")
def smol(real_gguf) -> str:
    """The .cism `cism pull` makes of the pinned GGUF (converted once into the build cache)."""
    import peer_sources
    from cism import pull
    return pull.model_path(cache=peer_sources.cache())


@pytest.fixture(scope="module")
def offline(smol):
    """The real model opened in this process: the offline reference of the server tests."""
    import cism
    with cism.Model(smol) as m:
        yield m


@pytest.fixture(scope="session")
def llama_cpp_tools() -> str:
    """llama.cpp's own Python GGUF tools (gguf-py, convert_hf_to_gguf.py) from the pinned llama-cpp-python sdist."""
    from peer_sources import llama_cpp_tools as get
    return get()
