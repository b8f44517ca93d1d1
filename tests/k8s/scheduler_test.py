#!/usr/bin/env python3
"""gantryd --kubernetes against the real kube-apiserver (issue 45's tests).

A loopback cluster from tests/k8s/cluster.sh (etcd, kube-apiserver, kube-controller-manager,
kwok; kube-scheduler only for the side-by-side), kwok nodes of 8 GPUs, and gantryd
scheduling the pods that name it. Each case sets up what it needs, checks what a user would
see (bindings, PodScheduled conditions, `kubectl describe`), and deletes its objects.

    tests/k8s/scheduler_test.py [--gantryd build/release/src/gantryd] [-k NAME] [--keep]
                                [--jobs N | --shard K/N]

Ends with 'N passed, N failed'; exits non-zero on a failure. --jobs N runs the cases on N
clusters at once (the cases mostly wait on the API server, gantryd's passes and kwok:
one cluster keeps 2 cores about a sixth busy), each a process of this script with
--shard K/N: the cases whose place in CASES is K modulo N, on a cluster of its own (free
ports, a folder of its own). Each shard's output is printed whole as it ends.
"""
import argparse
import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import k8s_util  # noqa: E402

CLUSTER = os.path.join(HERE, "cluster.sh")
CRD = os.path.join(ROOT, "deploy", "kubernetes", "podgroup-crd.yaml")

CONFIG = """\
cluster: k8s-test
queues:
  - name: team-a
  - name: team-b
  - name: team-c
    budget: {gpu_hours: 0.001, period: week, when_spent: wait}
kubernetes:
  scheduler_name: gantry
  namespaces: {default: team-a, budgeted: team-c}
  default_queue: team-b
  priority_classes: {gantry-critical: critical, gantry-best-effort: best-effort}
  leaf_label: gantry.dev/test-leaf
  pools:
    - {name: spot, node_labels: {gantry.dev/test-spot: "true"}, spot: true}
"""


