"""The Python API on small synthetic models: errors, handles, metadata,
logits, sessions, sampler determinism, streaming and cancellation."""
from __future__ import annotations

import gc
import threading
import time

import numpy as np
import pytest

import cism
from cism import _lib
from cism.errors import error_for
from helpers import ASCII_VOCAB, BYTE_VOCAB, make_model


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return make_model(tmp_path_factory.mktemp("api") / "tiny.cism")


@pytest.fixture
def model(tiny):
    with cism.Model(tiny) as m:
        yield m


# ---- errors ---------------------------------------------------------------------
def test_status_classes():
    classes = {
        _lib.ERR_INVALID_ARG: (cism.InvalidArgumentError, ValueError),
        _lib.ERR_IO: (cism.CismIOError, OSError),
        _lib.ERR_FORMAT: (cism.FormatError, ValueError),
        _lib.ERR_UNSUPPORTED: (cism.UnsupportedError, ValueError),
        _lib.ERR_OUT_OF_MEMORY: (cism.OutOfMemoryError, MemoryError),
        _lib.ERR_CONTEXT_FULL: (cism.ContextFullError, cism.CismError),
        _lib.ERR_TOKEN_RANGE: (cism.TokenRangeError, ValueError),
        _lib.ERR_BUFFER_SMALL: (cism.BufferTooSmallError, cism.CismError),
        _lib.ERR_CANCELLED: (cism.CancelledError, cism.CismError),
        _lib.ERR_STATE: (cism.StateError, RuntimeError),
        _lib.ERR_EXISTS: (cism.OutputExistsError, FileExistsError),
        _lib.ERR_INTERNAL: (cism.InternalError, RuntimeError),
    }
    for status, (cls, builtin) in classes.items():
        e = error_for(status, "the message")
        assert type(e) is cls and isinstance(e, builtin) and isinstance(e, cism.CismError)
        assert e.status == status and str(e) == "the message" and e.message == "the message"
    assert type(error_for(999, "x")) is cism.CismError


def test_missing_file_is_oserror_with_c_message(tmp_path):
    missing = str(tmp_path / "nope.cism")
    with pytest.raises(cism.CismIOError) as ei:
        cism.Model(missing)
    assert isinstance(ei.value, OSError)
    assert missing in str(ei.value) and ei.value.status == _lib.ERR_IO


# ---- model ----------------------------------------------------------------------
def test_model_info_and_metadata(model):
    assert model.architecture == "llama"
    assert (model.vocab_size, model.dim, model.n_layers, model.n_heads, model.n_kv_heads, model.head_dim,
            model.ffn_dim, model.context_length) == (BYTE_VOCAB, 64, 2, 4, 2, 16, 128, 256)
    assert model.bos_id == 1 and model.eos_id == 2 and model.eos_ids == [2] and model.pad_id == -1
    assert not model.tied_embeddings and model.weight_dtype == "f32"
    expected = 2 * BYTE_VOCAB * 64 + 2 * (64 * 64 + 2 * 32 * 64 + 64 * 64 + 3 * 64 * 128)
    assert model.n_params == expected
    assert model.weight_bytes >= 4 * expected and model.file_bytes > model.weight_bytes
    md = model.metadata
    assert md["general.architecture"] == "llama" and md["model.dim"] == 64
    assert isinstance(md["model.norm_eps"], float) and md["model.norm_eps"] == pytest.approx(1e-5)
    assert isinstance(md["tokenizer.hf_json"], bytes) and md.type("tokenizer.hf_json") == _lib.META_BYTES
    assert md.type("general.name") == _lib.META_STRING and md["general.name"] == "synthetic tiny-test"
    assert "model.dim" in md and "no.such.key" not in md and md.type("no.such.key") == _lib.META_NONE
    with pytest.raises(KeyError):
        md["no.such.key"]
    keys = list(md)
    assert len(keys) == len(md) and "synthetic.seed" in keys
    summary = md.summary()
    assert summary["tokenizer.hf_json"].startswith("<") and "bytes" in summary["tokenizer.hf_json"]
    assert model.hparams()["n_layers"] == 2 and "tiny" in repr(model)


