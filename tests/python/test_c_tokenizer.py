"""The C tokenizer seen from Python through ctypes (the calls the package's
tokenizer makes): ids and text identical to Hugging Face tokenizers on every
shared tokenizer, streaming, and chat formats identical to the Jinja chat
templates. The exhaustive parity run is the C test test_tokenizer; this one
checks the same API through the Python path on a smaller corpus.

The library is found through CISM_LIB, next to the installed `cism` package, or
in build/release."""
import ctypes
import glob
import json
import os
import sys

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SHARED = os.path.join(os.path.dirname(ROOT), "shared", "models")
sys.path.insert(0, os.path.join(ROOT, "tests", "tokenizer"))


def _need_shared():
    if not os.path.isdir(SHARED):
        if os.environ.get("CISM_REQUIRE_SHARED") == "1":
            pytest.fail(f"{SHARED} is missing (CISM_REQUIRE_SHARED=1)")
        pytest.skip(f"{SHARED} is missing")


def _find_lib():
    cands = [os.environ.get("CISM_LIB", "")]
    try:
        import cism
        for d in getattr(cism, "__path__", []):
            cands += glob.glob(os.path.join(d, "libcism.*"))
    except ImportError:
        pass
    cands += [os.path.join(ROOT, "build", "release", "libcism", "libcism.so")]
    for c in cands:
        if c and os.path.exists(c):
            return c
    pytest.fail(f"libcism not found (tried {cands}); set CISM_LIB")


class CTok:
    def __init__(self, lib_path, model_path):
        L = self.L = ctypes.CDLL(lib_path)
        P, I32, SZ = ctypes.c_void_p, ctypes.c_int32, ctypes.c_size_t
        L.cism_model_load.argtypes = [ctypes.c_char_p, P, ctypes.POINTER(P)]
        L.cism_model_free.argtypes = [P]
        L.cism_last_error.restype = ctypes.c_char_p
        L.cism_tokenize.argtypes = [P, ctypes.c_char_p, SZ, ctypes.c_uint32, ctypes.POINTER(I32), I32, ctypes.POINTER(I32)]
        L.cism_detokenize.argtypes = [P, ctypes.POINTER(I32), I32, ctypes.c_uint32, ctypes.c_char_p, SZ, ctypes.POINTER(SZ)]
        L.cism_detokenizer_create.argtypes = [P, ctypes.c_uint32, ctypes.POINTER(P)]
        L.cism_detokenizer_free.argtypes = [P]
        L.cism_detokenizer_push.argtypes = [P, I32, ctypes.POINTER(ctypes.c_char_p), ctypes.POINTER(SZ)]
        L.cism_detokenizer_flush.argtypes = [P, ctypes.POINTER(ctypes.c_char_p), ctypes.POINTER(SZ)]
        L.cism_chat_apply.argtypes = [P, I32, ctypes.POINTER(ctypes.c_char_p), ctypes.POINTER(SZ),
                                      ctypes.POINTER(ctypes.c_char_p), ctypes.POINTER(SZ), I32, I32, ctypes.c_char_p, SZ,
                                      ctypes.POINTER(SZ)]
        for f in ("cism_model_load", "cism_tokenize", "cism_detokenize", "cism_detokenizer_create",
                  "cism_detokenizer_push", "cism_detokenizer_flush", "cism_chat_apply"):
            getattr(L, f).restype = I32
        self.m = ctypes.c_void_p()
        assert L.cism_model_load(model_path.encode(), None, ctypes.byref(self.m)) == 0, L.cism_last_error()

    def close(self):
        self.L.cism_model_free(self.m)

    def encode(self, text, flags=2):
        b = text.encode("utf-8")
        n = ctypes.c_int32()
        st = self.L.cism_tokenize(self.m, b, len(b), flags, None, 0, ctypes.byref(n))
        assert st in (0, 8), self.L.cism_last_error()   # 8: buffer too small, n is the size
        buf = (ctypes.c_int32 * max(n.value, 1))()
        assert self.L.cism_tokenize(self.m, b, len(b), flags, buf, n.value, ctypes.byref(n)) == 0
        return list(buf[:n.value])

    def decode(self, ids, skip=False):
        arr = (ctypes.c_int32 * max(len(ids), 1))(*ids)
        n = ctypes.c_size_t()
        self.L.cism_detokenize(self.m, arr, len(ids), int(skip), None, 0, ctypes.byref(n))
        out = ctypes.create_string_buffer(n.value + 1)
        assert self.L.cism_detokenize(self.m, arr, len(ids), int(skip), out, n.value, ctypes.byref(n)) == 0
        return out.raw[:n.value].decode("utf-8")

    def stream(self, ids):
        d = ctypes.c_void_p()
        assert self.L.cism_detokenizer_create(self.m, 0, ctypes.byref(d)) == 0
        p, n, parts = ctypes.c_char_p(), ctypes.c_size_t(), []
        for i in ids:
            assert self.L.cism_detokenizer_push(d, i, ctypes.byref(p), ctypes.byref(n)) == 0
            parts.append(ctypes.string_at(p, n.value).decode("utf-8"))   # each piece is whole UTF-8
        self.L.cism_detokenizer_flush(d, ctypes.byref(p), ctypes.byref(n))
        parts.append(ctypes.string_at(p, n.value).decode("utf-8"))
        self.L.cism_detokenizer_free(d)
        return "".join(parts)

    def chat(self, messages, gen=True, fmt=0):
        k = len(messages)
        roles = (ctypes.c_char_p * k)(*[m["role"].encode() for m in messages])
        cont = (ctypes.c_char_p * k)(*[m["content"].encode() for m in messages])
        rl = (ctypes.c_size_t * k)(*[len(m["role"].encode()) for m in messages])
        cl = (ctypes.c_size_t * k)(*[len(m["content"].encode()) for m in messages])
        n = ctypes.c_size_t()
        self.L.cism_chat_apply(self.m, fmt, roles, rl, cont, cl, k, int(gen), None, 0, ctypes.byref(n))
        out = ctypes.create_string_buffer(n.value + 1)
        assert self.L.cism_chat_apply(self.m, fmt, roles, rl, cont, cl, k, int(gen), out, n.value, ctypes.byref(n)) == 0
        return out.raw[:n.value].decode("utf-8")


