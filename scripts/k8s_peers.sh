#!/usr/bin/env bash
# Builds the real Kubernetes components the k8s tests run against (test peers, not part
# of Gantry) from their published Go modules: tests/k8s/peers/<peer>/{go.mod,go.sum,*/main.go}.
#
#   scripts/k8s_peers.sh            build what is missing; the last line printed is the bin dir
#   scripts/k8s_peers.sh --print    print the bin dir if it is complete, else fail (builds nothing)
#
# Binaries: kube-apiserver, kube-controller-manager, kube-scheduler, kubectl (k8s.io/kubernetes),
# etcd (go.etcd.io/etcd/server/v3), kwok (sigs.k8s.io/kwok). See docs/kubernetes-peers.md.
#
# They go into a cache outside the tree, keyed by a hash of the peers' go.mod, go.sum and
# main.go files, the Go version and this script's build settings:
#   ${GANTRY_K8S_PEERS_CACHE:-$HOME/.cache/gantry/k8s-peers}/<hash>/bin
# A complete bin dir is reused as is, so a machine builds each pinned set once. The Go module
# and build caches live beside it (<cache>/go/{mod,build}) unless GANTRY_K8S_PEERS_GOMODCACHE
# or GANTRY_K8S_PEERS_GOCACHE say otherwise; they can be deleted after a build
# (`GOMODCACHE=<cache>/go/mod go clean -modcache`, then `rm -rf <cache>/go`).
#
# Needs Go (go on PATH, or /usr/local/go/bin/go, or $GO) and the Go module proxy. The peers
# need Go >= 1.26.0 (their go.mod lines); GOTOOLCHAIN defaults to local. If the installed Go
# is older, run with GANTRY_K8S_PEERS_GOTOOLCHAIN=go1.27.3 (or another release the proxy
# serves) to have go fetch that toolchain.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PEERS=$ROOT/tests/k8s/peers
CACHE=${GANTRY_K8S_PEERS_CACHE:-$HOME/.cache/gantry/k8s-peers}

print_only=0
case "${1:-}" in
  --print) print_only=1 ;;
  "") ;;
  *) echo "usage: $0 [--print]" >&2; exit 2 ;;
esac

log() { echo "k8s_peers: $*" >&2; }

if [[ -n "${GO:-}" ]]; then :
elif command -v go >/dev/null 2>&1; then GO=$(command -v go)
elif [[ -x /usr/local/go/bin/go ]]; then GO=/usr/local/go/bin/go
else log "no Go toolchain found (install Go >= 1.26, or set GO=/path/to/go)"; exit 1
fi

export GOTOOLCHAIN=${GANTRY_K8S_PEERS_GOTOOLCHAIN:-local}
export GOMODCACHE=${GANTRY_K8S_PEERS_GOMODCACHE:-$CACHE/go/mod}
export GOCACHE=${GANTRY_K8S_PEERS_GOCACHE:-$CACHE/go/build}
export GOFLAGS="-trimpath -mod=readonly -buildvcs=false"
export CGO_ENABLED=0
export GOWORK=off
unset GOOS GOARCH

BINS=(kube-apiserver kube-controller-manager kube-scheduler kubectl etcd kwok)
# kwok's own Stage definitions for the pinned kwok version, copied from its module next to
# the binaries; tests/k8s/cluster.sh composes kwok's configuration from them.
STAGES=(node/fast/node-initialize node/heartbeat-with-lease/node-heartbeat-with-lease
        pod/fast/pod-ready pod/general/pod-delete pod/general/pod-complete)

