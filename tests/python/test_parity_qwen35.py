"""Qwen3.5 (Gated DeltaNet layers between gated full-attention layers) against
transformers (eager, fp32) on tiny random checkpoints made here, several
configs (odd widths, GQA/MQA in both the attention and the DeltaNet heads,
tied and untied heads, random norms, biases-free projections, A_log, dt_bias
and conv kernels):

- max |logit error| < 1e-4 over a 100-token prompt (past the first block of
  64 positions of the chunked delta rule) on every kernel tier, the same 32
  greedy tokens, and the same bits for n_batch 1 / 5 / 7 / whole on 1 or 2
  threads (blocks at fixed absolute positions: one path per position);
- the chunked form against the token-by-token recurrence (transformers'
  torch_recurrent_gated_delta_rule, decoding with a cache): < 1e-4;
- rewind: eval A+B, rewind to len(A), eval C gives the bits of a fresh A+C,
  at positions around and far behind the session's checkpoints; a second chat
  turn reusing the first's prefix; a cancelled eval keeps its finished chunks;
- cism.Batch: two sessions in one pass give what each gives alone;
- session save/load carries the recurrent state;
- a multimodal Qwen3_5ForConditionalGeneration checkpoint converts its text
  model; q8 and 4bit conversions load and stay close to f32.
"""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import cism  # noqa: E402
from cism.convert import convert  # noqa: E402

from test_parity_transformers import hf_logits_and_greedy, N_GEN  # noqa: E402

VOCAB = 320
N_PROMPT = 100
CHUNK = 64   # CISM__DN_CHUNK (deltanet.h)
LIMIT = 1e-4
EVERY = 128  # CISM__DN_CKPT_EVERY (deltanet.h)

BASE = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=4, num_attention_heads=4,
            num_key_value_heads=2, head_dim=16, max_position_embeddings=1024, rms_norm_eps=1e-5, bos_token_id=1,
            eos_token_id=2, pad_token_id=0, linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=8,
            linear_value_head_dim=12, linear_conv_kernel_dim=4, tie_word_embeddings=False)

CASES = {
    # GQA attention (4 q heads / 2 kv), DeltaNet 2 key heads / 4 value heads, the default layer pattern
    "qwen35": dict(),
    # MQA, odd widths, 3 value heads on 1 key head, conv of 3, tied head, half the head rotated
    "qwen35-mqa-odd-tied": dict(hidden_size=72, intermediate_size=136, num_hidden_layers=3, num_attention_heads=3,
                                num_key_value_heads=1, head_dim=24, linear_num_key_heads=1, linear_num_value_heads=3,
                                linear_key_head_dim=10, linear_value_head_dim=14, linear_conv_kernel_dim=3,
                                tie_word_embeddings=True, layer_types=["linear_attention", "full_attention",
                                                                       "linear_attention"],
                                rope_parameters={"rope_type": "default", "rope_theta": 5000.0,
                                                 "partial_rotary_factor": 0.5}),
    # multiples of 16 everywhere (the interleaved quantized layouts), equal key and value heads, full attention first
    "qwen35-x16": dict(linear_num_key_heads=2, linear_num_value_heads=2, linear_key_head_dim=16,
                       linear_value_head_dim=16, num_key_value_heads=4,
                       layer_types=["full_attention", "linear_attention", "linear_attention", "full_attention"]),
}


