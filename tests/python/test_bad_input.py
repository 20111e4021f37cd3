"""Bad input gets a clear exception, never a crash, and nothing the user had
is lost: converter refusals, corrupt checkpoints and .cism files, existing
outputs, failed conversions."""
from __future__ import annotations

import json
import os
import struct

import numpy as np
import pytest

import cism
from cism import format as fmt
from cism.convert import ConversionError, convert
from cism.safetensors import SafetensorsError
from helpers import make_model

safetensors_numpy = pytest.importorskip("safetensors.numpy")

D, F, V, L, H, KV = 32, 48, 64, 2, 4, 2
HD = D // H


def llama_tensors(bias=False, tied=False):
    rng = np.random.default_rng(0)
    t = {"model.embed_tokens.weight": rng.normal(0, 0.1, (V, D)), "model.norm.weight": np.ones(D)}
    if not tied:
        t["lm_head.weight"] = rng.normal(0, 0.1, (V, D))
    for i in range(L):
        p = f"model.layers.{i}."
        t.update({p + "input_layernorm.weight": np.ones(D), p + "post_attention_layernorm.weight": np.ones(D),
                  p + "self_attn.q_proj.weight": rng.normal(0, 0.1, (H * HD, D)),
                  p + "self_attn.k_proj.weight": rng.normal(0, 0.1, (KV * HD, D)),
                  p + "self_attn.v_proj.weight": rng.normal(0, 0.1, (KV * HD, D)),
                  p + "self_attn.o_proj.weight": rng.normal(0, 0.1, (D, H * HD)),
                  p + "mlp.gate_proj.weight": rng.normal(0, 0.1, (F, D)),
                  p + "mlp.up_proj.weight": rng.normal(0, 0.1, (F, D)),
                  p + "mlp.down_proj.weight": rng.normal(0, 0.1, (D, F))})
        if bias:
            t.update({p + "self_attn.q_proj.bias": np.zeros(H * HD), p + "self_attn.k_proj.bias": np.zeros(KV * HD),
                      p + "self_attn.v_proj.bias": np.zeros(KV * HD)})
    return {k: np.asarray(v, dtype=np.float32) for k, v in t.items()}


def hf_folder(path, arch="LlamaForCausalLM", tensors=None, **cfg):
    os.makedirs(path, exist_ok=True)
    config = dict(architectures=[arch], hidden_size=D, intermediate_size=F, num_hidden_layers=L,
                  num_attention_heads=H, num_key_value_heads=KV, vocab_size=V, max_position_embeddings=128,
                  rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=False, hidden_act="silu")
    config.update(cfg)
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(config, f)
    safetensors_numpy.save_file(tensors if tensors is not None else llama_tensors(), os.path.join(path, "model.safetensors"))
    return str(path)


def assert_nothing_written(out):
    assert not os.path.exists(out)
    folder, name = os.path.split(out)
    assert not [n for n in os.listdir(folder) if n.startswith(name + ".") and n.endswith(fmt.PARTIAL_SUFFIX)]


# ---- converter refusals ------------------------------------------------------------
@pytest.mark.parametrize("cfg,tensors,message", [
    (dict(arch="GPT2LMHeadModel"), None, "architecture 'GPT2LMHeadModel' is not supported"),
    (dict(arch="MistralForCausalLM", num_local_experts=8, num_experts_per_tok=2), None, "mixture-of-experts"),
    (dict(arch="Qwen2ForCausalLM", num_experts=4), None, "mixture-of-experts"),
    (dict(attention_bias=True), llama_tensors(bias=True), "attention biases"),
    (dict(), llama_tensors(bias=True), "biases are not supported"),
    (dict(rope_scaling={"rope_type": "yarn", "factor": 4.0}), None, "RoPE scaling type 'yarn' is not supported"),
    (dict(rope_parameters={"rope_type": "dynamic", "factor": 2.0, "rope_theta": 10000.0}), None, "'dynamic'"),
    (dict(hidden_act="gelu"), None, "activation 'gelu'"),
    (dict(num_key_value_heads=3), None, "not a multiple"),
    (dict(intermediate_size=F + 1), None, "config.json implies"),
    (dict(), {k: v for k, v in llama_tensors().items() if "layers.1.mlp.up" not in k}, "missing tensors"),
])
def test_converter_refuses(tmp_path, cfg, tensors, message):
    arch = cfg.pop("arch", "LlamaForCausalLM")
    src = hf_folder(tmp_path / "src", arch, tensors, **cfg)
    out = str(tmp_path / "out.cism")
    with pytest.raises(ConversionError, match=message.replace("(", r"\(").replace(")", r"\)")):
        convert(src, out, progress=None)
    assert_nothing_written(out)