def test_metadata_arrays(tmp_path):
    path = make_model(tmp_path / "arr.cism", **{"x.ints": np.array([3, -4, 5], dtype=np.int64),
                                                "x.floats": np.array([0.5, 1.5], dtype=np.float32),
                                                "x.strs": ["ab", "cde", ""]})
    with cism.Model(path) as m:
        assert m.metadata["x.ints"].tolist() == [3, -4, 5]
        assert m.metadata["x.floats"].tolist() == [0.5, 1.5]
        assert m.metadata["x.strs"] == [b"ab", b"cde", b""]
        assert m.metadata.type("x.strs") == _lib.META_STRING_ARRAY


def test_close_and_context_managers(tiny):
    m = cism.Model(tiny)
    s = m.session(n_ctx=32)
    m.close()
    m.close()  # twice is fine
    assert m.closed
    with pytest.raises(cism.StateError):
        m.vocab_size
    # the session keeps the C model alive
    s.eval([1, 5, 6])
    assert s.n_past == 3 and s.logits().shape == (BYTE_VOCAB,)
    s.close()
    with pytest.raises(cism.StateError):
        s.eval([1])
    with cism.Model(tiny) as m2, m2.session() as s2, cism.Sampler() as smp:
        assert s2.n_ctx == 256  # min(model context, 4096)
        assert smp.get("temperature") == 0.0
    assert m2.closed and s2.closed


def test_objects_freed_by_gc(tiny):
    m = cism.Model(tiny)
    s = m.session()
    fin_m, fin_s = m._finalizer, s._finalizer
    del m, s
    gc.collect()
    assert not fin_m.alive and not fin_s.alive


# ---- sessions and logits -----------------------------------------------------------
def test_logits_copy_view_and_all(model):
    toks = [1, 40, 41, 42, 43, 44, 45, 46]
    with model.session(kv_type="f32", logits_all=True) as s:
        s.eval(toks)
        assert s.n_past == len(toks)
        all_rows = s.all_logits()
        assert all_rows.shape == (len(toks), BYTE_VOCAB) and all_rows.dtype == np.float32
        assert np.array_equal(all_rows[-1], s.logits()) and np.array_equal(all_rows[2], s.logits(2))
        s.eval([50])
        assert s.all_logits().shape == (1, BYTE_VOCAB)
        with pytest.raises(cism.InvalidArgumentError):
            s.logits(5)
    with model.session() as s:
        s.eval(toks)
        copy, view = s.logits(), s.logits_view()
        assert not view.flags.writeable and np.array_equal(copy, view)
        with pytest.raises(cism.StateError, match="LOGITS_ALL"):
            s.logits(0)
        s.eval([50])
        assert not np.array_equal(view, copy)  # the view shows the new logits (documented)
        assert np.array_equal(view, s.logits())
        with pytest.raises(cism.StateError):
            s.all_logits()
        s.reset()
        with pytest.raises(cism.StateError, match="nothing has been evaluated"):
            s.logits()


def test_view_keeps_session_alive(model):
    s = model.session()
    s.eval([1, 2, 3])
    v = s.logits_view()
    expected = v.copy()
    fin = s._finalizer
    del s
    gc.collect()
    assert fin.alive
    assert np.array_equal(v, expected)
    del v
    gc.collect()
    assert not fin.alive


def test_rewind_and_reset_reproduce_logits(model):
    toks = np.arange(3, 23, dtype=np.int64)
    with model.session(kv_type="f32") as s:
        s.eval(toks)
        ref = s.logits()
        s.rewind(8)
        assert s.n_past == 8
        s.eval(toks[8:])
        np.testing.assert_allclose(s.logits(), ref, rtol=0, atol=1e-6)
        s.reset()
        assert s.n_past == 0
        for t in toks:  # one at a time: same numbers as the batched prefill
            s.eval(int(t))
        np.testing.assert_allclose(s.logits(), ref, rtol=0, atol=1e-5)
        with pytest.raises(cism.InvalidArgumentError, match="n_keep"):
            s.rewind(s.n_past + 1)


