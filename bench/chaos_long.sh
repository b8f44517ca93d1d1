#!/usr/bin/env bash
# The long chaos runs (issue 13, item 5): the CI chaos tests (tests/integration/chaos_test.cc),
# each repeated until its leader gantryd has been killed (-9) LEADER_KILLS times (default
# 100), with agent kills, freezes, link cuts and (SQLite) full disks mixed in, then every
# job's own logs checked.
#   bash bench/chaos_long.sh [LEADER_KILLS] [SEED] [TEST]   # TEST: a gtest filter, default both
# About 12 minutes per test for 100 kills.
#   bash bench/chaos_long.sh --tiny [TEST]
# The CI check that the script still works end to end (ctest -L bench): four events (a
# leader kill, an agent kill, a freeze, a link cut where network namespaces allow), seed
# 1, TEST default the SQLite one (about 20 s; it needs root for its tmpfs). Exits 1 unless the filter selected a test
# and every test it selected passed; 77 (ctest: skipped) when each was skipped. The
# output is also in BUILD/bench-tiny/chaos_long.log.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD:-build/release}
if [[ ${1:-} == --tiny ]]; then
  log=$build/bench-tiny/chaos_long.log
  mkdir -p "$(dirname "$log")"
  rc=0
  GANTRY_CHAOS_LEADER_KILLS=1 GANTRY_CHAOS_EVENTS=4 GANTRY_CHAOS_SEED=1 \
    "$build/tests/integration/integration_test" --gtest_filter="${2:-Chaos.OnSqlite*}" 2>&1 | tee "$log" ||
    rc=${PIPESTATUS[0]}
  ran=$(sed -n 's/^\[==========\] \([0-9]*\) tests\{0,1\} from .* ran\..*/\1/p' "$log")
  passed=$(sed -n 's/^\[  PASSED  \] \([0-9]*\) tests\{0,1\}\.$/\1/p' "$log")
  if [[ $rc -ne 0 ]]; then
    echo "chaos_long.sh --tiny: integration_test exited $rc" >&2; exit 1
  elif [[ ${ran:-0} -eq 0 ]]; then
    echo "chaos_long.sh --tiny: the filter ${2:-Chaos.OnSqlite*} selected no test" >&2; exit 1
  elif [[ ${passed:-0} -eq 0 ]]; then
    echo "chaos_long.sh --tiny: every test was skipped ($(grep -m1 -o 'Skipped.*' "$log" || true))" >&2; exit 77
  elif [[ $passed -ne $ran ]]; then
    echo "chaos_long.sh --tiny: $passed of $ran tests passed" >&2; exit 1
  fi
  echo "chaos_long.sh --tiny: ok ($passed of $ran passed: $(grep -m1 '^chaos: .* leader kills' "$log" | cut -c1-160))" >&2
  exit 0
fi
GANTRY_CHAOS_LEADER_KILLS=${1:-100} GANTRY_CHAOS_SEED=${2:-1} \
  "$build/tests/integration/integration_test" --gtest_filter="${3:-Chaos.*}"
