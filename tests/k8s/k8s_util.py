#!/usr/bin/env python3
"""Helpers for tests/k8s/cluster.sh that talk to the test kube-apiserver (stdlib only).

  k8s_util.py ports N                      print N free TCP ports on 127.0.0.1
  k8s_util.py nodes DIR N [GPUS]           create N kwok nodes (kwok-node-0 .. N-1)
  k8s_util.py check-allocatable DIR        per node, requests of bound pods <= allocatable

DIR is a cluster directory written by `cluster.sh start` (DIR/cluster.env names the API
server and the admin client certificate).
"""

import http.client
import json
import re
import os
import random
import socket
import ssl
import sys
import time
import urllib.parse
from fractions import Fraction

# --------------------------------------------------------------------------- basics


def die(msg, code=1):
    print(f"k8s_util: {msg}", file=sys.stderr)
    sys.exit(code)


def free_ports(n):
    """n ports free now, below the kernel's ephemeral range: a port the kernel handed out
    (bind to 0) is one it may hand again as the source port of an outgoing connection (the
    apiserver's to etcd, say) before our component binds it; kwok once exited at start so."""
    lo, _hi = (int(x) for x in open("/proc/sys/net/ipv4/ip_local_port_range").read().split())
    socks = []
    try:
        for port in random.sample(range(max(1024, lo - 12000), lo), 2000):
            if len(socks) == n:
                break
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                s.close()
                continue
            socks.append(s)
        if len(socks) < n:
            die(f"found only {len(socks)} of {n} free ports below {lo}")
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def read_env(cluster_dir):
    env = {}
    path = os.path.join(cluster_dir, "cluster.env")
    try:
        with open(path) as f:
            for line in f:
                line = line.strip()
                if line and not line.startswith("#") and "=" in line:
                    k, v = line.split("=", 1)
                    env[k] = v.strip("'\"")
    except OSError as e:
        die(f"cannot read {path}: {e} (is the cluster started?)")
    return env


class Api:
    """A tiny keep-alive JSON client for the API server, authenticated by client cert."""

    def __init__(self, cluster_dir):
        env = read_env(cluster_dir)
        self.host = "127.0.0.1"
        self.port = int(env["API_PORT"])
        pki = env["PKI"]
        ctx = ssl.create_default_context(cafile=os.path.join(pki, "ca.crt"))
        ctx.load_cert_chain(os.path.join(pki, "admin.crt"), os.path.join(pki, "admin.key"))
        self.ctx = ctx
        self.conn = None

    def request(self, method, path, body=None, content_type="application/json"):
        data = None if body is None else json.dumps(body).encode()
        headers = {"Accept": "application/json"}
        if data is not None:
            headers["Content-Type"] = content_type
        for attempt in range(5):
            if self.conn is None:
                self.conn = http.client.HTTPSConnection(self.host, self.port, context=self.ctx, timeout=60)
            try:
                self.conn.request(method, path, body=data, headers=headers)
                resp = self.conn.getresponse()
                raw = resp.read()
            except (http.client.HTTPException, OSError):
                self.conn.close()
                self.conn = None
                if attempt == 4:
                    raise
                time.sleep(0.2 * (attempt + 1))
                continue
            if resp.status == 429 or resp.status >= 500:
                if attempt < 4:
                    time.sleep(0.2 * (attempt + 1))
                    continue
            try:
                obj = json.loads(raw) if raw else {}
            except ValueError:
                obj = {"raw": raw.decode(errors="replace")}
            return resp.status, obj
        raise RuntimeError("unreachable")

    def list_all(self, path, params=None):
        items = []
        params = dict(params or {})
        params["limit"] = "500"
        while True:
            status, obj = self.request("GET", path + "?" + urllib.parse.urlencode(params))
            if status != 200:
                die(f"GET {path}: HTTP {status}: {obj.get('message', obj)}")
            items.extend(obj.get("items") or [])
            cont = (obj.get("metadata") or {}).get("continue")
            if not cont:
                return items
            params["continue"] = cont