def _randomize(model, seed: int) -> None:
    """Spread-out weights; the RMSNorms that scale by 1 + w get w in [-0.5, 0.5),
    the DeltaNet output's gated norm (scale w) w in [0.5, 1.5); A_log, dt_bias
    and conv kernels random too."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("linear_attn.norm.weight"):
                p.copy_(0.5 + torch.rand(p.shape, generator=g))
            elif "norm" in name:
                p.copy_(torch.rand(p.shape, generator=g) - 0.5)
            elif name.endswith("A_log"):
                p.copy_(torch.log(0.01 + 8 * torch.rand(p.shape, generator=g)))
            elif name.endswith("dt_bias"):
                p.copy_(torch.randn(p.shape, generator=g))
            elif "conv1d" in name:
                p.copy_(0.4 * torch.randn(p.shape, generator=g))
            else:
                p.copy_(0.08 * torch.randn(p.shape, generator=g))


def make(case: str, folder, seed: int):
    cfg = transformers.Qwen3_5TextConfig(**{**BASE, **CASES[case]})
    cfg.architectures = ["Qwen3_5ForCausalLM"]
    torch.manual_seed(seed)
    model = transformers.Qwen3_5ForCausalLM._from_config(cfg, attn_implementation="eager", dtype=torch.float32)
    _randomize(model, seed)
    model.save_pretrained(str(folder), safe_serialization=True)
    ref = transformers.Qwen3_5ForCausalLM.from_pretrained(str(folder), attn_implementation="eager",
                                                          dtype=torch.float32)
    return ref.eval()


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    return tmp_path_factory.mktemp("qwen35")


@pytest.fixture(scope="module")
def converted(workdir):
    """case -> (cism path, HF reference)"""
    out = {}
    for case in CASES:
        ref = make(case, workdir / case, seed=sum(map(ord, case)))
        path = str(workdir / f"{case}.cism")
        convert(str(workdir / case), path, progress=None)
        out[case] = (path, ref)
    return out


def all_logits(m, prompt, **kw):
    with m.session(kv_type="f32", logits_all=True, **kw) as s:
        s.eval(prompt)
        return s.all_logits()


def prompt_of(n, seed=11):
    return np.random.default_rng(seed).integers(3, VOCAB, n).tolist()


@pytest.mark.parametrize("case", list(CASES))
def test_qwen35_parity(case, converted, record_parity):
    path, ref = converted[case]
    prompt = prompt_of(N_PROMPT)
    hf_logits, hf_greedy, margin = hf_logits_and_greedy(ref, prompt)
    with cism.Model(path) as m:
        assert m.architecture == "qwen35"
        errs = {}
        for tier in cism.kernel_tiers():
            errs[tier] = float(np.abs(all_logits(m, prompt, kernel_tier=tier) - hf_logits).max())
        with m.session(kv_type="f32") as s:
            greedy = s.generate_ids(prompt, N_GEN, cism.Sampler(), ignore_eos=True)
        base = all_logits(m, prompt, n_threads=1)
        for kw in (dict(n_threads=2), dict(n_threads=1, n_batch=1), dict(n_threads=2, n_batch=5),
                   dict(n_threads=1, n_batch=7)):
            np.testing.assert_array_equal(all_logits(m, prompt, **kw), base, err_msg=f"{case} {kw}")
    err = max(errs.values())
    same = greedy == hf_greedy
    record_parity(f"tiny {case}", "qwen35", "f32", err, "same" if same else f"DIFFERENT (min HF margin {margin:.2e})")
    assert err < LIMIT, f"{case}: max |logit error| {errs}"
    assert np.abs(hf_logits).max() > 0.5, "logits too flat for a meaningful comparison"
    assert same, f"{case}: greedy {greedy} != HF {hf_greedy} (min HF margin {margin:.2e})"


def hf_recurrent_logits(ref, prompt):
    """transformers' logits decoding one token at a time with its cache: its
    DeltaNet layers then run the token-by-token recurrence."""
    with torch.no_grad():
        out = ref(torch.tensor([prompt[:1]]), use_cache=True)
        rows = [out.logits[0, -1].numpy()]
        for t in prompt[1:]:
            out = ref(torch.tensor([[t]]), cache=out["cache"], use_cache=True)
            rows.append(out.logits[0, -1].numpy())
    return np.stack(rows)


@pytest.mark.parametrize("case", list(CASES))
def test_chunked_vs_recurrence(case, converted, record_parity):
    """The tolerance of the chunked (block) form against the recurrence: the
    same math in another order, so float32 rounding only; stated as < 1e-4 in
    the logits over 2.5 blocks and more."""
    path, ref = converted[case]
    prompt = prompt_of(2 * CHUNK + 40, seed=13)
    rec = hf_recurrent_logits(ref, prompt)
    with cism.Model(path) as m:
        got = all_logits(m, prompt)
    err = float(np.abs(got - rec).max())
    record_parity(f"tiny {case} vs HF recurrence", "qwen35", "f32", err, "-")
    assert err < LIMIT, err


def test_deltanet_state_matters(converted):
    """Changing the first token changes the last position's logits (through the
    DeltaNet states and attention): the parity above is not vacuous."""
    path, _ = converted["qwen35"]
    a, b = prompt_of(N_PROMPT), prompt_of(N_PROMPT)
    b[0] = (a[0] + 1) % VOCAB or 3
    with cism.Model(path) as m:
        la, lb = all_logits(m, a), all_logits(m, b)
    assert np.abs(la[-1] - lb[-1]).max() > 1e-3


def _fresh(m, tokens, **kw):
    return all_logits(m, tokens, n_threads=1, **kw)


@pytest.mark.parametrize("case", ["qwen35", "qwen35-mqa-odd-tied"])
def test_rewind_is_fresh(case, converted):
    """eval A+B, rewind to k, eval C == a fresh eval of A[:k]+C, for k before,
    at and after the checkpoints (multiples of 128), right after the last
    pass's start and far behind every checkpoint; B evaluated at once, in
    chunks and token by token."""
    path, _ = converted[case]
    full = prompt_of(420, seed=5)
    c = prompt_of(9, seed=6)
    with cism.Model(path) as m:
        for n_batch, step in ((512, 420), (64, 37), (16, 1)):
            with m.session(kv_type="f32", logits_all=True, n_threads=1, n_batch=n_batch) as s:
                for i in range(0, len(full), step):
                    s.eval(full[i:i + step])
                for k in (419, 400, 300, 257, 256, 255, 129, 128, 127, 40, 1, 0, 384, 10):
                    s.rewind(k)
                    assert s.n_past == k
                    s.eval(c)
                    np.testing.assert_array_equal(s.all_logits(), _fresh(m, full[:k] + c)[k:],
                                                  err_msg=f"{case} n_batch {n_batch} step {step} rewind to {k}")
                    # back on the long history for the next rewind
                    s.rewind(k)
                    s.eval(full[k:])


def test_chat_turns_reuse_prefix(converted):
    """A second turn reuses the first's history: rewind to the common prefix,
    eval the new tokens; the logits and greedy tokens are a fresh session's."""
    path, _ = converted["qwen35"]
    turn1 = prompt_of(150, seed=7)
    with cism.Model(path) as m:
        with m.session(kv_type="f32", n_threads=2, n_batch=32) as s:
            reply = s.generate_ids(turn1, 12, cism.Sampler(), ignore_eos=True)
            history = s.tokens()
            assert history[:len(turn1)] == turn1
            turn2 = turn1 + reply[:-3] + prompt_of(20, seed=8)  # the template rewrites the reply's end
            keep = next(i for i in range(min(len(history), len(turn2))) if history[i] != turn2[i]) \
                if any(history[i] != turn2[i] for i in range(min(len(history), len(turn2)))) else len(history)
            s.rewind(keep)
            got = s.generate_ids(turn2[keep:], 10, cism.Sampler(), ignore_eos=True)
            last = s.logits()
        with m.session(kv_type="f32", n_threads=1) as f:
            want = f.generate_ids(turn2, 10, cism.Sampler(), ignore_eos=True)
            want_last = f.logits()
    assert got == want
    np.testing.assert_array_equal(last, want_last)


