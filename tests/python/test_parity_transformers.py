"""fp32 parity with Hugging Face transformers (eager attention, fp32) on tiny
random checkpoints made here, one per supported model class and option:
max |logit error| over a 32-token prompt < 1e-4, and the same 32 greedy
tokens. bf16/f16 checkpoints are compared with HF running fp32 on the same
rounded weights. Each case's error goes into the summary table."""
from __future__ import annotations

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import cism  # noqa: E402
from cism.convert import convert  # noqa: E402

VOCAB = 320
N_PROMPT = 32
N_GEN = 32
LIMIT = 1e-4

COMMON = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=160, num_hidden_layers=2, num_attention_heads=4,
              num_key_value_heads=2, max_position_embeddings=256, rms_norm_eps=1e-5, bos_token_id=1, eos_token_id=2)

CASES = {
    # name: (config class, extra config, saved dtype)
    "llama": ("LlamaConfig", dict(tie_word_embeddings=False), "float32"),
    "llama-tied-mha": ("LlamaConfig", dict(tie_word_embeddings=True, num_key_value_heads=4), "float32"),
    "llama-rope-llama3": ("LlamaConfig", dict(tie_word_embeddings=False, rope_theta=10000.0, rope_scaling={
        "rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
        "original_max_position_embeddings": 64}), "float32"),
    "llama-rope-linear": ("LlamaConfig", dict(rope_theta=500.0, rope_scaling={"rope_type": "linear", "factor": 4.0}),
                          "float32"),
    "llama-bf16": ("LlamaConfig", dict(tie_word_embeddings=False), "bfloat16"),
    "mistral-headdim32": ("MistralConfig", dict(head_dim=32, num_key_value_heads=1, sliding_window=None,
                                                tie_word_embeddings=False), "float32"),
    "qwen2": ("Qwen2Config", dict(tie_word_embeddings=False, rope_theta=1000000.0), "float32"),
    "qwen2-tied-f16": ("Qwen2Config", dict(tie_word_embeddings=True), "float16"),
    "qwen3": ("Qwen3Config", dict(head_dim=32, tie_word_embeddings=True, rms_norm_eps=1e-6), "float32"),
    "qwen3-untied": ("Qwen3Config", dict(head_dim=16, tie_word_embeddings=False), "float32"),
}


