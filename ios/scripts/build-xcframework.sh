#!/bin/sh
# Builds ios/build/CCism.xcframework: libcism as a static library for
#   iOS device (arm64), iOS simulator (arm64 + x86_64) and macOS (arm64 + x86_64),
# each slice with cism.h and the CCism module map, so Swift can `import CCism`.
# Needs macOS with Xcode (xcodebuild, lipo) and CMake >= 3.22.
#   ios/scripts/build-xcframework.sh            # Release
#   CISM_IOS_MIN=15.0 CISM_MACOS_MIN=12.0 ios/scripts/build-xcframework.sh
set -eu
HERE=$(cd "$(dirname "$0")/.." && pwd)
ROOT=$(cd "$HERE/.." && pwd)
OUT="$HERE/build"
WORK="$OUT/xcframework-work"
IOS_MIN=${CISM_IOS_MIN:-15.0}
MACOS_MIN=${CISM_MACOS_MIN:-12.0}
JOBS=${CISM_JOBS:-$(sysctl -n hw.ncpu 2>/dev/null || echo 2)}

rm -rf "$WORK" "$OUT/CCism.xcframework"
mkdir -p "$WORK/headers"
cp "$ROOT/libcism/include/cism.h" "$HERE/CCism/module.modulemap" "$WORK/headers/"

# build NAME SYSTEM SYSROOT ARCH MIN: libcism.a for one platform and one
# architecture. One architecture per CMake tree, so the per-ISA kernel files
# are chosen by CMAKE_SYSTEM_PROCESSOR exactly as on other platforms.
build() {
    name=$1 system=$2 sysroot=$3 arch=$4 min=$5
    cmake -S "$ROOT" -B "$WORK/$name-$arch" -G "Unix Makefiles" \
        -DCMAKE_SYSTEM_NAME="$system" \
        -DCMAKE_SYSTEM_PROCESSOR="$arch" \
        -DCMAKE_OSX_SYSROOT="$sysroot" \
        -DCMAKE_OSX_ARCHITECTURES="$arch" \
        -DCMAKE_OSX_DEPLOYMENT_TARGET="$min" \
        -DCMAKE_BUILD_TYPE=Release \
        -DCISM_BUILD_TESTS=OFF -DCISM_BUILD_EXAMPLES=OFF
    cmake --build "$WORK/$name-$arch" --target cism_static -j "$JOBS"
}

# merge NAME ARCH...: one fat archive per platform
merge() {
    name=$1
    shift
    mkdir -p "$WORK/$name"
    set --
    for arch in $ARCHS; do set -- "$@" "$WORK/$name-$arch/libcism/libcism.a"; done
    lipo -create "$@" -output "$WORK/$name/libcism.a"
    lipo -info "$WORK/$name/libcism.a"
}

build ios-device iOS iphoneos arm64 "$IOS_MIN"
ARCHS="arm64" merge ios-device
for arch in arm64 x86_64; do build ios-simulator iOS iphonesimulator $arch "$IOS_MIN"; done
ARCHS="arm64 x86_64" merge ios-simulator
for arch in arm64 x86_64; do build macos Darwin macosx $arch "$MACOS_MIN"; done
ARCHS="arm64 x86_64" merge macos

xcodebuild -create-xcframework \
    -library "$WORK/ios-device/libcism.a" -headers "$WORK/headers" \
    -library "$WORK/ios-simulator/libcism.a" -headers "$WORK/headers" \
    -library "$WORK/macos/libcism.a" -headers "$WORK/headers" \
    -output "$OUT/CCism.xcframework"
echo "built $OUT/CCism.xcframework"
