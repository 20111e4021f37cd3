"""First-run frictions a new user met (issue 11, item 6), each pinned by a test
that fails on the old behaviour: help texts, the context end as a stop reason,
prompts longer than the context, error texts, warnings by default, timings and
prefill progress, `-f -`, non-UTF-8 chat input, the README's commands."""
from __future__ import annotations

import contextlib
import io
import os
import re
import subprocess
import sys

import numpy as np
import pytest

import cism
from cism import cli
from cism.cli_io import PROGRESS_MIN_TOKENS, PrefillProgress
from conftest import ROOT
from helpers import ASCII_VOCAB, make_model

README = os.path.join(ROOT, "README.md")
TIMINGS = re.compile(r"cism: load [\d.]+ ms \| prompt (\d+) tokens, [\d.]+ ms \(([\d.]+|-) t/s\) \| "
                     r"generated (\d+) tokens, [\d.]+ ms \(([\d.]+|-) t/s\) \| stop: (.+)")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """A random-weight model whose every token decodes to printable ASCII (no newlines)."""
    return make_model(tmp_path_factory.mktemp("fr") / "t.cism", tokenizer="ascii", vocab=ASCII_VOCAB, ctx=2048)


def _cli(*args, input=None, env=None):
    """python -m cism ARGS with bytes in and text out."""
    e = dict(os.environ)
    e.update(env or {})
    p = subprocess.run([sys.executable, "-m", "cism", *args], input=input, capture_output=True, env=e, timeout=600)
    return p.returncode, p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8", "replace")


# ---- --help of every subcommand -----------------------------------------------------
def _subcommands():
    parser = cli.build_parser()
    sub = next(a for a in parser._actions if isinstance(a, type(parser._subparsers._group_actions[0])))
    return sorted(sub.choices)


def test_every_subcommand_help_works():
    names = _subcommands()
    assert {"convert", "generate", "chat", "info", "bench", "ppl", "upgrade"} <= set(names)
    for argv in [["--help"]] + [[n, "--help"] for n in names]:
        out = io.StringIO()
        with contextlib.redirect_stdout(out), pytest.raises(SystemExit) as ei:
            cli.main(argv)
        assert ei.value.code == 0, argv
        assert "usage:" in out.getvalue(), argv
    # the recipe descriptions hold a "%", which argparse must not take for a format
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit):
        cli.main(["convert", "--help"])
    assert "--calibrate" in out.getvalue() and "%" in out.getvalue()


def test_convert_help_in_a_subprocess():
    rc, out, err = _cli("convert", "--help")
    assert rc == 0 and "--quant RECIPE" in out and "Traceback" not in err, err


# ---- the context end is a stop, not an error ---------------------------------------------
def test_missing_library_is_a_clear_error(tmp_path):
    """A CISM_LIB that names no library: one error line naming the path and the fix, not a traceback."""
    missing = str(tmp_path / "nowhere" / "libcism.so")
    for args in (["--help"], ["generate", "-m", "x.cism", "-p", "hi"]):
        rc, out, err = _cli(*args, env={"CISM_LIB": missing})
        assert rc == 1, (args, rc, err)
        assert "cannot load the libcism shared library" in err and missing in err, err
        assert "CISM_LIB" in err and "Traceback" not in err, err


def test_cli_context_end_is_a_normal_stop(tiny):
    rc, out, err = _cli("generate", "-m", tiny, "-p", "ab", "-c", "8", "-n", "20", "--ignore-eos")
    assert rc == 0, err
    m = TIMINGS.search(err)
    assert m and m.group(1) == "3" and m.group(3) == "6" and m.group(5) == "length (context full)", err
    assert "error" not in err


def test_generation_stops_at_the_context_end(tiny):
    with cism.Model(tiny) as model, model.session(n_ctx=16) as s:
        gen = s.generate("abc", 100, ignore_eos=True)
        text = "".join(gen)
        assert gen.stop_reason == "length" and gen.context_full and s.n_past == 16
        assert len(gen.tokens) == 16 - 4 + 1 and text  # BOS + 3, 12 evaluated, the last one reported
        gen = s.generate_ids([], 5, cism.Sampler(), ignore_eos=True)  # nothing fits: one token, reported
        assert len(gen) == 1 and s.stop_reason == "length"


