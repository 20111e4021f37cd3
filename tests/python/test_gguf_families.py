"""GGUF import of the families beyond the Llama layout (Gemma 3, SmolLM3,
Phi-3, Qwen3.5): tiny random checkpoints with a real tokenizer, written as GGUF
by the convert_hf_to_gguf.py vendored in the pinned llama-cpp-python sdist, then
imported by cism. The import must give the logits of the same checkpoint
converted from its Hugging Face folder (and so of transformers: the parity
tests), which checks the fields llama.cpp's loader assumes rather than stores
(Gemma 3's layer pattern and local RoPE base, SmolLM3's NoPE step), the fused
tensors it cuts (Phi-3's qkv and gate/up) and what llama.cpp changes in
Qwen3.5's (value heads reordered, A_log as -exp(A_log), norms as 1 + w, the
conv kernels squeezed, the MTP block appended as a layer)."""
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

from cism import gguf as G  # noqa: E402
from cism.convert_gguf import ConversionError, _a_log, config_from_gguf  # noqa: E402
from test_parity_qwen35 import _randomize as _randomize_qwen35  # noqa: E402
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
    # DeltaNet 2 key heads / 4 value heads (llama.cpp reorders them), value heads wider than key heads
    # (llama.cpp's own loader assumes them equal; the GGUF's sizes say which is which), not the default
    # layer pattern, half of each attention head rotated (not the default quarter), an MTP head
    "qwen35": ("Qwen3_5TextConfig", "Qwen3_5ForCausalLM", dict(
        num_hidden_layers=6, head_dim=16, linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=8,
        linear_value_head_dim=12, linear_conv_kernel_dim=4, tie_word_embeddings=False, mtp_num_hidden_layers=1,
        layer_types=["linear_attention", "full_attention", "linear_attention", "linear_attention", "full_attention",
                     "linear_attention"],
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5})),
}
RANDOMIZE = {"qwen35": _randomize_qwen35}  # norms as 1 + w needs w near 0; A_log, dt_bias and conv kernels too
N_PROMPT = 80  # past the first block of 64 positions of Qwen3.5's chunked delta rule


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
    RANDOMIZE.get(case, _randomize)(model, 1)
    model.save_pretrained(str(folder), safe_serialization=True)
    if getattr(cfg, "mtp_num_hidden_layers", 0):
        _add_mtp_head(folder, cfg)
    shutil.copy(os.path.join(tok_dir, "tokenizer.json"), folder / "tokenizer.json")
    (folder / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "GPT2Tokenizer"}))


def _add_mtp_head(folder, cfg):
    """Qwen3.5's multi-token-prediction head, as the published checkpoints carry it (mtp.*: a
    full-attention layer, the fc joining embedding and hidden state, three norms), which
    transformers neither builds nor saves: random tensors of those names. The HF import leaves
    them out; llama.cpp appends them as layer num_hidden_layers (nextn_predict_layers)."""
    from safetensors.numpy import load_file, save_file
    path = str(folder / "model.safetensors")
    tensors = load_file(path)
    full = cfg.layer_types.index("full_attention")
    rng = np.random.default_rng(2)
    d = cfg.hidden_size
    prefix = f"model.layers.{full}."
    extra = {"mtp.layers.0." + k[len(prefix):]: v.shape for k, v in tensors.items() if k.startswith(prefix)}
    extra.update({"mtp.fc.weight": (d, 2 * d), "mtp.pre_fc_norm_embedding.weight": (d,),
                  "mtp.pre_fc_norm_hidden.weight": (d,), "mtp.norm.weight": (d,)})
    tensors.update({k: (0.1 * rng.standard_normal(shape)).astype(np.float32) for k, shape in extra.items()})
    save_file(tensors, path, metadata={"format": "pt"})


