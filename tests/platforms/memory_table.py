"""Memory of the model presets, measured through the C API (ctypes, no package).

For each preset shape (the config.json of the real model), writes a .cism
whose weight data is a hole in a sparse file (nothing on disk, zeros when
read), loads it through mmap, and asks libcism what a session costs:

  python memory_table.py LIBCISM.so WORK_DIR [--check]

prints a Markdown table (docs/MEMORY.md holds its output). With --check it
also creates a session per preset and requires cism_session_memory_bytes to
equal cism_session_estimate_bytes, and loading not to grow the process by
more than a fraction of the file (weights used in place): a test on real
shapes, run by run_platform_checks.sh. (Residency of the page cache is not
a measure of copying: readahead around the few pages the loader reads brings
in neighbours. The process's own resident set is.)
"""
import ctypes
import os
import struct
import sys

# name, vocab, dim, layers, heads, kv_heads, head_dim, ffn, context, tied, family extras
PRESETS = [
    ("SmolLM2-135M", 49152, 576, 30, 9, 3, 64, 1536, 8192, True, "llama"),
    ("SmolLM2-360M", 49152, 960, 32, 15, 5, 64, 2560, 8192, True, "llama"),
    ("Qwen2.5-0.5B", 151936, 896, 24, 14, 2, 64, 4864, 32768, True, "qwen2"),
    ("Qwen3-0.6B", 151936, 1024, 28, 16, 8, 128, 3072, 40960, True, "qwen3"),
    ("Llama-3.2-1B", 128256, 2048, 16, 32, 8, 64, 8192, 131072, True, "llama3"),
    ("TinyLlama-1.1B", 32000, 2048, 22, 32, 4, 64, 5632, 2048, False, "llama"),
    ("SmolLM2-1.7B", 49152, 2048, 24, 32, 32, 64, 8192, 8192, True, "llama"),
]
F32, F16 = 0, 1


def pad64(n):
    return (n + 63) // 64 * 64


def s32(s):
    b = s.encode()
    return struct.pack("<I", len(b)) + b


def write_sparse_model(path, p):
    name, vocab, dim, layers, heads, kv, hd, ffn, ctx, tied, family = p
    arch = {"llama3": "llama"}.get(family, family)
    meta = [("general.architecture", 3, arch), ("model.vocab_size", 1, vocab), ("model.dim", 1, dim),
            ("model.n_layers", 1, layers), ("model.n_heads", 1, heads), ("model.n_kv_heads", 1, kv),
            ("model.head_dim", 1, hd), ("model.ffn_dim", 1, ffn), ("model.context_length", 1, ctx),
            ("model.tied_embeddings", 1, int(tied)), ("model.norm_eps", 2, 1e-5), ("model.rope_theta", 2, 10000.0)]
    if family == "qwen2":
        meta.append(("model.attn_qkv_bias", 1, 1))
    if family == "qwen3":
        meta.append(("model.qk_norm", 1, 1))
    if family == "llama3":
        meta += [("model.rope_scaling.type", 3, "llama3"), ("model.rope_scaling.factor", 2, 32.0),
                 ("model.rope_scaling.original_context_length", 1, 8192)]
    tensors = [("token_embd", F16, (vocab, dim))]
    if not tied:
        tensors.append(("output", F16, (vocab, dim)))
    tensors.append(("output_norm", F32, (dim,)))
    q, kvr = heads * hd, kv * hd
    for i in range(layers):
        b = f"blk.{i}."
        tensors += [(b + "attn_norm", F32, (dim,)), (b + "attn_q", F16, (q, dim)), (b + "attn_k", F16, (kvr, dim)),
                    (b + "attn_v", F16, (kvr, dim)), (b + "attn_output", F16, (dim, q)), (b + "ffn_norm", F32, (dim,)),
                    (b + "ffn_gate", F16, (ffn, dim)), (b + "ffn_up", F16, (ffn, dim)), (b + "ffn_down", F16, (dim, ffn))]
        if family == "qwen2":
            tensors += [(b + "attn_q_bias", F32, (q,)), (b + "attn_k_bias", F32, (kvr,)), (b + "attn_v_bias", F32, (kvr,))]
        if family == "qwen3":
            tensors += [(b + "attn_q_norm", F32, (hd,)), (b + "attn_k_norm", F32, (hd,))]
    m = struct.pack("<I", len(meta))
    for key, t, v in meta:
        m += s32(key) + struct.pack("<I", t)
        m += struct.pack("<q", v) if t == 1 else struct.pack("<d", v) if t == 2 else struct.pack("<Q", len(v)) + v.encode()
    d = struct.pack("<I", len(tensors))
    off = 0
    for tname, dtype, dims in tensors:
        size = (4 if dtype == F32 else 2)
        for x in dims:
            size *= x
        d += s32(tname) + struct.pack("<II", dtype, len(dims)) + b"".join(struct.pack("<Q", x) for x in dims)
        d += struct.pack("<QQ", off, size)
        off = pad64(off + size)
    data_off = pad64(64 + len(m) + len(d))
    header = b"CISM\r\n\x1a\n" + struct.pack("<II", 1, 0) + struct.pack("<6Q", 64, len(m), 64 + len(m), len(d), data_off, off)
    with open(path, "wb") as f:
        f.write(header + m + d)
        f.truncate(data_off + off)  # the weights: a hole, read as zeros
    return data_off + off


