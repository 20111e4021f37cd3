"""The HTTP side: routes, authentication, errors (FastAPI on Uvicorn).

Every error is answered as an OpenAI error object {"error": {"message",
"type", "param", "code"}}: malformed JSON, wrong types, unknown routes,
unsupported methods, and (without a traceback, which goes to the server log)
anything unexpected. With an API key, /v1/* and /metrics need
`Authorization: Bearer KEY` (compared in constant time); / and /health stay
open, as do the chat page's static files (/static/*). No endpoint reads or
writes a file named by the client.
"""
from __future__ import annotations

import asyncio
import hmac
import json
import logging
import os
import time
from typing import Any, Dict, List, Optional

from fastapi import APIRouter, Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException

from .. import chat as chat_api
from ..errors import CismError
from ..json_mode import JsonConstraint
from ..sampler import Sampler
from . import protocol
from .metrics import Metrics
from .protocol import APIError, GenRequest, Limits, bad
from .scheduler import Job, Scheduler

log = logging.getLogger("cism.server")


class ServerState:
    """What the routes share: the model, its scheduler, limits and metrics."""

    def __init__(self, model, scheduler: Scheduler, metrics: Metrics, limits: Limits, model_id: str,
                 api_key: Optional[str] = None):
        self.model = model
        self.tokenizer = model.tokenizer
        self.scheduler = scheduler
        self.metrics = metrics
        self.limits = limits
        self.model_id = model_id
        self.api_key = api_key or None
        self.created = int(os.path.getmtime(model.path)) if os.path.exists(model.path) else int(time.time())
        self.eos_ids = frozenset(model.eos_ids)
        self.chat_stop_ids = self.eos_ids | frozenset(chat_api.end_of_turn_ids(model))

    def gauges(self) -> Dict[str, Any]:
        used, waiting = self.scheduler.state()
        return {"cism_slots_in_use": ("slots running a request", used),
                "cism_slots_total": ("slots (sessions)", len(self.scheduler.slots)),
                "cism_queue_depth": ("requests waiting for a slot", waiting),
                "cism_queue_capacity": ("requests that may wait (--max-queue)", self.scheduler.max_queue)}

    # ---- building requests (run in a worker thread: templating, tokenizing) ----
    def _room(self, req: GenRequest, param: str) -> None:
        n, ctx = len(req.prompt_ids), self.scheduler.n_ctx
        if n == 0:
            raise bad("the prompt is empty (no tokens to start from)", param)
        if n >= ctx:
            raise bad(f"the prompt is {n} tokens and the context holds {ctx} (with room for at least one generated "
                      "token): shorten it", param, "context_length_exceeded")

    def _clean(self, msg: str) -> str:
        return msg.replace(self.model.path, self.model_id)   # the server's file path is not the client's business

    def chat_request(self, body: Any) -> GenRequest:
        req = protocol.parse_common(body, "chat", self.limits, self.limits.max_tokens)
        msgs = protocol.messages_of(body)
        try:
            req.prompt_ids = chat_api.prompt_tokens(self.model, msgs)
        except (ValueError, TypeError) as e:   # ChatTemplateError is a ValueError
            raise bad(self._clean(str(e)), "messages") from None
        req.stop_ids = self.chat_stop_ids
        self._room(req, "messages")
        return req

    def tokenize(self, body: Any) -> Dict[str, Any]:
        """{"tokens": ids} of "content" (BOS only with "add_special": true, special-token text as those
        tokens); with "with_pieces": true each id with its bytes' text ({"id", "piece"})."""
        content, add_special, with_pieces = protocol.tokenize_of(body)
        ids = list(self.tokenizer.encode(content, add_bos=add_special))
        if not with_pieces:
            return {"tokens": ids}
        return {"tokens": [{"id": i, "piece": self.tokenizer.decode([i], skip_special=False)} for i in ids]}

    def detokenize(self, body: Any) -> Dict[str, Any]:
        """{"content": the text of "tokens"} (special tokens included, as llama.cpp's server does)."""
        ids = protocol.detokenize_of(body, self.tokenizer.n_ids)
        return {"content": self.tokenizer.decode(ids, skip_special=False) if ids else ""}

    def completion_request(self, body: Any) -> GenRequest:
        req = protocol.parse_common(body, "completion", self.limits, 16)   # OpenAI's default max_tokens
        prompt = protocol.prompt_of(body, self.tokenizer.n_ids)
        tok = self.tokenizer
        req.prompt_ids = list(tok.encode(prompt, add_bos=tok.add_bos)) if isinstance(prompt, str) else prompt
        req.stop_ids = self.eos_ids
        self._room(req, "prompt")
        return req


def _sse(obj: Any) -> str:
    return "data: " + json.dumps(obj, ensure_ascii=False, separators=(",", ":")) + "\n\n"


