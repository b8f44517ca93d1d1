#!/usr/bin/env python3
"""Gantry vs kube-scheduler on a real (loopback) Kubernetes control plane (issue 45).

Per size (--nodes, default 16,64,256,1000): one fresh cluster from tests/k8s/cluster.sh
(etcd, kube-apiserver, kube-controller-manager, kwok), N kwok nodes of 8 GPUs, the
PodGroup CRD. Two phases on that cluster, kube-scheduler first, then Gantry, the namespace
emptied between them; both get the same burst: the Slurm peer's job mix
(../shared/peers/slurm/workload.py, gen_jobs(jobs_per_node * N, seed, 5, 20)), every job
created at the start by a few driver threads (own connections each), as fast as they can:

  1-node job   one pod, nvidia.com/gpu = its GPUs per node
  2-node gang  a PodGroup (minMember 2) and two pods of 8 GPUs labelled
               scheduling.x-k8s.io/pod-group=<job>

Each pod carries pod-complete.stage.kwok.x-k8s.io/delay: "<dur>s" (kwok makes it Succeed
dur seconds after it runs), restartPolicy Never, cpu 1 and memory 1Gi requests.

  kube-scheduler  default configuration (it knows nothing of PodGroups: a gang may be bound
                  in part), client limits raised to qps 5000 / burst 10000 by a
                  KubeSchedulerConfiguration passed with --config through cluster.sh's
                  GANTRY_K8S_SCHEDULER_ARGS (its /configz is read back to check them)
  Gantry          gantryd --kubernetes KUBECONFIG --kubernetes-lease none (no client limit)

A watch on the namespace's pods (a thread, one streaming GET) records, client-side, when
each pod is first seen with spec.nodeName and when it is seen Succeeded, Failed or deleted;
it also keeps each node's GPUs of bound, unfinished pods and fails the run if one ever
exceeds the node's 8. Measured per phase:

  bind rate         bound pods / (last bind - first create), the burst's pods
  first-wave rate   pods bound before the first pod finished / (last of those binds -
                    first create): how fast the empty cluster was filled
  gangs             a gang is partly bound from its first pod's bind to its second's (or to
                    the end); those partly bound > 10 s, and the longest
  GPUs allocated    sampled every 0.5 s: GPUs of bound, unfinished pods / all GPUs, the mean
  while pods wait   over samples where some pod is unbound
  makespan          first create to last pod finished (--timeout per phase, else "timed out")
  CPU seconds       kube-apiserver, etcd and the scheduler over the burst (/proc/PID/stat)
  idle probe        after the burst, --probes lone 1-GPU pods one after another on the idle
                    cluster: create (request sent) to seen bound, p50 and p99

cluster.sh check-allocatable runs once right after the burst was created and after each
phase. Prints a markdown table per size and the targets of issue 45, writes JSON to --out.
Exits 1 when something broke (a component died, a call or check failed, a GPU overcommitted);
a slow scheduler or a phase timing out is a result, not a failure.

    python3 bench/k8s_side_by_side.py --nodes 16,64 [--out k8s_side_by_side.json]
    python3 bench/k8s_side_by_side.py --tiny         # CI: 8 nodes, 16 short jobs, < 3 min
"""
import argparse, http.client, importlib.util, json, os, shutil, socket, ssl, statistics, subprocess, sys, tempfile
import threading, time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, 'tests', 'k8s'))
sys.path.insert(0, os.path.join(ROOT, 'bench'))
import k8s_util  # noqa: E402
from slurm_side_by_side import shared_dir  # noqa: E402  (../shared, as the Slurm side-by-side finds it)

CLUSTER = os.path.join(ROOT, 'tests', 'k8s', 'cluster.sh')
CRD = os.path.join(ROOT, 'deploy', 'kubernetes', 'podgroup-crd.yaml')
GPUS_PER_NODE = 8
NS = 'default'
GROUP_LABEL = 'scheduling.x-k8s.io/pod-group'
PARTIAL_LIMIT_S = 10.0

GANTRY_CONFIG = """\
cluster: k8s-bench
queues:
  - name: bench
kubernetes:
  scheduler_name: gantry
  namespaces: {default: bench}
  default_queue: bench
"""

SCHEDULER_CONFIG = """\
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection:
  kubeconfig: %s
  qps: 5000
  burst: 10000
leaderElection:
  leaderElect: false
"""


class Broken(Exception):
    """Something that makes the run invalid (not a slow scheduler)."""


def log(msg):
    print('k8s-side-by-side: ' + msg, file=sys.stderr, flush=True)


