"""A reader of GGUF files (llama.cpp's model format), in pure Python and numpy.

Only what importing a model needs: the header, every metadata value, the
tensor directory and the tensors' bytes (mapped, never read whole), plus
dequantizers to float32 for the common tensor types. GGUF versions 2 and 3,
little-endian. The file is treated as hostile (docs/GGUF.md): every count,
length, offset and size is checked against the file size before anything is
allocated or sliced, and every failure is a GGUFError naming the field or
tensor at fault.
"""
from __future__ import annotations

import mmap
import os
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

MAGIC = b"GGUF"
DEFAULT_ALIGNMENT = 32
MAX_DIMS = 4
MAX_NESTING = 8          # arrays of arrays of ...: deeper is refused
MAX_ALIGNMENT = 1 << 24

# metadata value types
(T_UINT8, T_INT8, T_UINT16, T_INT16, T_UINT32, T_INT32, T_FLOAT32, T_BOOL, T_STRING, T_ARRAY,
 T_UINT64, T_INT64, T_FLOAT64) = range(13)
_SCALAR = {T_UINT8: "<u1", T_INT8: "<i1", T_UINT16: "<u2", T_INT16: "<i2", T_UINT32: "<u4", T_INT32: "<i4",
           T_FLOAT32: "<f4", T_BOOL: "<u1", T_UINT64: "<u8", T_INT64: "<i8", T_FLOAT64: "<f8"}
VALUE_TYPE_NAMES = {T_UINT8: "UINT8", T_INT8: "INT8", T_UINT16: "UINT16", T_INT16: "INT16", T_UINT32: "UINT32",
                    T_INT32: "INT32", T_FLOAT32: "FLOAT32", T_BOOL: "BOOL", T_STRING: "STRING", T_ARRAY: "ARRAY",
                    T_UINT64: "UINT64", T_INT64: "INT64", T_FLOAT64: "FLOAT64"}

# ggml tensor types: number -> (name, elements per block, bytes per block); None: size not known here
GGML_TYPES: Dict[int, Tuple[str, Optional[int], Optional[int]]] = {
    0: ("F32", 1, 4), 1: ("F16", 1, 2), 2: ("Q4_0", 32, 18), 3: ("Q4_1", 32, 20),
    6: ("Q5_0", 32, 22), 7: ("Q5_1", 32, 24), 8: ("Q8_0", 32, 34), 9: ("Q8_1", 32, 36),
    10: ("Q2_K", 256, 84), 11: ("Q3_K", 256, 110), 12: ("Q4_K", 256, 144), 13: ("Q5_K", 256, 176),
    14: ("Q6_K", 256, 210), 15: ("Q8_K", 256, 292), 16: ("IQ2_XXS", 256, 66), 17: ("IQ2_XS", 256, 74),
    18: ("IQ3_XXS", 256, 98), 19: ("IQ1_S", 256, 50), 20: ("IQ4_NL", 32, 18), 21: ("IQ3_S", 256, 110),
    22: ("IQ2_S", 256, 82), 23: ("IQ4_XS", 256, 136), 24: ("I8", 1, 1), 25: ("I16", 1, 2), 26: ("I32", 1, 4),
    27: ("I64", 1, 8), 28: ("F64", 1, 8), 29: ("IQ1_M", 256, 56), 30: ("BF16", 1, 2), 34: ("TQ1_0", 256, 54),
    35: ("TQ2_0", 256, 66), 39: ("MXFP4", 32, 17),
}
TYPE_NUMBERS = {v[0]: k for k, v in GGML_TYPES.items()}


class GGUFError(ValueError):
    """The file is not a GGUF file this reader accepts; the message names the field or tensor."""


@dataclass(frozen=True)
class TensorInfo:
    name: str
    type: int            # ggml type number
    shape: Tuple[int, ...]  # numpy order: rows first (GGUF stores ne[0], the row length, first)
    offset: int          # absolute offset in the file
    nbytes: int

    @property
    def type_name(self) -> str:
        return GGML_TYPES[self.type][0]


