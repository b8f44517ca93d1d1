#!/usr/bin/env bash
# gantryd's memory over a long run: does a daemon that has run a million jobs hold a
# million jobs? gantryd with one gantry-swarm speaking for NODES emulated nodes of 8
# H100s; JOBS short jobs (one GPU, `sleep 0`: they end at once) submitted through the API
# by four teams in rounds of ROUND, each carrying an environment of ENV_KB kilobytes (an
# `sbatch --export=ALL` copies the submitting shell's, commonly 2-5 KB). After each round
# has ended, gantryd's resident memory (VmRSS) is sampled. Prints tab-separated lines:
#   round <jobs submitted so far> <jobs ended> <gantryd VmRSS MiB> <seconds since start>
#
#   bench/gantryd_memory.sh [--build DIR] [--nodes N] [--jobs J] [--round R] [--env-kb K]
#                           [--long-every L] [--out DIR] [--tiny]
#
# --long-every L: every L-th job runs for a day instead (a service, say) and is still
# running at the end; a round ends when only those run.
# Defaults: build/release, 64 nodes, 60,000 jobs in rounds of 10,000, 2 KB of environment.
# gantryd keeps the last 10,000 ended jobs in memory for `ls` and `show` (older ones are
# in the store), so past the first rounds its memory should stay flat.
# --tiny: the CI check that the script still works end to end (ctest -L bench), in a few
# seconds: 4 nodes, 200 jobs in rounds of 100, 1 KB of environment, every 50th job long,
# out DIR/bench-tiny/gantryd_memory (options given win); exits 1 unless a line came for
# the start and each round, the last with every job submitted and every short one ended,
# each with gantryd's memory. The lines are also written to OUT/rounds.tsv.
set -euo pipefail
cd "$(dirname "$0")/.."
build=build/release nodes=64 jobs=60000 round=10000 env_kb=2 long_every=0 out=build/gantryd-memory
tiny=0 given=" "
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build) build=$2; shift 2 ;;
    --nodes) nodes=$2; given+="nodes "; shift 2 ;;
    --jobs) jobs=$2; given+="jobs "; shift 2 ;;
    --round) round=$2; given+="round "; shift 2 ;;
    --env-kb) env_kb=$2; given+="env_kb "; shift 2 ;;
    --long-every) long_every=$2; given+="long_every "; shift 2 ;;
    --out) out=$2; given+="out "; shift 2 ;;
    --tiny) tiny=1; shift ;;
    -h|--help) sed -n '2,22p' "$0"; exit 0 ;;
    *) echo "gantryd_memory.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
if [[ $tiny -eq 1 ]]; then  # sizes for a check, not a measurement (options given win)
  [[ $given == *" nodes "* ]] || nodes=4
  [[ $given == *" jobs "* ]] || jobs=200
  [[ $given == *" round "* ]] || round=100
  [[ $given == *" env_kb "* ]] || env_kb=1
  [[ $given == *" long_every "* ]] || long_every=50
  [[ $given == *" out "* ]] || out=$build/bench-tiny/gantryd_memory
fi
rm -rf "$out" && mkdir -p "$out"
out=$(cd "$out" && pwd)
B=$(cd "$build/src" && pwd)
cat >"$out/cluster.yaml" <<EOF
cluster: memory
pools:
  - name: gpu
    count: $nodes
    gpus: 8
    gpu_model: H100-80GB
queues:
  - name: team-a
  - name: team-b
  - name: team-c
  - name: team-d
EOF
source bench/swarm_cluster.sh
start_swarm_cluster "$out" "$B" "$nodes" team-a team-b team-c team-d

python3 - "$url" "$out" "$jobs" "$round" "$env_kb" "$gpid" "$long_every" <<'EOF' | tee "$out/rounds.tsv"
import http.client, json, sys, threading, time, urllib.parse
url, out, jobs, rnd, env_kb, gpid = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), sys.argv[6]
long_every = int(sys.argv[7])
def is_long(i): return long_every > 0 and i % long_every == long_every - 1
host = urllib.parse.urlparse(url)
teams = ["team-a", "team-b", "team-c", "team-d"]
tokens = {t: open(f"{out}/{t}.token").read().strip() for t in teams}
admin = open(f"{out}/admin.token").read().strip()
# An environment like a login shell's: 64 variables of env_kb KB in all.
env = {f"VAR_{i:02d}": ("x" * (env_kb * 1024 // 64 - 12)) for i in range(64)}
def conn():
    return http.client.HTTPConnection(host.hostname, host.port, timeout=60)
def submit(team, first, last):
    c = conn()
    for i in range(first, last):
        spec = {"name": f"m-{i}", "queue": team, "gpus": 1, "vram_gb": 40,
                "command": ["sleep", "86400" if is_long(i) else "0"], "env": env}
        c.request("POST", "/v1/jobs", json.dumps(spec), {"Authorization": "Bearer " + tokens[team],
                                                           "Content-Type": "application/json"})
        r = c.getresponse(); body = r.read()
        if r.status not in (200, 201):
            print(f"submit: HTTP {r.status}: {body[:300]}", file=sys.stderr, flush=True)
            errors.append(r.status)
            return
def active():  # jobs pending or running
    c = conn()
    c.request("GET", "/v1/queues", headers={"Authorization": "Bearer " + admin})
    r = c.getresponse(); body = json.loads(r.read())
    qs = body["queues"] if isinstance(body, dict) else body
    return sum(q.get("pending", 0) + q.get("running", 0) for q in qs)
def rss_mib():
    for line in open(f"/proc/{gpid}/status"):
        if line.startswith("VmRSS:"): return int(line.split()[1]) / 1024
errors = []
t0 = time.time()
print(f"round\t0\t0\t{rss_mib():.1f}\t0")
done = 0
while done < jobs:
    n = min(rnd, jobs - done)
    per = (n + 3) // 4
    threads = [threading.Thread(target=submit, args=(t, done + k * per, min(done + n, done + (k + 1) * per)))
               for k, t in enumerate(teams)]
    for t in threads: t.start()
    for t in threads: t.join()
    if errors: sys.exit("gantryd_memory.sh: a submit failed")
    done += n
    longs = sum(1 for i in range(done) if is_long(i))
    while active() > longs: time.sleep(0.5)
    print(f"round\t{done}\t{done - longs}\t{rss_mib():.1f}\t{time.time() - t0:.0f}", flush=True)
EOF
if [[ $tiny -eq 1 ]]; then
  python3 - "$out/rounds.tsv" "$jobs" "$round" "$long_every" <<'EOF'
import sys
lines = [l.rstrip("\n").split("\t") for l in open(sys.argv[1]) if l.strip()]
jobs, rnd, long_every = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
longs = sum(1 for i in range(jobs) if long_every > 0 and i % long_every == long_every - 1)
want = 1 + -(-jobs // rnd)
ok = (len(lines) == want and all(len(l) == 5 and l[0] == "round" and float(l[3]) > 0 for l in lines)
      and lines[-1][1:3] == [str(jobs), str(jobs - longs)])
if not ok:
    sys.exit(f"gantryd_memory.sh --tiny: {len(lines)} lines (expected {want}, the last round {jobs} "
             f"submitted and {jobs - longs} ended): {lines[-1:] if lines else 'none'}")
print(f"gantryd_memory.sh --tiny: ok ({want - 1} rounds, {jobs} jobs, {longs} long ones still running)", file=sys.stderr)
EOF
fi