# The Kubernetes version is the one k8s.io/kubernetes is pinned to in the peer's go.mod.
K8S_VERSION=$(awk '$1 == "k8s.io/kubernetes" && $2 ~ /^v/ {print $2; exit}' "$PEERS/kubernetes/go.mod")
[[ $K8S_VERSION =~ ^v([0-9]+)\.([0-9]+)\.[0-9]+$ ]] || { log "cannot read k8s.io/kubernetes version from $PEERS/kubernetes/go.mod"; exit 1; }
K8S_MAJOR=${BASH_REMATCH[1]}
K8S_MINOR=${BASH_REMATCH[2]}
K8S_LDFLAGS="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  K8S_LDFLAGS+=" -X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitMajor=$K8S_MAJOR -X $pkg.gitMinor=$K8S_MINOR -X $pkg.gitTreeState=clean"
done

GOVERSION=$("$GO" env GOVERSION)
# Bump when the build commands below change in a way that changes the binaries.
BUILD_REV=2
hash=$(
  {
    echo "rev=$BUILD_REV go=$GOVERSION toolchain=$GOTOOLCHAIN cgo=$CGO_ENABLED goflags=$GOFLAGS"
    echo "ldflags=$K8S_LDFLAGS"
    cd "$PEERS" && find . -type f \( -name go.mod -o -name go.sum -o -name '*.go' \) | LC_ALL=C sort | xargs sha256sum
  } | sha256sum | cut -c1-16
)
OUT=$CACHE/$hash/bin

complete() {
  local b
  [[ -f $OUT/.complete ]] || return 1
  for b in "${BINS[@]}"; do [[ -x $OUT/$b ]] || return 1; done
  for b in "${STAGES[@]}"; do [[ -f $OUT/kwok-stages/${b##*/}.yaml ]] || return 1; done
}

if complete; then
  echo "$OUT"
  exit 0
fi
if (( print_only )); then
  log "peers not built for this tree ($OUT incomplete); run scripts/k8s_peers.sh"
  exit 1
fi

mkdir -p "$CACHE/$hash"
# One build at a time per cache (two test runs starting together share the result).
exec 9>"$CACHE/$hash/.lock"
flock 9
if complete; then
  echo "$OUT"
  exit 0
fi

log "building $K8S_VERSION peers with $GOVERSION (GOTOOLCHAIN=$GOTOOLCHAIN) into $OUT"
log "module cache $GOMODCACHE, build cache $GOCACHE"
TMP=$CACHE/$hash/bin.tmp.$$
rm -rf "$TMP"
mkdir -p "$TMP"
trap 'rm -rf "$TMP"' EXIT

start=$SECONDS
build() { # DIR -ldflags PKG...
  local dir=$1 ldflags=$2; shift 2
  local t=$SECONDS
  log "go build in tests/k8s/peers/$dir: $*"
  (cd "$PEERS/$dir" && nice -n 19 "$GO" build -ldflags "$ldflags" -o "$TMP/" "$@")
  log "  done in $((SECONDS - t)) s"
}
# Builds run one after another (each go build already uses every core, at nice 19).
build etcd "-s -w" ./etcd
build kwok "-s -w" ./kwok
build kubernetes "$K8S_LDFLAGS" ./kube-apiserver ./kube-controller-manager ./kube-scheduler ./kubectl

for b in "${BINS[@]}"; do [[ -x $TMP/$b ]] || { log "missing $b after build"; exit 1; }; done
kwok_dir=$(cd "$PEERS/kwok" && "$GO" list -m -f '{{.Dir}}' sigs.k8s.io/kwok)
mkdir -p "$TMP/kwok-stages"
for b in "${STAGES[@]}"; do
  cp "$kwok_dir/kustomize/stage/$b.yaml" "$TMP/kwok-stages/"
done
chmod 644 "$TMP"/kwok-stages/*.yaml
"$TMP/kube-apiserver" --version >&2
"$TMP/kubectl" version --client >&2
"$TMP/etcd" --version >&2
"$TMP/kwok" --version >&2 || true
touch "$TMP/.complete"
rm -rf "$OUT"
mv "$TMP" "$OUT"
trap - EXIT
log "built in $((SECONDS - start)) s: $(du -sh "$OUT" | cut -f1) in $OUT"
echo "$OUT"
