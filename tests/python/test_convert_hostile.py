"""Hostile and careless input to the converter (issue 16, items 1 and 2).

Every malformed config.json / generation_config.json / tokenizer.json /
tokenizer_config.json / safetensors header, made from a copy of the real
stories260K-hf checkpoint, ends in one line `cism: error: <file>: <field>: ...`
with exit status 1, no traceback and nothing written. A failed --force
conversion keeps the old output byte for byte; concurrent conversions to one
output end with exactly one of the two outputs; a killed conversion's
temporary file is named for what it is and removed by the next conversion.
"""
from __future__ import annotations

import glob
import json
import os
import shutil
import signal
import struct
import subprocess
import sys

import numpy as np
import pytest

import cism
from cism import format as fmt
from cism.cli import main as cli_main
from cism.convert import ConversionError, convert

DELETE = object()


@pytest.fixture(scope="module")
def stories(shared_models):
    return os.path.join(shared_models, "stories260K-hf")


def copy_src(stories, dest):
    shutil.copytree(stories, dest)
    for p in glob.glob(os.path.join(dest, "*")):
        os.chmod(p, 0o644)  # the shared copy is read-only
    return str(dest)


def partials(folder):
    return [n for n in os.listdir(folder) if n.endswith(fmt.PARTIAL_SUFFIX) or n.endswith(".partial")]


# ---- mutations ----------------------------------------------------------------------
def edit_json(name, fn):
    def mutate(folder):
        p = os.path.join(folder, name)
        with open(p, encoding="utf-8") as f:
            obj = json.load(f)
        obj = fn(obj)
        with open(p, "w", encoding="utf-8") as f:
            f.write(obj if isinstance(obj, str) else json.dumps(obj))
    return mutate


def set_keys(obj, changes):
    for path, v in changes.items():
        node = obj
        keys = path.split("/")
        for k in keys[:-1]:
            node = node[int(k)] if isinstance(node, list) else node[k]
        last = int(keys[-1]) if isinstance(node, list) else keys[-1]
        if v is DELETE:
            del node[last]
        else:
            node[last] = v
    return obj


def config(**changes):
    return edit_json("config.json", lambda c: set_keys(c, changes))


def tok(changes):
    return edit_json("tokenizer.json", lambda t: set_keys(t, changes))


def write_file(name, text):
    def mutate(folder):
        with open(os.path.join(folder, name), "w", encoding="utf-8") as f:
            f.write(text)
    return mutate


def st_header(fn):
    """Rewrites model.safetensors' JSON header (the data stays where it is)."""
    def mutate(folder):
        p = os.path.join(folder, "model.safetensors")
        blob = open(p, "rb").read()
        (n,) = struct.unpack("<Q", blob[:8])
        head = fn(json.loads(blob[8:8 + n]))
        raw = head if isinstance(head, bytes) else json.dumps(head).encode()
        with open(p, "wb") as f:
            f.write(struct.pack("<Q", len(raw)) + raw + blob[8 + n:])
    return mutate


def st_entry(name, **changes):
    return st_header(lambda h: set_keys(h, {f"{name}/{k}": v for k, v in changes.items()}))


EMB = "model.embed_tokens.weight"
NORM = "model.layers.0.input_layernorm.weight"