TOKENIZERS = ["gpt2", "smollm", "qwen2", "llama3", "llama2"]


def _tiny_model(tmp_path, folder):
    """A tiny random model carrying the tokenizer of `folder`, as the converter writes it."""
    sys.path.insert(0, os.path.join(ROOT, "bindings_py"))
    from cism import convert as cv
    from cism.tokenizer_meta import compact_tokenizer
    with open(os.path.join(folder, "tokenizer.json"), encoding="utf-8") as f:
        meta = compact_tokenizer(json.load(f))
    cfg_path = os.path.join(folder, "tokenizer_config.json")
    cfg = json.load(open(cfg_path, encoding="utf-8")) if os.path.exists(cfg_path) else {}
    n = len(meta["tokenizer.tokens"])
    meta.update({"general.architecture": "llama", "model.vocab_size": n, "model.dim": 8, "model.n_layers": 1,
                 "model.n_heads": 2, "model.n_kv_heads": 1, "model.head_dim": 4, "model.ffn_dim": 16,
                 "model.context_length": 64, "model.norm_eps": 1e-5, "model.rope_theta": 1e4,
                 "model.tied_embeddings": 1})
    if isinstance(cfg.get("chat_template"), str):
        meta["tokenizer.eos_id"] = meta["tokenizer.tokens"].index(cfg["eos_token"].encode())
        meta.update(cv.chat_format_meta(cfg["chat_template"], meta, cfg))
    shapes = cv.expected_tensors(meta)
    out = str(tmp_path / (os.path.basename(folder) + ".cism"))
    cv.write_model(out, meta, list(shapes), lambda k: np.zeros(shapes[k], np.float32), lambda k: 0, overwrite=True)
    return out


@pytest.mark.parametrize("name", TOKENIZERS)
def test_parity_with_hf(tmp_path, name):
    _need_shared()
    from tokenizers import Tokenizer
    from corpus import stress
    import random
    folder = os.path.join(SHARED, "tokenizers", name)
    hf = Tokenizer.from_file(os.path.join(folder, "tokenizer.json"))
    c = CTok(_find_lib(), _tiny_model(tmp_path, folder))
    with open(os.path.join(SHARED, "eval", "war_and_peace_excerpt.txt"), encoding="utf-8") as f:
        texts = [p for p in f.read().split("\n\n") if p][:200]
    texts += stress(random.Random(7), 300)
    mismatches = 0
    for t in texts:
        for flags in (2, 3, 0):
            hf.encode_special_tokens = not flags & 2
            want = hf.encode(t, add_special_tokens=bool(flags & 1)).ids
            got = c.encode(t, flags)
            mismatches += got != want
        assert c.decode(want) == hf.decode(want, skip_special_tokens=False)
        assert c.decode(want, skip=True) == hf.decode(want, skip_special_tokens=True)
        if "\ufffd" not in hf.decode(want, skip_special_tokens=False):
            assert c.stream(want) == hf.decode(want, skip_special_tokens=False)
    c.close()
    assert mismatches == 0


def test_qwen2_chat_template(tmp_path):
    _need_shared()
    pytest.importorskip("jinja2")
    from cism.chat_format import jinja_render
    folder = os.path.join(SHARED, "tokenizers", "qwen2")
    cfg = json.load(open(os.path.join(folder, "tokenizer_config.json"), encoding="utf-8"))
    c = CTok(_find_lib(), _tiny_model(tmp_path, folder))
    for msgs in ([{"role": "user", "content": "Hi there"}],
                 [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2+2?"},
                  {"role": "assistant", "content": "4"}, {"role": "user", "content": "And 3+3? \U0001F600"}]):
        want = jinja_render(cfg["chat_template"], msgs, True, "", cfg["eos_token"])
        assert c.chat(msgs) == want
        ids = c.encode(want, 2)
        assert 151644 in ids and c.decode(ids) == want
    c.close()
