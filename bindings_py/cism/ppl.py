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

Command line: `cism ppl --model M.cism --file TEXT [--ctx N] [--method full|half]`.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import List, Optional, Sequence

import numpy as np

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


def tokenize(model_path: str, text: str) -> List[int]:
    """The text's tokens with the tokenizer stored in the model (no special tokens)."""
    from .model import Model
    with Model(model_path) as m:
        return list(m.tokenizer.encode(text, add_bos=False))


def _log_softmax_at(logits: np.ndarray, targets: np.ndarray) -> np.ndarray:
    z = logits.astype(np.float64)
    mx = z.max(axis=1, keepdims=True)
    lse = mx[:, 0] + np.log(np.exp(z - mx).sum(axis=1))
    return z[np.arange(len(targets)), targets] - lse


def perplexity(model: str, *, text: Optional[str] = None, tokens: Optional[Sequence[int]] = None,
               ctx: int = 0, method: str = "full", n_threads: int = 0, act_quant: Optional[bool] = None,
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
    from .model import Model
    from .session import Session
    with Model(model) as m:
        bos = m.bos_id
        if ctx <= 0:
            ctx = m.context_length
        if bos < 0:
            raise ValueError("the model has no BOS token; both methods start windows with BOS")
        if ctx < 4:
            raise ValueError("ctx must be at least 4")
        windows = []  # (input tokens, first scored row, targets)
        if method == "full":
            w = ctx - 1
            for s in range(0, len(toks), w):
                win = toks[s:s + w]
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
        with Session(m, n_ctx=ctx, n_batch=ctx, n_threads=n_threads, kv_type="f16" if kv_f16 else "f32",
                     logits_all=True, act_quant=act_quant) as sess:
            for inp, first, targets in windows:
                sess.reset()
                sess.eval(inp)
                rows = sess.all_logits()[first:first + len(targets)]
                nll_sum -= float(_log_softmax_at(rows, np.asarray(targets, dtype=np.int64)).sum())
                n_scored += len(targets)
    if n_scored == 0:
        raise ValueError(f"the text has too few tokens ({len(toks)}) for one window of {ctx}")
    nll = nll_sum / n_scored
    return PplResult(math.exp(nll), nll, n_scored, len(toks), len(windows), ctx, method, time.time() - t0)