CASES = [
    # config.json: missing / null / wrong-typed / out-of-range fields, every one the converter reads
    ("hidden_size missing", config(hidden_size=DELETE), "config.json: hidden_size: is missing"),
    ("hidden_size null", config(hidden_size=None), "config.json: hidden_size: is null"),
    ("hidden_size 64.5", config(hidden_size=64.5), "config.json: hidden_size: must be an integer"),
    ("hidden_size string", config(hidden_size="64"), "config.json: hidden_size: must be an integer"),
    ("hidden_size bool", config(hidden_size=True), "config.json: hidden_size: must be an integer"),
    ("hidden_size negative", config(hidden_size=-64), "config.json: hidden_size: -64 is outside"),
    ("layers 2**63", config(num_hidden_layers=2 ** 63), "config.json: num_hidden_layers: 9223372036854775808 is outside"),
    ("layers 0", config(num_hidden_layers=0), "config.json: num_hidden_layers: 0 is outside"),
    ("heads string", config(num_attention_heads="8"), "config.json: num_attention_heads: must be an integer"),
    ("kv heads list", config(num_key_value_heads=[4]), "config.json: num_key_value_heads: must be an integer"),
    ("kv heads not dividing", config(num_key_value_heads=3), "num_key_value_heads 3"),
    ("head_dim odd", config(head_dim=7), "config.json: head_dim: 7 is odd"),
    ("vocab 2**40", config(vocab_size=2 ** 40), "config.json: vocab_size: 1099511627776 is outside"),
    ("ffn list", config(intermediate_size=[172]), "config.json: intermediate_size: must be an integer"),
    ("context string", config(max_position_embeddings="512"), "config.json: max_position_embeddings: must be an integer"),
    ("context 2**40", config(max_position_embeddings=2 ** 40), "config.json: max_position_embeddings:"),
    ("eps 0", config(rms_norm_eps=0), "config.json: rms_norm_eps: 0 is outside (0, 1)"),
    ("eps string", config(rms_norm_eps="1e-5"), "config.json: rms_norm_eps: must be a number"),
    ("rope_theta 1", config(rope_theta=1), "config.json: rope_theta: 1 must be > 1"),
    ("rope_theta 0.5", config(rope_theta=0.5), "config.json: rope_theta: 0.5 must be > 1"),
    ("rope_theta NaN", edit_json("config.json", lambda c: json.dumps(c).replace('"rope_theta": 10000.0',
                                                                             '"rope_theta": NaN')),
     "config.json: rope_theta: must be finite"),
    ("tie 'false'", config(tie_word_embeddings="false"), "config.json: tie_word_embeddings: must be true or false"),
    ("tie 0", config(tie_word_embeddings=0), "config.json: tie_word_embeddings: must be true or false"),
    ("rope_scaling list", config(rope_scaling=[]), "config.json: rope_scaling: must be an object, not a list"),
    ("rope_scaling string factor", config(rope_scaling={"rope_type": "linear", "factor": "2"}),
     "config.json: rope_scaling.factor: must be a number"),
    ("rope_scaling no factor", config(rope_scaling={"rope_type": "linear"}), "config.json: rope_scaling.factor: is missing"),
    ("rope_scaling factor 0", config(rope_scaling={"rope_type": "linear", "factor": 0}),
     "config.json: rope_scaling.factor: 0 is outside 1..1024"),
    ("llama3 freq order", config(rope_scaling={"rope_type": "llama3", "factor": 8, "low_freq_factor": 4,
                                               "high_freq_factor": 1}), "config.json: rope_scaling.high_freq_factor:"),
    ("rope_type int", config(rope_scaling={"rope_type": 3}), "config.json: rope_scaling.rope_type: must be a string"),
    ("rope_parameters string", config(rope_parameters="default"), "config.json: rope_parameters: must be an object"),
    ("architectures null", config(architectures=None), "config.json: architectures: must name exactly one"),
    ("architectures string", config(architectures="LlamaForCausalLM"), "config.json: architectures:"),
    ("architectures [5]", config(architectures=[5]), "config.json: architectures:"),
    ("hidden_act int", config(hidden_act=5), "config.json: hidden_act: must be a string"),
    ("mlp_bias 'false'", config(mlp_bias="false"), "config.json: mlp_bias: must be true or false"),
    ("attention_bias 'no'", config(attention_bias="no"), "config.json: attention_bias: must be true or false"),
    ("num_experts string", config(num_experts="8"), "config.json: num_experts: must be an integer"),
    ("sliding_window string", config(sliding_window="16"), "config.json: sliding_window: must be an integer"),
    ("bos outside vocabulary", config(bos_token_id=9999), "config.json: bos_token_id: 9999 is outside"),
    ("eos list with string", config(eos_token_id=[2, "3"]), "config.json: eos_token_id[1]: must be a token id"),
    ("eos negative", config(eos_token_id=-5), "config.json: eos_token_id: token id -5 is outside the vocabulary"),
    ("pad outside vocabulary", config(pad_token_id=512), "config.json: pad_token_id: 512 is outside"),
    ("name_or_path int", config(_name_or_path=5), "config.json: _name_or_path: must be a string"),
    ("config is a list", write_file("config.json", "[1, 2]"), "config.json: must hold a JSON object, not a list"),
    ("config bad JSON", write_file("config.json", '{"hidden_size": 64,'), "config.json: not valid JSON"),
    ("config duplicate key", write_file("config.json", '{"hidden_size": 64, "hidden_size": 32}'),
     "config.json: key 'hidden_size' appears twice"),
    ("generation eos object", edit_json("generation_config.json", lambda g: set_keys(g, {"eos_token_id": {"a": 1}})),
     "generation_config.json: eos_token_id: must be a token id"),
    # safetensors headers
    ("st bad JSON", st_header(lambda h: b"{not json"), "header is not valid JSON"),
    ("st header list", st_header(lambda h: list(h)), "header must be a JSON object"),
    ("st entry not object", st_header(lambda h: set_keys(h, {EMB: [1, 2]})), f"tensor '{EMB}': must be an object"),
    ("st string shape", st_entry(EMB, shape="[512, 64]"), f"tensor '{EMB}': shape must be a list"),
    ("st string dims", st_entry(EMB, shape=["512", "64"]), f"tensor '{EMB}': shape must be a list"),
    ("st dtype int", st_entry(EMB, dtype=5), f"tensor '{EMB}' has unsupported dtype 5"),
    ("st offsets past file", st_entry(NORM, data_offsets=[10 ** 9, 10 ** 9 + 256]), f"tensor '{NORM}' has inconsistent"),
    ("st negative offsets", st_entry(NORM, data_offsets=[-256, 0]), f"tensor '{NORM}' has inconsistent"),
    ("st three offsets", st_entry(NORM, data_offsets=[0, 256, 512]), f"tensor '{NORM}': data_offsets must be two"),
    ("st string offsets", st_entry(NORM, data_offsets=["0", "256"]), f"tensor '{NORM}': data_offsets must be two"),
    ("st overlapping", st_entry(NORM, data_offsets=[0, 256]), "overlap"),
    ("st metadata list", st_header(lambda h: set_keys(h, {"__metadata__": [1]})), "__metadata__ must be an object"),
    # tokenizer.json
    ("tok merges ints", tok({"model/merges/0": [5, 6]}), "tokenizer.json: model.merges[0]: must be a string"),
    ("tok merge no space", tok({"model/merges/0": "ab"}), "tokenizer.json: model.merges[0]:"),
    ("tok merges object", tok({"model/merges": {"a": "b"}}), "tokenizer.json: model.merges: must be a list"),
    ("tok vocab list", tok({"model/vocab": ["a", "b"]}), "tokenizer.json: model.vocab: must be an object"),
    ("tok vocab string id", tok({"model/vocab/<unk>": "0"}), "tokenizer.json: model.vocab['<unk>']: must be a token id"),
    ("tok vocab huge id", tok({"model/vocab/<unk>": 2 ** 40}), "tokenizer.json: model.vocab['<unk>']: id"),
    ("tok model list", tok({"model": [1]}), "tokenizer.json: model: must be an object"),
    ("tok added object", tok({"added_tokens": {"id": 0}}), "tokenizer.json: added_tokens: must be a list"),
    ("tok added string id", tok({"added_tokens/0/id": "0"}), "tokenizer.json: added_tokens[0].id: must be an integer"),
    ("tok added no content", tok({"added_tokens/0/content": DELETE}), "tokenizer.json: added_tokens[0].content: is missing"),
    ("tok added special 'yes'", tok({"added_tokens/0/special": "yes"}), "tokenizer.json: added_tokens[0].special:"),
    ("tok byte_fallback string", tok({"model/byte_fallback": "true"}), "tokenizer.json: model.byte_fallback:"),
    ("tok normalizer string", tok({"normalizer": "nfc"}), "tokenizer.json: normalizer: must be an object or null"),
    ("tok decoders not list", tok({"decoder/decoders": {"type": "Fuse"}}), "tokenizer.json: decoder.decoders: must be a list"),
    ("tok decoder no pattern", tok({"decoder/decoders/0/pattern": DELETE}), "tokenizer.json: malformed tokenizer"),
    ("tok bad JSON", write_file("tokenizer.json", "{"), "tokenizer.json: not valid JSON"),
    ("tok_cfg list", write_file("tokenizer_config.json", "[]"), "tokenizer_config.json: must hold a JSON object"),
    ("tok_cfg template int", edit_json("tokenizer_config.json", lambda t: set_keys(t, {"chat_template": 5})),
     "tokenizer_config.json: chat_template: must be a string or a list"),
    ("tok_cfg named template bad", edit_json("tokenizer_config.json",
                                             lambda t: set_keys(t, {"chat_template": [{"name": "default"}]})),
     "tokenizer_config.json: chat_template[0].template: is missing"),
    ("tok_cfg add_bos 'true'", edit_json("tokenizer_config.json", lambda t: set_keys(t, {"add_bos_token": "true"})),
     "tokenizer_config.json: add_bos_token: must be true or false"),
]


