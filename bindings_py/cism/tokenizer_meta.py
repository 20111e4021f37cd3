"""Compact tokenizer metadata for .cism files (docs/FORMAT.md, "Tokenizer").

`compact_tokenizer(tokenizer_json)` turns a Hugging Face tokenizer.json into
the `tokenizer.*` keys the C tokenizer reads: token strings, flags, merges as
id pairs, and the normalizer / pre-tokenizer / decoder as lists of named steps.
Anything the C tokenizer cannot reproduce exactly raises TokenizerUnsupported.

`detect_chat_format(template, ...)` names the chat format a Jinja chat template
produces (ChatML, Llama-3, Llama-2, Mistral, Zephyr), verified by rendering the
template with jinja2 when it is installed.
"""
from __future__ import annotations

import re
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

METASPACE = "\u2581"

# token flags (tokenizer.token_flags, one byte per token)
TOK_NORMAL, TOK_ADDED, TOK_SPECIAL = 1, 2, 4
TOK_LSTRIP, TOK_RSTRIP, TOK_SINGLE_WORD, TOK_NORMALIZED = 8, 16, 32, 64

SPLIT_PATTERNS = {
    r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+": "gpt2_split",
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+":
        "llama3_split",
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+":
        "qwen2_split",
}


class TokenizerUnsupported(ValueError):
    """The tokenizer uses something the C tokenizer does not reproduce exactly."""


def _flatten(node: Optional[Dict[str, Any]], key: str) -> List[Dict[str, Any]]:
    if node is None:
        return []
    if node.get("type") == "Sequence":
        out: List[Dict[str, Any]] = []
        for sub in node.get(key) or []:
            out += _flatten(sub, key)
        return out
    return [node]


def _pattern(p: Dict[str, Any]) -> Tuple[str, str]:
    if "String" in p:
        return "String", p["String"]
    if "Regex" in p:
        return "Regex", p["Regex"]
    raise TokenizerUnsupported(f"pattern {p!r}")


def normalizer_steps(node: Optional[Dict[str, Any]]) -> List[str]:
    steps = []
    for n in _flatten(node, "normalizers"):
        t = n.get("type")
        if t == "NFC":
            steps.append("nfc")
        elif t == "Prepend" and n.get("prepend") == METASPACE:
            steps.append("prepend_metaspace")
        elif t == "Replace":
            kind, pat = _pattern(n["pattern"])
            content = n.get("content")
            if kind == "String" and pat == " " and content == METASPACE:
                steps.append("space_to_metaspace")
            elif kind == "Regex" and pat == r"\A +| +\z" and content == "":
                steps.append("strip_spaces")
            elif kind == "Regex" and pat == " {2,}" and content == " ":
                steps.append("collapse_spaces")
            else:
                raise TokenizerUnsupported(f"normalizer Replace({kind} {pat!r} -> {content!r})")
        else:
            raise TokenizerUnsupported(f"normalizer {t} {n!r}")
    return steps


def pre_tokenizer_steps(node: Optional[Dict[str, Any]]) -> List[str]:
    steps: List[str] = []
    for n in _flatten(node, "pretokenizers"):
        t = n.get("type")
        if t == "ByteLevel":
            if n.get("add_prefix_space", True):
                steps.append("prefix_space")
            if n.get("use_regex", True):
                steps.append("gpt2_split")
            steps.append("byte_level")
        elif t == "Split":
            kind, pat = _pattern(n["pattern"])
            if kind != "Regex" or pat not in SPLIT_PATTERNS:
                raise TokenizerUnsupported(f"Split pre-tokenizer with pattern {pat!r}")
            if str(n.get("behavior", "")).lower() != "isolated" or n.get("invert", False):
                raise TokenizerUnsupported(f"Split pre-tokenizer behaviour {n.get('behavior')} invert={n.get('invert')}")
            steps.append(SPLIT_PATTERNS[pat])
        elif t == "Digits":
            steps.append("digits_individual" if n.get("individual_digits") else "digits")
        elif t == "Metaspace":
            if n.get("replacement", METASPACE) != METASPACE:
                raise TokenizerUnsupported(f"Metaspace replacement {n.get('replacement')!r}")
            scheme = n.get("prepend_scheme")
            if scheme is None:
                scheme = "always" if n.get("add_prefix_space", True) else "never"
            if scheme not in ("first", "always", "never"):
                raise TokenizerUnsupported(f"Metaspace prepend_scheme {scheme!r}")
            steps.append("metaspace_" + scheme)
            if n.get("split", True):
                steps.append("metaspace_split")
        else:
            raise TokenizerUnsupported(f"pre-tokenizer {t}")
    if "byte_level" in steps and steps.index("byte_level") != len(steps) - 1:
        raise TokenizerUnsupported("pre-tokenizer steps after ByteLevel")
    return steps


