"""The package installs into a fresh virtual environment from a clean clone of
the repository at HEAD (`pip install ./bindings_py`: scikit-build-core builds
libcism with CMake), and the installed `cism` command works."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from conftest import ROOT


def _run(cmd, cwd=None, env=None, timeout=900):
    p = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert p.returncode == 0, f"{' '.join(map(str, cmd))} failed:\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}"
    return p


@pytest.fixture(scope="module")
def fresh_install(tmp_path_factory):
    head = subprocess.run(["git", "-C", ROOT, "rev-parse", "HEAD"], capture_output=True, text=True)
    if head.returncode != 0:
        pytest.skip(f"{ROOT} is not a git checkout")
    tmp = tmp_path_factory.mktemp("install")
    clone, venv = tmp / "clone", tmp / "venv"
    _run(["git", "clone", "--quiet", "--no-checkout", ROOT, str(clone)])
    _run(["git", "-C", str(clone), "checkout", "--quiet", head.stdout.strip()])
    _run([sys.executable, "-m", "venv", str(venv)])
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CISM_LIB", "PYTHONPATH", "VIRTUAL_ENV"))}
    env["CISM_CACHE_DIR"] = str(tmp / "cache")
    _run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", str(clone / "bindings_py")], cwd=str(tmp),
         env=env)
    return venv, env, tmp


def test_installed_cli_runs(fresh_install):
    venv, env, tmp = fresh_install
    cism = str(venv / "bin" / "cism")
    p = _run([cism, "info"], cwd=str(tmp), env=env)
    assert "libcism 0.1.0" in p.stdout
    # the library comes from the new environment, not from this checkout
    p = _run([str(venv / "bin" / "python"), "-c", "import cism._lib as l; print(l.lib._name)"], cwd=str(tmp), env=env)
    assert p.stdout.strip().startswith(str(venv)), p.stdout
    # jinja2 comes with the package: a model's chat template can always be rendered
    _run([str(venv / "bin" / "python"), "-c", "import jinja2, cism.chat"], cwd=str(tmp), env=env)
    p = _run([cism, "bench", "--preset", "tiny", "-p", "16", "-n", "4", "-r", "1"], cwd=str(tmp), env=env)
    assert "prefill" in p.stdout and "decode" in p.stdout
    p = _run([str(venv / "bin" / "python"), "-m", "cism", "--version"], cwd=str(tmp), env=env)
    assert p.stdout.startswith("cism ")


def test_installed_cli_converts_and_generates(shared_models, fresh_install):
    venv, env, tmp = fresh_install
    cism = str(venv / "bin" / "cism")
    out = str(tmp / "stories260K.cism")
    _run([cism, "convert", os.path.join(shared_models, "stories260K", "stories260K.bin"), "--tokenizer",
          os.path.join(shared_models, "stories260K", "tok512.bin"), "-o", out], cwd=str(tmp), env=env)
    p = _run([cism, "generate", "-m", out, "-p", "Once upon a time, there was", "-n", "32", "--ignore-eos"],
             cwd=str(tmp), env=env)
    assert p.stdout.startswith("Once upon a time, there was a little girl named Lily. She loved to play outside in "
                               "the park. One day, she saw a big,")