class Cluster:
    def __init__(self, directory, gantryd):
        self.dir = directory
        self.gantryd_bin = gantryd
        self.proc = None
        self.log_n = 0

    def start(self):
        subprocess.run([CLUSTER, "start", self.dir], check=True)
        env = k8s_util.read_env(self.dir)
        self.bin = env["BIN"]
        self.kubeconfig = env["KUBECONFIG"]
        self.api = k8s_util.Api(self.dir)
        subprocess.run([CLUSTER, "nodes", self.dir, "4"], check=True)
        self.kubectl("apply", "-f", CRD)
        for name, value in (("gantry-critical", 1000000), ("gantry-best-effort", 0)):
            self.kubectl_apply({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                                "metadata": {"name": name}, "value": value})
        with open(os.path.join(self.dir, "gantry.yaml"), "w") as f:
            f.write(CONFIG)
        # gantryd's store: the tokens gantry ls, show and queues use in this mode
        self.db = os.path.join(self.dir, "state.db")
        subprocess.run([self.gantryd_bin, "init", "--db", self.db], check=True, capture_output=True)
        self.token = subprocess.run([self.gantryd_bin, "token", "create", "--db", self.db, "--team", "a",
                                     "--queues", "team-a"], check=True, capture_output=True,
                                    text=True).stdout.strip()
        # the CRD must be served before gantryd lists it
        wait_for("the PodGroup CRD served", lambda: self.api.request(
            "GET", "/apis/scheduling.x-k8s.io/v1alpha1/podgroups")[0] == 200, 30)

    def stop(self):
        self.stop_gantryd()
        subprocess.run([CLUSTER, "stop", self.dir], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    # A short leader lease (the default is 15 s), so a restart after kill -9 waits 3 s.
    LEASE_S = 3

    def spawn_gantryd(self):
        self.log_n += 1
        path = os.path.join(self.dir, "logs", f"gantryd-{self.log_n}.log")
        log = open(path, "w")
        proc = subprocess.Popen(
            [self.gantryd_bin, "--config", os.path.join(self.dir, "gantry.yaml"),
             "--kubernetes", self.kubeconfig, "--kubernetes-lease-duration-s", str(self.LEASE_S),
             "--listen", "127.0.0.1:0", "--db", self.db],
            stdout=log, stderr=subprocess.STDOUT)
        proc.log_path = path
        return proc

    def start_gantryd(self):
        self.proc = self.spawn_gantryd()

    def port(self):
        """The port gantryd's HTTP API listens on (from its log)."""
        return wait_for("gantryd's port in its log", lambda: (lambda m: m and m.group(1))(
            re.search(r"serving /healthz, /metrics and /v1 port=(\d+)", open(self.proc.log_path).read())), 5)

    def gantry(self, *args, token=None):
        """The gantry CLI against this gantryd, as a user would run it."""
        r = subprocess.run([os.path.join(os.path.dirname(self.gantryd_bin), "gantry"),
                            "--server", f"http://127.0.0.1:{self.port()}", "--token",
                            self.token if token is None else token, *args],
                           capture_output=True, text=True, timeout=30)
        return r.returncode, r.stdout + r.stderr

    def stop_gantryd(self, sig=signal.SIGTERM):
        if self.proc is None:
            return None
        self.proc.send_signal(sig)
        try:
            rc = self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc = self.proc.wait()
        self.proc = None
        return rc

    def kubectl(self, *args, stdin=None, check=True):
        r = subprocess.run([os.path.join(self.bin, "kubectl"), "--kubeconfig", self.kubeconfig, *args],
                           input=stdin, capture_output=True, text=True)
        if check and r.returncode != 0:
            raise RuntimeError(f"kubectl {' '.join(args)}: {r.stderr.strip()}")
        return r.stdout

    def kubectl_apply(self, *objs):
        self.kubectl("apply", "-f", "-", stdin="\n---\n".join(json.dumps(o) for o in objs))

    def snapshot(self):
        """The pods (phase, node, wait message) and gantryd's jobs, printed where a wait
        times out (CI keeps only the output; a case's cleanup deletes the pods)."""
        try:
            for p in self.pods():
                st = p.get("status") or {}
                print(f"    pod {p['metadata']['name']}: phase={st.get('phase')} "
                      f"node={(p.get('spec') or {}).get('nodeName')} "
                      f"deleting={'deletionTimestamp' in p['metadata']} msg={scheduled_message(p)!r}")
            if self.proc is not None and self.proc.poll() is None:
                print("    gantry ls:", self.gantry("ls", "--all")[1].replace("\n", "\n      "))
        except Exception as e:  # noqa: BLE001 - diagnosis is best effort
            print(f"    (snapshot: {e})")

    def log_tails(self):
        """The last lines of gantryd's and kwok's logs, printed after a failed case."""
        for name in ([os.path.basename(self.proc.log_path)] if self.proc is not None else []) + ["kwok.log"]:
            try:
                with open(os.path.join(self.dir, "logs", name)) as f:
                    lines = f.readlines()[-25:]
                print(f"    last lines of {name}:\n      " + "\n      ".join(brief(x) for x in lines))
            except OSError:
                pass

    def pods(self, selector=None):
        params = {"labelSelector": selector} if selector else None
        return k8s_util.Api.list_all(self.api, "/api/v1/namespaces/default/pods", params)

    def clean(self):
        for kind in ("deployments", "jobs", "pods", "podgroups", "poddisruptionbudgets"):
            self.kubectl("delete", kind, "--all", "--wait=false", "--grace-period=0", check=False)
        wait_for("the namespace empty", lambda: not self.pods(), 60)


def brief(line):
    """A log line, short: kwok's JSON lines as time, message, pod and node."""
    try:
        j = json.loads(line)
        return " ".join(str(j.get(k, "")) for k in ("time", "msg", "pod", "node", "err"))
    except ValueError:
        return line.rstrip()[:300]


SNAPSHOT = None  # the Cluster whose pods a timed-out wait prints (main sets it)


def wait_for(what, cond, timeout, interval=0.1):
    deadline = time.time() + timeout
    while True:
        v = cond()
        if v:
            return v
        if time.time() > deadline:
            global SNAPSHOT
            snap, SNAPSHOT = SNAPSHOT, None  # once: the snapshot itself waits for gantryd's port
            if snap is not None:
                snap.snapshot()
                SNAPSHOT = snap
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(interval)


def pod(name, gpus, group=None, priority=None, grace=5, complete_after=None, extra=None, annotations=None):
    meta = {"name": name, "namespace": "default", "labels": {"test": "yes"}, "annotations": dict(annotations or {})}
    if group:
        meta["labels"]["scheduling.x-k8s.io/pod-group"] = group
    if complete_after:
        meta["annotations"]["pod-complete.stage.kwok.x-k8s.io/delay"] = complete_after
    spec = {"schedulerName": "gantry", "restartPolicy": "Never", "terminationGracePeriodSeconds": grace,
            "containers": [{"name": "main", "image": "busybox",
                            "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]}
    if priority:
        spec["priorityClassName"] = priority
    spec.update(extra or {})
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def group(name, min_member):
    return {"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
            "metadata": {"name": name, "namespace": "default"}, "spec": {"minMember": min_member}}


def job(name, pods, gpus, group_name=None, priority=None, scheduler="gantry", grace=5):
    labels = {"test": "yes"}
    if group_name:
        labels["scheduling.x-k8s.io/pod-group"] = group_name
    spec = {"schedulerName": scheduler, "restartPolicy": "Never", "terminationGracePeriodSeconds": grace,
            "containers": [{"name": "main", "image": "busybox",
                            "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]}
    if priority:
        spec["priorityClassName"] = priority
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name, "namespace": "default"},
            "spec": {"parallelism": pods, "completions": pods, "backoffLimit": 100,
                     "podReplacementPolicy": "Failed",
                     "template": {"metadata": {"labels": labels}, "spec": spec}}}


def bound(pods):
    return [p for p in pods if (p.get("spec") or {}).get("nodeName")]


def scheduled_message(p):
    for c in (p.get("status") or {}).get("conditions") or []:
        if c.get("type") == "PodScheduled" and c.get("status") == "False":
            return c.get("message", "")
    return ""


def check_allocatable(c):
    r = subprocess.run([CLUSTER, "check-allocatable", c.dir], capture_output=True, text=True)
    assert r.returncode == 0, f"check-allocatable: {r.stdout}{r.stderr}"


# Two zones of two kwok nodes each (the node label example.com/zone), for the spread cases.
ZONES = {"kwok-node-0": "a", "kwok-node-1": "a", "kwok-node-2": "b", "kwok-node-3": "b"}


@contextlib.contextmanager
def zoned(c):
    """The nodes labelled into ZONES for the body; after it, the case's pods go, and so do
    the labels and any example.com/maintenance taint the body put on a node."""
    for node, zone in ZONES.items():
        c.kubectl("label", "node", node, f"example.com/zone={zone}", "--overwrite")
    try:
        yield ZONES
    finally:
        c.clean()
        for node in ZONES:
            c.kubectl("label", "node", node, "example.com/zone-", check=False)
            c.kubectl("taint", "node", node, "example.com/maintenance-", check=False)


# --------------------------------------------------------------------------- cases


def case_gang_of_four_bound_together(c):
    """A Job of 4 pods with nvidia.com/gpu: 8 each, one PodGroup: bound together."""
    c.kubectl_apply(group("train4", 4), job("train4", 4, 8, group_name="train4"))
    pods = wait_for("4 pods bound", lambda: (lambda ps: ps if len(bound(ps)) == 4 else None)(c.pods("job-name=train4")), 20)
    nodes = {p["spec"]["nodeName"] for p in pods}
    assert len(nodes) == 4, f"4 pods of 8 GPUs on 4 distinct nodes, got {nodes}"
    check_allocatable(c)
    # the PodGroup's status says it runs, as scheduler-plugins' coscheduling writes it
    def group_running():
        status, obj = c.api.request("GET", "/apis/scheduling.x-k8s.io/v1alpha1/namespaces/default/podgroups/train4")
        st = obj.get("status") or {}
        return st if st.get("phase") == "Running" and st.get("running") == 4 else None
    wait_for("PodGroup train4 Running with 4 running", group_running, 10)
    # /metrics says the same
    port = c.port()
    metrics = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    assert 'gantry_gpus{state="allocated"} 32' in metrics, metrics[:2000]
    assert 'gantry_jobs_started_total{queue="team-a"} 1' in metrics, metrics[:2000]
    health = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5).read())
    assert health["role"] == "leader", health


def case_interleaved_gangs_side_by_side(c):
    """Two 3-pod gangs of whole-node pods on 4 nodes, created interleaved: kube-scheduler
    binds 2 of each and neither runs; Gantry binds one whole, then the other after it."""
    # Names of their own per scheduler: kwok may still delete the first run's pods by name
    # after they are gone (it deleted a new pod of the same name once, 2026-11-30).
    def create(scheduler, names):
        objs = [group(g, 3) for g in names]
        for i in range(3):
            for g in names:
                p = pod(f"{g}-{i}", 8, group=g, complete_after="6s" if scheduler == "gantry" else None)
                p["spec"]["schedulerName"] = scheduler
                objs.append(p)
        c.kubectl_apply(*objs)

    # kube-scheduler, default configuration (it knows nothing of PodGroups)
    c.stop_gantryd()
    subprocess.run([CLUSTER, "start-scheduler", c.dir], check=True, capture_output=True)
    try:
        create("default-scheduler", ("ka", "kb"))
        wait_for("4 pods bound by kube-scheduler", lambda: len(bound(c.pods("test=yes"))) == 4, 30)
        time.sleep(2)
        ps = c.pods("test=yes")
        per = {g: sum(1 for p in bound(ps) if p["metadata"]["name"].startswith(g)) for g in ("ka", "kb")}
        print(f"    kube-scheduler: bound {per}; whole gangs: {sum(1 for v in per.values() if v == 3)}")
        assert all(v < 3 for v in per.values()), f"kube-scheduler was expected to split the gangs: {per}"
    finally:
        subprocess.run([CLUSTER, "stop-scheduler", c.dir], check=True, capture_output=True)
        c.clean()
    c.start_gantryd()
    create("gantry", ("ga", "gb"))
    t0 = time.time()
    wait_for("one gang bound whole", lambda: len(bound(c.pods("test=yes"))) == 3, 20)
    ps = c.pods("test=yes")
    first = {p["metadata"]["labels"]["scheduling.x-k8s.io/pod-group"] for p in bound(ps)}
    assert len(first) == 1, f"the 3 bound pods are one gang, got {first}"
    # The other gang's pods each say why they wait (the last one created may be told a
    # pass after the first gang is bound).
    def others_told():
        waiting = [p for p in c.pods("test=yes") if not p["spec"].get("nodeName")]
        return len(waiting) == 3 and all(scheduled_message(p).startswith("gantry:") for p in waiting)
    wait_for("the other gang's pods told why they wait", others_told, 10)
    ps = c.pods("test=yes")
    waiting = [p for p in ps if not p["spec"].get("nodeName")]
    print(f"    gantry: gang {first.pop()} bound whole in {time.time() - t0:.1f} s; the other waits: "
          f"{scheduled_message(waiting[0])!r}")
    # the first gang's pods complete (kwok, after 6 s); then the second is bound whole
    def other_bound():
        ps = c.pods("test=yes")
        live = [p for p in ps if (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")]
        return len(live) == 3 and len(bound(live)) == 3
    wait_for("the second gang bound after the first ended", other_bound, 60)
    check_allocatable(c)


def case_gang_pod_ending_early_frees_its_node(c):
    """A pod of a running gang that succeeds frees its GPUs while the others run on (as the
    kubelet frees them); a rebuild of the node list (a node joins) keeps the rest held."""
    early = [pod(f"early-{i}", 8, group="early", complete_after="3s" if i == 0 else None) for i in range(3)]
    c.kubectl_apply(group("early", 3), *early)
    wait_for("the first gang bound", lambda: len(bound(c.pods("test=yes"))) == 3, 20)
    c.kubectl_apply(group("after", 2), *[pod(f"after-{i}", 8, group="after") for i in range(2)])

    def after_bound():
        return len(bound([p for p in c.pods("test=yes") if p["metadata"]["name"].startswith("after")])) == 2
    t0 = time.time()
    wait_for("the second gang bound into the node early-0 left", after_bound, 20)
    ps = {p["metadata"]["name"]: p for p in c.pods("test=yes")}
    assert ps["early-0"]["status"]["phase"] == "Succeeded", ps["early-0"]["status"]
    running = {ps[n]["spec"]["nodeName"] for n in ("early-1", "early-2")}
    assert all(ps[n]["status"]["phase"] == "Running" for n in ("early-1", "early-2"))
    after_nodes = {ps[n]["spec"]["nodeName"] for n in ("after-0", "after-1")}
    assert not running & after_nodes and len(after_nodes) == 2, (running, after_nodes)
    print(f"    gang 'after' bound {time.time() - t0:.1f} s after it was created, on {sorted(after_nodes)}; "
          f"early-1 and early-2 run on")
    # A fifth node: the node list is rebuilt and the running gangs adopted again, early's
    # two pods as they run now. One whole-node pod fits (on the new node), a second waits.
    subprocess.run([CLUSTER, "nodes", c.dir, "5"], check=True, capture_output=True)
    try:
        c.kubectl_apply(pod("late-0", 8), pod("late-1", 8))
        wait_for("one late pod bound", lambda: any(p["metadata"]["name"].startswith("late")
                                                    for p in bound(c.pods("test=yes"))), 20)
        time.sleep(2)
        late = [p for p in bound(c.pods("test=yes")) if p["metadata"]["name"].startswith("late")]
        assert [p["spec"]["nodeName"] for p in late] == ["kwok-node-4"], [p["spec"]["nodeName"] for p in late]
        check_allocatable(c)
    finally:
        c.clean()
        c.kubectl("delete", "node", "kwok-node-4", check=False)


def case_elastic_gang_grows_and_shrinks(c):
    """A PodGroup with more pods than its minMember is an elastic gang (as Volcano's and
    KAI's): it starts with the pods that fit, at least minMember; at a checkpoint (its
    annotation) it binds more of its pods beside the others when GPUs are free that no
    waiting job could use, and when work waits it evicts the pods above minMember; their
    GPUs go to the waiting gang once those pods are gone."""
    ckpt = {"gantry.dev/checkpoint-interval-s": "5"}
    c.kubectl_apply(group("hold", 2), *[pod(f"hold-{i}", 8, group="hold", complete_after="15s") for i in range(2)])
    wait_for("the holding gang bound", lambda: len(bound(c.pods("test=yes"))) == 2, 20)
    c.kubectl_apply(group("el", 1), *[pod(f"el-{i}", 8, group="el", annotations=ckpt) for i in range(3)])

    def el_pods():
        return {p["metadata"]["name"]: p for p in c.pods("test=yes") if p["metadata"]["name"].startswith("el-")}
    # Bound with the pods that fit (its pods may come over two passes: those that come
    # after it was bound join it at its first checkpoint, 5 s).
    wait_for("the elastic gang on the 2 nodes free", lambda: len(bound(el_pods().values())) == 2, 12)
    waiting = [p for p in el_pods().values() if not p["spec"].get("nodeName")]
    assert len(waiting) == 1, waiting
    wait_for("the third pod told why it waits",
             lambda: "elastic gang running with 2 of its 3 pods" in scheduled_message(
                 el_pods()[waiting[0]["metadata"]["name"]]), 10)
    t0 = time.time()
    wait_for("the elastic gang grown to its 3 pods", lambda: len(bound(el_pods().values())) == 3, 30)
    rc, ls = c.gantry("ls")
    assert rc == 0 and "3 of 1-3 x 8 GPU(s)" in ls, ls
    print(f"    grew to 3 pods {time.time() - t0:.1f} s after the third waited (hold ends 15 s after it began; checkpoint 5 s)")
    check_allocatable(c)
    # Work waits: a gang of 2 whole nodes, with 1 node free. It is not critical, so it does
    # not take the grown gang whole: the gang shrinks back to minMember at its checkpoint.
    c.kubectl_apply(group("need", 2), *[pod(f"need-{i}", 8, group="need") for i in range(2)])

    def need_bound():
        return len(bound([p for p in c.pods("test=yes") if p["metadata"]["name"].startswith("need-")])) == 2
    t0 = time.time()
    wait_for("the waiting gang bound after the elastic gang shrank", need_bound, 40)
    live = [n for n, p in el_pods().items() if p["spec"].get("nodeName") and not p["metadata"].get("deletionTimestamp")]
    assert len(live) == 1, live
    print(f"    shrank to {live} and the waiting gang was bound {time.time() - t0:.1f} s after it came")
    check_allocatable(c)
    text = urllib.request.urlopen(f"http://127.0.0.1:{c.port()}/metrics", timeout=5).read().decode()
    # grown once or twice (its pods may have come over two passes: 1 -> 2 -> 3), shrunk once
    resizes = [l for l in text.splitlines() if l.startswith("gantry_resizes_total")]
    assert resizes[0] in ('gantry_resizes_total{direction="grow"} 1', 'gantry_resizes_total{direction="grow"} 2') \
        and resizes[1] == 'gantry_resizes_total{direction="shrink"} 1', resizes


def case_wait_reason_in_describe(c):
    """A pod that does not fit now waits Pending, and kubectl describe says why."""
    c.kubectl_apply(group("big", 5), *[pod(f"big-{i}", 8, group="big") for i in range(5)])
    wait_for("a wait message", lambda: all(scheduled_message(p) for p in c.pods("test=yes")), 15)
    out = c.kubectl("describe", "pod", "big-0")
    assert "gantry:" in out and "FailedScheduling" in out, out[-1500:]
    msg = scheduled_message(c.pods("test=yes")[0])
    assert "can never run" in msg, msg
    # still Pending, not ended: reconsidered when nodes change
    subprocess.run([CLUSTER, "nodes", c.dir, "5"], check=True, capture_output=True)
    try:
        wait_for("the gang bound once a fifth node came", lambda: len(bound(c.pods("test=yes"))) == 5, 30)
    finally:
        c.clean()
        c.kubectl("delete", "node", "kwok-node-4", check=False)


def case_malformed_and_impossible_pods(c):
    """Malformed, unsupported and impossible pods get a message; a good pod still binds."""
    bad_annotation = pod("bad-vram", 1, annotations={"gantry.dev/vram-gb": "lots"})
    host_port = pod("host-port", 1)
    host_port["spec"]["containers"][0]["ports"] = [{"containerPort": 8080, "hostPort": 8080}]
    too_big = pod("too-big", 16)
    nowhere = pod("nowhere", 1, extra={"nodeSelector": {"no-such-label": "x"}})
    good = pod("good", 2)
    c.kubectl_apply(bad_annotation, host_port, too_big, nowhere, good)
    wait_for("the good pod bound", lambda: any(p["metadata"]["name"] == "good" for p in bound(c.pods("test=yes"))), 15)
    want = {"bad-vram": "gantry.dev/vram-gb", "host-port": "hostPort is not supported", "too-big": "can never run",
            "nowhere": "no node matches"}

    def all_said():
        got = {p["metadata"]["name"]: scheduled_message(p) for p in c.pods("test=yes")}
        return got if all(w in got.get(n, "") for n, w in want.items()) else None
    try:
        wait_for("every refused pod's message", all_said, 15)
    except AssertionError:
        got = {p["metadata"]["name"]: scheduled_message(p) for p in c.pods("test=yes")}
        raise AssertionError(f"messages: {got}")
    assert c.proc.poll() is None, "gantryd died"


def case_critical_preempts_best_effort(c):
    """A critical pod preempts best-effort pods within their grace; the Job controller
    recreates them and they wait."""
    c.kubectl_apply(job("filler", 4, 8, priority="gantry-best-effort", grace=3))
    wait_for("4 best-effort pods bound", lambda: len(bound(c.pods("job-name=filler"))) == 4, 20)
    t0 = time.time()
    c.kubectl_apply(pod("vip", 8, priority="gantry-critical"))
    wait_for("the critical pod bound", lambda: any(p["metadata"]["name"] == "vip" for p in bound(c.pods("test=yes"))), 20)
    took = time.time() - t0
    print(f"    critical pod bound {took:.1f} s after it was created (victim's grace 3 s)")
    def recreated_waits():
        ps = [p for p in c.pods("job-name=filler") if not p["metadata"].get("deletionTimestamp")]
        waiting = [p for p in ps if not p["spec"].get("nodeName")]
        return len(ps) == 4 and len(waiting) == 1 and scheduled_message(waiting[0])
    wait_for("the evicted pod recreated by the Job controller, waiting", recreated_waits, 20)
    check_allocatable(c)


def case_node_change_during_a_grace_keeps_the_victims_gpus(c):
    """A node change rebuilds the core's node list while a preempted pod is still stopping:
    its GPUs stay held (its kubelet holds the devices) until it has stopped, so the critical
    pod that preempted it is not bound beside it, and the rebuilt core does not preempt
    another pod for it (it forgot that it had asked)."""
    held = job("held", 4, 8, priority="gantry-best-effort", grace=12)
    # an evicted pod stops 4 s after its eviction (kwok's pod-stop stage), as a kubelet
    # stops containers within the grace
    held["spec"]["template"]["metadata"]["annotations"] = {"pod-stop.stage.kwok.x-k8s.io/delay": "4s"}
    c.kubectl_apply(held)
    wait_for("4 best-effort pods bound", lambda: len(bound(c.pods("job-name=held"))) == 4, 20)
    try:
        c.kubectl_apply(pod("vip-held", 8, priority="gantry-critical"))

        def terminating():
            ps = [p for p in c.pods("job-name=held") if p["metadata"].get("deletionTimestamp")]
            return ps[0] if ps and ps[0]["spec"].get("nodeName") else None
        victim = wait_for("a best-effort pod evicted, in its grace", terminating, 20)
        node = victim["spec"]["nodeName"]
        # a node change while it terminates: the core's node list is rebuilt
        c.kubectl("label", "node", "kwok-node-0", "kwok-node-1", "kwok-node-2", "kwok-node-3",
                  "gantry-test/rebuild=1", "--overwrite")
        t0 = time.time()
        while time.time() - t0 < 6:
            check_allocatable(c)
            vip = [p for p in bound(c.pods("test=yes")) if p["metadata"]["name"] == "vip-held"]
            stopped = all((p.get("status") or {}).get("phase") in ("Failed", "Succeeded")
                          for p in c.pods("job-name=held") if p["metadata"]["name"] == victim["metadata"]["name"])
            assert not vip or stopped, f"vip-held bound on {vip[0]['spec']['nodeName']} beside the stopping victim"
            time.sleep(0.3)
        with open(c.proc.log_path) as f:
            log = f.read()
        assert "nodes and running jobs re-read" in log.split("pod evicted")[-1], "no rebuild after the eviction"
        evicted = [line for line in log.splitlines() if "pod evicted" in line and "vip-held" in line]
        assert len(evicted) == 1, "more than one pod preempted for one critical pod:\n" + "\n".join(evicted)
        wait_for("the critical pod bound once the victim is gone",
                 lambda: any(p["metadata"]["name"] == "vip-held" and p["spec"]["nodeName"] == node
                             for p in bound(c.pods("test=yes"))), 30)
        check_allocatable(c)
    finally:
        c.kubectl("label", "node", "kwok-node-0", "kwok-node-1", "kwok-node-2", "kwok-node-3",
                  "gantry-test/rebuild-", check=False)


def case_disruption_budget_steers_preemption(c):
    """A PodDisruptionBudget that allows no disruption shields its pods: the critical pod
    preempts others, and the covered pods keep running."""
    keep = job("keep", 2, 8, priority="gantry-best-effort", grace=2)
    keep["spec"]["template"]["metadata"]["labels"]["app"] = "keep"
    # the covered pods start last: without the budget they would be the victims (the
    # youngest run loses least)
    c.kubectl_apply(job("spare", 2, 8, priority="gantry-best-effort", grace=2))
    wait_for("2 best-effort pods bound", lambda: len(bound(c.pods("test=yes"))) == 2, 20)
    time.sleep(1.1)
    c.kubectl_apply(keep,
                    {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
                     "metadata": {"name": "keep", "namespace": "default"},
                     "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "keep"}}}})
    wait_for("4 best-effort pods bound", lambda: len(bound(c.pods("test=yes"))) == 4, 20)
    def budget_settled():
        status, obj = c.api.request("GET", "/apis/policy/v1/namespaces/default/poddisruptionbudgets/keep")
        st = obj.get("status") or {}
        return st.get("currentHealthy") == 2 and st.get("disruptionsAllowed") == 0
    wait_for("the budget counting 2 healthy pods, 0 disruptions allowed", budget_settled, 30)
    keep_pods = {p["metadata"]["name"] for p in c.pods("app=keep")}
    c.kubectl_apply(pod("vip", 8, priority="gantry-critical"))
    wait_for("the critical pod bound", lambda: any(p["metadata"]["name"] == "vip" for p in bound(c.pods("test=yes"))), 20)
    now_keep = {p["metadata"]["name"] for p in c.pods("app=keep") if not p["metadata"].get("deletionTimestamp")}
    assert now_keep == keep_pods, f"covered pods evicted: had {keep_pods}, now {now_keep}"


def case_deployment_scaled_by_preemption(c):
    """A critical inference Deployment scaled from 2 to 8 replicas while best-effort pods fill
    the cluster: the 6 new replicas are bound within 10 s, by preemption."""
    dep = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "infer", "namespace": "default"},
           "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "infer"}},
                    "template": {"metadata": {"labels": {"app": "infer"}},
                                 "spec": {"schedulerName": "gantry", "priorityClassName": "gantry-critical",
                                          "containers": [{"name": "m", "image": "vllm",
                                                          "resources": {"limits": {"nvidia.com/gpu": "4"}}}]}}}}
    c.kubectl_apply(dep)
    wait_for("2 replicas bound", lambda: len(bound(c.pods("app=infer"))) == 2, 20)
    c.kubectl_apply(job("fill", 6, 4, priority="gantry-best-effort", grace=2))
    wait_for("best-effort pods fill the cluster", lambda: len(bound(c.pods("job-name=fill"))) == 6, 20)
    t0 = time.time()
    c.kubectl("scale", "deployment", "infer", "--replicas=8")
    wait_for("8 replicas bound", lambda: len(bound([p for p in c.pods("app=infer")
                                                      if not p["metadata"].get("deletionTimestamp")])) == 8, 10)
    print(f"    6 new critical replicas bound in {time.time() - t0:.1f} s")
    check_allocatable(c)


def case_pod_anti_affinity_spreads_replicas(c):
    """Required pod anti-affinity by kubernetes.io/hostname (replicas of an inference
    Deployment kept one per node): the replicas go to distinct nodes, a pod they repel
    (it has their label, no terms of its own) to another one, a replica with no node left
    waits with why and binds when a node frees; required pod affinity: beside a replica,
    or waiting with why for a pod that does not run; a gang whose own pods repel each other
    gets one pod per node, one whose pods attract each other one node."""
    term = {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": "kubernetes.io/hostname"}
    dep = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": "default"},
           "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "web"}},
                    "template": {"metadata": {"labels": {"app": "web"}},
                                 "spec": {"schedulerName": "gantry", "terminationGracePeriodSeconds": 1,
                                          "affinity": {"podAntiAffinity": {
                                              "requiredDuringSchedulingIgnoredDuringExecution": [term]}},
                                          "containers": [{"name": "m", "image": "vllm",
                                                          "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}}}

    def web():
        return [p for p in c.pods("app=web") if not p["metadata"].get("deletionTimestamp")]

    def nodes_of(pods):
        return [p["spec"]["nodeName"] for p in bound(pods)]

    try:
        c.kubectl_apply(dep)
        wait_for("3 replicas bound", lambda: len(bound(web())) == 3, 20)
        assert len(set(nodes_of(web()))) == 3, nodes_of(web())
        # Each waited for the one before (a message), then was bound: none says it waits.
        time.sleep(1)
        stale = {p["metadata"]["name"]: scheduled_message(p) for p in bound(web()) if scheduled_message(p)}
        assert not stale, f"bound pods still saying they wait: {stale}"
        # A pod with their label and no terms: their terms keep it off their nodes.
        intruder = pod("intruder", 1)
        intruder["metadata"]["labels"]["app"] = "web"
        c.kubectl_apply(intruder)
        wait_for("the intruder bound", lambda: len(bound(web())) == 4, 20)
        assert len(set(nodes_of(web()))) == 4, nodes_of(web())
        # A fourth replica: no node without an app=web pod is left.
        c.kubectl("scale", "deployment", "web", "--replicas=4")

        def waiting():
            pending = [p for p in web() if not (p.get("spec") or {}).get("nodeName")]
            return pending and "gantry: " in scheduled_message(pending[0]) and scheduled_message(pending[0])
        said = wait_for("the fourth replica waiting with why", waiting, 20)
        print(f"    {said}")
        time.sleep(2)
        assert len(bound(web())) == 4, nodes_of(web())
        c.kubectl("delete", "pod", "intruder", "--grace-period=0", "--force")
        wait_for("the fourth replica bound where the intruder was", lambda: len(bound(web())) == 4 and
                 "intruder" not in [p["metadata"]["name"] for p in web()], 20)
        assert len(set(nodes_of(web()))) == 4, nodes_of(web())
        check_allocatable(c)
        # Required pod affinity: beside a replica (its node), and waiting for a pod that
        # does not run (its selector matches none).
        beside = pod("beside", 1, extra={"affinity": {"podAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [term]}}})
        lonely = pod("lonely", 1, extra={"affinity": {"podAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"app": "nothing"}}, "topologyKey": "kubernetes.io/hostname"}]}}})
        c.kubectl_apply(beside, lonely)
        wait_for("beside bound", lambda: bound(c.pods("test=yes")) and any(
            p["metadata"]["name"] == "beside" for p in bound(c.pods("test=yes"))), 20)
        assert next(p["spec"]["nodeName"] for p in bound(c.pods("test=yes"))
                    if p["metadata"]["name"] == "beside") in nodes_of(web())
        wait_for("lonely waiting with why", lambda: "pod affinity selects" in scheduled_message(
            next(p for p in c.pods("test=yes") if p["metadata"]["name"] == "lonely")), 20)
        c.kubectl("delete", "pod", "beside", "lonely", "--grace-period=0", "--force")
        c.kubectl("delete", "deployment", "web")
        wait_for("the replicas gone", lambda: not c.pods("app=web"), 30)
        # A gang whose pods attract each other by hostname: all on one node.
        together = [pod(f"together-{i}", 2, group="together", extra={"affinity": {"podAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"scheduling.x-k8s.io/pod-group": "together"}},
                 "topologyKey": "kubernetes.io/hostname"}]}}}) for i in range(3)]
        c.kubectl_apply(group("together", 3), *together)
        wait_for("the together gang bound",
                 lambda: len(bound(c.pods("scheduling.x-k8s.io/pod-group=together"))) == 3, 20)
        assert len(set(nodes_of(c.pods("scheduling.x-k8s.io/pod-group=together")))) == 1
        # A gang whose pods repel each other: one per node (1 GPU each would fit on one).
        gang = [pod(f"spread-{i}", 1, group="spread", extra={"affinity": {"podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"scheduling.x-k8s.io/pod-group": "spread"}},
                 "topologyKey": "kubernetes.io/hostname"}]}}}) for i in range(3)]
        c.kubectl_apply(group("spread", 3), *gang)
        wait_for("the gang bound", lambda: len(bound(c.pods("scheduling.x-k8s.io/pod-group=spread"))) == 3, 20)
        spread = nodes_of(c.pods("scheduling.x-k8s.io/pod-group=spread"))
        assert len(set(spread)) == 3, spread
        assert c.proc.poll() is None, "gantryd died"
    finally:
        c.clean()


def case_pod_anti_affinity_by_namespace_selector(c):
    """A pod anti-affinity term with a namespaceSelector covers the pods of the namespaces
    whose labels it selects: a pod kept off a node where a pod of a `team=ml` namespace runs
    waits with why, a term of its own namespace only does not see that pod, and once the
    namespace's label changes the waiting pod is placed."""
    c.kubectl("create", "namespace", "ml", check=False)
    c.kubectl("label", "namespace", "ml", "team=ml", "--overwrite")
    pin = {"nodeSelector": {"kubernetes.io/hostname": "kwok-node-0"}}

    def keep_off(name, **term):
        return pod(name, 1, extra=dict(pin, affinity={"podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [dict({
                "labelSelector": {"matchLabels": {"app": "web"}},
                "topologyKey": "kubernetes.io/hostname"}, **term)]}}))

    def get(name):
        return next((p for p in c.pods("test=yes") if p["metadata"]["name"] == name), {})

    try:
        other = pod("ml-web", 1, extra=pin)
        other["metadata"]["namespace"] = "ml"
        other["metadata"]["labels"]["app"] = "web"
        c.kubectl_apply(other)
        wait_for("the ml pod bound", lambda: any(
            (p.get("spec") or {}).get("nodeName") == "kwok-node-0"
            for p in k8s_util.Api.list_all(c.api, "/api/v1/namespaces/ml/pods")), 20)
        c.kubectl_apply(keep_off("by-labels", namespaceSelector={"matchLabels": {"team": "ml"}}),
                        keep_off("own-namespace"))
        wait_for("the pod of its own namespace's term bound", lambda: bound([get("own-namespace")]), 20)
        said = wait_for("the pod kept off by the namespace's labels waiting with why",
                        lambda: "anti-affinity" in scheduled_message(get("by-labels")) and
                        scheduled_message(get("by-labels")), 20)
        print(f"    {said}")
        assert not bound([get("by-labels")])
        c.kubectl("label", "namespace", "ml", "team=research", "--overwrite")
        wait_for("the pod bound once the namespace's label changed", lambda: bound([get("by-labels")]), 20)
        check_allocatable(c)
        assert c.proc.poll() is None, "gantryd died"
    finally:
        c.clean()
        c.kubectl("delete", "pod", "--all", "-n", "ml", "--grace-period=0", "--force", check=False)
        c.kubectl("delete", "namespace", "ml", "--wait=false", check=False)


def case_topology_spread_over_zones(c):
    """A topology spread constraint (DoNotSchedule, maxSkew 1 over a zone label) on a
    Deployment of 1-GPU replicas: where Gantry would pack them onto one node, they go two
    and two over the two zones, then three and three once scaled to 6; a pod whose spread
    no node can keep waits with why."""
    dep = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "spread", "namespace": "default"},
           "spec": {"replicas": 4, "selector": {"matchLabels": {"app": "spread"}},
                    "template": {"metadata": {"labels": {"app": "spread"}},
                                 "spec": {"schedulerName": "gantry", "terminationGracePeriodSeconds": 1,
                                          "topologySpreadConstraints": [{
                                              "maxSkew": 1, "topologyKey": "example.com/zone",
                                              "whenUnsatisfiable": "DoNotSchedule",
                                              "labelSelector": {"matchLabels": {"app": "spread"}}}],
                                          "containers": [{"name": "m", "image": "vllm",
                                                          "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}}}

    def per_zone():
        got = {"a": 0, "b": 0}
        for p in bound([p for p in c.pods("app=spread") if not p["metadata"].get("deletionTimestamp")]):
            got[ZONES[p["spec"]["nodeName"]]] += 1
        return got

    with zoned(c):
        c.kubectl_apply(dep)
        wait_for("4 replicas bound", lambda: sum(per_zone().values()) == 4, 20)
        assert per_zone() == {"a": 2, "b": 2}, per_zone()
        c.kubectl("scale", "deployment", "spread", "--replicas=6")
        wait_for("6 replicas bound", lambda: sum(per_zone().values()) == 6, 20)
        assert per_zone() == {"a": 3, "b": 3}, per_zone()
        # Spread over a key no node has: nowhere to go, said.
        odd = pod("no-zone", 1, extra={"topologySpreadConstraints": [{
            "maxSkew": 1, "topologyKey": "example.com/rack", "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": {"test": "yes"}}}]})
        c.kubectl_apply(odd)
        wait_for("the pod with no domain waiting with why", lambda: "topology spread" in scheduled_message(
            next(p for p in c.pods("test=yes") if p["metadata"]["name"] == "no-zone")), 20)
        check_allocatable(c)
        assert c.proc.poll() is None, "gantryd died"


def case_topology_spread_label_keys_and_taints(c):
    """Topology spread's matchLabelKeys and nodeTaintsPolicy: Honor. Two `stable` pods sit
    in zone a; a `canary` pod spreading by app with matchLabelKeys [track] counts the
    canaries only (none yet), so packing puts it beside them in zone a, where counting the
    stable ones would have sent it to zone b. With zone b tainted, a pod spreading with
    nodeTaintsPolicy Honor leaves zone b out and goes to zone a; the same pod with the
    default (Ignore) counts zone b's 0 and waits, since it cannot go there."""

    def labelled(name, labels, extra):
        p = pod(name, 1, extra=extra)
        p["metadata"]["labels"].update(labels)
        return p

    def spread(app, **more):
        return {"topologySpreadConstraints": [dict({
            "maxSkew": 1, "topologyKey": "example.com/zone", "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": {"app": app}}}, **more)]}

    def zone_of(name):
        p = next((p for p in c.pods("test=yes") if p["metadata"]["name"] == name), None)
        node = (p or {}).get("spec", {}).get("nodeName")
        return ZONES.get(node) if node else None

    with zoned(c):
        pin = {"nodeSelector": {"kubernetes.io/hostname": "kwok-node-0"}}
        c.kubectl_apply(*[labelled(f"stable-{i}", {"app": "web", "track": "stable"}, pin) for i in range(2)])
        wait_for("the stable pods bound", lambda: zone_of("stable-0") and zone_of("stable-1"), 20)
        c.kubectl_apply(labelled("canary", {"app": "web", "track": "canary"},
                                 spread("web", matchLabelKeys=["track"])))
        wait_for("the canary bound", lambda: zone_of("canary"), 20)
        assert zone_of("canary") == "a", "matchLabelKeys: the stable pods were counted (canary in zone b)"

        for node in ("kwok-node-2", "kwok-node-3"):
            c.kubectl("taint", "node", node, "example.com/maintenance=yes:NoSchedule", "--overwrite")
        c.kubectl_apply(labelled("first", {"app": "db"}, pin))
        wait_for("the first db pod bound", lambda: zone_of("first"), 20)
        c.kubectl_apply(labelled("honour", {"app": "db"}, spread("db", nodeTaintsPolicy="Honor")))
        wait_for("the pod honouring taints bound", lambda: zone_of("honour"), 20)
        assert zone_of("honour") == "a", zone_of("honour")
        c.kubectl_apply(labelled("ignore", {"app": "db"}, spread("db")))
        wait_for("the pod ignoring taints waiting with why", lambda: "topology spread" in scheduled_message(
            next(p for p in c.pods("test=yes") if p["metadata"]["name"] == "ignore")), 20)
        assert zone_of("ignore") is None
        check_allocatable(c)
        assert c.proc.poll() is None, "gantryd died"


def case_topology_spread_on_a_gang(c):
    """A gang whose pods a DoNotSchedule spread by hostname with maxSkew 1 counts goes one pod
    per node, as kube-scheduler's one-by-one placement puts them (packing would put the three
    on one node; builds before 2026-12-02 refused any spread on a gang's pods); a second
    such gang of more pods than there are nodes holding the fewest waits with why; a gang
    spread by zone is refused with why."""

    def spread(app, key="kubernetes.io/hostname"):
        return {"topologySpreadConstraints": [{
            "maxSkew": 1, "topologyKey": key, "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": {"app": app}}}]}

    def member(name, grp, extra, app="sp"):
        p = pod(name, 2, group=grp, extra=extra)
        p["metadata"]["labels"]["app"] = app
        return p

    def of(grp):
        return c.pods(f"scheduling.x-k8s.io/pod-group={grp}")

    def said(name):
        return next((scheduled_message(p) or "" for p in c.pods("test=yes")
                     if p["metadata"]["name"] == name), "")

    with zoned(c):
        c.kubectl_apply(group("sp", 3), *[member(f"sp-{i}", "sp", spread("sp")) for i in range(3)])
        wait_for("the spread gang bound", lambda: len(bound(of("sp"))) == 3, 20)
        nodes = [p["spec"]["nodeName"] for p in bound(of("sp"))]
        assert len(set(nodes)) == 3, f"not one pod per node: {nodes}"
        c.kubectl_apply(group("sp2", 4), *[member(f"sp2-{i}", "sp2", spread("sp")) for i in range(4)])
        wait_for("the second gang says why it waits", lambda: "leaves 1 node(s)" in said("sp2-0"), 20)
        assert not bound(of("sp2")), "a gang partly bound"
        c.kubectl_apply(group("zz", 2), *[member(f"zz-{i}", "zz", spread("zz", "example.com/zone"), "zz")
                                          for i in range(2)])
        wait_for("the zone-spread gang says why", lambda: "topology spread by example.com/zone" in said("zz-0"), 20)
        check_allocatable(c)
        assert c.proc.poll() is None, "gantryd died"


def case_preferred_affinities_are_weighed(c):
    """Preferred (soft) affinities, weighed as kube-scheduler weighs them (packing would
    decide otherwise each time): four replicas with preferred pod anti-affinity by hostname
    go to four nodes, where packing puts them on one, and a fifth still binds (nothing is
    required); a pod preferring zone b by node affinity goes there, and to zone a once zone
    b has no room; a pod preferring the zone of a pod goes to that zone's free node rather
    than the fuller node packing would pick; replicas with a ScheduleAnyway spread over the
    zones go two a zone."""

    def labelled(name, gpus, labels, affinity):
        p = pod(name, gpus, extra={"affinity": affinity})
        p["metadata"]["labels"].update(labels)
        return p

    def node_of(name):
        p = next((p for p in c.pods("test=yes") if p["metadata"]["name"] == name), None)
        return ((p or {}).get("spec") or {}).get("nodeName")

    apart = {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 100, "podAffinityTerm": {"labelSelector": {"matchLabels": {"app": "svc"}},
                                            "topologyKey": "kubernetes.io/hostname"}}]}}
    to_b = {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 50, "preference": {"matchExpressions": [
            {"key": "example.com/zone", "operator": "In", "values": ["b"]}]}}]}}
    near_big = {"podAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 10, "podAffinityTerm": {"labelSelector": {"matchLabels": {"app": "big"}},
                                           "topologyKey": "example.com/zone"}}]}}
    with zoned(c):
        c.kubectl_apply(*[labelled(f"svc-{i}", 1, {"app": "svc"}, apart) for i in range(4)])
        wait_for("4 replicas bound", lambda: all(node_of(f"svc-{i}") for i in range(4)), 20)
        nodes = [node_of(f"svc-{i}") for i in range(4)]
        assert len(set(nodes)) == 4, f"preferred anti-affinity not weighed: {nodes}"
        c.kubectl_apply(labelled("svc-4", 1, {"app": "svc"}, apart))
        wait_for("a fifth replica bound all the same", lambda: node_of("svc-4"), 20)
        c.kubectl("delete", "pod", "-l", "app=svc", "--grace-period=0", "--force")
        wait_for("the replicas gone", lambda: not c.pods("app=svc"), 30)

        c.kubectl_apply(labelled("b-2", 2, {}, to_b))
        wait_for("b-2 bound", lambda: node_of("b-2"), 20)
        assert ZONES[node_of("b-2")] == "b", node_of("b-2")
        c.kubectl_apply(labelled("b-8", 8, {}, to_b))
        wait_for("b-8 bound", lambda: node_of("b-8"), 20)
        assert ZONES[node_of("b-8")] == "b", node_of("b-8")
        c.kubectl_apply(labelled("a-8", 8, {"app": "big"}, to_b))  # zone b has 6 GPUs left
        wait_for("a-8 bound in zone a all the same", lambda: node_of("a-8"), 20)
        assert ZONES[node_of("a-8")] == "a", node_of("a-8")

        # Free now: 8 GPUs on one node of zone a, 6 on one of zone b (packing's pick).
        c.kubectl_apply(labelled("near", 1, {}, near_big))
        wait_for("near bound", lambda: node_of("near"), 20)
        assert ZONES[node_of("near")] == "a" and node_of("near") != node_of("a-8"), node_of("near")
        check_allocatable(c)
        c.clean()

        # ScheduleAnyway spread over the zones: two replicas a zone where packing puts all
        # four on one node.
        anyway = {"topologySpreadConstraints": [{
            "maxSkew": 1, "topologyKey": "example.com/zone", "whenUnsatisfiable": "ScheduleAnyway",
            "labelSelector": {"matchLabels": {"app": "sa"}}}]}
        sa = []
        for i in range(4):
            p = pod(f"sa-{i}", 1, extra=anyway)
            p["metadata"]["labels"]["app"] = "sa"
            sa.append(p)
        c.kubectl_apply(*sa)
        wait_for("4 spread replicas bound", lambda: all(node_of(f"sa-{i}") for i in range(4)), 20)
        zones = sorted(ZONES[node_of(f"sa-{i}")] for i in range(4))
        assert zones == ["a", "a", "b", "b"], f"ScheduleAnyway not weighed: {zones}"
        assert c.proc.poll() is None, "gantryd died"


