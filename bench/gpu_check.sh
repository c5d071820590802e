#!/usr/bin/env bash
# The one check to run when a GPU is at hand (an NVIDIA card with its
# driver): kiln's CUDA kernels against their scalar twins, greedy parity of
# the CUDA backend with the CPU, and kiln bench on the GPU, in one run of
# about 8 minutes at most, with a summary under $OUT.
#
#   bench/gpu_check.sh [--dry-run] [--budget SECONDS] BUILD
#   bench/gpu_check.sh --pack BUILD DIR
#
# BUILD is a build tree configured with -DKILN_CUDA=ON (the fatbin embedded
# in kiln), or a folder --pack made from one: --pack copies kiln, the test
# programs this script runs and the shared libraries they need beyond the C
# library (DIR/lib, put on LD_LIBRARY_PATH) into DIR, small enough to travel
# to a machine that lacks the build's libraries.  The script runs from the
# repository's root there (it reads models/, tests/data/fixtures/,
# tests/data/vocab/ and tests/gen_fixtures.py).
#
# Steps, each with a time limit, its exit status recorded and the next run
# whatever happened:
#   1. the card (nvidia-smi) and kiln backends
#   2. test_cuda_gpu: every kernel against its scalar twin on the GPU
#   3. test_backend_cuda with the real driver: the CUDA backend against the
#      CPU on stories260K and the dense fixtures (ids, logits)
#   4. kiln run --device cuda against --device cpu, greedy, on stories260K
#      (24 tokens; 64 reported) and the fixtures (16): the same text
#      required on the F32/F16 ones; the quantized ones are reported (the
#      CPU multiplies Q8-quantized activations, the GPU F32 ones: their
#      top-1 may flip at near ties)
#   5. a Qwen3-0.6B-shaped model generated here (tests/gen_fixtures.py
#      --bench: numpy, about 1 GB, F16), quantized to Q8_0 and Q4_K_M by
#      kiln quantize while the budget allows
#   6. kiln bench --device cuda pp512/tg128 (-r 3) on each, and --device cpu
#      once on the F16 file for scale; llama-bench -ngl 99 -fa 1 beside them
#      when $LLAMA_BENCH names one (this script never builds llama.cpp)
# Files under $OUT (at most 8): summary.md (also printed last), log.txt
# (every step's output), bench-cuda.json, bench-cpu.json, llama-bench.json,
# gpu.txt.  Without $OUT: a new folder under /tmp.
#
# --dry-run runs the same steps on the mock device (tests/cuda_mock.cpp,
# BUILD/tests/libkiln_cuda_mock.so through KILN_CUDA_DRIVER) on a machine
# without a GPU: no nvidia-smi, test_cuda_gpu reports itself skipped, and
# the benchmark runs on stories260K with -p 16 -n 4 -r 1 instead of the
# generated model (the emulator is slow).  It checks the script, not speed.
#
# The exit status is 0 when every required step passed, 1 otherwise.
set -u

usage() {
  sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
}

root=$(cd "$(dirname "$0")/.." && pwd)
dry=0
budget=450

# The steps' work, run as `$0 --do TASK ARGS...` (so that timeout can stop
# a step with everything it started) with the main run's GPUC_* settings.
task_gpu_info() {
  if [ "$GPUC_DRY" = 1 ]; then
    echo "dry run: the mock device" >"$GPUC_OUT/gpu.txt"
  else
    nvidia-smi >"$GPUC_OUT/gpu.txt" 2>&1
    nvidia-smi --query-gpu=name,memory.total,driver_version,compute_cap --format=csv >>"$GPUC_OUT/gpu.txt" 2>&1
  fi
  "$GPUC_B/kiln" backends | tee -a "$GPUC_OUT/gpu.txt"
}
task_test() { cd "$root/tests" && "$GPUC_B/tests/$1"; }
# parity REQUIRED NAME MODEL PROMPT N [NGL]: kiln run greedy on both devices
# (NGL: -ngl NGL on the GPU run, the model split between the GPU and the CPU)
task_parity() {
  local req=$1 name=$2 model=$3 prompt=$4 n=$5 w=$GPUC_WORK ngl=()
  [ -n "${6:-}" ] && ngl=(-ngl "$6")
  "$GPUC_B/kiln" run -m "$model" -p "$prompt" -n "$n" --temp 0 --device cpu >"$w/cpu.txt" || return 3
  "$GPUC_B/kiln" run -m "$model" -p "$prompt" -n "$n" --temp 0 --device cuda "${ngl[@]}" -v >"$w/gpu.txt" 2>"$w/gpu.err"
  local rc=$?
  cat "$w/gpu.err"
  [ $rc = 0 ] || return 4
  grep -q ', CUDA (' "$w/gpu.err" || { echo "parity $name: the model did not run on the GPU"; return 5; }
  if cmp -s "$w/cpu.txt" "$w/gpu.txt"; then
    echo "parity $name: the same $n tokens: $(head -c 80 "$w/gpu.txt" | tr '\n' ' ')"
    return 0
  fi
  echo "parity $name: DIFFERENT"
  echo "parity $name: cpu  $(tr '\n' ' ' <"$w/cpu.txt")"
  echo "parity $name: cuda $(tr '\n' ' ' <"$w/gpu.txt")"
  [ "$req" = 1 ] && return 1
  return 0
}
task_gen() { python3 "$root/tests/gen_fixtures.py" --bench "$1"; }
# bench MODEL DEVICE JSON [-r N]: kiln bench with GPUC_BARGS
task_bench() {
  local m=$1 dev=$2 out=$3
  shift 3
  # shellcheck disable=SC2086
  "$GPUC_B/kiln" bench -m "$m" $GPUC_BARGS "$@" --device "$dev" -o json >"$out"
}
task_llama_bench() {
  local m
  for m in "$@"; do "$LLAMA_BENCH" -m "$m" -ngl 99 -fa 1 -p 512 -n 128 -r 3 -o json; done >"$GPUC_OUT/llama-bench.json"
}
if [ "${1:-}" = "--do" ]; then
  t=$2
  shift 2
  cd "$root" || exit 2
  "task_$t" "$@"
  exit $?
