"""Quantization speed: a synthetic Llama-3.2-1B-shaped weight set through
cism_quantize (the converter's path), per dtype and thread count.

One layer's seven matrices (q, k, v, o, gate, up, down) and the 128256 x 2048
embedding are quantized and timed; the 1B total is embedding + 16 x layer.
With --gram G the 4-bit dtypes also go through cism_quantize_gram (GPTQ within
blocks of G columns; statistics of random correlated inputs). --calibrate
times the calibration itself (cism.calibrate on the synthetic Llama-3.2-1B of
`cism bench`, bf16: "auto" generates, a text file is prefilled).
--convert times whole `cism convert` runs (the path users take) on a
Hugging Face-style folder of a synthetic model (random bf16 weights, the
shapes of a `cism bench` preset; written once by --hf-folder) or on any source,
one line per variant (recipe and calibration settings).
A benchmark, not a test: the numbers depend on the machine and its load.

    python tools/quant_bench.py [--threads 1,2] [--dtypes q8,q4,q4s,nl4,fp4] [--gram 128]
    python tools/quant_bench.py --calibrate auto[,TEXT] [--threads 2]   (TEXT: never the evaluation text)
    python tools/quant_bench.py --hf-folder tinyllama-1.1b --convert DIR [--variants 4bit,4bit:gptq:f32] [--threads 2]
      (DIR: the folder to write or reuse; a variant is RECIPE[:METHOD[:MODEL[:TOKENS]]] with METHOD
       none|gptq|imatrix and MODEL q8|f32)
"""
import argparse
import os
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bindings_py"))
_built = os.path.join(ROOT, "build", "release", "libcism", "libcism.so")
if os.path.exists(_built):
    os.environ.setdefault("CISM_LIB", _built)  # a source checkout: use its build
from cism.quant import QUANT_DTYPES, quantize  # noqa: E402

GRAM_SAMPLES = 512

DIM, FFN, KV, VOCAB, LAYERS = 2048, 8192, 512, 128256, 16


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--dtypes", default="q8,q4s,q4,nl4,fp4")
    ap.add_argument("--gram", type=int, default=0, help="also time cism_quantize_gram with Gram blocks of G columns")
    ap.add_argument("--calibrate", default="", help="time cism.calibrate on the synthetic 1B: auto and/or text files")
    ap.add_argument("--convert", default="", metavar="SRC", help="time whole conversions of SRC (see --variants)")
    ap.add_argument("--hf-folder", default="", metavar="PRESET",
                    help="with --convert: write SRC first (once) as a Hugging Face folder of this synthetic preset")
    ap.add_argument("--variants", default="4bit:none,4bit:gptq:q8,4bit:imatrix:q8,4bit:gptq:f32",
                    help="conversions to time: RECIPE[:none|gptq|imatrix[:q8|f32[:TOKENS]]], comma-separated")
    ap.add_argument("--out", default="", help="with --convert: where the converted files go (default next to SRC)")
    a = ap.parse_args()
    if a.convert:
        return bench_convert(a)
    if a.calibrate:
        return bench_calibrate(a)
    rng = np.random.default_rng(0)
    layer = [(DIM, DIM), (KV, DIM), (KV, DIM), (DIM, DIM), (FFN, DIM), (FFN, DIM), (DIM, FFN)]
    mats = [(rng.standard_normal(s, dtype=np.float32) * 0.02) for s in layer]
    emb = rng.standard_normal((VOCAB, DIM), dtype=np.float32) * 0.02
    n_layer = sum(m.size for m in mats)
    total = emb.size + LAYERS * n_layer
    print(f"1B-shaped set: {total / 1e9:.3f} B weights (embedding {emb.size / 1e6:.0f} M + {LAYERS} x {n_layer / 1e6:.1f} M)")
    for dt in a.dtypes.split(","):
        for nt in (int(t) for t in a.threads.split(",")):
            t0 = time.perf_counter()
            for m in mats:
                quantize(m, QUANT_DTYPES[dt], n_threads=nt)
            t_layer = time.perf_counter() - t0
            t0 = time.perf_counter()
            quantize(emb, QUANT_DTYPES[dt], n_threads=nt)
            t_emb = time.perf_counter() - t0
            est = t_emb + LAYERS * t_layer
            print(f"{dt:4s} threads {nt}: layer {t_layer:.2f} s, embedding {t_emb:.2f} s -> 1B model {est:.1f} s "
                  f"({1e9 * est / total:.1f} ns/weight)", flush=True)
            if a.gram and dt != "q8":
                grams = {c: gram_blocks(rng, c, a.gram) for c in (DIM, FFN)}
                t0 = time.perf_counter()
                for m in mats:
                    quantize(m, QUANT_DTYPES[dt], n_threads=nt, gram=grams[m.shape[1]])
                t_layer = time.perf_counter() - t0
                t0 = time.perf_counter()
                quantize(emb, QUANT_DTYPES[dt], n_threads=nt, gram=grams[DIM])
                t_emb = time.perf_counter() - t0
                est = t_emb + LAYERS * t_layer
                print(f"{dt:4s} threads {nt}, Gram blocks of {a.gram}: layer {t_layer:.2f} s, embedding {t_emb:.2f} s "
                      f"-> 1B model {est:.1f} s ({1e9 * est / total:.1f} ns/weight)", flush=True)


