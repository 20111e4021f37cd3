"""Importing GGUF files (llama.cpp's format) as .cism models (docs/GGUF.md).

The hyper-parameters become the config.json a Hugging Face folder would have
and go through the same hparams_from_config; the tokenizer becomes the
tokenizer.json it was made from and goes through the same compact_tokenizer;
tensors keep their values wherever a libcism format holds them (transcoded
byte for byte), and are dequantized and requantized (said in the report, per
tensor) where none does. Everything unsupported is refused before any output
is written.
"""
from __future__ import annotations

import json
import math
import os
import re
from typing import Any, Dict, List, NamedTuple, Optional, Tuple

import numpy as np

from . import format as fmt
from . import gguf as G
from .convert import (ConversionError, ProgressFn, Report, _c_tokenizer, _version, chat_format_meta,
                      expected_tensors, hparams_from_config, write_model)

# the native asymmetric 4-bit format (blocks of 32, fp16 scale and minimum: Q4_1's bytes)
DTYPE_Q4A = getattr(fmt, "DTYPE_Q4A", 10)
fmt.DTYPE_NAMES.setdefault(DTYPE_Q4A, "q4a")
FLOAT_DTYPES = {"f32": fmt.DTYPE_F32, "f16": fmt.DTYPE_F16, "bf16": fmt.DTYPE_BF16}

ARCHITECTURES = {"llama": "LlamaForCausalLM", "mistral": "MistralForCausalLM", "qwen2": "Qwen2ForCausalLM",
                 "qwen3": "Qwen3ForCausalLM", "gemma3": "Gemma3ForCausalLM", "smollm3": "SmolLM3ForCausalLM",
                 "phi3": "Phi3ForCausalLM", "lfm2": "Lfm2ForCausalLM", "qwen35": "Qwen3_5ForCausalLM"}
# llama.cpp architectures next to a supported one: why they are refused
REFUSED = {"qwen35moe": "Qwen3.5 MoE: its mixture-of-experts feed-forward layers are not supported (dense Qwen3.5, "
                        "qwen35, is)",
           "qwen3next": "Qwen3-Next: its mixture-of-experts feed-forward layers are not supported"}
# llama.cpp's converter permutes the Q/K rows of these architectures (LlamaModel.permute)
PERMUTED = ("llama", "mistral", "smollm3")
# per architecture: GGUF layer tensor -> .cism layer tensors over the shared names,
# a fused tensor as [(name, first row, end row)] with row counts from the metadata
_ARCH_LAYER_NAMES = {
    "gemma3": {"post_attention_norm.weight": "post_attn_norm", "post_ffw_norm.weight": "post_ffn_norm"},
    "phi3": {"attn_qkv.weight": None, "ffn_up.weight": None},
    # Qwen3.5: llama.cpp names the DeltaNet's in_proj_qkv attn_qkv and its z gate attn_gate; the tensors
    # mapped to None are reordered or split (gguf_splits)
    "qwen35": {"post_attention_norm.weight": "ffn_norm", "ssm_norm.weight": "ssm_norm", "attn_q.weight": None,
               "attn_qkv.weight": None, "attn_gate.weight": None, "ssm_conv1d.weight": None, "ssm_beta.weight": None,
               "ssm_alpha.weight": None, "ssm_dt.bias": None, "ssm_a": None, "ssm_out.weight": None},
}

_LAYER_NAMES = {"attn_norm.weight": "attn_norm", "attn_q.weight": "attn_q", "attn_k.weight": "attn_k",
                "attn_v.weight": "attn_v", "attn_output.weight": "attn_output", "attn_q.bias": "attn_q_bias",
                "attn_k.bias": "attn_k_bias", "attn_v.bias": "attn_v_bias", "attn_q_norm.weight": "attn_q_norm",
                "attn_k_norm.weight": "attn_k_norm", "ffn_norm.weight": "ffn_norm", "ffn_gate.weight": "ffn_gate",
                "ffn_up.weight": "ffn_up", "ffn_down.weight": "ffn_down"}
_TOP_NAMES = {"token_embd.weight": "token_embd", "output_norm.weight": "output_norm", "output.weight": "output"}
# LFM2 (llama.cpp's lfm2): the final norm is HF's embedding_norm, the short-convolution layers' tensors
_LFM2_TOP = {"token_embd_norm.weight": "output_norm"}
_LFM2_LAYER = {"shortconv.in_proj.weight": "conv_in", "shortconv.conv.weight": "conv_kernel",
               "shortconv.out_proj.weight": "conv_out"}
_LAYER_RE = re.compile(r"^blk\.(\d+)\.(.+)$")

# token types (llama.cpp's llama_token_type)
TT_NORMAL, TT_UNKNOWN, TT_CONTROL, TT_USER_DEFINED, TT_UNUSED, TT_BYTE = 1, 2, 3, 4, 5, 6

_LLAMA3_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
                 r"\s*[\r\n]+|\s+(?!\S)|\s+")
_QWEN2_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
                r"\s*[\r\n]+|\s+(?!\S)|\s+")