def case_other_pods_terms_are_weighed(c):
    """A bound pod's own preferred terms weigh where others go, as kube-scheduler's
    InterPodAffinity has it (packing would decide otherwise each time): a pod that a bound
    pod's preferred anti-affinity selects keeps off its node; one that a bound pod's
    preferred affinity selects goes to that pod's zone. A preference never holds a pod
    behind one that waits for room: a small pod whose preferred anti-affinity selects a
    wider pod created before it, and one that pod's own terms select, bind while it waits
    (builds before 2026-12-02 held the first behind it for as long as it waited). A
    PreferNoSchedule taint keeps pods that do not tolerate it off packing's pick."""

    def labelled(name, gpus, labels, spec):
        p = pod(name, gpus, extra=spec)
        p["metadata"]["labels"].update(labels)
        return p

    def node_of(name):
        p = next((p for p in c.pods("test=yes") if p["metadata"]["name"] == name), None)
        return ((p or {}).get("spec") or {}).get("nodeName")

    def term(kind, weight, app, key):
        return {kind: {"preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": weight, "podAffinityTerm": {"labelSelector": {"matchLabels": {"app": app}},
                                                   "topologyKey": key}}]}}

    with zoned(c):
        c.kubectl_apply(labelled("noisy", 2, {}, {"affinity": term(
            "podAntiAffinity", 100, "calm", "kubernetes.io/hostname")}))
        wait_for("noisy bound", lambda: node_of("noisy"), 20)
        c.kubectl_apply(labelled("calm", 1, {"app": "calm"}, {}))  # packing: noisy's node
        wait_for("calm bound", lambda: node_of("calm"), 20)
        assert node_of("calm") != node_of("noisy"), f"calm on noisy's node {node_of('calm')}"
        c.clean()

        # The one GPU left beside zone a's fill is packing's pick; the hub in zone b draws
        # spokes.
        c.kubectl_apply(labelled("fill", 7, {}, {"nodeSelector": {"example.com/zone": "a"}}))
        wait_for("fill bound", lambda: node_of("fill"), 20)
        c.kubectl_apply(labelled("hub", 1, {}, {"nodeSelector": {"example.com/zone": "b"},
                                                "affinity": term("podAffinity", 10, "spoke",
                                                                 "example.com/zone")}))
        wait_for("hub bound", lambda: node_of("hub"), 20)
        c.kubectl_apply(labelled("spoke", 1, {"app": "spoke"}, {}))
        wait_for("spoke bound", lambda: node_of("spoke"), 20)
        assert ZONES[node_of("spoke")] == "b", f"spoke in zone {ZONES[node_of('spoke')]}"
        c.clean()

        # Every node a GPU short of whole: the wide pod waits for room.
        c.kubectl_apply(*[labelled(f"pin-{i}", 1, {}, {"nodeSelector": {"kubernetes.io/hostname": n}})
                          for i, n in enumerate(ZONES)])
        wait_for("pins bound", lambda: all(node_of(f"pin-{i}") for i in range(len(ZONES))), 20)
        c.kubectl_apply(labelled("wide", 8, {"app": "wide"}, {"affinity": term(
            "podAntiAffinity", 50, "small", "kubernetes.io/hostname")}))
        time.sleep(1.1)  # creation times are in whole seconds; they order the queue
        c.kubectl_apply(labelled("small-own", 1, {}, {"affinity": term(
                            "podAntiAffinity", 50, "wide", "kubernetes.io/hostname")}),
                        labelled("small-its", 1, {"app": "small"}, {}))
        wait_for("the small pods bound while wide waits",
                 lambda: node_of("small-own") and node_of("small-its"), 20)
        assert not node_of("wide"), f"wide bound on {node_of('wide')}"
        c.clean()

        # A PreferNoSchedule taint on packing's pick (the one GPU left on a node): a pod
        # that does not tolerate it goes elsewhere while elsewhere has room; one that
        # tolerates it goes there.
        c.kubectl("taint", "node", "kwok-node-0", "example.com/maintenance=soon:PreferNoSchedule")
        c.kubectl_apply(labelled("fill0", 7, {}, {"nodeSelector": {"kubernetes.io/hostname": "kwok-node-0"}}))
        wait_for("fill0 bound", lambda: node_of("fill0"), 20)
        c.kubectl_apply(labelled("shy", 1, {}, {}))
        wait_for("shy bound", lambda: node_of("shy"), 20)
        assert node_of("shy") != "kwok-node-0", "a PreferNoSchedule taint not weighed"
        c.kubectl_apply(labelled("bold", 1, {}, {"tolerations": [{
            "key": "example.com/maintenance", "operator": "Exists", "effect": "PreferNoSchedule"}]}))
        wait_for("bold bound", lambda: node_of("bold"), 20)
        assert node_of("bold") == "kwok-node-0", f"bold on {node_of('bold')}"
        check_allocatable(c)
        assert c.proc.poll() is None, "gantryd died"


