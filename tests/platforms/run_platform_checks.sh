#!/bin/sh
# Everything about other platforms that can be proven on a Linux x86-64 box
# (issue 6). Called by .ci/run after tests/run_all.sh, whose release build,
# test fixtures and Python venv it reuses. .ci/run installs the tools:
#   apt: gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user
#        gcc-mingw-w64-x86-64-posix clang lld llvm openjdk-17-jdk-headless junit4 kotlin
#   pip (in $CISM_PLATFORM_VENV): ziglang tree-sitter tree-sitter-swift tree-sitter-kotlin
#
# Checks (each prints PASS/FAIL with its time; the last line counts them):
#   arm64-exports      the ARM64 build of tests/run_all.sh (its C tests ran under qemu there)
#                      exports exactly the functions of cism.h
#   arm64-tokens       stories260K generation under qemu (NEON tiers) == on x86-64 (greedy and sampled)
#   macos-*            zig: libcism.dylib + tests link for aarch64/x86_64-macos; exports == cism.h
#   windows-mingw      mingw-w64: libcism.dll + tests link; DLL exports == cism.h
#   windows-zig        zig (clang) compiles every TU for x86_64-windows-gnu, windows-arm64-zig
#                      for aarch64-windows-gnu (both link too with CISM_ZIG_WINDOWS_LINK=1: zig
#                      first builds a mingw CRT per target, 1.5-4 min each)
#   android-*, ios-*   every TU compiles for the Android and iOS triples (no SDK: no link)
#   ios-modulemap      the CCism module map imports cism.h (host, iOS device, iOS simulator)
#   jni-build          Java API compiles for Java 8 bytecode; JNI glue builds against javac -h headers
#   jvm-tests          JUnit tests on the host JVM under -Xcheck:jni (tokens == Python API, leaks, cancel)
#   kotlin-interop     Kotlin (kotlinc 1.3) using the API compiles and runs
#   memory-presets     real model shapes (sparse files): session estimate == allocation, weights not copied
#   syntax             Swift and Kotlin sources parse (tree-sitter); scripts parse (sh -n)
# Usage: tests/platforms/run_platform_checks.sh [check-name-substring...]
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${CISM_BUILD_DIR:-$ROOT/build}
JOBS=${CISM_JOBS:-2}
VENV=${CISM_TEST_VENV:-$BUILD/venv}
PLAT=${CISM_PLATFORM_VENV:-$BUILD/venv-platforms}
OUT=$BUILD/platforms
export ZIG_GLOBAL_CACHE_DIR=${ZIG_GLOBAL_CACHE_DIR:-$BUILD/zig-cache}
FIXTURES=$BUILD/release/tests/c/fixtures
SHARED=${CISM_SHARED_DIR:-$ROOT/../shared}
# cross builds treat warnings as errors: a warning on another platform is a portability bug
WERROR=-DCMAKE_C_FLAGS=-Werror
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

# check NAME FUNCTION: runs it with its output in $OUT/NAME.log
check() {
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

# ---- helpers ---------------------------------------------------------------------
api_names() { # every CISM_API function of cism.h, sorted
    "$VENV/bin/python" - "$ROOT/libcism/include/cism.h" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
print("\n".join(sorted(set(re.findall(r"CISM_API\s[^;]*?\b(cism_\w+)\s*\(", text)))))
PY
}

# same_exports FILE KIND: the library exports exactly the API (ELF/Mach-O via nm, PE via its export table)
same_exports() {
    api_names >"$OUT/api.txt"
    case $2 in
    pe) llvm-objdump -p "$1" | awk '/Export Table/ {on=1} on && $3 ~ /^cism_/ {print $3}' | sort -u >"$OUT/exports.txt" ;;
    macho) llvm-nm -gU "$1" | awk '$3 ~ /^_cism_/ {print substr($3, 2)}' | sort -u >"$OUT/exports.txt" ;;
    *) llvm-nm -D --defined-only "$1" | awk '$3 ~ /^cism_/ {print $3}' | sort -u >"$OUT/exports.txt" ;;
    esac
    echo "$(wc -l <"$OUT/api.txt") functions in cism.h, $(wc -l <"$OUT/exports.txt") exported by $1"
    if ! diff "$OUT/api.txt" "$OUT/exports.txt"; then
        echo "exports differ from cism.h (< only in cism.h, > only exported)"
        return 1
    fi
    # nothing internal leaks out (a PE export table was compared whole above)
    case $2 in
    macho) syms=$(llvm-nm -gU "$1") ;;
    elf) syms=$(llvm-nm -D --defined-only "$1") ;;
    *) syms="" ;;
    esac
    if echo "$syms" | grep -q " _*cism__"; then
        echo "internal cism__ symbols are exported"
        return 1
    fi
}