def gram_blocks(rng, cols, g):
    """Blocks along the diagonal of the second moments of correlated random inputs."""
    x = rng.standard_normal((GRAM_SAMPLES, 16)) @ rng.standard_normal((16, cols)) + rng.standard_normal((GRAM_SAMPLES, cols))
    nb = -(-cols // g)
    out = np.zeros((nb, g, g))
    for k in range(nb):
        blk = x[:, k * g:(k + 1) * g]
        out[k, :blk.shape[1], :blk.shape[1]] = blk.T @ blk / GRAM_SAMPLES
    return out


def bench_calibrate(a):
    """The synthetic Llama-3.2-1B (bf16) with BOS and, when ../shared/models is
    there, the Llama 3 tokenizer (text calibration needs one)."""
    import dataclasses
    from cism import format as fmt
    from cism.calibrate import calibrate
    from cism.synthetic import PRESETS, cache_dir, write_synthetic
    extra = dict(PRESETS["llama3.2-1b"].extra)
    extra["tokenizer.bos_id"] = 128000
    tok = os.path.join(ROOT, "..", "shared", "models", "tokenizers", "llama3", "tokenizer.json")
    if os.path.exists(tok):
        extra["tokenizer.hf_json"] = fmt.Bytes(open(tok, "rb").read())
    path = os.path.join(cache_dir(), "synthetic-llama3.2-1b-bf16-calibration-bench.cism")
    if not os.path.exists(path):
        write_synthetic(dataclasses.replace(PRESETS["llama3.2-1b"], extra=extra), path, "bf16")
    nt = int(a.threads.split(",")[-1])
    for src in a.calibrate.split(","):
        r = calibrate(path, src, n_threads=nt)
        print(f"calibration on the synthetic Llama-3.2-1B (bf16), {nt} threads: {r.seconds:.1f} s for {r.n_tokens} "
              f"tokens ({r.description})", flush=True)


def write_hf_folder(preset_name: str, folder: str, seed: int = 0) -> None:
    """A Hugging Face-style Llama folder (config.json, model.safetensors in bf16)
    with the shapes of a synthetic preset and seeded random weights (std 0.02;
    norms 1): what `cism convert` reads for a real checkpoint."""
    import json
    from cism.safetensors import f32_to_bf16
    from cism.synthetic import PRESETS
    p = PRESETS[preset_name]
    if p.architecture != "llama":
        raise SystemExit(f"--hf-folder writes Llama folders; {preset_name} is {p.architecture}")
    st = os.path.join(folder, "model.safetensors")
    if os.path.exists(st):
        return
    os.makedirs(folder, exist_ok=True)
    cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": p.vocab_size,
           "hidden_size": p.dim, "intermediate_size": p.ffn_dim, "num_hidden_layers": p.n_layers,
           "num_attention_heads": p.n_heads, "num_key_value_heads": p.n_kv_heads, "head_dim": p.head_dim,
           "max_position_embeddings": p.context_length, "rms_norm_eps": p.norm_eps, "rope_theta": p.rope_theta,
           "tie_word_embeddings": p.tied, "bos_token_id": 1, "eos_token_id": 2, "hidden_act": "silu",
           "torch_dtype": "bfloat16"}
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1)
    shapes = [("model.embed_tokens.weight", (p.vocab_size, p.dim))]
    for i in range(p.n_layers):
        pre = f"model.layers.{i}."
        shapes += [(pre + "input_layernorm.weight", (p.dim,)), (pre + "post_attention_layernorm.weight", (p.dim,)),
                   (pre + "self_attn.q_proj.weight", (p.n_heads * p.head_dim, p.dim)),
                   (pre + "self_attn.k_proj.weight", (p.n_kv_heads * p.head_dim, p.dim)),
                   (pre + "self_attn.v_proj.weight", (p.n_kv_heads * p.head_dim, p.dim)),
                   (pre + "self_attn.o_proj.weight", (p.dim, p.n_heads * p.head_dim)),
                   (pre + "mlp.gate_proj.weight", (p.ffn_dim, p.dim)), (pre + "mlp.up_proj.weight", (p.ffn_dim, p.dim)),
                   (pre + "mlp.down_proj.weight", (p.dim, p.ffn_dim))]
    shapes.append(("model.norm.weight", (p.dim,)))
    if not p.tied:
        shapes.append(("lm_head.weight", (p.vocab_size, p.dim)))
    header, off = {}, 0
    for name, shape in shapes:
        n = 2 * int(np.prod(shape))
        header[name] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [off, off + n]}
        off += n
    hb = json.dumps(header).encode()
    hb += b" " * (-len(hb) % 8)
    rng = np.random.default_rng(seed)
    tmp = st + ".partial"
    with open(tmp, "wb") as f:
        f.write(len(hb).to_bytes(8, "little") + hb)
        for name, shape in shapes:
            if len(shape) == 1:
                f.write(f32_to_bf16(np.ones(shape, dtype=np.float32)).tobytes())
                continue
            for r in range(0, shape[0], 4096):
                rows = min(4096, shape[0] - r)
                blk = (rng.random((rows, shape[1]), dtype=np.float32) - 0.5) * np.float32(0.02 * 12 ** 0.5)
                f.write(f32_to_bf16(blk).tobytes())
    os.replace(tmp, st)
    print(f"wrote {folder}: synthetic {preset_name}, {sum(int(np.prod(s)) for _, s in shapes) / 1e9:.3f} B weights (bf16)",
          flush=True)


