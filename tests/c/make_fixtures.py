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
print("fixtures written to", out)
