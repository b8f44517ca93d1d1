#!/usr/bin/env bash
# Converts every public trace with job-level data (../shared/traces by default), runs
# `gantry sim --policy fifo` on each and checks each run with gantry-check when it is
# built. Writes everything under OUT (default /tmp/gantry-trace-runs), never into the
# repository, and prints one tab-separated line per run:
#   family  run  jobs  gpus  sim_wall_s  violations  finished  rejected
# (also appended to OUT/runs.tsv, emptied first).
# Usage: scripts/trace_runs.sh [GANTRY] [GANTRY_CHECK] [TRACES] [OUT]
#        scripts/trace_runs.sh --tiny [BUILD] [OUT]
# The table in docs/traces.md groups these lines by family.
# --tiny: the CI check that the script still works end to end (ctest -L bench), in a few
# seconds, without the public traces: tests/bench/tiny_traces.py writes a stand-in tree
# (every family and folder this script reads, a few dozen made-up rows per file, in each
# source format) to OUT/traces, and the generator runs are small (64 and 128 GPUs, 1-2
# days). BUILD (default build/release) holds src/gantry and tests/checker/gantry-check;
# OUT defaults to BUILD/bench-tiny/trace_runs. Exits 1 unless every run's line is there
# with jobs, 0 violations, finished jobs and no failure.
set -uo pipefail
TINY=0
if [ "${1:-}" = --tiny ]; then
  TINY=1
  build=${2:-build/release}
  GANTRY=$build/src/gantry
  CHECK=$build/tests/checker/gantry-check
  OUT=${3:-$build/bench-tiny/trace_runs}
  TRACES=$OUT/traces
  for bin in "$GANTRY" "$CHECK"; do
    [ -x "$bin" ] || { echo "trace_runs.sh --tiny: no $bin" >&2; exit 2; }
  done
  rm -rf "$TRACES"
  python3 "$(dirname "$0")/../tests/bench/tiny_traces.py" "$TRACES" || exit 2
else
  GANTRY=${1:-build/release/src/gantry}
  CHECK=${2:-build/release/tests/checker/gantry-check}
  TRACES=${3:-$(cd "$(dirname "$0")/../.." && pwd)/shared/traces}
  OUT=${4:-/tmp/gantry-trace-runs}
fi
mkdir -p "$OUT"
: > "$OUT/runs.tsv"
RUNS=0

run() {  # run FAMILY NAME GANTRY-ARGS... (trace convert ... or gen ...)
  local family=$1 name=$2
  shift 2
  RUNS=$((RUNS + 1))
  local dir="$OUT/$family/$name"
  mkdir -p "$dir"
  if ! "$GANTRY" "$@" --out "$dir" -q 2>"$dir/convert.err"; then
    printf '%s\t%s\tfailed: %s\n' "$family" "$name" "$(head -c 200 "$dir/convert.err")" | tee -a "$OUT/runs.tsv"
    return
  fi
  local failures=()
  [ -f "$dir/failures.jsonl" ] && failures=(--failures "$dir/failures.jsonl")
  local t0 t1
  t0=$(date +%s.%N)
  "$GANTRY" sim --config "$dir/cluster.yaml" --trace "$dir/trace.jsonl" "${failures[@]}" \
    --policy fifo --events "$dir/events.jsonl" --report "$dir/report.json" -q --no-wait-events
  local rc=$?
  t1=$(date +%s.%N)
  local violations="n/a"
  if [ -x "$CHECK" ]; then
    "$CHECK" --config "$dir/cluster.yaml" --trace "$dir/trace.jsonl" "${failures[@]}" \
      --events "$dir/events.jsonl" --report "$dir/report.json" --max 20 >"$dir/check.txt" 2>&1
    violations=$(tail -1 "$dir/check.txt" | awk '{print $1}')
  fi
  python3 - "$dir" "$family" "$name" "$rc" "$t0" "$t1" "$violations" <<'PY' | tee -a "$OUT/runs.tsv"
import json, sys
d, family, name, rc, t0, t1, violations = sys.argv[1:]
jobs = sum(1 for l in open(d + "/trace.jsonl") if l.strip())
gpus = 0
import re
text = open(d + "/cluster.yaml").read()
for count, g in re.findall(r"count: (\d+)\n    gpus: (\d+)", text):
    gpus += int(count) * int(g)
fin = rej = "?"
if rc == "0":
    r = json.load(open(d + "/report.json"))
    fin, rej = r["jobs"]["finished"], r["jobs"]["rejected"]
print(f"{family}\t{name}\t{jobs}\t{gpus}\t{float(t1) - float(t0):.2f}\t{violations}\t{fin}\t{rej}" + ("" if rc == "0" else f"\tsim exit {rc}"))
PY
}

