"""Routes libcism's log messages to the `cism` logger of Python's logging."""
from __future__ import annotations

import logging

from . import _lib

logger = logging.getLogger("cism")
_LEVELS = {_lib.LOG_DEBUG: logging.DEBUG, _lib.LOG_INFO: logging.INFO, _lib.LOG_WARN: logging.WARNING,
           _lib.LOG_ERROR: logging.ERROR}


def _on_log(_user, level, message):
    try:
        logger.log(_LEVELS.get(level, logging.INFO), (message or b"").decode("utf-8", "replace"))
    except Exception:  # never raise into C
        pass


# kept at module level: the C library holds this pointer for as long as the process runs
_callback = _lib.cism_log_callback(_on_log)


def set_log_level(level: int = logging.INFO) -> None:
    """Forwards C messages at `level` (a logging level) and above to logging.getLogger("cism").
    Call before loading models (the C setter is not thread-safe)."""
    if level <= logging.DEBUG:
        c_level = _lib.LOG_DEBUG
    elif level <= logging.INFO:
        c_level = _lib.LOG_INFO
    elif level <= logging.WARNING:
        c_level = _lib.LOG_WARN
    else:
        c_level = _lib.LOG_ERROR
    _lib.lib.cism_set_log_callback(_callback, None, c_level)


def disable() -> None:
    _lib.lib.cism_set_log_callback(_lib.cism_log_callback(), None, _lib.LOG_ERROR)
