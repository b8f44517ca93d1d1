#!/usr/bin/env bash
# Sets up, builds and runs every test: a release build with warnings as errors (every
# label, `browser` included: the HTML report in headless chromium), then an ASan+UBSan
# build that runs the unit, property and fuzz-corpus tests again (not `browser`, which
# tests the page, not the C++).
set -euo pipefail
cd "$(dirname "$0")/.."
# Each stage's heading says how long the one before took (docs/benchmarks.md, "Build time").
stage_start=$SECONDS
stage() {
  echo "== [$((SECONDS - stage_start)) s] $1 =="
  stage_start=$SECONDS
}
stage "setup (scripts/setup.sh)"
bash scripts/setup.sh
jobs=$(nproc)
# A compiler cache outside the tree: CI's clean checkout on a machine that has built before
# recompiles only what changed (both build trees). BASEDIR and NOHASHDIR let a checkout at
# another path hit the same entries; GANTRY_NO_CCACHE=1 builds without it.
launcher=()
if [[ -z "${GANTRY_NO_CCACHE:-}" ]] && command -v ccache >/dev/null; then
  export CCACHE_DIR="${CCACHE_DIR:-$HOME/.cache/ccache}" CCACHE_BASEDIR="$PWD" CCACHE_NOHASHDIR=true
  export CCACHE_MAXSIZE="${CCACHE_MAXSIZE:-5G}"
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
fi
# CMake 3.25's unity sources #include each file by its absolute path, so a checkout at
# another path would miss every cached object whatever CCACHE_BASEDIR says. A build tree not
# yet configured is therefore configured and built from one fixed link to this checkout
# (GANTRY_CHECKOUT_LINK, default ~/.cache/gantry/checkout), which this run points here and
# holds (flock) so that two checkouts cannot build through it at once; a tree configured
# before keeps the path it was configured from. build_tree PRESET ARGS... configures and
# builds from that path.
link="${GANTRY_CHECKOUT_LINK:-$HOME/.cache/gantry/checkout}"
link_held=""
build_tree() {
  local preset=$1 src
  shift
  src=$(sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' "build/$preset/CMakeCache.txt" 2>/dev/null || true)
  if [[ -z $src && ${#launcher[@]} == 0 ]]; then src=$PWD; fi
  if [[ -z $src || $src == "$link" ]]; then
    if [[ -z $link_held ]]; then
      mkdir -p "$(dirname "$link")"
      exec 9>"$link.lock"
      flock 9
      ln -sfn "$PWD" "$link"
      link_held=1
    fi
    src=$link
  fi
  (cd "$src" && export CCACHE_BASEDIR="$src" &&
     cmake --preset "$preset" -DGANTRY_WERROR=ON "${launcher[@]}" >/dev/null &&
     cmake --build --preset "$preset" -j "$jobs" "$@")
}
# The C++ is formatted by Debian's clang-format 14 with the project's .clang-format; a file
# that differs fails here, before anything is built (fix: clang-format -i FILE).
stage "format (clang-format --dry-run -Werror)"
find src tests bench \( -name '*.cc' -o -name '*.h' \) -not -path '*/corpus/*' -print0 |
  xargs -0 clang-format --dry-run -Werror
stage "release build (-Werror)"
build_tree release
stage "release tests (ctest --preset release)"
# One test more than cores: most of the integration tests wait on heartbeats and child
# processes, not the CPU (805 tests on 2 cores, 2026-12-02: 399 s at -j2, 291 s at -j3;
# the timed ones run alone, RUN_SERIAL, either way).
ctest --preset release -j "$((jobs + 1))"
# The real Kubernetes components (issue 45's test peers, built from their Go modules into a
# cache outside the tree: the first build on a machine takes ~7-10 min, later ones nothing),
# then a loopback cluster on them: etcd, kube-apiserver, kube-controller-manager, kwok.
stage "Kubernetes peers (scripts/k8s_peers.sh, tests/k8s/smoke.sh)"
bash scripts/k8s_peers.sh >/dev/null
bash tests/k8s/smoke.sh
stage "gantryd --kubernetes against the real kube-apiserver (tests/k8s/scheduler_test.py)"
# The side-by-side with kube-scheduler, the rebuild and the pod constraints benchmarks in
# their tiny modes (the bench label's rule, issue 49; here rather than in ctest because they
# need the peers built just above), on clusters of their own beside the scheduler's cases,
# which run on three clusters at once: all of them mostly wait on the API servers (241 s
# one after another, 106 s on three clusters; the first two benchmarks 49 s, the third
# about 35 s more).
k8s_bench_log=$(mktemp)
(python3 bench/k8s_side_by_side.py --tiny --out "$(mktemp -d)/k8s_side_by_side.json" &&
   python3 bench/k8s_rebuild.py --tiny && python3 bench/k8s_constraints.py --tiny) >"$k8s_bench_log" 2>&1 &
k8s_bench=$!
k8s_failed=0
python3 tests/k8s/scheduler_test.py --gantryd build/release/src/gantryd --jobs 3 || k8s_failed=1
if ! wait "$k8s_bench"; then
  cat "$k8s_bench_log"
  echo "test.sh: a Kubernetes benchmark's --tiny run failed (above)" >&2
  k8s_failed=1
fi
rm -f "$k8s_bench_log"
[[ $k8s_failed == 0 ]]
stage "ASan + UBSan build"
labels='unit|property|fuzz|golden'
build_tree asan-ubsan --target gantry_sanitized_tests  # their binaries only
stage "ASan + UBSan tests"
# Every test of those labels is there, as in the release build (a test binary the target
# missed would otherwise drop out of the sanitized run unnoticed).
count() { ctest --preset "$1" -N -L "$labels" | sed -n 's/^Total Tests: //p'; }
if [[ "$(count release)" != "$(count asan-ubsan)" ]]; then
  echo "test.sh: the ASan build has $(count asan-ubsan) tests labelled $labels, the release build $(count release):" \
       "a test binary is missing from the gantry_sanitized_tests target (CMakeLists.txt)" >&2
  exit 1
fi
GANTRY_PROPERTY_SEEDS="${GANTRY_PROPERTY_SEEDS_ASAN:-6}" ctest --preset asan-ubsan -j "$jobs" -L "$labels"
stage "done"