def case_kill_and_restart(c):
    """kill -9 of gantryd mid-run: the restarted one adopts what runs (binding nothing
    twice) and places what waits."""
    c.kubectl_apply(group("run", 2), *[pod(f"run-{i}", 8, group="run") for i in range(2)])
    wait_for("the gang bound", lambda: len(bound(c.pods("scheduling.x-k8s.io/pod-group=run"))) == 2, 15)
    before = {p["metadata"]["name"]: p["spec"]["nodeName"] for p in bound(c.pods("test=yes"))}
    c.stop_gantryd(signal.SIGKILL)
    c.kubectl_apply(group("next", 2), *[pod(f"next-{i}", 8, group="next") for i in range(2)])
    time.sleep(1.1)  # creation times are in whole seconds; they order the queue
    # A lone pod too: a first pass that ran before the PodGroups were listed left the
    # running gang unadopted, its nodes free in the core, and could bind this one there.
    c.kubectl_apply(group("later", 1), pod("later-0", 8, group="later"), pod("solo", 8))
    c.start_gantryd()
    wait_for("the waiting gang bound", lambda: len(bound(c.pods("scheduling.x-k8s.io/pod-group=next"))) == 2, 15)
    time.sleep(1)
    after = {p["metadata"]["name"]: p["spec"]["nodeName"] for p in bound(c.pods("test=yes"))}
    for k, v in before.items():
        assert after.get(k) == v, f"{k} moved from {v} to {after.get(k)}"
    assert "later-0" not in after and "solo" not in after, "a fifth whole node was handed out"
    check_allocatable(c)


def case_partly_bound_gang_is_evicted(c):
    """A gang found partly bound at start (a crash between its bindings) has its bound pods
    evicted within 10 s."""
    c.stop_gantryd()
    c.kubectl_apply(group("half", 2), *[pod(f"half-{i}", 8, group="half") for i in range(2)])
    status, obj = c.api.request("POST", "/api/v1/namespaces/default/pods/half-0/binding", {
        "apiVersion": "v1", "kind": "Binding", "metadata": {"name": "half-0"},
        "target": {"apiVersion": "v1", "kind": "Node", "name": "kwok-node-0"}})
    assert status == 201, obj
    c.start_gantryd()
    t0 = time.time()
    wait_for("the bound pod evicted", lambda: all(p["metadata"]["name"] != "half-0" or p["metadata"].get("deletionTimestamp")
                                                  for p in c.pods("test=yes")), 10)
    print(f"    partly bound gang's pod evicted {time.time() - t0:.1f} s after start")


def case_two_replicas_elect_a_leader(c):
    """Two replicas and a coordination.k8s.io Lease: one schedules; kill -9 it and the
    other takes over within the lease's duration; a clean stop hands over at once."""
    other = c.spawn_gantryd()
    try:
        def leaders():
            out = []
            for proc in (c.proc, other):
                with open(proc.log_path) as f:
                    if "kubernetes: leading" in f.read():
                        out.append(proc)
            return out
        time.sleep(2)
        assert len(leaders()) == 1, "exactly one replica leads"
        leader = leaders()[0]
        standby = other if leader is c.proc else c.proc
        c.kubectl_apply(pod("one", 8))
        wait_for("a pod bound by the leader", lambda: len(bound(c.pods("test=yes"))) == 1, 10)
        leader.kill()
        leader.wait()
        t0 = time.time()
        c.kubectl_apply(pod("two", 8))
        wait_for("the standby binding after the leader's kill -9", lambda: len(bound(c.pods("test=yes"))) == 2,
                 c.LEASE_S * 3 + 10)
        print(f"    standby took over and bound in {time.time() - t0:.1f} s (lease {c.LEASE_S} s)")
        # the survivor is the harness's gantryd from now on; a clean stop gives the Lease up
        c.proc = standby
        third = c.spawn_gantryd()
        time.sleep(1)
        assert c.stop_gantryd() == 0
        t0 = time.time()
        c.kubectl_apply(pod("three", 8))
        wait_for("the third replica binding after a clean stop", lambda: len(bound(c.pods("test=yes"))) == 3, 10)
        print(f"    after a clean stop the next replica bound in {time.time() - t0:.1f} s")
        c.proc = third
        check_allocatable(c)
    finally:
        if other.poll() is None and other is not c.proc:
            other.kill()
            other.wait()


def case_cordoned_and_not_ready_nodes(c):
    """Pods are not placed on cordoned or NotReady nodes."""
    c.kubectl("cordon", "kwok-node-0")
    try:
        c.kubectl_apply(group("four", 4), *[pod(f"four-{i}", 8, group="four") for i in range(4)])
        wait_for("a wait message", lambda: all(scheduled_message(p) for p in c.pods("test=yes")), 10)
        assert not bound(c.pods("test=yes")), "bound onto a cordoned node"
    finally:
        c.kubectl("uncordon", "kwok-node-0")
    wait_for("the gang bound once uncordoned", lambda: len(bound(c.pods("test=yes"))) == 4, 15)


def case_spot_pool_by_label_takes_no_critical_pod(c):
    """kubernetes.pools: a node with the spot pool's label is in pool `spot` (gantry nodes
    says so), and a critical pod is never bound there; without the label it is."""
    c.kubectl("label", "node", "kwok-node-3", "gantry.dev/test-spot=true")
    try:
        wait_for("kwok-node-3 in pool spot", lambda: any(
            x.startswith("kwok-node-3") and " spot " in f" {x} " for x in c.gantry("nodes")[1].splitlines()), 15)
        c.kubectl_apply(*[pod(f"crit-{i}", 8, priority="gantry-critical") for i in range(4)])
        wait_for("three critical pods bound", lambda: len(bound(c.pods("test=yes"))) == 3, 15)
        wait_for("the fourth's wait message", lambda: any(
            scheduled_message(p) for p in c.pods("test=yes") if not p["spec"].get("nodeName")), 10)
        time.sleep(1)
        nodes = {p["spec"]["nodeName"] for p in bound(c.pods("test=yes"))}
        assert "kwok-node-3" not in nodes and len(nodes) == 3, nodes
    finally:
        c.kubectl("label", "node", "kwok-node-3", "gantry.dev/test-spot-")
    wait_for("the fourth bound once the node is not spot", lambda: len(bound(c.pods("test=yes"))) == 4, 15)


