#!/usr/bin/env bash
# The max_wait trade-off curve (issue 14): for each `gantry gen` workload, `gantry`
# with policy.max_wait_s off and at several settings; one table row per setting: the
# longest wait of a gang of 16+ GPUs and of any job (from first submit to first start),
# mean JCT, GPU utilisation, GPU-hours lost to preemption over GPU-hours used, and how
# many jobs waited past the setting. Not part of the test suite; docs/policies.md has
# the figures.
#
#   scripts/max_wait_curve.sh [--build DIR] [--out DIR] [--settings "H H ..."]
#                             [--workloads "SEED:LOAD[:MIX] ..."] [--gpus N] [--days D]
#                             [--tiny]
#
#   --settings   max_wait in hours, 0 = off (default "0 48 24 12 6")
#   --workloads  as scripts/policy_compare.sh (default: its eight)
#   --gpus, --days  cluster size and days of arrivals for gen (default 256 and 7)
#   --tiny       the CI check that the script still works end to end (ctest -L bench), in
#                about a second: 64 GPUs, 2 days, workload "1:1.2", settings "0 6" unless
#                given, work folder BUILD/bench-tiny/max_wait_curve unless --out is given;
#                exits 1 unless the table has a full row per workload and setting. The
#                table is also written to OUT/table.md.
set -euo pipefail
cd "$(dirname "$0")/.."

build=build/release out=/tmp/gantry-maxwait settings="0 48 24 12 6" gpus=256 days=7
tiny=0 given=" "
workloads="1:0.95 1:1.2 2:1.2 1:1.4 2:1.4 1:1.6 2:1.6 3:1.1:training=0.5,sweep=0.25,batch=0.25"
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build) build=$2; shift 2 ;;
    --out) out=$2; given+="out "; shift 2 ;;
    --settings) settings=$2; given+="settings "; shift 2 ;;
    --workloads) workloads=$2; given+="workloads "; shift 2 ;;
    --gpus) gpus=$2; given+="gpus "; shift 2 ;;
    --days) days=$2; given+="days "; shift 2 ;;
    --tiny) tiny=1; shift ;;
    -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
    *) echo "max_wait_curve.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
if [[ $tiny -eq 1 ]]; then  # sizes for a check, not a measurement (options given win)
  [[ $given == *" out "* ]] || out=$build/bench-tiny/max_wait_curve
  [[ $given == *" settings "* ]] || settings="0 6"
  [[ $given == *" workloads "* ]] || workloads="1:1.2"
  [[ $given == *" gpus "* ]] || gpus=64
  [[ $given == *" days "* ]] || days=2
fi
gantry=$build/src/gantry
[[ -x $gantry ]] || { echo "max_wait_curve.sh: no $gantry (build the gantry target first)" >&2; exit 2; }
mkdir -p "$out"

runs=()
for w in $workloads; do
  IFS=: read -r seed load mix <<< "$w"
  dir=$out/s$seed-l$load${mix:+-mix}
  mkdir -p "$dir"
  "$gantry" gen --seed "$seed" --gpus "$gpus" --days "$days" --load "$load" ${mix:+--mix "$mix"} --out "$dir" > /dev/null
  for h in $settings; do
    config=$dir/cluster-$h.yaml
    if [[ $h == 0 ]]; then
      cp "$dir/cluster.yaml" "$config"
    else
      sed "s/^policy:\$/policy:\n  max_wait_s: $((h * 3600))/" "$dir/cluster.yaml" > "$config"
      grep -q "max_wait_s: $((h * 3600))" "$config" || { echo "no policy section in $dir/cluster.yaml" >&2; exit 1; }
    fi
    "$gantry" sim --config "$config" --trace "$dir/trace.jsonl" --failures "$dir/failures.jsonl" \
      --policy gantry --report "$dir/r-$h.json" --events "$dir/e-$h.jsonl" --no-wait-events -q
    echo "$seed $load ${mix:--} $h" > "$dir/w-$h.txt"
    runs+=("$dir:$h")
  done
done

python3 - "${runs[@]}" <<'PY' | tee "$out/table.md"
import json, sys

print("| seed | load | mix | max_wait h | longest wait, gang 16+ GPUs h | longest wait, any job h | jobs waiting past the setting | mean JCT s | util % | GPU-h lost to preemption (% of used) |")
print("|---|---|---|---|---|---|---|---|---|---|")
for run in sys.argv[1:]:
    d, h = run.rsplit(":", 1)
    seed, load, mix, _ = open(f"{d}/w-{h}.txt").read().split()
    size = {}
    for line in open(f"{d}/trace.jsonl"):
        j = json.loads(line)
        size[j["id"]] = j.get("gpus", 0) * j.get("replicas", 1)
    submit, first = {}, {}
    for line in open(f"{d}/e-{h}.jsonl"):
        e = json.loads(line)
        if e["type"] == "submit":
            submit[e["job"]] = e["t"]
        elif e["type"] == "start":
            first.setdefault(e["job"], e["t"])
    waits = {k: (first.get(k, float("inf")) - t) / 3600 for k, t in submit.items()}
    gang = max((w for k, w in waits.items() if size[k] >= 16), default=0)
    past = sum(1 for w in waits.values() if int(h) > 0 and w > int(h))
    r = json.load(open(f"{d}/r-{h}.json"))
    used = sum(q["gpu_hours"] for q in r["by_queue"].values()) if isinstance(r["by_queue"], dict) else sum(q["gpu_hours"] for q in r["by_queue"])
    lost = r["lost_gpu_hours_by_cause"].get("preempt", 0)
    print(f"| {seed} | {load} | {mix} | {h if h != '0' else 'off'} | {gang:.0f} | {max(waits.values()):.0f} | "
          f"{past if h != '0' else '-'} | {r['jct_s']['mean']:,.0f} | {r['gpu_utilization_pct']:.1f} | "
          f"{lost:,.0f} ({100 * lost / used:.2f}%) |")
PY
if [[ $tiny -eq 1 ]]; then
  python3 tests/bench/check_tables.py "$out/table.md" "max_wait_curve.sh --tiny" "10:${#runs[@]}"
fi
