"""Reading and writing `.cism` files (docs/FORMAT.md) in pure Python.

The writer streams tensors to disk one at a time, so converting a model never
needs more memory than its largest tensor. The reader is for inspection and
tests; the C library has its own, stricter loader.
"""
from __future__ import annotations

import os
import re
import secrets
import socket
import struct
import sys
import zlib
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple

import numpy as np

MAGIC = b"CISM\r\n\x1a\n"
VERSION = 3  # 3: checksums; 2: the interleaved dtypes store scales per superblock (docs/FORMAT.md); 1, 2 still read
ALIGN = 64
HEADER_SIZE = 128        # version 3
LEGACY_HEADER_SIZE = 64  # versions 1 and 2
HEADER_CRC_AT = 64       # version 3: u32 CRC-32 of [0, tensors_offset + tensors_size), this field as 0


def header_size(version: int) -> int:
    return HEADER_SIZE if version >= 3 else LEGACY_HEADER_SIZE


def header_crc(prefix) -> int:
    """The version 3 header checksum of `prefix` = the file's bytes [0, tensors_offset
    + tensors_size): CRC-32 (zlib's) with the 4 bytes of the checksum field as zero."""
    b = memoryview(prefix)
    c = zlib.crc32(b[:HEADER_CRC_AT])
    c = zlib.crc32(b"\0\0\0\0", c)
    return zlib.crc32(b[HEADER_CRC_AT + 4:], c)

META_INT, META_FLOAT, META_STRING, META_BYTES = 1, 2, 3, 4
META_INT_ARRAY, META_FLOAT_ARRAY, META_STRING_ARRAY = 5, 6, 7

# dtype numbers; quantized formats are registered by cism.quant
DTYPE_F32, DTYPE_F16, DTYPE_BF16 = 0, 1, 2
DTYPE_NAMES = {DTYPE_F32: "f32", DTYPE_F16: "f16", DTYPE_BF16: "bf16"}


class FormatError(ValueError):
    """A .cism file that does not follow docs/FORMAT.md."""


# ---------------------------------------------------------------------------
# temporary files: `<name>.[<kind>-]<pid>@<host>.<random>.cism-partial`, next to the output

PARTIAL_SUFFIX = ".cism-partial"


def _host() -> str:
    return re.sub(r"[^A-Za-z0-9-]", "-", socket.gethostname())[:24] or "host"


def _stem(path: str) -> str:
    return os.path.basename(path)[:64]  # bounded: a temporary file of a temporary file stays a legal name


def temp_file(path: str, kind: str = "") -> Tuple[int, str]:
    """Creates a new, unique file in the folder of `path` (so that os.replace onto `path`
    is atomic) and returns (fd, its path). The name says what it is and who writes it:
    `<name>.[<kind>-]<pid>@<host>.<random>.cism-partial`, so that clean_stale_temps
    can tell a killed writer's leftovers from a running writer's file. Created like
    open() creates files (mode 0666 less the umask), never over an existing file."""
    folder = os.path.dirname(os.path.abspath(path))
    prefix = f"{_stem(path)}.{kind + '-' if kind else ''}{os.getpid()}@{_host()}."
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0)
    for _ in range(100):
        tmp = os.path.join(folder, prefix + secrets.token_hex(4) + PARTIAL_SUFFIX)
        try:
            return os.open(tmp, flags, 0o666), tmp
        except FileExistsError:
            continue
    raise FileExistsError(f"could not create a temporary file next to {path}")


def _pid_alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # PermissionError: alive, someone else's
        return True
    return True


