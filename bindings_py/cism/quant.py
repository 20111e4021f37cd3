"""Quantized weight formats and conversion recipes (docs/QUANTIZATION.md).

The packing itself is done by libcism (`cism_quantize`), the one
implementation of every format; this module picks a format per tensor
(a *recipe*) and reports what the result costs. From the command line:
`cism convert SRC -o OUT.cism --quant RECIPE`.
"""
from __future__ import annotations

import ctypes
import os
from dataclasses import dataclass
from typing import Callable, Dict, Optional, Tuple

import numpy as np

from . import format as fmt

DTYPE_Q8, DTYPE_Q4, DTYPE_FP4, DTYPE_NL4, DTYPE_Q4S = 3, 4, 5, 6, 7  # cism.h's cism_dtype values
DTYPE_Q8X16, DTYPE_Q4SX16 = 8, 9  # the same values as q8 / q4s, 16 rows interleaved
DTYPE_Q4A = 10  # asymmetric 4-bit: fp16 scale + fp16 minimum per 32 (GGUF Q4_1's bytes)
DTYPE_Q6 = 11  # 6-bit levels -32..31, fp16 scale per 32 (6.5 bits/weight)
DTYPE_Q5 = 12  # 5-bit levels -16..15, fp16 scale per 32 (5.5 bits/weight; GGUF Q5_0's bytes)
DTYPE_Q4AX16, DTYPE_Q6X16, DTYPE_Q5X16 = 13, 14, 15  # the values of q4a / q6 / q5, 16 rows interleaved
DTYPE_Q3 = 16  # 3-bit levels -4..3, fp16 scale per 32 (3.5 bits/weight)
DTYPE_Q3X16 = 17  # the values of q3, 16 rows interleaved
DTYPE_Q2 = 18  # 2-bit levels -2..1, fp16 scale per 32 (2.5 bits/weight)
DTYPE_Q2X16 = 19  # the values of q2, 16 rows interleaved
QUANT_DTYPES = {"q8": DTYPE_Q8, "q4": DTYPE_Q4, "fp4": DTYPE_FP4, "nl4": DTYPE_NL4, "q4s": DTYPE_Q4S,
                "q8x16": DTYPE_Q8X16, "q4sx16": DTYPE_Q4SX16, "q4a": DTYPE_Q4A, "q6": DTYPE_Q6, "q5": DTYPE_Q5,
                "q4ax16": DTYPE_Q4AX16, "q6x16": DTYPE_Q6X16, "q5x16": DTYPE_Q5X16, "q3": DTYPE_Q3,
                "q3x16": DTYPE_Q3X16, "q2": DTYPE_Q2, "q2x16": DTYPE_Q2X16}
# the row-interleaved variant of a format (docs/QUANTIZATION.md): same values and bytes, a layout
# that one 512-bit load feeds 16 rows from; for matrices of whole groups of 16 rows
INTERLEAVED = {"q8": "q8x16", "q4s": "q4sx16", "q4a": "q4ax16", "q6": "q6x16", "q5": "q5x16", "q3": "q3x16",
               "q2": "q2x16"}
# the formats calibrated rounding applies to (GPTQ or imatrix); q8 and q4a are rounded as without calibration
CALIBRATED_DTYPES = (DTYPE_Q4, DTYPE_FP4, DTYPE_NL4, DTYPE_Q4S, DTYPE_Q4SX16, DTYPE_Q6, DTYPE_Q5, DTYPE_Q6X16,
                     DTYPE_Q5X16, DTYPE_Q3, DTYPE_Q3X16, DTYPE_Q2, DTYPE_Q2X16)
GROUP_ROWS = 16
LAYOUTS = ("auto", "rows")
for _n, _v in QUANT_DTYPES.items():
    fmt.DTYPE_NAMES.setdefault(_v, _n)


# the interleaved layouts' geometry: elements per block, code and scale bytes per block and row,
# blocks per superblock (docs/QUANTIZATION.md)
X16_GEOMETRY = {DTYPE_Q8X16: (32, 32, 2, 2), DTYPE_Q4SX16: (16, 8, 1, 4), DTYPE_Q4AX16: (32, 16, 4, 1),
                DTYPE_Q6X16: (32, 24, 2, 2), DTYPE_Q5X16: (32, 20, 2, 2), DTYPE_Q3X16: (32, 12, 2, 2),
                DTYPE_Q2X16: (32, 8, 2, 2)}


