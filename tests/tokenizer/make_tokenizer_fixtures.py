"""Builds the tokenizer parity fixtures (CTest fixture of tests/c/test_tokenizer).

For every tokenizer in ../shared/models (and a few variants of them that turn
on the options real files rarely use), writes to the output folder:
  <name>.cism   a tiny random model (dim 8, 1 layer) carrying the tokenizer,
                converted by the package's converter code
  <name>.cases  HF `tokenizers` results on the corpus: ids for each text and
                flag combination, and decode(ids) with and without specials
and once: corpus.bin (the texts). Formats are read by test_tokenizer.c:
  corpus.bin: u32 n; n x (u32 len, bytes)
  <name>.cases: u32 n; n x (u32 text index, u32 flags, u32 n_ids, i32 ids[],
                 u32 dec_len (0xFFFFFFFF: same as the text), bytes,
                 u32 dec_skip_len (0xFFFFFFFF: same as dec), bytes)
flags: 1 add special tokens, 2 parse special tokens.
"""
import copy
import json
import os
import random
import struct
import sys
import time

import numpy as np
from tokenizers import Tokenizer

root, shared, out = sys.argv[1], sys.argv[2], sys.argv[3]
sys.path.insert(0, os.path.join(root, "bindings_py"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cism import convert as cv  # noqa: E402
from cism.tokenizer_meta import compact_tokenizer  # noqa: E402
from corpus import build_corpus  # noqa: E402

models = os.path.join(shared, "models")
if not os.path.isdir(models):
    print(f"{models} is absent; tokenizer fixtures not built")
    sys.exit(0)
os.makedirs(out, exist_ok=True)
stamp = os.path.join(out, "STAMP")
here = os.path.dirname(os.path.abspath(__file__))
sources = [os.path.join(here, f) for f in ("make_tokenizer_fixtures.py", "corpus.py")] + \
    [os.path.join(root, "bindings_py", "cism", f) for f in ("tokenizer_meta.py", "convert.py", "format.py")]
version = str([os.path.getmtime(p) for p in sources])
if os.path.exists(stamp) and open(stamp).read() == version:
    print("tokenizer fixtures are up to date")
    sys.exit(0)


def load_json(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def llama2c_json(binpath, vocab):
    pieces, scores = cv.read_llama2c_vocab(binpath, vocab)
    return cv.llama2c_tokenizer_json(pieces, scores)


T = os.path.join(models, "tokenizers")
tok = {
    "gpt2": load_json(os.path.join(T, "gpt2", "tokenizer.json")),
    "smollm": load_json(os.path.join(T, "smollm", "tokenizer.json")),
    "qwen2": load_json(os.path.join(T, "qwen2", "tokenizer.json")),
    "llama3": load_json(os.path.join(T, "llama3", "tokenizer.json")),
    "llama2": load_json(os.path.join(T, "llama2", "tokenizer.json")),
    "stories260K-hf": load_json(os.path.join(models, "stories260K-hf", "tokenizer.json")),
    "babyllama-hf": load_json(os.path.join(models, "babyllama-tok105-hf", "tokenizer.json")),
    "stories260K-llama2c": llama2c_json(os.path.join(models, "stories260K", "tok512.bin"), 512),
    "babyllama-llama2c": llama2c_json(os.path.join(models, "babyllama-tok105", "tok105.bin"), 105),
}

# ---- variants exercising options the real files leave off
v = copy.deepcopy(tok["gpt2"])
v["pre_tokenizer"]["add_prefix_space"] = True
tok["gpt2-prefix-space"] = v

v = copy.deepcopy(tok["qwen2"])
base = 151646
extra = [("<tool_call>", dict(special=False, normalized=False)),
         ("K\u0301ey", dict(special=False, normalized=True)),          # matched after NFC, as "Ḱey"
         ("[MASK]", dict(special=True, normalized=False, lstrip=True, rstrip=True)),
         ("qqword", dict(special=False, normalized=False, single_word=True)),
         ("<|im_start|>x", dict(special=True, normalized=False))]      # longest match wins
for k, (content, opts) in enumerate(extra):
    d = dict(id=base + k, content=content, single_word=False, lstrip=False, rstrip=False, normalized=False, special=False)
    d.update(opts)
    v["added_tokens"].append(d)
tok["qwen2-added"] = v

v = copy.deepcopy(tok["llama2"])
v["normalizer"] = None
v["pre_tokenizer"] = {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "first", "split": False}
v["decoder"] = {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "first", "split": False}
tok["llama2-metaspace"] = v

v = copy.deepcopy(tok["llama2"])
v["normalizer"] = None
v["pre_tokenizer"] = {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always", "split": True}
tok["llama2-metaspace-split"] = v

v = copy.deepcopy(tok["smollm"])
v["pre_tokenizer"]["pretokenizers"][0]["individual_digits"] = False
tok["smollm-digits"] = v

# chat templates carried by some of the test models: (template file, bos id, eos id)
CHAT = {
    "qwen2": (None, -1, 151645),
    "smollm": ("smollm2.jinja", -1, 2),
    "llama3": ("llama3.jinja", 128000, 128009),
    "llama2": ("llama2.jinja", 1, 2),
    "llama2-metaspace": ("zephyr.jinja", 1, 2),
    "llama2-metaspace-split": ("mistral.jinja", 1, 2),
}
CHAT_PROBES = [
    ([("user", "Hello!")], 1),
    ([("system", "You are a pirate."), ("user", " Tell me a joke.\n")], 1),
    ([("user", "Hi"), ("assistant", "Hello, how can I help?"), ("user", "Say \u00e9t\u00e9 \U0001F600")], 1),
    ([("system", "Be brief."), ("user", "Hi"), ("assistant", " Ahoy "), ("user", "Bye")], 1),
]


def chat_template(name):
    f, bos, eos = CHAT[name]
    if f is None:
        return load_json(os.path.join(T, "qwen2", "tokenizer_config.json"))["chat_template"], bos, eos
    with open(os.path.join(here, "chat_templates", f), encoding="utf-8") as fh:
        return fh.read(), bos, eos


chat_records = []
only = os.environ.get("CISM_TOK_ONLY")
texts = build_corpus(models)
with open(os.path.join(out, "corpus.bin"), "wb") as f:
    f.write(struct.pack("<I", len(texts)))
    for t in texts:
        b = t.encode("utf-8")
        f.write(struct.pack("<I", len(b)) + b)

rng = np.random.default_rng(0)
for name, tj in tok.items():
    if only and name not in only.split(","):
        continue
    t0 = time.time()
    hf = Tokenizer.from_str(json.dumps(tj))
    meta = compact_tokenizer(tj)
    n = len(meta["tokenizer.tokens"])
    meta.update({
        "general.architecture": "llama", "model.vocab_size": n, "model.dim": 8, "model.n_layers": 1,
        "model.n_heads": 2, "model.n_kv_heads": 1, "model.head_dim": 4, "model.ffn_dim": 16,
        "model.context_length": 64, "model.norm_eps": 1e-5, "model.rope_theta": 10000.0, "model.tied_embeddings": 1,
        "general.name": f"tokenizer test model ({name})",
    })
    if name in CHAT:
        from cism import chat_format as cfm
        template, bos, eos = chat_template(name)
        if bos >= 0:
            meta["tokenizer.bos_id"] = bos
        meta["tokenizer.eos_id"] = eos
        meta["tokenizer.chat_template"] = template
        meta.update(cv.chat_format_meta(template, meta, {}))
        bos_s = meta["tokenizer.tokens"][bos].decode() if bos >= 0 else ""
        eos_s = meta["tokenizer.tokens"][eos].decode()
        for msgs, gen in CHAT_PROBES:
            m = [{"role": r, "content": c} for r, c in msgs]
            try:
                want = cfm.jinja_render(template, m, bool(gen), bos_s, eos_s)
            except Exception:   # Mistral refuses a system message: check our documented extension
                want = cfm.render(meta["tokenizer.chat_format"], m, bool(gen), bos_s or "<s>", eos_s)
            chat_records.append((name, meta.get("tokenizer.chat_format", ""), msgs, gen, want))
    cv.write_model(os.path.join(out, name + ".cism"), meta, list(cv.expected_tensors(meta)),
                   lambda nm: rng.standard_normal(cv.expected_tensors(meta)[nm]).astype(np.float32) * 0.02,
                   lambda nm: 0, overwrite=True, validate=False)  # hostile on purpose: for the C loader's tests
    n_ids = 0
    with open(os.path.join(out, name + ".cases"), "wb") as f:
        cases = []
        for i, text in enumerate(texts):
            flag_sets = (2, 3, 0) if i % 7 == 0 or "<" in text else (2,)
            for flags in flag_sets:
                hf.encode_special_tokens = not (flags & 2)
                ids = hf.encode(text, add_special_tokens=bool(flags & 1)).ids
                dec = hf.decode(ids, skip_special_tokens=False)
                dec_skip = hf.decode(ids, skip_special_tokens=True)
                b_dec = dec.encode("utf-8")
                rec = [struct.pack("<III", i, flags, len(ids)), np.asarray(ids, dtype="<i4").tobytes()]
                rec.append(struct.pack("<I", 0xFFFFFFFF) if dec == text else struct.pack("<I", len(b_dec)) + b_dec)
                rec.append(struct.pack("<I", 0xFFFFFFFF) if dec_skip == dec else
                           struct.pack("<I", len(dec_skip.encode("utf-8"))) + dec_skip.encode("utf-8"))
                cases.append(b"".join(rec))
                n_ids += len(ids)
        f.write(struct.pack("<I", len(cases)))
        f.write(b"".join(cases))
    print(f"{name}: {len(cases)} cases, {n_ids} ids, {time.time() - t0:.1f} s", flush=True)
def tiny_meta(name, tj):
    meta = compact_tokenizer(tj)
    n = len(meta["tokenizer.tokens"])
    meta.update({
        "general.architecture": "llama", "model.vocab_size": n, "model.dim": 8, "model.n_layers": 1,
        "model.n_heads": 2, "model.n_kv_heads": 1, "model.head_dim": 4, "model.ffn_dim": 16,
        "model.context_length": 64, "model.norm_eps": 1e-5, "model.rope_theta": 10000.0, "model.tied_embeddings": 1,
        "general.name": f"tokenizer test model ({name})",
    })
    return meta


def write_tiny(path, meta):
    shapes = cv.expected_tensors(meta)
    cv.write_model(path, meta, list(shapes), lambda nm: rng.standard_normal(shapes[nm]).astype(np.float32) * 0.02,
                   lambda nm: 0, overwrite=True, validate=False)  # hostile on purpose: for the C loader tests


# hostile tokenizer metadata: the loader must refuse each with a clear error
good = tiny_meta("hostile", tok["stories260K-llama2c"])
ntok = len(good["tokenizer.tokens"])
vocab = {t: i for i, t in enumerate(good["tokenizer.tokens"])}
nonpair = next((a, b) for a in range(3, ntok) for b in range(3, ntok)
               if good["tokenizer.tokens"][a] + good["tokenizer.tokens"][b] not in vocab)
bad = {
    "bad-merge-id": {"tokenizer.merges": np.asarray([5, 10 ** 9], dtype=np.int64)},
    "bad-flags-len": {"tokenizer.token_flags": good["tokenizer.token_flags"][:-1]},
    "bad-step": {"tokenizer.pre_tokenizer": ["weird_split"]},
    "bad-utf8": {"tokenizer.tokens": good["tokenizer.tokens"][:-1] + [b"\xff\xfe"]},
    "bad-template-id": {"tokenizer.template_prefix": np.asarray([ntok + 5], dtype=np.int64)},
    "bad-merge-pair": {"tokenizer.merges": np.asarray(list(nonpair), dtype=np.int64)},
    "bad-dup-token": {"tokenizer.tokens": good["tokenizer.tokens"][:-1] + [good["tokenizer.tokens"][100]]},
    "bad-types": {"tokenizer.token_flags": 7},
}
for bname, change in bad.items():
    m = dict(good)
    m.update(change)
    write_tiny(os.path.join(out, bname + ".cism"), m)


def lp(b):
    return struct.pack("<I", len(b)) + b


if not only:
    with open(os.path.join(out, "chat.cases"), "wb") as f:
        f.write(struct.pack("<I", len(chat_records)))
        for name, fmt_name, msgs, gen, want in chat_records:
            f.write(lp(name.encode()) + lp(fmt_name.encode()) + struct.pack("<I", len(msgs)))
            for r, c in msgs:
                f.write(lp(r.encode()) + lp(c.encode()))
            f.write(struct.pack("<I", gen) + lp(want.encode()))
    print(f"chat: {len(chat_records)} cases")
with open(stamp, "w") as f:
    f.write(version)