def test_cancelled_eval_keeps_finished_chunks(converted):
    """A progress callback that stops after the second chunk: the kept tokens
    give the logits and continuation of an eval of only them."""
    path, _ = converted["qwen35"]
    toks = prompt_of(60, seed=9)
    with cism.Model(path) as m:
        with m.session(kv_type="f32", n_threads=1, n_batch=16) as s:
            with pytest.raises(cism.CismError):
                s.eval(toks, on_progress=lambda done, total: done >= 32)
            assert s.n_past == 32
            kept = s.logits()
            s.eval(toks[32:])
            after = s.logits()
        with m.session(kv_type="f32", n_threads=1) as f:
            f.eval(toks[:32])
            np.testing.assert_array_equal(kept, f.logits())
            f.eval(toks[32:])
            np.testing.assert_array_equal(after, f.logits())


@pytest.mark.parametrize("threads", [1, 2])
def test_batch_equals_alone(converted, threads):
    """Two sessions of different prompt lengths in one cism.Batch, prefilled in
    chunks and decoded greedily together: each gets the bits it gets alone."""
    path, _ = converted["qwen35-mqa-odd-tied"]
    prompts = [prompt_of(45, seed=1), prompt_of(19, seed=2)]
    n = 12
    with cism.Model(path) as m:
        alone = []
        for p in prompts:
            with m.session(kv_type="f32", n_threads=1) as s:
                s.eval(p)
                toks, lg = [], []
                for _ in range(n):
                    lg.append(s.logits())
                    toks.append(int(np.argmax(lg[-1])))
                    s.eval([toks[-1]])
                alone.append((toks, lg))
        sessions = [m.session(kv_type="f32") for _ in prompts]
        b = cism.Batch(m, n_threads=threads, max_tokens=64, kv_type="f32")
        pending = [list(p) for p in prompts]
        toks = [[] for _ in prompts]
        lgs = [[] for _ in prompts]
        while any(len(t) < n for t in toks):
            pairs, who = [], []
            for i, s in enumerate(sessions):
                if len(toks[i]) >= n:
                    continue
                if pending[i]:
                    chunk, pending[i] = pending[i][:7], pending[i][7:]
                    pairs.append((s, chunk))
                else:
                    pairs.append((s, [toks[i][-1]]))
                who.append(i)
            assert b.eval(pairs) == [None] * len(pairs)
            for i in who:
                if not pending[i] and len(toks[i]) < n:
                    lgs[i].append(sessions[i].logits())
                    toks[i].append(int(np.argmax(lgs[i][-1])))
        b.close()
        for s in sessions:
            s.close()
    for i in range(len(prompts)):
        assert toks[i] == alone[i][0]
        for a, r in zip(lgs[i], alone[i][1]):
            assert np.array_equal(a, r)


