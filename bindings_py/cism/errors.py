"""libcism status codes as Python exceptions.

Every failing C call becomes a `CismError` subclass chosen by its status and
carrying the library's message (`cism_last_error()`, read right after the call
on the same thread). Where a built-in exception fits, the class also derives
from it, so `except ValueError` / `except MemoryError` / `except OSError` work.
"""
from __future__ import annotations

from typing import Dict, Type

from . import _lib


class CismError(Exception):
    """A libcism call failed. `status` is the C status code, `message` its text."""

    status = -1

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


class InvalidArgumentError(CismError, ValueError):
    status = _lib.ERR_INVALID_ARG


class CismIOError(CismError, OSError):
    status = _lib.ERR_IO


class FormatError(CismError, ValueError):
    """The file is not a valid .cism file (corrupt, truncated, inconsistent)."""
    status = _lib.ERR_FORMAT


class UnsupportedError(CismError, ValueError):
    """Valid, but not supported: architecture, option, version."""
    status = _lib.ERR_UNSUPPORTED


class OutOfMemoryError(CismError, MemoryError):
    status = _lib.ERR_OUT_OF_MEMORY


class ContextFullError(CismError):
    """Evaluating would exceed the session's context length."""
    status = _lib.ERR_CONTEXT_FULL


class TokenRangeError(CismError, ValueError):
    """A token id is negative or not below the vocabulary size."""
    status = _lib.ERR_TOKEN_RANGE


class BufferTooSmallError(CismError):
    status = _lib.ERR_BUFFER_SMALL


class CancelledError(CismError):
    """Session.cancel() stopped an evaluation."""
    status = _lib.ERR_CANCELLED


class StateError(CismError, RuntimeError):
    """The call is not valid in the handle's current state (or the handle is closed)."""
    status = _lib.ERR_STATE


class OutputExistsError(CismError, FileExistsError):
    status = _lib.ERR_EXISTS


class InternalError(CismError, RuntimeError):
    """A bug in libcism; please report it."""
    status = _lib.ERR_INTERNAL


class NotPermittedError(CismError, PermissionError):
    """The OS refused (memory-lock limit, missing privilege)."""
    status = _lib.ERR_PERMISSION


_BY_STATUS: Dict[int, Type[CismError]] = {
    cls.status: cls for cls in (InvalidArgumentError, CismIOError, FormatError, UnsupportedError, OutOfMemoryError,
                                ContextFullError, TokenRangeError, BufferTooSmallError, CancelledError, StateError,
                                OutputExistsError, InternalError, NotPermittedError)
}


def error_for(status: int, message: str) -> CismError:
    cls = _BY_STATUS.get(status, CismError)
    err = cls(message or _lib.status_str(status))
    err.status = status
    return err


def check(status: int) -> None:
    """Raises the exception for a non-zero status, with the thread's last error message."""
    if status != _lib.OK:
        raise error_for(status, _lib.last_error())


def token_id(token, what: str = "token") -> int:
    """token as a Python int that fits the C API's int32 (no silent wrap-around
    modulo 2**32): TokenRangeError for negative ids or ids past int32, TypeError
    for non-integers (the vocabulary bound is checked by the callee)."""
    import numbers
    if isinstance(token, bool) or not isinstance(token, numbers.Integral):
        raise TypeError(f"{what} ids must be integers (got {type(token).__name__})")
    t = int(token)
    if t < 0 or t >= 2 ** 31:
        raise TokenRangeError(f"{what} {t} is outside the vocabulary (token ids are 0 .. vocab_size - 1)")
    return t
