"""Every kernel tier this CPU runs, through the Python API, on the trained
stories260K checkpoint: logits within 1e-4 of the scalar tier (f32 KV cache),
the same greedy tokens, bit-identical logits for 1, 2 and 3 threads; the same
for its quantized versions (q8 and the default 4bit recipe) with float
activations, and with int8 activations (greedy tokens identical; logits within
0.5, since a tier's float ops may move an activation across an int8 rounding
boundary: test_tiers.c); a tier the CPU cannot run is refused; the bandwidth
probe answers. (The C tests check
each kernel against the scalar one with stated bounds: docs/KERNELS.md.)"""
from __future__ import annotations

import os

import numpy as np
import pytest

import cism
from cism.convert import convert
from cism.params import TIERS


@pytest.fixture(scope="module")
def stories(shared_models, tmp_path_factory):
    out = str(tmp_path_factory.mktemp("tiers") / "stories260K.cism")
    convert(os.path.join(shared_models, "stories260K-hf"), out, progress=None)
    ref = np.load(os.path.join(shared_models, "stories260K-hf", "reference.npz"))
    return out, ref


def test_tier_list():
    tiers = cism.kernel_tiers()
    assert tiers[0] == "scalar"
    assert f"kernel tier: {tiers[-1]}" in cism.system_info() or os.environ.get("CISM_ISA")
    assert set(tiers) <= set(TIERS)


def test_amx_opt_out():
    """CISM_AMX=0: the library does not ask Linux for the AMX tile state, so the
    avx512_amx tier is not offered (on an AMX machine, where it otherwise is)."""
    import subprocess
    import sys
    code = "import cism; print(' '.join(cism.kernel_tiers()))"
    env = dict(os.environ, CISM_AMX="0")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    assert out.split()[0] == "scalar" and "avx512_amx" not in out.split()


def prefill(model, tier, threads, tokens, act_quant=False):
    with model.session(kv_type="f32", logits_all=True, n_threads=threads, kernel_tier=tier, act_quant=act_quant) as s:
        s.eval(tokens)
        return s.all_logits()


@pytest.mark.parametrize("tier", cism.kernel_tiers())
def test_tier_against_scalar(tier, stories):
    path, ref = stories
    toks = ref["tokens_32"]
    with cism.Model(path) as m:
        scalar = prefill(m, "scalar", 1, toks)
        a, b, c = (prefill(m, tier, n, toks) for n in (1, 2, 3))
        assert np.array_equal(a, b) and np.array_equal(a, c), f"{tier}: logits differ between thread counts"
        err = float(np.abs(a - scalar).max())
        assert err < 1e-4, f"{tier}: max |logit - scalar| {err:.3e}"
        assert float(np.abs(a - ref["logits_32"]).max()) < 1e-4
        greedy = {}
        for t in ("scalar", tier):
            with m.session(kv_type="f32", kernel_tier=t) as s:
                greedy[t] = s.generate_ids(toks, 16, cism.Sampler(), ignore_eos=True)
        assert greedy[tier] == greedy["scalar"] == ref["greedy_32"][32:48].tolist()


@pytest.fixture(scope="module")
def stories_quant(shared_models, tmp_path_factory):
    out = {}
    for recipe in ("q8", "4bit"):
        out[recipe] = str(tmp_path_factory.mktemp("tiers") / f"stories260K.{recipe}.cism")
        convert(os.path.join(shared_models, "stories260K-hf"), out[recipe], quant=recipe, progress=None)
    return out, np.load(os.path.join(shared_models, "stories260K-hf", "reference.npz"))


@pytest.mark.parametrize("act_quant", [False, True])
@pytest.mark.parametrize("recipe", ["q8", "4bit"])
@pytest.mark.parametrize("tier", cism.kernel_tiers())
def test_quantized_tier_against_scalar(tier, recipe, act_quant, stories_quant):
    paths, ref = stories_quant
    toks = ref["tokens_32"]
    with cism.Model(paths[recipe]) as m:
        scalar = prefill(m, "scalar", 1, toks, act_quant)
        a, b, c = (prefill(m, tier, n, toks, act_quant) for n in (1, 2, 3))
        assert np.array_equal(a, b) and np.array_equal(a, c), f"{tier}: logits differ between thread counts"
        err = float(np.abs(a - scalar).max())
        assert err < (0.5 if act_quant else 1e-4), f"{tier} {recipe}: max |logit - scalar| {err:.3e}"
        greedy = {}
        for t in ("scalar", tier):
            with m.session(kv_type="f32", kernel_tier=t, act_quant=act_quant) as s:
                greedy[t] = s.generate_ids(toks, 16, cism.Sampler(), ignore_eos=True)
        assert greedy[tier] == greedy["scalar"]


def test_unsupported_tier_refused(stories):
    path, _ = stories
    missing = [t for t, code in TIERS.items() if code and t not in cism.kernel_tiers()]
    with cism.Model(path) as m:
        with pytest.raises(ValueError):
            m.session(kernel_tier="sse9")
        if missing:
            with pytest.raises(cism.UnsupportedError, match=missing[0]):
                m.session(kernel_tier=missing[0])


def test_read_bandwidth():
    bps = cism.read_bandwidth(1, 8 << 20)
    assert 1e8 < bps < 1e13
    with pytest.raises(cism.InvalidArgumentError):
        cism.read_bandwidth(0)


def test_int8_mac_peak():
    """Every tier's probe runs; the vector tiers beat the scalar one by their
    width (a folded-away loop would read absurdly high); a tier this CPU
    cannot run is refused."""
    peaks = {t: cism.int8_mac_peak(t) for t in cism.kernel_tiers()}
    assert all(1e8 < p < 1e13 for p in peaks.values()), peaks
    for t, p in peaks.items():
        if t != "scalar":
            assert p > 2 * peaks["scalar"], peaks
    missing = [t for t, code in TIERS.items() if code and t not in cism.kernel_tiers()]
    if missing:
        with pytest.raises(cism.UnsupportedError):
            cism.int8_mac_peak(missing[0])