def clean_stale_temps(path: str) -> List[str]:
    """Deletes the temporary files (temp_file) of writers of `path` that were killed
    (SIGKILL, power loss) before they could clean up, and returns their paths. Only
    files named by temp_file for `path`, by a process of this host that no longer
    exists, are touched: a running writer's file, another machine's (a shared
    folder) and anything else are left alone. A reused pid keeps a file (it is
    then only named for what it is). Not on Windows, where no process can be
    probed without being signalled."""
    if os.name != "posix":
        return []
    folder = os.path.dirname(os.path.abspath(path))
    pattern = re.compile(re.escape(_stem(path)) + r"\.(?:[a-z]+-)?([0-9]+)@" + re.escape(_host())
                         + r"\..+" + re.escape(PARTIAL_SUFFIX))
    removed: List[str] = []
    try:
        names = os.listdir(folder)
    except OSError:
        return removed
    for name in names:
        m = pattern.fullmatch(name)
        if not m or _pid_alive(int(m.group(1))):
            continue
        p = os.path.join(folder, name)
        try:
            if os.path.isfile(p) and not os.path.islink(p):
                os.unlink(p)
                removed.append(p)
        except OSError:  # another writer cleaned it first, or not ours to delete
            pass
    return removed


@dataclass
class Bytes:
    """Marks a metadata value as opaque BYTES (a `bytes` value defaults to BYTES too)."""
    data: bytes


def _encode_meta(key: str, value: Any) -> bytes:
    kb = key.encode("ascii")
    out = [struct.pack("<I", len(kb)), kb]
    if isinstance(value, bool):
        value = int(value)
    if isinstance(value, (int, np.integer)):
        out += [struct.pack("<Iq", META_INT, int(value))]
    elif isinstance(value, (float, np.floating)):
        out += [struct.pack("<Id", META_FLOAT, float(value))]
    elif isinstance(value, str):
        b = value.encode("utf-8")
        out += [struct.pack("<IQ", META_STRING, len(b)), b]
    elif isinstance(value, (bytes, bytearray, Bytes)):
        b = bytes(value.data if isinstance(value, Bytes) else value)
        out += [struct.pack("<IQ", META_BYTES, len(b)), b]
    elif isinstance(value, np.ndarray) and value.dtype.kind == "f":
        a = np.ascontiguousarray(value, dtype="<f4")
        out += [struct.pack("<IQ", META_FLOAT_ARRAY, a.size), a.tobytes()]
    elif isinstance(value, np.ndarray) and value.dtype.kind in "iu":
        a = np.ascontiguousarray(value, dtype="<i8")
        out += [struct.pack("<IQ", META_INT_ARRAY, a.size), a.tobytes()]
    elif isinstance(value, (list, tuple)):
        if all(isinstance(v, (bytes, str)) for v in value):
            parts = [struct.pack("<IQ", META_STRING_ARRAY, len(value))]
            for v in value:
                b = v.encode("utf-8") if isinstance(v, str) else bytes(v)
                parts += [struct.pack("<I", len(b)), b]
            out += parts
        elif all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in value):
            a = np.asarray(value, dtype="<i8")
            out += [struct.pack("<IQ", META_INT_ARRAY, a.size), a.tobytes()]
        elif all(isinstance(v, (int, float, np.number)) for v in value):
            a = np.asarray(value, dtype="<f4")
            out += [struct.pack("<IQ", META_FLOAT_ARRAY, a.size), a.tobytes()]
        else:
            raise TypeError(f"metadata {key!r}: a list must hold only strings, only ints or only numbers")
    else:
        raise TypeError(f"metadata {key!r}: unsupported value type {type(value).__name__}")
    return b"".join(out)


def _check_key(key: str) -> None:
    if not key or len(key) > 256 or any(c not in "abcdefghijklmnopqrstuvwxyz0123456789_." for c in key):
        raise ValueError(f"invalid metadata key {key!r} (1..256 chars of [a-z0-9_.])")


@dataclass
class TensorSpec:
    name: str
    dtype: int
    shape: Tuple[int, ...]
    nbytes: int
    offset: int = 0
    crc: int = 0          # CRC-32 of the data, known once written
    crc_at: int = 0       # where the crc field lies in the directory


