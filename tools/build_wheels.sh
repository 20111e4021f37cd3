#!/bin/sh
# Builds the manylinux wheels of the `cism` Python package (docs/WHEELS.md):
# libcism cross-compiled by zig cc against glibc 2.17 for x86-64 and aarch64,
# each wheel checked and retagged by auditwheel.
#
#   tools/build_wheels.sh [OUT_DIR]        (default: build/wheels)
#
# Leaves OUT_DIR/cism-<version>-py3-none-manylinux_2_17_<arch>.manylinux2014_<arch>.whl
# and OUT_DIR/auditwheel-<arch>.txt (the `auditwheel show` report), and fails
# unless auditwheel reports manylinux_<glibc>_<arch> for each wheel. The CMake
# build folders (OUT_DIR/build-<arch>) are kept, so a second run recompiles
# only what changed.
#
# Needs cmake, and:
#   PYTHON      a Python >= 3.9 with pip (default python3); pip fetches the
#               build backend (scikit-build-core) from PyPI
#   ZIG         the zig executable (0.17); default: the `ziglang` package of
#               $CISM_PLATFORM_VENV (build/venv-platforms), else of $PYTHON
#   AUDITWHEEL  the auditwheel command; default: `auditwheel` beside $ZIG's
#               Python, else on PATH (pip install auditwheel==6.8.2)
#   CISM_WHEEL_ARCHS  default "x86_64 aarch64"
#   CISM_WHEEL_GLIBC  the oldest glibc the wheels run on (default 2.17)
#   CISM_JOBS         parallel compile jobs (default 2)
set -eu
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${CISM_BUILD_DIR:-$ROOT/build}
OUT=${1:-$BUILD/wheels}
PY=${PYTHON:-python3}
ARCHS=${CISM_WHEEL_ARCHS:-x86_64 aarch64}
GLIBC=${CISM_WHEEL_GLIBC:-2.17}
JOBS=${CISM_JOBS:-2}
PLAT=${CISM_PLATFORM_VENV:-$BUILD/venv-platforms}
export ZIG_GLOBAL_CACHE_DIR=${ZIG_GLOBAL_CACHE_DIR:-$BUILD/zig-cache}

die() {
    echo "build_wheels: $*" >&2
    exit 1
}

case $GLIBC in
2.[0-9]*) ;;
*) die "CISM_WHEEL_GLIBC=$GLIBC is not a glibc version such as 2.17" ;;
esac

zig_of() { # zig_of PYTHON: the zig of that Python's ziglang package, if any
    [ -x "$1" ] || command -v "$1" >/dev/null 2>&1 || return 1
    "$1" -c "import os, ziglang; print(os.path.join(os.path.dirname(ziglang.__file__), 'zig'))" 2>/dev/null
}
if [ -z "${ZIG:-}" ]; then
    ZIG=$(zig_of "$PLAT/bin/python") || ZIG=$(zig_of "$PY") ||
        die "no zig: set ZIG, or pip install 'ziglang>=0.17,<0.18' into $PLAT or for $PY"
fi
[ -x "$ZIG" ] || die "ZIG=$ZIG is not an executable"
zig_version=$("$ZIG" version) || die "$ZIG does not run"
case $zig_version in
0.17.*) ;;
*) echo "build_wheels: warning: zig $zig_version; this script was tested with 0.17" >&2 ;;
esac
if [ -z "${AUDITWHEEL:-}" ]; then
    if [ -x "$(dirname "$(dirname "$(dirname "$(dirname "$(dirname "$ZIG")")")")")/bin/auditwheel" ]; then
        # $ZIG is <venv>/lib/pythonX.Y/site-packages/ziglang/zig
        AUDITWHEEL=$(dirname "$(dirname "$(dirname "$(dirname "$(dirname "$ZIG")")")")")/bin/auditwheel
    elif command -v auditwheel >/dev/null 2>&1; then
        AUDITWHEEL=auditwheel
    else
        die "no auditwheel: set AUDITWHEEL, or pip install auditwheel==6.8.2 beside ziglang"
    fi
fi
"$PY" -m pip --version >/dev/null 2>&1 || die "$PY has no pip"
command -v cmake >/dev/null 2>&1 || die "cmake is missing"

mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
echo "== wheels into $OUT (zig $zig_version, glibc $GLIBC, $("$AUDITWHEEL" --version 2>&1 | awk 'NR == 1 {print $1, $2}'))"
for arch in $ARCHS; do
    case $arch in
    x86_64 | aarch64) ;;
    *) die "unsupported architecture '$arch' (x86_64, aarch64)" ;;
    esac
    t0=$(date +%s)
    raw=$OUT/raw-$arch
    rm -rf "$raw"
    rm -f "$OUT"/cism-*-"$arch".whl "$OUT"/cism-*_"$arch".whl
    # -z defs: a libc function that glibc $GLIBC lacks fails the link instead
    # of leaving an undefined symbol that fails only when the wheel is loaded.
    # The raw wheel is tagged linux_<arch>; auditwheel repair checks it and
    # gives it the manylinux tag.
    if ! _PYTHON_HOST_PLATFORM=linux-$arch CMAKE_BUILD_PARALLEL_LEVEL=$JOBS \
        "$PY" -m pip wheel --no-deps --disable-pip-version-check -q -w "$raw" \
        -C build-dir="$OUT/build-$arch" \
        -C cmake.define.CMAKE_TOOLCHAIN_FILE="$ROOT/cmake/zig.cmake" \
        -C cmake.define.CISM_ZIG_TARGET="$arch-linux-gnu.$GLIBC" \
        -C cmake.define.CISM_ZIG_EXE="$ZIG" \
        -C cmake.define.CMAKE_SHARED_LINKER_FLAGS="-Wl,-z,defs" \
        "$ROOT/bindings_py" >"$OUT/build-$arch.log" 2>&1; then
        tail -n 40 "$OUT/build-$arch.log" >&2
        die "$arch: the wheel build failed (whole log: $OUT/build-$arch.log)"
    fi
    set -- "$raw"/cism-*-linux_"$arch".whl
    [ $# -eq 1 ] && [ -f "$1" ] || die "$arch: expected one linux_$arch wheel in $raw, found: $(ls "$raw")"
    # --plat auto: the most compatible manylinux tag the symbol versions allow
    # (auditwheel offers explicit tags for the build machine's architecture
    # only); --patcher none: the library needs only libc, libm and
    # libpthread, so nothing is grafted into the wheel, and anything that
    # would need grafting fails here
    "$AUDITWHEEL" repair --patcher none --plat auto -w "$OUT" "$1" >"$OUT/repair-$arch.log" 2>&1 ||
        { cat "$OUT/repair-$arch.log" >&2; die "$arch: auditwheel repair failed"; }
    set -- "$OUT"/cism-*manylinux_2_*_"$arch".whl
    [ $# -eq 1 ] && [ -f "$1" ] || die "$arch: auditwheel repair left no manylinux_2_*_$arch wheel in $OUT"
    whl=$1
    "$AUDITWHEEL" show "$whl" >"$OUT/auditwheel-$arch.txt" 2>&1 ||
        { cat "$OUT/auditwheel-$arch.txt" >&2; die "$arch: auditwheel show failed"; }
    # auditwheel names the most compatible tag the wheel is consistent with:
    # it must be manylinux_2_<minor>_<arch> with minor <= that of $GLIBC
    tag=$(tr '\n' ' ' <"$OUT/auditwheel-$arch.txt" |
        sed -n 's/.*consistent with the following *platform tag: *"\([^"]*\)".*/\1/p')
    minor=$(echo "$tag" | sed -n "s/^manylinux_2_\([0-9][0-9]*\)_$arch\$/\1/p")
    if [ -z "$minor" ] || [ "$minor" -gt "${GLIBC#2.}" ]; then
        cat "$OUT/auditwheel-$arch.txt" >&2
        die "$arch: auditwheel show reports '${tag:-no tag}', not manylinux_2_<=${GLIBC#2.}_$arch"
    fi
    case $(basename "$whl") in
    *"$tag"*) ;;
    *) die "$arch: $(basename "$whl") is not tagged $tag, which auditwheel show reports" ;;
    esac
    rm -rf "$raw"
    echo "$arch: $(basename "$whl") ($(($(date +%s) - t0)) s; auditwheel show: $tag)"
done