def kwok_node(c, name, product, allocatable, labels):
    """A kwok node of A100-80GB GPUs advertising `allocatable` besides CPU and memory."""
    res = {"cpu": "224", "memory": "2063731376Ki", "pods": "110", **allocatable}
    c.kubectl_apply({"apiVersion": "v1", "kind": "Node",
                     "metadata": {"name": name, "annotations": {"kwok.x-k8s.io/node": "fake"},
                                  "labels": {"type": "kwok-mig", "kubernetes.io/hostname": name,
                                             "nvidia.com/gpu.product": product, **labels}},
                     "status": {"capacity": res, "allocatable": res}})

    def ready():
        status, node = c.api.request("GET", f"/api/v1/nodes/{name}")
        st = node.get("status") or {} if status == 200 else {}
        return any(x.get("type") == "Ready" and x.get("status") == "True" for x in st.get("conditions") or []) \
            and all((st.get("allocatable") or {}).get(k) == v for k, v in allocatable.items())
    wait_for(f"node {name} Ready", ready, 30)


def placement(c):
    """The test's pods: bound ones by node, and the waiting ones' messages."""
    ps = c.pods("test=yes")
    on = {}
    for p in bound(ps):
        on.setdefault(p["spec"]["nodeName"], []).append(p["metadata"]["name"])
    waiting = {p["metadata"]["name"]: scheduled_message(p) for p in ps if not p["spec"].get("nodeName")}
    return on, waiting


def mig_pod(name, resource, node_selector=None):
    p = pod(name, 0)
    p["spec"]["containers"][0]["resources"] = {"limits": {resource: "1"}}
    if node_selector:
        p["spec"]["nodeSelector"] = node_selector
    return p


def case_mig_devices(c):
    """MIG devices through the device plugin, mixed and single strategies: as many pods as
    the nodes have devices are bound, and no more, also after a restart; a node of several
    profiles (all-balanced) offers each as often as it has it."""
    single_product = "NVIDIA-A100-SXM4-80GB-MIG-3g.40gb"
    # all-1g.10gb on 2 GPUs (mixed strategy), all-3g.40gb on 2 GPUs (single strategy),
    # all-balanced on 1 GPU (two 1g.10gb, a 2g.20gb and a 3g.40gb), and a node of two
    # profiles without GPU feature discovery's GPU count, whose devices Gantry cannot split
    kwok_node(c, "mig-mixed", "NVIDIA-A100-SXM4-80GB", {"nvidia.com/mig-1g.10gb": "14"},
              {"nvidia.com/mig.strategy": "mixed", "nvidia.com/gpu.count": "2"})
    kwok_node(c, "mig-single", single_product, {"nvidia.com/gpu": "4"},
              {"nvidia.com/mig.strategy": "single", "nvidia.com/gpu.count": "4", "nvidia.com/gpu.memory": "40192"})
    kwok_node(c, "mig-balanced", "NVIDIA-A100-SXM4-80GB",
              {"nvidia.com/mig-1g.10gb": "2", "nvidia.com/mig-2g.20gb": "1", "nvidia.com/mig-3g.40gb": "1"},
              {"nvidia.com/mig.strategy": "mixed", "nvidia.com/gpu.count": "1"})
    kwok_node(c, "mig-uncounted", "NVIDIA-A100-SXM4-80GB",
              {"nvidia.com/mig-1g.10gb": "4", "nvidia.com/mig-3g.40gb": "2"}, {"nvidia.com/mig.strategy": "mixed"})
    try:
        small = [mig_pod(f"small-{i:02}", "nvidia.com/mig-1g.10gb") for i in range(17)]
        half = [mig_pod(f"half-{i}", "nvidia.com/gpu", {"nvidia.com/gpu.product": single_product}) for i in range(5)]
        two = [mig_pod(f"two-{i}", "nvidia.com/mig-2g.20gb") for i in range(2)]
        three = [mig_pod(f"three-{i}", "nvidia.com/mig-3g.40gb") for i in range(2)]
        c.kubectl_apply(*small, *half, *two, *three, mig_pod("no-profile", "nvidia.com/mig-7g.80gb"))
        want = {"mig-mixed": 14, "mig-single": 4, "mig-balanced": 4}

        def placed():
            return placement(c)

        def settled():
            on, waiting = placed()
            return (on, waiting) if {n: len(v) for n, v in on.items()} == want \
                and len(waiting) == 5 and all(waiting.values()) else None
        try:
            on, waiting = wait_for("14 + 4 + 4 MIG pods bound, 5 waiting with a reason", settled, 20)
        except AssertionError:
            raise AssertionError(f"placed: {placed()}")
        assert all(n.startswith("small-") for n in on["mig-mixed"]), on
        kinds = sorted(n.split("-")[0] for n in on["mig-balanced"])
        assert kinds == ["small", "small", "three", "two"], on
        assert "nvidia.com/mig-7g.80gb" in waiting["no-profile"], waiting
        check_allocatable(c)
        # the log names the node whose devices are left out, and why
        with open(c.proc.log_path) as f:
            assert "mig-uncounted: its MIG devices are not offered: its devices are not whole GPUs " \
                "split into one profile, and without GPU feature discovery's label nvidia.com/gpu.count" in f.read()
        # a restart adopts the MIG pods: still no more bound than the nodes have
        c.stop_gantryd()
        c.start_gantryd()
        time.sleep(3)
        on, waiting = placed()
        assert {n: len(v) for n, v in on.items()} == want, on
        check_allocatable(c)
        # one ends: the small pod waiting takes its device
        c.kubectl("delete", "pod", on["mig-mixed"][0], "--grace-period=0", "--force")
        wait_for("the waiting 1g.10gb pod bound", lambda: len(placed()[0].get("mig-mixed", [])) == 14
                 and all(not n.startswith("small-") for n in placed()[1]), 15)
        check_allocatable(c)
    finally:
        c.clean()
        for n in ("mig-mixed", "mig-single", "mig-balanced", "mig-uncounted"):
            c.kubectl("delete", "node", n, check=False)


def case_shared_gpus(c):
    """GPUs the device plugin shares (time-slicing, and MPS renamed to nvidia.com/gpu.shared):
    one replica per pod, as many as the node has and no more, also after a restart; a pod
    asking a whole GPU never gets a replica."""
    kwok_node(c, "ts-node", "NVIDIA-A100-SXM4-40GB-SHARED", {"nvidia.com/gpu": "16"},
              {"nvidia.com/gpu.replicas": "4", "nvidia.com/gpu.sharing-strategy": "time-slicing",
               "nvidia.com/gpu.count": "4"})
    kwok_node(c, "mps-node", "NVIDIA-A100-SXM4-40GB", {"nvidia.com/gpu.shared": "8"},
              {"nvidia.com/gpu.replicas": "2", "nvidia.com/gpu.sharing-strategy": "mps",
               "nvidia.com/gpu.count": "4"})
    try:
        ts = [mig_pod(f"ts-{i:02}", "nvidia.com/gpu", {"nvidia.com/gpu.sharing-strategy": "time-slicing"})
              for i in range(17)]
        mps = [mig_pod(f"mps-{i}", "nvidia.com/gpu.shared") for i in range(9)]
        c.kubectl_apply(*ts, *mps, mig_pod("whole", "nvidia.com/gpu"))

        def placed():
            return placement(c)

        def settled():
            on, waiting = placed()
            return (on, waiting) if len(on.get("ts-node", [])) == 16 and len(on.get("mps-node", [])) == 8 \
                and len(waiting) == 2 and all(waiting.values()) and "whole" not in waiting else None
        try:
            on, waiting = wait_for("16 + 8 replicas bound, 2 waiting with a reason", settled, 20)
        except AssertionError:
            raise AssertionError(f"placed: {placed()}")
        assert all(n.startswith("ts-") for n in on["ts-node"]), on
        assert all(n.startswith("mps-") for n in on["mps-node"]), on
        whole_on = [n for n, ps in on.items() if "whole" in ps]
        assert whole_on and whole_on[0].startswith("kwok-node-"), on
        print(f"    bound: 16 on ts-node, 8 on mps-node, 'whole' on {whole_on[0]}; waiting: {waiting}")
        check_allocatable(c)
        # a restart adopts the replicas: still no more bound than the nodes have
        c.stop_gantryd()
        c.start_gantryd()
        time.sleep(3)
        on, waiting = placed()
        assert len(on["ts-node"]) == 16 and len(on["mps-node"]) == 8 and len(waiting) == 2, (on, waiting)
        check_allocatable(c)
        # one ends: the time-sliced pod waiting takes its replica
        c.kubectl("delete", "pod", on["ts-node"][0], "--grace-period=0", "--force")
        wait_for("the waiting time-sliced pod bound", lambda: len(placed()[0].get("ts-node", [])) == 16
                 and all(not n.startswith("ts-") for n in placed()[1]), 15)
        check_allocatable(c)
    finally:
        c.clean()
        for n in ("ts-node", "mps-node"):
            c.kubectl("delete", "node", n, check=False)


def case_mig_and_shared_gpus_at_48_nodes(c):
    """MIG devices and shared GPUs at cluster size: 16 nodes of each kind (MIG mixed
    strategy with 14 1g.10gb devices, time-slicing with 16 replicas, MPS with 8), 10% more
    pods than they hold, all at once: every node full and none past its allocatable, the
    rest waiting with a reason, the same after a restart, and a freed device taken again."""
    kinds = [("s48mig", "NVIDIA-A100-SXM4-80GB", "nvidia.com/mig-1g.10gb", 14,
              {"nvidia.com/mig.strategy": "mixed", "nvidia.com/gpu.count": "2"}, {}),
             ("s48ts", "NVIDIA-A100-SXM4-40GB-SHARED", "nvidia.com/gpu", 16,
              {"nvidia.com/gpu.replicas": "4", "nvidia.com/gpu.sharing-strategy": "time-slicing",
               "nvidia.com/gpu.count": "4"}, {"nvidia.com/gpu.sharing-strategy": "time-slicing"}),
             ("s48mps", "NVIDIA-A100-SXM4-40GB", "nvidia.com/gpu.shared", 8,
              {"nvidia.com/gpu.replicas": "2", "nvidia.com/gpu.sharing-strategy": "mps",
               "nvidia.com/gpu.count": "4"}, {})]
    per_kind = 16
    names = []
    nodes = []
    for prefix, product, resource, count, labels, _ in kinds:
        for i in range(per_kind):
            name = f"{prefix}-{i:02}"
            names.append(name)
            res = {"cpu": "224", "memory": "2063731376Ki", "pods": "110", resource: str(count)}
            nodes.append({"apiVersion": "v1", "kind": "Node",
                          "metadata": {"name": name, "annotations": {"kwok.x-k8s.io/node": "fake"},
                                       "labels": {"type": "kwok-mig", "kubernetes.io/hostname": name,
                                                  "nvidia.com/gpu.product": product, **labels}},
                          "status": {"capacity": res, "allocatable": res}})
    t0 = time.time()
    c.kubectl_apply(*nodes)

    def ready():
        status, listed = c.api.request("GET", "/api/v1/nodes")
        up = {n["metadata"]["name"] for n in (listed.get("items") or []) if status == 200 and any(
            x.get("type") == "Ready" and x.get("status") == "True"
            for x in (n.get("status") or {}).get("conditions") or [])}
        return all(n in up for n in names)
    try:
        wait_for("48 nodes Ready", ready, 60)
        pods = []
        for prefix, _product, resource, count, _labels, selector in kinds:
            for i in range(per_kind * count * 11 // 10):
                pods.append(mig_pod(f"{prefix}-p{i:03}", resource, selector or None))
        c.kubectl_apply(*pods)
        want = {prefix: count for prefix, _p, _r, count, _l, _s in kinds}

        def placed():
            return placement(c)

        def settled():
            on, waiting = placed()
            full = all(len(on.get(f"{prefix}-{i:02}", [])) == count
                       for prefix, count in want.items() for i in range(per_kind))
            extra = sum(per_kind * count * 11 // 10 - per_kind * count for count in want.values())
            return (on, waiting) if full and len(waiting) == extra and all(waiting.values()) else None
        try:
            on, waiting = wait_for(f"{len(pods)} pods: every node full, the rest waiting", settled, 120)
        except AssertionError:
            on, waiting = placed()
            raise AssertionError(f"bound {sum(len(v) for v in on.values())} of {len(pods)}; "
                                 f"{len(waiting)} waiting, e.g. {list(waiting.items())[:3]}")
        for node, ps in on.items():
            prefix = node.rsplit("-", 1)[0]
            assert all(n.startswith(prefix + "-p") for n in ps), (node, ps[:3])
        print(f"    {len(pods)} pods on 48 nodes: {sum(len(v) for v in on.values())} bound, "
              f"{len(waiting)} waiting ({time.time() - t0:.1f} s from the nodes' creation)")
        check_allocatable(c)
        c.stop_gantryd()
        c.start_gantryd()
        time.sleep(3)
        on, waiting = placed()
        assert sum(len(v) for v in on.values()) == sum(per_kind * n for n in want.values()), \
            "a restart changed what is bound"
        check_allocatable(c)
        victim = on["s48mig-07"][0]
        c.kubectl("delete", "pod", victim, "--grace-period=0", "--force")
        wait_for("a waiting 1g.10gb pod takes the freed device",
                 lambda: len(placed()[0].get("s48mig-07", [])) == 14, 20)
        check_allocatable(c)
    finally:
        c.clean()
        c.kubectl("delete", "node", *names, "--wait=false", check=False)


def case_budget_spent_is_said_and_holds_new_work(c):
    """A queue's budget in this mode: the pods of namespace `budgeted` (queue team-c, 3.6
    GPU-seconds a week, new work waits once spent) spend it; gantryd says so once in its log
    and once as a Kubernetes Event on the namespace (`kubectl get events -n budgeted`),
    /metrics shows budget and spending, and a new pod waits saying why."""
    c.kubectl_apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "budgeted"}})
    try:
        first = pod("spend", 8, complete_after="3s")
        first["metadata"]["namespace"] = "budgeted"
        c.kubectl_apply(first)

        def spent():
            with open(c.proc.log_path) as f:
                return "kubernetes: queue budget spent" in f.read()
        wait_for("the budget said spent", spent, 30)
        with open(c.proc.log_path) as f:
            lines = [l for l in f if "queue budget spent" in l]
        assert len(lines) == 1 and "team-c" in lines[0], lines
        metrics = urllib.request.urlopen(f"http://127.0.0.1:{c.port()}/metrics", timeout=5).read().decode()
        assert 'gantry_queue_budget_gpu_seconds{queue="team-c",period="week"} 3.6' in metrics, \
            [l for l in metrics.splitlines() if "budget" in l]
        used = [l for l in metrics.splitlines()
                if l.startswith('gantry_queue_budget_used_gpu_seconds{queue="team-c"')]
        assert used and float(used[0].split()[-1]) >= 3.6, used
        late = pod("late", 1)
        late["metadata"]["namespace"] = "budgeted"
        c.kubectl_apply(late)

        def waits():
            status, p = c.api.request("GET", "/api/v1/namespaces/budgeted/pods/late")
            return status == 200 and not (p.get("spec") or {}).get("nodeName") and \
                "budget" in (scheduled_message(p) or "")
        wait_for("the late pod waiting on the budget", waits, 20)

        def budget_events():
            status, evs = c.api.request("GET", "/api/v1/namespaces/budgeted/events")
            return [e for e in (evs.get("items") or []) if e.get("reason") == "BudgetSpent"] \
                if status == 200 else []
        wait_for("a BudgetSpent event", budget_events, 10)
        time.sleep(1)  # a second one would be posted by now
        evs = budget_events()
        assert len(evs) == 1, evs
        ev = evs[0]
        assert ev["type"] == "Warning" and ev["involvedObject"]["kind"] == "Namespace" and \
            ev["involvedObject"]["name"] == "budgeted", ev
        assert "queue team-c spent its budget" in ev["message"] and "waits" in ev["message"], ev
        used = re.search(r"\(([0-9.e+-]+) used\)", ev["message"])
        assert used and len(used.group(1).lstrip("0.").replace(".", "").split("e")[0]) <= 3, ev["message"]
        print(f"    {lines[0].strip()[:160]}")
        print(f"    event: {ev['reason']}: {ev['message']}")
    finally:
        c.kubectl("delete", "namespace", "budgeted", "--wait=false", check=False)


