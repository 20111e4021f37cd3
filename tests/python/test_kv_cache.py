"""The quantized KV cache (docs/KV_CACHE.md) from Python, and what it costs on
the real SmolLM2-135M-Instruct (its pinned GGUF converted to q8) at a 2048-token
context: KL divergence and perplexity of the q8 and q4a caches against the f16
cache of the same model, over one window of 2048 tokens of the eval text. The
bounds are about 1.5-2x what was measured (docs/KV_CACHE.md), so a worse
quantizer, a broken rotation or a wrong kernel fails them. K and V of
different types (kv_type="q8/q4a": K cache q8, V cache q4a) are checked the
same way: that recipe must stay within the 2% perplexity target. A calibrated
conversion stores each attention layer's mean key (a quantized K cache
subtracts it) and its queries' main direction (q4a keys are rounded along it):
the float caches unchanged, q8 and q4a as close to the f32 cache as without,
q4a's cost at 2k about halved and within the 2% target."""
from __future__ import annotations

import os

import numpy as np
import pytest

import cism
from cism import format as fmt
from cism.convert import convert
from cism.kvtypes import kv_type_arg, split_kv_type
from cism.params import DTYPES, Params
from cism.ppl import kl_divergence

CTX = 2048


@pytest.fixture(scope="module")
def smol(real_gguf, tmp_path_factory):
    """The real SmolLM2-135M-Instruct (the pinned GGUF) converted to q8."""
    path = str(tmp_path_factory.mktemp("kv_cache") / "smol-q8.cism")
    convert(real_gguf, path, quant="q8", progress=None)
    with cism.Model(path) as m:
        yield m


@pytest.fixture(scope="module")
def smol_koff(real_gguf, tmp_path_factory):
    """The same q8 model with key offsets and query directions (calibrated on text it samples itself)."""
    path = str(tmp_path_factory.mktemp("kv_cache") / "smol-q8-koff.cism")
    rep = convert(real_gguf, path, quant="q8", calibrate="auto", progress=None)
    assert rep.calibration
    with cism.Model(path) as m:
        yield m, path


@pytest.fixture(scope="module")
def text(shared_models):
    with open(os.path.join(shared_models, "eval", "war_and_peace_excerpt.txt"), encoding="utf-8") as f:
        return f.read()


def _cost(m, text, kv_type, kv_rotate=None):
    return kl_divergence(m, m, text=text, ctx=CTX, max_windows=1, n_threads=2, kv_type=kv_type,
                         kv_rotate=kv_rotate, base_kv_type="f16")


def test_kv_types_from_python(smol):
    toks = smol.tokenizer.encode("The quick brown fox jumps over the lazy dog.", add_bos=True)
    rows = {}
    for kv, rot in (("f16", None), ("q8", None), ("q8", False), ("q8", True), ("q4a", None), ("q4a", False)):
        with smol.session(kv_type=kv, kv_rotate=rot, n_ctx=64, logits_all=True) as s:
            s.eval(toks)
            rows[(kv, rot)] = s.logits()
    assert (rows[("q8", None)] != rows[("f16", None)]).any()
    assert (rows[("q4a", None)] != rows[("q4a", False)]).any()   # both are rotated by default
    assert (rows[("q8", None)] != rows[("q8", False)]).any()
    assert (rows[("q8", None)] == rows[("q8", True)]).all()
    with pytest.raises(cism.InvalidArgumentError, match="q4a"):
        smol.session(kv_type="q4")
    with pytest.raises(cism.InvalidArgumentError, match="kv_rotate"):
        smol.session(kv_type="f16", kv_rotate=True)


def test_q8_cache_cost_at_2k(smol, text):
    r = _cost(smol, text, "q8")
    print(f"q8: {r.describe()}")
    assert r.model.n_scored == CTX - 1
    assert r.kld_mean < 0.0025, r.kld_mean           # measured 0.0012 (rotated)
    assert abs(r.ln_ppl_ratio) < 0.005, r.ln_ppl_ratio
    assert r.same_top > 0.96


def test_q4a_cache_cost_at_2k_and_rotation(smol, text):
    rot = _cost(smol, text, "q4a")                    # the default: rotated
    plain = _cost(smol, text, "q4a", kv_rotate=False)
    print(f"q4a rotated: {rot.describe()}\nq4a not rotated: {plain.describe()}")
    assert rot.kld_mean < 0.07, rot.kld_mean          # measured 0.039 (0.045 before the keys' range search)
    assert rot.ln_ppl_ratio < 0.065, rot.ln_ppl_ratio
    assert rot.kld_mean < 0.9 * plain.kld_mean        # the rotation must help