def _byte_level(use_regex: bool) -> Dict[str, Any]:
    return {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": use_regex}


def _split(pattern: str) -> Dict[str, Any]:
    return {"type": "Split", "pattern": {"Regex": pattern}, "behavior": "Isolated", "invert": False}


# tokenizer.ggml.pre -> (normalizer, pre_tokenizer, ignore_merges) of the tokenizer.json those models ship
BPE_PRE: Dict[str, Tuple[Optional[Dict[str, Any]], Dict[str, Any], bool]] = {
    "gpt2": (None, _byte_level(True), False),
    "smollm": (None, {"type": "Sequence", "pretokenizers": [{"type": "Digits", "individual_digits": True},
                                                            _byte_level(True)]}, False),
    "llama-bpe": (None, {"type": "Sequence", "pretokenizers": [_split(_LLAMA3_SPLIT), _byte_level(False)]}, True),
    "qwen2": ({"type": "NFC"}, {"type": "Sequence", "pretokenizers": [_split(_QWEN2_SPLIT), _byte_level(False)]},
              False),
}
BPE_PRE["llama3"] = BPE_PRE["llama-bpe"]


def is_gguf(path: str) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(4) == G.MAGIC
    except OSError:
        return False


# ---------------------------------------------------------------------------
# hyper-parameters

def _f32(v: Any) -> float:
    """A float32 metadata value as the shortest decimal that rounds to it (1e-05, not
    9.99999974e-06), as the config.json it came from had it."""
    return float(str(np.float32(v)))


def _key(g: G.GGUFFile, key: str, required: bool = True, kind: str = "int") -> Any:
    if key not in g.metadata:
        if required:
            raise ConversionError(f"{g.path}: metadata key {key!r} is missing")
        return None
    v = g.metadata[key]
    if kind == "int":
        if isinstance(v, bool) or not isinstance(v, int):
            raise ConversionError(f"{g.path}: metadata {key!r} must be an integer, not {v!r:.60}")
        return v
    if kind == "float":
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise ConversionError(f"{g.path}: metadata {key!r} must be a finite number, not {v!r:.60}")
        return _f32(v) if g.value_types.get(key) == G.T_FLOAT32 else float(v)
    if kind == "str":
        if not isinstance(v, str):
            raise ConversionError(f"{g.path}: metadata {key!r} must be a string")
        return v
    if kind == "bool":
        if not isinstance(v, bool):
            raise ConversionError(f"{g.path}: metadata {key!r} must be a boolean")
        return v
    raise AssertionError(kind)


def _llama3_scaling(g: G.GGUFFile, freqs: np.ndarray, theta: float, head_dim: int) -> Dict[str, Any]:
    """Llama 3's RoPE scaling from the rope_freqs tensor llama.cpp writes in its place:
    the parameters whose factors reproduce it."""
    if freqs.shape != (head_dim // 2,) or not np.all(np.isfinite(freqs)) or np.any(freqs <= 0):
        raise ConversionError(f"{g.path}: tensor rope_freqs.weight has shape {freqs.shape} or values that are "
                              f"not Llama 3 RoPE factors (head_dim {head_dim})")
    if np.all(freqs == 1):
        return {}
    factor = float(freqs.max())
    inv = 1.0 / (theta ** (np.arange(0, head_dim, 2, dtype=np.float32) / head_dim))
    wavelen = 2 * math.pi / inv.astype(np.float64)
    orig_guess = _key(g, f"{g.metadata['general.architecture']}.rope.scaling.original_context_length", False)
    for orig in ([orig_guess] if orig_guess else []) + [8192, 4096, 2048, 131072]:
        for low, high in ((1.0, 4.0), (1.0, 2.0), (2.0, 4.0)):
            smooth = (orig / wavelen - low) / (high - low)
            want = np.where(wavelen < orig / high, 1.0,
                            np.where(wavelen > orig / low, factor, 1 / ((1 - smooth) / factor + smooth)))
            if np.allclose(freqs, want, rtol=1e-5, atol=0):
                return {"rope_type": "llama3", "factor": factor, "low_freq_factor": low, "high_freq_factor": high,
                        "original_max_position_embeddings": int(orig)}
    raise ConversionError(f"{g.path}: tensor rope_freqs.weight holds RoPE factors that match no Llama 3 scaling "
                          "(factor, low/high frequency factors, original context) this importer recognizes")


def config_from_gguf(g: G.GGUFFile) -> Dict[str, Any]:
    """The Hugging Face config.json equivalent of a GGUF file's hyper-parameters."""
    arch = _key(g, "general.architecture", kind="str")
    if arch in REFUSED:
        raise ConversionError(f"{g.path}: architecture {arch!r} is not supported: {REFUSED[arch]}")
    if arch not in ARCHITECTURES:
        raise ConversionError(f"{g.path}: architecture {arch!r} is not supported "
                              f"(supported: {', '.join(sorted(ARCHITECTURES))})")
    p = arch + "."
    if (_key(g, p + "expert_count", False) or 0) > 0:
        raise ConversionError(f"{g.path}: mixture-of-experts models ({p}expert_count) are not supported")
    dim = _key(g, p + "embedding_length")
    n_heads = _key(g, p + "attention.head_count")
    lfm2 = _lfm2_config(g, p) if arch == "lfm2" else {}
    n_kv = lfm2.pop("num_key_value_heads", None) or _key(g, p + "attention.head_count_kv", False) or n_heads
    for k, v in (("embedding_length", dim), ("attention.head_count", n_heads), ("attention.head_count_kv", n_kv)):
        if not 0 < v <= (1 << 20):
            raise ConversionError(f"{g.path}: metadata {p + k!r} is {v}")
    head_dim = _key(g, p + "attention.key_length", False) or dim // n_heads
    vdim = _key(g, p + "attention.value_length", False)
    if vdim is not None and vdim != head_dim:
        raise ConversionError(f"{g.path}: key length {head_dim} and value length {vdim} differ (not supported)")
    rot = _key(g, p + "rope.dimension_count", False)
    if rot is not None and rot != head_dim and arch not in ("phi3", "qwen35"):
        raise ConversionError(f"{g.path}: RoPE on {rot} of {head_dim} dimensions per head (partial rotary "
                              f"embeddings are supported for phi3 and qwen35, not {arch})")
    for t in ("rope_factors_long.weight", "rope_factors_short.weight"):
        if t in g.tensors:
            raise ConversionError(f"{g.path}: tensor {t!r}: longrope RoPE scaling (Phi-3 128k, Phi-4-mini) is not "
                                  "supported: its frequencies change with the sequence length")
    if "token_embd.weight" not in g.tensors:
        raise ConversionError(f"{g.path}: tensor 'token_embd.weight' is missing")
    vocab = g.tensors["token_embd.weight"].shape[0]
    declared = _key(g, p + "vocab_size", False)
    if declared is not None and declared != vocab:
        raise ConversionError(f"{g.path}: {p}vocab_size is {declared} but token_embd.weight has {vocab} rows")
    theta = _key(g, p + "rope.freq_base", False, "float") or (1000000.0 if arch == "lfm2" else 10000.0)
    cfg: Dict[str, Any] = {
        "architectures": [ARCHITECTURES[arch]],
        "hidden_size": dim,
        "num_attention_heads": n_heads,
        "num_key_value_heads": n_kv,
        "head_dim": head_dim,
        "num_hidden_layers": _key(g, p + "block_count"),
        "intermediate_size": _key(g, p + "feed_forward_length"),
        "max_position_embeddings": _key(g, p + "context_length"),
        "rms_norm_eps": _key(g, p + "attention.layer_norm_rms_epsilon", kind="float"),
        "rope_theta": theta,
        "vocab_size": vocab,
        "tie_word_embeddings": "output.weight" not in g.tensors,
        "hidden_act": "silu",
    }
    if arch == "qwen2":
        cfg["attention_bias"] = True
    if arch == "lfm2":
        cfg.update(lfm2, norm_eps=cfg["rms_norm_eps"], tie_embedding=cfg["tie_word_embeddings"])
    window = _key(g, p + "attention.sliding_window", False)
    if window:
        cfg["sliding_window"] = window
    if arch == "phi3" and rot is not None and rot != head_dim:
        cfg["partial_rotary_factor"] = _rotary_factor(rot, head_dim)
    if arch == "gemma3":
        _gemma3_config(g, cfg, window, theta)
    if arch == "qwen35":
        _qwen35_config(g, cfg, _rotary_factor(rot or head_dim, head_dim))
    stype = _key(g, p + "rope.scaling.type", False, "str")
    if stype in (None, "none"):
        pass
    elif stype == "linear":
        cfg["rope_scaling"] = {"rope_type": "linear", "factor": _key(g, p + "rope.scaling.factor", kind="float")}
    else:
        raise ConversionError(f"{g.path}: RoPE scaling type {stype!r} is not supported (supported: none, linear, "
                              "and Llama 3's, which llama.cpp writes as the rope_freqs tensor)")
    if "rope_freqs.weight" in g.tensors:
        if "rope_scaling" in cfg:
            raise ConversionError(f"{g.path}: both {p}rope.scaling.type and a rope_freqs tensor")
        scaling = _llama3_scaling(g, g.dequantize("rope_freqs.weight"), theta, head_dim)
        if scaling:
            cfg["rope_scaling"] = scaling
    return cfg


def _rotary_factor(rot: int, head_dim: int) -> float:
    """The partial_rotary_factor that rotates `rot` of `head_dim` dimensions: transformers (and
    hparams_from_config) rotate int(head_dim * factor), and rot / head_dim times head_dim can
    fall just below rot (30 / 44 * 44 = 29.999...), so then the next float up."""
    f = rot / head_dim
    return f if int(head_dim * f) == rot else math.nextafter(f, 2.0)


def _gemma3_config(g: G.GGUFFile, cfg: Dict[str, Any], window: Optional[int], theta: float) -> None:
    """Gemma 3's fields as llama.cpp reads them (its gemma3 loader): a sliding window on the
    layers of sliding_window_pattern (an array of flags, or n: every n-th layer global;
    default 6), their RoPE base rope.freq_base_swa (default 10000), the query scale
    1/sqrt(head_dim) (the 62-layer 27B: 1/sqrt(dim / heads)). The norm weights are stored
    as 1 + w already (llama.cpp's converter adds it), as .cism keeps them."""
    p = "gemma3."
    n = cfg["num_hidden_layers"]
    cfg.pop("hidden_act")
    cfg["hidden_activation"] = "gelu_pytorch_tanh"
    cfg["query_pre_attn_scalar"] = cfg["hidden_size"] // cfg["num_attention_heads"] if n == 62 else cfg["head_dim"]
    soft = _key(g, p + "final_logit_softcapping", False, "float")
    if soft:
        cfg["final_logit_softcapping"] = soft
    local = _key(g, p + "rope.freq_base_swa", False, "float") or 10000.0
    cfg["rope_parameters"] = {"full_attention": {"rope_type": "default", "rope_theta": theta},
                              "sliding_attention": {"rope_type": "default", "rope_theta": local}}
    pattern = g.metadata.get(p + "attention.sliding_window_pattern")
    if not window:
        sliding = [False] * n
    elif isinstance(pattern, list):
        if len(pattern) != n or not all(isinstance(x, bool) for x in pattern):
            raise ConversionError(f"{g.path}: metadata {p}attention.sliding_window_pattern must hold {n} flags")
        sliding = list(pattern)
    else:
        every = pattern if pattern is not None else 6
        if isinstance(every, bool) or not isinstance(every, int) or every < 0:
            raise ConversionError(f"{g.path}: metadata {p}attention.sliding_window_pattern must be a count or flags")
        sliding = [every == 0 or i % every < every - 1 for i in range(n)]
    cfg["layer_types"] = ["sliding_attention" if x else "full_attention" for x in sliding]
    cfg["sliding_window"] = window or cfg["max_position_embeddings"]


def _lfm2_config(g: G.GGUFFile, p: str) -> Dict[str, Any]:
    """LFM2's config.json fields from its GGUF keys: the layer types (llama.cpp writes
    head_count_kv per layer, 0 on the short-convolution layers), the conv kernel, and
    the MLP width already as Lfm2MLP sizes it."""
    n_layers = _key(g, p + "block_count")
    kv = g.metadata.get(p + "attention.head_count_kv")
    if isinstance(kv, int) and not isinstance(kv, bool):
        kv = [kv] * n_layers
    kv = [int(x) for x in np.asarray(kv).reshape(-1)] if kv is not None else []
    if len(kv) != n_layers or any(x < 0 for x in kv) or len({x for x in kv if x}) > 1:
        raise ConversionError(f"{g.path}: metadata {p}attention.head_count_kv must give each of the {n_layers} layers "
                              "its KV heads (0 on short-convolution layers, one count on the others)")
    cfg: Dict[str, Any] = {"layer_types": ["full_attention" if x else "conv" for x in kv],
                           "num_key_value_heads": max(kv) or None, "block_auto_adjust_ff_dim": False}
    if 0 in kv:
        cfg["conv_L_cache"] = _key(g, p + "shortconv.l_cache")
    return cfg


def _qwen35_config(g: G.GGUFFile, cfg: Dict[str, Any], partial: float) -> None:
    """Qwen3.5's fields from its GGUF keys, as llama.cpp's qwen35 loader reads them: the
    DeltaNet sizes from ssm.* (state_size the key head width, group_count the key heads,
    time_step_rank the value heads, inner_size all value heads' width: llama.cpp assumes
    value heads as wide as key heads, the sizes here need not), the layer types from
    attention.recurrent_layers (else full_attention_interval), and block_count less the
    nextn_predict_layers multi-token-prediction block llama.cpp appends (left out, as the
    HF import leaves out mtp.*). The partial RoPE factor is always given: without one,
    Qwen3.5 rotates a quarter of each head."""
    p = "qwen35."
    n_all = cfg["num_hidden_layers"]
    n = n_all - (_key(g, p + "nextn_predict_layers", False) or 0)
    if not 0 < n <= n_all:
        raise ConversionError(f"{g.path}: {p}nextn_predict_layers leaves {n} of the {n_all} layers")
    nv, inner = _key(g, p + "ssm.time_step_rank"), _key(g, p + "ssm.inner_size")
    if nv <= 0 or inner % nv:  # the other sizes are checked as the config.json fields they become
        raise ConversionError(f"{g.path}: {p}ssm.inner_size {inner} is not {p}ssm.time_step_rank ({nv}) value "
                              "heads of one width")
    flags = g.metadata.get(p + "attention.recurrent_layers")
    if flags is None:
        every = _key(g, p + "full_attention_interval", False) or 4
        if every <= 0:
            raise ConversionError(f"{g.path}: {p}full_attention_interval is {every}")
        flags = [(i + 1) % every != 0 for i in range(n)]
    elif not (isinstance(flags, np.ndarray) and flags.dtype == np.bool_ and flags.shape == (n_all,)):
        raise ConversionError(f"{g.path}: {p}attention.recurrent_layers must hold {n_all} flags (one per layer)")
    cfg.update(num_hidden_layers=n, partial_rotary_factor=partial,
               layer_types=["linear_attention" if x else "full_attention" for x in flags[:n]],
               linear_num_key_heads=_key(g, p + "ssm.group_count"), linear_num_value_heads=nv,
               linear_key_head_dim=_key(g, p + "ssm.state_size"), linear_value_head_dim=inner // nv,
               linear_conv_kernel_dim=_key(g, p + "ssm.conv_kernel"))


def map_gguf_name(name: str, arch: str = "") -> Optional[str]:
    """The .cism name of a GGUF tensor, None for tensors that are consumed elsewhere or
    split (gguf_splits), or raises."""
    if arch == "lfm2" and name in _LFM2_TOP:
        return _LFM2_TOP[name]
    if name in _TOP_NAMES:
        return _TOP_NAMES[name]
    if name == "rope_freqs.weight":
        return None
    m = _LAYER_RE.match(name)
    names = {**_LAYER_NAMES, **_ARCH_LAYER_NAMES.get(arch, {}), **(_LFM2_LAYER if arch == "lfm2" else {})}
    if m and m.group(2) in names:
        return None if names[m.group(2)] is None else f"blk.{int(m.group(1))}.{names[m.group(2)]}"
    raise ConversionError(f"tensor {name!r} is not part of a supported model (unknown name)")


class Part(NamedTuple):
    """A .cism tensor read from part of a GGUF tensor, or from all of it reordered."""
    name: str
    rows: Optional[np.ndarray]          # the source rows, in order (None: all of them, as they are)
    cols: Optional[np.ndarray] = None   # the source columns, in order (None: all of them, as they are)


def gguf_splits(name: str, arch: str, meta: Dict[str, Any]) -> List[Part]:
    """The .cism tensors cut from a fused GGUF tensor (Phi-3's attn_qkv and its ffn_up,
    which holds the gate's rows and then the up projection's) or reordered from one
    (Qwen3.5's: _qwen35_parts)."""
    m = _LAYER_RE.match(name)
    if not m or arch not in ("phi3", "qwen35"):
        return []
    b = f"blk.{int(m.group(1))}."
    if arch == "qwen35":
        return _qwen35_parts(b, meta).get(m.group(2), [])
    hd, f = meta["model.head_dim"], meta["model.ffn_dim"]
    q, kv = meta["model.n_heads"] * hd, meta["model.n_kv_heads"] * hd
    r = np.arange(q + 2 * kv)
    return {"attn_qkv.weight": [Part(b + "attn_q", r[:q]), Part(b + "attn_k", r[q:q + kv]),
                                Part(b + "attn_v", r[q + kv:])],
            "ffn_up.weight": [Part(b + "ffn_gate", np.arange(f)), Part(b + "ffn_up", np.arange(f, 2 * f))]
            }.get(m.group(2), [])


def _hf_v_order(nk: int, nv: int, width: int) -> np.ndarray:
    """Undoes llama.cpp's reordering of the DeltaNet's value heads (_LinearAttentionVReorderBase):
    HF groups them by key head (value head k * r + j is the j-th of key head k's r), llama.cpp
    tiles them (j * nk + k) so that ggml broadcasts the key heads. Gives, in HF order, the index
    in llama.cpp's order of every value head's `width` values."""
    return np.arange(nv * width).reshape(nv // nk, nk, width).transpose(1, 0, 2).reshape(-1)


def _qwen35_parts(b: str, meta: Dict[str, Any]) -> Dict[str, List[Part]]:
    """Qwen3.5's tensors as llama.cpp reorders them, back in the HF import's order: the value
    heads' rows (conv channels, z, beta, alpha, dt_bias, A) and out_proj's columns, and q_proj,
    kept whole (per head its query, then its output gate) and cut into attn_q and attn_gate."""
    nh, hd = meta["model.n_heads"], meta["model.head_dim"]
    nk, nv = meta["model.linear_n_k_heads"], meta["model.linear_n_v_heads"]
    qk = np.arange(2 * nk * meta["model.linear_k_head_dim"])
    v = _hf_v_order(nk, nv, meta["model.linear_v_head_dim"])
    qkv, heads = np.concatenate([qk, qk.size + v]), _hf_v_order(nk, nv, 1)
    q_gate = np.arange(2 * nh * hd).reshape(nh, 2, hd)
    return {"attn_q.weight": [Part(b + "attn_q", q_gate[:, 0].reshape(-1)),
                              Part(b + "attn_gate", q_gate[:, 1].reshape(-1))],
            "attn_qkv.weight": [Part(b + "ssm_qkv", qkv)], "ssm_conv1d.weight": [Part(b + "ssm_conv", qkv)],
            "attn_gate.weight": [Part(b + "ssm_z", v)], "ssm_beta.weight": [Part(b + "ssm_beta", heads)],
            "ssm_alpha.weight": [Part(b + "ssm_alpha", heads)], "ssm_dt.bias": [Part(b + "ssm_dt_bias", heads)],
            "ssm_a": [Part(b + "ssm_a_log", heads)], "ssm_out.weight": [Part(b + "ssm_out", None, v)]}


def _a_log(a: np.ndarray, name: str) -> np.ndarray:
    """Qwen3.5's A_log from llama.cpp's ssm_a, which holds A = -exp(A_log) (.cism keeps A_log:
    libcism exponentiates it): log(-A) in float64, rounded to float32. float32 exp and log are
    not inverses, so this is the checkpoint's A_log to within a unit in the last place."""
    bad = ~(a < 0)
    if bad.any():
        raise ConversionError(f"tensor {name} holds {a[bad][0]}: it must be A = -exp(A_log), negative")
    return np.log(-a.astype(np.float64)).astype(np.float32)


# values llama.cpp changes and the importer changes back, by .cism tensor suffix
_VALUES = {"ssm_a_log": _a_log}


def _block_order(cols: np.ndarray, per_block: int) -> Optional[np.ndarray]:
    """The source blocks that give a row's columns `cols` in order, when the reordering
    moves whole blocks of `per_block` values (so packed bytes are reordered as they are);
    None when it does not."""
    if cols.size % per_block:
        return None
    c = cols.reshape(-1, per_block)
    if np.any(c[:, 0] % per_block) or np.any(c - c[:, :1] != np.arange(per_block)):
        return None
    return c[:, 0] // per_block


def _mtp_tensor(name: str, n_layers: int, block_count: int) -> bool:
    """A tensor of the layers after the model's own (llama.cpp's nextn/MTP block: qwen35)."""
    m = _LAYER_RE.match(name)
    return bool(m) and n_layers <= int(m.group(1)) < block_count


# ---------------------------------------------------------------------------
# tokenizer

def _token_list(g: G.GGUFFile) -> Tuple[List[str], np.ndarray]:
    tokens = g.metadata.get("tokenizer.ggml.tokens")
    if not isinstance(tokens, list) or not tokens or not all(isinstance(t, str) for t in tokens):
        raise ConversionError(f"{g.path}: tokenizer.ggml.tokens is missing or not an array of strings")
    n = len(tokens)
    types = g.metadata.get("tokenizer.ggml.token_type")
    if types is None:
        types = np.full(n, TT_NORMAL, dtype=np.int64)
    if not isinstance(types, np.ndarray) or types.dtype.kind not in "iu" or types.shape != (n,):
        raise ConversionError(f"{g.path}: tokenizer.ggml.token_type must be {n} integers (one per token)")
    if len(set(tokens)) != n:
        seen: Dict[str, int] = {}
        for i, t in enumerate(tokens):
            if t in seen:
                raise ConversionError(f"{g.path}: tokens {seen[t]} and {i} are the same string {t!r}")
            seen[t] = i
    return tokens, types.astype(np.int64)


def _token_id(g: G.GGUFFile, key: str, n: int) -> Optional[int]:
    v = _key(g, key, False)
    if v is None:
        return None
    if not 0 <= v < n:
        raise ConversionError(f"{g.path}: {key} is {v}, outside the vocabulary of {n} tokens")
    return v


def _added(tokens: List[str], types: np.ndarray, also: Tuple[int, ...] = ()) -> List[Dict[str, Any]]:
    out = []
    for i in np.nonzero(np.isin(types, (TT_CONTROL, TT_USER_DEFINED) + also))[0]:
        special = bool(types[i] != TT_USER_DEFINED)
        out.append({"id": int(i), "content": tokens[i], "single_word": False, "lstrip": False, "rstrip": False,
                    "normalized": False, "special": special})
    return out


def _template(bos: Optional[int], eos: Optional[int], add_bos: bool, add_eos: bool, tokens: List[str]
              ) -> Optional[Dict[str, Any]]:
    pre = [bos] if add_bos and bos is not None else []
    post = [eos] if add_eos and eos is not None else []
    if not pre and not post:
        return None
    specials = {tokens[i]: {"id": tokens[i], "ids": [i], "tokens": [tokens[i]]} for i in pre + post}
    single = ([{"SpecialToken": {"id": tokens[i], "type_id": 0}} for i in pre] + [{"Sequence": {"id": "A", "type_id": 0}}]
              + [{"SpecialToken": {"id": tokens[i], "type_id": 0}} for i in post])
    pair = single + ([{"SpecialToken": {"id": tokens[i], "type_id": 1}} for i in pre]
                     + [{"Sequence": {"id": "B", "type_id": 1}}]
                     + [{"SpecialToken": {"id": tokens[i], "type_id": 1}} for i in post])
    return {"type": "TemplateProcessing", "single": single, "pair": pair, "special_tokens": specials}


def tokenizer_json_gguf(g: G.GGUFFile) -> Dict[str, Any]:
    """The Hugging Face tokenizer.json equivalent to the GGUF's tokenizer.ggml.* keys."""
    model = _key(g, "tokenizer.ggml.model", kind="str")
    tokens, types = _token_list(g)
    n = len(tokens)
    bos = _token_id(g, "tokenizer.ggml.bos_token_id", n)
    eos = _token_id(g, "tokenizer.ggml.eos_token_id", n)
    unk = _token_id(g, "tokenizer.ggml.unknown_token_id", n)
    vocab = {t: i for i, t in enumerate(tokens)}
    if model == "gpt2":
        pre = _key(g, "tokenizer.ggml.pre", False, "str") or "gpt2"
        if pre not in BPE_PRE:
            raise ConversionError(f"{g.path}: BPE pre-tokenizer {pre!r} (tokenizer.ggml.pre) is not supported "
                                  f"(supported: {', '.join(sorted(BPE_PRE))}; llama.cpp's 'default' splits text "
                                  "with its own rules, which no tokenizer.json reproduces)")
        normalizer, pre_tok, ignore_merges = BPE_PRE[pre]
        merges = g.metadata.get("tokenizer.ggml.merges")
        if not isinstance(merges, list) or not all(isinstance(m, str) for m in merges):
            raise ConversionError(f"{g.path}: tokenizer.ggml.merges is missing or not an array of strings")
        pairs = []
        for k, m in enumerate(merges):
            parts = m.split(" ")
            if len(parts) != 2:
                raise ConversionError(f"{g.path}: tokenizer.ggml.merges[{k}] {m!r} is not two tokens")
            pairs.append(parts)
        add_bos = bool(_key(g, "tokenizer.ggml.add_bos_token", False, "bool"))
        add_eos = bool(_key(g, "tokenizer.ggml.add_eos_token", False, "bool"))
        post = _template(bos, eos, add_bos, add_eos, tokens) or {
            "type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False, "use_regex": True}
        return {"version": "1.0", "truncation": None, "padding": None, "added_tokens": _added(tokens, types),
                "normalizer": normalizer, "pre_tokenizer": pre_tok, "post_processor": post,
                "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
                "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                          "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
                          "ignore_merges": ignore_merges, "vocab": vocab, "merges": pairs}}
    if model == "llama":
        scores = g.metadata.get("tokenizer.ggml.scores")
        if not isinstance(scores, np.ndarray) or scores.dtype.kind != "f" or scores.shape != (n,):
            raise ConversionError(f"{g.path}: tokenizer.ggml.scores must be {n} floats (one per token)")
        prefix = _key(g, "tokenizer.ggml.add_space_prefix", False, "bool")
        prefix = True if prefix is None else prefix
        add_bos = _key(g, "tokenizer.ggml.add_bos_token", False, "bool")
        add_bos = True if add_bos is None else add_bos
        add_eos = bool(_key(g, "tokenizer.ggml.add_eos_token", False, "bool"))
        # sentencepiece merges the adjacent pair whose union has the highest score: as BPE merges,
        # every split of a piece into two pieces, ranked by the piece's score (then id, split point)
        mergeable = {t: i for t, i in vocab.items() if types[i] in (TT_NORMAL, TT_USER_DEFINED, TT_UNUSED)}
        ranked = []
        for t, i in mergeable.items():
            for k in range(1, len(t)):
                if t[:k] in mergeable and t[k:] in mergeable:
                    ranked.append((-float(scores[i]), i, k))
        ranked.sort()
        merges = [[tokens[i][:k], tokens[i][k:]] for _, i, k in ranked]
        byte_fallback = all(f"<0x{b:02X}>" in vocab for b in range(256))
        normalizers = ([{"type": "Prepend", "prepend": "\u2581"}] if prefix else []) + [
            {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}]
        decoders: List[Dict[str, Any]] = [{"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "}]
        decoders += [{"type": "ByteFallback"}] if byte_fallback else []
        decoders += [{"type": "Fuse"}] + ([{"type": "Strip", "content": " ", "start": 1, "stop": 0}] if prefix else [])
        return {"version": "1.0", "truncation": None, "padding": None,
                "added_tokens": _added(tokens, types, (TT_UNKNOWN,)),
                "normalizer": {"type": "Sequence", "normalizers": normalizers}, "pre_tokenizer": None,
                "post_processor": _template(bos, eos, add_bos, add_eos, tokens),
                "decoder": {"type": "Sequence", "decoders": decoders},
                "model": {"type": "BPE", "dropout": None, "unk_token": tokens[unk] if unk is not None else None,
                          "continuing_subword_prefix": None, "end_of_word_suffix": None, "fuse_unk": True,
                          "byte_fallback": byte_fallback, "ignore_merges": False, "vocab": vocab, "merges": merges}}
    raise ConversionError(f"{g.path}: tokenizer model {model!r} (tokenizer.ggml.model) is not supported "
                          "(supported: gpt2 (byte-level BPE), llama (sentencepiece))")


def tokenizer_meta_gguf(g: G.GGUFFile) -> Dict[str, Any]:
    """The tokenizer.* metadata convert_hf writes, from the GGUF's tokenizer.ggml.* keys and chat template."""
    if "tokenizer.ggml.model" not in g.metadata:
        return {}
    tj = tokenizer_json_gguf(g)
    n = len(g.metadata["tokenizer.ggml.tokens"])
    meta: Dict[str, Any] = {}
    bos = _token_id(g, "tokenizer.ggml.bos_token_id", n)
    eos = _token_id(g, "tokenizer.ggml.eos_token_id", n)
    if bos is not None:
        meta["tokenizer.bos_id"] = bos
    eos_ids = [eos] if eos is not None else []
    for key in ("tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"):
        extra = _token_id(g, key, n)
        if extra is not None and extra not in eos_ids:
            eos_ids.append(extra)
    if eos_ids:
        meta["tokenizer.eos_id"] = eos_ids[0]
        meta["tokenizer.eos_ids"] = np.asarray(eos_ids, dtype=np.int64)
    pad = _token_id(g, "tokenizer.ggml.padding_token_id", n)
    if pad is not None:
        meta["tokenizer.pad_id"] = pad
    raw = json.dumps(tj, ensure_ascii=False).encode("utf-8")
    meta["tokenizer.hf_json"] = fmt.Bytes(raw)
    meta.update(_c_tokenizer(tj, g.path))
    post = tj["post_processor"] or {}
    meta["tokenizer.add_bos"] = int(bos is not None and post.get("type") == "TemplateProcessing"
                                    and post["single"][0].get("SpecialToken") is not None)
    tmpl = g.metadata.get("tokenizer.chat_template")
    if tmpl is not None:
        if not isinstance(tmpl, str):
            raise ConversionError(f"{g.path}: tokenizer.chat_template must be a string")
        meta["tokenizer.chat_template"] = tmpl
        meta.update(chat_format_meta(tmpl, meta, {}))
    return meta


# ---------------------------------------------------------------------------
# tensors

def _unpermute_rows(rows: np.ndarray, n_heads: int) -> np.ndarray:
    """Undoes llama.cpp's Q/K permutation (per head: rows interleaved in pairs ->
    rotate-half order) on whole rows, of values or of packed blocks alike."""
    r = rows.shape[0]
    hd = r // n_heads
    return rows.reshape(n_heads, hd // 2, 2, -1).swapaxes(1, 2).reshape(rows.shape)


def _q5_0_as_q8(b: np.ndarray) -> np.ndarray:
    """Q5_0 blocks [n, 22] -> q8 blocks [n, 34] of the same values: the same fp16 scale,
    int8 codes q - 16."""
    n = b.shape[0]
    codes = np.concatenate([b[:, 6:] & 15, b[:, 6:] >> 4], axis=1)
    codes |= np.unpackbits(np.ascontiguousarray(b[:, 2:6]), axis=1, bitorder="little") << 4
    out = np.empty((n, 34), dtype=np.uint8)
    out[:, :2] = b[:, :2]
    out[:, 2:] = (codes.astype(np.int16) - 16).astype(np.int8).view(np.uint8)
    return out


def rows_to_x16(rows: np.ndarray, cols: int, dtype: int) -> np.ndarray:
    """Rows of a base format [R, nb * block bytes] (R a multiple of 16; q8 or q4a) -> the
    layout of its interleaved dtype (q8x16, q4ax16): per group of 16 rows, superblocks of
    codes then scales (docs/QUANTIZATION.md), the same bytes rearranged."""
    from .quant import X16_GEOMETRY, x16_group_offsets
    block, cb, sb, _ = X16_GEOMETRY[dtype]
    R, bb = rows.shape[0], cb + sb
    nb = -(-cols // block)
    blk = rows.reshape(R // 16, 16, nb, bb)
    code_off, scale_off = x16_group_offsets(dtype, cols)
    out = np.empty((R // 16, 16 * nb * bb), dtype=np.uint8)
    for b in range(nb):
        # codes: cb / 4 chunks of 64 bytes, chunk c = rows 0..15's code bytes 4c..4c+3
        codes = blk[:, :, b, sb:].reshape(R // 16, 16, cb // 4, 4).transpose(0, 2, 1, 3).reshape(R // 16, 16 * cb)
        out[:, code_off[b]:code_off[b] + 16 * cb] = codes
        out[:, scale_off[b]:scale_off[b] + 16 * sb] = blk[:, :, b, :sb].reshape(R // 16, 16 * sb)
    return out.reshape(R, nb * bb)


# the libcism format each GGUF type is kept in, value for value (docs/GGUF.md "Tensor types"); every
# other type is dequantized and requantized to q8: Q5_1 (asymmetric), Q6_K, Q5_K, Q4_K, Q3_K, Q2_K
# (per-16/32 sub-block scales under a superblock scale) fit no block-of-32 single-scale format, and
# rounding their values again to q6/q5 would add a 6/5-bit error where q8's is far smaller
LOSSLESS_NATIVE = {"F32": "f32", "F16": "f16", "BF16": "bf16", "Q8_0": "q8", "Q4_0": "q4", "Q5_0": "q5",
                   "Q4_1": "q4a"}
# GGUF Q5_0 is libcism's q5 byte for byte ("q5", the default: kept as it is, 5.5 bits/weight, interleaved
# as q5x16 where the shape allows), and q8 holds the same values in 8.5 ("q8"). Since q5x16 exists the
# q5 import also decodes faster than the q8x16 one (it reads 35% fewer bytes; docs/PERFORMANCE.md).
Q5_0_STORED = "q5"


def convert_gguf(path: str, out: str, dtype: str = "auto", overwrite: bool = False,
                 progress: Optional[ProgressFn] = None, quant: Optional[str] = None, layout: str = "auto",
                 calibration: Any = None) -> Report:
    """Converts a GGUF file to .cism. dtype "auto" keeps every tensor's values where a
    libcism format holds them and requantizes the rest to q8; "f32"/"f16"/"bf16"
    dequantizes every matrix to that type; `quant` applies a recipe to the dequantized values."""
    from . import quant as q
    if dtype != "auto" and dtype not in FLOAT_DTYPES:
        raise ConversionError(f"unknown dtype {dtype!r} (f32, f16, bf16 or auto)")
    try:
        g = G.GGUFFile(path)
    except G.GGUFError as e:
        raise ConversionError(str(e)) from None
    try:
        return _convert(g, path, out, dtype, overwrite, progress, quant, layout, calibration, q)
    finally:
        g.close()


def _map_tensors(g: G.GGUFFile, arch: str, meta: Dict[str, Any], expected: Dict[str, Tuple[int, ...]]
                 ) -> Tuple[Dict[str, str], Dict[str, Part]]:
    """The GGUF tensor of every .cism tensor, and the parts cut or reordered from one
    (gguf_splits); refuses tensors the model does not have and names those it lacks."""
    mapping: Dict[str, str] = {}
    parts: Dict[str, Part] = {}
    blocks = _key(g, arch + ".block_count")
    for name in g.tensors:
        if _mtp_tensor(name, meta["model.n_layers"], blocks):
            continue
        cname = map_gguf_name(name, arch)
        if cname is not None:
            mapping[cname] = name
        for part in gguf_splits(name, arch, meta):
            mapping[part.name] = name
            parts[part.name] = part
    extra = [mapping[n] for n in mapping if n not in expected]
    if extra:
        raise ConversionError(f"{g.path}: unexpected tensors for {arch}: {extra[:5]}"
                              + (" (biases are not supported for this family)" if any(".bias" in e for e in extra)
                                 else ""))
    missing = [n for n in expected if n not in mapping]
    if missing:
        raise ConversionError(f"{g.path}: missing tensors: {[m + '.weight' for m in missing[:5]]}"
                              f"{' ...' if len(missing) > 5 else ''}")
    return mapping, parts


def _shape_ok(got: Tuple[int, ...], want: Tuple[int, ...], flat: bool) -> bool:
    """Matrices and vectors must have their shape; the conv kernels only their values: LFM2's
    [dim, L] kernels are stored flat, Qwen3.5's [channels, 1, K] ones come as [channels, K]."""
    if flat:
        return math.prod(got) == math.prod(want)
    if len(want) == 3:
        return got[:1] == want[:1] and math.prod(got) == math.prod(want)
    return got == want


def _convert(g: G.GGUFFile, path: str, out: str, dtype: str, overwrite: bool, progress: Optional[ProgressFn],
             quant: Optional[str], layout: str, calibration: Any, q: Any) -> Report:
    cfg = config_from_gguf(g)
    meta = hparams_from_config(cfg, f"{path} (GGUF metadata as config.json)")
    arch = meta["general.architecture"]
    expected = expected_tensors(meta)
    mapping, parts = _map_tensors(g, arch, meta, expected)
    for name, shape in expected.items():
        t = g.tensors[mapping[name]]
        if name in parts:  # the source's rows: those of every part cut from it
            shape = (sum(expected[n][0] for n in parts if mapping[n] == t.name),) + shape[1:]
        if not _shape_ok(t.shape, shape, name.endswith(".conv_kernel")):
            raise ConversionError(f"{path}: tensor {t.name!r} has shape {t.shape} (rows, columns), the "
                                  f"hyper-parameters imply {shape}")
        if t.type_name not in G.DEQUANTIZABLE:
            raise ConversionError(f"{path}: tensor {t.name!r} has type {t.type_name}, which is not supported "
                                  f"(supported: {', '.join(sorted(G.DEQUANTIZABLE))})")
    meta.update(tokenizer_meta_gguf(g))
    meta["general.name"] = _key(g, "general.name", False, "str") or os.path.splitext(os.path.basename(path))[0]
    meta["general.source"] = "gguf:" + os.path.basename(path)
    meta["general.converter"] = "cism.convert " + _version()
    hd = meta["model.head_dim"]
    permute = {}
    if arch in PERMUTED:
        for i in range(meta["model.n_layers"]):
            permute[f"blk.{i}.attn_q"] = meta["model.n_heads"]
            permute[f"blk.{i}.attn_k"] = meta["model.n_kv_heads"]

    # the tensors whose columns are reordered: the order of the source's blocks in a row (None: blocks split)
    col_blocks = {n: _block_order(p.cols, G.GGML_TYPES[g.tensors[mapping[n]].type][1])
                  for n, p in parts.items() if p.cols is not None}

    # the stored dtype of every matrix and how it gets there
    plan: Dict[str, Tuple[int, str]] = {}  # name -> (cism dtype, "lossless" | "requantized")
    for name, shape in expected.items():
        src = g.tensors[mapping[name]].type_name
        if len(shape) != 2:
            plan[name] = (fmt.DTYPE_F32, "lossless")   # every supported type's values are float32 numbers
            continue
        if quant:
            continue  # the recipe picks (write_model)
        if dtype != "auto":
            lossless = dtype == "f32" or src == dtype.upper()
            plan[name] = (FLOAT_DTYPES[dtype], "lossless" if lossless else "requantized")
            continue
        base = Q5_0_STORED if src == "Q5_0" else LOSSLESS_NATIVE.get(src)
        how = "lossless"
        if base is None or (name in col_blocks and col_blocks[name] is None):
            base, how = "q8", "requantized"
        if base in FLOAT_DTYPES:
            dt = FLOAT_DTYPES[base]
        elif base in q.INTERLEAVED:
            dt = q.QUANT_DTYPES[q.stored_dtype(name, base, shape, hd, layout)]
        else:
            dt = q.QUANT_DTYPES[base]
        plan[name] = (dt, how)

    def load(name: str) -> np.ndarray:
        arr = g.dequantize(mapping[name])
        part = parts.get(name)
        if part is not None and part.rows is not None:
            arr = arr[part.rows]
        if part is not None and part.cols is not None:
            arr = arr[:, part.cols]
        arr = arr.reshape(expected[name])
        if name in permute:
            arr = _unpermute_rows(arr, permute[name])
        fix = _VALUES.get(name.rsplit(".", 1)[-1])
        return fix(arr, mapping[name]) if fix is not None else arr

    def raw_for(name: str) -> Optional[np.ndarray]:
        if name not in plan or plan[name][1] != "lossless" or len(expected[name]) != 2:
            return None
        dt = plan[name][0]
        t = g.tensors[mapping[name]]
        src = t.type_name
        rows = g.blocks(mapping[name])
        part = parts.get(name)
        if part is not None and part.rows is not None:
            rows = rows[part.rows]
        if name in col_blocks:  # whole blocks move (else the plan requantizes)
            order = col_blocks[name]
            rows = rows.reshape(rows.shape[0], order.size, -1)[:, order].reshape(rows.shape[0], -1)
        if name in permute:
            rows = _unpermute_rows(rows, permute[name])
        if dt in FLOAT_DTYPES.values():
            if LOSSLESS_NATIVE.get(src) == fmt.DTYPE_NAMES[dt]:
                return np.ascontiguousarray(rows)
            return None  # converted from the dequantized values
        if src == "Q5_0" and fmt.DTYPE_NAMES[dt].startswith("q8"):  # (a Q5_0 kept as q8: the same values)
            rows = _q5_0_as_q8(rows.reshape(-1, 22)).reshape(rows.shape[0], -1)
        if dt in q.X16_GEOMETRY:
            return rows_to_x16(np.ascontiguousarray(rows), t.shape[1], dt)
        return np.ascontiguousarray(rows)

    def dtype_for(name: str) -> int:
        return plan[name][0]

    rep = write_model(out, meta, list(expected), load, dtype_for, overwrite, progress, raw_for, quant=quant,
                      layout=layout, calibration=calibration)
    # what happened to each tensor: source type -> stored type, lossless or requantized
    rep.gguf_tensors = {}
    for name in expected:
        src = g.tensors[mapping[name]].type_name
        stored = rep.tensors.get(name, "?")
        how = plan[name][1] if name in plan else ("lossless" if src == "F32" and stored == "f32" else "requantized")
        rep.gguf_tensors[name] = (src, stored, how)
    counts: Dict[Tuple[str, str, str], List[str]] = {}
    for name, key in rep.gguf_tensors.items():
        counts.setdefault(key, []).append(name)
    for (src, stored, how), names in sorted(counts.items()):
        shown = sorted({re.sub(r"^blk\.\d+\.", "blk.*.", n) for n in names})
        rep.notes.append(f"GGUF {src} -> {stored}, {how}: {len(names)} tensor{'s' * (len(names) != 1)}"
                         + (f" ({', '.join(shown[:6])}{' ...' if len(shown) > 6 else ''})" if how != "lossless" else ""))
    return rep
