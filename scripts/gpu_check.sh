#!/usr/bin/env bash
# The live check on a machine with a real NVIDIA GPU (CI has none): NVML discovery, and
# gantryd with one real gantry-agent (NVML, not --emulate) running three PyTorch jobs on
# GPU 0, so that usage, per-process accounting on a shared GPU and idle reclamation run on
# a real driver. Reads nothing from the network; changes no GPU setting (no MIG, no MPS
# daemon: the two "mps" jobs time-share the GPU, which is what per-process accounting
# must tell apart).
#
#   scripts/gpu_check.sh BIN_DIR OUT_DIR
#
# BIN_DIR holds gantryd, gantry, gantry-agent and agent_gpu_test (and, in BIN_DIR/lib,
# shared libraries they need that the machine may lack). The jobs need a python3 with
# torch. To take a Debian 12 build to a machine of another distribution (as done for the
# run in docs/control-plane.md, "On a real GPU"):
#   mkdir -p B/lib && cp build/release/src/{gantryd,gantry,gantry-agent} \
#     build/release/tests/agent/agent_gpu_test B/ && ldd B/* | awk '/=>/{print $3}' | sort -u |
#     grep -v -E 'libc.so|libm.so|libresolv|ld-linux' | xargs -I{} cp -L {} B/lib/
# (glibc stays the machine's own: it must be 2.36 or newer). Writes OUT_DIR/check.log (the story, with every `gantry show` taken), the event
# log and the agent's and gantryd's logs. Exit status 0 when every expectation at the end
# holds; each failed one is printed as FAIL.
set -uo pipefail
BIN=$(cd "$1" && pwd)
OUT=$2
mkdir -p "$OUT"
exec > >(tee "$OUT/check.log") 2>&1
export LD_LIBRARY_PATH="$BIN/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
if ! ldconfig -p | grep -q libnvidia-ml.so.1; then
  nvml=$(find / -xdev -name 'libnvidia-ml.so.1' 2>/dev/null | head -1)
  [ -n "$nvml" ] && export LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$(dirname "$nvml")"
fi
PY=$(command -v python3)
W=$(mktemp -d /tmp/gantry-gpu.XXXXXX)
fails=0
expect() {  # expect DESCRIPTION COMMAND...
  if "${@:2}"; then echo "ok:   $1"; else echo "FAIL: $1"; fails=$((fails + 1)); fi
}

echo "== machine"; date -u; uname -r; nvidia-smi --query-gpu=name,memory.total,driver_version,mig.mode.current --format=csv
echo "== gpu test (NVML discovery, a job sees exactly its GPU)"
"$BIN/agent_gpu_test"
expect "agent_gpu_test passes" test $? -eq 0

name=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
case "$name" in
  *H200*) model=H200-141GB ;;
  *H100*) model=H100-80GB ;;
  *A100*80GB*) model=A100-80GB ;;
  *) model=A100-40GB ;;
esac
cat > "$W/cluster.yaml" <<EOF
cluster: gpu-check
pools:
  - name: gpu
    count: 1
    gpus: 1
    gpu_model: $model
    cpus: 8
    memory_gb: 32
    sharing: [mps]
queues:
  - name: research
policy:
  reclaim_idle_after_s: 20
