"""LFM2 (Lfm2ForCausalLM): gated short-convolution layers between GQA attention
layers with q/k norms, against transformers (eager, fp32) on tiny random
checkpoints made here. Several configs (odd widths, GQA, MQA and MHA, tied and
untied heads, conv kernels of 2 to 4 taps, with and without the conv biases,
MLP widths as Lfm2MLP sizes them; norm, conv and bias weights drawn at random),
prompts of 40+ tokens: max |logit error| < 1e-4 on every kernel tier this CPU
runs, the same 32 greedy tokens, the same bits for any chunking and 1 or 2
threads. Then the session state of the conv layers: rewind to any point, save
and load, cism.Batch, and q8 / 4bit conversions (conv kernels stay f32)."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import cism  # noqa: E402
from cism.convert import convert  # noqa: E402

from test_parity_transformers import _randomize, hf_logits_and_greedy, N_GEN  # noqa: E402

VOCAB = 320
N_PROMPT = 44
LIMIT = 1e-4

BASE = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=160, num_hidden_layers=4, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=256, norm_eps=1e-5, bos_token_id=1, eos_token_id=2,
            pad_token_id=0, block_multiple_of=16)

CASES = {
    # tied head, GQA, kernel 3, no biases, auto-adjusted MLP width (2/3 of 160 rounded up to 16: 112)
    "lfm2": dict(layer_types=["conv", "conv", "full_attention", "conv"]),
    # odd width, MQA, untied, kernel 4, every conv bias, the MLP width as given
    "lfm2-mqa-odd-untied-bias": dict(
        hidden_size=72, intermediate_size=136, num_hidden_layers=3, num_attention_heads=3, num_key_value_heads=1,
        layer_types=["full_attention", "conv", "conv"], tie_word_embeddings=False, conv_bias=True, conv_L_cache=4,
        block_auto_adjust_ff_dim=False, norm_eps=1e-6),
    # MHA, kernel 2, layer types from full_attn_idxs, MLP multiplier 1.5 rounded to 32
    "lfm2-mha-k2-idxs": dict(
        hidden_size=48, num_hidden_layers=5, num_attention_heads=2, num_key_value_heads=2, full_attn_idxs=[1, 4],
        conv_L_cache=2, block_ffn_dim_multiplier=1.5, block_multiple_of=32, conv_bias=True,
        rope_parameters={"rope_type": "default", "rope_theta": 5000.0}),
    # no attention layer at all: no KV cache
    "lfm2-conv-only": dict(num_hidden_layers=2, full_attn_idxs=[], tie_word_embeddings=False),
}


def make(case: str, folder, seed: int):
    cfg = transformers.Lfm2Config(**{**BASE, **CASES[case]})
    cfg.architectures = ["Lfm2ForCausalLM"]
    torch.manual_seed(seed)
    model = transformers.Lfm2ForCausalLM._from_config(cfg, attn_implementation="eager", dtype=torch.float32)
    _randomize(model, seed)
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():  # kernels large enough that every tap matters
        for name, p in model.named_parameters():
            if name.endswith("conv.conv.weight"):
                p.copy_(0.6 * torch.randn(p.shape, generator=g))
    model.save_pretrained(str(folder), safe_serialization=True)
    ref = transformers.Lfm2ForCausalLM.from_pretrained(str(folder), attn_implementation="eager", dtype=torch.float32)
    ref.config.use_cache = False  # full forwards only (transformers' cache needs an attention layer)
    return ref.eval()


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    return tmp_path_factory.mktemp("lfm2")


_built = {}


def built(case, workdir):
    """(reference model, .cism path) of a case, made once per module."""
    if case not in _built:
        folder = workdir / case
        ref = make(case, folder, seed=sum(map(ord, case)))
        out = str(workdir / f"{case}.cism")
        convert(str(folder), out, progress=None)
        _built[case] = (ref, out, folder)
    return _built[case]


def prompt_of(n, seed=11):
    return np.random.default_rng(seed).integers(3, VOCAB, n).tolist()


def all_logits(m, prompt, **kw):
    kw.setdefault("kv_type", "f32")
    with m.session(logits_all=True, **kw) as s:
        s.eval(prompt)
        return s.all_logits()


def evals(m, parts, **kw):
    """The logits of every token of `parts` (token lists), each part one eval."""
    kw.setdefault("kv_type", "f32")
    with m.session(logits_all=True, **kw) as s:
        out = []
        for p in parts:
            s.eval(p)
            out.append(s.all_logits())
        return np.concatenate(out)


@pytest.mark.parametrize("case", list(CASES))
def test_lfm2_parity(case, workdir, record_parity):
    ref, out, _ = built(case, workdir)
    prompt = prompt_of(N_PROMPT)
    hf_logits, hf_greedy, margin = hf_logits_and_greedy(ref, prompt)
    with cism.Model(out) as m:
        assert m.architecture == "lfm2"
        kinds = [k.decode() for k in m.metadata["model.layer_types"]]
        assert kinds == ["attention" if t == "full_attention" else "shortconv" for t in ref.config.layer_types]
        assert m.ffn_dim == ref.model.layers[0].feed_forward.w1.out_features
        errs = {}
        for tier in cism.kernel_tiers():
            errs[tier] = float(np.abs(all_logits(m, prompt, kernel_tier=tier) - hf_logits).max())
        with m.session(kv_type="f32") as s:
            greedy = s.generate_ids(prompt, N_GEN, cism.Sampler(), ignore_eos=True)
        # one path per position: at once, token by token, in chunks, on 1 or 2 threads, in several evals
        base = all_logits(m, prompt, n_threads=1)
        for kw in (dict(n_threads=2), dict(n_threads=1, n_batch=1), dict(n_threads=2, n_batch=5),
                   dict(n_threads=2, n_batch=1)):
            np.testing.assert_array_equal(all_logits(m, prompt, **kw), base, err_msg=f"{case} {kw}")
        np.testing.assert_array_equal(evals(m, [prompt[:1], prompt[1:3], prompt[3:20], prompt[20:]], n_threads=2),
                                      base, err_msg="several evals")
    err = max(errs.values())
    same = greedy == hf_greedy
    record_parity(f"tiny {case}", "lfm2", "f32", err, "same" if same else f"DIFFERENT (min HF top-2 margin {margin:.2e})")
    print(f"{case}: max |logit error| per tier {errs}")
    assert err < LIMIT, f"{case}: max |logit error| {errs}"
    assert np.abs(hf_logits).max() > 0.5, "logits too flat for a meaningful comparison"
    assert same, f"{case}: greedy {greedy} != HF {hf_greedy} (min HF margin {margin:.2e})"


def test_conv_matters(workdir):
    """The convolution's earlier taps change the logits (a model that ignored
    the conv state past the current token could not pass the parity above)."""
    ref, _, folder = built("lfm2", workdir)
    cut = transformers.Lfm2ForCausalLM.from_pretrained(str(folder), attn_implementation="eager", dtype=torch.float32).eval()
    prompt = torch.tensor([prompt_of(N_PROMPT)])
    with torch.no_grad():
        for layer in cut.model.layers:
            if not layer.is_attention_layer:
                layer.conv.conv.weight[:, :, :-1] = 0
        a, b = ref(prompt).logits[0], cut(prompt).logits[0]
    assert (a - b).abs().max().item() > 1e-2


@pytest.mark.parametrize("case", ["lfm2", "lfm2-mqa-odd-untied-bias"])
@pytest.mark.parametrize("kv_type", ["f32", "f16"])
def test_rewind(case, kv_type, workdir):
    """A+B, rewind to len(A), C: the same bits as A+C in a fresh session; also
    rewinding into the middle of an eval, to 0..2 and repeatedly."""
    _, out, _ = built(case, workdir)
    a, b, c = prompt_of(23, 1), prompt_of(17, 2), prompt_of(19, 3)
    with cism.Model(out) as m:
        fresh = evals(m, [a, c], kv_type=kv_type, n_batch=8)
        with m.session(logits_all=True, kv_type=kv_type, n_batch=8) as s:
            s.eval(a + b)
            s.rewind(len(a))
            s.eval(c)
            np.testing.assert_array_equal(s.all_logits(), fresh[len(a):])
            for keep in (len(a) + 5, 2, 1, 0, len(a) - 1):
                s.rewind(keep)
                s.eval((a + c)[keep:])
                np.testing.assert_array_equal(s.all_logits(), fresh[keep:], err_msg=f"rewind to {keep}")


def test_save_load(workdir, tmp_path):
    _, out, _ = built("lfm2-mqa-odd-untied-bias", workdir)
    a, b = prompt_of(30, 4), prompt_of(9, 5)
    with cism.Model(out) as m:
        for kv_type in ("f32", "f16"):
            ref = evals(m, [a, b], kv_type=kv_type)
            path = tmp_path / f"state-{kv_type}.bin"
            with m.session(kv_type=kv_type) as s:
                s.eval(a)
                s.save(str(path))
            with m.session(kv_type=kv_type, logits_all=True, n_ctx=64) as s:
                s.load(str(path))
                assert s.n_past == len(a) and s.tokens() == a
                np.testing.assert_array_equal(s.logits(), ref[len(a) - 1])
                s.eval(b)
                np.testing.assert_array_equal(s.all_logits(), ref[len(a):])
        # the conv section is checked: cut or forged files are refused
        data = path.read_bytes()
        import struct
        import zlib
        bad = bytearray(data)
        struct.pack_into("<I", bad, 12, struct.unpack_from("<I", bad, 12)[0] & ~2)  # drop the layer-states flag
        struct.pack_into("<I", bad, len(bad) - 4, zlib.crc32(bytes(bad[:-4])))
        (tmp_path / "bad.bin").write_bytes(bytes(bad))
        with m.session(kv_type="f16") as s:
            with pytest.raises(cism.InvalidArgumentError, match="short-convolution"):
                s.load(str(tmp_path / "bad.bin"))
            assert s.n_past == 0


def test_memory_counts_conv_cache(workdir):
    _, out, _ = built("lfm2", workdir)
    with cism.Model(out) as m:
        hp = m.hparams()
        n_conv = m.metadata["model.layer_types"].count(b"shortconv")
        from cism._lib import lib
        with m.session(n_ctx=64, n_batch=16, kv_type="f32", n_threads=1) as s64, \
                m.session(n_ctx=128, n_batch=16, kv_type="f32", n_threads=1) as s128:
            grow = lib.cism_session_memory_bytes(s128.handle) - lib.cism_session_memory_bytes(s64.handle)
        n_attn = hp["n_layers"] - n_conv  # only the attention layers have a KV cache
        need = 2 * 64 * n_attn * hp["n_kv_heads"] * hp["head_dim"] * 4 + 64 * hp["dim"] * n_conv * 4
        assert need <= grow < need + 8192, (grow, need)


def test_batch_matches_alone(workdir):
    from test_batch import _check_same
    _, out, _ = built("lfm2-mqa-odd-untied-bias", workdir)
    prompts = [prompt_of(n, 20 + n) for n in (3, 11, 20, 1)]
    with cism.Model(out) as m:
        for tier in cism.kernel_tiers():
            for threads in (1, 2):
                _check_same(m, prompts, 10, threads, stagger=1, n_ctx=96, kernel_tier=tier, kv_type="f32")
        _check_same(m, prompts[:2], 8, 2, stagger=0, n_ctx=96)  # f16 conv cache


def _kld(p_logits, q_logits):
    p = np.exp(p_logits - p_logits.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    q = np.exp(q_logits - q_logits.max(-1, keepdims=True))
    q /= q.sum(-1, keepdims=True)
    return float(np.mean(np.sum(p * (np.log(p) - np.log(q)), -1)))


@pytest.mark.parametrize("recipe", ["q8", "4bit", "mix"])
def test_quantized(recipe, workdir):
    """q8 / 4bit / mix conversions load and run; the conv kernels and biases stay
    f32, the conv projections are quantized; the same bits for any chunking."""
    case = "lfm2"
    _, out, folder = built(case, workdir)
    qout = str(workdir / f"{case}-{recipe}.cism")
    rep = convert(str(folder), qout, quant=recipe, progress=None)
    assert rep.tensors["blk.0.conv_kernel"] == "f32"
    assert rep.tensors["blk.0.conv_in"] != "f32" and rep.tensors["blk.0.conv_out"] != "f32"
    prompt = prompt_of(N_PROMPT)
    with cism.Model(out) as m:
        f32 = all_logits(m, prompt)
    with cism.Model(qout) as m:
        got = all_logits(m, prompt)
        for tier in cism.kernel_tiers():
            at_once = all_logits(m, prompt, kernel_tier=tier, n_threads=1)
            np.testing.assert_array_equal(all_logits(m, prompt, kernel_tier=tier, n_batch=5, n_threads=2), at_once)
            assert float(np.abs(at_once - got).max()) < 0.05
        flt = all_logits(m, prompt, act_quant=False)
    diff, kld = float(np.abs(got - f32).max()), _kld(f32, got)
    print(f"{recipe}: max |logit diff| vs f32 {diff:.4f}, KLD {kld:.5f} (float activations: "
          f"{float(np.abs(flt - f32).max()):.4f}, {_kld(f32, flt):.5f})")
    assert kld < (0.01 if recipe == "q8" else 0.2)


def test_gguf_import(llama_cpp_tools, shared_models, tmp_path):
    """llama.cpp's convert_hf_to_gguf.py (lfm2) on a tiny checkpoint with the SmolLM
    tokenizer, imported: the same bits as the Hugging Face import of the folder
    (f32), and f16 / q8_0 files load and run close to it."""
    import os
    import shutil
    import subprocess
    import sys
    folder = tmp_path / "hf"
    tok = os.path.join(shared_models, "tokenizers", "smollm")
    cfg = transformers.Lfm2Config(**{**BASE, **CASES["lfm2"], "vocab_size": 49152, "conv_bias": False,
                                     "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0})
    cfg.architectures = ["Lfm2ForCausalLM"]
    torch.manual_seed(0)
    model = transformers.Lfm2ForCausalLM._from_config(cfg, attn_implementation="eager", dtype=torch.float32)
    _randomize(model, 0)
    model.save_pretrained(str(folder), safe_serialization=True)
    for name in os.listdir(tok):
        shutil.copy(os.path.join(tok, name), folder / name)
    stub = tmp_path / "stub"
    stub.mkdir()
    (stub / "sentencepiece.py").write_text("class SentencePieceProcessor:\n    pass\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.join(llama_cpp_tools, "gguf-py"), str(stub)]),
               NO_LOCAL_GGUF="")
    hf = str(tmp_path / "hf.cism")
    convert(str(folder), hf, progress=None)
    prompt = np.random.default_rng(5).integers(0, 49152, N_PROMPT).tolist()
    with cism.Model(hf) as m:
        want = all_logits(m, prompt)
    for outtype in ("f32", "f16", "q8_0"):
        g = str(tmp_path / f"m.{outtype}.gguf")
        p = subprocess.run([sys.executable, os.path.join(llama_cpp_tools, "convert_hf_to_gguf.py"), str(folder),
                            "--outtype", outtype, "--outfile", g], env=env, capture_output=True, text=True, timeout=600)
        assert p.returncode == 0, p.stderr[-3000:]
        out = str(tmp_path / f"g.{outtype}.cism")
        rep = convert(g, out, progress=None)
        assert rep.tensors["blk.1.conv_kernel"] == "f32"
        if outtype == "q8_0":  # llama.cpp's Q8_0 blocks kept as they are
            assert rep.tensors["blk.1.conv_in"].startswith("q8") and rep.tensors["blk.2.attn_q"].startswith("q8")
        with cism.Model(out) as m:
            assert m.architecture == "lfm2"
            assert m.metadata["model.layer_types"] == [b"shortconv", b"shortconv", b"attention", b"shortconv"]
            got = all_logits(m, prompt)
            assert m.tokenizer.encode("Hello world", add_bos=False) == [19556, 905]
        diff = float(np.abs(got - want).max())
        print(f"GGUF {outtype}: max |logit diff| vs the HF import {diff:.2e}")
        if outtype == "f32":
            np.testing.assert_array_equal(got, want)
        else:
            assert diff < (0.05 if outtype == "f16" else 0.5)


@pytest.mark.parametrize("field, value, what", [
    ("layer_types", ["conv", "sliding_attention", "conv", "conv"], "layer_types\\[1\\]"),
    ("layer_types", ["conv", "conv"], "4 entries"),
    ("conv_L_cache", 0, "conv_L_cache"),
    ("conv_L_cache", 99, "conv_L_cache"),
    ("full_attn_idxs", [7], "full_attn_idxs"),
])
def test_config_refusals(field, value, what):
    from cism.convert import hparams_from_config
    from cism.hf_config import ConversionError
    cfg = dict(BASE, architectures=["Lfm2ForCausalLM"], layer_types=["conv", "conv", "full_attention", "conv"])
    if field == "full_attn_idxs":
        del cfg["layer_types"]
    cfg[field] = value
    with pytest.raises(ConversionError, match=what):
        hparams_from_config(cfg)


def test_config_sizes_as_transformers():
    """The converter's MLP width, tie and RoPE base defaults are Lfm2Config's / Lfm2MLP's."""
    from cism.convert import hparams_from_config
    for extra in (dict(), dict(block_ff_dim=1000, intermediate_size=None), dict(block_ffn_dim_multiplier=None),
                  dict(block_auto_adjust_ff_dim=False), dict(block_ffn_dim_multiplier=1.3, block_multiple_of=48),
                  dict(tie_embedding=False), dict(tie_word_embeddings=False)):
        raw = {k: v for k, v in dict(BASE, **extra).items() if v is not None}
        cfg = transformers.Lfm2Config(**raw)
        meta = hparams_from_config(dict(raw, architectures=["Lfm2ForCausalLM"]))
        assert meta["model.ffn_dim"] == transformers.models.lfm2.modeling_lfm2.Lfm2MLP(cfg).w1.out_features, extra
        assert meta["model.tied_embeddings"] == int(cfg.tie_word_embeddings), extra
        assert meta["model.rope_theta"] == cfg.rope_parameters["rope_theta"] == 1000000.0
        assert meta["model.norm_eps"] == cfg.norm_eps


def test_speculative_greedy_identical(workdir):
    """Speculative decoding (rollback by rewind) gives plain greedy's tokens, session
    tokens and logits, with prompt lookup and with a q8 LFM2 draft."""
    from cism.speculative import Speculator
    _, out, folder = built("lfm2-mqa-odd-untied-bias", workdir)
    draft = str(workdir / "spec-draft-q8.cism")
    convert(str(folder), draft, quant="q8", progress=None)
    ids = prompt_of(12, 7) * 3
    with cism.Model(out) as m, cism.Model(draft) as q:
        for threads in (1, 2):
            with m.session(n_threads=threads) as s:
                want = s.generate_ids(ids, 40, cism.Sampler(), ignore_eos=True)
                toks, logits = s.tokens(), s.logits()
            with Speculator("lookup", adaptive=1) as lk, Speculator(q, target=m, n_threads=threads, adaptive=1) as dr:
                for spec in (lk, dr):
                    with m.session(n_threads=threads) as s:
                        got = spec.generate_ids(s, ids, 40, ignore_eos=True)
                        assert got == want, f"{spec.kind} threads {threads}"
                        assert s.tokens() == toks and np.array_equal(s.logits(), logits)
                assert dr.stats["accepted"] > 0
