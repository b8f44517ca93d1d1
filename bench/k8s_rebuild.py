#!/usr/bin/env python3
"""What a change of the node list costs gantryd --kubernetes (issue 45, docs/kubernetes.md).

One loopback cluster (tests/k8s/cluster.sh: etcd, kube-apiserver, kube-controller-manager,
kwok) with --nodes kwok nodes of 8 GPUs and gantryd scheduling --pods running pods of 2
GPUs; then --changes node changes, one at a time (a label set on a node, which changes
what a pod's node selection may see, so the core's node list is rebuilt and the running
pods adopted again). gantryd logs each rebuild as `nodes and running jobs re-read ms=...
jobs=... nodes=...`: the script reads those after the pods are bound and prints their
count, median, p99 and largest, with the jobs and nodes they re-read.

    bench/k8s_rebuild.py [--gantryd build/release/src/gantryd] [--nodes 1000]
                         [--pods 4000] [--changes 50] [--tiny]

--tiny: the check that the script still works end to end (8 nodes, 16 pods, 5 changes;
scripts/test.sh runs it beside the side-by-side, since both need the peers); exits 1
unless every change gave a rebuild.
"""
import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "k8s"))
import scheduler_test as st  # noqa: E402  (its Cluster: the cluster, gantryd and kubectl)

REREAD = re.compile(r"nodes and running jobs re-read ms=([0-9.]+) jobs=(\d+) nodes=(\d+)")


def rereads(path):
    with open(path) as f:
        return [(float(m.group(1)), int(m.group(2)), int(m.group(3)))
                for m in map(REREAD.search, f) if m]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gantryd", default=os.path.join(ROOT, "build", "release", "src", "gantryd"))
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--pods", type=int, default=4000)
    ap.add_argument("--changes", type=int, default=50)
    ap.add_argument("--tiny", action="store_true")
    a = ap.parse_args()
    if a.tiny:
        a.nodes, a.pods, a.changes = 8, 16, 5
    directory = tempfile.mkdtemp(prefix="gantry-k8s-rebuild.")
    c = st.Cluster(directory, os.path.abspath(a.gantryd))
    ok = False
    try:
        c.start()
        subprocess.run([st.CLUSTER, "nodes", directory, str(a.nodes)], check=True, capture_output=True)
        c.start_gantryd()
        for first in range(0, a.pods, 200):  # kubectl apply in chunks of 200 pods
            c.kubectl_apply(*[st.pod(f"r-{i:05}", 2) for i in range(first, min(a.pods, first + 200))])
        st.wait_for(f"{a.pods} pods bound", lambda: len(st.bound(c.pods("test=yes"))) == a.pods,
                    60 + a.pods / 20)
        time.sleep(2)
        before = len(rereads(c.proc.log_path))
        t0 = time.time()
        for k in range(a.changes):
            c.kubectl("label", "node", f"kwok-node-{k % a.nodes}", f"gantry.dev/bench-change={k}",
                      "--overwrite")
            st.wait_for(f"rebuild {k + 1}", lambda: len(rereads(c.proc.log_path)) > before + k, 30, 0.02)
        took = time.time() - t0
        ms = [r[0] for r in rereads(c.proc.log_path)[before:]]
        last = rereads(c.proc.log_path)[-1]
        ms.sort()
        p99 = ms[min(len(ms) - 1, int(round(0.99 * (len(ms) - 1))))]
        print(f"k8s_rebuild: {a.nodes} nodes, {a.pods} running pods: {len(ms)} rebuilds for "
              f"{a.changes} node changes in {took:.1f} s; re-read ms p50 {statistics.median(ms):.2f} "
              f"p99 {p99:.2f} max {ms[-1]:.2f} (last: {last[1]} jobs, {last[2]} nodes)")
        ok = len(ms) >= a.changes and last[1] == a.pods and last[2] == a.nodes
        if not ok:
            print("k8s_rebuild: fewer rebuilds than changes, or not every pod or node re-read")
    finally:
        c.stop()
        if ok:
            shutil.rmtree(directory, ignore_errors=True)
        else:
            print(f"k8s_rebuild: cluster directory kept: {directory}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
