// The chat page of `cism serve` (docs/SERVER.md). Plain JavaScript, no build
// step, nothing fetched but this server's own routes. Model output and user
// text go into the page only as text (Text nodes, textContent), never as HTML.
"use strict";
(() => {
  const $ = (id) => document.getElementById(id);
  const KEY_ITEM = "cism-api-key";          // sessionStorage: this tab only, never the URL
  const conversation = [];                   // {role, content} of the finished turns
  let controller = null;                     // the AbortController of the running request
  let keyWaiter = null;                      // resolves when the user submits a key
  let epoch = 0;                             // bumped by "New chat": late replies of the old one are dropped

  function apiKey() {
    try { return sessionStorage.getItem(KEY_ITEM) || ""; } catch (e) { return memoryKey; }
  }
  let memoryKey = "";
  function setKey(k) {
    memoryKey = k;
    try { if (k) sessionStorage.setItem(KEY_ITEM, k); else sessionStorage.removeItem(KEY_ITEM); } catch (e) { /* memory only */ }
  }

  function bubble(role) {
    const div = document.createElement("div");
    div.className = "msg " + role;
    const body = document.createElement("div");
    body.className = "body";
    const text = document.createTextNode("");
    body.appendChild(text);
    div.appendChild(body);
    $("log").appendChild(div);
    return { div, text };
  }
  function stats(b, line) {
    let s = b.div.querySelector(".stats");
    if (!s) {
      s = document.createElement("div");
      s.className = "stats";
      b.div.appendChild(s);
    }
    s.textContent = line;
  }
  function scroll() { const log = $("log"); log.scrollTop = log.scrollHeight; }

  function askKey(reason) {
    $("key-reason").textContent = reason;
    $("key-form").hidden = false;
    $("key").value = "";
    $("key").focus();
    return new Promise((resolve) => { keyWaiter = resolve; });
  }
  $("key-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    const k = $("key").value.trim();
    if (!k || !keyWaiter) return;
    setKey(k);
    $("key-form").hidden = true;
    const w = keyWaiter; keyWaiter = null; w(k);
  });

  function settings() {
    const body = { stream: true, stream_options: { include_usage: true } };
    const t = parseFloat($("temperature").value);
    if (Number.isFinite(t)) body.temperature = t;
    const n = parseInt($("max-tokens").value, 10);
    if (Number.isFinite(n) && n > 0) body.max_tokens = n;
    if ($("json").checked) body.response_format = { type: "json_object" };
    const sys = $("system").value;
    body.messages = (sys.trim() ? [{ role: "system", content: sys }] : []).concat(conversation);
    return body;
  }

  // POST with the key; on 401 ask for one (again) and retry.
  async function post(body, signal) {
    let reason = "This server needs an API key.";
    for (;;) {
      const headers = { "Content-Type": "application/json" };
      const k = apiKey();
      if (k) headers["Authorization"] = "Bearer " + k;
      const res = await fetch("/v1/chat/completions", { method: "POST", headers, body: JSON.stringify(body), signal });
      if (res.status !== 401) return res;
      if (k) { setKey(""); reason = "The server refused that key: enter it again."; }
      const abort = new Promise((_, reject) => signal.addEventListener("abort",
        () => reject(new DOMException("aborted", "AbortError")), { once: true }));
      await Promise.race([askKey(reason), abort]);
    }
  }

  function errorText(obj, status) {
    if (obj && obj.error && obj.error.message) return obj.error.message;
    return "HTTP " + status;
  }

  function busy(on) {
    $("send").hidden = on;
    $("stop").hidden = !on;
    $("send").disabled = on;
  }

  async function send(content) {
    const mine = epoch;
    conversation.push({ role: "user", content });
    bubble("user").text.data = content;
    const reply = bubble("assistant");
    scroll();
    controller = new AbortController();
    busy(true);
    const t0 = performance.now();
    let tFirst = 0, tLast = 0, chunks = 0, usage = null, finish = null, failed = null, stopped = false;
    try {
      const res = await post(settings(), controller.signal);
      if (!res.ok) {
        let obj = null;
        try { obj = await res.json(); } catch (e) { /* not JSON */ }
        throw new Error(errorText(obj, res.status));
      }
      const reader = res.body.getReader();
      const dec = new TextDecoder();
      let buf = "", done = false;
      while (!done) {
        const r = await reader.read();
        if (r.done) break;
        buf += dec.decode(r.value, { stream: true });
        let cut;
        while (!done && (cut = buf.indexOf("\n\n")) >= 0) {
          const event = buf.slice(0, cut);
          buf = buf.slice(cut + 2);
          for (const line of event.split("\n")) {
            if (!line.startsWith("data:")) continue;
            const data = line.slice(5).trim();
            if (data === "[DONE]") { done = true; break; }
            const obj = JSON.parse(data);
            if (obj.error) throw new Error(errorText(obj));
            if (obj.usage) usage = obj.usage;
            const c = obj.choices && obj.choices[0];
            if (!c) continue;
            if (c.finish_reason) finish = c.finish_reason;
            const piece = c.delta && c.delta.content;
            if (piece) {
              if (!tFirst) tFirst = performance.now();
              tLast = performance.now();
              chunks += 1;
              reply.text.appendData(piece);
              scroll();
            }
          }
        }
      }
      if (!done) throw new Error("the stream ended early");
    } catch (e) {
      if (e && e.name === "AbortError") stopped = true; else failed = (e && e.message) || String(e);
    } finally {
      controller = null;
      busy(false);
    }
    const text = reply.text.data;
    if (mine !== epoch) return;
    if (failed) {
      conversation.pop();
      reply.div.classList.add("error");
      if (!text) reply.text.data = "Error: " + failed; else stats(reply, "error: " + failed);
      if (!text) stats(reply, "error");
    } else {
      if (text) conversation.push({ role: "assistant", content: text }); else conversation.pop();
      const n = usage ? usage.completion_tokens : chunks;
      const parts = [(usage ? "" : "~") + n + " tokens"];
      if (tFirst) parts.push("TTFT " + Math.round(tFirst - t0) + " ms");
      // decode speed as received: the tokens after the first over the time since the first (over 50 ms only:
      // a short reply that arrived in one burst has no measurable rate)
      if (n > 1 && tLast - tFirst >= 50) parts.push(((n - 1) / ((tLast - tFirst) / 1000)).toFixed(1) + " tokens/s");
      if (stopped) { parts.push("stopped"); reply.div.classList.add("stopped"); }
      else if (finish) parts.push("finish: " + finish);
      stats(reply, parts.join(" · "));
    }
    reply.div.classList.add("done");
    scroll();
    $("prompt").focus();
  }

  $("composer").addEventListener("submit", (ev) => {
    ev.preventDefault();
    const content = $("prompt").value;
    if (!content.trim() || controller) return;
    $("prompt").value = "";
    send(content);
  });
  $("prompt").addEventListener("keydown", (ev) => {
    if (ev.key === "Enter" && !ev.shiftKey && !ev.isComposing) { ev.preventDefault(); $("composer").requestSubmit(); }
  });
  $("stop").addEventListener("click", () => { if (controller) controller.abort(); });
  $("new-chat").addEventListener("click", () => {
    if (controller) controller.abort();
    epoch += 1;
    conversation.length = 0;
    $("log").replaceChildren();
  });
  $("forget-key").addEventListener("click", () => setKey(""));

  fetch("/health").then((r) => r.json()).then((h) => { if (h && h.model) $("model").textContent = h.model; })
    .catch(() => { /* the name is a nicety */ });
})();