DRA_DRIVER = "gpu.nvidia.com"


def dra_classes(c):
    """The DeviceClasses NVIDIA's DRA driver installs: whole GPUs and MIG devices."""
    for name, typ in (("gpu.nvidia.com", "gpu"), ("mig.nvidia.com", "mig")):
        c.kubectl_apply({"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": name},
                         "spec": {"selectors": [{"cel": {"expression":
                             f"device.driver == '{DRA_DRIVER}' && device.attributes['{DRA_DRIVER}'].type == '{typ}'"}}]}})


def dra_node(c, name, gpus, product, memory, domains=1, mig_profiles=None):
    """A kwok node whose GPUs come through DRA: a ResourceSlice as NVIDIA's driver publishes
    one (devices gpu-<i> with type, index, uuid, productName, memory), plus the NVLink domain
    Gantry reads (gpu.nvidia.com/nvlinkDomain) and, with mig_profiles ({profile: (memory
    slices, [starts])}), every MIG placement as a partitionable device consuming its GPU's
    memory-slice-<k> counters."""
    kwok_node(c, name, product.replace(" ", "-"), {}, {})
    devices, counter_sets = [], []
    per = gpus // domains
    for i in range(gpus):
        dev = {"name": f"gpu-{i}",
               "attributes": {"type": {"string": "gpu"}, "index": {"int": i},
                              "uuid": {"string": f"GPU-{name}-{i}"}, "productName": {"string": product},
                              "nvlinkDomain": {"int": i // per}},
               "capacity": {"memory": {"value": memory}}}
        if mig_profiles:
            counter_sets.append({"name": f"gpu-{i}-counters",
                                 "counters": {f"memory-slice-{k}": {"value": "1"} for k in range(8)}})
            dev["consumesCounters"] = [{"counterSet": f"gpu-{i}-counters",
                                        "counters": {f"memory-slice-{k}": {"value": "1"} for k in range(8)}}]
            for profile, (slices, starts) in mig_profiles.items():
                for start in starts:
                    devices.append({
                        "name": f"gpu-{i}-mig-{profile.replace('.', '-')}-{start}",
                        "attributes": {"type": {"string": "mig"}, "profile": {"string": profile},
                                       "parentIndex": {"int": i}, "productName": {"string": product}},
                        "consumesCounters": [{"counterSet": f"gpu-{i}-counters",
                                              "counters": {f"memory-slice-{k}": {"value": "1"}
                                                           for k in range(start, start + slices)}}]})
        devices.append(dev)
    # the shared counters are a slice of their own in the same pool
    slices = [("gpus", {"devices": devices})] + ([("counters", {"sharedCounters": counter_sets})] if counter_sets else [])
    for suffix, body in slices:
        spec = {"driver": DRA_DRIVER, "nodeName": name,
                "pool": {"name": name, "generation": 1, "resourceSliceCount": len(slices)}, **body}
        c.kubectl_apply({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
                         "metadata": {"name": f"{name}-{suffix}"}, "spec": spec})


def claim_template(name, count, device_class="gpu.nvidia.com", selectors=(), constraint=None):
    req = {"name": "gpus", "exactly": {"deviceClassName": device_class, "count": count}}
    if selectors:
        req["exactly"]["selectors"] = [{"cel": {"expression": e}} for e in selectors]
    devices = {"requests": [req]}
    if constraint:
        devices["constraints"] = [{"matchAttribute": constraint}]
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
            "metadata": {"name": name, "namespace": "default"}, "spec": {"spec": {"devices": devices}}}


def claim_pod(name, template):
    p = pod(name, 0)
    p["spec"]["containers"][0]["resources"] = {"claims": [{"name": "gpus"}]}
    p["spec"]["resourceClaims"] = [{"name": "gpus", "resourceClaimTemplateName": template}]
    return p


def claims_of(c):
    """pod name -> the devices its claim was allocated (node pool/device)."""
    out = {}
    status, doc = c.api.request("GET", "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims")
    assert status == 200, doc
    for cl in doc.get("items") or []:
        alloc = (cl.get("status") or {}).get("allocation")
        owners = [r["name"] for r in (cl.get("status") or {}).get("reservedFor") or []]
        if alloc and owners:
            out[owners[0]] = sorted(f"{r['pool']}/{r['device']}" for r in alloc["devices"]["results"])
    return out


def case_dra_claims(c):
    """Resource claims (DRA): Gantry writes the allocation device by device; a claim that
    asks for one NVLink domain gets one; MIG devices at the core's placements; selectors
    outside the CEL subset, or that no node passes, get a message; a restart adopts."""
    dra_classes(c)
    dra_node(c, "dra-h100", 8, "NVIDIA H100 80GB HBM3", "80Gi", domains=2)
    dra_node(c, "dra-a100", 1, "NVIDIA A100-SXM4-80GB", "80Gi",
             mig_profiles={"1g.10gb": (1, list(range(7))), "3g.40gb": (4, [0, 4])})
    c.kubectl_apply(
        claim_template("two", 2),
        claim_template("four-one-domain", 4, constraint=f"{DRA_DRIVER}/nvlinkDomain"),
        claim_template("a100-pair", 2, selectors=[f"device.attributes['{DRA_DRIVER}'].productName == 'NVIDIA A100-SXM4-40GB'"]),
        claim_template("either", 1, selectors=[f"device.attributes['{DRA_DRIVER}'].productName.startsWith('NVIDIA')"]),
        claim_template("big-memory", 1, selectors=[
            f"device.capacity['{DRA_DRIVER}'].memory.compareTo(quantity('64Gi')) >= 0 && "
            f"device.attributes['{DRA_DRIVER}'].productName in ['NVIDIA H100 80GB HBM3', 'NVIDIA H200']"]),
        claim_template("mig-3g", 1, "mig.nvidia.com", [f"device.attributes['{DRA_DRIVER}'].profile == '3g.40gb'"]),
        claim_template("mig-1g", 1, "mig.nvidia.com", [f"device.attributes['{DRA_DRIVER}'].profile == '1g.10gb'"]))
    try:
        domain = lambda dev: int(dev.split("gpu-")[1]) // 4  # noqa: E731 - gpu-<i>, 4 per domain
        c.kubectl_apply(claim_pod("pair", "two"))
        wait_for("pair's claim allocated", lambda: "pair" in claims_of(c) and bound(c.pods("test=yes")), 20)
        pair = claims_of(c)["pair"]
        assert len(pair) == 2 and all(d.startswith("dra-h100/") for d in pair), pair
        assert len({domain(d) for d in pair}) == 1, f"a pair split over NVLink domains: {pair}"
        c.kubectl_apply(claim_pod("quad", "four-one-domain"), claim_pod("nowhere", "a100-pair"),
                        claim_pod("either", "either"), claim_pod("big", "big-memory"),
                        *[claim_pod(f"mig3-{i}", "mig-3g") for i in range(2)])
        try:
            wait_for("quad, big and both 3g.40gb claims allocated",
                     lambda: {"quad", "big", "mig3-0", "mig3-1"} <= set(claims_of(c)), 20)
        except AssertionError:
            msgs = {p["metadata"]["name"]: scheduled_message(p) for p in c.pods("test=yes")}
            raise AssertionError(f"allocated: {claims_of(c)}; waiting: {msgs}")
        got = claims_of(c)
        assert len(got["quad"]) == 4 and len({domain(d) for d in got["quad"]}) == 1, got["quad"]
        assert not set(got["quad"]) & set(pair), f"devices allocated twice: {got}"
        assert not set(got["big"]) & (set(pair) | set(got["quad"])), got
        migs = sorted(got["mig3-0"] + got["mig3-1"])
        assert migs == ["dra-a100/gpu-0-mig-3g-40gb-0", "dra-a100/gpu-0-mig-3g-40gb-4"], migs
        # the A100's memory slices are all taken: a 1g.10gb waits with the core's reason
        c.kubectl_apply(claim_pod("mig1", "mig-1g"))

        # (a pod's first message may be that its claim is not made yet: wait for the last)
        want = {"nowhere": "no node's devices pass its resource claims' selectors",
                "either": "expected ==, !=, <, <=, >, >= or in, got '.'", "mig1": "gantry: "}

        def said():
            msgs = {p["metadata"]["name"]: scheduled_message(p) for p in c.pods("test=yes")}
            return msgs if all(w in msgs.get(n, "") for n, w in want.items()) else None
        try:
            wait_for("messages on the pods that wait", said, 20)
        except AssertionError:
            raise AssertionError(f"messages: {({p['metadata']['name']: scheduled_message(p) for p in c.pods('test=yes')})}")
        check_allocatable(c)
        # a restart reads the allocations back: nothing allocated twice afterwards
        c.stop_gantryd()
        c.start_gantryd()
        c.kubectl("delete", "pod", "pair", "--grace-period=0", "--force")
        # 3 H100 GPUs free now (4 quad's, 1 big's): one pair fits, not two
        c.kubectl_apply(claim_pod("pair-2", "two"), claim_pod("pair-3", "two"))
        try:
            wait_for("pair-2 or pair-3 allocated", lambda: {"pair-2", "pair-3"} & set(claims_of(c)), 30)
        except AssertionError:
            msgs = {p["metadata"]["name"]: scheduled_message(p) for p in c.pods("test=yes")}
            raise AssertionError(f"allocated: {claims_of(c)}; waiting: {msgs}")
        time.sleep(2)
        got = claims_of(c)
        assert len({"pair-2", "pair-3"} & set(got)) == 1, got
        held = [d for n, devs in got.items() for d in devs]
        assert len(held) == len(set(held)), f"a device allocated twice after a restart: {got}"
        assert "mig1" not in got, f"1g.10gb placed beside two 3g.40gb on one A100: {got}"
        assert c.proc.poll() is None, "gantryd died"
    finally:
        c.clean()
        c.kubectl("delete", "resourceclaimtemplates", "--all", check=False)
        c.kubectl("delete", "resourceslices", "dra-h100-gpus", "dra-a100-gpus", "dra-a100-counters", check=False)
        for n in ("dra-h100", "dra-a100"):
            c.kubectl("delete", "node", n, check=False)


def shared_claim(name, count):
    """A ResourceClaim of its own (not from a template), for pods to name and share."""
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"devices": {"requests": [{"name": "gpus", "exactly": {
                "deviceClassName": "gpu.nvidia.com", "count": count}}]}}}


def shared_claim_pod(name, claim, group_name=None):
    p = pod(name, 0, group=group_name)
    p["spec"]["containers"][0]["resources"] = {"claims": [{"name": "gpus"}]}
    p["spec"]["resourceClaims"] = [{"name": "gpus", "resourceClaimName": claim}]
    return p


def claim_state(c, name):
    """(devices pool/device, reservedFor pod names) of ResourceClaim `name`."""
    status, doc = c.api.request("GET", f"/apis/resource.k8s.io/v1/namespaces/default/resourceclaims/{name}")
    assert status == 200, doc
    st = doc.get("status") or {}
    results = (((st.get("allocation") or {}).get("devices")) or {}).get("results") or []
    return sorted(f"{r['pool']}/{r['device']}" for r in results), [r["name"] for r in st.get("reservedFor") or []]


