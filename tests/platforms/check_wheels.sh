#!/bin/sh
# The manylinux wheels (docs/WHEELS.md), built and tested on a Linux x86-64
# box. Called by .ci/run after tests/run_all.sh, whose release build (the
# normally built libcism and examples/c/generate) is the reference. .ci/run
# installs the tools: qemu-user, gcc-aarch64-linux-gnu, libc6-dev-arm64-cross
# (apt); ziglang and auditwheel in $CISM_PLATFORM_VENV (pip).
#
# Checks (each prints PASS/FAIL with its time; the last line counts them):
#   build              tools/build_wheels.sh: zig cc, glibc 2.17, x86-64 and aarch64 wheels;
#                      auditwheel show must report a manylinux tag for each
#   contents-<arch>    the wheel holds cism/libcism.so for <arch>, which needs only
#                      libc/libm/libpthread, no symbol newer than GLIBC_2.17, and
#                      exports exactly the functions of cism.h
#   x86_64-venv        the x86-64 wheel in a new venv (dependencies from PyPI): the
#                      wheel's `cism convert` converts stories260K-hf (f32, q8, 4bit);
#                      greedy tokens through the Python API == examples/c/generate on the
#                      normal build ($BUILD/release)
#   x86_64-c           examples/c/generate linked to the x86-64 wheel's libcism.so == the
#                      normal build on the same tier (3 models, greedy and sampled),
#                      natively and under qemu-x86_64 on the AVX2 and scalar tiers (the
#                      normal build run there too: int8 activations give each tier's own
#                      bits, so sampled tokens are compared tier for tier)
#   aarch64-qemu       the same, cross-built and linked to the aarch64 wheel's libcism.so,
#                      against the normal ARM64 cross build ($BUILD/a64) on the same cpu,
#                      under qemu-aarch64 on cpus max (i8mm tier), neoverse-n1 (dotprod)
#                      and cortex-a53 (plain NEON); each run checks the tier picked
#   aarch64-python     the aarch64 wheel and its dependencies (pip --target --platform) in
#                      Debian's aarch64 python3.11 under qemu-aarch64 (the .debs unpacked, not
#                      installed; needs `dpkg --add-architecture arm64`, skipped without it
#                      unless CISM_REQUIRE_CROSS=1): wheel_smoke.py == the normal build, 3 tiers
# Usage: tests/platforms/check_wheels.sh [check-name-substring...]
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${CISM_BUILD_DIR:-$ROOT/build}
VENV=${CISM_TEST_VENV:-$BUILD/venv}
PLAT=${CISM_PLATFORM_VENV:-$BUILD/venv-platforms}
WHEELS=$BUILD/wheels
OUT=$BUILD/wheel-checks
CLEAN_VENV=$OUT/venv
SHARED=${CISM_SHARED_DIR:-$ROOT/../shared}
REF_GENERATE=$BUILD/release/examples/c/generate
REF_GENERATE_A64=$BUILD/a64/examples/c/generate
GLIBC_MAX=2.17
mkdir -p "$OUT"
PASSED=0
FAILED=0
FAILED_NAMES=""

ONLY="$*"
selected() {
    [ -z "$ONLY" ] && return 0
    for w in $ONLY; do
        case $1 in *"$w"*) return 0 ;; esac
    done
    return 1
}

check() { # check NAME FUNCTION [ARGS]: runs it with its output in $OUT/NAME.log
    name=$1
    shift
    selected "$name" || return 0
    t0=$(date +%s)
    if "$@" >"$OUT/$name.log" 2>&1; then
        PASSED=$((PASSED + 1))
        echo "PASS $name ($(($(date +%s) - t0)) s)"
    else
        FAILED=$((FAILED + 1))
        FAILED_NAMES="$FAILED_NAMES $name"
        echo "FAIL $name ($(($(date +%s) - t0)) s); last lines of $OUT/$name.log:"
        tail -n 25 "$OUT/$name.log" | sed 's/^/    /'
    fi
}

