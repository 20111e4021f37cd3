"""Fuzzes the pure-Python GGUF reader (cism.gguf) with atheris: any input must
parse (and its tensors dequantize) or be refused with GGUFError; any other
exception, a hang or a huge allocation is a bug.

    mkdir -p build/fuzz/gguf
    PYTHONPATH=bindings_py python tests/fuzz/fuzz_gguf.py build/fuzz/gguf tests/fuzz/gguf_corpus \
        -max_total_time=60 -rss_limit_mb=1024

(libFuzzer adds new inputs to the first folder given: keep the seed folder second.)

The seed corpus (tests/fuzz/gguf_corpus, replayed by tests/python/test_gguf.py)
is written by tests/fuzz/make_gguf_corpus.py."""
import os
import sys
import tempfile

import atheris

with atheris.instrument_imports():
    from cism import gguf as G

_DIR = tempfile.mkdtemp(prefix="fuzz_gguf")
_PATH = os.path.join(_DIR, "input.gguf")


def test_one(data: bytes) -> None:
    with open(_PATH, "wb") as f:
        f.write(data)
    try:
        with G.GGUFFile(_PATH) as g:
            for name in g.tensors:
                try:
                    g.dequantize(name)
                except G.GGUFError:
                    pass
    except G.GGUFError:
        pass


if __name__ == "__main__":
    atheris.Setup(sys.argv, test_one)
    atheris.Fuzz()
