"""llama.cpp as a peer: GGUF files of the same weights, and timed runs through
llama-cpp-python's low-level API, for `cism bench --vs llama.cpp` and
tools/quality.py.

Optional: needs the `compare` extra (llama-cpp-python built from source, gguf);
both are imported only when a function here needs them, and a missing one is
reported by MissingExtra with the command that installs it.

GGUF files of a synthetic preset hold exactly the f32 values of cism.synthetic
(float_blocks): written once as F32 (Q/K rows put in llama.cpp's RoPE order for
the "llama" architecture, so both engines compute the same function), then
quantized by llama.cpp's own llama_model_quantize into F16, Q8_0, Q4_0,
Q4_K_M... The tokenizer in the metadata is a real one from
shared/models/tokenizers (the preset's family), padded to the model's
vocabulary size like the Hugging Face converter does.
"""
from __future__ import annotations

import ctypes
import json
import math
import os
import time
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

# the README's command (run from the repository root); keep the two the same
INSTALL_HINT = ("pip install './bindings_py[compare]'  (llama-cpp-python, built from source; with native flags: "
                "CMAKE_ARGS='-DGGML_NATIVE=ON' pip install --no-binary llama-cpp-python './bindings_py[compare]')")

# llama.cpp file types the comparison uses, and the libcism dtype/recipe each is set against
FTYPES = ("F32", "F16", "Q8_0", "Q4_0", "Q4_K_M", "IQ4_NL")
DEFAULT_PEER = {"f32": "F32", "f16": "F16", "bf16": "F16", "q8": "Q8_0", "4bit": "Q4_0", "q4s": "Q4_0", "q4": "Q4_0",
                "nl4": "IQ4_NL", "mix": "Q4_K_M", "fp4": "Q4_0"}
GGUF_VERSION = 1  # bump when the written GGUF files change


class MissingExtra(ImportError):
    pass


def require():
    """(llama_cpp, gguf) or MissingExtra."""
    try:
        import gguf
        import llama_cpp
    except ImportError as e:
        raise MissingExtra(f"comparing with llama.cpp needs the optional packages llama-cpp-python and gguf ({e}); "
                           f"install them with: {INSTALL_HINT}") from e
    return llama_cpp, gguf


def version() -> str:
    llama_cpp, _ = require()
    return getattr(llama_cpp, "__version__", "?")


def system_info() -> str:
    llama_cpp, _ = require()
    return llama_cpp.llama_print_system_info().decode(errors="replace").strip()


_quiet_cb = None


def quiet() -> None:
    """Silences llama.cpp's log (once per process)."""
    global _quiet_cb
    llama_cpp, _ = require()
    if _quiet_cb is None:
        _quiet_cb = llama_cpp.llama_log_callback(lambda level, text, user: None)
        llama_cpp.llama_log_set(_quiet_cb, ctypes.c_void_p(0))


# ---------------------------------------------------------------------------
# weights

def unpermute_rope(w: np.ndarray, n_heads: int) -> np.ndarray:
    """Q/K rows from Hugging Face's rotate-half order to llama.cpp's interleaved
    pairs (the "llama" architecture's normal RoPE)."""
    rows, cols = w.shape
    hs = rows // n_heads
    return w.reshape(n_heads, 2, hs // 2, cols).transpose(0, 2, 1, 3).reshape(rows, cols)


def llama3_rope_factors(head_dim: int, theta: float, factor: float, low: float, high: float, orig: int) -> np.ndarray:
    """llama.cpp's rope_freqs tensor for Llama 3.x rope scaling (as its converter computes it)."""
    freqs = 1.0 / (theta ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim))
    low_wl, high_wl = orig / low, orig / high
    out = []
    for f in freqs:
        wl = 2 * math.pi / f
        if wl < high_wl:
            out.append(1.0)
        elif wl > low_wl:
            out.append(factor)
        else:
            smooth = (orig / wl - low) / (high - low)
            out.append(1.0 / ((1 - smooth) / factor + smooth))
    return np.asarray(out, dtype=np.float32)