def decoder_steps(node: Optional[Dict[str, Any]]) -> List[str]:
    steps = []
    for n in _flatten(node, "decoders"):
        t = n.get("type")
        if t == "ByteLevel":
            steps.append("byte_level")
        elif t == "Replace":
            kind, pat = _pattern(n["pattern"])
            if kind == "String" and pat == METASPACE and n.get("content") == " ":
                steps.append("metaspace_to_space")
            else:
                raise TokenizerUnsupported(f"decoder Replace({pat!r} -> {n.get('content')!r})")
        elif t == "ByteFallback":
            steps.append("byte_fallback")
        elif t == "Fuse":
            steps.append("fuse")
        elif t == "Strip":
            if n.get("content") != " " or int(n.get("start", 0)) != 1 or int(n.get("stop", 0)) != 0:
                raise TokenizerUnsupported(f"decoder Strip {n!r}")
            steps.append("strip_leading_space")
        elif t == "Metaspace":
            scheme = n.get("prepend_scheme")
            if scheme is None:
                scheme = "always" if n.get("add_prefix_space", True) else "never"
            if n.get("replacement", METASPACE) != METASPACE or scheme not in ("first", "always", "never"):
                raise TokenizerUnsupported(f"decoder Metaspace {n!r}")
            steps.append("metaspace_" + scheme)
        else:
            raise TokenizerUnsupported(f"decoder {t}")
    allowed = (["byte_level"], ["metaspace_to_space", "byte_fallback", "fuse", "strip_leading_space"],
               ["metaspace_to_space", "fuse", "strip_leading_space"], ["metaspace_to_space", "byte_fallback", "fuse"],
               ["metaspace_to_space", "fuse"], ["byte_fallback", "fuse"], ["fuse"], [])
    if steps not in [list(a) for a in allowed] and not (len(steps) == 1 and steps[0].startswith("metaspace_")):
        raise TokenizerUnsupported(f"decoder sequence {steps}")
    return steps


def template_ids(node: Optional[Dict[str, Any]]) -> Tuple[List[int], List[int]]:
    """(prefix, suffix) ids that add_special_tokens wraps around one sequence."""
    prefix: List[int] = []
    suffix: List[int] = []
    for p in _flatten(node, "processors"):
        t = p.get("type")
        if t == "ByteLevel":
            continue
        if t != "TemplateProcessing":
            raise TokenizerUnsupported(f"post-processor {t}")
        specials = p.get("special_tokens") or {}
        seen_a = False
        pre: List[int] = []
        post: List[int] = []
        for piece in p.get("single") or []:
            if "Sequence" in piece:
                if piece["Sequence"].get("id") != "A" or seen_a:
                    raise TokenizerUnsupported("TemplateProcessing single template must hold sequence A once")
                seen_a = True
            elif "SpecialToken" in piece:
                name = piece["SpecialToken"]["id"]
                if name not in specials:
                    raise TokenizerUnsupported(f"TemplateProcessing special token {name!r} has no ids")
                (post if seen_a else pre).extend(int(x) for x in specials[name]["ids"])
            else:
                raise TokenizerUnsupported(f"TemplateProcessing piece {piece!r}")
        if not seen_a:
            raise TokenizerUnsupported("TemplateProcessing single template without sequence A")
        prefix, suffix = prefix + pre, post + suffix
    return prefix, suffix


