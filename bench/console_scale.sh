#!/usr/bin/env bash
# The web console and the API it polls at a site's size: gantryd with one gantry-swarm
# speaking for NODES emulated nodes of 8 H100s, JOBS jobs submitted through the API by
# four teams (1, 2, 4 or 8 GPUs, 2-node gangs of 8; an hour each, so the cluster fills and
# the rest wait) and ENDED short jobs before them (ended jobs kept in memory: what
# `?all=1` lists). Then, while the swarm heartbeats: each GET the console's views make,
# timed with curl (5 tries, the median) with the size of its answer; and every view drawn
# in Debian's headless chromium (tests/integration/console_cdp.py), with the time from
# asking for the view to its page drawn. Prints tab-separated lines:
#   api <path> <median_ms> <max_ms> <bytes> <median_ms gzip> <bytes gzip>
#   view <view> <render_ms> <html_bytes> <error>
#   page <view> <height_px> <first chart's y px> <first legend's y px>  (-1: none; 1280x900 window)
#   heartbeat <heartbeats> <failed> <lease misses> <workers stopped by a lease> <rtt p99 ms>
#   (the swarm's stats at the end)
#
#   bench/console_scale.sh [--build DIR] [--nodes N] [--jobs J] [--ended E] [--out DIR]
#                          [--tiny]
#
# Defaults: build/release, 1,000 nodes (8,000 GPUs), 12,000 jobs, 2,000 ended.
# --tiny: the CI check that the script still works end to end (ctest -L bench): 4 nodes,
# 40 jobs, 8 ended unless given, out DIR/bench-tiny/console_scale unless given; exits 1
# unless every API path answered, every submit was accepted (the jobs list counts them
# all), chromium signed in and drew every view without an error or a console error, and
# the swarm's heartbeats all succeeded with no lease missed.
set -euo pipefail
cd "$(dirname "$0")/.."
build=build/release
nodes=1000
jobs=12000
ended=2000
out=build/console-scale
tiny=0 given=" "
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build) build=$2; shift 2 ;;
    --nodes) nodes=$2; given+="nodes "; shift 2 ;;
    --jobs) jobs=$2; given+="jobs "; shift 2 ;;
    --ended) ended=$2; given+="ended "; shift 2 ;;
    --out) out=$2; given+="out "; shift 2 ;;
    --tiny) tiny=1; shift ;;
    -h|--help) sed -n '2,23p' "$0"; exit 0 ;;
    *) echo "console_scale.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
settle=5  # seconds for the short jobs to end, a few passes and history samples
if [[ $tiny -eq 1 ]]; then  # sizes for a check, not a measurement (options given win)
  [[ $given == *" nodes "* ]] || nodes=4
  [[ $given == *" jobs "* ]] || jobs=40
  [[ $given == *" ended "* ]] || ended=8
  [[ $given == *" out "* ]] || out=$build/bench-tiny/console_scale
  settle=3
fi
chromium=$(command -v chromium || command -v chromium-browser || true)
[[ -n $chromium ]] || { echo "console_scale.sh: chromium not found (scripts/setup.sh installs it)" >&2; exit 2; }
rm -rf "$out" && mkdir -p "$out"
out=$(cd "$out" && pwd)
B=$(cd "$build/src" && pwd)
cat >"$out/cluster.yaml" <<EOF
cluster: console-scale
pools:
  - name: gpu
    count: $nodes
    gpus: 8
    gpu_model: H100-80GB
queues:
  - name: research
    guaranteed_gpus: $((nodes * 4))
  - name: team-a
    parent: research
  - name: team-b
    parent: research
  - name: serving
    guaranteed_gpus: $((nodes * 2))
  - name: batch
EOF
source bench/swarm_cluster.sh
start_swarm_cluster "$out" "$B" "$nodes" team-a team-b serving batch -- --history-sample-s 1
admin=$(cat "$out/admin.token")

# Submits through the API from four threads, one team each (short jobs first: they end).
python3 - "$url" "$out" "$jobs" "$ended" <<'EOF'
import json, random, sys, threading, time, urllib.request
url, out, jobs, ended = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
teams = ["team-a", "team-b", "serving", "batch"]
tokens = {t: open(f"{out}/{t}.token").read().strip() for t in teams}
def post(team, spec):
    req = urllib.request.Request(url + "/v1/jobs", json.dumps(spec).encode(), method="POST",
                                 headers={"Authorization": "Bearer " + tokens[team], "Content-Type": "application/json"})
    with urllib.request.urlopen(req) as r:
        return r.status
