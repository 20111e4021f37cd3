"""`cism serve` against the official OpenAI SDK, on a live server (the real
Uvicorn in a subprocess on a loopback port) with the real
SmolLM2-135M-Instruct: chat and text completions, streaming and not, greedy
and seeded results identical to the offline Python API, stop strings,
logprobs, prefix reuse, the 400/401/413/429 paths with OpenAI error objects,
and a client that disconnects freeing its slot."""
from __future__ import annotations

import json
import socket
import time

import numpy as np
import pytest

openai = pytest.importorskip("openai")
pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

import cism  # noqa: E402
from serve_helpers import Server, requests_total  # noqa: E402

CTX = 1024
Q1 = [{"role": "user", "content": "What is the capital of France?"}]
Q2 = [{"role": "system", "content": "You are a helpful assistant."},
      {"role": "user", "content": "Name three colors of the rainbow."}]


@pytest.fixture(scope="module")
def server(smol):
    s = Server(smol, "--slots", "2", "-c", str(CTX), "--max-tokens", "512", "--model-name", "smol")
    yield s
    s.stop()


@pytest.fixture(scope="module")
def client(server):
    return server.client()


def _offline_chat(model, msgs, max_tokens, **sampling):
    sampling.setdefault("temperature", 0)
    return model.create_chat_completion(msgs, max_tokens=max_tokens, n_ctx=CTX, **sampling)


def _offline_completion(model, prompt, max_tokens, stop=None):
    """(text, finish_reason, completion tokens) of greedy Session.generate."""
    with model.session(n_ctx=CTX) as s:
        gen = s.generate(prompt, max_tokens, temperature=0, stop=stop)
        text = "".join(gen)
    n = len(gen.tokens) - (1 if gen.stop_reason == "eos" else 0)
    return text, ("stop" if gen.stop_reason in ("eos", "stop") else "length"), n


# ---- the happy paths ------------------------------------------------------------------
def test_models_health_index(server, client):
    models = client.models.list()
    assert [m.id for m in models.data] == ["smol"]
    assert client.models.retrieve("smol").id == "smol"
    status, _, body = server.request("GET", "/health")
    assert status == 200 and json.loads(body)["status"] == "ok"
    status, headers, body = server.request("GET", "/")
    assert status == 200 and b"cism serve" in body


@pytest.mark.parametrize("msgs,max_tokens", [(Q1, 48), (Q2, 24)])
def test_chat_greedy_equals_offline(client, offline, msgs, max_tokens):
    want = _offline_chat(offline, msgs, max_tokens)
    r = client.chat.completions.create(model="smol", messages=msgs, max_tokens=max_tokens, temperature=0)
    assert r.object == "chat.completion" and r.model == "smol" and r.id.startswith("chatcmpl-")
    (c,) = r.choices
    assert c.message.role == "assistant"
    assert c.message.content == want["choices"][0]["message"]["content"]
    assert c.finish_reason == want["choices"][0]["finish_reason"]
    assert r.usage.prompt_tokens == want["usage"]["prompt_tokens"]
    assert r.usage.completion_tokens == want["usage"]["completion_tokens"]
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens


def test_chat_json_mode_equals_offline(client, offline):
    msgs = [{"role": "user", "content": "List three fruits as JSON."}]
    want = _offline_chat(offline, msgs, 160, response_format={"type": "json_object"})
    assert want["choices"][0]["finish_reason"] == "stop"
    for stream in (False, True):
        r = client.chat.completions.create(model="smol", messages=msgs, max_tokens=160, temperature=0, stream=stream,
                                           response_format={"type": "json_object"})
        if stream:
            chunks = list(r)
            text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
            finish = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
        else:
            text, finish = r.choices[0].message.content, [r.choices[0].finish_reason]
            assert r.usage.completion_tokens == want["usage"]["completion_tokens"]
        assert text == want["choices"][0]["message"]["content"] and finish == ["stop"]
        assert isinstance(json.loads(text), dict)