# ---- a prompt longer than the context ----------------------------------------------------
def test_cli_long_prompt_refused_before_echo(tiny):
    rc, out, err = _cli("generate", "-m", tiny, "-p", "x" * 40, "-c", "16")
    assert rc == 1 and out == "", out  # nothing echoed
    assert "the prompt is 41 tokens but the context has room for 16" in err and "--truncate-prompt" in err, err
    assert "Traceback" not in err


def test_cli_truncate_prompt(tiny):
    prompt = "".join(chr(ord("a") + i % 26) for i in range(40))
    rc, out, err = _cli("generate", "-m", tiny, "-p", prompt, "-c", "16", "-n", "4", "--ignore-eos",
                        "--truncate-prompt")
    assert rc == 0, err
    assert "its first 29 tokens were dropped" in err, err  # 41 tokens, room 16: keep BOS + 11, 4 left to generate
    assert out.startswith(prompt[-11:]) and not out.startswith(prompt[:20])
    m = TIMINGS.search(err)
    assert m and m.group(1) == "12" and m.group(3) == "4", err


def test_python_prompt_too_long(tiny):
    with cism.Model(tiny) as model, model.session(n_ctx=16) as s:
        with pytest.raises(cism.ContextFullError, match="prompt is 21 tokens .* room for 16"):
            s.generate("y" * 20, 4)
        assert s.n_past == 0
        gen = s.generate("y" * 20, 4, truncate_prompt=True, ignore_eos=True)
        assert gen.truncated == 21 - 12 and gen.prompt_tokens[0] == model.tokenizer.bos_id and len(gen.prompt_tokens) == 12
        assert len(list(gen)) == 4 and gen.stop_reason == "length" and not gen.context_full
        s.reset()
        gen = s.generate("y" * 20, 100, truncate_prompt=True, ignore_eos=True)  # long max_tokens: half the room
        assert len(gen.prompt_tokens) == 8


# ---- error texts: what the user did wrong and what to do ---------------------------------
def test_error_texts_speak_to_the_user(tiny):
    rc, _, err = _cli("generate", "-m", tiny, "-p", "x", "-t", "-1")
    assert rc == 2 and "-t/--threads" in err and "negative" in err, err
    rc, _, err = _cli("generate", "-m", tiny, "-p", "x", "-c", "-1")
    assert rc == 2 and "-c/--ctx" in err, err
    rc, _, err = _cli("generate", "-m", tiny, "-p", "x", "-c", "9999")
    assert rc == 1 and "larger than the model's 2048 positions: use at most 2048" in err, err
    rc, _, err = _cli("generate", "-m", tiny, "-p", "x", "--temperature", "nan")
    assert rc == 1 and "temperature nan is not a finite number" in err and "parameter 0" not in err, err
    with pytest.raises(cism.InvalidArgumentError) as ei:
        cism.Sampler().sample(np.full(8, np.nan, dtype=np.float32))
    msg = str(ei.value)
    assert "cism_sampler_sample" not in msg and "check_weights" in msg and "NaN" in msg
    with pytest.raises(cism.InvalidArgumentError) as ei:
        cism.params.Params(n_threads=-1)
    assert "cism_params_set_int" not in str(ei.value) and "thread count (n_threads) -1" in str(ei.value)
    with cism.Model(tiny) as model, model.session() as s:
        with pytest.raises(cism.InvalidArgumentError, match="nothing to evaluate"):
            s.eval([])
        with pytest.raises(cism.StateError) as ei:
            s.generate_ids([], 3, cism.Sampler())
        assert "cism_generate" not in str(ei.value) and "give a prompt" in str(ei.value)


