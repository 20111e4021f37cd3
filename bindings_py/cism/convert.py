"""Converting checkpoints to .cism: Hugging Face folders and llama2.c `.bin` files.

Everything that is not supported is refused here, with a message naming it,
before any output is written: every config.json field read is checked for type
and range (hf_config), and the finished file is loaded by the C library with
all its checks (weights included) before it replaces anything. The output is
written to a temporary file of its own next to `<out>` (cism.format.temp_file:
`<out>.<pid>@<host>.<random>.cism-partial`) and renamed when complete and
valid; an existing output is never replaced unless `overwrite=True`, and a
failed conversion leaves it as it was.
"""
from __future__ import annotations

import json
import os
import re
import struct
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Tuple, Union

import numpy as np

from . import chat_format
from . import format as fmt
from .tokenizer_meta import TokenizerUnsupported, compact_tokenizer
from .hf_config import (MAX_CTX, MAX_DIM, MAX_HEAD_DIM, MAX_HEADS, MAX_LAYERS, MAX_TOKENIZER_JSON_BYTES, MAX_VOCAB,
                        ConversionError, Fields, check_tokenizer_json, describe, read_json)
from .hf_families import FAMILIES, unwrap_config, unwrap_name
from .safetensors import bf16_to_f32, f32_to_bf16, open_checkpoint

SUPPORTED = {
    "LlamaForCausalLM": "llama",
    "MistralForCausalLM": "mistral",
    "Qwen2ForCausalLM": "qwen2",
    "Qwen3ForCausalLM": "qwen3",
    **{cls: fam.arch for cls, fam in FAMILIES.items()},
}
DTYPES = {"f32": fmt.DTYPE_F32, "f16": fmt.DTYPE_F16, "bf16": fmt.DTYPE_BF16}
UNCALIBRATED_ROUNDING = "nearest level, scale search per block"
CALIB_MODELS = ("q8", "f32")  # the copy the calibration runs on (docs/QUANTIZATION.md, "Calibrated rounding")
DEFAULT_CALIB_MODEL = "q8"