async def _read_json(request: Request, limit: int) -> Any:
    cl = request.headers.get("content-length")
    if cl is not None and cl.isdigit() and int(cl) > limit:
        raise APIError(413, f"the request body is {int(cl)} bytes; this server takes at most {limit} "
                            "(--max-body-bytes)", code="body_too_large")
    parts: List[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise APIError(413, f"the request body is over {limit} bytes (--max-body-bytes)", code="body_too_large")
        parts.append(chunk)
    raw = b"".join(parts)

    def no_constant(name: str):
        raise ValueError(f"{name} is not valid JSON")
    try:
        return json.loads(raw.decode("utf-8"), parse_constant=no_constant)
    except UnicodeDecodeError:
        raise bad("the request body is not UTF-8") from None
    except (ValueError, RecursionError) as e:
        raise bad(f"the request body is not valid JSON: {e}") from None


async def _watch_disconnect(request: Request, state: ServerState, job: Job) -> None:
    """Cancels the job when the client disconnects (the body has been read: the
    next ASGI message is the disconnect)."""
    while True:
        msg = await request.receive()
        if msg["type"] == "http.disconnect":
            state.scheduler.cancel(job)
            return


def create_app(state: ServerState) -> FastAPI:
    app = FastAPI(title="cism serve", docs_url=None, redoc_url=None, openapi_url=None)
    app.state.cism = state

    async def auth(request: Request) -> None:
        key = state.api_key
        if key is None:
            return
        given = request.headers.get("authorization", "")
        scheme, _, token = given.partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(token.strip().encode(), key.encode()):
            raise APIError(401, "a valid API key is needed: send the header 'Authorization: Bearer KEY'",
                           "invalid_request_error", code="invalid_api_key", headers={"WWW-Authenticate": "Bearer"})

    # ---- errors -------------------------------------------------------------------
    @app.exception_handler(APIError)
    async def api_error(request: Request, e: APIError):
        return JSONResponse(e.body(), status_code=e.status, headers=e.headers)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, e: StarletteHTTPException):
        kind = {404: "not_found", 405: "method_not_allowed"}.get(e.status_code)
        msg = {404: f"no such endpoint: {request.method} {request.url.path}",
               405: f"{request.method} is not allowed on {request.url.path}"}.get(e.status_code, str(e.detail))
        return JSONResponse(APIError(e.status_code, msg, code=kind).body(), status_code=e.status_code,
                            headers=getattr(e, "headers", None))

    @app.exception_handler(RequestValidationError)
    async def validation_error(request: Request, e: RequestValidationError):
        return JSONResponse(bad(f"invalid request: {e.errors()!r:.300}").body(), status_code=400)

    @app.exception_handler(Exception)
    async def internal_error(request: Request, e: Exception):
        log.exception("unexpected error on %s %s", request.method, request.url.path)
        err = APIError(500, "internal server error (the server log has the details)", "server_error",
                       code="internal_error")
        return JSONResponse(err.body(), status_code=500)

    # ---- open routes ----------------------------------------------------------------
    page = _static_files()

    @app.get("/", response_class=HTMLResponse)
    async def index():
        return _page_response(page, "index.html")

    @app.get("/static/{name}")
    async def static(name: str):
        if name not in page or name == "index.html":   # a fixed set read at start-up, not a path lookup
            raise StarletteHTTPException(404)
        return _page_response(page, name)

    @app.get("/health")
    async def health():
        used, waiting = state.scheduler.state()
        return {"status": "ok", "model": state.model_id, "slots_total": len(state.scheduler.slots),
                "slots_in_use": used, "queue_depth": waiting}

    # ---- routes behind the key ------------------------------------------------------
    v1 = APIRouter(dependencies=[Depends(auth)])

    @v1.get("/metrics")
    async def metrics():
        return PlainTextResponse(state.metrics.render(state.gauges),
                                 media_type="text/plain; version=0.0.4; charset=utf-8")

    @v1.get("/v1/models")
    async def models():
        return protocol.models_list(state.model_id, state.created)

    @v1.get("/v1/models/{model_id:path}")
    async def model(model_id: str):
        if model_id != state.model_id:
            raise APIError(404, f"no model {model_id!r}: this server serves {state.model_id!r}", param="model",
                           code="model_not_found")
        return protocol.model_card(state.model_id, state.created)

    @v1.post("/v1/chat/completions")
    async def chat_completions(request: Request):
        body = await _read_json(request, state.limits.max_body_bytes)
        req = await _build(state, state.chat_request, body, "chat")
        return await _run(request, state, req, "chat")

    @v1.post("/v1/completions")
    async def completions(request: Request):
        body = await _read_json(request, state.limits.max_body_bytes)
        req = await _build(state, state.completion_request, body, "completion")
        return await _run(request, state, req, "completion")

    def tokens_route(name: str, fn) -> None:   # POST /tokenize, /detokenize: answered at once, no slot
        async def route(request: Request):
            body = await _read_json(request, state.limits.max_body_bytes)
            out = await _build(state, fn, body, name)
            state.metrics.request(name, "ok")
            return out
        v1.post("/" + name)(route)

    tokens_route("tokenize", state.tokenize)
    tokens_route("detokenize", state.detokenize)

    app.include_router(v1)
    return app