zig_build() { # zig_build TARGET [cmake args...]: configure and build in $BUILD/zig-TARGET
    t=$1
    shift
    cmake -S "$ROOT" -B "$BUILD/zig-$t" -DCMAKE_TOOLCHAIN_FILE="$ROOT/cmake/zig.cmake" -DCISM_ZIG_TARGET="$t" \
        -DCMAKE_BUILD_TYPE=Release $WERROR -DPython3_EXECUTABLE="$PLAT/bin/python" "$@" &&
        cmake --build "$BUILD/zig-$t" -j "$JOBS"
}

# ---- ARM64 Linux under qemu ---------------------------------------------------------
# tests/run_all.sh builds $BUILD/a64 and runs the whole C suite under qemu-aarch64
# (every kernel tier); what is added here: the shared library's exports, and
# the same stories260K tokens as the x86-64 build.
A64=$BUILD/a64

arm64_exports() {
    [ -f "$A64/libcism/libcism.so" ] || { echo "no $A64: tests/run_all.sh builds it (with the ARM64 cross tools)"; return 1; }
    same_exports "$A64/libcism/libcism.so" elf
}

arm64_tokens() {
    model=$FIXTURES/stories260K.cism
    x86=$BUILD/release/examples/c/generate
    arm=$A64/examples/c/generate
    for run in "64 0 0" "64 0.8 42" "48 1.0 7"; do
        set -- $run
        "$x86" "$model" "$1" "$2" "$3" >"$OUT/tokens-x86.txt" 2>/dev/null || return 1
        for cpu in max cortex-a53; do
            QEMU_CPU=$cpu qemu-aarch64 -L /usr/aarch64-linux-gnu "$arm" "$model" "$1" "$2" "$3" \
                >"$OUT/tokens-arm64.txt" 2>/dev/null || return 1
            if ! cmp -s "$OUT/tokens-x86.txt" "$OUT/tokens-arm64.txt"; then
                echo "n=$1 temperature=$2 seed=$3 cpu=$cpu: ARM64 and x86-64 differ"
                cat "$OUT/tokens-x86.txt" "$OUT/tokens-arm64.txt"
                return 1
            fi
            echo "n=$1 temperature=$2 seed=$3 cpu=$cpu: same $(wc -w <"$OUT/tokens-x86.txt") tokens: $(head -c 60 "$OUT/tokens-x86.txt")..."
        done
    done
}

# ---- macOS / Windows: link ------------------------------------------------------------
macos() { # macos aarch64|x86_64
    zig_build "$1-macos" || return 1
    lib=$BUILD/zig-$1-macos/libcism/libcism.dylib
    want=$([ "$1" = aarch64 ] && echo ARM64 || echo X86_64)
    llvm-objdump --macho --private-header "$lib" | tee "$OUT/hdr-$1.txt"
    grep -Eq "MH_MAGIC_64 +$want .* DYLIB " "$OUT/hdr-$1.txt" || { echo "not a $want dylib"; return 1; }
    for t in test_dtype test_kernels test_loader test_sampler test_stories test_memory; do
        [ -f "$BUILD/zig-$1-macos/tests/c/$t" ] || { echo "missing $t"; return 1; }
    done
    same_exports "$lib" macho
}

windows_mingw() {
    cmake -S "$ROOT" -B "$BUILD/mingw" -DCMAKE_TOOLCHAIN_FILE="$ROOT/cmake/mingw-w64-x86_64.cmake" \
        -DCMAKE_BUILD_TYPE=Release $WERROR -DPython3_EXECUTABLE="$VENV/bin/python" &&
        cmake --build "$BUILD/mingw" -j "$JOBS" || return 1
    dll=$BUILD/mingw/libcism/libcism.dll
    llvm-objdump -p "$dll" | grep -q "DLL Name: KERNEL32.dll" || return 1
    llvm-readobj --file-headers "$dll" | grep -q "IMAGE_FILE_MACHINE_AMD64" || return 1
    for t in test_dtype test_kernels test_loader test_sampler test_stories test_memory; do
        [ -f "$BUILD/mingw/tests/c/$t.exe" ] || { echo "missing $t.exe"; return 1; }
    done
    same_exports "$dll" pe
}

windows_zig() { # windows_zig ZIG_TARGET
    t=$1
    if [ "${CISM_ZIG_WINDOWS_LINK:-0}" = 1 ]; then
        zig_build $t && same_exports "$BUILD/zig-$t/libcism/libcism.dll" pe
        return
    fi
    # compile only (cmake/zig.cmake then links nothing, not even CMake's test programs)
    cmake -S "$ROOT" -B "$BUILD/zig-$t" -DCMAKE_TOOLCHAIN_FILE="$ROOT/cmake/zig.cmake" -DCISM_ZIG_TARGET=$t \
        -DCMAKE_BUILD_TYPE=Release $WERROR -DCISM_ZIG_COMPILE_ONLY=ON \
        -DCISM_BUILD_TESTS=OFF -DCISM_BUILD_EXAMPLES=OFF -DPython3_EXECUTABLE="$PLAT/bin/python" &&
        cmake --build "$BUILD/zig-$t" -j "$JOBS" --target cism_static || return 1
    llvm-nm "$BUILD/zig-$t/libcism/libcism_static.a" | grep " T cism_model_load"
}

