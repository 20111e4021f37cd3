#!/bin/sh
# Bounded fuzzing (called by .ci/run; docs/FUZZING.md): builds the libFuzzer
# targets with clang -fsanitize=fuzzer,address,undefined and runs each for
# SECONDS (default 60) from its seed corpus, then the atheris harness of the
# Python GGUF reader for SECONDS. Any crash, sanitizer report, leak, timeout
# (> 10 s on one input) or out-of-memory fails the script; the input that did
# it is left in OUT as crash-*/timeout-*/oom-* (add it to the target's replayed
# corpus with the fix). The tokenizer target's SECONDS are shared by the
# tokenizer fixtures named (default: a byte-level BPE with added tokens and a
# SentencePiece one); the chat target uses the first of them.
# Usage: tests/fuzz/run_fuzz.sh FIXTURE_DIR [SECONDS] [tokenizer names...]
#   FIXTURE_DIR: the tokenizer fixtures (tests/tokenizer/make_tokenizer_fixtures.py;
#   tests/run_all.sh writes them to build/tokenizer_fixtures)
#   CISM_FUZZ_DIR: work folder (default build/fuzz); CISM_FUZZ_TARGETS: a subset of
#   "loader tokenizer chat gguf"; PYTHON: an interpreter with atheris and numpy
#   (default build/venv/bin/python; atheris is installed into it when missing)
set -eu
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
FX=$1; SECS=${2:-60}; shift; [ $# -gt 0 ] && shift
NAMES=${*:-"qwen2-added llama2-metaspace-split"}
OUT=${CISM_FUZZ_DIR:-$ROOT/build/fuzz}
TARGETS=${CISM_FUZZ_TARGETS:-"loader tokenizer chat gguf"}
PY=${PYTHON:-$ROOT/build/venv/bin/python}
JOBS=${CISM_JOBS:-2}
mkdir -p "$OUT"
CFLAGS="-g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all -std=c99 -I$ROOT/libcism/include"
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}

# the library once, by its own CMake (its kernel tiers with their flags), instrumented
# for coverage (-fsanitize=fuzzer-no-link) and sanitized; each target links it
echo "== fuzz: building the targets (clang, libFuzzer + ASan + UBSan)"
cmake -S "$ROOT" -B "$OUT/lib" -DCMAKE_C_COMPILER=clang -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCISM_SANITIZE=fuzzer-no-link,address,undefined -DCISM_BUILD_TESTS=OFF -DCISM_BUILD_EXAMPLES=OFF \
    -DCISM_BUILD_TOOLS=OFF >"$OUT/cmake.log" 2>&1 || { cat "$OUT/cmake.log"; exit 1; }
cmake --build "$OUT/lib" -j "$JOBS" --target cism_static >>"$OUT/cmake.log" 2>&1 || { tail -40 "$OUT/cmake.log"; exit 1; }
for t in loader tokenizer chat; do
    # shellcheck disable=SC2086
    clang $CFLAGS "$ROOT/tests/fuzz/fuzz_$t.c" "$OUT/lib/libcism/libcism.a" -lm -lpthread -o "$OUT/fuzz_$t"
done

# run TARGET LOG [libFuzzer arguments]: fails (with the log's end) on any finding
run() {
    name=$1; log=$2; shift 2
    if ! "$@" >"$log" 2>&1; then
        tail -60 "$log"
        echo "fuzz: $name FAILED (log: $log; the input: $OUT/crash-$name-*)" >&2
        exit 1
    fi
    grep -E "^(#[0-9]+ *DONE|Done [0-9]+ runs)" "$log" | tail -1 | sed "s/^/fuzz: $name: /"
}
common="-timeout=10 -rss_limit_mb=2048"

for t in $TARGETS; do
    case $t in
    loader)
        mkdir -p "$OUT/corpus_loader"
        run loader "$OUT/loader.log" "$OUT/fuzz_loader" $common -max_total_time="$SECS" -max_len=65536 \
            -artifact_prefix="$OUT/crash-loader-" "$OUT/corpus_loader" "$ROOT/tests/fuzz/corpus_loader" ;;
    tokenizer)
        n=$(echo $NAMES | wc -w)
        each=$(( (SECS + n - 1) / n ))
        for tok in $NAMES; do
            mkdir -p "$OUT/corpus_tokenizer_$tok"
            run "tokenizer-$tok" "$OUT/tokenizer-$tok.log" env CISM_FUZZ_MODEL="$FX/$tok.cism" "$OUT/fuzz_tokenizer" \
                $common -max_total_time="$each" -max_len=4096 -artifact_prefix="$OUT/crash-tokenizer-$tok-" \
                "$OUT/corpus_tokenizer_$tok" "$ROOT/tests/fuzz/corpus_tokenizer"
        done ;;
    chat)
        tok=$(echo $NAMES | cut -d' ' -f1)
        mkdir -p "$OUT/corpus_chat"
        run chat "$OUT/chat.log" env CISM_FUZZ_MODEL="$FX/$tok.cism" "$OUT/fuzz_chat" $common -max_total_time="$SECS" \
            -max_len=4096 -artifact_prefix="$OUT/crash-chat-" "$OUT/corpus_chat" "$ROOT/tests/fuzz/corpus_chat" ;;
    gguf)
        "$PY" -c "import atheris" 2>/dev/null || "$PY" -m pip install -q "atheris>=3,<4"
        mkdir -p "$OUT/gguf"
        run gguf "$OUT/gguf.log" env PYTHONPATH="$ROOT/bindings_py" "$PY" "$ROOT/tests/fuzz/fuzz_gguf.py" \
            -timeout=10 -rss_limit_mb=2048 -max_total_time="$SECS" -artifact_prefix="$OUT/crash-gguf-" \
            "$OUT/gguf" "$ROOT/tests/fuzz/gguf_corpus" ;;
    *) echo "run_fuzz.sh: unknown target $t" >&2; exit 2 ;;
    esac
done
echo "== fuzz: no crash"
