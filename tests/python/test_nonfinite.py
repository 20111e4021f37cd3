"""Non-finite numbers never become silent garbage (issue 16, item 3): the
converter refuses NaN/Inf weights (and f16 overflow) for every dtype,
check_weights refuses NaN quantization scales and huge norm weights, NaN/Inf
reaching the activations fails the eval with a message that says so (also
through the int8-activation path, which used to map them to 0), and the
sampler picks among +inf logits instead of returning the last id."""
from __future__ import annotations

import shutil
import struct

import numpy as np
import pytest

import cism
from cism import format as fmt
from cism.convert import ConversionError, convert
from cism.errors import FormatError
from cism.synthetic import write_synthetic

from helpers import tiny_preset

safetensors_numpy = pytest.importorskip("safetensors.numpy")
from test_bad_input import assert_nothing_written, hf_folder, llama_tensors  # noqa: E402

FLT_MAX = float(np.finfo(np.float32).max)


# ---- converter -------------------------------------------------------------------
@pytest.mark.parametrize("src_dtype,target,quant", [
    ("f32", "f32", None), ("f32", "f16", None), ("f32", "bf16", None),
    ("f16", "f16", None),      # raw f16 bits kept bit-exact: checked as bits
    ("bf16", "bf16", None),    # raw bf16 bits
    ("f32", "auto", "q8"), ("f32", "auto", "4bit"),
])
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_converter_refuses_nonfinite(tmp_path, src_dtype, target, quant, bad):
    t = llama_tensors()
    name = "model.layers.1.mlp.down_proj.weight"
    t[name] = t[name].copy()
    t[name][5, 7] = bad
    if src_dtype == "f16":
        t = {k: v.astype(np.float16) for k, v in t.items()}
    elif src_dtype == "bf16":
        ml_dtypes = pytest.importorskip("ml_dtypes")  # how numpy holds bf16 for safetensors
        t = {k: v.astype(ml_dtypes.bfloat16) for k, v in t.items()}
    src = hf_folder(tmp_path / "src", tensors=t)
    out = str(tmp_path / "out.cism")
    kw = {"quant": quant} if quant else {"dtype": target}
    with pytest.raises(ConversionError, match=r"blk\.1\.ffn_down holds 1 NaN or infinite value"):
        convert(src, out, progress=None, **kw)
    assert_nothing_written(out)


def test_converter_refuses_f16_overflow(tmp_path):
    t = llama_tensors()
    t["model.layers.0.self_attn.q_proj.weight"][0, 0] = 1.0e6   # finite in f32, infinite in f16
    src = hf_folder(tmp_path / "src", tensors=t)
    out = str(tmp_path / "out.cism")
    with pytest.raises(ConversionError, match="overflow f16.*--dtype bf16 or f32"):
        convert(src, out, dtype="f16", progress=None)
    assert_nothing_written(out)
    convert(src, out, dtype="f32", progress=None)   # the same checkpoint is fine in f32
    with cism.Model(out, check_weights=True) as m:
        assert m.weight_dtype == "f32"


# ---- loader and eval ---------------------------------------------------------------
def _patch(path, tensor, offset_bytes, data: bytes):
    info = fmt.CismFile(path).tensors[tensor]
    assert offset_bytes + len(data) <= info.nbytes
    with open(path, "r+b") as f:
        f.seek(info.offset + offset_bytes)
        f.write(data)


@pytest.fixture(scope="module")
def f32_model(tmp_path_factory):
    return write_synthetic(tiny_preset(tokenizer=False), str(tmp_path_factory.mktemp("nf") / "f32.cism"), "f32", 1)


@pytest.fixture(scope="module")
def q8_model(tmp_path_factory):
    return write_synthetic(tiny_preset(tokenizer=False), str(tmp_path_factory.mktemp("nf") / "q8.cism"), "q8", 1)