def quantize_gguf(src: str, out: str, ftype: str, n_threads: int = 2, pure: bool = False,
                  imatrix: Optional[str] = None) -> None:
    """llama.cpp's own quantizer: its default settings (its per-tensor mixture
    and fallbacks), or `pure` (llama-quantize --pure: one type for every tensor
    whose rows allow it), with an importance matrix file from make_imatrix
    (which needs the llama-quantize program: tool())."""
    if imatrix:
        cmd = [tool("llama-quantize")] + (["--pure"] if pure else []) + ["--imatrix", imatrix, src, "", ftype,
                                                                           str(n_threads)]
        _run_to(cmd, out)
        return
    llama_cpp, _ = require()
    p = llama_cpp.llama_model_quantize_default_params()
    p.ftype = getattr(llama_cpp, f"LLAMA_FTYPE_MOSTLY_{ftype}" if ftype != "F32" else "LLAMA_FTYPE_ALL_F32")
    p.nthread = n_threads
    p.pure = bool(pure)
    tmp = f"{out}.{os.getpid()}.partial"
    try:
        rc = llama_cpp.llama_model_quantize(src.encode(), tmp.encode(), ctypes.byref(p))
        if rc != 0:
            raise RuntimeError(f"llama_model_quantize {ftype} failed ({rc})")
        os.replace(tmp, out)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


# ---------------------------------------------------------------------------
# llama.cpp's command-line tools (importance matrices), built from the pinned sdist

TOOLS_HINT = ("llama.cpp's llama-imatrix and llama-quantize programs: build them from the pinned llama-cpp-python "
              "sdist with tools/build_llama_tools.sh (a few minutes), or point CISM_LLAMA_TOOLS at a folder "
              "holding them")


def tool(name: str) -> str:
    """The path of llama.cpp program `name`: in $CISM_LLAMA_TOOLS, else where
    tools/build_llama_tools.sh puts it (build/cache/llama.cpp-tools-<version>/b/bin)."""
    cands = []
    if os.environ.get("CISM_LLAMA_TOOLS"):
        cands.append(os.environ["CISM_LLAMA_TOOLS"])
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    cache = os.path.join(root, "build", "cache")
    if os.path.isdir(cache):
        cands += [os.path.join(cache, d, "b", "bin") for d in sorted(os.listdir(cache))
                  if d.startswith("llama.cpp-tools-")]
    for c in cands:
        path = os.path.join(c, name)
        if os.access(path, os.X_OK):
            return path
    raise MissingExtra(f"{name} not found (looked in {', '.join(cands) or 'nothing'}); it is one of {TOOLS_HINT}")


def _run_to(cmd: List[str], out: str) -> None:
    """Runs cmd with its "" argument replaced by a temporary name beside out,
    renamed to out only when the program succeeded; its output goes to
    out + '.log'."""
    import subprocess
    tmp = f"{out}.{os.getpid()}.partial"
    cmd = list(cmd)
    cmd[cmd.index("")] = tmp
    try:
        with open(out + ".log", "w") as log:
            rc = subprocess.call(cmd, stdout=log, stderr=subprocess.STDOUT)
        if rc != 0 or not os.path.exists(tmp):
            raise RuntimeError(f"{os.path.basename(cmd[0])} failed ({rc}); see {out}.log")
        os.replace(tmp, out)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def make_imatrix(model: str, text_file: str, out: str, ctx: int, n_threads: int = 2) -> None:
    """llama-imatrix's importance matrix of GGUF `model` on the text in
    text_file (chunks of ctx tokens, as llama.cpp's own tool tokenizes it),
    written as a GGUF imatrix file to out."""
    _run_to([tool("llama-imatrix"), "-m", model, "-f", text_file, "-o", "", "-c", str(ctx), "-b", str(ctx),
             "-t", str(n_threads), "--no-ppl"], out)


