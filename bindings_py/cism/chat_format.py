"""Chat formats: the named formats the C library renders (cism_chat_apply),
written again here so the converter can recognize a model's Jinja chat
template by rendering both and comparing.

`detect(template, bos_token, eos_token)` returns (name, default_system) or
None. With jinja2 installed, a format is chosen only if it renders every probe
conversation exactly as the template does; without jinja2 nothing is claimed.
"""
from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Tuple

FORMATS = ("chatml", "llama3", "llama2", "mistral", "zephyr")
_PY_SPACE = "".join(chr(c) for c in range(0x110000) if chr(c).isspace())


def render(name: str, messages: Sequence[Dict[str, str]], add_generation_prompt: bool = True,
           bos: str = "<s>", eos: str = "</s>", default_system: Optional[str] = None) -> str:
    """The text cism_chat_apply produces for this format (kept identical to chat.c)."""
    m = list(messages)
    out: List[str] = []
    if name == "chatml":
        if default_system is not None and (not m or m[0]["role"] != "system"):
            out.append(f"<|im_start|>system\n{default_system}<|im_end|>\n")
        out += [f"<|im_start|>{x['role']}\n{x['content']}<|im_end|>\n" for x in m]
        if add_generation_prompt:
            out.append("<|im_start|>assistant\n")
    elif name == "llama3":
        if m:
            out.append(bos)
        out += [f"<|start_header_id|>{x['role']}<|end_header_id|>\n\n{x['content'].strip(_PY_SPACE)}<|eot_id|>" for x in m]
        if add_generation_prompt:
            out.append("<|start_header_id|>assistant<|end_header_id|>\n\n")
    elif name in ("llama2", "mistral"):
        sys_msg = None
        if m and m[0]["role"] == "system":
            sys_msg, m = m[0]["content"], m[1:]
        if name == "mistral":
            out.append(bos)
        for i, x in enumerate(m):
            user = x["role"] == "user"
            if user != (i % 2 == 0) or x["role"] not in ("user", "assistant"):
                raise ValueError("roles must alternate user/assistant after an optional system message")
            if name == "llama2":
                c = x["content"]
                if i == 0 and sys_msg is not None:
                    c = f"<<SYS>>\n{sys_msg}\n<</SYS>>\n\n" + c
                c = c.strip(_PY_SPACE)
                out.append(f"{bos}[INST] {c} [/INST]" if user else f" {c} {eos}")
            elif user:
                pre = f"{sys_msg}\n\n" if i == 0 and sys_msg is not None else ""
                out.append(f"[INST] {pre}{x['content']} [/INST]")
            else:
                out.append(x["content"] + eos)
    elif name == "zephyr":
        out += [f"<|{x['role']}|>\n{x['content']}{eos}\n" for x in m]
        if add_generation_prompt:
            out.append("<|assistant|>\n")
    else:
        raise ValueError(f"unknown chat format {name!r}")
    return "".join(out)


def _probes() -> List[Tuple[List[Dict[str, str]], bool]]:
    u1, a1, u2 = " Hello there!\n", "Hi. How can I help?", "Tell me a story about a cat."
    return [
        ([{"role": "user", "content": u1}], True),
        ([{"role": "system", "content": "You are terse."}, {"role": "user", "content": u1}], True),
        ([{"role": "user", "content": u1}, {"role": "assistant", "content": a1}, {"role": "user", "content": u2}], True),
        ([{"role": "system", "content": "Be kind."}, {"role": "user", "content": u1},
          {"role": "assistant", "content": a1}, {"role": "user", "content": u2}], True),
    ]


def jinja_render(template: str, messages, add_generation_prompt: bool, bos: str, eos: str) -> str:
    """Renders a chat template the way transformers does (trim_blocks, lstrip_blocks,
    raise_exception and strftime_now, a tojson that keeps non-ASCII text)."""
    try:
        import jinja2  # a runtime dependency of the package
    except ImportError as e:
        raise ImportError("rendering the model's chat template needs jinja2 (a dependency of cism: "
                          "pip install jinja2)") from e
    import json
    from datetime import datetime
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(msg):
        raise jinja2.exceptions.TemplateError(msg)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    env.filters["tojson"] = tojson
    return env.from_string(template).render(messages=messages, add_generation_prompt=add_generation_prompt,
                                            bos_token=bos, eos_token=eos)


