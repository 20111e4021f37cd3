"""fp32 parity with transformers (eager, fp32) for the families beyond the
Llama layout (cism/hf_families.py): Gemma 3, SmolLM3, Phi-3. Tiny random
checkpoints made here, several configs per family (odd widths, GQA and MQA,
tied and untied heads, random norm weights), prompts longer than the sliding
windows: max |logit error| < 1e-4 over the prompt on every kernel tier this
CPU runs, the same 32 greedy tokens, and the same bits whether the prompt is
evaluated at once, token by token or in chunks, on 1 or 2 threads."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import cism  # noqa: E402
from cism.convert import convert  # noqa: E402

from test_parity_transformers import _randomize, hf_logits_and_greedy, N_GEN  # noqa: E402

VOCAB = 320
N_PROMPT = 40
LIMIT = 1e-4

BASE = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=160, num_hidden_layers=4, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=256, rms_norm_eps=1e-5, bos_token_id=1, eos_token_id=2,
            pad_token_id=0)

CASES = {
    # name: (config class, model class, config)
    "gemma3": ("Gemma3TextConfig", "Gemma3ForCausalLM", dict(
        head_dim=16, sliding_window=8, query_pre_attn_scalar=24,
        layer_types=["sliding_attention", "sliding_attention", "sliding_attention", "full_attention"])),
    "gemma3-mqa-odd-untied": ("Gemma3TextConfig", "Gemma3ForCausalLM", dict(
        hidden_size=72, intermediate_size=136, num_hidden_layers=3, num_attention_heads=3, num_key_value_heads=1,
        head_dim=24, sliding_window=5, query_pre_attn_scalar=30, tie_word_embeddings=False, rms_norm_eps=1e-6,
        layer_types=["sliding_attention", "full_attention", "sliding_attention"],
        rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 500.0},
                         "full_attention": {"rope_type": "default", "rope_theta": 20000.0}})),
    "smollm3": ("SmolLM3Config", "SmolLM3ForCausalLM", dict(tie_word_embeddings=True)),
    "smollm3-mqa-odd-untied": ("SmolLM3Config", "SmolLM3ForCausalLM", dict(
        hidden_size=72, intermediate_size=136, num_hidden_layers=3, num_attention_heads=3, num_key_value_heads=1,
        no_rope_layers=[0, 1, 0], tie_word_embeddings=False)),
    "phi3": ("Phi3Config", "Phi3ForCausalLM", dict(num_hidden_layers=2, tie_word_embeddings=False)),
    "phi3-partial-window-tied": ("Phi3Config", "Phi3ForCausalLM", dict(
        num_hidden_layers=3, num_key_value_heads=1, sliding_window=8, tie_word_embeddings=True,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5})),
}


def make(case: str, folder, seed: int):
    cfg_cls, model_cls, extra = CASES[case]
    cfg = getattr(transformers, cfg_cls)(**{**BASE, **extra})
    cfg.architectures = [model_cls]
    torch.manual_seed(seed)
    model = getattr(transformers, model_cls)._from_config(cfg, attn_implementation="eager", dtype=torch.float32)
    _randomize(model, seed)
    model.save_pretrained(str(folder), safe_serialization=True)
    ref = getattr(transformers, model_cls).from_pretrained(str(folder), attn_implementation="eager",
                                                           dtype=torch.float32)
    return ref.eval()


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    return tmp_path_factory.mktemp("families")


def all_logits(m, prompt, **kw):
    with m.session(kv_type="f32", logits_all=True, **kw) as s:
        s.eval(prompt)
        return s.all_logits()


@pytest.mark.parametrize("case", list(CASES))
def test_family_parity(case, workdir, record_parity):
    folder = workdir / case
    ref = make(case, folder, seed=sum(map(ord, case)))
    prompt = np.random.default_rng(11).integers(3, VOCAB, N_PROMPT).tolist()
    hf_logits, hf_greedy, margin = hf_logits_and_greedy(ref, prompt)
    out = str(workdir / f"{case}.cism")
    convert(str(folder), out, progress=None)
    with cism.Model(out) as m:
        assert m.architecture == CASES[case][1].replace("ForCausalLM", "").lower()
        errs = {}
        for tier in cism.kernel_tiers():
            errs[tier] = float(np.abs(all_logits(m, prompt, kernel_tier=tier) - hf_logits).max())
        with m.session(kv_type="f32") as s:
            greedy = s.generate_ids(prompt, N_GEN, cism.Sampler(), ignore_eos=True)
        # one path per position: at once, token by token, in chunks, on 1 or 2 threads
        base = all_logits(m, prompt, n_threads=1)
        for kw in (dict(n_threads=2), dict(n_threads=1, n_batch=1), dict(n_threads=2, n_batch=5)):
            np.testing.assert_array_equal(all_logits(m, prompt, **kw), base, err_msg=f"{case} {kw}")
    err = max(errs.values())
    same = greedy == hf_greedy
    record_parity(f"tiny {case}", case.split("-")[0], "f32", err,
                  "same" if same else f"DIFFERENT (min HF top-2 margin {margin:.2e})")
    assert err < LIMIT, f"{case}: max |logit error| {errs}"
    assert np.abs(hf_logits).max() > 0.5, "logits too flat for a meaningful comparison"
    assert same, f"{case}: greedy {greedy} != HF {hf_greedy} (min HF margin {margin:.2e})"


def test_gemma3_window_matters(workdir):
    """The sliding window and the local RoPE base change the logits past the
    window: without them the parity above could not tell."""
    folder = workdir / "gemma3-window"
    ref = make("gemma3", folder, seed=3)
    prompt = torch.tensor([np.random.default_rng(11).integers(3, VOCAB, N_PROMPT).tolist()])
    cfg = transformers.Gemma3TextConfig(**{**BASE, **CASES["gemma3"][2], "sliding_window": 4096})
    wide = transformers.Gemma3ForCausalLM(cfg).eval()
    wide.load_state_dict(ref.state_dict())
    with torch.no_grad():
        a, b = ref(prompt).logits[0], wide(prompt).logits[0]
    assert (a[:8] - b[:8]).abs().max().item() < 1e-4      # inside the window: the same
    assert (a[8:] - b[8:]).abs().max().item() > 1e-2      # past it: not


def test_longrope_refused(tmp_path):
    cfg = dict(BASE, architectures=["Phi3ForCausalLM"], rope_scaling={
        "type": "longrope", "short_factor": [1.0] * 8, "long_factor": [2.0] * 8}, original_max_position_embeddings=64)
    from cism.convert import hparams_from_config
    from cism.hf_config import ConversionError
    with pytest.raises(ConversionError, match="longrope"):
        hparams_from_config(cfg)


LONG = 700   # past the ring of a window-8 layer with n_batch 5: 8 + 5 + 256 = 269 positions


@pytest.fixture(scope="module")
def gemma3_long(workdir):
    """A Gemma 3 checkpoint with room for LONG positions, converted."""
    case = "gemma3"
    cfg_cls, model_cls, extra = CASES[case]
    folder = workdir / "gemma3-long"
    cfg = getattr(transformers, cfg_cls)(**{**BASE, **extra, "max_position_embeddings": 1024})
    cfg.architectures = [model_cls]
    torch.manual_seed(1)
    model = getattr(transformers, model_cls)._from_config(cfg, attn_implementation="eager", dtype=torch.float32)
    _randomize(model, 1)
    model.save_pretrained(str(folder), safe_serialization=True)
    ref = getattr(transformers, model_cls).from_pretrained(str(folder), attn_implementation="eager",
                                                           dtype=torch.float32).eval()
    out = str(workdir / "gemma3-long.cism")
    convert(str(folder), out, progress=None)
    return ref, out


def test_sliding_window_ring(gemma3_long):
    """With n_ctx well above window + n_batch + slack, the sliding layers keep a
    ring (session memory drops), and every logit row is the same bits as
    without one (n_batch 512: no ring) and within 1e-4 of transformers."""
    ref, path = gemma3_long
    prompt = np.random.default_rng(3).integers(3, VOCAB, LONG).tolist()
    with torch.no_grad():
        hf = ref(torch.tensor([prompt])).logits[0].numpy()
    with cism.Model(path) as m:
        with m.session(kv_type="f32", logits_all=True, n_ctx=1024, n_batch=5) as s:
            ring_bytes = s.memory_bytes()
            s.eval(prompt)
            ring = s.all_logits()
        with m.session(kv_type="f32", logits_all=True, n_ctx=1024, n_batch=512) as s:
            full_bytes = s.memory_bytes()
            s.eval(prompt)
            full = s.all_logits()
        with m.session(kv_type="f32", n_ctx=800, n_batch=5, n_threads=1) as s800, \
                m.session(kv_type="f32", n_ctx=1024, n_batch=5, n_threads=1) as s1024:
            grown = s1024.memory_bytes() - s800.memory_bytes()
    np.testing.assert_array_equal(ring, full)
    assert float(np.abs(ring - hf).max()) < LIMIT
    assert ring_bytes < full_bytes
    # 224 more positions cost the one global layer's K and V (2 heads of 16 f32) plus
    # small scratch, not the sliding layers' too: 4 x 57,344 bytes without rings
    per_layer = 224 * 2 * 2 * 16 * 4
    assert per_layer <= grown < 2 * per_layer, grown


@pytest.mark.parametrize("back", [100, 600])
def test_sliding_window_rewind(gemma3_long, back, tmp_path):
    """Rewinding a ring session: within the slack (100 back: free) and past
    what the ring keeps (600 back: the kept tokens are evaluated again), then
    continuing, gives the bits of a fresh session; so does a saved and loaded
    state, before and after a rewind below its position."""
    _, path = gemma3_long
    rng = np.random.default_rng(4)
    a = rng.integers(3, VOCAB, LONG).tolist()
    b = rng.integers(3, VOCAB, 30).tolist()
    keep = LONG - back
    with cism.Model(path) as m:
        def run(tokens):
            with m.session(kv_type="f32", logits_all=True, n_ctx=1024, n_batch=5) as s:
                s.eval(tokens)
                return s.all_logits()
        with m.session(kv_type="f32", logits_all=True, n_ctx=1024, n_batch=5) as s:
            s.eval(a)
            s.rewind(keep)
            assert s.n_past == keep
            s.eval(b)
            np.testing.assert_array_equal(s.all_logits(), run(a[:keep] + b)[keep:])
            state = str(tmp_path / "s.state")
            s.save(state)
        with m.session(kv_type="f32", logits_all=True, n_ctx=1024, n_batch=5) as s:
            s.load(state)
            s.eval(b[:7])
            np.testing.assert_array_equal(s.all_logits(), run(a[:keep] + b + b[:7])[keep + 30:])
            s.rewind(keep + 10)
            s.eval(b[:3])
            np.testing.assert_array_equal(s.all_logits(), run(a[:keep] + b[:10] + b[:3])[keep + 10:])


def test_sliding_window_ring_in_a_batch(gemma3_long):
    """Two ring sessions stepped together through one cism.Batch (prompts in
    chunks of 5, then one token each) give the bits of each alone; a member
    with more tokens than its ring allows is refused."""
    _, path = gemma3_long
    rng = np.random.default_rng(6)
    prompts = [rng.integers(3, VOCAB, n).tolist() for n in (400, 330)]
    with cism.Model(path) as m:
        alone = []
        for p in prompts:
            with m.session(kv_type="f32", logits_all=True, n_ctx=1024, n_batch=5) as s:
                s.eval(p)
                alone.append(s.all_logits()[-1].copy())
        sessions = [m.session(kv_type="f32", n_ctx=1024, n_batch=5) for _ in prompts]
        with cism.Batch(m, kv_type="f32", max_tokens=16) as b:
            done = [0, 0]
            while done != [len(p) for p in prompts]:
                work = []
                for i, p in enumerate(prompts):
                    if done[i] < len(p):
                        work.append((sessions[i], p[done[i]:done[i] + 5]))
                        done[i] = min(done[i] + 5, len(p))
                assert all(e is None for e in b.eval(work))
            for s, a in zip(sessions, alone):
                np.testing.assert_array_equal(s.logits(), a)
            with pytest.raises(cism.InvalidArgumentError, match="N_BATCH"):
                b.eval([(sessions[0], prompts[0][:6])])
        for s in sessions:
            s.close()
