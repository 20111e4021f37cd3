"""Reading the JSON files of a Hugging Face model folder with every field checked.

config.json, generation_config.json, tokenizer_config.json and tokenizer.json
are input from anywhere: each field the converter reads is checked for its type
and range here, and every count is bounded (by the C loader's own limits) before
anything is allocated from it. A bad field is a ConversionError whose message
names the file and the field, e.g. `config.json: hidden_size: must be an integer,
not 64.5`; nothing is coerced (no "false" that is true, no 64.5 that is 64).
"""
from __future__ import annotations

import json
import math
import os
from typing import Any, Callable, Dict, List, Optional

# the C loader's limits (libcism/src/model/model.c)
MAX_DIM = 65536
MAX_LAYERS = 512
MAX_HEADS = 1024
MAX_HEAD_DIM = 1024
MAX_VOCAB = 1 << 24
MAX_CTX = 1 << 24
MAX_EOS_IDS = 1024

MAX_JSON_BYTES = 64 << 20          # config.json, generation_config.json, tokenizer_config.json
MAX_TOKENIZER_JSON_BYTES = 1 << 30


class ConversionError(ValueError):
    """The checkpoint cannot be converted; the message says why."""


def describe(v: Any) -> str:
    """A JSON value's kind, for messages: `a string ('false')`, `a list`, `null`."""
    if v is None:
        return "null"
    if isinstance(v, bool):
        return f"a boolean ({'true' if v else 'false'})"
    if isinstance(v, (int, float)):
        r = repr(v)
        return f"a number ({r if len(r) <= 24 else r[:21] + '...'})"
    if isinstance(v, str):
        r = repr(v)
        return f"a string ({r if len(r) <= 40 else r[:37] + '...'})"
    if isinstance(v, list):
        return "a list"
    if isinstance(v, dict):
        return "an object"
    return type(v).__name__


def read_json(path: str, limit: int = MAX_JSON_BYTES, label: Optional[str] = None) -> Optional[tuple]:
    """(raw bytes, parsed object) of a JSON file that must hold an object; None when it does
    not exist. Errors name the file (`label`, default its base name)."""
    name = label or os.path.basename(path)
    if not os.path.exists(path):
        return None
    if not os.path.isfile(path):
        raise ConversionError(f"{name}: not a regular file")
    size = os.path.getsize(path)
    if size > limit:
        raise ConversionError(f"{name}: {size} bytes, more than this file can plausibly hold (at most {limit})")
    with open(path, "rb") as f:
        raw = f.read(limit + 1)
    try:
        obj = json.loads(raw.decode("utf-8"), object_pairs_hook=_no_duplicates)
    except UnicodeDecodeError as e:
        raise ConversionError(f"{name}: not UTF-8 text ({e})") from None
    except _DuplicateKey as e:
        raise ConversionError(f"{name}: key {e.args[0]!r} appears twice in one object") from None
    except ValueError as e:
        raise ConversionError(f"{name}: not valid JSON ({e})") from None
    except RecursionError:
        raise ConversionError(f"{name}: nested too deeply to be a model file") from None
    if not isinstance(obj, dict):
        raise ConversionError(f"{name}: must hold a JSON object, not {describe(obj)}")
    return raw, obj


class _DuplicateKey(ValueError):
    pass


def _no_duplicates(pairs: List[tuple]) -> Dict[str, Any]:
    out: Dict[str, Any] = {}
    for k, v in pairs:
        if k in out:
            raise _DuplicateKey(k)
        out[k] = v
    return out


_REQUIRED = object()


class Fields:
    """Typed, range-checked reads of one JSON object's fields. A missing or null
    field gives `default`; without a default it is an error. Messages read
    `<file>: <prefix><key>: ...`."""

    def __init__(self, obj: Any, file: str, prefix: str = ""):
        if not isinstance(obj, dict):
            raise ConversionError(f"{file}: {prefix.rstrip('.') or 'the file'}: must be an object, not {describe(obj)}")
        self.obj = obj
        self.file = file
        self.prefix = prefix

    def fail(self, key: str, message: str) -> None:
        raise ConversionError(f"{self.file}: {self.prefix}{key}: {message}")

    def has(self, key: str) -> bool:
        return self.obj.get(key) is not None

    def _get(self, key: str, default: Any) -> Any:
        v = self.obj.get(key)
        if v is None and default is _REQUIRED:
            self.fail(key, "is missing" if key not in self.obj else "is null; a value is required")
        return v

    def int(self, key: str, lo: int, hi: int, default: Any = _REQUIRED) -> Any:
        v = self._get(key, default)
        if v is None:
            return default
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            self.fail(key, f"must be an integer, not {describe(v)}")
        if isinstance(v, float):
            if not v.is_integer():
                self.fail(key, f"must be an integer, not {describe(v)}")
            v = int(v)
        if not lo <= v <= hi:
            self.fail(key, f"{v} is outside {lo}..{hi}")
        return v

    def number(self, key: str, default: Any = _REQUIRED, ok: Optional[Callable[[float], bool]] = None,
               rule: str = "") -> Any:
        v = self._get(key, default)
        if v is None:
            return default
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            self.fail(key, f"must be a number, not {describe(v)}")
        v = float(v)
        if not math.isfinite(v):
            self.fail(key, f"must be finite, not {v}")
        if ok is not None and not ok(v):
            self.fail(key, f"{v:g} {rule}")
        return v

    def bool(self, key: str, default: Any = _REQUIRED) -> Any:
        v = self._get(key, default)
        if v is None:
            return default
        if not isinstance(v, bool):
            self.fail(key, f"must be true or false, not {describe(v)}")
        return v

    def str(self, key: str, default: Any = _REQUIRED) -> Any:
        v = self._get(key, default)
        if v is None:
            return default
        if not isinstance(v, str):
            self.fail(key, f"must be a string, not {describe(v)}")
        return v

    def object(self, key: str) -> Optional["Fields"]:
        v = self.obj.get(key)
        if v is None:
            return None
        if not isinstance(v, dict):
            self.fail(key, f"must be an object, not {describe(v)}")
        return Fields(v, self.file, f"{self.prefix}{key}.")

    def id(self, key: str, vocab: int, allow_none: bool = False) -> Optional[int]:
        """A token id below `vocab`, or absent (None); -1 means none where `allow_none`.
        A list gives its first id."""
        v = self.obj.get(key)
        if isinstance(v, list):
            ids = self.ids(key, vocab)
            return ids[0] if ids else None
        i = self.int(key, -1 if allow_none else 0, vocab - 1, default=None)
        return None if i == -1 else i

    def ids(self, key: str, vocab: int) -> List[int]:
        """One token id or a list of them (each below `vocab`); [] when absent."""
        v = self.obj.get(key)
        if v is None:
            return []
        items = v if isinstance(v, list) else [v]
        if len(items) > MAX_EOS_IDS:
            self.fail(key, f"holds {len(items)} ids (at most {MAX_EOS_IDS})")
        out = []
        for n, x in enumerate(items):
            where = f"{key}[{n}]" if isinstance(v, list) else key
            if isinstance(x, bool) or not isinstance(x, int):
                self.fail(where, f"must be a token id (an integer), not {describe(x)}")
            if not 0 <= x < vocab:
                self.fail(where, f"token id {x} is outside the vocabulary (0..{vocab - 1})")
            out.append(x)
        return out


