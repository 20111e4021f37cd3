"""Format version 3's checksums (docs/FORMAT.md, "Integrity"), from Python: what the
writer records, `cism verify`, Model(verify_checksums=), relabelled and damaged
files, and the older versions (no checksums), which keep loading. The C side,
byte by byte: tests/c/test_checksum.c."""
import os
import subprocess
import sys

import pytest

import cism
from cism import format as fmt
from cism.synthetic import write_synthetic
from helpers import tiny_preset


def _cli(*args):
    p = subprocess.run([sys.executable, "-m", "cism", *args], capture_output=True, timeout=600)
    return p.returncode, p.stdout.decode(), p.stderr.decode()


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("sum") / "q8.cism")
    write_synthetic(tiny_preset(), path, "q8", 0)
    return path


def _write(tmp_path, name, blob):
    p = str(tmp_path / name)
    with open(p, "wb") as f:
        f.write(bytes(blob))
    return p


def test_writer_records_checksums(model):
    f = fmt.CismFile(model)
    assert f.header["version"] == 3 and f.header["meta_offset"] == 128
    assert f.checksum_errors() == []
    assert all(t.crc is not None for t in f.tensors.values())
    with cism.Model(model, verify_checksums=True, check_weights=True, use_mmap=False):
        pass


def test_damaged_header_is_refused_on_every_load(tmp_path, model):
    blob = bytearray(open(model, "rb").read())
    f = fmt.CismFile(model)
    for at in (f.header["meta_offset"] + 40, f.header["tensors_offset"] + 30, 20):
        b = bytearray(blob)
        b[at] ^= 0x20
        p = _write(tmp_path, "bad.cism", b)
        with pytest.raises(cism.FormatError, match="header checksum does not match.*convert it again"):
            cism.Model(p)
        if at != 20:  # (byte 20 is in meta_size: the Python reader cannot find the sections)
            assert fmt.CismFile(p).checksum_errors() == ["header"]


def test_relabelled_file_is_refused(tmp_path, model):
    blob = bytearray(open(model, "rb").read())
    for v in (1, 2):
        blob[8:12] = v.to_bytes(4, "little")
        p = _write(tmp_path, f"as{v}.cism", blob)
        with pytest.raises(cism.FormatError, match="version 3 file whose version field was changed"):
            cism.Model(p)


def test_damaged_data_verify_and_opt_in(tmp_path, model):
    blob = bytearray(open(model, "rb").read())
    t = fmt.CismFile(model).tensors["blk.0.ffn_down"]
    blob[t.offset + 3] ^= 0x01
    p = _write(tmp_path, "data.cism", blob)
    with cism.Model(p):  # a plain load does not read the data (documented)
        pass
    with pytest.raises(cism.FormatError, match="tensor 'blk.0.ffn_down' does not match its checksum"):
        cism.Model(p, verify_checksums=True)
    assert fmt.CismFile(p).checksum_errors() == ["blk.0.ffn_down"]
    rc, out, err = _cli("verify", p)
    assert rc == 1 and "does not match its checksum" in err and p in err, (out, err)
    rc, out, err = _cli("verify", model)
    assert rc == 0 and "OK" in out and "match their checksums" in out, (out, err)
    fmt.reseal(p)  # tests that edit on purpose
    with cism.Model(p, verify_checksums=True):
        pass


def test_old_versions_keep_loading_and_upgrade(tmp_path, model):
    blob = open(model, "rb").read()
    p = _write(tmp_path, "v2.cism", fmt.legacy_bytes(blob, 2))
    with cism.Model(p, verify_checksums=True):  # nothing to verify: loads, with a warning
        pass
    rc, out, err = _cli("verify", p)
    assert rc == 0 and "no checksums" in out and "cism upgrade" in out, (out, err)
    up = str(tmp_path / "up.cism")
    rc, out, err = _cli("upgrade", p, "-o", up)
    assert rc == 0 and "version 3" in err, err
    assert open(up, "rb").read() == blob
