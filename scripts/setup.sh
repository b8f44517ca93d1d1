#!/usr/bin/env bash
# Installs every Debian 12 package that Gantry's build and tests need. Idempotent and
# quiet when everything is already there.
set -euo pipefail
packages=(
  build-essential cmake ninja-build pkg-config git python3
  nlohmann-json3-dev libyaml-cpp-dev libcli11-dev libfmt-dev libspdlog-dev
  libsqlite3-dev sqlite3 libcpp-httplib-dev libboost-dev libssl-dev zlib1g-dev iproute2
  libabsl-dev  # the core's B-tree sets (absl::btree_set): victims by checkpoint phase, jobs by end
  openssl  # the TLS test makes its certificate with the openssl command
  libpq-dev postgresql-15  # the PostgreSQL store; its tests start a throwaway server
  libgtest-dev libgmock-dev libbenchmark-dev
  clang libclang-rt-14-dev clang-format clang-tidy
  chromium  # the HTML report's test (ctest label browser) opens it headless
  podman runc catatonit busybox-static  # jobs with an image; the container test builds one from busybox
  time  # GNU time: the benchmark scripts' wall, CPU and RSS figures (bench/replay.sh, scripts/bench.sh)
  curl util-linux  # the Kubernetes peers' harness (tests/k8s/cluster.sh: readiness checks, flock)
  ccache  # scripts/test.sh: a clean checkout on a machine that built before compiles little
  mpich libmpich-dev libpmi2-0-dev openmpi-bin libopenmpi-dev libpmix-dev  # MPI under srun (pmi2, pmix), mpirun
  prometheus  # promtool: the metrics integration test lints gantryd's /metrics with it
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  SUDO=""
  if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
# Only promtool is wanted from the prometheus package: where systemd started its server,
# stop it and keep it off (nothing of Gantry's scrapes through it).
if command -v systemctl >/dev/null && systemctl is-enabled prometheus >/dev/null 2>&1; then
  SUDO=""
  if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi
  $SUDO systemctl disable --now prometheus >/dev/null 2>&1 || true
fi
