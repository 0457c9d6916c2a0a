# aarch64-linux-gnu.cmake: cross-compiles Kiln for 64-bit ARM Linux with
# Debian's gcc-aarch64-linux-gnu, and runs what it builds (ctest, the test
# scripts through the build/tests/emu/ wrappers) under qemu-user.
#   cmake -S . -B build-arm64 -G Ninja \
#     -DCMAKE_TOOLCHAIN_FILE=cmake/toolchains/aarch64-linux-gnu.cmake
# Packages: gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user.
# KILN_ARM64_SYSROOT overrides the target root (default /usr/aarch64-linux-gnu).
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)

set(KILN_ARM64_TRIPLE aarch64-linux-gnu)
if(DEFINED ENV{KILN_ARM64_SYSROOT})
  set(KILN_ARM64_SYSROOT $ENV{KILN_ARM64_SYSROOT})
else()
  set(KILN_ARM64_SYSROOT /usr/${KILN_ARM64_TRIPLE})
endif()

set(CMAKE_C_COMPILER ${KILN_ARM64_TRIPLE}-gcc)
set(CMAKE_CXX_COMPILER ${KILN_ARM64_TRIPLE}-g++)

set(CMAKE_FIND_ROOT_PATH ${KILN_ARM64_SYSROOT})
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)

# ctest runs each test executable as `qemu-aarch64 -L SYSROOT test_x`; the
# emulated CPU is qemu's default (`max`: has dotprod and i8mm) unless QEMU_CPU
# names another (e.g. QEMU_CPU=cortex-a53 for a plain ARMv8.0 core).
find_program(KILN_QEMU_AARCH64 NAMES qemu-aarch64 qemu-aarch64-static)
if(NOT KILN_QEMU_AARCH64)
  set(KILN_QEMU_AARCH64 qemu-aarch64) # not installed: ctest will say it cannot run it
endif()
set(CMAKE_CROSSCOMPILING_EMULATOR ${KILN_QEMU_AARCH64} -L ${KILN_ARM64_SYSROOT})
