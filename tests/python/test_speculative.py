"""Speculative decoding (cism_generate_spec, cism.speculative; issue 13).

- greedy: token for token plain greedy (Session.generate_ids), same session
  state after, on the trained checkpoints (stories260K, BabyLlama) for every
  tier this CPU runs and 1 and 2 threads, with prompt lookup and a 4-bit draft
  model; on the real SmolLM2-135M-Instruct (q8 and its native Q4_1 import) with
  lookup and a q4a draft on the native tiers;
- sampling: the distribution of short generations equals the target's exact
  one (chi-square, fixed seeds, a few seconds), for lookup and a draft model;
- adaptive depth falls to plain decode when drafts keep failing;
- cancel mid-generation leaves a session from which a plain continuation gives
  the uninterrupted tokens;
- a draft model with another vocabulary is refused;
- the CLI's --lookup / --draft print the same text as plain greedy.
"""
from __future__ import annotations

import math
import os

import numpy as np
import pytest

import cism
from cism.convert import convert
from cism.errors import CancelledError, InvalidArgumentError
from cism.speculative import Speculator, generate

TIERS = cism.kernel_tiers()
STORY = "Once upon a time, there was a little dog. The little dog liked to play. Once upon a time"


@pytest.fixture(scope="module")
def tiny(shared_models, tmp_path_factory):
    d = tmp_path_factory.mktemp("spec")
    out = {}
    for name, folder in (("stories260K", "stories260K-hf"), ("babyllama", "babyllama-tok105-hf")):
        src = os.path.join(shared_models, folder)
        out[name] = str(d / f"{name}.cism")
        convert(src, out[name], progress=None)
        out[name + "-4bit"] = str(d / f"{name}-4bit.cism")
        convert(src, out[name + "-4bit"], quant="4bit", progress=None)
    # a worse draft (every matrix q4, embeddings too): more rejections for the sampling test
    out["stories260K-q4"] = str(d / "stories260K-q4.cism")
    convert(os.path.join(shared_models, "stories260K-hf"), out["stories260K-q4"], quant="q4", progress=None)
    return out


def _plain(model, ids, n, threads, tier, **sampling):
    with model.session(n_threads=threads, kernel_tier=tier) as s:
        out = s.generate_ids(ids, n, cism.Sampler(**sampling), ignore_eos=True)
        return out, s.tokens(), s.logits()


def _spec(spec, model, ids, n, threads, tier, **sampling):
    with model.session(n_threads=threads, kernel_tier=tier) as s:
        out = spec.generate_ids(s, ids, n, ignore_eos=True, **sampling)
        assert s.stop_reason == "length"
        return out, s.tokens(), s.logits()


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("tier", TIERS)
@pytest.mark.parametrize("name", ["stories260K", "babyllama"])
def test_greedy_identical_trained(tiny, name, tier, threads):
    with cism.Model(tiny[name]) as m, cism.Model(tiny[name + "-4bit"]) as q:
        ids = m.tokenizer.encode(STORY, add_bos=True)
        want, toks, logits = _plain(m, ids, 150, threads, tier)
        for target in (m, q):
            if target is q:
                want, toks, logits = _plain(q, ids, 150, threads, tier)
            for adaptive in (1, 2):  # 1: the same steps every run; 2 (default): measured costs too
                with Speculator("lookup", adaptive=adaptive) as lk, \
                        Speculator(q, target=target, kernel_tier=tier, n_threads=threads, adaptive=adaptive) as dr:
                    for spec in (lk, dr):
                        got, gtoks, glogits = _spec(spec, target, ids, 150, threads, tier)
                        assert got == want, f"{name} {spec.kind} tier {tier} threads {threads} adaptive {adaptive}"
                        assert gtoks == toks and np.array_equal(glogits, logits)
                        assert spec.stats["generated"] == 150
                        if adaptive == 1:
                            assert spec.stats["accepted"] > 0


@pytest.fixture(scope="module")
def real(real_gguf, tmp_path_factory):
    d = tmp_path_factory.mktemp("spec-real")
    paths = {"native": str(d / "native.cism"), "q8": str(d / "q8.cism"), "q4a": str(d / "q4a.cism")}
    convert(real_gguf, paths["native"], progress=None)
    convert(real_gguf, paths["q8"], quant="q8", progress=None)
    convert(real_gguf, paths["q4a"], quant="q4a", progress=None)
    return paths


def _chat(model, text):
    from cism.chat import prompt_tokens
    return prompt_tokens(model, [{"role": "user", "content": text}])