class Writer:
    """Writes a .cism file.

    Usage::

        w = Writer(metadata)
        w.add("token_embd", DTYPE_F32, (vocab, dim), nbytes)   # declare every tensor first
        ...
        with w.open(path) as f:                                  # then stream the data in order
            f.write_tensor("token_embd", array_or_bytes)

    The output goes to a temporary file of its own next to `path` (temp_file), is
    checked by `validate(tmp_path)` when one is given, and is renamed into place
    only when complete and valid, so an interrupted or failed conversion never
    leaves a broken file behind, never touches an existing `path`, and concurrent
    writers of one path never mix their data (the last one to finish wins).
    Without `overwrite`, an existing `path` is never replaced, even one that
    appeared while writing. Leftovers of killed writers are deleted (clean_stale_temps).
    """

    def __init__(self, metadata: Dict[str, Any]):
        for k in metadata:
            _check_key(k)
        self.metadata = dict(metadata)
        self.tensors: List[TensorSpec] = []
        self._names: Dict[str, TensorSpec] = {}

    def add(self, name: str, dtype: int, shape: Sequence[int], nbytes: int) -> None:
        if name in self._names:
            raise ValueError(f"tensor {name!r} declared twice")
        if not 1 <= len(shape) <= 4 or any(int(d) <= 0 for d in shape):
            raise ValueError(f"tensor {name!r}: bad shape {tuple(shape)}")
        spec = TensorSpec(name, int(dtype), tuple(int(d) for d in shape), int(nbytes))
        self.tensors.append(spec)
        self._names[name] = spec

    def _layout(self) -> Tuple[bytes, bytes, int]:
        meta = struct.pack("<I", len(self.metadata)) + b"".join(_encode_meta(k, v) for k, v in self.metadata.items())
        off = 0
        for t in self.tensors:
            t.offset = off
            off += (t.nbytes + ALIGN - 1) // ALIGN * ALIGN
        data_size = self.tensors[-1].offset + self.tensors[-1].nbytes if self.tensors else 0
        parts = [struct.pack("<I", len(self.tensors))]
        pos = 4
        for t in self.tensors:
            nb = t.name.encode("ascii")
            parts.append(struct.pack("<I", len(nb)) + nb + struct.pack("<II", t.dtype, len(t.shape)))
            parts.append(struct.pack(f"<{len(t.shape)}Q", *t.shape) + struct.pack("<QQI", t.offset, t.nbytes, 0))
            pos += len(parts[-2]) + len(parts[-1])
            t.crc_at = pos - 4  # the checksum, filled in once the data is written
        return meta, b"".join(parts), data_size

    def open(self, path: str, overwrite: bool = False,
             validate: Optional[Callable[[str], None]] = None) -> "_OpenWriter":
        if os.path.exists(path) and not overwrite:
            raise FileExistsError(f"{path} exists; pass overwrite=True (--force) to replace it")
        clean_stale_temps(path)
        return _OpenWriter(self, path, overwrite, validate)


