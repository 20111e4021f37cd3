"""The 4bit recipe calibrates by default (cism.convert, cism.calibrate):
the metadata says so, --no-calibrate / calibrate=False gives the data-free
bytes, the batched sampling equals one session per sequence, the imatrix
method, and conversions that do not quantize to 4 bits are not calibrated.

Calibration never reads the evaluation text: `auto` is text the model samples
itself."""
import os

import numpy as np
import pytest

from cism import format as fmt
from cism import quant as q
from cism.calibrate import gather, sample_sequences
from cism.convert import ConversionError, convert
from cism.model import Model
from cism.sampler import Sampler
from cism.session import Session


@pytest.fixture(scope="module")
def stories(shared_models, tmp_path_factory):
    src = os.path.join(shared_models, "stories260K-hf")
    d = tmp_path_factory.mktemp("calib-default")
    f32 = str(d / "f32.cism")
    convert(src, f32, progress=None)
    return src, f32, d


def test_default_4bit_calibrates(stories):
    src, _, d = stories
    out = str(d / "default.cism")
    rep = convert(src, out, quant="4bit", progress=None, n_threads=2)
    meta = fmt.CismFile(out).metadata
    assert meta["general.quantization"] == "4bit"
    assert meta["general.quantization.rounding"].startswith("gptq"), meta["general.quantization.rounding"]
    assert "auto" in meta["general.quantization.calibration"]
    assert "q8 copy" in meta["general.quantization.calibration"]
    assert meta["general.quantization.calibration_tokens"] == 16 * 256
    assert rep.calibration and rep.rounding.startswith("gptq") and rep.calibration_seconds > 0
    s = rep.summary()
    assert "rounding: gptq" in s and "sampling" in s and "statistics" in s
    # the calibrated recipe's head: stories260K's embedding is 13% of its weights, 4-bit too
    assert {dt for n, dt in rep.tensors.items() if n == "token_embd"} <= {"q4s", "q4sx16"}
    assert not [n for n in os.listdir(d) if n.endswith(".partial")]  # the q8 copy is gone


def test_no_calibrate_gives_the_data_free_bytes(stories):
    """calibrate=False is the data-free rounding: every matrix exactly
    cism_quantize's plain rounding of the f32 weights, as before calibration
    became the default; the CLI's --no-calibrate writes the same bytes."""
    src, f32, d = stories
    out = str(d / "nocal.cism")
    rep = convert(src, out, quant="4bit", calibrate=False, progress=None)
    f, ref = fmt.CismFile(out), fmt.CismFile(f32)
    assert "general.quantization.calibration" not in f.metadata
    assert f.metadata["general.quantization.rounding"] == "nearest level, scale search per block"
    assert rep.calibration is None and "calibration: none" in rep.summary()
    assert f.tensors["token_embd"].dtype in (q.DTYPE_Q8, q.DTYPE_Q8X16)  # the uncalibrated recipe's q8 head
    n = 0
    for name, t in f.tensors.items():
        if len(t.shape) != 2:
            assert f.raw(name) == ref.raw(name), name
            continue
        want = q.quantize(ref.array(name), t.dtype, n_threads=1).tobytes()
        assert f.raw(name) == want, name
        n += 1
    assert n >= 10


def test_cli_no_calibrate_and_report(stories, run_cli):
    src, _, d = stories
    a, b = str(d / "cli-nocal.cism"), str(d / "py-nocal.cism")
    p = run_cli("convert", src, "-o", a, "--quant", "4bit", "--no-calibrate", "-q")
    assert "calibration: none" in p.stderr and "rounding: nearest level" in p.stderr
    convert(src, b, quant="4bit", calibrate=False, progress=None)
    fa, fb = fmt.CismFile(a), fmt.CismFile(b)
    assert {n: fa.raw(n) for n in fa.tensors} == {n: fb.raw(n) for n in fb.tensors}
    c = str(d / "cli-default.cism")
    p = run_cli("convert", src, "-o", c, "--quant", "4bit", "--calib-tokens", "512", "-q")
    assert "rounding: gptq" in p.stderr and "calibrated (" in p.stderr and "sampling" in p.stderr
    assert fmt.CismFile(c).metadata["general.quantization.calibration_tokens"] == 512
    p = run_cli("convert", src, "-o", str(d / "x.cism"), "--quant", "4bit", "--no-calibrate", "--calibrate", "auto",
                check=False)
    assert p.returncode != 0 and "not allowed with" in p.stderr


