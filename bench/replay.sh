#!/usr/bin/env bash
# Whole-trace replay benchmark (issue 5): generate a trace with `gantry gen`, replay it
# with `gantry sim` under each policy inside /usr/bin/time -v (wall seconds, peak RSS),
# and check every event log with the independent invariant checker (gantry-check).
#
#   bench/replay.sh [--build DIR] [--out DIR] [--seed N] [--gpus N] [--days D]
#                   [--load L] [--mix SPEC] [--policies "fifo gantry"] [--timeout S]
#                   [--full-pass-interval S] [--tiny]
#
# Defaults: 10,000 GPUs (1,250 GPU nodes of 8, leaves of 16, plus CPU nodes), 5 days at
# load 0.95, and a mix weighted to training and fine-tuning so the trace holds about
# 100,000 jobs (the default mix gives ~450,000 at this size: its many small inference
# and sweep jobs fill the same GPU-hours with more jobs). A run past --timeout (600 s)
# is stopped and reported as such. --full-pass-interval S runs with the config's
# `policy.full_pass_interval_s: S` (a full pass at most every S seconds: docs/policies.md,
# "Scheduling cycle"). Prints one tab-separated line per policy:
#   replay <policy> <jobs> <wall_s> <peak_rss_mib> <violations> <rc> <passes> <lat_p50_ms> <lat_p99_ms> <lat_max_ms> <cpu_s>
# (cpu_s: user + system seconds; on a shared machine wall time also counts waiting for a core)
# and leaves the files (trace, events, reports, time -v output) under --out.
# --tiny: the CI check that the script still works end to end (ctest -L bench): 64 GPUs,
# one day (a few hundred jobs, seconds), out under the build folder (DIR/bench-tiny/replay)
# unless --out is given; exits 1 unless every policy's line is there with exit 0, a
# number of jobs, 0 violations from gantry-check, and the report's pass latencies.
set -euo pipefail
cd "$(dirname "$0")/.."

build=build/bench
out=build/bench/replay
seed=5
gpus=10000
days=5
load=0.95
mix="realtime=0.025,batch=0.025,notebook=0.025,sweep=0.015,training=0.71,finetune=0.2"
policies="fifo gantry"
timeout_s=600
interval=
tiny=0 out_given=0 gpus_given= days_given=
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build) build=$2; shift 2 ;;
    --out) out=$2; out_given=1; shift 2 ;;
    --seed) seed=$2; shift 2 ;;
    --gpus) gpus=$2; gpus_given=1; shift 2 ;;
    --days) days=$2; days_given=1; shift 2 ;;
    --load) load=$2; shift 2 ;;
    --mix) mix=$2; shift 2 ;;
    --policies) policies=$2; shift 2 ;;
    --timeout) timeout_s=$2; shift 2 ;;
    --full-pass-interval) interval=$2; shift 2 ;;
    --tiny) tiny=1; shift ;;
    -h|--help) sed -n '2,23p' "$0"; exit 0 ;;
    *) echo "replay.sh: unknown option $1" >&2; exit 2 ;;
  esac
done

if [[ $tiny -eq 1 ]]; then  # sizes for a check, not a measurement (options given win)
  [[ -n $gpus_given ]] || gpus=64
  [[ -n $days_given ]] || days=1
  [[ $out_given -eq 1 ]] || out=$build/bench-tiny/replay
fi
gantry=$build/src/gantry
check=$build/tests/checker/gantry-check
for bin in "$gantry" "$check"; do
  [[ -x $bin ]] || { echo "replay.sh: $bin not built (cmake --build $build --target gantry gantry-check)" >&2; exit 2; }
done
[[ -x /usr/bin/time ]] || { echo "replay.sh: /usr/bin/time (GNU time) is needed for wall time and peak RSS" >&2; exit 2; }

