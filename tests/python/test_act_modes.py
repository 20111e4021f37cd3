"""--act of the CLI (cism.actmodes): generate, ppl, bench and serve run their
sessions with the activations asked for. Each check compares the command's
output with the Python API's under the same setting, on a packed model whose
three settings give different results (checked first), so a command that
ignored --act fails."""
from __future__ import annotations

import json
import re

import numpy as np
import pytest

import cism
from cism.actmodes import ACT_MODES, act_kwargs
from cism.ppl import kl_divergence, perplexity
from cism.synthetic import write_synthetic
from helpers import ASCII_VOCAB, tiny_preset

MODES = ("outliers", "int8", "float")
TEXT = "the quick brown fox jumps over the lazy dog; " * 12
PROMPT = "Once upon a time"


@pytest.fixture(scope="module")
def packed(tmp_path_factory):
    """A q8 model (int8 activations by default) whose tokens are printable ASCII."""
    path = tmp_path_factory.mktemp("act") / "q8.cism"
    return write_synthetic(tiny_preset(tokenizer="ascii", vocab=ASCII_VOCAB, dim=128, ffn=256, ctx=512), str(path),
                           "q8", seed=5)


def _last_logits(model, **act):
    with model.session(n_ctx=128, **act) as s:
        s.eval(model.tokenizer.encode(PROMPT, add_bos=True))
        return s.logits().astype(np.float64)


def test_modes_map_to_session_arguments():
    assert act_kwargs("auto") == {}
    assert act_kwargs("outliers") == {"act_quant": True, "act_outliers": True}
    assert act_kwargs("int8") == {"act_quant": True, "act_outliers": False}
    assert act_kwargs("float") == {"act_quant": False}
    assert set(ACT_MODES) == {"auto", *MODES}
    with pytest.raises(ValueError, match="use one of auto, outliers, int8, float"):
        act_kwargs("fp8")


def test_the_three_settings_differ_on_the_test_model(packed):
    """The premise of the tests below: each setting gives its own logits, and
    the default is outliers."""
    with cism.Model(packed) as m:
        x = {a: _last_logits(m, **act_kwargs(a)) for a in ("auto", *MODES)}
    assert np.array_equal(x["auto"], x["outliers"])
    for a, b in (("outliers", "int8"), ("outliers", "float"), ("int8", "float")):
        assert np.abs(x[a] - x[b]).max() > 1e-5, (a, b)


def test_ppl_act_equals_the_api(packed, tmp_path, run_cli):
    f = tmp_path / "t.txt"
    f.write_text(TEXT)
    seen = {}
    for a in MODES:
        out = run_cli("ppl", "-m", packed, "-f", str(f), "--ctx", "128", "--act", a).stdout
        r = perplexity(packed, text=TEXT, ctx=128, **act_kwargs(a))
        assert r.describe() in out, (a, out)
        seen[a] = r.describe()
    assert len(set(seen.values())) == 3, seen
    # the older spellings still work and mean what they meant
    assert seen["float"] in run_cli("ppl", "-m", packed, "-f", str(f), "--ctx", "128", "--float-act").stdout
    assert seen["outliers"] in run_cli("ppl", "-m", packed, "-f", str(f), "--ctx", "128", "--act-quant").stdout
    # --kld-base: the model side takes --act (the base keeps the default: outliers)
    kld = {}
    for a in ("outliers", "int8"):
        out = run_cli("ppl", "-m", packed, "-f", str(f), "--ctx", "128", "--kld-base", packed, "--act", a).stdout
        k = kl_divergence(packed, packed, text=TEXT, ctx=128, **act_kwargs(a))
        assert k.describe() in out and f"KLD {k.kld_mean:.6f}" in out, (a, out)
        kld[a] = k.kld_mean
    assert kld["outliers"] == 0 < kld["int8"], kld
    p = run_cli("ppl", "-m", packed, "-f", str(f), "--act", "int8", "--float-act", check=False)
    assert p.returncode == 2 and "not allowed with argument --act" in p.stderr


@pytest.mark.parametrize("cmd", ["generate", "chat"])
def test_generate_and_chat_sessions_take_act(packed, cmd, monkeypatch, capsys):
    """The greedy texts of the tiny model do not tell the settings apart, so
    the sessions the commands make are recorded (and still run)."""
    from cism import cli
    from cism.model import Model
    made = []
    real = Model.session

    def session(self, **kw):
        made.append(kw)
        return real(self, **kw)

    monkeypatch.setattr(Model, "session", session)
    for a in ("auto", *MODES):
        made.clear()
        assert cli.main([cmd, "-m", packed, "-p", PROMPT, "-n", "4", "--temperature", "0", "--act", a]) == 0
        assert len(made) == 1 and {k: made[0].get(k) for k in ("act_quant", "act_outliers")} == \
            {"act_quant": None, "act_outliers": None, **act_kwargs(a)}, (a, made)
    capsys.readouterr()


