"""cism: Python bindings for libcism, an embeddable CPU engine for small decoder LLMs.

    import cism
    with cism.Model("model.cism") as model:
        for piece in model.generate("Once upon a time", max_tokens=64, temperature=0.8, seed=1):
            print(piece, end="", flush=True)

The C library is loaded (and its ABI version checked) when one of the
classes below is first used; `cism.convert`, `cism.format` and
`cism.safetensors` work without it.
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

# public name -> module that defines it
_EXPORTS = {
    "Model": "model", "Metadata": "model",
    "Session": "session",
    "Batch": "batch",
    "Sampler": "sampler",
    "Generation": "generate",
    "Speculator": "speculative",
    "Tokenizer": "tokenizer", "TokenizerError": "tokenizer",
    "CismError": "errors", "InvalidArgumentError": "errors", "CismIOError": "errors", "FormatError": "errors",
    "UnsupportedError": "errors", "OutOfMemoryError": "errors", "ContextFullError": "errors",
    "TokenRangeError": "errors", "BufferTooSmallError": "errors", "CancelledError": "errors",
    "StateError": "errors", "OutputExistsError": "errors", "InternalError": "errors",
    "NotPermittedError": "errors",
    "set_log_level": "log",
    "ConversionError": "convert",
    "ChatTemplateError": "chat",
}

__all__ = sorted(_EXPORTS) + ["convert_checkpoint", "library_version", "system_info", "build_info", "kernel_tiers",
                              "read_bandwidth", "int8_mac_peak", "__version__"]


def __getattr__(name: str) -> Any:
    mod = _EXPORTS.get(name)
    if mod is None:
        raise AttributeError(f"module 'cism' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{mod}", __name__), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__))


def convert_checkpoint(src: str, out: str, **kwargs):
    """Converts a Hugging Face folder or llama2.c .bin to .cism (see cism.convert.convert)."""
    from .convert import convert
    return convert(src, out, **kwargs)


def library_version() -> str:
    from . import _lib
    return _lib.lib.cism_version_string().decode()


def system_info() -> str:
    from . import _lib
    return _lib.lib.cism_system_info().decode()


def build_info() -> str:
    from . import _lib
    return _lib.lib.cism_build_info().decode()


def kernel_tiers() -> list:
    """Names of the kernel tiers this CPU runs, lowest first; the last is what
    sessions use by default (unless CISM_ISA forces a lower one). Pass a name
    as ``kernel_tier=`` to Model.session to force one."""
    from . import _lib
    from .params import TIERS
    return [name for name, code in TIERS.items() if code and _lib.lib.cism_kernel_tier_supported(code)]


def read_bandwidth(n_threads: int = 1, nbytes: int = 0) -> float:
    """Bytes per second n_threads threads read from memory (the library's probe;
    nbytes 0 = a 512 MiB buffer). Takes about a second."""
    import ctypes
    from . import _lib
    from .errors import check
    v = ctypes.c_double()
    check(_lib.lib.cism_measure_read_bandwidth(int(n_threads), int(nbytes), ctypes.byref(v)))
    return v.value


def int8_mac_peak(tier: str = "auto") -> float:
    """int8 multiply-adds per second one core does with the dot-product
    instructions of a kernel tier's int8 kernels (the library's probe, on the
    calling thread): the ceiling prefill is compared against. About 0.2 s."""
    import ctypes
    from . import _lib
    from .errors import check
    from .params import tier_code
    v = ctypes.c_double()
    check(_lib.lib.cism_measure_int8_mac_peak(tier_code(tier), ctypes.byref(v)))
    return v.value


if TYPE_CHECKING:  # pragma: no cover
    from .errors import (BufferTooSmallError, CancelledError, CismError, CismIOError, ContextFullError,  # noqa: F401
                         FormatError, InternalError, InvalidArgumentError, NotPermittedError, OutOfMemoryError,
                         OutputExistsError, StateError, TokenRangeError, UnsupportedError)
    from .generate import Generation  # noqa: F401
    from .speculative import Speculator  # noqa: F401
    from .model import Metadata, Model  # noqa: F401
    from .sampler import Sampler  # noqa: F401
    from .session import Session  # noqa: F401
    from .tokenizer import Tokenizer, TokenizerError  # noqa: F401
    from .log import set_log_level  # noqa: F401
    from .convert import ConversionError  # noqa: F401
    from .chat import ChatTemplateError  # noqa: F401
