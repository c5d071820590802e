#!/usr/bin/env bash
# The whole test suite, as CI runs it:
#   1. libFuzzer runs over the GGUF reader and the checkpoint readers
#      (bounded: KILN_FUZZ_SECONDS each, 60 s under CI, 15 s otherwise;
#      skipped if KILN_FUZZ_SECONDS=0)
#   2. every test under AddressSanitizer + UndefinedBehaviorSanitizer
#   3. the engine lifecycle tests under ThreadSanitizer
#   4. every test on the Release build (its summary is the last line)
# and, first of all, the C sources' layout (scripts/format.sh --check).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
jobs=$(nproc)

echo "== format"
bash scripts/format.sh --check

fuzz_s=${KILN_FUZZ_SECONDS:-$([ "${CI:-}" = "true" ] && echo 60 || echo 15)}
if [ "$fuzz_s" != "0" ]; then
  echo "== fuzz: GGUF reader for ${fuzz_s}s"
  CC=clang cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKILN_FUZZ=ON >/dev/null
  cmake --build build-fuzz -j"$jobs" --target fuzz_gguf >/dev/null
  mkdir -p build-fuzz/corpus
  cp models/stories260K.gguf tests/data/vocab/ggml-vocab-gpt-2.gguf tests/data/vocab/ggml-vocab-bert-bge.gguf build-fuzz/corpus/
  ./build-fuzz/tests/fuzz_gguf -max_total_time="$fuzz_s" -max_len=4194304 -rss_limit_mb=2048 \
      -print_final_stats=1 build-fuzz/corpus 2>&1 | tail -n 12
  echo "== fuzz: checkpoint readers (PyTorch ZIP, pickle, safetensors) for ${fuzz_s}s"
  cmake --build build-fuzz -j"$jobs" --target fuzz_ckpt >/dev/null
  mkdir -p build-fuzz/corpus-ckpt
  cp tests/data/image/ckpt/*.pt tests/data/image/ckpt/*.safetensors tests/data/image/tiny/spiece.model build-fuzz/corpus-ckpt/
  ./build-fuzz/tests/fuzz_ckpt -max_total_time="$fuzz_s" -max_len=262144 -rss_limit_mb=2048 \
      -print_final_stats=1 build-fuzz/corpus-ckpt 2>&1 | tail -n 12
fi

echo "== ASan + UBSan build"
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKILN_SANITIZE=ON >/dev/null
cmake --build build-asan -j"$jobs" >/dev/null
(cd build-asan && KILN_SANITIZED=1 ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
   ctest --output-on-failure -j"$jobs")

echo "== ThreadSanitizer: engine lifecycle"
cmake -S . -B build-tsan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKILN_TSAN=ON >/dev/null
cmake --build build-tsan -j"$jobs" --target test_engine test_engine_llm test_engine_embed test_engine_stt test_gen >/dev/null
(cd build-tsan && TSAN_OPTIONS=halt_on_error=1 ctest --output-on-failure -R "^(test_engine|test_gen)" -E "^test_engine_image$")

echo "== Release build"
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$jobs" >/dev/null
(cd build && ctest --output-on-failure -j"$jobs")
