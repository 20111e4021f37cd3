"""cism_params: the option object read by model loading and session creation."""
from __future__ import annotations

import ctypes
from typing import Dict, Optional

from . import _lib
from .errors import check

KEYS: Dict[str, int] = {
    "n_threads": _lib.PARAM_N_THREADS,
    "n_ctx": _lib.PARAM_N_CTX,
    "kv_type": _lib.PARAM_KV_TYPE,
    "use_mmap": _lib.PARAM_USE_MMAP,
    "n_batch": _lib.PARAM_N_BATCH,
    "logits_all": _lib.PARAM_LOGITS_ALL,
    "check_weights": _lib.PARAM_CHECK_WEIGHTS,
    "act_quant": _lib.PARAM_ACT_QUANT,
    "kernel_tier": _lib.PARAM_KERNEL_TIER,
    "act_stats": _lib.PARAM_ACT_STATS,
    "act_outliers": _lib.PARAM_ACT_OUTLIERS,
    "verify_checksums": _lib.PARAM_VERIFY_CHECKSUMS,
    "kv_rotate": _lib.PARAM_KV_ROTATE,
    "kv_type_v": _lib.PARAM_KV_TYPE_V,
}
TIERS: Dict[str, int] = {"auto": _lib.TIER_AUTO, "scalar": _lib.TIER_SCALAR, "avx2": _lib.TIER_AVX2,
                         "avx512": _lib.TIER_AVX512, "neon": _lib.TIER_NEON, "neon_dotprod": _lib.TIER_NEON_DOTPROD,
                         "neon_i8mm": _lib.TIER_NEON_I8MM, "avx512_amx": _lib.TIER_AVX512_AMX}
DTYPES: Dict[str, int] = {"f32": _lib.DTYPE_F32, "f16": _lib.DTYPE_F16, "bf16": _lib.DTYPE_BF16,
                          "q8": _lib.DTYPE_Q8, "q4": _lib.DTYPE_Q4, "q4a": _lib.DTYPE_Q4A}
from .kvtypes import KV_TYPES, kv_type_arg, split_kv_type  # noqa: F401 (re-exported)


def dtype_code(name) -> int:
    if isinstance(name, int):
        return name
    try:
        return DTYPES[str(name).lower()]
    except KeyError:
        raise ValueError(f"unknown dtype {name!r} (one of {', '.join(DTYPES)})") from None


def tier_code(name) -> int:
    """A kernel tier by name ("scalar", "avx2", ...) or number."""
    if isinstance(name, int):
        return name
    try:
        return TIERS[str(name).lower()]
    except KeyError:
        raise ValueError(f"unknown kernel tier {name!r} (one of {', '.join(TIERS)})") from None


def dtype_name(code: int) -> str:
    n = _lib.lib.cism_dtype_name(code)
    return n.decode() if n else f"dtype{code}"


class Params:
    """A cism_params handle filled from keyword arguments (None = library default).

    Use as a context manager: ``with Params(n_ctx=512) as p: ... p.handle``."""

    def __init__(self, **values: Optional[object]):
        h = _lib.cism_params_p()
        check(_lib.lib.cism_params_create(ctypes.byref(h)))
        self.handle = h
        try:
            for key, value in values.items():
                if value is None:
                    continue
                if key not in KEYS:
                    raise TypeError(f"unknown parameter {key!r} (known: {', '.join(KEYS)})")
                if key == "kv_type":  # "q8/q4a": K q8, V q4a (the V type goes to kv_type_v)
                    k, v = split_kv_type(value)
                    value = dtype_code(k)
                    if v != k:
                        check(_lib.lib.cism_params_set_int(h, KEYS["kv_type_v"], dtype_code(v)))
                elif key == "kv_type_v":
                    value = dtype_code(value)
                elif key == "kernel_tier":
                    value = tier_code(value)
                check(_lib.lib.cism_params_set_int(h, KEYS[key], int(value)))  # type: ignore[arg-type]
        except BaseException:
            self.close()
            raise

    def get(self, key: str) -> int:
        v = ctypes.c_int64()
        check(_lib.lib.cism_params_get_int(self.handle, KEYS[key], ctypes.byref(v)))
        return v.value

    def close(self) -> None:
        if self.handle:
            _lib.lib.cism_params_free(self.handle)
            self.handle = None

    def __enter__(self) -> "Params":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