def test_chat_json_schema_equals_offline(server, client, offline):
    schema = {"type": "object", "properties": {"city": {"type": "string"}, "population": {"type": "integer"}},
              "required": ["city", "population"], "additionalProperties": False}
    msgs = [{"role": "user", "content": "What is the capital of France? Answer in JSON."}]
    rf = {"type": "json_schema", "json_schema": {"name": "city", "schema": schema}}
    want = _offline_chat(offline, msgs, 80, response_format=rf)
    r = client.chat.completions.create(model="smol", messages=msgs, max_tokens=80, temperature=0, response_format=rf)
    assert r.choices[0].message.content == want["choices"][0]["message"]["content"]
    obj = json.loads(r.choices[0].message.content)
    assert set(obj) == {"city", "population"} and isinstance(obj["population"], int)
    bad = {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object", "properties": {
        "d": {"type": "string", "format": "date"}}}}}
    status, _, raw = server.request("POST", "/v1/chat/completions", {"model": "smol", "messages": msgs,
                                                                      "response_format": bad})
    assert status == 400, raw
    err = _error(status, raw)
    assert err["param"] == "response_format" and "format is not supported" in err["message"]


def test_chat_ends_at_end_of_turn(client, offline):
    msgs = [{"role": "user", "content": "What is 2 plus 3?"}]
    want = _offline_chat(offline, msgs, 200)
    r = client.chat.completions.create(model="smol", messages=msgs, max_tokens=200, temperature=0)
    assert want["choices"][0]["finish_reason"] == "stop"   # the model's <|im_end|>, well before 200
    assert r.choices[0].finish_reason == "stop"
    assert r.choices[0].message.content == want["choices"][0]["message"]["content"]
    assert "5" in r.choices[0].message.content


def test_chat_stream_equals_offline(client, offline):
    want = _offline_chat(offline, Q1, 40)
    stream = client.chat.completions.create(model="smol", messages=Q1, max_tokens=40, temperature=0, stream=True,
                                            stream_options={"include_usage": True})
    chunks = list(stream)
    assert chunks[0].choices[0].delta.role == "assistant"
    assert len({c.id for c in chunks}) == 1 and all(c.object == "chat.completion.chunk" for c in chunks)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == want["choices"][0]["message"]["content"]
    finals = [c for c in chunks if c.choices and c.choices[0].finish_reason]
    assert len(finals) == 1 and finals[0].choices[0].finish_reason == want["choices"][0]["finish_reason"]
    assert finals[0].usage.completion_tokens == want["usage"]["completion_tokens"]   # usage on the final chunk
    last = chunks[-1]   # include_usage: OpenAI's extra chunk without choices
    assert last.choices == [] and last.usage.prompt_tokens == want["usage"]["prompt_tokens"]


def test_completion_greedy_stream_and_not(client, offline):
    prompt = "The three primary colors are"
    text, finish, n = _offline_completion(offline, prompt, 32)
    r = client.completions.create(model="smol", prompt=prompt, max_tokens=32, temperature=0)
    assert r.object == "text_completion"
    assert (r.choices[0].text, r.choices[0].finish_reason, r.usage.completion_tokens) == (text, finish, n)
    assert r.usage.prompt_tokens == len(offline.tokenizer.encode(prompt))
    chunks = list(client.completions.create(model="smol", prompt=prompt, max_tokens=32, temperature=0, stream=True))
    assert "".join(c.choices[0].text for c in chunks) == text
    assert chunks[-1].choices[0].finish_reason == finish
    # the default max_tokens is OpenAI's 16
    r = client.completions.create(model="smol", prompt=prompt, temperature=0)
    assert r.usage.completion_tokens == 16 and r.choices[0].finish_reason == "length"


def test_completion_token_prompt_and_stop(client, offline):
    prompt = "Here is a list of fruits: apple, banana,"
    full, _, _ = _offline_completion(offline, prompt, 24)
    words = full.split(",")
    assert len(words) > 2, full
    stop = "," + words[2][:3]   # a string the greedy text reaches
    text, finish, n = _offline_completion(offline, prompt, 24, stop=[stop])
    assert finish == "stop" and stop not in text and full.startswith(text)
    r = client.completions.create(model="smol", prompt=prompt, max_tokens=24, temperature=0, stop=[stop, "zzz"])
    assert (r.choices[0].text, r.choices[0].finish_reason) == (text, "stop")
    chunks = list(client.completions.create(model="smol", prompt=prompt, max_tokens=24, temperature=0, stop=stop,
                                            stream=True))
    assert "".join(c.choices[0].text for c in chunks) == text and chunks[-1].choices[0].finish_reason == "stop"
    ids = offline.tokenizer.encode(prompt)
    r = client.completions.create(model="smol", prompt=ids, max_tokens=24, temperature=0)
    assert r.choices[0].text == full


