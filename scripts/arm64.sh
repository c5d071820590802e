#!/usr/bin/env bash
# The aarch64 stage: kiln cross-built for Linux aarch64 with Debian's cross
# toolchain (cmake/aarch64-linux-gnu.cmake), then the kernel tests and the
# quick-tier tests emulation can afford run under qemu-aarch64 (user mode),
# once on a CPU with FEAT_DotProd, FEAT_I8MM and FEAT_BF16 (QEMU_CPU=max: the
# dotprod level with its smmla and bfdot kernels) and once on a Cortex-A57
# (Armv8.0: the neon level, the fallbacks); test_quant once more on a
# Cortex-A76 (the dotprod level without smmla and bfdot).
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

# Run on both CPUs: the kernel tests (every NEON twin against its scalar
# reference) and the tests whose path depends on the level (test_models and
# test_gen, about 80 and 35 seconds each emulated: the model families and
# the generation core, whose greedy texts may part from the x86-64 ones
# only at a near-tie).  Run once (on max): the quick-tier tests whose code
# does not depend on the CPU's features but on aarch64 itself (unsigned
# char, weak memory ordering in the thread pool), and those whose kernels
# the both-CPU tests above already check on each level (the vision
# encoders, Whisper, MTP: GEMM, conv and matmul of test_kernels and
# test_conv).  test_store_local, header_example and bench_compare are
# test_store --local and the two scripts of tests/CMakeLists.txt (the
# latter against its stand-in llama-bench: kiln's figures only).  Left out:
# test_quantize (about 7 minutes emulated; its code is the scalar
# quantizers, which test_quant and test_kquants run on both CPUs).
both_tests="test_quant test_kquants test_iquants test_lowbit test_kernels test_conv test_backends test_engine_llm test_gen
  test_models"
once_tests="test_pool test_sample test_gotmpl test_gguf test_ckpt test_guard test_backend_cpu test_engine
  test_chat_template test_jschema test_vision test_vision_qwen test_vision_decode test_cli test_cli_engines
  test_engine_embed test_engine_stt test_server_kv test_server_gen test_server_forms test_server_xapi test_server_chat
  test_server_http test_server_hostile test_server_media test_mtp"
scripts_once="test_store_local header_example bench_compare"

echo "== aarch64: cross build"
cmake -S . -B build-arm64 -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake -DCMAKE_BUILD_TYPE=Release \
  -DKILN_WEBUI=OFF >/dev/null
# shellcheck disable=SC2086
cmake --build build-arm64 -j"$(nproc)" --target kiln kiln_static kiln_shared test_store $both_tests $once_tests >/dev/null

# The guest loader from the same glibc build as the libc.so.6 it finds: the
# multiarch libc6:arm64's when it is installed (the :arm64 -dev packages
# pull it in; the host's ld.so.cache then points at it), else the cross
# package's.  A mixed pair hangs the first pthread_create.
if [ -e /lib/ld-linux-aarch64.so.1 ]; then
  export QEMU_LD_PREFIX=/
else
  export QEMU_LD_PREFIX=/usr/aarch64-linux-gnu
fi
# Tests that run the CLI (KILN_BIN) through the host's shell: no binfmt_misc
# is assumed, so the aarch64 binary goes through qemu by this wrapper.
cat >build-arm64/kiln-qemu <<'EOF'
#!/bin/sh
exec qemu-aarch64 "$(dirname "$0")/kiln" "$@"
EOF
chmod +x build-arm64/kiln-qemu
export KILN_BIN=$PWD/build-arm64/kiln-qemu

# Each test is one qemu process: they run side by side, one per host core,
# and report in order once all are done.
run_one() { # cpu test: the log in build-arm64/TEST.CPU.log, "status seconds" beside it
  local log=build-arm64/$2.$1.log start=$SECONDS rc=0
  local cmd=(qemu-aarch64 "../build-arm64/tests/$2")
  case $2 in
  test_store_local) cmd=(qemu-aarch64 ../build-arm64/tests/test_store --local) ;;
  header_example) cmd=(env KILN_RUN=qemu-aarch64 sh header_example.sh ../build-arm64 aarch64-linux-gnu-gcc) ;;
  bench_compare) cmd=(bash bench_compare.sh) ;;
  esac
  (cd tests && QEMU_CPU=$1 timeout 300 "${cmd[@]}" >"../$log" 2>&1) || rc=$?
  echo "$rc $((SECONDS - start))" >"$log.rc"
}
runs=()
for cpu in max cortex-a57; do
  for t in $both_tests; do runs+=("$cpu $t"); done
done
for t in $once_tests $scripts_once; do runs+=("max $t"); done
runs+=("cortex-a76 test_quant")
for r in "${runs[@]}"; do
  while [ "$(jobs -rp | wc -l)" -ge "$(nproc)" ]; do wait -n || true; done
  # shellcheck disable=SC2086
  run_one $r &
done
wait

fail=0
for r in "${runs[@]}"; do
  read -r cpu t <<<"$r"
  log=build-arm64/$t.$cpu.log
  read -r rc secs <"$log.rc"
  if [ "$rc" -eq 0 ]; then
    echo "aarch64 ($cpu) $t: $(tail -n 1 "$log") ($secs s)"
  else
    echo "aarch64 ($cpu) $t: FAILED, status $rc ($secs s)"
    tail -n 30 "$log"
    fail=1
  fi
done
exit $fail