PASSAGE = ("The lighthouse keeper climbed the spiral stairs every evening at dusk. He wound the clockwork, "
           "trimmed the wick and polished the great lens until it shone, and then he sat by the window "
           "with a mug of tea, watching the ships pass safely along the rocky coast.")


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("tier", [t for t in TIERS if t != "scalar"] or ["scalar"])
def test_greedy_identical_real(real, tier, threads):
    with cism.Model(real["q4a"]) as draft:
        for target_name in ("q8", "native"):
            with cism.Model(real[target_name]) as m:
                ids = _chat(m, "Repeat this passage word for word:\n\n" + PASSAGE)
                want, toks, logits = _plain(m, ids, 48, threads, tier)
                for adaptive in (1, 2):
                    with Speculator("lookup", adaptive=adaptive) as lk, \
                            Speculator(draft, target=m, kernel_tier=tier, n_threads=threads, adaptive=adaptive) as dr:
                        for spec in (lk, dr):
                            got, gtoks, glogits = _spec(spec, m, ids, 48, threads, tier)
                            assert got == want, f"{target_name} {spec.kind} tier {tier} threads {threads}"
                            assert gtoks == toks and np.array_equal(glogits, logits)
                            if adaptive == 1:
                                assert spec.stats["accepted"] > 0


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("tier", [t for t in TIERS if t != "scalar"] or ["scalar"])
def test_rows_bitwise_real(real, tier, threads):
    """The contract verification rests on: each row of a multi-token eval has
    the bits of the same token evaluated alone."""
    for name in ("q8", "native", "q4a"):
        with cism.Model(real[name]) as m:
            ids = _chat(m, "Repeat this passage word for word:\n\n" + PASSAGE)
            with m.session(n_threads=threads, kernel_tier=tier, logits_all=True) as a, \
                    m.session(n_threads=threads, kernel_tier=tier) as b:
                a.eval(ids[:10])
                a.eval(ids[10:30])
                rows = a.all_logits()
                b.eval(ids[:10])
                for i, t in enumerate(ids[10:30]):
                    b.eval([t])
                    assert np.array_equal(b.logits(), rows[i]), f"{name} tier {tier}: position {10 + i}"


# ---- sampling: the distribution ---------------------------------------------------------

def _chi2_sf(x: float, k: int) -> float:
    """P(chi2_k > x), Wilson-Hilferty (good to ~1e-3 for k >= 10)."""
    z = ((x / k) ** (1 / 3) - (1 - 2 / (9 * k))) / math.sqrt(2 / (9 * k))
    return 0.5 * math.erfc(z / math.sqrt(2))


def _probs(logits, top_k, temperature):
    lg = np.asarray(logits, dtype=np.float64)
    idx = np.argsort(-lg, kind="stable")[:top_k]
    w = np.exp((lg[idx] - lg[idx].max()) / temperature)
    return dict(zip(idx.tolist(), (w / w.sum()).tolist()))


def _exact_joint(model, ids, n, top_k, temperature):
    """P(t1..tn) of the target's sampler (top-k then temperature), by enumeration."""
    out = {}
    with model.session(n_ctx=256) as s:
        def rec(prefix, p):
            s.reset()
            s.eval(ids + prefix)
            dist = _probs(s.logits(), top_k, temperature)
            for t, q in dist.items():
                if len(prefix) + 1 == n:
                    out[tuple(prefix + [t])] = p * q
                else:
                    rec(prefix + [t], p * q)
        rec([], 1.0)
    return out


@pytest.mark.parametrize("drafter", ["lookup", "draft"])
def test_sampling_distribution(tiny, drafter):
    top_k, temp, n_tok, runs = 4, 2.0, 4, 8000  # 256 sequences; about 3 s
    with cism.Model(tiny["stories260K"]) as m, cism.Model(tiny["stories260K-q4"]) as q:
        ids = m.tokenizer.encode("Once upon a time, there was a little girl. She was a little", add_bos=True)
        exact = _exact_joint(m, ids, n_tok, top_k, temp)
        spec = Speculator("lookup", ngram_min=1) if drafter == "lookup" else Speculator(q, target=m, draft_max=2)
        counts = {}
        drafted = accepted = 0
        with spec, m.session(n_ctx=256) as s:
            for seed in range(runs):
                s.reset()
                got = tuple(spec.generate_ids(s, ids, n_tok, ignore_eos=True, temperature=temp, top_k=top_k, seed=seed))
                counts[got] = counts.get(got, 0) + 1
                drafted += spec.stats["drafted"]
                accepted += spec.stats["accepted"]
        assert set(counts) <= set(exact), "a sequence the target's sampler cannot produce"
        assert 0.5 * drafted < accepted < 0.9 * drafted, (accepted, drafted)  # both branches of the rule ran
        # pool the cells expected below 5 into one
        chi2, dof, small_e, small_o = 0.0, -1, 0.0, 0
        for seq, p in exact.items():
            e, o = p * runs, counts.get(seq, 0)
            if e < 5:
                small_e += e
                small_o += o
                continue
            chi2 += (o - e) ** 2 / e
            dof += 1
        if small_e > 0:
            chi2 += (small_o - small_e) ** 2 / small_e
            dof += 1
        pval = _chi2_sf(chi2, dof)
        print(f"{drafter}: {accepted}/{drafted} drafts accepted; chi2 {chi2:.1f}, {dof} dof, p = {pval:.3f}")
        assert pval > 1e-3, f"{drafter}: chi2 {chi2:.1f} with {dof} dof, p = {pval:.2g}"


