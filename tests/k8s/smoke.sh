#!/usr/bin/env bash
# Smoke test of the Kubernetes test peers: a loopback cluster (etcd, kube-apiserver,
# kube-controller-manager, kwok, kube-scheduler), 4 kwok nodes of 8 GPUs, a Job of 2 pods of
# nvidia.com/gpu: 8 bound and Running, check-allocatable (and that it catches an overfull
# node), a Deployment and a completing Job through the real controllers; then everything
# stopped and no peer process left. Exits non-zero on failure; ends with 'N passed, N failed'.
#
#   tests/k8s/smoke.sh            (GANTRY_K8S_KEEP=1 keeps the cluster directory and its logs)
set -uo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CLUSTER=$HERE/cluster.sh
DIR=$(mktemp -d "${TMPDIR:-/tmp}/gantry-k8s-smoke.XXXXXX")
passed=0
failed=0

ok() { passed=$((passed + 1)); echo "ok: $*"; }
bad() { failed=$((failed + 1)); echo "FAIL: $*"; }
check() { # DESC CMD...
  local desc=$1; shift
  if "$@"; then ok "$desc"; else bad "$desc"; fi
}

peer_procs() { # live processes running a binary from $BIN
  local p exe
  for p in /proc/[0-9]*; do
    exe=$(readlink "$p/exe" 2>/dev/null) || continue
    [[ $exe == "$BIN"/* ]] && echo "${p#/proc/} $exe"
  done
  return 0
}

finish() {
  if [[ -f $DIR/cluster.env ]]; then "$CLUSTER" stop "$DIR" >/dev/null 2>&1 || true; fi
  if [[ ${GANTRY_K8S_KEEP:-0} == 1 || $failed -gt 0 ]]; then
    echo "cluster directory kept: $DIR (logs in $DIR/logs)"
  else
    rm -rf "$DIR"
  fi
}
trap finish EXIT

summary() {
  echo "$passed passed, $failed failed"
  [[ $failed -eq 0 ]]
}

echo "== cluster in $DIR"
if ! "$CLUSTER" start "$DIR" --with-kube-scheduler; then
  bad "cluster start"
  for f in "$DIR"/logs/*.log; do echo "--- $f"; tail -n 20 "$f"; done
  summary; exit 1
fi
ok "cluster start (etcd, kube-apiserver, kube-controller-manager, kwok, kube-scheduler)"
# shellcheck disable=SC1091
source "$DIR/cluster.env"
K=("$BIN/kubectl" --kubeconfig "$DIR/kubeconfig")
k() { "${K[@]}" "$@"; }

loopback_only() { # every TCP socket a peer listens on is on 127.0.0.1
  local f pid addrs bad=0
  command -v ss >/dev/null || { echo "    (ss not installed; not checked)"; return 0; }
  for f in "$DIR"/pids/*.pid; do
    pid=$(<"$f")
    addrs=$(ss -ltnpH 2>/dev/null | grep "pid=$pid," | awk '{print $4}')
    [[ -n $addrs ]] || { echo "    $(basename "$f" .pid): no listening socket found"; bad=1; }
    while read -r a; do
      [[ -z $a || $a == 127.0.0.1:* ]] || { echo "    $(basename "$f" .pid) listens on $a"; bad=1; }
    done <<<"$addrs"
  done
  return $bad
}

want=$(awk '$1 == "k8s.io/kubernetes" {print $2; exit}' "$HERE/peers/kubernetes/go.mod")
server_version=$(k version -o json | python3 -c 'import json,sys; print(json.load(sys.stdin)["serverVersion"]["gitVersion"])')
check "kube-apiserver reports $want (got $server_version)" test "$server_version" = "$want"
check "every peer listens on 127.0.0.1 only" loopback_only

check "4 kwok nodes Ready" "$CLUSTER" nodes "$DIR" 4
check "nodes advertise nvidia.com/gpu=8 and the GPU feature discovery labels" bash -c '
  [[ $("$@" get nodes -l type=kwok,nvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3,nvidia.com/gpu.memory=81559 \
        -o jsonpath="{range .items[*]}{.status.allocatable.nvidia\.com/gpu} {end}") == "8 8 8 8 " ]]' _ "${K[@]}"

k apply -f - >/dev/null <<'EOF'
apiVersion: batch/v1
kind: Job
metadata:
  name: smoke-gpu
spec:
  parallelism: 2
  completions: 2
  backoffLimit: 0
  template:
    metadata:
      labels: {app: smoke-gpu}
    spec:
      restartPolicy: Never
      nodeSelector: {type: kwok}
      tolerations:
      - {key: kwok.x-k8s.io/node, operator: Exists, effect: NoSchedule}
      containers:
      - name: train
        image: registry.invalid/train:1
        resources:
          requests: {cpu: "8", memory: 64Gi, nvidia.com/gpu: "8"}
          limits: {nvidia.com/gpu: "8"}
EOF
check "Job smoke-gpu: 2 pods Running" \
  k wait --for=jsonpath='{.status.phase}'=Running pod -l app=smoke-gpu --timeout=60s
nodes_used=$(k get pods -l app=smoke-gpu -o jsonpath='{range .items[*]}{.spec.nodeName}{"\n"}{end}' | sort -u | grep -c .)
npods=$(k get pods -l app=smoke-gpu --no-headers | grep -c Running)
check "Job smoke-gpu: 2 Running pods bound by kube-scheduler on 2 different nodes (got $npods pods on $nodes_used nodes)" \
  test "$npods" = 2 -a "$nodes_used" = 2
check "check-allocatable passes" "$CLUSTER" check-allocatable "$DIR"

# A pod bound straight to a full node (no scheduler): kwok runs it, nothing refuses it,
# and check-allocatable must name the node.
full=$(k get pods -l app=smoke-gpu -o jsonpath='{.items[0].spec.nodeName}')
k apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Pod
metadata: {name: smoke-overfull, labels: {app: smoke-overfull}}
spec:
  nodeName: $full
  tolerations: [{operator: Exists}]
  containers:
  - name: c
    image: registry.invalid/x:1
    resources: {limits: {nvidia.com/gpu: "1"}}
EOF
out=$("$CLUSTER" check-allocatable "$DIR" 2>&1); rc=$?
check "check-allocatable fails naming $full when it is overfull" \
  bash -c '[[ $1 -ne 0 && $2 == *"$3: nvidia.com/gpu requested 9 > allocatable 8"* ]]' _ "$rc" "$out" "$full"
echo "$out" | sed 's/^/    /'
k delete pod smoke-overfull --wait=false >/dev/null
check "the overfull pod goes away on delete (kwok's pod-delete stage)" \
  k wait --for=delete pod/smoke-overfull --timeout=60s

# Deployment -> ReplicaSet -> pods, and a deleted pod replaced, through the real controllers.
k apply -f - >/dev/null <<'EOF'
apiVersion: apps/v1
kind: Deployment
metadata:
  name: smoke-web
spec:
  replicas: 2
  selector:
    matchLabels: {app: smoke-web}
  template:
    metadata:
      labels: {app: smoke-web}
    spec:
      nodeSelector: {type: kwok}
      containers:
      - name: web
        image: registry.invalid/web:1
        resources: {requests: {cpu: 500m, memory: 1Gi}}
EOF
check "Deployment smoke-web: 2 replicas available" \
  k rollout status deployment/smoke-web --timeout=90s
victim=$(k get pods -l app=smoke-web -o jsonpath='{.items[0].metadata.name}')
k delete pod "$victim" --wait=false >/dev/null
check "ReplicaSet replaces a deleted pod" bash -c '
  for i in $(seq 120); do
    n=$("${@:2}" get pods -l app=smoke-web --field-selector=status.phase=Running -o name | grep -v "pod/$1\$" | grep -c .)
    [[ $n -ge 2 ]] && exit 0; sleep 0.5
  done; exit 1' _ "$victim" "${K[@]}"

# A Job whose pod completes (kwok's pod-complete stage, opted in by annotation).
k apply -f - >/dev/null <<'EOF'
apiVersion: batch/v1
kind: Job
metadata:
  name: smoke-short
spec:
  template:
    metadata:
      annotations: {pod-complete.stage.kwok.x-k8s.io/delay: 2s}
    spec:
      restartPolicy: Never
      nodeSelector: {type: kwok}
      containers:
      - name: c
        image: registry.invalid/x:1
        resources: {requests: {cpu: "1"}}
EOF
check "Job smoke-short completes (pod Succeeded after its 2s annotation)" \
  k wait --for=condition=Complete job/smoke-short --timeout=60s
check "Job smoke-gpu still running (no completion annotation)" \
  bash -c '[[ $("$@" get pods -l app=smoke-gpu --field-selector=status.phase=Running -o name | grep -c .) == 2 ]]' _ "${K[@]}"
check "check-allocatable passes at the end" "$CLUSTER" check-allocatable "$DIR"

echo "== stop"
check "cluster stop" "$CLUSTER" stop "$DIR"
left=$(peer_procs)
check "no peer process left behind${left:+ ($left)}" test -z "$left"

summary