# ---- warnings without -v --------------------------------------------------------------
def test_bad_cism_isa_warns_by_default(tiny):
    rc, _, err = _cli("info", "-m", tiny, env={"CISM_ISA": "no-such-tier"})
    assert rc == 0 and "warning: CISM_ISA=no-such-tier is not a kernel tier name" in err, err
    rc, _, err = _cli("info", "-m", tiny, "-v", env={"CISM_ISA": "no-such-tier"})
    assert rc == 0 and "CISM_ISA=no-such-tier" in err


def test_old_format_version_warns_by_default(tmp_path):
    from cism.synthetic import write_synthetic
    from helpers import tiny_preset
    path = tmp_path / "q8.cism"
    write_synthetic(tiny_preset(), str(path), "q8", 0)
    from cism import format as fmt
    blob = bytearray(fmt.legacy_bytes(path.read_bytes(), 1))  # an old file (content rearranged at load)
    old = tmp_path / "q8.v1.cism"
    old.write_bytes(bytes(blob))
    rc, _, err = _cli("info", "-m", str(old))
    assert rc == 0 and "warning:" in err and "format version 1" in err and "cism upgrade" in err, err


# ---- timings, progress, -f - --------------------------------------------------------
def test_generate_prints_timings(tiny):
    rc, out, err = _cli("generate", "-m", tiny, "-p", "hello", "-n", "5", "--ignore-eos")
    assert rc == 0 and out.startswith("hello")
    m = TIMINGS.search(err)
    assert m and m.group(1) == "6" and m.group(3) == "5" and m.group(5) == "length (-n reached)", err
    assert float(m.group(4)) > 0


def test_prompt_from_stdin(tiny, tmp_path):
    rc, out, err = _cli("generate", "-m", tiny, "-f", "-", "-n", "3", "--ignore-eos", input=b"from stdin")
    assert rc == 0 and out.startswith("from stdin"), err
    assert TIMINGS.search(err).group(1) == "11"
    rc, out, err = _cli("ppl", "-m", tiny, "-f", "-", "--ctx", "16", input=b"some text to score, from stdin " * 4)
    assert rc == 0 and "PPL" in out, err
    rc, out, err = _cli("ppl", "-m", tiny, "-f", "-", "--ctx", "16", input=b"bad \xff byte")
    assert rc == 1 and "standard input is not UTF-8 text (invalid byte 0xff at offset 4)" in err, err
    with cism.Model(tiny) as m:
        n = m.context_length
    rc, out, err = _cli("ppl", "-m", tiny, "-f", "-", "--ctx", str(n + 1), input=b"some text " * 8)
    assert rc == 1 and f"ctx {n + 1} is longer than" in err and f"context length ({n} tokens)" in err, err
    for missing in (tmp_path / "none.txt", tmp_path):  # the file named, the reason in words, no errno tuple
        rc, out, err = _cli("ppl", "-m", tiny, "-f", str(missing))
        assert rc == 1 and f"cannot read '{missing}': " in err and "Errno" not in err and "Traceback" not in err, err
    f = tmp_path / "p.txt"
    f.write_bytes(b"caf\xe9 ok")  # Latin-1: replaced, with a warning, and generation goes on
    rc, out, err = _cli("generate", "-m", tiny, "-f", str(f), "-n", "2", "--ignore-eos")
    assert rc == 0 and out.startswith("caf\ufffd ok") and "not valid UTF-8" in err, err


def test_prefill_progress_in_chunks_same_tokens(tiny):
    prompt = "".join(chr(ord("a") + i % 26) for i in range(599))
    seen = []
    with cism.Model(tiny) as model:
        with model.session() as s:
            ref = list(s.generate_tokens(model.tokenizer.encode(prompt), 8, ignore_eos=True))
        with model.session() as s:
            gen = s.generate_tokens(model.tokenizer.encode(prompt), 8, ignore_eos=True,
                                    on_prefill=lambda d, t: seen.append((d, t)))
            assert list(gen) == ref and gen.prompt_seconds > 0 and gen.gen_seconds > 0
    assert seen == [(256, 600), (512, 600), (600, 600)]


