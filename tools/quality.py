"""The quality table (docs/QUALITY.md): perplexity and bits per weight of
libcism's formats and recipes against llama.cpp's Q8_0, Q4_0, Q4_K_M and
IQ4_NL, on the same checkpoints and the same tokens; with the mean KL
divergence of every row against libcism's f32 (both engines on the same
windows and positions), and --plot draws KLD against bits per weight.

Needs the optional comparison extra (llama-cpp-python, gguf):
    pip install ./bindings_py[compare]
    python tools/quality.py [--models stories260K-hf,babyllama-tok105-hf] [--out docs/QUALITY.md]

--engines cism scores libcism's rows only (no llama-cpp-python needed); each
libcism row also records its conversion seconds (the 4bit rows: calibrated,
data-free with --no-calibrate, imatrix, GPTQ on the f32 model).

--models takes names under ../shared/models or model folders (the real
SmolLM2-135M-Instruct dequantized to f32: build/cache/smollm2-135m-instruct-f32-hf,
written by tools/kld_real.py). Its weights lie on the Q4_1 grid of its GGUF,
which favours formats that contain that grid: --noise F adds, for every model,
a copy with that grid broken: each weight moved by seeded uniform noise of
+-F/2 of its block's Q4_1 step ((max - min) / 15 over its 32 weights), that
noisy f32 model being the reference of its own rows.

Both engines see identical token ids (tokenized once with the model's
tokenizer.json) and the same windows (cism.ppl method "half", llama.cpp's
perplexity method; ctx 256). The GGUF files are written here from the same
safetensors with the gguf package (F32), then quantized by llama.cpp's own
llama_model_quantize. Bits per weight everywhere = 8 x (bytes of all tensor
data: norms, scales, padding) / (elements of the weight matrices).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bindings_py"))
_built = os.path.join(ROOT, "build", "release", "libcism", "libcism.so")
if os.path.exists(_built):
    os.environ.setdefault("CISM_LIB", _built)  # a source checkout: use its build
from cism import format as fmt  # noqa: E402
from cism.convert import convert  # noqa: E402
from cism.ppl import METHODS, perplexity  # noqa: E402
from cism.llamacpp import gguf_info, make_imatrix, quantize_gguf, write_gguf_hf  # noqa: E402  (the compare extra)
from cism.safetensors import open_checkpoint  # noqa: E402

# (label, recipe, int8 activations, calibration): calibration None is the recipe's
# default (4bit, 4bit-q6, 5bit, q5, q6, 3bit, q3, 2bit, q2: "auto", GPTQ on a q8 copy; the others none), False none, or the
# keyword arguments of convert (calibrate "auto" is text the model samples itself,
# cism.calibrate: never the evaluation text)
NOCAL = False
GPTQ = {"calibrate": "auto", "calib_method": "gptq", "calib_model": "q8"}
IMATRIX = {"calibrate": "auto", "calib_method": "imatrix", "calib_model": "q8"}
GPTQ_F32 = {"calibrate": "auto", "calib_method": "gptq", "calib_model": "f32"}
OURS = [("f32", None, False, None), ("q8", "q8", False, None), ("q8 + int8 act", "q8", True, None),
        ("q4", "q4", False, None), ("q4a", "q4a", False, None), ("fp4", "fp4", False, None), ("nl4", "nl4", False, None), ("q4s", "q4s", False, None),
        ("4bit --no-calibrate", "4bit", False, NOCAL), ("4bit --no-calibrate + int8 act", "4bit", True, NOCAL),
        ("4bit (default: gptq on a q8 copy)", "4bit", False, GPTQ), ("4bit (default: gptq on a q8 copy) + int8 act", "4bit", True, GPTQ),
        ("4bit --calib-method imatrix", "4bit", False, IMATRIX),
        ("4bit --calib-model f32", "4bit", False, GPTQ_F32),
        ("q4s --calibrate auto", "q4s", False, {"calibrate": "auto"}), ("mix", "mix", False, None),
        ("q6 --no-calibrate", "q6", False, NOCAL), ("q6 (default: gptq on a q8 copy)", "q6", False, None),
        ("q6 + int8 act", "q6", True, None), ("q5 --no-calibrate", "q5", False, NOCAL),
        ("q5 (default: gptq on a q8 copy)", "q5", False, None), ("q5 + int8 act", "q5", True, None),
        ("5bit --no-calibrate", "5bit", False, NOCAL), ("5bit (default: gptq on a q8 copy)", "5bit", False, None),
        ("4bit-q6 --no-calibrate", "4bit-q6", False, NOCAL),
        ("4bit-q6 (default: gptq on a q8 copy)", "4bit-q6", False, None),
        ("3bit --no-calibrate", "3bit", False, NOCAL), ("3bit (default: gptq on a q8 copy)", "3bit", False, None),
        ("3bit + int8 act", "3bit", True, None), ("q3 (default: gptq on a q8 copy)", "q3", False, None),
        ("2bit --no-calibrate", "2bit", False, NOCAL), ("2bit (default: gptq on a q8 copy)", "2bit", False, None),
        ("2bit + int8 act", "2bit", True, None), ("q2 (default: gptq on a q8 copy)", "q2", False, None)]
LLAMA = ["Q8_0", "Q4_0", "Q4_K_M", "IQ4_NL"]
# --llama all: the curve from 2 to 8.5 bits. TYPE:pure is llama-quantize --pure, TYPE:imatrix its importance-matrix
# rounding on text the model samples itself (make_imatrix; needs tools/build_llama_tools.sh)
LLAMA_ALL = ["Q8_0", "Q6_K", "Q5_K_M", "Q5_0", "Q4_K_M", "Q4_K_M:pure", "Q4_K_M:imatrix", "Q4_0", "IQ4_NL",
             "IQ4_XS:imatrix", "Q3_K_M", "Q3_K_M:imatrix", "IQ3_S:imatrix", "Q2_K", "Q2_K:imatrix",
             "IQ2_XS:imatrix"]


# ---------------------------------------------------------------------------
# a checkpoint with its quantization grid broken

def noisy_copy(folder: str, out: str, frac: float, seed: int = 0) -> None:
    """folder's checkpoint (config.json, tokenizer.json, safetensors) with every
    matrix moved by uniform noise of +-frac/2 of each 32-weight block's Q4_1 step,
    as one F32 safetensors file."""
    import shutil
    if os.path.exists(os.path.join(out, "model.safetensors")):
        return
    os.makedirs(out, exist_ok=True)
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json", "generation_config.json"):
        if os.path.exists(os.path.join(folder, name)):
            shutil.copy(os.path.join(folder, name), os.path.join(out, name))
    ck = open_checkpoint(folder)
    rng = np.random.default_rng(seed)
    header, blobs, off = {}, [], 0
    for name in sorted(ck):
        arr, dt = ck[name].get(name)
        a = np.asarray(arr, dtype=np.float32)
        if a.ndim == 2 and a.shape[1] % 32 == 0:
            blk = a.reshape(a.shape[0], -1, 32)
            step = (blk.max(axis=2, keepdims=True) - blk.min(axis=2, keepdims=True)) / 15.0
            blk = blk + (rng.random(blk.shape, dtype=np.float32) - 0.5) * np.float32(frac) * step
            a = blk.reshape(a.shape).astype(np.float32)
        b = np.ascontiguousarray(a, dtype="<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    tmp = os.path.join(out, "model.safetensors.partial")
    with open(tmp, "wb") as f:
        f.write(len(h).to_bytes(8, "little"))
        f.write(h)
        for b in blobs:
            f.write(b)
    os.replace(tmp, os.path.join(out, "model.safetensors"))


# ---------------------------------------------------------------------------
# ours

def bits_cism(path: str) -> float:
    f = fmt.CismFile(path)
    data = sum(t.nbytes for t in f.tensors.values())
    weights = sum(int(np.prod(t.shape)) for t in f.tensors.values() if len(t.shape) == 2)
    return 8.0 * data / weights


def dequantized_cism(path: str, out: str) -> None:
    """The .cism file at path with every packed matrix replaced by its dequantized f32
    values (--simulate): the same model on the f32 kernels."""
    from cism import quant as q
    if os.path.exists(out):
        return
    f = fmt.CismFile(path)
    packed = {n: t for n, t in f.tensors.items() if t.dtype not in (fmt.DTYPE_F32, fmt.DTYPE_F16, fmt.DTYPE_BF16)}
    fmt.write_with_f32(f, out, {n: (lambda n, t=t: q.dequantize(f.array(n), t.dtype, t.shape[-1]))
                                for n, t in packed.items()})


def ppl_of(lp: np.ndarray, toks, ctx: int, bos: int, max_windows: int) -> float:
    """The perplexity of the scored positions whose log-probabilities logp_cism returned."""
    first = ctx // 2
    tg = np.concatenate([win[first + 1:] for win in _windows(toks, ctx, bos, max_windows)])
    return float(np.exp(-lp[np.arange(len(tg)), tg].astype(np.float64).mean()))


# ---------------------------------------------------------------------------
# llama.cpp (GGUF helpers shared with `cism bench --vs`: cism/llamacpp.py)

def self_sampled_text(cism_f32: str, folder: str, out: str, n_seq: int = 16, length: int = 256) -> None:
    """The calibration text of llama.cpp's imatrix rows: what our `--calibrate
    auto` uses (n_seq sequences of `length` tokens the f32 model samples from
    BOS, temperature 1, seeds 0..n_seq-1), decoded with the model's
    tokenizer.json; never the evaluation text."""
    if os.path.exists(out):
        return
    from tokenizers import Tokenizer
    from cism import Model, Sampler, Session
    tok = Tokenizer.from_file(os.path.join(folder, "tokenizer.json"))
    parts = []
    with Model(cism_f32) as m, Session(m, n_ctx=length, kv_type="f32") as s:
        for i in range(n_seq):
            s.reset()
            ids = s.generate_ids([m.bos_id], length - 1, Sampler(temperature=1.0, seed=i), ignore_eos=True)
            parts.append(tok.decode(ids, skip_special_tokens=True))
    # sequences apart by a blank line, or by a space where the vocabulary has no newline
    # (BabyLlama's 105 tokens: llama.cpp's tokenizer aborts on a character it cannot encode)
    unk = tok.token_to_id("<unk>")
    sep = " " if unk is not None and unk in tok.encode("\n", add_special_tokens=False).ids else "\n\n"
    with open(out + ".partial", "w", encoding="utf-8") as f:
        f.write(sep.join(parts))
    os.replace(out + ".partial", out)


def _windows(toks, ctx: int, bos: int, max_windows: int):
    """llama.cpp's perplexity windows: ctx tokens each (the first set to BOS),
    the second half scored."""
    stream = np.concatenate([[bos], np.asarray(toks)]).astype(np.int64)
    nwin = len(stream) // ctx
    if max_windows:
        nwin = min(nwin, max_windows)
    for i in range(nwin):
        win = stream[i * ctx:(i + 1) * ctx].copy()
        win[0] = bos
        yield win


def _log_softmax(lg: np.ndarray) -> np.ndarray:
    lg = np.asarray(lg, dtype=np.float64)
    mx = lg.max(1, keepdims=True)
    return lg - (mx + np.log(np.exp(lg - mx).sum(1, keepdims=True)))


def logp_llama(path: str, toks, ctx: int, bos: int, max_windows: int = 0):
    """(PPL, scored positions, log-probabilities [scored, vocab] float32) of a GGUF through llama.cpp."""
    import llama_cpp
    import llama_cpp.llama as llama_mod
    defaults = llama_mod.llama_cpp.llama_model_default_params

    def plain_buffers():  # the GGUF's own tensor layout: no AMX or repacked CPU buffers (use_extra_bufts off).
        p = defaults()    # Its AMX path crashed on the checkpoints' 64-wide rows (AMX Xeon, 2026-12-05);
        p.use_extra_bufts = False  # repacking changes speed and summation order, not the types
        return p
    llama_mod.llama_cpp.llama_model_default_params = plain_buffers
    try:
        m = llama_cpp.Llama(path, n_ctx=ctx, n_batch=ctx, n_ubatch=ctx, logits_all=True, verbose=False,
                            n_threads=1, n_threads_batch=1)  # one thread: no spinning barriers on a shared machine
    finally:
        llama_mod.llama_cpp.llama_model_default_params = defaults
    first = ctx // 2
    nll, parts = 0.0, []
    for win in _windows(toks, ctx, bos, max_windows):
        m.reset()
        m.eval(win.tolist())
        lp = _log_softmax(m.scores[first:ctx - 1])
        tg = win[first + 1:]
        nll -= float(lp[np.arange(len(tg)), tg].sum())
        parts.append(lp.astype(np.float32))
    del m
    lp = np.concatenate(parts)
    return float(np.exp(nll / len(lp))), len(lp), lp


def logp_cism(path: str, toks, ctx: int, bos: int, max_windows: int, act_quant: bool, threads: int) -> np.ndarray:
    """log-probabilities of the same windows and positions as logp_llama, through libcism (f32 KV)."""
    from cism import Model, Session
    first = ctx // 2
    parts = []
    with Model(path) as m, Session(m, n_ctx=ctx, n_batch=ctx, n_threads=threads, kv_type="f32", logits_all=True,
                                   act_quant=act_quant) as s:
        for win in _windows(toks, ctx, bos, max_windows):
            s.reset()
            s.eval(win.astype(np.int32))
            parts.append(_log_softmax(s.all_logits_view()[first:ctx - 1]).astype(np.float32))
    return np.concatenate(parts)


def kld_vs(base: np.ndarray, lp: np.ndarray):
    """(mean KLD(base || model), same top token share) over the positions."""
    k = (np.exp(base.astype(np.float64)) * (base.astype(np.float64) - lp.astype(np.float64))).sum(1)
    return float(k.mean()), float((base.argmax(1) == lp.argmax(1)).mean())


def plot_kld(sections, out: str) -> None:
    """KLD against f32 (log scale) over bits per weight for every quantized row
    (the F32 rows left out), one colour per engine: each row a marker, the
    engine's best-so-far front (lowest KLD at up to that many bits) a line
    with its points named."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, len(sections), figsize=(6.5 * len(sections), 5), squeeze=False)
    for ax, (mname, _, rows, _, _) in zip(axes[0], sections):
        for eng, marker, colour in (("libcism", "o", "tab:blue"), ("llama.cpp", "s", "tab:orange")):
            pts = sorted((r[2], r[6], r[1]) for r in rows if r[0] == eng and r[6] and r[2] < 16)
            if not pts:
                continue
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker, color=colour, alpha=0.35, linestyle="none")
            front, best = [], float("inf")
            for x, y, label in pts:
                if y < best:
                    front.append((x, y, label))
                    best = y
            ax.plot([p[0] for p in front], [p[1] for p in front], marker + "-", color=colour, label=eng)
            for x, y, label in front:
                ax.annotate(label, (x, y), textcoords="offset points", xytext=(5, 4), fontsize=7, color=colour)
        ax.set_yscale("log")
        ax.set_xlabel("bits per weight (8 x bytes of tensor data / weights)")
        ax.set_ylabel("mean KLD against libcism f32 (nats)")
        ax.set_title(mname)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
    fig.tight_layout()
    fig.savefig(out, dpi=90)


# ---------------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="stories260K-hf,babyllama-tok105-hf")
    ap.add_argument("--text", default="tinystories_valid_excerpt.txt")
    ap.add_argument("--ctx", type=int, default=256)
    ap.add_argument("--max-windows", default="0",
                    help="windows scored per model: N for all, or model=N,... (0 = the whole text)")
    ap.add_argument("--work", default="/tmp/cism-quality")
    ap.add_argument("--out", default="")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--plot", metavar="PNG", help="also draw KLD against bits per weight (the plot extra: matplotlib)")
    ap.add_argument("--recipes", default="",
                    help="only these libcism rows (comma-separated labels of OURS, e.g. f32,q8,q4a); default all")
    ap.add_argument("--llama", default=",".join(LLAMA),
                    help="llama.cpp's rows: types, TYPE:pure, TYPE:imatrix (comma-separated), or 'all' for "
                         + ",".join(LLAMA_ALL))
    ap.add_argument("--simulate", action="store_true",
                    help="float-activation rows of packed recipes on the f32 model of their dequantized values "
                         "(the same values; f32 kernels instead of formats without SIMD kernels yet), one pass")
    ap.add_argument("--engines", default="cism,llama.cpp",
                    help="which engines' rows: cism, llama.cpp or both (llama.cpp's need llama-cpp-python and gguf)")
    ap.add_argument("--noise", type=float, default=0.0,
                    help="also each model with its quantization grid broken: noise of +-F/2 of a Q4_1 step")
    a = ap.parse_args()
    shared = os.path.join(ROOT, "..", "shared", "models")
    text = open(os.path.join(shared, "eval", a.text), encoding="utf-8").read()
    os.makedirs(a.work, exist_ok=True)
    sections = []
    cache_path = os.path.join(a.work, "results.json")
    cache = json.load(open(cache_path)) if os.path.exists(cache_path) else {}
    limits = {}
    for item in a.max_windows.split(","):
        if "=" in item:
            k, v = item.split("=")
            limits[k] = int(v)
        else:
            limits["*"] = int(item)
    models = []
    for mname in a.models.split(","):
        folder = mname if os.path.isdir(mname) else os.path.join(shared, mname)
        label = os.path.basename(os.path.normpath(folder))
        models.append((label, folder, limits.get(label, limits.get("*", 0))))
        if a.noise > 0:
            noisy = os.path.join(a.work, f"{label}+noise{a.noise:g}")
            noisy_copy(folder, noisy, a.noise)
            models.append((f"{label}+noise{a.noise:g}", noisy, limits.get(label, limits.get("*", 0))))
    for mname, folder, maxw in models:
        from tokenizers import Tokenizer
        toks = Tokenizer.from_file(os.path.join(folder, "tokenizer.json")).encode(text, add_special_tokens=False).ids
        rows = []
        base = None
        base_lp = None   # libcism f32's log-probabilities: the reference of every KLD
        for label, recipe, act, calib in OURS:
            if a.recipes and label != "f32" and label not in a.recipes.split(","):
                continue
            path = os.path.join(a.work, f"{mname}.{file_tag(recipe, calib)}.cism")
            ckey = f"{mname}|convert|{file_tag(recipe, calib)}"
            if not os.path.exists(path) or ckey not in cache:
                kw = calib if isinstance(calib, dict) else {"calibrate": calib}
                t1 = time.time()
                convert(folder, path, quant=recipe, overwrite=True, progress=None, n_threads=a.threads, **kw)
                cache[ckey] = time.time() - t1
                json.dump(cache, open(cache_path, "w"), indent=1)
            conv_s = cache[ckey]
            key = f"{mname}|libcism|{label}|{a.ctx}|{maxw}|{a.text}"
            t0 = time.time()
            if a.simulate and recipe and not act and base_lp is not None:
                # float activations: the f32 model of the recipe's dequantized values, one pass
                key += "|simulated"
                if key + "|kld" not in cache:
                    sim = path[:-len(".cism")] + ".dequantized.cism"
                    dequantized_cism(path, sim)
                    lp = logp_cism(sim, toks, a.ctx, 1, maxw, False, a.threads)
                    cache[key] = [ppl_of(lp, toks, a.ctx, 1, maxw), len(lp)]
                    cache[key + "|kld"] = list(kld_vs(base_lp, lp))
                    json.dump(cache, open(cache_path, "w"), indent=1)
            if key not in cache:
                r = perplexity(path, tokens=toks, ctx=a.ctx, method="half", n_threads=a.threads, act_quant=act,
                               max_windows=maxw)
                cache[key] = [r.ppl, r.n_scored]
                json.dump(cache, open(cache_path, "w"), indent=1)
            if base_lp is None:
                base_lp = logp_cism(path, toks, a.ctx, 1, maxw, act, a.threads)
            if key + "|kld" not in cache:
                lp = base_lp if label == "f32" else logp_cism(path, toks, a.ctx, 1, maxw, act, a.threads)
                cache[key + "|kld"] = list(kld_vs(base_lp, lp))
                json.dump(cache, open(cache_path, "w"), indent=1)
            p, n = cache[key]
            kl, same = cache[key + "|kld"]
            if base is None:
                base = p
            note = "; ".join(x for x in ("f32 of its values" if key.endswith("|simulated") else "",
                                         f"convert {conv_s:.1f} s") if x)
            rows.append(("libcism", label, bits_cism(path), p, n, note, kl, same))
            print(f"{mname} libcism {label}: {p:.4f}, KLD {kl:.6f} ({time.time() - t0:.0f} s)", flush=True)
        if "llama.cpp" not in a.engines.split(","):
            sections.append((mname, len(toks), rows, base, maxw))
            continue
        f32g = os.path.join(a.work, f"{mname}.F32.gguf")
        if not os.path.exists(f32g):
            write_gguf_hf(folder, f32g)
        bos = 1
        for ft in ["F32"] + (LLAMA_ALL if a.llama == "all" else [t for t in a.llama.split(",") if t]):
            path = f32g if ft == "F32" else os.path.join(a.work, f"{mname}.{ft.replace(':', '.')}.gguf")
            if ft != "F32" and not os.path.exists(path):
                base_type, _, how = ft.partition(":")
                imat = None
                if how == "imatrix":
                    calib = os.path.join(a.work, f"{mname}.calibration.txt")
                    self_sampled_text(os.path.join(a.work, f"{mname}.f32.cism"), folder, calib)
                    imat = os.path.join(a.work, f"{mname}.imatrix.gguf")
                    if not os.path.exists(imat):
                        make_imatrix(f32g, calib, imat, a.ctx, a.threads)
                quantize_gguf(f32g, path, base_type, n_threads=a.threads, pure=how == "pure", imatrix=imat)
            bpw, types = gguf_info(path)
            key = f"{mname}|llama.cpp|{ft}|{a.ctx}|{maxw}|{a.text}"
            if key not in cache or key + "|kld" not in cache:
                p, n, lp = logp_llama(path, toks, a.ctx, bos, maxw)
                cache[key] = [p, n]
                cache[key + "|kld"] = list(kld_vs(base_lp, lp))
                json.dump(cache, open(cache_path, "w"), indent=1)
            p, n = cache[key]
            kl, same = cache[key + "|kld"]
            note = ", ".join(f"{k} {v}" for k, v in sorted(types.items()))
            rows.append(("llama.cpp", ft, bpw, p, n, note, kl, same))
            print(f"{mname} llama.cpp {ft}: {p:.4f}, KLD {kl:.6f} [{note}]", flush=True)
        sections.append((mname, len(toks), rows, base, maxw))
    cmd = "python tools/quality.py " + " ".join(sys.argv[1:])
    md = render(sections, a, cmd)
    if a.plot:
        plot_kld(sections, a.plot)
        print(f"plot: {a.plot}")
    if a.out:
        with open(a.out, "w", encoding="utf-8") as f:
            f.write(md)
    print(md)


def file_tag(recipe, calib) -> str:
    """The work file's name for a row's conversion (one file per recipe and calibration)."""
    tag = recipe or "f32"
    if calib is None:
        return tag + (".default" if recipe else "")
    if calib is False:
        return tag + ".nocal"
    return tag + "." + "-".join(f"{v}" for k, v in sorted(calib.items()) if k != "calibrate") + (
        ".cal-" + str(calib.get("calibrate")))


def render(sections, a, cmd) -> str:
    out = [f"<!-- generated by: {cmd} -->",
           f"Text: `shared/models/eval/{a.text}`. Method `half`, ctx {a.ctx}: {METHODS['half']}.",
           ""]
    for mname, ntok, rows, base, maxw in sections:
        f32_llama = next((r[3] for r in rows if r[0] == "llama.cpp" and r[1] == "F32"), None)
        scored = rows[0][4]
        span = (f"the first {maxw} windows ({maxw * a.ctx} tokens) of the text's {ntok}" if maxw
                else f"the whole text, {ntok} tokens")
        out += [f"### {mname}: {span}; {scored} tokens scored", "",
                "| engine | format / recipe | bits/weight | PPL | vs own F32 | KLD vs f32 | same top | "
                "matrices (llama.cpp) / conversion seconds |",
                "|---|---|---:|---:|---:|---:|---:|---|"]
        for eng, label, bpw, p, n, note, kl, same in rows:
            ref = base if eng == "libcism" else f32_llama
            out.append(f"| {eng} | {label} | {bpw:.2f} | {p:.4f} | {100 * (p / ref - 1):+.2f}% | {kl:.6f} | "
                       f"{100 * same:.2f}% | {note} |")
        out.append("")
    return "\n".join(out)


if __name__ == "__main__":
    main()