def test_save_load_carries_state(converted, tmp_path):
    path, _ = converted["qwen35"]
    other, _ = converted["qwen35-x16"]
    toks = prompt_of(200, seed=3)
    st = str(tmp_path / "s.state")
    with cism.Model(path) as m:
        with m.session(kv_type="f32", n_threads=1) as s:
            s.eval(toks)
            s.save(st)
            s.eval([5, 6, 7])
            want = s.logits()
        with m.session(kv_type="f32", n_threads=1) as r:
            r.load(st)
            assert r.n_past == len(toks)
            r.eval([5, 6, 7])
            np.testing.assert_array_equal(r.logits(), want)
            r.rewind(150)  # no checkpoints after a load: evaluated again from 0
            r.eval(toks[150:] + [5, 6, 7])
            np.testing.assert_array_equal(r.logits(), want)
    with cism.Model(other) as m2:
        with m2.session(kv_type="f32") as r:
            with pytest.raises(cism.CismError):
                r.load(st)


def test_memory_estimate_counts_state(converted):
    """cism_session_memory_bytes counts the two state buffers and the four
    checkpoint slots (deltanet.h), and a KV cache of the attention layer only."""
    from cism import _lib
    path, _ = converted["qwen35"]
    state, tail, block = 4 * 8 * 12, 80 * 3, 4 * CHUNK * (8 + 12 + 1)  # per DeltaNet layer (3 of them)
    states = (2 * 3 * (state + tail + block) + 4 * 3 * (state + tail)) * 4
    kv = 2 * 256 * 2 * 16 * 4  # K and V of the one attention layer: n_ctx 256, 2 KV heads of 16, f32
    with cism.Model(path) as m:
        with m.session(kv_type="f32", n_ctx=256, n_threads=1) as s:
            used = _lib.lib.cism_session_memory_bytes(s.handle)
        with m.session(kv_type="f32", n_ctx=512, n_threads=1) as s:
            more = _lib.lib.cism_session_memory_bytes(s.handle)
    assert used >= kv + states
    # 256 more positions: one layer's KV rows (4 layers' would be 4 kv), token ids, attention scratch
    assert more - used <= kv + 256 * 4 + 4 * 2 * 256 * 4


