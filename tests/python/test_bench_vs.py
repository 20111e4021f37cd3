"""`cism bench --vs llama.cpp` on the tiny preset, and the GGUF files it writes.
llama-cpp-python and gguf are the optional `compare` extra, not installed in CI:
the comparison tests skip without them; the error a user gets without them is
tested always."""
from __future__ import annotations

import json
import os
import sys

import numpy as np
import pytest

from cism import llamacpp as lc

try:
    lc.require()
    HAVE = True
except lc.MissingExtra:
    HAVE = False
need_llama = pytest.mark.skipif(not HAVE, reason="llama-cpp-python / gguf (the compare extra) not installed")


def test_missing_extra_is_explained(monkeypatch, run_cli, tmp_path):
    monkeypatch.setitem(sys.modules, "llama_cpp", None)   # as if not installed
    with pytest.raises(lc.MissingExtra, match=r"bindings_py\[compare\]"):
        lc.require()
    fake = tmp_path / "fake"
    fake.mkdir()
    (fake / "llama_cpp.py").write_text("raise ImportError('No module named llama_cpp')\n")
    path = os.pathsep.join([str(fake)] + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else []))
    p = run_cli("bench", "--preset", "tiny", "--vs", "llama.cpp", "-p", "8", "-n", "2", "-r", "1",
                env={"CISM_CACHE_DIR": str(tmp_path), "PYTHONPATH": path}, check=False)
    assert p.returncode == 1 and "pip install './bindings_py[compare]'" in p.stderr and "Traceback" not in p.stderr, p.stderr


@need_llama
def test_gguf_export_computes_the_same_function(tmp_path, monkeypatch):
    """F32 GGUF of the preset (Q/K rows in llama.cpp's RoPE order) against the f32 .cism of the same values."""
    import cism
    from cism.synthetic import get_synthetic
    monkeypatch.setenv("CISM_CACHE_DIR", str(tmp_path))
    toks = [5, 77, 3, 200, 17, 9, 150, 42]
    with lc.Runner(lc.get_gguf("tiny", "F32", verbose=False), 1, 64) as r:
        theirs = r.logits(toks)
    with cism.Model(get_synthetic("tiny", "f32", verbose=False)) as m, m.session(kv_type="f32") as s:
        s.eval(toks)
        ours = s.logits()
    assert np.abs(theirs - ours).max() < 1e-3 * max(1.0, float(np.abs(ours).max())), np.abs(theirs - ours).max()


@need_llama
def test_bench_vs_llamacpp_tiny(tmp_path, run_cli):
    env = {"CISM_CACHE_DIR": str(tmp_path)}
    p = run_cli("bench", "--preset", "tiny", "--dtype", "f16,q8,4bit", "--vs", "llama.cpp", "-p", "32", "-n", "8",
                "-r", "2", "--threads-list", "1", "--json", env=env)
    rep = json.loads(p.stdout)
    rows = rep["rows"]
    assert [(r["pair"], r["test"]) for r in rows] == [(pr, t) for pr in ("f16 / F16", "q8 / Q8_0", "4bit / Q4_0")
                                                      for t in ("pp32", "tg8")]
    for r in rows:
        assert len(r["ours"]["seconds"]) == 2 and len(r["peer"]["seconds"]) == 2
        assert r["ours_tps"] > 0 and r["peer_tps"] > 0
        assert r["ratio_min"] <= r["ratio"] <= r["ratio_max"]
        if r["test"].startswith("tg"):
            assert r["ours_gbs"] > 0 and 0 < r["ours_bw"] and r["kv_bytes"] > 0
    by = {r["pair"]: r for r in rows}
    # the same values in both engines: f16 and 8-bit files read the same bytes per token
    assert by["f16 / F16"]["ours"]["bytes_per_token"] == by["f16 / F16"]["peer"]["bytes_per_token"]
    assert by["q8 / Q8_0"]["ours"]["bytes_per_token"] == by["q8 / Q8_0"]["peer"]["bytes_per_token"]
    assert "q8x16" in by["q8 / Q8_0"]["ours"]["detail"] and "Q8_0" in by["q8 / Q8_0"]["peer"]["detail"]
    assert rep["info"]["bandwidth"]["1"] > 1e8
    p = run_cli("bench", "--preset", "tiny", "--dtype", "q8", "--vs", "llama.cpp", "-p", "16", "-n", "4", "-r", "1",
                env=env)
    assert "ratio" in p.stdout and "q8 / Q8_0" in p.stdout and "read bandwidth" in p.stdout
