"""Slots and continuous batching.

A fixed number of slots, each one cism.Session (all made with the same
parameters). One scheduler thread runs steps; each step

1. drops the requests whose client went away (their slot is free at once),
2. admits waiting requests into free slots: the slot whose cached tokens share
   the longest prefix with the prompt (else the one idle longest), rewound to
   that prefix, so only the rest of the prompt is evaluated (prefix reuse; at
   least the last prompt token is always evaluated, for its logits),
3. collects one (session, tokens) pair per active slot: the token sampled last
   step for a decoding slot, a chunk of the prompt for a prefilling slot (the
   prefilling slots share PREFILL_CHUNK tokens per step while any slot is
   decoding, so a newcomer stalls the others by one chunk at most),
4. evaluates all pairs with one batched forward (`_eval_step`, cism.Batch),
5. samples the next token of every slot whose prompt is done (cism.Sampler,
   per request) and hands text to the request's event queue.

With `lookup` (cism serve --lookup) a decoding slot's input is its sampled token
plus the drafts of prompt lookup (server/lookup.py), verified in the same
batched forward; the slot emits the drafts its sampler reproduces, then the
sampler's own next token, and rewinds past the others.

A request that finishes frees its slot at the end of the step; the slot keeps
its KV cache for the next request with the same prefix. Cancelling a request
(client disconnect) interrupts its running evaluation (Session.cancel) and
frees its slot before the next step.

Everything the thread hands to a request goes through
`loop.call_soon_threadsafe` into the request's asyncio queue:
("text", str, logprob entries), then ("end", finish_reason, usage dict,
logprob entries) or ("error", APIError).
"""
from __future__ import annotations

import asyncio
import collections
import logging
import os
import threading
import time
from typing import Deque, List, Optional, Sequence, Tuple

import numpy as np

from ..actmodes import act_kwargs
from ..errors import CancelledError
from ..json_mode import JsonConstraint, JsonDeadEnd
from .lookup import Lookup
from .metrics import Metrics
from .output import LogprobWriter, TextOutput
from .protocol import APIError, GenRequest, usage

log = logging.getLogger("cism.server")

PREFILL_CHUNK = 64          # prompt tokens per step while other slots decode
IDLE_PREFILL_CHUNK = 256    # ... and while none does


class Job:
    """One request inside the scheduler."""

    def __init__(self, req: GenRequest, sampler, loop: asyncio.AbstractEventLoop, endpoint: str):
        self.req = req
        self.sampler = sampler
        self.loop = loop
        self.endpoint = endpoint
        self.events: asyncio.Queue = asyncio.Queue()
        self.cancelled = threading.Event()
        self.done = False
        self.slot: Optional["Slot"] = None
        self.tokens: List[int] = []
        self.cached = 0
        self.out: Optional[TextOutput] = None
        self.lp: Optional[LogprobWriter] = None
        self.entries: List[tuple] = []   # logprob entries not yet sent
        self.prefill_total = 0           # prompt tokens to evaluate (past the reused prefix)
        self.lookup: Optional[Lookup] = None   # drafting state (the scheduler's lookup option)
        self.json: Optional[JsonConstraint] = None   # response_format json_object / json_schema
        self.t_submit = time.monotonic()

    def emit(self, *event) -> None:
        try:
            self.loop.call_soon_threadsafe(self.events.put_nowait, event)
        except RuntimeError:   # the event loop is closed (shutdown): nobody listens
            pass


