# Cross build with zig cc (pip install ziglang): one toolchain file for every
# target zig knows, chosen with -DCISM_ZIG_TARGET=<zig triple>:
#   aarch64-macos, x86_64-macos, x86_64-windows-gnu, aarch64-windows-gnu:
#       zig ships their libc (libSystem stubs, mingw-w64 CRT): full builds link.
#   aarch64-linux-android, x86_64-linux-android, aarch64-ios.15.0,
#   aarch64-ios.15.0-simulator, x86_64-ios.15.0-simulator (and any target
#   with -DCISM_ZIG_COMPILE_ONLY=ON):
#       compile-only. zig has no bionic or iOS SDK, so the libc headers of a
#       sibling platform stand in (musl for Android, zig's macOS headers for
#       iOS) and nothing is linked: build the cism_objects / cism_static targets.
#   cmake -S . -B build/zig-aarch64-macos -DCMAKE_TOOLCHAIN_FILE=cmake/zig.cmake -DCISM_ZIG_TARGET=aarch64-macos
# The zig executable: $ZIG, else `python3 -m ziglang` (the PyPI package).
# zig's first build for a target compiles that libc into ZIG_GLOBAL_CACHE_DIR
# (mingw CRT: about 90 s).
set(CISM_ZIG_TARGET "" CACHE STRING "zig target triple (aarch64-macos, x86_64-windows-gnu, ...)")
if(NOT CISM_ZIG_TARGET)
    message(FATAL_ERROR "cmake/zig.cmake: set -DCISM_ZIG_TARGET=<triple>, e.g. aarch64-macos")
endif()
list(APPEND CMAKE_TRY_COMPILE_PLATFORM_VARIABLES CISM_ZIG_TARGET)

string(REGEX MATCH "^[a-z0-9_]+" _cism_arch "${CISM_ZIG_TARGET}")
if(CISM_ZIG_TARGET MATCHES "-(macos|ios)")
    set(CMAKE_SYSTEM_NAME Darwin)
    if(_cism_arch STREQUAL "aarch64")
        set(CMAKE_SYSTEM_PROCESSOR arm64)
    else()
        set(CMAKE_SYSTEM_PROCESSOR ${_cism_arch})
    endif()
elseif(CISM_ZIG_TARGET MATCHES "-windows")
    set(CMAKE_SYSTEM_NAME Windows)
    set(CMAKE_SYSTEM_PROCESSOR ${_cism_arch})
    set(CMAKE_RC_COMPILER "" CACHE FILEPATH "")
else()
    set(CMAKE_SYSTEM_NAME Linux) # Android too: CMake's Android platform would look for an NDK
    set(CMAKE_SYSTEM_PROCESSOR ${_cism_arch})
endif()

set(_cism_flags "")
if(CISM_ZIG_TARGET MATCHES "-android|-ios" OR CISM_ZIG_COMPILE_ONLY)
    # Nothing is linked: CMake's checks build static libraries, and the
    # compiler is not identified by linking a test program (for Windows that
    # link alone makes zig build a whole mingw CRT first).
    set(CISM_CROSS_COMPILE_ONLY ON)
    set(CMAKE_TRY_COMPILE_TARGET_TYPE STATIC_LIBRARY)
    set(CMAKE_C_COMPILER_ID_RUN TRUE)
    set(CMAKE_C_COMPILER_ID Clang)
    set(CMAKE_C_COMPILER_FRONTEND_VARIANT GNU)
    set(CMAKE_C_COMPILER_VERSION 18.0) # zig 0.13+ ships clang 18 or newer
    set(CMAKE_C_STANDARD_COMPUTED_DEFAULT 17)
    set(CMAKE_C_EXTENSIONS_COMPUTED_DEFAULT ON)
    set(CMAKE_C_PLATFORM_ID ${CMAKE_SYSTEM_NAME})
endif()
list(APPEND CMAKE_TRY_COMPILE_PLATFORM_VARIABLES CISM_ZIG_COMPILE_ONLY)

# zig itself (resolved once, passed on to try_compile projects), and wrappers
# CMake can call as single executables
if(NOT CISM_ZIG_EXE)
    if(DEFINED ENV{ZIG})
        set(_cism_zig "$ENV{ZIG}")
    else()
        if(NOT Python3_EXECUTABLE)
            find_program(Python3_EXECUTABLE NAMES python3 REQUIRED)
        endif()
        execute_process(COMMAND "${Python3_EXECUTABLE}" -c "import ziglang, os; print(os.path.join(os.path.dirname(ziglang.__file__), 'zig'))"
                        OUTPUT_VARIABLE _cism_zig OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE _cism_rc)
        if(NOT _cism_rc EQUAL 0)
            message(FATAL_ERROR "cmake/zig.cmake: no zig: set ZIG, or pip install ziglang for ${Python3_EXECUTABLE}")
        endif()
    endif()
    set(CISM_ZIG_EXE "${_cism_zig}" CACHE FILEPATH "zig executable")
endif()
list(APPEND CMAKE_TRY_COMPILE_PLATFORM_VARIABLES CISM_ZIG_EXE)
set(_cism_zig "${CISM_ZIG_EXE}")
get_filename_component(_cism_zig_lib "${_cism_zig}" DIRECTORY)
set(_cism_libc "${_cism_zig_lib}/lib/libc/include")
if(CISM_ZIG_TARGET MATCHES "-android")
    # musl's headers for bionic's; clang's own headers (arm_neon.h, ...) first
    set(_cism_flags "-nostdinc -isystem ${_cism_zig_lib}/lib/include -isystem ${_cism_libc}/${_cism_arch}-linux-musl -isystem ${_cism_libc}/generic-musl -isystem ${_cism_libc}/${_cism_arch}-linux-any -isystem ${_cism_libc}/any-linux-any")
elseif(CISM_ZIG_TARGET MATCHES "-ios")
    set(_cism_flags "-isystem ${_cism_libc}/any-darwin-any")
endif()

set(_cism_bin "${CMAKE_BINARY_DIR}/zig-wrappers")
file(MAKE_DIRECTORY "${_cism_bin}")
foreach(_tool cc ar ranlib)
    if(_tool STREQUAL "cc")
        set(_args "cc -target ${CISM_ZIG_TARGET} ${_cism_flags}")
    else()
        set(_args "${_tool}")
    endif()
    file(WRITE "${_cism_bin}/zig-${_tool}" "#!/bin/sh\nexec \"${_cism_zig}\" ${_args} \"$@\"\n")
    file(CHMOD "${_cism_bin}/zig-${_tool}" PERMISSIONS OWNER_READ OWNER_WRITE OWNER_EXECUTE GROUP_READ GROUP_EXECUTE WORLD_READ WORLD_EXECUTE)
endforeach()
set(CMAKE_C_COMPILER "${_cism_bin}/zig-cc")
set(CMAKE_AR "${_cism_bin}/zig-ar" CACHE FILEPATH "" FORCE)
set(CMAKE_RANLIB "${_cism_bin}/zig-ranlib" CACHE FILEPATH "" FORCE)

# Never pick up the build machine's libraries or headers.
set(CMAKE_FIND_ROOT_PATH "${_cism_bin}")
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)
