"""How a session computes the inputs of packed weight matrices (--act of the CLI),
without loading the library. docs/QUANTIZATION.md ("int8 activations",
"Outlier channels") says what each costs and gives.

    auto      the library's default (today: outliers)
    outliers  int8 activations, a row's dominant channels computed exactly in float
    int8      plain int8 activations: the fastest prefill, a larger error
    float     float activations (each weight block decoded to f32): the closest to
              the weights' own values, 30x slower prefill on the real model

Float weight files (f32, f16, bf16) always take float activations: the choice
changes nothing there."""
from __future__ import annotations

import argparse
from typing import Dict, Optional

ACT_MODES: Dict[str, Dict[str, Optional[bool]]] = {
    "auto": {},
    "outliers": {"act_quant": True, "act_outliers": True},
    "int8": {"act_quant": True, "act_outliers": False},
    "float": {"act_quant": False},
}


FLOAT_WEIGHTS = ("f32", "f16", "bf16")


def act_label(mode: str, weight_dtype: str) -> str:
    """The activations a session of `mode` runs on weights of `weight_dtype`, as
    reports print them: float weights take float activations whatever the mode,
    and auto is the library's default (outliers)."""
    if weight_dtype in FLOAT_WEIGHTS:
        return f"float ({weight_dtype} weights)"
    return "outliers (auto)" if mode == "auto" else mode


def act_kwargs(mode: str) -> Dict[str, Optional[bool]]:
    """Session / Batch keyword arguments of an --act mode."""
    try:
        return dict(ACT_MODES[mode])
    except KeyError:
        raise ValueError(f"activations {mode!r}: use one of {', '.join(ACT_MODES)}") from None


def act_mode_arg(text: str) -> str:
    """argparse type of --act: a mode name, case-insensitive."""
    mode = text.strip().lower()
    if mode not in ACT_MODES:
        raise argparse.ArgumentTypeError(f"{text!r}: use one of {', '.join(ACT_MODES)} (auto: the library's "
                                         "default, outliers)")
    return mode


ACT_HELP = ("inputs of packed weight matrices: auto (the default: outliers), outliers (int8 with a row's dominant "
            "channels exact in float), int8 (plain int8: fastest prefill, larger error), float (slowest, closest "
            "to the weights' values); no effect on f32/f16/bf16 files")
