#!/usr/bin/env python3
"""What pod anti-affinity and topology spread cost gantryd --kubernetes at a site's size
(issue 45, docs/kubernetes.md, "Pod affinity, anti-affinity and topology spread").

One loopback cluster (tests/k8s/cluster.sh: etcd, kube-apiserver, kube-controller-manager,
kwok) with --nodes kwok nodes of 8 GPUs in four zones, --fillers running 1-GPU pods
(app=filler, no constraints; Gantry packs them onto fillers/8 nodes) and then, one after
the other:
- --replicas 1-GPU replicas of a service (at most the nodes the fillers leave room on)
  with required pod anti-affinity on their own label by kubernetes.io/hostname (an
  inference service one replica per node): each goes to a node of its own; such pods are
  placed one at a time;
- --spread 1-GPU replicas with a DoNotSchedule topology spread constraint over the zones
  (maxSkew 1);
- --preferred 1-GPU replicas with preferred pod anti-affinity on their own label by
  kubernetes.io/hostname (weight 100) and a ScheduleAnyway spread over the zones: weighed,
  each goes to a node without one while one has room (they take as many nodes as had room,
  up to one each), and the zones stay within one.
The replicas are pods the script creates (as a Deployment's, with its label), not a
Deployment: kube-controller-manager's client would create them at about 20 a second. For
each set: the seconds from its first `kubectl apply` to every replica bound, pods bound per second,
and gantryd's scheduling passes meanwhile (count, mean and largest, from /metrics'
gantry_scheduling_latency_seconds); it checks one replica per node and the zones within
maxSkew, and the bound requests within allocatable.

    bench/k8s_constraints.py [--gantryd build/release/src/gantryd] [--nodes 256]
                             [--fillers 1024] [--replicas 128] [--spread 256]
                             [--preferred 128] [--tiny]

--tiny: the check that it still works end to end (8 nodes, 16 fillers, 6, 8 and 6
replicas).
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "k8s"))
import scheduler_test as st  # noqa: E402  (its Cluster: the cluster, gantryd and kubectl)

ZONES = "abcd"


def passes(c):
    """gantryd's scheduling passes so far: (count, sum of seconds, largest bucket bound)."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{c.port()}/metrics", timeout=10).read().decode()
    count = float(re.search(r"^gantry_scheduling_latency_seconds_count (\S+)", text, re.M).group(1))
    total = float(re.search(r"^gantry_scheduling_latency_seconds_sum (\S+)", text, re.M).group(1))
    buckets = [(float(b) if b != "+Inf" else float("inf"), float(n)) for b, n in re.findall(
        r'^gantry_scheduling_latency_seconds_bucket\{le="([^"]+)"\} (\S+)', text, re.M)]
    return count, total, buckets


def replicas_of(name, count, extra):
    """`count` 1-GPU pods labelled app=NAME, as a Deployment's replicas (created here, in
    chunks, rather than by kube-controller-manager, whose client's default 20 requests a
    second would decide the result)."""
    out = []
    for i in range(count):
        p = st.pod(f"{name}-{i:05}", 1, extra=extra)
        p["metadata"]["labels"]["app"] = name
        out.append(p)
    return out


