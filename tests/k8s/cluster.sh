#!/usr/bin/env bash
# A real Kubernetes control plane on loopback for the k8s tests, from the peers that
# scripts/k8s_peers.sh builds (see docs/kubernetes-peers.md):
#
#   cluster.sh start DIR [--with-kube-scheduler]   etcd, kube-apiserver, kube-controller-manager,
#                                                   kwok (and kube-scheduler); DIR/kubeconfig is admin
#   cluster.sh stop DIR                             stop everything started in DIR (logs stay)
#   cluster.sh start-scheduler DIR | stop-scheduler DIR
#   cluster.sh nodes DIR N [GPUS]                   N kwok nodes with GPUS nvidia.com/gpu (default 8)
#   cluster.sh check-allocatable DIR                fail, naming the node, if bound pods' requests
#                                                   exceed a node's allocatable
#   cluster.sh status DIR                           which components run
#
# Everything binds to 127.0.0.1 on free ports; DIR/cluster.env records them (API_PORT, ...,
# BIN, KUBECONFIG, PKI). Binaries come from $GANTRY_K8S_BIN if set, else from
# scripts/k8s_peers.sh (which builds them the first time, a long build).
# Extra flags per component: GANTRY_K8S_{ETCD,APISERVER,KCM,SCHEDULER,KWOK}_ARGS.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
UTIL=$HERE/k8s_util.py
START_TIMEOUT=${GANTRY_K8S_START_TIMEOUT:-120}

