"""The OpenAI-style chat API (Model.create_chat_completion / Model.chat,
cism.chat): the result and chunk shapes, streaming equal to the whole reply,
usage counts, stop strings, finish_reason "length" at max_tokens and at the
context end, the template's end-of-turn token, prompts rendered exactly as
jinja2 / transformers' apply_chat_template render the model's template, and
clear errors instead of a silently dropped template."""
import json
import os
import shutil

import numpy as np
import pytest

import cism
from cism import chat, chat_format
from cism import convert as cv
from cism import format as fmt
from cism.errors import ContextFullError
from cism.tokenizer_meta import compact_tokenizer

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TEMPLATES = os.path.join(ROOT, "tests", "tokenizer", "chat_templates")


def _template(name: str) -> str:
    with open(os.path.join(TEMPLATES, name + ".jinja"), encoding="utf-8") as f:
        return f.read()


@pytest.fixture(scope="module")
def stories(tmp_path_factory, shared_models):
    """stories260K (a trained model: real text) with the Zephyr chat template in its metadata."""
    d = tmp_path_factory.mktemp("chat")
    src = d / "hf"
    shutil.copytree(os.path.join(shared_models, "stories260K-hf"), src)
    cfg_path = src / "tokenizer_config.json"
    cfg = json.loads(cfg_path.read_text(encoding="utf-8"))
    cfg["chat_template"] = _template("zephyr")
    cfg_path.write_text(json.dumps(cfg), encoding="utf-8")
    out = str(d / "stories-chat.cism")
    cv.convert(str(src), out, progress=None)
    m = cism.Model(out)
    yield m
    m.close()


MSGS = [{"role": "user", "content": "Once upon a time"}]
GREEDY = dict(temperature=0, n_threads=1)


def test_completion_dict_and_usage(stories):
    r = stories.create_chat_completion(MSGS, max_tokens=40, **GREEDY)
    assert set(r) == {"id", "object", "created", "model", "choices", "usage"}
    assert r["object"] == "chat.completion" and r["id"].startswith("chatcmpl-") and isinstance(r["created"], int)
    assert r["model"] == stories.path
    (c,) = r["choices"]
    assert c["index"] == 0 and c["message"]["role"] == "assistant" and c["finish_reason"] == "length"
    content = c["message"]["content"]
    assert isinstance(content, str) and len(content) > 20
    # the prompt is the Jinja template rendered as transformers does, tokenized without an extra BOS
    text = chat_format.jinja_render(_template("zephyr"), MSGS, True, "<s>", "</s>")
    assert text == "<|user|>\nOnce upon a time</s>\n<|assistant|>\n"
    ids = stories.tokenizer.encode(text, add_bos=False)
    assert chat.prompt_tokens(stories, MSGS) == ids and ids[0] != stories.bos_id and stories.eos_id in ids
    # the same greedy continuation, by hand
    with stories.session(n_threads=1) as s:
        toks = list(s.generate_tokens(ids, 40))
    assert content == stories.tokenizer.decode(toks)
    assert r["usage"] == {"prompt_tokens": len(ids), "completion_tokens": 40, "total_tokens": len(ids) + 40}
    assert stories.chat(MSGS, max_tokens=40, **GREEDY)["choices"][0]["message"]["content"] == content   # alias


def test_stream_chunks_join_to_the_reply(stories):
    whole = stories.chat(MSGS, max_tokens=48, **GREEDY)
    chunks = list(stories.chat(MSGS, max_tokens=48, stream=True, **GREEDY))
    assert len({c["id"] for c in chunks}) == 1 and all(c["object"] == "chat.completion.chunk" for c in chunks)
    first, mid, last = chunks[0], chunks[1:-1], chunks[-1]
    assert first["choices"][0]["delta"] == {"role": "assistant"} and first["choices"][0]["finish_reason"] is None
    assert mid and all(set(c["choices"][0]["delta"]) == {"content"} and c["choices"][0]["finish_reason"] is None
                       for c in mid)
    assert last["choices"][0]["delta"] == {} and last["choices"][0]["finish_reason"] == "length"
    joined = "".join(c["choices"][0]["delta"]["content"] for c in mid)
    assert joined == whole["choices"][0]["message"]["content"]
    assert last["usage"] == whole["usage"]
    # sampled: the same seed gives the same reply, streamed or not
    kw = dict(max_tokens=32, temperature=0.9, top_p=0.95, seed=7, n_threads=1)
    a = stories.chat(MSGS, **kw)["choices"][0]["message"]["content"]
    b = "".join(c["choices"][0]["delta"].get("content", "") for c in stories.chat(MSGS, stream=True, **kw))
    assert a == b
    # a consumer that stops early is fine
    it = stories.chat(MSGS, max_tokens=48, stream=True, **GREEDY)
    next(it), next(it)
    it.close()