@pytest.mark.parametrize("name,mutate,needle", CASES, ids=[c[0] for c in CASES])
def test_hostile_input_is_one_clear_error(tmp_path, stories, capsys, name, mutate, needle):
    src = copy_src(stories, tmp_path / "src")
    mutate(src)
    out = str(tmp_path / "out.cism")
    try:
        rc = cli_main(["convert", src, "-o", out, "-q"])
    except SystemExit as e:  # argparse
        rc = e.code
    except BaseException as e:  # the CLI would have printed a traceback
        pytest.fail(f"{name}: {type(e).__name__} escaped the CLI: {e}")
    err = capsys.readouterr().err
    assert rc == 1, (name, err)
    assert "Traceback" not in err
    assert err.startswith("cism: error: ") and err.count("\n") == 1, err
    assert needle in err, (name, err)
    assert not os.path.exists(out) and sorted(os.listdir(tmp_path)) == ["src"]
    with pytest.raises(ConversionError):  # the API's exception (SafetensorsError is one)
        convert(src, out, progress=None)
    assert sorted(os.listdir(tmp_path)) == ["src"]


def test_unmodified_copy_converts(tmp_path, stories, capsys):
    """The control for the table above: each case fails for its mutation alone."""
    src = copy_src(stories, tmp_path / "src")
    assert cli_main(["convert", src, "-o", str(tmp_path / "out.cism"), "-q"]) == 0
    with cism.Model(str(tmp_path / "out.cism"), check_weights=True) as m:
        assert m.vocab_size == 512 and "tokenizer.hf_json" in m.metadata


