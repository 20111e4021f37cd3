"""From sampled tokens to the text a request returns: incremental detokenizing,
stop strings held back until decided, and log-probabilities.

The rules are those of cism.generate.Generation, so that a greedy request
returns exactly the text of the offline API: text that may be the start of a
stop string waits; a stop string ends the text before it (not included, and
nothing after it is flushed); an end-of-generation token is not decoded; at
the other ends the decoder is flushed.
"""
from __future__ import annotations

from typing import List, Sequence, Tuple

import numpy as np


class TextOutput:
    def __init__(self, tokenizer, prompt_ids: Sequence[int], stop: Sequence[str]):
        self._dec = tokenizer.incremental_decoder(list(prompt_ids))
        self._stop = [s for s in stop if s]
        self._held = ""

    def push(self, token: int) -> Tuple[str, str, bool]:
        """(the token's own text, text to send now, a stop string was reached)."""
        piece = self._dec.push(token)
        self._held += piece
        out, self._held, hit = self._split(self._held, final=False)
        return piece, out, hit

    def flush(self) -> Tuple[str, bool]:
        """At the end: the rest of the text (and whether it holds a stop string)."""
        self._held += self._dec.flush()
        out, self._held, hit = self._split(self._held, final=True)
        return out, hit

    def _split(self, buf: str, final: bool):
        """(text to emit, text to hold back, stop string found); as Generation._split_stop."""
        if not self._stop:
            return buf, "", False
        cut = min((i for i in (buf.find(x) for x in self._stop) if i >= 0), default=-1)
        if cut >= 0:
            return buf[:cut], "", True
        if final:
            return buf, "", False
        keep = 0  # the longest tail of buf that starts some stop string
        for x in self._stop:
            for k in range(min(len(x) - 1, len(buf)), keep, -1):
                if buf.endswith(x[:k]):
                    keep = k
                    break
        return buf[:len(buf) - keep], buf[len(buf) - keep:], False


def log_softmax(logits: np.ndarray) -> np.ndarray:
    """log p of every token from raw logits (float64; temperature and filters not applied)."""
    x = logits.astype(np.float64)
    m = float(x.max())
    return x - (m + float(np.log(np.exp(x - m).sum())))


class LogprobWriter:
    """(token text, logprob, top alternatives) for sampled tokens."""

    def __init__(self, tokenizer, top: int):
        self._tok = tokenizer
        self._top = int(top)

    def _text(self, token: int) -> str:
        return self._tok.decode([int(token)], skip_special=False)

    def entry(self, logits: np.ndarray, token: int, text: str) -> tuple:
        """`text`: the sampled token's text in context (the alternatives' are decoded alone)."""
        lp = log_softmax(logits)
        top: List[tuple] = []
        if self._top:
            k = min(self._top, lp.size)
            idx = np.argpartition(-lp, k - 1)[:k]
            idx = idx[np.lexsort((idx, -lp[idx]))]   # most likely first, ties by id
            top = [(self._text(i), float(lp[i])) for i in idx]
        return text, float(lp[token]), top
