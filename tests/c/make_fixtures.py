"""Builds the files the C tests read, in the build folder (CTest fixture).

Converts stories260K (llama2.c and Hugging Face imports) to .cism with the
package's converter (imported from the source tree) and writes the
transformers reference (reference.npz) as plain binary files:
  <name>.tokens<L>.i32, <name>.logits<L>.f32, <name>.greedy<L>.i32
"""
import os
import sys

import numpy as np

root, shared, out = sys.argv[1], sys.argv[2], sys.argv[3]
sys.path.insert(0, os.path.join(root, "bindings_py"))
from cism.convert import convert  # noqa: E402

models = os.path.join(shared, "models")
if not os.path.isdir(models):
    print(f"{models} is absent; fixtures not built")
    sys.exit(0)
os.makedirs(out, exist_ok=True)
convert(os.path.join(models, "stories260K", "stories260K.bin"), os.path.join(out, "stories260K.cism"),
        tokenizer=os.path.join(models, "stories260K", "tok512.bin"), overwrite=True, progress=None)
convert(os.path.join(models, "stories260K-hf"), os.path.join(out, "stories260K-hf.cism"), overwrite=True, progress=None)
convert(os.path.join(models, "stories260K-hf"), os.path.join(out, "stories260K-hf-f16.cism"), dtype="f16",
        overwrite=True, progress=None)
ref = np.load(os.path.join(models, "stories260K-hf", "reference.npz"))
for L in (1, 8, 32):
    ref[f"tokens_{L}"].astype("<i4").tofile(os.path.join(out, f"stories260K.tokens{L}.i32"))
    ref[f"logits_{L}"].astype("<f4").tofile(os.path.join(out, f"stories260K.logits{L}.f32"))
    ref[f"greedy_{L}"].astype("<i4").tofile(os.path.join(out, f"stories260K.greedy{L}.i32"))
# the families beyond the Llama layout (test_families.c): random weights and norms, through
# each family's config reader (cism/hf_families.py), f32
from cism.convert import hparams_from_config  # noqa: E402
FAMILY_BASE = dict(vocab_size=256, hidden_size=72, intermediate_size=136, num_attention_heads=3, num_key_value_heads=1,
                   max_position_embeddings=1024, rms_norm_eps=1e-5)
FAMILY_CONFIGS = {
    "gemma3": dict(architectures=["Gemma3ForCausalLM"], num_hidden_layers=4, head_dim=24, sliding_window=8,
                   query_pre_attn_scalar=30, layer_types=["sliding_attention"] * 3 + ["full_attention"]),
    "smollm3": dict(architectures=["SmolLM3ForCausalLM"], num_hidden_layers=4, tie_word_embeddings=True),
    "phi3": dict(architectures=["Phi3ForCausalLM"], num_hidden_layers=2, sliding_window=12,
                 rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5}),
    "lfm2": dict(architectures=["Lfm2ForCausalLM"], num_hidden_layers=3, layer_types=["conv", "full_attention", "conv"],
                 conv_L_cache=3, conv_bias=True, block_auto_adjust_ff_dim=False),
    "qwen35": dict(architectures=["Qwen3_5ForCausalLM"], num_hidden_layers=3, head_dim=24, linear_num_key_heads=1,
                   linear_num_value_heads=3, linear_key_head_dim=10, linear_value_head_dim=14,
                   linear_conv_kernel_dim=3, layer_types=["linear_attention", "full_attention", "linear_attention"],
                   rope_parameters={"rope_type": "default", "rope_theta": 5000.0, "partial_rotary_factor": 0.5}),
}


def write_family(name, recipe=None, config=None):
    from cism.convert import expected_tensors as et, write_model as wm
    fam_meta = hparams_from_config({**FAMILY_BASE, **(config or FAMILY_CONFIGS[name])})
    fam_meta["tokenizer.bos_id"] = 1
    fam_rng = np.random.default_rng(sum(map(ord, name)))
    fam_shapes = et(fam_meta)
    weights = {n: ((0.5 + fam_rng.random(s)) if len(s) == 1 else fam_rng.standard_normal(s) * 0.08).astype(np.float32)
               for n, s in fam_shapes.items()}
    suffix = f".{recipe}" if recipe else ""
    wm(os.path.join(out, f"family-{name}{suffix}.cism"), fam_meta, list(fam_shapes), lambda n: weights[n],
       lambda n: 0, overwrite=True, quant=recipe)


for name in FAMILY_CONFIGS:
    write_family(name)
# sliding-window rings with heads that fit the quantized KV caches (head_dim 32, test_kv_cache.c)
write_family("gemma3-hd32", config=dict(FAMILY_CONFIGS["gemma3"], head_dim=32))
if not os.environ.get("CISM_LIB"):  # a cross build: its library cannot be loaded here
    print("fixtures written to", out, "(no quantized fixtures: CISM_LIB is not set)")
    sys.exit(0)
for name in FAMILY_CONFIGS:
    write_family(name, "q8")
# quantized stories260K (the C library quantizes: CISM_LIB points at the build's libcism)
# 4bit with data-free rounding (--no-calibrate): these fixtures test the tiers and the kernels, whose greedy
# checks (test_tiers.c) are tied to these exact weights; the calibrated default is tested in tests/python
for recipe in ("q8", "4bit"):
    convert(os.path.join(models, "stories260K-hf"), os.path.join(out, f"stories260K-hf.{recipe}.cism"), quant=recipe,
            overwrite=True, progress=None, calibrate=False)
# the evaluation text as token ids (tokenizer.json, no special tokens)
from tokenizers import Tokenizer  # noqa: E402
text = open(os.path.join(models, "eval", "tinystories_valid_excerpt.txt"), encoding="utf-8").read()
tok = Tokenizer.from_file(os.path.join(models, "stories260K-hf", "tokenizer.json"))
np.asarray(tok.encode(text, add_special_tokens=False).ids, dtype="<i4").tofile(os.path.join(out, "tinystories.stories260K.i32"))

# a synthetic model large enough that a hidden f32 copy of its weights would show in the resident memory
from cism.convert import expected_tensors, write_model  # noqa: E402
meta = {"general.architecture": "llama", "model.vocab_size": 8192, "model.dim": 512, "model.n_layers": 2,
        "model.n_heads": 8, "model.n_kv_heads": 8, "model.head_dim": 64, "model.ffn_dim": 1536,
        "model.context_length": 128, "model.norm_eps": 1e-5, "model.rope_theta": 10000.0,
        "model.tied_embeddings": 0, "tokenizer.bos_id": 1}
rng = np.random.default_rng(3)
shapes = expected_tensors(meta)
write_model(os.path.join(out, "synthetic.q4s.cism"), meta, list(shapes),
            lambda n: (np.ones(shapes[n], np.float32) if len(shapes[n]) == 1
                       else (rng.standard_normal(shapes[n]) * 0.02).astype(np.float32)),
            lambda n: 0, overwrite=True, quant="q4s")
print("fixtures written to", out)