def test_hostile_input_from_the_command_line(tmp_path, stories, run_cli):
    """The same, through a real `python -m cism` process (a traceback would be in stderr)."""
    for i, (name, mutate, needle) in enumerate(c for c in CASES if c[0] in ("layers 2**63", "tok merges ints",
                                                                            "st string shape", "tie 'false'")):
        src = copy_src(stories, tmp_path / f"src{i}")
        mutate(src)
        out = str(tmp_path / f"o{i}.cism")
        p = run_cli("convert", src, "-o", out, check=False)
        assert p.returncode == 1 and "Traceback" not in p.stderr and needle in p.stderr, (name, p.stderr)
        assert not os.path.exists(out) and not partials(tmp_path)


def test_unbounded_counts_are_refused_before_any_work(tmp_path, stories):
    """num_hidden_layers 2**63 used to allocate without bound; now refused at once."""
    src = copy_src(stories, tmp_path / "src")
    config(num_hidden_layers=2 ** 63)(src)
    import resource
    import time
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t0 = time.time()
    with pytest.raises(ConversionError, match="num_hidden_layers"):
        convert(src, str(tmp_path / "o.cism"), progress=None)
    assert time.time() - t0 < 5
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 200_000  # KiB


def test_index_file_cannot_point_outside_the_folder(tmp_path, stories):
    src = copy_src(stories, tmp_path / "src")
    os.rename(os.path.join(src, "model.safetensors"), os.path.join(tmp_path, "elsewhere.safetensors"))
    with open(os.path.join(src, "model.safetensors.index.json"), "w") as f:
        json.dump({"weight_map": {EMB: "../elsewhere.safetensors"}}, f)
    with pytest.raises(ValueError, match="weight_map\\['model.embed_tokens.weight'\\].*not the name of a file"):
        convert(src, str(tmp_path / "o.cism"), progress=None)
    with open(os.path.join(src, "model.safetensors.index.json"), "w") as f:
        json.dump({"weight_map": [1]}, f)
    with pytest.raises(ValueError, match="weight_map must be an object"):
        convert(src, str(tmp_path / "o.cism"), progress=None)


