# Cross build for Linux aarch64 with Debian's cross toolchain
# (gcc-aarch64-linux-gnu) and the :arm64 -dev packages installed through
# multiarch (dpkg --add-architecture arm64; scripts/deps.sh --arm64):
#   cmake -S . -B build-arm64 -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake
# The test programs then run under qemu-aarch64 (CMAKE_CROSSCOMPILING_EMULATOR
# below, so ctest uses it), with QEMU_LD_PREFIX=/usr/aarch64-linux-gnu.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)

# pkg-config finds the arm64 .pc files, never the host's
set(ENV{PKG_CONFIG_LIBDIR} "/usr/lib/aarch64-linux-gnu/pkgconfig:/usr/share/pkgconfig")
set(ENV{PKG_CONFIG_PATH} "")

set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)

find_program(KILN_QEMU_AARCH64 qemu-aarch64)
if(KILN_QEMU_AARCH64)
  set(CMAKE_CROSSCOMPILING_EMULATOR ${KILN_QEMU_AARCH64})
endif()

# GCC's format-truncation estimates differ between targets (string lengths
# it infers after inlining); the x86-64 build keeps the warning.
set(CMAKE_C_FLAGS_INIT "-Wno-format-truncation")
