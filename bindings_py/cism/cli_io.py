"""What the command line reads and reports around a run: text inputs (a file
or `-` for stdin, never fatal on invalid UTF-8 where a session would be lost),
prefill progress on stderr and llama.cpp-style timings."""
from __future__ import annotations

import logging
import sys
from typing import Optional, TextIO

PROGRESS_MIN_TOKENS = 1024  # prompts at least this long show progress even when stderr is not a terminal
REPLACED_NOTE = "was not valid UTF-8: invalid bytes replaced with U+FFFD"


def read_text(path: str, *, strict: bool = False) -> str:
    """The UTF-8 text of `path` ("-" = standard input). Invalid bytes become
    U+FFFD with a note on stderr; strict=True refuses them instead (ValueError
    naming the file and the byte offset)."""
    name = "standard input" if path == "-" else path
    if path == "-":
        data = sys.stdin.buffer.read()
    else:
        try:
            with open(path, "rb") as f:
                data = f.read()
        except OSError as e:  # the file's name and the reason, as the model loader words it
            raise OSError(f"cannot read '{path}': {e.strerror}") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        if strict:
            raise ValueError(f"{name} is not UTF-8 text (invalid byte 0x{data[e.start]:02x} at offset {e.start}); "
                             f"convert it to UTF-8 first") from None
        print(f"cism: warning: {name} {REPLACED_NOTE}", file=sys.stderr)
        return data.decode("utf-8", "replace")


def read_line(stream=None) -> str:
    """One line of standard input as text ("" at end of input); invalid UTF-8
    is replaced (with a note on stderr), so a chat session goes on."""
    stream = stream if stream is not None else sys.stdin
    buf = getattr(stream, "buffer", None)
    if buf is None:  # a text stream without bytes underneath (tests, IDEs)
        return stream.readline()
    raw = buf.readline()
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        print(f"cism: warning: the input {REPLACED_NOTE}", file=sys.stderr)
        return raw.decode("utf-8", "replace")


class PrefillProgress:
    """on_prefill(done, total) for cism.generate.Generation: a line updated in
    place on a terminal; on other stderr only for prompts of at least
    PROGRESS_MIN_TOKENS tokens, and at most about ten lines."""

    def __init__(self, stream: Optional[TextIO] = None):
        self.stream = stream if stream is not None else sys.stderr
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self._last = 0

    def __call__(self, done: int, total: int) -> None:
        if not self.tty and total < PROGRESS_MIN_TOKENS:
            return
        if self.tty:
            self.stream.write(f"\rcism: prompt {done}/{total} tokens" + ("\n" if done >= total else ""))
        elif done >= total or done - self._last >= total / 10:
            self.stream.write(f"cism: prompt {done}/{total} tokens\n")
            self._last = done
        self.stream.flush()


def _rate(n: int, seconds: float) -> str:
    return f"{n / seconds:.1f} t/s" if seconds > 0 and n > 0 else "- t/s"


def timings(load_seconds: float, gen) -> str:
    """One line like llama.cpp's timings: load time, prompt tokens and their
    rate, generated tokens and their rate, and the stop reason."""
    n_p, n_g = len(gen.prompt_tokens), len(gen.tokens)
    why = gen.stop_reason or "-"
    if gen.stop_reason == "length":
        why = "length (context full)" if getattr(gen, "context_full", False) else "length (-n reached)"
    return (f"cism: load {load_seconds * 1e3:.1f} ms | prompt {n_p} tokens, {gen.prompt_seconds * 1e3:.1f} ms "
            f"({_rate(n_p, gen.prompt_seconds)}) | generated {n_g} tokens, {gen.gen_seconds * 1e3:.1f} ms "
            f"({_rate(n_g, gen.gen_seconds)}) | stop: {why}")


class _Format(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        msg = record.getMessage()
        if record.levelno >= logging.ERROR:
            return f"cism: error: {msg}"
        return f"cism: warning: {msg}" if record.levelno >= logging.WARNING else f"cism: {msg}"


class _Stderr(logging.StreamHandler):
    """Writes to whatever sys.stderr is when a message arrives."""

    @property
    def stream(self):  # type: ignore[override]
        return sys.stderr

    @stream.setter
    def stream(self, _value) -> None:
        pass


def log_to_stderr(level: int) -> None:
    """Messages of the `cism` logger (the C library's, through cism.log) at
    `level` and above go to stderr as "cism: warning: ..." lines."""
    logger = logging.getLogger("cism")
    if not any(getattr(h, "_cism_cli", False) for h in logger.handlers):
        h = _Stderr()
        h.setFormatter(_Format())
        h._cism_cli = True  # type: ignore[attr-defined]
        logger.addHandler(h)
        logger.propagate = False
    logger.setLevel(level)