# ---- nothing the user had is lost ----------------------------------------------------
@pytest.mark.parametrize("mutate,needle", [
    (config(rms_norm_eps=0), "rms_norm_eps"),
    (config(rope_theta=1.0), "rope_theta"),
    (config(bos_token_id=512), "bos_token_id"),
    (config(eos_token_id=[2, 100000]), "eos_token_id[1]"),
    (tok({"added_tokens/0/id": "x"}), "added_tokens[0].id"),
], ids=["eps 0", "theta 1", "bos = vocab", "eos outside", "tokenizer"])
def test_failed_force_conversion_keeps_the_old_file(tmp_path, stories, run_cli, mutate, needle):
    good = copy_src(stories, tmp_path / "good")
    out = str(tmp_path / "model.cism")
    run_cli("convert", good, "-o", out, "-q")
    before = open(out, "rb").read()
    bad = copy_src(stories, tmp_path / "bad")
    mutate(bad)
    p = run_cli("convert", bad, "-o", out, "--force", "-q", check=False)
    assert p.returncode == 1 and "Traceback" not in p.stderr and needle in p.stderr, p.stderr
    assert open(out, "rb").read() == before
    assert not partials(tmp_path)


def test_loader_checks_run_before_the_rename(tmp_path, stories, monkeypatch):
    """What only the C loader catches (here: an eps the config check would refuse,
    slipped past it) is found in the temporary file; the old output stays."""
    import cism.convert as cv
    out = str(tmp_path / "model.cism")
    convert(stories, out, progress=None)
    before = open(out, "rb").read()
    real = cv.hparams_from_config
    monkeypatch.setattr(cv, "hparams_from_config", lambda cfg, *a: {**real(cfg, *a), "model.norm_eps": 0.0})
    with pytest.raises(ConversionError, match="fails the loader's checks .*norm_eps.*the existing file is kept"):
        convert(stories, out, overwrite=True, progress=None)
    assert open(out, "rb").read() == before
    with pytest.raises(ConversionError, match="fails the loader's checks"):
        convert(stories, str(tmp_path / "new.cism"), progress=None)
    assert sorted(os.listdir(tmp_path)) == ["model.cism"]


def _logits(path):
    with cism.Model(path) as m, m.session(n_ctx=16) as s:
        s.eval([1, 20, 30, 40])
        return np.array(s.logits(), dtype=np.float32)


