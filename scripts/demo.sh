#!/usr/bin/env bash
# The main job: build kiln and generate text with the bundled model.
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
