#!/usr/bin/env bash
# The live check on a machine with a real NVIDIA GPU (CI has none): NVML discovery, and
# gantryd with one real gantry-agent (NVML, not --emulate) running three PyTorch jobs on
# GPU 0, so that usage, per-process accounting on a shared GPU and idle reclamation run on
# a real driver. Reads nothing from the network; changes no GPU setting (no MIG). The
# first phase runs no MPS daemon (the two "mps" jobs time-share the GPU, which is what
# per-process accounting must tell apart); the second starts one of its own (private
# directories, stopped at the end) and runs two MPS shares under it, one busy, one idle.
# GPU_CHECK_PHASES="plain", "mps" or both (the default) chooses.
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
# holds; each failed one is printed as FAIL; 2, saying so, on a machine with no NVIDIA GPU
# (nvidia-smi missing or listing none).
#
#   scripts/gpu_check.sh --tiny BUILD_DIR OUT_DIR
#
# The CI check (ctest -L bench; CI has no GPU): the parts that need no GPU, in a few
# seconds. BIN_DIR is made in OUT_DIR/bin from a build folder (src/gantryd, src/gantry,
# src/gantry-agent, tests/agent/agent_gpu_test); the cluster config is written as for
# the real run (model H100-80GB) and must pass `gantry validate`; job.py must compile;
# gantryd and one agent on a free port (--emulate 1xH100-80GB instead of NVML) must bring
# node gpu-0 up through the script's own start(), and a CPU-only job submitted as the
# phases submit theirs must finish and read back through show --json (the helpers the
# expectations use). Then, on a machine without a GPU, the real run must refuse at once
# with status 2 and say why; with one, that step is left to the real run. Exits 1 when
# an expectation fails (each printed as FAIL).
set -uo pipefail
TINY=0
if [ "${1:-}" = --tiny ]; then
  TINY=1
  shift
  BUILD=$(cd "$1" && pwd) || exit 2
  mkdir -p "$2/bin"
  for f in src/gantryd src/gantry src/gantry-agent tests/agent/agent_gpu_test; do
    [ -x "$BUILD/$f" ] || { echo "gpu_check.sh --tiny: no $BUILD/$f" >&2; exit 2; }
    ln -sf "$BUILD/$f" "$2/bin/"
  done
  set -- "$2/bin" "$2"
elif ! nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
  echo "gpu_check.sh: no NVIDIA GPU on this machine (nvidia-smi $(command -v nvidia-smi >/dev/null &&
    echo 'lists none' || echo 'is missing')): this check needs one (scripts/gpu_check.sh --tiny runs its other parts)" >&2
  exit 2
fi
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

if [ $TINY -eq 0 ]; then
echo "== machine"; date -u; uname -r; nvidia-smi --query-gpu=name,memory.total,driver_version,mig.mode.current --format=csv
echo "== gpu test (NVML discovery, a job sees exactly its GPU)"
"$BIN/agent_gpu_test"
expect "agent_gpu_test passes" test $? -eq 0
fi

