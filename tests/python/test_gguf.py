"""GGUF import (cism.gguf, cism.convert_gguf; docs/GGUF.md).

The GGUF files come from llama.cpp's own tools (the `llama_cpp_tools` fixture):
convert_hf_to_gguf.py on the checkpoints in ../shared/models, and gguf-py
(GGUFWriter + quants.quantize) for the block-quantized variants. gguf-py's
quants.dequantize is the oracle of every value; it is imported in this test
process only (sys.path), never by cism.
"""
from __future__ import annotations

import json
import os
import random
import struct
import subprocess
import sys
import time

import numpy as np
import pytest

import cism
from cism import format as fmt
from cism import gguf as G
from cism import quant
from cism.convert import ConversionError, convert

import gguf_build as B

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CORPUS = os.path.join(ROOT, "tests", "fuzz", "gguf_corpus")
Q4AX16 = 13  # cism.h's CISM_DTYPE_Q4AX16: q4a's values, 16 rows interleaved


# ---------------------------------------------------------------------------
# llama.cpp's tools

@pytest.fixture(scope="module")
def gp(llama_cpp_tools):
    """llama.cpp's gguf-py package (gguf, gguf.quants)."""
    path = os.path.join(llama_cpp_tools, "gguf-py")
    if path not in sys.path:
        sys.path.insert(0, path)
    import gguf
    import gguf.quants  # noqa: F401
    return gguf


@pytest.fixture(scope="module")
def hf_to_gguf(llama_cpp_tools, shared_models, tmp_path_factory):
    """convert_hf_to_gguf.py on a shared checkpoint, once per (model, outtype)."""
    out = tmp_path_factory.mktemp("hf2gguf")
    stub = out / "stub"
    stub.mkdir()
    # convert_hf_to_gguf imports sentencepiece before it looks for tokenizer.model, which these
    # checkpoints do not have (it then reads tokenizer.json): a stub module stands in for it
    (stub / "sentencepiece.py").write_text("class SentencePieceProcessor:\n    pass\n")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([os.path.join(llama_cpp_tools, "gguf-py"), str(stub)])
    env["NO_LOCAL_GGUF"] = ""
    done = {}

    def folder(model: str) -> str:
        src = os.path.join(shared_models, model)
        with open(os.path.join(src, "tokenizer.json"), encoding="utf-8") as f:
            tj = json.load(f)
        if tj["model"].get("byte_fallback"):
            return src
        # llama.cpp's converter reads a sentencepiece-style tokenizer.json only when it says
        # byte_fallback (BabyLlama's 105 tokens have no byte tokens, so the flag changes nothing
        # there): a copy of the folder that says so, the weights linked
        dst = out / model
        if not dst.exists():
            dst.mkdir()
            for name in os.listdir(src):
                if name != "tokenizer.json":
                    os.symlink(os.path.join(src, name), dst / name)
            tj["model"]["byte_fallback"] = True
            (dst / "tokenizer.json").write_text(json.dumps(tj), encoding="utf-8")
        return str(dst)

    def get(model: str, outtype: str) -> str:
        if (model, outtype) not in done:
            dst = str(out / f"{model}.{outtype}.gguf")
            p = subprocess.run([sys.executable, os.path.join(llama_cpp_tools, "convert_hf_to_gguf.py"),
                                folder(model), "--outtype", outtype, "--outfile", dst],
                               env=env, capture_output=True, text=True, timeout=600)
            assert p.returncode == 0, p.stderr[-3000:]
            done[model, outtype] = dst
        return done[model, outtype]
    return get


def rewrite(gp, src: str, dst: str, qtype_for=lambda name, arr: None, kv_set=None, kv_drop=(), tensor_drop=(),
            arch=None):
    """Rewrites a GGUF with gguf-py: matrices in the type qtype_for(name, f32 array) gives
    (quantized with gguf-py's quants.quantize, like llama-quantize's reference code), metadata
    changed or dropped."""
    from gguf import quants
    r = gp.GGUFReader(src)
    a = arch or r.fields["general.architecture"].contents()
    w = gp.GGUFWriter(dst, a)
    for name, f in r.fields.items():
        if name.startswith("GGUF.") or name == "general.architecture" or name in kv_drop or name in (kv_set or {}):
            continue
        vt = f.types[0]
        sub = f.types[-1] if vt == gp.GGUFValueType.ARRAY else None
        w.add_key_value(name, f.contents(), vt, sub_type=sub)
    for name, (val, vt) in (kv_set or {}).items():
        w.add_key_value(name, val, vt, sub_type=gp.GGUFValueType.STRING if isinstance(val, list) else None)
    for t in r.tensors:
        if t.name in tensor_drop:
            continue
        arr = quants.dequantize(t.data, t.tensor_type).reshape(tuple(reversed([int(x) for x in t.shape])))
        qt = qtype_for(t.name, arr)
        if qt is None:
            w.add_tensor(t.name, np.ascontiguousarray(arr, dtype=np.float32))
        elif isinstance(qt, tuple):  # (type, raw bytes [rows, row bytes]) given as is
            w.add_tensor(t.name, qt[1], raw_dtype=qt[0])
        else:
            w.add_tensor(t.name, quants.quantize(np.ascontiguousarray(arr, dtype=np.float32), qt), raw_dtype=qt)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return dst


