#!/usr/bin/env bash
# Side-by-side speed: kiln bench and, when one is installed, llama-bench on
# the same GGUF files with the same threads, then the ratios.
#
#   bench/compare.sh [-t THREADS] [-p 512] [-n 128] [-r 3] [-d DEPTH] MODEL.gguf...
#
# -d runs the tests after DEPTH cached tokens (both tools' -d); a llama-bench
# without -d fails that run, and its column shows '-'.
#
# llama-bench is looked up as $LLAMA_BENCH, then on PATH; this script never
# builds llama.cpp.  kiln is $KILN_BIN or build/kiln.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
kiln=${KILN_BIN:-$here/build/kiln}
llama=${LLAMA_BENCH:-$(command -v llama-bench || true)}
threads=2 pp=512 tg=128 reps=3 depth=
while getopts "t:p:n:r:d:" opt; do
  case $opt in
    t) threads=$OPTARG ;; p) pp=$OPTARG ;; n) tg=$OPTARG ;; r) reps=$OPTARG ;; d) depth=$OPTARG ;;
    *) echo "usage: $0 [-t N] [-p N] [-n N] [-r N] [-d N] MODEL.gguf..." >&2; exit 2 ;;
  esac
done
shift $((OPTIND - 1))
[ $# -gt 0 ] || { echo "usage: $0 [-t N] [-p N] [-n N] [-r N] [-d N] MODEL.gguf..." >&2; exit 2; }
[ -x "$kiln" ] || { echo "compare: $kiln not built (cmake --build build)" >&2; exit 1; }
[ -n "$llama" ] || echo "compare: llama-bench not found (set LLAMA_BENCH); kiln figures only" >&2

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for m in "$@"; do
  b=$(basename "$m")
  "$kiln" bench -m "$m" -t "$threads" -p "$pp" -n "$tg" -r "$reps" ${depth:+-d "$depth"} -o json > "$tmp/$b.kiln.json"
  if [ -n "$llama" ]; then
    "$llama" -m "$m" -t "$threads" -p "$pp" -n "$tg" -r "$reps" ${depth:+-d "$depth"} -o json > "$tmp/$b.llama.json" 2>/dev/null || true
  fi
done
python3 - "$tmp" "$@" <<'PY'
import json, os, sys
tmp, models = sys.argv[1], sys.argv[2:]
def load(p):
    try:
        with open(p) as f:
            return json.load(f)
    except (OSError, ValueError):
        return []
def llama_test(row):
    # llama-bench rows carry n_prompt / n_gen / n_depth instead of a test
    # name; kiln names them as llama-bench prints them
    at = " @ d%d" % row["n_depth"] if row.get("n_depth", 0) else ""
    if row.get("n_gen", 0) == 0: return "pp%d%s" % (row.get("n_prompt", 0), at)
    if row.get("n_prompt", 0) == 0: return "tg%d%s" % (row.get("n_gen", 0), at)
    return "pp%d+tg%d%s" % (row["n_prompt"], row["n_gen"], at)
print("| model | test | kiln t/s | llama.cpp t/s | kiln / llama.cpp |")
print("| --- | --- | ---: | ---: | ---: |")
for m in models:
    b = os.path.basename(m)
    k = {r["test"]: r for r in load(os.path.join(tmp, b + ".kiln.json"))}
    l = {llama_test(r): r for r in load(os.path.join(tmp, b + ".llama.json"))}
    for test, r in k.items():
        ks = "%.2f ± %.2f" % (r["avg_ts"], r["stddev_ts"])
        if test in l:
            lr = l[test]
            ls = "%.2f ± %.2f" % (lr["avg_ts"], lr["stddev_ts"])
            ratio = "%.2f" % (r["avg_ts"] / lr["avg_ts"]) if lr["avg_ts"] else "-"
        else:
            ls, ratio = "-", "-"
        print("| %s | %s | %s | %s | %s |" % (b, test, ks, ls, ratio))
PY
