"""What each Hugging Face model family adds to the Llama-shaped conversion.

cism.convert reads the fields every family shares (sizes, norms, RoPE) and the
tensor names of the Llama layout; a family here adds its own config fields as
.cism metadata (docs/FORMAT.md), renames or splits its tensors, and says how
their values change on the way (Gemma's norm weights are stored as 1 + w, the
scale its RMSNorm applies). Each family is one entry of FAMILIES, keyed by the
`architectures` class name of config.json.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Tuple

import numpy as np

from .hf_config import ConversionError, Fields, MAX_CTX

# a .cism tensor taken from part of an HF one: (cism layer suffix, first row, end row)
Split = Tuple[str, int, int]


@dataclass
class Family:
    arch: str
    # fills the family's metadata from config.json (c) into meta, after the shared fields
    config: Callable[[Fields, Dict[str, Any]], None] = lambda c, meta: None
    # HF layer tensor suffix -> .cism layer suffix, over the Llama names
    layer_names: Dict[str, Optional[str]] = field(default_factory=dict)
    # HF layer tensor suffix -> its row ranges as .cism tensors (fused projections)
    splits: Callable[[Dict[str, Any]], Dict[str, List[Split]]] = lambda meta: {}
    # .cism tensor names whose stored value is 1 + the checkpoint's (Gemma's norms)
    plus_one: Callable[[str], bool] = lambda name: False
    # config.json fields that may be set (shared refusals in cism.convert skip them)
    attention_bias: bool = False
    # HF tensor name -> .cism name, for tensors outside the layers, over the Llama names
    top_names: Dict[str, str] = field(default_factory=dict)
    # .cism tensor names stored flattened to one dimension (f32 like every vector:
    # never quantized), e.g. LFM2's convolution kernels [dim, 1, L] -> [dim * L]
    flat: Callable[[str], bool] = lambda name: False
    # HF layer tensor suffix -> a row permutation applied before the splits (interleaved fused projections)
    reorder: Callable[[Dict[str, Any]], Dict[str, Callable[[np.ndarray], np.ndarray]]] = lambda meta: {}
    # checkpoint tensor names left out (prefixes: multi-token-prediction heads, vision towers)
    drop_prefixes: Tuple[str, ...] = ()


def _layer_flags(c: Fields, key: str, n_layers: int, values: Dict[Any, int]) -> Optional[List[int]]:
    """A per-layer list of config.json (`key`, one of `values` each) as 0/1 flags."""
    v = c.obj.get(key)
    if v is None:
        return None
    if not isinstance(v, list) or len(v) != n_layers:
        c.fail(key, f"must be a list of {n_layers} entries (one per layer)")
    out = []
    for i, x in enumerate(v):
        if isinstance(x, bool) or x not in values:
            c.fail(f"{key}[{i}]", f"must be one of {sorted(map(str, values))}, not {x!r}")
        out.append(values[x])
    return out


# ---------------------------------------------------------------------------
# SmolLM3: Llama with RoPE left out on the layers no_rope_layers marks 0

def _smollm3_config(c: Fields, meta: Dict[str, Any]) -> None:
    n = meta["model.n_layers"]
    flags = _layer_flags(c, "no_rope_layers", n, {0: 0, 1: 1})
    if flags is None:
        interval = c.int("no_rope_layer_interval", 1, 1 << 20, default=4)
        flags = [int((i + 1) % interval != 0) for i in range(n)]
    if not all(flags):
        meta["model.layer_rope"] = flags


# ---------------------------------------------------------------------------
# Phi-3 / Phi-4-mini: fused qkv_proj and gate_up_proj, partial RoPE

def _phi3_splits(meta: Dict[str, Any]) -> Dict[str, List[Split]]:
    hd = meta["model.head_dim"]
    q, kv, f = meta["model.n_heads"] * hd, meta["model.n_kv_heads"] * hd, meta["model.ffn_dim"]
    return {"self_attn.qkv_proj.weight": [("attn_q", 0, q), ("attn_k", q, q + kv), ("attn_v", q + kv, q + 2 * kv)],
            "mlp.gate_up_proj.weight": [("ffn_gate", 0, f), ("ffn_up", f, 2 * f)]}


# ---------------------------------------------------------------------------
# Gemma 3 (text): sliding-window layers with their own RoPE base, GeGLU, four
# norms per block stored as 1 + w, q/k norms, embeddings scaled by sqrt(dim)

def _gemma3_rope_theta(c: Fields, layer_type: str, legacy_key: str, default: float) -> float:
    params = c.object("rope_parameters")
    if params is not None and params.has(layer_type):
        p = params.object(layer_type)
        rtype = p.str("rope_type", "default")
        if rtype != "default":
            raise ConversionError(f"Gemma 3 RoPE type {rtype!r} on {layer_type} layers is not supported (supported: default)")
        return p.number("rope_theta", default, ok=lambda x: x > 1, rule="must be > 1")
    return c.number(legacy_key, default, ok=lambda x: x > 1, rule="must be > 1")


def _gemma3_config(c: Fields, meta: Dict[str, Any]) -> None:
    n = meta["model.n_layers"]
    for key in ("final_logit_softcapping", "attn_logit_softcapping"):
        if c.has(key):
            raise ConversionError(f"config.json: {key}: logit soft-capping (Gemma 2) is not supported")
    if c.bool("use_bidirectional_attention", False):
        raise ConversionError("config.json: use_bidirectional_attention: bidirectional attention is not supported")
    act = c.str("hidden_activation", "gelu_pytorch_tanh")
    if act != "gelu_pytorch_tanh":
        raise ConversionError(f"config.json: hidden_activation: {act!r} is not supported for Gemma 3 (gelu_pytorch_tanh)")
    meta["model.ffn_activation"] = "gelu_tanh"
    meta["model.qk_norm"] = 1
    meta["model.post_norms"] = 1
    # the embedding scale as transformers applies it: a float32 tensor of sqrt(dim)
    meta["model.embedding_scale"] = float(np.float32(math.sqrt(meta["model.dim"])))
    scalar = c.number("query_pre_attn_scalar", meta["model.head_dim"], ok=lambda x: x > 0, rule="must be > 0")
    meta["model.attention_scale"] = scalar ** -0.5
    sliding = _layer_flags(c, "layer_types", n, {"sliding_attention": 1, "full_attention": 0})
    if sliding is None:
        pattern = c.int("sliding_window_pattern", 1, 1 << 20, default=c.int("_sliding_window_pattern", 1, 1 << 20, default=6))
        sliding = [int((i + 1) % pattern != 0) for i in range(n)]
    window = c.int("sliding_window", 1, 1 << 40, default=4096)
    meta["model.rope_theta"] = _gemma3_rope_theta(c, "full_attention", "rope_theta", 1000000.0)
    local = _gemma3_rope_theta(c, "sliding_attention", "rope_local_base_freq", 10000.0)
    if any(sliding):
        meta["model.sliding_window"] = window
        meta["model.layer_sliding"] = sliding
        meta["model.rope_theta_local"] = local


_GEMMA_NORMS = ("attn_norm", "ffn_norm", "post_attn_norm", "post_ffn_norm", "attn_q_norm", "attn_k_norm")


def _gemma3_plus_one(name: str) -> bool:
    return name == "output_norm" or name.rsplit(".", 1)[-1] in _GEMMA_NORMS


# ---------------------------------------------------------------------------
# LFM2: gated short-convolution layers (model.layer_types "shortconv") between
# GQA attention layers with q/k norms; the MLP's width as Lfm2MLP sizes it

_LFM2_KINDS = {"full_attention": "attention", "conv": "shortconv"}


def _lfm2_ffn_dim(c: Fields, ffn: int) -> int:
    """The MLP width transformers builds (Lfm2MLP): block_ff_dim (or
    intermediate_size), with block_auto_adjust_ff_dim 2/3 of it, times
    block_ffn_dim_multiplier rounded up to block_multiple_of."""
    ff = c.int("block_ff_dim", 1, 1 << 40, default=ffn)
    if c.bool("block_auto_adjust_ff_dim", True):
        ff = int(2 * ff / 3)
        mult = c.number("block_ffn_dim_multiplier", 1.0, ok=lambda x: 0 < x <= 64, rule="is outside (0, 64]")
        if c.obj.get("block_ffn_dim_multiplier", 1.0) is not None:
            of = c.int("block_multiple_of", 1, 1 << 20, default=256)
            ff = int(mult * ff)
            ff = of * ((ff + of - 1) // of)
    if ff < 1:
        c.fail("intermediate_size", f"gives an MLP of width {ff}")
    return ff


def _lfm2_config(c: Fields, meta: Dict[str, Any]) -> None:
    n = meta["model.n_layers"]
    kinds = c.obj.get("layer_types")
    if kinds is None:  # as Lfm2Config derives it
        idxs = c.obj.get("full_attn_idxs")
        if idxs is None:
            idxs = list(range(n))
        if not isinstance(idxs, list) or any(isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < n for i in idxs):
            c.fail("full_attn_idxs", f"must be a list of layer indices in 0..{n - 1}")
        kinds = ["full_attention" if i in idxs else "conv" for i in range(n)]
    if not isinstance(kinds, list) or len(kinds) != n:
        c.fail("layer_types", f"must be a list of {n} entries (one per layer)")
    for i, k in enumerate(kinds):
        if k not in _LFM2_KINDS:
            c.fail(f"layer_types[{i}]", f"must be one of {sorted(_LFM2_KINDS)}, not {k!r}")
    meta["model.layer_types"] = [_LFM2_KINDS[k] for k in kinds]
    if "shortconv" in meta["model.layer_types"]:
        meta["model.conv_kernel"] = c.int("conv_L_cache", 1, 16, default=3)
        if c.bool("conv_bias", False):
            meta["model.conv_bias"] = 1
    meta["model.qk_norm"] = 1
    meta["model.norm_eps"] = c.number("norm_eps", 1e-5, ok=lambda x: 0 < x < 1, rule="is outside (0, 1)")
    # Lfm2Config: tie_embedding (older configs) overrides tie_word_embeddings, which defaults to true
    meta["model.tied_embeddings"] = int(c.bool("tie_embedding", c.bool("tie_word_embeddings", True)))
    meta["model.ffn_dim"] = _lfm2_ffn_dim(c, meta["model.ffn_dim"])
    params = c.object("rope_parameters")
    if not c.has("rope_theta") and not (params is not None and params.has("rope_theta")):
        meta["model.rope_theta"] = 1000000.0  # Lfm2Config.default_theta


def _lfm2_flat(name: str) -> bool:
    return name.endswith(".conv_kernel")
# Qwen3.5 (text): Gated DeltaNet layers (layer_types "linear_attention")
# between gated full-attention layers (q_proj gives each head's query and its
# output gate, interleaved by head); every RMSNorm but the DeltaNet output's
# gated one scales by 1 + w; q/k norms; partial RoPE (rope_parameters)

_QWEN35_KINDS = {"linear_attention": "linear_attention", "full_attention": "attention"}


def _qwen35_config(c: Fields, meta: Dict[str, Any]) -> None:
    n = meta["model.n_layers"]
    v = c.obj.get("layer_types")
    if v is None:
        interval = c.int("full_attention_interval", 1, 1 << 20, default=4)
        kinds = ["linear_attention" if (i + 1) % interval else "attention" for i in range(n)]
    else:
        if not isinstance(v, list) or len(v) != n:
            c.fail("layer_types", f"must be a list of {n} entries (one per layer)")
        kinds = []
        for i, x in enumerate(v):
            if x not in _QWEN35_KINDS:
                c.fail(f"layer_types[{i}]", f"must be one of {sorted(_QWEN35_KINDS)}, not {x!r}")
            kinds.append(_QWEN35_KINDS[x])
    meta["model.layer_types"] = kinds
    meta["model.qk_norm"] = 1
    meta["model.attn_output_gate"] = 1
    nk = c.int("linear_num_key_heads", 1, 1 << 12, default=16)
    nv = c.int("linear_num_value_heads", 1, 1 << 12, default=32)
    if nv % nk:
        c.fail("linear_num_value_heads", f"{nv} is not a multiple of linear_num_key_heads ({nk})")
    meta["model.linear_n_k_heads"] = nk
    meta["model.linear_n_v_heads"] = nv
    meta["model.linear_k_head_dim"] = c.int("linear_key_head_dim", 1, 1 << 12, default=128)
    meta["model.linear_v_head_dim"] = c.int("linear_value_head_dim", 1, 1 << 12, default=128)
    meta["model.linear_conv_kernel"] = c.int("linear_conv_kernel_dim", 1, 64, default=4)
    # transformers rotates a quarter of each head when the config names no partial_rotary_factor
    if not any(isinstance(x, dict) and "partial_rotary_factor" in x
               for x in (c.obj.get("rope_parameters"), c.obj.get("rope_scaling"), c.obj)):
        hd = meta["model.head_dim"]
        if int(hd * 0.25) < 2 or int(hd * 0.25) % 2:
            c.fail("head_dim", f"{hd}: the default partial_rotary_factor 0.25 gives {int(hd * 0.25)} rotated "
                               "dimensions; an even number >= 2 is needed")
        meta["model.rope_dim"] = int(hd * 0.25)


def _qwen35_q_gate(meta: Dict[str, Any]) -> Callable[[np.ndarray], np.ndarray]:
    """q_proj's rows [head][query | gate][head_dim] as [query of every head | gate of every head]."""
    nh, hd = meta["model.n_heads"], meta["model.head_dim"]

    def f(a: np.ndarray) -> np.ndarray:
        if a.shape[0] != 2 * nh * hd:
            return a  # the shape check names the tensor
        return np.ascontiguousarray(a.reshape(nh, 2, hd, *a.shape[1:]).swapaxes(0, 1).reshape(a.shape))
    return f


