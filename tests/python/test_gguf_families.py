"""GGUF import of the families beyond the Llama layout (Gemma 3, SmolLM3,
Phi-3): tiny random checkpoints with a real tokenizer, written as GGUF by the
convert_hf_to_gguf.py vendored in the pinned llama-cpp-python sdist, then
imported by cism. The import must give the logits of the same checkpoint
converted from its Hugging Face folder (and so of transformers: the parity
tests), which checks the fields llama.cpp's loader assumes rather than stores
(Gemma 3's layer pattern and local RoPE base, SmolLM3's NoPE step) and the
fused tensors it cuts (Phi-3's qkv and gate/up)."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import cism  # noqa: E402
from cism.convert import convert  # noqa: E402

from test_parity_transformers import _randomize  # noqa: E402

TOKENIZER = "smollm"   # ../shared/models/tokenizers: gpt2 BPE, llama.cpp pre-tokenizer "smollm"

CASES = {
    "gemma3": ("Gemma3TextConfig", "Gemma3ForCausalLM", dict(
        num_hidden_layers=7, head_dim=16, sliding_window=8, query_pre_attn_scalar=16,
        layer_types=["sliding_attention"] * 5 + ["full_attention"] + ["sliding_attention"])),
    "smollm3": ("SmolLM3Config", "SmolLM3ForCausalLM", dict(num_hidden_layers=5, tie_word_embeddings=False)),
    "phi3": ("Phi3Config", "Phi3ForCausalLM", dict(
        num_hidden_layers=2, tie_word_embeddings=False,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5})),
}


def _checkpoint(case, folder, tok_dir):
    cfg_cls, model_cls, extra = CASES[case]
    with open(os.path.join(tok_dir, "tokenizer.json"), encoding="utf-8") as f:
        tj = json.load(f)
    vocab = max(max(tj["model"]["vocab"].values()), max((a["id"] for a in tj["added_tokens"]), default=0)) + 1
    base = dict(vocab_size=vocab, hidden_size=64, intermediate_size=160, num_attention_heads=4, num_key_value_heads=2,
                max_position_embeddings=256, rms_norm_eps=1e-5, bos_token_id=1, eos_token_id=2, pad_token_id=0)
    cfg = getattr(transformers, cfg_cls)(**{**base, **extra})
    cfg.architectures = [model_cls]
    torch.manual_seed(0)
    model = getattr(transformers, model_cls)._from_config(cfg, attn_implementation="eager", dtype=torch.float32)
    _randomize(model, 1)
    model.save_pretrained(str(folder), safe_serialization=True)
    shutil.copy(os.path.join(tok_dir, "tokenizer.json"), folder / "tokenizer.json")
    (folder / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "GPT2Tokenizer"}))


@pytest.mark.parametrize("case", list(CASES))
def test_gguf_import_matches_hf_import(case, llama_cpp_tools, shared_models, tmp_path):
    folder = tmp_path / case
    folder.mkdir()
    _checkpoint(case, folder, os.path.join(shared_models, "tokenizers", TOKENIZER))
    gguf = str(tmp_path / f"{case}.gguf")
    stub = tmp_path / "stub"
    stub.mkdir()
    (stub / "sentencepiece.py").write_text("class SentencePieceProcessor:\n    pass\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.join(llama_cpp_tools, "gguf-py"), str(stub)]),
               NO_LOCAL_GGUF="")
    p = subprocess.run([sys.executable, os.path.join(llama_cpp_tools, "convert_hf_to_gguf.py"), str(folder),
                        "--outtype", "f32", "--outfile", gguf], env=env, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    from_hf, from_gguf = str(tmp_path / "hf.cism"), str(tmp_path / "gguf.cism")
    convert(str(folder), from_hf, progress=None)
    convert(gguf, from_gguf, progress=None)
    prompt = np.random.default_rng(5).integers(3, 40000, 40).tolist()
    out = {}
    for path in (from_hf, from_gguf):
        with cism.Model(path) as m:
            assert m.architecture == case
            with m.session(kv_type="f32", logits_all=True) as s:
                s.eval(prompt)
                out[path] = s.all_logits()
    err = float(np.abs(out[from_hf] - out[from_gguf]).max())
    assert err < 1e-4, f"{case}: GGUF import differs from the HF import by {err:.3e}"
    assert np.abs(out[from_hf]).max() > 0.5
