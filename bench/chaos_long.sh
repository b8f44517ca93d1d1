#!/usr/bin/env bash
# The long chaos runs (issue 13, item 5): the CI chaos tests (tests/integration/chaos_test.cc),
# each repeated until its leader gantryd has been killed (-9) LEADER_KILLS times (default
# 100), with agent kills, freezes, link cuts and (SQLite) full disks mixed in, then every
# job's own logs checked.
#   bash bench/chaos_long.sh [LEADER_KILLS] [SEED] [TEST]   # TEST: a gtest filter, default both
# About 12 minutes per test for 100 kills.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD:-build/release}
GANTRY_CHAOS_LEADER_KILLS=${1:-100} GANTRY_CHAOS_SEED=${2:-1} \
  "$build/tests/integration/integration_test" --gtest_filter="${3:-Chaos.*}"
