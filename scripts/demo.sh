#!/usr/bin/env bash
# Sets up, builds and runs Gantry's main job on the bundled example: a small cluster
# and trace (examples/) replayed through the scheduler, with the report summary printed.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cmake --preset release >/dev/null
cmake --build --preset release --target gantry
mkdir -p out
./build/release/src/gantry sim --events out/example-events.jsonl --report out/example-report.json \
  --html out/example-report.html "$@"