def hf_rows_of(gp, t, arch: str, n_heads: int, n_kv: int) -> np.ndarray:
    """gguf-py's dequantized values of a GGUF tensor, in the Hugging Face row order: llama.cpp's
    converter permuted the Q/K rows of llama-family models (LlamaModel.permute); the inverse
    permutation is built by applying that rule to the row indices."""
    from gguf import quants
    shape = tuple(reversed([int(x) for x in t.shape]))
    ref = np.asarray(quants.dequantize(t.data, t.tensor_type), dtype=np.float32).reshape(shape)
    heads = {"attn_q.weight": n_heads, "attn_k.weight": n_kv}.get(t.name.split(".", 2)[-1])
    if arch in ("llama", "mistral") and heads:
        rows = shape[0]
        perm = np.arange(rows).reshape(heads, 2, rows // heads // 2).swapaxes(1, 2).reshape(-1)
        hf = np.empty_like(ref)
        hf[perm] = ref
        ref = hf
    return ref


def stored_values(cf: fmt.CismFile, name: str) -> np.ndarray:
    ti = cf.tensors[name]
    if ti.dtype in (fmt.DTYPE_F32, fmt.DTYPE_F16, fmt.DTYPE_BF16):
        return np.asarray(cf.array(name), dtype=np.float32)
    return quant.dequantize(cf.array(name), ti.dtype, ti.shape[1])


def compare_all(gp, gguf_path: str, cism_path: str, lossless_only: bool = True, exact_types=()):
    """Every tensor of the import against gguf-py's dequantization: identical bits where the
    import says lossless (every tensor with lossless_only, else those of exact_types), within
    q8's rounding where it says requantized. Returns {name: (src, stored)}."""
    r = gp.GGUFReader(gguf_path)
    arch = r.fields["general.architecture"].contents()
    n_heads = int(r.fields[f"{arch}.attention.head_count"].contents())
    n_kv = int(r.fields[f"{arch}.attention.head_count_kv"].contents())
    cf = fmt.CismFile(cism_path)
    seen = {}
    for t in r.tensors:
        name = t.name[:-len(".weight")] if t.name.endswith(".weight") else t.name.replace(".bias", "_bias")
        if name == "rope_freqs":
            continue
        ref = hf_rows_of(gp, t, arch, n_heads, n_kv)
        got = stored_values(cf, name).reshape(ref.shape)
        stored = fmt.DTYPE_NAMES[cf.tensors[name].dtype]
        seen[name] = (t.tensor_type.name, stored)
        exact = np.array_equal(ref.view(np.uint32), got.view(np.uint32))
        if lossless_only or t.tensor_type.name in exact_types:
            assert exact, f"{name}: {t.tensor_type.name} -> {stored} changed values (max {np.abs(ref - got).max()})"
        elif not exact:
            tol = np.abs(ref).reshape(ref.shape[0], -1, 32).max(axis=2, keepdims=True) / 127 * 0.5 * 1.001
            err = np.abs(ref - got).reshape(tol.shape[0], -1, 32)
            assert np.all(err <= tol + 1e-12), f"{name}: requantized beyond q8's rounding"
    return seen


def logits(path: str, tokens) -> np.ndarray:
    with cism.Model(path) as m, m.session(kv_type="f32", logits_all=True, n_threads=2) as s:
        s.eval(tokens)
        return s.all_logits()


# ---------------------------------------------------------------------------
# the reader

TYPES = ["F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K"]


@pytest.mark.parametrize("tname", TYPES)
def test_dequantizers_bit_exact_against_gguf_py(gp, tname):
    from gguf import quants
    t = G.TYPE_NUMBERS[tname]
    _, belems, bbytes = G.GGML_TYPES[t]
    rng = np.random.default_rng(t)
    raw = rng.integers(0, 256, size=(257, bbytes), dtype=np.uint8)   # every bit pattern, NaN and inf scales too
    with np.errstate(all="ignore"):
        want = np.asarray(quants.dequantize(raw.copy(), gp.GGMLQuantizationType[tname]), np.float32).reshape(-1)
        got = G.dequantize(raw, t, chunk_blocks=100)
    assert got.shape == (257 * belems,)
    assert np.array_equal(want.view(np.uint32), got.view(np.uint32))


def test_reader_metadata_every_value_type(tmp_path):
    p = tmp_path / "small.gguf"
    p.write_bytes(B.small_file())
    with G.GGUFFile(str(p)) as g:
        m = g.metadata
        assert (m["t.u8"], m["t.i8"], m["t.u16"], m["t.i16"], m["t.u32"], m["t.i32"]) == (7, -7, 700, -700, 70000,
                                                                                          -70000)
        assert (m["t.f32"], m["t.bool"], m["t.u64"], m["t.i64"], m["t.f64"]) == (0.5, True, 1 << 40, -(1 << 40), 0.25)
        assert m["t.strs"] == ["a", "bc", "\u00e9"] and m["t.ints"].tolist() == [1, 2, 3]
        assert m["t.nested"][0].tolist() == [1, 2] and m["t.nested"][1] == ["x"]
        assert g.value_types["t.ints"] == (G.T_ARRAY, G.T_INT32)
        assert g.tensors["a.weight"].shape == (4, 32) and g.tensors["b.weight"].type_name == "Q8_0"
        assert g.tensors["a.weight"].offset % 32 == 0 and g.data_offset % 32 == 0


def test_reader_agrees_with_gguf_py_on_the_real_model(gp, real_gguf):
    r = gp.GGUFReader(real_gguf)
    with G.GGUFFile(real_gguf) as g:
        assert g.version == 3 and len(g.tensors) == len(r.tensors) == 272
        for name, f in r.fields.items():
            if name.startswith("GGUF."):
                continue
            want, got = f.contents(), g.metadata[name]
            assert (np.array_equal(np.asarray(want), np.asarray(got)) if isinstance(got, np.ndarray)
                    else want == got or (isinstance(got, float) and np.float32(want) == np.float32(got))), name
        for t in r.tensors:
            mine = g.tensors[t.name]
            assert mine.offset == t.data_offset and mine.nbytes == t.n_bytes and mine.type == int(t.tensor_type)


# ---------------------------------------------------------------------------
# hostile files

def _expect_gguf_error(path: str, what: str = ""):
    t0 = time.time()
    with pytest.raises(G.GGUFError) as e:
        G.GGUFFile(path)
    assert time.time() - t0 < 2, "slow refusal"
    if what:
        assert what in str(e.value), str(e.value)
    return str(e.value)


def test_truncated_at_every_offset(tmp_path):
    data = B.small_file()
    p = str(tmp_path / "t.gguf")
    for cut in range(len(data)):
        with open(p, "wb") as f:
            f.write(data[:cut])
        _expect_gguf_error(p)


HEAD = b"GGUF" + struct.pack("<I", 3)


HOSTILE = [
    ("magic", b"GGUX" + b"\0" * 40, "magic"),
    ("version 1", b"GGUF" + struct.pack("<IQQ", 1, 0, 0), "version 1"),
    ("version 99", b"GGUF" + struct.pack("<IQQ", 99, 0, 0), "version 99"),
    ("big-endian", b"GGUF" + struct.pack(">IQQ", 3, 0, 0), "big-endian"),
    ("kv count", HEAD + struct.pack("<QQ", 0, 1 << 62) + b"\0" * 64, "metadata_kv_count"),
    ("tensor count", HEAD + struct.pack("<QQ", 1 << 62, 0) + b"\0" * 64, "tensor_count"),
    ("key length", HEAD + struct.pack("<QQ", 0, 1) + struct.pack("<Q", 1 << 60) + b"\0" * 64, "metadata key 0"),
    ("string length", HEAD + struct.pack("<QQ", 0, 1) + B.gstr("k") + struct.pack("<IQ", B.STR, 1 << 61) + b"\0" * 8,
     "'k'"),
    ("array length", HEAD + struct.pack("<QQ", 0, 1) + B.gstr("k") + struct.pack("<IIQ", B.ARR, B.U32, 1 << 61)
     + b"\0" * 64, "array length"),
    ("string array length", HEAD + struct.pack("<QQ", 0, 1) + B.gstr("k") + struct.pack("<IIQ", B.ARR, B.STR, 1 << 40)
     + b"\0" * 64, "array length"),
    ("value type", HEAD + struct.pack("<QQ", 0, 1) + B.gstr("k") + struct.pack("<I", 13) + b"\1" * 32,
     "unknown value type 13"),
    ("array type", HEAD + struct.pack("<QQ", 0, 1) + B.gstr("k") + struct.pack("<IIQ", B.ARR, 77, 0) + b"\0" * 32,
     "unknown array element type 77"),
    ("nesting", HEAD + struct.pack("<QQ", 0, 1) + B.gstr("k") + struct.pack("<I", B.ARR)
     + struct.pack("<IQ", B.ARR, 1) * 20 + b"\0" * 64, "nested deeper"),
    ("bool", B.build([B.kv("k", B.BOOL, 2)], []), "boolean"),
    ("utf-8", B.build([B.kv("k", B.STR, b"\xff\xfe")], []), "UTF-8"),
    ("duplicate key", B.build([B.kv("k", B.U8, 1), B.kv("k", B.U8, 2)], []), "twice"),
    ("alignment", B.build([B.kv("general.alignment", B.U32, 24)], []), "power of two"),
    ("alignment type", B.build([B.kv("general.alignment", B.U64, 32)], []), "UINT32"),
    ("n_dims", B.build([], [("t", (4, 4, 1, 1, 1), 0, b"\0" * 64)]), "5 dimensions"),
    ("zero dim", B.build([], [("t", (4, 0), 0, b"\0" * 64)]), "size 0"),
    ("huge dims", B.build([], [("t", (1 << 32, 1 << 32), 0, b"\0" * 64)]), "more data than the file"),
    ("unknown tensor type", B.build([], [("t", (4,), 99, b"\0" * 16)]), "unknown tensor type 99"),
    ("partial block", B.build([], [("t", (48,), 8, b"\0" * 68)]), "whole blocks"),
    ("data past the end", B.build([], [("t", (32, 8), 0, b"\0" * 64)]), "past the end"),
    ("duplicate tensor", B.build([], [("t", (4,), 0, b"\0" * 16), ("t", (4,), 0, b"\0" * 16)]), "twice"),
]


@pytest.mark.parametrize("case,data,what", HOSTILE, ids=[h[0] for h in HOSTILE])
def test_hostile_headers(tmp_path, case, data, what):
    p = tmp_path / "h.gguf"
    p.write_bytes(data)
    _expect_gguf_error(str(p), what)


def test_misaligned_and_overlapping_offsets(tmp_path):
    for offs, what in (((0, 8), "not a multiple"), ((0, 0), "overlap"), ((0, 1 << 40), "past the end")):
        infos = B.tensor_info("a", (8,), 0, offs[0]) + B.tensor_info("b", (8,), 0, offs[1])
        head = b"GGUF" + struct.pack("<IQQ", 3, 2, 0) + infos
        data = head + b"\0" * ((-len(head)) % 32) + b"\0" * 64
        p = tmp_path / "o.gguf"
        p.write_bytes(data)
        _expect_gguf_error(str(p), what)


def _read_all(path: str) -> bool:
    """Opens a GGUF and dequantizes every tensor it lists; False when the file is
    refused. Any exception but GGUFError escapes (the property under test)."""
    try:
        with G.GGUFFile(path) as g:
            for name in g.tensors:
                try:
                    g.dequantize(name)
                except G.GGUFError:
                    pass
        return True
    except G.GGUFError:
        return False


def test_random_corruption_never_escapes(tmp_path):
    data = bytearray(B.small_file(1))
    rng = random.Random(1)
    p = str(tmp_path / "r.gguf")
    n_ok = 0
    for _ in range(1500):
        d = bytearray(data)
        for _ in range(rng.randint(1, 6)):
            d[rng.randrange(len(d))] = rng.randrange(256)
        with open(p, "wb") as f:
            f.write(d)
        t0 = time.time()
        n_ok += _read_all(p)
        assert time.time() - t0 < 2
    assert n_ok < 1500  # corruption was noticed at least sometimes


def test_fuzz_corpus_replays(tmp_path):
    files = sorted(os.listdir(CORPUS))
    assert len(files) >= 4
    for name in files:
        path = os.path.join(CORPUS, name)
        assert os.path.getsize(path) < 20000
        _read_all(path)
    with G.GGUFFile(os.path.join(CORPUS, "small.gguf")) as g:  # the corpus' valid seed stays valid
        assert len(g.tensors) == 2


def test_hostile_conversions_leave_nothing(hf_to_gguf, tmp_path):
    src = hf_to_gguf("stories260K-hf", "f32")
    data = open(src, "rb").read()
    out = str(tmp_path / "x.cism")
    with G.GGUFFile(src) as g:
        first = min(t.offset for t in g.tensors.values())
    for cut in [5, 30, 200, 1000, 5000, first - 1, first + 100, len(data) // 2, len(data) - 1]:
        p = str(tmp_path / "cut.gguf")
        with open(p, "wb") as f:
            f.write(data[:cut])
        with pytest.raises(ConversionError):
            convert(p, out, progress=None)
        assert not os.path.exists(out) and os.listdir(tmp_path) == ["cut.gguf"]


def test_refusals(gp, hf_to_gguf, tmp_path):
    src = hf_to_gguf("stories260K-hf", "f32")
    out = str(tmp_path / "x.cism")
    V = gp.GGUFValueType

    def refused(what, **kw):
        p = rewrite(gp, src, str(tmp_path / "r.gguf"), **kw)
        with pytest.raises(ConversionError) as e:
            convert(p, out, progress=None)
        assert what in str(e.value), str(e.value)
        assert not os.path.exists(out)

    refused("architecture 'gpt2' is not supported", arch="gpt2")
    refused("'llama.block_count' is missing", kv_drop={"llama.block_count"})
    refused("missing tensors", tensor_drop={"blk.3.ffn_up.weight"})
    refused("hyper-parameters imply", kv_set={"llama.feed_forward_length": (100, V.UINT32)})
    refused("tokenizer model 'bert'", kv_set={"tokenizer.ggml.model": ("bert", V.STRING)})
    refused("RoPE scaling type 'yarn'", kv_set={"llama.rope.scaling.type": ("yarn", V.STRING)})
    refused("partial rotary", kv_set={"llama.rope.dimension_count": (4, V.UINT32)})
    refused("mixture-of-experts", kv_set={"llama.expert_count": (8, V.UINT32)})
    # an unsupported tensor type (IQ4_NL: a valid GGUF type libcism cannot read)
    iq = gp.GGMLQuantizationType.IQ4_NL
    refused("type IQ4_NL, which is not supported",
            qtype_for=lambda n, a: (iq, np.zeros((a.shape[0], a.shape[1] // 32 * 18), np.uint8))
            if n == "blk.0.attn_q.weight" else None)
    # an unknown tensor name
    p = str(tmp_path / "n.gguf")
    data = open(src, "rb").read().replace(b"blk.0.ffn_up.weight", b"blk.0.ffn_zz.weight")
    open(p, "wb").write(data)
    with pytest.raises(ConversionError, match="unknown name"):
        convert(p, out, progress=None)


# ---------------------------------------------------------------------------
# files written by convert_hf_to_gguf.py

MODELS = ["stories260K-hf", "babyllama-tok105-hf"]


@pytest.fixture(scope="module")
def hf_converted(shared_models, tmp_path_factory):
    out = tmp_path_factory.mktemp("hfc")
    done = {}

    def get(model: str, dtype: str) -> str:
        if (model, dtype) not in done:
            p = str(out / f"{model}-{dtype}.cism")
            convert(os.path.join(shared_models, model), p, dtype=dtype, progress=None)
            done[model, dtype] = p
        return done[model, dtype]
    return get


@pytest.mark.parametrize("outtype", ["f32", "f16", "bf16", "q8_0"])
@pytest.mark.parametrize("model", MODELS)
def test_llama_cpp_converted_checkpoints(gp, hf_to_gguf, hf_converted, shared_models, tmp_path, model, outtype):
    src = hf_to_gguf(model, outtype)
    out = str(tmp_path / "m.cism")
    rep = convert(src, out, progress=None)
    seen = compare_all(gp, src, out)
    assert all(how == "lossless" for _, _, how in rep.gguf_tensors.values())
    want = {"f32": "f32", "f16": "f16", "bf16": "bf16"}.get(outtype)
    for name, (src_t, stored) in seen.items():
        if name.startswith("blk.") and ("attn_q" in name or "ffn_gate" in name) and outtype != "q8_0":
            assert stored == want, (name, stored)
        if src_t == "Q8_0":
            assert stored in ("q8", "q8x16")
            if name.endswith(("attn_q", "attn_k", "attn_v", "attn_output")) and model.startswith("baby"):
                assert stored == "q8x16"   # 16-row groups and head_dim 16: interleaved
    ref = np.load(os.path.join(shared_models, model, "reference.npz"))
    toks = ref["tokens_32"]
    got = logits(out, toks)
    if outtype in ("f32", "f16", "bf16"):
        # the same checkpoint converted from its Hugging Face folder in the same type: identical logits
        assert np.array_equal(got, logits(hf_converted(model, outtype), toks)), outtype
    if outtype == "f32":
        assert np.abs(got - ref["logits_32"]).max() < 1e-4
    else:
        assert np.mean(got.argmax(1) == ref["logits_32"].argmax(1)) > 0.9
    # the f32 reference of the file: every tensor dequantized, values unchanged
    out32 = str(tmp_path / "m32.cism")
    convert(src, out32, dtype="f32", progress=None)
    compare_all(gp, src, out32)
    assert all(fmt.DTYPE_NAMES[t.dtype] == "f32" for t in fmt.CismFile(out32).tensors.values())


def test_tokenizer_and_template_metadata_match_hf_import(hf_to_gguf, hf_converted):
    src = hf_to_gguf("babyllama-tok105-hf", "f32")
    with cism.Model(convert(src, src + ".cism", progress=None).path) as g, \
            cism.Model(hf_converted("babyllama-tok105-hf", "f32")) as h:
        for key in ("tokenizer.bos_id", "tokenizer.eos_id", "tokenizer.byte_fallback", "tokenizer.unk_id"):
            assert g.metadata.get(key) == h.metadata.get(key), key
        text = "Once upon a time, there was a little girl named Lily. She liked 123 apples!"
        assert g.tokenizer.encode(text) == h.tokenizer.encode(text)
        for k in ("model.norm_eps", "model.rope_theta", "model.dim", "model.head_dim", "model.tied_embeddings"):
            assert g.metadata[k] == h.metadata[k], k


# ---------------------------------------------------------------------------
# block-quantized files written with gguf-py

BLOCK_TYPES = {"Q4_0": ("q4", True), "Q4_1": ("q4a", True), "Q5_0": ("q5", True), "Q8_0": ("q8", True),
               "Q5_1": ("q8", False), "Q5_0:q8": ("q8", True)}  # TYPE:stored: Q5_0 kept as q8 (Q5_0_STORED)


@pytest.mark.parametrize("qname", list(BLOCK_TYPES))
def test_gguf_py_block_quantized(gp, hf_to_gguf, shared_models, tmp_path, qname, monkeypatch):
    from cism import convert_gguf
    base, lossless = BLOCK_TYPES[qname]
    qname, _, stored = qname.partition(":")
    if stored:
        monkeypatch.setattr(convert_gguf, "Q5_0_STORED", stored)
    src = hf_to_gguf("babyllama-tok105-hf", "f32")
    qt = gp.GGMLQuantizationType[qname]
    p = rewrite(gp, src, str(tmp_path / f"{qname}.gguf"),
                qtype_for=lambda n, a: qt if a.ndim == 2 and a.shape[1] % 32 == 0 else None)
    out = str(tmp_path / "m.cism")
    rep = convert(p, out, progress=None)
    seen = compare_all(gp, p, out, lossless_only=lossless)
    for name, (src_t, how) in ((n, (v[0], v[2])) for n, v in rep.gguf_tensors.items()):
        if src_t == qname:
            assert rep.tensors[name].startswith(base), (name, rep.tensors[name])
            assert how == ("lossless" if lossless else "requantized")
    assert any(s == qname for s, _ in seen.values())
    if not lossless:
        assert any("requantized" in n and qname in n for n in rep.notes), rep.notes
    ref = np.load(os.path.join(shared_models, "babyllama-tok105-hf", "reference.npz"))
    got = logits(out, ref["tokens_32"])
    assert np.mean(got.argmax(1) == ref["logits_32"].argmax(1)) > 0.8
    # --dtype f32: the dequantized values exactly; a recipe on top of them
    convert(p, str(tmp_path / "f.cism"), dtype="f32", progress=None)
    compare_all(gp, p, str(tmp_path / "f.cism"))
    rq = convert(p, str(tmp_path / "r.cism"), quant="q8", progress=None)
    assert rq.quant == "q8" and all(v in ("f32", "q8", "q8x16") for v in rq.tensors.values())


K_TYPES = ["Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K"]
_K_SCALES = {"Q2_K": [80, 82], "Q3_K": [108], "Q4_K": [0, 2], "Q5_K": [0, 2], "Q6_K": [208]}


def test_k_quants_from_random_blocks(gp, hf_to_gguf, tmp_path):
    """A llama model of K-quant matrices (random blocks with sane scales): requantized to q8,
    said so per tensor; --dtype f32 keeps gguf-py's values exactly."""
    from gguf import quants
    V = gp.GGUFValueType
    src = hf_to_gguf("stories260K-hf", "f32")
    rng = np.random.default_rng(5)
    r = gp.GGUFReader(src)
    w = gp.GGUFWriter(str(tmp_path / "k.gguf"), "llama")
    dim, ffn, nh, nkv, vocab = 256, 512, 4, 2, 512
    for key, val, vt in (("llama.block_count", 1, V.UINT32), ("llama.context_length", 256, V.UINT32),
                         ("llama.embedding_length", dim, V.UINT32), ("llama.feed_forward_length", ffn, V.UINT32),
                         ("llama.attention.head_count", nh, V.UINT32), ("llama.attention.head_count_kv", nkv, V.UINT32),
                         ("llama.attention.layer_norm_rms_epsilon", 1e-5, V.FLOAT32),
                         ("llama.rope.freq_base", 10000.0, V.FLOAT32)):
        w.add_key_value(key, val, vt)
    for name, f in r.fields.items():
        if name.startswith("tokenizer."):
            w.add_key_value(name, f.contents(), f.types[0], sub_type=f.types[-1] if f.types[0] == V.ARRAY else None)
    mats = {"token_embd": (vocab, dim), "output": (vocab, dim), "blk.0.attn_q": (dim, dim),
            "blk.0.attn_k": (dim // 2, dim), "blk.0.attn_v": (dim // 2, dim), "blk.0.attn_output": (dim, dim),
            "blk.0.ffn_gate": (ffn, dim), "blk.0.ffn_up": (ffn, dim), "blk.0.ffn_down": (dim, ffn)}
    types = {}
    for i, (name, (rows, cols)) in enumerate(mats.items()):
        kt = K_TYPES[i % len(K_TYPES)]
        qt = gp.GGMLQuantizationType[kt]
        _, bb = gp.GGML_QUANT_SIZES[qt]
        raw = rng.integers(0, 256, size=(rows * cols // 256, bb), dtype=np.uint8)
        for off in _K_SCALES[kt]:
            raw[:, off:off + 2] = rng.uniform(1e-4, 1e-3, (raw.shape[0], 1)).astype("<f2").view(np.uint8)
        w.add_tensor(name + ".weight", raw.reshape(rows, -1), raw_dtype=qt)
        types[name] = kt
    for name in ("blk.0.attn_norm", "blk.0.ffn_norm", "output_norm"):
        w.add_tensor(name + ".weight", np.ones(dim, np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    p = str(tmp_path / "k.gguf")
    with G.GGUFFile(p) as g:   # the reader's values on these blocks: gguf-py's
        for name in mats:
            t = g.tensors[name + ".weight"]
            want = quants.dequantize(np.asarray(g.raw(t.name)).reshape(t.shape[0], -1),
                                     gp.GGMLQuantizationType[t.type_name])
            assert np.array_equal(np.asarray(want, np.float32).view(np.uint32), g.dequantize(t.name).view(np.uint32))
    out = str(tmp_path / "k.cism")
    rep = convert(p, out, progress=None)
    for name, kt in types.items():
        assert rep.gguf_tensors[name] == (kt, rep.tensors[name], "requantized")
        assert rep.tensors[name] in ("q8", "q8x16")
    assert sum("requantized" in n for n in rep.notes) == len(K_TYPES)
    compare_all(gp, p, out, lossless_only=False)
    convert(p, str(tmp_path / "k32.cism"), dtype="f32", progress=None)
    compare_all(gp, p, str(tmp_path / "k32.cism"))
    with cism.Model(out) as m, m.session() as s:   # loads and runs
        s.eval([1, 2, 3])
        assert np.all(np.isfinite(s.logits()))


# ---------------------------------------------------------------------------
# the real model: SmolLM2-135M-Instruct, Q8_0 embedding + Q4_1 layers

@pytest.fixture(scope="module")
def real_imported(real_gguf, tmp_path_factory):
    out = str(tmp_path_factory.mktemp("real") / "smollm2.cism")
    return convert(real_gguf, out, progress=None)


def test_real_model_lossless(gp, real_gguf, real_imported):
    seen = compare_all(gp, real_gguf, real_imported.path)
    assert len(seen) == 272
    for name, (src, stored) in seen.items():
        want = {"Q8_0": ("q8", "q8x16"), "Q4_1": ("q4a", "q4ax16"), "F32": ("f32",)}[src]
        assert stored in want, (name, src, stored)
    assert seen["token_embd"] == ("Q8_0", "q8x16") and seen["blk.7.ffn_down"] == ("Q4_1", "q4ax16")
    assert fmt.CismFile(real_imported.path).tensors["blk.0.attn_q"].dtype == Q4AX16  # cism.h's CISM_DTYPE_Q4AX16
    assert all(how == "lossless" for _, _, how in real_imported.gguf_tensors.values())
    m = fmt.CismFile(real_imported.path).metadata
    assert m["general.architecture"] == "llama" and m["model.tied_embeddings"] == 1
    assert (m["model.dim"], m["model.n_layers"], m["model.n_heads"], m["model.n_kv_heads"]) == (576, 30, 9, 3)
    assert m["model.norm_eps"] == 1e-5 and m["model.rope_theta"] == 100000.0 and m["model.vocab_size"] == 49152
    assert m["tokenizer.chat_format"] == "chatml" and m["tokenizer.eos_id"] == 2 and m["tokenizer.add_bos"] == 0


def _chat(path: str, question: str, n: int = 24) -> str:
    import jinja2
    with cism.Model(path) as m:
        text = jinja2.Template(m.metadata["tokenizer.chat_template"]).render(
            messages=[{"role": "user", "content": question}], add_generation_prompt=True)
        ids = m.tokenizer.encode(text, add_bos=False)
        with m.session(kv_type="f32") as s:
            return m.tokenizer.decode(s.generate_ids(ids, n, cism.Sampler()))


def test_real_model_talks(real_gguf, real_imported, tmp_path):
    assert "5" in _chat(real_imported.path, "What is 2 plus 3?")
    f32 = str(tmp_path / "smollm2-f32.cism")
    rep = convert(real_gguf, f32, dtype="f32", progress=None)
    assert set(rep.tensors.values()) == {"f32"}
    assert "Paris" in _chat(f32, "What is the capital of France?")
    # the lossless import against its f32 reference on eval text: the same next token nearly always
    text = open(os.path.join(os.path.dirname(ROOT), "shared", "models", "eval", "war_and_peace_excerpt.txt"),
                encoding="utf-8").read()[:4000]
    with cism.Model(f32) as m:
        ids = m.tokenizer.encode(text)[:256]
    a, b = logits(real_imported.path, ids), logits(f32, ids)
    assert np.mean(a.argmax(1) == b.argmax(1)) > 0.9


TRICKY = ["", " ", "  ", "\n", "\n\n\n", "\t\t x", "a  b   c    d", "   leading", "trailing   ", "1", "12", "123",
          "1234567890", "3.14159265", "x=1,000,000.50", "2024-12-01T10:17:49Z", "phone: +1 (555) 123-4567",
          "héllo wörld", "naïve café", "日本語のテキストです。", "中文，标点！", "한국어 텍스트", "Ελληνικά",
          "русский текст", "עברית", "العربية", "👍🏽👨‍👩‍👧", "🙂x🙂", "\u200b\u200d", "\ufeffbom", "e\u0301",
          "I'm can't we'll they'd you're it's", "DON'T SHOUT", "<|im_start|>user\nhi<|im_end|>\n",
          "<|endoftext|>", "<|im_start|><|im_end|>", "x<|im_end|>y", "<|im_start", "def f(x):\n    return x ** 2\n",
          "if (a&&b) { c--; }", "https://example.com/a?b=c&d=e#f", "$$\\frac{a}{b}$$", "   \n  \n", "a\r\nb",
          "....!!!???", "ÀÉÎÕÜ àéîõü", "the the the the", "supercalifragilisticexpialidocious", "0x7FFF_FFFF"]


def tricky_strings():
    rng = random.Random(3)
    out = list(TRICKY)
    ranges = [(0x20, 0x7F), (0xA0, 0x250), (0x370, 0x500), (0x4E00, 0x4F00), (0x1F300, 0x1F650), (0x3040, 0x30FF)]
    pieces = [" ", "  ", "\n", "\t", "0", "42", "<|im_end|>", "'s", "."]
    for _ in range(300):
        s = []
        for _ in range(rng.randint(1, 12)):
            if rng.random() < 0.3:
                s.append(rng.choice(pieces))
            else:
                lo, hi = rng.choice(ranges)
                s.append("".join(chr(rng.randrange(lo, hi)) for _ in range(rng.randint(1, 6))))
        out.append("".join(s))
    return out


def test_real_model_tokenizer_equals_hf(real_imported, shared_models):
    from tokenizers import Tokenizer
    hf = Tokenizer.from_file(os.path.join(shared_models, "tokenizers", "smollm", "tokenizer.json"))
    with cism.Model(real_imported.path) as m:
        raw = m.metadata["tokenizer.hf_json"]
        built = Tokenizer.from_str(raw.decode("utf-8") if isinstance(raw, bytes) else raw)
        from cism.tokenizer import from_model
        ctok = from_model(m, "c")
        texts = tricky_strings()
        for f in sorted(os.listdir(os.path.join(shared_models, "eval"))):
            if f.endswith(".txt"):
                body = open(os.path.join(shared_models, "eval", f), encoding="utf-8").read()
                texts += [body] + [body[i:i + 1500] for i in range(0, len(body), 1500)][:40]
        n_tokens = 0
        for t in texts:
            want = hf.encode(t).ids
            assert built.encode(t).ids == want, repr(t[:80])
            assert ctok.encode(t, add_bos=False) == want, repr(t[:80])
            n_tokens += len(want)
        assert n_tokens > 20000
        assert ctok.decode(hf.encode("Hello, world! 123").ids) == "Hello, world! 123"


# ---------------------------------------------------------------------------
# files llama.cpp's own quantizer wrote (needs the compare extra: llama-cpp-python
# built from source; a heavy peer, so not installed in every CI run: run with
# `pip install './bindings_py[compare]'`, docs/GGUF.md records the last run)

LLAMA_FTYPES = ["Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q4_K_M", "Q5_K_M", "Q6_K"]
LOSSLESS_SRC = {"F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0"}


@pytest.mark.parametrize("ftype", LLAMA_FTYPES)
@pytest.mark.parametrize("model", MODELS)
def test_llama_model_quantize_files(gp, hf_to_gguf, tmp_path, model, ftype):
    pytest.importorskip("llama_cpp")
    from cism.llamacpp import quantize_gguf
    src = str(tmp_path / f"{ftype}.gguf")
    quantize_gguf(hf_to_gguf(model, "f32"), src, ftype)
    out = str(tmp_path / "m.cism")
    rep = convert(src, out, progress=None)
    seen = compare_all(gp, src, out, lossless_only=False, exact_types=LOSSLESS_SRC)
    types = {}
    for name, (src_t, _) in seen.items():
        types[src_t] = types.get(src_t, 0) + 1
        assert rep.gguf_tensors[name][2] == ("lossless" if src_t in LOSSLESS_SRC else "requantized"), name
    print(f"\n{model} {ftype}: llama.cpp wrote {types}; stored {sorted(set(rep.tensors.values()))}")
