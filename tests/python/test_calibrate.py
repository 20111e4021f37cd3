"""Calibrated quantization (cism.calibrate, cism_quantize_gram) end to end:
deterministic files, a measured quality bound on stories260K (the default
4bit conversion against --no-calibrate), the CLI.

Calibration never reads the evaluation text: `auto` is text the model samples
itself; the text-file path is exercised with a few sentences written here."""
import os

import numpy as np
import pytest

from cism import format as fmt
from cism.calibrate import calibrate
from cism.convert import ConversionError, convert
from cism.model import Model
from cism.ppl import perplexity, tokenize

STORY = ("Once upon a time, there was a little dog named Max. Max liked to run in the park with his red ball. "
         "One day, the ball rolled into the pond. Max was sad, but a kind girl helped him get it back. "
         "They played together until the sun went down, and Max was happy.\n") * 4


def _bits(path):
    f = fmt.CismFile(path)
    data = sum(t.nbytes for t in f.tensors.values())
    return 8.0 * data / sum(int(np.prod(t.shape)) for t in f.tensors.values() if len(t.shape) == 2)


def test_calibrated_4bit_deterministic_and_better(tmp_path, shared_models):
    """The default 4bit conversion is calibrated (GPTQ, statistics on a q8 copy).
    Measured on the first 24 windows (ctx 256, method half) of the TinyStories
    excerpt: f32 3.7227, 4bit --no-calibrate 3.9533 (+6.19%, 5.11 bits/weight),
    4bit (calibrated) 3.9078 (+4.97%, 4.61 bits/weight: the head is q4s too).
    Bound: +7%, and strictly better than the uncalibrated recipe (which keeps
    its head at 8 bits)."""
    src = os.path.join(shared_models, "stories260K-hf")
    text = open(os.path.join(shared_models, "eval", "tinystories_valid_excerpt.txt"), encoding="utf-8").read()
    paths = {k: str(tmp_path / f"{k}.cism") for k in ("f32", "4bit", "cal", "cal2")}
    convert(src, paths["f32"], progress=None)
    convert(src, paths["4bit"], quant="4bit", calibrate=False, progress=None)
    convert(src, paths["cal"], quant="4bit", progress=None, n_threads=1)  # the default: calibrated
    convert(src, paths["cal2"], quant="4bit", calibrate="auto", progress=None, n_threads=2)
    a, b = (open(paths[k], "rb").read() for k in ("cal", "cal2"))
    assert a == b  # seeded sampling, sums in token order, rows independent: the same bytes
    f = fmt.CismFile(paths["cal"])
    assert "auto" in f.metadata["general.quantization.calibration"]
    assert f.metadata["general.quantization.calibration_tokens"] >= 4000
    dts = {fmt.DTYPE_NAMES[t.dtype] for t in f.tensors.values() if len(t.shape) == 2}
    assert dts <= {"q4s", "q4sx16"}, dts  # stories260K's embedding is 13% of its weights: 4-bit too
    # 4.61 bits/weight of matrices, +0.04 for the KV tensors (2 x 5 x 32 f32 on 260K weights; 0.003 on SmolLM2)
    assert _bits(paths["cal"]) < 4.66
    assert sum(n.endswith((".attn_k_offset", ".attn_k_qdir")) for n in f.tensors) == 10
    toks = tokenize(paths["f32"], text)
    ppl = {k: perplexity(paths[k], tokens=toks, ctx=256, method="half", max_windows=24, n_threads=2).ppl
           for k in ("f32", "4bit", "cal")}
    assert ppl["cal"] < ppl["4bit"], ppl
    assert ppl["f32"] < ppl["cal"] < ppl["f32"] * 1.07, ppl


def test_calibration_from_a_text_file(tmp_path, shared_models):
    src = os.path.join(shared_models, "stories260K-hf")
    f32 = str(tmp_path / "f32.cism")
    convert(src, f32, progress=None)
    story = tmp_path / "story.txt"
    story.write_text(STORY, encoding="utf-8")
    c = calibrate(f32, str(story), n_tokens=300, n_threads=1)
    assert "story.txt" in c.description and 300 <= c.n_tokens <= 302  # + one BOS per window
    g = c.gram_for("blk.0.attn_q")
    assert g.shape == (1, 256, 256) and g is c.gram_for("blk.0.attn_v")  # Q/K/V share their input
    blk = g[0, :64, :64]
    assert np.allclose(blk, blk.T) and np.all(np.linalg.eigvalsh(blk) > -1e-6 * np.trace(blk))
    assert not g[0, 64:, :].any()  # 64 columns: the rest of the block is padding
    down = c.gram_for("blk.0.ffn_down")
    assert down.shape == (1, 256, 256) and np.trace(down[0]) > 0
    assert c.gram_for("token_embd") is not None  # tied: the head's input (the final norm's output)
    with pytest.raises(FileNotFoundError):
        calibrate(f32, str(tmp_path / "missing.txt"))


def test_cli_convert_calibrate(tmp_path, shared_models, run_cli):
    src = os.path.join(shared_models, "stories260K-hf")
    out = str(tmp_path / "cal.cism")
    p = run_cli("convert", src, "-o", out, "--quant", "4bit", "--calibrate", "auto", "--calib-tokens", "512", "-q")
    assert "calibrated" in p.stderr and "sampled from BOS" in p.stderr
    with Model(out) as m:
        assert m.architecture
    assert fmt.CismFile(out).metadata["general.quantization.calibration_tokens"] == 512
    assert not [n for n in os.listdir(tmp_path) if n.endswith(".partial")]  # the unquantized copy is gone
    # without --quant: the key offsets only (the weights stay f32)
    p = run_cli("convert", src, "-o", str(tmp_path / "x.cism"), "--calibrate", "auto", "--calib-tokens", "256")
    assert "key offsets" in p.stderr and "sampled from BOS" in p.stderr
    assert sum(n.endswith((".attn_k_offset", ".attn_k_qdir")) for n in fmt.CismFile(str(tmp_path / "x.cism")).tensors) == 10
    p = run_cli("convert", src, "-o", str(tmp_path / "y.cism"), "--quant", "4bit", "--calibrate",
                str(tmp_path / "none.txt"), check=False)
    assert p.returncode != 0 and "none.txt" in p.stderr
    with pytest.raises(ConversionError, match="calibration method"):
        convert(src, str(tmp_path / "z.cism"), calibrate="auto", calib_method="nope", progress=None)
