"""Session.save / Session.load (cism_session_save / _load, issue 16 item 7): a
restored session and sampler continue bit for bit as the uninterrupted ones
(greedy and sampled, f16 and f32 KV, with and without logits_all, float and
q8 weights); states from another model, of another layout version or KV type,
larger than the context, truncated or corrupted are refused with the session
unchanged; a failed save leaves the existing file untouched."""
from __future__ import annotations

import os
import struct
import subprocess
import sys
import zlib

import numpy as np
import pytest

from cism import errors
from cism.model import Model
from cism.sampler import Sampler

from helpers import make_model

PROMPT = [1, 72, 101, 108, 108, 111, 44, 32, 119, 111, 114, 108, 100, 33, 10, 65, 66, 67]
STEPS = 20


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    d = tmp_path_factory.mktemp("state")
    return Model(make_model(d / "a.cism", seed=0)), Model(make_model(d / "b.cism", seed=1))


def new_sampler(**kw):
    args = dict(temperature=0.9, top_k=40, top_p=0.95, repeat_penalty=1.3, penalty_last_n=16, seed=77)
    args.update(kw)
    return Sampler(**args)


def steps(session, sampler, n=STEPS):
    """n steps: (tokens, logits of each step as raw bits)."""
    toks, bits = [], []
    for _ in range(n):
        lg = session.logits()
        bits.append(lg.view(np.uint32).copy())
        t = int(np.argmax(lg)) if sampler is None else sampler.sample(lg)
        if sampler is not None:
            sampler.accept(t)
        toks.append(t)
        session.eval([t])
    return toks, np.stack(bits)


def start(model, sampler, **kw):
    """A session that evaluated PROMPT, its sampler advanced by 3 draws."""
    s = model.session(**kw)
    s.eval(PROMPT[:-3])
    for t in PROMPT[:-3]:
        sampler.accept(t)
    for t in PROMPT[-3:]:
        sampler.sample(s.logits())
        sampler.accept(t)
    s.eval(PROMPT[-3:])
    return s


@pytest.mark.parametrize("kv_type", ["f16", "f32"])
@pytest.mark.parametrize("logits_all", [False, True])
def test_restored_session_continues_bit_identically(models, tmp_path, kv_type, logits_all):
    m = models[0]
    path = tmp_path / "conv.state"
    sa = new_sampler()
    a = start(m, sa, kv_type=kv_type, logits_all=logits_all, n_batch=8)
    rows = a.all_logits() if logits_all else None
    a.save(path, sa)
    ref_sampled = steps(a, sa)

    b = m.session(kv_type=kv_type, logits_all=logits_all, n_batch=8)
    sb = Sampler()  # default parameters: load restores them
    b.load(path, sb)
    assert b.n_past == len(PROMPT) and b.tokens() == PROMPT
    if logits_all:
        assert np.array_equal(b.all_logits().view(np.uint32), rows.view(np.uint32))
    got = steps(b, sb)
    assert b.tokens() == PROMPT + got[0] == a.tokens()
    assert got[0] == ref_sampled[0]
    assert np.array_equal(got[1], ref_sampled[1])
    assert len(set(got[0])) > 1

    g = m.session(kv_type=kv_type, n_batch=8)
    g.eval(PROMPT)
    ref_greedy = steps(g, None)
    c = m.session(kv_type=kv_type, n_ctx=len(PROMPT) + STEPS, n_threads=1)
    c.load(str(path))
    got = steps(c, None)
    assert got[0] == ref_greedy[0] and np.array_equal(got[1], ref_greedy[1])
    assert got[0] != ref_sampled[0]


def test_quantized_model_round_trip(shared_models, tmp_path):
    """q8 weights (int8 activations) on a real checkpoint, through the file."""
    from cism.convert import convert
    src = os.path.join(shared_models, "stories260K-hf")
    out = str(tmp_path / "s-q8.cism")
    convert(src, out, quant="q8", progress=None)
    m = Model(out)
    sa = new_sampler()
    a = start(m, sa)
    a.save(tmp_path / "s.state", sa)
    ref = steps(a, sa)
    b, sb = m.session(), Sampler()
    b.load(tmp_path / "s.state", sb)
    got = steps(b, sb)
    assert got[0] == ref[0] and np.array_equal(got[1], ref[1])


def crc_fixed(data: bytearray) -> bytes:
    data[-4:] = struct.pack("<I", zlib.crc32(bytes(data[:-4])))
    return bytes(data)