def test_seeded_sampling_with_penalties_equals_offline(client, offline):
    kw = dict(temperature=0.9, top_p=0.9, seed=1234, presence_penalty=0.5, frequency_penalty=0.3)
    want = _offline_chat(offline, Q2, 40, top_k=0, min_p=0.0, **kw)
    got = [client.chat.completions.create(model="smol", messages=Q2, max_tokens=40, **kw).choices[0].message.content
           for _ in range(2)]
    assert got[0] == got[1] == want["choices"][0]["message"]["content"]
    other = client.chat.completions.create(model="smol", messages=Q2, max_tokens=40, **dict(kw, seed=99))
    assert other.choices[0].message.content != got[0]   # the seed matters


def test_logprobs_are_log_softmax_of_the_logits(client, offline):
    r = client.chat.completions.create(model="smol", messages=Q1, max_tokens=8, temperature=0, logprobs=True,
                                       top_logprobs=3)
    content = r.choices[0].logprobs.content
    # 8 tokens, or fewer when the greedy reply ends first ("The capital of France is Paris." is 7)
    assert len(content) == r.usage.completion_tokens and 1 <= len(content) <= 8
    assert "".join(e.token for e in content) == r.choices[0].message.content
    for e in content:   # greedy: the chosen token is the most likely one
        assert len(e.top_logprobs) == 3 and e.logprob <= 0
        assert e.top_logprobs[0].logprob == pytest.approx(e.logprob, abs=1e-9)
        assert e.top_logprobs[0].logprob >= e.top_logprobs[1].logprob >= e.top_logprobs[2].logprob
        assert bytes(e.bytes).decode() == e.token
    from cism.chat import prompt_tokens
    with offline.session(n_ctx=CTX) as s:
        s.eval(prompt_tokens(offline, Q1))
        x = s.logits()[: offline.tokenizer.n_ids].astype(np.float64)
    lp = x - (x.max() + np.log(np.exp(x - x.max()).sum()))
    assert content[0].logprob == pytest.approx(float(lp.max()), abs=1e-6)
    top = np.sort(lp)[::-1][:3]
    assert [t.logprob for t in content[0].top_logprobs] == pytest.approx(top.tolist(), abs=1e-6)
    r = client.completions.create(model="smol", prompt="One, two,", max_tokens=4, temperature=0, logprobs=2)
    lpc = r.choices[0].logprobs
    assert len(lpc.tokens) == len(lpc.token_logprobs) == len(lpc.top_logprobs) == 4
    assert "".join(lpc.tokens) == r.choices[0].text and lpc.text_offset[0] == 0


def test_prefix_reuse_next_turn(server, client, offline):
    server.wait_idle()
    first = client.chat.completions.create(model="smol", messages=Q2, max_tokens=16, temperature=0)
    turn2 = Q2 + [{"role": "assistant", "content": first.choices[0].message.content},
                  {"role": "user", "content": "And two more?"}]
    want = _offline_chat(offline, turn2, 24)
    before = server.metrics()
    r = client.chat.completions.create(model="smol", messages=turn2, max_tokens=24, temperature=0)
    after = server.metrics()
    assert r.choices[0].message.content == want["choices"][0]["message"]["content"]
    cached = r.usage.prompt_tokens_details.cached_tokens
    assert cached >= first.usage.prompt_tokens, (cached, first.usage)   # the whole first prompt came from the slot
    evaluated = after["cism_prefill_tokens_total"] - before["cism_prefill_tokens_total"]
    assert evaluated == r.usage.prompt_tokens - cached


# ---- refusals ---------------------------------------------------------------------------
def _error(status, body):
    err = json.loads(body)["error"]
    assert set(err) == {"message", "type", "param", "code"} and err["message"], err
    return err


@pytest.mark.parametrize("body,param", [
    ({"messages": Q1, "n": 2}, "n"),
    ({"messages": Q1, "max_tokens": 100000}, "max_tokens"),
    ({"messages": Q1, "max_tokens": -1}, "max_tokens"),
    ({"messages": Q1, "max_tokens": "ten"}, "max_tokens"),
    ({"messages": Q1, "temperature": "hot"}, "temperature"),
    ({"messages": Q1, "temperature": 9}, "temperature"),
    ({"messages": Q1, "top_p": 0}, "top_p"),
    ({"messages": Q1, "stop": [1, 2]}, "stop"),
    ({"messages": Q1, "stream": "yes"}, "stream"),
    ({"messages": Q1, "top_logprobs": 2}, "top_logprobs"),
    ({"messages": Q1, "seed": 1.5}, "seed"),
    ({"messages": Q1, "tools": [{"type": "function", "function": {"name": "f"}}]}, "tools"),
    ({"messages": Q1, "response_format": {"type": "json_schema", "json_schema": {"name": "x"}}}, "response_format"),
    ({"messages": Q1, "response_format": "json"}, "response_format"),
    ({"messages": []}, "messages"),
    ({"messages": "hello"}, "messages"),
    ({"messages": [{"content": "no role"}]}, "messages"),
    ({"messages": [{"role": "user", "content": 5}]}, "messages"),
    ({"messages": [{"role": "user"}]}, "messages"),
    ({"messages": [{"role": "system", "content": None}, {"role": "user", "content": "hi"}]}, "messages"),
    ({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]}, "messages"),
    ({}, "messages"),
])
def test_malformed_chat_is_400(server, body, param):
    body = dict({"model": "smol"}, **body)
    status, _, raw = server.request("POST", "/v1/chat/completions", body)
    assert status == 400, raw
    err = _error(status, raw)
    assert err["type"] == "invalid_request_error" and err["param"] == param, err