def test_stop_strings(stories):
    content = stories.chat(MSGS, max_tokens=48, **GREEDY)["choices"][0]["message"]["content"]
    with pytest.raises(TypeError, match="stop must be a string or a list of strings"):
        stories.chat(MSGS, max_tokens=4, stop=5)
    for stop in (content[12:19], content[30:31], [content[40:44], "never appears"]):
        want = content[:content.index(stop if isinstance(stop, str) else stop[0])]
        r = stories.chat(MSGS, max_tokens=48, stop=stop, **GREEDY)
        assert r["choices"][0]["message"]["content"] == want and r["choices"][0]["finish_reason"] == "stop", stop
        assert r["usage"]["completion_tokens"] < 48
        pieces = [c["choices"][0]["delta"].get("content", "")
                  for c in stories.chat(MSGS, max_tokens=48, stop=stop, stream=True, **GREEDY)]
        assert "".join(pieces) == want     # nothing of the stop string was sent, even partly


def test_finish_length_and_context_end(stories):
    r = stories.chat(MSGS, max_tokens=5, **GREEDY)
    assert r["choices"][0]["finish_reason"] == "length" and r["usage"]["completion_tokens"] == 5
    n_prompt = len(chat.prompt_tokens(stories, MSGS))
    for max_tokens in (None, 1000):        # the context end is a normal end, not an error
        r = stories.chat(MSGS, max_tokens=max_tokens, n_ctx=64, **GREEDY)
        assert r["choices"][0]["finish_reason"] == "length"
        assert 64 - n_prompt <= r["usage"]["completion_tokens"] <= 64 - n_prompt + 1
        chunks = list(stories.chat(MSGS, max_tokens=max_tokens, n_ctx=64, stream=True, **GREEDY))
        assert chunks[-1]["choices"][0]["finish_reason"] == "length"
    long = [{"role": "user", "content": "Once upon a time " * 40}]
    with pytest.raises(ContextFullError, match="the context holds 64: shorten the messages or pass a larger n_ctx"):
        stories.chat(long, n_ctx=64)
    with pytest.raises(ContextFullError):
        stories.chat(long, n_ctx=64, stream=True)   # refused at the call, before any chunk


def tiny_model(path, tokenizer: str, template=None, eos=None, always=None, extra=None):
    """A tiny model with a shared tokenizer and (optionally) a chat template.
    always=ID: weights that make the greedy next token ID after any token."""
    folder = os.path.join(cism_shared(), "tokenizers", tokenizer)
    with open(os.path.join(folder, "tokenizer.json"), "rb") as f:
        raw = f.read()
    meta = compact_tokenizer(json.loads(raw))
    meta["tokenizer.hf_json"] = fmt.Bytes(raw)
    toks = meta["tokenizer.tokens"]
    n = len(toks)
    meta.update({"general.architecture": "llama", "model.vocab_size": n, "model.dim": 8, "model.n_layers": 1,
                 "model.n_heads": 2, "model.n_kv_heads": 1, "model.head_dim": 4, "model.ffn_dim": 16,
                 "model.context_length": 64, "model.norm_eps": 1e-5, "model.rope_theta": 1e4,
                 "model.tied_embeddings": 0 if always is not None else 1})
    if eos is not None:
        meta["tokenizer.eos_id"] = toks.index(eos.encode())
    if template is not None:
        meta["tokenizer.chat_template"] = template
    meta.update(extra or {})
    shapes = cv.expected_tensors(meta)

    def load(k):
        a = np.zeros(shapes[k], np.float32)
        if always is not None and k in ("token_embd", "output_norm") or k.endswith("_norm"):
            a[...] = 1.0
        if always is not None and k == "output":
            a[always] = 1.0
        return a

    cv.write_model(str(path), meta, list(shapes), load, lambda k: 0, overwrite=True)
    return str(path)


def cism_shared():
    from conftest import shared_dir
    return os.path.join(shared_dir(), "models")


CONVERSATION = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Hello there!"},
                {"role": "assistant", "content": "Hi. How can I help?"},
                {"role": "user", "content": "Tell me a story about a cat. \U0001F431"}]