class _AlignedFile:
    """A file written in whole, aligned 2 MiB pieces (and the rest at the end).

    The page cache keeps what a write() brings in as folios no larger than the
    write, so a model written tensor by tensor in small writes sits in 4 KiB
    pages; written this way, Linux file systems with large folios (ext4, xfs)
    keep it in 2 MiB folios, which libcism's mapping (advised MADV_HUGEPAGE)
    then maps with huge pages: faster decode with no copy (docs/PERFORMANCE.md)."""

    PIECE = 2 << 20

    def __init__(self, path: str, fd: Optional[int] = None):
        self.f = open(path if fd is None else fd, "wb", buffering=0)
        self.pending = bytearray()
        self.flushed = 0           # bytes in the file; a multiple of PIECE until close

    def tell(self) -> int:
        return self.flushed + len(self.pending)

    def _put(self, b) -> None:
        view = memoryview(b)
        while view.nbytes:
            n = self.f.write(view)
            view = view[n:]

    def write(self, data) -> None:
        buf = memoryview(data).cast("B")
        room = self.PIECE - len(self.pending)
        if buf.nbytes < room:
            self.pending += buf
            return
        self.pending += buf[:room]
        self._put(self.pending)
        self.flushed += self.PIECE
        self.pending = bytearray()
        buf = buf[room:]
        whole = buf.nbytes // self.PIECE * self.PIECE
        if whole:
            self._put(buf[:whole])
            self.flushed += whole
        self.pending += buf[whole:]

    def close(self, sync: bool = False, head: Optional[bytes] = None) -> None:
        """Writes what is pending and closes; `head` then overwrites the start of the
        file (a header completed at the end); `sync` first makes the data durable
        (before a rename makes it the output)."""
        try:
            if self.pending:
                self._put(self.pending)
                self.flushed += len(self.pending)
                self.pending = bytearray()
            if head:
                self.f.seek(0)
                self._put(head)
            if sync:
                os.fsync(self.f.fileno())
        finally:
            self.f.close()


class _OpenWriter:
    def __init__(self, w: Writer, path: str, overwrite: bool = False,
                 validate: Optional[Callable[[str], None]] = None):
        self.w = w
        self.path = path
        self.overwrite = overwrite
        self.validate = validate
        meta, tdir, data_size = w._layout()
        meta_off = HEADER_SIZE
        tens_off = meta_off + len(meta)
        data_off = (tens_off + len(tdir) + ALIGN - 1) // ALIGN * ALIGN
        header = MAGIC + struct.pack("<II6Q", VERSION, 0, meta_off, len(meta), tens_off, len(tdir), data_off, data_size)
        header += b"\0" * (HEADER_SIZE - len(header))  # the checksum (set at the end) and reserved bytes
        assert len(header) == HEADER_SIZE
        self.head = bytearray(header + meta + tdir)  # rewritten with the checksums when complete
        self.tens_off = tens_off
        fd, self.tmp = temp_file(path)
        try:
            self.f = _AlignedFile(self.tmp, fd)
        except BaseException:
            os.close(fd)
            os.unlink(self.tmp)
            raise
        try:
            self.f.write(self.head)
            self.f.write(b"\0" * (data_off - self.f.tell()))
        except BaseException:
            self.__exit__(*sys.exc_info())
            raise
        self.data_off = data_off
        self.next = 0

    def write_tensor(self, name: str, data: Any) -> None:
        spec = self.w.tensors[self.next]
        if spec.name != name:
            raise ValueError(f"tensors must be written in declaration order: expected {spec.name!r}, got {name!r}")
        if isinstance(data, np.ndarray):
            if data.dtype.byteorder == ">":
                data = data.astype(data.dtype.newbyteorder("<"))
            buf = memoryview(np.ascontiguousarray(data)).cast("B")
        else:
            buf = memoryview(data).cast("B")
        if buf.nbytes != spec.nbytes:
            raise ValueError(f"tensor {name!r}: {buf.nbytes} bytes given, {spec.nbytes} declared")
        pos = self.data_off + spec.offset
        if self.f.tell() < pos:
            self.f.write(b"\0" * (pos - self.f.tell()))
        self.f.write(buf)
        spec.crc = zlib.crc32(buf)
        self.next += 1

    def write_tensor_parts(self, name: str, parts: Iterable[Any]) -> None:
        """Like write_tensor, with the data given as consecutive pieces (arrays or
        bytes), so a large tensor never has to be in memory at once."""
        spec = self.w.tensors[self.next]
        if spec.name != name:
            raise ValueError(f"tensors must be written in declaration order: expected {spec.name!r}, got {name!r}")
        pos = self.data_off + spec.offset
        if self.f.tell() < pos:
            self.f.write(b"\0" * (pos - self.f.tell()))
        written = 0
        crc = 0
        for part in parts:
            if isinstance(part, np.ndarray):
                part = np.ascontiguousarray(part)
                if part.dtype.byteorder == ">":
                    part = part.astype(part.dtype.newbyteorder("<"))
            buf = memoryview(part).cast("B")
            written += buf.nbytes
            if written > spec.nbytes:
                raise ValueError(f"tensor {name!r}: more than the {spec.nbytes} declared bytes given")
            self.f.write(buf)
            crc = zlib.crc32(buf, crc)
        if written != spec.nbytes:
            raise ValueError(f"tensor {name!r}: {written} bytes given, {spec.nbytes} declared")
        spec.crc = crc
        self.next += 1

    def __enter__(self) -> "_OpenWriter":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        try:
            if exc_type is not None:
                self.f.pending = bytearray()  # nothing more to write: the file goes
                self.f.close()
                return
            if self.next != len(self.w.tensors):
                self.f.pending = bytearray()
                self.f.close()
                raise ValueError(f"only {self.next} of {len(self.w.tensors)} tensors were written")
            for t in self.w.tensors:  # the checksums: every tensor's, then the header's over them
                struct.pack_into("<I", self.head, self.tens_off + t.crc_at, t.crc)
            struct.pack_into("<I", self.head, HEADER_CRC_AT, header_crc(self.head))
            self.f.close(sync=True, head=bytes(self.head))
            if self.validate is not None:
                self.validate(self.tmp)
            self._publish()
        finally:
            if os.path.lexists(self.tmp):
                os.unlink(self.tmp)

    def _publish(self) -> None:
        """Renames the finished file to its path; without overwrite, atomically
        refuses a path that exists by now (a hard link cannot replace a file)."""
        if self.overwrite:
            os.replace(self.tmp, self.path)
            return
        try:
            os.link(self.tmp, self.path)
        except FileExistsError:
            raise FileExistsError(f"{self.path} appeared while it was written; kept it and discarded "
                                  "this conversion (pass overwrite=True (--force) to replace it)") from None
        except OSError:  # no hard links on this file system: check, then rename
            if os.path.lexists(self.path):
                raise FileExistsError(f"{self.path} appeared while it was written; kept it and discarded "
                                      "this conversion (pass overwrite=True (--force) to replace it)") from None
            os.replace(self.tmp, self.path)
        else:
            os.unlink(self.tmp)


