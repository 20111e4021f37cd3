"""OpenAI-style chat completions, as llama-cpp-python's
`Llama.create_chat_completion`: `Model.create_chat_completion(messages, ...)`
(alias `Model.chat`) takes a list of {"role", "content"} dicts and returns a
"chat.completion" dict, or with stream=True yields "chat.completion.chunk"
dicts (a role delta, then content deltas, then an empty delta with the
finish_reason).

The prompt is the model's own chat template (`tokenizer.chat_template` in the
.cism metadata) rendered with jinja2 as transformers renders it
(add_generation_prompt, bos_token/eos_token as text), then tokenized with the
special tokens parsed and no BOS added (the template writes it, as
transformers' apply_chat_template(tokenize=True) and llama-cpp-python do). A
template that fails to render raises ChatTemplateError: it is never replaced
by another format silently. A model without a Jinja template uses the named
chat format its file gives (cism_chat_apply); `chat_format=` picks a named
format or "jinja" explicitly.

Generation stops at the model's end-of-generation ids, at the template's
end-of-turn token (the special token the template writes after an assistant
message, e.g. <|im_end|>, even when the file's EOS is another), and at the
user's stop strings (text that may be the start of one is held back until it
is decided; the stop string is not part of the content). finish_reason is
"stop" for those and "length" when max_tokens tokens were generated or the
context is full. usage.completion_tokens counts the sampled tokens without a
final end-of-turn/EOS token.

Each call runs in a fresh session (n_ctx= sets its length, 0 = the library's
default, min(model, 4096)); a conversation that does not leave room for one
token is refused before anything is evaluated.
"""
from __future__ import annotations

import os
import time
import uuid
from typing import TYPE_CHECKING, Any, Dict, Iterator, List, Optional, Sequence, Union

from . import chat_format
from .errors import ContextFullError
from .generate import stop_strings

if TYPE_CHECKING:
    from .model import Model

# llama-cpp-python's create_chat_completion defaults
DEFAULTS = dict(temperature=0.2, top_p=0.95, top_k=40, min_p=0.05, repeat_penalty=1.0)


class ChatTemplateError(ValueError):
    """The model's chat template could not render the messages (or the model has none)."""


def _content(msg: Dict[str, Any], i: int) -> str:
    c = msg.get("content")
    if c is None:  # only an assistant turn (one that called tools) may have none, as in the OpenAI API
        if msg.get("role") != "assistant":
            raise ValueError(f"messages[{i}] ({msg.get('role')}) has no 'content': give a string or a list of text parts")
        return ""
    if isinstance(c, str):
        return c
    if isinstance(c, list):   # OpenAI content parts: only text parts can be rendered
        texts = []
        for part in c:
            if not (isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str)):
                raise ValueError(f"messages[{i}]: only text content parts are supported (got {part!r:.60})")
            texts.append(part["text"])
        return "".join(texts)
    raise ValueError(f"messages[{i}]['content'] must be a string (got {type(c).__name__})")