def gguf_info(path: str) -> Tuple[float, Dict[str, int]]:
    """(bits per weight counting every byte of tensor data, {matrix type: count})."""
    _, gguf = require()
    r = gguf.GGUFReader(path)
    data = sum(int(t.n_bytes) for t in r.tensors)
    weights = sum(int(t.n_elements) for t in r.tensors if len(t.shape) == 2)
    types: Dict[str, int] = {}
    for t in r.tensors:
        if len(t.shape) == 2:
            types[t.tensor_type.name] = types.get(t.tensor_type.name, 0) + 1
    return 8.0 * data / weights, types


def gguf_bytes_per_token(path: str) -> int:
    """Bytes of weights a decoded token reads: every matrix, the output head
    included (the tied embedding is that head); of the embedding table itself
    only one row when there is a separate head."""
    _, gguf = require()
    r = gguf.GGUFReader(path)
    names = {t.name: t for t in r.tensors}
    total = 0
    for t in r.tensors:
        if len(t.shape) != 2:
            continue
        if t.name == "token_embd.weight" and "output.weight" in names:
            total += int(t.n_bytes) // int(t.shape[1])  # one row (shape is [n_embd, n_vocab] in GGUF order)
        else:
            total += int(t.n_bytes)
    return total


# ---------------------------------------------------------------------------
# tokenizers for the GGUF metadata

TOKENIZER_OF = {"smollm2": ("smollm", "smollm"), "qwen": ("qwen2", "qwen2"), "llama3": ("llama3", "llama-bpe")}


def _tokenizer_family(preset_name: str) -> Optional[Tuple[str, str]]:
    for prefix, fam in TOKENIZER_OF.items():
        if preset_name.startswith(prefix):
            return fam
    return None


def shared_tokenizers_dir() -> Optional[str]:
    """$CISM_SHARED_DIR/models/tokenizers, else shared/models/tokenizers beside the source tree
    (an editable install) or beside the current directory (../shared from the project root)."""
    cands = []
    if os.environ.get("CISM_SHARED_DIR"):
        cands.append(os.path.join(os.environ["CISM_SHARED_DIR"], "models", "tokenizers"))
    here = os.path.dirname(os.path.abspath(__file__))
    for base in (here, os.getcwd()):
        for up in (0, 1, 2, 3, 4):
            cands.append(os.path.join(base, *([".."] * up), "shared", "models", "tokenizers"))
    for c in cands:
        if os.path.isdir(c):
            return os.path.abspath(c)
    return None


def _add_bpe_vocab(w, tok_json: Dict[str, Any], pre: str, n_vocab: int) -> None:
    import gguf
    vocab = dict(tok_json["model"]["vocab"])
    special = set()
    for a in tok_json.get("added_tokens", []):
        vocab[a["content"]] = a["id"]
        if a.get("special"):
            special.add(a["id"])
    by_id: List[Optional[str]] = [None] * max(n_vocab, max(vocab.values()) + 1)
    for t, i in vocab.items():
        by_id[i] = t
    tokens, types = [], []
    for i, t in enumerate(by_id[:n_vocab]):
        if t is None:
            tokens.append(f"[PAD{i}]")
            types.append(gguf.TokenType.UNUSED)
        else:
            tokens.append(t)
            types.append(gguf.TokenType.CONTROL if i in special else gguf.TokenType.NORMAL)
    merges = [m if isinstance(m, str) else " ".join(m) for m in tok_json["model"]["merges"]]
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre(pre)
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    ids = {t: i for i, t in enumerate(tokens)}
    bos = next((ids[t] for t in ("<|begin_of_text|>", "<|endoftext|>") if t in ids), 0)
    eos = next((ids[t] for t in ("<|end_of_text|>", "<|endoftext|>", "<|im_end|>") if t in ids), 0)
    w.add_bos_token_id(bos)
    w.add_eos_token_id(eos)
    w.add_add_bos_token(False)


