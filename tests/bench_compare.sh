#!/usr/bin/env bash
# bench/compare.sh against a stand-in llama-bench: rows are matched by test
# name, depth included, and a llama-bench that refuses -d leaves '-'.
# Runs kiln bench on the bundled model for a few tokens (KILN_BIN).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
: "${KILN_BIN:?KILN_BIN is the kiln binary}"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
model=$here/models/stories260K.gguf

# Answers like llama-bench -o json: one row per test, 10 t/s each; with
# REFUSE_D set it fails on -d as an older llama-bench does.
cat > "$tmp/llama-bench" <<'FAKE'
#!/usr/bin/env bash
p=512 n=128 d=0
while [ $# -gt 0 ]; do
  case $1 in
    -p) p=$2; shift ;; -n) n=$2; shift ;;
    -d) [ -z "${REFUSE_D:-}" ] || { echo "error: invalid parameter for argument: -d" >&2; exit 1; }; d=$2; shift ;;
  esac
  shift
done
rows=()
[ "$p" -gt 0 ] && rows+=("{\"n_prompt\": $p, \"n_gen\": 0, \"n_depth\": $d, \"avg_ts\": 10.0, \"stddev_ts\": 0.5}")
[ "$n" -gt 0 ] && rows+=("{\"n_prompt\": 0, \"n_gen\": $n, \"n_depth\": $d, \"avg_ts\": 10.0, \"stddev_ts\": 0.5}")
(IFS=,; echo "[${rows[*]}]")
FAKE
chmod +x "$tmp/llama-bench"

fail=0
expect() { # output, pattern, what
  if grep -Eq -- "$2" <<<"$1"; then echo "ok: $3"; else echo "FAIL: $3"; echo "$1"; fail=1; fi
}
run() { KILN_BIN=$KILN_BIN LLAMA_BENCH=$tmp/llama-bench bash "$here/bench/compare.sh" -t 1 -r 1 "$@" "$model"; }

out=$(run -p 8 -n 4)
expect "$out" '\| stories260K.gguf \| pp8 \| [0-9.]+ ± [0-9.]+ \| 10\.00 ± 0\.50 \| [0-9.]+ \|' "pp8 matched"
expect "$out" '\| tg4 \| [0-9.]+ ± [0-9.]+ \| 10\.00 ± 0\.50 \| [0-9.]+ \|' "tg4 matched"

out=$(run -p 0 -n 4 -d 16)
expect "$out" '\| tg4 @ d16 \| [0-9.]+ ± [0-9.]+ \| 10\.00 ± 0\.50 \| [0-9.]+ \|' "tg4 @ d16 matched by depth"

out=$(REFUSE_D=1 run -p 0 -n 4 -d 16)
expect "$out" '\| tg4 @ d16 \| [0-9.]+ ± [0-9.]+ \| - \| - \|' "a llama-bench without -d leaves '-'"

# -g: the goals row.  The stand-in llama-bench gives 10 t/s, far below
# kiln on this model, and the stand-in llama-cli holds 600 MiB for half a
# second, more than kiln's run takes; the roofline share and 8 streams are
# kiln's own figures, met or not.
cat > "$tmp/llama-cli" <<'FAKE'
#!/usr/bin/env bash
exec python3 -c 'import time; b = bytearray(600 << 20); time.sleep(0.5)'
FAKE
chmod +x "$tmp/llama-cli"
# The exit status is 3 exactly when the row has a goal not met.
goals_rc() { # output, status, what
  if grep -q '(not met)' <<<"$1"; then want=3; else want=0; fi
  if [ "$2" = "$want" ]; then echo "ok: $3: exit $2"; else echo "FAIL: $3: exit $2, want $want"; fail=1; fi
}
rc=0
out=$(LLAMA_CLI=$tmp/llama-cli run -p 8 -n 4 -g -c 256) || rc=$?
expect "$out" '\| stories260K.gguf \| [0-9.]+ \| [0-9.]+ \| [0-9]+ %( \(not met\))? \| [0-9.]+( \(not met\))? \| [0-9.]+ / [0-9.]+ \| [0-9]+ / 6[0-9][0-9] \| [4-6] of 6 \|' "goals row"
goals_rc "$out" "$rc" "goals row"
# a llama.cpp far faster than kiln: tg and pp are not met, and the check fails
sed -i 's/: 10.0,/: 1e9,/g' "$tmp/llama-bench"
rc=0
out=$(LLAMA_CLI=$tmp/llama-cli run -p 8 -n 4 -g -c 256) || rc=$?
expect "$out" '\| stories260K.gguf \| [0-9.]+ \(not met\) \| [0-9.]+ \(not met\) \|' "goals not met"
[ "$rc" = 3 ] && echo "ok: goals not met: exit 3" || { echo "FAIL: goals not met: exit $rc, want 3"; fail=1; }
sed -i 's/: 1e9,/: 10.0,/g' "$tmp/llama-bench"
# without llama.cpp its four goals are not measured
rc=0
out=$(KILN_BIN=$KILN_BIN LLAMA_BENCH=/nonexistent bash "$here/bench/compare.sh" -t 1 -r 1 -p 8 -n 4 -g -c 256 "$model" 2>/dev/null) || rc=$?
expect "$out" '\| stories260K.gguf \| - \| - \| [0-9]+ %.* \| [0-9.]+.* \| - \| - \| [0-2] of 2 \|' "without llama.cpp"
goals_rc "$out" "$rc" "without llama.cpp"
exit $fail
