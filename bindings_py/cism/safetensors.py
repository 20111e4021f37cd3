"""A minimal safetensors reader (numpy only; bf16 widened exactly to float32).

Format: u64 little-endian header length N, N bytes of JSON
{name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {...}},
then the data; offsets are relative to the end of the header.
"""
from __future__ import annotations

import json
import math
import mmap
import os
import struct
from typing import Dict, Iterator, List, Tuple

import numpy as np

from .hf_config import ConversionError

_DTYPES = {
    "F64": np.dtype("<f8"), "F32": np.dtype("<f4"), "F16": np.dtype("<f2"), "BF16": np.dtype("<u2"),
    "I64": np.dtype("<i8"), "I32": np.dtype("<i4"), "I16": np.dtype("<i2"), "I8": np.dtype("i1"),
    "U8": np.dtype("u1"), "BOOL": np.dtype("?"),
}


class SafetensorsError(ConversionError):
    """A malformed .safetensors file (or index); the message names the file and the field."""


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
            except RecursionError:
                raise SafetensorsError(f"{path}: header is nested too deeply") from None
            if not isinstance(self.header, dict):
                raise SafetensorsError(f"{path}: header must be a JSON object, not {type(self.header).__name__}")
            self.data_start = 8 + n
            _check_header(path, self.header, size - self.data_start)
            self._mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) if size > 0 else None
        self.metadata = self.header.pop("__metadata__", None) or {}

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


def _check_header(path: str, header: Dict, data_size: int) -> None:
    """Types, shapes and offsets of every entry: each tensor inside the data, holding
    exactly its shape's bytes, no two overlapping. Errors name the tensor and the field."""
    meta = header.get("__metadata__")
    if meta is not None and not (isinstance(meta, dict) and all(isinstance(v, str) for v in meta.values())):
        raise SafetensorsError(f"{path}: __metadata__ must be an object of strings")
    spans = []
    for name, info in header.items():
        if name == "__metadata__":
            continue
        if not isinstance(info, dict):
            raise SafetensorsError(f"{path}: tensor {name!r}: must be an object, not {type(info).__name__}")
        dt = info.get("dtype")
        if not isinstance(dt, str) or dt not in _DTYPES:
            raise SafetensorsError(f"{path}: tensor {name!r} has unsupported dtype {dt!r}")
        shape = info.get("shape")
        if not isinstance(shape, list) or len(shape) > 8 or \
                not all(isinstance(d, int) and not isinstance(d, bool) and 0 <= d < (1 << 48) for d in shape):
            raise SafetensorsError(f"{path}: tensor {name!r}: shape must be a list of at most 8 non-negative "
                                   f"integers, not {shape!r:.60}")
        offs = info.get("data_offsets")
        if not (isinstance(offs, list) and len(offs) == 2 and
                all(isinstance(o, int) and not isinstance(o, bool) for o in offs)):
            raise SafetensorsError(f"{path}: tensor {name!r}: data_offsets must be two integers, not {offs!r:.60}")
        b, e = offs
        count = math.prod(shape)
        if not (0 <= b <= e <= data_size) or e - b != count * _DTYPES[dt].itemsize:
            raise SafetensorsError(f"{path}: tensor {name!r} has inconsistent offsets/shape (truncated file?): "
                                   f"data_offsets [{b}, {e}] for shape {shape} of {dt}, {data_size} bytes of data")
        if e > b:
            spans.append((b, e, name))
    spans.sort()
    for (b0, e0, n0), (b1, e1, n1) in zip(spans, spans[1:]):
        if b1 < e0:
            raise SafetensorsError(f"{path}: tensors {n0!r} and {n1!r} overlap (data_offsets [{b0}, {e0}] "
                                   f"and [{b1}, {e1}])")


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
        try:
            with open(index, encoding="utf-8") as f:
                idx = json.load(f)
        except (ValueError, RecursionError) as e:
            raise SafetensorsError(f"{index}: not valid JSON ({e})") from None
        weight_map = idx.get("weight_map") if isinstance(idx, dict) else None
        if not isinstance(weight_map, dict):
            raise SafetensorsError(f"{index}: weight_map must be an object (tensor name -> file name)")
        for name, fn in weight_map.items():
            if not isinstance(fn, str) or not fn or os.path.basename(fn) != fn or fn in (".", ".."):
                raise SafetensorsError(f"{index}: weight_map[{name!r}]: {fn!r:.60} is not the name of a file "
                                       "in the model folder")
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