def _add_byte_vocab(w, n_vocab: int) -> None:
    """A sentencepiece-style vocabulary of specials and byte tokens (the test presets)."""
    import gguf
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{i:02X}>" for i in range(3, n_vocab)]
    types = [gguf.TokenType.UNKNOWN, gguf.TokenType.CONTROL, gguf.TokenType.CONTROL] + [gguf.TokenType.BYTE] * (n_vocab - 3)
    if n_vocab < 256:
        raise ValueError("a byte vocabulary needs at least 256 tokens")
    tokens = tokens[:n_vocab]
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores([0.0] * len(tokens))
    w.add_token_types(types[:n_vocab])
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)


# ---------------------------------------------------------------------------
# GGUF of a Hugging Face folder (tools/quality.py's llama.cpp rows)

def write_gguf_hf(folder: str, out: str) -> None:
    """A Llama-family Hugging Face folder (config.json, tokenizer.json, safetensors)
    as an F32 GGUF file: a SentencePiece-style vocabulary, or the byte-level BPE
    one (SmolLM2's) when tokenizer.json decodes ByteLevel."""
    _, gguf = require()
    from .convert import hparams_from_config
    from .safetensors import open_checkpoint
    cfg = json.load(open(os.path.join(folder, "config.json")))
    meta = hparams_from_config(cfg)
    tok = json.load(open(os.path.join(folder, "tokenizer.json")))
    ck = open_checkpoint(folder)
    w = gguf.GGUFWriter(out, "llama")
    w.add_context_length(meta["model.context_length"])
    w.add_embedding_length(meta["model.dim"])
    w.add_block_count(meta["model.n_layers"])
    w.add_feed_forward_length(meta["model.ffn_dim"])
    w.add_rope_dimension_count(meta["model.head_dim"])
    w.add_head_count(meta["model.n_heads"])
    w.add_head_count_kv(meta["model.n_kv_heads"])
    w.add_layer_norm_rms_eps(meta["model.norm_eps"])
    w.add_rope_freq_base(meta["model.rope_theta"])
    w.add_file_type(0)
    vocab = sorted(tok["model"]["vocab"].items(), key=lambda kv: kv[1])
    assert [i for _, i in vocab] == list(range(meta["model.vocab_size"]))
    pieces = [p for p, _ in vocab]
    types = []
    for i, p in enumerate(pieces):
        if i in (0,):
            types.append(gguf.TokenType.UNKNOWN)
        elif i in (1, 2):
            types.append(gguf.TokenType.CONTROL)
        elif p.startswith("<0x") and p.endswith(">") and len(p) == 6:
            types.append(gguf.TokenType.BYTE)
        else:
            types.append(gguf.TokenType.NORMAL)
    if (tok.get("decoder") or {}).get("type") == "ByteLevel":
        _add_bpe_vocab(w, tok, "smollm", meta["model.vocab_size"])  # byte-level BPE (SmolLM2's)
        _write_hf_tensors(w, ck, meta)
        return
    w.add_tokenizer_model("llama")
    w.add_token_list(pieces)
    w.add_token_scores([-float(i) for i in range(len(pieces))])
    w.add_token_types(types)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    w.add_add_bos_token(True)
    _write_hf_tensors(w, ck, meta)