def detect(template: Optional[str], bos: str = "<s>", eos: str = "</s>") -> Optional[Tuple[str, Optional[str]]]:
    if not template:
        return None
    try:
        import jinja2  # noqa: F401
    except ImportError:
        return None
    probes = _probes()
    try:
        first = jinja_render(template, probes[0][0], True, bos, eos)
    except Exception:
        return None
    default_system = None
    head = "<|im_start|>system\n"
    if first.startswith(head) and "<|im_end|>" in first:
        default_system = first[len(head):first.index("<|im_end|>")]
    for name in FORMATS:
        ok = True
        for msgs, gen in probes:
            try:
                want = jinja_render(template, msgs, gen, bos, eos)
            except Exception:
                # Mistral's templates refuse system messages; our rendering of them is an extension
                if not (name == "mistral" and msgs[0]["role"] == "system"):
                    ok = False
                    break
                continue
            try:
                got = render(name, msgs, gen, bos, eos, default_system if name == "chatml" else None)
            except ValueError:
                ok = False
                break
            if got != want:
                ok = False
                break
        if ok:
            return name, (default_system if name == "chatml" else None)
    return None


# ---- through the C library (cism_chat_apply) ---------------------------------
def model_format(model) -> Optional[str]:
    """The chat format the model file names (tokenizer.chat_format), or None."""
    import ctypes
    from . import _lib
    f = ctypes.c_int32()
    if _lib.lib.cism_model_chat_format(model.handle, ctypes.byref(f)) != _lib.OK:
        return None
    return _lib.lib.cism_chat_format_name(f.value).decode()


def apply(model, messages: Sequence[Dict[str, str]], fmt: Optional[str] = None,
          add_generation_prompt: bool = True) -> str:
    """The prompt text for `messages` ({"role", "content"} dicts) in chat format
    `fmt` (a name of FORMATS; None: the model's own), rendered by the C library.
    Tokenize it with special tokens parsed and without adding BOS."""
    import ctypes
    from . import _lib
    from .errors import check
    code = 0 if fmt is None else FORMATS.index(fmt) + 1
    k = len(messages)
    roles = [m["role"].encode("utf-8") for m in messages]
    conts = [m["content"].encode("utf-8") for m in messages]
    r = (ctypes.c_char_p * max(k, 1))(*roles)
    c = (ctypes.c_char_p * max(k, 1))(*conts)
    rl = (ctypes.c_size_t * max(k, 1))(*[len(x) for x in roles])
    cl = (ctypes.c_size_t * max(k, 1))(*[len(x) for x in conts])
    n = ctypes.c_size_t()
    st = _lib.lib.cism_chat_apply(model.handle, code, r, rl, c, cl, k, int(add_generation_prompt), None, 0,
                                  ctypes.byref(n))
    if st != _lib.ERR_BUFFER_SMALL:
        check(st)
    out = ctypes.create_string_buffer(n.value + 1)
    check(_lib.lib.cism_chat_apply(model.handle, code, r, rl, c, cl, k, int(add_generation_prompt), out, n.value,
                                   ctypes.byref(n)))
    return out.raw[:n.value].decode("utf-8")


def render_template(model, messages: Sequence[Dict[str, str]], add_generation_prompt: bool = True) -> str:
    """The model's exact Jinja chat template (tokenizer.chat_template) rendered
    with jinja2, as transformers does."""
    meta = model.metadata
    if "tokenizer.chat_template" not in meta:
        raise ValueError(f"{model.path}: the model file has no chat template")
    tmpl = meta["tokenizer.chat_template"]
    tmpl = tmpl.decode("utf-8") if isinstance(tmpl, bytes) else tmpl
    tok = model.tokenizer

    def text(i: int) -> str:
        return (tok.token_text(i) or "") if i >= 0 else ""

    return jinja_render(tmpl, list(messages), add_generation_prompt, text(model.bos_id), text(model.eos_id))