def test_sampling_reproducible(tiny):
    with cism.Model(tiny["stories260K"]) as m, cism.Model(tiny["stories260K-4bit"]) as q:
        ids = m.tokenizer.encode(STORY, add_bos=True)
        for drafter in ("lookup", q):
            with Speculator(drafter, target=m) as spec:
                a, ta, la = _spec(spec, m, ids, 80, 2, "auto", temperature=0.9, seed=5)
                b, tb, lb = _spec(spec, m, ids, 80, 2, "auto", temperature=0.9, seed=5)
                assert a == b and ta == tb and np.array_equal(la, lb)


# ---- adaptive depth, cancel, vocabulary ---------------------------------------------------

def test_adaptive_depth_falls_to_plain(tiny):
    rng = np.random.default_rng(0)
    with cism.Model(tiny["stories260K"]) as m, m.session(n_ctx=512) as s, Speculator("lookup", ngram_min=1) as spec:
        ids = rng.integers(3, 512, 150).tolist()  # random tokens: unigram matches everywhere, none predictive
        out = spec.generate_ids(s, ids, 200, ignore_eos=True, temperature=3.0, seed=1)
        st = spec.stats
        assert len(out) == 200 and st["steps"] >= 190
        assert st["verify_steps"] <= 12, st  # 4, 2, 1 then probes after 8, 16, 32, 64, 128 plain steps
        assert s.n_past == 350


@pytest.mark.parametrize("drafter", ["lookup", "draft"])
def test_cancel_leaves_session_consistent(tiny, drafter):
    with cism.Model(tiny["stories260K"]) as m, cism.Model(tiny["stories260K-4bit"]) as q:
        ids = m.tokenizer.encode(STORY, add_bos=True)
        want, _, _ = _plain(m, ids, 120, 2, "auto")
        with m.session(n_ctx=512) as s, Speculator("lookup" if drafter == "lookup" else q, target=m) as spec:
            seen = []

            def cb(t):
                seen.append(t)
                if len(seen) == 25:
                    s.cancel()

            with pytest.raises(CancelledError) as ei:
                spec.generate_ids(s, ids, 120, ignore_eos=True, callback=cb)
            got = ei.value.tokens
            assert s.stop_reason == "cancelled" and 25 <= len(got) < 120 and got == want[:len(got)]
            text = ids + got
            held = s.tokens()
            assert held == text[:len(held)] and len(held) in (len(text), len(text) - 1)
            rest = s.generate_ids(text[len(held):], 120 - len(got), cism.Sampler(), ignore_eos=True)
            assert got + rest == want


def test_vocabulary_mismatch_refused(tiny):
    with cism.Model(tiny["stories260K"]) as m, cism.Model(tiny["babyllama"]) as b:
        with pytest.raises(InvalidArgumentError, match="vocabulary"):
            Speculator(b, target=m)


def test_generate_function(tiny):
    with cism.Model(tiny["stories260K"]) as m:
        with m.session() as s:
            out = generate(s, STORY, 40, speculative="lookup", ignore_eos=True)
        want, _, _ = _plain(m, m.tokenizer.encode(STORY, add_bos=True), 40, 0, "auto")
        assert out == want


def test_cli_lookup_and_draft(tiny, run_cli):
    base = ["generate", "-m", tiny["stories260K"], "-p", STORY, "-n", "60", "--ignore-eos"]
    plain = run_cli(*base)
    lookup = run_cli(*base, "--lookup")
    draft = run_cli(*base, "--draft", tiny["stories260K-4bit"])
    assert lookup.stdout == plain.stdout == draft.stdout
    assert "speculative (lookup)" in lookup.stderr and "accepted" in lookup.stderr
    assert "speculative (draft)" in draft.stderr
    # settings the drafter refuses: the error alone, not the prompt echoed before it
    bad = run_cli(*base, "--lookup", "--draft-max", "0", check=False)
    assert bad.returncode != 0 and bad.stdout == "" and "draft_max 0" in bad.stderr, (bad.stdout, bad.stderr)
