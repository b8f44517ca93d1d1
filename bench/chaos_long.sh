#!/usr/bin/env bash
# The long chaos run (issue 13, item 5): the CI chaos test, repeated until the leader
# gantryd has been killed (-9) LEADER_KILLS times (default 100), with agent kills and
# freezes mixed in, then every job's own logs checked (tests/integration/chaos_test.cc).
#   bash bench/chaos_long.sh [LEADER_KILLS] [SEED]     # ~10 minutes for 100 kills
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD:-build/release}
GANTRY_CHAOS_LEADER_KILLS=${1:-100} GANTRY_CHAOS_SEED=${2:-1} \
  "$build/tests/integration/integration_test" --gtest_filter='Chaos.*'