@pytest.mark.parametrize("tokenizer,template,bos,eos,end", [
    ("qwen2", None, None, "<|im_end|>", "<|im_end|>"),            # the template of tokenizer_config.json
    ("smollm", "smollm2", None, "<|im_end|>", "<|im_end|>"),
    ("llama3", "llama3", "<|begin_of_text|>", "<|eot_id|>", "<|eot_id|>"),
    ("llama2", "llama2", "<s>", "</s>", "</s>"),
])
def test_prompt_matches_transformers(tmp_path, shared_models, tokenizer, template, bos, eos, end):
    from transformers import PreTrainedTokenizerFast
    folder = os.path.join(shared_models, "tokenizers", tokenizer)
    cfg_path = os.path.join(folder, "tokenizer_config.json")
    cfg = json.load(open(cfg_path, encoding="utf-8")) if os.path.exists(cfg_path) else {}
    tmpl = cfg["chat_template"] if template is None else _template(template)
    hf = PreTrainedTokenizerFast(tokenizer_file=os.path.join(folder, "tokenizer.json"), bos_token=bos, eos_token=eos)
    hf.chat_template = tmpl
    extra = {"tokenizer.bos_id": hf.convert_tokens_to_ids(bos)} if bos else {}
    with cism.Model(tiny_model(tmp_path / "m.cism", tokenizer, tmpl, eos, extra=extra)) as m:
        msgs = CONVERSATION
        for conv in (msgs[1:2], msgs, msgs[1:]):
            want = hf.apply_chat_template(conv, add_generation_prompt=True, tokenize=True)
            want = list(want["input_ids"] if hasattr(want, "keys") else want)
            assert chat.prompt_tokens(m, conv) == want, (tokenizer, conv)
            assert chat.render(m, conv) == hf.apply_chat_template(conv, add_generation_prompt=True, tokenize=False)
        if bos:   # the template writes BOS itself: exactly one at the start
            ids = chat.prompt_tokens(m, msgs[1:2])
            assert ids[0] == m.bos_id and ids.count(m.bos_id) == 1
        assert chat.end_of_turn_ids(m) == [hf.convert_tokens_to_ids(end)]


def test_end_of_turn_token_ends_the_reply(tmp_path, shared_models):
    """The file's EOS is <|endoftext|>, but the template ends a turn with <|im_end|>, which
    this model always predicts: the reply is empty and stops there."""
    p = tiny_model(tmp_path / "eot.cism", "smollm", _template("smollm2"), "<|endoftext|>", always=2)
    with cism.Model(p) as m:
        assert m.eos_ids == [0] and chat.end_of_turn_ids(m) == [2]
        ids = chat.prompt_tokens(m, MSGS)
        with m.session() as s:    # the model does predict <|im_end|> over and over without it
            assert list(s.generate_tokens(ids, 3)) == [2, 2, 2]
        r = m.chat(MSGS, max_tokens=10, temperature=0)
        assert r["choices"][0]["message"]["content"] == "" and r["choices"][0]["finish_reason"] == "stop"
        assert r["usage"] == {"prompt_tokens": len(ids), "completion_tokens": 0, "total_tokens": len(ids)}
        chunks = list(m.chat(MSGS, max_tokens=10, temperature=0, stream=True))
        assert [c["choices"][0]["delta"] for c in chunks] == [{"role": "assistant"}, {}]
        assert chunks[-1]["choices"][0]["finish_reason"] == "stop"


def test_template_errors_are_raised(tmp_path, shared_models, run_cli):
    p = tiny_model(tmp_path / "l2.cism", "llama2", _template("llama2"), "</s>")
    with cism.Model(p) as m:   # Llama-2's template refuses roles that do not alternate
        with pytest.raises(chat.ChatTemplateError, match="failed to render these messages.*alternate"):
            m.chat([{"role": "assistant", "content": "x"}])
    p = tiny_model(tmp_path / "bad.cism", "llama2", "{% for m in messages %}{{ m['content'] }", "</s>")
    with cism.Model(p) as m:
        with pytest.raises(chat.ChatTemplateError, match="failed to render"):
            m.chat(MSGS)
    r = run_cli("chat", "-m", p, "-n", "4", input="Hello\n", check=False)   # `cism chat` does not drop it either
    assert r.returncode == 1 and "failed to render" in r.stderr and "Traceback" not in r.stderr, r.stderr
    p = tiny_model(tmp_path / "none.cism", "llama2", None, "</s>")
    with cism.Model(p) as m:
        with pytest.raises(chat.ChatTemplateError, match="has no chat template: pass chat_format="):
            m.chat(MSGS)
        want = chat_format.render("llama2", MSGS, True, "<s>", "</s>")
        assert chat.render(m, MSGS, chat_format_name="llama2") == want   # a named format on request
        with pytest.raises(ValueError, match="unknown chat format"):
            m.chat(MSGS, chat_format="nope")
        with pytest.raises(ValueError, match="string 'role'"):
            m.chat([{"content": "x"}], chat_format="llama2")
        with pytest.raises(ValueError, match=r"messages\[0\] \(user\) has no 'content'"):
            m.chat([{"role": "user"}], chat_format="llama2")
        assert chat.render(m, [{"role": "user", "content": "x"}, {"role": "assistant", "content": None}],
                           add_generation_prompt=False, chat_format_name="llama2").count("x") == 1
        with pytest.raises(TypeError):
            m.chat("hello", chat_format="llama2")


def test_jinja2_is_a_runtime_dependency():
    with open(os.path.join(ROOT, "bindings_py", "pyproject.toml"), encoding="utf-8") as f:
        text = f.read()
    line = next(x for x in text.splitlines() if x.startswith("dependencies"))
    assert "jinja2" in line and "numpy" in line and "tokenizers" in line