def test_cli_reports_refusal(tmp_path, run_cli):
    src = hf_folder(tmp_path / "src", "PhiForCausalLM")
    out = str(tmp_path / "o.cism")
    p = run_cli("convert", src, "-o", out, check=False)
    assert p.returncode == 1 and "cism: error: architecture 'PhiForCausalLM' is not supported" in p.stderr
    assert "Traceback" not in p.stderr
    assert_nothing_written(out)


@pytest.mark.parametrize("arch,cfg", [("MistralForCausalLM", dict(sliding_window=16)),
                                      ("Qwen2ForCausalLM", dict(use_sliding_window=True, sliding_window=16))])
def test_sliding_window_smaller_than_context(tmp_path, arch, cfg):
    """The window is recorded at conversion and computed: sessions longer than
    it run (parity with transformers: test_parity_families.py), and its
    logits equal those without a window up to the window's length, not past
    it. A window as long as the context is no limit at all."""
    tensors = llama_tensors(bias=arch.startswith("Qwen2"))
    src = hf_folder(tmp_path / "src", arch, tensors, **cfg)
    out = str(tmp_path / "w.cism")
    convert(src, out, progress=None)
    src2 = hf_folder(tmp_path / "src2", arch, tensors, **{**cfg, "sliding_window": 128})
    convert(src2, str(tmp_path / "w2.cism"), progress=None)
    logits = []
    for path in (out, str(tmp_path / "w2.cism")):
        with cism.Model(path) as m:
            assert (m.metadata.get("model.sliding_window") == 16) == (path == out)
            with m.session(kv_type="f32", logits_all=True) as s:
                s.eval([3 + i % 50 for i in range(40)])
                logits.append(s.all_logits())
    np.testing.assert_array_equal(logits[0][:16], logits[1][:16])
    assert np.abs(logits[0][16:] - logits[1][16:]).max() > 1e-4


def test_missing_config_and_folder(tmp_path):
    os.makedirs(tmp_path / "empty")
    with pytest.raises(ConversionError, match="no config.json"):
        convert(str(tmp_path / "empty"), str(tmp_path / "o.cism"), progress=None)
    with pytest.raises(FileNotFoundError, match="no such file or folder"):
        convert(str(tmp_path / "nothing"), str(tmp_path / "o.cism"), progress=None)
    src0 = hf_folder(tmp_path / "src0")
    with pytest.raises(FileNotFoundError, match="the folder .*no-dir does not exist"):
        convert(src0, str(tmp_path / "no-dir" / "o.cism"), progress=None)
    with pytest.raises(IsADirectoryError, match="it is a folder"):
        convert(src0, str(tmp_path), progress=None)
    assert not os.path.exists(tmp_path / "no-dir")
    # an output that is one of the inputs is refused even with --force (the checkpoint's own
    # safetensors was replaced by the .cism)
    src = hf_folder(tmp_path / "own")
    for victim in ("model.safetensors", "config.json"):
        before = open(os.path.join(src, victim), "rb").read()
        with pytest.raises(ConversionError, match="write the .cism to another path"):
            convert(src, os.path.join(src, victim), overwrite=True, progress=None)
        assert open(os.path.join(src, victim), "rb").read() == before
    inside = os.path.join(src, "model.cism")   # a .cism beside the checkpoint is an output like any other
    convert(src, inside, progress=None)
    convert(src, inside, overwrite=True, progress=None)
    # a .cism file given as the source: said so, nothing written (it read as a bad llama2.c header)
    done = str(tmp_path / "done.cism")
    convert(hf_folder(tmp_path / "src"), done, progress=None)
    with pytest.raises(ConversionError, match="already a .cism file: nothing to convert"):
        convert(done, str(tmp_path / "again.cism"), progress=None)
    with pytest.raises(ConversionError, match="is the checkpoint being converted"):
        convert(done, done, overwrite=True, progress=None)
    text = tmp_path / "calib.txt"
    text.write_text("Once upon a time. " * 50)
    with pytest.raises(ConversionError, match="is this conversion's calibration text"):
        convert(src, str(text), overwrite=True, progress=None, quant="q6", calibrate=str(text))
    assert text.read_text() == "Once upon a time. " * 50 and open(done, "rb").read(4) == b"CISM"
    assert not os.path.exists(tmp_path / "again.cism")


