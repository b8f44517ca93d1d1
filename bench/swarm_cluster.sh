# Sourced by the control-plane benchmarks (console_scale.sh, gantryd_memory.sh): gantryd
# on a fresh database with one gantry-swarm speaking for its nodes.
#
#   start_swarm_cluster OUT BIN NODES TEAM... [-- GANTRYD_FLAG...]
#
# OUT holds cluster.yaml (one pool `gpu` of NODES nodes of 8 H100s, a queue per TEAM).
# Writes OUT/admin.token, OUT/agent.token and OUT/TEAM.token (team TEAM, queue TEAM,
# user u-TEAM); starts gantryd (BIN/gantryd, with the flags after --) on a free port and
# the swarm; waits until every node is up (60 s at most); sets url, gpid and spid, and an
# EXIT trap that stops both.
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
  echo "# $up of $nodes nodes up" >&2
}