def test_bad_act_is_a_usage_error(packed, run_cli):
    for cmd in (("generate", "-m", packed, "-p", "x"), ("bench", "-m", packed), ("ppl", "-m", packed, "-f", "x"),
                ("serve", "-m", packed), ("chat", "-m", packed)):
        p = run_cli(*cmd, "--act", "fp8", check=False)
        assert p.returncode == 2 and "'fp8': use one of auto, outliers, int8, float" in p.stderr, (cmd, p.stderr)


def test_bench_runs_and_reports_its_activations(packed, monkeypatch, capsys):
    """bench's sessions (and --parallel's batch) take --act, recorded as they are
    made, and the report names it."""
    import cism.batch
    import cism.session
    from cism import cli
    made = []

    def recording(cls):
        class Recorded(cls):
            def __init__(self, *a, **kw):
                made.append((cls.__name__, {k: kw.get(k) for k in ("act_quant", "act_outliers")}))
                super().__init__(*a, **kw)
        return Recorded

    monkeypatch.setattr(cism.session, "Session", recording(cism.session.Session))
    monkeypatch.setattr(cism.batch, "Batch", recording(cism.batch.Batch))
    for a in ("int8", "float"):
        made.clear()
        assert cli.main(["bench", "-m", packed, "-p", "16", "-n", "4", "-r", "1", "-t", "1", "--act", a]) == 0
        out = capsys.readouterr().out
        assert made == [("Session", {"act_quant": None, "act_outliers": None, **act_kwargs(a)})], made
        assert f"activations: {a}" in out, out
        assert ("peak" in out) == (a != "float")   # float activations: the int8 peak is not the ceiling
    assert cli.main(["bench", "-m", packed, "-p", "16", "-n", "0", "-r", "1", "-t", "1", "--act", "int8",
                     "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["act"] == "int8"
    made.clear()
    assert cli.main(["bench", "-m", packed, "-p", "8", "-n", "4", "-r", "1", "-t", "1", "--parallel", "1,2",
                     "--act", "float"]) == 0
    assert "activations: float" in capsys.readouterr().out
    assert {n for n, _ in made} == {"Session", "Batch"} and all(kw["act_quant"] is False for _, kw in made), made


def test_bench_names_what_auto_and_float_weights_run(packed, tmp_path, capsys):
    """The report names the activations the sessions ran: auto is the library's
    default (outliers), and float weights take float activations whatever --act says."""
    from cism import cli
    from helpers import make_model
    f32 = make_model(tmp_path / "f32.cism")
    for model, act, label in ((packed, "auto", "outliers (auto)"), (packed, "outliers", "outliers"),
                              (f32, "int8", "float (f32 weights)"), (f32, "auto", "float (f32 weights)")):
        assert cli.main(["bench", "-m", model, "-p", "8", "-n", "2", "-r", "1", "-t", "1", "--act", act]) == 0
        assert re.search(rf"activations: {re.escape(label)}(\n|   )", capsys.readouterr().out), (model, act)
    assert cli.main(["bench", "-m", packed, "-p", "8", "-n", "2", "-r", "1", "-t", "1", "--parallel", "1"]) == 0
    assert re.search(r"activations: outliers \(auto\)   ", capsys.readouterr().out)
    assert cli.main(["bench", "-m", packed, "-p", "8", "-n", "0", "-r", "1", "-t", "1", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert (report["act"], report["act_runs"]) == ("auto", "outliers (auto)")


def test_serve_act_equals_the_api(packed):
    """The slots and the batch of `cism serve --act int8` run plain int8
    activations: the first token's log-probability is that of an int8 session,
    not the default's."""
    pytest.importorskip("fastapi")
    pytest.importorskip("uvicorn")
    from serve_helpers import Server
    with cism.Model(packed) as m:
        lp = {}
        for a in ("outliers", "int8"):
            x = _last_logits(m, **act_kwargs(a))[: m.tokenizer.n_ids]
            lp[a] = x - (x.max() + np.log(np.exp(x - x.max()).sum()))
        best = int(np.argmax(lp["int8"]))
        want = m.tokenizer.decode([best])
    assert abs(lp["int8"][best] - lp["outliers"][best]) > 1e-5   # the two settings can be told apart
    s = Server(packed, "--slots", "2", "-c", "128", "--act", "int8")
    try:
        assert "int8 activations" in s.log()
        status, _, body = s.request("POST", "/v1/completions", {"prompt": PROMPT, "max_tokens": 6, "temperature": 0,
                                                                "logprobs": 1})
        assert status == 200, body
        choice = json.loads(body)["choices"][0]
        assert choice["logprobs"]["tokens"][0] == want and choice["text"].startswith(want)
        assert choice["logprobs"]["token_logprobs"][0] == pytest.approx(float(lp["int8"][best]), abs=1e-6)
    finally:
        s.stop()
