#!/usr/bin/env bash
# The policy comparison of issue 3: fifo (greedy first fit, no preemption) against
# gantry on `gantry gen` workloads. For each workload it generates the trace, runs both
# policies, and prints one table row per policy: utilisation, mean JCT and its ratio to
# fifo's, the JCT floor (the mean run time of the finished jobs: the mean JCT if no job
# waited or lost work), critical jobs inside their guarantee (count, p99 wait),
# preemptions, GPU-hours lost to preemption over GPU-hours used (all, and standard jobs'
# part: the rest is best-effort work), and the gangs of 16+
# GPUs (count, longest and mean wait for the first start), and the mean queueing delay
# (mean JCT less the JCT floor) with its ratio to fifo's.
# Not part of the test suite; docs/policies.md has the figures.
#
#   scripts/policy_compare.sh [--build DIR] [--out DIR] [--gpus N] [--days D]
#                             [--workloads "SEED:LOAD[:MIX] ..."] [--set "KEY: VALUE"]...
#                             [--order QUEUE=ORDER]... [--tiny]
#
#   --build      build folder with src/gantry (default build/release)
#   --out        work folder (default /tmp/gantry-policies)
#   --gpus       cluster size for gen (default 256)
#   --days       days of arrivals (default 7)
#   --workloads  default "1:0.95 1:1.2 2:1.2 1:1.4 2:1.4 1:1.6 2:1.6
#                3:1.1:training=0.5,sweep=0.25,batch=0.25" (the last: gang-heavy)
#   --set        a `policy:` setting added to each generated cluster config, e.g.
#                --set "best_effort_yields_to: none" (repeatable)
#   --order      QUEUE=ORDER: that queue of each generated config (and its children)
#                ordered by ORDER (fair-share, las, gittins), e.g. --order research=gittins
#                (repeatable)
#   --tiny       the CI check that the script still works end to end (ctest -L bench), in
#                about a second: 64 GPUs, 2 days, workloads "1:1.2 3:1.1:training=0.5,
#                sweep=0.25,batch=0.25" unless given, work folder BUILD/bench-tiny/
#                policy_compare unless --out is given; exits 1 unless both tables have
#                their rows (two policies per workload, then one per workload), each with
#                every column. The tables are also written to OUT/tables.md.
set -euo pipefail
cd "$(dirname "$0")/.."

build=build/release out=/tmp/gantry-policies gpus=256 days=7 sets=() orders=()
tiny=0 given=" "
workloads="1:0.95 1:1.2 2:1.2 1:1.4 2:1.4 1:1.6 2:1.6 3:1.1:training=0.5,sweep=0.25,batch=0.25"
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build) build=$2; shift 2 ;;
    --out) out=$2; given+="out "; shift 2 ;;
    --gpus) gpus=$2; given+="gpus "; shift 2 ;;
    --days) days=$2; given+="days "; shift 2 ;;
    --workloads) workloads=$2; given+="workloads "; shift 2 ;;
    --set) sets+=("$2"); shift 2 ;;
    --order) orders+=("$2"); shift 2 ;;
    --tiny) tiny=1; shift ;;
    -h|--help) sed -n '2,33p' "$0"; exit 0 ;;
    *) echo "policy_compare.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
if [[ $tiny -eq 1 ]]; then  # sizes for a check, not a measurement (options given win)
  [[ $given == *" out "* ]] || out=$build/bench-tiny/policy_compare
  [[ $given == *" gpus "* ]] || gpus=64
  [[ $given == *" days "* ]] || days=2
  [[ $given == *" workloads "* ]] || workloads="1:1.2 3:1.1:training=0.5,sweep=0.25,batch=0.25"
fi
gantry=$build/src/gantry
[[ -x $gantry ]] || { echo "policy_compare.sh: no $gantry (build the gantry target first)" >&2; exit 2; }
mkdir -p "$out"