# ---- Android / iOS: compile only -----------------------------------------------------
mobile() { # mobile ZIG_TARGET EXPECT (ELF machine or Mach-O platform)
    t=$1
    cmake -S "$ROOT" -B "$BUILD/zig-$t" -DCMAKE_TOOLCHAIN_FILE="$ROOT/cmake/zig.cmake" -DCISM_ZIG_TARGET="$t" \
        -DCMAKE_BUILD_TYPE=Release $WERROR -DCISM_BUILD_TESTS=OFF -DCISM_BUILD_EXAMPLES=OFF \
        -DPython3_EXECUTABLE="$PLAT/bin/python" &&
        cmake --build "$BUILD/zig-$t" -j "$JOBS" --target cism_static || return 1
    lib=$BUILD/zig-$t/libcism/libcism.a
    n=$(llvm-ar t "$lib" | wc -l)
    echo "$n objects in $lib"
    [ "$n" -ge 16 ] || return 1
    case $t in
    *android*) llvm-readelf -h "$lib" | grep "Machine:" | sort | uniq -c | tee "$OUT/m.txt" && grep -q "$2" "$OUT/m.txt" &&
        ! grep -v "$2" "$OUT/m.txt" | grep -q Machine ;;
    *) llvm-objdump --macho --private-headers "$lib" | grep -E "^ *platform " | sort | uniq -c | tee "$OUT/m.txt" &&
        grep -q "platform $2\$" "$OUT/m.txt" && [ "$(wc -l <"$OUT/m.txt")" -eq 1 ] ;;
    esac
}

ios_modulemap() {
    d=$OUT/modulemap
    rm -rf "$d" && mkdir -p "$d/headers"
    cp "$ROOT/libcism/include/cism.h" "$ROOT/ios/CCism/module.modulemap" "$d/headers/"
    cat >"$d/use.m" <<'EOF'
@import CCism;
int probe(void) {
    cism_model *m = 0;
    int64_t v = 0;
    return cism_model_get_info(m, CISM_INFO_VOCAB_SIZE, &v) + (int)cism_default_n_threads();
}
EOF
    clang -fmodules -fmodules-cache-path="$d/cache" -fsyntax-only -Wall -Werror -I "$d/headers" "$d/use.m" || return 1
    for t in arm64-apple-ios15.0 arm64-apple-ios15.0-simulator x86_64-apple-ios15.0-simulator arm64-apple-macos12.0; do
        clang -target $t -ffreestanding -nostdlibinc -fmodules -fmodules-cache-path="$d/cache-$t" -fsyntax-only \
            -Wall -Werror -I "$d/headers" "$d/use.m" || return 1
        echo "$t: import CCism ok"
    done
}

# ---- JVM -------------------------------------------------------------------------------
JVM=$BUILD/jvm
JUNIT_CP=/usr/share/java/junit4.jar:/usr/share/java/hamcrest-core.jar