def compact_tokenizer(tj: Dict[str, Any]) -> Dict[str, Any]:
    """tokenizer.json (parsed) -> `tokenizer.*` metadata for the C tokenizer."""
    model = tj.get("model") or {}
    if model.get("type", "BPE") != "BPE":
        raise TokenizerUnsupported(f"model type {model.get('type')} (only BPE is implemented in C)")
    if model.get("dropout") not in (None, 0, 0.0):
        raise TokenizerUnsupported("BPE dropout")
    if model.get("continuing_subword_prefix") or model.get("end_of_word_suffix"):
        raise TokenizerUnsupported("BPE continuing_subword_prefix / end_of_word_suffix")
    vocab: Dict[str, int] = model.get("vocab") or {}
    if not vocab:
        raise TokenizerUnsupported("empty vocabulary")
    added = tj.get("added_tokens") or []
    n = max(max(vocab.values()), max((int(a["id"]) for a in added), default=-1)) + 1
    if n > (1 << 24):
        raise TokenizerUnsupported(f"{n} tokens")
    tokens: List[bytes] = [b""] * n
    flags = bytearray(n)
    for s, i in vocab.items():
        if flags[i]:
            raise TokenizerUnsupported(f"vocabulary id {i} appears twice")
        tokens[i] = s.encode("utf-8")
        flags[i] = TOK_NORMAL
    for a in added:
        i, content = int(a["id"]), a["content"]
        if not content:
            raise TokenizerUnsupported(f"added token {i} is empty")
        if content in vocab and vocab[content] != i:
            raise TokenizerUnsupported(f"added token {content!r} has id {i} but the vocabulary gives {vocab[content]}")
        if flags[i] & TOK_NORMAL and tokens[i] != content.encode("utf-8"):
            raise TokenizerUnsupported(f"added token {content!r} reuses id {i} of vocabulary entry {tokens[i]!r}")
        if flags[i] & TOK_ADDED:
            raise TokenizerUnsupported(f"two added tokens share id {i}")
        tokens[i] = content.encode("utf-8")
        f = flags[i] | TOK_ADDED
        for key, bit in (("special", TOK_SPECIAL), ("lstrip", TOK_LSTRIP), ("rstrip", TOK_RSTRIP),
                         ("single_word", TOK_SINGLE_WORD), ("normalized", TOK_NORMALIZED)):
            if a.get(key, key == "normalized" and not a.get("special", False)):
                f |= bit
        flags[i] = f
    contents = [a["content"] for a in added]
    if len(set(contents)) != len(contents):
        raise TokenizerUnsupported("two added tokens have the same content")
    merges_in = model.get("merges") or []
    pairs: Dict[Tuple[int, int], int] = {}
    order: List[Tuple[int, int]] = []
    for m in merges_in:
        a, b = (m.split(" ", 1) if isinstance(m, str) else m)
        if a not in vocab or b not in vocab or a + b not in vocab:
            raise TokenizerUnsupported(f"merge {a!r} + {b!r} uses tokens outside the vocabulary")
        key = (vocab[a], vocab[b])
        pairs[key] = len(order)   # like HF, a repeated merge keeps its last rank
        order.append(key)
    ranked = sorted(pairs, key=pairs.get)
    merges = np.asarray([x for pr in ranked for x in pr], dtype=np.int64)
    unk = model.get("unk_token")
    if unk is not None and unk not in vocab:
        raise TokenizerUnsupported(f"unk_token {unk!r} is not in the vocabulary")
    norm = normalizer_steps(tj.get("normalizer"))
    if any(f & TOK_NORMALIZED for f in flags) and any(step != "nfc" for step in norm):
        raise TokenizerUnsupported("added tokens with normalized=true under a normalizer other than NFC")
    prefix, suffix = template_ids(tj.get("post_processor"))
    for i in prefix + suffix:
        if not 0 <= i < n:
            raise TokenizerUnsupported(f"post-processor id {i} is outside the vocabulary")
    return {
        "tokenizer.model": "bpe",
        "tokenizer.tokens": tokens,
        "tokenizer.token_flags": bytes(flags),
        "tokenizer.merges": merges,
        "tokenizer.normalizer": norm,
        "tokenizer.pre_tokenizer": pre_tokenizer_steps(tj.get("pre_tokenizer")),
        "tokenizer.decoder": decoder_steps(tj.get("decoder")),
        "tokenizer.unk_id": vocab[unk] if unk is not None else -1,
        "tokenizer.byte_fallback": int(bool(model.get("byte_fallback", False))),
        "tokenizer.fuse_unk": int(bool(model.get("fuse_unk", False))),
        "tokenizer.ignore_merges": int(bool(model.get("ignore_merges", False))),
        "tokenizer.template_prefix": np.asarray(prefix, dtype=np.int64),
        "tokenizer.template_suffix": np.asarray(suffix, dtype=np.int64),
    }
