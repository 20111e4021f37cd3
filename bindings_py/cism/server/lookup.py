"""Prompt-lookup speculation for the server's slots (`cism serve --lookup`).

The same drafting rule as the C speculator (libcism/src/model/speculative.c,
docs/SPECULATIVE.md): the longest n-gram (4 down to 2 tokens) that ends the text
(prompt plus generated tokens) and occurred before, at its most recent
occurrence, proposes the tokens that followed it; past the end of the text the
proposal continues itself. The scheduler appends the drafts to the slot's next
input, so they are verified inside the step's batched forward (the weights are
read once for every slot and every draft), samples each verified row in order
with the request's own sampler and keeps the drafts up to the first one the
sampler did not produce.

Exactness: each emitted token is drawn from the request's distribution given
the tokens before it (the row of a draft is only used once that draft was
emitted), which for a point-mass draft is the speculative sampling rule; greedy
requests give plain decoding's tokens. The depth adapts to acceptance as the C
speculator's mode 1 does: doubled after a fully accepted run, accepted + 1
after a partial one, halved after none; at 0, plain steps for a while (8,
doubling up to 256), then a probe of one draft.
"""
from __future__ import annotations

from typing import List, Sequence

import numpy as np

NGRAM_MIN, NGRAM_MAX = 2, 4
BACKOFF_MIN, BACKOFF_MAX = 8, 256


class Lookup:
    """One request's text and drafting state."""

    def __init__(self, prompt: Sequence[int], capacity: int, draft_max: int):
        self.draft_max = int(draft_max)
        self.h = np.zeros(max(capacity, len(prompt)) + 1, dtype=np.int32)
        self.n = 0
        self.k = min(4, self.draft_max)
        self.cooldown = 0
        self.backoff = BACKOFF_MIN
        self.push(prompt)

    def push(self, tokens: Sequence[int]) -> None:
        t = np.asarray(tokens, dtype=np.int32)
        if self.n + t.size > self.h.size:
            grown = np.zeros(2 * (self.n + t.size), dtype=np.int32)
            grown[:self.n] = self.h[:self.n]
            self.h = grown
        self.h[self.n:self.n + t.size] = t
        self.n += int(t.size)

    def depth(self, room: int) -> int:
        """Drafts to propose this step (0: a plain step), at most `room`."""
        if self.k == 0:
            if self.cooldown > 0:
                self.cooldown -= 1
                return 0
            self.k = 1
        return max(0, min(self.k, room))

    def propose(self, k: int) -> List[int]:
        h, n_all = self.h[:self.n], self.n
        for n in range(min(NGRAM_MAX, n_all - 1), NGRAM_MIN - 1, -1):
            suf = h[n_all - n:]
            hit = h[:n_all - n] == suf[0]          # starts j = 0 .. n_all - n - 1
            for i in range(1, n):
                hit &= h[i:n_all - n + i] == suf[i]
            idx = np.flatnonzero(hit)
            if idx.size:
                j = int(idx[-1])
                out: List[int] = []
                for t in range(k):
                    src = j + n + t
                    out.append(int(h[src]) if src < n_all else out[src - n_all])
                return out
        return []

    def adapt(self, accepted: int, drafted: int) -> None:
        if accepted == drafted:
            self.k = min(max(self.k, 1) * 2, self.draft_max)
            self.backoff = BACKOFF_MIN
        elif accepted == 0:
            self.k //= 2
            if self.k == 0:
                self.cooldown = self.backoff
                self.backoff = min(self.backoff * 2, BACKOFF_MAX)
        else:
            self.k = min(accepted + 1, self.draft_max)
