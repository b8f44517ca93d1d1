#!/usr/bin/env bash
# Sets up, builds and runs every test: a release build with warnings as errors (every
# label, `browser` included: the HTML report in headless chromium), then an ASan+UBSan
# build that runs the unit, property and fuzz-corpus tests again (not `browser`, which
# tests the page, not the C++).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
jobs=$(nproc)
echo "== release build (-Werror) =="
cmake --preset release -DGANTRY_WERROR=ON >/dev/null
cmake --build --preset release -j "$jobs"
ctest --preset release -j "$jobs"
echo "== ASan + UBSan build =="
cmake --preset asan-ubsan -DGANTRY_WERROR=ON >/dev/null
cmake --build --preset asan-ubsan -j "$jobs"
GANTRY_PROPERTY_SEEDS="${GANTRY_PROPERTY_SEEDS_ASAN:-6}" ctest --preset asan-ubsan -j "$jobs" -L 'unit|property|fuzz|golden'