def test_bad_eval_input_leaves_session_unchanged(model):
    with model.session(n_ctx=16) as s:
        s.eval([1, 2])
        with pytest.raises(cism.TokenRangeError, match=r"token 259 at index 1 is outside the vocabulary \(0\.\.258\)"):
            s.eval([5, BYTE_VOCAB])
        with pytest.raises(cism.TokenRangeError, match="token -1"):
            s.eval([-1])
        with pytest.raises(cism.TokenRangeError):
            s.eval([2 ** 32 + 5])  # would wrap to 5 in int32
        with pytest.raises(cism.InvalidArgumentError, match="at least one token"):
            s.eval([])
        with pytest.raises(TypeError):
            s.eval([1.5, 2.0])
        with pytest.raises(cism.ContextFullError, match="context full: 2 tokens evaluated, 15 more do not fit in 16"):
            s.eval(list(range(3, 18)))
        assert s.n_past == 2
        s.eval(list(range(3, 17)))
        assert s.n_past == 16
        with pytest.raises(cism.ContextFullError):
            s.eval([1])


def test_session_params_refused(model):
    with pytest.raises(cism.InvalidArgumentError, match="larger than the model's 256"):
        model.session(n_ctx=257)
    with pytest.raises(cism.InvalidArgumentError, match="KV cache type .kv_type. bf16 is not supported"):
        model.session(kv_type="bf16")
    with pytest.raises(cism.InvalidArgumentError, match=r"thread count \(n_threads\) -1 is out of range"):
        model.session(n_threads=-1)
    with pytest.raises(cism.InvalidArgumentError, match=r"context length \(n_ctx\) -3 is out of range") as ei:
        model.session(n_ctx=-3)
    assert "parameter" not in str(ei.value) and "cism_params_set_int" not in str(ei.value)
    with pytest.raises(TypeError):
        cism.params.Params(bogus=1)


# ---- sampler -----------------------------------------------------------------------
def test_sampler_basics():
    logits = np.array([0.0, 3.0, 1.0, 2.9], dtype=np.float32)
    with cism.Sampler() as s:
        assert s.sample(logits) == 1
        s.set(repeat_penalty=2.0)
        s.accept(1)
        assert s.sample(logits) == 3  # 3.0 / 2 < 2.9
        s.reset()
        assert s.sample(logits) == 1
    with cism.Sampler(temperature=1.0, top_k=1, seed=5) as s:
        assert all(s.sample(logits) == 1 for _ in range(20))
    with pytest.raises(cism.InvalidArgumentError, match=r"top_p 0 must be in \(0, 1\]"):
        cism.Sampler(top_p=0.0)
    with pytest.raises(cism.InvalidArgumentError, match="temperature"):
        cism.Sampler(temperature=-1)
    with pytest.raises(TypeError):
        cism.Sampler().set(top_q=1)
    with pytest.raises(ValueError):
        cism.Sampler().sample(np.zeros((2, 2), np.float32))


def test_sampler_seed_determinism(model):
    def run(seed):
        with model.session() as s:
            return s.generate_ids([1, 70, 71], 40, cism.Sampler(temperature=1.0, top_p=0.95, seed=seed),
                                  ignore_eos=True)
    a, b, c = run(42), run(42), run(43)
    assert len(a) == 40 and a == b
    assert a != c
    # seeds beyond int64 keep their low 64 bits
    with cism.Sampler(seed=2 ** 64 + 42) as s1, cism.Sampler(seed=42) as s2:
        lg = np.random.default_rng(0).normal(size=BYTE_VOCAB).astype(np.float32)
        s1.set(temperature=1.0)
        s2.set(temperature=1.0)
        assert [s1.sample(lg) for _ in range(10)] == [s2.sample(lg) for _ in range(10)]


def test_python_loop_matches_c_generate(model):
    prompt = [1, 72, 101, 108]
    for kw in (dict(), dict(temperature=0.8, top_k=40, min_p=0.02, repeat_penalty=1.1, seed=7)):
        with model.session() as s:
            c_ids = s.generate_ids(prompt, 30, cism.Sampler(**kw), ignore_eos=True)
            n_c = s.n_past
        with model.session() as s:
            gen = s.generate_tokens(prompt, 30, ignore_eos=True, **kw)
            py_ids = list(gen)
            assert gen.stop_reason == "length" and gen.tokens == py_ids
            assert s.n_past == n_c == len(prompt) + 30  # every generated token was evaluated
        assert py_ids == c_ids