def _write_hf_tensors(w, ck, meta) -> None:
    L, nh, nkv = meta["model.n_layers"], meta["model.n_heads"], meta["model.n_kv_heads"]
    names = {"token_embd": "model.embed_tokens.weight", "output_norm": "model.norm.weight"}

    def get(hf):
        a, _ = ck[hf].get(hf)
        return np.ascontiguousarray(a, dtype=np.float32)
    w.add_tensor("token_embd.weight", get(names["token_embd"]))
    w.add_tensor("output_norm.weight", get(names["output_norm"]))
    if not meta["model.tied_embeddings"]:
        w.add_tensor("output.weight", get("lm_head.weight"))
    for i in range(L):
        p = f"model.layers.{i}."
        w.add_tensor(f"blk.{i}.attn_norm.weight", get(p + "input_layernorm.weight"))
        w.add_tensor(f"blk.{i}.attn_q.weight", unpermute_rope(get(p + "self_attn.q_proj.weight"), nh))
        w.add_tensor(f"blk.{i}.attn_k.weight", unpermute_rope(get(p + "self_attn.k_proj.weight"), nkv))
        w.add_tensor(f"blk.{i}.attn_v.weight", get(p + "self_attn.v_proj.weight"))
        w.add_tensor(f"blk.{i}.attn_output.weight", get(p + "self_attn.o_proj.weight"))
        w.add_tensor(f"blk.{i}.ffn_norm.weight", get(p + "post_attention_layernorm.weight"))
        w.add_tensor(f"blk.{i}.ffn_gate.weight", get(p + "mlp.gate_proj.weight"))
        w.add_tensor(f"blk.{i}.ffn_up.weight", get(p + "mlp.up_proj.weight"))
        w.add_tensor(f"blk.{i}.ffn_down.weight", get(p + "mlp.down_proj.weight"))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


# ---------------------------------------------------------------------------
# GGUF of a synthetic preset

def write_gguf_synthetic(preset, seed: int, out: str, tokenizers_dir: Optional[str] = None) -> str:
    """The preset's weights (cism.synthetic's values for this seed) as an F32 GGUF file."""
    _, gguf = require()
    from .convert import expected_tensors
    from .synthetic import float_blocks
    meta = preset.metadata()
    arch = {"llama": "llama", "qwen3": "qwen3", "qwen2": "qwen2", "gemma3": "gemma3",
            "smollm3": "smollm3"}.get(preset.architecture)
    if arch is None:
        raise ValueError(f"no GGUF architecture for {preset.architecture}")
    w = gguf.GGUFWriter(out, arch)
    w.add_name(f"synthetic {preset.name} seed {seed}")
    w.add_context_length(preset.context_length)
    w.add_embedding_length(preset.dim)
    w.add_block_count(preset.n_layers)
    w.add_feed_forward_length(preset.ffn_dim)
    w.add_rope_dimension_count(preset.head_dim)
    w.add_head_count(preset.n_heads)
    w.add_head_count_kv(preset.n_kv_heads)
    w.add_key_length(preset.head_dim)
    w.add_value_length(preset.head_dim)
    w.add_layer_norm_rms_eps(preset.norm_eps)
    w.add_rope_freq_base(preset.rope_theta)
    if arch == "gemma3":  # llama.cpp's gemma3 loader: every 6th layer global, local RoPE base 10000 (as the presets)
        w.add_sliding_window(meta["model.sliding_window"])
    w.add_file_type(0)
    fam = _tokenizer_family(preset.name)
    if fam:
        tdir = tokenizers_dir or shared_tokenizers_dir()
        if not tdir:
            raise FileNotFoundError("shared/models/tokenizers not found (set CISM_SHARED_DIR to the shared folder)")
        with open(os.path.join(tdir, fam[0], "tokenizer.json"), encoding="utf-8") as f:
            _add_bpe_vocab(w, json.load(f), fam[1], preset.vocab_size)
    else:
        _add_byte_vocab(w, preset.vocab_size)
    shapes = expected_tensors(meta)
    names = {"token_embd": "token_embd.weight", "output": "output.weight", "output_norm": "output_norm.weight"}
    per_layer = {"attn_norm": "attn_norm", "attn_q": "attn_q", "attn_k": "attn_k", "attn_v": "attn_v",
                 "attn_output": "attn_output", "ffn_norm": "ffn_norm", "ffn_gate": "ffn_gate", "ffn_up": "ffn_up",
                 "ffn_down": "ffn_down", "attn_q_norm": "attn_q_norm", "attn_k_norm": "attn_k_norm",
                 "attn_q_bias": "attn_q.bias", "attn_k_bias": "attn_k.bias", "attn_v_bias": "attn_v.bias",
                 "post_attn_norm": "post_attention_norm", "post_ffn_norm": "post_ffw_norm"}
    order: List[Tuple[str, str, Tuple[int, ...]]] = []
    for name, shape in shapes.items():
        if name in names:
            order.append((name, names[name], shape))
        else:
            _, layer, what = name.split(".", 2)
            suffix = per_layer[what]
            order.append((name, f"blk.{layer}.{suffix}" + ("" if suffix.endswith(".bias") else ".weight"), shape))
    rope = None
    if meta.get("model.rope_scaling.type") == "llama3":
        rope = llama3_rope_factors(preset.head_dim, preset.rope_theta, meta["model.rope_scaling.factor"],
                                   meta["model.rope_scaling.low_freq_factor"], meta["model.rope_scaling.high_freq_factor"],
                                   meta["model.rope_scaling.original_context_length"])
        w.add_tensor_info("rope_freqs.weight", rope.shape, np.dtype(np.float32), rope.nbytes)
    for _, gname, shape in order:
        w.add_tensor_info(gname, shape, np.dtype(np.float32), int(np.prod(shape)) * 4)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    if rope is not None:
        w.write_tensor_data(rope)
    for name, gname, shape in order:
        if len(shape) == 1:
            w.write_tensor_data(np.full(shape, 0.0 if name.endswith("_bias") else 1.0, dtype=np.float32))
            continue
        a = np.concatenate(list(float_blocks(seed, name, shape)), axis=0)
        if arch in ("llama", "smollm3") and name.endswith((".attn_q", ".attn_k")):
            a = unpermute_rope(a, preset.n_heads if name.endswith(".attn_q") else preset.n_kv_heads)
        w.write_tensor_data(np.ascontiguousarray(a, dtype=np.float32))
    w.close()
    return out