def test_eval_progress_stops_between_steps(tiny):
    """Session.eval(on_progress=...): True after the second step stops there,
    as a cancel does (two steps kept, their last token's logits); an exception
    in the callback stops it the same way and comes out of eval()."""
    ids = [(i * 7) % 90 + 3 for i in range(600)]
    with cism.Model(tiny) as model:
        with model.session(n_batch=128) as ref:
            ref.eval(ids[:256])
            want = ref.logits()
        with model.session(n_batch=128) as s:
            calls = []
            with pytest.raises(cism.CancelledError):
                s.eval(ids, on_progress=lambda d, t: calls.append((d, t)) or d >= 256)
            assert calls == [(128, 600), (256, 600)] and s.n_past == 256
            assert np.array_equal(s.logits(), want)
            s.rewind(0)
            with pytest.raises(ZeroDivisionError):
                s.eval(ids, on_progress=lambda d, t: 1 / (d - 128))
            assert s.n_past == 128
            s.eval(ids[128:], on_progress=lambda d, t: False)  # runs to the end; the callback is removed after
            assert s.n_past == 600
            s.eval([1])


def test_prefill_progress_display():
    class Tty(io.StringIO):
        def isatty(self):
            return True
    quiet = io.StringIO()
    p = PrefillProgress(quiet)
    for d in (256, 512, 600):
        p(d, 600)
    assert quiet.getvalue() == ""  # not a terminal, short prompt: nothing
    lines = io.StringIO()
    p = PrefillProgress(lines)
    n = 10 * PROGRESS_MIN_TOKENS
    for d in range(256, n + 256, 256):
        p(min(d, n), n)
    out = lines.getvalue().splitlines()
    assert out[-1] == f"cism: prompt {n}/{n} tokens" and 5 <= len(out) <= 12
    tty = Tty()
    p = PrefillProgress(tty)
    p(256, 600)
    p(600, 600)
    assert tty.getvalue() == "\rcism: prompt 256/600 tokens\rcism: prompt 600/600 tokens\n"


def test_cli_long_prompt_shows_progress(tiny, tmp_path):
    f = tmp_path / "long.txt"
    f.write_text("".join(chr(ord("a") + i % 26) for i in range(PROGRESS_MIN_TOKENS + 99)))
    rc, out, err = _cli("generate", "-m", tiny, "-f", str(f), "-n", "2", "--ignore-eos", "--no-echo")
    assert rc == 0, err
    n = PROGRESS_MIN_TOKENS + 100
    assert f"cism: prompt {n}/{n} tokens" in err and "cism: prompt 256/" in err, err


# ---- chat keeps going on non-UTF-8 input ----------------------------------------------
def test_chat_survives_invalid_utf8(tiny):
    rc, out, err = _cli("chat", "-m", tiny, "--format", "zephyr", "-n", "4", "--temperature", "0",
                        input=b"caf\xe9 au lait\nsecond turn\n")
    assert rc == 0, err
    assert "not valid UTF-8" in err and "Traceback" not in err
    assert len(out.splitlines()) == 2, out  # both turns answered


# ---- the README ----------------------------------------------------------------------
def _readme():
    with open(README, encoding="utf-8") as f:
        return f.read()


def test_readme_convert_outputs_do_not_collide():
    outs = re.findall(r"cism convert [^`\n]*?-o (\S+)", _readme())
    assert len(outs) >= 4 and len(outs) == len(set(outs)), outs


def test_vs_install_hint_matches_readme():
    from cism.llamacpp import INSTALL_HINT
    hint = re.search(r"`(pip install '[^`]*\[compare\]')`", _readme()).group(1)
    assert INSTALL_HINT.startswith(hint), (INSTALL_HINT, hint)


def test_readme_builds_the_c_examples():
    text = _readme()
    with open(os.path.join(ROOT, "examples", "c", "CMakeLists.txt"), encoding="utf-8") as f:
        targets = re.findall(r"add_executable\((\w+)", f.read())
    assert targets
    line = re.search(r"`(cmake -S [^`]*--target[^`]*)`", text)
    assert line, "no line on building the C examples"
    assert all(t in line.group(1) for t in targets), (line.group(1), targets)