wheel_of() { # wheel_of ARCH: the path of the manylinux wheel of ARCH
    set -- "$WHEELS"/cism-*-manylinux*_"$1".whl
    [ $# -eq 1 ] && [ -f "$1" ] || { echo "no single manylinux wheel for that architecture in $WHEELS" >&2; return 1; }
    echo "$1"
}

unpack() { # unpack ARCH: the wheel's files in $OUT/unpacked-ARCH
    whl=$(wheel_of "$1") || return 1
    rm -rf "$OUT/unpacked-$1" && mkdir -p "$OUT/unpacked-$1" &&
        (cd "$OUT/unpacked-$1" && "$VENV/bin/python" -m zipfile -e "$whl" .)
}

# ---- checks --------------------------------------------------------------------------
build() {
    PYTHON="$VENV/bin/python" CISM_PLATFORM_VENV="$PLAT" "$ROOT/tools/build_wheels.sh" "$WHEELS" || return 1
    cat "$WHEELS"/auditwheel-*.txt
}

contents() { # contents ARCH
    arch=$1
    unpack "$arch" || return 1
    lib=$OUT/unpacked-$arch/cism/libcism.so
    [ -f "$lib" ] || { echo "no cism/libcism.so in $(wheel_of "$arch")"; return 1; }
    [ -f "$OUT/unpacked-$arch/cism/_lib.py" ] || { echo "no cism/_lib.py in the wheel"; return 1; }
    case $arch in
    x86_64) want="X86-64" ;;
    aarch64) want="AArch64" ;;
    esac
    llvm-readelf -h "$lib" | grep -E "Machine:.*$want" || { echo "$lib is not an $want ELF file"; return 1; }
    needed=$(llvm-readelf -d "$lib" | sed -n 's/.*(NEEDED).*\[\(.*\)\].*/\1/p' | sort | tr '\n' ' ')
    echo "needs: $needed"
    [ "$needed" = "libc.so.6 libm.so.6 libpthread.so.0 " ] || { echo "unexpected NEEDED libraries: $needed"; return 1; }
    # every versioned glibc symbol it references, the newest last
    versions=$(llvm-objdump -T "$lib" | grep -o "GLIBC_[0-9][0-9.]*" | sort -u -t. -k1,1 -k2,2n -k3,3n | tr '\n' ' ')
    echo "glibc symbol versions: $versions"
    newest=$(echo "$versions" | tr ' ' '\n' | sed -n 's/^GLIBC_2\.\([0-9]*\).*/\1/p' | sort -n | tail -n 1)
    [ -n "$newest" ] && [ "$newest" -le "${GLIBC_MAX#2.}" ] ||
        { echo "references GLIBC_2.$newest, newer than $GLIBC_MAX"; return 1; }
    "$VENV/bin/python" - "$ROOT/libcism/include/cism.h" <<'PY' >"$OUT/api-$arch.txt" || return 1
import re, sys
text = open(sys.argv[1]).read()
print("\n".join(sorted(set(re.findall(r"CISM_API\s[^;]*?\b(cism_\w+)\s*\(", text)))))
PY
    llvm-nm -D --defined-only "$lib" | awk '$3 ~ /^cism/ {print $3}' | sort -u >"$OUT/exports-$arch.txt"
    diff "$OUT/api-$arch.txt" "$OUT/exports-$arch.txt" ||
        { echo "exports differ from cism.h (< only in cism.h, > only exported)"; return 1; }
    echo "$(wc -l <"$OUT/exports-$arch.txt") exports == cism.h"
}

# the models the runs below use, $OUT/NAME.cism: stories260K converted by the
# wheel's converter (x86_64-venv) in f32, q8 and the 4-bit recipe (q8 + q4s),
# so the int8 kernels of every tier run too
MODELS="stories260K stories260K-q8 stories260K-4bit"
MODEL=$OUT/stories260K.cism

