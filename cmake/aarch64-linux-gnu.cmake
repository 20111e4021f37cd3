# Cross build for ARM64 Linux with the Debian cross gcc; tests run under
# qemu-user. QEMU_CPU in the environment picks the emulated CPU per ctest run
# (max, neoverse-n1, cortex-a53, ...), so one build tests every kernel tier:
#   cmake -S . -B build/a64 -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake
#   cmake --build build/a64 -j2 && (cd build/a64 && QEMU_CPU=neoverse-n1 ctest)
# Needs: gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user (apt).
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_FIND_ROOT_PATH /usr/aarch64-linux-gnu)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)
set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64;-L;/usr/aarch64-linux-gnu CACHE STRING "" FORCE)
