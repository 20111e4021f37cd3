"""The chat page of `cism serve` (bindings_py/cism/server/static/) in a real
browser: headless Chromium from Debian's packages (/usr/bin/chromium) driven by
Selenium through Debian's /usr/bin/chromedriver (nothing is downloaded), at a
phone-sized window, against a live server on loopback with the real
SmolLM2-135M-Instruct. The streamed answers must equal the API's greedy ones
(temperature 0 set in the page's settings), over two turns and with a system
prompt; Stop must end the request and free its slot; markup in the user's
message and in the model's reply must show as text (no element created, no
script run); with an API key the page asks for it, says when it is refused, and
then works. A screenshot goes to $CISM_BUILD_DIR/test-artifacts/chat_page.png
(default build/); the test checks it is a real, non-blank PNG.

Without Chromium, its driver or selenium the tests skip, and fail under
CISM_REQUIRE_SHARED=1 (CI installs them: .ci/run)."""
from __future__ import annotations

import json
import os
import re
import struct
import time
import zlib

import numpy as np
import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

from serve_helpers import Server, requests_total  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
CTX = 1024
WIDTH, HEIGHT = 412, 900          # a phone
KEY = "page-test-key-5d1c"


def _missing(msg: str):
    if os.environ.get("CISM_REQUIRE_SHARED") == "1":
        pytest.fail(msg + " and CISM_REQUIRE_SHARED=1 (apt-get install chromium chromium-driver; "
                    "pip install -r tests/requirements.txt)")
    pytest.skip(msg)


@pytest.fixture(scope="module")
def browser():
    for path in (CHROMIUM, CHROMEDRIVER):
        if not os.access(path, os.X_OK):
            _missing(f"{path} is absent")
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.options import Options
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        _missing("selenium is not installed")
    os.environ["SE_OFFLINE"] = "true"   # Selenium Manager must never fetch a browser or driver
    o = Options()
    for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
              f"--window-size={WIDTH},{HEIGHT}", "--no-first-run", "--disable-extensions"):
        o.add_argument(a)
    # a phone's viewport (headless windows are at least 500 px wide): mobile, so the viewport meta applies
    o.add_experimental_option("mobileEmulation", {"deviceMetrics": {"width": WIDTH, "height": HEIGHT,
                                                                    "pixelRatio": 1.0, "mobile": True}})
    o.binary_location = CHROMIUM
    d = webdriver.Chrome(service=Service(CHROMEDRIVER), options=o)
    d.set_script_timeout(30)
    yield d
    d.quit()


@pytest.fixture(scope="module")
def server(smol):
    s = Server(smol, "--slots", "2", "-c", str(CTX), "--max-tokens", "1000", "--model-name", "smol")
    yield s
    s.stop()


def _api_chat(server, msgs, max_tokens, headers=None, **extra) -> str:
    """The greedy answer of the API itself (non-streaming)."""
    status, _, body = server.request("POST", "/v1/chat/completions",
                                     dict({"messages": msgs, "max_tokens": max_tokens, "temperature": 0}, **extra),
                                     headers=headers)
    assert status == 200, body
    return json.loads(body)["choices"][0]["message"]["content"]


def _wait(cond, timeout=60, what="the condition"):
    t0 = time.monotonic()
    while True:
        v = cond()
        if v:
            return v
        if time.monotonic() - t0 > timeout:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.05)


def _open(d, server, temperature="0", max_tokens="64", system=""):
    """A fresh page with these settings, and a MutationObserver that counts how
    often, and when, the replies' text changed in separate tasks (streaming, not one write)."""
    d.get(server.url + "/")
    _wait(lambda: d.execute_script("return document.getElementById('model').textContent") == "smol",
          what="the model name from /health")
    d.find_element("css selector", "#settings summary").click()
    for eid, value in (("temperature", temperature), ("max-tokens", max_tokens), ("system", system)):
        el = d.find_element("id", eid)
        el.clear()
        if value:
            el.send_keys(value)
    d.execute_script("""
        window.__updates = [];
        new MutationObserver((recs) => window.__updates.push([performance.now(), recs.length]))
            .observe(document.getElementById('log'), {characterData: true, subtree: true});""")


def _ask(d, text):
    before = len(d.find_elements("css selector", ".msg.assistant"))
    box = d.find_element("id", "prompt")
    box.clear()
    box.send_keys(text)
    d.find_element("id", "send").click()
    _wait(lambda: len(d.find_elements("css selector", ".msg.assistant")) > before, what="the reply bubble")
    return before   # the index of the new reply


def _reply(d, i, timeout=120):
    """(text, stats line) of reply i once it is done."""
    _wait(lambda: d.execute_script(
        "const m = document.querySelectorAll('.msg.assistant')[arguments[0]];"
        "return m && m.classList.contains('done');",
        i), timeout, "the end of the reply")
    return d.execute_script("""
        const m = document.querySelectorAll('.msg.assistant')[arguments[0]];
        return [m.querySelector('.body').textContent, m.querySelector('.stats').textContent];""", i)