dirs=()
for w in $workloads; do
  IFS=: read -r seed load mix <<< "$w"
  dir=$out/s$seed-l$load${mix:+-mix}
  mkdir -p "$dir"
  "$gantry" gen --seed "$seed" --gpus "$gpus" --days "$days" --load "$load" \
    ${mix:+--mix "$mix"} --out "$dir" > /dev/null
  if [[ ${#sets[@]} -gt 0 ]]; then
    # gen writes `policy:` last: its settings are the file's last lines.
    [[ $(grep -E '^[a-z_]+:' "$dir/cluster.yaml" | tail -1) == "policy:" ]] ||
      { echo "policy_compare.sh: $dir/cluster.yaml does not end with its policy section" >&2; exit 2; }
    printf '  %s\n' "${sets[@]}" >> "$dir/cluster.yaml"
  fi
  for o in ${orders[@]+"${orders[@]}"}; do
    queue=${o%%=*} order=${o#*=}
    sed -n '/^queues:$/,/^[a-z_]*:$/p' "$dir/cluster.yaml" | grep -q "^  - name: $queue\$" ||
      { echo "policy_compare.sh: $dir/cluster.yaml has no queue $queue (--order)" >&2; exit 2; }
    sed -i "/^queues:\$/,/^[a-z_]*:\$/{/^  - name: $queue\$/a\\    order: $order
}" "$dir/cluster.yaml"
  done
  echo "$seed $load ${mix:--}" > "$dir/workload.txt"
  for policy in fifo gantry; do
    "$gantry" sim --config "$dir/cluster.yaml" --trace "$dir/trace.jsonl" \
      --failures "$dir/failures.jsonl" --policy "$policy" --report "$dir/$policy.json" \
      --events "$dir/$policy.events.jsonl" --no-wait-events -q
  done
  dirs+=("$dir")
done

python3 - "${dirs[@]}" <<'EOF' | tee "$out/tables.md"
import json, re, sys

def pools(path):  # the `pools:` list of a gen cluster config, without a YAML parser
    out, section = [], None
    for line in open(path):
        if re.match(r"^\w", line):
            section = line.split(":")[0]
        elif section == "pools":
            m = re.match(r"\s+- name: (\S+)", line)
            if m:
                out.append({"name": m.group(1)})
            elif out and (m := re.match(r"\s+(\w+): (\S+)", line)):
                out[-1][m.group(1)] = m.group(2)
    return out

def capacity(path):  # GPUs of the cluster: count x gpus per pool
    return sum(int(p.get("count", 0)) * int(p.get("gpus", 0)) for p in pools(path))

print("| seed | load | mix | policy | GPU util % | mean JCT s | vs fifo | JCT floor s | critical in guarantee: jobs, p99 wait s | preemptions | GPU-h lost to preemption (% of used; standard jobs' part) | gangs 16+ GPUs: n, longest, mean wait h | queueing delay s (vs fifo) |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
for d in sys.argv[1:]:
    seed, load, mix = open(f"{d}/workload.txt").read().split()
    jobs = {}
    for line in open(f"{d}/trace.jsonl"):
        j = json.loads(line)
        jobs[j["id"]] = j
    cap = capacity(f"{d}/cluster.yaml")
    fifo_jct = fifo_delay = None
    for policy in ("fifo", "gantry"):
        r = json.load(open(f"{d}/{policy}.json"))
        submit, first, run = {}, {}, []
        for line in open(f"{d}/{policy}.events.jsonl"):
            e = json.loads(line)
            if e["type"] == "submit":
                submit[e["job"]] = e["t"]
            elif e["type"] == "start":
                first.setdefault(e["job"], e["t"])
            elif e["type"] == "finish":
                run.append(jobs[e["job"]]["duration"])
        gangs = [(first.get(k, float("inf")) - submit[k]) / 3600 for k in submit
                 if jobs[k].get("gpus", 0) * jobs[k].get("replicas", 1) >= 16]
        jct = r["jct_s"]["mean"]
        floor = sum(run) / len(run)
        fifo_jct = fifo_jct or jct
        fifo_delay = fifo_delay or jct - floor
        cig = r["queue_wait_time_ms"].get("critical_in_guarantee", {})
        used = r["gpu_utilization_pct"] / 100 * cap * r["makespan_s"] / 3600
        lost = r["lost_gpu_hours_by_cause"].get("preempt", 0)
        lost_std = r["by_tier"]["standard"]["lost_gpu_hours_by_cause"]["preempt"]
        gang = f"{len(gangs)}, {max(gangs):.0f}, {sum(gangs) / len(gangs):.0f}" if gangs else "0"
        print(f"| {seed} | {load} | {mix} | {policy} | {r['gpu_utilization_pct']:.1f} | {jct:,.0f} | "
              f"{jct / fifo_jct:.2f}x | {floor:,.0f} | {cig.get('count', 0)}, "
              f"{cig.get('p99', 0) / 1000:.0f} | {r['preemptions']} | {lost:,.0f} ({100 * lost / used:.2f}%; {100 * lost_std / used:.2f}%) | {gang} | "
              f"{jct - floor:,.0f} ({(jct - floor) / fifo_delay:.2f}x) |")

# How oversubscribed the H100 GPUs are, and the largest leaf, which alone fits the
# biggest leaf gangs: work that may run only there over its GPU-hours in the arrival span.
print()
print("| seed | load | mix | H100-only work / H100 GPU-hours | leaf gangs only the largest H100 leaf fits: n, work / its GPU-hours |")
print("|---|---|---|---|---|")
for d in sys.argv[1:]:
    seed, load, mix = open(f"{d}/workload.txt").read().split()
    h100 = [p for p in pools(f"{d}/cluster.yaml") if "H100" in p.get("gpu_model", "")]
    leaves = sorted((min(int(p["leaf_size"]), int(p["count"]) - i) * int(p["gpus"])
                     for p in h100 for i in range(0, int(p["count"]), int(p["leaf_size"]))),
                    reverse=True)
    span = only_h100 = big = 0
    n_big = 0
    for line in open(f"{d}/trace.jsonl"):
        j = json.loads(line)
        span = max(span, j["submit"])
        models = j.get("gpu_model", [])
        models = [models] if isinstance(models, str) else models
        if not models or j.get("sharing") or not all("H100" in m for m in models):
            continue
        gpus = j.get("gpus", 0) * j.get("replicas", 1)
        only_h100 += gpus * j["duration"]
        if j.get("topology") == "leaf" and len(leaves) > 1 and gpus > leaves[1]:
            n_big += 1
            big += gpus * j["duration"]
    print(f"| {seed} | {load} | {mix} | {only_h100 / (sum(leaves) * span):.2f} | "
          f"{n_big}, {big / (leaves[0] * span):.2f} |")
EOF
if [[ $tiny -eq 1 ]]; then
  python3 tests/bench/check_tables.py "$out/tables.md" "policy_compare.sh --tiny" \
    "13:$((2 * ${#dirs[@]}))" "5:${#dirs[@]}"
fi
