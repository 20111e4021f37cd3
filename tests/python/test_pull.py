"""`cism pull`'s cache: a conversion that an older version cached (another default import,
pull.IMPORT_REV) is made again and the stale one removed; other files stay; a damaged one is
made again."""
import os

import cism
from cism import pull


def test_stale_conversion_is_made_again(tmp_path, real_gguf):
    name = pull.DEFAULT_MODEL
    os.symlink(real_gguf, tmp_path / os.path.basename(pull.MODELS[name].member))
    stale = [tmp_path / f"{name}.native.cism", tmp_path / f"{name}.native.r1.cism"]
    kept = [tmp_path / f"{name}.q8.cism", tmp_path / f"{name}.native.rx.cism", tmp_path / "notes.txt"]
    for p in stale + kept:
        p.write_bytes(b"made by someone else")
    said = []
    out = pull.model_path(name, cache=str(tmp_path), log=said.append)
    assert os.path.basename(out) == f"{name}.native.r{pull.IMPORT_REV}.cism"
    with cism.Model(out) as m:
        assert m.weight_dtype == "q4ax16"
    assert not any(p.exists() for p in stale), said
    assert all(p.read_bytes() == b"made by someone else" for p in kept)
    assert sum("older version" in s for s in said) == len(stale)
    mtime = os.stat(out).st_mtime_ns
    assert pull.model_path(name, cache=str(tmp_path)) == out and os.stat(out).st_mtime_ns == mtime  # not made again


def test_damaged_conversion_is_made_again(tmp_path, real_gguf):
    """A cached conversion cut short or overwritten (not by this version's atomic write) is said to be
    damaged and made again from the GGUF; an intact one is used as it is."""
    name = pull.DEFAULT_MODEL
    os.symlink(real_gguf, tmp_path / os.path.basename(pull.MODELS[name].member))
    out = pull.model_path(name, cache=str(tmp_path))
    good = open(out, "rb").read()
    for damaged in (good[:len(good) // 2], good[:100], b"x" * 4096):
        with open(out, "wb") as f:
            f.write(damaged)
        said = []
        assert pull.model_path(name, cache=str(tmp_path), log=said.append) == out
        assert any("is damaged" in s for s in said) and open(out, "rb").read() == good, said
    said = []
    assert pull.model_path(name, cache=str(tmp_path), log=said.append) == out and said == []