def _no_markup(d):
    """No element inside the conversation but the page's own bubbles, no script ran."""
    tags = d.execute_script(
        "return Array.from(document.querySelectorAll('#log *'), e => e.tagName + '.' + e.className)")
    assert set(tags) <= {"DIV.msg user", "DIV.msg assistant done", "DIV.msg assistant done stopped", "DIV.body",
                         "DIV.stats"}, tags
    assert d.execute_script("return window.__pwned === undefined")
    assert d.execute_script("return Array.from(document.querySelectorAll('#log .body'), b => b.children.length)") \
        == [0] * len(d.find_elements("css selector", "#log .body"))


# ---- the page is served, self-contained, and fits a phone ------------------------------------------
def test_page_is_served_offline(server):
    status, headers, body = server.request("GET", "/")
    assert status == 200 and headers["content-type"].startswith("text/html")
    assert b'name="viewport"' in body and b"cism serve" in body
    assert "script-src 'self'" in headers["content-security-policy"]
    for name, kind in (("chat.js", "text/javascript"), ("chat.css", "text/css")):
        status, headers, text = server.request("GET", "/static/" + name)
        assert status == 200 and headers["content-type"].startswith(kind)
        assert b"http://" not in text and b"https://" not in text and b"innerHTML" not in text, name
    assert b"http://" not in body and b"https://" not in body   # no CDN, nothing from the internet
    for path in ("/static/index.html", "/static/../app.py", "/static/nothing.js"):
        assert server.request("GET", path)[0] == 404


# ---- streaming, multi-turn, settings -----------------------------------------------------------------
def test_streamed_answers_equal_the_api(browser, server):
    d = browser
    system = "You are a concise assistant."
    _open(d, server, max_tokens="48", system=system)
    q1, q2 = "What is the capital of France?", "And what is the capital of Italy?"
    i = _ask(d, q1)
    text1, stats1 = _reply(d, i)
    msgs = [{"role": "system", "content": system}, {"role": "user", "content": q1}]
    assert text1 == _api_chat(server, msgs, 48)
    # "N tokens · TTFT T ms [· R tokens/s] · finish: stop": the rate is left out when the
    # tokens after the first arrived within 50 ms (chat.js: a burst has no meaningful rate)
    m = re.fullmatch(r"(\d+) tokens · TTFT (\d+) ms(?: · ([0-9.]+) tokens/s)? · finish: stop", stats1)
    assert m and int(m.group(1)) > 1 and (m.group(3) is None or float(m.group(3)) > 0), stats1
    # the second turn carries the first (the conversation is kept)
    i = _ask(d, q2)
    text2, _ = _reply(d, i)
    msgs += [{"role": "assistant", "content": text1}, {"role": "user", "content": q2}]
    assert text2 == _api_chat(server, msgs, 48)
    # no horizontal scrolling at phone width
    assert d.execute_script("return document.documentElement.scrollWidth <= window.innerWidth")
    _no_markup(d)
    _screenshot(d)


def test_json_replies_setting(browser, server):
    d = browser
    _open(d, server, max_tokens="80")
    d.find_element("id", "json").click()
    q = "What is the capital of France? Answer in JSON."
    text, stats = _reply(d, _ask(d, q))
    assert text == _api_chat(server, [{"role": "user", "content": q}], 80, response_format={"type": "json_object"})
    assert isinstance(json.loads(text), dict) and stats.endswith("finish: stop")


# ---- Stop --------------------------------------------------------------------------------------------
def test_stop_ends_the_request(browser, server):
    d = browser
    server.wait_idle()
    cancelled = requests_total(server.metrics(), "chat", "cancelled")
    _open(d, server, temperature="0.8", max_tokens="900")
    i = _ask(d, "Write a very long and detailed story about a dragon who learns to paint. Use many chapters.")
    body = f"document.querySelectorAll('.msg.assistant')[{i}].querySelector('.body').textContent"
    _wait(lambda: len(d.execute_script("return " + body)) > 40, what="the story to start")
    # streamed: the text grew in separate tasks over time, not in one write at the end
    _wait(lambda: len(d.execute_script("return window.__updates")) >= 3, 20, "several pieces of the reply")
    ups = d.execute_script("return window.__updates")
    assert ups[-1][0] - ups[0][0] > 10, ups
    assert server.metrics()["cism_slots_in_use"] == 1
    d.find_element("id", "stop").click()
    text, stats = _reply(d, i, timeout=10)
    assert "stopped" in stats and d.find_element("id", "send").is_displayed()
    server.wait_idle(timeout=10)                       # the slot is free
    _wait(lambda: requests_total(server.metrics(), "chat", "cancelled") == cancelled + 1, 10,
          "the cancelled request in /metrics")
    time.sleep(0.3)
    assert d.execute_script("return " + body) == text   # nothing came after Stop
    assert len(text) < 4000


# ---- markup shows as text ----------------------------------------------------------------------------
MARKUP = '<script>window.__pwned = 1</script><img src=x onerror="window.__pwned = 2"><b>bold</b> &amp;'


