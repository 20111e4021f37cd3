"""Synthetic models: the shapes of real checkpoints with seeded random weights.

They let `cism bench` run on a fresh machine with nothing downloaded. The
hyper-parameters are those of the named model's config.json; the weights are
uniform random numbers with the spread of a freshly initialized model (std
0.02), norm weights 1 and biases 0, so the speed is the real model's and the
output is noise. Files are written once into the cache folder
($CISM_CACHE_DIR, default ~/.cache/cism) and reused; a tensor is generated
and written a block of rows at a time, so memory stays small.
"""
from __future__ import annotations

import json
import os
import sys
import zlib
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterator, Optional

import numpy as np

from . import format as fmt
from .convert import DTYPES, expected_tensors
from .safetensors import f32_to_bf16

VERSION = 2  # bump when the generated files change (weights or metadata), so old cache files are not reused
INIT_STD = 0.02


@dataclass(frozen=True)
class Preset:
    name: str
    source: str            # the model whose config.json the shapes come from
    architecture: str
    vocab_size: int
    dim: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    ffn_dim: int
    context_length: int
    rope_theta: float
    norm_eps: float
    tied: bool
    extra: Dict[str, Any] = field(default_factory=dict)  # more metadata (rope scaling, bias, qk-norm)

    def metadata(self) -> Dict[str, Any]:
        meta: Dict[str, Any] = {
            "general.architecture": self.architecture,
            "model.vocab_size": self.vocab_size,
            "model.dim": self.dim,
            "model.n_layers": self.n_layers,
            "model.n_heads": self.n_heads,
            "model.n_kv_heads": self.n_kv_heads,
            "model.head_dim": self.head_dim,
            "model.ffn_dim": self.ffn_dim,
            "model.context_length": self.context_length,
            "model.norm_eps": float(self.norm_eps),
            "model.rope_theta": float(self.rope_theta),
            "model.tied_embeddings": int(self.tied),
        }
        if self.architecture == "qwen2":
            meta["model.attn_qkv_bias"] = 1
        if self.architecture == "qwen3":
            meta["model.qk_norm"] = 1
        meta.update(self.extra)
        return meta

    def n_params(self) -> int:
        return sum(int(np.prod(s)) for s in expected_tensors(self.metadata()).values() if len(s) == 2)


def _llama3_rope(factor: float, orig: int) -> Dict[str, Any]:
    return {"model.rope_scaling.type": "llama3", "model.rope_scaling.factor": factor,
            "model.rope_scaling.low_freq_factor": 1.0, "model.rope_scaling.high_freq_factor": 4.0,
            "model.rope_scaling.original_context_length": orig}


def _gemma3(n_layers: int, dim: int, window: int = 512) -> Dict[str, Any]:
    """Gemma 3's metadata as hf_families writes it: every 6th layer global."""
    return {"model.ffn_activation": "gelu_tanh", "model.qk_norm": 1, "model.post_norms": 1,
            "model.embedding_scale": float(np.float32(dim ** 0.5)), "model.attention_scale": 256 ** -0.5,
            "model.sliding_window": window, "model.layer_sliding": [int((i + 1) % 6 != 0) for i in range(n_layers)],
            "model.rope_theta_local": 10000.0}


