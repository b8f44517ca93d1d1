#!/usr/bin/env bash
# Sets up, builds and runs every test: a release build with warnings as errors (every
# label, `browser` included: the HTML report in headless chromium), then an ASan+UBSan
# build that runs the unit, property and fuzz-corpus tests again (not `browser`, which
# tests the page, not the C++).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
jobs=$(nproc)
# The C++ is formatted by Debian's clang-format 14 with the project's .clang-format; a file
# that differs fails here, before anything is built (fix: clang-format -i FILE).
echo "== format (clang-format --dry-run -Werror) =="
find src tests bench \( -name '*.cc' -o -name '*.h' \) -not -path '*/corpus/*' -print0 |
  xargs -0 clang-format --dry-run -Werror
echo "== release build (-Werror) =="
cmake --preset release -DGANTRY_WERROR=ON >/dev/null
cmake --build --preset release -j "$jobs"
ctest --preset release -j "$jobs"
# The real Kubernetes components (issue 45's test peers, built from their Go modules into a
# cache outside the tree: the first build on a machine takes ~7-10 min, later ones nothing),
# then a loopback cluster on them: etcd, kube-apiserver, kube-controller-manager, kwok.
echo "== Kubernetes peers (scripts/k8s_peers.sh, tests/k8s/smoke.sh) =="
bash scripts/k8s_peers.sh >/dev/null
bash tests/k8s/smoke.sh
echo "== ASan + UBSan build =="
labels='unit|property|fuzz|golden'
cmake --preset asan-ubsan -DGANTRY_WERROR=ON >/dev/null
cmake --build --preset asan-ubsan -j "$jobs" --target gantry_sanitized_tests  # their binaries only
# Every test of those labels is there, as in the release build (a test binary the target
# missed would otherwise drop out of the sanitized run unnoticed).
count() { ctest --preset "$1" -N -L "$labels" | sed -n 's/^Total Tests: //p'; }
if [[ "$(count release)" != "$(count asan-ubsan)" ]]; then
  echo "test.sh: the ASan build has $(count asan-ubsan) tests labelled $labels, the release build $(count release):" \
       "a test binary is missing from the gantry_sanitized_tests target (CMakeLists.txt)" >&2
  exit 1
fi
GANTRY_PROPERTY_SEEDS="${GANTRY_PROPERTY_SEEDS_ASAN:-6}" ctest --preset asan-ubsan -j "$jobs" -L "$labels"