# ---------------------------------------------------------------------------
# reading (inspection and tests)

@dataclass
class TensorInfo:
    name: str
    dtype: int
    shape: Tuple[int, ...]
    offset: int  # absolute
    nbytes: int
    crc: Optional[int] = None  # version 3: CRC-32 of the data
    entry_at: int = 0          # absolute position of its directory entry


class CismFile:
    """A parsed .cism file: `metadata` dict and `tensors` dict of TensorInfo."""

    def __init__(self, path: str):
        self.path = path
        with open(path, "rb") as f:
            head = f.read(HEADER_SIZE)
            if len(head) < LEGACY_HEADER_SIZE or head[:8] != MAGIC:
                raise FormatError(f"{path}: not a .cism file")
            version, flags, meta_off, meta_size, tens_off, tens_size, data_off, data_size = struct.unpack(
                "<II6Q", head[8:LEGACY_HEADER_SIZE])
            if not 1 <= version <= VERSION:
                raise FormatError(f"{path}: version {version} is not supported")
            if len(head) < header_size(version):
                raise FormatError(f"{path}: file too short for a version {version} header")
            self.header = dict(version=version, flags=flags, meta_offset=meta_off, meta_size=meta_size,
                               tensors_offset=tens_off, tensors_size=tens_size, data_offset=data_off,
                               data_size=data_size)
            if version >= 3:
                (self.header["header_crc"],) = struct.unpack_from("<I", head, HEADER_CRC_AT)
            f.seek(meta_off)
            meta = f.read(meta_size)
            f.seek(tens_off)
            tdir = f.read(tens_size)
        self.metadata = _parse_meta(meta)
        self.tensors: Dict[str, TensorInfo] = {}
        (n,) = struct.unpack_from("<I", tdir, 0)
        p = 4
        for _ in range(n):
            at = tens_off + p
            (ln,) = struct.unpack_from("<I", tdir, p)
            p += 4
            name = tdir[p:p + ln].decode("ascii")
            p += ln
            dtype, nd = struct.unpack_from("<II", tdir, p)
            p += 8
            shape = struct.unpack_from(f"<{nd}Q", tdir, p)
            p += 8 * nd
            off, nb = struct.unpack_from("<QQ", tdir, p)
            p += 16
            crc = None
            if version >= 3:
                (crc,) = struct.unpack_from("<I", tdir, p)
                p += 4
            self.tensors[name] = TensorInfo(name, dtype, tuple(shape), data_off + off, nb, crc, at)

    def checksum_errors(self) -> List[str]:
        """What does not match its checksum (version 3): [] when all is well; the
        C library's `cism verify` is the reference, this is for tools and tests."""
        if self.header["version"] < 3:
            return []
        errors = []
        with open(self.path, "rb") as f:
            prefix = f.read(self.header["tensors_offset"] + self.header["tensors_size"])
            if header_crc(prefix) != self.header["header_crc"]:
                errors.append("header")
            for t in self.tensors.values():
                f.seek(t.offset)
                crc, left = 0, t.nbytes
                while left:
                    b = f.read(min(left, 64 << 20))
                    if not b:
                        break
                    crc, left = zlib.crc32(b, crc), left - len(b)
                if left or crc != t.crc:
                    errors.append(t.name)
        return errors

    def raw(self, name: str) -> bytes:
        t = self.tensors[name]
        with open(self.path, "rb") as f:
            f.seek(t.offset)
            return f.read(t.nbytes)

    def array(self, name: str) -> np.ndarray:
        """A float/half tensor as a numpy array of its shape (quantized tensors: raw uint8 rows)."""
        t = self.tensors[name]
        raw = self.raw(name)
        if t.dtype == DTYPE_F32:
            return np.frombuffer(raw, "<f4").reshape(t.shape)
        if t.dtype == DTYPE_F16:
            return np.frombuffer(raw, "<f2").reshape(t.shape)
        if t.dtype == DTYPE_BF16:
            u = np.frombuffer(raw, "<u2").astype(np.uint32) << 16
            return u.view(np.float32).reshape(t.shape)
        rows = int(np.prod(t.shape[:-1]))
        return np.frombuffer(raw, np.uint8).reshape(rows, -1)