PRESETS: Dict[str, Preset] = {p.name: p for p in [
    Preset("tiny", "none (a test model)", "llama", 256, 64, 2, 4, 2, 16, 192, 1024, 10000.0, 1e-5, False),
    Preset("smollm2-135m", "HuggingFaceTB/SmolLM2-135M", "llama", 49152, 576, 30, 9, 3, 64, 1536, 8192,
           100000.0, 1e-5, True),
    Preset("smollm2-360m", "HuggingFaceTB/SmolLM2-360M", "llama", 49152, 960, 32, 15, 5, 64, 2560, 8192,
           100000.0, 1e-5, True),
    Preset("smollm2-1.7b", "HuggingFaceTB/SmolLM2-1.7B", "llama", 49152, 2048, 24, 32, 32, 64, 8192, 8192,
           130000.0, 1e-5, True),
    Preset("qwen2.5-0.5b", "Qwen/Qwen2.5-0.5B", "qwen2", 151936, 896, 24, 14, 2, 64, 4864, 32768,
           1000000.0, 1e-6, True),
    Preset("qwen3-0.6b", "Qwen/Qwen3-0.6B", "qwen3", 151936, 1024, 28, 16, 8, 128, 3072, 40960,
           1000000.0, 1e-6, True),
    Preset("llama3.2-1b", "meta-llama/Llama-3.2-1B", "llama", 128256, 2048, 16, 32, 8, 64, 8192, 131072,
           500000.0, 1e-5, True, _llama3_rope(32.0, 8192)),
    Preset("tinyllama-1.1b", "TinyLlama/TinyLlama-1.1B-intermediate-step-1431k-3T", "llama", 32000, 2048, 22, 32, 4,
           64, 5632, 2048, 10000.0, 1e-5, False),
    Preset("gemma3-270m", "google/gemma-3-270m", "gemma3", 262144, 640, 18, 4, 1, 256, 2048, 32768,
           1000000.0, 1e-6, True, _gemma3(18, 640)),
    Preset("gemma3-1b", "google/gemma-3-1b-pt", "gemma3", 262144, 1152, 26, 4, 1, 256, 6912, 32768,
           1000000.0, 1e-6, True, _gemma3(26, 1152)),
    Preset("smollm3-3b", "HuggingFaceTB/SmolLM3-3B", "smollm3", 128256, 2048, 36, 16, 4, 128, 11008, 65536,
           5000000.0, 1e-6, True, {"model.layer_rope": [int((i + 1) % 4 != 0) for i in range(36)]}),
    Preset("lfm2-1.2b", "LiquidAI/LFM2-1.2B", "lfm2", 65536, 2048, 16, 32, 8, 64, 8192, 128000,
           1000000.0, 1e-5, True, {"model.layer_types": ["attention" if i in (2, 5, 8, 10, 12, 14) else "shortconv"
                                                        for i in range(16)],
                                   "model.conv_kernel": 3, "model.qk_norm": 1}),
    Preset("phi3-mini", "microsoft/Phi-3-mini-4k-instruct", "phi3", 32064, 3072, 32, 32, 32, 96, 8192, 4096,
           10000.0, 1e-5, False, {"model.sliding_window": 2047}),
    # the text model of Qwen/Qwen3.5-0.8B (its vision tower and MTP head left out, as the converter does):
    # three Gated DeltaNet layers to one gated full-attention layer, a quarter of each head rotated
    Preset("qwen3.5-0.8b", "Qwen/Qwen3.5-0.8B (text)", "qwen35", 248320, 1024, 24, 8, 2, 256, 3584, 262144,
           10000000.0, 1e-6, True, {"model.layer_types": ["attention" if i % 4 == 3 else "linear_attention"
                                                          for i in range(24)],
                                    "model.rope_dim": 64, "model.qk_norm": 1, "model.attn_output_gate": 1,
                                    "model.linear_n_k_heads": 16, "model.linear_n_v_heads": 16,
                                    "model.linear_k_head_dim": 128, "model.linear_v_head_dim": 128,
                                    "model.linear_conv_kernel": 4}),
]}