def bench_convert(a):
    """Seconds of whole `cism convert` runs, one per variant (each file deleted afterwards)."""
    from cism.convert import convert
    if a.hf_folder:
        write_hf_folder(a.hf_folder, a.convert)
    nt = int(a.threads.split(",")[-1])
    outdir = a.out or os.path.dirname(os.path.abspath(a.convert.rstrip("/")))
    for v in a.variants.split(","):
        parts = v.split(":")
        recipe = parts[0]
        method = parts[1] if len(parts) > 1 else "none"
        model = parts[2] if len(parts) > 2 else None
        tokens = int(parts[3]) if len(parts) > 3 else 0
        out = os.path.join(outdir, f"quant-bench-{os.getpid()}.cism")
        t0, c0 = time.perf_counter(), time.process_time()
        rep = convert(a.convert, out, quant=recipe, overwrite=True, progress=None, n_threads=nt,
                      calibrate=False if method == "none" else "auto", calib_method=None if method == "none" else method,
                      calib_model=model, calib_tokens=tokens)
        dt, cpu = time.perf_counter() - t0, time.process_time() - c0
        os.unlink(out)
        # CPU seconds (all threads of this process) as well: less dependent on a shared machine's load
        print(f"{v}: {dt:.1f} s at {nt} threads ({cpu:.1f} CPU s), {rep.bits_per_weight():.3f} bits/weight"
              + (f"; calibration {rep.calibration_seconds:.1f} s{rep.calibration_detail}" if rep.calibration else ""),
              flush=True)


if __name__ == "__main__":
    main()
