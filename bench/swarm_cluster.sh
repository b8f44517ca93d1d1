# Sourced by the control-plane benchmarks (console_scale.sh, gantryd_memory.sh): gantryd
# on a fresh database with one gantry-swarm speaking for its nodes.
#
#   start_swarm_cluster OUT BIN NODES TEAM... [-- GANTRYD_FLAG...]
#
# OUT holds cluster.yaml (one pool `gpu` of NODES nodes of 8 H100s, a queue per TEAM).
# Writes OUT/admin.token, OUT/agent.token and OUT/TEAM.token (team TEAM, queue TEAM,
# user u-TEAM); starts gantryd (BIN/gantryd, with the flags after --) on a free port and
# the swarm; waits until every node is up (60 s at most); sets url, gpid, spid and
# nodes_up (how many were up when it stopped waiting), and an EXIT trap that stops both.
#
# Run rather than sourced, it is its own CI check (ctest -L bench), in a few seconds:
#   bash bench/swarm_cluster.sh --tiny [--build DIR] [--out DIR]
# starts a cluster of 4 nodes (DIR default build/release, OUT default DIR/bench-tiny/
# swarm_cluster, emptied first) and exits 1 unless every node came up, /healthz says so,
# a job submitted with the team's token ran and finished, and the swarm counted
# heartbeats and no failed one.
start_swarm_cluster() {
  local out=$1 bin=$2 nodes=$3
  shift 3
  local teams=() flags=()
  while [[ $# -gt 0 && $1 != -- ]]; do teams+=("$1"); shift; done
  [[ $# -gt 0 ]] && shift && flags=("$@")
  "$bin/gantryd" init --db "$out/state.db" >/dev/null
  local tok=("$bin/gantryd" token create --db "$out/state.db" --config "$out/cluster.yaml")
  "${tok[@]}" --admin >"$out/admin.token"
  "${tok[@]}" --agent --any-node >"$out/agent.token"
  local t
  for t in "${teams[@]}"; do "${tok[@]}" --team "$t" --queues "$t" --user "u-$t" >"$out/$t.token"; done
  rm -f "$out/port"
  "$bin/gantryd" --config "$out/cluster.yaml" --db "$out/state.db" --listen 127.0.0.1:0 \
    --port-file "$out/port" "${flags[@]}" >"$out/gantryd.log" 2>&1 &
  gpid=$!
  local i
  for i in $(seq 100); do [[ -s $out/port ]] && break; sleep 0.1; done
  url=http://127.0.0.1:$(cat "$out/port")
  GANTRY_TOKEN=$(cat "$out/agent.token") "$bin/gantry-swarm" --server "$url" --pool "gpu:$nodes:8xH100-80GB" \
    --stats "$out/swarm.json" >"$out/swarm.log" 2>&1 &
  spid=$!
  trap 'kill $spid $gpid 2>/dev/null; wait $spid $gpid 2>/dev/null' EXIT
  local admin up=0
  admin=$(cat "$out/admin.token")
  for i in $(seq 300); do
    up=$(curl -s -H "Authorization: Bearer $admin" "$url/healthz" |
      python3 -c 'import json,sys; print(json.load(sys.stdin).get("nodes_up", 0))' 2>/dev/null || echo 0)
    [[ $up -ge $nodes ]] && break
    sleep 0.2
  done
  nodes_up=$up
  echo "# $up of $nodes nodes up" >&2
}

if [[ ${BASH_SOURCE[0]} == "$0" ]]; then
  set -euo pipefail
  cd "$(dirname "$0")/.."
  build=build/release out=
  while [[ $# -gt 0 ]]; do
    case "$1" in
      --tiny) shift ;;
      --build) build=$2; shift 2 ;;
      --out) out=$2; shift 2 ;;
      *) echo "swarm_cluster.sh: sourced by the benchmarks; run, it takes --tiny [--build DIR] [--out DIR]" >&2; exit 2 ;;
    esac
  done
  out=${out:-$build/bench-tiny/swarm_cluster}
  rm -rf "$out" && mkdir -p "$out"
  out=$(cd "$out" && pwd)
  printf 'cluster: tiny\npools:\n  - name: gpu\n    count: 4\n    gpus: 8\n    gpu_model: H100-80GB\nqueues:\n  - name: t\n' \
    >"$out/cluster.yaml"
  start_swarm_cluster "$out" "$(cd "$build/src" && pwd)" 4 t
  [[ $nodes_up -eq 4 ]] || { echo "swarm_cluster.sh --tiny: $nodes_up of 4 nodes up" >&2; tail -5 "$out/gantryd.log" "$out/swarm.log" >&2; exit 1; }
  python3 - "$url" "$out" <<'PY'
import json, sys, time, urllib.request
url, out = sys.argv[1:]
def call(path, token, body=None):
    req = urllib.request.Request(url + path, None if body is None else json.dumps(body).encode(),
                                 {"Authorization": "Bearer " + token, "Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.load(r)
team, admin = (open(f"{out}/{n}.token").read().strip() for n in ("t", "admin"))
health = call("/healthz", admin)
if health.get("status") != "ok" or health.get("nodes_up") != 4:
    sys.exit(f"swarm_cluster.sh --tiny: /healthz said {health}")
job = call("/v1/jobs", team, {"queue": "t", "gpus": 8, "vram_gb": 40, "command": ["sleep", "1"]})["id"]
state, deadline, seen = None, time.time() + 20, set()
while time.time() < deadline:
    state = call(f"/v1/jobs/{job}", team)["state"]
    seen.add(state)
    if state not in ("pending", "running", "stopping"):
        break
    time.sleep(0.1)
if state != "finished" or "running" not in seen:
    sys.exit(f"swarm_cluster.sh --tiny: job {job} went through {sorted(seen)}, ended {state}, not running then finished")
print(f"swarm_cluster.sh --tiny: 4 nodes up; job {job} ran and finished", file=sys.stderr)
PY
  kill -TERM "$spid" && wait "$spid" || true  # the swarm writes its stats as it stops
  python3 - "$out/swarm.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
if s["heartbeats"] <= 0 or s["heartbeat_failures"] != 0:
    sys.exit(f"swarm_cluster.sh --tiny: swarm stats {s}")
print(f"swarm_cluster.sh --tiny: ok ({s['heartbeats']} heartbeats, none failed)", file=sys.stderr)
PY
fi
