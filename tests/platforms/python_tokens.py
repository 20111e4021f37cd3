"""Token ids generated through the Python API (the `cism` package), written as
text for the JVM and ARM64 parity checks of run_platform_checks.sh:

  python python_tokens.py FIXTURE_DIR SHARED_MODELS_DIR OUT_DIR
    OUT_DIR/greedy.txt    32 greedy tokens after the 8-token reference prompt
    OUT_DIR/sampled.txt   48 tokens from BOS, temperature 0.8, top-p 0.95, seed 42
    OUT_DIR/text.txt      a text with emoji and accents, and
    OUT_DIR/text_ids.txt  its ids from Hugging Face `tokenizers` (stories260K-hf/tokenizer.json)
    OUT_DIR/act_q8.cism   a small synthetic q8 model (seeded), and
    OUT_DIR/act_MODE.f32  its last logits after ACT_TOKENS under each of Session.Activations
                          (default, outliers, int8, float), little-endian float32
"""
import os
import sys

import numpy as np

from tokenizers import Tokenizer

import cism
from cism.actmodes import act_kwargs
from cism.synthetic import Preset, write_synthetic

ACT_TOKENS = [1, 7, 3, 22, 9, 41, 5, 17, 33, 2, 60, 11]  # HostJvmTest.ACT_TOKENS
ACT_MODES = {"default": "auto", "outliers": "outliers", "int8": "int8", "float": "float"}  # file name: --act

fixtures, shared_models, out = sys.argv[1], sys.argv[2], sys.argv[3]
os.makedirs(out, exist_ok=True)
prompt = np.fromfile(os.path.join(fixtures, "stories260K.tokens8.i32"), dtype="<i4").tolist()
with cism.Model(os.path.join(fixtures, "stories260K.cism")) as model:
    with cism.Session(model, n_threads=2) as session:
        greedy = session.generate_ids(prompt, 32, cism.Sampler(), ignore_eos=True)
    with cism.Session(model) as session:
        sampled = session.generate_ids([model.bos_id], 48, cism.Sampler(temperature=0.8, top_p=0.95, seed=42),
                                       ignore_eos=True)
for name, tokens in (("greedy.txt", greedy), ("sampled.txt", sampled)):
    with open(os.path.join(out, name), "w") as f:
        f.write(" ".join(str(t) for t in tokens) + "\n")
text = "Once upon a time 😀 a café in Zürich said «héllo» 中文\n"
hf = Tokenizer.from_file(os.path.join(shared_models, "stories260K-hf", "tokenizer.json"))
with open(os.path.join(out, "text.txt"), "w", encoding="utf-8") as f:
    f.write(text)
with open(os.path.join(out, "text_ids.txt"), "w") as f:
    f.write(" ".join(str(t) for t in hf.encode(text).ids) + "\n")
print("python API tokens:", len(greedy), "greedy,", len(sampled), "sampled;", len(hf.encode(text).ids), "HF ids")

act_model = os.path.join(out, "act_q8.cism")
write_synthetic(Preset("act-modes", "tests", "llama", 64, 128, 2, 4, 2, 32, 256, 128, 10000.0, 1e-5, False, {}),
                act_model, "q8", seed=5)
with cism.Model(act_model) as model:
    for mode, act in ACT_MODES.items():
        with cism.Session(model, n_ctx=64, n_threads=1, **act_kwargs(act)) as session:
            session.eval(ACT_TOKENS)
            session.logits().astype("<f4").tofile(os.path.join(out, f"act_{mode}.f32"))
print("python API logits of", act_model, "under", ", ".join(ACT_MODES))
