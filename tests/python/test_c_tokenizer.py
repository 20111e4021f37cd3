"""The package's tokenizer is the C library's (cism.tokenizer.CTokenizer) when
the model file carries it, with Hugging Face tokenizers as the option and the
oracle: ids and text identical on every shared tokenizer, streaming through
the C detokenizer, chat formats identical to the Jinja chat templates, and
`cism chat` in a chat format. The exhaustive parity run is the C test
test_tokenizer; this one goes through the Python package."""
import json
import os
import random
import sys

import numpy as np
import pytest

import cism
from cism import chat_format, convert as cv
from cism import format as fmt
from cism.tokenizer import CTokenizer, HFTokenizer, from_model
from cism.tokenizer_meta import compact_tokenizer

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests", "tokenizer"))
TOKENIZERS = ["gpt2", "smollm", "qwen2", "llama3", "llama2"]


def tiny_model(path, folder):
    """A tiny random model carrying the tokenizer of `folder` (both the C keys and tokenizer.json)."""
    with open(os.path.join(folder, "tokenizer.json"), "rb") as f:
        raw = f.read()
    meta = compact_tokenizer(json.loads(raw))
    meta["tokenizer.hf_json"] = fmt.Bytes(raw)
    cfg_path = os.path.join(folder, "tokenizer_config.json")
    cfg = json.load(open(cfg_path, encoding="utf-8")) if os.path.exists(cfg_path) else {}
    n = len(meta["tokenizer.tokens"])
    meta.update({"general.architecture": "llama", "model.vocab_size": n, "model.dim": 8, "model.n_layers": 1,
                 "model.n_heads": 2, "model.n_kv_heads": 1, "model.head_dim": 4, "model.ffn_dim": 16,
                 "model.context_length": 64, "model.norm_eps": 1e-5, "model.rope_theta": 1e4,
                 "model.tied_embeddings": 1})
    if isinstance(cfg.get("chat_template"), str):
        meta["tokenizer.eos_id"] = meta["tokenizer.tokens"].index(cfg["eos_token"].encode())
        meta["tokenizer.chat_template"] = cfg["chat_template"]
        meta.update(cv.chat_format_meta(cfg["chat_template"], meta, cfg))
    shapes = cv.expected_tensors(meta)
    cv.write_model(str(path), meta, list(shapes), lambda k: np.zeros(shapes[k], np.float32), lambda k: 0,
                   overwrite=True)
    return str(path)


@pytest.mark.parametrize("name", TOKENIZERS)
def test_c_tokenizer_matches_hf(tmp_path, shared_models, name):
    from corpus import stress
    from tokenizers import Tokenizer
    folder = os.path.join(shared_models, "tokenizers", name)
    hf_raw = Tokenizer.from_file(os.path.join(folder, "tokenizer.json"))
    with cism.Model(tiny_model(tmp_path / "m.cism", folder)) as m:
        c, h = m.tokenizer, from_model(m, "hf")
    assert isinstance(c, CTokenizer) and isinstance(h, HFTokenizer)   # C by default, HF as the option
    assert c.add_bos == h.add_bos and c.vocab_size == h.vocab_size
    with open(os.path.join(shared_models, "eval", "war_and_peace_excerpt.txt"), encoding="utf-8") as f:
        texts = [p for p in f.read().split("\n\n") if p][:150]
    texts += stress(random.Random(7), 250)
    bad = 0
    for t in texts:
        ids = h.encode(t)
        bad += c.encode(t) != ids
        hf_raw.encode_special_tokens = True
        bad += c.encode(t, parse_special=False) != hf_raw.encode(t, add_special_tokens=False).ids
        hf_raw.encode_special_tokens = False
        assert c.decode(ids) == h.decode(ids) and c.decode(ids, skip_special=False) == h.decode(ids, skip_special=False)
        if "\ufffd" not in h.decode(ids):
            dec = c.incremental_decoder()
            assert "".join([dec.push(i) for i in ids] + [dec.flush()]) == h.decode(ids)
        for i in ids[:3]:
            assert c.token_text(i) == h.token_text(i)
    assert bad == 0
    for tok in (c, h):  # not text: a TypeError, not an empty list or an error from deep inside
        assert tok.encode("") == ([tok.bos_id] if tok.add_bos else [])
        for not_text in (None, b"bytes", 3):
            with pytest.raises(TypeError, match="text to encode must be a str"):
                tok.encode(not_text)


def test_chat_format_matches_the_jinja_template(tmp_path, shared_models):
    pytest.importorskip("jinja2")
    folder = os.path.join(shared_models, "tokenizers", "qwen2")
    cfg = json.load(open(os.path.join(folder, "tokenizer_config.json"), encoding="utf-8"))
    with cism.Model(tiny_model(tmp_path / "q.cism", folder)) as m:
        assert chat_format.model_format(m) == "chatml"
        for msgs in ([{"role": "user", "content": "Hi there"}],
                     [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2+2?"},
                      {"role": "assistant", "content": "4"}, {"role": "user", "content": "And 3+3? \U0001F600"}]):
            want = chat_format.jinja_render(cfg["chat_template"], msgs, True, "", cfg["eos_token"])
            assert chat_format.apply(m, msgs) == want == chat_format.render_template(m, msgs)
            ids = m.tokenizer.encode(want, add_bos=False)
            assert 151644 in ids and m.tokenizer.decode(ids, skip_special=False) == want
        with pytest.raises(cism.CismError):
            chat_format.apply(m, [{"role": "assistant", "content": "x"}], "llama2")   # roles must alternate


def test_cli_chat_in_a_chat_format(tmp_path, shared_models, run_cli):
    p = str(tmp_path / "stories.cism")
    cv.convert(os.path.join(shared_models, "stories260K", "stories260K.bin"), p,
               tokenizer=os.path.join(shared_models, "stories260K", "tok512.bin"), progress=None)
    with cism.Model(p) as m:
        assert isinstance(m.tokenizer, CTokenizer)
    for f in ("zephyr", "llama2", "plain", "auto"):
        r = run_cli("chat", "-m", p, "--format", f, "-n", "12", "--temperature", "0", "-t", "1",
                    input="Once upon a time\nThe cat sat\n")
        assert r.stdout.count("\n") == 2 and len(r.stdout.strip()) > 0, (f, r.stdout, r.stderr)
    r = run_cli("generate", "-m", p, "-p", "Once upon a time", "-n", "8", "-t", "1",
                env={"CISM_TOKENIZER": "hf"})
    r2 = run_cli("generate", "-m", p, "-p", "Once upon a time", "-n", "8", "-t", "1")
    assert r.stdout == r2.stdout and r.stdout.startswith("Once upon a time")