def _qwen35_splits(meta: Dict[str, Any]) -> Dict[str, List[Split]]:
    q = meta["model.n_heads"] * meta["model.head_dim"]
    return {"self_attn.q_proj.weight": [("attn_q", 0, q), ("attn_gate", q, 2 * q)]}


_QWEN35_NORMS = ("attn_norm", "ffn_norm", "attn_q_norm", "attn_k_norm")


def _qwen35_plus_one(name: str) -> bool:  # not ssm_norm: the gated norm scales by w
    return name == "output_norm" or name.rsplit(".", 1)[-1] in _QWEN35_NORMS


_QWEN35 = dict(config=_qwen35_config, splits=_qwen35_splits, plus_one=_qwen35_plus_one,
               reorder=lambda meta: {"self_attn.q_proj.weight": _qwen35_q_gate(meta)},
               drop_prefixes=("mtp.",),
               layer_names={
                   "self_attn.q_proj.weight": None,
                   "linear_attn.in_proj_qkv.weight": "ssm_qkv",
                   "linear_attn.in_proj_z.weight": "ssm_z",
                   "linear_attn.in_proj_b.weight": "ssm_beta",
                   "linear_attn.in_proj_a.weight": "ssm_alpha",
                   "linear_attn.conv1d.weight": "ssm_conv",
                   "linear_attn.dt_bias": "ssm_dt_bias",
                   "linear_attn.A_log": "ssm_a_log",
                   "linear_attn.norm.weight": "ssm_norm",
                   "linear_attn.out_proj.weight": "ssm_out",
               })

