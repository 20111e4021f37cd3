"""`cism serve`: an OpenAI-compatible HTTP server (the optional extra
`cism[server]`: FastAPI + Uvicorn). docs/SERVER.md explains the choices.

    from cism.server import serve
    serve("model.cism", port=8000, n_slots=4)

Modules: protocol (request validation, OpenAI shapes), scheduler (slots,
continuous batching, prefix reuse, cancellation), output (text, stop strings,
logprobs), metrics (Prometheus text), app (routes, auth, errors).
"""
from __future__ import annotations

import os
import socket
import sys
from typing import Callable, Optional

from ..llamacpp import MissingExtra

INSTALL = "pip install './bindings_py[server]'"


def require() -> None:
    """MissingExtra (an ImportError) naming the install command when FastAPI or Uvicorn is absent."""
    missing = []
    for name in ("fastapi", "uvicorn"):
        try:
            __import__(name)
        except ImportError:
            missing.append(name)
    if missing:
        raise MissingExtra(f"cism serve needs {' and '.join(missing)} (the server extra): {INSTALL} "
                           "(or pip install 'cism[server]')")


def model_id_of(path: str) -> str:
    name = os.path.basename(path)
    return name[:-5] if name.endswith(".cism") else name


def bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket (port 0: a free one)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(2048)
    except OSError as e:
        sock.close()
        raise OSError(f"cannot listen on {host}:{port}: {e.strerror or e}") from None
    sock.set_inheritable(True)
    return sock


def serve(model_path: str, *, host: str = "127.0.0.1", port: int = 8000, n_slots: int = 4, n_ctx: int = 0,
          n_threads: int = 0, kv_type: str = "f16", api_key: Optional[str] = None, max_queue: int = 64,
          max_tokens: int = 4096, max_body_bytes: int = 1 << 20, prefill_chunk: int = 64,
          model_id: Optional[str] = None, say: Callable[[str], None] = lambda m: print(m, file=sys.stderr),
          lookup: bool = False, draft_max: int = 7, act: str = "auto") -> None:
    """Loads the model, starts the scheduler and serves until interrupted. act: the
    activations of every slot (cism.actmodes: auto, outliers, int8, float)."""
    require()
    import uvicorn
    from ..model import Model
    from .app import ServerState, create_app
    from .metrics import Metrics
    from .protocol import Limits
    from .scheduler import Scheduler
    if not 0 <= port <= 65535:
        raise ValueError(f"--port {port}: give 0 to 65535 (0: a free port)")
    if max_tokens < 1:
        raise ValueError(f"--max-tokens {max_tokens}: give 1 or more")
    if max_body_bytes < 1024:
        raise ValueError(f"--max-body-bytes {max_body_bytes}: give 1024 or more")
    if max_queue < 0:
        raise ValueError(f"--max-queue {max_queue} is negative")
    if lookup and not 1 <= draft_max <= 64:
        raise ValueError(f"--draft-max {draft_max}: give 1 to 64")
    with Model(model_path) as model:
        metrics = Metrics()
        sched = Scheduler(model, n_slots=n_slots, n_ctx=n_ctx, n_threads=n_threads, kv_type=kv_type,
                          max_queue=max_queue, prefill_chunk=prefill_chunk, metrics=metrics, lookup=lookup,
                          draft_max=draft_max, act=act)
        try:
            state = ServerState(model, sched, metrics, Limits(max_tokens=max_tokens, max_body_bytes=max_body_bytes),
                                model_id or model_id_of(model_path), api_key)
            app = create_app(state)
            sock = bind(host, port)
            sched.start()
            where = f"http://[{host}]:{sock.getsockname()[1]}" if ":" in host else \
                f"http://{host}:{sock.getsockname()[1]}"
            say(f"cism: serving {state.model_id} on {where} ({n_slots} slots of {sched.n_ctx} tokens, "
                f"queue {max_queue}{', API key required' if api_key else ''}"
                f"{'' if act == 'auto' else f', {act} activations'}"
                f"{f', prompt lookup up to {draft_max} drafts' if lookup else ''}); Ctrl-C stops")
            if not api_key and host not in ("127.0.0.1", "localhost", "::1"):
                say(f"cism: warning: {host} is reachable from other machines and no API key is set "
                    "(--api-key or CISM_API_KEY)")
            config = uvicorn.Config(app, log_level="warning", access_log=False, timeout_graceful_shutdown=5)
            uvicorn.Server(config).run(sockets=[sock])
        finally:
            sched.close()