def _randomize(model, seed: int) -> None:
    """Weights with enough spread for distinct logits; norm weights and biases
    random too (transformers initializes them to 1 and 0, which would hide a
    missing norm weight or bias)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.copy_(0.5 + torch.rand(p.shape, generator=g))
            elif name.endswith("bias"):
                p.copy_(0.2 * torch.randn(p.shape, generator=g))
            else:
                p.copy_(0.08 * torch.randn(p.shape, generator=g))


def make_checkpoint(case: str, folder, seed: int = 0):
    cls_name, extra, dtype = CASES[case]
    cfg = getattr(transformers, cls_name)(**{**COMMON, **extra})
    cfg.architectures = [cls_name.replace("Config", "ForCausalLM")]
    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation="eager", dtype=torch.float32)
    _randomize(model, seed)
    model = model.to(getattr(torch, dtype))
    model.save_pretrained(str(folder), safe_serialization=True)
    # the reference: HF in fp32 on exactly the weights in the file
    ref = transformers.AutoModelForCausalLM.from_pretrained(str(folder), attn_implementation="eager",
                                                            dtype=torch.float32)
    return ref.eval()


def hf_logits_and_greedy(ref, prompt):
    """HF logits of the prompt, and 32 greedy tokens each from a full forward
    over the whole prefix (no KV cache), with the smallest top-2 margin seen."""
    with torch.no_grad():
        logits = ref(torch.tensor([prompt])).logits[0].float().numpy()
        seq, greedy, margins = list(prompt), [], []
        for _ in range(N_GEN):
            last = ref(torch.tensor([seq])).logits[0, -1]
            top2 = torch.topk(last, 2).values
            margins.append(float(top2[0] - top2[1]))
            greedy.append(int(last.argmax()))
            seq.append(greedy[-1])
    return logits, greedy, min(margins)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    return tmp_path_factory.mktemp("parity")


@pytest.mark.parametrize("case", list(CASES))
def test_parity(case, workdir, record_parity):
    folder = workdir / case
    ref = make_checkpoint(case, folder, seed=sum(map(ord, case)))
    prompt = np.random.default_rng(7).integers(3, VOCAB, N_PROMPT).tolist()
    hf_logits, hf_greedy, margin = hf_logits_and_greedy(ref, prompt)

    out = str(workdir / f"{case}.cism")
    convert(str(folder), out, progress=None)
    with cism.Model(out) as m:
        saved = CASES[case][2]
        assert m.weight_dtype == {"float32": "f32", "bfloat16": "bf16", "float16": "f16"}[saved]
        with m.session(kv_type="f32", logits_all=True) as s:
            s.eval(prompt)
            logits = s.all_logits()
        err = float(np.abs(logits - hf_logits).max())
        with m.session(kv_type="f32") as s:
            greedy = s.generate_ids(prompt, N_GEN, cism.Sampler(), ignore_eos=True)
    same = greedy == hf_greedy
    record_parity(f"tiny {case}", m_arch(out), {"float32": "f32", "bfloat16": "bf16", "float16": "f16"}[saved], err,
                  "same" if same else f"DIFFERENT (min HF top-2 margin {margin:.2e})")
    assert err < LIMIT, f"{case}: max |logit error| {err:.3e}"
    assert np.abs(hf_logits).max() > 0.5, "logits too flat for a meaningful comparison"
    assert same, f"{case}: greedy {greedy} != HF {hf_greedy} (min HF margin {margin:.2e})"


def m_arch(path: str) -> str:
    with cism.Model(path) as m:
        return m.architecture


def test_llama3_rope_scaling_matters(workdir):
    """The llama3 case's scaling changes the RoPE frequencies in all three
    regions (kept, smoothed, divided) and so the logits: without it the
    parity test above could not tell scaling from no scaling."""
    folder = workdir / "rope-check"
    ref = make_checkpoint("llama-rope-llama3", folder, seed=5)
    hd = COMMON["hidden_size"] // COMMON["num_attention_heads"]
    base = 1.0 / (10000.0 ** (np.arange(0, hd, 2) / hd))
    scaled = ref.model.rotary_emb.inv_freq.numpy()
    wavelen = 2 * math.pi / base
    assert np.allclose(scaled[wavelen < 64 / 4], base[wavelen < 64 / 4])          # high frequencies kept
    assert np.allclose(scaled[wavelen > 64], base[wavelen > 64] / 8.0)            # low frequencies divided
    mid = (wavelen >= 16) & (wavelen <= 64)
    assert mid.any() and not np.allclose(scaled[mid], base[mid]) and not np.allclose(scaled[mid], base[mid] / 8)

    cfg = transformers.LlamaConfig(**{**COMMON, **CASES["llama-rope-llama3"][1], "rope_scaling": None})
    plain = transformers.LlamaForCausalLM(cfg).eval()
    plain.load_state_dict(ref.state_dict())
    prompt = torch.tensor([np.random.default_rng(7).integers(3, VOCAB, N_PROMPT).tolist()])
    with torch.no_grad():
        diff = (ref(prompt).logits - plain(prompt).logits).abs().max().item()
    assert diff > 1e-2, f"scaling changed the logits by only {diff}"

    out = str(workdir / "rope-check.cism")
    convert(str(folder), out, progress=None)
    with cism.Model(out) as m:
        md = m.metadata
        assert md["model.rope_scaling.type"] == "llama3" and md["model.rope_scaling.factor"] == 8.0
        assert md["model.rope_scaling.original_context_length"] == 64