def write_with_f32(src: "CismFile", out: str, replace: Dict[str, Any]) -> None:
    """A copy of src at out, each tensor named in replace written as f32 from the value
    given (an array of its shape, or a function of its name returning one, called when
    the tensor is written) and every other tensor's bytes as they are."""
    w = Writer(src.metadata)
    for n, t in src.tensors.items():
        if n in replace:
            w.add(n, DTYPE_F32, t.shape, 4 * int(np.prod(t.shape)))
        else:
            w.add(n, t.dtype, t.shape, t.nbytes)
    with w.open(out, overwrite=True) as o:
        for n in src.tensors:
            if n in replace:
                v = replace[n]
                o.write_tensor(n, np.asarray(v(n) if callable(v) else v, dtype="<f4"))
            else:
                o.write_tensor(n, src.raw(n))


def _parse_meta(buf: bytes) -> Dict[str, Any]:
    out: Dict[str, Any] = {}
    (n,) = struct.unpack_from("<I", buf, 0)
    p = 4
    for _ in range(n):
        (kl,) = struct.unpack_from("<I", buf, p)
        p += 4
        key = buf[p:p + kl].decode("ascii")
        p += kl
        (typ,) = struct.unpack_from("<I", buf, p)
        p += 4
        if typ == META_INT:
            (v,) = struct.unpack_from("<q", buf, p); p += 8
        elif typ == META_FLOAT:
            (v,) = struct.unpack_from("<d", buf, p); p += 8
        elif typ in (META_STRING, META_BYTES):
            (ln,) = struct.unpack_from("<Q", buf, p); p += 8
            v = buf[p:p + ln]; p += ln
            v = v.decode("utf-8") if typ == META_STRING else bytes(v)
        elif typ == META_INT_ARRAY:
            (ln,) = struct.unpack_from("<Q", buf, p); p += 8
            v = np.frombuffer(buf, "<i8", ln, p).copy(); p += 8 * ln
        elif typ == META_FLOAT_ARRAY:
            (ln,) = struct.unpack_from("<Q", buf, p); p += 8
            v = np.frombuffer(buf, "<f4", ln, p).copy(); p += 4 * ln
        elif typ == META_STRING_ARRAY:
            (ln,) = struct.unpack_from("<Q", buf, p); p += 8
            v = []
            for _ in range(ln):
                (sl,) = struct.unpack_from("<I", buf, p); p += 4
                v.append(bytes(buf[p:p + sl])); p += sl
        else:
            raise FormatError(f"metadata {key!r}: unknown type {typ}")
        out[key] = v
    return out