def test_kv_type_k_slash_v_from_python(smol):
    toks = smol.tokenizer.encode("The quick brown fox jumps over the lazy dog.", add_bos=True)
    rows = {}
    for kv in ("q8", "q4a", "q8/q4a", "q8/q8", "Q8 / Q4A", "f16/q8"):
        with smol.session(kv_type=kv, n_ctx=64, logits_all=True) as s:
            s.eval(toks)
            rows[kv] = s.logits()
    assert (rows["q8/q4a"] != rows["q8"]).any() and (rows["q8/q4a"] != rows["q4a"]).any()
    assert (rows["q8/q8"] == rows["q8"]).all()
    assert (rows["Q8 / Q4A"] == rows["q8/q4a"]).all()
    assert (rows["f16/q8"] != rows["q8"]).any()
    with Params(kv_type="q8/q4a") as p:
        assert p.get("kv_type") == DTYPES["q8"] and p.get("kv_type_v") == DTYPES["q4a"]
    with Params(kv_type="q4a") as p:
        assert p.get("kv_type_v") == -1                 # the default: V as K
    with pytest.raises(cism.InvalidArgumentError, match="kv_type_v"):
        smol.session(kv_type="q8/q4")
    with pytest.raises(ValueError, match="K/V"):
        smol.session(kv_type="q8/q4a/f16")
    assert split_kv_type("q8/q4a") == ("q8", "q4a") and split_kv_type("f16") == ("f16", "f16")
    assert kv_type_arg("Q8/q4a") == "q8/q4a" and kv_type_arg("q8/q8") == "q8"
    with pytest.raises(Exception, match="K/V"):
        kv_type_arg("q8/q4")


def test_k_q8_v_q4a_cache_cost_at_2k(smol, text):
    r = _cost(smol, text, "q8/q4a")                   # rotated by default (a quantized cache)
    print(f"K q8 + V q4a: {r.describe()}")
    assert r.model.n_scored == CTX - 1
    assert r.kld_mean < 0.012, r.kld_mean            # measured 0.006 over 2 windows
    assert abs(r.ln_ppl_ratio) < 0.02, r.ln_ppl_ratio  # the 2% target (measured +0.04% over 2 windows)
    assert r.same_top > 0.93


def test_kv_tensors_are_stored_and_exact_for_the_softmax(smol, smol_koff):
    m, path = smol_koff
    f = fmt.CismFile(path)
    for kind in ("offset", "qdir"):
        ts = [t for n, t in f.tensors.items() if n.endswith(".attn_k_" + kind)]
        assert len(ts) == m.n_layers == 30 and all(t.shape == (192,) for t in ts), kind
    assert "general.kv_key_offsets" in f.metadata
    toks = m.tokenizer.encode("The quick brown fox jumps over the lazy dog. " * 4, add_bos=True)
    rows = {}
    for model, tag in ((smol, "plain"), (m, "koff")):
        for kv in ("f32", "f16", "q8", "q4a"):
            with model.session(kv_type=kv, n_ctx=64, logits_all=True, n_threads=2) as s:
                s.eval(toks)
                rows[(tag, kv)] = s.logits()
    # the float caches store the keys as they are: the same bits
    assert (rows[("plain", "f32")] == rows[("koff", "f32")]).all()
    assert (rows[("plain", "f16")] == rows[("koff", "f16")]).all()
    # a quantized cache stores k - offset: other bytes, and the softmax cancels the shift
    assert (rows[("plain", "q8")] != rows[("koff", "q8")]).any()
    # ... so the logits stay about as close to the f32 cache's as without (a shift the softmax does not
    # cancel, e.g. an offset subtracted from some rows only, moves them by whole units; measured: q8 max
    # |error| 0.244 with offsets, 0.247 without; q4a 1.14 with offsets, 1.21 without). Which is closer on
    # one short prompt is not the measure: the KLD over the eval text is (the next test)
    ref = rows[("plain", "f32")]
    for kv in ("q8", "q4a"):
        with_off, without = (float(np.abs(rows[(t, kv)] - ref).max()) for t in ("koff", "plain"))
        assert with_off < 1.5 * without, (kv, with_off, without)


def test_kv_tensors_lower_the_q4a_cost_at_2k(smol, smol_koff, text):
    m, _ = smol_koff
    with_off = _cost(m, text, "q4a")
    without = _cost(smol, text, "q4a")
    k_only = _cost(m, text, "q4a/f16")
    print(f"q4a, calibrated file: {with_off.describe()}\nq4a, not calibrated: {without.describe()}\n"
          f"K q4a + V f16, calibrated file: {k_only.describe()}")
    # measured on this window: KLD 0.0174 calibrated, 0.0388 not (0.0250 with offsets alone); ln PPL
    # ratio +0.008 calibrated, +0.037 not; K q4a + V f16 calibrated 0.0143, +0.007
    assert with_off.kld_mean < 0.6 * without.kld_mean, (with_off.kld_mean, without.kld_mean)
    assert with_off.kld_mean < 0.028, with_off.kld_mean
    assert with_off.ln_ppl_ratio < 0.02, with_off.ln_ppl_ratio   # the 2% target
    assert k_only.kld_mean < 0.024, k_only.kld_mean
