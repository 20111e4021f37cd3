"""Synthetic preset models and `cism bench` / `cism info` (no downloads)."""
from __future__ import annotations

import hashlib
import json
import os

import numpy as np
import pytest

import cism
from cism.convert import expected_tensors
from cism.synthetic import PRESETS, get_synthetic, synthetic_path

# total parameters of the real checkpoints (config.json shapes, every tensor)
REAL_TOTALS = {
    "smollm2-135m": 134_515_008,
    "smollm2-360m": 361_821_120,
    "smollm2-1.7b": 1_711_376_384,
    "qwen2.5-0.5b": 494_032_768,
    "qwen3-0.6b": 596_049_920,
    "llama3.2-1b": 1_235_814_400,
    "tinyllama-1.1b": 1_100_048_384,
    "gemma3-270m": 268_098_176,
    "gemma3-1b": 999_885_952,
    "phi3-mini": 3_821_079_552,
    "lfm2-1.2b": 1_170_340_608,
    "qwen3.5-0.8b": 752_393_024,   # transformers' Qwen3_5ForCausalLM with the published text config
}


def test_presets_have_the_real_shapes():
    for name, total in REAL_TOTALS.items():
        shapes = expected_tensors(PRESETS[name].metadata())
        assert sum(int(np.prod(s)) for s in shapes.values()) == total, name
    assert PRESETS["qwen3-0.6b"].metadata()["model.qk_norm"] == 1
    assert PRESETS["qwen2.5-0.5b"].metadata()["model.attn_qkv_bias"] == 1
    assert PRESETS["llama3.2-1b"].metadata()["model.rope_scaling.type"] == "llama3"
    assert {"tiny", "smollm2-135m", "smollm2-360m", "qwen3-0.6b", "llama3.2-1b"} <= set(PRESETS)


def _sha(path):
    return hashlib.sha256(open(path, "rb").read()).hexdigest()


def test_synthetic_cached_and_deterministic(tmp_path, monkeypatch):
    monkeypatch.setenv("CISM_CACHE_DIR", str(tmp_path / "a"))
    p1 = get_synthetic("tiny", "bf16", seed=3, verbose=False)
    assert p1 == synthetic_path("tiny", "bf16", 3) and p1.startswith(str(tmp_path / "a"))
    st = os.stat(p1)
    assert get_synthetic("tiny", "bf16", seed=3, verbose=False) == p1
    assert os.stat(p1).st_mtime_ns == st.st_mtime_ns  # reused, not rewritten
    monkeypatch.setenv("CISM_CACHE_DIR", str(tmp_path / "b"))
    p2 = get_synthetic("tiny", "bf16", seed=3, verbose=False)
    assert p2 != p1 and _sha(p1) == _sha(p2)
    p3 = get_synthetic("tiny", "bf16", seed=4, verbose=False)
    assert _sha(p3) != _sha(p2)
    assert sorted(os.listdir(tmp_path / "b")) == sorted([os.path.basename(p2), os.path.basename(p3)])  # no leftovers
    with cism.Model(p1) as m:
        assert m.weight_dtype == "bf16" and m.vocab_size == 256 and not m.tied_embeddings
        w = cism.format.CismFile(p1).array("blk.0.ffn_up")
        assert abs(float(w.std()) - 0.02) < 0.002 and abs(float(w.mean())) < 0.002
        with m.session() as s:
            s.eval([1, 2, 3])
            assert np.isfinite(s.logits()).all()