# ---------------------------------------------------------------------------
# tests and tools that edit files on purpose

def reseal(path: str) -> None:
    """Recomputes, in place, every checksum of a version 3 file: for tests and the
    fuzz corpus, which edit a file on purpose and want the loader to look past
    the checksums at the edit. Never for a file that came out wrong."""
    f = CismFile(path)
    if f.header["version"] < 3:
        raise FormatError(f"{path}: format version {f.header['version']} has no checksums")
    with open(path, "r+b") as out:
        for t in f.tensors.values():
            out.seek(t.offset)
            crc = zlib.crc32(out.read(t.nbytes))
            out.seek(t.entry_at + 4 + len(t.name) + 8 + 8 * len(t.shape) + 16)
            out.write(struct.pack("<I", crc))
        out.seek(0)
        prefix = bytearray(out.read(f.header["tensors_offset"] + f.header["tensors_size"]))
        out.seek(HEADER_CRC_AT)
        out.write(struct.pack("<I", header_crc(prefix)))


def legacy_bytes(blob: bytes, version: int = 2) -> bytes:
    """A version 3 file image in the layout of version 1 or 2 (64-byte header, no
    checksums; tensor bytes unchanged, so for version 1 the interleaved tensors are
    still in version 2's order): how a file written before version 3 looks, for
    tests of the old versions."""
    assert version in (1, 2)
    (v, flags, meta_off, meta_size, tens_off, tens_size, data_off, data_size) = struct.unpack_from("<II6Q", blob, 8)
    if v != 3:
        raise FormatError(f"not a version 3 image (version {v})")
    meta = blob[meta_off:meta_off + meta_size]
    tdir = bytearray()
    (n,) = struct.unpack_from("<I", blob, tens_off)
    tdir += struct.pack("<I", n)
    p = tens_off + 4
    for _ in range(n):
        (ln,) = struct.unpack_from("<I", blob, p)
        (nd,) = struct.unpack_from("<I", blob, p + 4 + ln + 4)
        size = 4 + ln + 8 + 8 * nd + 16
        tdir += blob[p:p + size]
        p += size + 4  # drop the crc
    new_tens = LEGACY_HEADER_SIZE + meta_size
    new_data = (new_tens + len(tdir) + ALIGN - 1) // ALIGN * ALIGN
    head = MAGIC + struct.pack("<II6Q", version, flags, LEGACY_HEADER_SIZE, meta_size, new_tens, len(tdir),
                               new_data, data_size)
    out = head + meta + bytes(tdir)
    return out + b"\0" * (new_data - len(out)) + bytes(blob[data_off:])
