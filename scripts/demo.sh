#!/usr/bin/env bash
# The main job: build kiln and generate text with the bundled model; then
# speech to text with the small demo model on held-out espeak-ng clips.
#   bash scripts/demo.sh ["prompt"]
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc)" --target kiln >/dev/null
prompt=${1:-"Once upon a time"}
echo "kiln run -m models/stories260K.gguf -p \"$prompt\" -n 120" >&2
./build/kiln run -m models/stories260K.gguf -p "$prompt" -n 120 --temp 0.7 --seed 42
echo

# Speech to text: models/whisper-espeak.bin (trained by tests/train_whisper.py)
# on clips it never heard, beside the text espeak-ng read.
clips=tests/data/whisper/espeak
echo >&2
echo "kiln transcribe -m models/whisper-espeak.bin $clips/clip10.wav (and two more held-out clips)" >&2
for c in clip10 clip12 clip35; do
  said=$(awk -F'\t' -v f="$c.wav" '$1 == f { print $2 }' "$clips/transcripts.tsv")
  heard=$(./build/kiln transcribe -m models/whisper-espeak.bin -q "$clips/$c.wav")
  printf '%s.wav  espeak-ng said: %-30s kiln heard: %s\n' "$c" "\"$said\"" "\"${heard# }\""
done


# Text to image: models/shapes-256 (trained by tests/gen_image.py --demo on
# pictures of coloured shapes; look at the PNG it writes).
echo >&2
echo "kiln image -m models/shapes-256 -p \"a yellow circle on a red background\" -o build/shapes.png" >&2
./build/kiln image -m models/shapes-256 -p "a yellow circle on a red background" --seed 444 -o build/shapes.png -t "$(nproc)"
