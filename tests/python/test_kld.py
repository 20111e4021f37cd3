"""KL divergence in the perplexity tool (cism.ppl.kl_divergence, `cism ppl
--kld-base`): zero against itself, small and positive for q8 against f32 on a
real checkpoint, the formula checked against a direct numpy computation, and
refusal of a base with another vocabulary or tokenizer."""
import os

import numpy as np
import pytest

from cism import format as fmt
from cism.convert import convert
from cism.model import Model
from cism.ppl import kl_divergence, perplexity, tokenize

from helpers import BYTE_VOCAB, make_model


@pytest.fixture(scope="module")
def stories(tmp_path_factory, shared_models):
    d = tmp_path_factory.mktemp("kld")
    src = os.path.join(shared_models, "stories260K-hf")
    out = {}
    for q in ("f32", "q8"):
        out[q] = str(d / f"s-{q}.cism")
        convert(src, out[q], quant=None if q == "f32" else q, progress=None)
    with open(os.path.join(shared_models, "eval", "tinystories_valid_excerpt.txt"), encoding="utf-8") as f:
        out["text"] = f.read()[:40000]
    return out


def test_kld_against_itself_is_zero(stories):
    r = kl_divergence(stories["f32"], stories["f32"], text=stories["text"], ctx=128, method="half", n_threads=1,
                      max_windows=6)
    assert r.model.n_scored == 6 * 63 and r.kld.shape == (6 * 63,)
    assert r.kld_mean == 0.0 and r.kld_max == 0.0 and np.all(r.kld == 0.0)
    assert r.same_top == 1.0 and r.same_top_stderr == 0.0 and r.rms_dp == 0.0
    assert r.model.ppl == r.base.ppl and r.ln_ppl_ratio == 0.0
    with Model(stories["f32"]) as m:      # open models are accepted too (and left open)
        r2 = kl_divergence(m, m, text=stories["text"], ctx=128, method="full", n_threads=1, max_windows=2)
        assert r2.kld_mean == 0.0 and r2.same_top == 1.0 and not m.closed


def test_kld_q8_against_f32(stories):
    toks = tokenize(stories["f32"], stories["text"])
    kw = dict(ctx=256, method="half", n_threads=2, max_windows=12)
    r = kl_divergence(stories["q8"], stories["f32"], tokens=toks, act_quant=False, **kw)
    # both perplexities are those of the perplexity tool on the same windows
    assert abs(r.model.ppl - perplexity(stories["q8"], tokens=toks, act_quant=False, **kw).ppl) < 1e-9
    assert abs(r.base.ppl - perplexity(stories["f32"], tokens=toks, **kw).ppl) < 1e-9
    assert r.model.n_scored == 12 * 127
    assert 1e-6 < r.kld_mean < 5e-3, r.kld_mean            # measured 0.0009 on the whole text (int8 act)
    assert 0 < r.kld_stderr < r.kld_mean
    assert r.kld_median <= r.kld_p90 <= r.kld_p99 <= r.kld_max
    assert np.all(r.kld >= -1e-12)                          # KLD >= 0 up to rounding
    assert 0.95 < r.same_top < 1.0 and r.same_top_stderr > 0
    # int8 activations move the model further from f32 than float activations do
    r8 = kl_divergence(stories["q8"], stories["f32"], tokens=toks, act_quant=True, **kw)
    assert r8.kld_mean > r.kld_mean