def test_bench_cli(tmp_path, run_cli):
    env = {"CISM_CACHE_DIR": str(tmp_path)}
    p = run_cli("bench", "--preset", "tiny", "-p", "32", "-n", "8", "-r", "2", "-t", "1", env=env)
    lines = p.stdout.splitlines()
    assert lines[0].startswith("system:") and "synthetic tiny" in p.stdout
    rows = {ln.split()[0]: ln.split() for ln in lines if ln.split() and ln.split()[0] in ("prefill", "decode")}
    assert rows["prefill"][1] == "32" and rows["decode"][1] == "8"
    for r in rows.values():
        assert float(r[2]) > 0 and float(r[3]) > 0 and r[4] == "2"
        assert abs(1000 / float(r[2]) - float(r[3])) <= 0.0006 + 0.001 * float(r[3])  # ms/token = 1000 / tokens/s
    # prefill's multiply-adds: the f32 preset shows G MAC/s, no int8 peak
    assert "G MAC/s" in lines[3] and "peak" not in p.stdout and len(rows["prefill"]) == 7
    model = os.path.join(str(tmp_path), os.path.basename(synthetic_path("tiny", "f32", 0)))
    assert os.path.exists(model)
    p = run_cli("bench", "--model", model, "-p", "16", "-n", "4", "-r", "1", "--json", env=env)
    rep = json.loads(p.stdout)
    assert [r["test"] for r in rep["results"]] == ["prefill", "decode"]
    assert rep["tier"].startswith("auto (") and rep["tier"].endswith(f"{cism.kernel_tiers()[-1]})")
    p = run_cli("bench", "--model", model, "-p", "8", "-n", "2", "-r", "1", "--tier", "scalar", env=env)
    assert "kernel tier: scalar" in p.stdout
    assert rep["results"][0]["tokens_per_second"] > 0 and len(rep["results"][1]["seconds"]) == 1
    # lengths that measure nothing: an error in the options' terms, not an empty table
    for args, msg in ((("-p", "-3"), "token counts must be 0 or more"), (("-n", "-1"), "token counts must be 0 or more"),
                      (("-p", "0", "-n", "0"), "nothing to measure")):
        p = run_cli("bench", "--model", model, *args, check=False, env=env)
        assert p.returncode != 0 and msg in p.stderr and "Traceback" not in p.stderr and "prefill" not in p.stdout
    p = run_cli("bench", "--preset", "tiny", "--dtype", "nope", "-p", "4", "-n", "2", check=False, env=env)
    assert p.returncode != 0 and p.stderr.startswith("cism: error: unknown dtype or recipe 'nope'"), p.stderr


def test_info_cli(tmp_path, run_cli):
    p = run_cli("info")
    assert "libcism 0.1.0" in p.stdout and "kernel tier" in p.stdout and "build:" in p.stdout
    from helpers import make_model
    path = make_model(tmp_path / "i.cism")
    p = run_cli("info", "-m", path)
    assert "n_layers         2" in p.stdout and "tokenizer.hf_json" in p.stdout and "bytes>" in p.stdout
    p = run_cli("--version")
    assert p.stdout.strip() == f"cism {cism.__version__}"


def test_python_m_cism_help(run_cli):
    p = run_cli("--help")
    for cmd in ("convert", "generate", "chat", "info", "bench"):
        assert cmd in p.stdout


def test_chat_cli(tmp_path, run_cli):
    from helpers import ASCII_VOCAB, make_model
    path = make_model(tmp_path / "c.cism", vocab=ASCII_VOCAB, tokenizer="ascii")
    p = run_cli("chat", "-m", path, "-n", "12", "--seed", "1", input="hello\nhow are you\n\n")
    lines = p.stdout.splitlines()
    assert len(lines) >= 2 and "Traceback" not in p.stderr


def test_bench_parallel_plot(tmp_path, run_cli):
    """`cism bench --parallel 1,2 --plot FILE`: the table, and a PNG of it (matplotlib, the plot extra)."""
    pytest.importorskip("matplotlib")
    import struct
    env = {"CISM_CACHE_DIR": str(tmp_path)}
    png = tmp_path / "parallel.png"
    p = run_cli("bench", "--preset", "tiny", "--parallel", "1,2", "-p", "8", "-n", "4", "-r", "1", "-t", "1",
                "--plot", str(png), env=env)
    assert " batched " in p.stdout and " sequential " in p.stdout and str(png) in p.stderr
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
    assert struct.unpack(">II", data[16:24]) == (600, 400) and len(data) > 10_000
    p = run_cli("bench", "--preset", "tiny", "-p", "8", "-n", "2", "--plot", str(png), check=False, env=env)
    assert p.returncode != 0 and "--plot draws the --parallel results" in p.stderr