def case_dra_shared_claim(c):
    """A ResourceClaim that several lone pods name (NVIDIA's example of two pods sharing a
    GPU): allocated once, for the first; the others bound to its node and added to its
    reservedFor; its device held while any pod holds the claim (the first one gone, a
    restart), free once the last goes; pods of a PodGroup that share one get a message."""
    dra_classes(c)
    dra_node(c, "dra-share", 4, "NVIDIA H100 80GB HBM3", "80Gi")
    dra_node(c, "dra-other", 4, "NVIDIA H100 80GB HBM3", "80Gi")
    c.kubectl_apply(shared_claim("one-gpu", 1), shared_claim("gang-gpu", 1), claim_template("one", 1),
                    claim_template("three", 3), claim_template("four", 4))

    def msgs():
        return {p["metadata"]["name"]: scheduled_message(p) for p in c.pods("test=yes")}

    def node_of(name):
        return {p["metadata"]["name"]: (p.get("spec") or {}).get("nodeName") for p in c.pods("test=yes")}.get(name)

    def no_device_twice():
        held = [d for devs in claims_of(c).values() for d in devs]
        assert len(held) == len(set(held)), f"a device allocated twice: {claims_of(c)}"

    try:
        c.kubectl_apply(*[shared_claim_pod(f"share-{i}", "one-gpu") for i in range(3)])
        try:
            wait_for("the three pods sharing one-gpu bound", lambda: len(bound(c.pods("test=yes"))) == 3, 20)
        except AssertionError:
            raise AssertionError(f"claim: {claim_state(c, 'one-gpu')}; waiting: {msgs()}")
        devs, reserved = claim_state(c, "one-gpu")
        assert len(devs) == 1 and sorted(reserved) == ["share-0", "share-1", "share-2"], (devs, reserved)
        home = devs[0].split("/")[0]
        assert {node_of(f"share-{i}") for i in range(3)} == {home}, [node_of(f"share-{i}") for i in range(3)]
        other = "dra-other" if home == "dra-share" else "dra-share"
        # A restart reads the three back: the first holds the device, the others none.
        c.stop_gantryd()
        c.start_gantryd()
        # Its node has 3 GPUs left, the other 4: a 3-GPU pod fits there, one 4-GPU pod on
        # the other node, a second waits (a device counted once, not once per pod).
        c.kubectl_apply(claim_pod("three", "three"), claim_pod("quad", "four"))
        wait_for("three and quad bound", lambda: node_of("three") and node_of("quad"), 20)
        assert node_of("three") == home and node_of("quad") == other, (node_of("three"), node_of("quad"))
        c.kubectl_apply(claim_pod("quad-2", "four"))
        wait_for("quad-2 waiting with the core's reason", lambda: "gantry: " in msgs().get("quad-2", ""), 20)
        no_device_twice()
        check_allocatable(c)
        # The pod the claim was allocated for goes: the claim stays, for the other two, and
        # so does its device, through a restart.
        first = reserved[0]
        c.kubectl("delete", "pod", first, "--grace-period=0", "--force")
        wait_for(f"{first} out of the claim's reservedFor", lambda: first not in claim_state(c, "one-gpu")[1], 20)
        assert claim_state(c, "one-gpu")[0] == devs, claim_state(c, "one-gpu")
        c.kubectl_apply(claim_pod("single", "one"))  # both nodes are full: it waits
        time.sleep(3)
        assert not node_of("single"), f"a GPU given twice once the claim's first pod went: {claims_of(c)}"
        c.kubectl("delete", "pod", "single", "--grace-period=0", "--force")
        c.stop_gantryd()
        c.start_gantryd()
        c.kubectl("delete", "pod", "three", "--grace-period=0", "--force")
        time.sleep(3)  # 3 GPUs free on its node, 1 still the claim's: quad-2 (4) must wait
        assert not node_of("quad-2"), f"quad-2 bound beside the shared claim's GPU: {claims_of(c)}"
        no_device_twice()
        # The last pods sharing it go: kube-controller-manager releases the claim, and its
        # GPU is free.
        for i in range(3):
            if f"share-{i}" != first:
                c.kubectl("delete", "pod", f"share-{i}", "--grace-period=0", "--force")
        try:
            wait_for("quad-2 bound once the claim is released", lambda: node_of("quad-2") == home, 30)
        except AssertionError:
            raise AssertionError(f"claim: {claim_state(c, 'one-gpu')}; waiting: {msgs()}")
        no_device_twice()
        # Pods of a gang that share a claim: a message, nothing bound.
        c.kubectl_apply(group("duo", 2), *[shared_claim_pod(f"duo-{i}", "gang-gpu", "duo") for i in range(2)])
        wait_for("the gang's message", lambda: "not the pods of a PodGroup" in msgs().get("duo-0", ""), 20)
        assert not node_of("duo-0") and not node_of("duo-1")
        check_allocatable(c)
        assert c.proc.poll() is None, "gantryd died"
    finally:
        c.clean()
        c.kubectl("delete", "resourceclaims", "one-gpu", "gang-gpu", check=False)
        c.kubectl("delete", "resourceclaimtemplates", "--all", check=False)
        c.kubectl("delete", "resourceslices", "dra-share-gpus", "dra-other-gpus", check=False)
        for n in ("dra-share", "dra-other"):
            c.kubectl("delete", "node", n, check=False)


def case_dra_claims_at_24_nodes(c):
    """Resource claims at cluster size: 24 DRA nodes of 8 H100s in 2 NVLink domains, 4-GPU
    and then 2-GPU claims that must each stay in one domain, 10% more than the GPUs: every
    GPU allocated once (26 quads, then 44 pairs fill the rest), each claim on its pod's node
    and in one domain, the other 9 pairs waiting with a reason; the same after a restart;
    freed devices taken again."""
    dra_classes(c)
    names = [f"d24-{i:02}" for i in range(24)]
    for n in names:
        dra_node(c, n, 8, "NVIDIA H100 80GB HBM3", "80Gi", domains=2)
    domain_attr = f"{DRA_DRIVER}/nvlinkDomain"
    c.kubectl_apply(claim_template("pair-domain", 2, constraint=domain_attr),
                    claim_template("quad-domain", 4, constraint=domain_attr))
    pairs, quads = 53, 26  # 212 GPUs asked of 192: 26 domains of quads, 44 pairs in the other 22
    pods = [claim_pod(f"q24-{i:02}", "quad-domain") for i in range(quads)] + \
        [claim_pod(f"p24-{i:02}", "pair-domain") for i in range(pairs)]
    try:
        t0 = time.time()
        c.kubectl_apply(*pods[:quads])
        time.sleep(1.5)  # the pairs come later (creation times are in seconds)
        c.kubectl_apply(*pods[quads:])

        def state():
            ps = c.pods("test=yes")
            on = {p["metadata"]["name"]: p["spec"]["nodeName"] for p in bound(ps)}
            waiting = {p["metadata"]["name"]: scheduled_message(p) for p in ps if not p["spec"].get("nodeName")}
            return on, waiting, claims_of(c)

        def check(on, got):
            held = [d for devs in got.values() for d in devs]
            assert len(held) == len(set(held)), "a device allocated twice"
            for pod_name, devs in got.items():
                nodes = {d.split("/")[0] for d in devs}
                assert nodes == {on.get(pod_name)}, (pod_name, devs, on.get(pod_name))
                assert len({int(d.split("gpu-")[1]) // 4 for d in devs}) == 1, f"split over domains: {pod_name} {devs}"
                assert len(devs) == (2 if pod_name.startswith("p24") else 4), (pod_name, devs)
            return len(held)

        def settled():
            on, waiting, got = state()
            return (on, waiting, got) if sum(len(v) for v in got.values()) == 192 and len(waiting) == 9 \
                and all(waiting.values()) and set(got) == set(on) else None
        try:
            on, waiting, got = wait_for("192 GPUs allocated by claims, 9 claims waiting", settled, 120)
        except AssertionError:
            on, waiting, got = state()
            raise AssertionError(f"{sum(len(v) for v in got.values())} GPUs allocated to {len(got)} claims, "
                                 f"{len(on)} pods bound, {len(waiting)} waiting, e.g. {list(waiting.items())[:3]}")
        assert check(on, got) == 192
        assert all(n.startswith("p24") for n in waiting), waiting
        print(f"    {len(pods)} claim pods on 24 DRA nodes: {len(on)} bound, {len(waiting)} waiting "
              f"({time.time() - t0:.1f} s)")
        check_allocatable(c)
        c.stop_gantryd()
        c.start_gantryd()
        time.sleep(3)
        on, waiting, got = state()
        assert check(on, got) == 192 and len(waiting) == 9, "a restart changed what is allocated"
        # three pairs go: three waiting pairs take their devices
        gone = sorted(n for n in on if n.startswith("p24"))[:3]
        c.kubectl("delete", "pod", *gone, "--grace-period=0", "--force")

        def refilled():
            on2, waiting2, got2 = state()
            return (on2, got2) if len(waiting2) == 6 and sum(len(v) for v in got2.values()) == 192 \
                and set(got2) == set(on2) else None
        on, got = wait_for("three waiting pairs take the freed devices", refilled, 30)
        assert check(on, got) == 192
        check_allocatable(c)
        assert c.proc.poll() is None, "gantryd died"
    finally:
        c.clean()
        c.kubectl("delete", "resourceclaimtemplates", "--all", check=False)
        c.kubectl("delete", "resourceslices", *[f"{n}-gpus" for n in names], check=False)
        c.kubectl("delete", "node", *names, "--wait=false", check=False)


def case_gantry_cli_reads_jobs_and_queues(c):
    """gantry ls, show and queues read this mode's jobs with a token of gantryd's store;
    what changes something is kubectl's, and the CLI says so."""
    c.kubectl_apply(group("cli", 2), *[pod(f"cli-{i}", 8, group="cli") for i in range(2)],
                    pod("huge", 16))
    wait_for("the gang bound", lambda: len(bound(c.pods("scheduling.x-k8s.io/pod-group=cli"))) == 2, 15)
    wait_for("the huge pod's reason", lambda: any(scheduled_message(p) for p in c.pods() if p["metadata"]["name"] == "huge"), 15)
    rc, out = c.gantry("ls")
    assert rc == 0, out
    rows = {line.split()[0]: line for line in out.splitlines()[1:] if line.strip()}
    assert "running" in rows.get("default/cli", ""), out
    assert "team-a" in rows["default/cli"] and "kwok-node-" in rows["default/cli"], out
    assert "pending" in rows.get("default/huge", "") and "can never run" in rows["default/huge"], out
    assert "best-effort" not in rows["default/huge"] and "1 x 16 GPU" in rows["default/huge"], out
    rc, out = c.gantry("show", "default/cli")
    assert rc == 0 and "cli-0" in out and "cli-1" in out, out
    rc, out = c.gantry("queues")
    assert rc == 0, out
    line = next((x for x in out.splitlines() if x.startswith("team-a")), "")
    assert "16" in line, f"team-a holds 16 GPUs: {out}"
    rc, out = c.gantry("nodes")
    assert rc == 0, out
    kwok = [x for x in out.splitlines()[1:] if x.startswith("kwok-node-")]
    assert len(kwok) == 4 and all(" up " in x and "H100-80GB" in x for x in kwok), out
    rc, out = c.gantry("ls", token="gty_" + "0" * 64)
    assert rc != 0 and "no such token" in out, out
    rc, out = c.gantry("cancel", "default/cli")
    assert rc != 0 and "kubectl delete" in out, out
    # The web console's sign-in: the cookie holds a session's secret from the store, never
    # the token, and is worth nothing once signed out.
    base = f"http://127.0.0.1:{c.port()}"

    def call(method, path, body=None, headers=None):
        req = urllib.request.Request(base + path, method=method, headers=headers or {},
                                     data=None if body is None else json.dumps(body).encode())
        try:
            with urllib.request.urlopen(req, timeout=10) as r:
                return r.status, r.headers, json.loads(r.read() or b"{}")
        except urllib.error.HTTPError as e:
            return e.code, e.headers, json.loads(e.read() or b"{}")

    status, headers, body = call("POST", "/v1/session", {"token": c.token})
    assert status == 200 and body.get("team") == "a", (status, body)
    cookie = headers["Set-Cookie"].split(";")[0]
    assert cookie.startswith("gantry_session=gss_") and c.token not in cookie, cookie
    status, _, body = call("GET", "/v1/jobs", headers={"Cookie": cookie})
    assert status == 200 and any(j["id"] == "default/cli" for j in body["jobs"]), (status, body)
    status, _, _ = call("DELETE", "/v1/session", headers={"Cookie": cookie, "X-CSRF-Token": "0" * 64})
    assert status == 403, "signing out by cookie needs the session's CSRF token"
    status, _, who = call("GET", "/v1/session", headers={"Cookie": cookie})
    assert status == 200, (status, who)
    status, _, _ = call("DELETE", "/v1/session", headers={"Cookie": cookie, "X-CSRF-Token": who["csrf"]})
    assert status == 200, status
    status, _, body = call("GET", "/v1/jobs", headers={"Cookie": cookie})
    assert status == 401 and "session ended" in body.get("error", ""), (status, body)


def team_a_usage(c, since):
    """team-a's GPU-hours since `since` by gantry usage (all of them the default namespace's
    H100s)."""
    rc, out = c.gantry("usage", "--since", str(since), "--json")
    assert rc == 0, out
    rows = [r for r in json.loads(out)["usage"] if r["queue"] == "team-a"]
    assert all(r["user"] == "default" and r["model"] == "H100-80GB" for r in rows), rows
    return sum(r["gpu_hours"] for r in rows)


def case_usage_goes_on_while_a_pods_node_is_left_out(c):
    """A bound pod whose node leaves the core's node list for a while (a label it cannot
    read) and comes back keeps one usage row from its binding on: a second row for the
    same pod replaced the first, and the time before it was lost from usage and from fair
    share after the next restart."""
    t0 = int(time.time()) + 1
    time.sleep(max(0.0, t0 - time.time()) + 0.1)
    c.kubectl_apply(pod("stay", 8))
    wait_for("the pod bound", lambda: len(bound(c.pods("test=yes"))) == 1, 15)
    node = bound(c.pods("test=yes"))[0]["spec"]["nodeName"]
    time.sleep(4)
    def log_says(text):
        with open(c.proc.log_path) as f:
            return f.read().count(text)
    rereads = log_says("nodes and running jobs re-read")
    c.kubectl("label", "node", node, "nvidia.com/gpu.replicas=many")
    try:
        wait_for("the node left out", lambda: log_says(f"{node}: label nvidia.com/gpu.replicas") > 0, 15)
        time.sleep(1)
    finally:
        c.kubectl("label", "node", node, "nvidia.com/gpu.replicas-")
    wait_for("the node back", lambda: log_says("nodes and running jobs re-read") >= rereads + 2, 15)
    wait_for("the pod running in gantry's list",
             lambda: "running" in next((l for l in c.gantry("ls")[1].splitlines() if "default/stay" in l), ""), 15)
    time.sleep(1)
    held = team_a_usage(c, t0)
    assert held >= 8 * 5 / 3600, f"{held * 3600 / 8:.1f} s of the pod's 8 GPUs counted, at least 5 s ran"
    assert held <= 8 * (time.time() - t0) / 3600, held
    assert [p["spec"]["nodeName"] for p in bound(c.pods("test=yes"))] == [node]
    check_allocatable(c)


def case_usage_and_fair_share_outlive_a_restart(c):
    """gantry usage in this mode: gantryd keeps a run row per bound pod in its store (--db);
    after kill -9 and a restart the running pod's row goes on, counted once, fair share
    remembers what the queue used, and the row ends with its pod."""
    t0 = int(time.time()) + 1
    time.sleep(max(0.0, t0 - time.time()) + 0.1)

    def usage():
        return team_a_usage(c, t0)

    def fair_share():
        rc, out = c.gantry("queues", "--json")
        assert rc == 0, out
        return next(q["fair_share_gpus"] for q in json.loads(out) if q["name"] == "team-a")

    c.kubectl_apply(pod("acct", 8))
    wait_for("the pod bound", lambda: len(bound(c.pods("test=yes"))) == 1, 15)
    time.sleep(5)
    held, share = usage(), fair_share()
    most = lambda: 8 * (time.time() - t0) / 3600  # noqa: E731 - 8 GPUs since t0, at most
    assert 8 * 4.5 / 3600 < held <= most(), (held, most())
    assert share > 0, share
    killed_at = time.time()
    c.stop_gantryd(signal.SIGKILL)
    c.start_gantryd()
    wait_for("the restarted gantryd leading", lambda: c.gantry("queues")[0] == 0, 20)
    again = fair_share()
    # Remembered: it goes on growing from where it was (it restarted from zero before).
    assert again >= share, (share, again)
    after = usage()
    assert held < after <= most() * 1.01, f"the running pod counted once: {held} -> {after}, at most {most()}"
    # The console's cluster history is kept in the store too: read back after the restart.
    req = urllib.request.Request(f"http://127.0.0.1:{c.port()}/v1/cluster/history",
                                 headers={"Authorization": f"Bearer {c.token}"})
    with urllib.request.urlopen(req, timeout=10) as r:
        history = json.loads(r.read())
    assert history["interval_s"] == 60 and history["samples"], history
    assert history["samples"][0]["t"] < killed_at, "the sample taken before the kill, read back"
    assert history["samples"][0]["up_gpus"] == 32 and "team-a" in history["samples"][0]["queues"], history
    c.kubectl("delete", "pod", "acct", "--grace-period=0", "--wait=false")
    wait_for("the pod gone", lambda: not c.pods("test=yes"), 30)
    time.sleep(1.5)
    ended = usage()
    time.sleep(2)
    assert abs(usage() - ended) < 1e-9, "the row ended with its pod"


DEPLOY = os.path.join(ROOT, "deploy", "kubernetes")


def manifest(c, name):
    """The objects of deploy/kubernetes/NAME, as kubectl reads them."""
    text, objs, at = c.kubectl("create", "--dry-run=client", "-o", "json", "-f", os.path.join(DEPLOY, name)), [], 0
    decoder = json.JSONDecoder()
    while text[at:].strip():  # one JSON object per document, one after the other
        obj, end = decoder.raw_decode(text, at + len(text[at:]) - len(text[at:].lstrip()))
        objs.append(obj)
        at = end
    return objs


def service_account_token(c, account):
    return c.kubectl("create", "token", account, "-n", "gantry-system", "--duration=1h").strip()


def spawn_as(c, command, log_name, env=None, in_cluster=None):
    """gantryd with `command` (its argv), logging to logs/LOG_NAME. `in_cluster`: the
    service account's token, mounted where a pod has it (a mount namespace of its own with a
    tmpfs on /run, so nothing of the machine's /run is touched) with
    KUBERNETES_SERVICE_HOST/PORT set, as the kubelet does."""
    path = os.path.join(c.dir, "logs", log_name)
    if in_cluster is not None:
        sa = os.path.join(c.dir, "serviceaccount")
        os.makedirs(sa, exist_ok=True)
        shutil.copy(os.path.join(k8s_util.read_env(c.dir)["PKI"], "ca.crt"), os.path.join(sa, "ca.crt"))
        with open(os.path.join(sa, "token"), "w") as f:
            f.write(in_cluster)
        with open(os.path.join(sa, "namespace"), "w") as f:
            f.write("gantry-system")
        mount = ("mount -t tmpfs tmpfs /run && mkdir -p /run/secrets/kubernetes.io && "
                 f"cp -r {sa} /run/secrets/kubernetes.io/serviceaccount && exec \"$@\"")
        unshare = ["unshare", "--mount"] if os.geteuid() == 0 else ["unshare", "--user", "--map-root-user", "--mount"]
        command = [*unshare, "--", "sh", "-c", mount, "sh", *command]
        env = dict(env or os.environ, KUBERNETES_SERVICE_HOST="127.0.0.1",
                   KUBERNETES_SERVICE_PORT=k8s_util.read_env(c.dir)["API_PORT"])
    proc = subprocess.Popen(command, stdout=open(path, "w"), stderr=subprocess.STDOUT, env=env)
    proc.log_path = path
    return proc


def case_the_shipped_install_runs_in_cluster(c):
    """deploy/kubernetes as an operator applies it: the CRD, rbac.yaml's service account and
    ClusterRole, gantry-config.yaml's ConfigMap and gantry-scheduler.yaml (checked by the API
    server), and the Deployment's own command, run in-cluster with that service account's
    token (its config file read back from the ConfigMap; `--listen` on a free port added).
    Everything the scheduler does goes through under that role: a gang and its PodGroup's
    status, a wait message and its Event, a preemption through the Eviction API, the Lease;
    its log has no warning or refusal in it."""
    c.stop_gantryd()
    c.kubectl("apply", "-f", os.path.join(DEPLOY, "rbac.yaml"))
    c.kubectl("apply", "-f", os.path.join(DEPLOY, "gantry-config.yaml"))
    c.kubectl("apply", "--dry-run=server", "-f", os.path.join(DEPLOY, "gantry-scheduler.yaml"))
    objs = manifest(c, "gantry-scheduler.yaml")
    c.kubectl_apply(*[o for o in objs if o["kind"] == "PriorityClass"])
    deployment = next(o for o in objs if o["kind"] == "Deployment")
    pod_spec = deployment["spec"]["template"]["spec"]
    assert pod_spec["serviceAccountName"] == "gantry-scheduler", pod_spec
    command = pod_spec["containers"][0]["command"]
    mount = pod_spec["containers"][0]["volumeMounts"][0]["mountPath"]
    config = json.loads(c.kubectl("get", "configmap", "gantry-config", "-n", "gantry-system", "-o", "json"))
    path = os.path.join(c.dir, "shipped-cluster.yaml")
    with open(path, "w") as f:
        f.write(config["data"]["cluster.yaml"])
    assert f"{mount}/cluster.yaml" in command, command
    command = [c.gantryd_bin if a == "gantryd" else path if a == f"{mount}/cluster.yaml" else a for a in command]
    proc = spawn_as(c, [*command, "--listen", "127.0.0.1:0"], "gantryd-shipped.log",
                    in_cluster=service_account_token(c, "gantry-scheduler"))
    c.proc = proc  # the harness stops it; the next case starts its own
    try:
        c.kubectl_apply(group("rb", 2), *[pod(f"rb-{i}", 8, group="rb") for i in range(2)])
        wait_for("the gang bound", lambda: len(bound(c.pods("scheduling.x-k8s.io/pod-group=rb"))) == 2, 20)

        def group_running():
            _, obj = c.api.request("GET", "/apis/scheduling.x-k8s.io/v1alpha1/namespaces/default/podgroups/rb")
            return (obj.get("status") or {}).get("phase") == "Running"
        wait_for("PodGroup rb Running (podgroups/status)", group_running, 10)
        c.kubectl_apply(job("rbfill", 2, 8, priority="gantry-best-effort", grace=2))
        wait_for("2 best-effort pods bound", lambda: len(bound(c.pods("job-name=rbfill"))) == 2, 20)
        c.kubectl_apply(pod("rb-huge", 16))
        wait_for("rb-huge's wait message (pods/status)",
                 lambda: "can never run" in scheduled_message(next(p for p in c.pods("test=yes")
                                                                  if p["metadata"]["name"] == "rb-huge")), 10)
        wait_for("a FailedScheduling event for rb-huge (events)", lambda: "FailedScheduling" in c.kubectl(
            "get", "events", "--field-selector", "involvedObject.name=rb-huge", "-o", "json"), 10)
        c.kubectl_apply(pod("rb-vip", 8, priority="gantry-critical"))
        wait_for("the critical pod bound by preemption (pods/eviction)",
                 lambda: any(p["metadata"]["name"] == "rb-vip" for p in bound(c.pods("test=yes"))), 20)
        lease = json.loads(c.kubectl("get", "lease", "gantry-scheduler", "-n", "gantry-system", "-o", "json"))
        assert lease["spec"].get("holderIdentity"), lease
        check_allocatable(c)
        with open(proc.log_path) as f:
            log = f.read()
        assert 'credentials="in-cluster service account"' in log, log[:2000]
        bad = [line for line in log.splitlines() if re.search(r"Z (warn|error) |HTTP 403|[Ff]orbidden", line)]
        assert not bad, "warnings or refusals in the shipped install's log:\n" + "\n".join(bad)
    finally:
        c.stop_gantryd()
        c.kubectl("delete", "lease", "gantry-scheduler", "-n", "gantry-system", check=False)


def case_a_role_without_dra_or_podgroups_still_schedules(c):
    """A ClusterRole from before DRA and gangs (rbac.yaml less resource.k8s.io and
    scheduling.x-k8s.io), through a kubeconfig with the account's bearer token: gantryd says
    which kinds its role may not list, counts them as empty, and binds a lone pod as soon as
    the rest is listed."""
    c.stop_gantryd()
    role = next(o for o in manifest(c, "rbac.yaml") if o["kind"] == "ClusterRole")
    role["metadata"] = {"name": "gantry-narrow"}
    role["rules"] = [r for r in role["rules"]
                     if not set(r.get("apiGroups", [])) & {"resource.k8s.io", "scheduling.x-k8s.io"}]
    c.kubectl_apply(
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "gantry-system"}},
        {"apiVersion": "v1", "kind": "ServiceAccount",
         "metadata": {"name": "gantry-narrow", "namespace": "gantry-system"}},
        role,
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
         "metadata": {"name": "gantry-narrow"},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "gantry-narrow"},
         "subjects": [{"kind": "ServiceAccount", "name": "gantry-narrow", "namespace": "gantry-system"}]})
    env = k8s_util.read_env(c.dir)
    kubeconfig = os.path.join(c.dir, "narrow.kubeconfig")
    with open(kubeconfig, "w") as f:
        f.write(json.dumps({
            "apiVersion": "v1", "kind": "Config", "current-context": "narrow",
            "clusters": [{"name": "test", "cluster": {"server": env["API_SERVER"],
                                                      "certificate-authority": os.path.join(env["PKI"], "ca.crt")}}],
            "users": [{"name": "narrow", "user": {"token": service_account_token(c, "gantry-narrow")}}],
            "contexts": [{"name": "narrow", "context": {"cluster": "test", "user": "narrow"}}]}))
    proc = spawn_as(c, [c.gantryd_bin, "--config", os.path.join(c.dir, "gantry.yaml"), "--kubernetes", kubeconfig,
                        "--kubernetes-lease", "gantry-system/gantry-narrow", "--listen", "127.0.0.1:0"],
                    "gantryd-narrow.log")
    c.proc = proc
    try:
        t0 = time.time()
        c.kubectl_apply(pod("narrow", 8))
        wait_for("the lone pod bound", lambda: bound(c.pods("test=yes")), 15)
        print(f"    bound {time.time() - t0:.1f} s after gantryd started")

        def refused():
            with open(proc.log_path) as f:
                log = f.read()
            return all(re.search(r"not allowed to this scheduler \(RBAC\).*resource=" + kind, log)
                       for kind in ("podgroups", "resourceslices", "resourceclaims", "deviceclasses"))
        wait_for("each kind the role may not list named in the log", refused, 10)
        with open(proc.log_path) as f:
            log = f.read()
        assert not re.search(r"not allowed.*resource=(nodes|pods|poddisruptionbudgets)\b", log), log[-3000:]
    finally:
        c.stop_gantryd()
        c.kubectl("delete", "lease", "gantry-narrow", "-n", "gantry-system", check=False)


