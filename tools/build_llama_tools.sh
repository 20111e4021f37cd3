#!/bin/sh
# Builds llama.cpp's llama-imatrix, llama-quantize and llama-bench programs from the llama.cpp
# vendored in the pinned llama-cpp-python sdist (the same llama.cpp the compare
# extra runs), into build/cache/llama.cpp-tools-<version>/b/bin, where
# cism.llamacpp.tool() finds them. A benchmark step (tools/quality.py's
# imatrix rows, tools/bench_real_vs_llamacpp.py), not part of CI: a few minutes on two cores.
#   tools/build_llama_tools.sh [JOBS]
set -eu
VERSION=0.3.36
ROOT=$(cd "$(dirname "$0")/.." && pwd)
CACHE="$ROOT/build/cache"
DIR="$CACHE/llama.cpp-tools-$VERSION"
SDIST="$CACHE/llama_cpp_python-$VERSION.tar.gz"
mkdir -p "$CACHE"
if [ ! -f "$SDIST" ]; then
    # the sdist of this one package (--no-binary :all: would also make pip build the sdist's
    # build requirements from source to read its metadata: cmake itself, most of an hour)
    python3 -m pip download --no-deps --no-binary llama-cpp-python "llama-cpp-python==$VERSION" -d "$CACHE"
fi
if [ ! -d "$DIR/src" ]; then
    rm -rf "$DIR.partial" && mkdir -p "$DIR.partial"
    tar xzf "$SDIST" -C "$DIR.partial" "llama_cpp_python-$VERSION/vendor/llama.cpp"
    mkdir -p "$DIR"
    mv "$DIR.partial/llama_cpp_python-$VERSION/vendor/llama.cpp" "$DIR/src"
    rm -rf "$DIR.partial"
fi
cmake -S "$DIR/src" -B "$DIR/b" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DLLAMA_CURL=OFF \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_TOOLS=ON \
    -DBUILD_SHARED_LIBS=OFF
cmake --build "$DIR/b" -j "${1:-2}" --target llama-quantize llama-imatrix llama-bench
ls -l "$DIR/b/bin/llama-quantize" "$DIR/b/bin/llama-imatrix" "$DIR/b/bin/llama-bench"