class _Cursor:
    """Bounds-checked little-endian reads from a buffer of known size."""

    def __init__(self, buf: Any, size: int):
        self.buf = buf
        self.size = size
        self.pos = 0

    def need(self, n: int, what: str) -> None:
        if n < 0 or n > self.size - self.pos:
            raise GGUFError(f"{what}: needs {n} bytes at offset {self.pos}, the file ends at {self.size} (truncated?)")

    def scalar(self, vtype: int, what: str) -> Any:
        dt = np.dtype(_SCALAR[vtype])
        self.need(dt.itemsize, what)
        v = np.frombuffer(self.buf, dt, 1, self.pos)[0]
        self.pos += dt.itemsize
        if vtype == T_BOOL:
            if v > 1:
                raise GGUFError(f"{what}: boolean value {int(v)} (must be 0 or 1)")
            return bool(v)
        return float(v) if dt.kind == "f" else int(v)

    def u32(self, what: str) -> int:
        return self.scalar(T_UINT32, what)

    def u64(self, what: str) -> int:
        return self.scalar(T_UINT64, what)

    def string(self, what: str) -> str:
        n = self.u64(what + " (length)")
        self.need(n, what)
        raw = bytes(self.buf[self.pos:self.pos + n])
        self.pos += n
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise GGUFError(f"{what}: not valid UTF-8 ({e.reason} at byte {e.start})") from None

    def count(self, what: str, min_item_bytes: int) -> int:
        """A u64 count of items that each take at least min_item_bytes of the rest of the file."""
        n = self.u64(what)
        if n > (self.size - self.pos) // max(min_item_bytes, 1):
            raise GGUFError(f"{what}: {n} items cannot fit in the {self.size - self.pos} bytes left of the file")
        return n

    def value(self, vtype: int, what: str, depth: int = 0) -> Any:
        if vtype in _SCALAR:
            return self.scalar(vtype, what)
        if vtype == T_STRING:
            return self.string(what)
        if vtype == T_ARRAY:
            if depth >= MAX_NESTING:
                raise GGUFError(f"{what}: arrays nested deeper than {MAX_NESTING}")
            etype = self.u32(what + " (array element type)")
            if etype in _SCALAR:
                dt = np.dtype(_SCALAR[etype])
                n = self.count(what + " (array length)", dt.itemsize)
                arr = np.frombuffer(self.buf, dt, n, self.pos).copy() if n else np.zeros(0, dt)
                self.pos += n * dt.itemsize
                if etype == T_BOOL:
                    if n and arr.max() > 1:
                        raise GGUFError(f"{what}: boolean array holds a value other than 0 or 1")
                    arr = arr.astype(bool)
                return arr
            if etype == T_STRING:
                n = self.count(what + " (array length)", 8)
                return [self.string(f"{what}[{i}]") for i in range(n)]
            if etype == T_ARRAY:
                n = self.count(what + " (array length)", 12)
                return [self.value(T_ARRAY, f"{what}[{i}]", depth + 1) for i in range(n)]
            raise GGUFError(f"{what}: unknown array element type {etype}")
        raise GGUFError(f"{what}: unknown value type {vtype}")


