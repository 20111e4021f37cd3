"""Sampler: picks the next token from logits (penalties, top-k, top-p, min-p,
temperature, seeded draw; greedy when temperature is 0)."""
from __future__ import annotations

import ctypes
import numbers
import weakref
from typing import Dict, Optional

import numpy as np

from . import _lib
from .errors import StateError, check, token_id

FLOAT_PARAMS: Dict[str, int] = {
    "temperature": _lib.SAMPLER_TEMPERATURE,
    "top_p": _lib.SAMPLER_TOP_P,
    "min_p": _lib.SAMPLER_MIN_P,
    "repeat_penalty": _lib.SAMPLER_REPEAT_PENALTY,
    "frequency_penalty": _lib.SAMPLER_FREQUENCY_PENALTY,
    "presence_penalty": _lib.SAMPLER_PRESENCE_PENALTY,
}
INT_PARAMS: Dict[str, int] = {
    "top_k": _lib.SAMPLER_TOP_K,
    "penalty_last_n": _lib.SAMPLER_PENALTY_LAST_N,
    "seed": _lib.SAMPLER_SEED,
}
PARAMS = tuple(FLOAT_PARAMS) + tuple(INT_PARAMS)


def _free_sampler(handle: int) -> None:
    _lib.lib.cism_sampler_free(handle)


class Sampler:
    """Token sampler. Defaults: greedy (temperature 0), no top-k/top-p/min-p,
    no penalties, penalty window 64, seed 0. Same seed + same inputs = same tokens.

    >>> s = cism.Sampler(temperature=0.8, top_p=0.95, seed=42)
    """

    def __init__(self, temperature: float = 0.0, top_k: int = 0, top_p: float = 1.0, min_p: float = 0.0,
                 repeat_penalty: float = 1.0, frequency_penalty: float = 0.0, presence_penalty: float = 0.0,
                 penalty_last_n: int = 64, seed: int = 0):
        h = _lib.cism_sampler_p()
        check(_lib.lib.cism_sampler_create(ctypes.byref(h)))
        self._handle: Optional[int] = h.value
        self._finalizer = weakref.finalize(self, _free_sampler, h.value)
        self._values: Dict[str, float] = {}
        try:
            self.set(temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p, repeat_penalty=repeat_penalty,
                     frequency_penalty=frequency_penalty, presence_penalty=presence_penalty,
                     penalty_last_n=penalty_last_n, seed=seed)
        except BaseException:
            self.close()
            raise

    def _h(self) -> int:
        if not self._handle:
            raise StateError("the sampler is closed")
        return self._handle

    @property
    def handle(self) -> int:
        return self._h()

    def set(self, **values) -> "Sampler":
        """Sets parameters by name (see PARAMS). Setting `penalty_last_n` clears
        the history; setting `seed` reseeds the generator."""
        for name, value in values.items():
            if name in FLOAT_PARAMS:
                if isinstance(value, bool) or not isinstance(value, numbers.Real):
                    raise TypeError(f"{name} must be a number (got {value!r:.40})")
                check(_lib.lib.cism_sampler_set_float(self._h(), FLOAT_PARAMS[name], float(value)))
            elif name in INT_PARAMS:
                if isinstance(value, bool) or not isinstance(value, numbers.Integral):
                    raise TypeError(f"{name} must be an integer (got {value!r:.40})")
                v = int(value)
                if name == "seed":  # any Python int: keep the low 64 bits, as int64
                    v &= (1 << 64) - 1
                    v = v - (1 << 64) if v >= 1 << 63 else v
                check(_lib.lib.cism_sampler_set_int(self._h(), INT_PARAMS[name], v))
            else:
                raise TypeError(f"unknown sampler parameter {name!r} (known: {', '.join(PARAMS)})")
            self._values[name] = value
        return self

    def get(self, name: str):
        return self._values[name]

    def reset(self) -> None:
        """Clears the penalty history and reseeds the generator."""
        check(_lib.lib.cism_sampler_reset(self._h()))

    def accept(self, token: int) -> None:
        """Adds a token to the penalty history."""
        check(_lib.lib.cism_sampler_accept(self._h(), token_id(token)))

    def sample(self, logits) -> int:
        """Picks a token from a 1-D float array of logits (not modified). Does not
        accept it into the history (call accept, as generation does)."""
        a = np.ascontiguousarray(logits, dtype=np.float32)
        if a.ndim != 1 or a.size == 0:
            raise ValueError(f"logits must be a non-empty 1-D array (got shape {a.shape})")
        return self.sample_ptr(a.ctypes.data_as(ctypes.POINTER(ctypes.c_float)), a.size)

    def sample_ptr(self, ptr, n_vocab: int) -> int:
        tok = ctypes.c_int32()
        check(_lib.lib.cism_sampler_sample(self._h(), ptr, int(n_vocab), ctypes.byref(tok)))
        return tok.value

    def close(self) -> None:
        self._handle = None
        self._finalizer()

    def __enter__(self) -> "Sampler":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return "<cism.Sampler " + " ".join(f"{k}={v}" for k, v in self._values.items()) + ">"
