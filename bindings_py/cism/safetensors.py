"""A minimal safetensors reader (numpy only; bf16 widened exactly to float32).

Format: u64 little-endian header length N, N bytes of JSON
{name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {...}},
then the data; offsets are relative to the end of the header.
"""
from __future__ import annotations

import json
import mmap
import os
import struct
from typing import Dict, Iterator, List, Tuple

import numpy as np

_DTYPES = {
    "F64": np.dtype("<f8"), "F32": np.dtype("<f4"), "F16": np.dtype("<f2"), "BF16": np.dtype("<u2"),
    "I64": np.dtype("<i8"), "I32": np.dtype("<i4"), "I16": np.dtype("<i2"), "I8": np.dtype("i1"),
    "U8": np.dtype("u1"), "BOOL": np.dtype("?"),
}


class SafetensorsError(ValueError):
    pass


class SafetensorsFile:
    """One .safetensors file, memory-mapped. `get(name)` returns (array, dtype_name);
    BF16 comes back as its raw uint16 bits (use bf16_to_f32 to widen)."""

    def __init__(self, path: str):
        self.path = path
        size = os.path.getsize(path)
        with open(path, "rb") as f:
            head = f.read(8)
            if len(head) < 8:
                raise SafetensorsError(f"{path}: too short for a safetensors file")
            (n,) = struct.unpack("<Q", head)
            if n > min(size - 8, 100 << 20):
                raise SafetensorsError(f"{path}: header length {n} is impossible (file has {size} bytes)")
            try:
                self.header = json.loads(f.read(n))
            except ValueError as e:
                raise SafetensorsError(f"{path}: header is not valid JSON ({e})") from None
            self._mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) if size > 0 else None
        self.metadata = self.header.pop("__metadata__", {}) or {}
        self.data_start = 8 + n
        for name, info in self.header.items():
            if info.get("dtype") not in _DTYPES:
                raise SafetensorsError(f"{path}: tensor {name!r} has unsupported dtype {info.get('dtype')!r}")
            b, e = info["data_offsets"]
            count = int(np.prod(info["shape"])) if info["shape"] else 1
            if not (0 <= b <= e <= size - self.data_start) or e - b != count * _DTYPES[info["dtype"]].itemsize:
                raise SafetensorsError(f"{path}: tensor {name!r} has inconsistent offsets/shape (truncated file?)")

    def names(self) -> List[str]:
        return list(self.header)

    def info(self, name: str) -> Tuple[str, Tuple[int, ...]]:
        i = self.header[name]
        return i["dtype"], tuple(i["shape"])

    def get(self, name: str) -> Tuple[np.ndarray, str]:
        i = self.header[name]
        dt = _DTYPES[i["dtype"]]
        b, e = i["data_offsets"]
        arr = np.frombuffer(self._mm, dtype=dt, count=(e - b) // dt.itemsize, offset=self.data_start + b)
        return arr.reshape(i["shape"]), i["dtype"]

    def close(self) -> None:
        if self._mm is not None:
            self._mm.close()
            self._mm = None


def bf16_to_f32(bits: np.ndarray) -> np.ndarray:
    """Exact widening of bfloat16 bit patterns (uint16) to float32."""
    return (bits.astype(np.uint32) << 16).view(np.float32)


def f32_to_bf16(x: np.ndarray) -> np.ndarray:
    """Round-to-nearest-even float32 -> bfloat16 bits (uint16); NaN stays NaN."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    nan = (u & 0x7FFFFFFF) > 0x7F800000
    r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    r[nan] = ((u[nan] >> 16) | 0x40).astype(np.uint16)
    return r


def open_checkpoint(folder: str) -> Dict[str, SafetensorsFile]:
    """Maps every tensor name of an HF folder (single file or sharded index) to its file."""
    index = os.path.join(folder, "model.safetensors.index.json")
    single = os.path.join(folder, "model.safetensors")
    files: Dict[str, SafetensorsFile] = {}
    out: Dict[str, SafetensorsFile] = {}
    if os.path.exists(index):
        with open(index) as f:
            weight_map = json.load(f)["weight_map"]
        for name, fn in weight_map.items():
            if fn not in files:
                files[fn] = SafetensorsFile(os.path.join(folder, fn))
            if name not in files[fn].header:
                raise SafetensorsError(f"index says {name!r} is in {fn}, but it is not")
            out[name] = files[fn]
    elif os.path.exists(single):
        sf = SafetensorsFile(single)
        for name in sf.names():
            out[name] = sf
    else:
        raise FileNotFoundError(f"{folder}: no model.safetensors or model.safetensors.index.json "
                                "(PyTorch .bin checkpoints are not read; re-save with safetensors)")
    return out
