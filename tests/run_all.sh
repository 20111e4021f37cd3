#!/bin/sh
# The test command of README.md: builds libcism, runs the C tests (plain and
# under AddressSanitizer + UndefinedBehaviorSanitizer), installs the Python
# package and runs the pytest suites. Run from anywhere; needs cmake, a C
# compiler and python3 (>= 3.9). Set CISM_REQUIRE_SHARED=1 to make tests that
# need ../shared/models fail instead of skip when it is absent. With
# qemu-user installed, the x86 build also runs the kernel tests on emulated
# AVX2-only and pre-AVX CPUs; with gcc-aarch64-linux-gnu and qemu-user, an
# ARM64 cross build runs its tests on three emulated ARM64 CPUs
# (CISM_REQUIRE_CROSS=1 makes a missing cross toolchain an error).
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

echo "== ARM64 cross build, tests under qemu-aarch64 (cpus: max, neoverse-n1, cortex-a53)"
if command -v aarch64-linux-gnu-gcc >/dev/null 2>&1 && command -v qemu-aarch64 >/dev/null 2>&1; then
    # the host build's library quantizes the fixtures (the cross-built one cannot run here)
    cmake -S "$ROOT" -B "$BUILD/a64" -DCMAKE_TOOLCHAIN_FILE="$ROOT/cmake/aarch64-linux-gnu.cmake" \
        -DCMAKE_BUILD_TYPE=Release -DCISM_BUILD_TOOLS=OFF -DPython3_EXECUTABLE="$VENV/bin/python" \
        -DCISM_HOST_LIB="$BUILD/release/libcism/libcism.so"
    cmake --build "$BUILD/a64" -j "$JOBS"
    # the qemu_<cpu>_* tests pin their CPU model; the whole suite runs on the
    # richest model, the tests that use the kernels through the auto tier on the
    # two others too. The tests labelled every_tier (tests/c/CMakeLists.txt) ran
    # each ARM64 tier on max, which supports them all: not repeated there.
    (cd "$BUILD/a64" && ctest --output-on-failure -j "$JOBS" -R '^qemu_')
    echo "-- QEMU_CPU=max"
    (cd "$BUILD/a64" && QEMU_CPU=max ctest --output-on-failure -j "$JOBS" -E '^qemu_')
    for cpu in neoverse-n1 cortex-a53; do
        echo "-- QEMU_CPU=$cpu"
        (cd "$BUILD/a64" && QEMU_CPU=$cpu ctest --output-on-failure -j "$JOBS" -E '^qemu_|tokenizer|unicode' -LE every_tier)
    done
elif [ "${CISM_REQUIRE_CROSS:-0}" = 1 ]; then
    echo "aarch64-linux-gnu-gcc or qemu-aarch64 is missing (CISM_REQUIRE_CROSS=1)" >&2
    exit 1
else
    echo "skipped: aarch64-linux-gnu-gcc or qemu-aarch64 not installed (apt-get install gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user)"
fi

echo "== Python package and tests"
# the CMake build folder of the package is kept in $BUILD (not bindings_py/build), so
# re-runs rebuild only what changed and runs with other build folders don't share it
"$VENV/bin/python" -m pip install -q -C build-dir="$BUILD/bindings_py" "$ROOT/bindings_py"
(cd "$ROOT" && "$VENV/bin/python" -m pytest -q tests/python)
echo "== all tests passed"