def test_batched_sampling_equals_one_session_each(stories):
    """The calibration text decoded 16 sequences at a time through cism.Batch
    is the text each sequence gets alone (Session.generate_ids with the same
    seed), whatever the batch size and thread count."""
    _, f32, _ = stories
    L, n_seq = 40, 5
    a = sample_sequences(f32, n_seq, L, seed=3, n_threads=2)
    b = sample_sequences(f32, n_seq, L, seed=3, n_threads=1, batch=2)
    assert a == b
    with Model(f32) as m, Session(m, n_ctx=L, n_threads=1, kv_type="f32") as s:
        for i, seq in enumerate(a):
            assert len(seq) == L and seq[0] == m.bos_id
            s.reset()
            with Sampler(temperature=1.0, seed=3 + i) as smp:
                gen = s.generate_ids([m.bos_id], L - 1, smp, ignore_eos=True)
            assert seq[1:] == gen, i
    assert len({tuple(x) for x in a}) == n_seq  # seeds differ: so do the sequences


def test_imatrix_statistics_are_the_gram_diagonal(stories):
    """imatrix's per-column importance is the diagonal of the GPTQ statistics
    (the same forward pass, G = 1 instead of 256), the tied embedding's lookup
    term included."""
    _, f32, _ = stories
    windows = sample_sequences(f32, 2, 64, seed=0, n_threads=1)
    grams, rows = gather(f32, windows, method="gptq", n_threads=1)
    imp, rows1 = gather(f32, windows, method="imatrix", n_threads=2)
    assert rows == rows1 == 128
    for name in ("blk.0.attn_q", "blk.1.ffn_down", "token_embd"):
        g = grams[name]
        G = g.shape[1]
        cols = np.arange(imp[name].size)
        diag = g[cols // G, cols % G, cols % G]
        assert np.allclose(imp[name], diag, rtol=1e-5, atol=1e-12), name


def test_imatrix_conversion_and_errors(stories):
    src, _, d = stories
    out = str(d / "imatrix.cism")
    rep = convert(src, out, quant="4bit", calib_method="imatrix", calib_tokens=512, progress=None)
    meta = fmt.CismFile(out).metadata
    assert meta["general.quantization.rounding"].startswith("imatrix")
    assert rep.rounding.startswith("imatrix")
    out2 = str(d / "imatrix2.cism")
    convert(src, out2, quant="4bit", calib_method="imatrix", calib_tokens=512, progress=None, n_threads=1)
    assert open(out, "rb").read() == open(out2, "rb").read()
    with pytest.raises(ConversionError, match="calibration method"):
        convert(src, str(d / "bad.cism"), quant="4bit", calib_method="awq", progress=None)
    with pytest.raises(ConversionError, match="calibration model"):
        convert(src, str(d / "bad.cism"), quant="4bit", calib_model="q4", progress=None)


@pytest.mark.parametrize("kw", [dict(), dict(quant="q8"), dict(quant="mix")])
def test_other_conversions_are_not_calibrated(stories, kw):
    src, _, d = stories
    out = str(d / f"other-{kw.get('quant', 'f32')}.cism")
    rep = convert(src, out, progress=None, **kw)
    assert rep.calibration is None
    assert "general.quantization.calibration" not in fmt.CismFile(out).metadata


def test_gram_of_a_prefill_equals_token_by_token(stories):
    """The statistics of one 40-token prefill (Gram rows updated in tiles of 16
    rows, act_stats.c) are bit for bit those of 40 one-token evals (one row at
    a time): every value receives its rows in the same order."""
    _, f32, _ = stories
    seq = sample_sequences(f32, 1, 40, seed=1, n_threads=1)[0]
    with Model(f32) as m:
        with Session(m, n_ctx=40, n_batch=40, n_threads=2, kv_type="f32", logits_all=True, act_stats=256) as a, \
                Session(m, n_ctx=40, n_threads=1, kv_type="f32", logits_all=True, act_stats=256) as b:
            a.eval(seq)
            for t in seq:
                b.eval([t])
            for name in ("blk.0.attn_q", "blk.0.attn_output", "blk.1.ffn_down", "token_embd"):
                (ga, ra), (gb, rb) = a.act_gram(name), b.act_gram(name)
                assert ra == rb == 40, name
                assert np.any(ga) and np.array_equal(ga, gb), name


def test_gguf_import_keeps_its_values_uncalibrated(real_gguf, tmp_path):
    """A GGUF import without --quant keeps the file's own values: no calibration."""
    out = str(tmp_path / "native.cism")
    rep = convert(real_gguf, out, progress=None)
    assert rep.calibration is None and rep.quant is None
    assert "general.quantization.calibration" not in fmt.CismFile(out).metadata


def test_calibrate_without_quant_stores_kv_tensors(stories):
    """--calibrate without a recipe: the weights as the plain conversion writes
    them, plus every layer's mean key (blk.N.attn_k_offset) and queries' main
    direction (blk.N.attn_k_qdir) over the calibration tokens laid end to end
    (cism.calibrate.gather_kv_tensors), the same at any thread count."""
    from cism.calibrate import gather_kv_tensors
    src, f32, d = stories
    out = str(d / "koff.cism")
    rep = convert(src, out, progress=None, calibrate="auto", calib_tokens=512, calib_model="f32")
    assert rep.calibration and rep.quant is None
    plain, koff = fmt.CismFile(f32), fmt.CismFile(out)
    names = [f"blk.{l}.attn_k_{k}" for l in range(5) for k in ("offset", "qdir")]
    assert set(koff.tensors) == set(plain.tensors) | set(names)
    assert "general.kv_key_offsets" in koff.metadata
    with Model(out) as m:
        assert m.n_layers == 5
    seqs = sample_sequences(f32, 2, 256, seed=0, n_threads=1)
    kv = gather_kv_tensors(f32, seqs, n_threads=2)
    again = gather_kv_tensors(f32, seqs, n_threads=1)
    assert sorted(kv) == sorted(names) and all(o.shape == (32,) and np.any(o) for o in kv.values())
    assert all(np.array_equal(kv[n], again[n]) for n in names)
    assert all(np.array_equal(koff.array(n), kv[n]) for n in names)


def test_query_direction_of_known_means():
    """query_direction on hand-made sums: one KV head whose two query heads share
    a mean along one rotated axis gets a direction along that axis, scaled by
    sqrt(weight * |mean|^2 / s2); the Hadamard frame is orthonormal."""
    from cism.calibrate import hadamard_frame, query_direction
    H = hadamard_frame(64)
    assert np.allclose(H @ H.T, np.eye(64))
    assert np.allclose(hadamard_frame(96) @ hadamard_frame(96).T, np.eye(96))  # blocks of 32
    axis = np.zeros(64)
    axis[5] = 3.0
    mu = H.T @ axis                       # rotated, the mean is 3 along element 5
    rows = 10
    spread = 64 * 2.0                      # each element's variance 2 around the mean
    sums = np.concatenate([mu * rows, mu * rows, [(spread + 9.0) * rows] * 2])
    u = query_direction(sums, rows, 2, 1, 64, weight=1.0)
    assert np.argmax(np.abs(u)) == 5
    assert abs(abs(u[5]) - 3.0 / np.sqrt(2.0)) < 1e-5 and np.abs(np.delete(u, 5)).max() < 1e-5