def test_generate_ids_callback_stop_and_errors(model):
    with model.session() as s:
        seen = []
        out = s.generate_ids([1, 5], 50, cism.Sampler(), ignore_eos=True, callback=lambda t: seen.append(t) or len(seen) >= 4)
        assert out == seen and len(out) == 4

        def boom(_t):
            raise KeyError("from callback")
        with pytest.raises(KeyError):
            s.generate_ids([7], 5, cism.Sampler(), ignore_eos=True, callback=boom)
    with model.session(n_ctx=10) as s:
        # a full context ends generation normally (cism_generate_v2), like max_tokens
        out = s.generate_ids([1, 2, 3], 20, cism.Sampler(), ignore_eos=True)
        assert len(out) == 8 and s.stop_reason == "length" and s.n_past == 10  # 3 + 7 evaluated, the 8th reported
        assert s.generate_ids([], 3, cism.Sampler(), ignore_eos=True) and s.stop_reason == "length"
        s.reset()
        assert len(s.generate_ids([1], 2, cism.Sampler(), ignore_eos=True)) == 2 and s.stop_reason == "length"
        assert len(s.generate_ids([], 9, cism.Sampler(), ignore_eos=True, callback=lambda t: True)) == 1
        assert s.stop_reason == "callback"
        s.reset()
        # a prompt that does not fit is refused before anything is evaluated
        with pytest.raises(cism.ContextFullError, match="prompt is 11 tokens") as ei:
            s.generate_ids(list(range(1, 12)), 5, cism.Sampler(), ignore_eos=True)
        assert ei.value.tokens == [] and s.n_past == 0


# ---- text ----------------------------------------------------------------------------
def test_tokenizer_bos_from_post_processor(model):
    tok = model.tokenizer
    assert tok.add_bos and tok.bos_id == 1  # no tokenizer.add_bos metadata: the HF post-processor decides
    ids = tok.encode("hé")
    assert ids == [1, 3 + ord("h"), 3 + 0xC3, 3 + 0xA9]
    assert tok.encode("hé", add_bos=False) == ids[1:]
    assert tok.decode(ids) == "hé"


def test_incremental_decoding_never_splits_characters(model):
    tok = model.tokenizer
    text = "héllo wörld 😀 日本語 ok"
    ids = tok.encode(text, add_bos=False)
    assert len(ids) == len(text.encode("utf-8"))  # one token per byte
    dec = tok.incremental_decoder([1])
    pieces = [dec.push(t) for t in ids] + [dec.flush()]
    assert "".join(pieces) == text
    assert all("\ufffd" not in p for p in pieces)
    assert pieces[ids.index(3 + 0xF0):ids.index(3 + 0xF0) + 3] == ["", "", ""]  # the emoji waits for its 4th byte


@pytest.fixture(scope="module")
def ascii_model(tmp_path_factory):
    path = make_model(tmp_path_factory.mktemp("api") / "ascii.cism", vocab=ASCII_VOCAB, tokenizer="ascii", seed=3)
    with cism.Model(path) as m:
        yield m


def test_generate_text_stream_continue_and_break(ascii_model):
    m = ascii_model
    with m.session() as s:
        gen = s.generate("ab", 25, ignore_eos=True, temperature=0.7, seed=1)
        pieces = list(gen)
        assert gen.prompt_tokens == [1, 3 + ord("a") - 32, 3 + ord("b") - 32] and len(gen.tokens) == 25
        assert gen.stop_reason == "length"
        assert "".join(pieces) == gen.text == m.tokenizer.decode(gen.tokens) and len(gen.text) >= 20
        n = s.n_past
        # continuing the session: no second BOS
        gen2 = s.generate("c", 3, ignore_eos=True)
        for _ in gen2:
            break
        assert gen2.prompt_tokens == [3 + ord("c") - 32] and s.n_past == n + 2
        gen2.close()