x86_64_venv() {
    whl=$(wheel_of x86_64) || return 1
    rm -rf "$CLEAN_VENV"
    for model in $MODELS; do rm -f "$OUT/$model.cism"; done
    python3 -m venv "$CLEAN_VENV" || return 1
    "$CLEAN_VENV/bin/python" -m pip install -q --disable-pip-version-check "$whl" || return 1
    "$CLEAN_VENV/bin/python" -m pip list --disable-pip-version-check 2>/dev/null | grep -iE "^(cism|numpy|tokenizers|jinja2) "
    hf=$SHARED/models/stories260K-hf
    [ -d "$hf" ] || { echo "$hf is missing: the smoke check converts it"; return 1; }
    # from a folder outside the checkout, with no CISM_LIB: only the wheel can be imported
    (cd "$OUT" && env -u CISM_LIB -u PYTHONPATH "$CLEAN_VENV/bin/cism" convert "$hf" -o "$MODEL" &&
        env -u CISM_LIB -u PYTHONPATH "$CLEAN_VENV/bin/cism" convert "$hf" -o "$OUT/stories260K-q8.cism" --quant q8 &&
        env -u CISM_LIB -u PYTHONPATH "$CLEAN_VENV/bin/cism" convert "$hf" -o "$OUT/stories260K-4bit.cism" --quant 4bit) ||
        return 1
    (cd "$OUT" && env -u CISM_LIB -u PYTHONPATH "$CLEAN_VENV/bin/python" "$ROOT/tests/platforms/wheel_smoke.py" \
        "$MODEL" 48 "$OUT/tokens-wheel-python.txt") || return 1
    "$REF_GENERATE" "$MODEL" 48 0 0 >"$OUT/tokens-ref-greedy.txt" 2>/dev/null || return 1
    if ! cmp -s "$OUT/tokens-ref-greedy.txt" "$OUT/tokens-wheel-python.txt"; then
        echo "the wheel (Python API) and the normal build (examples/c/generate) differ:"
        cat "$OUT/tokens-wheel-python.txt" "$OUT/tokens-ref-greedy.txt"
        return 1
    fi
    echo "same $(wc -w <"$OUT/tokens-ref-greedy.txt") greedy tokens as the normal build"
}

# compare_runs LABEL REF PROG [RUNNER...]: examples/c/generate linked to the wheel
# (PROG) == the normal build's (REF), each through RUNNER (nothing: natively), on
# each model, greedy and sampled
compare_runs() {
    label=$1
    ref=$2
    prog=$3
    shift 3
    for model in $MODELS; do
        for run in "48 0 0" "48 0.8 42" "32 1.0 7"; do
            n=${run%% *}
            rest=${run#* }
            temp=${rest%% *}
            seed=${rest#* }
            "$@" "$ref" "$OUT/$model.cism" "$n" "$temp" "$seed" >"$OUT/tokens-ref.txt" 2>/dev/null ||
                { echo "the normal build's $ref did not run"; return 1; }
            "$@" "$prog" "$OUT/$model.cism" "$n" "$temp" "$seed" >"$OUT/tokens-run.txt" 2>"$OUT/run-stderr.txt" ||
                { cat "$OUT/run-stderr.txt"; return 1; }
            if ! cmp -s "$OUT/tokens-ref.txt" "$OUT/tokens-run.txt"; then
                echo "$model n=$n temperature=$temp seed=$seed, $label: differs from the normal build"
                cat "$OUT/tokens-ref.txt" "$OUT/tokens-run.txt"
                return 1
            fi
            echo "$model n=$n temperature=$temp seed=$seed, $label: same $(wc -w <"$OUT/tokens-ref.txt") tokens"
        done
    done
}

# tier_is TIER RUNNER...: the wheel's library picks kernel tier TIER when run through RUNNER
tier_is() {
    want=$1
    shift
    "$@" >"$OUT/tier.txt" 2>&1 || { cat "$OUT/tier.txt"; return 1; }
    grep -q "kernel tier: $want " "$OUT/tier.txt" || { echo "not the $want tier:"; cat "$OUT/tier.txt"; return 1; }
    echo "$*: kernel tier $want"
}

# link_wheel ARCH CC: examples/c/generate and wheel_tier.c linked to the unpacked
# wheel's library (run path: that folder), and a check that it is the one loaded
link_wheel() {
    arch=$1
    compiler=$2
    dir=$OUT/unpacked-$arch/cism
    [ -f "$dir/libcism.so" ] || unpack "$arch" || return 1
    for prog in "$ROOT/examples/c/generate.c" "$ROOT/tests/platforms/wheel_tier.c"; do
        exe=$OUT/$(basename "$prog" .c)-$arch
        "$compiler" -std=c99 -O2 -Wall -Werror -I "$ROOT/libcism/include" -o "$exe" "$prog" \
            -L "$dir" -lcism -Wl,-rpath,"$dir" || return 1
    done
    case $arch in
    aarch64) run="qemu-aarch64 -L /usr/aarch64-linux-gnu" ;;
    *) run="" ;;
    esac
    LD_DEBUG=libs $run "$OUT/wheel_tier-$arch" 2>&1 >/dev/null | grep "calling init: $dir/libcism.so" ||
        { echo "wheel_tier-$arch did not load $dir/libcism.so"; return 1; }
}

