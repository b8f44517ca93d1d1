#!/usr/bin/env bash
# Sets up, builds and runs every test: a release build with warnings as errors (every
# label, `browser` included: the HTML report in headless chromium), then an ASan+UBSan
# build (compiled beside the integration tests, at low priority) that runs the unit,
# property and fuzz-corpus tests again (not `browser`, which tests the page, not the C++).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
jobs=$(nproc)
echo "== release build (-Werror) =="
cmake --preset release -DGANTRY_WERROR=ON >/dev/null
cmake --build --preset release -j "$jobs"
ctest --preset release -j "$jobs" -LE integration
# The integration tests run one at a time and mostly wait (on heartbeats, leases, child
# processes): the ASan build runs beside them at the lowest CPU priority, so that it
# yields the CPU whenever a test wants it (on CI's 2 cores this saves about 3 minutes;
# measured: the integration tests 280 s alone, 287 s beside it, all passing).
echo "== integration tests, with the ASan + UBSan build beside them (nice 19) =="
labels='unit|property|fuzz|golden'
cmake --preset asan-ubsan -DGANTRY_WERROR=ON >/dev/null
asan_log=build/asan-ubsan-build.log
nice -n 19 cmake --build --preset asan-ubsan -j "$jobs" --target gantry_sanitized_tests >"$asan_log" 2>&1 &  # their binaries only
asan_build=$!
integration=0
ctest --preset release -L integration || integration=$?
asan=0
wait "$asan_build" || asan=$?
echo "== ASan + UBSan build (ran beside the integration tests) =="
cat "$asan_log"
if [[ $integration -ne 0 || $asan -ne 0 ]]; then
  echo "test.sh: integration tests exit $integration, ASan build exit $asan" >&2
  exit 1
fi
# Every test of those labels is there, as in the release build (a test binary the target
# missed would otherwise drop out of the sanitized run unnoticed).
count() { ctest --preset "$1" -N -L "$labels" | sed -n 's/^Total Tests: //p'; }
if [[ "$(count release)" != "$(count asan-ubsan)" ]]; then
  echo "test.sh: the ASan build has $(count asan-ubsan) tests labelled $labels, the release build $(count release):" \
       "a test binary is missing from the gantry_sanitized_tests target (CMakeLists.txt)" >&2
  exit 1
fi
GANTRY_PROPERTY_SEEDS="${GANTRY_PROPERTY_SEEDS_ASAN:-6}" ctest --preset asan-ubsan -j "$jobs" -L "$labels"
