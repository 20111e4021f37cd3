#!/bin/sh
# The test command of README.md: builds libcism, runs the C tests (plain and
# under AddressSanitizer + UndefinedBehaviorSanitizer), installs the Python
# package and runs the pytest suites. Run from anywhere; needs cmake, a C
# compiler and python3 (>= 3.9). Set CISM_REQUIRE_SHARED=1 to make tests that
# need ../shared/models fail instead of skip when it is absent.
set -eu
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${CISM_BUILD_DIR:-$ROOT/build}
JOBS=${CISM_JOBS:-2}
PY=${PYTHON:-python3}
VENV=${CISM_TEST_VENV:-$BUILD/venv}

echo "== Python environment for the tests ($VENV)"
if [ ! -x "$VENV/bin/python" ]; then
    "$PY" -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install -q --upgrade pip
"$VENV/bin/python" -m pip install -q -r "$ROOT/tests/requirements.txt"

echo "== C build and tests (Release)"
cmake -S "$ROOT" -B "$BUILD/release" -DCMAKE_BUILD_TYPE=Release -DPython3_EXECUTABLE="$VENV/bin/python" \
    -DCISM_TOK_FIXTURE_DIR="$BUILD/tokenizer_fixtures"
cmake --build "$BUILD/release" -j "$JOBS"
(cd "$BUILD/release" && ctest --output-on-failure -j "$JOBS")

echo "== C tests under AddressSanitizer + UndefinedBehaviorSanitizer"
cmake -S "$ROOT" -B "$BUILD/asan" -DCMAKE_BUILD_TYPE=Debug -DCISM_SANITIZE=address,undefined -DPython3_EXECUTABLE="$VENV/bin/python" \
    -DCISM_TOK_FIXTURE_DIR="$BUILD/tokenizer_fixtures"
cmake --build "$BUILD/asan" -j "$JOBS"
(cd "$BUILD/asan" && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
    ctest --output-on-failure -j "$JOBS")

echo "== Python package and tests"
"$VENV/bin/python" -m pip install -q "$ROOT/bindings_py"
(cd "$ROOT" && "$VENV/bin/python" -m pytest -q tests/python)
echo "== all tests passed"
