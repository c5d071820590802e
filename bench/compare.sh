#!/usr/bin/env bash
# Side-by-side speed: kiln bench and, when one is installed, llama-bench on
# the same GGUF files with the same threads, then the ratios.
#
#   bench/compare.sh [-t THREADS] [-p 512] [-n 128] [-r 3] [-d DEPTH] [-g [-c 4096]] MODEL.gguf...
#
# -d runs the tests after DEPTH cached tokens (both tools' -d); a llama-bench
# without -d fails that run, and its column shows '-'.
#
# -g also checks the performance goals, one row per model: tg and pp
# against llama.cpp (at least 1.10x and 1.0x), the share of the decode
# roofline (kiln bench --roofline, at least 85 %), 8 streams against one
# (kiln bench -s 1,8, at least 4x), and the time and peak RSS of a
# one-token `run` with a context of -c tokens (4096) against llama-cli's (no
# worse).  With -g the exit status is 3 when a measured goal is not met (the
# table is printed first), so a check can fail on it.
#
# llama-bench is looked up as $LLAMA_BENCH, then on PATH; llama-cli as
# $LLAMA_CLI, then beside llama-bench, then on PATH.  This script never
# builds llama.cpp.  kiln is $KILN_BIN or build/kiln.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
kiln=${KILN_BIN:-$here/build/kiln}
llama=${LLAMA_BENCH:-$(command -v llama-bench || true)}
threads=2 pp=512 tg=128 reps=3 depth= goals= ctx=4096
usage="usage: $0 [-t N] [-p N] [-n N] [-r N] [-d N] [-g [-c N]] MODEL.gguf..."
while getopts "t:p:n:r:d:gc:" opt; do
  case $opt in
    t) threads=$OPTARG ;; p) pp=$OPTARG ;; n) tg=$OPTARG ;; r) reps=$OPTARG ;; d) depth=$OPTARG ;; g) goals=1 ;;
    c) ctx=$OPTARG ;;
    *) echo "$usage" >&2; exit 2 ;;
  esac
done
shift $((OPTIND - 1))
[ $# -gt 0 ] || { echo "$usage" >&2; exit 2; }
cli=${LLAMA_CLI:-}
if [ -z "$cli" ] && [ -n "$llama" ] && [ -x "$(dirname "$llama")/llama-cli" ]; then cli=$(dirname "$llama")/llama-cli; fi
[ -n "$cli" ] || cli=$(command -v llama-cli || true)
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
  [ -n "$goals" ] || continue
  "$kiln" bench -m "$m" -t "$threads" -p 0 -n "$tg" -s 1,8 -r "$reps" --roofline -o json > "$tmp/$b.x8.json"
  # seconds and peak RSS (KiB) of one run each, from a fresh process so the
  # children's maximum is this command's alone
  measure() {
    python3 -c 'import resource, subprocess, sys, time
t = time.time()
r = subprocess.run(sys.argv[1:], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
print("%.3f %d %d" % (time.time() - t, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, r.returncode))' "$@"
  }
  measure "$kiln" run -m "$m" -p "Once upon a time" -n 1 -t "$threads" -c "$ctx" > "$tmp/$b.kiln.load"
  if [ -n "$cli" ]; then
    measure "$cli" -m "$m" -p "Once upon a time" -n 1 -t "$threads" -c "$ctx" -no-cnv > "$tmp/$b.llama.load"
  fi
done
GOALS=$goals TG=$tg PP=$pp python3 - "$tmp" "$@" <<'PY'
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
if os.environ.get("GOALS"):
    tg, pp = "tg" + os.environ["TG"], "pp" + os.environ["PP"]
    def measured(path):
        try:
            secs, kib, rc = open(path).read().split()
            return (float(secs), int(kib) / 1024.0) if rc == "0" else None
        except (OSError, ValueError):
            return None
    print()
    print("| model | tg vs llama.cpp (>= 1.10) | pp vs llama.cpp (>= 1.0) | roofline (>= 85 %%) | %s x8 / x1 (>= 4) "
          "| load s, kiln / llama.cpp | peak RSS MiB, kiln / llama.cpp | met of measured |" % tg)
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    missed = False
    for m in models:
        b = os.path.basename(m)
        k = {r["test"]: r for r in load(os.path.join(tmp, b + ".kiln.json"))}
        l = {llama_test(r): r for r in load(os.path.join(tmp, b + ".llama.json"))}
        x = {r["test"]: r for r in load(os.path.join(tmp, b + ".x8.json"))}
        cells, met, total = [], 0, 0
        def goal(value, ok, text):  # value None: not measured, so neither met nor missed
            global met, total
            if value is None:
                cells.append("-")
                return
            total += 1
            met += ok
            cells.append(text + ("" if ok else " (not met)"))
        for t, floor in ((tg, 1.10), (pp, 1.0)):
            r = t in k and t in l and l[t]["avg_ts"] and k[t]["avg_ts"] / l[t]["avg_ts"]
            goal(r or None, bool(r) and r >= floor, "%.2f" % r if r else "")
        share = x.get(tg, {}).get("roofline_share")
        goal(share, share is not None and share >= 0.85, "%.0f %%" % (100 * share) if share is not None else "")
        one, eight = x.get(tg, {}).get("avg_ts"), x.get(tg + " x8", {}).get("avg_ts")
        r = eight / one if one and eight else None
        goal(r, r is not None and r >= 4.0, "%.2f" % r if r else "")
        kl, ll = measured(os.path.join(tmp, b + ".kiln.load")), measured(os.path.join(tmp, b + ".llama.load"))
        both = kl and ll
        goal(both or None, bool(both) and kl[0] <= ll[0], "%.2f / %.2f" % (kl[0], ll[0]) if both else "")
        goal(both or None, bool(both) and kl[1] <= ll[1], "%.0f / %.0f" % (kl[1], ll[1]) if both else "")
        print("| %s | %s | %d of %d |" % (b, " | ".join(cells), met, total))
        missed = missed or met < total
    sys.exit(3 if missed else 0)
PY
