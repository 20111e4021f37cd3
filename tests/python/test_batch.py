"""cism.Batch: several sessions decoded through one forward pass per step.

- On the real SmolLM2-135M-Instruct (its own types: q8x16 + q4a, int8
  activations with outlier channels) and on stories260K in q8, f32 and 4bit:
  four chat sessions of different prompt lengths, prefilled and decoded
  greedily together, give token for token and logit for logit (bits) what each
  gives alone, with one or two threads and every kernel tier of this CPU
  (stories260K), sessions joining and leaving the batch between steps.
- A session the batch cannot take (other KV type, other model) is refused
  before anything runs, and no member moves.
"""
from __future__ import annotations

import os

import numpy as np
import pytest

import cism
from cism.convert import convert

PROMPTS = ["What is the capital of France?", "Write a haiku about the sea.", "2+2=?",
           "List three colours and explain why the sky looks blue on a clear day."]


@pytest.fixture(scope="module")
def real_native(real_gguf, tmp_path_factory):
    out = str(tmp_path_factory.mktemp("batch") / "smollm2.cism")
    convert(real_gguf, out, progress=None)
    return out


@pytest.fixture(scope="module")
def stories(shared_models, tmp_path_factory):
    d = tmp_path_factory.mktemp("batch_stories")
    paths = {}
    for recipe in ("f32", "q8", "4bit"):
        paths[recipe] = str(d / f"stories.{recipe}.cism")
        quant = None if recipe == "f32" else recipe
        convert(os.path.join(shared_models, "stories260K-hf"), paths[recipe], quant=quant, progress=None)
    return paths


def _greedy_alone(model, prompt, n, **kw):
    s = model.session(**kw)
    s.eval(prompt)
    toks, logits = [], []
    for _ in range(n):
        lg = s.logits()
        logits.append(lg)
        t = int(np.argmax(lg))
        toks.append(t)
        s.eval([t])
    s.close()
    return toks, logits


def _greedy_batched(model, prompts, n, threads, stagger, **kw):
    """Prompts prefilled inside the batch (in chunks of 7) while the others
    already decode; member i joins at step i * stagger."""
    sessions = [model.session(**kw) for _ in prompts]
    b = cism.Batch(model, n_threads=threads, max_tokens=64, **kw)
    pending = [list(p) for p in prompts]
    toks = [[] for _ in prompts]
    logits = [[] for _ in prompts]
    step = 0
    while any(len(t) < n for t in toks):
        pairs, who = [], []
        for i, s in enumerate(sessions):
            if step < i * stagger or len(toks[i]) >= n:
                continue
            if pending[i]:
                chunk, pending[i] = pending[i][:7], pending[i][7:]
                pairs.append((s, chunk))
            else:
                pairs.append((s, [toks[i][-1]]))
            who.append(i)
        if pairs:
            errs = b.eval(pairs)
            assert errs == [None] * len(pairs)
            for i in who:
                if not pending[i] and len(toks[i]) < n:
                    assert sessions[i].n_past == len(prompts[i]) + len(toks[i])
                    lg = sessions[i].logits()
                    logits[i].append(lg)
                    toks[i].append(int(np.argmax(lg)))
        step += 1
    b.close()
    for s in sessions:
        s.close()
    return toks, logits


def _check_same(model, prompts, n, threads, stagger, **kw):
    got_t, got_l = _greedy_batched(model, prompts, n, threads, stagger, **kw)
    for i, p in enumerate(prompts):
        ref_t, ref_l = _greedy_alone(model, p, n, n_threads=1, **kw)
        assert got_t[i] == ref_t, f"member {i}: tokens differ"
        for a, r in zip(got_l[i], ref_l):
            assert np.array_equal(a, r), f"member {i}: logits differ in bits"


@pytest.mark.parametrize("threads", [1, 2])
def test_real_model_batched_greedy_is_bitwise_solo(real_native, threads):
    from cism.chat import prompt_tokens
    with cism.Model(real_native) as m:
        prompts = [prompt_tokens(m, [{"role": "user", "content": q}]) for q in PROMPTS]
        _check_same(m, prompts, 12, threads, stagger=2, n_ctx=256)


@pytest.mark.parametrize("dtype", ["f32", "q8", "4bit"])
def test_stories_every_tier(stories, dtype):
    rng = np.random.default_rng(3)
    with cism.Model(stories[dtype]) as m:
        prompts = [rng.integers(0, m.vocab_size, n).tolist() for n in (3, 11, 20, 1)]
        for tier in cism.kernel_tiers():
            for threads in (1, 2):
                _check_same(m, prompts, 10, threads, stagger=1, n_ctx=128, kernel_tier=tier, kv_type="f32")


def test_refusals_leave_members_alone(stories):
    with cism.Model(stories["q8"]) as m, cism.Model(stories["f32"]) as other:
        good = m.session(n_ctx=64)
        good.eval([1, 2, 3])
        before = good.logits()
        kv32 = m.session(n_ctx=64, kv_type="f32")
        foreign = other.session(n_ctx=64)
        b = cism.Batch(m, max_tokens=8)
        with pytest.raises(cism.InvalidArgumentError, match="KV cache in f32"):
            b.eval([(good, [4]), (kv32, [5])])
        with pytest.raises(cism.InvalidArgumentError, match="another model"):
            b.eval([(good, [4]), (foreign, [5])])
        with pytest.raises(cism.InvalidArgumentError, match="at most 8 tokens"):
            b.eval([(good, list(range(9)))])
        with pytest.raises(cism.TokenRangeError):
            b.eval([(good, [m.vocab_size])])
        with pytest.raises(ValueError, match="twice"):
            b.eval([(good, [4]), (good, [5])])
        with pytest.raises(ValueError, match="at least one"):
            b.eval([])
        with pytest.raises(TypeError, match="a Session alone"):
            b.eval([good])
        with pytest.raises(TypeError, match="got a list of 3"):
            b.eval([[good, [4], 1]])
        with pytest.raises(TypeError, match="where the Session goes"):
            b.eval([([4], good)])
        for bad in (0, -1, 65537):
            with pytest.raises(ValueError, match="max_tokens must be between 1 and 65536"):
                cism.Batch(m, max_tokens=bad)
        with pytest.raises(TypeError, match="max_tokens must be an int"):
            cism.Batch(m, max_tokens=2.5)
        assert good.n_past == 3 and np.array_equal(good.logits(), before)
        assert b.eval([(good, [4])]) == [None]
        assert good.n_past == 4