def test_conditional_generation_text_part(workdir):
    """A Qwen3_5ForConditionalGeneration checkpoint (nested text_config, the
    text model's tensors under model.language_model., a vision tower):
    its text model converts and matches the multimodal model's text logits."""
    tc = {**BASE, "num_hidden_layers": 2, "layer_types": ["linear_attention", "full_attention"]}
    for k in ("bos_token_id", "eos_token_id", "pad_token_id", "tie_word_embeddings"):
        tc.pop(k)
    vc = dict(depth=1, hidden_size=32, intermediate_size=32, num_heads=2, out_hidden_size=64, patch_size=4,
              num_position_embeddings=16)
    cfg = transformers.Qwen3_5Config(text_config=tc, vision_config=vc, tie_word_embeddings=True)
    cfg.architectures = ["Qwen3_5ForConditionalGeneration"]
    torch.manual_seed(4)
    model = transformers.Qwen3_5ForConditionalGeneration._from_config(cfg, attn_implementation="eager",
                                                                      dtype=torch.float32)
    _randomize(model, 4)
    folder = workdir / "cg"
    model.save_pretrained(str(folder), safe_serialization=True)
    ref = transformers.Qwen3_5ForConditionalGeneration.from_pretrained(str(folder), attn_implementation="eager",
                                                                       dtype=torch.float32).eval()
    prompt = prompt_of(N_PROMPT)
    with torch.no_grad():
        hf = ref(torch.tensor([prompt])).logits[0].numpy()
    out = str(workdir / "cg.cism")
    convert(str(folder), out, progress=None)
    with cism.Model(out) as m:
        assert m.architecture == "qwen35"
        got = all_logits(m, prompt)
    print(f"ConditionalGeneration text part: max |logit error| {np.abs(got - hf).max():.3e}")
    assert np.abs(got - hf).max() < LIMIT