@pytest.mark.parametrize("raw", [b"{not json", b"[1, 2]", b"\xff\xfe", b'{"prompt": NaN}', b"", b"[" * 100000])
def test_malformed_body_is_400(server, raw):
    status, _, body = server.request("POST", "/v1/completions", raw=raw)
    assert status == 400, body
    _error(status, body)


def test_completion_refusals(server, client, offline):
    for body, param in [({"prompt": ["a", "b"]}, "prompt"), ({"prompt": [1, -5]}, "prompt"), ({"prompt": 3}, "prompt"),
                        ({"prompt": "x", "echo": True}, "echo"), ({"prompt": "x", "best_of": 3}, "best_of"),
                        ({"prompt": "x", "logprobs": 50}, "logprobs")]:
        status, _, raw = server.request("POST", "/v1/completions", dict(body, model="smol"))
        assert status == 400 and _error(status, raw)["param"] == param, (body, raw)
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model="smol", messages=Q1, n=3)
    assert e.value.status_code == 400 and "'n' must be 1" in e.value.message


def test_prompt_longer_than_context_is_400(server, client):
    long = " ".join(["word"] * (CTX + 100))
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model="smol", messages=[{"role": "user", "content": long}], max_tokens=4)
    assert e.value.code == "context_length_exceeded" and e.value.param == "messages"
    assert f"the context holds {CTX}" in e.value.message
    status, _, raw = server.request("POST", "/v1/completions", {"model": "smol", "prompt": long})
    assert status == 400 and _error(status, raw)["code"] == "context_length_exceeded"


def _oversized_post(server, declared: int, sent: int):
    """(status, body) of a POST that declares `declared` body bytes and sends the
    first `sent`: the server answers from Content-Length without reading the
    rest (urllib sending it all could meet the early close as a broken pipe)."""
    host, port = server.url[len("http://"):].split(":")
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     + f"Content-Length: {declared}\r\nConnection: close\r\n\r\n".encode() + b"{" + b" " * (sent - 1))
        data = b""
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split()[1]), body


def test_body_cap_unknown_route_and_method(server):
    status, raw = _oversized_post(server, 2 << 20, 1024)
    assert status == 413 and _error(status, raw)["code"] == "body_too_large"
    status, _, raw = server.request("GET", "/v1/nothing-here")
    assert status == 404 and _error(status, raw)["code"] == "not_found"
    status, _, raw = server.request("GET", "/v1/completions")
    assert status == 405 and _error(status, raw)
    status, _, raw = server.request("GET", "/v1/models/another")
    assert status == 404 and _error(status, raw)["code"] == "model_not_found"


def test_api_key(smol):
    s = Server(smol, "--slots", "1", "-c", "256", env={"CISM_API_KEY": "sesame"})
    try:
        for path in ("/v1/models", "/metrics"):
            status, headers, raw = s.request("GET", path)
            assert status == 401 and _error(status, raw)["code"] == "invalid_api_key"
            assert headers.get("www-authenticate", headers.get("WWW-Authenticate")) == "Bearer"
            status, _, _ = s.request("GET", path, headers={"Authorization": "Bearer sesame2"})
            assert status == 401
            status, _, _ = s.request("GET", path, headers={"Authorization": "Bearer sesame"})
            assert status == 200
        status, _, raw = s.request("POST", "/v1/completions", {"model": "m", "prompt": "hi"})
        assert status == 401
        assert s.request("GET", "/health")[0] == 200 and s.request("GET", "/")[0] == 200   # open
        with pytest.raises(openai.AuthenticationError):
            s.client(api_key="wrong").models.list()
        r = s.client(api_key="sesame").chat.completions.create(model="m", messages=Q1, max_tokens=4, temperature=0)
        assert r.usage.completion_tokens == 4
    finally:
        s.stop()
    s = Server(smol, "--slots", "1", "-c", "256", "--api-key", "k2")   # the option
    try:
        assert s.request("GET", "/v1/models")[0] == 401
        assert s.request("GET", "/v1/models", headers={"Authorization": "Bearer k2"})[0] == 200
    finally:
        s.stop()