def test_concurrent_conversions_end_with_one_whole_output(tmp_path, stories):
    """Two processes converting to one output at once: the file left is exactly one
    of the two outputs (both processes succeed; the last to finish wins)."""
    refs = {}
    for dtype in ("f32", "f16"):
        p = str(tmp_path / f"ref-{dtype}.cism")
        convert(stories, p, dtype=dtype, progress=None)
        refs[dtype] = (open(p, "rb").read(), _logits(p))
    assert refs["f32"][0] != refs["f16"][0]
    out = str(tmp_path / "shared.cism")
    for trial in range(4):
        procs = [subprocess.Popen([sys.executable, "-m", "cism", "convert", stories, "-o", out, "--force", "-q",
                                   "--dtype", dtype], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for dtype in ("f32", "f16")]
        for p in procs:
            _, err = p.communicate(timeout=300)
            assert p.returncode == 0, err
        data = open(out, "rb").read()
        match = [d for d, (ref, _) in refs.items() if data == ref]
        assert len(match) == 1, f"trial {trial}: the output is neither conversion"
        np.testing.assert_array_equal(_logits(out), refs[match[0]][1])
        assert not partials(tmp_path)


def test_output_that_appears_while_writing_is_kept(tmp_path, stories, monkeypatch):
    """Without --force an output is never replaced, even one created while converting."""
    out = str(tmp_path / "o.cism")
    real = fmt._OpenWriter._publish

    def racing(self):
        with open(out, "wb") as f:
            f.write(b"someone else's")
        real(self)
    monkeypatch.setattr(fmt._OpenWriter, "_publish", racing)
    with pytest.raises(FileExistsError, match="appeared while it was written"):
        convert(stories, out, progress=None)
    assert open(out, "rb").read() == b"someone else's" and not partials(tmp_path)


KILLER = """
import os, signal, sys
import cism.format as fmt
real = fmt._OpenWriter.write_tensor
def write_tensor(self, name, data):
    if self.next == 5:
        os.kill(os.getpid(), signal.SIGKILL)
    real(self, name, data)
fmt._OpenWriter.write_tensor = write_tensor
from cism.convert import convert
convert(sys.argv[1], sys.argv[2], progress=None, **({"quant": "q8", "calibrate": "auto", "calib_tokens": 64}
                                                     if len(sys.argv) > 3 else {}))
"""


@pytest.mark.skipif(os.name != "posix", reason="SIGKILL and pid probing are POSIX")
def test_killed_conversion_leftovers_are_named_and_cleaned(tmp_path, stories):
    out = str(tmp_path / "o.cism")

    def killed(*extra):
        p = subprocess.Popen([sys.executable, "-c", KILLER, stories, out, *extra], stderr=subprocess.PIPE, text=True)
        _, err = p.communicate(timeout=300)
        assert p.returncode == -signal.SIGKILL, err
        return p.pid

    pid = killed()
    left = partials(tmp_path)
    assert not os.path.exists(out) and len(left) == 1, left
    assert left[0].startswith(f"o.cism.{pid}@{fmt._host()}.") and left[0].endswith(".cism-partial"), left
    pid2 = killed("calibrate")  # killed while writing the unquantized copy: two files, both named for it
    left = sorted(partials(tmp_path))
    assert len(left) == 2 and all(n.startswith(f"o.cism.calibration-{pid2}@") for n in left), left  # first one gone
    # files that must survive the clean-up: a live writer's, another machine's, anything else
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        host = fmt._host()
        keep = [f"o.cism.{live.pid}@{host}.abcd1234.cism-partial", "o.cism.999999@another-host.abcd1234.cism-partial",
                "o.cism.backup", f"other.cism.{pid}@{host}.abcd1234.cism-partial"]
        for n in keep:
            with open(tmp_path / n, "wb") as f:
                f.write(b"x")
        convert(stories, out, progress=None)
        with cism.Model(out) as m:
            assert m.architecture == "llama"
        assert sorted(os.listdir(tmp_path)) == sorted(keep + ["o.cism"])
    finally:
        live.kill()
        live.wait()
    assert fmt.clean_stale_temps(out) == [str(tmp_path / keep[0])]  # its writer is gone now
