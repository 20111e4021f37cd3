"""Token ids generated through the Python API (the `cism` package), written as
text for the JVM and ARM64 parity checks of run_platform_checks.sh:

  python python_tokens.py FIXTURE_DIR SHARED_MODELS_DIR OUT_DIR
    OUT_DIR/greedy.txt    32 greedy tokens after the 8-token reference prompt
    OUT_DIR/sampled.txt   48 tokens from BOS, temperature 0.8, top-p 0.95, seed 42
    OUT_DIR/text.txt      a text with emoji and accents, and
    OUT_DIR/text_ids.txt  its ids from Hugging Face `tokenizers` (stories260K-hf/tokenizer.json)
"""
import os
import sys

import numpy as np

from tokenizers import Tokenizer

import cism

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
