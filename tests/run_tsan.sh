#!/bin/sh
# The concurrency tests under ThreadSanitizer (called by .ci/run): a TSan build
# of only the tests that run threads against each other (test_threadpool: the
# pool; test_cancel: cancels from another thread, several sessions on one
# model; test_memory: two threaded sessions on one model, trim stopping their
# workers), run with ctest -R (which adds make_fixtures, the fixture they share;
# CMake preloads the TSan runtime into its Python). Any report fails the run.
set -eu
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${CISM_BUILD_DIR:-$ROOT/build}
JOBS=${CISM_JOBS:-2}
VENV=${CISM_TEST_VENV:-$BUILD/venv}
TESTS="test_cancel test_threadpool test_memory test_batch"

echo "== concurrency tests under ThreadSanitizer ($TESTS)"
cmake -S "$ROOT" -B "$BUILD/tsan" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCISM_SANITIZE=thread \
    -DPython3_EXECUTABLE="$VENV/bin/python" -DCISM_TOK_FIXTURE_DIR="$BUILD/tokenizer_fixtures" \
    -DCISM_BUILD_EXAMPLES=OFF -DCISM_BUILD_TOOLS=OFF
# shellcheck disable=SC2086
cmake --build "$BUILD/tsan" -j "$JOBS" --target cism $TESTS
(cd "$BUILD/tsan" && TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 ${TSAN_OPTIONS:-}" \
    ctest --output-on-failure --no-tests=error -j "$JOBS" -R "^($(echo $TESTS | tr ' ' '|'))\$")
