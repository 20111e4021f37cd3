"""KV cache type names (docs/KV_CACHE.md), without loading the library: the CLI
parses --kv-type with them."""
from __future__ import annotations

import argparse
from typing import Tuple, Union

# the KV cache types CISM_PARAM_KV_TYPE accepts (docs/KV_CACHE.md)
KV_TYPES = ("f16", "f32", "q8", "q4a")


def split_kv_type(kv_type: Union[str, int]) -> Tuple[Union[str, int], Union[str, int]]:
    """A kv_type as (K type, V type): "q8" is ("q8", "q8"), "q8/q4a" is K q8 + V q4a
    (CISM_PARAM_KV_TYPE and CISM_PARAM_KV_TYPE_V). A dtype code stands for both."""
    if isinstance(kv_type, int):
        return kv_type, kv_type
    parts = [p.strip().lower() for p in str(kv_type).split("/")]
    if len(parts) > 2 or not all(parts):
        raise ValueError(f"KV cache type {kv_type!r}: use one of {', '.join(KV_TYPES)}, or K/V such as q8/q4a "
                         "(K cache q8, V cache q4a)")
    return parts[0], parts[-1]  # the library judges each name (and says which types it takes)


def kv_type_arg(text: str) -> str:
    """argparse type of --kv-type: a KV type or K/V pair (split_kv_type), normalized."""
    try:
        k, v = split_kv_type(text)
        if k not in KV_TYPES or v not in KV_TYPES:
            raise ValueError(f"KV cache type {text!r}: use one of {', '.join(KV_TYPES)}, or K/V such as q8/q4a "
                             "(K cache q8, V cache q4a)")
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return str(k) if k == v else f"{k}/{v}"