def normalize_messages(messages: Sequence[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """Copies of the messages with a string "role" and a string "content"."""
    if isinstance(messages, (str, bytes)) or not isinstance(messages, Sequence):
        raise TypeError("messages must be a list of {'role': ..., 'content': ...} dicts")
    out = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise ValueError(f"messages[{i}] must be a dict with a string 'role' (got {m!r:.60})")
        d = dict(m)
        d["content"] = _content(m, i)
        out.append(d)
    return out


def _template(model: "Model") -> Optional[str]:
    meta = model.metadata
    if "tokenizer.chat_template" not in meta:
        return None
    t = meta["tokenizer.chat_template"]
    return t.decode("utf-8") if isinstance(t, bytes) else t


def render(model: "Model", messages: Sequence[Dict[str, Any]], add_generation_prompt: bool = True,
           chat_format_name: Optional[str] = None) -> str:
    """The prompt text for `messages`: the model's Jinja template (default, or
    chat_format_name "jinja"), else the named format of the file, or the named
    format `chat_format_name` (chatml, llama3, llama2, mistral, zephyr)."""
    msgs = normalize_messages(messages)
    fmt = chat_format_name
    if fmt is None:
        fmt = "jinja" if _template(model) is not None else chat_format.model_format(model)
        if fmt is None:
            raise ChatTemplateError(f"{model.path} has no chat template: pass chat_format= one of "
                                    f"{', '.join(chat_format.FORMATS)}")
    if fmt == "jinja":
        if _template(model) is None:
            raise ChatTemplateError(f"{model.path} has no Jinja chat template (tokenizer.chat_template)")
        try:
            return chat_format.render_template(model, msgs, add_generation_prompt)
        except ImportError:
            raise
        except Exception as e:
            raise ChatTemplateError(f"the chat template of {model.path} failed to render these messages: "
                                    f"{type(e).__name__}: {e}") from e
    if fmt not in chat_format.FORMATS:
        raise ValueError(f"unknown chat format {fmt!r} (jinja, {', '.join(chat_format.FORMATS)})")
    try:
        return chat_format.apply(model, [{"role": m["role"], "content": m["content"]} for m in msgs], fmt,
                                 add_generation_prompt)
    except Exception as e:
        raise ChatTemplateError(f"chat format {fmt} cannot render these messages: {e}") from e


def prompt_tokens(model: "Model", messages: Sequence[Dict[str, Any]], add_generation_prompt: bool = True,
                  chat_format_name: Optional[str] = None) -> List[int]:
    """The token ids of the rendered prompt (special tokens parsed, no BOS added)."""
    return list(model.tokenizer.encode(render(model, messages, add_generation_prompt, chat_format_name),
                                       add_bos=False))


def _is_special(tok, i: int) -> bool:
    return tok.decode([i], skip_special=True) == "" and tok.decode([i], skip_special=False) != ""


def end_of_turn_ids(model: "Model", chat_format_name: Optional[str] = None) -> List[int]:
    """The special token the chat format writes right after an assistant
    message (e.g. <|im_end|>, <|eot_id|>, </s>), found by rendering a probe
    conversation; [] when there is none (or the probe does not render)."""
    mark = "\x01cism-probe\x01"
    try:
        text = render(model, [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": mark}],
                      add_generation_prompt=False, chat_format_name=chat_format_name)
    except Exception:
        return []
    k = text.find(mark)
    if k < 0:
        return []
    tok = model.tokenizer
    for i in tok.encode(text[k + len(mark):], add_bos=False)[:4]:
        if _is_special(tok, i):
            return [i]
        if tok.decode([i], skip_special=True).strip():
            break   # text before any special token: the turn ends without one
    return []


def _json_request(response_format) -> Union[bool, Dict[str, Any]]:
    """False (text), True (any JSON object) or the schema a response_format asks for."""
    from .json_mode import response_schema
    want = response_schema(response_format)
    return False if want is None else want


def _finish(stop_reason: Optional[str]) -> str:
    return "stop" if stop_reason in ("eos", "stop") else "length"


class _Run:
    """One completion: renders, checks room, generates; yields text pieces and
    leaves finish_reason, prompt/completion token counts."""

    def __init__(self, model: "Model", messages, *, max_tokens: Optional[int], stop, seed: Optional[int],
                 chat_format_name: Optional[str], n_ctx: int, n_threads: int, kv_type: str, sampling: Dict[str, Any],
                 json: Union[bool, Dict[str, Any]] = False):
        self.model = model
        self.json = json
        self.ids = prompt_tokens(model, messages, True, chat_format_name)
        if not self.ids:
            raise ValueError("the chat template rendered an empty prompt")
        self.stop = stop_strings(stop)
        self.stop_ids = end_of_turn_ids(model, chat_format_name)
        self.seed = int.from_bytes(os.urandom(8), "little") >> 1 if seed is None else int(seed)
        self.sampling = sampling
        self.session = model.session(n_ctx=n_ctx, n_threads=n_threads, kv_type=kv_type)
        n_ctx = self.session.n_ctx
        if len(self.ids) >= n_ctx:
            self.session.close()
            raise ContextFullError(f"the conversation is {len(self.ids)} tokens and the context holds {n_ctx}: "
                                   "shorten the messages or pass a larger n_ctx=")
        room = n_ctx - len(self.ids)
        self.max_tokens = room if max_tokens is None or max_tokens <= 0 else int(max_tokens)
        self.finish_reason: Optional[str] = None
        self.completion_tokens = 0

    def pieces(self) -> Iterator[str]:
        from .generate import Generation
        gen = None
        try:
            gen = Generation(self.session, self.ids, self.max_tokens, text=True, stop=self.stop,
                             stop_tokens=self.stop_ids, add_bos=False, seed=self.seed, json=self.json, **self.sampling)
            try:
                for piece in gen:
                    if piece:
                        yield piece
                reason = gen.stop_reason
            except ContextFullError:   # the context end is a normal end ("length"), not an error
                reason = "length"
            self.finish_reason = _finish(reason)
            n = len(gen.tokens)
            if reason == "eos" and n and (gen.tokens[-1] in self.stop_ids or gen.tokens[-1] in self.model.eos_ids):
                n -= 1   # the end-of-turn / EOS token itself (JSON mode ends on the object's last token)
            self.completion_tokens = n
        finally:
            if gen is not None:
                gen.close()
            self.session.close()

    def usage(self) -> Dict[str, int]:
        p = len(self.ids)
        return {"prompt_tokens": p, "completion_tokens": self.completion_tokens,
                "total_tokens": p + self.completion_tokens}


def create_chat_completion(llm: "Model", messages: Sequence[Dict[str, Any]], *, stream: bool = False,
                           max_tokens: Optional[int] = None, temperature: float = DEFAULTS["temperature"],
                           top_p: float = DEFAULTS["top_p"], top_k: int = DEFAULTS["top_k"],
                           min_p: float = DEFAULTS["min_p"], repeat_penalty: float = DEFAULTS["repeat_penalty"],
                           frequency_penalty: float = 0.0, presence_penalty: float = 0.0, penalty_last_n: int = 64,
                           seed: Optional[int] = None, stop: Union[str, Sequence[str], None] = None,
                           model: Optional[str] = None, chat_format: Optional[str] = None, n_ctx: int = 0,
                           n_threads: int = 0, kv_type: str = "f16",
                           response_format: Optional[Dict[str, Any]] = None) -> Union[Dict[str, Any], Iterator[Dict[str, Any]]]:
    """An OpenAI-style chat completion of `messages` by `llm` (a cism.Model).

    Sampling as llama-cpp-python (same defaults: temperature 0.2, top_p 0.95,
    top_k 40, min_p 0.05, repeat_penalty 1.0; temperature 0 is greedy); seed
    None draws a random seed. max_tokens None or <= 0: until the context is
    full. stop: a string or strings that end the reply (not included).
    model: the name reported in the result (default: the file's path).
    chat_format: None (the model's template), "jinja", or a named format.
    n_ctx / n_threads / kv_type: the session's (0 = library defaults).
    response_format: None or {"type": "text"}; {"type": "json_object"}: the
    reply is one JSON object; {"type": "json_schema", "json_schema": {"name",
    "schema"}} (or llama-cpp-python's {"type": "json_object", "schema"}): one
    object that schema accepts (cism/json_schema.py: the keywords followed).
    Sampling masks what cannot continue it; ask for JSON in the messages too:
    the model still chooses what it says.

    Returns {"id", "object": "chat.completion", "created", "model", "choices":
    [{"index": 0, "message": {"role": "assistant", "content"}, "logprobs": None,
    "finish_reason": "stop" | "length"}], "usage": {"prompt_tokens",
    "completion_tokens", "total_tokens"}}; with stream=True an iterator of
    "chat.completion.chunk" dicts whose last one has the finish_reason (and,
    as an extension, "usage")."""
    sampling = dict(temperature=temperature, top_p=top_p, top_k=top_k, min_p=min_p, repeat_penalty=repeat_penalty,
                    frequency_penalty=frequency_penalty, presence_penalty=presence_penalty,
                    penalty_last_n=penalty_last_n)
    run = _Run(llm, messages, max_tokens=max_tokens, stop=stop, seed=seed, chat_format_name=chat_format,
               n_ctx=n_ctx, n_threads=n_threads, kv_type=kv_type, sampling=sampling,
               json=_json_request(response_format))
    head = {"id": f"chatcmpl-{uuid.uuid4().hex}", "created": int(time.time()),
            "model": model if model is not None else llm.path}
    if stream:
        return _chunks(run, head)
    content = "".join(run.pieces())
    return {"id": head["id"], "object": "chat.completion", "created": head["created"], "model": head["model"],
            "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "logprobs": None,
                         "finish_reason": run.finish_reason}],
            "usage": run.usage()}


def _chunks(run: _Run, head: Dict[str, Any]) -> Iterator[Dict[str, Any]]:
    def chunk(delta: Dict[str, str], finish: Optional[str] = None) -> Dict[str, Any]:
        return {"id": head["id"], "object": "chat.completion.chunk", "created": head["created"],
                "model": head["model"],
                "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]}

    pieces = run.pieces()
    try:
        yield chunk({"role": "assistant"})
        for piece in pieces:
            yield chunk({"content": piece})
    finally:
        pieces.close()   # a consumer that stops early releases the session
    last = chunk({}, run.finish_reason)
    last["usage"] = run.usage()
    yield last