T=$TRACES
# Alibaba openb: every pod list, replayed and in FGD's fill mode (1.3x, seed 42).
for f in "$T"/alibaba-gpu-v2023-openb/openb_pod_list_*.csv; do
  n=$(basename "$f" .csv); n=${n#openb_pod_list_}
  head -1 "$f" | grep -q creation_time &&  # the multigpu lists have no times: fill only
    run openb-replay "$n" trace convert --format openb --node-list "$T/alibaba-gpu-v2023-openb/openb_node_list_all_node.csv" "$f"
  run openb-fill "$n" trace convert --format openb --node-list "$T/alibaba-gpu-v2023-openb/openb_node_list_all_node.csv" "$f" --fill 1.3 --seed 42
done
# Philly (Sia's job list): sized from the peak, and a contended 100-node cluster.
run philly peak trace convert --format philly "$T/philly-jobs-sia/philly.csv.gz"
run philly nodes100 trace convert --format philly "$T/philly-jobs-sia/philly.csv.gz" --nodes 100
# Gavel: the five seeds of per-VC traces, V100 throughputs.
for s in 0 1 2 3 4; do
  run gavel "seed$s" trace convert --format gavel "$T/gavel-philly-vc/seed=$s" \
    --throughputs "$T/gavel-philly-vc/simulation_throughputs.json.gz"
done
# Pollux and Sia workloads, run times from the Sia profiles.
P="$T/sia-workloads/profiles"
for d in workloads workloads-0.5 workloads-1.5 workloads-2.0 workloads-realistic; do
  for f in "$T/pollux-workloads/$d"/*.csv; do
    run "pollux-$d" "$(basename "$f" .csv)" trace convert --format pollux "$f" --profiles "$P"
  done
done
for d in philly saturn newtrace scale/rate_10 scale/rate_20 scale/rate_30 scale/rate_40 scale/rate_50; do
  for f in "$T/sia-workloads/$d"/*.csv; do
    run "sia-${d//\//-}" "$(basename "$f" .csv)" trace convert --format sia "$f" --profiles "$P"
  done
done
for k in 2 4 8 16 32; do
  for f in "$T/sia-workloads/scale/scale_${k}x"/*.csv; do
    run "sia-scale_${k}x" "$(basename "$f" .csv)" trace convert --format sia "$f" --profiles "$P" --cluster-scale "$k"
  done
done
# Tiresias: the two job files with job-level data.
run tiresias 60_job-n32g4 trace convert --format tiresias "$T/tiresias/60_job.csv" --cluster-spec "$T/tiresias/n32g4.csv"
run tiresias tf_job trace convert --format tiresias "$T/tiresias/tf_job.csv" --cluster-spec "$T/tiresias/cluster_spec.csv"
# The generator: two seeds, and a larger cluster.
if [ $TINY -eq 1 ]; then
  run gen seed1-64gpu-1d gen --seed 1 --gpus 64 --days 1 --load 0.8
  run gen seed2-64gpu-1d gen --seed 2 --gpus 64 --days 1 --load 0.8
  run gen seed1-128gpu-2d gen --seed 1 --gpus 128 --days 2 --load 0.9
  python3 - "$OUT/runs.tsv" "$RUNS" <<'PY'
import sys
lines = [l.rstrip("\n").split("\t") for l in open(sys.argv[1]) if l.strip()]
bad = [l for l in lines if len(l) != 8 or not l[2].isdigit() or int(l[2]) == 0 or l[5] != "0"
       or not l[6].isdigit() or int(l[6]) == 0]
if bad or len(lines) != int(sys.argv[2]):
    for l in bad[:10]:
        print("trace_runs.sh --tiny: a bad line: " + "\t".join(l), file=sys.stderr)
    sys.exit(f"trace_runs.sh --tiny: {len(lines)} lines for {sys.argv[2]} runs, {len(bad)} bad")
print(f"trace_runs.sh --tiny: ok ({len(lines)} runs: jobs, 0 violations, finished jobs)", file=sys.stderr)
PY
  exit
fi
run gen seed1-256gpu-7d gen --seed 1 --gpus 256 --days 7 --load 0.8
run gen seed2-256gpu-7d gen --seed 2 --gpus 256 --days 7 --load 0.8
run gen seed1-2048gpu-14d gen --seed 1 --gpus 2048 --days 14 --load 0.9