fi
if [ "${1:-}" = "--pack" ]; then
  [ $# -eq 3 ] || usage
  src=$2 dst=$3
  [ -x "$src/kiln" ] || { echo "gpu_check: no $src/kiln" >&2; exit 2; }
  mkdir -p "$dst/tests" "$dst/lib"
  cp "$src/kiln" "$dst/"
  for t in test_cuda_gpu test_backend_cuda libkiln_cuda_mock.so; do
    [ -e "$src/tests/$t" ] && cp "$src/tests/$t" "$dst/tests/"
  done
  # the shared libraries beyond the C library and the loader
  for b in "$dst/kiln" "$dst"/tests/*; do
    ldd "$b" 2>/dev/null | awk '/=> \// {print $3}'
  done | sort -u | while read -r lib; do
    case $(basename "$lib") in
      libc.so* | libm.so* | libpthread.so* | libdl.so* | librt.so* | ld-linux* | libgcc_s.so* | libstdc++.so*) ;;
      *) cp -L "$lib" "$dst/lib/" ;;
    esac
  done
  du -sh "$dst"
  exit 0
fi
while [ $# -gt 1 ]; do
  case $1 in
    --dry-run) dry=1 ;;
    --budget) budget=$2; shift ;;
    *) usage ;;
  esac
  shift
done
[ $# -eq 1 ] || usage
B=$(cd "$1" && pwd) || exit 2
kiln=$B/kiln
[ -x "$kiln" ] || { echo "gpu_check: no kiln in $B" >&2; exit 2; }
[ -d "$B/lib" ] && export LD_LIBRARY_PATH="$B/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
OUT=${OUT:-$(mktemp -d /tmp/kiln-gpu-check.XXXXXX)}
mkdir -p "$OUT"
work=$(mktemp -d "${TMPDIR:-/tmp}/kiln-gpu-work.XXXXXX")
log=$OUT/log.txt
sum=$OUT/summary.md
: >"$log"
start=$SECONDS
failed=0
if [ $dry = 1 ]; then
  export KILN_CUDA_DRIVER=$B/tests/libkiln_cuda_mock.so
  [ -e "$KILN_CUDA_DRIVER" ] || { echo "gpu_check: --dry-run needs $KILN_CUDA_DRIVER" >&2; exit 2; }
else
  unset KILN_CUDA_DRIVER
fi
unset KILN_DEVICE
cd "$root" || exit 2

{
  echo "# kiln GPU check ($(date -u '+%Y-%m-%d %H:%M UTC')$([ $dry = 1 ] && echo ', DRY RUN on the mock device'))"
  echo
  echo "| step | status | seconds | |"
  echo "| --- | --- | ---: | --- |"
} >"$sum"

left() { echo $((budget - (SECONDS - start))); }

# step NAME REQUIRED LIMIT CMD...: runs CMD with a time limit (never past
# the budget), its output into the log, and a row into the summary
step() {
  local name=$1 req=$2 limit=$3
  shift 3
  local l
  l=$(left)
  if [ "$l" -lt 10 ]; then
    echo "| $name | skipped | 0 | the budget of ${budget} s is spent |" >>"$sum"
    [ "$req" = 1 ] && failed=1
    return 1
  fi
  [ "$limit" -gt "$l" ] && limit=$l
  echo "==== $name (limit ${limit} s): $*" >>"$log"
  local t0=$SECONDS rc
  timeout -k 5 "$limit" "$@" >>"$log" 2>&1
  rc=$?
  local st=ok
  if [ $rc = 77 ]; then
    st=skipped
  elif [ $rc = 124 ] || [ $rc = 137 ]; then
    st="TIMEOUT"
  elif [ $rc != 0 ]; then
    st="FAILED (rc $rc)"
  fi
  case $st in ok | skipped) ;; *) [ "$req" = 1 ] && failed=1 ;; esac
  echo "==== $name: rc $rc, $((SECONDS - t0)) s" >>"$log"
  echo "| $name | $st | $((SECONDS - t0)) | |" >>"$sum"
  return $rc
}

export GPUC_B=$B GPUC_OUT=$OUT GPUC_WORK=$work GPUC_DRY=$dry
do_=("$0" --do)

# 1. the card and what kiln finds
step "card and backends" 0 30 "${do_[@]}" gpu_info

# 2. the kernels on the GPU (skipped: 77 without one, as in a dry run)
step "test_cuda_gpu (kernels vs scalar twins)" 1 120 "${do_[@]}" test test_cuda_gpu

# 3. the backend against the CPU through the library
step "test_backend_cuda (ids, logits vs CPU)" 1 150 "${do_[@]}" test test_backend_cuda

# 4. kiln run: the same greedy text on the GPU as on the CPU
# stories260K: 24 tokens required (the 25th is a near tie that the GPU's F32
# attention sums break otherwise than the CPU's F16 ones, on the mock), 64
# reported
step "run parity: stories260K" 1 60 "${do_[@]}" parity 1 stories260K models/stories260K.gguf "Tom had a red" 24
step "run parity: stories260K, 64" 0 60 "${do_[@]}" parity 0 stories260K-64 models/stories260K.gguf "Tom had a red" 64
for f in llama qwen2 qwen3 llama-q8_0 llama-q4_0; do
  req=1
  case $f in *q8_0 | *q4_0) req=0 ;; esac # quantized: reported, a near tie may flip
  step "run parity: $f" $req 60 "${do_[@]}" parity $req "$f" "tests/data/fixtures/$f.gguf" "w048 7tuijk dsdfhu" 16
done
# a split: the last half of the layers on the GPU (stories260K has 5, the
# fixtures 2: -ngl 1), the rest and the head on the CPU
step "run parity: stories260K -ngl 3" 1 60 "${do_[@]}" parity 1 stories260K-ngl3 models/stories260K.gguf "Tom had a red" 24 3
step "run parity: qwen3 -ngl 1" 1 60 "${do_[@]}" parity 1 qwen3-ngl1 tests/data/fixtures/qwen3.gguf "w048 7tuijk dsdfhu" 16 1

# 5. the benchmark model (6. below); the dry run benches stories260K
models=()
if [ $dry = 1 ]; then
  models=("models/stories260K.gguf")
  export GPUC_BARGS="-p 16 -n 4 -r 1"
else
  export GPUC_BARGS="-p 512 -n 128 -r 3"
  f16=$work/qwen3-0.6b-f16.gguf
  if step "generate Qwen3-0.6B-shaped F16" 0 150 "${do_[@]}" gen "$f16"; then
    models=("$f16")
    for q in q8_0 q4_k_m; do
      [ "$(left)" -gt 200 ] || break
      if step "quantize $q" 0 90 "$kiln" quantize "$f16" "$work/qwen3-0.6b-$q.gguf" "$q"; then
        models+=("$work/qwen3-0.6b-$q.gguf")
      fi
    done
  fi
fi

# 6. kiln bench on the GPU (and once on the CPU), llama-bench beside it
echo "[" >"$OUT/bench-cuda.json"
first=1
for m in "${models[@]}"; do
  if step "kiln bench --device cuda $(basename "$m")" 1 120 "${do_[@]}" bench "$m" cuda "$work/b.json"; then
    [ $first = 1 ] || echo "," >>"$OUT/bench-cuda.json"
    first=0
    sed '1d;$d' "$work/b.json" >>"$OUT/bench-cuda.json"
  fi
done
echo "]" >>"$OUT/bench-cuda.json"
if [ ${#models[@]} -gt 0 ]; then
  step "kiln bench --device cpu $(basename "${models[0]}")" 0 120 "${do_[@]}" bench "${models[0]}" cpu \
    "$OUT/bench-cpu.json" -r 1
  if [ -n "${LLAMA_BENCH:-}" ] && [ -x "${LLAMA_BENCH}" ]; then
    step "llama-bench -ngl 99 -fa 1" 0 150 "${do_[@]}" llama_bench "${models[@]}"
  fi
fi

# the summary: the steps, then the benchmark rows
{
  echo
  echo "| model | device | test | t/s |"
  echo "| --- | --- | --- | ---: |"
  for f in "$OUT/bench-cuda.json" "$OUT/bench-cpu.json"; do
    [ -s "$f" ] || continue
    /usr/bin/env python3 - "$f" <<'EOF' 2>/dev/null || true
import json, sys
for r in json.load(open(sys.argv[1])):
    dev = "CUDA " + r.get("gpu_name", "") if r.get("backend") == "cuda" else "CPU " + r.get("cpu_path", "")
    print("| %s | %s | %s | %.2f ± %.2f |" % (r["model_type"], dev, r["test"], r["avg_ts"], r["stddev_ts"]))
EOF
  done
  echo
  grep -E '^parity |rel err|rel diff|^refused' "$log" | sed 's/^/    /'
  echo
  echo "total $((SECONDS - start)) s of a ${budget} s budget; $([ $failed = 0 ] && echo 'every required step passed' || echo 'a required step FAILED (log.txt)')"
} >>"$sum"
rm -rf "$work"
cat "$sum"
exit $failed