name=$([ $TINY -eq 1 ] && echo H100 || nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
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
APID= GPID=
trap 'stop; [ -n "${MPS_CTL:-}" ] && echo quit | "$MPS_CTL"; rm -rf "$W"' EXIT
# start TAG PORT: a fresh gantryd (database W/TAG.db) and one NVML agent for node gpu-0,
# logs and events in OUT with TAG in their names; sets ADMIN, TEAM and the function g.
start() {
  local tag=$1 db="$W/$1.db"
  PORT=$2
  "$D" init --db "$db" >/dev/null
  tok() { "$D" token create --db "$db" --config "$W/cluster.yaml" "$@"; }
  ADMIN=$(tok --admin); local agent; agent=$(tok --agent --any-node); TEAM=$(tok --team a --queues research --user alice)
  "$D" --config "$W/cluster.yaml" --db "$db" --listen 127.0.0.1:$PORT --events "$OUT/$tag-events.jsonl" \
    --usage-sample-s 5 >"$OUT/$tag-gantryd.log" 2>&1 &
  GPID=$!
  sleep 1
  GANTRY_TOKEN=$agent "$BIN/gantry-agent" --server http://127.0.0.1:$PORT --node gpu-0 \
    --state-dir "$W/$tag-agent" --run-as agent ${EMULATE:+--emulate "$EMULATE"} >"$OUT/$tag-agent.log" 2>&1 &
  APID=$!
  for _ in $(seq 50); do T=$ADMIN g nodes 2>/dev/null | grep -q ' up ' && break; sleep 0.2; done
}
# (A bare `wait` would wait for the tee above too: never.)
stop() { [ -n "$APID$GPID" ] || return 0; kill $APID $GPID 2>/dev/null; wait $APID $GPID 2>/dev/null; APID= GPID=; }
g() { GANTRY_TOKEN=${T:-$TEAM} "$BIN/gantry" --server http://127.0.0.1:$PORT "$@"; }
state() { g show "$1" --json 2>/dev/null | "$PY" -c 'import json,sys; print(json.load(sys.stdin)["state"])' 2>/dev/null; }
ended() { for j in "$@"; do case $(state $j) in pending|running|'') return 1 ;; esac; done; }
field() { "$PY" -c "import json,sys; d=json.load(open('$OUT/$1.json')); print(eval('d' + sys.argv[1]))" "$2" 2>/dev/null || echo None; }
# expect_shares BUSY IDLE: each share's peak VRAM is its own (6 and 4 GB held, not the
# GPU's total), and the busy one was seen busy.
expect_shares() {
  expect "$1's peak VRAM is its own (6 GB held)" \
    "$PY" -c "import sys; v=$(field $1 '["usage"]["vram_peak_gb"]'); sys.exit(not 6 <= v < 9)"
  expect "$2's peak VRAM is its own (4 GB)" \
    "$PY" -c "import sys; v=$(field $2 '["usage"]["vram_peak_gb"]'); sys.exit(not 4 <= v < 7)"
  expect "$1 was seen busy" "$PY" -c "import sys; sys.exit(not $(field $1 '["usage"]["util_peak"]') > 0.5)"
}
# What NVML itself says of GPU 0's processes (compute list, MPS list, utilization samples
# of the last 5 s), to read beside what Gantry made of it.
nvml_dump() {
  "$PY" - <<'PYEOF' 2>&1 | sed 's/^/  nvml: /'
import time, pynvml as n
n.nvmlInit(); h = n.nvmlDeviceGetHandleByIndex(0)
def procs(f):
    try: return [(p.pid, p.usedGpuMemory // 2**20) for p in f(h)]
    except Exception as e: return repr(e)
print("compute", procs(n.nvmlDeviceGetComputeRunningProcesses))
print("mps    ", procs(n.nvmlDeviceGetMPSComputeRunningProcesses))
try: print("samples", sorted({(s.pid, s.smUtil) for s in n.nvmlDeviceGetProcessUtilization(h, int((time.time() - 5) * 1e6))}))
except Exception as e: print("samples", repr(e))
print("device util", n.nvmlDeviceGetUtilizationRates(h).gpu)
PYEOF
}

if [ $TINY -eq 1 ]; then
  echo "== tiny: what needs no GPU"
  expect "the cluster config passes gantry validate" "$BIN/gantry" validate "$W/cluster.yaml"
  expect "job.py compiles" "$PY" -c "import sys; compile(open(sys.argv[1]).read(), sys.argv[1], 'exec')" "$W/job.py"
  EMULATE=1x$model
  start tiny "$("$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
  gpu0_up() { T=$ADMIN g nodes | tee "$OUT/tiny-nodes.txt" | grep -q '^gpu-0 .* up '; }
  expect "gantryd and an (emulated) agent bring node gpu-0 up" gpu0_up
  g submit --id cpu-only --queue research --gpus 0 --cpus 1 --memory-gb 1 --grace-s 5 -- "$PY" -c "print('tiny')"
  for _ in $(seq 100); do ended cpu-only && break; sleep 0.1; done
  g show cpu-only --json >"$OUT/cpu-only.json"
  expect "a CPU-only job finished (show --json read back)" test "$(field cpu-only '["state"]')" = finished
  stop
  if nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
    echo "== a GPU is here: the real run is scripts/gpu_check.sh BIN_DIR OUT_DIR"
  else
    echo "== no GPU: the real run must refuse"
    bash "$0" "$BIN" "$OUT/refused" >"$OUT/refused.txt" 2>&1
    rc=$?
    sed 's/^/  /' "$OUT/refused.txt"
    expect "without a GPU the real run exits 2 at once" test $rc -eq 2
    expect "and says why" grep -q "no NVIDIA GPU on this machine" "$OUT/refused.txt"
  fi
  echo "$fails expectation(s) failed"
  exit $((fails > 0))
fi

# GPU_CHECK_PHASES: which phases run ("plain mps", the default; "mps" alone to recheck it).
PHASES=" ${GPU_CHECK_PHASES:-plain mps} "
if [[ $PHASES == *" plain "* ]]; then
  start plain 18080
  echo "== nodes"; T=$ADMIN g nodes
  curl -s -H "Authorization: Bearer $ADMIN" http://127.0.0.1:$PORT/v1/nodes >"$OUT/nodes.json"

  g submit --id shared-busy --queue research --gpus 0.5 --sharing mps --vram-gb 10 --grace-s 5 -- "$PY" "$W/job.py" busy 45 6
  g submit --id shared-idle --queue research --gpus 0.5 --sharing mps --vram-gb 10 --grace-s 5 -- "$PY" "$W/job.py" idle 120 4
  g submit --id whole --queue research --gpus 1 --vram-gb 20 --grace-s 5 -- "$PY" "$W/job.py" busy-then-idle 25 8
  g submit --id oom --queue research --gpus 0 --cpus 1 --memory-gb 1 -- "$PY" -c "b = b'x' * (3 * 10**9); print('not stopped at 1 GB')"
  # A job without GPUs may not open the GPU's device file (its cgroup's device rules), only
  # /dev/nvidiactl: finished (exit 0) when refused, failed when it could.
  g submit --id nogpu --queue research --gpus 0 --cpus 1 --memory-gb 1 -- "$PY" -c "
import sys
open('/dev/nvidiactl', 'rb').close()
try:
    open('/dev/nvidia0', 'rb').close()
except PermissionError as e:
    print('refused:', e); sys.exit(0)
print('opened /dev/nvidia0'); sys.exit(3)"
  t0=$(date +%s)
  while [ $(($(date +%s) - t0)) -lt 200 ]; do
    sleep 5
    echo "== t=$(($(date +%s) - t0)) s"
    g top; nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader; nvml_dump
    ended shared-busy shared-idle whole oom nogpu && break
  done
  for j in shared-busy shared-idle whole; do echo "== show $j"; g show "$j"; g show "$j" --json >"$OUT/$j.json"; done
  echo "== show oom"; g show oom
  echo "== show nogpu"; g show nogpu; g logs nogpu | tail -3
  echo "== logs"; for j in shared-busy shared-idle whole; do g logs "$j" | tail -3; done
  echo "== usage"; T=$ADMIN g usage
  echo "== series of whole"; g show whole --series | head -40

  echo "== expectations"
  expect "shared-busy finished" test "$(field shared-busy '["state"]')" = finished
  expect "shared-idle was reclaimed (idle on a time-shared GPU while its neighbour was busy)" \
    test "$(field shared-idle '["state"]')" = reclaimed
  expect "whole was reclaimed after going idle" test "$(field whole '["state"]')" = reclaimed
  expect_shares shared-busy shared-idle
  expect "whole was seen busy, then idle" \
    "$PY" -c "import sys; sys.exit(not $(field whole '["usage"]["util_peak"]') > 0.5)"
  expect "the agent put its workers in cgroups" grep -q "workers run in cgroups" "$OUT/plain-agent.log"
  expect "a job past its memory_gb is stopped by its cgroup" test "$(state oom)" = failed
  expect "a job without GPUs may not open /dev/nvidia0 (device rules)" test "$(state nogpu)" = finished
  # What the node reports of its isolation (heartbeat -> /v1/nodes, `gantry nodes`).
  expect "the node reports its workers in cgroups and fenced to their GPUs" "$PY" -c "
import json, sys
n = [n for n in json.load(open('$OUT/nodes.json'))['nodes'] if n['name'] == 'gpu-0'][0]
print('  isolation:', n.get('isolation')); i = n.get('isolation', {})
sys.exit(not (i.get('cgroups') and i.get('gpu_devices')))"
  stop
fi

# The same two shares under a real MPS daemon (a process of this script's own, with private
# pipe and log directories the agent passes to its workers; no GPU setting is changed and
# it is stopped at the end). NVML then lists the clients in its MPS list; whether their
# utilization samples name the clients or the MPS server decides what a share's own
# utilization can be.
MPS_CTL=$(command -v nvidia-cuda-mps-control || find / -xdev -name nvidia-cuda-mps-control -type f 2>/dev/null | head -1)
if [[ $PHASES != *" mps "* ]]; then
  :
elif [ -z "$MPS_CTL" ]; then
  echo "== no nvidia-cuda-mps-control on this machine: the MPS daemon phase is not run"
else
  echo "== MPS daemon ($MPS_CTL)"
  export CUDA_MPS_PIPE_DIRECTORY=$W/mps-pipe CUDA_MPS_LOG_DIRECTORY=$W/mps-log
  mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
  "$MPS_CTL" -d
  expect "the MPS control daemon started" test $? -eq 0
  start mps 18081
  g submit --id mps-busy --queue research --gpus 0.5 --sharing mps --vram-gb 10 --grace-s 5 -- "$PY" "$W/job.py" busy 45 6
  g submit --id mps-idle --queue research --gpus 0.5 --sharing mps --vram-gb 10 --grace-s 5 -- "$PY" "$W/job.py" idle 120 4
  clients=0
  t0=$(date +%s)
  while [ $(($(date +%s) - t0)) -lt 150 ]; do
    sleep 5
    echo "== mps t=$(($(date +%s) - t0)) s"
    g top; nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv,noheader; nvml_dump
    for s in $(echo get_server_list | "$MPS_CTL"); do
      c=$(echo "get_client_list $s" | "$MPS_CTL" | wc -w); echo "  mps server $s: $c client(s)"
      [ "$c" -gt "$clients" ] && clients=$c
    done
    ended mps-busy mps-idle && break
  done
  for j in mps-busy mps-idle; do echo "== show $j"; g show "$j"; g show "$j" --json >"$OUT/$j.json"; g logs "$j" | tail -3; done
  echo "== series of mps-busy"; g show mps-busy --series | head -20
  stop
  echo quit | "$MPS_CTL"; MPS_CTL=
  echo "== MPS daemon log"; tail -20 "$CUDA_MPS_LOG_DIRECTORY/control.log"
  echo "== expectations, MPS daemon"
  expect "both shares were the MPS server's clients at once" test "$clients" -ge 2
  expect "mps-busy finished (not reclaimed while busy)" test "$(field mps-busy '["state"]')" = finished
  expect "mps-idle was reclaimed" test "$(field mps-idle '["state"]')" = reclaimed
  expect "mps-idle was reclaimed only after mps-busy ended (it counts as busy as the server)" \
    "$PY" -c "import sys; sys.exit(not $(field mps-idle '["end"]') >= $(field mps-busy '["end"]'))"
  expect_shares mps-busy mps-idle
fi
echo "$fails expectation(s) failed"
exit $((fails > 0))
