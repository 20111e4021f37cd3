#!/bin/sh
# Builds the tokenizer fuzz target with clang (libFuzzer + ASan + UBSan) and
# runs it for SECONDS (default 60) on each tokenizer fixture given (default:
# a byte-level, a SentencePiece-style and the added-token variant).
# Usage: tests/fuzz/run_fuzz.sh FIXTURE_DIR [SECONDS] [names...]
set -eu
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
FX=$1; SECS=${2:-60}; shift; [ $# -gt 0 ] && shift
NAMES=${*:-"qwen2-added llama2 llama3 stories260K-llama2c llama2-metaspace-split"}
OUT=${CISM_FUZZ_DIR:-$ROOT/build/fuzz}
mkdir -p "$OUT"
clang -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all -std=c99 \
    -I"$ROOT/libcism/include" -I"$ROOT/libcism/src" "$ROOT/tests/fuzz/fuzz_tokenizer.c" \
    $(ls "$ROOT"/libcism/src/*/*.c | grep -v platform_win32) -lm -lpthread -o "$OUT/fuzz_tokenizer"
for n in $NAMES; do
    mkdir -p "$OUT/corpus_$n"
    CISM_FUZZ_MODEL="$FX/$n.cism" "$OUT/fuzz_tokenizer" -max_total_time="$SECS" -max_len=4096 \
        -artifact_prefix="$OUT/crash_$n-" "$OUT/corpus_$n" 2>&1 | tail -3
done