# The chat page (static/: HTML, CSS, JavaScript; docs/SERVER.md): read once from the package, served
# from memory. The policy lets the page load only its own files and talk only to this server.
_STATIC_TYPES = {"index.html": "text/html; charset=utf-8", "chat.css": "text/css; charset=utf-8",
                 "chat.js": "text/javascript; charset=utf-8"}
_PAGE_HEADERS = {"Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; "
                                            "connect-src 'self'; img-src 'self'; base-uri 'none'; "
                                            "form-action 'none'; frame-ancestors 'none'",
                 "X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer", "Cache-Control": "no-cache"}


def _static_files() -> Dict[str, bytes]:
    from importlib import resources
    root = resources.files(__package__).joinpath("static")
    return {name: root.joinpath(name).read_bytes() for name in _STATIC_TYPES}


def _page_response(page: Dict[str, bytes], name: str) -> Response:
    return Response(page[name], media_type=_STATIC_TYPES[name], headers=_PAGE_HEADERS)


async def _build(state: ServerState, fn, body: Any, endpoint: str) -> GenRequest:
    try:
        return await run_in_threadpool(fn, body)
    except APIError:
        state.metrics.request(endpoint, "rejected")
        raise


def _sampler(req: GenRequest) -> Sampler:
    try:
        return Sampler(**req.sampling)
    except (CismError, ValueError, TypeError) as e:
        raise bad(f"invalid sampling parameters: {e}") from None


async def _run(request: Request, state: ServerState, req: GenRequest, endpoint: str):
    sampler = _sampler(req)
    job = Job(req, sampler, asyncio.get_running_loop(), endpoint)
    if req.json is not None:   # the vocabulary's texts are read once per model (about a second), off the event loop
        try:
            job.json = await run_in_threadpool(JsonConstraint, state.scheduler.tokenizer, req.json)
        except ValueError as e:   # a schema it cannot follow, a vocabulary without JSON's punctuation
            sampler.close()
            raise bad(str(e), "response_format") from None
    try:
        state.scheduler.submit(job)
    except APIError:
        sampler.close()
        state.metrics.request(endpoint, "rejected")
        raise
    if req.stream:
        return StreamingResponse(_stream(request, state, job), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
    watcher = asyncio.create_task(_watch_disconnect(request, state, job))
    try:
        text: List[str] = []
        entries: List[tuple] = []
        while True:
            ev = await job.events.get()
            if ev[0] == "text":
                text.append(ev[1])
                entries += ev[2]
            elif ev[0] == "progress":
                continue
            elif ev[0] == "error":
                raise ev[1]
            else:
                _, reason, use, rest = ev
                entries += rest
                break
    finally:
        watcher.cancel()
        state.scheduler.cancel(job)   # no-op when it has ended
    lp = entries if req.logprobs else None
    finish = "length" if reason == "cancelled" else reason
    if req.kind == "chat":
        return protocol.chat_response(req, state.model_id, "".join(text), finish, use, lp)
    return protocol.completion_response(req, state.model_id, "".join(text), finish, use, lp)


async def _stream(request: Request, state: ServerState, job: Job):
    """The SSE body: chunks as the text comes, the finish_reason and usage, [DONE]."""
    req, model_id = job.req, state.model_id
    watcher = asyncio.create_task(_watch_disconnect(request, state, job))
    offset = 0
    try:
        if req.kind == "chat":
            yield _sse(protocol.chat_chunk(req, model_id, {"role": "assistant", "content": ""},
                                           entries=[] if req.logprobs else None))
        while True:
            ev = await job.events.get()
            if ev[0] == "text":
                lp = ev[2] if req.logprobs else None
                if req.kind == "chat":
                    yield _sse(protocol.chat_chunk(req, model_id, {"content": ev[1]}, entries=lp))
                else:
                    yield _sse(protocol.completion_chunk(req, model_id, ev[1], entries=lp, offset=offset))
                offset += len(ev[1])
            elif ev[0] == "progress":   # an SSE comment (clients skip it): prompt tokens evaluated of those to evaluate
                yield f": prefill {ev[1]}/{ev[2]}\n\n"
            elif ev[0] == "error":
                yield _sse(ev[1].body())
                yield "data: [DONE]\n\n"
                return
            else:
                _, reason, use, rest = ev
                if reason == "cancelled":
                    return
                lp = rest if req.logprobs else None
                if req.kind == "chat":
                    last = protocol.chat_chunk(req, model_id, {}, reason, entries=lp)
                else:
                    last = protocol.completion_chunk(req, model_id, "", reason, entries=lp, offset=offset)
                last["usage"] = use   # every final response carries usage (an extension for streams)
                yield _sse(last)
                if req.include_usage:
                    yield _sse(protocol.usage_chunk(req, model_id, use))
                yield "data: [DONE]\n\n"
                return
    finally:
        watcher.cancel()
        state.scheduler.cancel(job)   # the client went away mid-stream, or a no-op after the end
