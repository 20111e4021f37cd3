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
    "Sampler": "sampler",
    "Generation": "generate",
    "Tokenizer": "tokenizer", "TokenizerError": "tokenizer",
    "CismError": "errors", "InvalidArgumentError": "errors", "CismIOError": "errors", "FormatError": "errors",
    "UnsupportedError": "errors", "OutOfMemoryError": "errors", "ContextFullError": "errors",
    "TokenRangeError": "errors", "BufferTooSmallError": "errors", "CancelledError": "errors",
    "StateError": "errors", "OutputExistsError": "errors", "InternalError": "errors",
    "set_log_level": "log",
    "ConversionError": "convert",
}

__all__ = sorted(_EXPORTS) + ["convert_checkpoint", "library_version", "system_info", "build_info", "__version__"]


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


if TYPE_CHECKING:  # pragma: no cover
    from .errors import (BufferTooSmallError, CancelledError, CismError, CismIOError, ContextFullError,  # noqa: F401
                         FormatError, InternalError, InvalidArgumentError, OutOfMemoryError, OutputExistsError,
                         StateError, TokenRangeError, UnsupportedError)
    from .generate import Generation  # noqa: F401
    from .model import Metadata, Model  # noqa: F401
    from .sampler import Sampler  # noqa: F401
    from .session import Session  # noqa: F401
    from .tokenizer import Tokenizer, TokenizerError  # noqa: F401
    from .log import set_log_level  # noqa: F401
    from .convert import ConversionError  # noqa: F401
