#!/usr/bin/env bash
# Time to first token with one image: kiln run and, when $LLAMA_MTMD names
# an installed llama-mtmd-cli, that one, alternately, on the same text model,
# mmproj and image, one generated token each, greedy.
#
#   bench/ttft.sh [-t THREADS] [-r REPS] [-w WARMUP] [-c CTX] [-p PROMPT] TEXT.gguf MMPROJ.gguf IMAGE
#
# A run's figure is its wall time from start to exit with -n 1: loading both
# files (mapped), decoding and preprocessing the image, the vision encoder,
# the prompt with the image's tokens, and the first token.  WARMUP (1)
# untimed rounds go first (0 when the files were just written and are in
# the page cache).  Each program's median over REPS (3) rounds is printed,
# then llama.cpp's / kiln's (above 1: kiln is faster).  The files for the
# Gemma-3-4B-shaped case come from tests/gen_vision.py --bench DIR.  kiln is
# $KILN_BIN or build/kiln; this script never builds llama.cpp.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
kiln=${KILN_BIN:-$here/build/kiln}
mtmd=${LLAMA_MTMD:-}
threads=2 reps=3 warm=1 ctx=1024 prompt="Describe this image."
usage="usage: $0 [-t N] [-r N] [-w N] [-c N] [-p PROMPT] TEXT.gguf MMPROJ.gguf IMAGE"
while getopts "t:r:w:c:p:" opt; do
  case $opt in
    t) threads=$OPTARG ;; r) reps=$OPTARG ;; w) warm=$OPTARG ;; c) ctx=$OPTARG ;; p) prompt=$OPTARG ;;
    *) echo "$usage" >&2; exit 2 ;;
  esac
done
shift $((OPTIND - 1))
[ $# -eq 3 ] || { echo "$usage" >&2; exit 2; }
text=$1 mmproj=$2 image=$3
[ -x "$kiln" ] || { echo "ttft: $kiln not built (cmake --build build --target kiln)" >&2; exit 1; }
if [ -n "$mtmd" ] && [ ! -x "$mtmd" ]; then echo "ttft: LLAMA_MTMD=$mtmd is not an executable" >&2; exit 1; fi
[ -n "$mtmd" ] || echo "ttft: LLAMA_MTMD is not set: kiln figures only" >&2
log=$(mktemp -d)
trap 'rm -rf "$log"' EXIT

# seconds one command takes, its output in $log/NAME.out and .err (a failed
# run ends the script with its stderr)
timed() {
  local name=$1
  shift
  local t0 t1
  t0=$(date +%s.%N)
  if ! "$@" >"$log/$name.out" 2>"$log/$name.err"; then
    echo "ttft: $name failed:" >&2
    tail -n 20 "$log/$name.err" >&2
    exit 1
  fi
  t1=$(date +%s.%N)
  awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f\n", b - a }'
}

run_kiln() {
  timed kiln "$kiln" run -m "$text" --mmproj "$mmproj" --image "$image" -p "$prompt" -n 1 --temp 0 \
    -t "$threads" -c "$ctx"
}
run_mtmd() {
  timed mtmd "$mtmd" -m "$text" --mmproj "$mmproj" --image "$image" -p "$prompt" -n 1 --temp 0 \
    -t "$threads" -c "$ctx"
}

median() { sort -n | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

# untimed rounds first: the files into the page cache
for ((i = 1; i <= warm; i++)); do
  run_kiln >/dev/null
  [ -z "$mtmd" ] || run_mtmd >/dev/null
done
: >"$log/k" && : >"$log/m"
for ((i = 1; i <= reps; i++)); do
  k=$(run_kiln)
  echo "$k" >>"$log/k"
  if [ -n "$mtmd" ]; then
    m=$(run_mtmd)
    echo "$m" >>"$log/m"
    printf 'round %d: kiln %s s, llama-mtmd-cli %s s\n' "$i" "$k" "$m"
  else
    printf 'round %d: kiln %s s\n' "$i" "$k"
  fi
done
km=$(median <"$log/k")
printf 'time to first token, one image, -t %s, median of %d: kiln %.3f s' "$threads" "$reps" "$km"
if [ -n "$mtmd" ]; then
  mm=$(median <"$log/m")
  printf ', llama-mtmd-cli %.3f s, llama.cpp / kiln %.2fx\n' "$mm" "$(awk -v a="$mm" -v b="$km" 'BEGIN { print a / b }')"
else
  printf '\n'
fi
