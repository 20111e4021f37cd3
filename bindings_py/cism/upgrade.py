"""Rewrite a .cism file of an older format version as the current one
(docs/FORMAT.md, version table), without the original checkpoint.

Version 1 differs from 2 only in the interleaved matrices (q8x16, q4sx16): a
group of 16 rows kept every block's codes, then every block's scales; version 2
keeps each superblock's scales after its codes. Version 3 adds checksums (a
128-byte header with the checksum of header, metadata and directory; a CRC-32
per tensor in its directory entry). Metadata and every other tensor byte are
copied as they are. libcism loads version 1 files too, but only as a private
copy; an upgraded file is mapped as is. From the command line: `cism upgrade OLD -o NEW`.
"""
from __future__ import annotations

import os
import struct
import zlib

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
    renamed into place when complete; src is never modified.

    Version 3 adds checksums: the header grows to 128 bytes (its checksum and
    reserved bytes), every directory entry gains its tensor's CRC-32, and the data
    section moves by up to 64 bytes (tensor offsets are relative to it, so they
    stay). The checksums are computed from src as it is: a file damaged before
    the upgrade stays damaged, with checksums that now vouch for it; run
    `cism verify` (weights checked) on the result, or convert again when in doubt."""
    f = fmt.CismFile(src)
    version = f.header["version"]
    if version == fmt.VERSION:
        raise fmt.FormatError(f"{src} is already format version {fmt.VERSION}")
    if os.path.exists(dst):
        if os.path.samefile(src, dst):
            raise FileExistsError(f"{dst} is the input file; write a new one")
        if not overwrite:
            raise FileExistsError(f"{dst} exists; pass overwrite=True (--force) to replace it")
    h = f.header
    size = os.path.getsize(src)
    data_off, data_end = h["data_offset"], h["data_offset"] + h["data_size"]
    if data_end > size:
        raise fmt.FormatError(f"{src}: file ends early (truncated?)")
    with open(src, "rb") as inp:
        inp.seek(h["meta_offset"])
        meta = inp.read(h["meta_size"])
        inp.seek(h["tensors_offset"])
        tdir = inp.read(h["tensors_size"])
    if len(meta) != h["meta_size"] or len(tdir) != h["tensors_size"]:
        raise fmt.FormatError(f"{src}: file ends early (truncated?)")
    # the new directory: every entry as it was, then its crc (filled in below)
    tensors = list(f.tensors.values())  # directory order
    new_dir = bytearray(tdir[:4])
    crc_at = {}
    for t in tensors:
        at = t.entry_at - h["tensors_offset"]
        n = 4 + len(t.name) + 8 + 8 * len(t.shape) + 16
        new_dir += tdir[at:at + n]
        crc_at[t.name] = len(new_dir)
        new_dir += b"\0\0\0\0"
    tens_off = fmt.HEADER_SIZE + len(meta)
    new_data = (tens_off + len(new_dir) + fmt.ALIGN - 1) // fmt.ALIGN * fmt.ALIGN
    head = fmt.MAGIC + struct.pack("<II6Q", fmt.VERSION, 0, fmt.HEADER_SIZE, len(meta), tens_off, len(new_dir),
                                   new_data, h["data_size"])
    head = bytearray(head + b"\0" * (fmt.HEADER_SIZE - len(head)) + meta + new_dir)
    x16 = 0
    fmt.clean_stale_temps(dst)
    fd, tmp = fmt.temp_file(dst)
    out = fmt._AlignedFile(tmp, fd)
    try:
        with open(src, "rb") as inp:
            def copy(n: int, crc: int = 0) -> int:
                while n > 0:
                    b = inp.read(min(n, CHUNK))
                    if not b:
                        raise fmt.FormatError(f"{src}: file ends early (truncated?)")
                    out.write(b)
                    crc = zlib.crc32(b, crc)
                    n -= len(b)
                return crc

            out.write(bytes(head))
            out.write(b"\0" * (new_data - len(head)))
            inp.seek(data_off)
            pos = data_off
            for t in sorted(tensors, key=lambda t: t.offset):
                if t.offset < pos or t.offset + t.nbytes > data_end:
                    raise fmt.FormatError(f"{src}: tensor {t.name!r} overlaps another or lies outside the data")
                copy(t.offset - pos)
                if version == 1 and t.dtype in q.X16_GEOMETRY:
                    cols = t.shape[-1]
                    gb = 16 * q.row_bytes(t.dtype, cols)
                    if t.nbytes % gb:
                        raise fmt.FormatError(f"{src}: tensor {t.name!r} is not whole groups of 16 rows")
                    perm, per, crc = _v1_to_v2(t.dtype, cols), max(1, CHUNK // gb), 0
                    for g in range(0, t.nbytes // gb, per):
                        n = min(per, t.nbytes // gb - g)
                        groups = np.frombuffer(inp.read(n * gb), dtype=np.uint8)
                        if groups.size != n * gb:
                            raise fmt.FormatError(f"{src}: file ends early (truncated?)")
                        b = groups.reshape(n, gb)[:, perm].tobytes()
                        out.write(b)
                        crc = zlib.crc32(b, crc)
                    x16 += 1
                else:
                    crc = copy(t.nbytes)
                struct.pack_into("<I", head, fmt.HEADER_SIZE + len(meta) + crc_at[t.name], crc)
                pos = t.offset + t.nbytes
            copy(data_end - pos)
        struct.pack_into("<I", head, fmt.HEADER_CRC_AT, fmt.header_crc(head))
        out.close(sync=True, head=bytes(head))
        os.replace(tmp, dst)
    except BaseException:
        out.pending = bytearray()  # nothing more to write: the partial file goes
        out.close()
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return x16