class GGUFFile:
    """A parsed GGUF file: `version`, `metadata` (key -> value), `value_types`
    (key -> GGUF value type; arrays: (T_ARRAY, element type)), `tensors`
    (name -> TensorInfo, in file order), `alignment`, `data_offset`.
    Tensor bytes stay in the file's mapping until asked for."""

    def __init__(self, path: str):
        self.path = path
        self._mm: Optional[mmap.mmap] = None
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size < 24:
                raise GGUFError(f"{path}: {size} bytes, too short for a GGUF file")
            self._mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        try:
            self._parse(size)
        except GGUFError as e:
            self.close()
            raise GGUFError(f"{path}: {e}") from None
        except BaseException:
            self.close()
            raise

    def _parse(self, size: int) -> None:
        self.size = size
        c = _Cursor(self._mm, size)
        if bytes(self._mm[:4]) != MAGIC:
            raise GGUFError("not a GGUF file (no GGUF magic)")
        c.pos = 4
        version = c.u32("header version")
        if version in (2, 3):
            pass
        elif version == 1:
            raise GGUFError("GGUF version 1 is not supported (versions 2 and 3 are); re-convert with a newer llama.cpp")
        elif version & 0xFFFF == 0 and (version >> 24) in (1, 2, 3):
            raise GGUFError("big-endian GGUF files are not supported")
        else:
            raise GGUFError(f"GGUF version {version} is not supported (versions 2 and 3 are)")
        self.version = version
        n_tensors = c.u64("header tensor_count")
        n_kv = c.u64("header metadata_kv_count")
        # every key/value takes at least 13 bytes (key length, type, one byte); every tensor info 24
        if n_kv > (size - c.pos) // 13:
            raise GGUFError(f"header metadata_kv_count {n_kv} cannot fit in a file of {size} bytes")
        if n_tensors > (size - c.pos) // 24:
            raise GGUFError(f"header tensor_count {n_tensors} cannot fit in a file of {size} bytes")
        self.metadata: Dict[str, Any] = {}
        self.value_types: Dict[str, Any] = {}
        for i in range(n_kv):
            key = c.string(f"metadata key {i}")
            if not key:
                raise GGUFError(f"metadata key {i} is empty")
            if key in self.metadata:
                raise GGUFError(f"metadata key {key!r} appears twice")
            vtype = c.u32(f"metadata {key!r} (type)")
            if vtype == T_ARRAY:
                save = c.pos
                etype = c.u32(f"metadata {key!r} (array element type)")
                c.pos = save
                self.value_types[key] = (T_ARRAY, etype)
            else:
                self.value_types[key] = vtype
            self.metadata[key] = c.value(vtype, f"metadata {key!r}")
        align = self.metadata.get("general.alignment", DEFAULT_ALIGNMENT)
        if "general.alignment" in self.metadata and self.value_types["general.alignment"] != T_UINT32:
            raise GGUFError("metadata 'general.alignment' must be a UINT32")
        if not 1 <= align <= MAX_ALIGNMENT or align & (align - 1):
            raise GGUFError(f"metadata 'general.alignment' is {align} (must be a power of two up to {MAX_ALIGNMENT})")
        self.alignment = int(align)
        infos: List[Tuple[str, int, Tuple[int, ...], int, int]] = []
        names = set()
        for i in range(n_tensors):
            name = c.string(f"tensor {i} name")
            what = f"tensor {name!r}"
            if not name:
                raise GGUFError(f"tensor {i} has an empty name")
            if name in names:
                raise GGUFError(f"{what} appears twice")
            names.add(name)
            nd = c.u32(f"{what} n_dims")
            if not 1 <= nd <= MAX_DIMS:
                raise GGUFError(f"{what}: {nd} dimensions (1 to {MAX_DIMS} are valid)")
            ne = [c.u64(f"{what} dimension {d}") for d in range(nd)]
            ttype = c.u32(f"{what} type")
            off = c.u64(f"{what} offset")
            if ttype not in GGML_TYPES:
                raise GGUFError(f"{what}: unknown tensor type {ttype}")
            tname, belems, bbytes = GGML_TYPES[ttype]
            if any(n < 1 for n in ne):
                raise GGUFError(f"{what}: dimension of size 0 in {ne}")
            n_elem = 1
            for n in ne:
                n_elem *= n           # Python integers: no overflow; every type takes > 1/8 byte per element
                if n_elem > 8 * size:
                    raise GGUFError(f"{what}: shape {ne} holds more data than the file")
            if ne[0] % belems:
                raise GGUFError(f"{what}: rows of {ne[0]} elements are not whole blocks of {belems} ({tname})")
            nbytes = n_elem // belems * bbytes
            if off % self.alignment:
                raise GGUFError(f"{what}: data offset {off} is not a multiple of the alignment {self.alignment}")
            infos.append((name, ttype, tuple(reversed(ne)), off, nbytes))
        self.data_offset = -(-c.pos // self.alignment) * self.alignment
        self.tensors: Dict[str, TensorInfo] = {}
        for name, ttype, shape, off, nbytes in infos:
            start = self.data_offset + off
            if start > size or nbytes > size - start:
                raise GGUFError(f"tensor {name!r}: data at {start}..{start + nbytes} is past the end of the "
                                f"file ({size} bytes; truncated?)")
            self.tensors[name] = TensorInfo(name, ttype, shape, start, nbytes)
        spans = sorted((t.offset, t.offset + t.nbytes, t.name) for t in self.tensors.values())
        for (a0, a1, an), (b0, b1, bn) in zip(spans, spans[1:]):
            if b0 < a1:
                raise GGUFError(f"tensors {an!r} and {bn!r} overlap in the file")

    # -- access ------------------------------------------------------------

    def close(self) -> None:
        if self._mm is not None:
            try:
                self._mm.close()
            except BufferError:  # arrays still view the mapping; it goes with them
                pass
            self._mm = None

    def __enter__(self) -> "GGUFFile":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def get(self, key: str, default: Any = None) -> Any:
        return self.metadata.get(key, default)

    def raw(self, name: str) -> np.ndarray:
        """The tensor's bytes as a read-only uint8 array over the file mapping (no copy)."""
        t = self.tensors[name]
        return np.frombuffer(self._mm, np.uint8, t.nbytes, t.offset)

    def blocks(self, name: str) -> np.ndarray:
        """The bytes as [rows, row bytes] (rows: every dimension but the first GGUF one)."""
        t = self.tensors[name]
        rows = int(np.prod(t.shape[:-1], dtype=np.int64)) if len(t.shape) > 1 else 1
        return self.raw(name).reshape(rows, -1)

    def dequantize(self, name: str) -> np.ndarray:
        """The tensor as float32, in its shape."""
        t = self.tensors[name]
        return dequantize(self.raw(name), t.type).reshape(t.shape)


# ---------------------------------------------------------------------------
# dequantization: bytes of whole blocks -> float32, in ggml's arithmetic (the same
# products and sums, in the same order, so the results are bit-identical)

def _f16(b: np.ndarray) -> np.ndarray:
    """[n, 2] uint8 -> [n, 1] float32."""
    return np.ascontiguousarray(b).view("<f2").astype(np.float32)


def _nibbles(qs: np.ndarray) -> np.ndarray:
    """[n, 16] bytes -> [n, 32]: low nibbles (elements 0..15) then high nibbles (16..31)."""
    return np.concatenate([qs & 0x0F, qs >> 4], axis=1)


def _high_bits(qh: np.ndarray) -> np.ndarray:
    """[n, 4] bytes of a little-endian u32 -> [n, 32] bits (bit j: element j)."""
    return np.unpackbits(np.ascontiguousarray(qh), axis=1, bitorder="little")


def _deq_q8_0(b: np.ndarray) -> np.ndarray:
    return _f16(b[:, :2]) * b[:, 2:].view(np.int8).astype(np.float32)


def _deq_q4_0(b: np.ndarray) -> np.ndarray:
    return _f16(b[:, :2]) * (_nibbles(b[:, 2:]).astype(np.int8) - 8).astype(np.float32)


def _deq_q4_1(b: np.ndarray) -> np.ndarray:
    return _f16(b[:, :2]) * _nibbles(b[:, 4:]).astype(np.float32) + _f16(b[:, 2:4])


def _q5_codes(qh: np.ndarray, qs: np.ndarray) -> np.ndarray:
    return _nibbles(qs) | (_high_bits(qh) << 4)


def _deq_q5_0(b: np.ndarray) -> np.ndarray:
    return _f16(b[:, :2]) * (_q5_codes(b[:, 2:6], b[:, 6:]).astype(np.int8) - 16).astype(np.float32)


def _deq_q5_1(b: np.ndarray) -> np.ndarray:
    return _f16(b[:, :2]) * _q5_codes(b[:, 4:8], b[:, 8:]).astype(np.float32) + _f16(b[:, 2:4])


def _k_scales_mins(s: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """The 8 six-bit scales and mins of a Q4_K/Q5_K block from its 12 bytes."""
    lo, hi, mix = s[:, 0:4], s[:, 4:8], s[:, 8:12]
    sc = np.concatenate([lo & 63, (mix & 15) | ((lo >> 6) << 4)], axis=1)
    mn = np.concatenate([hi & 63, (mix >> 4) | ((hi >> 6) << 4)], axis=1)
    return sc.astype(np.float32), mn.astype(np.float32)


def _deq_q4_k(b: np.ndarray) -> np.ndarray:
    n = b.shape[0]
    d, dmin = _f16(b[:, 0:2]), _f16(b[:, 2:4])
    sc, mn = _k_scales_mins(b[:, 4:16])
    qs = b[:, 16:].reshape(n, 4, 32)                     # 4 chunks of 64 elements: low nibbles, high nibbles
    q = np.stack([qs & 15, qs >> 4], axis=2).reshape(n, 8, 32).astype(np.float32)
    return ((d * sc)[:, :, None] * q - (dmin * mn)[:, :, None]).reshape(n, 256)


def _deq_q5_k(b: np.ndarray) -> np.ndarray:
    n = b.shape[0]
    d, dmin = _f16(b[:, 0:2]), _f16(b[:, 2:4])
    sc, mn = _k_scales_mins(b[:, 4:16])
    qh = b[:, 16:48]                                      # bit j of byte l: element 32 j + l's fifth bit
    qs = b[:, 48:].reshape(n, 4, 32)
    low = np.stack([qs & 15, qs >> 4], axis=2).reshape(n, 8, 32)
    high = (qh[:, None, :] >> np.arange(8, dtype=np.uint8)[None, :, None]) & 1
    q = (low | (high << 4)).astype(np.float32)
    return ((d * sc)[:, :, None] * q - (dmin * mn)[:, :, None]).reshape(n, 256)


def _deq_q6_k(b: np.ndarray) -> np.ndarray:
    n = b.shape[0]
    ql = b[:, 0:128].reshape(n, 2, 64)                    # two halves of 128 elements
    qh = b[:, 128:192].reshape(n, 2, 32)
    sc = b[:, 192:208].view(np.int8).astype(np.float32)
    d = _f16(b[:, 208:210])
    # quarter k of a half (32 elements): nibble k >> 1 of ql[32 (k & 1) + l], bits 2k of qh[l]
    low = np.stack([ql & 15, ql >> 4], axis=2).reshape(n, 2, 4, 32)
    high = (qh[:, :, None, :] >> (2 * np.arange(4, dtype=np.uint8))[None, None, :, None]) & 3
    q = ((low | (high << 4)).astype(np.int8) - 32).astype(np.float32).reshape(n, 16, 16)
    return ((d * sc)[:, :, None] * q).reshape(n, 256)


def _deq_q2_k(b: np.ndarray) -> np.ndarray:
    n = b.shape[0]
    s = b[:, 0:16]
    qs = b[:, 16:80].reshape(n, 2, 1, 32)
    d, dmin = _f16(b[:, 80:82]), _f16(b[:, 82:84])
    dl = d * (s & 15).astype(np.float32)
    ml = dmin * (s >> 4).astype(np.float32)
    q = ((qs >> (2 * np.arange(4, dtype=np.uint8))[None, None, :, None]) & 3).reshape(n, 16, 16).astype(np.float32)
    return (dl[:, :, None] * q - ml[:, :, None]).reshape(n, 256)


def _deq_q3_k(b: np.ndarray) -> np.ndarray:
    n = b.shape[0]
    hmask = b[:, 0:32]
    qs = b[:, 32:96].reshape(n, 2, 1, 32)
    s = b[:, 96:108]
    d = _f16(b[:, 108:110])
    low4 = np.concatenate([s[:, 0:8] & 15, s[:, 0:8] >> 4], axis=1)                 # scales 0..15, low 4 bits
    hi2 = ((s[:, 8:12][:, None, :] >> (2 * np.arange(4, dtype=np.uint8))[None, :, None]) & 3).reshape(n, 16)
    sc = ((low4 | (hi2 << 4)).astype(np.int8) - 32).astype(np.float32)
    ql = ((qs >> (2 * np.arange(4, dtype=np.uint8))[None, None, :, None]) & 3).reshape(n, 8, 32)
    hb = (hmask[:, None, :] >> np.arange(8, dtype=np.uint8)[None, :, None]) & 1       # [n, 8, 32]
    q = (ql.astype(np.int8) - ((hb ^ 1) << 2).astype(np.int8)).astype(np.float32).reshape(n, 16, 16)
    return ((d * sc)[:, :, None] * q).reshape(n, 256)


def _deq_bf16(b: np.ndarray) -> np.ndarray:
    return (np.ascontiguousarray(b).view("<u2").astype(np.uint32) << 16).view(np.float32)


_DEQUANT = {
    TYPE_NUMBERS["F32"]: lambda b: np.ascontiguousarray(b).view("<f4").astype(np.float32),
    TYPE_NUMBERS["F16"]: lambda b: np.ascontiguousarray(b).view("<f2").astype(np.float32),
    TYPE_NUMBERS["BF16"]: _deq_bf16,
    TYPE_NUMBERS["Q8_0"]: _deq_q8_0, TYPE_NUMBERS["Q4_0"]: _deq_q4_0, TYPE_NUMBERS["Q4_1"]: _deq_q4_1,
    TYPE_NUMBERS["Q5_0"]: _deq_q5_0, TYPE_NUMBERS["Q5_1"]: _deq_q5_1, TYPE_NUMBERS["Q2_K"]: _deq_q2_k,
    TYPE_NUMBERS["Q3_K"]: _deq_q3_k, TYPE_NUMBERS["Q4_K"]: _deq_q4_k, TYPE_NUMBERS["Q5_K"]: _deq_q5_k,
    TYPE_NUMBERS["Q6_K"]: _deq_q6_k,
}
DEQUANTIZABLE = frozenset(GGML_TYPES[t][0] for t in _DEQUANT)


def dequantize(data: np.ndarray, ggml_type: int, chunk_blocks: int = 1 << 16) -> np.ndarray:
    """Bytes of whole blocks of `ggml_type` -> a flat float32 array (in pieces of
    chunk_blocks blocks, so temporaries stay small)."""
    if ggml_type not in _DEQUANT:
        name = GGML_TYPES.get(ggml_type, (f"type {ggml_type}",))[0]
        raise GGUFError(f"tensor type {name} cannot be dequantized (supported: {', '.join(sorted(DEQUANTIZABLE))})")
    _, belems, bbytes = GGML_TYPES[ggml_type]
    flat = np.asarray(data, dtype=np.uint8).reshape(-1)
    if flat.size % bbytes:
        raise GGUFError(f"{flat.size} bytes are not whole blocks of {bbytes}")
    b = flat.reshape(-1, bbytes)
    out = np.empty(b.shape[0] * belems, dtype=np.float32)
    f = _DEQUANT[ggml_type]
    with np.errstate(all="ignore"):  # NaN/inf scales give NaN/inf values, as in ggml
        for i in range(0, b.shape[0], chunk_blocks):
            part = b[i:i + chunk_blocks]
            out[i * belems:(i + part.shape[0]) * belems] = f(part).reshape(-1)
    return out
