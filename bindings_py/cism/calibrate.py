"""Calibration for quantization (docs/QUANTIZATION.md, "Calibrated rounding").

The statistics are gathered by libcism's forward pass (CISM_PARAM_ACT_STATS)
on calibration tokens that are either

- ``auto``: text the model writes itself: sequences sampled from BOS
  (temperature 1, no truncation, seeded, end-of-text tokens ignored), all of
  them decoded together through one cism.Batch (each weight read once per step
  for every sequence), then each sequence prefilled once through the model
  whose statistics are taken, or
- a text file: its tokens cut into windows of [BOS] + up to length-1 tokens.

Two ways to round with them (``method``):

- ``gptq``: for every weight matrix the blocks of G x G columns along the
  diagonal of its inputs' second-moment matrix E[x x^T]; cism_quantize_gram
  rounds each matrix so that its error on those inputs is small (GPTQ within
  the blocks), not just its weights' error;
- ``imatrix``: only the diagonal, E[x_c^2] per column (llama.cpp's imatrix):
  the per-column importance of cism_quantize's scale search.
"""
from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence

import numpy as np

GRAM_BLOCK = 256        # columns per block of the Gram matrix (a multiple of every 4-bit format's block)
DEFAULT_TOKENS = 4096   # calibration tokens: 16 sequences of 256 (docs/QUANTIZATION.md)
# a tied embedding's lookup error against its head error (0.075 .. 0.75 measured alike; 0 is 1 point worse)
TIED_LOOKUP_WEIGHT = 0.25
SEQUENCE = 256          # tokens per sequence or window (at most the model's context)
BATCH = 16              # "auto": sequences decoded together (one cism.Batch step per token)
METHODS = ("gptq", "imatrix")
KEY_OFFSET_WINDOW = 2048  # positions the key offsets are averaged over (docs/KV_CACHE.md, "Key offsets")
# the weight of the error along the queries' main direction against the isotropic rest, in a q4a key's
# rounding (docs/KV_CACHE.md, "Query directions": 1 is the expected score error; 0.1 measured best)
QDIR_WEIGHT = 0.1
DEFAULT_METHOD = "gptq"  # chosen by measurement (docs/QUANTIZATION.md, "Calibrated rounding")


class NoBOSError(ValueError):
    """The model has no BOS token, which every calibration sequence starts with."""


@dataclass
class Calibration:
    description: str                 # what the statistics come from (written to the file's metadata)
    n_tokens: int                    # tokens that went through the layers
    gram_block: int
    grams: Dict[str, np.ndarray] = field(default_factory=dict)  # matrix name -> [n_blocks, G, G], mean over rows
    seconds: float = 0.0
    method: str = "gptq"             # "gptq" (grams) or "imatrix" (importance)
    importance: Dict[str, np.ndarray] = field(default_factory=dict)  # matrix name -> [cols], mean of x_c^2
    sample_seconds: float = 0.0      # "auto": generating the calibration text
    stats_seconds: float = 0.0       # the statistics pass
    # per attention layer, "blk.N.attn_k_offset" and "blk.N.attn_k_qdir" -> [n_kv_heads * head_dim] float32:
    # the mean key after RoPE and the queries' main direction (docs/KV_CACHE.md, "Key offsets", "Query
    # directions"), written to the file for a quantized K cache
    kv_tensors: Dict[str, np.ndarray] = field(default_factory=dict)

    def gram_for(self, name: str) -> Optional[np.ndarray]:
        """The statistics of a matrix's inputs (method "gptq"); None for a matrix
        that has none (an untied token embedding is only looked up)."""
        return self.grams.get(name)

    def importance_for(self, name: str) -> Optional[np.ndarray]:
        """Per-column importance of a matrix's scale search (method "imatrix")."""
        return self.importance.get(name)

    def rounding(self) -> str:
        """What the quantizer does with these statistics (the file's general.quantization.rounding)."""
        if self.method == "imatrix":
            return ("imatrix (2- to 6-bit matrices): scale search per block weighted by the mean square of each input "
                    "column")
        return (f"gptq (2- to 6-bit matrices): errors compensated within blocks of {self.gram_block} columns from the "
                f"inputs' second moments, act order, damping 0.01")


def _matrix_names(path: str) -> List[str]:
    from . import format as fmt
    return [n for n, t in fmt.CismFile(path).tensors.items() if len(t.shape) == 2]


