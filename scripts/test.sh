#!/usr/bin/env bash
# The whole test suite, as CI runs it:
#   1. libFuzzer runs over the GGUF reader and the checkpoint readers
#      (bounded: KILN_FUZZ_SECONDS each, 60 s under CI, 15 s otherwise;
#      skipped if KILN_FUZZ_SECONDS=0), and over the JSON-schema recognizer
#      and the two chat template engines (half that each)
#   2. every test under AddressSanitizer + UndefinedBehaviorSanitizer
#   3. the thread pool, the engine lifecycle tests and the generation core under
#      ThreadSanitizer, and kiln serve under it for the e2e files that send
#      concurrent requests (which the ASan tier then skips)
#   4. under CI (or KILN_ARM64=1): the aarch64 cross build, its kernel tests
#      and part of the quick tier under qemu-aarch64, with and without
#      dotprod (scripts/arm64.sh; skipped, saying so, without the toolchain)
#   5. every test on the Release build (its summary is the last line); that
#      build compiles the CUDA kernels when nvcc is found (KILN_CUDA=AUTO),
#      the sanitizer and fuzz builds leave them out (the same bytes again)
# and, first of all, the C sources' layout (scripts/format.sh --check).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
jobs=$(nproc)
# Each stage's header says when it began (seconds since the script started).
stage() { echo "== $* (at ${SECONDS}s)"; }

stage "format"
bash scripts/format.sh --check

