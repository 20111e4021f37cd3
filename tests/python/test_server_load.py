"""Load on `cism serve` (stories260K with a Zephyr chat template, so both
endpoints run): 1,000 requests from 8 concurrent OpenAI SDK clients, a mix of
chat and text completions, streaming and not, of several lengths; every 10th
is cancelled mid-stream by its client. Every completed response must be
identical to its offline greedy result (nothing lost, nothing mixed between
requests), every request must be accounted for in /metrics, and the server
must end idle. Bounded in time."""
from __future__ import annotations

import json
import os
import shutil
import threading
import time

import pytest

pytest.importorskip("openai")
pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

import cism  # noqa: E402
from cism import convert as cv  # noqa: E402
from serve_helpers import Server, requests_total  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
N_REQUESTS = 1000
N_CLIENTS = 8
CTX = 256
BOUND_SECONDS = 120
OPENINGS = ["Once upon a time", "Lily went to the park", "The little dog", "One day, Tom found a",
            "Sara and Ben were", "There was a big red", "The sun was hot and", "Mom said", "A cat sat on the",
            "In the garden, a bird", "Tim liked to play with his", "The princess had a", "It was a rainy day",
            "Max was a happy", "The old tree"]
LENGTHS = [4, 12, 40, 240]   # 240: to the end of the context (stories260K rarely ends a story)
STOPS = [None, None, ["."], [" the ", "!"]]


@pytest.fixture(scope="module")
def stories_chat(tmp_path_factory, shared_models):
    d = tmp_path_factory.mktemp("serve-load")
    src = d / "hf"
    shutil.copytree(os.path.join(shared_models, "stories260K-hf"), src)
    cfg_path = src / "tokenizer_config.json"
    cfg = json.loads(cfg_path.read_text(encoding="utf-8"))
    with open(os.path.join(ROOT, "tests", "tokenizer", "chat_templates", "zephyr.jinja"), encoding="utf-8") as f:
        cfg["chat_template"] = f.read()
    cfg_path.write_text(json.dumps(cfg), encoding="utf-8")
    out = str(d / "stories-chat.cism")
    cv.convert(str(src), out, progress=None)
    return out


def _plan():
    """(kind, prompt, max_tokens, stop, stream, cancel) of every request, deterministic."""
    plan = []
    for i in range(N_REQUESTS):
        kind = "chat" if i % 3 == 0 else "completion"
        prompt = OPENINGS[(i * 7) % len(OPENINGS)]
        cancel = i % 10 == 9
        stop = None if cancel else STOPS[(i // 5) % len(STOPS)]
        plan.append((kind, prompt, 200 if cancel else LENGTHS[(i // 3) % len(LENGTHS)], stop, cancel or i % 2 == 0,
                     cancel))
    return plan


def _offline(model, kind, prompt, max_tokens, stop):
    """(text, finish_reason, completion_tokens) of the offline greedy API."""
    if kind == "chat":
        r = model.create_chat_completion([{"role": "user", "content": prompt}], max_tokens=max_tokens, temperature=0,
                                         n_ctx=CTX, stop=list(stop or []))
        return r["choices"][0]["message"]["content"], r["choices"][0]["finish_reason"], r["usage"]["completion_tokens"]
    with model.session(n_ctx=CTX) as s:
        gen = s.generate(prompt, max_tokens, temperature=0, stop=list(stop or []))
        text = "".join(gen)
    return text, "stop" if gen.stop_reason in ("eos", "stop") else "length", len(gen.tokens) - (gen.stop_reason == "eos")


def _key(p):
    kind, prompt, max_tokens, stop = p[:4]
    return kind, prompt, max_tokens, tuple(stop or ())


def _call(client, kind, prompt, max_tokens, stop, stream, cancel):
    """(text, finish_reason, completion_tokens), or None for a request cancelled by the client."""
    if kind == "chat":
        kw = dict(model="m", messages=[{"role": "user", "content": prompt}], max_tokens=max_tokens, temperature=0,
                  stop=stop)
        api = client.chat.completions
    else:
        kw = dict(model="m", prompt=prompt, max_tokens=max_tokens, temperature=0, stop=stop)
        api = client.completions
    if not stream:
        r = api.create(**kw)
        c = r.choices[0]
        return (c.message.content if kind == "chat" else c.text), c.finish_reason, r.usage.completion_tokens
    s = api.create(stream=True, **kw)
    parts, finish, n = [], None, None
    for i, chunk in enumerate(s):
        if cancel and i == 2:
            s.close()   # the client goes away mid-stream
            return None
        c = chunk.choices[0]
        parts.append((c.delta.content or "") if kind == "chat" else c.text)
        if c.finish_reason:
            finish, n = c.finish_reason, chunk.usage.completion_tokens
    return "".join(parts), finish, n


def test_load_1000_requests_8_clients(stories_chat):
    plan = _plan()
    with cism.Model(stories_chat) as model:
        want = {key: _offline(model, *key) for key in {_key(p) for p in plan if not p[-1]}}
    assert sum(1 for w in want.values() if w[1] == "stop") > 0 and sum(1 for w in want.values() if w[1] == "length")
    server = Server(stories_chat, "--slots", str(N_CLIENTS), "-c", str(CTX), "--max-queue", "16")
    try:
        results = [None] * len(plan)
        errors = []
        next_i = iter(range(len(plan)))
        lock = threading.Lock()

        def worker():
            client = server.client(timeout=60)
            while True:
                with lock:
                    i = next(next_i, None)
                if i is None:
                    return
                try:
                    results[i] = ("ok", _call(client, *plan[i]))
                except Exception as e:   # reported below, with the request
                    errors.append((i, plan[i], repr(e)))
                    return

        t0 = time.monotonic()
        threads = [threading.Thread(target=worker) for _ in range(N_CLIENTS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(BOUND_SECONDS + 60)
        seconds = time.monotonic() - t0
        assert not errors, errors[:5]
        assert all(r is not None for r in results)
        mismatches = []
        for i, (p, (_, got)) in enumerate(zip(plan, results)):
            if p[-1]:
                assert got is None
            elif got != want[_key(p)]:
                mismatches.append((i, p, got, want[_key(p)]))
        assert not mismatches, f"{len(mismatches)} responses differ from offline greedy, e.g. {mismatches[:3]}"
        m = server.wait_idle(10)
        done = sum(requests_total(m, e, o) for e in ("chat", "completion") for o in ("ok", "cancelled"))
        cancelled = sum(requests_total(m, e, "cancelled") for e in ("chat", "completion"))
        assert done == len(plan), m   # every request accounted for: completed or cancelled
        assert sum(requests_total(m, e, o) for e in ("chat", "completion") for o in ("rejected", "error")) == 0
        n_cancel = sum(1 for p in plan if p[-1])
        print(f"\n{len(plan)} requests ({n_cancel} cancelled by their client, {cancelled} of them while running) "
              f"from {N_CLIENTS} clients in {seconds:.1f} s; {m['cism_decode_tokens_total']:.0f} tokens generated, "
              f"{m['cism_prompt_tokens_cached_total']:.0f} prompt tokens reused")
        assert cancelled >= 1   # the client-side cancels reached the scheduler
        assert seconds < BOUND_SECONDS
    finally:
        server.stop()