# --------------------------------------------------------------------------- quantities

_BIN = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DEC = {"n": Fraction(1, 10**9), "u": Fraction(1, 10**6), "m": Fraction(1, 1000), "": 1,
        "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18}


_QTY = re.compile(r"([+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))(?:([eE][+-]?[0-9]+)|(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]))?")


def quantity(s):
    """A Kubernetes resource.Quantity string as an exact Fraction."""
    m = _QTY.fullmatch(str(s).strip())
    if not m:
        raise ValueError(f"bad quantity {s!r}")
    num, exp, suf = m.groups()
    q = Fraction(num)
    if exp:
        q *= Fraction(10) ** int(exp[1:])
    elif suf in _BIN:
        q *= _BIN[suf]
    elif suf:
        q *= _DEC[suf]
    return q


def fmt(name, q):
    if name == "cpu":
        return f"{float(q * 1000):g}m" if q.denominator != 1 else str(q.numerator)
    if name == "memory" or name.startswith("hugepages-") or name == "ephemeral-storage":
        return f"{float(q) / 2**30:.3f}Gi" if q >= 2**30 else str(float(q))
    return f"{float(q):g}"


# --------------------------------------------------------------------------- pod requests


def _add(acc, reqs):
    for k, v in (reqs or {}).items():
        acc[k] = acc.get(k, 0) + quantity(v)


def _max_into(acc, reqs):
    for k, v in reqs.items():
        if v > acc.get(k, 0):
            acc[k] = v


def pod_requests(pod):
    """Effective requests as the scheduler and kubelet count them: the larger of (all app
    containers + restartable init (sidecar) containers) and each regular init container
    with the sidecars started before it, plus the pod overhead."""
    spec = pod.get("spec") or {}
    app = {}
    for c in spec.get("containers") or []:
        _add(app, ((c.get("resources") or {}).get("requests")))
    sidecars = {}
    init_peak = {}
    for c in spec.get("initContainers") or []:
        reqs = {}
        _add(reqs, ((c.get("resources") or {}).get("requests")))
        if c.get("restartPolicy") == "Always":
            for k, v in reqs.items():
                sidecars[k] = sidecars.get(k, 0) + v
            _max_into(init_peak, dict(sidecars))
        else:
            cur = dict(sidecars)
            for k, v in reqs.items():
                cur[k] = cur.get(k, 0) + v
            _max_into(init_peak, cur)
    total = dict(app)
    for k, v in sidecars.items():
        total[k] = total.get(k, 0) + v
    _max_into(total, init_peak)
    _add(total, spec.get("overhead"))
    # pod-level resources (spec.resources) replace the per-container sum where set
    _max_into(total, {k: quantity(v) for k, v in ((spec.get("resources") or {}).get("requests") or {}).items()})
    return total


# --------------------------------------------------------------------------- commands


def cmd_nodes(cluster_dir, n, gpus):
    api = Api(cluster_dir)
    res = {"cpu": "224", "memory": "2063731376Ki", "pods": "110",
           "ephemeral-storage": "3750000000Ki", "nvidia.com/gpu": str(gpus)}
    names = [f"kwok-node-{i}" for i in range(n)]
    created = 0
    for name in names:
        node = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": name,
                "annotations": {"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
                "labels": {
                    "type": "kwok",
                    "kubernetes.io/arch": "amd64",
                    "kubernetes.io/os": "linux",
                    "kubernetes.io/hostname": name,
                    "nvidia.com/gpu.present": "true",
                    "nvidia.com/gpu.count": str(gpus),
                    "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
                    "nvidia.com/gpu.memory": "81559",
                },
            },
            "spec": {},
            "status": {"capacity": res, "allocatable": res},
        }
        # The API server keeps the status given at creation (kwok's node-initialize stage
        # keeps an allocatable it finds); a node that exists already gets its status patched.
        status, obj = api.request("POST", "/api/v1/nodes", node)
        if status == 201:
            created += 1
            continue
        if status != 409:
            die(f"create node {name}: HTTP {status}: {obj.get('message', obj)}")
        status, obj = api.request("PATCH", f"/api/v1/nodes/{name}/status",
                                  {"status": {"capacity": res, "allocatable": res}},
                                  content_type="application/merge-patch+json")
        if status != 200:
            die(f"patch node {name} status: HTTP {status}: {obj.get('message', obj)}")
    # Wait until kwok has marked every node Ready and the resources stuck.
    deadline = time.time() + 60 + n * 0.1
    while True:
        nodes = {x["metadata"]["name"]: x for x in api.list_all("/api/v1/nodes", {"labelSelector": "type=kwok"})}
        pending = []
        for name in names:
            node = nodes.get(name)
            st = (node or {}).get("status") or {}
            ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in st.get("conditions") or [])
            alloc = st.get("allocatable") or {}
            if not ready or alloc.get("nvidia.com/gpu") != str(gpus):
                pending.append(name)
                if node and ready and alloc.get("nvidia.com/gpu") != str(gpus):
                    api.request("PATCH", f"/api/v1/nodes/{name}/status",
                                {"status": {"capacity": res, "allocatable": res}},
                                content_type="application/merge-patch+json")
        if not pending:
            break
        if time.time() > deadline:
            die(f"{len(pending)} of {n} nodes not Ready with nvidia.com/gpu={gpus} after waiting "
                f"(first: {pending[0]}); is kwok running? see its log")
        time.sleep(0.5)
    print(f"nodes: {n} kwok nodes Ready ({created} created), nvidia.com/gpu={gpus} each")


