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

`kl_divergence(model, base, ...)` evaluates the same windows in a second
(base) model too and reports KLD(base || model) of the next-token
distributions over the scored positions, as llama.cpp's `perplexity
--kl-divergence` does, besides both perplexities.

Command line: `cism ppl --model M.cism --file TEXT [--ctx N] [--method full|half] [--kld-base BASE.cism]`.
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


def _fits(ctx: int, m) -> None:
    """Windows no longer than the positions the model was made for (its logits past them mean
    nothing, and the scored rows' logits alone would take ctx x vocabulary floats)."""
    if ctx > m.context_length:
        raise ValueError(f"ctx {ctx} is longer than {m.path}'s context length ({m.context_length} tokens): "
                         "give a shorter one (0: the model's own)")


def _windows(toks: np.ndarray, bos: int, ctx: int, method: str, max_windows: int):
    """[(input tokens, first scored row, targets)] of `method` over the token stream."""
    if bos < 0:
        raise ValueError("the model has no BOS token; both methods start windows with BOS")
    if ctx < 4:
        raise ValueError("ctx must be at least 4")
    windows = []
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
    return windows


def perplexity(model: str, *, text: Optional[str] = None, tokens: Optional[Sequence[int]] = None,
               ctx: int = 0, method: str = "full", n_threads: int = 0, act_quant: Optional[bool] = None,
               max_windows: int = 0, kv_f16: bool = False, kv_type: Optional[str] = None,
               kv_rotate: Optional[bool] = None, act_outliers: Optional[bool] = None) -> PplResult:
    """Perplexity of `model` (.cism path) on `text` (or pre-tokenized `tokens`).
    ctx 0 = the model's context length. max_windows > 0 stops after that many windows.
    The session's KV cache is f32 unless kv_type ("f16", "q8", "q4", ...) or
    kv_f16 says otherwise; act_quant, act_outliers and kv_rotate as in Session."""
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
        if ctx <= 0:
            ctx = m.context_length
        _fits(ctx, m)
        windows = _windows(toks, m.bos_id, ctx, method, max_windows)
        nll_sum, n_scored = 0.0, 0
        with Session(m, n_ctx=ctx, n_batch=ctx, n_threads=n_threads, kv_type=kv_type or ("f16" if kv_f16 else "f32"),
                     logits_all=True, act_quant=act_quant, act_outliers=act_outliers, kv_rotate=kv_rotate) as sess:
            for inp, first, targets in windows:
                sess.reset()
                sess.eval(inp)
                rows = sess.all_logits_view()[first:first + len(targets)]   # no copy of the whole window
                nll_sum -= float(_log_softmax_at(rows, np.asarray(targets, dtype=np.int64)).sum())
                n_scored += len(targets)
    if n_scored == 0:
        raise ValueError(f"the text has too few tokens ({len(toks)}) for one window of {ctx}")
    nll = nll_sum / n_scored
    return PplResult(math.exp(nll), nll, n_scored, len(toks), len(windows), ctx, method, time.time() - t0)


# ---- KL divergence against a base model -----------------------------------------
@dataclass
class KldResult:
    """KL divergence KLD(base || model) of the next-token distributions over the
    scored positions of `method` (the same tokens and windows in both models),
    in nats, with both perplexities. Standard errors are those of the mean over
    positions (they treat positions as independent, as llama.cpp does)."""
    model: PplResult
    base: PplResult
    kld_mean: float
    kld_stderr: float
    kld_median: float
    kld_p90: float
    kld_p99: float
    kld_max: float
    same_top: float          # fraction of positions where both models' most likely token is the same
    same_top_stderr: float
    rms_dp: float            # root mean square of p_model(target) - p_base(target)
    kld: np.ndarray          # per scored position, float64

    @property
    def ln_ppl_ratio(self) -> float:
        """ln(PPL(model) / PPL(base)) = mean NLL difference."""
        return self.model.nll - self.base.nll

    def describe(self) -> str:
        m, b = self.model, self.base
        return (f"method {m.method} (ctx {m.ctx}): {METHODS[m.method]}\n"
                f"{m.n_tokens} tokens, {m.n_windows} windows, {m.n_scored} scored\n"
                f"model: mean NLL {m.nll:.6f} nats/token, PPL {m.ppl:.4f}\n"
                f"base:  mean NLL {b.nll:.6f} nats/token, PPL {b.ppl:.4f}\n"
                f"ln(PPL(model)/PPL(base)) {self.ln_ppl_ratio:+.6f}\n"
                f"KLD(base || model), nats: mean {self.kld_mean:.6f} +/- {self.kld_stderr:.6f}, "
                f"median {self.kld_median:.6f}, 90% {self.kld_p90:.6f}, 99% {self.kld_p99:.6f}, "
                f"max {self.kld_max:.6f}\n"
                f"same top token: {100 * self.same_top:.3f} +/- {100 * self.same_top_stderr:.3f} %\n"
                f"RMS dp (p of the next token, model - base): {100 * self.rms_dp:.3f} %")


def kld_rows(logits_model: np.ndarray, logits_base: np.ndarray, targets: np.ndarray):
    """Per row of two [rows, vocab] float32 logit arrays, in float64:
    (KLD(base || model), log p_model(target), log p_base(target), same argmax).
    With L = log sum exp z (maximum subtracted before exp) and p_base =
    exp(z_base - L_base), KLD = sum_v p_base(v) (z_base(v) - z_model(v)) - (L_base - L_model),
    which is sum_v p_base (log p_base - log p_model) since p_base sums to 1."""
    zm, zb = logits_model.astype(np.float64), logits_base.astype(np.float64)
    idx, t = np.arange(len(targets)), np.asarray(targets, dtype=np.int64)
    same = zm.argmax(axis=1) == zb.argmax(axis=1)
    mm, mb = zm.max(axis=1, keepdims=True), zb.max(axis=1, keepdims=True)
    lse_m = (mm + np.log(np.exp(zm - mm).sum(axis=1, keepdims=True)))[:, 0]
    pb = np.exp(zb - mb)
    sb = pb.sum(axis=1, keepdims=True)
    lse_b = (mb + np.log(sb))[:, 0]
    pb /= sb
    lpm, lpb = zm[idx, t] - lse_m, zb[idx, t] - lse_b
    zb -= zm
    kld = np.einsum("ij,ij->i", pb, zb) - (lse_b - lse_m)
    return kld, lpm, lpb, same


def kl_divergence(model, base, *, text: Optional[str] = None, tokens: Optional[Sequence[int]] = None,
                  ctx: int = 0, method: str = "full", n_threads: int = 0, act_quant: Optional[bool] = None,
                  base_act_quant: Optional[bool] = None, max_windows: int = 0, kv_f16: bool = False,
                  act_outliers: Optional[bool] = None, kv_type: Optional[str] = None,
                  kv_rotate: Optional[bool] = None, base_kv_type: str = "f32") -> KldResult:
    """KLD(base || model) of the next-token distributions of `model` against
    `base` (.cism paths or open cism.Model objects), like llama.cpp's
    `perplexity --kl-divergence`: the same tokens and windows (`method`, `ctx`
    as in perplexity(); ctx 0 = the smaller context length of the two) are
    evaluated in both models, window by window (only one window's logits of
    each are held), and every scored position contributes
    sum_v p_base(v) (log p_base(v) - log p_model(v)), computed in float64.

    The base must have the same vocabulary size and tokenize the text to the
    same ids (refused with a ValueError otherwise). `act_quant`,
    `act_outliers`, `kv_type` (default f32, or f16 with kv_f16) and `kv_rotate`
    apply to the model, `base_act_quant` and `base_kv_type` (default f32) to the
    base: the same model file with kv_type "q4" against base_kv_type "f16"
    measures what a quantized KV cache costs (docs/KV_CACHE.md)."""
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r} (full or half)")
    if tokens is None and text is None:
        raise ValueError("give text or tokens")
    t0 = time.time()
    from .model import Model
    from .session import Session
    own: List[Model] = []   # the models opened here (closed at the end)

    def opened(m) -> Model:
        if isinstance(m, Model):
            return m
        own.append(Model(m))
        return own[-1]

    try:
        mm, bm = opened(model), opened(base)
        if mm.vocab_size != bm.vocab_size:
            raise ValueError(f"cannot compare {mm.path} with base {bm.path}: their vocabularies differ "
                             f"({mm.vocab_size} and {bm.vocab_size} tokens); KL divergence needs the same tokenizer")
        if mm.bos_id != bm.bos_id:
            raise ValueError(f"cannot compare {mm.path} with base {bm.path}: their BOS tokens differ "
                             f"({mm.bos_id} and {bm.bos_id}); KL divergence needs the same tokenizer")
        if tokens is None:
            toks_m = mm.tokenizer.encode(text, add_bos=False)
            toks_b = bm.tokenizer.encode(text, add_bos=False)
            if list(toks_m) != list(toks_b):
                i = next((k for k, (x, y) in enumerate(zip(toks_m, toks_b)) if x != y), min(len(toks_m), len(toks_b)))
                raise ValueError(f"cannot compare {mm.path} with base {bm.path}: their tokenizers split the text "
                                 f"differently ({len(toks_m)} and {len(toks_b)} tokens, first difference at token "
                                 f"{i}); KL divergence needs the same tokenizer")
            tokens = toks_m
        toks = np.asarray(tokens, dtype=np.int32)
        if ctx <= 0:
            ctx = min(mm.context_length, bm.context_length)
        _fits(ctx, mm)
        _fits(ctx, bm)
        windows = _windows(toks, mm.bos_id, ctx, method, max_windows)
        vocab = mm.vocab_size
        chunk = max(1, (1 << 21) // vocab)   # rows per float64 step: a few MB per array
        kld_parts, same_parts, dp_parts = [], [], []
        nll_m = nll_b = 0.0
        kv = kv_type or ("f16" if kv_f16 else "f32")
        with Session(mm, n_ctx=ctx, n_batch=ctx, n_threads=n_threads, kv_type=kv, logits_all=True,
                     act_quant=act_quant, act_outliers=act_outliers, kv_rotate=kv_rotate) as sm, \
                Session(bm, n_ctx=ctx, n_batch=ctx, n_threads=n_threads, kv_type=base_kv_type, logits_all=True,
                        act_quant=base_act_quant) as sb:  # the reference keeps an f32 cache unless base_kv_type
            for inp, first, targets in windows:
                for s in (sm, sb):
                    s.reset()
                    s.eval(inp)
                rows_m, rows_b = sm.all_logits_view(), sb.all_logits_view()
                for a in range(0, len(targets), chunk):
                    r = slice(first + a, first + min(a + chunk, len(targets)))
                    k, lpm, lpb, same = kld_rows(rows_m[r], rows_b[r], targets[a:a + chunk])
                    kld_parts.append(k)
                    same_parts.append(same)
                    dp_parts.append(np.exp(lpm) - np.exp(lpb))
                    nll_m -= float(lpm.sum())
                    nll_b -= float(lpb.sum())
                del rows_m, rows_b
    finally:
        for m_ in own:
            m_.close()
    n = sum(len(k) for k in kld_parts)
    if n == 0:
        raise ValueError(f"the text has too few tokens ({len(toks)}) for one window of {ctx}")
    kld = np.concatenate(kld_parts)
    same = np.concatenate(same_parts).astype(np.float64)
    dp = np.concatenate(dp_parts)
    secs = time.time() - t0
    pm = PplResult(math.exp(nll_m / n), nll_m / n, n, len(toks), len(windows), ctx, method, secs)
    pb = PplResult(math.exp(nll_b / n), nll_b / n, n, len(toks), len(windows), ctx, method, secs)
    se = float(kld.std(ddof=1) / math.sqrt(n)) if n > 1 else float("nan")
    top = float(same.mean())
    top_se = math.sqrt(top * (1 - top) / (n - 1)) if n > 1 else float("nan")
    q50, q90, q99 = np.quantile(kld, [0.5, 0.9, 0.99])
    return KldResult(pm, pb, float(kld.mean()), se, float(q50), float(q90), float(q99), float(kld.max()),
                     top, top_se, float(np.sqrt(np.mean(dp * dp))), kld)