def main():
    lib = ctypes.CDLL(sys.argv[1])
    work = sys.argv[2]
    check = "--check" in sys.argv
    os.makedirs(work, exist_ok=True)
    P, I64 = ctypes.c_void_p, ctypes.c_int64
    lib.cism_last_error.restype = ctypes.c_char_p
    for fn, args in [("cism_params_create", [ctypes.POINTER(P)]), ("cism_params_free", [P]),
                     ("cism_params_set_int", [P, ctypes.c_int32, I64]),
                     ("cism_model_load", [ctypes.c_char_p, P, ctypes.POINTER(P)]), ("cism_model_free", [P]),
                     ("cism_model_resident_bytes", [P, ctypes.POINTER(I64), ctypes.POINTER(I64)]),
                     ("cism_model_get_info", [P, ctypes.c_int32, ctypes.POINTER(I64)]),
                     ("cism_session_estimate_bytes", [P, P, ctypes.POINTER(I64)]),
                     ("cism_session_create", [P, P, ctypes.POINTER(P)]), ("cism_session_free", [P]),
                     ("cism_process_resident_bytes", [ctypes.POINTER(I64)])]:
        getattr(lib, fn).argtypes = args
    lib.cism_session_memory_bytes.argtypes = [P]
    lib.cism_session_memory_bytes.restype = I64

    def ok(st):
        if st != 0:
            raise RuntimeError(lib.cism_last_error().decode())

    mib = lambda b: f"{b / 1048576:,.0f} MiB"  # noqa: E731
    print("| model | parameters | weights (f16) | weights at 4.5 bits (q4/q4s/fp4/nl4) | session, 2048 tokens |"
          " session, 4096 tokens | KV cache per token |")
    print("|---|---|---|---|---|---|---|")
    failures = 0
    for p in PRESETS:
        path = os.path.join(work, p[0] + ".cism")
        size = write_sparse_model(path, p)
        model, params = P(), P()
        rss0, rss1 = I64(), I64()
        ok(lib.cism_params_create(ctypes.byref(params)))
        ok(lib.cism_process_resident_bytes(ctypes.byref(rss0)))
        ok(lib.cism_model_load(path.encode(), params, ctypes.byref(model)))
        ok(lib.cism_process_resident_bytes(ctypes.byref(rss1)))
        n_params, resident, total = I64(), I64(), I64()  # resident: page cache, readahead included
        ok(lib.cism_model_get_info(model, 12, ctypes.byref(n_params)))
        ok(lib.cism_model_resident_bytes(model, ctypes.byref(resident), ctypes.byref(total)))
        cols = []
        for n_ctx in (2048, 4096):
            ok(lib.cism_params_set_int(params, 0, 4))  # 4 threads, as on a phone's big cores
            ok(lib.cism_params_set_int(params, 1, min(n_ctx, p[8])))
            est = I64()
            ok(lib.cism_session_estimate_bytes(model, params, ctypes.byref(est)))
            cols.append(est.value)
            if check and n_ctx == 2048:
                session = P()
                ok(lib.cism_session_create(model, params, ctypes.byref(session)))
                got = lib.cism_session_memory_bytes(session)
                lib.cism_session_free(session)
                if got != est.value:
                    print(f"FAIL {p[0]}: session holds {got} bytes, estimate {est.value}", file=sys.stderr)
                    failures += 1
        if check and rss1.value - rss0.value > total.value // 8:
            print(f"FAIL {p[0]}: loading grew the process by {rss1.value - rss0.value} bytes ({total.value} in the file)",
                  file=sys.stderr)
            failures += 1
        kv_per_token = 2 * p[3] * p[5] * p[6] * 2  # k and v, f16
        note = f" (model max {p[8]})" if p[8] < 4096 else ""
        print(f"| {p[0]} | {n_params.value / 1e6:,.0f} M | {mib(size)} | {mib(n_params.value * 4.5 / 8)} |"
              f" {mib(cols[0])} | {mib(cols[1])}{note} |"
              f" {kv_per_token / 1024:,.0f} KiB |")
        lib.cism_model_free(model)
        lib.cism_params_free(params)
        os.remove(path)
    if check:
        print(f"memory: {len(PRESETS) - failures} passed, {failures} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