def _eval_error(path, **session_kw):
    with cism.Model(path) as m, m.session(n_ctx=32, **session_kw) as s:
        with pytest.raises(FormatError, match="produced NaN or infinite.*check_weights") as e:
            s.eval([1, 40, 41, 42])
        assert s.n_past == 0          # the failed eval kept nothing
        return str(e.value)


def test_flt_max_norm(tmp_path, f32_model):
    path = str(tmp_path / "norm.cism")
    shutil.copy(f32_model, path)
    _patch(path, "blk.0.ffn_norm", 4 * 3, struct.pack("<f", FLT_MAX))
    with pytest.raises(FormatError, match="blk.0.ffn_norm.*beyond"):
        cism.Model(path, check_weights=True)
    _eval_error(path)                 # without the check: the eval says so instead of giving garbage


def test_flt_max_norm_int8_path(tmp_path, q8_model):
    path = str(tmp_path / "norm-q8.cism")
    shutil.copy(q8_model, path)
    _patch(path, "blk.1.attn_norm", 0, struct.pack("<4f", FLT_MAX, -FLT_MAX, FLT_MAX, FLT_MAX))
    with pytest.raises(FormatError, match="blk.1.attn_norm"):
        cism.Model(path, check_weights=True)
    _eval_error(path)                 # int8 activations (the default for q8) mapped the Inf to 0 before
    _eval_error(path, act_outliers=False)   # plain int8 activations: the quantizer's own scan for NaN / Inf
    _eval_error(path, act_quant=False)


def test_nan_q8_scales(tmp_path, q8_model):
    path = str(tmp_path / "scale.cism")
    shutil.copy(q8_model, path)
    info = fmt.CismFile(path).tensors["blk.0.ffn_down"]
    assert info.dtype in (3, 8)   # q8 or q8x16
    # every aligned 16-bit word 0x7E00: each fp16 scale is NaN (codes 0 and 126)
    _patch(path, "blk.0.ffn_down", 0, b"\x00\x7e" * (info.nbytes // 2))
    with pytest.raises(FormatError, match="blk.0.ffn_down.*NaN"):
        cism.Model(path, check_weights=True)
    _eval_error(path)                 # gave finite, plausible, wrong logits before
    _eval_error(path, act_outliers=False)
    _eval_error(path, act_quant=False)


def test_good_models_still_evaluate(f32_model, q8_model):
    for p in (f32_model, q8_model):
        with cism.Model(p, check_weights=True) as m, m.session(n_ctx=32) as s:
            s.eval([1, 40, 41])
            assert np.isfinite(s.logits()).all()


# ---- sampler ---------------------------------------------------------------------
def test_sampler_positive_infinity():
    logits = np.zeros(50, dtype=np.float32)
    logits[[3, 17]] = np.inf
    logits[20] = np.nan
    seen = set()
    for seed in range(40):
        for temp in (0.7, 1.0, 5.0):
            with cism.Sampler(temperature=temp, seed=seed) as smp:
                seen.add(smp.sample(logits))
    assert seen == {3, 17}, seen      # was 49 (the last id) every time
    one = np.full(50, -3.0, dtype=np.float32)
    one[11] = np.inf
    with cism.Sampler(temperature=1.0, top_p=0.9, top_k=5, seed=1) as smp:
        assert all(smp.sample(one) == 11 for _ in range(10))
    with cism.Sampler(temperature=0.0) as smp:
        assert smp.sample(logits) == 3


def test_sampler_all_nan_refused():
    with cism.Sampler(temperature=1.0) as smp:
        with pytest.raises(cism.errors.InvalidArgumentError, match="NaN"):
            smp.sample(np.full(8, np.nan, dtype=np.float32))


def test_sampler_large_finite_logits():
    logits = np.array([FLT_MAX, FLT_MAX, -FLT_MAX, 0.0], dtype=np.float32)
    seen = set()
    for seed in range(30):
        with cism.Sampler(temperature=1.0, seed=seed) as smp:
            seen.add(smp.sample(logits))
    assert seen == {0, 1}