def x16_group_offsets(dtype: int, cols: int) -> Tuple[list, list]:
    """Where block b's codes (16 * code bytes) and its 16 scales start in a group of an
    interleaved matrix of `cols` columns: superblocks of S blocks, each its codes then
    its scales (format version 2)."""
    block, cb, sb, S = X16_GEOMETRY[dtype]
    nb = -(-cols // block)
    off, codes, scales = 0, [], []
    for first in range(0, nb, S):
        n = min(S, nb - first)
        codes += [off + j * 16 * cb for j in range(n)]
        scales += [off + n * 16 * cb + j * 16 * sb for j in range(n)]
        off += n * 16 * (cb + sb)
    return codes, scales


def dtype_id(dtype) -> int:
    """A dtype as cism.h's number: an int as it is, or a name ("q8", "q4a", "f16", ...)."""
    if isinstance(dtype, str):
        names = {**{v: k for k, v in fmt.DTYPE_NAMES.items()}, **QUANT_DTYPES}
        if dtype not in names:
            raise ValueError(f"unknown dtype {dtype!r} (one of: {', '.join(sorted(names, key=names.get))})")
        return names[dtype]
    if isinstance(dtype, (bool, np.bool_)) or not isinstance(dtype, (int, np.integer)):
        raise TypeError(f"dtype must be a name or a cism dtype number, not {type(dtype).__name__}")
    return int(dtype)


def row_bytes(dtype: int, cols: int) -> int:
    if dtype == fmt.DTYPE_F32:
        return 4 * cols
    if dtype in (fmt.DTYPE_F16, fmt.DTYPE_BF16):
        return 2 * cols
    from . import _lib
    n = _lib.lib.cism_dtype_row_bytes(dtype, cols)
    if n <= 0:
        raise ValueError(f"dtype {dtype} cannot hold rows of {cols}")
    return int(n)


def block_size(dtype: int) -> int:
    if dtype in (fmt.DTYPE_F32, fmt.DTYPE_F16, fmt.DTYPE_BF16):
        return 1
    from . import _lib
    return int(_lib.lib.cism_dtype_block_size(dtype))


def quantize(arr: np.ndarray, dtype, importance: Optional[np.ndarray] = None, n_threads: int = 0,
             gram: Optional[np.ndarray] = None) -> np.ndarray:
    """Packed rows (uint8, shape [rows, row_bytes]) of a 2-D float array.
    importance: per-column weights of the scale search's squared error.
    gram: blocks along the diagonal of the inputs' second moments, shape
    [n_blocks, G, G] (Session.act_gram): error-compensating rounding
    (cism_quantize_gram; importance is then unused).
    dtype: a name ("q8", "q4s", "q4a", ...) or cism.h's number.
    n_threads 0 = the machine's cores (at most 8); the bytes do not depend on it."""
    from . import _lib
    from .errors import check
    dtype = dtype_id(dtype)
    a = np.ascontiguousarray(arr, dtype=np.float32)
    if a.ndim != 2:
        raise ValueError("quantize: need a 2-D array")
    rows, cols = a.shape
    rb = row_bytes(dtype, cols)
    out = np.empty((rows, rb), dtype=np.uint8)
    size = ctypes.c_int64()
    if n_threads <= 0:
        n_threads = min(os.cpu_count() or 1, 8)
    fp = ctypes.POINTER(ctypes.c_float)
    if gram is not None:
        g = np.ascontiguousarray(gram, dtype=np.float64)
        if g.ndim != 3 or g.shape[1] != g.shape[2] or g.shape[0] != -(-cols // g.shape[1]):
            raise ValueError(f"gram must have shape [ceil({cols} / G), G, G], not {g.shape}")
        check(_lib.lib.cism_quantize_gram(dtype, a.ctypes.data_as(fp), rows, cols,
                                          g.ctypes.data_as(ctypes.POINTER(ctypes.c_double)), g.shape[1],
                                          out.ctypes.data, out.nbytes, ctypes.byref(size), n_threads))
        return out
    imp = None
    if importance is not None:
        imp = np.ascontiguousarray(importance, dtype=np.float32)
        if imp.shape != (cols,):
            raise ValueError(f"importance must have {cols} values")
    check(_lib.lib.cism_quantize(dtype, a.ctypes.data_as(fp), rows, cols,
                                 imp.ctypes.data_as(fp) if imp is not None else None,
                                 out.ctypes.data, out.nbytes, ctypes.byref(size), n_threads))
    return out


def dequantize(packed: np.ndarray, dtype, cols: int) -> np.ndarray:
    """f32 rows [rows, cols] of packed rows; dtype a name or cism.h's number, as for quantize."""
    from . import _lib
    from .errors import check
    dtype = dtype_id(dtype)
    p = np.ascontiguousarray(packed, dtype=np.uint8)
    rows = p.size // row_bytes(dtype, cols)
    out = np.empty((rows, cols), dtype=np.float32)
    check(_lib.lib.cism_dequantize(dtype, p.ctypes.data, rows, cols, out.ctypes.data_as(ctypes.POINTER(ctypes.c_float))))
    return out


# ---------------------------------------------------------------------------
# recipes: tensor name -> dtype name

def _kind(name: str) -> str:
    if name in ("token_embd", "output"):
        return "embed"
    if ".attn_" in name or ".conv_" in name or ".ssm_" in name:  # the token mixers (attention, LFM2's short convolutions, Gated DeltaNet)
        return "attn"
    return "mlp"


@dataclass(frozen=True)
class Recipe:
    name: str
    description: str
    pick: Callable[[str], str]
    # with calibration: the dtype of a matrix given every matrix's shape (None: as pick)
    pick_calibrated: Optional[Callable[[str, Dict[str, Tuple[int, ...]]], str]] = None
    # `cism convert --quant NAME` calibrates unless told not to (--no-calibrate; docs/QUANTIZATION.md)
    calibrate_by_default: bool = False

    def dtypes(self, shapes: Dict[str, Tuple[int, ...]], calibrated: bool = False) -> Dict[str, str]:
        """The dtype name of every matrix (2-D entry of shapes)."""
        mats = {n: s for n, s in shapes.items() if len(s) == 2}
        if calibrated and self.pick_calibrated:
            return {n: self.pick_calibrated(n, mats) for n in mats}
        return {n: self.pick(n) for n in mats}


BEST4 = "q4s"  # the 4-bit format the mixed recipes use (chosen by measurement, docs/QUANTIZATION.md)
# With calibration, the embedding/output head stays at 8 bits only while that
# costs at most about 0.1 bits per weight of the model (docs/QUANTIZATION.md).
EMBED_Q8_MAX_SHARE = 0.025


def embedding_share(shapes: Dict[str, Tuple[int, ...]]) -> float:
    """The embedding's and output head's share of the matrix weights."""
    sizes = {n: int(np.prod(s)) for n, s in shapes.items() if len(s) == 2}
    return sum(v for n, v in sizes.items() if _kind(n) == "embed") / max(sum(sizes.values()), 1)


def _pick_4bit_calibrated(name: str, shapes: Dict[str, Tuple[int, ...]]) -> str:
    if _kind(name) == "embed" and embedding_share(shapes) <= EMBED_Q8_MAX_SHARE:
        return "q8"
    return BEST4


RECIPES: Dict[str, Recipe] = {r.name: r for r in [
    Recipe("q8", "every matrix q8", lambda n: "q8"),
    Recipe("q4", "every matrix q4 (int4, blocks of 32, fp16 scale)", lambda n: "q4"),
    Recipe("fp4", "every matrix fp4 (E2M1, blocks of 16, E4M3 scale)", lambda n: "fp4"),
    Recipe("nl4", "every matrix nl4 (16-level codebook, blocks of 32, fp16 scale)", lambda n: "nl4"),
    Recipe("q4s", "every matrix q4s (int4, blocks of 16, E4M3 scale)", lambda n: "q4s"),
    Recipe("q4a", "every matrix q4a (int4, blocks of 32, fp16 scale + fp16 minimum; GGUF Q4_1's bytes)",
           lambda n: "q4a"),
    Recipe("q6", "every matrix q6 (int6, blocks of 32, fp16 scale; 6.5 bits/weight), calibrated by default",
           lambda n: "q6", calibrate_by_default=True),
    Recipe("q5", "every matrix q5 (int5, blocks of 32, fp16 scale; GGUF Q5_0's bytes, 5.5 bits/weight), "
                 "calibrated by default", lambda n: "q5", calibrate_by_default=True),
    Recipe("5bit", "embeddings/output head q6, every other matrix q5, calibrated by default",
           lambda n: "q6" if _kind(n) == "embed" else "q5", calibrate_by_default=True),
    Recipe("4bit-q6", f"embeddings/output head q6, every other matrix {BEST4}, calibrated by default",
           lambda n: "q6" if _kind(n) == "embed" else BEST4, calibrate_by_default=True),
    Recipe("q3", "every matrix q3 (int3, blocks of 32, fp16 scale; 3.5 bits/weight), calibrated by default",
           lambda n: "q3", calibrate_by_default=True),
    Recipe("3bit", "embeddings/output head q6, every other matrix q3, calibrated by default",
           lambda n: "q6" if _kind(n) == "embed" else "q3", calibrate_by_default=True),
    Recipe("q2", "every matrix q2 (int2, blocks of 32, fp16 scale; 2.5 bits/weight), calibrated by default",
           lambda n: "q2", calibrate_by_default=True),
    Recipe("2bit", "embeddings/output head q6, attention q3, MLP q2, calibrated by default",
           lambda n: {"embed": "q6", "attn": "q3"}.get(_kind(n), "q2"), calibrate_by_default=True),
    Recipe("4bit", f"the default 4-bit recipe, calibrated by default (GPTQ on text the model samples itself): "
                   f"every matrix {BEST4}, the embeddings/output head q8 only when they hold at most "
                   f"{100 * EMBED_Q8_MAX_SHARE:g}% of the weights; --no-calibrate: data-free rounding, "
                   f"embeddings/head q8",
           lambda n: "q8" if _kind(n) == "embed" else BEST4, _pick_4bit_calibrated, calibrate_by_default=True),
    Recipe("mix", f"embeddings/output head and attention q8, MLP {BEST4}",
           lambda n: "q8" if _kind(n) in ("embed", "attn") else BEST4),
]}


def stored_dtype(name: str, fmt_name: str, shape: Tuple[int, ...], head_dim: int, layout: str = "auto") -> str:
    """The dtype a recipe's format is written in: its interleaved variant when
    the layout is "auto", the format has one and the matrix allows it (whole
    groups of 16 rows; Q/K/V, split by head, also need head_dim % 16 == 0)."""
    if layout not in LAYOUTS:
        raise ValueError(f"unknown layout {layout!r} (one of {', '.join(LAYOUTS)})")
    x = INTERLEAVED.get(fmt_name)
    if layout == "rows" or not x or len(shape) != 2 or shape[0] % GROUP_ROWS:
        return fmt_name
    if any(name.endswith(s) for s in (".attn_q", ".attn_k", ".attn_v", ".attn_gate")) and head_dim % GROUP_ROWS:
        return fmt_name
    return x


def recipe(name: str) -> Recipe:
    if name not in RECIPES:
        raise ValueError(f"unknown quantization recipe {name!r} (one of: {', '.join(RECIPES)})")
    return RECIPES[name]


def padding_note(name: str, dtype: int, cols: int) -> Optional[str]:
    """What the converter reports for a matrix whose rows are not whole blocks
    (one line for all layers' tensors of that name)."""
    import re
    name = re.sub(r"^blk\.\d+\.", "blk.*.", name)
    b = block_size(dtype)
    if b > 1 and cols % b:
        stored = (cols + b - 1) // b * b
        return (f"{name}: {cols} columns are not a multiple of {fmt.DTYPE_NAMES[dtype]}'s block of {b}; "
                f"the last block of each row is padded with zeros ({stored} stored, "
                f"{8 * row_bytes(dtype, cols) / cols:.2f} bits/weight for this tensor)")
    return None
