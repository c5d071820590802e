#!/usr/bin/env bash
# Word error rate of the bundled demo model (models/whisper-espeak.bin) on
# held-out espeak-ng clips (tests/data/whisper/espeak/, texts in
# transcripts.tsv), through `kiln transcribe` as a user runs it (default
# decoding: beam search, temperature fallback).  Fails above KILN_WER_MAX
# percent (default 10).  -v lists the clips with errors.  KILN_WER_MODEL
# measures another model file (a retrained one) on the same clips;
# KILN_WER_ARGS adds decoding options (say --beam-size 1 --no-fallback).
#   KILN_BIN=build/kiln tests/whisper_wer.sh [-v]
set -euo pipefail
model=$(realpath "${KILN_WER_MODEL:-$(dirname "$0")/../models/whisper-espeak.bin}")
bin=$(realpath "${KILN_BIN:-$(dirname "$0")/../build/kiln}")
cd "$(dirname "$0")"
dir=data/whisper/espeak
max=${KILN_WER_MAX:-10}
out=$(mktemp)
trap 'rm -f "$out"' EXIT
files=()
while IFS=$'\t' read -r f _; do files+=("$dir/$f"); done < "$dir/transcripts.tsv"
# one process for every clip; the txt output puts "==> FILE <==" before each
# shellcheck disable=SC2086
"$bin" transcribe -m "$model" -q -t 2 ${KILN_WER_ARGS:-} "${files[@]}" > "$out"
rc=0
awk -v max="$max" -v verbose="${1:-}" -v dir="$dir/" '
  function norm(s) { s = tolower(s); gsub(/[^a-z0-9 ]/, " ", s); gsub(/ +/, " ", s); sub(/^ /, "", s); sub(/ $/, "", s); return s }
  FNR == NR { split($0, a, "\t"); ref[dir a[1]] = norm(a[2]); next }
  /^==> .* <==$/ { cur = substr($0, 5, length($0) - 8); next }
  /^$/ { next }
  { hyp[cur] = hyp[cur] " " $0 }
  END {
    for (f in ref) {
      n = split(ref[f], r, " "); m = split(norm(hyp[f]), h, " ")
      for (j = 0; j <= m; j++) d[0, j] = j
      for (i = 1; i <= n; i++) {
        d[i, 0] = i
        for (j = 1; j <= m; j++) {
          c = d[i-1, j-1] + (r[i] != h[j]); if (d[i-1, j] + 1 < c) c = d[i-1, j] + 1; if (d[i, j-1] + 1 < c) c = d[i, j-1] + 1
          d[i, j] = c
        }
      }
      errs += d[n, m]; words += n; clips++
      if (verbose != "" && d[n, m] > 0) printf "%s: \"%s\" -> \"%s\"\n", f, ref[f], norm(hyp[f])
    }
    wer = words ? 100.0 * errs / words : 100
    printf "WER %.1f %% (%d errors in %d words, %d clips)\n", wer, errs, words, clips
    exit wer <= max ? 0 : 1
  }' "$dir/transcripts.tsv" "$out" || rc=1
exit $rc