EOF
cat > "$W/job.py" <<'EOF'
# job.py MODE SECONDS GB: holds GB of VRAM; busy: matrix products for SECONDS; idle: sleeps
# SECONDS; busy-then-idle: busy for SECONDS, then sleeps for ten minutes.
import sys, time, torch
mode, secs, gb = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
hold = torch.empty(int(gb * 1e9) // 4, dtype=torch.float32, device="cuda")
a = torch.randn(4096, 4096, device="cuda")
print("holding", gb, "GB on", torch.cuda.get_device_name(0), flush=True)
t0 = time.time()
if mode != "idle":
    while time.time() - t0 < secs:
        b = a @ a
        torch.cuda.synchronize()
    print("busy for", round(time.time() - t0), "s", flush=True)
if mode != "busy":
    time.sleep(secs if mode == "idle" else 600)
print("done", flush=True)
EOF
D="$BIN/gantryd"
"$D" init --db "$W/db" >/dev/null
tok() { "$D" token create --db "$W/db" --config "$W/cluster.yaml" "$@"; }
ADMIN=$(tok --admin); AGENT=$(tok --agent --any-node); TEAM=$(tok --team a --queues research --user alice)
PORT=18080
"$D" --config "$W/cluster.yaml" --db "$W/db" --listen 127.0.0.1:$PORT --events "$OUT/events.jsonl" --usage-sample-s 5 \
  >"$OUT/gantryd.log" 2>&1 &
GPID=$!
sleep 1
GANTRY_TOKEN=$AGENT "$BIN/gantry-agent" --server http://127.0.0.1:$PORT --node gpu-0 \
  --state-dir "$W/agent" --run-as agent >"$OUT/agent.log" 2>&1 &
APID=$!
trap 'kill $APID $GPID 2>/dev/null; wait $APID $GPID; rm -rf "$W"' EXIT
g() { GANTRY_TOKEN=${T:-$TEAM} "$BIN/gantry" --server http://127.0.0.1:$PORT "$@"; }
for _ in $(seq 50); do T=$ADMIN g nodes 2>/dev/null | grep -q ' up ' && break; sleep 0.2; done
echo "== nodes"; T=$ADMIN g nodes
curl -s -H "Authorization: Bearer $ADMIN" http://127.0.0.1:$PORT/v1/nodes >"$OUT/nodes.json"

g submit --id shared-busy --queue research --gpus 0.5 --sharing mps --vram-gb 10 --grace-s 5 -- "$PY" "$W/job.py" busy 45 6
g submit --id shared-idle --queue research --gpus 0.5 --sharing mps --vram-gb 10 --grace-s 5 -- "$PY" "$W/job.py" idle 120 4
g submit --id whole --queue research --gpus 1 --vram-gb 20 --grace-s 5 -- "$PY" "$W/job.py" busy-then-idle 25 8
g submit --id oom --queue research --gpus 0 --cpus 1 --memory-gb 1 -- "$PY" -c "b = b'x' * (3 * 10**9); print('not stopped at 1 GB')"
state() { g show "$1" --json 2>/dev/null | "$PY" -c 'import json,sys; print(json.load(sys.stdin)["state"])' 2>/dev/null; }
ended() { for j in shared-busy shared-idle whole oom; do case $(state $j) in pending|running|'') return 1 ;; esac; done; }
t0=$(date +%s)
while [ $(($(date +%s) - t0)) -lt 200 ]; do
  sleep 5
  echo "== t=$(($(date +%s) - t0)) s"
  g top; nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader
  ended && break
done
for j in shared-busy shared-idle whole; do echo "== show $j"; g show "$j"; g show "$j" --json >"$OUT/$j.json"; done
echo "== show oom"; g show oom
echo "== logs"; for j in shared-busy shared-idle whole; do g logs "$j" | tail -3; done
echo "== usage"; T=$ADMIN g usage
echo "== series of whole"; g show whole --series | head -40

echo "== expectations"
field() { "$PY" -c "import json,sys; d=json.load(open('$OUT/$1.json')); print(eval('d' + sys.argv[1]))" "$2" 2>/dev/null || echo None; }
expect "shared-busy finished" test "$(field shared-busy '["state"]')" = finished
expect "shared-idle was reclaimed (idle on a time-shared GPU while its neighbour was busy)" \
  test "$(field shared-idle '["state"]')" = reclaimed
expect "whole was reclaimed after going idle" test "$(field whole '["state"]')" = reclaimed
expect "shared-busy's peak VRAM is its own (6 GB held, not the GPU's total)" \
  "$PY" -c "import sys; v=$(field shared-busy '["usage"]["vram_peak_gb"]'); sys.exit(not 6 <= v < 9)"
expect "shared-idle's peak VRAM is its own (4 GB)" \
  "$PY" -c "import sys; v=$(field shared-idle '["usage"]["vram_peak_gb"]'); sys.exit(not 4 <= v < 7)"
expect "shared-busy was seen busy" \
  "$PY" -c "import sys; sys.exit(not $(field shared-busy '["usage"]["util_peak"]') > 0.5)"
expect "whole was seen busy, then idle" \
  "$PY" -c "import sys; sys.exit(not $(field whole '["usage"]["util_peak"]') > 0.5)"
expect "the agent put its workers in cgroups" grep -q "workers run in cgroups" "$OUT/agent.log"
expect "a job past its memory_gb is stopped by its cgroup" test "$(state oom)" = failed
echo "$fails expectation(s) failed"
exit $((fails > 0))
