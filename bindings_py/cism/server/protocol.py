"""The OpenAI wire format: request validation and response shapes.

Requests are parsed from the decoded JSON body by hand (not by pydantic
models) so that every malformed field gets a 400 with an OpenAI error object
naming the parameter, in the user's terms. Fields this server does not
implement but that would change the result if ignored (n > 1, tools,
logit_bias, echo, suffix, a response_format other than text, JSON or a JSON
schema this server can follow) are refused; purely
informational ones (user, metadata, store, ...) are ignored.
"""
from __future__ import annotations

import math
import numbers
import os
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence

from ..json_mode import response_schema


class APIError(Exception):
    """An error answered as {"error": {"message", "type", "param", "code"}} with an HTTP status."""

    def __init__(self, status: int, message: str, type: str = "invalid_request_error", param: Optional[str] = None,
                 code: Optional[str] = None, headers: Optional[Dict[str, str]] = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type
        self.param = param
        self.code = code
        self.headers = headers or {}

    def body(self) -> Dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}


def bad(message: str, param: Optional[str] = None, code: Optional[str] = None) -> APIError:
    return APIError(400, message, "invalid_request_error", param, code)


@dataclass
class Limits:
    """What the server accepts (set by `cism serve` options)."""
    max_tokens: int = 4096          # the most tokens one request may ask for
    max_body_bytes: int = 1 << 20   # request body size
    max_stop: int = 16              # stop strings per request
    max_top_logprobs: int = 20


@dataclass
class GenRequest:
    """A validated completion request, ready for the scheduler."""
    kind: str                        # "chat" or "completion"
    prompt_ids: List[int]
    max_tokens: int
    sampling: Dict[str, Any]         # cism.Sampler keyword arguments
    stop: List[str] = field(default_factory=list)
    stop_ids: frozenset = frozenset()
    logprobs: bool = False
    top_logprobs: int = 0
    stream: bool = False
    include_usage: bool = False
    json: Any = None                 # response_format: None (text), True (any JSON object) or a JSON schema
    id: str = ""
    created: int = 0


# ---- field helpers ---------------------------------------------------------------
def _is_number(v: Any) -> bool:
    return isinstance(v, numbers.Real) and not isinstance(v, bool)


def number(body: Dict[str, Any], key: str, default: float, lo: float, hi: float, lo_open: bool = False) -> float:
    v = body.get(key)
    if v is None:
        return default
    if not _is_number(v) or not math.isfinite(float(v)):
        raise bad(f"'{key}' must be a number (got {_show(v)})", key)
    v = float(v)
    if v < lo or v > hi or (lo_open and v == lo):
        raise bad(f"'{key}' must be {'above' if lo_open else 'at least'} {lo:g} and at most {hi:g} (got {v:g})", key)
    return v


def integer(body: Dict[str, Any], key: str, default: Optional[int], lo: Optional[int] = None,
            hi: Optional[int] = None) -> Optional[int]:
    v = body.get(key)
    if v is None:
        return default
    if isinstance(v, float) and v.is_integer():
        v = int(v)
    if isinstance(v, bool) or not isinstance(v, numbers.Integral):
        raise bad(f"'{key}' must be an integer (got {_show(v)})", key)
    v = int(v)
    if lo is not None and v < lo:
        raise bad(f"'{key}' must be at least {lo} (got {v})", key)
    if hi is not None and v > hi:
        raise bad(f"'{key}' must be at most {hi} (got {v})", key)
    return v


def boolean(body: Dict[str, Any], key: str, default: bool) -> bool:
    v = body.get(key)
    if v is None:
        return default
    if not isinstance(v, bool):
        raise bad(f"'{key}' must be true or false (got {_show(v)})", key)
    return v


def _show(v: Any) -> str:
    s = repr(v)
    return s if len(s) <= 40 else s[:37] + "..."


def _stop(body: Dict[str, Any], limits: Limits) -> List[str]:
    v = body.get("stop")
    if v is None:
        return []
    if isinstance(v, str):
        v = [v]
    if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
        raise bad("'stop' must be a string or a list of strings", "stop")
    if len(v) > limits.max_stop:
        raise bad(f"'stop' may hold at most {limits.max_stop} strings (got {len(v)})", "stop")
    return [x for x in v if x]


def _refuse_unsupported(body: Dict[str, Any], kind: str) -> None:
    n = body.get("n")
    if n is not None and n != 1:
        raise bad(f"'n' must be 1: this server returns one choice per request (got {_show(n)})", "n")
    if kind == "completion":
        b = body.get("best_of")
        if b is not None and b != 1:
            raise bad(f"'best_of' must be 1 (got {_show(b)})", "best_of")
        if body.get("echo") not in (None, False):
            raise bad("'echo' is not supported", "echo")
        if body.get("suffix") not in (None, ""):
            raise bad("'suffix' is not supported", "suffix")
    for key in ("tools", "functions"):
        if body.get(key) not in (None, []):
            raise bad(f"'{key}' (tool calling) is not supported by this server", key)
    for key in ("tool_choice", "function_call"):
        if body.get(key) not in (None, "none", "auto"):
            raise bad(f"'{key}' is not supported by this server", key)
    if body.get("logit_bias") not in (None, {}):
        raise bad("'logit_bias' is not supported", "logit_bias")
    m = body.get("model")
    if m is not None and not isinstance(m, str):
        raise bad(f"'model' must be a string (got {_show(m)})", "model")


