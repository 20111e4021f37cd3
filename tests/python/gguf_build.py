"""A minimal GGUF writer for tests: exact control over every field, including
wrong ones (the hostile-file tests and the fuzz corpus). Real GGUF files for
the import tests come from llama.cpp's own tools instead (test_gguf.py)."""
from __future__ import annotations

import struct
from typing import Any, List, Optional, Sequence, Tuple

import numpy as np

U8, I8, U16, I16, U32, I32, F32, BOOL, STR, ARR, U64, I64, F64 = range(13)
_FMT = {U8: "<B", I8: "<b", U16: "<H", I16: "<h", U32: "<I", I32: "<i", F32: "<f", BOOL: "<B", U64: "<Q",
        I64: "<q", F64: "<d"}


def gstr(s: Any) -> bytes:
    b = s.encode("utf-8") if isinstance(s, str) else bytes(s)
    return struct.pack("<Q", len(b)) + b


def value(vtype: int, v: Any, etype: Optional[int] = None) -> bytes:
    """The bytes of one value of type vtype (arrays: v a list, etype the element type;
    nested arrays: v a list of (etype, list) pairs)."""
    if vtype in _FMT:
        return struct.pack(_FMT[vtype], v)
    if vtype == STR:
        return gstr(v)
    if vtype == ARR:
        out = struct.pack("<IQ", etype, len(v))
        for x in v:
            out += value(ARR, x[1], x[0]) if etype == ARR else value(etype, x)
        return out
    raise ValueError(vtype)


def kv(key: str, vtype: int, v: Any, etype: Optional[int] = None) -> bytes:
    return gstr(key) + struct.pack("<I", vtype) + value(vtype, v, etype)


def tensor_info(name: str, dims: Sequence[int], ttype: int, offset: int) -> bytes:
    return gstr(name) + struct.pack("<I", len(dims)) + struct.pack(f"<{len(dims)}Q", *dims) + \
        struct.pack("<IQ", ttype, offset)


def build(kvs: List[bytes], tensors: List[Tuple[str, Sequence[int], int, bytes]], version: int = 3,
          alignment: int = 32, n_kv: Optional[int] = None, n_tensors: Optional[int] = None) -> bytes:
    """A GGUF file: kvs (from kv()), tensors (name, GGUF dims (ne0 first), ggml type, data bytes)
    laid out at aligned offsets."""
    infos = b""
    data = b""
    for name, dims, ttype, raw in tensors:
        pad = (-len(data)) % alignment
        data += b"\0" * pad
        infos += tensor_info(name, dims, ttype, len(data))
        data += raw
    head = b"GGUF" + struct.pack("<IQQ", version, len(tensors) if n_tensors is None else n_tensors,
                                 len(kvs) if n_kv is None else n_kv)
    body = head + b"".join(kvs) + infos
    body += b"\0" * ((-len(body)) % alignment)
    return body + data


def small_file(seed: int = 0) -> bytes:
    """A small valid GGUF with every value type, a nested array and a few tensor types."""
    rng = np.random.default_rng(seed)
    kvs = [kv("general.architecture", STR, "llama"), kv("t.u8", U8, 7), kv("t.i8", I8, -7), kv("t.u16", U16, 700),
           kv("t.i16", I16, -700), kv("t.u32", U32, 70000), kv("t.i32", I32, -70000), kv("t.f32", F32, 0.5),
           kv("t.bool", BOOL, 1), kv("t.u64", U64, 1 << 40), kv("t.i64", I64, -(1 << 40)), kv("t.f64", F64, 0.25),
           kv("t.strs", ARR, ["a", "bc", "\u00e9"], STR), kv("t.ints", ARR, [1, 2, 3], I32),
           kv("t.nested", ARR, [(U8, [1, 2]), (STR, ["x"])], ARR)]
    f32 = rng.standard_normal((4, 32)).astype("<f4").tobytes()
    q8 = b"".join(np.float16(0.01).tobytes() + rng.integers(-127, 128, 32, dtype=np.int8).tobytes()
                  for _ in range(4))
    return build(kvs, [("a.weight", (32, 4), 0, f32), ("b.weight", (32, 4), 8, q8)])