log() { echo "cluster: $*" >&2; }
die() { echo "cluster: $*" >&2; exit 1; }
usage() { sed -n '2,18p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2; exit 2; }

abs_dir() { mkdir -p "$1" && (cd "$1" && pwd); }

load_env() { # DIR
  [[ -f $1/cluster.env ]] || die "$1/cluster.env not found (run: cluster.sh start $1)"
  # shellcheck disable=SC1091
  source "$1/cluster.env"
}

# ------------------------------------------------------------------ processes

pid_alive() { # DIR NAME -> 0 if DIR/pids/NAME.pid names a live process running $BIN/NAME
  local f=$1/pids/$2.pid pid exe
  [[ -f $f ]] || return 1
  pid=$(<"$f")
  [[ -n $pid && -d /proc/$pid ]] || return 1
  exe=$(readlink "/proc/$pid/exe" 2>/dev/null || true)
  [[ $exe == "$BIN/$2" || $exe == "$BIN/$2 (deleted)" ]]
}

launch() { # DIR NAME ARGS... (binary $BIN/NAME, log DIR/logs/NAME.log)
  local dir=$1 name=$2; shift 2
  mkdir -p "$dir/logs" "$dir/pids"
  nohup "$BIN/$name" "$@" >>"$dir/logs/$name.log" 2>&1 </dev/null &
  echo $! >"$dir/pids/$name.pid"
}

launch_kwok() { # DIR (on $KWOK_PORT)
  # shellcheck disable=SC2086
  launch "$1" kwok \
    --kubeconfig "$1/kwok.kubeconfig" \
    --config "$1/kwok.yaml" \
    --manage-all-nodes=false \
    --manage-nodes-with-annotation-selector kwok.x-k8s.io/node=fake \
    --node-lease-duration-seconds 40 \
    --cidr 10.64.0.1/10 \
    --node-ip 127.0.0.1 \
    --server-address "127.0.0.1:$KWOK_PORT" \
    ${GANTRY_K8S_KWOK_ARGS:-}
}

stop_one() { # DIR NAME
  local dir=$1 name=$2 pid i
  if pid_alive "$dir" "$name"; then
    pid=$(<"$dir/pids/$name.pid")
    kill -TERM "$pid" 2>/dev/null || true
    for ((i = 0; i < 150; i++)); do
      [[ -d /proc/$pid ]] || break
      # a zombie child of this shell counts as gone
      [[ $(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null) == Z ]] && break
      sleep 0.1
    done
    if [[ -d /proc/$pid ]] && pid_alive "$dir" "$name"; then
      log "$name (pid $pid) did not stop on TERM in 15 s; sending KILL"
      kill -KILL "$pid" 2>/dev/null || true
      sleep 0.2
    fi
    log "stopped $name (pid $pid)"
  fi
  rm -f "$dir/pids/$name.pid"
}

wait_for() { # DESC NAME DIR CMD... : poll CMD until it succeeds; fail early if NAME died
  local desc=$1 name=$2 dir=$3; shift 3
  local deadline=$((SECONDS + START_TIMEOUT))
  while ! "$@" >/dev/null 2>&1; do
    if ! pid_alive "$dir" "$name"; then
      log "$name exited while waiting for $desc; last lines of $dir/logs/$name.log:"
      tail -n 30 "$dir/logs/$name.log" >&2 || true
      return 1
    fi
    if ((SECONDS > deadline)); then
      log "timed out after ${START_TIMEOUT}s waiting for $desc; last lines of $dir/logs/$name.log:"
      tail -n 30 "$dir/logs/$name.log" >&2 || true
      return 1
    fi
    sleep 0.25
  done
}

# ------------------------------------------------------------------ certificates

make_pki() { # PKI
  local pki=$1
  mkdir -p "$pki"
  (
    cd "$pki"
    umask 077
    mkca() { # NAME CN
      openssl req -x509 -newkey rsa:2048 -nodes -keyout "$1.key" -out "$1.crt" -days 3650 \
        -subj "/CN=$2" \
        -addext "basicConstraints=critical,CA:TRUE" \
        -addext "keyUsage=critical,keyCertSign,cRLSign,digitalSignature" 2>/dev/null
    }
    sign() { # NAME SUBJECT EXTENSIONS [CA]
      local ca=${4:-ca}
      openssl req -new -newkey rsa:2048 -nodes -keyout "$1.key" -out "$1.csr" -subj "$2" 2>/dev/null
      printf '%b\n' "$3" >"$1.ext"
      openssl x509 -req -in "$1.csr" -CA "$ca.crt" -CAkey "$ca.key" -CAcreateserial -days 3650 \
        -sha256 -extfile "$1.ext" -out "$1.crt" 2>/dev/null
      rm -f "$1.csr" "$1.ext"
    }
    mkca ca gantry-test-ca
    # the aggregation layer's CA (requestheader authentication), as kubeadm sets it up
    mkca front-proxy-ca gantry-test-front-proxy-ca
    local client="basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=clientAuth"
    sign apiserver "/CN=kube-apiserver" \
      "basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\nsubjectAltName=IP:127.0.0.1,IP:10.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
    sign admin "/O=system:masters/CN=admin" "$client"
    sign kube-controller-manager "/CN=system:kube-controller-manager" "$client"
    sign kube-scheduler "/CN=system:kube-scheduler" "$client"
    # kwok writes node and pod status, leases and events for the nodes it fakes; it is
    # given cluster-admin rights to keep the harness simple.
    sign kwok "/O=system:masters/CN=kwok" "$client"
    sign front-proxy-client "/CN=front-proxy-client" "$client" front-proxy-ca
    openssl genrsa -out sa.key 2048 2>/dev/null
    openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
    chmod 644 ./*.crt sa.pub
  )
}

write_kubeconfig() { # FILE USER(cert name) PKI PORT
  cat >"$1" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: gantry-test
  cluster:
    server: https://127.0.0.1:$4
    certificate-authority: $3/ca.crt
users:
- name: $2
  user:
    client-certificate: $3/$2.crt
    client-key: $3/$2.key
contexts:
- name: $2@gantry-test
  context:
    cluster: gantry-test
    user: $2
    namespace: default
current-context: $2@gantry-test
EOF
}

# ------------------------------------------------------------------ kwok stages

# kwok needs Stage definitions (what happens to a node or pod it manages). The upstream
# ones for the pinned kwok version are copied by scripts/k8s_peers.sh into $BIN/kwok-stages:
#   node-initialize, node-heartbeat-with-lease   nodes become Ready and keep their lease
#   pod-ready (fast)                             a bound pod is Running and Ready at once
#   pod-delete (general, edited below)           a deleted pod, once its finalizers are gone,
#       goes away after 1 s, or after its annotation pod-delete.stage.kwok.x-k8s.io/delay
#       (upstream picks a random time up to the end of the grace period instead)
#   pod-stop (ours, from pod-complete)            a Running pod being deleted stops (phase Failed)
#       1 s later, as its kubelet would make it, so finalizers such as the Job controller's go
#   pod-complete (general, edited below)         a Running pod that has the annotation
#       pod-complete.stage.kwok.x-k8s.io/delay (e.g. "30s") Succeeds that long after it
#       started running; pods without it run until they are deleted (upstream completes
#       every Job pod after 1-6 s)
write_kwok_config() { # FILE
  local s=$BIN/kwok-stages f
  for f in node-initialize node-heartbeat-with-lease pod-ready pod-delete pod-complete; do
    [[ -f $s/$f.yaml ]] || die "$s/$f.yaml missing (rebuild with scripts/k8s_peers.sh)"
  done
  python3 - "$s" >"$1" <<'PY'
import os, sys
stages = sys.argv[1]
def read(name):
    with open(os.path.join(stages, name + ".yaml")) as f:
        return f.read()
def sub(text, name, old, new):
    if text.count(old) != 1:
        sys.exit(f"cluster: kwok's {name} stage is not as expected; cannot find {old!r}")
    return text.replace(old, new)
out = [read("node-initialize"), read("node-heartbeat-with-lease"), read("pod-ready")]
t = read("pod-delete")
# deterministic: no random delay up to the deletion timestamp
t = sub(t, "pod-delete", "    jitterDurationFrom:\n      expressionFrom: '.metadata.deletionTimestamp'\n", "")
out.append(t)
t = read("pod-complete")
# only pods that ask for it complete, Job pods or not, and exactly when they ask
t = sub(t, "pod-complete", "    matchExpressions:\n",
        "    matchExpressions:\n"
        "    - key: '.metadata.annotations[\"pod-complete.stage.kwok.x-k8s.io/delay\"]'\n"
        "      operator: 'Exists'\n")
t = sub(t, "pod-complete", "    - key: '.metadata.ownerReferences.[].kind'\n      operator: 'In'\n      values:\n      - 'Job'\n", "")
t = sub(t, "pod-complete", "    jitterDurationMilliseconds: 5000\n", "")
out.append(t)
# pod-stop (ours, from upstream's pod-complete): what the kubelet does to a deleted pod's
# containers, which kwok does not. A Running pod being deleted stops 1 s later (or after
# its annotation pod-stop.stage.kwok.x-k8s.io/delay) with phase Failed, exit code 137, so
# the Job controller drops its tracking finalizer and pod-delete can remove it; without
# this, an evicted Job pod stays Terminating forever and its GPUs are never free.
t = read("pod-complete")
t = sub(t, "pod-stop", "  name: pod-complete\n", "  name: pod-stop\n")
t = sub(t, "pod-stop", "    - key: '.metadata.deletionTimestamp'\n      operator: 'DoesNotExist'\n",
        "    - key: '.metadata.deletionTimestamp'\n      operator: 'Exists'\n")
t = sub(t, "pod-stop", "    - key: '.status.conditions.[] | select( .type == \"Ready\" ) | .status'\n      operator: 'In'\n      values:\n      - 'True'\n", "")
t = sub(t, "pod-stop", "    - key: '.metadata.ownerReferences.[].kind'\n      operator: 'In'\n      values:\n      - 'Job'\n", "")
t = sub(t, "pod-stop", "    jitterDurationMilliseconds: 5000\n", "")
t = sub(t, "pod-stop", "            exitCode: 0\n", "            exitCode: 137\n")
t = sub(t, "pod-stop", "            reason: Completed\n", "            reason: Error\n")
t = sub(t, "pod-stop", "      phase: Succeeded\n", "      phase: Failed\n")
t = t.replace("pod-complete.stage.kwok.x-k8s.io", "pod-stop.stage.kwok.x-k8s.io")
out.append(t)
print("\n---\n".join(x.strip("\n") + "\n" for x in out), end="")
PY
}

# ------------------------------------------------------------------ commands

cmd_start() {
  local dir="" with_sched=0 a
  for a in "$@"; do
    case $a in
      --with-kube-scheduler) with_sched=1 ;;
      -*) die "unknown option $a" ;;
      *) [[ -z $dir ]] || usage; dir=$a ;;
    esac
  done
  [[ -n $dir ]] || usage
  dir=$(abs_dir "$dir")
  if [[ -f $dir/cluster.env ]]; then
    load_env "$dir"
    local n
    for n in etcd kube-apiserver kube-controller-manager kube-scheduler kwok; do
      pid_alive "$dir" "$n" && die "$n is already running in $dir (cluster.sh stop $dir first)"
    done
  fi

  if [[ -n ${GANTRY_K8S_BIN:-} ]]; then
    BIN=$GANTRY_K8S_BIN
  else
    BIN=$("$ROOT/scripts/k8s_peers.sh" | tail -n 1)
  fi
  local b
  for b in etcd kube-apiserver kube-controller-manager kube-scheduler kubectl kwok; do
    [[ -x $BIN/$b ]] || die "$BIN/$b missing"
  done

  rm -rf "$dir/etcd-data" "$dir/pids"
  mkdir -p "$dir/logs" "$dir/pids"
  local PKI=$dir/pki
  [[ -f $PKI/front-proxy-client.crt && -f $PKI/sa.key ]] || make_pki "$PKI"

  local ports
  read -r -a ports <<<"$(python3 "$UTIL" ports 7)"
  local ETCD_PORT=${ports[0]} ETCD_PEER_PORT=${ports[1]} API_PORT=${ports[2]} KCM_PORT=${ports[3]}
  local SCHEDULER_PORT=${ports[4]} KWOK_PORT=${ports[5]} ETCD_METRICS_PORT=${ports[6]}
  cat >"$dir/cluster.env" <<EOF
# written by tests/k8s/cluster.sh start
BIN='$BIN'
PKI='$PKI'
KUBECONFIG='$dir/kubeconfig'
API_SERVER='https://127.0.0.1:$API_PORT'
API_PORT=$API_PORT
ETCD_PORT=$ETCD_PORT
ETCD_PEER_PORT=$ETCD_PEER_PORT
ETCD_METRICS_PORT=$ETCD_METRICS_PORT
KCM_PORT=$KCM_PORT
SCHEDULER_PORT=$SCHEDULER_PORT
KWOK_PORT=$KWOK_PORT
EOF
  write_kubeconfig "$dir/kubeconfig" admin "$PKI" "$API_PORT"
  local c
  for c in kube-controller-manager kube-scheduler kwok; do
    write_kubeconfig "$dir/$c.kubeconfig" "$c" "$PKI" "$API_PORT"
  done
  write_kwok_config "$dir/kwok.yaml"

  START_OK=0
  START_DIR=$dir
  trap 'if ((!START_OK)); then log "start failed; stopping what was started"; cmd_stop "$START_DIR" >/dev/null 2>&1 || true; fi' EXIT
  local kubectl=("$BIN/kubectl" --kubeconfig "$dir/kubeconfig")

  # etcd: one member, loopback only. Its data are scratch, so fsync is skipped.
  # shellcheck disable=SC2086
  launch "$dir" etcd --name gantry-test --data-dir "$dir/etcd-data" \
    --listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
    --listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-cluster "gantry-test=http://127.0.0.1:$ETCD_PEER_PORT" \
    --listen-metrics-urls "http://127.0.0.1:$ETCD_METRICS_PORT" \
    --unsafe-no-fsync --quota-backend-bytes 8589934592 --log-level warn ${GANTRY_K8S_ETCD_ARGS:-}
  wait_for "etcd /health" etcd "$dir" curl -sf "http://127.0.0.1:$ETCD_PORT/health"
  log "etcd up on 127.0.0.1:$ETCD_PORT"

  # shellcheck disable=SC2086
  launch "$dir" kube-apiserver \
    --etcd-servers "http://127.0.0.1:$ETCD_PORT" \
    --bind-address 127.0.0.1 --advertise-address 127.0.0.1 --secure-port "$API_PORT" \
    --tls-cert-file "$PKI/apiserver.crt" --tls-private-key-file "$PKI/apiserver.key" \
    --client-ca-file "$PKI/ca.crt" \
    --requestheader-client-ca-file "$PKI/front-proxy-ca.crt" --requestheader-allowed-names front-proxy-client \
    --requestheader-username-headers X-Remote-User --requestheader-group-headers X-Remote-Group \
    --requestheader-extra-headers-prefix X-Remote-Extra- \
    --proxy-client-cert-file "$PKI/front-proxy-client.crt" --proxy-client-key-file "$PKI/front-proxy-client.key" \
    --service-account-issuer https://kubernetes.default.svc.cluster.local \
    --service-account-key-file "$PKI/sa.pub" --service-account-signing-key-file "$PKI/sa.key" \
    --service-cluster-ip-range 10.0.0.0/24 \
    --authorization-mode Node,RBAC \
    --endpoint-reconciler-type none \
    --allow-privileged=true \
    --cert-dir "$dir/apiserver-certs" \
    ${GANTRY_K8S_APISERVER_ARGS:-}
  wait_for "kube-apiserver /readyz" kube-apiserver "$dir" \
    bash -c '[[ $("$@" get --raw /readyz 2>/dev/null) == ok ]]' _ "${kubectl[@]}"
  log "kube-apiserver ready on https://127.0.0.1:$API_PORT"

  # shellcheck disable=SC2086
  launch "$dir" kube-controller-manager \
    --kubeconfig "$dir/kube-controller-manager.kubeconfig" \
    --authentication-kubeconfig "$dir/kube-controller-manager.kubeconfig" \
    --authorization-kubeconfig "$dir/kube-controller-manager.kubeconfig" \
    --bind-address 127.0.0.1 --secure-port "$KCM_PORT" \
    --leader-elect=false \
    --use-service-account-credentials=true \
    --service-account-private-key-file "$PKI/sa.key" --root-ca-file "$PKI/ca.crt" \
    --cluster-signing-cert-file "$PKI/ca.crt" --cluster-signing-key-file "$PKI/ca.key" \
    ${GANTRY_K8S_KCM_ARGS:-}
  wait_for "kube-controller-manager /healthz" kube-controller-manager "$dir" \
    curl -sfk "https://127.0.0.1:$KCM_PORT/healthz"
  # The service-account controller creating "default" shows the controllers are running
  # (pods cannot be created in a namespace before its default service account exists).
  wait_for "the default service account" kube-controller-manager "$dir" \
    "${kubectl[@]}" get serviceaccount default -n default
  log "kube-controller-manager up (healthz on 127.0.0.1:$KCM_PORT)"

  launch_kwok "$dir"
  # (Seen once in CI-like runs: kwok gone at once with an empty log. A second try, on a
  # fresh port, before giving up.)
  sleep 1
  if ! pid_alive "$dir" kwok; then
    KWOK_PORT=$(python3 "$UTIL" ports 1)
    sed -i "s/^KWOK_PORT=.*/KWOK_PORT=$KWOK_PORT/" "$dir/cluster.env"
    log "kwok exited at start (log: $(tail -n 3 "$dir/logs/kwok.log" 2>/dev/null | tr '\n' ' ')); once more on port $KWOK_PORT"
    launch_kwok "$dir"
  fi
  wait_for "kwok /healthz" kwok "$dir" curl -sf "http://127.0.0.1:$KWOK_PORT/healthz"
  log "kwok up (127.0.0.1:$KWOK_PORT), managing nodes annotated kwok.x-k8s.io/node=fake"

  if ((with_sched)); then
    start_scheduler "$dir"
  fi
  START_OK=1
  log "ready: export KUBECONFIG=$dir/kubeconfig; kubectl is $BIN/kubectl"
}

start_scheduler() { # DIR (env loaded)
  local dir=$1
  pid_alive "$dir" kube-scheduler && die "kube-scheduler already running in $dir"
  # shellcheck disable=SC2086
  launch "$dir" kube-scheduler \
    --kubeconfig "$dir/kube-scheduler.kubeconfig" \
    --authentication-kubeconfig "$dir/kube-scheduler.kubeconfig" \
    --authorization-kubeconfig "$dir/kube-scheduler.kubeconfig" \
    --bind-address 127.0.0.1 --secure-port "$SCHEDULER_PORT" \
    --leader-elect=false \
    ${GANTRY_K8S_SCHEDULER_ARGS:-}
  wait_for "kube-scheduler /healthz" kube-scheduler "$dir" \
    curl -sfk "https://127.0.0.1:$SCHEDULER_PORT/healthz"
  log "kube-scheduler up (healthz on 127.0.0.1:$SCHEDULER_PORT)"
}

cmd_stop() { # DIR
  local dir=$1 n
  [[ -d $dir ]] || die "$dir does not exist"
  dir=$(cd "$dir" && pwd)
  [[ -f $dir/cluster.env ]] || { log "nothing to stop in $dir"; return 0; }
  load_env "$dir"
  for n in kwok kube-scheduler kube-controller-manager kube-apiserver etcd; do
    stop_one "$dir" "$n"
  done
}

cmd_status() { # DIR
  local dir=$1 n rc=0
  load_env "$dir"
  for n in etcd kube-apiserver kube-controller-manager kube-scheduler kwok; do
    if pid_alive "$dir" "$n"; then echo "$n running (pid $(<"$dir/pids/$n.pid"))"
    else echo "$n not running"; [[ $n == kube-scheduler ]] || rc=1; fi
  done
  return $rc
}

[[ $# -ge 2 ]] || usage
cmd=$1; shift
case $cmd in
  start) cmd_start "$@" ;;
  stop) [[ $# -eq 1 ]] || usage; cmd_stop "$1" ;;
  status) [[ $# -eq 1 ]] || usage; cmd_status "$1" ;;
  start-scheduler) [[ $# -eq 1 ]] || usage; d=$(cd "$1" && pwd); load_env "$d"; start_scheduler "$d" ;;
  stop-scheduler) [[ $# -eq 1 ]] || usage; d=$(cd "$1" && pwd); load_env "$d"; stop_one "$d" kube-scheduler ;;
  nodes) [[ $# -eq 2 || $# -eq 3 ]] || usage; exec python3 "$UTIL" nodes "$@" ;;
  check-allocatable) [[ $# -eq 1 ]] || usage; exec python3 "$UTIL" check-allocatable "$1" ;;
  *) usage ;;
esac
