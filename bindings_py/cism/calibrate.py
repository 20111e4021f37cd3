"""Calibration for quantization (docs/QUANTIZATION.md, "Calibration").

The statistics are gathered by libcism's forward pass (CISM_PARAM_ACT_STATS):
for every weight matrix, the blocks of G x G columns along the diagonal of
its inputs' second-moment matrix E[x x^T], on calibration tokens that are
either

- ``auto``: text the model writes itself: sequences sampled from BOS
  (temperature 1, no truncation, seeded, end-of-text tokens ignored); the
  statistics are summed while it generates, or
- a text file: its tokens cut into windows of [BOS] + up to length-1 tokens.

The quantizer (cism_quantize_gram) then rounds each matrix so that its error
on those inputs is small (GPTQ within the blocks), not just its weights' error.
"""
from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass, field
from typing import Dict, List, Optional

import numpy as np

GRAM_BLOCK = 256        # columns per block of the Gram matrix (a multiple of every 4-bit format's block)
DEFAULT_TOKENS = 4096   # calibration tokens: 16 sequences of 256 (docs/QUANTIZATION.md)
# a tied embedding's lookup error against its head error (0.075 .. 0.75 measured alike; 0 is 1 point worse)
TIED_LOOKUP_WEIGHT = 0.25
SEQUENCE = 256          # tokens per sequence or window (at most the model's context)


@dataclass
class Calibration:
    description: str                 # what the statistics come from (written to the file's metadata)
    n_tokens: int                    # tokens that went through the layers
    gram_block: int
    grams: Dict[str, np.ndarray] = field(default_factory=dict)  # matrix name -> [n_blocks, G, G], mean over rows
    seconds: float = 0.0

    def gram_for(self, name: str) -> Optional[np.ndarray]:
        """The statistics of a matrix's inputs; None for a matrix that has none
        (an untied token embedding is only looked up)."""
        return self.grams.get(name)


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


def _collect(session, names: List[str]) -> Dict[str, np.ndarray]:
    from .errors import CismError
    out: Dict[str, np.ndarray] = {}
    by_input: Dict[str, np.ndarray] = {}
    for n in names:
        key = _input_of(n)
        if key not in by_input:
            try:
                blocks, rows = session.act_gram(n)
            except CismError:  # not multiplied: the embedding of an untied model
                continue
            by_input[key] = blocks / max(rows, 1)
        out[n] = by_input[key]
    return out


def calibrate(model_path: str, source: str, *, n_tokens: int = DEFAULT_TOKENS, length: int = SEQUENCE, seed: int = 0,
              gram_block: int = GRAM_BLOCK, n_threads: int = 0) -> Calibration:
    """Statistics of the (unquantized) model at `model_path` on `source`:
    "auto" or the path of a text file. n_tokens: about how many tokens."""
    from .model import Model
    from .sampler import Sampler
    from .session import Session
    t0 = time.time()
    names = _matrix_names(model_path)
    with Model(model_path) as m:
        L = max(2, min(length, m.context_length))
        bos = m.bos_id
        if bos < 0:
            raise ValueError("calibration starts every sequence with BOS, and this model has none")
        if source == "auto":
            n_seq = max(1, math.ceil(n_tokens / L))
            with Session(m, n_ctx=L, n_threads=n_threads, kv_type="f32", act_stats=gram_block) as s:
                for i in range(n_seq):
                    s.reset()
                    s.generate_ids([bos], L - 1, Sampler(temperature=1.0, seed=seed + i), ignore_eos=True)
                rows = s.act_stats("blk.0.attn_q")[1]
                grams = _collect(s, names)
            _tied_embedding(grams, names, m.dim)
            desc = (f"auto: {n_seq} sequences of {L} tokens sampled from BOS by the model itself "
                    f"(temperature 1, seeds {seed}..{seed + n_seq - 1})")
        else:
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
            windows = [[bos] + toks[i:i + L - 1] for i in range(0, len(toks), L - 1)]
            with Session(m, n_ctx=L, n_batch=L, n_threads=n_threads, kv_type="f32", logits_all=True,
                         act_stats=gram_block) as s:
                for w in windows:
                    s.reset()
                    s.eval(w)
                rows = s.act_stats("blk.0.attn_q")[1]
                grams = _collect(s, names)
            _tied_embedding(grams, names, m.dim)
            desc = (f"file {os.path.basename(source)}: its first {len(toks)} tokens in {len(windows)} windows of "
                    f"[BOS] + up to {L - 1}")
    return Calibration(desc, int(rows), gram_block, grams, time.time() - t0)