def test_stop_strings(ascii_model):
    with ascii_model.session() as s:
        text = "".join(s.generate("x", 30, ignore_eos=True))
    assert len(text) >= 20
    for probe in (text[5:7], text[12:15]):
        with ascii_model.session() as s:
            g = s.generate("x", 30, ignore_eos=True, stop=["never there", probe])
            out = "".join(g)
        assert g.stop_reason == "stop" and out == text[:text.index(probe)]
    # one string is one stop string (it was split into its characters), not a list of them
    probe = next(text[i:i + 3] for i in range(len(text) - 3)
                 if min(text.index(c) for c in text[i:i + 3]) < text.index(text[i:i + 3]))  # a character comes earlier
    with ascii_model.session() as s:
        g = s.generate("x", 30, ignore_eos=True, stop=probe)
        assert "".join(g) == text[:text.index(probe)] and g.stop_reason == "stop"
    with ascii_model.session() as s:
        for bad, msg in ((dict(stop=5), "stop must be a string or a list of strings"),
                         (dict(stop=[b"x"]), "stop must be"), (dict(seed="a", temperature=0.5), "seed must be an integer"),
                         (dict(temperature="hot"), "temperature must be a number")):
            with pytest.raises(TypeError, match=msg):
                s.generate("x", 3, **bad)


def test_model_generate_closes_its_session(model):
    gen = model.generate([1, 9], 5, ignore_eos=True)
    assert "".join(gen) is not None
    assert gen.session.closed
    with pytest.raises(ValueError, match="empty prompt"):
        model.generate([], 5)
    gen = model.generate([1, 2], 300, n_ctx=64, ignore_eos=True)
    "".join(gen)  # the context fills: a normal end
    assert gen.stop_reason == "length" and gen.context_full and len(gen.tokens) == 63 and gen.session.closed


def test_generation_context_full_after_yielding(model):
    with model.session(n_ctx=12) as s:
        gen = s.generate_tokens([1, 2, 3, 4], 50, ignore_eos=True)
        got = list(gen)  # no exception: the full context is a stop reason
        assert len(got) == 9 and s.n_past == 12
        assert gen.stop_reason == "length" and gen.context_full


# ---- cancellation -------------------------------------------------------------------
def test_cancel_generation_from_another_thread(model):
    with model.session() as s:
        gen = s.generate_tokens([1], 200, ignore_eos=True)
        got = []
        for t in gen:
            got.append(t)
            if len(got) == 5:
                th = threading.Thread(target=s.cancel)
                th.start()
                th.join()
        assert gen.stop_reason == "cancelled" and len(got) == 5
        # the next generation starts afresh
        assert len(list(s.generate_tokens([], 3, ignore_eos=True))) == 3


def test_cancel_inside_c_generate(model):
    with model.session() as s:
        def cb(_t):
            if len(seen) == 3:
                s.cancel()
        seen = []
        with pytest.raises(cism.CancelledError) as ei:
            s.generate_ids([1], 50, cism.Sampler(), ignore_eos=True, callback=lambda t: seen.append(t) or cb(t))
        assert len(ei.value.tokens) == 3


def test_cancel_running_eval(tmp_path):
    path = make_model(tmp_path / "slow.cism", vocab=512, dim=256, n_layers=4, n_heads=4, n_kv_heads=2, head_dim=64,
                      ffn=768, ctx=1024, tokenizer=False)
    with cism.Model(path) as m, m.session(n_threads=1, n_batch=128, kv_type="f32") as s:
        toks = np.arange(1024) % 512
        done = threading.Event()

        def canceller():
            while not done.is_set():
                s.cancel()
                time.sleep(0.002)
        th = threading.Thread(target=canceller)
        th.start()
        try:
            with pytest.raises(cism.CancelledError, match="cancelled"):
                s.eval(toks)
        finally:
            done.set()
            th.join()
        assert s.n_past % 128 == 0 and s.n_past < 1024  # completed chunks are kept
        s.eval(toks[s.n_past:s.n_past + 4])