def cmd_check_allocatable(cluster_dir):
    api = Api(cluster_dir)
    nodes = {x["metadata"]["name"]: x for x in api.list_all("/api/v1/nodes")}
    pods = api.list_all("/api/v1/pods", {
        "fieldSelector": "spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed"})
    used = {}
    count = {}
    by_node = {}
    for p in pods:
        node = p["spec"]["nodeName"]
        reqs = pod_requests(p)
        acc = used.setdefault(node, {})
        for k, v in reqs.items():
            acc[k] = acc.get(k, 0) + v
        count[node] = count.get(node, 0) + 1
        by_node.setdefault(node, []).append(p["metadata"]["namespace"] + "/" + p["metadata"]["name"])
    failures = []
    for node, acc in sorted(used.items()):
        if node not in nodes:
            print(f"check-allocatable: warning: {count[node]} pods bound to missing node {node}", file=sys.stderr)
            continue
        alloc = {k: quantity(v) for k, v in ((nodes[node].get("status") or {}).get("allocatable") or {}).items()}
        checks = dict(acc)
        checks["pods"] = Fraction(count[node])
        for res, req in sorted(checks.items()):
            if req == 0:
                continue
            # Every requested resource is checked (cpu, memory, pods, nvidia.com/gpu,
            # nvidia.com/mig-*, ...); one the node does not advertise counts as 0, as the
            # kubelet's admission would count it.
            have = alloc.get(res, Fraction(0))
            if req > have:
                failures.append(f"{node}: {res} requested {fmt(res, req)} > allocatable {fmt(res, have)} "
                                f"({count[node]} pods: {', '.join(sorted(by_node[node])[:8])}"
                                f"{' ...' if count[node] > 8 else ''})")
    for f in failures:
        print(f"check-allocatable: FAIL {f}")
    if failures:
        return 1
    print(f"check-allocatable: ok ({len(pods)} bound pods on {len(used)} of {len(nodes)} nodes within allocatable)")
    return 0


def main(argv):
    if len(argv) >= 2 and argv[1] == "ports":
        print(" ".join(str(p) for p in free_ports(int(argv[2]) if len(argv) > 2 else 1)))
        return 0
    if len(argv) in (4, 5) and argv[1] == "nodes":
        cmd_nodes(argv[2], int(argv[3]), int(argv[4]) if len(argv) == 5 else 8)
        return 0
    if len(argv) == 3 and argv[1] == "check-allocatable":
        return cmd_check_allocatable(argv[2])
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