def _gguf_of(case, llama_cpp_tools, shared_models, tmp_path) -> str:
    """The case's checkpoint in tmp_path/case and the GGUF file llama.cpp's converter writes of it."""
    folder = tmp_path / case
    folder.mkdir()
    _checkpoint(case, folder, os.path.join(shared_models, "tokenizers", TOKENIZER))
    gguf = str(tmp_path / f"{case}.gguf")
    stub = tmp_path / "stub"
    stub.mkdir(exist_ok=True)
    (stub / "sentencepiece.py").write_text("class SentencePieceProcessor:\n    pass\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.join(llama_cpp_tools, "gguf-py"), str(stub)]),
               NO_LOCAL_GGUF="")
    p = subprocess.run([sys.executable, os.path.join(llama_cpp_tools, "convert_hf_to_gguf.py"), str(folder),
                        "--outtype", "f32", "--outfile", gguf], env=env, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    return gguf


@pytest.fixture(scope="module")
def gguf_files(llama_cpp_tools, shared_models, tmp_path_factory):
    """case -> (its HF folder, its GGUF file), made once per module."""
    made = {}

    def get(case):
        if case not in made:
            tmp = tmp_path_factory.mktemp(case)
            made[case] = (tmp / case, _gguf_of(case, llama_cpp_tools, shared_models, tmp))
        return made[case]
    return get


@pytest.mark.parametrize("case", list(CASES))
def test_gguf_import_matches_hf_import(case, gguf_files, tmp_path):
    folder, gguf = gguf_files(case)
    from_hf, from_gguf = str(tmp_path / "hf.cism"), str(tmp_path / "gguf.cism")
    convert(str(folder), from_hf, progress=None)
    convert(gguf, from_gguf, progress=None)
    prompt = np.random.default_rng(5).integers(3, 40000, N_PROMPT).tolist()
    out = {}
    for path in (from_hf, from_gguf):
        with cism.Model(path) as m:
            assert m.architecture == case
            with m.session(kv_type="f32", logits_all=True) as s:
                s.eval(prompt)
                out[path] = s.all_logits()
    err = float(np.abs(out[from_hf] - out[from_gguf]).max())
    print(f"{case}: max |logit difference| GGUF vs HF import {err:.3e}")
    assert err < 1e-4, f"{case}: GGUF import differs from the HF import by {err:.3e}"
    assert np.abs(out[from_hf]).max() > 0.5


def test_qwen35_gguf_metadata(gguf_files):
    """What the Qwen3.5 import reads from the metadata llama.cpp wrote, and what it refuses:
    the layer types from attention.recurrent_layers (without it, full_attention_interval as
    llama.cpp's loader reads it), the MTP layer left out, the partial RoPE factor; a qwen35moe
    file refused by name; an A that is not -exp(A_log) refused."""
    _, gguf = gguf_files("qwen35")
    with G.GGUFFile(gguf) as g:
        assert g.metadata["qwen35.block_count"] == 7 and g.metadata["qwen35.nextn_predict_layers"] == 1
        cfg = config_from_gguf(g)
        want = CASES["qwen35"][2]
        assert cfg["layer_types"] == want["layer_types"] and cfg["num_hidden_layers"] == 6
        assert cfg["partial_rotary_factor"] == 0.5
        assert (cfg["linear_key_head_dim"], cfg["linear_value_head_dim"]) == (8, 12)
        del g.metadata["qwen35.attention.recurrent_layers"]
        g.metadata["qwen35.full_attention_interval"] = 3
        assert config_from_gguf(g)["layer_types"] == ["linear_attention", "linear_attention", "full_attention"] * 2
        g.metadata["general.architecture"] = "qwen35moe"
        with pytest.raises(ConversionError, match="'qwen35moe' is not supported: Qwen3.5 MoE: its mixture-of-experts"):
            config_from_gguf(g)
    assert _a_log(np.array([-2.0, -0.5], np.float32), "x").tolist() == pytest.approx([np.log(2), np.log(0.5)])
    with pytest.raises(ConversionError, match="blk.0.ssm_a holds 0.0: it must be A = -exp"):
        _a_log(np.array([-1.0, 0.0], np.float32), "blk.0.ssm_a")