def load_workload():
    path = os.path.join(shared_dir(), 'peers', 'slurm', 'workload.py')
    if not os.path.isfile(path):
        raise SystemExit(f'k8s-side-by-side: {path} not found (set GANTRY_SHARED_DIR to the shared folder)')
    spec = importlib.util.spec_from_file_location('slurm_workload', path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def pct(xs, p):
    if not xs:
        return None
    xs = sorted(xs)
    return xs[min(len(xs) - 1, max(0, int(round(p / 100.0 * (len(xs) - 1)))))]


CLK_TCK = os.sysconf('SC_CLK_TCK')


def cpu_seconds(pid):
    """user + system CPU seconds of a process (None if it is gone)."""
    try:
        with open(f'/proc/{pid}/stat') as f:
            s = f.read()
    except OSError:
        return None
    rest = s[s.rindex(')') + 2:].split()
    return (int(rest[11]) + int(rest[12])) / CLK_TCK


def pid_of(cdir, name):
    try:
        with open(os.path.join(cdir, 'pids', name + '.pid')) as f:
            pid = int(f.read().strip())
    except (OSError, ValueError):
        return None
    return pid if os.path.isdir(f'/proc/{pid}') else None


def api_requests(api):
    """{(verb, resource, subresource, code): count} from the API server's apiserver_request_total."""
    status, obj = api.request('GET', '/metrics')
    out = {}
    if status != 200:
        return out
    for line in obj.get('raw', '').splitlines():
        if not line.startswith('apiserver_request_total{'):
            continue
        labels = dict(kv.split('=', 1) for kv in line[line.index('{') + 1:line.rindex('}')].split(','))
        key = tuple(labels.get(k, '""').strip('"') for k in ('verb', 'resource', 'subresource', 'code'))
        out[key] = out.get(key, 0) + float(line.rsplit(' ', 1)[1])
    return out


def pod_gpus(obj):
    n = 0
    for c in (obj.get('spec') or {}).get('containers') or []:
        r = c.get('resources') or {}
        v = (r.get('limits') or {}).get('nvidia.com/gpu') or (r.get('requests') or {}).get('nvidia.com/gpu')
        if v:
            n += int(v)
    return n


# --------------------------------------------------------------------------- the watch


class Watcher(threading.Thread):
    """Pods of the namespace as a watch shows them, with client-side times (monotonic)."""

    def __init__(self, cdir):
        super().__init__(daemon=True)
        env = k8s_util.read_env(cdir)
        self.port = int(env['API_PORT'])
        self.api = k8s_util.Api(cdir)
        self.lock = threading.Lock()
        self.cv = threading.Condition(self.lock)
        self.pods = {}        # name -> dict(gpus, group, node, bound, done, end)
        self.groups = {}      # group -> [pod names]
        self.node_gpus = {}   # node -> GPUs of bound, unfinished pods
        self.waiting = 0      # seen, unbound, unfinished
        self.running_gpus = 0
        self.last_bind = None
        self.events = 0
        self.relists = 0
        self.overcommits = []
        self.errors = []
        self.ready = threading.Event()
        self.stopping = False
        self.conn = None

    @staticmethod
    def _state(p):
        return 'done' if p['done'] is not None else ('run' if p['node'] else 'wait')

    def _apply(self, typ, obj, t):
        meta = obj.get('metadata') or {}
        name = meta.get('name')
        if not name:
            return
        p = self.pods.get(name)
        old = None
        if p is None:
            group = (meta.get('labels') or {}).get(GROUP_LABEL)
            p = dict(gpus=pod_gpus(obj), group=group, node=None, bound=None, done=None, end=None, seen=t)
            self.pods[name] = p
            if group:
                self.groups.setdefault(group, []).append(name)
        else:
            old = self._state(p)
        node = (obj.get('spec') or {}).get('nodeName')
        newly_bound = False
        if node and p['node'] is None:
            p['node'], p['bound'] = node, t
            self.last_bind = t
            newly_bound = True
        phase = (obj.get('status') or {}).get('phase')
        if p['done'] is None and (typ == 'DELETED' or phase in ('Succeeded', 'Failed')):
            p['done'], p['end'] = t, ('deleted' if typ == 'DELETED' else phase)
        new = self._state(p)
        if old != new:
            if old == 'wait':
                self.waiting -= 1
            elif old == 'run':
                self.running_gpus -= p['gpus']
                self.node_gpus[p['node']] -= p['gpus']
            if new == 'wait':
                self.waiting += 1
            elif new == 'run':
                self.running_gpus += p['gpus']
                g = self.node_gpus.get(p['node'], 0) + p['gpus']
                self.node_gpus[p['node']] = g
                if g > GPUS_PER_NODE:
                    self.overcommits.append(f'{p["node"]}: {g} GPUs of bound, unfinished pods after {name} was bound')
        if newly_bound:
            self.cv.notify_all()

    def _list(self):
        status, obj = self.api.request('GET', f'/api/v1/namespaces/{NS}/pods')
        if status != 200:
            raise Broken(f'list pods: HTTP {status}: {obj.get("message", obj)}')
        t = time.monotonic()
        names = set()
        with self.lock:
            for item in obj.get('items') or []:
                names.add(item['metadata']['name'])
                self._apply('ADDED', item, t)
            for name, p in self.pods.items():  # gone while no watch was open
                if name not in names and p['done'] is None:
                    self._apply('DELETED', {'metadata': {'name': name}}, t)
        return obj['metadata']['resourceVersion']

    def run(self):
        try:
            rv = self._list()
            while not self.stopping:
                conn = http.client.HTTPSConnection('127.0.0.1', self.port, context=self.api.ctx, timeout=None)
                self.conn = conn
                conn.request('GET', f'/api/v1/namespaces/{NS}/pods?watch=1&allowWatchBookmarks=true'
                             f'&timeoutSeconds=3600&resourceVersion={rv}', headers={'Accept': 'application/json'})
                resp = conn.getresponse()
                if resp.status != 200:
                    raise Broken(f'watch pods: HTTP {resp.status}: {resp.read()[:300]!r}')
                self.ready.set()
                gone = False
                while not self.stopping:
                    line = resp.readline()
                    if not line:
                        break
                    t = time.monotonic()
                    ev = json.loads(line)
                    typ, obj = ev.get('type'), ev.get('object') or {}
                    if typ == 'ERROR':
                        if obj.get('code') == 410:
                            gone = True
                            break
                        raise Broken(f'watch pods: {obj}')
                    rv = (obj.get('metadata') or {}).get('resourceVersion', rv)
                    if typ == 'BOOKMARK':
                        continue
                    with self.lock:
                        self.events += 1
                        self._apply(typ, obj, t)
                conn.close()
                if gone and not self.stopping:
                    self.relists += 1
                    rv = self._list()
        except Exception as e:  # noqa: BLE001 (reported by the phase)
            if not self.stopping:
                self.errors.append(f'{type(e).__name__}: {e}')
        finally:
            self.ready.set()

    def stop(self):
        self.stopping = True
        c = self.conn
        if c is not None and c.sock is not None:
            try:
                c.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self.join(timeout=10)

    def wait_bound(self, name, timeout):
        with self.cv:
            self.cv.wait_for(lambda: (self.pods.get(name) or {}).get('bound') is not None, timeout)
            return (self.pods.get(name) or {}).get('bound')

    def sample(self):
        """(waiting pods, GPUs of bound unfinished pods, of which GPUs held by partly bound gangs)."""
        with self.lock:
            partial = 0
            for members in self.groups.values():
                ps = [self.pods[m] for m in members]
                if len(ps) >= 2 and sum(1 for p in ps if p['node']) == 1:
                    partial += sum(p['gpus'] for p in ps if p['node'] and p['done'] is None)
            return self.waiting, self.running_gpus, partial


# --------------------------------------------------------------------------- the cluster


class Cluster:
    def __init__(self, cdir, nodes, gantryd):
        self.dir, self.nodes, self.gantryd_bin = cdir, nodes, gantryd
        self.gantryd_args = []
        self.gantry = None
        self.gantry_log = os.path.join(cdir, 'logs', 'gantryd.log')

    def sh(self, *args, env=None, check=True):
        r = subprocess.run([CLUSTER, *args], capture_output=True, text=True, env=env)
        if check and r.returncode != 0:
            raise Broken(f'cluster.sh {" ".join(args)} failed (rc {r.returncode}): {(r.stdout + r.stderr)[-1500:]}')
        return r

    def start(self):
        # kube-controller-manager's client limit (20 QPS by default) holds up its node
        # lifecycle controller: it takes the node.kubernetes.io/not-ready:NoSchedule taint
        # that new nodes are created with off ~5 nodes/s (57 s for 256 nodes), and
        # kube-scheduler, rightly, does not place pods on tainted nodes. Raised here, and
        # every taint awaited below, so both phases start on the same untainted nodes.
        kcm = (os.environ.get('GANTRY_K8S_KCM_ARGS', '') + ' --kube-api-qps=1000 --kube-api-burst=2000').strip()
        self.sh('start', self.dir, env=dict(os.environ, GANTRY_K8S_KCM_ARGS=kcm))
        env = k8s_util.read_env(self.dir)
        self.bin, self.kubeconfig = env['BIN'], env['KUBECONFIG']
        self.sched_port = int(env['SCHEDULER_PORT'])
        self.api = k8s_util.Api(self.dir)
        self.sh('nodes', self.dir, str(self.nodes), str(GPUS_PER_NODE))
        t0 = time.monotonic()

        def untainted():
            nodes = self.api.list_all('/api/v1/nodes')
            return len(nodes) == self.nodes and not any(
                t.get('effect') in ('NoSchedule', 'NoExecute') for n in nodes for t in n['spec'].get('taints') or [])
        wait_for('no node tainted NoSchedule or NoExecute', untainted, 60 + self.nodes / 4, interval=0.5)
        self.untaint_s = time.monotonic() - t0
        r = subprocess.run([os.path.join(self.bin, 'kubectl'), '--kubeconfig', self.kubeconfig, 'apply', '-f', CRD],
                           capture_output=True, text=True)
        if r.returncode != 0:
            raise Broken(f'kubectl apply {CRD}: {r.stderr.strip()}')
        wait_for('the PodGroup CRD served', lambda: self.api.request(
            'GET', '/apis/scheduling.x-k8s.io/v1alpha1/podgroups')[0] == 200, 30)
        # Warm-up: the first PodGroup created takes the API server 2 s (seen in the tiny
        # run), which would land in the first phase's burst. One of each, then deleted.
        for path, body, _ in job_objects(dict(i=0, nodes=2, gpn=8, dur=1), 'warmup', 'nobody')[:2]:
            status, obj = self.api.request('POST', path, body)
            if status != 201:
                raise Broken(f'warm-up create {body["metadata"]["name"]}: HTTP {status}: {obj.get("message", obj)}')
        self.clean()
        with open(os.path.join(self.dir, 'gantry.yaml'), 'w') as f:
            f.write(GANTRY_CONFIG)
        self.sched_config = os.path.join(self.dir, 'kube-scheduler-config.yaml')
        with open(self.sched_config, 'w') as f:
            f.write(SCHEDULER_CONFIG % os.path.join(self.dir, 'kube-scheduler.kubeconfig'))

    def stop(self):
        self.stop_gantryd()
        self.sh('stop', self.dir, check=False)

    def apiserver_pid(self):
        return pid_of(self.dir, 'kube-apiserver')

    # kube-scheduler
    def _sched_get(self, path):
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE  # its serving certificate is self-signed in memory
        pki = k8s_util.read_env(self.dir)['PKI']
        ctx.load_cert_chain(os.path.join(pki, 'admin.crt'), os.path.join(pki, 'admin.key'))
        c = http.client.HTTPSConnection('127.0.0.1', self.sched_port, context=ctx, timeout=10)
        try:
            c.request('GET', path)
            r = c.getresponse()
            return r.status, r.read()
        except OSError as e:
            return None, str(e).encode()
        finally:
            c.close()

    def start_kube_scheduler(self):
        env = dict(os.environ, GANTRY_K8S_SCHEDULER_ARGS='--config ' + self.sched_config)
        self.sh('start-scheduler', self.dir, env=env)
        wait_for('kube-scheduler /readyz', lambda: self._sched_get('/readyz')[0] == 200, 60)
        # Ready before it has read the apiserver's client CA (delegated authentication):
        # until then the admin certificate is anonymous and /configz answers 403 (seen once,
        # 2026-12-02), so it is asked again for a while.
        got = {}

        def configz():
            got['r'] = self._sched_get('/configz')
            return got['r'][0] not in (401, 403)
        try:
            wait_for('kube-scheduler /configz', configz, 30)
        except Broken:
            pass
        status, body = got['r']
        if status != 200:
            raise Broken(f'kube-scheduler /configz: {status} {body[:300]!r}')
        cc = json.loads(body)['componentconfig']['clientConnection']
        if cc.get('qps') != 5000 or cc.get('burst') != 10000:
            raise Broken(f'kube-scheduler did not take the raised client limits: {cc}')
        return pid_of(self.dir, 'kube-scheduler')

    def stop_kube_scheduler(self):
        self.sh('stop-scheduler', self.dir)

    # gantryd
    def start_gantryd(self):
        logf = open(self.gantry_log, 'a')
        self.gantry = subprocess.Popen(
            [self.gantryd_bin, '--config', os.path.join(self.dir, 'gantry.yaml'),
             '--kubernetes', self.kubeconfig, '--kubernetes-lease', 'none'] + self.gantryd_args,
            stdout=logf, stderr=subprocess.STDOUT)
        logf.close()

        def synced():
            if self.gantry.poll() is not None:
                raise Broken(f'gantryd exited at start with status {self.gantry.returncode}:\n{self.gantry_tail()}')
            with open(self.gantry_log) as f:
                return 'kubernetes: nodes and running jobs re-read' in f.read()
        wait_for("gantryd's first pass (its log: 'nodes and running jobs re-read')", synced, 60)
        return self.gantry.pid

    def gantry_tail(self, n=40):
        try:
            with open(self.gantry_log) as f:
                return ''.join(f.readlines()[-n:])
        except OSError:
            return ''

    def stop_gantryd(self):
        if self.gantry is None:
            return None
        if self.gantry.poll() is None:
            self.gantry.terminate()
            try:
                self.gantry.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.gantry.kill()
                self.gantry.wait()
        rc, self.gantry = self.gantry.returncode, None
        return rc

    def clean(self):
        """Every pod and PodGroup of the namespace gone."""
        opts = {'kind': 'DeleteOptions', 'apiVersion': 'v1', 'gracePeriodSeconds': 0}
        for path in (f'/api/v1/namespaces/{NS}/pods', f'/apis/scheduling.x-k8s.io/v1alpha1/namespaces/{NS}/podgroups'):
            status, obj = self.api.request('DELETE', path, opts)
            if status != 200:
                raise Broken(f'DELETE {path}: HTTP {status}: {obj.get("message", obj)}')
        wait_for('no pods left', lambda: not self.api.request('GET', f'/api/v1/namespaces/{NS}/pods?limit=1')[1].get('items'),
                 180, interval=0.5)

    def check_allocatable(self, when):
        r = self.sh('check-allocatable', self.dir, check=False)
        out = (r.stdout + r.stderr).strip()
        if r.returncode != 0:
            raise Broken(f'check-allocatable ({when}) failed:\n{out}')
        return out


def wait_for(what, cond, timeout, interval=0.1):
    deadline = time.monotonic() + timeout
    while True:
        if cond():
            return
        if time.monotonic() > deadline:
            raise Broken(f'timed out after {timeout} s waiting for {what}')
        time.sleep(interval)


# --------------------------------------------------------------------------- a phase


def job_objects(j, prefix, scheduler):
    """[(path, body, pod name or None)] of one workload job, PodGroup first."""
    def pod(name, gpus, group=None):
        labels = {'bench': 'k8s-side-by-side', 'job': f'{prefix}-j{j["i"]}'}
        if group:
            labels[GROUP_LABEL] = group
        return {'apiVersion': 'v1', 'kind': 'Pod',
                'metadata': {'name': name, 'namespace': NS, 'labels': labels,
                             'annotations': {'pod-complete.stage.kwok.x-k8s.io/delay': f'{j["dur"]}s'}},
                'spec': {'schedulerName': scheduler, 'restartPolicy': 'Never', 'terminationGracePeriodSeconds': 0,
                         'containers': [{'name': 'main', 'image': 'busybox',
                                         'resources': {'requests': {'cpu': '1', 'memory': '1Gi'},
                                                       'limits': {'nvidia.com/gpu': str(gpus)}}}]}}
    pods_path = f'/api/v1/namespaces/{NS}/pods'
    name = f'{prefix}-j{j["i"]:05d}'
    if j['nodes'] == 1:
        return [(pods_path, pod(name, j['gpn']), name)]
    out = [(f'/apis/scheduling.x-k8s.io/v1alpha1/namespaces/{NS}/podgroups',
            {'apiVersion': 'scheduling.x-k8s.io/v1alpha1', 'kind': 'PodGroup',
             'metadata': {'name': name, 'namespace': NS}, 'spec': {'minMember': j['nodes']}}, None)]
    for k in range(j['nodes']):
        out.append((pods_path, pod(f'{name}-{k}', j['gpn'], group=name), f'{name}-{k}'))
    return out


def create_burst(cdir, jobs, prefix, scheduler, threads):
    """Creates every job's objects from `threads` threads; {pod: (t_sent, t_answered)}, errors."""
    created, errors, calls = {}, [], []
    lock = threading.Lock()
    it = iter(jobs)

    def worker():
        api = k8s_util.Api(cdir)
        while True:
            with lock:
                j = next(it, None)
            if j is None:
                return
            for path, body, pod_name in job_objects(j, prefix, scheduler):
                t0 = time.monotonic()
                try:
                    status, obj = api.request('POST', path, body)
                except Exception as e:  # noqa: BLE001
                    status, obj = None, {'message': str(e)}
                t1 = time.monotonic()
                with lock:
                    calls.append((t1 - t0, body['metadata']['name'], status))
                # 409: a retried create whose first try went through
                if status not in (201, 409):
                    with lock:
                        errors.append(f'POST {body["metadata"]["name"]}: HTTP {status}: {obj.get("message", obj)}')
                    continue
                if pod_name:
                    with lock:
                        created[pod_name] = (t0, t1)

    ts = [threading.Thread(target=worker) for _ in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return created, errors, calls


def run_phase(c, a, jobs, which):
    """One scheduler's burst and idle probe on cluster c. Returns the phase's figures."""
    scheduler = 'default-scheduler' if which == 'kube-scheduler' else 'gantry'
    prefix = 'ks' if which == 'kube-scheduler' else 'ga'
    total_gpus = c.nodes * GPUS_PER_NODE
    res = dict(scheduler=which)
    t_phase = time.monotonic()
    if which == 'kube-scheduler':
        sched_pid = c.start_kube_scheduler()
        alive = lambda: pid_of(c.dir, 'kube-scheduler') is not None  # noqa: E731
    else:
        sched_pid = c.start_gantryd()
        alive = lambda: c.gantry is not None and c.gantry.poll() is None  # noqa: E731
    res['start_s'] = time.monotonic() - t_phase

    w = Watcher(c.dir)
    w.start()
    if not w.ready.wait(30) or w.errors:
        raise Broken(f'the pod watch did not start: {w.errors}')
    pids = dict(apiserver=c.apiserver_pid(), etcd=pid_of(c.dir, 'etcd'), scheduler=sched_pid, kwok=pid_of(c.dir, 'kwok'))
    cpu0 = {k: cpu_seconds(v) for k, v in pids.items() if v}
    req0 = api_requests(c.api)

    samples = []
    stop_sampling = threading.Event()
    t0 = time.monotonic()

    def sampler():
        while not stop_sampling.is_set():
            ts = time.monotonic()
            waiting, gpus, partial = w.sample()
            samples.append((ts - t0, waiting, gpus, partial))
            stop_sampling.wait(max(0.0, 0.5 - (time.monotonic() - ts)))
    sth = threading.Thread(target=sampler, daemon=True)
    sth.start()

    created, errors, calls = create_burst(c.dir, jobs, prefix, scheduler, a.creators)
    t_created = time.monotonic()
    log(f'{which}: {len(created)} pods created in {t_created - t0:.1f} s ({len(errors)} errors)')
    res['mid_check'] = c.check_allocatable('right after the burst was created')

    deadline = t0 + a.timeout
    names = set(created)
    timed_out = False
    while True:
        if w.errors:
            raise Broken(f'the pod watch failed: {w.errors}')
        if not alive():
            tail = c.gantry_tail() if which == 'gantry' else ''
            raise Broken(f'{which} died during the burst' + (f'; last lines of its log:\n{tail}' if tail else ''))
        with w.lock:
            left = sum(1 for n in names if (w.pods.get(n) or {}).get('done') is None)
        if left == 0:
            break
        if time.monotonic() > deadline:
            timed_out = True
            break
        time.sleep(0.25)
    t_end = time.monotonic()
    stop_sampling.set()
    sth.join()
    cpu1 = {k: cpu_seconds(v) for k, v in pids.items() if v}
    req1 = api_requests(c.api)
    deltas = {k: v - req0.get(k, 0) for k, v in req1.items() if v - req0.get(k, 0) > 0}
    res['api_requests'] = {' '.join(x for x in k[:3] if x) + f' ({k[3]})': int(v)
                           for k, v in sorted(deltas.items(), key=lambda kv: -kv[1])}
    res['api_writes'] = int(sum(v for k, v in deltas.items() if k[0] in ('POST', 'PUT', 'PATCH', 'DELETE', 'APPLY')))
    res['cpu_s'] = {k: (cpu1[k] - cpu0[k]) if cpu1.get(k) is not None and k in cpu0 else None for k in pids}

    # ---- the burst's figures
    with w.lock:
        pods = {n: dict(w.pods[n]) for n in names if n in w.pods}
        groups = {g: list(m) for g, m in w.groups.items()}
    first_create = min((t for t, _ in created.values()), default=t0)
    last_answer = max((t for _, t in created.values()), default=t0)
    binds = sorted(p['bound'] for p in pods.values() if p['bound'] is not None)
    dones = [p['done'] for p in pods.values() if p['done'] is not None]
    first_done = min(dones, default=None)
    wave = [b for b in binds if first_done is None or b < first_done]
    waits = [pods[n]['bound'] - created[n][0] for n in names if n in pods and pods[n]['bound'] is not None]
    res.update(
        jobs=len(jobs), pods=len(created), create_errors=errors[:10], create_error_count=len(errors),
        create_s=last_answer - first_create,
        create_call_s=dict(p50=pct([x[0] for x in calls], 50), p99=pct([x[0] for x in calls], 99),
                           slowest=[dict(s=round(x[0], 3), name=x[1], status=x[2]) for x in sorted(calls)[-3:]]),
        create_rate=len(created) / (last_answer - first_create) if last_answer > first_create else None,
        bound=len(binds), finished=len(dones), timed_out=timed_out,
        ended={e: sum(1 for p in pods.values() if p['end'] == e) for e in {p['end'] for p in pods.values() if p['end']}},
        bind_rate=len(binds) / (binds[-1] - first_create) if binds and binds[-1] > first_create else None,
        first_wave_pods=len(wave),
        first_wave_rate=len(wave) / (wave[-1] - first_create) if wave and wave[-1] > first_create else None,
        wait_s=dict(p50=pct(waits, 50), p90=pct(waits, 90), max=max(waits, default=None)),
        makespan_s=None if timed_out else (max(dones) - first_create if dones else None),
        burst_s=t_end - first_create,
        ideal_makespan_s=max(sum(j['gpus'] * j['dur'] for j in jobs) / total_gpus, max(j['dur'] for j in jobs)),
    )
    # Nothing here preempts or evicts: a pod that did not run to Succeeded is a fault,
    # reported (and the exit status 1) without stopping the run.
    others = {e: k for e, k in res['ended'].items() if e != 'Succeeded'}
    res['problems'] = [f'{which}: burst pods ended other than Succeeded: {others}'] if others else []
    if timed_out:
        res['left_unfinished'] = sum(1 for p in pods.values() if p['done'] is None)
        res['left_unbound'] = sum(1 for p in pods.values() if p['bound'] is None)
        res['s_since_last_bind'] = (t_end - w.last_bind) if w.last_bind else None
    # gangs: partly bound from the first member's bind to the last member's (or the end)
    partial = []
    gangs = [g for g, m in groups.items() if len(m) >= 2 and all(x in names for x in m)]
    whole = 0
    for g in gangs:
        bs = [pods[m]['bound'] for m in groups[g] if m in pods]
        got = [b for b in bs if b is not None]
        if not got:
            continue
        if len(got) == len(groups[g]):
            whole += 1
            partial.append(max(got) - min(got))
        else:
            partial.append(t_end - min(got))
    res['gangs'] = dict(total=len(gangs), bound_whole=whole,
                        partly_over_10s=sum(1 for x in partial if x > PARTIAL_LIMIT_S),
                        partly_over_1s=sum(1 for x in partial if x > 1.0),
                        longest_partial_s=max(partial, default=0.0))
    busy = [s for s in samples if s[1] > 0]
    res['alloc_while_waiting'] = statistics.mean(s[2] for s in busy) / total_gpus if busy else None
    res['alloc_partial_gangs_while_waiting'] = statistics.mean(s[3] for s in busy) / total_gpus if busy else None
    # the same once every pod was created (the creation burst itself left out)
    late = [s for s in busy if s[0] >= t_created - t0]
    res['alloc_while_waiting_after_create'] = statistics.mean(s[2] for s in late) / total_gpus if late else None
    res['samples_waiting'] = len(busy)
    res['timeline'] = [dict(t=round(s[0], 2), waiting=s[1], gpus=s[2], partial_gang_gpus=s[3])
                       for s in samples[:: max(1, len(samples) // 300)]]
    res['overcommits'] = list(w.overcommits)
    if w.overcommits:
        raise Broken(f'{which}: GPUs overcommitted: {w.overcommits[:5]}')
    if errors:
        raise Broken(f'{which}: {len(errors)} creates failed, first: {errors[0]}')

    # ---- the idle probe: lone 1-GPU pods, one after another
    probe = []
    if timed_out:
        log(f'{which}: burst timed out after {a.timeout} s ({res["left_unfinished"]} pods unfinished); no idle probe')
    else:
        api = k8s_util.Api(c.dir)
        for k in range(a.probes):
            name = f'{prefix}-probe-{k:02d}'
            body = job_objects(dict(i=0, nodes=1, gpn=1, dur=1), prefix, scheduler)[0][1]
            body['metadata']['name'] = name
            body['metadata']['labels']['job'] = name
            ts = time.monotonic()
            status, obj = api.request('POST', f'/api/v1/namespaces/{NS}/pods', body)
            ta = time.monotonic()
            if status != 201:
                raise Broken(f'{which}: probe {name}: HTTP {status}: {obj.get("message", obj)}')
            tb = w.wait_bound(name, 30)
            if tb is None:
                if not alive():
                    raise Broken(f'{which} died during the idle probe; last lines of its log:\n{c.gantry_tail()}')
                raise Broken(f'{which}: probe pod {name} not bound within 30 s on an idle cluster')
            probe.append(dict(create_to_bound=tb - ts, answer_to_bound=tb - ta, create_call=ta - ts))
            time.sleep(0.1)
        # the probe pods finish (1 s) before the check, so it sees a quiet cluster
        wait_for('the probe pods finished', lambda: all(
            (w.pods.get(f'{prefix}-probe-{k:02d}') or {}).get('done') is not None for k in range(a.probes)), 30)
    lat = [p['create_to_bound'] for p in probe]
    res['probe'] = dict(n=len(lat), p50=pct(lat, 50), p99=pct(lat, 99), max=max(lat, default=None), samples=probe)
    res['end_check'] = c.check_allocatable('after the phase')
    w.stop()
    if w.errors:
        raise Broken(f'the pod watch failed: {w.errors}')
    res['watch_events'], res['watch_relists'] = w.events, w.relists

    if not alive():
        raise Broken(f'{which} died after the burst' + (f'; last lines of its log:\n{c.gantry_tail()}' if which == 'gantry' else ''))
    if which == 'kube-scheduler':
        c.stop_kube_scheduler()
    else:
        rc = c.stop_gantryd()
        res['gantryd_exit'] = rc
        if rc != 0:
            raise Broken(f'gantryd exited with status {rc} on SIGTERM; last lines of its log:\n{c.gantry_tail()}')
    t_clean = time.monotonic()
    c.clean()
    res['clean_s'] = time.monotonic() - t_clean
    res['phase_wall_s'] = time.monotonic() - t_phase
    return res


def run_size(a, wl, n, workdir):
    cdir = os.path.join(workdir, f'n{n}')
    os.makedirs(cdir, exist_ok=True)
    out = dict(nodes=n, gpus=n * GPUS_PER_NODE, cluster_dir=cdir)
    jobs = wl.gen_jobs(a.jobs_per_node * n, a.seed, a.dur_min, a.dur_max)
    t0 = time.monotonic()
    c = Cluster(cdir, n, a.gantryd)
    c.gantryd_args = a.gantryd_args.split()
    try:
        c.start()
        out['cluster_start_s'] = time.monotonic() - t0
        out['untaint_wait_s'] = c.untaint_s
        log(f'{n} nodes: cluster up in {out["cluster_start_s"]:.1f} s; {len(jobs)} jobs')
        out['phases'] = {}
        for which in ('kube-scheduler', 'gantry'):
            r = run_phase(c, a, jobs, which)
            out['phases'][which] = r
            log(f'{n} nodes, {which}: bind rate {fmt(r["bind_rate"])} pods/s, makespan '
                f'{fmt(r["makespan_s"]) if not r["timed_out"] else "timed out"} s, phase {r["phase_wall_s"]:.0f} s')
    finally:
        c.stop()
        out['wall_s'] = time.monotonic() - t0
    return out


# --------------------------------------------------------------------------- output


def fmt(v, f='%.1f'):
    return '-' if v is None else f % v


def ms(v):
    return '-' if v is None else '%.0f' % (1000 * v) if v >= 0.0095 else '%.1f' % (1000 * v)


ROWS = [
    ('jobs / pods (2-node gangs)', lambda r: '%d / %d (%d)' % (r['jobs'], r['pods'], r['gangs']['total'])),
    ('pods created per s (driver)', lambda r: fmt(r['create_rate'], '%.0f')),
    ('pods bound per s (bound / (last bind - first create))', lambda r: fmt(r['bind_rate'], '%.1f')),
    ('first wave: pods bound before the first finished, per s',
     lambda r: '%s (%d pods)' % (fmt(r['first_wave_rate'], '%.0f'), r['first_wave_pods'])),
    ('create to bound p50 / p90 / max s', lambda r: '%s / %s / %s' % (
        fmt(r['wait_s']['p50']), fmt(r['wait_s']['p90']), fmt(r['wait_s']['max']))),
    ('gangs bound whole / partly bound > 10 s', lambda r: '%d / %d' % (r['gangs']['bound_whole'], r['gangs']['partly_over_10s'])),
    ('longest partly bound gang s', lambda r: fmt(r['gangs']['longest_partial_s'], '%.2f')),
    ('GPUs allocated while pods wait', lambda r: fmt(r['alloc_while_waiting'] and 100 * r['alloc_while_waiting']) + '%'),
    ('... counting only after every pod was created', lambda r: fmt(
        r['alloc_while_waiting_after_create'] and 100 * r['alloc_while_waiting_after_create']) + '%'),
    ('... of which held by partly bound gangs', lambda r: fmt(
        r['alloc_partial_gangs_while_waiting'] is not None and 100 * r['alloc_partial_gangs_while_waiting'] or 0.0) + '%'),
    ('makespan s (ideal)', lambda r: '%s (%s)' % ('timed out' if r['timed_out'] else fmt(r['makespan_s']),
                                                  fmt(r['ideal_makespan_s'], '%.0f'))),
    ('idle probe create to bound p50 / p99 ms', lambda r: '%s / %s' % (ms(r['probe']['p50']), ms(r['probe']['p99']))),
    ('API server write requests over the burst', lambda r: '%d' % r['api_writes']),
    ('kube-apiserver CPU s over the burst', lambda r: fmt(r['cpu_s'].get('apiserver'))),
    ('scheduler CPU s over the burst', lambda r: fmt(r['cpu_s'].get('scheduler'))),
    ('etcd / kwok CPU s over the burst', lambda r: '%s / %s' % (fmt(r['cpu_s'].get('etcd')), fmt(r['cpu_s'].get('kwok')))),
]


def targets(size):
    ks, ga = size['phases']['kube-scheduler'], size['phases']['gantry']
    out = []
    ratio = ga['bind_rate'] / ks['bind_rate'] if ga.get('bind_rate') and ks.get('bind_rate') else None
    out.append(('Gantry binds >= 2x kube-scheduler\'s pods/s', '%sx' % fmt(ratio, '%.2f'), ratio is not None and ratio >= 2))
    p50 = ga['probe']['p50']
    out.append(('idle pod to bound p50 < 50 ms', ms(p50) + ' ms', p50 is not None and p50 < 0.05))
    g = ga['gangs']
    out.append(('no gang partly bound > 10 s', '%d (longest %.2f s)' % (g['partly_over_10s'], g['longest_partial_s']),
                g['partly_over_10s'] == 0 and not ga['timed_out']))
    al = ga['alloc_while_waiting']
    out.append(('>= 97% of GPUs allocated while pods wait', fmt(al and 100 * al) + '%', al is not None and al >= 0.97))
    return out


def table(sizes):
    lines = []
    for s in sizes:
        ph = s.get('phases') or {}
        if len(ph) < 2:
            continue
        lines.append(f'\n### {s["nodes"]} nodes x 8 GPUs ({s["gpus"]} GPUs)\n')
        lines.append('| | kube-scheduler | Gantry |')
        lines.append('|---|---|---|')
        for name, fn in ROWS:
            vals = []
            for which in ('kube-scheduler', 'gantry'):
                try:
                    vals.append(fn(ph[which]))
                except (KeyError, TypeError, ValueError):
                    vals.append('-')
            lines.append(f'| {name} | {vals[0]} | {vals[1]} |')
        lines.append('\n| target (Gantry) | result | |')
        lines.append('|---|---|---|')
        for name, val, ok in targets(s):
            lines.append(f'| {name} | {val} | {"met" if ok else "not met"} |')
    return '\n'.join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--nodes', default='16,64,256,1000', help='sizes, comma-separated')
    ap.add_argument('--jobs-per-node', type=int, default=4)
    ap.add_argument('--seed', type=int, default=1)
    ap.add_argument('--dur-min', type=int, default=5)
    ap.add_argument('--dur-max', type=int, default=20)
    ap.add_argument('--timeout', type=int, default=900, help='seconds per phase for the burst to finish')
    ap.add_argument('--probes', type=int, default=20)
    ap.add_argument('--creators', type=int, default=4, help='driver threads creating the burst')
    ap.add_argument('--gantryd', default=os.path.join(ROOT, 'build', 'release', 'src', 'gantryd'))
    ap.add_argument('--gantryd-args', default='', help='more gantryd flags, e.g. "--policy fifo"')
    ap.add_argument('--out', default='k8s_side_by_side.json')
    ap.add_argument('--workdir', help='cluster directories go here (default: a new temporary one)')
    ap.add_argument('--keep', action='store_true', help='keep the cluster directories (logs)')
    ap.add_argument('--tiny', action='store_true', help='CI: 8 nodes, 16 jobs of 2-8 s, 5 probes, 90 s timeout')
    a = ap.parse_args()
    if a.tiny:
        a.nodes, a.jobs_per_node, a.dur_min, a.dur_max, a.probes, a.timeout = '8', 2, 2, 8, 5, 90
    sizes = [int(x) for x in a.nodes.replace(' ', ',').split(',') if x]
    a.gantryd = os.path.abspath(a.gantryd)
    if not os.access(a.gantryd, os.X_OK):
        raise SystemExit(f'k8s-side-by-side: {a.gantryd} not found (build it first)')
    wl = load_workload()
    workdir = a.workdir or tempfile.mkdtemp(prefix='gantry-k8s-bench.')
    os.makedirs(workdir, exist_ok=True)
    t_all = time.monotonic()
    doc = dict(date=time.strftime('%Y-%m-%d %H:%M:%S %Z'), nproc=os.cpu_count(),
               mem_gib=round(os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') / 2**30, 1),
               args={k: v for k, v in vars(a).items()}, sizes=[], failure=None)
    st = os.stat(a.gantryd)
    doc['gantryd'] = dict(path=a.gantryd, bytes=st.st_size,
                          mtime=time.strftime('%Y-%m-%d %H:%M:%S', time.gmtime(st.st_mtime)) + ' UTC')
    try:
        doc['git'] = subprocess.run(['git', '-C', ROOT, 'rev-parse', '--short', 'HEAD'], capture_output=True,
                                    text=True).stdout.strip()
    except OSError:
        pass
    failed = False
    for n in sizes:
        log(f'== {n} nodes')
        entry = dict(nodes=n, gpus=n * GPUS_PER_NODE)
        try:
            entry = run_size(a, wl, n, workdir)
        except Broken as e:
            failed = True
            entry['failure'] = str(e)
            doc['failure'] = f'{n} nodes: {e}'
            log(f'FAILED at {n} nodes: {e}')
        except KeyboardInterrupt:
            doc['failure'] = 'interrupted'
            failed = True
        doc['sizes'].append(entry)
        if 'wall_s' in entry:
            log(f'{n} nodes took {entry["wall_s"]:.0f} s')
        if failed:
            break
    problems = [p for s in doc['sizes'] for r in (s.get('phases') or {}).values() for p in r.get('problems', [])]
    for p in problems:
        log(f'{p}')
    failed = failed or bool(problems)
    doc['wall_s'] = time.monotonic() - t_all
    with open(a.out, 'w') as f:
        json.dump(doc, f, indent=1)
    print(table(doc['sizes']))
    log(f'wrote {a.out}; total {doc["wall_s"]:.0f} s')
    if failed or a.keep or a.workdir:
        log(f'cluster directories (logs) kept in {workdir}')
    else:
        shutil.rmtree(workdir, ignore_errors=True)
    return 1 if failed else 0


if __name__ == '__main__':
    sys.exit(main())