def cache_dir() -> str:
    d = os.environ.get("CISM_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "cism")
    return d


def float_blocks(seed: int, name: str, shape, rows_per_block: int = 1024) -> Iterator[np.ndarray]:
    """The tensor's f32 values a block of rows at a time, from a generator seeded
    by (seed, tensor name): the same values on every machine and every run, in
    every dtype or recipe (and in the GGUF files of cism.llamacpp)."""
    rng = np.random.Generator(np.random.PCG64([seed, zlib.crc32(name.encode()), VERSION]))
    half = INIT_STD * np.sqrt(3.0)  # uniform(-a, a) has std a/sqrt(3)
    rows = shape[0]
    cols = int(np.prod(shape[1:])) if len(shape) > 1 else 1
    for r0 in range(0, rows, rows_per_block):
        n = min(rows_per_block, rows - r0)
        block = rng.random((n, cols), dtype=np.float32)
        block *= np.float32(2 * half)
        block -= np.float32(half)
        yield block


def _tensor_blocks(seed: int, name: str, shape, dtype: int, rows_per_block: int = 1024) -> Iterator[np.ndarray]:
    """The tensor's data in `dtype`, a block of rows at a time (whole groups of 16 rows)."""
    for block in float_blocks(seed, name, shape, rows_per_block):
        if dtype == fmt.DTYPE_F32:
            yield block
        elif dtype == fmt.DTYPE_F16:
            yield block.astype("<f2")
        elif dtype == fmt.DTYPE_BF16:
            yield f32_to_bf16(block)
        else:
            from .quant import quantize
            yield quantize(block, dtype)


def _check_dtype(dtype: str) -> None:
    from . import quant as q
    if dtype not in DTYPES and dtype not in q.RECIPES:
        raise ValueError(f"unknown dtype or recipe {dtype!r} (one of {', '.join(list(DTYPES) + list(q.RECIPES))})")


def write_synthetic(preset: Preset, path: str, dtype: str = "f32", seed: int = 0,
                    progress: Optional[Callable[[int, int, str], None]] = None) -> str:
    """Writes the preset's model with random weights to `path`. `dtype` is a float
    dtype (f32, f16, bf16) or a quantization recipe (cism.quant.RECIPES: q8, 4bit,
    q4s, ...), applied as `cism convert --quant` would (row-interleaved layout)."""
    from . import quant as q
    _check_dtype(dtype)
    meta = preset.metadata()
    meta.update({"general.name": f"synthetic {preset.name}", "general.source": f"synthetic:{preset.source}",
                 "general.converter": f"cism.synthetic v{VERSION}", "synthetic.seed": int(seed)})
    if "tokenizer.hf_json" in meta and "tokenizer.tokens" not in meta:
        # the C tokenizer's keys, as `cism convert` writes them
        from .tokenizer_meta import TokenizerUnsupported, compact_tokenizer
        raw = meta["tokenizer.hf_json"]
        raw = raw.data if isinstance(raw, fmt.Bytes) else raw
        try:
            meta.update(compact_tokenizer(json.loads(raw.decode("utf-8") if isinstance(raw, bytes) else raw)))
        except TokenizerUnsupported:
            pass
    shapes = expected_tensors(meta)
    if dtype in q.RECIPES:
        meta["general.quantization"] = dtype
    w = fmt.Writer(meta)
    for name, shape in shapes.items():
        if len(shape) != 2:  # vectors and Gated DeltaNet's conv kernels stay f32, as `cism convert` keeps them
            dt = fmt.DTYPE_F32
        elif dtype in DTYPES:
            dt = DTYPES[dtype]
        else:
            dt = q.QUANT_DTYPES[q.stored_dtype(name, q.recipe(dtype).pick(name), shape, preset.head_dim)]
        nbytes = shape[0] * q.row_bytes(dt, shape[1]) if len(shape) == 2 else int(np.prod(shape)) * 4
        w.add(name, dt, shape, nbytes)
    total = sum(t.nbytes for t in w.tensors)
    done = 0
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with w.open(path, overwrite=True) as f:
        for spec in w.tensors:
            if len(spec.shape) == 1:
                fill = 0.0 if spec.name.endswith("_bias") else 1.0
                f.write_tensor(spec.name, np.full(spec.shape, fill, dtype="<f4"))
            else:
                f.write_tensor_parts(spec.name, _tensor_blocks(seed, spec.name, spec.shape, spec.dtype))
            done += spec.nbytes
            if progress:
                progress(done, total, spec.name)
    return path


def synthetic_path(name: str, dtype: str = "f32", seed: int = 0) -> str:
    from .format import VERSION as FILE_VERSION  # a new file format version regenerates the cache too
    return os.path.join(cache_dir(), f"synthetic-{name}-{dtype}-seed{seed}-v{VERSION}-f{FILE_VERSION}.cism")


def get_synthetic(name: str, dtype: str = "f32", seed: int = 0, verbose: bool = True) -> str:
    """Path of the preset's model file, generating it on first use."""
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r} (one of {', '.join(PRESETS)})")
    _check_dtype(dtype)  # before the "generating" line
    path = synthetic_path(name, dtype, seed)
    if os.path.exists(path):
        return path
    preset = PRESETS[name]
    if verbose:
        gb = preset.n_params() * {"f32": 4, "f16": 2, "bf16": 2, "q8": 1.06}.get(dtype, 0.6) / 1e9
        sys.stderr.write(f"generating synthetic {name} ({preset.n_params() / 1e6:.1f}M parameters, {dtype}, "
                         f"{gb:.2f} GB) into {path} (once; reused afterwards)\n")
    from .convert import progress_printer
    tmp = f"{path}.{os.getpid()}"  # private name: two processes never write the same file
    try:
        write_synthetic(PRESETS[name], tmp, dtype, seed, progress_printer() if verbose else None)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return path
