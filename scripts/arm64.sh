#!/usr/bin/env bash
# The aarch64 stage: kiln cross-built for Linux aarch64 with Debian's cross
# toolchain (cmake/aarch64-linux-gnu.cmake), then the kernel tests and the
# quick-tier tests emulation can afford run under qemu-aarch64 (user mode),
# once on a CPU with FEAT_DotProd and FEAT_I8MM (QEMU_CPU=max: the dotprod
# level) and once on a Cortex-A57 (Armv8.0: the neon level, the fallbacks).
# Emulation says nothing about speed.  scripts/test.sh runs this under CI
# (or with KILN_ARM64=1); when the cross toolchain cannot be installed it
# says so and skips.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! bash scripts/deps.sh --arm64 || ! command -v aarch64-linux-gnu-gcc >/dev/null 2>&1 ||
   ! command -v qemu-aarch64 >/dev/null 2>&1; then
  echo "== aarch64: SKIPPED: the cross toolchain (gcc-aarch64-linux-gnu, the :arm64 -dev packages, qemu-user) could not be installed"
  exit 0
fi

# The kernel tests (every NEON twin against its scalar reference) and the
# quick-tier tests that run in seconds under emulation (test_gguf, test_pool,
# test_chat_template take minutes there).  test_kernels and
# test_conv check the kernels folder, which has no aarch64 twins yet, and
# take minutes emulated: left out.
kernel_tests="test_quant test_kquants test_iquants"
quick_tests="test_backends test_sample test_gotmpl"

echo "== aarch64: cross build"
cmake -S . -B build-arm64 -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake -DCMAKE_BUILD_TYPE=Release \
  -DKILN_WEBUI=OFF >/dev/null
# shellcheck disable=SC2086
cmake --build build-arm64 -j"$(nproc)" --target $kernel_tests $quick_tests >/dev/null

export QEMU_LD_PREFIX=/usr/aarch64-linux-gnu
fail=0
for cpu in max cortex-a57; do
  for t in $kernel_tests $quick_tests; do
    log=build-arm64/$t.$cpu.log
    if (cd tests && QEMU_CPU=$cpu timeout 300 qemu-aarch64 ../build-arm64/tests/$t >"../$log" 2>&1); then
      echo "aarch64 ($cpu) $t: $(tail -n 1 "$log")"
    else
      echo "aarch64 ($cpu) $t: FAILED"
      tail -n 30 "$log"
      fail=1
    fi
  done
done
exit $fail
