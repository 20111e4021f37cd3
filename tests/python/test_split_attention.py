"""Split-KV attention (forward.c, docs/PERFORMANCE.md): at a context spanning
several fixed splits of 256 positions (1300 tokens), on tiny random Llama and
Gemma 3 (sliding window 300, so windows cross split boundaries) checkpoints:

- every logit row is within a bound of transformers run in float64;
- the rows are the same bits with 1, 2 or 3 threads, prompt chunks of 512, 7
  or 1 token (a token evaluated alone after a prefix of the prompt, the
  decode path whose splits get units of their own), and for sessions stepped
  together through a cism.Batch (one decoding while another takes chunks);
- with a q8 cache the same bit-for-bit invariances hold."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import cism  # noqa: E402
from cism.convert import convert  # noqa: E402

from test_parity_transformers import _randomize  # noqa: E402

VOCAB = 320
N = 1300          # positions 0..1299: splits 0..5 of 256
N_CTX = 1536
TAIL = 60         # the last TAIL tokens also one at a time after the prefix
LIMIT = 2e-4      # max |logit - float64 transformers|

COMMON = dict(vocab_size=VOCAB, hidden_size=128, intermediate_size=192, num_hidden_layers=2, num_attention_heads=4,
              num_key_value_heads=2, max_position_embeddings=2048, rms_norm_eps=1e-5, bos_token_id=1, eos_token_id=2,
              pad_token_id=0)

CASES = {
    "llama": ("LlamaConfig", "LlamaForCausalLM", dict(tie_word_embeddings=False)),
    "gemma3-window300": ("Gemma3TextConfig", "Gemma3ForCausalLM", dict(
        head_dim=32, sliding_window=300, query_pre_attn_scalar=32,
        layer_types=["sliding_attention", "full_attention"])),
}


@pytest.fixture(scope="module", params=list(CASES))
def case(request, tmp_path_factory):
    name = request.param
    cfg_cls, model_cls, extra = CASES[name]
    folder = tmp_path_factory.mktemp("split") / name
    cfg = getattr(transformers, cfg_cls)(**{**COMMON, **extra})
    cfg.architectures = [model_cls]
    torch.manual_seed(11)
    model = getattr(transformers, model_cls)._from_config(cfg, attn_implementation="eager", dtype=torch.float32)
    _randomize(model, 11)
    model.save_pretrained(str(folder), safe_serialization=True)
    ref = getattr(transformers, model_cls).from_pretrained(str(folder), attn_implementation="eager",
                                                           dtype=torch.float32).eval().double()
    out = str(folder) + ".cism"
    convert(str(folder), out, progress=None)
    prompt = np.random.default_rng(5).integers(3, VOCAB, N).tolist()
    with torch.no_grad():
        hf = ref(torch.tensor([prompt])).logits[0].numpy()
    return name, out, prompt, hf


def run(m, prompt, kv_type, n_threads, n_batch, tier="auto"):
    with m.session(kv_type=kv_type, logits_all=True, n_ctx=N_CTX, n_batch=n_batch, n_threads=n_threads,
                   kernel_tier=tier) as s:
        s.eval(prompt)
        return s.all_logits().copy()


def run_tail(m, prompt, kv_type, n_threads, tier="auto"):
    """The prompt but its last TAIL tokens as one eval, then those one by one."""
    rows = []
    with m.session(kv_type=kv_type, n_ctx=N_CTX, n_threads=n_threads, kernel_tier=tier) as s:
        s.eval(prompt[:N - TAIL])
        for t in prompt[N - TAIL:]:
            s.eval([t])
            rows.append(s.logits().copy())
    return np.stack(rows)


def run_batch(m, prompt, kv_type):
    """Session A decodes the last TAIL tokens one at a time while session B
    takes the whole prompt in chunks of 13, both in one cism.Batch."""
    with m.session(kv_type=kv_type, n_ctx=N_CTX) as a, m.session(kv_type=kv_type, n_ctx=N_CTX) as b, \
            cism.Batch(m, kv_type=kv_type, max_tokens=16, n_ctx=N_CTX, n_threads=2) as batch:
        a.eval(prompt[:N - TAIL])
        rows_a, done_b = [], 0
        for i in range(TAIL):
            work = [(a, prompt[N - TAIL + i:N - TAIL + i + 1])]
            if done_b < N:
                work.append((b, prompt[done_b:done_b + 13]))
                done_b += 13
            assert all(e is None for e in batch.eval(work))
            rows_a.append(a.logits().copy())
        while done_b < N:
            assert all(e is None for e in batch.eval([(b, prompt[done_b:done_b + 13])]))
            done_b += 13
        return np.stack(rows_a), b.logits().copy()


@pytest.mark.parametrize("kv_type", ["f32", "q8"])
def test_split_attention_invariance(case, kv_type):
    name, path, prompt, hf = case
    with cism.Model(path) as m:
        ref = run(m, prompt, kv_type, 1, 512)
        for threads, n_batch in ((2, 512), (3, 512), (2, 7), (3, 1300)):
            np.testing.assert_array_equal(run(m, prompt, kv_type, threads, n_batch), ref,
                                          err_msg=f"{name} kv {kv_type}: {threads} threads, chunks of {n_batch}")
        for threads in (1, 3):
            np.testing.assert_array_equal(run_tail(m, prompt, kv_type, threads), ref[N - TAIL:],
                                          err_msg=f"{name} kv {kv_type}: tokens alone, {threads} threads")
        rows_a, last_b = run_batch(m, prompt, kv_type)
        np.testing.assert_array_equal(rows_a, ref[N - TAIL:], err_msg=f"{name} kv {kv_type}: decoding in a batch")
        np.testing.assert_array_equal(last_b, ref[-1], err_msg=f"{name} kv {kv_type}: chunks in a batch")
    err = float(np.abs(ref - hf).max())
    if kv_type == "f32":
        assert err < LIMIT, f"{name}: max |logit - float64 transformers| {err:.3e} over {N} positions"
        assert np.abs(hf).max() > 0.5, "logits too flat for a meaningful comparison"
    else:  # the quantized cache moves the logits, but not far
        assert err < 0.1 * np.abs(hf).max(), f"{name} q8: {err:.3e}"



@pytest.mark.parametrize("tier", [t for t in ("scalar", "avx2") if t in cism.kernel_tiers()])
def test_split_attention_other_tiers(case, tier):
    """The same invariances on the scalar oracle and on AVX2 (when this CPU has
    it): chunks of 7 with 2 threads and tokens alone give the bits of one
    512-token chunk on one thread; close to float64 transformers."""
    name, path, prompt, hf = case
    with cism.Model(path) as m:
        ref = run(m, prompt, "f32", 1, 512, tier)
        np.testing.assert_array_equal(run(m, prompt, "f32", 2, 7, tier), ref, err_msg=f"{name} {tier}: chunks of 7")
        np.testing.assert_array_equal(run_tail(m, prompt, "f32", 2, tier), ref[N - TAIL:],
                                      err_msg=f"{name} {tier}: tokens alone")
    assert float(np.abs(ref - hf).max()) < LIMIT
