"""The Python bindings against careless use (issue 16, item 4): logits views
never show freed memory, token ids never wrap modulo 2**32, text generation
never samples ids past the tokenizer, NUL in paths and odd metadata keys are
refused with the right exceptions, and dropping a model unmaps its file at once
(no reference cycle). Run under ASan too (tests/run_all.sh preloads it): a view
reading freed memory is a heap-use-after-free report there."""
from __future__ import annotations

import gc

import numpy as np
import pytest

import cism
from cism.errors import StateError, TokenRangeError

from helpers import BYTE_VOCAB, make_model


@pytest.fixture(scope="module")
def model_path(tmp_path_factory):
    return make_model(tmp_path_factory.mktemp("safety") / "tiny.cism")


@pytest.fixture()
def model(model_path):
    m = cism.Model(model_path)
    yield m
    m.close()


# ---- logits views ------------------------------------------------------------
def test_view_outlives_close(model):
    s = model.session(n_ctx=64)
    s.eval([1, 40, 41])
    want = s.logits()
    view = s.logits_view()
    s.close()
    assert s.closed
    with pytest.raises(StateError):
        s.eval([5])
    # the memory the view shows is kept until the view is gone (freed before the fix)
    np.testing.assert_array_equal(view, want)
    fin = s._finalizer
    assert fin.alive
    del view
    gc.collect()
    assert not fin.alive  # the last view freed the closed session


def test_view_blocks_growing_eval(model):
    s = model.session(n_ctx=128, logits_all=True)
    s.eval([1, 40])
    want = s.logits()
    view = s.logits_view()
    rows = s.all_logits_view()[1:]      # a view of a view counts too
    with pytest.raises(StateError, match="logits view"):
        s.eval(list(range(3, 60)))      # would realloc the logits buffer under the views
    assert s.n_past == 2                # refused before anything was evaluated
    np.testing.assert_array_equal(view, want)
    np.testing.assert_array_equal(rows[-1], want)
    s.eval([50])                        # fits in the buffer: allowed (the view shows other numbers)
    del view, rows
    s.eval(list(range(3, 60)))          # no view left: grows
    assert s.n_past == 60
    v2 = s.logits_view()
    s.eval([7, 8])                      # smaller than the buffer: no move (ASan would see a bad read)
    assert v2.shape == (BYTE_VOCAB,) and np.isfinite(v2).all()
    s.close()


def test_view_blocks_trim(model):
    s = model.session(n_ctx=128, logits_all=True)
    s.eval(list(range(3, 40)))
    want = s.logits()
    view = s.logits_view()
    with pytest.raises(StateError, match="trim"):
        s.trim()
    np.testing.assert_array_equal(view, want)
    del view
    s.trim()
    np.testing.assert_array_equal(s.logits(), want)  # the last row survives a trim
    v = s.logits_view()
    s.trim()                            # one row already: nothing moves
    np.testing.assert_array_equal(v, want)
    s.eval([9])
    s.close()


# ---- token ids -----------------------------------------------------------------
WRAPPED = [2 ** 32 + 40, 2 ** 31, -1, 2 ** 64 + 1]


@pytest.mark.parametrize("backend", ["c", "hf"])
def test_token_ids_do_not_wrap(model_path, backend):
    from cism.tokenizer import from_model
    m = cism.Model(model_path)
    tok = from_model(m, backend)
    assert tok.decode([40]) == tok.decode([40])  # a valid id decodes
    for bad in WRAPPED:
        with pytest.raises(TokenRangeError):
            tok.decode([40, bad])
        with pytest.raises(TokenRangeError):
            tok.token_text(bad)
        dec = tok.incremental_decoder()
        with pytest.raises(TokenRangeError):
            dec.push(bad)
    with pytest.raises(TypeError):
        tok.decode([40.0])
    m.close()


def test_sampler_accept_range():
    smp = cism.Sampler(temperature=0.5)
    smp.accept(3)
    for bad in WRAPPED:
        with pytest.raises(TokenRangeError):
            smp.accept(bad)
    smp.close()


def test_generation_never_samples_past_the_tokenizer(tmp_path):
    """An embedding with 60 rows more than the tokenizer has ids (allowed by
    docs/FORMAT.md): near-uniform sampling would hit them about once in 5 tokens."""
    path = make_model(tmp_path / "short-vocab.cism", vocab=BYTE_VOCAB + 60)
    m = cism.Model(path)
    assert m.vocab_size == BYTE_VOCAB + 60
    from cism.generate import Generation
    from cism.tokenizer import from_model
    for backend in ("c", "hf"):
        m._tokenizer = from_model(m, backend)
        assert m.tokenizer.n_ids == BYTE_VOCAB
        s = m.session(n_ctx=256)
        gen = Generation(s, "hi", 120, text=True, temperature=50.0, seed=3, ignore_eos=True)
        text = "".join(gen)             # raised TokenRangeError mid-stream before the fix
        assert len(gen.tokens) == 120, gen.stop_reason
        assert max(gen.tokens) < BYTE_VOCAB
        assert isinstance(text, str)
        # the id loop (no tokenizer involved) still samples the whole embedding
        ids = s.generate_tokens([1, 40], 120, temperature=50.0, seed=3, ignore_eos=True)
        assert max(list(ids)) >= BYTE_VOCAB
        s.close()
    m.close()


# ---- paths and metadata ----------------------------------------------------------
def test_path_with_nul_refused(model_path):
    for p in (str(model_path) + "\0.other", (str(model_path) + "\0x").encode()):
        with pytest.raises(ValueError, match="NUL"):
            cism.Model(p)


def test_metadata_odd_keys(model):
    md = model.metadata
    assert "general.name" in md and md["general.name"]
    for key in ("general.name\0junk", "g\u00e9n\u00e9ral.name", 5, None, b"general.name", ("general.name",)):
        with pytest.raises(KeyError):
            md[key]
        assert key not in md
    with pytest.raises(KeyError):
        md.type("general.name\0")


# ---- unmapping ------------------------------------------------------------------
def _mapped(path) -> bool:
    with open("/proc/self/maps") as f:
        return str(path) in f.read()


@pytest.mark.skipif(not __import__("os").path.exists("/proc/self/maps"), reason="needs /proc/self/maps")
def test_drop_unmaps_without_gc(tmp_path):
    path = make_model(tmp_path / "unmap.cism")
    gc.collect()
    gc.disable()
    try:
        # closed session, model dropped without close()
        m = cism.Model(path)
        _ = m.metadata["general.name"], m.tokenizer
        assert _mapped(path)
        s = m.session(n_ctx=32)
        s.eval([1, 40])
        s.close()
        del s, m, _
        assert not _mapped(path), "the file stays mapped until the cyclic GC runs"
        # model closed, then dropped
        m = cism.Model(path)
        md = m.metadata
        m.close()
        del m
        assert not _mapped(path)
        with pytest.raises(StateError):
            md["general.name"]          # metadata outliving its model says so
    finally:
        gc.enable()