models_ready() {
    for model in $MODELS; do
        [ -f "$OUT/$model.cism" ] || { echo "no $OUT/$model.cism (the x86_64-venv check converts it)"; return 1; }
    done
}

x86_64_c() {
    models_ready && link_wheel x86_64 cc || return 1
    # natively (this CPU's best tier), then the AVX2 and scalar tiers under
    # qemu-x86_64, which emulates AVX2 but not AVX-512
    native=$("$OUT/wheel_tier-x86_64" | sed -n 's/.*kernel tier: \([a-z0-9_]*\).*/\1/p')
    echo "native kernel tier: $native"
    compare_runs "x86-64 wheel, native $native" "$REF_GENERATE" "$OUT/generate-x86_64" || return 1
    # qemu older than 10.0 (Debian 12's 7.2) computes some AVX2 gathers wrongly (tests/c/CMakeLists.txt)
    qv=$(qemu-x86_64 --version | sed -n 's/.*version \([0-9]*\)\..*/\1/p' | head -n 1)
    [ "${qv:-0}" -ge 10 ] ||
        { echo "qemu-x86_64 is version ${qv:-unknown}, older than 10.0 (Debian 12: apt-get install -t bookworm-backports qemu-user)"; return 1; }
    for cpu_tier in Haswell-v4:avx2 Nehalem:scalar; do
        cpu=${cpu_tier%%:*}
        tier_is "${cpu_tier#*:}" qemu-x86_64 -cpu "$cpu" "$OUT/wheel_tier-x86_64" &&
            compare_runs "x86-64 wheel, qemu cpu $cpu" "$REF_GENERATE" "$OUT/generate-x86_64" qemu-x86_64 -cpu "$cpu" || return 1
    done
}

aarch64_qemu() {
    models_ready && link_wheel aarch64 aarch64-linux-gnu-gcc || return 1
    [ -x "$REF_GENERATE_A64" ] || { echo "no $REF_GENERATE_A64 (the ARM64 cross build of tests/run_all.sh)"; return 1; }
    # the three ARM64 tiers: i8mm (max), dotprod (neoverse-n1), plain NEON (cortex-a53)
    for cpu_tier in max:neon_i8mm neoverse-n1:neon_dotprod cortex-a53:neon; do
        cpu=${cpu_tier%%:*}
        q="qemu-aarch64 -cpu $cpu -L /usr/aarch64-linux-gnu"
        tier_is "${cpu_tier#*:}" $q "$OUT/wheel_tier-aarch64" &&
            compare_runs "aarch64 wheel, qemu cpu $cpu" "$REF_GENERATE_A64" "$OUT/generate-aarch64" $q || return 1
    done
}