def get_gguf(preset_name: str, ftype: str, seed: int = 0, verbose: bool = True) -> str:
    """Path of the preset's GGUF in `ftype`, written (F32) and quantized on first use into the cache folder."""
    import sys
    from .synthetic import PRESETS, VERSION, cache_dir
    if ftype not in FTYPES:
        raise ValueError(f"unknown llama.cpp type {ftype!r} (one of {', '.join(FTYPES)})")
    preset = PRESETS[preset_name]
    base = os.path.join(cache_dir(), f"synthetic-{preset_name}-seed{seed}-v{VERSION}.g{GGUF_VERSION}")
    f32 = base + ".F32.gguf"
    out = base + f".{ftype}.gguf"
    if os.path.exists(out):
        return out
    os.makedirs(cache_dir(), exist_ok=True)
    if not os.path.exists(f32):
        if verbose:
            sys.stderr.write(f"writing {f32} (once)\n")
        tmp = f"{f32}.{os.getpid()}.partial"
        try:
            write_gguf_synthetic(preset, seed, tmp)
            os.replace(tmp, f32)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
    if ftype == "F32":
        return f32
    if verbose:
        sys.stderr.write(f"quantizing {out} with llama_model_quantize (once)\n")
    quiet()
    quantize_gguf(f32, out, ftype)
    return out


# ---------------------------------------------------------------------------
# timed runs