gen=$out/gen-$gpus-$days-$load-$seed-$(printf %s "$mix" | cksum | cut -d" " -f1)
if [[ ! -s $gen/trace.jsonl || ! -s $gen/gen.txt || $gantry -nt $gen/trace.jsonl ]]; then  # cached per options
  mkdir -p "$gen"
  "$gantry" gen --seed "$seed" --gpus "$gpus" --days "$days" --load "$load" --mix "$mix" \
    --out "$gen" > "$gen/gen.txt"
fi
sed 's/^/# /' "$gen/gen.txt" >&2
jobs=$(wc -l < "$gen/trace.jsonl")
config=$gen/cluster.yaml
if [[ -n $interval ]]; then  # gen writes a policy section (added when it has none)
  config=$gen/cluster-interval-$interval.yaml
  if grep -q '^policy:$' "$gen/cluster.yaml"; then
    sed "/^policy:\$/a\\  full_pass_interval_s: $interval" "$gen/cluster.yaml" > "$config"
  else
    printf '%s\npolicy:\n  full_pass_interval_s: %s\n' "$(cat "$gen/cluster.yaml")" "$interval" > "$config"
  fi
fi

failed=0
for policy in $policies; do
  run=$gen/$policy${interval:+-interval-$interval}
  mkdir -p "$run"
  rc=0
  /usr/bin/time -v -o "$run/time.txt" timeout "$timeout_s" "$gantry" sim \
    --config "$config" --trace "$gen/trace.jsonl" --failures "$gen/failures.jsonl" \
    --policy "$policy" --events "$run/events.jsonl" --report "$run/report.json" \
    > "$run/sim.txt" 2>&1 || rc=$?
  wall=$(awk -F': ' '/Elapsed \(wall clock\)/ {
           n = split($2, t, ":"); s = 0; for (i = 1; i <= n; i++) s = s * 60 + t[i]; print s }' "$run/time.txt")
  cpu=$(awk -F': ' '/User time|System time/ { s += $2 } END { printf "%.2f", s }' "$run/time.txt")
  rss_mib=$(awk -F': ' '/Maximum resident set size/ { printf "%.0f", $2 / 1024 }' "$run/time.txt")
  violations=-
  passes=- p50=- p99=- max=-
  if [[ $rc -eq 0 ]]; then
    vrc=0
    "$check" --config "$config" --trace "$gen/trace.jsonl" --failures "$gen/failures.jsonl" \
      --events "$run/events.jsonl" --report "$run/report.json" --max 20 > "$run/check.txt" 2>&1 || vrc=$?
    violations=$(grep -Eo '^[0-9]+ violations?' "$run/check.txt" | tail -1 | cut -d' ' -f1 || true)
    [[ -n $violations ]] || violations="error($vrc)"
    read -r passes p50 p99 max < <(python3 -c '
import json, sys
lat = json.load(open(sys.argv[1])).get("scheduling_latency_ms", {})
print(lat.get("passes", "-"), lat.get("p50", "-"), lat.get("p99", "-"), lat.get("max", "-"))' "$run/report.json")
  fi
  printf 'replay\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' \
    "$policy${interval:+ (full passes every $interval s)}" "$jobs" "$wall" "$rss_mib" "$violations" "$rc" "$passes" "$p50" "$p99" "$max" "$cpu"
  if [[ $tiny -eq 1 ]]; then
    num='^[0-9]+([.][0-9]+)?$'
    if [[ $rc != 0 || $violations != 0 || ! $jobs -gt 0 || ! $wall =~ $num || ! $rss_mib =~ $num ||
          ! $passes -gt 0 || ! $p50 =~ $num || ! $p99 =~ $num || ! $max =~ $num || ! $cpu =~ $num ]]; then
      echo "replay.sh --tiny: $policy: a figure is missing or wrong (exit $rc, $violations violations;" \
           "see $run/sim.txt and $run/check.txt)" >&2
      failed=1
    fi
  fi
done
if [[ $tiny -eq 1 ]]; then
  [[ $failed -eq 0 ]] || exit 1
  echo "replay.sh --tiny: ok ($policies: every line complete, 0 violations)" >&2
fi