def timed(c, name, count, extra):
    """Creates the replicas and waits for every one bound: seconds, passes, their mean and
    the bucket bound the largest fell under."""
    before = passes(c)
    t0 = time.time()
    pods = replicas_of(name, count, extra)
    for first in range(0, count, 200):
        c.kubectl_apply(*pods[first:first + 200])
    st.wait_for(f"{count} {name} replicas bound",
                lambda: len(st.bound(c.pods(f"app={name}"))) == count, 60 + count)
    took = time.time() - t0
    after = passes(c)
    n = after[0] - before[0]
    mean_ms = (after[1] - before[1]) / n * 1000 if n else 0
    largest = next((b for (b, k), (_, k0) in zip(after[2], before[2]) if k - k0 >= n), float("inf"))
    return took, n, mean_ms, largest


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gantryd", default=os.path.join(ROOT, "build", "release", "src", "gantryd"))
    ap.add_argument("--nodes", type=int, default=256)
    ap.add_argument("--fillers", type=int, default=1024)
    ap.add_argument("--replicas", type=int, default=128)
    ap.add_argument("--spread", type=int, default=256)
    ap.add_argument("--preferred", type=int, default=128)
    ap.add_argument("--tiny", action="store_true")
    a = ap.parse_args()
    if a.tiny:
        a.nodes, a.fillers, a.replicas, a.spread, a.preferred = 8, 16, 6, 8, 6
    if a.replicas > a.nodes - (a.fillers + 7) // 8:
        sys.exit("k8s_constraints: --replicas must be at most the nodes the fillers leave free "
                 "(--nodes less --fillers / 8): one replica per node")
    directory = tempfile.mkdtemp(prefix="gantry-k8s-constraints.")
    c = st.Cluster(directory, os.path.abspath(a.gantryd))
    ok = False
    try:
        c.start()
        st.SNAPSHOT = c  # a wait that times out prints the pods and their wait messages
        subprocess.run([st.CLUSTER, "nodes", directory, str(a.nodes)], check=True, capture_output=True)
        names = [f"kwok-node-{i}" for i in range(a.nodes)]
        zone_of = {n: ZONES[i % len(ZONES)] for i, n in enumerate(names)}
        for z in ZONES:
            c.kubectl("label", "node", "--overwrite", *[n for n in names if zone_of[n] == z], f"example.com/zone={z}")
        c.start_gantryd()
        for first in range(0, a.fillers, 200):  # kubectl apply in chunks of 200 pods
            fill = [st.pod(f"f-{i:05}", 1) for i in range(first, min(a.fillers, first + 200))]
            for p in fill:
                p["metadata"]["labels"]["app"] = "filler"
            c.kubectl_apply(*fill)
        st.wait_for(f"{a.fillers} fillers bound", lambda: len(st.bound(c.pods("app=filler"))) == a.fillers,
                    60 + a.fillers / 20)
        anti = {"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": "kubernetes.io/hostname"}]}}}
        took, n, mean_ms, largest = timed(c, "web", a.replicas, anti)
        web_nodes = [p["spec"]["nodeName"] for p in st.bound(c.pods("app=web"))]
        one_per_node = len(set(web_nodes)) == len(web_nodes)
        print(f"k8s_constraints: {a.nodes} nodes, {a.fillers} fillers: {a.replicas} anti-affinity replicas "
              f"bound in {took:.1f} s ({a.replicas / took:.1f} pods/s), {n:.0f} passes, mean {mean_ms:.2f} ms, "
              f"largest under {largest * 1000:g} ms; one per node: {one_per_node}")
        spread = {"topologySpreadConstraints": [{
            "maxSkew": 1, "topologyKey": "example.com/zone", "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": {"app": "spread"}}}]}
        took, n, mean_ms, largest = timed(c, "spread", a.spread, spread)
        per_zone = {z: 0 for z in ZONES}
        for p in st.bound(c.pods("app=spread")):
            per_zone[zone_of[p["spec"]["nodeName"]]] += 1
        within = max(per_zone.values()) - min(per_zone.values()) <= 1
        print(f"k8s_constraints: {a.spread} spread replicas bound in {took:.1f} s ({a.spread / took:.1f} pods/s), "
              f"{n:.0f} passes, mean {mean_ms:.2f} ms, largest under {largest * 1000:g} ms; "
              f"per zone {per_zone} (within maxSkew: {within})")
        prefer = {"affinity": {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 100, "podAffinityTerm": {"labelSelector": {"matchLabels": {"app": "pref"}},
                                                "topologyKey": "kubernetes.io/hostname"}}]}},
                  "topologySpreadConstraints": [{
                      "maxSkew": 1, "topologyKey": "example.com/zone", "whenUnsatisfiable": "ScheduleAnyway",
                      "labelSelector": {"matchLabels": {"app": "pref"}}}]}
        used = {n: 0 for n in names}  # every pod here asks 1 GPU
        for p in st.bound(c.pods("test=yes")):
            used[p["spec"]["nodeName"]] += 1
        room = sum(1 for n in names if used[n] < 8)  # nodes a replica could have to itself
        took, n, mean_ms, largest = timed(c, "pref", a.preferred, prefer)
        pref_nodes = [p["spec"]["nodeName"] for p in st.bound(c.pods("app=pref"))]
        apart = len(set(pref_nodes)) == min(len(pref_nodes), room)
        pref_zone = {z: 0 for z in ZONES}
        for node in pref_nodes:
            pref_zone[zone_of[node]] += 1
        pref_within = max(pref_zone.values()) - min(pref_zone.values()) <= 1
        print(f"k8s_constraints: {a.preferred} preferred replicas bound in {took:.1f} s "
              f"({a.preferred / took:.1f} pods/s), {n:.0f} passes, mean {mean_ms:.2f} ms, largest under "
              f"{largest * 1000:g} ms; on {len(set(pref_nodes))} nodes of the {room} with room "
              f"(one per node while one had room: {apart}); per zone {pref_zone} (within one: {pref_within})")
        st.check_allocatable(c)
        ok = one_per_node and within and apart and pref_within
    finally:
        c.stop()
        if ok:
            shutil.rmtree(directory, ignore_errors=True)
        else:
            print(f"k8s_constraints: cluster directory kept: {directory}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