# an aarch64 Python (Debian's python3.11:arm64 and the libraries it loads, unpacked,
# not installed) under qemu-aarch64, with the aarch64 wheel and its dependencies
# (numpy, tokenizers, ... for aarch64 from PyPI) installed into a folder by this
# machine's pip: wheel_smoke.py there == the normal build, on each ARM64 tier
A64_PY_DEBS="python3.11-minimal libpython3.11-minimal libpython3.11-stdlib libffi8 zlib1g libexpat1 libc6 libgcc-s1 libstdc++6"
aarch64_python() {
    models_ready || return 1
    whl=$(wheel_of aarch64) || return 1
    py=$OUT/aarch64-python
    rm -rf "$py" && mkdir -p "$py/debs" "$py/root" || return 1
    debs=""
    for p in $A64_PY_DEBS; do debs="$debs $p:arm64"; done
    (cd "$py/debs" && apt-get download -q $debs 2>&1) ||
        { echo "apt-get download failed: is the arm64 architecture configured (dpkg --add-architecture arm64 && apt-get update, as .ci/run does)?"; return 1; }
    for deb in "$py"/debs/*.deb; do dpkg-deb -x "$deb" "$py/root" || return 1; done
    "$VENV/bin/python" -m pip install -q --disable-pip-version-check --target "$py/site" --only-binary=:all: \
        --platform manylinux_2_17_aarch64 --platform manylinux2014_aarch64 --platform manylinux_2_28_aarch64 \
        --python-version 3.11 --implementation cp "$whl" || return 1
    for cpu_tier in max:neon_i8mm neoverse-n1:neon_dotprod cortex-a53:neon; do
        cpu=${cpu_tier%%:*}
        for model in stories260K stories260K-4bit; do
            "$REF_GENERATE" "$OUT/$model.cism" 48 0 0 >"$OUT/tokens-ref.txt" 2>/dev/null || return 1
            rm -f "$OUT/tokens-run.txt"
            (cd "$OUT" && env -u CISM_LIB QEMU_CPU="$cpu" QEMU_LD_PREFIX="$py/root" PYTHONPATH="$py/site" \
                qemu-aarch64 "$py/root/usr/bin/python3.11" -s "$ROOT/tests/platforms/wheel_smoke.py" \
                "$OUT/$model.cism" 48 "$OUT/tokens-run.txt" "$py/site") >"$OUT/aarch64-python-run.txt" 2>&1
            rc=$?
            cat "$OUT/aarch64-python-run.txt"
            [ $rc -eq 0 ] || return 1
            grep -q "kernel tier: ${cpu_tier#*:} " "$OUT/aarch64-python-run.txt" ||
                { echo "cpu $cpu: not the ${cpu_tier#*:} tier"; return 1; }
            if ! cmp -s "$OUT/tokens-ref.txt" "$OUT/tokens-run.txt"; then
                echo "$model, aarch64 Python, qemu cpu $cpu: differs from the normal build"
                cat "$OUT/tokens-ref.txt" "$OUT/tokens-run.txt"
                return 1
            fi
            echo "$model, aarch64 Python, qemu cpu $cpu: same $(wc -w <"$OUT/tokens-ref.txt") greedy tokens"
        done
    done
}

# ---- run ---------------------------------------------------------------------------------
echo "== manylinux wheels (logs in $OUT)"
if [ ! -x "$REF_GENERATE" ] || [ ! -x "$VENV/bin/python" ]; then
    echo "run tests/run_all.sh first: it builds $BUILD/release and $VENV"
    exit 1
fi
for tool in cc cmake qemu-aarch64 aarch64-linux-gnu-gcc llvm-readelf llvm-objdump llvm-nm; do
    command -v $tool >/dev/null 2>&1 || { echo "missing tool: $tool (see the header of $0)"; exit 1; }
done

check build build
check contents-x86_64 contents x86_64
check contents-aarch64 contents aarch64
check x86_64-venv x86_64_venv
check x86_64-c x86_64_c
check aarch64-qemu aarch64_qemu
if dpkg --print-foreign-architectures 2>/dev/null | grep -qx arm64 || [ "${CISM_REQUIRE_CROSS:-0}" = 1 ]; then
    check aarch64-python aarch64_python
elif selected aarch64-python; then
    echo "SKIP aarch64-python: no arm64 architecture in dpkg (dpkg --add-architecture arm64 && apt-get update)"
fi
echo "wheels: $PASSED passed, $FAILED failed"
[ $FAILED -eq 0 ] || { echo "failed:$FAILED_NAMES"; exit 1; }
