"""Perplexity of a .cism model on a text: teacher-forced negative log-likelihood.

Two methods, both over fixed windows of the token stream (the whole file is
tokenized once with the model's tokenizer.json, without special tokens):

``full``  (the method of shared/models/eval/README.md, used for the reference
          perplexities computed with transformers): consecutive
          non-overlapping windows of ctx-1 tokens; each is evaluated as
          [BOS] + window in a fresh context and every token of the window is
          scored (BOS is not). A shorter last window is scored too.
``half``  (llama.cpp's `perplexity` tool): the stream is [BOS] + tokens, cut
          into consecutive windows of ctx tokens (a shorter remainder is
          dropped); the first token of each window is replaced by BOS, the
          window is evaluated in a fresh context and only its second half is
          scored: the predictions made at positions ctx/2 .. ctx-2.

PPL = exp(mean NLL over the scored tokens), NLL in nats, computed in float64
from the model's float32 logits.

Command line::

    python -m cism.ppl --model M.cism --file TEXT [--ctx N] [--method full|half]
"""
from __future__ import annotations

import argparse
import ctypes
import math
import sys
import time
from dataclasses import dataclass
from typing import List, Optional, Sequence

import numpy as np

from . import _native as N

PARAM_N_THREADS, PARAM_N_CTX, PARAM_KV_TYPE, PARAM_N_BATCH, PARAM_LOGITS_ALL = 0, 1, 2, 4, 5
PARAM_ACT_QUANT = 7
INFO_VOCAB, INFO_CTX, INFO_BOS, INFO_N_PARAMS, INFO_WEIGHT_BYTES = 0, 7, 8, 12, 13

METHODS = {
    "full": "windows of ctx-1 tokens, each evaluated as [BOS]+window from an empty context, "
            "every window token scored (shared/models/eval/README.md)",
    "half": "[BOS]+tokens cut into windows of ctx tokens, first token of each replaced by BOS, "
            "evaluated from an empty context, second half of each window scored (llama.cpp perplexity)",
}


@dataclass
class PplResult:
    ppl: float
    nll: float              # mean negative log-likelihood, nats per scored token
    n_scored: int
    n_tokens: int           # tokens in the text
    n_windows: int
    ctx: int
    method: str
    seconds: float

    def describe(self) -> str:
        return (f"method {self.method} (ctx {self.ctx}): {METHODS[self.method]}\n"
                f"{self.n_tokens} tokens, {self.n_windows} windows, {self.n_scored} scored: "
                f"mean NLL {self.nll:.6f} nats/token, PPL {self.ppl:.4f}")


class _Model:
    def __init__(self, path: str):
        self.L = N.lib()
        self.h = ctypes.c_void_p()
        N.check(self.L.cism_model_load(path.encode(), None, ctypes.byref(self.h)))

    def info(self, key: int) -> int:
        v = ctypes.c_int64()
        N.check(self.L.cism_model_get_info(self.h, key, ctypes.byref(v)))
        return v.value

    def meta_bytes(self, key: str) -> Optional[bytes]:
        p, n = ctypes.c_void_p(), ctypes.c_int64()
        if self.L.cism_model_meta_bytes(self.h, key.encode(), ctypes.byref(p), ctypes.byref(n)) != 0:
            return None
        return ctypes.string_at(p, n.value)

    def close(self) -> None:
        if self.h:
            self.L.cism_model_free(self.h)
            self.h = ctypes.c_void_p()


def tokenize(model_path: str, text: str) -> List[int]:
    """The text's tokens with the tokenizer stored in the model (no special tokens)."""
    from tokenizers import Tokenizer
    m = _Model(model_path)
    try:
        tj = m.meta_bytes("tokenizer.hf_json")
    finally:
        m.close()
    if tj is None:
        raise ValueError(f"{model_path} holds no tokenizer (tokenizer.hf_json)")
    return Tokenizer.from_str(tj.decode("utf-8")).encode(text, add_special_tokens=False).ids


def _log_softmax_at(logits: np.ndarray, targets: np.ndarray) -> np.ndarray:
    z = logits.astype(np.float64)
    mx = z.max(axis=1, keepdims=True)
    lse = mx[:, 0] + np.log(np.exp(z - mx).sum(axis=1))
    return z[np.arange(len(targets)), targets] - lse