# ---- one slot: 429, disconnects -------------------------------------------------------
@pytest.fixture(scope="module")
def one_slot(smol):
    s = Server(smol, "--slots", "1", "--max-queue", "0", "-c", "2048", "--max-tokens", "2000")
    yield s
    s.stop()


LONG = dict(model="smol", prompt="Once upon a time", max_tokens=1500, temperature=0)


def test_busy_is_429_with_retry_after(one_slot):
    client = one_slot.client()
    stream = client.completions.create(stream=True, **LONG)
    it = iter(stream)
    next(it)   # the slot is taken
    with pytest.raises(openai.RateLimitError) as e:
        client.completions.create(model="smol", prompt="hi", max_tokens=2)
    assert e.value.status_code == 429 and e.value.response.headers["retry-after"] == "1"
    assert e.value.code == "server_busy"
    stream.close()
    one_slot.wait_idle(5)
    assert client.completions.create(model="smol", prompt="hi", max_tokens=2).usage.completion_tokens == 2
    assert requests_total(one_slot.metrics(), "completion", "rejected") >= 1


def test_stream_disconnect_frees_the_slot(one_slot):
    one_slot.wait_idle(5)
    before = one_slot.metrics()
    stream = one_slot.client().completions.create(stream=True, **LONG)
    it = iter(stream)
    for _ in range(3):
        next(it)
    assert one_slot.metrics()["cism_slots_in_use"] == 1
    t0 = time.monotonic()
    stream.close()
    after = one_slot.wait_idle(5)
    freed = time.monotonic() - t0
    assert requests_total(after, "completion", "cancelled") == requests_total(before, "completion", "cancelled") + 1
    generated = after["cism_decode_tokens_total"] - before["cism_decode_tokens_total"]
    assert generated < 1000, generated   # stopped early, not run to max_tokens (1500)
    print(f"\nslot freed {freed * 1000:.0f} ms after the client closed the stream ({generated:.0f} tokens made)")


def test_non_stream_disconnect_frees_the_slot(one_slot):
    one_slot.wait_idle(5)
    before = one_slot.metrics()
    body = json.dumps(LONG).encode()
    host, port = one_slot.url[len("http://"):].split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     + f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
        t0 = time.monotonic()
        while one_slot.metrics()["cism_slots_in_use"] == 0:
            assert time.monotonic() - t0 < 10
            time.sleep(0.01)
    after = one_slot.wait_idle(5)
    assert requests_total(after, "completion", "cancelled") == requests_total(before, "completion", "cancelled") + 1
    assert after["cism_decode_tokens_total"] - before["cism_decode_tokens_total"] < 1000


def test_tokenize_detokenize(server, offline):
    """llama.cpp server's /tokenize and /detokenize: the offline tokenizer's ids and text, pieces that
    join to the text, and 400s naming the field."""
    tok = offline.tokenizer
    text = "Hello, world! <|im_start|>user\nÉtoile 1234"
    before = server.metrics()
    def post(path, body):
        status, _, raw = server.request("POST", path, body)
        return status, json.loads(raw)
    status, r = post("/tokenize", {"content": text})
    assert status == 200 and r["tokens"] == tok.encode(text, add_bos=False) and len(r["tokens"]) > 5
    special = tok.encode("<|im_start|>", add_bos=False)
    assert len(special) == 1 and special[0] in r["tokens"]   # special-token text is that token
    status, r2 = post("/tokenize", {"content": text, "add_special": True, "with_pieces": True})
    want = tok.encode(text, add_bos=True)
    assert status == 200 and [p["id"] for p in r2["tokens"]] == want
    if tok.add_bos or tok.bos_id < 0:
        assert want[-len(r["tokens"]):] == r["tokens"]
    assert "".join(p["piece"] for p in r2["tokens"][len(want) - len(r["tokens"]):]) == text
    status, r3 = post("/detokenize", {"tokens": r["tokens"]})
    assert status == 200 and r3 == {"content": text}
    assert post("/detokenize", {"tokens": []}) == (200, {"content": ""})
    assert post("/tokenize", {"content": ""}) == (200, {"tokens": []})
    for path, body, param in [("/tokenize", {"content": 5}, "content"), ("/tokenize", {}, "content"),
                              ("/tokenize", {"content": "x", "with_pieces": "yes"}, "with_pieces"),
                              ("/detokenize", {"tokens": "12"}, "tokens"), ("/detokenize", {"tokens": [1, -2]}, "tokens"),
                              ("/detokenize", {"tokens": [tok.n_ids]}, "tokens"), ("/detokenize", [1], None)]:
        status, _, raw = server.request("POST", path, body)
        assert status == 400 and _error(status, raw)["param"] == param, (path, body, raw)
    after = server.metrics()
    for name, ok, rejected in (("tokenize", 3, 3), ("detokenize", 2, 4)):
        assert requests_total(after, name, "ok") - requests_total(before, name, "ok") == ok, name
        assert requests_total(after, name, "rejected") - requests_total(before, name, "rejected") == rejected, name