def test_kld_formula_by_hand(stories):
    """Per-position KLD(base || model) = sum_v p(v) log(p(v)/q(v)), with p, q the
    softmax of the two models' logits, computed here directly from the sessions."""
    toks = tokenize(stories["f32"], stories["text"])
    r = kl_divergence(stories["q8"], stories["f32"], tokens=toks, ctx=64, method="half", n_threads=1,
                      max_windows=1, act_quant=True)
    with Model(stories["f32"]) as mb, Model(stories["q8"]) as mm:
        inp = np.array([mb.bos_id] + list(toks[:63]), dtype=np.int32)
        logits = {}
        for name, m in (("base", mb), ("model", mm)):
            with m.session(n_ctx=64, n_threads=1, kv_type="f32", logits_all=True, act_quant=True) as s:
                s.eval(inp)
                logits[name] = s.all_logits()[32:63].astype(np.float64)
    p = np.exp(logits["base"]) / np.exp(logits["base"]).sum(axis=1, keepdims=True)
    q = np.exp(logits["model"]) / np.exp(logits["model"]).sum(axis=1, keepdims=True)
    want = (p * np.log(p / q)).sum(axis=1)
    assert r.kld.shape == want.shape == (31,)
    assert np.allclose(r.kld, want, rtol=1e-9, atol=1e-14), np.abs(r.kld - want).max()
    assert abs(r.kld_mean - want.mean()) < 1e-12 and r.kld_max == pytest.approx(want.max(), rel=1e-9)
    top = (p.argmax(axis=1) == q.argmax(axis=1)).mean()
    assert r.same_top == top
    targets = np.asarray(toks[32:63])
    nll = -np.log(q[np.arange(31), targets]).mean()
    assert r.model.nll == pytest.approx(nll, rel=1e-12)


def _permuted_byte_tokenizer_json() -> str:
    """A byte tokenizer with the same 259 entries as helpers' but the byte tokens in reverse order."""
    from tokenizers import Tokenizer, decoders, models, processors
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    vocab.update({f"<0x{b:02X}>": 3 + 255 - b for b in range(256)})
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="<unk>", byte_fallback=True))
    tok.decoder = decoders.Sequence([decoders.ByteFallback(), decoders.Fuse()])
    tok.add_special_tokens(["<unk>", "<s>", "</s>"])
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    return tok.to_str()


def test_kld_refuses_another_vocabulary_or_tokenizer(tmp_path, run_cli):
    a = make_model(tmp_path / "a.cism", seed=1)
    b = make_model(tmp_path / "b.cism", seed=2, tokenizer="ascii", vocab=98)
    c = make_model(tmp_path / "c.cism", seed=3, tokenizer=False, vocab=BYTE_VOCAB,
                   **{"tokenizer.hf_json": fmt.Bytes(_permuted_byte_tokenizer_json().encode()),
                      "tokenizer.bos_id": 1, "tokenizer.eos_id": 2})
    text = "Once upon a time there was a cat. " * 20
    with pytest.raises(ValueError, match=r"vocabularies differ \(259 and 98 tokens\)"):
        kl_divergence(a, b, text=text, ctx=64)
    with pytest.raises(ValueError, match="tokenizers split the text differently"):
        kl_divergence(a, c, text=text, ctx=64)
    r = kl_divergence(a, make_model(tmp_path / "a2.cism", seed=4), text=text, ctx=64, n_threads=1)
    assert r.kld_mean > 0.01 and r.model.n_scored == len(text.encode())   # another random model: far apart
    p = run_cli("ppl", "-m", a, "-f", _write(tmp_path / "t.txt", text), "--ctx", "64", "--kld-base", b, check=False)
    assert p.returncode == 1 and "vocabularies differ" in p.stderr and "Traceback" not in p.stderr


def _write(path, text: str) -> str:
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    return str(path)


def test_cli_ppl_kld_base(stories, tmp_path, run_cli):
    text = _write(tmp_path / "t.txt", stories["text"])
    p = run_cli("ppl", "-m", stories["q8"], "-f", text, "--ctx", "128", "--method", "half", "--max-windows", "3",
                "-t", "1", "--kld-base", stories["f32"])
    out = p.stdout
    assert "KLD(base || model)" in out and "same top token:" in out and "99%" in out and "median" in out
    kld = float(out.split("\nKLD ")[-1].split()[0])
    ppl = float(out.strip().split("PPL ")[-1])
    r = kl_divergence(stories["q8"], stories["f32"], text=stories["text"], ctx=128, method="half", n_threads=1,
                      max_windows=3)
    assert kld == pytest.approx(r.kld_mean, abs=1e-6) and ppl == pytest.approx(r.model.ppl, abs=1e-4)
    assert f"PPL {r.base.ppl:.4f}" in out and kld > 0