# ---------------------------------------------------------------------------
# tokenizer.json: its structure, before cism.tokenizer_meta reads it

def _check_node(node: Any, file: str, where: str, list_key: str, depth: int = 0) -> None:
    if node is None:
        return
    if not isinstance(node, dict):
        raise ConversionError(f"{file}: {where}: must be an object or null, not {describe(node)}")
    t = node.get("type")
    if t is not None and not isinstance(t, str):
        raise ConversionError(f"{file}: {where}.type: must be a string, not {describe(t)}")
    if t == "Sequence":
        subs = node.get(list_key)
        if subs is None:
            return
        if not isinstance(subs, list):
            raise ConversionError(f"{file}: {where}.{list_key}: must be a list, not {describe(subs)}")
        if depth > 16:
            raise ConversionError(f"{file}: {where}: Sequence nested more than 16 deep")
        for n, sub in enumerate(subs):
            _check_node(sub, file, f"{where}.{list_key}[{n}]", list_key, depth + 1)


def check_tokenizer_json(tj: Dict[str, Any], file: str = "tokenizer.json") -> None:
    """Types and ranges of everything cism.tokenizer_meta.compact_tokenizer reads."""
    top = Fields(tj, file)
    model = top.object("model")
    if model is not None:
        for key in ("type", "unk_token", "continuing_subword_prefix", "end_of_word_suffix"):
            model.str(key, None)
        model.number("dropout", None)
        for key in ("byte_fallback", "fuse_unk", "ignore_merges"):
            model.bool(key, None)
        vocab = model.obj.get("vocab")
        if vocab is not None:
            if not isinstance(vocab, dict):
                model.fail("vocab", f"must be an object (token -> id), not {describe(vocab)}")
            if len(vocab) > MAX_VOCAB:
                model.fail("vocab", f"holds {len(vocab)} tokens (at most {MAX_VOCAB})")
            for tok, i in vocab.items():
                if isinstance(i, bool) or not isinstance(i, int):
                    model.fail(f"vocab[{tok!r}]", f"must be a token id (an integer), not {describe(i)}")
                if not 0 <= i < MAX_VOCAB:
                    model.fail(f"vocab[{tok!r}]", f"id {i} is outside 0..{MAX_VOCAB - 1}")
        merges = model.obj.get("merges")
        if merges is not None:
            if not isinstance(merges, list):
                model.fail("merges", f"must be a list, not {describe(merges)}")
            for n, m in enumerate(merges):
                if isinstance(m, str):
                    if " " not in m:
                        model.fail(f"merges[{n}]", f"{describe(m)} is not two tokens separated by a space")
                elif not (isinstance(m, list) and len(m) == 2 and all(isinstance(x, str) for x in m)):
                    model.fail(f"merges[{n}]", f"must be a string 'a b' or a pair of strings, not {describe(m)}")
    added = tj.get("added_tokens")
    if added is not None:
        if not isinstance(added, list):
            top.fail("added_tokens", f"must be a list, not {describe(added)}")
        if len(added) > MAX_VOCAB:
            top.fail("added_tokens", f"holds {len(added)} tokens (at most {MAX_VOCAB})")
        for n, a in enumerate(added):
            f = Fields(a, file, f"added_tokens[{n}].")
            f.int("id", 0, MAX_VOCAB - 1)
            f.str("content")
            for key in ("special", "lstrip", "rstrip", "single_word", "normalized"):
                f.bool(key, None)
    for key, list_key in (("normalizer", "normalizers"), ("pre_tokenizer", "pretokenizers"),
                          ("decoder", "decoders"), ("post_processor", "processors")):
        _check_node(tj.get(key), file, key, list_key)