def test_metrics_text(one_slot):
    status, headers, raw = one_slot.request("GET", "/metrics")
    assert status == 200 and headers["content-type"].startswith("text/plain; version=0.0.4")
    text = raw.decode()
    for name in ("cism_requests_total", "cism_completion_tokens_total", "cism_queue_depth", "cism_slots_in_use",
                 "cism_prefill_tokens_per_second", "cism_decode_tokens_per_second"):
        assert f"# TYPE {name} " in text, name


# ---- the command line ---------------------------------------------------------------
def test_cli_missing_extra_and_bad_input(run_cli, tmp_path):
    import os
    blocked = tmp_path / "blocked"
    (blocked / "fastapi").mkdir(parents=True)
    (blocked / "fastapi" / "__init__.py").write_text("raise ImportError('fastapi is not installed')\n")
    env = {"PYTHONPATH": str(blocked) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    p = run_cli("serve", "-m", "whatever.cism", check=False, env=env)
    assert p.returncode == 1 and "Traceback" not in p.stderr, p.stderr
    assert p.stderr.startswith("cism: error: cism serve needs fastapi") and "pip install './bindings_py[server]'" \
        in p.stderr, p.stderr
    p = run_cli("serve", "-m", str(tmp_path / "missing.cism"), "--port", "0", check=False)
    assert p.returncode == 1 and p.stderr.startswith("cism: error:") and "Traceback" not in p.stderr, p.stderr
    p = run_cli("serve", "--slots", "-1", check=False)
    assert p.returncode == 2 and "negative" in p.stderr
    p = run_cli("serve", "-m", str(tmp_path / "missing.cism"), "--port", "99999", check=False)
    assert p.returncode == 1 and "--port 99999: give 0 to 65535" in p.stderr and "Traceback" not in p.stderr, p.stderr


def test_slots_beyond_memory_refused(offline):
    """--slots whose KV caches would not fit in the machine's memory: refused after the first slot
    (it allocated them one by one until the machine ran out)."""
    from cism.server import scheduler
    if not scheduler._physical_memory():
        pytest.skip("the platform does not report its memory")
    with pytest.raises(ValueError, match=r"--slots 10000000: .* more than this machine's .* of memory"):
        scheduler.Scheduler(offline, n_slots=10_000_000, n_ctx=1024)
    s = scheduler.Scheduler(offline, n_slots=2, n_ctx=256)
    assert len(s.slots) == 2
    s.close()


def test_stream_reports_prefill_progress(server, offline):
    """A streamed request reports its prompt's chunks as SSE comments (which the
    SDK tests above show clients skip): done counts rise to the total, one per
    step of at most 256 prompt tokens."""
    ids = np.random.default_rng(9).integers(100, 4000, 600).tolist()
    status, _, body = server.request("POST", "/v1/completions", {"model": "smol", "prompt": ids, "max_tokens": 2,
                                                                 "temperature": 0, "stream": True})
    assert status == 200, body
    marks = [ln[len(": prefill "):].split("/") for ln in body.decode().splitlines() if ln.startswith(": prefill ")]
    done = [int(d) for d, _ in marks]
    totals = {int(t) for _, t in marks}
    assert len(totals) == 1 and 0 < totals.pop() == done[-1], marks
    assert len(done) >= 2 and all(b > a for a, b in zip(done, done[1:])) and done[0] <= 256, marks
    assert body.decode().rstrip().endswith("data: [DONE]")
