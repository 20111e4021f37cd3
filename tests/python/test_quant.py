"""Quantized conversion through the Python converter (which packs through
libcism's cism_quantize), the file round trip, the perplexity tool against
transformers, and generation from a quantized model."""
import os

import numpy as np
import pytest

from cism import format as fmt
from cism import quant as q
from cism.convert import convert
from cism.errors import CismError
from cism.model import Model
from cism.ppl import perplexity, tokenize


def test_quantize_roundtrip_all_formats():
    rng = np.random.default_rng(0)
    w = (rng.standard_normal((37, 172)) * 0.05).astype(np.float32)
    for name, dt in q.QUANT_DTYPES.items():
        packed = q.quantize(w, dt, n_threads=2)
        assert packed.shape == (37, q.row_bytes(dt, 172))
        assert np.array_equal(packed, q.quantize(w, dt, n_threads=1)), name
        back = q.dequantize(packed, dt, 172)
        rel = np.sqrt(((back - w) ** 2).mean()) / np.sqrt((w ** 2).mean())
        assert rel < (0.01 if name == "q8" else 0.15), (name, rel)


def test_quantize_refuses_bad_input():
    w = np.zeros((2, 32), np.float32)
    w[1, 3] = np.nan
    with pytest.raises(CismError, match="not finite"):
        q.quantize(w, q.DTYPE_Q4S)
    with pytest.raises(ValueError, match="unknown quantization recipe"):
        q.recipe("q3")


def test_convert_recipes_file_roundtrip(tmp_path, shared_models):
    MODELS = shared_models
    src = os.path.join(MODELS, "stories260K-hf")
    f32 = str(tmp_path / "f32.cism")
    convert(src, f32, progress=None)
    ref = fmt.CismFile(f32)
    for recipe in ("q8", "4bit", "mix"):
        out = str(tmp_path / f"{recipe}.cism")
        rep = convert(src, out, quant=recipe, progress=None)
        f = fmt.CismFile(out)
        assert f.metadata["general.quantization"] == recipe
        assert rep.bits_per_weight() < (9.0 if recipe == "q8" else 6.5)
        assert any("ffn_down" in n and "padded" in n for n in rep.notes) or recipe == "q8" and rep.notes
        for name, t in f.tensors.items():
            if len(t.shape) == 1:
                assert t.dtype == fmt.DTYPE_F32
                continue
            want = q.QUANT_DTYPES[q.recipe(recipe).pick(name)]
            assert t.dtype == want, name
            # the stored bytes are exactly what the library packs from the f32 weights
            packed = q.quantize(ref.array(name), t.dtype)
            assert packed.tobytes() == f.raw(name), name
        with pytest.raises(FileExistsError):
            convert(src, out, quant=recipe, progress=None)


def test_ppl_matches_transformers(tmp_path, shared_models):
    MODELS = shared_models
    TEXT = os.path.join(MODELS, "eval", "tinystories_valid_excerpt.txt")
    """Method 'full' on the first windows of the text, against the same
    computation in transformers (fp32, eager): within 0.1% PPL."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    src = os.path.join(MODELS, "stories260K-hf")
    path = str(tmp_path / "s.cism")
    convert(src, path, progress=None)
    text = open(TEXT, encoding="utf-8").read()
    toks = tokenize(path, text)
    ctx, windows = 512, 3
    ours = perplexity(path, tokens=toks, ctx=ctx, method="full", max_windows=windows, n_threads=2)
    model = transformers.AutoModelForCausalLM.from_pretrained(src, torch_dtype=torch.float32,
                                                              attn_implementation="eager")
    model.eval()
    nll, n = 0.0, 0
    with torch.no_grad():
        for i in range(windows):
            win = toks[i * (ctx - 1):(i + 1) * (ctx - 1)]
            ids = torch.tensor([[1] + win])
            logp = torch.log_softmax(model(ids).logits[0].double(), -1)
            tg = torch.tensor(win)
            nll -= float(logp[torch.arange(len(win)), tg].sum())
            n += len(win)
    ref = float(np.exp(nll / n))
    assert ours.n_scored == n
    assert abs(ours.ppl / ref - 1) < 1e-3, (ours.ppl, ref)


def _greedy(path, n):
    from cism.session import Session
    out, tok = [], 1
    with Model(path) as m, Session(m) as s:
        for _ in range(n):
            s.eval([tok])
            tok = int(np.argmax(s.logits()))
            out.append(tok)
    return out


def test_quantized_ppl_and_generation(tmp_path, shared_models):
    MODELS = shared_models
    TEXT = os.path.join(MODELS, "eval", "tinystories_valid_excerpt.txt")
    from tokenizers import Tokenizer
    src = os.path.join(MODELS, "stories260K-hf")
    tok = Tokenizer.from_file(os.path.join(src, "tokenizer.json"))
    text = open(TEXT, encoding="utf-8").read()
    res, gen = {}, {}
    for recipe in (None, "q8", "4bit"):
        path = str(tmp_path / f"{recipe}.cism")
        convert(src, path, quant=recipe, progress=None)
        toks = tokenize(path, text)
        res[recipe] = perplexity(path, tokens=toks, ctx=256, method="half", max_windows=8, n_threads=2).ppl
        gen[recipe] = _greedy(path, 24)
    assert res["q8"] < res[None] * 1.01
    assert res[None] < res["4bit"] < res[None] * 1.10
    assert gen["q8"][:8] == gen[None][:8]
    story = tok.decode(gen["4bit"])
    assert len(story.split()) >= 4 and sum(c.isalpha() for c in story) > len(story) / 2, story


def test_cli_convert_quant_ppl_generate(tmp_path, shared_models, run_cli):
    src = os.path.join(shared_models, "stories260K-hf")
    text = os.path.join(shared_models, "eval", "tinystories_valid_excerpt.txt")
    out = str(tmp_path / "s.4bit.cism")
    p = run_cli("convert", src, "-o", out, "--quant", "4bit", "-q")
    assert "bits/weight" in p.stderr and "recipe 4bit" in p.stderr and "q4s" in p.stderr
    assert "blk.*.ffn_down: 172 columns" in p.stderr  # the padded matrix is named
    p = run_cli("ppl", "-m", out, "-f", text, "--ctx", "256", "--method", "half", "--max-windows", "2", "-t", "1")
    assert "method half" in p.stdout and "second half of each window scored" in p.stdout
    ppl = float(p.stdout.strip().split("PPL ")[-1])
    assert 1.5 < ppl < 10
    p = run_cli("ppl", "-m", out, "-f", text, "--max-windows", "1", "--act-quant", "-t", "1")
    assert "method full" in p.stdout
    p = run_cli("generate", "-m", out, "-p", "Once upon a time", "-n", "16", "--seed", "1")
    assert p.stdout.startswith("Once upon a time") and len(p.stdout.split()) > 6
    p = run_cli("convert", src, "-o", str(tmp_path / "x.cism"), "--quant", "q3", check=False)
    assert p.returncode != 0
