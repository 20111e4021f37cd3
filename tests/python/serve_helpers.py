"""A live `cism serve` for the server tests: the real Uvicorn in a subprocess
on a free loopback port (--port 0; the port is read from its first line),
stopped with SIGINT (then killed) when the test is done."""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from typing import Dict, Optional, Tuple

from cism.server.metrics import parse as parse_metrics

READY = re.compile(r"serving .* on (http://127\.0\.0\.1:(\d+))")


class Server:
    def __init__(self, model: str, *args: str, env: Optional[Dict[str, str]] = None, timeout: float = 120):
        self._log = tempfile.NamedTemporaryFile("w+", prefix="cism-serve-", suffix=".log", delete=False)
        e = dict(os.environ)
        e.pop("CISM_API_KEY", None)   # only what the test gives
        e.update(env or {})
        self.proc = subprocess.Popen([sys.executable, "-m", "cism", "serve", "-m", model, "--port", "0", *args],
                                     stdout=self._log, stderr=subprocess.STDOUT, env=e, stdin=subprocess.DEVNULL)
        t0 = time.monotonic()
        while True:
            m = READY.search(self.log())
            if m:
                self.url = m.group(1)
                break
            if self.proc.poll() is not None or time.monotonic() - t0 > timeout:
                self.stop()
                raise AssertionError(f"cism serve did not start:\n{self.log()}")
            time.sleep(0.05)

    def log(self) -> str:
        with open(self._log.name, encoding="utf-8", errors="replace") as f:
            return f.read()

    def client(self, api_key: str = "unused", **kw):
        import openai
        return openai.OpenAI(base_url=self.url + "/v1", api_key=api_key, max_retries=0, timeout=kw.pop("timeout", 120),
                             **kw)

    def request(self, method: str, path: str, body=None, headers: Optional[Dict[str, str]] = None,
                raw: Optional[bytes] = None) -> Tuple[int, Dict[str, str], bytes]:
        """(status, headers, body) of a plain HTTP request (urllib; errors are returned, not raised)."""
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
        h = {"Content-Type": "application/json"} if data is not None else {}
        h.update(headers or {})
        req = urllib.request.Request(self.url + path, data=data, method=method, headers=h)
        try:
            with urllib.request.urlopen(req, timeout=120) as r:
                return r.status, dict(r.headers), r.read()
        except urllib.error.HTTPError as e:
            return e.code, dict(e.headers), e.read()

    def metrics(self, headers: Optional[Dict[str, str]] = None) -> Dict[str, float]:
        status, _, body = self.request("GET", "/metrics", headers=headers)
        assert status == 200, body
        return parse_metrics(body.decode())

    def wait_idle(self, timeout: float = 10, headers: Optional[Dict[str, str]] = None) -> Dict[str, float]:
        """The metrics once no slot is in use and nothing waits (AssertionError after `timeout` s)."""
        t0 = time.monotonic()
        while True:
            m = self.metrics(headers)
            if m["cism_slots_in_use"] == 0 and m["cism_queue_depth"] == 0:
                return m
            if time.monotonic() - t0 > timeout:
                raise AssertionError(f"still busy after {timeout} s: {m}")
            time.sleep(0.02)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(15)
        self._log.close()
        try:
            os.unlink(self._log.name)
        except OSError:
            pass


def requests_total(m: Dict[str, float], endpoint: str, outcome: str) -> int:
    return int(m.get(f'cism_requests_total{{endpoint="{endpoint}",outcome="{outcome}"}}', 0))