@pytest.mark.parametrize("question,expect", [
    ("Write an HTML img tag with an onerror attribute.", ("<img", "onerror=")),
    ("Write a minimal HTML page with a script tag.", ("<script>",)),
])
def test_markup_is_shown_as_text(browser, server, question, expect):
    d = browser
    _open(d, server, max_tokens="96")
    i = _ask(d, question)
    text, _ = _reply(d, i)
    want = _api_chat(server, [{"role": "user", "content": question}], 96)
    assert all(s in want for s in expect), want   # the model's greedy reply holds markup
    assert text == want
    # the user's own message with markup, in the same conversation
    i = _ask(d, MARKUP)
    _reply(d, i)
    users = d.execute_script("return Array.from(document.querySelectorAll('.msg.user .body'), b => b.textContent)")
    assert users == [question, MARKUP]
    _no_markup(d)


# ---- the API key -------------------------------------------------------------------------------------
def test_api_key_is_asked_for(browser, smol):
    d = browser
    s = Server(smol, "--slots", "1", "-c", str(CTX), "--model-name", "smol", env={"CISM_API_KEY": KEY})
    try:
        _open(d, s, max_tokens="24")
        assert not d.find_element("id", "key-form").is_displayed()
        i = _ask(d, "What is 2 + 2?")
        _wait(lambda: d.find_element("id", "key-form").is_displayed(), 20, "the key form")
        d.find_element("id", "key").send_keys("wrong-key")
        d.find_element("id", "key-ok").click()
        _wait(lambda: "refused" in d.find_element("id", "key-reason").text, 20, "the refusal")
        d.find_element("id", "key").send_keys(KEY)
        d.find_element("id", "key-ok").click()
        text, stats = _reply(d, i)
        auth = {"Authorization": "Bearer " + KEY}
        assert text == _api_chat(s, [{"role": "user", "content": "What is 2 + 2?"}], 24, headers=auth)
        assert "finish:" in stats and not d.find_element("id", "key-form").is_displayed()
        assert KEY not in d.current_url
        # the key is kept for this tab: the next message needs no prompt
        i = _ask(d, "What is 3 + 3?")
        _reply(d, i)
        assert not d.find_element("id", "key-form").is_displayed()
        assert requests_total(s.metrics(auth), "chat", "ok") == 3   # two from the page, one from the test
    finally:
        d.execute_script("sessionStorage.clear()")
        s.stop()


# ---- the screenshot ----------------------------------------------------------------------------------
def _screenshot(d):
    out = os.path.join(os.environ.get("CISM_BUILD_DIR") or os.path.join(ROOT, "build"), "test-artifacts")
    os.makedirs(out, exist_ok=True)
    path = os.path.join(out, "chat_page.png")
    if os.path.exists(path):
        os.unlink(path)
    assert d.save_screenshot(path)
    w, h, px = _read_png(path)
    assert w == WIDTH and (w, h) == tuple(d.execute_script("return [window.innerWidth * devicePixelRatio, "
                                            "window.innerHeight * devicePixelRatio]")), (w, h)
    gray = px[..., :3].astype(np.float64).mean(axis=2)
    assert gray.std() > 10, "the screenshot is blank"
    assert len(np.unique(px[..., :3].reshape(-1, 3), axis=0)) > 50   # text, bubbles, buttons: not a flat fill


def _read_png(path):
    """(width, height, pixels HxWxC uint8) of an 8-bit non-interlaced RGB/RGBA PNG (what Chromium writes)."""
    with open(path, "rb") as f:
        data = f.read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, w = 8, [], None
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        chunk = data[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            w, h, depth, color, _, _, interlace = struct.unpack(">IIBBBBB", chunk)
            assert depth == 8 and color in (2, 6) and interlace == 0, (depth, color, interlace)
            c = 3 if color == 2 else 4
        elif kind == b"IDAT":
            idat.append(chunk)
        pos += 12 + n
    raw = np.frombuffer(zlib.decompress(b"".join(idat)), np.uint8).reshape(h, 1 + w * c)
    out = np.zeros((h, w * c), np.int32)
    prev = np.zeros(w * c, np.int32)
    for y in range(h):
        ftype, line = raw[y, 0], raw[y, 1:].astype(np.int32)
        if ftype == 0:
            cur = line
        elif ftype == 2:
            cur = (line + prev) & 255
        else:   # Sub, Average, Paeth depend on the pixel to the left: byte by byte
            cur = np.zeros_like(line)
            for x in range(w * c):
                a = cur[x - c] if x >= c else 0
                b = prev[x]
                cc = prev[x - c] if x >= c else 0
                if ftype == 1:
                    p = a
                elif ftype == 3:
                    p = (a + b) // 2
                else:
                    pa, pb, pc = abs(b - cc), abs(a - cc), abs(a + b - 2 * cc)
                    p = a if pa <= pb and pa <= pc else (b if pb <= pc else cc)
                cur[x] = (line[x] + p) & 255
        out[y] = cur
        prev = cur
    return w, h, out.reshape(h, w, c).astype(np.uint8)
