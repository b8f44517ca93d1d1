#!/usr/bin/env bash
# Runs every benchmark of issue 5 with one command: builds the Release benchmark targets
# in build/bench, runs bench/core_bench (Google Benchmark: decisions/s, decision latency,
# scale curve) and bench/replay.sh (whole-trace replay: wall time, peak RSS, invariant
# checker), and prints the tables of docs/benchmarks.md. Not part of the test suite.
#
#   scripts/bench.sh [--quick] [--no-core] [--no-replay] [--big] [--jobs N]
#                    [--build DIR] [--out DIR] [--tiny]
#
#   --quick      3 passes per scheduling benchmark, the replay on 2,000 GPUs (~3 minutes;
#                the default run takes ~7)
#   --big        also the 1,000,000-job replay on 100,000 GPUs (issue 14's scale target:
#                gantry only, full passes at most every 10 s, stopped after an hour; its
#                trace alone is 200 MB)
#   --jobs N     build parallelism (default 1: the machine is shared)
#   --build DIR  use this build folder as it is: no configure, no build (it needs
#                src/gantry, tests/checker/gantry-check and bench/core_bench)
#   --out DIR    results under DIR/<UTC time>/ (default build/bench/results)
#   --tiny       the CI check that every part still works end to end (ctest -L bench),
#                in seconds: the build given (default build/release) as it is, core_bench
#                at one pass on the scheduling, placement and scale benchmarks up to
#                10,000 GPUs and 10,000 pending, bench/replay.sh --tiny, the --big replay
#                as a tiny one, results in DIR (default BUILD/bench-tiny/bench, its
#                results removed first); exits 1 unless summary.md has every table
#                (scheduling passes, placements, scale curve, replays with all three
#                runs, targets).
# Results go to build/bench/results/<UTC time>/ (core.json, replay.tsv, summary.md).
set -euo pipefail
cd "$(dirname "$0")/.."

args_given="$*"
quick=0 core=1 replay=1 big=0 jobs=1 tiny=0 build= out=
while [[ $# -gt 0 ]]; do
  case "$1" in
    --quick) quick=1; shift ;;
    --no-core) core=0; shift ;;
    --no-replay) replay=0; shift ;;
    --big) big=1; shift ;;
    --jobs) jobs=$2; shift 2 ;;
    --build) build=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --tiny) tiny=1; shift ;;
    -h|--help) sed -n '2,27p' "$0"; exit 0 ;;
    *) echo "bench.sh: unknown option $1" >&2; exit 2 ;;
  esac
done

stamp=$(date -u +%Y%m%dT%H%M%SZ)
if [[ $tiny -eq 1 ]]; then
  build=${build:-build/release}
  results=${out:-$build/bench-tiny/bench}
  mkdir -p "$results"
  rm -f "$results"/{machine.txt,core.json,core.txt,replay.tsv,summary.md}
  big=1
else
  results=${out:-${build:-build/bench}/results}/$stamp
fi
mkdir -p "$results"

if [[ -z $build ]]; then
  build=build/bench
  echo "== build (Release, $build) =="
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGANTRY_WERROR=OFF \
    -DGANTRY_BUILD_BENCH=ON > "$results/cmake.txt"
  cmake --build "$build" -j "$jobs" --target core_bench gantry gantry-check
else
  echo "== build: $build as it is =="
  for bin in src/gantry tests/checker/gantry-check bench/core_bench; do
    if [[ $bin == bench/core_bench && $core -eq 0 ]]; then continue; fi
    [[ -x $build/$bin ]] || { echo "bench.sh: no $build/$bin (bench/core_bench needs libbenchmark-dev)" >&2; exit 2; }
  done
fi

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
  if [[ $tiny -eq 1 ]]; then
    export GANTRY_BENCH_PASSES=1
    filter='^(schedule/|place/(first|best)/|scale/(fifo|gantry)/gpus:(1000|10000)/pending:(1000|10000)/|scale-place/(first|best)/gpus:(1000|10000)/)'
  fi
  "$build/bench/core_bench" --benchmark_filter="$filter" \
    --benchmark_out="$results/core.json" --benchmark_out_format=json \
    --benchmark_counters_tabular=false | tee "$results/core.txt"
fi

if [[ $replay -eq 1 ]]; then
  echo "== whole-trace replay =="
  args=(--build "$build" --out "$build/replay")
  if [[ $quick -eq 1 ]]; then args+=(--gpus 2000); fi
  if [[ $tiny -eq 1 ]]; then args=(--build "$build" --out "$results/replay" --tiny); fi
  bash bench/replay.sh "${args[@]}" | tee "$results/replay.tsv"
fi

if [[ $big -eq 1 ]]; then
  echo "== whole-trace replay, 1,000,000 jobs on 100,000 GPUs =="
  # With full passes at most every 10 s (policy.full_pass_interval_s), as a site of this
  # size would run it: a pass after every event visits a backlog of ~10,000 jobs (1,846 s
  # that way, docs/benchmarks.md).
  if [[ $tiny -eq 1 ]]; then
    bash bench/replay.sh --build "$build" --out "$results/replay" --tiny --policies gantry \
      --full-pass-interval 10 | tee -a "$results/replay.tsv"
  else
    bash bench/replay.sh --build "$build" --out "$build/replay" --gpus 100000 --policies gantry \
      --full-pass-interval 10 --timeout 3600 | tee -a "$results/replay.tsv"
  fi
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
if [[ $tiny -eq 1 ]]; then
  missing=() wants=('### Targets' '| gantry (full passes every 10 s) | ')
  [[ $core -eq 0 ]] || wants+=('### Scheduling passes' '| gantry-timed (wall) |' '### Single placements'
                               '| best (gantry) |' '### Scale curve' '**gantry** (rows: GPUs'
                               '**Single placements against cluster size**')
  [[ $replay -eq 0 ]] || wants+=('### Whole-trace replay' '| fifo | ' '| gantry | ' 'n/a (smaller run)')
  for want in "${wants[@]}"; do
    grep -qF -- "$want" "$results/summary.md" || missing+=("$want")
  done
  if [[ ${#missing[@]} -gt 0 ]]; then
    printf 'bench.sh --tiny: summary.md lacks: %s\n' "${missing[@]}" >&2
    exit 1
  fi
  echo "bench.sh --tiny: ok (every table in $results/summary.md)" >&2
fi