CASES = [
    case_gang_of_four_bound_together,
    case_wait_reason_in_describe,
    case_malformed_and_impossible_pods,
    case_critical_preempts_best_effort,
    case_node_change_during_a_grace_keeps_the_victims_gpus,
    case_disruption_budget_steers_preemption,
    case_deployment_scaled_by_preemption,
    case_pod_anti_affinity_spreads_replicas,
    case_pod_anti_affinity_by_namespace_selector,
    case_topology_spread_over_zones,
    case_topology_spread_label_keys_and_taints,
    case_topology_spread_on_a_gang,
    case_preferred_affinities_are_weighed,
    case_other_pods_terms_are_weighed,
    case_kill_and_restart,
    case_partly_bound_gang_is_evicted,
    case_two_replicas_elect_a_leader,
    case_cordoned_and_not_ready_nodes,
    case_spot_pool_by_label_takes_no_critical_pod,
    case_mig_devices,
    case_shared_gpus,
    case_mig_and_shared_gpus_at_48_nodes,
    case_dra_claims,
    case_dra_shared_claim,
    case_dra_claims_at_24_nodes,
    case_gantry_cli_reads_jobs_and_queues,
    case_budget_spent_is_said_and_holds_new_work,
    case_usage_and_fair_share_outlive_a_restart,
    case_usage_goes_on_while_a_pods_node_is_left_out,
    case_interleaved_gangs_side_by_side,
    case_gang_pod_ending_early_frees_its_node,
    case_elastic_gang_grows_and_shrinks,
    case_the_shipped_install_runs_in_cluster,
    case_a_role_without_dra_or_podgroups_still_schedules,
]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gantryd", default=os.path.join(ROOT, "build", "release", "src", "gantryd"))
    ap.add_argument("-k", default="", help="run the cases whose name contains this")
    ap.add_argument("--keep", action="store_true", help="keep the cluster directory")
    ap.add_argument("--jobs", type=int, default=1, help="run the cases on this many clusters at once")
    ap.add_argument("--shard", default="0/1", help="K/N: run the cases whose index is K modulo N")
    args = ap.parse_args()
    if args.jobs > 1:
        return run_shards(args)
    shard, shards = (int(x) for x in args.shard.split("/"))
    if not 0 <= shard < shards:
        ap.error(f"--shard {args.shard}: K must be at least 0 and below N")
    directory = tempfile.mkdtemp(prefix="gantry-k8s-sched.")
    c = Cluster(directory, os.path.abspath(args.gantryd))
    passed = failed = 0
    try:
        c.start()
        global SNAPSHOT
        SNAPSHOT = c
        for i, case in enumerate(CASES):
            if args.k not in case.__name__ or i % shards != shard:
                continue
            if c.proc is not None and c.proc.poll() is not None:
                failed += 1
                print(f"FAIL: gantryd exited with status {c.proc.returncode} (before {case.__name__})")
                c.proc = None
            if c.proc is None:
                c.start_gantryd()
            t0 = time.time()
            try:
                case(c)
                passed += 1
                print(f"ok: {case.__name__} ({time.time() - t0:.1f} s)", flush=True)
            except Exception as e:  # noqa: BLE001 - a failed case is reported, the others run
                failed += 1
                print(f"FAIL: {case.__name__}: {e}", flush=True)
                c.log_tails()
            try:
                c.clean()
            except Exception as e:  # noqa: BLE001
                print(f"    (cleanup: {e})")
    finally:
        c.stop()
        if args.keep or failed:
            print(f"cluster directory kept: {directory} (logs in {directory}/logs)")
        else:
            shutil.rmtree(directory, ignore_errors=True)
    print(f"{passed} passed, {failed} failed")
    return 0 if failed == 0 and passed > 0 else 1


def run_shards(args):
    """Runs --jobs shards of the cases as processes of this script, side by side."""
    procs = []
    for k in range(args.jobs):
        cmd = [sys.executable, os.path.abspath(__file__), "--gantryd", args.gantryd, "-k", args.k,
               "--shard", f"{k}/{args.jobs}"] + (["--keep"] if args.keep else [])
        out = tempfile.TemporaryFile(mode="w+")
        procs.append((subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT), out))
    passed = failed = 0
    for k, (proc, out) in enumerate(procs):
        rc = proc.wait()
        out.seek(0)
        text = out.read()
        print(f"== shard {k}/{args.jobs} (exit {rc})", flush=True)
        print(text, end="", flush=True)
        m = re.search(r"^(\d+) passed, (\d+) failed$", text, re.M)
        if m:
            passed += int(m.group(1))
            failed += int(m.group(2))
        if rc != 0 and not (m and int(m.group(2)) > 0):
            failed += 1  # it ended without its count: a crash, not a case
    print(f"{passed} passed, {failed} failed (in {args.jobs} shards)")
    return 0 if failed == 0 and passed > 0 else 1


if __name__ == "__main__":
    sys.exit(main())