@dataclass
class Report:
    path: str
    architecture: str
    n_params: int = 0
    bytes_written: int = 0
    tensors: Dict[str, str] = field(default_factory=dict)  # name -> dtype name
    seconds: float = 0.0
    quant: Optional[str] = None
    notes: List[str] = field(default_factory=list)
    calibration: Optional[str] = None   # what the quantizer's statistics came from
    calibration_seconds: float = 0.0
    rounding: Optional[str] = None      # how the matrices were rounded (the file's general.quantization.rounding)
    calibration_detail: str = ""        # where the calibration's seconds went

    def bits_per_weight(self) -> float:
        """Every byte of tensor data (norms, scales and padding included) over the matrix weights."""
        return 8.0 * self.bytes_written / max(self.n_params, 1)

    def summary(self) -> str:
        counts: Dict[str, int] = {}
        for name, dt in self.tensors.items():
            counts[dt] = counts.get(dt, 0) + 1
        lines = [f"wrote {self.path}: {self.architecture}, {self.n_params} weights, {self.bytes_written} bytes of "
                 f"tensors, {self.bits_per_weight():.3f} bits/weight"
                 + (f" (recipe {self.quant})" if self.quant else "") + f", {self.seconds:.1f} s",
                 *([f"rounding: {self.rounding}"] if self.rounding else []),
                 *([f"calibration ({self.calibration_seconds:.1f} s of it{self.calibration_detail}): "
                    f"{self.calibration}"] if self.calibration else
                   ["calibration: none (data-free rounding)"] if self.quant else []),
                 "tensors by dtype: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))]
        lines += self.notes
        return "\n".join(lines)


ProgressFn = Callable[[int, int, str], None]


def _progress_stderr(done: int, total: int, name: str) -> None:
    if total <= 0:
        return
    width = 30
    fill = int(width * done / total)
    sys.stderr.write(f"\r[{'#' * fill}{'.' * (width - fill)}] {100 * done // total:3d}%  {name[:40]:<40}")
    if done >= total:
        sys.stderr.write("\n")
    sys.stderr.flush()


class _ProgressLines:
    """Progress for logs (stderr is not a terminal): one line per 25%."""

    def __init__(self) -> None:
        self.step = -1

    def __call__(self, done: int, total: int, name: str) -> None:
        if total <= 0:
            return
        step = 4 * done // total
        if step != self.step:
            self.step = step
            sys.stderr.write(f"{100 * done // total:3d}% ({name})\n")
            sys.stderr.flush()


def progress_printer() -> ProgressFn:
    """A progress callback for stderr: a bar on a terminal, a few lines otherwise."""
    return _progress_stderr if sys.stderr.isatty() else _ProgressLines()


# ---------------------------------------------------------------------------
# hyper-parameters

def _rope_settings(c: Fields) -> Tuple[float, Dict[str, Any]]:
    """(rope_theta, metadata) from either the old (`rope_theta` + `rope_scaling`) or the
    transformers-5 (`rope_parameters`) config layout."""
    params = c.object("rope_parameters")
    scaling = c.object("rope_scaling")

    def src(key: str) -> Fields:  # where `key` is read: rope_scaling first, then rope_parameters
        for f in (scaling, params):
            if f is not None and f.has(key):
                return f
        return scaling or params or c

    if params is not None and params.has("rope_theta"):
        theta = params.number("rope_theta", ok=lambda x: x > 1, rule="must be > 1")
    else:
        theta = c.number("rope_theta", 10000.0, ok=lambda x: x > 1, rule="must be > 1")
    rtype = (src("rope_type").str("rope_type", None) if src("rope_type").has("rope_type")
             else src("type").str("type", None)) or "default"
    meta: Dict[str, Any] = {}
    factor = dict(ok=lambda x: 1 <= x <= 1024, rule="is outside 1..1024")
    if rtype == "default":
        pass
    elif rtype == "linear":
        meta["model.rope_scaling.type"] = "linear"
        meta["model.rope_scaling.factor"] = src("factor").number("factor", **factor)
    elif rtype == "llama3":
        meta["model.rope_scaling.type"] = "llama3"
        meta["model.rope_scaling.factor"] = src("factor").number("factor", **factor)
        low = src("low_freq_factor").number("low_freq_factor", 1.0, ok=lambda x: x > 0, rule="must be > 0")
        high = src("high_freq_factor").number("high_freq_factor", 4.0, ok=lambda x: x > low,
                                              rule=f"must be > low_freq_factor ({low:g})")
        meta["model.rope_scaling.low_freq_factor"] = low
        meta["model.rope_scaling.high_freq_factor"] = high
        meta["model.rope_scaling.original_context_length"] = src("original_max_position_embeddings").int(
            "original_max_position_embeddings", 1, MAX_CTX, default=8192)
    elif rtype in ("longrope", "su"):
        raise ConversionError(f"RoPE scaling type {rtype!r} (Phi-3 128k, Phi-4-mini) is not supported: its frequencies "
                              "change with the sequence length (supported: default, linear, llama3)")
    else:
        raise ConversionError(f"RoPE scaling type {rtype!r} is not supported (supported: default, linear, llama3)")
    partial = src("partial_rotary_factor").number("partial_rotary_factor", 1.0, ok=lambda x: 0 < x <= 1,
                                                  rule="is outside (0, 1]")
    if partial != 1.0:
        meta["model.rope_partial_factor"] = partial  # turned into model.rope_dim by hparams_from_config
    return theta, meta


def hparams_from_config(cfg: Dict[str, Any], file: str = "config.json") -> Dict[str, Any]:
    """.cism hyper-parameters from a parsed config.json; every field read is checked for
    type and range (hf_config.Fields), errors name `file` and the field."""
    cfg, _ = unwrap_config(cfg)  # a multimodal checkpoint's text model (hf_families.WRAPPERS)
    c = Fields(cfg, file)
    archs = cfg.get("architectures")
    if not isinstance(archs, list) or len(archs) != 1 or not isinstance(archs[0], str):
        c.fail("architectures", f"must name exactly one architecture (a list of one string), not "
                                f"{archs if isinstance(archs, list) and len(archs) <= 4 else describe(archs)}")
    arch_cls = archs[0]
    if arch_cls not in SUPPORTED:
        raise ConversionError(f"architecture {arch_cls!r} is not supported "
                              f"(supported: {', '.join(sorted(SUPPORTED))})")
    arch = SUPPORTED[arch_cls]
    for key in ("num_experts", "num_local_experts", "moe_intermediate_size", "n_routed_experts"):
        if c.int(key, 0, 1 << 40, default=0):
            raise ConversionError(f"mixture-of-experts models ({key}={cfg[key]}) are not supported")
    act = c.str("hidden_act", "silu") if arch != "gemma3" else "silu"  # Gemma's hidden_activation: hf_families
    if act not in ("silu", "swish"):
        raise ConversionError(f"activation {act!r} is not supported (only SwiGLU with silu)")
    if c.bool("mlp_bias", False):
        raise ConversionError("MLP biases (mlp_bias=true) are not supported")
    if c.bool("attention_bias", False) and arch != "qwen2":
        raise ConversionError(f"attention biases (attention_bias=true) are not supported for {arch_cls}")
    dim = c.int("hidden_size", 1, MAX_DIM)
    n_layers = c.int("num_hidden_layers", 1, MAX_LAYERS)
    n_heads = c.int("num_attention_heads", 1, MAX_HEADS)
    n_kv = c.int("num_key_value_heads", 1, MAX_HEADS, default=n_heads)
    if not c.has("head_dim") and dim % n_heads:
        c.fail("hidden_size", f"{dim} is not a multiple of num_attention_heads ({n_heads}) and no head_dim is given")
    head_dim = c.int("head_dim", 2, MAX_HEAD_DIM, default=dim // n_heads)
    if head_dim % 2:
        c.fail("head_dim", f"{head_dim} is odd (RoPE rotates pairs)")
    if arch == "lfm2" and c.has("block_ff_dim"):  # LFM2's older name of it (hf_families sizes its MLP)
        ffn = c.int("intermediate_size", 1, 4 * MAX_DIM, default=c.int("block_ff_dim", 1, 4 * MAX_DIM))
    else:
        ffn = c.int("intermediate_size", 1, 4 * MAX_DIM)
    vocab = c.int("vocab_size", 1, MAX_VOCAB)
    ctx = c.int("max_position_embeddings", 1, MAX_CTX, default=2048)
    eps = c.number("rms_norm_eps", 1e-6, ok=lambda x: 0 < x < 1, rule="is outside (0, 1)")
    theta, rope_meta = _rope_settings(c) if arch != "gemma3" else (10000.0, {})  # Gemma 3's: per layer type
    meta: Dict[str, Any] = {
        "general.architecture": arch,
        "model.vocab_size": vocab,
        "model.dim": dim,
        "model.n_layers": n_layers,
        "model.n_heads": n_heads,
        "model.n_kv_heads": n_kv,
        "model.head_dim": head_dim,
        "model.ffn_dim": ffn,
        "model.context_length": ctx,
        "model.norm_eps": eps,
        "model.rope_theta": theta,
        "model.tied_embeddings": int(c.bool("tie_word_embeddings", False)),
    }
    partial = rope_meta.pop("model.rope_partial_factor", None)
    meta.update(rope_meta)
    if partial is not None:  # as transformers sizes it: int(head_dim * factor) dimensions rotate
        rope_dim = int(head_dim * partial)
        if rope_dim < 2 or rope_dim % 2:
            c.fail("partial_rotary_factor", f"{partial:g} x head_dim {head_dim} gives {rope_dim} rotated dimensions; "
                                            "an even number >= 2 is needed")
        if rope_dim != head_dim:
            meta["model.rope_dim"] = rope_dim
    if arch == "qwen2":
        meta["model.attn_qkv_bias"] = 1
    if arch == "qwen3":
        meta["model.qk_norm"] = 1
    # sliding window: every layer's (Mistral, Phi-3; Gemma 3 marks its layers in hf_families)
    window = c.int("sliding_window", 0, 1 << 62, default=0)
    uses_window = c.bool("use_sliding_window", False) or arch in ("mistral", "phi3")
    if uses_window and window and window < ctx and arch != "gemma3":
        meta["model.sliding_window"] = window
    family = FAMILIES.get(arch_cls)
    if family is not None:
        family.config(c, meta)
    if n_heads % n_kv:
        raise ConversionError(f"num_attention_heads {n_heads} is not a multiple of num_key_value_heads {n_kv}")
    return meta


# ---------------------------------------------------------------------------
# tensor name mapping

_LAYER_MAP = {
    "input_layernorm.weight": "attn_norm",
    "self_attn.q_proj.weight": "attn_q",
    "self_attn.k_proj.weight": "attn_k",
    "self_attn.v_proj.weight": "attn_v",
    "self_attn.o_proj.weight": "attn_output",
    "self_attn.q_proj.bias": "attn_q_bias",
    "self_attn.k_proj.bias": "attn_k_bias",
    "self_attn.v_proj.bias": "attn_v_bias",
    "self_attn.q_norm.weight": "attn_q_norm",
    "self_attn.k_norm.weight": "attn_k_norm",
    "post_attention_layernorm.weight": "ffn_norm",
    "mlp.gate_proj.weight": "ffn_gate",
    "mlp.up_proj.weight": "ffn_up",
    "mlp.down_proj.weight": "ffn_down",
}
_TOP_MAP = {"model.embed_tokens.weight": "token_embd", "model.norm.weight": "output_norm", "lm_head.weight": "output"}
_LAYER_RE = re.compile(r"^model\.layers\.(\d+)\.(.+)$")


def map_name(hf: str, arch_cls: str = "") -> Optional[str]:
    """The .cism name of an HF tensor, None for tensors that are dropped (or split:
    map_split), or raises."""
    if arch_cls in FAMILIES and hf in FAMILIES[arch_cls].top_names:
        return FAMILIES[arch_cls].top_names[hf]
    if hf in _TOP_MAP:
        return _TOP_MAP[hf]
    if hf.endswith("rotary_emb.inv_freq"):
        return None
    m = _LAYER_RE.match(hf)
    names = {**_LAYER_MAP, **FAMILIES[arch_cls].layer_names} if arch_cls in FAMILIES else _LAYER_MAP
    if m and m.group(2) in names:
        return None if names[m.group(2)] is None else f"blk.{m.group(1)}.{names[m.group(2)]}"
    raise ConversionError(f"tensor {hf!r} is not part of a supported model (unknown name)")


def map_split(hf: str, arch_cls: str, meta: Dict[str, Any]) -> List[Tuple[str, int, int]]:
    """The .cism tensors (name, first row, end row) cut from a fused HF tensor; [] for others."""
    m = _LAYER_RE.match(hf)
    if not m or arch_cls not in FAMILIES:
        return []
    return [(f"blk.{m.group(1)}.{n}", r0, r1) for n, r0, r1 in FAMILIES[arch_cls].splits(meta).get(m.group(2), [])]


def _attention_tensors(meta: Dict[str, Any], p: str) -> Dict[str, Tuple[int, ...]]:
    d, hd = meta["model.dim"], meta["model.head_dim"]
    q, kv = meta["model.n_heads"] * hd, meta["model.n_kv_heads"] * hd
    out: Dict[str, Tuple[int, ...]] = {p + "attn_q": (q, d), p + "attn_k": (kv, d), p + "attn_v": (kv, d),
                                       p + "attn_output": (d, q)}
    if meta.get("model.attn_qkv_bias"):
        out.update({p + "attn_q_bias": (q,), p + "attn_k_bias": (kv,), p + "attn_v_bias": (kv,)})
    if meta.get("model.qk_norm"):
        out.update({p + "attn_q_norm": (hd,), p + "attn_k_norm": (hd,)})
    if meta.get("model.attn_output_gate"):
        out[p + "attn_gate"] = (q, d)
    return out


def _shortconv_tensors(meta: Dict[str, Any], p: str) -> Dict[str, Tuple[int, ...]]:
    d, k = meta["model.dim"], meta["model.conv_kernel"]
    out: Dict[str, Tuple[int, ...]] = {p + "conv_in": (3 * d, d), p + "conv_kernel": (d * k,), p + "conv_out": (d, d)}
    if meta.get("model.conv_bias"):
        out.update({p + "conv_in_bias": (3 * d,), p + "conv_bias": (d,), p + "conv_out_bias": (d,)})
    return out
def _linear_attention_tensors(meta: Dict[str, Any], p: str) -> Dict[str, Tuple[int, ...]]:
    """A Gated DeltaNet layer's (Qwen3.5): q/k/v in one matrix (the conv's channels), the z gate, beta and
    alpha (decay) projections, the depthwise conv, per-head decay parameters, the gated norm, the output."""
    d, nk, nv = meta["model.dim"], meta["model.linear_n_k_heads"], meta["model.linear_n_v_heads"]
    kd, vd = nk * meta["model.linear_k_head_dim"], nv * meta["model.linear_v_head_dim"]
    return {p + "ssm_qkv": (2 * kd + vd, d), p + "ssm_z": (vd, d), p + "ssm_beta": (nv, d), p + "ssm_alpha": (nv, d),
            p + "ssm_conv": (2 * kd + vd, 1, meta["model.linear_conv_kernel"]), p + "ssm_dt_bias": (nv,),
            p + "ssm_a_log": (nv,), p + "ssm_norm": (meta["model.linear_v_head_dim"],), p + "ssm_out": (d, vd)}


# the tensors of each layer type's token mixer (model.layer_types, docs/FORMAT.md)
MIXER_TENSORS: Dict[str, Callable[[Dict[str, Any], str], Dict[str, Tuple[int, ...]]]] = {
    "attention": _attention_tensors,
    "shortconv": _shortconv_tensors,
    "linear_attention": _linear_attention_tensors,
}


def expected_tensors(meta: Dict[str, Any]) -> Dict[str, Tuple[int, ...]]:
    """Every tensor a model with these hyper-parameters has, with its shape."""
    d, f, v = meta["model.dim"], meta["model.ffn_dim"], meta["model.vocab_size"]
    n = meta["model.n_layers"]
    kinds = meta.get("model.layer_types") or ["attention"] * n
    out: Dict[str, Tuple[int, ...]] = {"token_embd": (v, d), "output_norm": (d,)}
    if not meta["model.tied_embeddings"]:
        out["output"] = (v, d)
    for i in range(n):
        p = f"blk.{i}."
        out[p + "attn_norm"] = (d,)
        out.update(MIXER_TENSORS[kinds[i]](meta, p))
        out.update({p + "ffn_norm": (d,), p + "ffn_gate": (f, d), p + "ffn_up": (f, d), p + "ffn_down": (d, f)})
        if meta.get("model.post_norms"):
            out.update({p + "post_attn_norm": (d,), p + "post_ffn_norm": (d,)})
    return out


# ---------------------------------------------------------------------------
# writing

def _matrix_bytes(arr: np.ndarray, dtype: int) -> np.ndarray:
    if dtype == fmt.DTYPE_F32:
        return np.ascontiguousarray(arr, dtype="<f4")
    if dtype == fmt.DTYPE_F16:
        return np.ascontiguousarray(arr, dtype="<f2")
    if dtype == fmt.DTYPE_BF16:
        return f32_to_bf16(np.asarray(arr, dtype=np.float32))
    raise ConversionError(f"unknown dtype {dtype}")


def write_model(out: str, meta: Dict[str, Any], order: List[str], load: Callable[[str], np.ndarray],
                dtype_for: Callable[[str], int], overwrite: bool = False,
                progress: Optional[ProgressFn] = None, raw_for: Optional[Callable[[str], Optional[np.ndarray]]] = None,
                quant: Optional[str] = None, layout: str = "auto", calibration: Any = None,
                validate: bool = True) -> Report:
    """Writes tensors `order` (shapes from expected_tensors) loaded by `load(name)` as float32
    arrays. Tensors that are not matrices (1-D, the 3-D conv kernels) are always f32. `raw_for(name)`
    may return already-encoded bytes (used to keep bf16/f16 sources bit-exact). With a recipe, `layout` "auto" stores
    q8/q4s matrices in their row-interleaved variants where the shape allows
    (cism.quant.stored_dtype); "rows" keeps every matrix row by row. `calibration`
    (cism.calibrate.Calibration) gives the quantizer the statistics of each matrix's inputs."""
    t0 = time.time()
    shapes = expected_tensors(meta)
    if os.path.exists(out) and not overwrite:
        raise FileExistsError(f"{out} already exists (use --force to overwrite it)")
    w = fmt.Writer(meta)
    report = Report(out, meta["general.architecture"], quant=quant)
    pick = None
    if quant:
        from . import quant as q
        # the calibrated recipe (a 4-bit head where it is large) is GPTQ's: imatrix keeps the plain one
        plan = q.recipe(quant).dtypes(shapes, calibrated=calibration is not None and calibration.method == "gptq")
        hd = int(meta["model.head_dim"])
        pick = lambda n: q.QUANT_DTYPES[q.stored_dtype(n, plan[n], shapes[n], hd, layout)]  # noqa: E731
        qmeta = {"general.quantization": quant,
                 "general.quantization.rounding": UNCALIBRATED_ROUNDING if calibration is None else
                 calibration.rounding()}
        report.rounding = qmeta["general.quantization.rounding"]
        if calibration is not None:
            qmeta["general.quantization.calibration"] = calibration.description
            qmeta["general.quantization.calibration_tokens"] = int(calibration.n_tokens)
            report.calibration = calibration.description
            report.calibration_seconds = calibration.seconds
        meta.update(qmeta)
        w.metadata.update(qmeta)
    elif calibration is not None:  # no recipe: the calibration gives the KV tensors only
        report.calibration = calibration.description
        report.calibration_seconds = calibration.seconds
    # every attention layer's mean key after RoPE and its queries' main direction: what a quantized K
    # cache subtracts and rounds along (docs/KV_CACHE.md, "Key offsets", "Query directions"); f32 vectors
    # after the layers' tensors
    kv_tensors = dict(getattr(calibration, "kv_tensors", None) or {})
    if kv_tensors:
        key = "general.kv_key_offsets"
        meta[key] = w.metadata[key] = (f"mean key and queries' main direction after RoPE per layer on "
                                       f"{calibration.description}")
        shapes = dict(shapes)
        shapes.update({n: tuple(v.shape) for n, v in kv_tensors.items()})
        order = list(order) + sorted(kv_tensors, key=lambda n: (int(n.split(".")[1]), n))
        base_load = load
        load = lambda n: kv_tensors[n] if n in kv_tensors else base_load(n)  # noqa: E731
    for name in order:
        shape = shapes[name]
        dt = fmt.DTYPE_F32 if len(shape) != 2 else (pick(name) if pick else dtype_for(name))
        if dt in (fmt.DTYPE_F32, fmt.DTYPE_F16, fmt.DTYPE_BF16):
            nbytes = int(np.prod(shape)) * (4 if dt == fmt.DTYPE_F32 else 2)
        else:
            from . import quant as q
            nbytes = shape[0] * q.row_bytes(dt, shape[1])
            note = q.padding_note(name, dt, shape[1])
            if note and note not in report.notes:
                report.notes.append(note)
        w.add(name, dt, shape, nbytes)
        report.tensors[name] = fmt.DTYPE_NAMES[dt]
        if len(shape) == 2:
            report.n_params += int(np.prod(shape))
    total = sum(t.nbytes for t in w.tensors)
    done = 0
    with w.open(out, overwrite=overwrite, validate=_loader_check(out) if validate else None) as f:
        for spec in w.tensors:
            raw = raw_for(spec.name) if raw_for and not quant and spec.name not in kv_tensors else None
            if raw is not None and raw.nbytes == spec.nbytes:
                _refuse_nonfinite(spec.name, raw, spec.dtype)
                f.write_tensor(spec.name, raw)
            else:
                arr = load(spec.name)
                if tuple(arr.shape) != spec.shape:
                    raise ConversionError(f"tensor {spec.name}: shape {tuple(arr.shape)}, expected {spec.shape}")
                _refuse_nonfinite(spec.name, arr, fmt.DTYPE_F32)
                if spec.dtype in (fmt.DTYPE_F32, fmt.DTYPE_F16, fmt.DTYPE_BF16):
                    with np.errstate(over="ignore"):  # overflow is refused just below, with the tensor's name
                        enc = _matrix_bytes(arr, spec.dtype)
                    _refuse_nonfinite(spec.name, enc, spec.dtype, overflow=True)
                    f.write_tensor(spec.name, enc)
                else:
                    from . import quant as q
                    gram = imp = None
                    if calibration is not None and spec.dtype in q.CALIBRATED_DTYPES:
                        gram = calibration.gram_for(spec.name)
                        imp = calibration.importance_for(spec.name) if gram is None else None
                    f.write_tensor(spec.name, q.quantize(arr, spec.dtype, gram=gram, importance=imp))
            done += spec.nbytes
            if progress:
                progress(done, total, spec.name)
    report.bytes_written = total
    report.seconds = time.time() - t0
    return report


def _refuse_nonfinite(name: str, a: np.ndarray, dtype: int, overflow: bool = False) -> None:
    """ConversionError if tensor `name` holds NaN or infinity: float32 values, or
    the raw f16/bf16 bits kept bit-exact from the source (exponent all ones).
    Every dtype is checked before it is written or quantized (a NaN would give
    all-NaN logits, or finite garbage through the int8 paths)."""
    if a.dtype.itemsize == 2 and dtype in (fmt.DTYPE_F16, fmt.DTYPE_BF16):
        bits = np.ascontiguousarray(a).view(np.uint16)
        exp = np.uint16(0x7C00 if dtype == fmt.DTYPE_F16 else 0x7F80)
        bad = (bits & exp) == exp
    else:
        bad = ~np.isfinite(np.asarray(a, dtype=np.float32))
    if bad.any():
        n = int(np.count_nonzero(bad))
        first = tuple(int(i) for i in np.unravel_index(int(np.argmax(bad.reshape(-1))), bad.shape))
        if overflow:  # finite float32 values the target dtype cannot hold
            raise ConversionError(f"tensor {name}: {n} value(s) overflow {fmt.DTYPE_NAMES[dtype]} (the first at index "
                                  f"{first}); convert with --dtype bf16 or f32; nothing was written")
        raise ConversionError(f"tensor {name} holds {n} NaN or infinite value(s) (the first at index {first}): the "
                              "checkpoint is corrupt or overflowed; nothing was written")


def _loader_check(out: str) -> Callable[[str], None]:
    """Loads a finished temporary file with every check of the C loader (weights
    scanned, every checksum verified) before it may replace `out`."""
    def check(tmp: str) -> None:
        from .errors import CismError
        from .model import Model
        try:
            with Model(tmp, check_weights=True, verify_checksums=True):
                pass
        except CismError as e:
            msg = str(e).replace(tmp, "the converted file")
            raise ConversionError(f"{out}: not written: the converted model fails the loader's checks ({msg})"
                                  + ("; the existing file is kept" if os.path.exists(out) else "")) from None
    return check


# ---------------------------------------------------------------------------
# tokenizer metadata

def _read_json(path: str) -> Optional[Dict[str, Any]]:
    """A JSON file that must hold an object (None when absent); bad JSON names the file."""
    got = read_json(path)
    return None if got is None else got[1]


def tokenizer_meta_hf(folder: str, cfg: Dict[str, Any]) -> Dict[str, Any]:
    meta: Dict[str, Any] = {}
    c = Fields(cfg, "config.json")
    vocab = c.int("vocab_size", 1, MAX_VOCAB)
    g = Fields(_read_json(os.path.join(folder, "generation_config.json")) or {}, "generation_config.json")
    got = read_json(os.path.join(folder, "tokenizer_config.json"))
    bos = (c if "bos_token_id" in cfg else g).id("bos_token_id", vocab, allow_none=True)
    eos = c.ids("eos_token_id", vocab)
    for e in g.ids("eos_token_id", vocab):
        if e not in eos:
            eos.append(e)
    pad_from = c if "pad_token_id" in cfg else g
    pad = None if isinstance(pad_from.obj.get("pad_token_id"), list) else \
        pad_from.id("pad_token_id", vocab, allow_none=True)
    if bos is not None:
        meta["tokenizer.bos_id"] = bos
    if eos:
        meta["tokenizer.eos_id"] = eos[0]
        meta["tokenizer.eos_ids"] = np.asarray(eos, dtype=np.int64)
    if pad is not None:
        meta["tokenizer.pad_id"] = pad
    tj = os.path.join(folder, "tokenizer.json")
    tok = read_json(tj, MAX_TOKENIZER_JSON_BYTES)
    if tok is not None:
        check_tokenizer_json(tok[1])
        meta["tokenizer.hf_json"] = fmt.Bytes(tok[0])
        meta.update(_c_tokenizer(tok[1], tj))
    tok_cfg = None
    if got is not None:
        raw, tok_cfg = got
        tc = Fields(tok_cfg, "tokenizer_config.json")
        meta["tokenizer.hf_config_json"] = fmt.Bytes(raw)
        tmpl = tok_cfg.get("chat_template")
        if isinstance(tmpl, list):  # named templates: take the default one
            named = {}
            for n, t in enumerate(tmpl):
                f = Fields(t, "tokenizer_config.json", f"chat_template[{n}].")
                named[f.str("name", None)] = f.str("template")
            tmpl = named.get("default") or next(iter(named.values()), None)
        elif tmpl is not None and not isinstance(tmpl, str):
            tc.fail("chat_template", f"must be a string or a list of named templates, not {describe(tmpl)}")
        if isinstance(tmpl, str):
            meta["tokenizer.chat_template"] = tmpl
        add_bos = tc.bool("add_bos_token", None)
        if add_bos is not None:
            meta["tokenizer.add_bos"] = int(add_bos)
    jinja = os.path.join(folder, "chat_template.jinja")
    if "tokenizer.chat_template" not in meta and os.path.exists(jinja):
        try:
            with open(jinja, encoding="utf-8") as f:
                meta["tokenizer.chat_template"] = f.read()
        except UnicodeDecodeError as e:
            raise ConversionError(f"chat_template.jinja: not UTF-8 text ({e})") from None
    if "tokenizer.chat_template" in meta and "tokenizer.tokens" in meta:
        meta.update(chat_format_meta(meta["tokenizer.chat_template"], meta, tok_cfg or {}))
    return meta


def _c_tokenizer(tj: Dict[str, Any], path: str) -> Dict[str, Any]:
    """The compact tokenizer keys the C library reads; refuses what it cannot reproduce."""
    try:
        return compact_tokenizer(tj)
    except TokenizerUnsupported as e:
        raise ConversionError(f"{path}: the C tokenizer cannot reproduce this tokenizer exactly ({e})") from None
    except (KeyError, TypeError, AttributeError, IndexError, ValueError) as e:
        # the structure is checked first (hf_config.check_tokenizer_json); this is what is left
        raise ConversionError(f"{path}: malformed tokenizer ({type(e).__name__}: {e})") from None


def _token_text(v: Any) -> Optional[str]:
    if isinstance(v, dict):
        v = v.get("content")
    return v if isinstance(v, str) else None


def chat_format_meta(template: str, meta: Dict[str, Any], tok_cfg: Dict[str, Any]) -> Dict[str, Any]:
    """tokenizer.chat_format (and its default system prompt) when the Jinja template
    renders exactly like one of the formats the C library knows."""
    tokens = meta["tokenizer.tokens"]

    def text_of(key: str, cfg_key: str, default: str) -> str:
        t = _token_text(tok_cfg.get(cfg_key))
        if t is not None:
            return t
        i = meta.get(key, -1)
        return tokens[i].decode("utf-8") if 0 <= i < len(tokens) else default

    found = chat_format.detect(template, text_of("tokenizer.bos_id", "bos_token", "<s>"),
                               text_of("tokenizer.eos_id", "eos_token", "</s>"))
    if not found:
        return {}
    out: Dict[str, Any] = {"tokenizer.chat_format": found[0]}
    if found[1] is not None:
        out["tokenizer.chat_default_system"] = found[1]
    return out


# ---------------------------------------------------------------------------
# Hugging Face folders

def convert_hf(folder: str, out: str, dtype: str = "auto", overwrite: bool = False,
               progress: Optional[ProgressFn] = None, quant: Optional[str] = None, layout: str = "auto",
               calibration: Any = None) -> Report:
    cfg = _read_json(os.path.join(folder, "config.json"))
    if cfg is None:
        raise ConversionError(f"{folder}: no config.json (is this a Hugging Face model folder?)")
    cfg, wrapper = unwrap_config(cfg)  # a multimodal checkpoint: its text model
    meta = hparams_from_config(cfg)
    arch_cls = cfg["architectures"][0]
    family = FAMILIES.get(arch_cls)
    tensors = open_checkpoint(folder)
    mapping: Dict[str, str] = {}
    rows: Dict[str, Tuple[int, int]] = {}   # tensors cut from a fused one: their rows
    reorder = family.reorder(meta) if family is not None else {}
    permute: Dict[str, Callable[[np.ndarray], np.ndarray]] = {}  # cism name -> row permutation of its source
    for hf_name in tensors:  # mapping keeps the checkpoint's names; the maps read the text model's
        hf = unwrap_name(hf_name, wrapper)
        if hf is None or (family is not None and family.drop_prefixes and hf.startswith(family.drop_prefixes)):
            continue
        name = map_name(hf, arch_cls)
        if name is not None:
            mapping[name] = hf_name
        for part, r0, r1 in map_split(hf, arch_cls, meta):
            mapping[part] = hf_name
            rows[part] = (r0, r1)
            m = _LAYER_RE.match(hf)
            if m and m.group(2) in reorder:
                permute[part] = reorder[m.group(2)]
    expected = expected_tensors(meta)
    if meta["model.tied_embeddings"]:
        mapping.pop("output", None)  # a saved copy of the tied head is redundant
    missing = [n for n in expected if n not in mapping]
    extra = [mapping[n] for n in mapping if n not in expected]
    if extra:
        bias = [e for e in extra if e.endswith(".bias")]
        raise ConversionError(f"unexpected tensors for {meta['general.architecture']}: {extra[:5]}"
                              + (" (biases are not supported for this family)" if bias else ""))
    if missing:
        raise ConversionError(f"missing tensors: {missing[:5]}{' ...' if len(missing) > 5 else ''}")
    for name, shape in expected.items():
        src_dt, got = tensors[mapping[name]].info(mapping[name])
        if name in rows:  # one part of a fused tensor, whose rows are the parts' in order
            end = max(r1 for n, (_, r1) in rows.items() if mapping[n] == mapping[name])
            if len(got) != 2 or got[0] != end:
                raise ConversionError(f"{mapping[name]} has shape {tuple(got)}, config.json implies ({end}, {shape[1]})")
            got = (rows[name][1] - rows[name][0], got[1])
        if family is not None and family.flat(name):
            got = (int(np.prod(got)),)
        if tuple(got) != shape:
            raise ConversionError(f"{mapping[name]} has shape {tuple(got)}, config.json implies {shape}")
        if src_dt not in ("F32", "F16", "BF16", "F64"):
            raise ConversionError(f"{mapping[name]} holds {src_dt} values; model weights are floating point "
                                  "(F32, F16, BF16)")
    src_dtypes = {tensors[mapping[n]].info(mapping[n])[0] for n, s in expected.items() if len(s) == 2}
    if dtype == "auto":
        target = {"F32": "f32", "F16": "f16", "BF16": "bf16"}.get(sorted(src_dtypes)[0] if len(src_dtypes) == 1 else "F32", "f32")
    elif dtype in DTYPES:
        target = dtype
    else:
        raise ConversionError(f"unknown dtype {dtype!r} (f32, f16, bf16 or auto)")
    meta.update(tokenizer_meta_hf(folder, cfg))
    meta["general.name"] = (Fields(cfg, "config.json").str("_name_or_path", None)
                            or os.path.basename(os.path.abspath(folder)))
    meta["general.source"] = "hf:" + os.path.basename(os.path.abspath(folder))
    meta["general.converter"] = "cism.convert " + _version()

    def get(name: str) -> Tuple[np.ndarray, str]:
        arr, dt = tensors[mapping[name]].get(mapping[name])
        if name in permute:
            arr = permute[name](arr)
        if name in rows:
            arr = arr[rows[name][0]:rows[name][1]]
        return arr, dt

    def load(name: str) -> np.ndarray:
        arr, dt = get(name)
        arr = bf16_to_f32(arr) if dt == "BF16" else arr.astype(np.float32)
        if family is not None and family.flat(name):
            arr = arr.reshape(-1)
        if family is not None and family.plus_one(name):  # stored as the scale the norm applies, in float32
            arr = (np.float32(1.0) + arr).astype(np.float32)
        return arr

    def raw_for(name: str) -> Optional[np.ndarray]:
        arr, dt = get(name)
        if arr.ndim == 2 and dt == "BF16" and target == "bf16":
            return arr
        if arr.ndim == 2 and dt == "F16" and target == "f16":
            return arr
        return None

    order = list(expected)
    return write_model(out, meta, order, load, lambda n: DTYPES[target], overwrite, progress, raw_for, quant=quant,
                       layout=layout, calibration=calibration)


def _version() -> str:
    try:
        from . import __version__
        return __version__
    except ImportError:
        return "unknown"


# ---------------------------------------------------------------------------
# llama2.c checkpoints

def _read_llama2c(path: str) -> Tuple[Dict[str, int], Dict[str, np.ndarray], bool]:
    """Returns (config, tensors by llama2.c name, shared classifier)."""
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        head = f.read(256)
    if len(head) < 28:
        raise ConversionError(f"{path}: too short for a llama2.c checkpoint")
    (magic,) = struct.unpack_from("<I", head, 0)
    if magic == 0x616B3432:  # "ak42": version 1 or 2
        (version,) = struct.unpack_from("<i", head, 4)
        if version != 1:
            raise ConversionError(f"{path}: llama2.c checkpoint version {version} is not supported "
                                  "(version 0 and 1 are; version 2 is llama2.c's own int8 export)")
        dim, hidden, n_layers, n_heads, n_kv, vocab, seq = struct.unpack_from("<7i", head, 8)
        shared = bool(head[36])
        offset = 256
        legacy = False
    else:
        dim, hidden, n_layers, n_heads, n_kv, vocab, seq = struct.unpack_from("<7i", head, 0)
        shared = vocab > 0
        vocab = abs(vocab)
        offset = 28
        legacy = True
    cfg = dict(dim=dim, hidden_dim=hidden, n_layers=n_layers, n_heads=n_heads, n_kv_heads=n_kv,
               vocab_size=vocab, seq_len=seq)
    for k, v in cfg.items():
        if not 0 < v <= (1 << 24):
            raise ConversionError(f"{path}: header field {k}={v} is not plausible (not a llama2.c checkpoint?)")
    if dim % n_heads or n_heads % n_kv or (dim // n_heads) % 2:
        raise ConversionError(f"{path}: inconsistent header (dim {dim}, heads {n_heads}, kv heads {n_kv})")
    hs = dim // n_heads
    kv_dim = n_kv * hs
    L = n_layers
    shapes = [("token_embedding_table", (vocab, dim))]
    if legacy:
        shapes += [("rms_att_weight", (L, dim)), ("wq", (L, dim, dim)), ("wk", (L, kv_dim, dim)),
                   ("wv", (L, kv_dim, dim)), ("wo", (L, dim, dim)), ("rms_ffn_weight", (L, dim)),
                   ("w1", (L, hidden, dim)), ("w2", (L, dim, hidden)), ("w3", (L, hidden, dim)),
                   ("rms_final_weight", (dim,)), ("freq_cis_real", (seq * hs // 2,)),
                   ("freq_cis_imag", (seq * hs // 2,))]
    else:
        shapes = [("rms_att_weight", (L, dim)), ("rms_ffn_weight", (L, dim)), ("rms_final_weight", (dim,)),
                  ("token_embedding_table", (vocab, dim)), ("wq", (L, dim, dim)), ("wk", (L, kv_dim, dim)),
                  ("wv", (L, kv_dim, dim)), ("wo", (L, dim, dim)), ("w1", (L, hidden, dim)),
                  ("w2", (L, dim, hidden)), ("w3", (L, hidden, dim))]
    if not shared:
        shapes.append(("wcls", (vocab, dim)))
    need = offset + 4 * sum(int(np.prod(s)) for _, s in shapes)
    if size < need:
        raise ConversionError(f"{path}: file has {size} bytes, its header implies {need} (truncated?)")
    if size > need:
        raise ConversionError(f"{path}: file has {size - need} bytes more than its header implies "
                              "(not a supported llama2.c checkpoint)")
    data = np.memmap(path, dtype="<f4", mode="r", offset=offset)
    out: Dict[str, np.ndarray] = {}
    pos = 0
    for name, shape in shapes:
        n = int(np.prod(shape))
        out[name] = np.asarray(data[pos:pos + n]).reshape(shape)
        pos += n
    return cfg, out, shared


def _permute_rope(w: np.ndarray, n_heads: int) -> np.ndarray:
    """Interleaved RoPE pairs (llama2.c/Meta) -> rotate-half order (Hugging Face)."""
    rows, cols = w.shape
    hs = rows // n_heads
    return w.reshape(n_heads, hs // 2, 2, cols).transpose(0, 2, 1, 3).reshape(rows, cols)


def read_llama2c_vocab(path: str, vocab_size: int) -> Tuple[List[bytes], np.ndarray]:
    """llama2.c tokenizer.bin: pieces (bytes, as stored) and scores."""
    pieces: List[bytes] = []
    scores = np.zeros(vocab_size, dtype=np.float32)
    with open(path, "rb") as f:
        blob = f.read()
    if len(blob) < 4:
        raise ConversionError(f"{path}: too short for a llama2.c tokenizer")
    p = 4
    for i in range(vocab_size):
        if p + 8 > len(blob):
            raise ConversionError(f"{path}: holds fewer than the model's {vocab_size} tokens (truncated, or another vocabulary)")
        score, ln = struct.unpack_from("<fi", blob, p)
        p += 8
        if ln < 0 or p + ln > len(blob):
            raise ConversionError(f"{path}: token {i} has an impossible length {ln}")
        pieces.append(blob[p:p + ln])
        p += ln
        scores[i] = score
    if p != len(blob):
        raise ConversionError(f"{path}: {len(blob) - p} bytes left after {vocab_size} tokens (vocabulary does not match the model)")
    return pieces, scores


def llama2c_tokenizer_json(pieces: List[bytes], scores: np.ndarray) -> Dict[str, Any]:
    """A Hugging Face tokenizer.json equivalent to a llama2.c (sentencepiece BPE,
    byte-fallback) vocabulary, with the same normalizer as sentencepiece's
    defaults for llama2.c's tokenizers (dummy prefix, extra whitespace removed)."""
    specials = {0: "<unk>", 1: "<s>", 2: "</s>"}
    vocab: Dict[str, int] = {}
    for i, raw in enumerate(pieces):
        if i in specials:
            tok = specials[i]
        else:
            tok = raw.decode("utf-8", errors="surrogateescape").replace(" ", "\u2581")
        if tok in vocab:
            raise ConversionError(f"duplicate piece {tok!r} in the vocabulary")
        vocab[tok] = i
    # merges: every split of a multi-character piece into two pieces, ordered by the
    # merged piece's score (sentencepiece merge priority), then by split position
    merges = []
    for tok, i in vocab.items():
        if i in specials or re.fullmatch(r"<0x[0-9A-F]{2}>", tok) or len(tok) < 2:
            continue
        for k in range(1, len(tok)):
            a, b = tok[:k], tok[k:]
            if a in vocab and b in vocab:
                merges.append((-float(scores[i]), i, k, a, b))
    merges.sort()
    byte_fallback = all(f"<0x{b:02X}>" in vocab for b in range(256))
    decoders: List[Dict[str, Any]] = [{"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "}]
    if byte_fallback:
        decoders.append({"type": "ByteFallback"})
    decoders += [{"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 1, "stop": 0}]
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [
            {"id": i, "content": c, "single_word": False, "lstrip": False, "rstrip": False,
             "normalized": False, "special": True} for i, c in specials.items()],
        "normalizer": {"type": "Sequence", "normalizers": [
            {"type": "Replace", "pattern": {"Regex": "\\A +| +\\z"}, "content": ""},
            {"type": "Replace", "pattern": {"Regex": " {2,}"}, "content": " "},
            {"type": "Prepend", "prepend": "\u2581"},
            {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}]},
        "pre_tokenizer": None,
        "post_processor": {
            "type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
            "pair": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                     {"SpecialToken": {"id": "<s>", "type_id": 1}}, {"Sequence": {"id": "B", "type_id": 1}}],
            "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}},
        "decoder": {"type": "Sequence", "decoders": decoders},
        "model": {"type": "BPE", "dropout": None, "unk_token": "<unk>", "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": True, "byte_fallback": byte_fallback, "ignore_merges": False,
                  "vocab": vocab, "merges": [[m[3], m[4]] for m in merges]},
    }


def convert_llama2c(path: str, out: str, tokenizer: Optional[str] = None, dtype: str = "f32",
                    overwrite: bool = False, progress: Optional[ProgressFn] = None,
                    quant: Optional[str] = None, layout: str = "auto", calibration: Any = None) -> Report:
    cfg, t, shared = _read_llama2c(path)
    hs = cfg["dim"] // cfg["n_heads"]
    meta: Dict[str, Any] = {
        "general.architecture": "llama",
        "model.vocab_size": cfg["vocab_size"],
        "model.dim": cfg["dim"],
        "model.n_layers": cfg["n_layers"],
        "model.n_heads": cfg["n_heads"],
        "model.n_kv_heads": cfg["n_kv_heads"],
        "model.head_dim": hs,
        "model.ffn_dim": cfg["hidden_dim"],
        "model.context_length": cfg["seq_len"],
        "model.norm_eps": 1e-5,
        "model.rope_theta": 10000.0,
        "model.tied_embeddings": int(shared),
        "general.name": os.path.splitext(os.path.basename(path))[0],
        "general.source": "llama2c:" + os.path.basename(path),
        "general.converter": "cism.convert " + _version(),
        "tokenizer.bos_id": 1,
        "tokenizer.eos_id": 2,
        # llama2.c's run.c stops when the model produces BOS again
        "tokenizer.eos_ids": np.asarray([2, 1], dtype=np.int64),
        "tokenizer.add_bos": 1,
    }
    if tokenizer:
        pieces, scores = read_llama2c_vocab(tokenizer, cfg["vocab_size"])
        tj = llama2c_tokenizer_json(pieces, scores)
        meta["tokenizer.hf_json"] = fmt.Bytes(json.dumps(tj, ensure_ascii=False).encode("utf-8"))
        meta.update(_c_tokenizer(tj, tokenizer))
        meta["tokenizer.llama2c_vocab"] = fmt.Bytes(open(tokenizer, "rb").read())
    if dtype not in DTYPES:
        raise ConversionError(f"unknown dtype {dtype!r} (f32, f16 or bf16)")

    def load(name: str) -> np.ndarray:
        if name == "token_embd":
            return t["token_embedding_table"]
        if name == "output":
            return t["wcls"]
        if name == "output_norm":
            return t["rms_final_weight"]
        layer, what = int(name.split(".")[1]), name.split(".")[2]
        if what == "attn_q":
            return _permute_rope(t["wq"][layer], cfg["n_heads"])
        if what == "attn_k":
            return _permute_rope(t["wk"][layer], cfg["n_kv_heads"])
        src = {"attn_norm": "rms_att_weight", "attn_v": "wv", "attn_output": "wo", "ffn_norm": "rms_ffn_weight",
               "ffn_gate": "w1", "ffn_down": "w2", "ffn_up": "w3"}[what]
        return t[src][layer]

    order = list(expected_tensors(meta))
    return write_model(out, meta, order, load, lambda n: DTYPES[dtype], overwrite, progress, quant=quant, layout=layout,
                       calibration=calibration)


def _not_an_input(out: str, src: str, tokenizer: Optional[str], calibrate) -> None:
    """Refuses, even with --force, an output that is one of the conversion's inputs (the
    checkpoint file, the tokenizer, the calibration text) or a file of the checkpoint's folder
    other than an earlier .cism: the rename at the end would replace what the user converts."""
    if not os.path.isfile(out):
        return
    for what, path in (("the checkpoint being converted", src), ("this conversion's tokenizer", tokenizer),
                       ("this conversion's calibration text", calibrate if isinstance(calibrate, str) else None)):
        if path and os.path.isfile(path) and os.path.samefile(out, path):
            raise ConversionError(f"{out} is {what}: write the .cism to another path "
                                  "(--force never replaces an input)")
    if os.path.isdir(src) and os.path.samefile(os.path.dirname(os.path.abspath(out)), src):
        with open(out, "rb") as f:
            if f.read(len(fmt.MAGIC)) != fmt.MAGIC:
                raise ConversionError(f"{out} is a file of the checkpoint folder being converted ({src}), not "
                                      "a .cism: write the .cism to another path (--force never replaces it)")


def convert(src: str, out: str, *, dtype: str = "auto", tokenizer: Optional[str] = None,
            overwrite: bool = False, progress: Optional[ProgressFn] = _progress_stderr,
            quant: Optional[str] = None, layout: str = "auto", calibrate: Union[str, bool, None] = None,
            calib_tokens: int = 0, n_threads: int = 0, calib_method: Optional[str] = None,
            calib_model: Optional[str] = None) -> Report:
    """Converts a Hugging Face folder, a llama2.c `.bin` file or a GGUF file to `out` (.cism).
    `quant` names a quantization recipe (cism.quant.RECIPES) that picks a packed
    format for every weight matrix; `dtype` then applies to nothing but is checked.
    `layout` ("auto" or "rows") picks whether q8/q4s matrices are stored row-interleaved
    where their shape allows (the same values; faster kernels).
    `calibrate`: "auto" or a text file (needs `quant`) rounds the 2- to 6-bit
    matrices with the statistics of their inputs on calibration tokens; False (or "")
    rounds without data; None (the default) is the recipe's default: "auto" for
    the recipes whose cism.quant.Recipe.calibrate_by_default is set (4bit, 4bit-q6,
    5bit, q5, q6, 3bit, q3, 2bit, q2), none for the others.
    Calibration first writes a copy of the model next to `out` (deleted
    afterwards): `calib_model` "q8" (default; sampling and statistics both on a
    q8 copy) or "f32" (the unquantized model), and gathers the statistics on it
    (cism.calibrate; calib_tokens 0 = its default). `calib_method` "gptq" or
    "imatrix" (default cism.calibrate.DEFAULT_METHOD)."""
    folder = os.path.dirname(os.path.abspath(out))
    if not os.path.isdir(folder):  # said before any reading; the write would name its temporary file
        raise FileNotFoundError(f"cannot write {out}: the folder {folder} does not exist")
    if os.path.isdir(out):
        raise IsADirectoryError(f"cannot write {out}: it is a folder (give the .cism file's name)")
    if os.path.exists(out) and not overwrite:
        raise FileExistsError(f"{out} already exists (use --force to overwrite it)")
    _not_an_input(out, src, tokenizer, calibrate)
    if quant:
        from . import quant as q
        q.recipe(quant)  # unknown recipe: refused before anything is read
        q.stored_dtype("x", "q8", (16, 16), 16, layout)  # so is an unknown layout
    defaulted = calibrate is None  # the recipe's default, not asked for: a model without BOS falls back
    if calibrate is None:
        from . import quant as q
        calibrate = "auto" if quant and q.recipe(quant).calibrate_by_default else False
    elif calibrate is True:
        calibrate = "auto"
    if calibrate and calibrate != "auto" and not os.path.isfile(calibrate):
        raise FileNotFoundError(f"calibration text {calibrate}: no such file (or use 'auto')")
    from .calibrate import DEFAULT_METHOD, METHODS
    method = calib_method or DEFAULT_METHOD
    if method not in METHODS:
        raise ConversionError(f"unknown calibration method {method!r} (one of: {', '.join(METHODS)})")
    cmodel = calib_model or DEFAULT_CALIB_MODEL
    if cmodel not in CALIB_MODELS:
        raise ConversionError(f"unknown calibration model {cmodel!r} (one of: {', '.join(CALIB_MODELS)})")
    if not os.path.isdir(src) and not os.path.isfile(src):
        raise FileNotFoundError(f"{src}: no such file or folder")
    if os.path.isfile(src):
        with open(src, "rb") as f:
            if f.read(len(fmt.MAGIC)) == fmt.MAGIC:
                raise ConversionError(f"{src} is already a .cism file: nothing to convert (`cism upgrade` rewrites "
                                      "one of an older format version, `cism verify` checks one)")
    fmt.clean_stale_temps(out)
    from .convert_gguf import convert_gguf, is_gguf
    gguf = os.path.isfile(src) and is_gguf(src)
    calibration = None
    fallback = ""
    t0 = time.time()
    if calibrate:
        from .calibrate import DEFAULT_TOKENS, NoBOSError, calibrate as gather
        fd, tmp = fmt.temp_file(out, "calibration")
        os.close(fd)
        try:
            if gguf:  # the file's own values (lossless import): already a quantized model, fast to run
                convert(src, tmp, dtype=dtype, overwrite=True, progress=None, calibrate=False)
                label = "the model itself (the GGUF's own values)"
            elif cmodel == "q8":
                convert(src, tmp, dtype=dtype, tokenizer=tokenizer, overwrite=True, progress=None, quant="q8",
                        calibrate=False)
                label = "a q8 copy of the model"
            else:
                convert(src, tmp, dtype=dtype, tokenizer=tokenizer, overwrite=True, progress=None)
                label = "the unquantized model"
            t_copy = time.time() - t0
            try:
                calibration = gather(tmp, calibrate, n_tokens=calib_tokens or DEFAULT_TOKENS, n_threads=n_threads,
                                     method=method, sample_label=label, kv_tensors_only=not quant)
            except NoBOSError:
                if not defaulted:
                    raise
                fallback = "calibration: skipped (the model has no BOS to sample from): data-free rounding"
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
        if calibration is not None:
            calibration.seconds = time.time() - t0  # the copy included
            if not gguf:
                calibration.description += "; statistics on the same model"
            detail = (f": copy {t_copy:.1f} s, sampling {calibration.sample_seconds:.1f} s, "
                      f"statistics {calibration.stats_seconds:.1f} s")
    if gguf:
        rep = convert_gguf(src, out, dtype=dtype, overwrite=overwrite, progress=progress, quant=quant,
                           layout=layout, calibration=calibration)
    elif os.path.isdir(src):
        rep = convert_hf(src, out, dtype=dtype, overwrite=overwrite, progress=progress, quant=quant,
                         layout=layout, calibration=calibration)
    else:
        rep = convert_llama2c(src, out, tokenizer=tokenizer, dtype="f32" if dtype == "auto" else dtype,
                              overwrite=overwrite, progress=progress, quant=quant, layout=layout,
                              calibration=calibration)
    if calibration is not None:
        rep.calibration_detail = detail
    elif fallback:
        rep.notes.append(fallback)
    rep.seconds = time.time() - t0
    return rep