def _kld(p_logits, q_logits):
    p = np.exp(p_logits - p_logits.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    q = np.exp(q_logits - q_logits.max(-1, keepdims=True))
    q /= q.sum(-1, keepdims=True)
    return float(np.mean(np.sum(p * (np.log(p) - np.log(q)), -1)))


@pytest.mark.parametrize("recipe", ["q8", "4bit", "4bit-cal"])
def test_quantized(converted, workdir, recipe):
    """q8 / 4bit conversions (the conv, decay and norm parameters stay f32) load
    and run; their logits stay near f32's (mean KLD per token reported)."""
    src = workdir / "qwen35-x16"
    path, _ = converted["qwen35-x16"]
    out = str(workdir / f"qwen35-x16-{recipe}.cism")
    cal = recipe.endswith("-cal")  # GPTQ rounding with the inputs' statistics (the DeltaNet projections' too)
    rep = convert(str(src), out, quant=recipe.replace("-cal", ""), progress=None,
                  calibrate="auto" if cal else False, calib_tokens=512 if cal else 0)
    for name, dt in rep.tensors.items():
        if any(name.endswith(s) for s in (".ssm_conv", ".ssm_a_log", ".ssm_dt_bias", ".ssm_norm", "_norm")):
            assert dt == "f32", name
    prompt = prompt_of(N_PROMPT)
    with cism.Model(path) as m:
        ref = all_logits(m, prompt)
    with cism.Model(out) as mq:
        got = all_logits(mq, prompt)
        base = all_logits(mq, prompt, n_threads=1, n_batch=1)
        np.testing.assert_array_equal(all_logits(mq, prompt, n_threads=2, n_batch=5), base)
    kld = _kld(ref, got)
    err = float(np.abs(got - ref).max())
    print(f"qwen35-x16 {recipe}: mean KLD vs f32 {kld:.3e}, max |logit diff| {err:.3e}")
    assert kld < (0.01 if recipe == "q8" else 0.1), kld



def test_speculative_greedy_identical(converted, workdir):
    """Speculative decoding (prompt lookup, and the q8 model as a draft) rolls the
    target back after rejected drafts through the recurrent-state checkpoints:
    the greedy tokens, the session's history and its last logits are plain
    decoding's."""
    from cism.speculative import Speculator
    path, _ = converted["qwen35-x16"]
    draft = str(workdir / "qwen35-x16-draft-q8.cism")
    convert(str(workdir / "qwen35-x16"), draft, quant="q8", progress=None)
    base = prompt_of(30, seed=12)
    ids = base + base[:20] + base  # repeats: prompt lookup finds drafts
    with cism.Model(path) as m, cism.Model(draft) as q:
        with m.session(n_threads=1) as s:
            want = s.generate_ids(ids, 60, cism.Sampler(), ignore_eos=True)
            toks, logits = s.tokens(), s.logits()
        for spec in (Speculator("lookup", adaptive=1), Speculator(q, target=m, n_threads=1, adaptive=1)):
            with spec, m.session(n_threads=2) as s:
                got = spec.generate_ids(s, ids, 60, ignore_eos=True)
                assert got == want, spec.kind
                assert s.tokens() == toks and np.array_equal(s.logits(), logits)
                assert spec.stats["generated"] == 60
                if spec.kind == "draft":  # some drafts rejected: the target was rolled back
                    assert 0 < spec.stats["accepted"] < spec.stats["drafted"], spec.stats


def test_config_checks():
    """Converter config checks: the layer pattern default, refusals that name the field,
    transformers' default partial_rotary_factor (0.25) when the config names none."""
    from cism.convert import hparams_from_config
    from cism.hf_config import ConversionError
    cfg = {**BASE, "architectures": ["Qwen3_5ForCausalLM"], "num_hidden_layers": 8, "head_dim": 32}
    meta = hparams_from_config(cfg)
    assert meta["model.layer_types"] == ["linear_attention"] * 3 + ["attention"] + ["linear_attention"] * 3 + ["attention"]
    assert meta["model.rope_dim"] == 8 and meta["model.attn_output_gate"] == 1 and meta["model.qk_norm"] == 1
    with pytest.raises(ConversionError, match=r"layer_types\[1\]"):
        hparams_from_config({**cfg, "num_hidden_layers": 2, "layer_types": ["linear_attention", "sliding_attention"]})
    with pytest.raises(ConversionError, match="linear_num_value_heads"):
        hparams_from_config({**cfg, "linear_num_key_heads": 3, "linear_num_value_heads": 4})
    with pytest.raises(ConversionError, match="attention_bias"):
        hparams_from_config({**cfg, "attention_bias": True})
    wrapped = {"architectures": ["Qwen3_5ForConditionalGeneration"], "text_config": dict(cfg), "tie_word_embeddings": True}
    assert hparams_from_config(wrapped)["model.tied_embeddings"] == 1
    with pytest.raises(ConversionError, match="text_config"):
        hparams_from_config({"architectures": ["Qwen3_5ForConditionalGeneration"]})
