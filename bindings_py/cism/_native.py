"""Minimal ctypes access to libcism for the quantizer and the perplexity tool.

Only the few C functions that `cism.quant` and `cism.ppl` need are declared
here. (The package's full ctypes layer is cism/_lib.py; once both are on the
same branch these declarations move there.)

The library is found through $CISM_LIB, next to this package, or in the
source tree's build folders (build/release/libcism).
"""
from __future__ import annotations

import ctypes
import os
import sys
from typing import Optional

_HERE = os.path.dirname(os.path.abspath(__file__))
_NAME = {"win32": "cism.dll", "darwin": "libcism.dylib"}.get(sys.platform, "libcism.so")
_lib: Optional[ctypes.CDLL] = None


class CismError(RuntimeError):
    """A libcism call failed; the message is the library's."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


def _candidates():
    env = os.environ.get("CISM_LIB")
    if env:
        yield env
    pkg_paths = [_HERE] + list(globals().get("__path__", []))
    for d in pkg_paths:
        yield os.path.join(d, _NAME)
    root = os.path.dirname(os.path.dirname(_HERE))
    for sub in ("build/release/libcism", "build/libcism", "build/asan/libcism"):
        yield os.path.join(root, sub, _NAME)


def lib() -> ctypes.CDLL:
    global _lib
    if _lib is not None:
        return _lib
    for path in _candidates():
        if os.path.exists(path):
            _lib = _declare(ctypes.CDLL(path))
            return _lib
    raise OSError(f"{_NAME} not found (set CISM_LIB to its path)")


def _declare(L: ctypes.CDLL) -> ctypes.CDLL:
    c_i32, c_i64, c_p = ctypes.c_int32, ctypes.c_int64, ctypes.c_void_p
    sigs = {
        "cism_last_error": (ctypes.c_char_p, []),
        "cism_dtype_name": (ctypes.c_char_p, [c_i32]),
        "cism_dtype_row_bytes": (c_i64, [c_i32, c_i64]),
        "cism_dtype_block_size": (c_i32, [c_i32]),
        "cism_quantize": (c_i32, [c_i32, c_p, c_i64, c_i64, c_p, c_p, c_i64, ctypes.POINTER(c_i64), c_i32]),
        "cism_dequantize": (c_i32, [c_i32, c_p, c_i64, c_i64, c_p]),
        "cism_params_create": (c_i32, [ctypes.POINTER(c_p)]),
        "cism_params_free": (None, [c_p]),
        "cism_params_set_int": (c_i32, [c_p, c_i32, c_i64]),
        "cism_model_load": (c_i32, [ctypes.c_char_p, c_p, ctypes.POINTER(c_p)]),
        "cism_model_free": (None, [c_p]),
        "cism_model_get_info": (c_i32, [c_p, c_i32, ctypes.POINTER(c_i64)]),
        "cism_model_meta_bytes": (c_i32, [c_p, ctypes.c_char_p, ctypes.POINTER(c_p), ctypes.POINTER(c_i64)]),
        "cism_session_create": (c_i32, [c_p, c_p, ctypes.POINTER(c_p)]),
        "cism_session_free": (None, [c_p]),
        "cism_session_reset": (c_i32, [c_p]),
        "cism_session_eval": (c_i32, [c_p, ctypes.POINTER(c_i32), c_i32]),
        "cism_session_logits": (c_i32, [c_p, c_i32, ctypes.POINTER(ctypes.POINTER(ctypes.c_float)),
                                        ctypes.POINTER(c_i32)]),
    }
    for name, (res, args) in sigs.items():
        fn = getattr(L, name, None)
        if fn is None:
            continue  # an older library: the caller gets AttributeError when it needs it
        fn.restype = res
        fn.argtypes = args
    return L


def check(status: int) -> None:
    if status != 0:
        msg = lib().cism_last_error()
        raise CismError(status, msg.decode("utf-8", "replace") if msg else f"status {status}")