class Runner:
    """One model and context of llama.cpp with n_threads (prefill and decode alike),
    f16 KV cache, its default flash-attention and weight-repacking choices."""

    def __init__(self, path: str, n_threads: int, n_ctx: int, n_batch: int = 512):
        llama_cpp, _ = require()
        quiet()
        llama_cpp.llama_backend_init()
        self.L = llama_cpp
        mp = llama_cpp.llama_model_default_params()
        mp.n_gpu_layers = 0
        self.model = llama_cpp.llama_model_load_from_file(path.encode(), mp)
        if not self.model:
            raise RuntimeError(f"llama.cpp could not load {path}")
        cp = llama_cpp.llama_context_default_params()
        cp.n_ctx = n_ctx
        cp.n_batch = n_batch
        cp.n_ubatch = n_batch
        cp.n_threads = n_threads
        cp.n_threads_batch = n_threads
        self.ctx = llama_cpp.llama_init_from_model(self.model, cp)
        if not self.ctx:
            llama_cpp.llama_model_free(self.model)
            raise RuntimeError("llama.cpp could not create a context")
        self.n_vocab = llama_cpp.llama_vocab_n_tokens(llama_cpp.llama_model_get_vocab(self.model))
        chain = llama_cpp.llama_sampler_chain_init(llama_cpp.llama_sampler_chain_default_params())
        llama_cpp.llama_sampler_chain_add(chain, llama_cpp.llama_sampler_init_greedy())
        self.sampler = chain

    def _clear(self) -> None:
        self.L.llama_memory_clear(self.L.llama_get_memory(self.ctx), True)

    def _decode(self, tokens: Sequence[int]) -> None:
        arr = (self.L.llama_token * len(tokens))(*[int(t) for t in tokens])
        rc = self.L.llama_decode(self.ctx, self.L.llama_batch_get_one(arr, len(tokens)))
        if rc != 0:
            raise RuntimeError(f"llama_decode failed ({rc})")

    def prefill(self, tokens: Sequence[int], n_batch: int = 512) -> float:
        """Seconds to evaluate `tokens` (in n_batch pieces) on an emptied context."""
        self._clear()
        t0 = time.perf_counter()
        for i in range(0, len(tokens), n_batch):
            self._decode(tokens[i:i + n_batch])
        self.L.llama_synchronize(self.ctx)
        return time.perf_counter() - t0

    def logits(self, tokens: Sequence[int]) -> np.ndarray:
        """The last position's logits after evaluating `tokens` on an emptied context."""
        self._clear()
        self._decode(tokens)
        p = self.L.llama_get_logits_ith(self.ctx, -1)
        return np.ctypeslib.as_array(p, shape=(self.n_vocab,)).copy()

    def all_logits(self, tokens: Sequence[int]) -> np.ndarray:
        """Logits [len(tokens), vocab] of every position after evaluating `tokens`
        (at most n_batch of them) on an emptied context, as llama.cpp's
        perplexity tool does (every position marked for output)."""
        L = self.L
        n = len(tokens)
        self._clear()
        batch = L.llama_batch_init(n, 0, 1)
        try:
            for i, t in enumerate(tokens):
                batch.token[i] = int(t)
                batch.pos[i] = i
                batch.n_seq_id[i] = 1
                batch.seq_id[i][0] = 0
                batch.logits[i] = 1
            batch.n_tokens = n
            rc = L.llama_decode(self.ctx, batch)
            if rc != 0:
                raise RuntimeError(f"llama_decode failed ({rc})")
            out = np.empty((n, self.n_vocab), dtype=np.float32)
            for i in range(n):
                out[i] = np.ctypeslib.as_array(L.llama_get_logits_ith(self.ctx, i), shape=(self.n_vocab,))
            return out
        finally:
            L.llama_batch_free(batch)

    def decode(self, first: int, n_gen: int) -> float:
        """Seconds for n_gen greedy steps after a one-token context (sampling included)."""
        self._clear()
        self._decode([first])
        tok = first
        t0 = time.perf_counter()
        for _ in range(n_gen):
            tok = self.L.llama_sampler_sample(self.sampler, self.ctx, -1)
            self._decode([tok])
        self.L.llama_synchronize(self.ctx)
        return time.perf_counter() - t0

    def close(self) -> None:
        if getattr(self, "sampler", None):
            self.L.llama_sampler_free(self.sampler)
            self.sampler = None
        if getattr(self, "ctx", None):
            self.L.llama_free(self.ctx)
            self.ctx = None
        if getattr(self, "model", None):
            self.L.llama_model_free(self.model)
            self.model = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