class Slot:
    def __init__(self, index: int, session):
        self.index = index
        self.session = session
        self.cached: List[int] = []      # the tokens in the session's KV cache
        self.job: Optional[Job] = None
        self.pending: List[int] = []     # tokens to evaluate next
        self.drafts: List[int] = []      # the lookup drafts at the end of pending (their rows are kept)
        self.prefilling = False
        self.idle_since = time.monotonic()


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def _physical_memory() -> int:
    """Bytes of RAM of this machine, or 0 where the platform does not say."""
    try:
        return int(os.sysconf("SC_PHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (AttributeError, ValueError, OSError):
        return 0


def _slots_fit(n_slots: int, first) -> None:
    """Refuses a --slots whose sessions (each as large as the first: its KV cache is allocated
    up front) would take more than the machine's memory, before they are made one by one."""
    need, have = n_slots * first.memory_bytes(), _physical_memory()
    if have and need > have:
        raise ValueError(f"--slots {n_slots}: {n_slots} sessions of {first.n_ctx} tokens need "
                         f"{need / 2**30:.1f} GiB, more than this machine's {have / 2**30:.1f} GiB of memory: "
                         "fewer slots or a shorter context (-c)")


class Scheduler:
    def __init__(self, model, *, n_slots: int, n_ctx: int = 0, n_threads: int = 0, kv_type: str = "f16",
                 max_queue: int = 64, prefill_chunk: int = PREFILL_CHUNK, metrics: Optional[Metrics] = None,
                 lookup: bool = False, draft_max: int = 7, act: str = "auto"):
        act_args = act_kwargs(act)   # the slots and the batch must agree (cism_batch_add)
        if n_slots < 1:
            raise ValueError(f"--slots {n_slots}: give 1 or more")
        if lookup and not 1 <= draft_max <= 64:
            raise ValueError(f"--draft-max {draft_max}: give 1 to 64")
        if prefill_chunk < 1:
            raise ValueError(f"--prefill-chunk {prefill_chunk}: give 1 or more")
        self.model = model
        self.tokenizer = model.tokenizer
        self.n_ids = self.tokenizer.n_ids
        self.metrics = metrics or Metrics()
        self.max_queue = int(max_queue)
        self.prefill_chunk = int(prefill_chunk)
        self.lookup = bool(lookup)
        self.draft_max = int(draft_max) if lookup else 0
        self.slots: List[Slot] = []
        try:
            for i in range(n_slots):
                s = model.session(n_ctx=n_ctx, n_threads=n_threads, kv_type=kv_type, **act_args)
                s.trim()   # the batch evaluates every slot: a slot needs no scratch or threads of its own
                self.slots.append(Slot(i, s))
                if i == 0:
                    _slots_fit(n_slots, s)
        except BaseException:
            for s in self.slots:
                s.session.close()
            raise
        self.n_ctx = self.slots[0].session.n_ctx
        from ..batch import Batch
        # one step takes every decoding slot's token (and drafts) plus the step's prompt budget
        self.max_step_tokens = n_slots * (1 + self.draft_max) + max(self.prefill_chunk, IDLE_PREFILL_CHUNK)
        try:
            self._batch = Batch(model, n_threads=n_threads, max_tokens=self.max_step_tokens, n_ctx=self.n_ctx,
                                kv_type=kv_type, **act_args)
        except BaseException:
            for s in self.slots:
                s.session.close()
            raise
        self._cv = threading.Condition()
        self._waiting: Deque[Job] = collections.deque()
        self._stop = False
        self._thread = threading.Thread(target=self._run, name="cism-scheduler", daemon=True)

    # ---- called from the request handlers -------------------------------------------
    def start(self) -> None:
        self._thread.start()

    def close(self) -> None:
        with self._cv:
            self._stop = True
            for slot in self.slots:
                if slot.job is not None:
                    slot.session.cancel()
            self._cv.notify_all()
        if self._thread.is_alive():
            self._thread.join(timeout=30)
        with self._cv:
            for job in list(self._waiting) + [s.job for s in self.slots if s.job is not None]:
                self._end(job, "cancelled")
            self._waiting.clear()
            self._batch.close()   # before its members
            for slot in self.slots:
                slot.job = None
                slot.session.close()

    def submit(self, job: Job) -> None:
        """Queues a request; APIError 429 (with Retry-After) when slots and queue are full."""
        with self._cv:
            if self._stop:
                raise APIError(503, "the server is shutting down", "server_error", code="shutting_down")
            busy = sum(1 for s in self.slots if s.job is not None)
            if busy + len(self._waiting) >= len(self.slots) + self.max_queue:
                raise APIError(429, f"the server is busy: all {len(self.slots)} slots are in use and "
                                    f"{len(self._waiting)} requests are waiting (--max-queue {self.max_queue}); "
                                    "retry later", "rate_limit_error", code="server_busy",
                               headers={"Retry-After": "1"})
            self._waiting.append(job)
            self._cv.notify_all()

    def cancel(self, job: Job) -> None:
        """The client went away: stop the request within a step and free its slot."""
        with self._cv:
            if job.done or job.cancelled.is_set():
                return
            job.cancelled.set()
            if job.slot is not None:
                job.slot.session.cancel()   # interrupts its running evaluation
            elif job in self._waiting:
                self._waiting.remove(job)
                self._end(job, "cancelled")
            self._cv.notify_all()

    def state(self) -> Tuple[int, int]:
        """(slots in use, requests waiting)."""
        with self._cv:
            return sum(1 for s in self.slots if s.job is not None), len(self._waiting)

    # ---- the scheduler thread ----------------------------------------------------------
    def _run(self) -> None:
        while True:
            with self._cv:
                while not self._stop and not self._waiting and all(s.job is None for s in self.slots):
                    self._cv.wait()
                if self._stop:
                    return
                for slot in self.slots:
                    if slot.job is not None and slot.job.cancelled.is_set():
                        self._free(slot, "cancelled")
                self._admit()
                plan = self._plan()
            if not plan:
                continue
            try:
                self._step(plan)
            except Exception as e:   # a bug: fail the requests of this step, keep serving
                log.exception("scheduler step failed")
                with self._cv:
                    for slot, _, _ in plan:
                        if slot.job is not None:
                            self._fail(slot, e)

    def _admit(self) -> None:
        while self._waiting:
            free = [s for s in self.slots if s.job is None]
            if not free:
                return
            job = self._waiting.popleft()
            ids = job.req.prompt_ids
            best = max(free, key=lambda s: (common_prefix(s.cached, ids), -s.idle_since))
            keep = min(common_prefix(best.cached, ids), len(ids) - 1)
            if keep < len(best.cached):
                best.session.rewind(keep)
                del best.cached[keep:]
            best.job, job.slot = job, best
            best.pending = list(ids[keep:])
            best.prefilling = True
            job.cached = keep
            job.prefill_total = len(best.pending)
            for t in ids:   # the penalty history starts with the prompt, as offline generation
                job.sampler.accept(t)
            job.out = TextOutput(self.tokenizer, ids, job.req.stop)
            if self.lookup:
                job.lookup = Lookup(ids, self.n_ctx + 1, self.draft_max)
            if job.req.logprobs:
                job.lp = LogprobWriter(self.tokenizer, job.req.top_logprobs)

    def _plan(self) -> List[Tuple[Slot, bool, List[int]]]:
        """(slot, prefill?, tokens) for every active slot: decoding slots first, then the
        prefilling ones (oldest request first) within the step's prompt budget."""
        active = [s for s in self.slots if s.job is not None]
        decoding = [s for s in active if not s.prefilling]
        plan = [(s, False, s.pending) for s in decoding]
        budget = self.prefill_chunk if decoding else max(self.prefill_chunk, IDLE_PREFILL_CHUNK)
        for s in sorted((s for s in active if s.prefilling), key=lambda s: s.job.t_submit):
            if budget <= 0:
                break
            chunk = s.pending[:budget]
            budget -= len(chunk)
            plan.append((s, True, chunk))
        return plan

    def _step(self, plan: List[Tuple[Slot, bool, List[int]]]) -> None:
        pairs = [(slot.session, np.asarray(toks, dtype=np.int32)) for slot, _, toks in plan]
        t0 = time.perf_counter()
        errs = self._eval_step(pairs)
        dt = time.perf_counter() - t0
        self.metrics.step(sum(len(t) for _, p, t in plan if p), sum(len(t) for _, p, t in plan if not p), dt)
        finished = []
        for (slot, prefill, toks), err in zip(plan, errs):
            job = slot.job
            if err is not None:
                slot.cached = slot.session.tokens()   # an eval that failed leaves whole chunks or nothing
                self._drop_drafts(slot)
                if isinstance(err, CancelledError) or job.cancelled.is_set():
                    finished.append((slot, "cancelled", None))
                else:
                    finished.append((slot, None, err))
                continue
            slot.cached.extend(toks)
            if prefill:
                slot.pending = slot.pending[len(toks):]
                job.emit("progress", job.prefill_total - len(slot.pending), job.prefill_total)
                if slot.pending:
                    continue
                slot.prefilling = False
            reason = self._sample(slot, job)
            if reason is not None:
                finished.append((slot, reason, None))
        if finished:
            with self._cv:
                for slot, reason, err in finished:
                    if slot.job is None:
                        continue
                    if err is not None:
                        self._fail(slot, err)
                    else:
                        self._free(slot, reason)

    def _eval_step(self, pairs: List[Tuple[object, np.ndarray]]) -> List[Optional[BaseException]]:
        """Evaluates every (session, int32 tokens) pair in one batched forward
        (cism.Batch: one pass over the weights for all slots, each session's
        result bit for bit that of Session.eval); per pair None or the error (a
        cism.CancelledError for a cancelled one, which keeps none of its tokens;
        the others are not affected)."""
        return self._batch.eval(pairs)

    def _sample(self, slot: Slot, job: Job) -> Optional[str]:
        """Samples the slot's next token (after lookup drafts, each verified row in
        order while the sampler reproduces the draft) and sends its text; the finish
        reason, or None when the request goes on (then the last token, with new
        drafts, is the slot's next input)."""
        s = slot.session
        drafts = slot.drafts
        rows = s.all_logits() if drafts else None
        self._drop_drafts(slot)
        base = s.n_past - len(drafts)      # valid positions: up to the sampled token of the last step
        accepted, reason, tok = 0, None, -1
        for i in range(len(drafts) + 1):
            logits = s.logits() if rows is None else rows[i]
            reason, tok = self._emit(job, logits, base + i, s.n_ctx)
            if reason is not None or i == len(drafts) or tok != drafts[i]:
                break
            accepted += 1
        if drafts:
            job.lookup.adapt(accepted, len(drafts))
            self.metrics.drafts(len(drafts), accepted)
            keep = base + accepted
            if keep < s.n_past:
                s.rewind(keep)
                del slot.cached[keep:]
        if reason is not None:
            return reason
        slot.pending = [tok]
        if job.lookup is not None:
            job.lookup.push([tok])
            room = min(s.n_ctx - 2 - (base + accepted), job.req.max_tokens - len(job.tokens) - 1)
            k = job.lookup.depth(room)
            slot.drafts = job.lookup.propose(k) if k > 0 else []
            if slot.drafts:
                slot.pending = [tok] + slot.drafts
                s.set_logits_all(True)
        return None

    def _emit(self, job: Job, logits: np.ndarray, n_valid: int, n_ctx: int) -> Tuple[Optional[str], int]:
        """Samples one token from logits (the row after n_valid evaluated positions)
        and sends its text: (finish reason or None, the token)."""
        if logits.size > self.n_ids:   # never an id past the tokenizer (the embedding may have more rows)
            logits = logits[:self.n_ids]
        if job.json is not None:
            try:
                tok = job.json.sample(job.sampler, logits)
            except JsonDeadEnd:   # the vocabulary cannot go on: the request ends here, the others go on
                text, _ = job.out.flush()
                self._send(job, text)
                return "stop", -1
            job.json.accept(tok)
        else:
            tok = job.sampler.sample(logits)
        job.sampler.accept(tok)
        job.tokens.append(tok)
        if tok in job.req.stop_ids:   # end of generation: not decoded, not evaluated
            text, hit = job.out.flush()
            self._send(job, text)
            return "stop", tok
        piece, text, hit = job.out.push(tok)
        if job.lp is not None:
            job.entries.append(job.lp.entry(logits, tok, piece))
        if hit or (job.json is not None and job.json.complete):   # a stop string, or the JSON object closed
            more, _ = job.out.flush() if not hit else ("", True)
            self._send(job, text + more)
            return "stop", tok
        if len(job.tokens) >= job.req.max_tokens or n_valid >= n_ctx:
            more, hit = job.out.flush()
            self._send(job, text + more)
            return ("stop" if hit else "length"), tok
        self._send(job, text)
        return None, tok

    def _drop_drafts(self, slot: Slot) -> None:
        if slot.drafts:
            slot.drafts = []
            slot.session.set_logits_all(False)

    def _send(self, job: Job, text: str) -> None:
        if text:
            entries, job.entries = job.entries, []
            job.emit("text", text, entries)

    # ---- endings (lock held) ------------------------------------------------------
    def _usage(self, job: Job, reason: str):
        n = len(job.tokens)
        if n and job.tokens[-1] in job.req.stop_ids:
            n -= 1   # the end-of-turn / EOS token itself
        return usage(len(job.req.prompt_ids), n, job.cached)

    def _end(self, job: Job, reason: str) -> None:
        if job.done:
            return
        job.done = True
        use = self._usage(job, reason)
        outcome = "cancelled" if reason == "cancelled" else "ok"
        self.metrics.request(job.endpoint, outcome, use["prompt_tokens"], job.cached, use["completion_tokens"])
        entries, job.entries = job.entries, []
        job.emit("end", reason, use, entries)
        job.sampler.close()

    def _release(self, slot: Slot) -> None:
        slot.job.slot = None
        slot.job = None
        self._drop_drafts(slot)
        slot.pending = []
        slot.prefilling = False
        slot.idle_since = time.monotonic()

    def _free(self, slot: Slot, reason: str) -> None:
        job = slot.job
        self._release(slot)
        self._end(job, reason)

    def _fail(self, slot: Slot, err: BaseException) -> None:
        job = slot.job
        self._release(slot)
        slot.cached = slot.session.tokens()
        if job.done:
            return
        job.done = True
        self.metrics.request(job.endpoint, "error")
        job.emit("error", APIError(500, f"generation failed: {err}", "server_error", code="generation_failed"))
        job.sampler.close()