def _sampling(body: Dict[str, Any]) -> Dict[str, Any]:
    seed = integer(body, "seed", None)
    if seed is None:
        seed = int.from_bytes(os.urandom(8), "little") >> 1
    return dict(temperature=number(body, "temperature", 1.0, 0.0, 2.0),
                top_p=number(body, "top_p", 1.0, 0.0, 1.0, lo_open=True),
                # extensions (as llama.cpp's server): 0 = off
                top_k=integer(body, "top_k", 0, 0, 1 << 30),
                min_p=number(body, "min_p", 0.0, 0.0, 1.0),
                presence_penalty=number(body, "presence_penalty", 0.0, -2.0, 2.0),
                frequency_penalty=number(body, "frequency_penalty", 0.0, -2.0, 2.0),
                seed=seed)


def _max_tokens(body: Dict[str, Any], keys: Sequence[str], default: int, limits: Limits) -> int:
    for key in keys:
        v = integer(body, key, None, 1, None)
        if v is not None:
            if v > limits.max_tokens:
                raise bad(f"'{key}' is {v}; this server allows at most {limits.max_tokens} (--max-tokens)", key)
            return v
    return min(default, limits.max_tokens)


def _stream(body: Dict[str, Any], req: GenRequest) -> None:
    req.stream = boolean(body, "stream", False)
    so = body.get("stream_options")
    if so is not None:
        if not isinstance(so, dict):
            raise bad("'stream_options' must be an object", "stream_options")
        if not req.stream:
            raise bad("'stream_options' is only allowed with \"stream\": true", "stream_options")
        req.include_usage = boolean(so, "include_usage", False)


def parse_common(body: Any, kind: str, limits: Limits, default_max_tokens: int) -> GenRequest:
    """The fields chat and text completions share (prompt_ids left empty)."""
    if not isinstance(body, dict):
        raise bad("the request body must be a JSON object")
    _refuse_unsupported(body, kind)
    try:
        json_request = response_schema(body.get("response_format"))
    except ValueError as e:
        raise bad(str(e), "response_format") from None
    keys = ("max_completion_tokens", "max_tokens") if kind == "chat" else ("max_tokens",)
    req = GenRequest(kind=kind, prompt_ids=[], max_tokens=_max_tokens(body, keys, default_max_tokens, limits),
                     sampling=_sampling(body), stop=_stop(body, limits),
                     id=("chatcmpl-" if kind == "chat" else "cmpl-") + uuid.uuid4().hex, created=int(time.time()))
    _stream(body, req)
    req.json = json_request
    if kind == "chat":
        req.logprobs = boolean(body, "logprobs", False)
        req.top_logprobs = integer(body, "top_logprobs", 0, 0, limits.max_top_logprobs)
        if req.top_logprobs and not req.logprobs:
            raise bad("'top_logprobs' needs \"logprobs\": true", "top_logprobs")
    else:
        lp = integer(body, "logprobs", None, 0, limits.max_top_logprobs)
        req.logprobs = lp is not None
        req.top_logprobs = lp or 0
    return req


def messages_of(body: Dict[str, Any]) -> List[Dict[str, Any]]:
    """The chat messages, each {"role": str, "content": str or text parts}."""
    msgs = body.get("messages")
    if not isinstance(msgs, list) or not msgs:
        raise bad("'messages' must be a non-empty list of {\"role\", \"content\"} objects", "messages")
    for i, m in enumerate(msgs):
        if not isinstance(m, dict):
            raise bad(f"messages[{i}] must be an object", "messages")
        if not isinstance(m.get("role"), str) or not m["role"]:
            raise bad(f"messages[{i}].role must be a non-empty string", "messages")
        c = m.get("content")   # missing: cism.chat's rule (only an assistant turn may have none), a 400 there
        if c is not None and not isinstance(c, (str, list)):
            raise bad(f"messages[{i}].content must be a string or a list of text parts", "messages")
    return msgs


def _all_ints(xs: List[Any]) -> bool:
    return all(isinstance(t, int) and not isinstance(t, bool) for t in xs)


def _in_vocabulary(ids: List[int], n_ids: int, key: str) -> List[int]:
    """ids as they are, or a 400 naming the first one outside 0 .. n_ids - 1."""
    out = [t for t in ids if not 0 <= t < n_ids]
    if out:
        raise bad(f"'{key}' token id {out[0]} is outside the vocabulary (0 .. {n_ids - 1})", key)
    return list(ids)


