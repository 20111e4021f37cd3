"""`cism serve --lookup`: prompt-lookup speculation in the server's batched
steps (server/lookup.py) on the real SmolLM2-135M-Instruct. Greedy results
must be plain decoding's, token for token (the offline Python API is the
reference), alone, streamed, with two requests sharing steps, at a stop string
and at max_tokens; the drafts must actually be verified and accepted (the
/metrics draft counters), or the test proves nothing."""
from __future__ import annotations

import threading

import pytest

openai = pytest.importorskip("openai")
pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

import cism  # noqa: E402
from serve_helpers import Server  # noqa: E402

CTX = 1024
PASSAGE = ("The lighthouse keeper climbed the spiral stairs every evening at dusk. He wound the clockwork, "
           "trimmed the wick and polished the great lens until it shone.")
REPEAT = [{"role": "user", "content": "Repeat this passage word for word:\n\n" + PASSAGE}]
LIST = [{"role": "user", "content": "Continue this list with five more items in the same format:\n"
         "1. Apple - a round red fruit that grows on trees.\n2. Banana - a long yellow fruit that grows in bunches.\n"
         "3. Cherry - a small red fruit with a stone inside.\n"}]
FREE = [{"role": "user", "content": "Give me three tips for sleeping better."}]


@pytest.fixture(scope="module")
def server(smol):
    s = Server(smol, "--slots", "2", "-c", str(CTX), "--max-tokens", "512", "--model-name", "smol", "--lookup")
    yield s
    s.stop()


def _want(model, msgs, max_tokens, stop=None):
    r = model.create_chat_completion(msgs, max_tokens=max_tokens, n_ctx=CTX, temperature=0, stop=stop)
    return r["choices"][0]["message"]["content"], r["choices"][0]["finish_reason"], r["usage"]["completion_tokens"]


def _got(client, msgs, max_tokens, stop=None):
    r = client.chat.completions.create(model="smol", messages=msgs, max_tokens=max_tokens, temperature=0, stop=stop)
    return r.choices[0].message.content, r.choices[0].finish_reason, r.usage.completion_tokens


def _drafts(server):
    m = server.metrics()
    return m["cism_draft_tokens_total"], m["cism_draft_tokens_accepted_total"]


@pytest.mark.parametrize("msgs", [REPEAT, LIST, FREE], ids=["repeat", "list", "free"])
def test_lookup_greedy_equals_plain(server, offline, msgs):
    before = _drafts(server)
    assert _got(server.client(), msgs, 120) == _want(offline, msgs, 120)
    drafted, accepted = (a - b for a, b in zip(_drafts(server), before))
    if msgs is not FREE:   # input-grounded: the text repeats the prompt, so drafts are made and taken
        assert drafted > 0 and accepted > 0.5 * drafted, (drafted, accepted)


def test_lookup_stream_two_requests_stop_and_length(server, offline):
    client = server.client()
    want = {"repeat": _want(offline, REPEAT, 120), "list": _want(offline, LIST, 120)}
    got = {}

    def run(name, msgs):
        parts = [c.choices[0].delta.content or "" for c in client.chat.completions.create(
            model="smol", messages=msgs, max_tokens=120, temperature=0, stream=True)]
        got[name] = "".join(parts)

    threads = [threading.Thread(target=run, args=a) for a in (("repeat", REPEAT), ("list", LIST))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert got == {k: v[0] for k, v in want.items()}
    # a stop string and a token limit that fall inside a run of accepted drafts
    words = want["repeat"][0].split()
    stop = " ".join(words[8:10])
    assert _got(client, REPEAT, 120, stop=[stop]) == _want(offline, REPEAT, 120, stop=[stop])
    for n in (1, 5, 13):
        assert _got(client, REPEAT, n) == _want(offline, REPEAT, n)


def test_lookup_option_checked(run_cli):
    r = run_cli("serve", "-m", "nowhere.cism", "--lookup", "--draft-max", "0", check=False)
    assert r.returncode != 0 and "draft-max" in r.stderr


def test_json_mode_with_lookup_equals_offline(server, offline):
    """Drafts are verified token by token through the JSON mask: the result is plain constrained decoding's."""
    doc = '{"name": "lighthouse", "stairs": 120, "lamps": ["lens", "wick", "clockwork"], "lit": true}'
    msgs = [{"role": "user", "content": "Repeat this JSON exactly:\n\n" + doc}]
    rf = {"type": "json_object"}
    want = offline.create_chat_completion(msgs, max_tokens=80, n_ctx=CTX, temperature=0, response_format=rf)
    before = _drafts(server)
    r = server.client().chat.completions.create(model="smol", messages=msgs, max_tokens=80, temperature=0,
                                                response_format=rf)
    drafted, accepted = (a - b for a, b in zip(_drafts(server), before))
    assert r.choices[0].message.content == want["choices"][0]["message"]["content"]
    assert r.choices[0].finish_reason == want["choices"][0]["finish_reason"] == "stop"
    assert r.usage.completion_tokens == want["usage"]["completion_tokens"]
    assert drafted > 0 and accepted > 0, (drafted, accepted)   # drafts were made and taken through the mask