# Multimodal checkpoints whose text model converts alone: class -> (the text
# model's class, the prefix its tensors carry instead of "model.", the
# prefixes of the other towers' tensors). Their config.json nests the text
# model's fields in text_config.
WRAPPERS: Dict[str, Tuple[str, str, Tuple[str, ...]]] = {
    "Qwen3_5ForConditionalGeneration": ("Qwen3_5ForCausalLM", "model.language_model.", ("model.visual.", "mtp.")),
}


def unwrap_config(cfg: Dict[str, Any]) -> Tuple[Dict[str, Any], Optional[Tuple[str, str, Tuple[str, ...]]]]:
    """The text model's config.json of a multimodal checkpoint (WRAPPERS) and its
    wrapper entry; other configs unchanged, with None."""
    archs = cfg.get("architectures")
    if not (isinstance(archs, list) and len(archs) == 1 and archs[0] in WRAPPERS):
        return cfg, None
    w = WRAPPERS[archs[0]]
    text = cfg.get("text_config")
    if not isinstance(text, dict):
        raise ConversionError(f"config.json: {archs[0]} needs a text_config object (the text model's fields)")
    inner = dict(text)
    inner["architectures"] = [w[0]]
    # the wrapper's own flag (default false, as its config class) decides whether lm_head is tied
    inner["tie_word_embeddings"] = cfg.get("tie_word_embeddings", False)
    return inner, w