def prompt_of(body: Dict[str, Any], n_ids: int):
    """A completion prompt: text (str) or token ids (list of int)."""
    p = body.get("prompt")
    if isinstance(p, list) and len(p) == 1 and isinstance(p[0], (str, list)):
        p = p[0]   # a batch of one
    if isinstance(p, str):
        return p
    if isinstance(p, list) and p and _all_ints(p):
        return _in_vocabulary(p, n_ids, "prompt")
    if isinstance(p, list) and len(p) > 1 and all(isinstance(x, (str, list)) for x in p):
        raise bad("'prompt' holds several prompts: send one per request", "prompt")
    raise bad("'prompt' must be a string or a list of token ids", "prompt")


def tokenize_of(body: Any):
    """POST /tokenize (llama.cpp server's shape): (content, add_special, with_pieces)."""
    if not isinstance(body, dict):
        raise bad("the request body must be a JSON object")
    content = body.get("content")
    if not isinstance(content, str):
        raise bad(f"'content' must be a string (got {_show(content)})", "content")
    return content, boolean(body, "add_special", False), boolean(body, "with_pieces", False)


def detokenize_of(body: Any, n_ids: int) -> List[int]:
    """POST /detokenize: the token ids of "tokens", each in the vocabulary."""
    if not isinstance(body, dict):
        raise bad("the request body must be a JSON object")
    ids = body.get("tokens")
    if not isinstance(ids, list) or not _all_ints(ids):
        raise bad("'tokens' must be a list of token ids", "tokens")
    return _in_vocabulary(ids, n_ids, "tokens")


# ---- responses ----------------------------------------------------------------
def usage(prompt_tokens: int, completion_tokens: int, cached_tokens: int) -> Dict[str, Any]:
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
            "prompt_tokens_details": {"cached_tokens": cached_tokens}}


def chat_logprobs(entries: List[tuple]) -> Dict[str, Any]:
    """entries: (text, logprob, [(text, logprob), ...]) per token."""
    def one(text: str, lp: float) -> Dict[str, Any]:
        return {"token": text, "logprob": lp, "bytes": list(text.encode("utf-8"))}
    return {"content": [dict(one(t, lp), top_logprobs=[one(a, b) for a, b in top]) for t, lp, top in entries],
            "refusal": None}


def completion_logprobs(entries: List[tuple], offset: int) -> Dict[str, Any]:
    """The legacy completions format; text_offset counts characters from `offset`."""
    offsets = []
    for t, _, _ in entries:
        offsets.append(offset)
        offset += len(t)
    return {"tokens": [t for t, _, _ in entries], "token_logprobs": [lp for _, lp, _ in entries],
            "top_logprobs": [{a: b for a, b in top} for _, _, top in entries], "text_offset": offsets}


def chat_response(req: GenRequest, model: str, content: str, finish: str, use: Dict[str, Any],
                  entries: Optional[List[tuple]]) -> Dict[str, Any]:
    return {"id": req.id, "object": "chat.completion", "created": req.created, "model": model,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": content, "refusal": None},
                         "logprobs": chat_logprobs(entries) if entries is not None else None,
                         "finish_reason": finish}],
            "usage": use}


def chat_chunk(req: GenRequest, model: str, delta: Dict[str, Any], finish: Optional[str] = None,
               entries: Optional[List[tuple]] = None) -> Dict[str, Any]:
    return {"id": req.id, "object": "chat.completion.chunk", "created": req.created, "model": model,
            "choices": [{"index": 0, "delta": delta,
                         "logprobs": chat_logprobs(entries) if entries is not None else None,
                         "finish_reason": finish}]}


def completion_response(req: GenRequest, model: str, text: str, finish: str, use: Dict[str, Any],
                        entries: Optional[List[tuple]]) -> Dict[str, Any]:
    return {"id": req.id, "object": "text_completion", "created": req.created, "model": model,
            "choices": [{"index": 0, "text": text,
                         "logprobs": completion_logprobs(entries, 0) if entries is not None else None,
                         "finish_reason": finish}],
            "usage": use}


def completion_chunk(req: GenRequest, model: str, text: str, finish: Optional[str] = None,
                     entries: Optional[List[tuple]] = None, offset: int = 0) -> Dict[str, Any]:
    return {"id": req.id, "object": "text_completion", "created": req.created, "model": model,
            "choices": [{"index": 0, "text": text,
                         "logprobs": completion_logprobs(entries, offset) if entries is not None else None,
                         "finish_reason": finish}]}


def usage_chunk(req: GenRequest, model: str, use: Dict[str, Any]) -> Dict[str, Any]:
    """The extra last chunk of stream_options.include_usage: no choices, the usage."""
    obj = "chat.completion.chunk" if req.kind == "chat" else "text_completion"
    return {"id": req.id, "object": obj, "created": req.created, "model": model, "choices": [], "usage": use}


def models_list(model_id: str, created: int) -> Dict[str, Any]:
    return {"object": "list", "data": [model_card(model_id, created)]}


def model_card(model_id: str, created: int) -> Dict[str, Any]:
    return {"id": model_id, "object": "model", "created": created, "owned_by": "cism"}