def refused(model, path, exc, needle, sampler=None, **kw):
    s = model.session(**kw)
    s.eval(PROMPT[:3])
    before = s.logits()
    with pytest.raises(exc) as e:
        s.load(path, sampler)
    assert needle in str(e.value)
    assert s.n_past == 3
    assert np.array_equal(s.logits().view(np.uint32), before.view(np.uint32))
    s.eval([5])  # still usable


def test_refusals(models, tmp_path):
    m, other = models
    a = m.session()
    a.eval(PROMPT)
    good = tmp_path / "good.state"
    a.save(good)
    data = good.read_bytes()
    assert data[:8] == b"CISMSS\r\n" and struct.unpack_from("<I", data, 8)[0] == 1
    assert struct.unpack_from("<I", data, len(data) - 4)[0] == zlib.crc32(data[:-4])  # documented checksum
    bad = tmp_path / "bad.state"

    refused(other, good, errors.InvalidArgumentError, "another model")
    refused(m, good, errors.InvalidArgumentError, "KV cache", kv_type="f32")
    refused(m, good, errors.ContextFullError, "n_ctx", n_ctx=len(PROMPT) - 1)
    refused(m, good, errors.InvalidArgumentError, "without a sampler", sampler=Sampler())
    refused(m, tmp_path / "missing.state", errors.CismIOError, "missing.state")
    for cut in (len(data) - 1, len(data) // 2, 40, 0):
        bad.write_bytes(data[:cut])
        refused(m, bad, (errors.FormatError, errors.CismIOError), "empty" if cut == 0 else "truncated")
    for where in (20, 100, len(data) // 2, len(data) - 2):
        flipped = bytearray(data)
        flipped[where] ^= 0x04
        bad.write_bytes(bytes(flipped))
        refused(m, bad, (errors.FormatError, errors.InvalidArgumentError), "")
    flipped = bytearray(data)
    flipped[len(data) // 2] ^= 0x04
    bad.write_bytes(bytes(flipped))
    refused(m, bad, errors.FormatError, "checksum")
    v2 = bytearray(data)
    struct.pack_into("<I", v2, 8, 2)
    bad.write_bytes(crc_fixed(v2))
    refused(m, bad, errors.UnsupportedError, "version 2")
    # another model with a forged, self-consistent file: the fingerprint refuses it
    forged = bytearray(data)
    forged[16] ^= 1
    bad.write_bytes(crc_fixed(forged))
    refused(m, bad, errors.InvalidArgumentError, "fingerprint")
    refused(m, m.path, errors.FormatError, "model file")
    with pytest.raises(ValueError):
        a.load("x\0y")


def test_failed_save_leaves_existing_file(models, tmp_path):
    m = models[0]
    path = tmp_path / "keep.state"
    a = m.session()
    a.eval(PROMPT)
    a.save(path)
    before = path.read_bytes()
    with pytest.raises(errors.CismIOError):
        a.save(tmp_path / "no-such-dir" / "x.state")
    # a directory as the path: said before anything is written (no temporary file left beside it)
    os.makedirs(tmp_path / "a-dir")
    with pytest.raises(errors.CismIOError, match="is a directory: give a file name"):
        a.save(tmp_path / "a-dir")
    assert os.listdir(tmp_path / "a-dir") == [] and sorted(os.listdir(tmp_path)) == ["a-dir", "keep.state"]
    with pytest.raises(errors.CismIOError, match="is a directory, not a regular file"):
        m.session().load(tmp_path / "a-dir")
    if sys.platform == "win32":
        return
    # a real write failure: a file size limit below the state's size (EFBIG)
    code = f"""
import resource, signal, sys
sys.path.insert(0, {os.path.dirname(__file__)!r})
import cism
from cism.model import Model
from cism import errors
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
m = Model({m.path!r})
s = m.session()
s.eval({PROMPT + [7, 8, 9]!r})
resource.setrlimit(resource.RLIMIT_FSIZE, (4096, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
try:
    s.save({str(path)!r})
except errors.CismIOError as e:
    print("refused:", e)
    sys.exit(0)
sys.exit(3)
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=dict(os.environ))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "nothing was overwritten" in r.stdout
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir() if ".tmp-" in p.name] == []
    b = m.session()
    b.load(path)
    assert b.n_past == len(PROMPT)