fuzz_s=${KILN_FUZZ_SECONDS:-$([ "${CI:-}" = "true" ] && echo 60 || echo 15)}
if [ "$fuzz_s" != "0" ]; then
  stage "fuzz: GGUF reader for ${fuzz_s}s"
  CC=clang cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKILN_FUZZ=ON -DKILN_CUDA=OFF >/dev/null
  cmake --build build-fuzz -j"$jobs" --target fuzz_gguf >/dev/null
  mkdir -p build-fuzz/corpus
  cp models/stories260K.gguf tests/data/vocab/ggml-vocab-gpt-2.gguf tests/data/vocab/ggml-vocab-bert-bge.gguf build-fuzz/corpus/
  ./build-fuzz/tests/fuzz_gguf -max_total_time="$fuzz_s" -max_len=4194304 -rss_limit_mb=2048 \
      -print_final_stats=1 build-fuzz/corpus 2>&1 | tail -n 12
  stage "fuzz: checkpoint readers (PyTorch ZIP, pickle, safetensors) for ${fuzz_s}s"
  cmake --build build-fuzz -j"$jobs" --target fuzz_ckpt >/dev/null
  mkdir -p build-fuzz/corpus-ckpt
  cp tests/data/image/ckpt/*.pt tests/data/image/ckpt/*.safetensors tests/data/image/tiny/spiece.model build-fuzz/corpus-ckpt/
  ./build-fuzz/tests/fuzz_ckpt -max_total_time="$fuzz_s" -max_len=262144 -rss_limit_mb=2048 \
      -print_final_stats=1 build-fuzz/corpus-ckpt 2>&1 | tail -n 12
  # the JSON-schema compiler and recognizer: a schema, a NUL, a text
  jschema_s=$(( (fuzz_s + 1) / 2 ))
  stage "fuzz: JSON-schema compiler and recognizer for ${jschema_s}s"
  cmake --build build-fuzz -j"$jobs" --target fuzz_jschema >/dev/null
  mkdir -p build-fuzz/corpus-jschema
  cp tests/data/jschema-seeds/*.bin build-fuzz/corpus-jschema/
  ./build-fuzz/tests/fuzz_jschema -max_total_time="$jschema_s" -max_len=4096 -rss_limit_mb=2048 \
      -print_final_stats=1 build-fuzz/corpus-jschema 2>&1 | tail -n 12
  stage "fuzz: image decoders (PNG, JPEG + EXIF, WebP) for ${jschema_s}s"
  cmake --build build-fuzz -j"$jobs" --target fuzz_image >/dev/null
  mkdir -p build-fuzz/corpus-image
  cp tests/data/vision/*.png tests/data/vision/*.jpg tests/data/vision/*.webp build-fuzz/corpus-image/
  ./build-fuzz/tests/fuzz_image -max_total_time="$jschema_s" -max_len=65536 -rss_limit_mb=2048 \
      -print_final_stats=1 build-fuzz/corpus-image 2>&1 | tail -n 12
  stage "fuzz: mmproj projector reader for ${jschema_s}s"
  cmake --build build-fuzz -j"$jobs" --target fuzz_mmproj >/dev/null
  mkdir -p build-fuzz/corpus-mmproj
  cp tests/data/vision/*mmproj*.gguf build-fuzz/corpus-mmproj/
  ./build-fuzz/tests/fuzz_mmproj -max_total_time="$jschema_s" -max_len=1048576 -rss_limit_mb=2048 \
      -print_final_stats=1 build-fuzz/corpus-mmproj 2>&1 | tail -n 12
  # the chat template engines, half the time each (seeded with the
  # conformance templates and the hostile ones)
  tmpl_s=$(( fuzz_s / 2 > 0 ? fuzz_s / 2 : 1 ))
  stage "fuzz: Jinja chat templates for ${tmpl_s}s"
  cmake --build build-fuzz -j"$jobs" --target fuzz_jinja fuzz_gotmpl >/dev/null
  mkdir -p build-fuzz/corpus-jinja build-fuzz/corpus-gotmpl
  cp tests/data/templates/*.jinja tests/data/hostile/jinja/*.jinja build-fuzz/corpus-jinja/
  ./build-fuzz/tests/fuzz_jinja -max_total_time="$tmpl_s" -max_len=32768 -timeout=25 -rss_limit_mb=2048 \
      -print_final_stats=1 build-fuzz/corpus-jinja 2>&1 | tail -n 12
  stage "fuzz: Go chat templates for ${tmpl_s}s"
  cp tests/data/templates/go/*.gotmpl tests/data/hostile/gotmpl/*.tmpl build-fuzz/corpus-gotmpl/
  ./build-fuzz/tests/fuzz_gotmpl -max_total_time="$tmpl_s" -max_len=32768 -timeout=25 -rss_limit_mb=2048 \
      -print_final_stats=1 build-fuzz/corpus-gotmpl 2>&1 | tail -n 12
fi

# The e2e files whose servers take concurrent requests on the lifecycle
# library and the continuous-batching scheduler: the gate (urgent requests
# overtaking queued ones, keep-alive unloads, SIGTERM drain) and 8 streams
# at once.  They run under TSan, and the ASan tier skips them.
TSAN_E2E="lifecycle load"

stage "ASan + UBSan build"
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKILN_SANITIZE=ON -DKILN_CUDA=OFF >/dev/null
cmake --build build-asan -j"$jobs" >/dev/null
(cd build-asan && KILN_SANITIZED=1 KILN_E2E_SKIP="$TSAN_E2E" ASAN_OPTIONS=detect_leaks=1 \
   UBSAN_OPTIONS=print_stacktrace=1 ctest --output-on-failure -j"$jobs")

stage "ThreadSanitizer: engine lifecycle, generation core, the server under concurrent requests"
cmake -S . -B build-tsan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKILN_TSAN=ON -DKILN_CUDA=OFF >/dev/null
cmake --build build-tsan -j"$jobs" --target kiln test_pool test_engine test_engine_llm test_engine_embed test_engine_stt test_gen >/dev/null
(cd build-tsan && TSAN_OPTIONS=halt_on_error=1 ctest --output-on-failure -R "^(test_pool|test_engine|test_gen)" -E "^test_engine_image$")
# The servers the e2e files start write their reports to files (the tests
# keep a server's stderr only until it listens); any report fails the tier.
tsan_dir=$(mktemp -d)
KILN_BIN="$PWD/build-tsan/kiln" KILN_SANITIZED=1 KILN_E2E_ONLY="$TSAN_E2E" \
  TSAN_OPTIONS="log_path=$tsan_dir/report exitcode=0" sh tests/e2e/run.sh
if ls "$tsan_dir"/report.* >/dev/null 2>&1; then
  cat "$tsan_dir"/report.*
  echo "ThreadSanitizer reported races in kiln serve (above)" >&2
  exit 1
fi
rm -rf "$tsan_dir"

if [ "${CI:-}" = "true" ] || [ "${KILN_ARM64:-0}" = "1" ]; then
  stage "aarch64: cross build, kernel tests and quick tests under qemu-aarch64"
  bash scripts/arm64.sh
fi

stage "Release build"
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$jobs" >/dev/null
(cd build && ctest --output-on-failure -j"$jobs")
