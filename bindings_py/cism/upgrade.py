"""Rewrite a .cism file of an older format version as the current one
(docs/FORMAT.md, version table), without the original checkpoint.

Version 1 differs only in the interleaved matrices (q8x16, q4sx16): a group of
16 rows kept every block's codes, then every block's scales; version 2 keeps
each superblock's scales after its codes. Everything else is copied byte for
byte. libcism loads version 1 files too, but only as a private copy; an
upgraded file is mapped as is. From the command line: `cism upgrade OLD -o NEW`.
"""
from __future__ import annotations

import os

import numpy as np

from . import format as fmt
from . import quant as q

CHUNK = 64 << 20  # bytes copied or rearranged at a time


def _v1_to_v2(dtype: int, cols: int) -> np.ndarray:
    """perm with v2_group = v1_group[perm] for one group of 16 rows."""
    block, cb, sb, _ = q.X16_GEOMETRY[dtype]
    nb = -(-cols // block)
    codes, scales = q.x16_group_offsets(dtype, cols)
    perm = np.empty(16 * nb * (cb + sb), dtype=np.int64)
    for b in range(nb):  # version 1: codes of block b at b * 16cb, its scales at nb * 16cb + b * 16sb
        perm[codes[b]:codes[b] + 16 * cb] = np.arange(b * 16 * cb, (b + 1) * 16 * cb)
        s0 = nb * 16 * cb + b * 16 * sb
        perm[scales[b]:scales[b] + 16 * sb] = np.arange(s0, s0 + 16 * sb)
    return perm


def upgrade(src: str, dst: str, overwrite: bool = False) -> int:
    """Writes src (an older version) to dst in the current version; returns the
    number of tensors rearranged. dst is written under a temporary name and
    renamed into place when complete; src is never modified."""
    f = fmt.CismFile(src)
    version = f.header["version"]
    if version == fmt.VERSION:
        raise fmt.FormatError(f"{src} is already format version {fmt.VERSION}")
    if os.path.exists(dst):
        if os.path.samefile(src, dst):
            raise FileExistsError(f"{dst} is the input file; write a new one")
        if not overwrite:
            raise FileExistsError(f"{dst} exists; pass overwrite=True (--force) to replace it")
    size = os.path.getsize(src)
    x16 = sorted((t for t in f.tensors.values() if t.dtype in q.X16_GEOMETRY), key=lambda t: t.offset)
    fmt.clean_stale_temps(dst)
    fd, tmp = fmt.temp_file(dst)
    out = fmt._AlignedFile(tmp, fd)
    try:
        with open(src, "rb") as inp:
            def copy(n: int) -> None:
                while n > 0:
                    b = inp.read(min(n, CHUNK))
                    if not b:
                        raise fmt.FormatError(f"{src}: file ends early (truncated?)")
                    out.write(b)
                    n -= len(b)

            head = bytearray(inp.read(fmt.HEADER_SIZE))
            head[8:12] = fmt.VERSION.to_bytes(4, "little")
            out.write(bytes(head))
            pos = fmt.HEADER_SIZE
            for t in x16:
                cols = t.shape[-1]
                gb = 16 * q.row_bytes(t.dtype, cols)
                if t.offset < pos or t.offset + t.nbytes > size or t.nbytes % gb:
                    raise fmt.FormatError(f"{src}: tensor {t.name!r} is not whole groups of 16 rows inside the file")
                copy(t.offset - pos)
                perm, per = _v1_to_v2(t.dtype, cols), max(1, CHUNK // gb)
                for g in range(0, t.nbytes // gb, per):
                    n = min(per, t.nbytes // gb - g)
                    groups = np.frombuffer(inp.read(n * gb), dtype=np.uint8)
                    if groups.size != n * gb:
                        raise fmt.FormatError(f"{src}: file ends early (truncated?)")
                    out.write(groups.reshape(n, gb)[:, perm].tobytes())
                pos = t.offset + t.nbytes
            copy(size - pos)
        out.close(sync=True)
        os.replace(tmp, dst)
    except BaseException:
        out.pending = bytearray()  # nothing more to write: the partial file goes
        out.close()
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return len(x16)