def unwrap_name(name: str, w: Optional[Tuple[str, str, Tuple[str, ...]]]) -> Optional[str]:
    """A wrapped checkpoint's tensor name as the text model's; None for the other towers'."""
    if w is None:
        return name
    if any(name.startswith(p) for p in w[2]):
        return None
    if name.startswith(w[1]):
        return "model." + name[len(w[1]):]
    return name


FAMILIES: Dict[str, Family] = {
    "Qwen3_5ForCausalLM": Family("qwen35", **_QWEN35),
    "SmolLM3ForCausalLM": Family("smollm3", config=_smollm3_config),
    "Phi3ForCausalLM": Family("phi3", splits=_phi3_splits,
                              layer_names={"self_attn.qkv_proj.weight": None, "mlp.gate_up_proj.weight": None}),
    "Gemma3ForCausalLM": Family("gemma3", config=_gemma3_config, plus_one=_gemma3_plus_one, layer_names={
        "post_attention_layernorm.weight": "post_attn_norm",
        "pre_feedforward_layernorm.weight": "ffn_norm",
        "post_feedforward_layernorm.weight": "post_ffn_norm",
    }),
    "Lfm2ForCausalLM": Family("lfm2", config=_lfm2_config, flat=_lfm2_flat,
                              top_names={"model.embedding_norm.weight": "output_norm"}, layer_names={
        "operator_norm.weight": "attn_norm",
        "ffn_norm.weight": "ffn_norm",
        "self_attn.out_proj.weight": "attn_output",
        "self_attn.q_layernorm.weight": "attn_q_norm",
        "self_attn.k_layernorm.weight": "attn_k_norm",
        "feed_forward.w1.weight": "ffn_gate",
        "feed_forward.w3.weight": "ffn_up",
        "feed_forward.w2.weight": "ffn_down",
        "conv.in_proj.weight": "conv_in",
        "conv.in_proj.bias": "conv_in_bias",
        "conv.conv.weight": "conv_kernel",
        "conv.conv.bias": "conv_bias",
        "conv.out_proj.weight": "conv_out",
        "conv.out_proj.bias": "conv_out_bias",
    }),
}