def submit(k):
    rng = random.Random(k)
    team = teams[k]
    for i in range(k, ended + jobs, 4):
        short = i < ended
        s = rng.choice([1, 1, 1, 2, 2, 4, 8, 16])
        spec = {"queue": team, "gpus": min(s, 8), "replicas": 2 if s == 16 else 1, "vram_gb": 40,
                "tier": "critical" if team == "serving" else "standard",
                "command": ["sleep", "1" if short else "3600"]}
        post(team, spec)
t0 = time.time()
threads = [threading.Thread(target=submit, args=(k,)) for k in range(4)]
for t in threads: t.start()
for t in threads: t.join()
print(f"# submitted {jobs + ended} jobs in {time.time() - t0:.1f} s", file=sys.stderr)
EOF
sleep "$settle"  # the short ones end, a few passes and history samples

for path in /v1/nodes /v1/jobs "/v1/jobs?all=1" "/v1/jobs?all=1&limit=500" /v1/queues /v1/cluster/history /healthz; do
  python3 - "$url$path" "$admin" "$path" <<'EOF'
import statistics, sys, time, urllib.request
url, token, path = sys.argv[1:4]
def fetch(encoding):
    times, size = [], 0
    for _ in range(5):
        t = time.perf_counter()
        req = urllib.request.Request(url, headers={"Authorization": "Bearer " + token, "Accept-Encoding": encoding})
        with urllib.request.urlopen(req) as r:
            size = len(r.read())
        times.append((time.perf_counter() - t) * 1000)
    return statistics.median(times), max(times), size
med, top, size = fetch("identity")
gz_med, _, gz_size = fetch("gzip")  # as browsers ask
print(f"api\t{path}\t{med:.0f}\t{top:.0f}\t{size}\t{gz_med:.0f}\t{gz_size}")
EOF
done

python3 tests/integration/console_cdp.py "$chromium" "$url/" "$admin" "$out/shots" queues jobs usage map \
  >"$out/cdp.json"
python3 - "$out/cdp.json" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
if not r.get("signed_in"): print("view\t-\t-\t-\tnot signed in")
for v, d in r["views"].items():
    print(f"view\t{v}\t{d.get('render_ms', -1):.0f}\t{len(d.get('html', ''))}\t{d.get('error', '')}")
for v, d in r["views"].items():
    print(f"page\t{v}\t{d.get('height_px', -1)}\t{d.get('chart_y', -1)}\t{d.get('legend_y', -1)}")
for e in r.get("console_errors", []): print("console_error\t" + e)
EOF
python3 - "$out/swarm.json" <<'EOF'
import json, sys
s = json.load(open(sys.argv[1]))
print(f"heartbeat\t{s['heartbeats']}\t{s['heartbeat_failures']}\t{s['lease_misses']}\t{s['workers_stopped_by_lease']}\t"
      f"{s['heartbeat_rtt_ms']['p99']:.0f}")
EOF
if [[ $tiny -eq 1 ]]; then
  python3 - "$url" "$admin" "$out" "$((jobs + ended))" <<'EOF'
import json, sys, urllib.request
url, admin, out, submitted = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
problems = []
req = urllib.request.Request(url + "/v1/jobs?all=1&limit=1", headers={"Authorization": "Bearer " + admin})
with urllib.request.urlopen(req, timeout=30) as r:
    total = json.load(r)["total"]
if total != submitted:
    problems.append(f"{total} jobs listed, {submitted} submitted")
cdp = json.load(open(f"{out}/cdp.json"))
if not cdp.get("signed_in"):
    problems.append("chromium did not sign in")
for view in ("queues", "jobs", "usage", "map"):
    v = cdp["views"].get(view, {"error": "not drawn"})
    if v.get("error") or not v.get("html") or v.get("render_ms", -1) < 0:
        problems.append(f"view {view}: {v.get('error') or 'empty'}")
problems += [f"console error: {e}" for e in cdp.get("console_errors", [])]
s = json.load(open(f"{out}/swarm.json"))
if s["heartbeats"] <= 0 or s["heartbeat_failures"] or s["lease_misses"] or s["workers_stopped_by_lease"]:
    problems.append(f"swarm: {s}")
if problems:
    sys.exit("console_scale.sh --tiny: " + "; ".join(problems))
print(f"console_scale.sh --tiny: ok ({total} jobs, 4 views drawn, {s['heartbeats']} heartbeats)", file=sys.stderr)
EOF
fi