# ---- corrupt checkpoints ------------------------------------------------------------
def test_truncated_and_corrupt_safetensors(tmp_path):
    src = hf_folder(tmp_path / "src")
    st = os.path.join(src, "model.safetensors")
    blob = open(st, "rb").read()
    out = str(tmp_path / "o.cism")
    cases = [
        (blob[: len(blob) - 100], "inconsistent offsets/shape \\(truncated file\\?\\)"),
        (blob[:5], "too short"),
        (struct.pack("<Q", 10 ** 12) + blob[8:], "header length .* is impossible"),
        (blob[:8] + b"{not json" + blob[17:], "not valid JSON"),
        (blob.replace(b'"F32"', b'"Q99"', 1), "unsupported dtype 'Q99'"),
    ]
    for data, message in cases:
        with open(st, "wb") as f:
            f.write(data)
        with pytest.raises(SafetensorsError, match=message):
            convert(src, out, progress=None)
        assert_nothing_written(out)


def llama2c_file(path, truncate=0):
    """A legacy (v0) llama2.c checkpoint: 7 int32 header fields, then float32 weights."""
    dim, hidden, layers, heads, kv, vocab, seq = 8, 16, 1, 2, 2, 10, 16
    n = vocab * dim + layers * (2 * dim + 4 * dim * dim + 3 * hidden * dim) + dim + seq * (dim // heads)
    data = struct.pack("<7i", dim, hidden, layers, heads, kv, vocab, seq)
    data += np.random.default_rng(1).normal(0, 0.1, n).astype("<f4").tobytes()
    with open(path, "wb") as f:
        f.write(data[: len(data) - truncate])
    return str(path)


def test_llama2c_checks(tmp_path):
    good = llama2c_file(tmp_path / "good.bin")
    convert(good, str(tmp_path / "good.cism"), progress=None)
    with cism.Model(str(tmp_path / "good.cism")) as m:
        assert m.vocab_size == 10 and m.dim == 8
    out = str(tmp_path / "o.cism")
    with pytest.raises(ConversionError, match="truncated"):
        convert(llama2c_file(tmp_path / "cut.bin", truncate=40), out, progress=None)
    with open(tmp_path / "junk.bin", "wb") as f:
        f.write(b"\xff" * 100)
    with pytest.raises(ConversionError, match="not plausible"):
        convert(str(tmp_path / "junk.bin"), out, progress=None)
    with open(tmp_path / "tok.bin", "wb") as f:
        f.write(struct.pack("<i", 8) + struct.pack("<fi", 0.0, 1) + b"a")
    with pytest.raises(ConversionError, match="fewer than the model's 10 tokens"):
        convert(good, out, tokenizer=str(tmp_path / "tok.bin"), progress=None)
    assert_nothing_written(out)


# ---- outputs are never lost ---------------------------------------------------------
def test_existing_output_is_kept(tmp_path, run_cli):
    src = hf_folder(tmp_path / "src")
    out = str(tmp_path / "o.cism")
    with open(out, "wb") as f:
        f.write(b"precious")
    with pytest.raises(FileExistsError, match="already exists"):
        convert(src, out, progress=None)
    p = run_cli("convert", src, "-o", out, check=False)
    assert p.returncode == 1 and "already exists" in p.stderr and "--force" in p.stderr
    assert open(out, "rb").read() == b"precious"
    run_cli("convert", src, "-o", out, "--force", "-q")
    with cism.Model(out) as m:
        assert m.architecture == "llama"


def test_failed_conversion_leaves_no_partial_file(tmp_path):
    t = llama_tensors()
    t["model.layers.1.post_attention_layernorm.weight"][3] = np.nan  # found while writing
    src = hf_folder(tmp_path / "src", tensors=t)
    out = str(tmp_path / "o.cism")
    with pytest.raises(ConversionError, match="NaN"):
        convert(src, out, progress=None)
    assert_nothing_written(out)
    assert os.listdir(tmp_path) == ["src"]


# ---- corrupt .cism files: the C loader's message, as an exception ---------------------
@pytest.fixture(scope="module")
def good_cism(tmp_path_factory):
    return make_model(tmp_path_factory.mktemp("bad") / "good.cism", tokenizer=False)


def _variant(tmp_path, good, name, edit):
    data = bytearray(open(good, "rb").read())
    data = edit(data)
    p = str(tmp_path / name)
    with open(p, "wb") as f:
        f.write(data)
    return p


def _sealed(d):
    """d with its version 3 header checksum recomputed (an edit the loader should
    see past the checksum)."""
    end = struct.unpack_from("<Q", d, 32)[0] + struct.unpack_from("<Q", d, 40)[0]
    return d[:fmt.HEADER_CRC_AT] + struct.pack("<I", fmt.header_crc(d[:end])) + d[fmt.HEADER_CRC_AT + 4:]


def test_corrupt_cism_files(tmp_path, good_cism):
    size = os.path.getsize(good_cism)
    cases = [
        ("empty", lambda d: b"", cism.CismIOError, "is empty"),
        ("magic", lambda d: b"XISM" + d[4:], cism.FormatError, "magic"),
        ("gguf", lambda d: b"GGUF" + d[4:], cism.FormatError, "GGUF"),
        ("version", lambda d: d[:8] + struct.pack("<I", 7) + d[12:], cism.UnsupportedError, "version 7"),
        # (resealed: the header checksum would refuse the edit first)
        ("data past end", lambda d: _sealed(d[:56] + struct.pack("<Q", 2 * size) + d[64:]), cism.FormatError, "truncated"),
        ("edited header", lambda d: d[:56] + struct.pack("<Q", 2 * size) + d[64:], cism.FormatError, "header checksum"),
        ("meta past end", lambda d: d[:24] + struct.pack("<Q", 2 ** 62) + d[32:], cism.FormatError, ""),
        ("half", lambda d: d[: size // 2], cism.FormatError, ""),
        ("header only", lambda d: d[:64], cism.FormatError, ""),
    ]
    for name, edit, exc, needle in cases:
        p = _variant(tmp_path, good_cism, name.replace(" ", "_"), edit)
        with pytest.raises(exc) as ei:
            cism.Model(p)
        assert needle in str(ei.value) and p in str(ei.value), (name, str(ei.value))
        assert isinstance(ei.value, OSError if exc is cism.CismIOError else ValueError)
    # every cut of the header, metadata and directory: an exception, never a crash
    data = open(good_cism, "rb").read()
    for cut in range(1, 1600, 7):
        p = str(tmp_path / "cut.cism")
        with open(p, "wb") as f:
            f.write(data[:cut])
        with pytest.raises(cism.FormatError):
            cism.Model(p)


def test_inconsistent_cism_files(tmp_path):
    def write(name, meta_edit=None, shape_edit=None):
        from cism.convert import expected_tensors
        from helpers import tiny_preset
        meta = tiny_preset(tokenizer=False).metadata()
        if meta_edit:
            meta_edit(meta)
        w = fmt.Writer(meta)
        shapes = expected_tensors(tiny_preset(tokenizer=False).metadata())
        for n, s in shapes.items():
            s = shape_edit(n, s) if shape_edit else s
            w.add(n, fmt.DTYPE_F32, s, int(np.prod(s)) * 4)
        p = str(tmp_path / name)
        with w.open(p) as f:
            for spec in w.tensors:
                f.write_tensor(spec.name, np.ones(spec.shape, "<f4"))
        return p

    with pytest.raises(cism.UnsupportedError, match="architecture 'gpt2' is not supported"):
        cism.Model(write("arch.cism", lambda m: m.update({"general.architecture": "gpt2"})))
    with pytest.raises(cism.FormatError, match="tensor 'blk.1.attn_q' should have shape"):
        cism.Model(write("shape.cism", shape_edit=lambda n, s: (s[0] + 2, s[1]) if n == "blk.1.attn_q" else s))
    with pytest.raises(cism.FormatError, match="'model.n_layers' is missing"):
        cism.Model(write("nolayers.cism", lambda m: m.pop("model.n_layers")))
    with pytest.raises(cism.UnsupportedError, match="RoPE scaling type 'ntk'"):
        cism.Model(write("rope.cism", lambda m: m.update({"model.rope_scaling.type": "ntk"})))
    with pytest.raises(cism.FormatError, match="vocab"):
        cism.Model(write("vocab.cism", lambda m: m.update({"model.vocab_size": 2 ** 40})))


# ---- text and CLI usage errors ---------------------------------------------------------
def test_cli_usage_errors(tmp_path, good_cism, run_cli):
    p = run_cli("generate", "-m", good_cism, "-p", "hello", check=False)
    assert p.returncode == 1 and "has no tokenizer" in p.stderr and "Traceback" not in p.stderr
    p = run_cli("generate", "-m", str(tmp_path / "missing.cism"), "-p", "x", check=False)
    assert p.returncode == 1 and "missing.cism" in p.stderr
    p = run_cli("generate", "-m", good_cism, check=False)
    assert p.returncode == 1 and "no tokenizer" in p.stderr
    p = run_cli("bench", "--preset", "no-such", check=False)
    assert p.returncode == 2 and "invalid choice" in p.stderr


def test_cli_context_overflow(tmp_path, run_cli):
    path = make_model(tmp_path / "t.cism")
    p = run_cli("generate", "-m", path, "-p", "x" * 40, "-c", "16", check=False)
    assert p.returncode == 1 and "room for 16" in p.stderr and p.stdout == ""
    # the context end is a normal stop (finish reason "length"), not an error
    p = run_cli("generate", "-m", path, "-p", "ab", "-c", "8", "-n", "20", "--ignore-eos", check=False)
    assert p.returncode == 0 and "stop: length (context full)" in p.stderr