def perplexity(model: str, *, text: Optional[str] = None, tokens: Optional[Sequence[int]] = None,
               ctx: int = 0, method: str = "full", n_threads: int = 0, act_quant: bool = False,
               max_windows: int = 0, kv_f16: bool = False) -> PplResult:
    """Perplexity of `model` (.cism path) on `text` (or pre-tokenized `tokens`).
    ctx 0 = the model's context length. max_windows > 0 stops after that many windows."""
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r} (full or half)")
    if tokens is None:
        if text is None:
            raise ValueError("give text or tokens")
        tokens = tokenize(model, text)
    toks = np.asarray(tokens, dtype=np.int32)
    t0 = time.time()
    m = _Model(model)
    L = m.L
    params = ctypes.c_void_p()
    sess = ctypes.c_void_p()
    try:
        vocab, bos = m.info(INFO_VOCAB), m.info(INFO_BOS)
        if ctx <= 0:
            ctx = m.info(INFO_CTX)
        if bos < 0:
            raise ValueError("the model has no BOS token; both methods start windows with BOS")
        if ctx < 4:
            raise ValueError("ctx must be at least 4")
        N.check(L.cism_params_create(ctypes.byref(params)))
        N.check(L.cism_params_set_int(params, PARAM_N_CTX, ctx))
        N.check(L.cism_params_set_int(params, PARAM_N_BATCH, ctx))
        N.check(L.cism_params_set_int(params, PARAM_LOGITS_ALL, 1))
        N.check(L.cism_params_set_int(params, PARAM_KV_TYPE, 1 if kv_f16 else 0))
        N.check(L.cism_params_set_int(params, PARAM_N_THREADS, n_threads))
        if act_quant:
            N.check(L.cism_params_set_int(params, PARAM_ACT_QUANT, 1))
        N.check(L.cism_session_create(m.h, params, ctypes.byref(sess)))
        windows = []  # (input tokens, first scored row, targets)
        if method == "full":
            w = ctx - 1
            for s in range(0, len(toks), w):
                win = toks[s:s + w]
                if len(win) == 0:
                    break
                windows.append((np.concatenate([[bos], win]).astype(np.int32), 0, win))
        else:
            stream = np.concatenate([[bos], toks]).astype(np.int32)
            first = ctx // 2
            for i in range(len(stream) // ctx):
                win = stream[i * ctx:(i + 1) * ctx].copy()
                win[0] = bos
                windows.append((win, first, win[first + 1:]))
        if max_windows > 0:
            windows = windows[:max_windows]
        nll_sum, n_scored = 0.0, 0
        lp = ctypes.POINTER(ctypes.c_float)()
        nv = ctypes.c_int32()
        for inp, first, targets in windows:
            N.check(L.cism_session_reset(sess))
            arr = (ctypes.c_int32 * len(inp)).from_buffer_copy(inp.tobytes())
            N.check(L.cism_session_eval(sess, arr, len(inp)))
            rows = np.empty((len(targets), vocab), dtype=np.float32)
            for j in range(len(targets)):
                N.check(L.cism_session_logits(sess, first + j, ctypes.byref(lp), ctypes.byref(nv)))
                rows[j] = np.ctypeslib.as_array(lp, shape=(vocab,))
            nll_sum -= float(_log_softmax_at(rows, np.asarray(targets, dtype=np.int64)).sum())
            n_scored += len(targets)
    finally:
        if sess:
            L.cism_session_free(sess)
        if params:
            L.cism_params_free(params)
        m.close()
    if n_scored == 0:
        raise ValueError(f"the text has too few tokens ({len(toks)}) for one window of {ctx}")
    nll = nll_sum / n_scored
    return PplResult(math.exp(nll), nll, n_scored, len(toks), len(windows), ctx, method, time.time() - t0)


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="cism ppl", description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", "-m", required=True)
    ap.add_argument("--file", "-f", required=True, help="UTF-8 text")
    ap.add_argument("--ctx", type=int, default=0, help="window length (default: the model's context length)")
    ap.add_argument("--method", choices=sorted(METHODS), default="full")
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--act-quant", action="store_true", help="int8 activations (CISM_PARAM_ACT_QUANT)")
    ap.add_argument("--max-windows", type=int, default=0)
    a = ap.parse_args(argv)
    with open(a.file, encoding="utf-8") as f:
        text = f.read()
    r = perplexity(a.model, text=text, ctx=a.ctx, method=a.method, n_threads=a.threads,
                   act_quant=a.act_quant, max_windows=a.max_windows)
    print(r.describe())
    print(f"PPL {r.ppl:.4f}  ({r.seconds:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