jni_build() {
    rm -rf "$JVM" && mkdir -p "$JVM/classes" "$JVM/test-classes" || return 1
    # Java 8 bytecode, as the Android toolchain consumes it
    javac --release 8 -Xlint:all -Werror -d "$JVM/classes" -h "$JVM/headers" \
        "$ROOT"/android/cism/src/main/java/org/libcism/*.java || return 1
    javac --release 8 -Xlint:all -cp "$JVM/classes:$JUNIT_CP" -d "$JVM/test-classes" \
        "$ROOT"/android/cism/src/hostTest/java/org/libcism/*.java || return 1
    # the same CMakeLists.txt the NDK build uses; javac's headers force-included
    cmake -S "$ROOT/android/cism/src/main/cpp" -B "$JVM/native" -DCMAKE_BUILD_TYPE=Release $WERROR \
        -DCISM_JNI_COUNT_ALLOCATIONS=ON -DCISM_JNI_JAVAC_HEADERS="$JVM/headers" &&
        cmake --build "$JVM/native" -j "$JOBS" || return 1
    # every native method declared in Java is implemented, and only those are exported
    grep -ho "Java_org_libcism_[A-Za-z_0-9]*" "$JVM"/headers/*.h | sort -u >"$OUT/jni-declared.txt"
    llvm-nm -D --defined-only "$JVM/native/libcism_jni.so" | awk '{print $3}' | grep "^Java_org_libcism_" |
        grep -v HostTestHooks | sort -u >"$OUT/jni-defined.txt"
    diff "$OUT/jni-declared.txt" "$OUT/jni-defined.txt" || { echo "JNI natives differ (< declared only, > defined only)"; return 1; }
    echo "$(wc -l <"$OUT/jni-declared.txt") native methods, all implemented"
    [ "$(llvm-nm -D --defined-only "$JVM/native/libcism_jni.so" | awk '{print $3}' | grep -cv '^Java_\|^JNI_OnLoad$')" -eq 0 ]
}

python_tokens() {
    "$VENV/bin/python" "$ROOT/tests/platforms/python_tokens.py" "$FIXTURES" "$SHARED/models" "$OUT/expected"
}

jvm_tests() {
    python_tokens || return 1
    java -Xcheck:jni -Djava.library.path="$JVM/native" -Dcism.fixtures="$FIXTURES" -Dcism.expected="$OUT/expected" \
        -cp "$JVM/classes:$JVM/test-classes:$JUNIT_CP" org.libcism.HostTestMain >"$OUT/jvm-output.txt" 2>&1
    rc=$?
    cat "$OUT/jvm-output.txt"
    [ $rc -eq 0 ] || return 1
    # -Xcheck:jni reports misuse as warnings and keeps going: any is a failure
    if grep -E "WARNING in native method|FATAL ERROR in native method|JNI warning" "$OUT/jvm-output.txt"; then
        return 1
    fi
}

kotlin_interop() {
    kotlinc -jvm-target 1.8 "$ROOT/android/cism/src/hostTest/kotlin/org/libcism/KotlinInterop.kt" \
        -cp "$JVM/classes:/usr/share/java/kotlin-stdlib-jdk7.jar" -d "$JVM/kotlin-classes" 2>&1 |
        grep -v "warning: -Xverify\|^OpenJDK 64-Bit Server VM warning" || true
    [ -f "$JVM/kotlin-classes/org/libcism/KotlinInteropKt.class" ] || return 1
    kotlin -J-Xcheck:jni -Djava.library.path="$JVM/native" \
        -cp "$JVM/classes:$JVM/kotlin-classes:/usr/share/java/kotlin-stdlib-jdk7.jar" org.libcism.KotlinInteropKt \
        "$FIXTURES/stories260K.cism" "$FIXTURES/stories260K.tokens8.i32" "$OUT/expected/greedy.txt"
}

memory_presets() {
    "$VENV/bin/python" "$ROOT/tests/platforms/memory_table.py" "$BUILD/release/libcism/libcism.so" "$OUT/memory" --check
}

syntax() {
    "$PLAT/bin/python" "$ROOT/tests/platforms/check_syntax.py" "$ROOT" || return 1
    sh -n "$ROOT/ios/scripts/build-xcframework.sh" && sh -n "$0" && echo "shell scripts: ok"
}

# ---- run ---------------------------------------------------------------------------------
echo "== platform checks (logs in $OUT)"
if [ ! -f "$FIXTURES/stories260K.cism" ] || [ ! -x "$BUILD/release/examples/c/generate" ]; then
    echo "run tests/run_all.sh first: it builds $BUILD/release and the test fixtures"
    exit 1
fi
for tool in cmake qemu-aarch64 aarch64-linux-gnu-gcc x86_64-w64-mingw32-gcc-posix clang llvm-nm llvm-objdump javac kotlinc; do
    command -v $tool >/dev/null 2>&1 || { echo "missing tool: $tool (see the header of $0)"; exit 1; }
done
"$PLAT/bin/python" -c "import ziglang, tree_sitter_swift, tree_sitter_kotlin" 2>/dev/null ||
    { echo "missing $PLAT with ziglang and tree-sitter grammars (see the header of $0)"; exit 1; }

check arm64-exports arm64_exports
check arm64-tokens arm64_tokens
check macos-aarch64 macos aarch64
check macos-x86_64 macos x86_64
check windows-mingw windows_mingw
check windows-zig windows_zig x86_64-windows-gnu
check windows-arm64-zig windows_zig aarch64-windows-gnu
check android-aarch64 mobile aarch64-linux-android AArch64
check android-x86_64 mobile x86_64-linux-android X86-64
check ios-device mobile aarch64-ios.15.0 ios
check ios-simulator mobile aarch64-ios.15.0-simulator iossimulator
check ios-modulemap ios_modulemap
check jni-build jni_build
check jvm-tests jvm_tests
check kotlin-interop kotlin_interop
check memory-presets memory_presets
check syntax syntax
echo "platforms: $PASSED passed, $FAILED failed"
[ $FAILED -eq 0 ] || { echo "failed:$FAILED_NAMES"; exit 1; }