def _input_of(name: str) -> str:
    """Matrices that read the same input (Q/K/V, gate/up) share their statistics."""
    for suffix, key in ((".attn_q", ".attn_in"), (".attn_k", ".attn_in"), (".attn_v", ".attn_in"),
                        (".attn_gate", ".attn_in"), (".ssm_qkv", ".attn_in"), (".ssm_z", ".attn_in"),
                        (".ssm_beta", ".attn_in"), (".ssm_alpha", ".attn_in"),
                        (".ffn_gate", ".ffn_in"), (".ffn_up", ".ffn_in")):
        if name.endswith(suffix):
            return name[:-len(suffix)] + key
    return "head" if name in ("token_embd", "output") else name


def _tied_embedding(grams: Dict[str, np.ndarray], names: List[str], dim: int) -> None:
    """A tied embedding is both the output head and the token lookup table. Its
    rounding minimizes the head's output error (the Gram blocks of the final
    norm's output) plus TIED_LOOKUP_WEIGHT times the lookup's plain squared
    error: that times the mean of the Gram diagonal is added to the diagonal
    (docs/QUANTIZATION.md: stories260K +3.5% instead of +4.5%)."""
    g = grams.get("token_embd")
    if g is None or "output" in names:
        return
    g = g.copy()
    G = g.shape[1]
    cols = np.arange(dim)
    lam = TIED_LOOKUP_WEIGHT * float(np.mean(g[cols // G, cols % G, cols % G]))
    g[cols // G, cols % G, cols % G] += lam
    grams["token_embd"] = g


def _collect(session, names: List[str], diag: bool = False) -> Dict[str, np.ndarray]:
    """Each matrix's input statistics, averaged over the rows seen: the Gram
    blocks (session.act_gram), or with diag the per-column mean squares
    (session.act_stats, for imatrix); matrices that read one input share it."""
    from .errors import CismError
    out: Dict[str, np.ndarray] = {}
    by_input: Dict[str, np.ndarray] = {}
    for n in names:
        key = _input_of(n)
        if key not in by_input:
            try:
                stats, rows = session.act_stats(n) if diag else session.act_gram(n)
            except CismError:  # not multiplied: the embedding of an untied model
                continue
            by_input[key] = (stats / max(rows, 1)).astype(np.float32) if diag else stats / max(rows, 1)
        out[n] = by_input[key]
    return out


def _tied_importance(imp: Dict[str, np.ndarray], names: List[str]) -> None:
    """The imatrix counterpart of _tied_embedding: the lookup's plain squared
    error adds TIED_LOOKUP_WEIGHT times the mean importance to every column."""
    v = imp.get("token_embd")
    if v is None or "output" in names:
        return
    imp["token_embd"] = v + TIED_LOOKUP_WEIGHT * float(np.mean(v))


def sample_sequences(model_path: str, n_seq: int, length: int, seed: int = 0, n_threads: int = 0,
                     batch: int = BATCH) -> List[List[int]]:
    """`n_seq` sequences of `length` tokens that the model at `model_path` writes
    itself: BOS, then length - 1 tokens sampled at temperature 1 (sequence i with
    seed `seed + i`, end-of-text ignored). Up to `batch` sequences are decoded
    together through one cism.Batch: the same logits bits as one session each
    (cism_batch), so the tokens depend on neither `batch` nor n_threads."""
    from .batch import Batch
    from .model import Model
    from .sampler import Sampler
    from .session import Session
    out: List[List[int]] = []
    with Model(model_path) as m:
        bos = m.bos_id
        if bos < 0:
            raise NoBOSError("calibration starts every sequence with BOS, and this model has none "
                             "(convert with --no-calibrate)")
        L = max(2, min(length, m.context_length))
        for first in range(0, n_seq, batch):
            idx = list(range(first, min(n_seq, first + batch)))
            sessions = [Session(m, n_ctx=L, n_threads=1, kv_type="f32") for _ in idx]
            samplers = [Sampler(temperature=1.0, seed=seed + i) for i in idx]
            seqs = [[bos] for _ in idx]
            try:
                for smp in samplers:
                    smp.accept(bos)
                with Batch(m, n_threads=n_threads, max_tokens=len(idx), n_ctx=L, kv_type="f32") as b:
                    for _ in range(L - 1):
                        errors = b.eval([(s, [q[-1]]) for s, q in zip(sessions, seqs)])
                        for e in errors:
                            if e is not None:
                                raise e
                        for s, smp, q in zip(sessions, samplers, seqs):
                            tok = smp.sample(s.logits_view())
                            smp.accept(tok)
                            q.append(tok)
            finally:
                for s in sessions:
                    s.close()
                for smp in samplers:
                    smp.close()
            out.extend(seqs)
    return out


def gather(model_path: str, windows: Sequence[Sequence[int]], *, method: str = DEFAULT_METHOD,
           gram_block: int = GRAM_BLOCK, n_threads: int = 0):
    """(statistics by matrix name, rows) of the model at `model_path` on token
    `windows` (each prefilled from an empty context, in order): Gram blocks
    ("gptq") or per-column mean squares ("imatrix"), tied embedding included."""
    from .model import Model
    from .session import Session
    if method not in METHODS:
        raise ValueError(f"unknown calibration method {method!r} (one of: {', '.join(METHODS)})")
    names = _matrix_names(model_path)
    L = max(len(w) for w in windows)
    with Model(model_path) as m:
        # logits_all: the output head multiplies every row, so its statistics see every position
        with Session(m, n_ctx=L, n_batch=L, n_threads=n_threads, kv_type="f32", logits_all=True,
                     act_stats=gram_block if method == "gptq" else 1) as s:
            for w in windows:
                s.reset()
                s.eval(list(w))
            probe = next(n for n in names if n.startswith("blk."))
            rows = s.act_stats(probe)[1]
            if method == "gptq":
                stats = _collect(s, names)
                _tied_embedding(stats, names, m.dim)
            else:
                stats = _collect(s, names, diag=True)
                _tied_importance(stats, names)
    return stats, int(rows)


def hadamard_frame(head_dim: int) -> np.ndarray:
    """The orthonormal rotation a rotated KV cache applies to each head
    (cism__kv_hadamard): Sylvester blocks of the largest power of two p that
    divides head_dim, scaled by 1/sqrt(p); H[i, j] maps element j to i."""
    p = 1
    while head_dim % (2 * p) == 0 and 2 * p <= head_dim:
        p *= 2
    i = np.arange(p)
    block = np.array([[(-1.0) ** bin(a & b).count("1") for b in i] for a in i]) / np.sqrt(p)
    return np.kron(np.eye(head_dim // p), block)


def query_direction(sums: np.ndarray, rows: int, n_heads: int, n_kv_heads: int, head_dim: int,
                    weight: float = QDIR_WEIGHT) -> np.ndarray:
    """[n_kv_heads * head_dim] float32: for each KV head, the main direction of
    the second moment of its query heads' means (rotated frame), scaled by
    sqrt(weight * eigenvalue / s2), s2 the per-element variance of the rest
    (the queries' spread plus the means' other directions). A q4a key rounded
    to keep its error small along it (kv_quant.h) errs less in q.k for the
    queries' mean part, which is most of it in the deeper layers."""
    H = hadamard_frame(head_dim)
    mu = sums[:n_heads * head_dim].reshape(n_heads, head_dim) / max(rows, 1)
    sq = sums[n_heads * head_dim:] / max(rows, 1)
    g = n_heads // n_kv_heads
    out = []
    for k in range(n_kv_heads):
        heads = range(k * g, (k + 1) * g)
        mus = np.array([H @ mu[h] for h in heads])
        M = mus.T @ mus / g
        w, V = np.linalg.eigh(M)
        spread = float(np.mean([sq[h] - mu[h] @ mu[h] for h in heads]))
        s2 = (max(spread, 0.0) + float(np.trace(M)) - w[-1]) / head_dim
        scale = np.sqrt(weight * max(w[-1], 0.0) / s2) if s2 > 0 else 0.0
        out.append(scale * V[:, -1])
    return np.concatenate(out).astype(np.float32)


def gather_kv_tensors(model_path: str, windows: Sequence[Sequence[int]], *, length: int = KEY_OFFSET_WINDOW,
                      n_threads: int = 0) -> Dict[str, np.ndarray]:
    """Every attention layer's KV-cache tensors (docs/KV_CACHE.md): its mean
    key after RoPE ("blk.N.attn_k_offset") and its queries' main direction
    ("blk.N.attn_k_qdir", query_direction), both [n_kv_heads * head_dim]
    float32, on the tokens of `windows` laid end to end and cut into windows
    of `length` (at most the model's context): a key's mean over positions
    depends on how far the positions reach (RoPE turns it), so they are taken
    over as long a context as the cache will hold, not over short sequences."""
    from .model import Model
    from .session import Session
    flat = [t for w in windows for t in w]
    out: Dict[str, np.ndarray] = {}
    with Model(model_path) as m:
        L = max(2, min(length, m.context_length))
        layers = sorted({int(n.split(".")[1]) for n in _matrix_names(model_path) if n.endswith(".attn_k")})
        # logits_all: the last layer computes the queries of every row (otherwise only those that make
        # logits); chunks of 128 rows bound the logits buffer
        with Session(m, n_ctx=L, n_batch=min(L, 128), n_threads=n_threads, kv_type="f32", logits_all=True,
                     act_stats=1) as s:
            for i in range(0, len(flat), L):
                s.reset()
                s.eval(flat[i:i + L])
            for l in layers:
                sums, n = s.key_sums(l)
                out[f"blk.{l}.attn_k_offset"] = (sums / max(n, 1)).astype(np.float32)
                qs, nq = s.query_sums(l)
                out[f"blk.{l}.attn_k_qdir"] = query_direction(qs, nq, m.n_heads, m.n_kv_heads, m.head_dim)
    return out


def calibrate(model_path: str, source: str, *, n_tokens: int = DEFAULT_TOKENS, length: int = SEQUENCE, seed: int = 0,
              gram_block: int = GRAM_BLOCK, n_threads: int = 0, method: str = DEFAULT_METHOD,
              sample_path: Optional[str] = None, sample_label: Optional[str] = None,
              kv_tensors_only: bool = False) -> Calibration:
    """Statistics of the model at `model_path` on `source`: "auto" or the path
    of a text file. n_tokens: about how many tokens. For "auto" the text is
    sampled from the model at `sample_path` (default: `model_path`; e.g. a q8
    copy, faster to decode) and the statistics are taken from `model_path`."""
    from .model import Model
    if method not in METHODS:
        raise ValueError(f"unknown calibration method {method!r} (one of: {', '.join(METHODS)})")
    t0 = time.time()
    with Model(model_path) as m:
        L = max(2, min(length, m.context_length))
        bos = m.bos_id
        if bos < 0:
            raise NoBOSError("calibration starts every sequence with BOS, and this model has none "
                             "(convert with --no-calibrate)")
        if source != "auto":
            if not os.path.isfile(source):
                raise FileNotFoundError(f"calibration text {source}: no such file (or use 'auto')")
            with open(source, encoding="utf-8") as f:
                text = f.read()
            try:
                tok = m.tokenizer
            except Exception as e:
                raise ValueError("calibration on a text file needs the model's tokenizer "
                                 "(llama2.c checkpoints: --tokenizer)") from e
            toks = tok.encode(text, add_bos=False)[:n_tokens]
            if not toks:
                raise ValueError(f"calibration text {source} has no tokens")
    if source == "auto":
        n_seq = max(1, math.ceil(n_tokens / L))
        windows = sample_sequences(sample_path or model_path, n_seq, L, seed, n_threads)
        by = sample_label or ("the model itself" if sample_path is None else os.path.basename(sample_path))
        desc = (f"auto: {n_seq} sequences of {L} tokens sampled from BOS by {by} "
                f"(temperature 1, seeds {seed}..{seed + n_seq - 1})")
    else:
        windows = [[bos] + toks[i:i + L - 1] for i in range(0, len(toks), L - 1)]
        desc = (f"file {os.path.basename(source)}: its first {len(toks)} tokens in {len(windows)} windows of "
                f"[BOS] + up to {L - 1}")
    t1 = time.time()
    if kv_tensors_only:  # a conversion that quantizes nothing uses no matrix statistics
        stats, rows = {}, sum(len(w) for w in windows)
    else:
        stats, rows = gather(model_path, windows, method=method, gram_block=gram_block, n_threads=n_threads)
    kv = gather_kv_tensors(model_path, windows, n_threads=n_threads)
    t2 = time.time()
    c = Calibration(desc, rows, gram_block, seconds=t2 - t0, method=method, sample_seconds=t1 - t0,
                    stats_seconds=t2 - t1, kv_tensors=kv)
    if method == "gptq":
        c.grams = stats
    else:
        c.importance = stats
    return c
