#!/usr/bin/env bash
# Runs every benchmark of issue 5 with one command: builds the Release benchmark targets
# in build/bench, runs bench/core_bench (Google Benchmark: decisions/s, decision latency,
# scale curve) and bench/replay.sh (whole-trace replay: wall time, peak RSS, invariant
# checker), and prints the tables of docs/benchmarks.md. Not part of the test suite.
#
#   scripts/bench.sh [--quick] [--no-core] [--no-replay] [--big] [--jobs N]
#
#   --quick      3 passes per scheduling benchmark, the replay on 2,000 GPUs (~3 minutes;
#                the default run takes ~7)
#   --big        also the 1,000,000-job replay on 100,000 GPUs (issue 14's scale target:
#                gantry only, full passes at most every 10 s, stopped after an hour; its
#                trace alone is 200 MB)
#   --jobs N     build parallelism (default 1: the machine is shared)
# Results go to build/bench/results/<UTC time>/ (core.json, replay.tsv, summary.md).
set -euo pipefail
cd "$(dirname "$0")/.."

args_given="$*"
quick=0 core=1 replay=1 big=0 jobs=1
while [[ $# -gt 0 ]]; do
  case "$1" in
    --quick) quick=1; shift ;;
    --no-core) core=0; shift ;;
    --no-replay) replay=0; shift ;;
    --big) big=1; shift ;;
    --jobs) jobs=$2; shift 2 ;;
    -h|--help) sed -n '2,15p' "$0"; exit 0 ;;
    *) echo "bench.sh: unknown option $1" >&2; exit 2 ;;
  esac
done

build=build/bench
stamp=$(date -u +%Y%m%dT%H%M%SZ)
results=$build/results/$stamp
mkdir -p "$results"

echo "== build (Release, $build) =="
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGANTRY_WERROR=OFF \
  -DGANTRY_BUILD_BENCH=ON > "$results/cmake.txt"
cmake --build "$build" -j "$jobs" --target core_bench gantry gantry-check

{
  echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo "commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet HEAD 2>/dev/null || echo ' (with uncommitted changes)')"
  echo "cpu: $(lscpu | sed -n 's/^Model name: *//p' | head -1), $(nproc) CPUs online"
  echo "memory: $(free -g | awk '/^Mem:/ {print $2 " GiB total, " $7 " GiB available"}')"
  echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "compiler: $(c++ --version | head -1)"
} | tee "$results/machine.txt"

if [[ $core -eq 1 ]]; then
  echo "== core benchmarks =="
  filter='.*'
  if [[ $quick -eq 1 ]]; then export GANTRY_BENCH_PASSES=3; fi
  "$build/bench/core_bench" --benchmark_filter="$filter" \
    --benchmark_out="$results/core.json" --benchmark_out_format=json \
    --benchmark_counters_tabular=false | tee "$results/core.txt"
fi

if [[ $replay -eq 1 ]]; then
  echo "== whole-trace replay =="
  args=(--build "$build" --out "$build/replay")
  if [[ $quick -eq 1 ]]; then args+=(--gpus 2000); fi
  bash bench/replay.sh "${args[@]}" | tee "$results/replay.tsv"
fi

if [[ $big -eq 1 ]]; then
  echo "== whole-trace replay, 1,000,000 jobs on 100,000 GPUs =="
  # With full passes at most every 10 s (policy.full_pass_interval_s), as a site of this
  # size would run it: a pass after every event visits a backlog of ~10,000 jobs (1,846 s
  # that way, docs/benchmarks.md).
  bash bench/replay.sh --build "$build" --out "$build/replay" --gpus 100000 --policies gantry \
    --full-pass-interval 10 --timeout 3600 | tee -a "$results/replay.tsv"
fi

{
  echo "Command: scripts/bench.sh $args_given"
  echo
  sed 's/^/    /' "$results/machine.txt"
  echo
  python3 bench/summarize.py "$results/core.json" "$results/replay.tsv"
} > "$results/summary.md"
echo "== summary ($results/summary.md) =="
cat "$results/summary.md"
