# Cross build for Linux aarch64 with Debian's cross toolchain
# (gcc-aarch64-linux-gnu) and the :arm64 -dev packages installed through
# multiarch (dpkg --add-architecture arm64; scripts/deps.sh --arm64):
#   cmake -S . -B build-arm64 -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake
# The test programs then run under qemu-aarch64 (CMAKE_CROSSCOMPILING_EMULATOR
# below, so ctest uses it) with the loader of KILN_QEMU_LD_PREFIX.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)

# pkg-config finds the arm64 .pc files, never the host's
set(ENV{PKG_CONFIG_LIBDIR} "/usr/lib/aarch64-linux-gnu/pkgconfig:/usr/share/pkgconfig")
set(ENV{PKG_CONFIG_PATH} "")

set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)

# The guest's dynamic loader must come from the same glibc build as the
# libc.so.6 it loads.  With the multiarch libc6:arm64 installed (the :arm64
# -dev packages pull it in), the loader finds libc through the host's
# ld.so.cache in /lib/aarch64-linux-gnu, so the loader must be that
# package's (prefix /), not the cross package's under /usr/aarch64-linux-gnu:
# a mixed pair hangs the first pthread_create.  scripts/arm64.sh picks the
# same way.
if(EXISTS /lib/ld-linux-aarch64.so.1)
  set(KILN_QEMU_LD_PREFIX / CACHE PATH "sysroot qemu-aarch64 loads the guest's libraries from")
else()
  set(KILN_QEMU_LD_PREFIX /usr/aarch64-linux-gnu CACHE PATH "sysroot qemu-aarch64 loads the guest's libraries from")
endif()
find_program(KILN_QEMU_AARCH64 qemu-aarch64)
if(KILN_QEMU_AARCH64)
  set(CMAKE_CROSSCOMPILING_EMULATOR ${KILN_QEMU_AARCH64} -L ${KILN_QEMU_LD_PREFIX})
endif()

# GCC's format-truncation estimates differ between targets (string lengths
# it infers after inlining); the x86-64 build keeps the warning.
set(CMAKE_C_FLAGS_INIT "-Wno-format-truncation")
