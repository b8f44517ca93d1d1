#!/usr/bin/env python3
"""The Slurm peer's workload against gantryd, side by side (issue 13, item 3).

Runs ../shared/peers/slurm/workload.py's job mix (same generator, seed, sizes and
durations: 16 jobs per node, 1/2/4/8 GPUs and 2-node 16-GPU gangs, `sleep 5..20`) against
gantryd at each --nodes size, on loopback: the workload's nodes are one gantry-swarm
process (emulated nodes, each with its own connections); two more nodes on another GPU
model run real gantry-agent processes for the idle probes, which time `gantry submit`
to the job's own `date +%s.%N`, as the peer does with sbatch. Four parallel `gantry
submit` loops submit everything at once; GPU allocation is sampled each second; then
the idle probes; then HTTP submits/s from 8 threads on keep-alive connections (the probe
nodes drained, so the CPU-only jobs start on the swarm's nodes).

    python3 bench/slurm_side_by_side.py --nodes 64 256 --with-slurm [--build build/release]
    python3 bench/slurm_side_by_side.py --tiny        # CI: checks the script end to end

Prints a markdown table with the Slurm peer's column and writes the raw figures to --out
(JSON). With --with-slurm the peer (../shared/peers/slurm/run.sh, as root) runs right
after Gantry at each size on the same machine, and its figures are used: these machines'
speed moves by 2x within an hour, so only same-run ratios compare; without it, the
figures its RESULTS.md recorded on 2026-11-21. Every loop is bounded in time; exits 1
when a job did not finish or a call failed.
"""
import argparse, http.client, importlib.util, json, os, shutil, signal, subprocess, sys, tempfile, threading, time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
def shared_dir():
    """../shared beside the checkout: GANTRY_SHARED_DIR if set, else beside this checkout,
    else beside the main checkout of a git worktree (a worktree elsewhere has none of its own)."""
    if os.environ.get('GANTRY_SHARED_DIR'):
        return os.environ['GANTRY_SHARED_DIR']
    here = os.path.join(ROOT, '..', 'shared')
    if os.path.isdir(here):
        return here
    try:
        common = subprocess.run(['git', '-C', ROOT, 'rev-parse', '--path-format=absolute', '--git-common-dir'],
                                capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        common = ''
    main = os.path.dirname(common) if common else ''
    return os.path.join(main, '..', 'shared') if main else here


PEER = os.path.join(shared_dir(), 'peers', 'slurm', 'workload.py')

# The Slurm peer's figures (../shared/peers/slurm/RESULTS.md, 2026-11-21, same kind of
# machine: 2 cores, 23 GiB), by node count.
SLURM = {
    16: dict(submit_rate=382, submit_p50=10, submit_p99=17, idle_p50=1.76, idle_max=2.76, makespan=149, ideal=127,
             alloc_pending=90.8, wait_p50=89),
    64: dict(submit_rate=219, submit_p50=16, submit_p99=41, idle_p50=1.80, idle_max=2.82, makespan=157, ideal=128,
             alloc_pending=89.8, wait_p50=95),
    256: dict(submit_rate=64, submit_p50=37, submit_p99=789, idle_p50=1.72, idle_max=2.73, makespan=178, ideal=122,
              alloc_pending=84.0, wait_p50=81),
}


def pct(xs, p):
    if not xs:
        return None
    xs = sorted(xs)
    return xs[min(len(xs) - 1, max(0, int(round(p / 100.0 * (len(xs) - 1)))))]


def load_peer():
    spec = importlib.util.spec_from_file_location('slurm_workload', PEER)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


class Server:
    def __init__(self, port, token):
        self.port, self.token = port, token

    def call(self, method, path, body=None, token=True, timeout=30, conn=None):
        """One request; on `conn` (kept open: keep-alive) when given, else a connection of its own."""
        c = conn or http.client.HTTPConnection('127.0.0.1', self.port, timeout=timeout)
        h = {'Authorization': 'Bearer ' + self.token} if token else {}
        if body is not None:
            h['Content-Type'] = 'application/json'
        c.request(method, path, body=body, headers=h)
        r = c.getresponse()
        data = r.read()
        if conn is None:
            c.close()
        return r.status, data


def start_cluster(build, d, nodes, agents, procs, flags=(), up_within_s=60, swarm_flags=()):
    """gantryd on a fresh SQLite file in `d` (its cluster.yaml: pool `gpu` of `nodes` nodes of
    8 H100s, pool `probe` of `agents` nodes of 8 A100s, one queue `research` guaranteed every
    GPU), one gantry-swarm for the `gpu` nodes (stats in d/swarm.json; `swarm_flags` passed to it) and a real
    gantry-agent per probe node, all up (`up_within_s` at most). Each process is appended to `procs`
    as it starts (stop them with stop_cluster, also when this raises). Returns (port, admin
    token)."""
    gantryd, agent, swarm = (os.path.join(build, 'src', x) for x in ('gantryd', 'gantry-agent', 'gantry-swarm'))
    with open(os.path.join(d, 'cluster.yaml'), 'w') as f:
        f.write('pools:\n  - name: gpu\n    count: %d\n    gpus: 8\n    gpu_model: H100-80GB\n' % nodes)
        if agents:
            f.write('  - name: probe\n    count: %d\n    gpus: 8\n    gpu_model: A100-80GB\n' % agents)
        f.write('queues:\n  - name: research\n    guaranteed_gpus: %d\n' % (8 * (nodes + agents)))
    db = os.path.join(d, 'state.db')
    subprocess.run([gantryd, 'init', '--db', db], capture_output=True, check=True)
    tok = lambda *r: subprocess.run([gantryd, 'token', 'create', '--db', db] + list(r), capture_output=True,
                                    text=True, check=True).stdout.strip()
    admin, agent_tok = tok('--admin'), tok('--agent', '--any-node')
    log = lambda n: open(os.path.join(d, n), 'w')
    port_file = os.path.join(d, 'port')
    procs.append(subprocess.Popen([gantryd, '--config', os.path.join(d, 'cluster.yaml'), '--db', db, '--listen',
                                   '127.0.0.1:0', '--port-file', port_file] + list(flags),
                                  stderr=log('gantryd.log')))
    t_end = time.time() + 10
    while not os.path.exists(port_file) and time.time() < t_end:
        time.sleep(0.05)
    port = int(open(port_file).read())
    url = 'http://127.0.0.1:%d' % port
    env = dict(os.environ, GANTRY_SERVER=url, GANTRY_TOKEN=agent_tok)
    if nodes:
        procs.append(subprocess.Popen([swarm, '--server', url, '--pool', 'gpu:%d:8xH100-80GB' % nodes, '--stats',
                                       os.path.join(d, 'swarm.json')] + list(swarm_flags), env=env,
                                      stdout=log('swarm.out'),
                                      stderr=log('swarm.log')))
    # --run-as agent: the benchmarks' tokens name no user, and a root agent runs jobs as
    # their users by default (the side-by-side died on an empty list when it did). Agents
    # older than the flag (a worktree of an old commit) run them as themselves anyway.
    run_as = ['--run-as', 'agent'] if agents and '--run-as' in subprocess.run(
        [agent, '--help'], capture_output=True, text=True).stdout else []
    for i in range(agents):
        procs.append(subprocess.Popen([agent, '--server', url, '--node', 'probe-%d' % i, '--emulate', '8xA100-80GB']
                                      + run_as + ['--state-dir', os.path.join(d, 'agent-%d' % i)], env=env,
                                      stderr=log('agent-%d.log' % i)))
    srv = Server(port, admin)
    t_end = time.time() + up_within_s
    while time.time() < t_end:
        st, body = srv.call('GET', '/healthz', token=False)
        if st == 200 and json.loads(body)['nodes_up'] == nodes + agents:
            return port, admin
        time.sleep(0.2)
    raise RuntimeError('nodes did not come up')


def stop_cluster(procs):
    """SIGTERM to every process, the last started first; SIGKILL to any still up after 40 s."""
    for p in reversed(procs):
        p.send_signal(signal.SIGTERM)
    for p in reversed(procs):
        try:
            p.wait(timeout=40)
        except subprocess.TimeoutExpired:
            p.kill()


def run_size(a, peer, nodes, work):
    b = os.path.abspath(a.build)
    gantry = os.path.join(b, 'src', 'gantry')
    d = tempfile.mkdtemp(prefix='gantry-sbs-%d-' % nodes, dir=work)
    total = nodes * 8
    stats_path = os.path.join(d, 'swarm.json')
    procs = []
    try:
        port, admin = start_cluster(b, d, nodes, 2, procs, ['--events', os.path.join(d, 'events.jsonl')])
        srv = Server(port, admin)
        cli_env = dict(os.environ, GANTRY_SERVER='http://127.0.0.1:%d' % port, GANTRY_TOKEN=admin)

        jobs = peer.gen_jobs(nodes * a.jobs_per_node, a.seed, a.dur_min, a.dur_max)
        samples, health_ms = [], []
        stop = threading.Event()
        t0 = time.time()

        def sampler():
            while not stop.is_set():
                ts = time.time()
                try:
                    st, body = srv.call('GET', '/healthz', token=False)
                    health_ms.append((time.time() - ts) * 1000)
                    h = json.loads(body)
                    st, body = srv.call('GET', '/v1/nodes')
                    alloc = sum(n['gpus'] - n['free_gpus'] for n in json.loads(body)['nodes'] if n['pool'] == 'gpu')
                    samples.append(dict(t=ts - t0, pending=h['jobs_pending'], running=h['jobs_running'], gpus=alloc))
                except Exception as e:  # keep sampling
                    samples.append(dict(t=ts - t0, error=str(e)))
                stop.wait(max(0.0, 1.0 - (time.time() - ts)))

        th = threading.Thread(target=sampler, daemon=True)
        th.start()
        ids, sub_lat, errors = {}, [], []
        lock = threading.Lock()
        it = iter(jobs)

        def submitter():
            while True:
                with lock:
                    j = next(it, None)
                if j is None:
                    return
                cmd = [gantry, 'submit', '--queue', 'research', '--gpus', str(j['gpn']), '--replicas', str(j['nodes']),
                       '--gpu-model', 'H100-80GB', '--vram-gb', '40', '--', 'sh', '-c',
                       'date +%%s.%%N; sleep %d' % j['dur']]
                ts = time.time()
                p = subprocess.run(cmd, capture_output=True, text=True, env=cli_env, timeout=60)
                te = time.time()
                if p.returncode != 0:
                    errors.append(p.stderr.strip()[:200])
                    continue
                with lock:
                    ids[p.stdout.strip()] = dict(j, t_sub=ts, t_sub_done=te)
                    sub_lat.append(te - ts)

        sub_start = time.time()
        ths = [threading.Thread(target=submitter) for _ in range(a.submitters)]
        for t in ths:
            t.start()
        for t in ths:
            t.join()
        sub_wall = time.time() - sub_start
        t_end = time.time() + a.timeout
        while time.time() < t_end:
            st, body = srv.call('GET', '/healthz', token=False)
            h = json.loads(body)
            if h['jobs_pending'] == 0 and h['jobs_running'] == 0:
                break
            time.sleep(0.5)
        drained = time.time()
        stop.set()
        th.join(timeout=10)
        st, body = srv.call('GET', '/v1/jobs?all=1', timeout=120)
        listed = {j['id']: j for j in json.loads(body)['jobs']}
        waits, starts, ends, gang_waits, small_waits = [], [], [], [], []
        for jid, j in ids.items():
            s = listed.get(jid)
            if not s or s.get('start') is None:
                continue
            w = s['start'] - j['t_sub_done']
            waits.append(w)
            (gang_waits if j['nodes'] > 1 else small_waits if j['gpus'] == 1 else []).append(w)
            starts.append(s['start'])
            if s.get('end'):
                ends.append(s['end'])
        finished = sum(1 for jid in ids if listed.get(jid, {}).get('state') == 'finished')
        ideal = sum(j['gpus'] * j['dur'] for j in jobs) / float(total)
        makespan = (max(ends) - sub_start) if ends else None
        pend = [s['gpus'] / total for s in samples if 'gpus' in s and s['pending'] > 0]
        busy = [s['gpus'] / total for s in samples if 'gpus' in s and s['running'] > 0]

        # Idle probes: real agents and processes, `gantry submit` to the job's own stamp.
        probe_lat = []
        for i in range(a.probes):
            gpus, reps = [(1, 1), (8, 1), (8, 2)][i % 3]
            stamp = os.path.join(d, 'probe-%d' % i)
            ts = time.time()
            p = subprocess.run([gantry, 'submit', '--queue', 'research', '--gpus', str(gpus), '--replicas', str(reps),
                                '--gpu-model', 'A100-80GB', '--vram-gb', '40', '--', 'sh', '-c',
                                'date +%%s.%%N > %s.$GANTRY_RANK' % stamp], capture_output=True, text=True,
                               env=cli_env, timeout=60)
            if p.returncode != 0:
                errors.append('probe: ' + p.stderr.strip()[:200])
                continue
            t_end = time.time() + 10
            while time.time() < t_end and not os.path.exists(stamp + '.0'):
                time.sleep(0.005)
            time.sleep(0.05)
            try:
                probe_lat.append(float(open(stamp + '.0').read().strip()) - ts)
            except Exception:
                errors.append('probe %d did not run within 10 s' % i)
            time.sleep(0.3)

        # HTTP submits/s: 8 threads, keep-alive connections, CPU-only jobs. The two probe
        # nodes are drained first: their A100s serve no job of the workload, so the
        # fragmentation-aware placement sends CPU-only jobs there (1,641 of 4,000 once),
        # and every start on them is a real process (a shim and `true`) on the same two
        # cores as gantryd and the clients. The row measures the control plane.
        for i in range(2):
            srv.call('POST', '/v1/nodes/probe-%d/drain' % i, json.dumps({'reason': 'HTTP phase: swarm only'}))
        http_n = a.http_submits
        counter = [0]
        body = json.dumps({'queue': 'research', 'gpus': 0, 'command': ['true']})

        def http_submitter():
            c = http.client.HTTPConnection('127.0.0.1', port, timeout=30)
            while True:
                with lock:
                    if counter[0] >= http_n:
                        break
                    counter[0] += 1
                c.request('POST', '/v1/jobs', body=body,
                          headers={'Authorization': 'Bearer ' + admin, 'Content-Type': 'application/json'})
                r = c.getresponse()
                r.read()
                if r.status != 201:
                    errors.append('http submit %d' % r.status)
            c.close()

        hs = time.time()
        hts = [threading.Thread(target=http_submitter) for _ in range(8)]
        for t in hts:
            t.start()
        for t in hts:
            t.join()
        http_rate = http_n / (time.time() - hs)
        gd = subprocess.run(['ps', '-o', 'rss=,times=', '-p', str(procs[0].pid)], capture_output=True, text=True)
        rss_kb, cpu_s = (int(x) for x in gd.stdout.split()) if gd.stdout.split() else (0, 0)
        swarm_stats = json.load(open(stats_path)) if os.path.exists(stats_path) else {}
        return dict(nodes=nodes, jobs=len(jobs), submitted=len(ids), finished=finished, errors=errors[:10],
                    submit_rate=len(ids) / sub_wall if sub_wall else 0,
                    submit_p50_ms=1000 * pct(sub_lat, 50), submit_p99_ms=1000 * pct(sub_lat, 99),
                    wait_p50=pct(waits, 50), wait_p90=pct(waits, 90), wait_max=max(waits) if waits else None,
                    gang_wait_p50=pct(gang_waits, 50), small_wait_p50=pct(small_waits, 50),
                    idle_p50_ms=1000 * pct(probe_lat, 50), idle_max_ms=1000 * max(probe_lat) if probe_lat else None,
                    makespan=makespan, ideal=ideal, drained_after=drained - sub_start,
                    alloc_pending_pct=100 * sum(pend) / len(pend) if pend else None,
                    alloc_running_pct=100 * sum(busy) / len(busy) if busy else None,
                    healthz_p50_ms=pct(health_ms, 50), healthz_p99_ms=pct(health_ms, 99),
                    http_submits_per_s=http_rate, gantryd_rss_mb=rss_kb / 1024.0, gantryd_cpu_s=cpu_s,
                    lease_misses=swarm_stats.get('lease_misses'), swarm=swarm_stats)
    finally:
        stop_cluster(procs)
        if not a.keep:
            shutil.rmtree(d, ignore_errors=True)


def table(results):
    f = lambda v, fmt='%.0f': '-' if v is None else fmt % v
    cols = [r['nodes'] for r in results]
    head = '| metric | ' + ' | '.join('%d nodes: gantry | Slurm' % n for n in cols) + ' |'
    lines = [head, '|---|' + '---|---|' * len(cols)]

    def row(name, g, s):
        lines.append('| %s | ' % name + ' | '.join('%s | %s' % (g(r), s(r.get('slurm') or SLURM.get(r['nodes'], {})))
                                                  for r in results) + ' |')
    row('jobs submitted / finished', lambda r: '%d / %d' % (r['submitted'], r['finished']), lambda s: 'all')
    row('CLI submit rate, 4 loops (jobs/s)', lambda r: f(r['submit_rate']), lambda s: f(s.get('submit_rate')))
    ratio = lambda r: ((r.get('slurm') or SLURM.get(r['nodes'], {})).get('submit_rate') or None) and \
        r['submit_rate'] / (r.get('slurm') or SLURM[r['nodes']])['submit_rate']
    row('CLI submit rate, gantry / Slurm', lambda r: f(ratio(r), '%.2fx'),
        lambda s: 'same run' if s.get('same_run') else 'recorded 2026-11-21')
    row('CLI submit p50 / p99 (ms)', lambda r: '%s / %s' % (f(r['submit_p50_ms']), f(r['submit_p99_ms'])),
        lambda s: '%s / %s' % (f(s.get('submit_p50')), f(s.get('submit_p99'))))
    row('HTTP submits/s, 8 threads', lambda r: f(r['http_submits_per_s']), lambda s: '-')
    row('idle submit to running p50 / max (ms)', lambda r: '%s / %s' % (f(r['idle_p50_ms']), f(r['idle_max_ms'])),
        lambda s: '%s / %s' % (f(s.get('idle_p50', 0) * 1000 if s else None), f(s.get('idle_max', 0) * 1000 if s else None)))
    row('wait p50 / p90 / max (s)', lambda r: '%s / %s / %s' % (f(r['wait_p50']), f(r['wait_p90']), f(r['wait_max'])),
        lambda s: f(s.get('wait_p50')) + ' (p50)')
    row('makespan / ideal (s)', lambda r: '%s / %s (%s)' % (f(r['makespan']), f(r['ideal']),
                                                           f(r['makespan'] / r['ideal'] if r['makespan'] else None, '%.2fx')),
        lambda s: '%s / %s' % (f(s.get('makespan')), f(s.get('ideal'))))
    row('GPUs allocated while jobs wait', lambda r: f(r['alloc_pending_pct'], '%.1f%%'),
        lambda s: f(s.get('alloc_pending'), '%.1f%%'))
    row('/healthz p50 / p99 during the run (ms)', lambda r: '%s / %s' % (f(r['healthz_p50_ms'], '%.1f'),
                                                                         f(r['healthz_p99_ms'], '%.1f')), lambda s: '-')
    row('lease misses', lambda r: f(r['lease_misses']), lambda s: '-')
    row('gantryd RSS (MB) / CPU (s)', lambda r: '%s / %s' % (f(r['gantryd_rss_mb']), f(r['gantryd_cpu_s'])),
        lambda s: '-')
    return '\n'.join(lines)


def run_slurm(a, n, work):
    """The Slurm peer at n nodes, now, on this machine (its run.sh), in the figures' form."""
    out = tempfile.mkdtemp(prefix='slurm-peer-%d-' % n, dir=work)
    env = dict(os.environ, NODES=str(n), JOBS_PER_NODE=str(a.jobs_per_node), SEED=str(a.seed),
               DUR_MIN=str(a.dur_min), DUR_MAX=str(a.dur_max), SUBMITTERS=str(a.submitters), PROBES=str(a.probes),
               OUTDIR=out)
    p = subprocess.run(['bash', os.path.join(os.path.dirname(PEER), 'run.sh')], env=env, capture_output=True,
                       text=True, timeout=a.timeout + 600)
    path = os.path.join(out, 'multi_n%d.json' % n)
    if p.returncode != 0 or not os.path.exists(path):
        raise RuntimeError('the Slurm peer failed at %d nodes: %s' % (n, p.stderr[-2000:]))
    r = json.load(open(path))
    g = lambda k, q: (r.get(k) or {}).get(q)
    ms = lambda v: None if v is None else v * 1000
    return dict(same_run=True, submit_rate=r.get('submit_jobs_per_s'), submit_p50=ms(g('sbatch_call_s', 'p50')),
                submit_p99=ms(g('sbatch_call_s', 'p99')), idle_p50=g('probe_lat', 'p50'), idle_max=g('probe_lat', 'max'),
                makespan=r.get('makespan_s'), ideal=r.get('ideal_makespan_s'),
                alloc_pending=100 * r['util_while_backlogged'] if r.get('util_while_backlogged') is not None else None,
                wait_p50=g('wait_s', 'p50'))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--nodes', type=int, nargs='+', default=[16, 64, 256])
    ap.add_argument('--build', default=os.path.join(ROOT, 'build', 'release'))
    ap.add_argument('--jobs-per-node', type=int, default=16)
    ap.add_argument('--dur-min', type=int, default=5)
    ap.add_argument('--dur-max', type=int, default=20)
    ap.add_argument('--submitters', type=int, default=4)
    ap.add_argument('--probes', type=int, default=15)
    ap.add_argument('--http-submits', type=int, default=4000)
    ap.add_argument('--seed', type=int, default=1)
    ap.add_argument('--timeout', type=int, default=600)
    ap.add_argument('--out', default='side_by_side.json')
    ap.add_argument('--keep', action='store_true')
    ap.add_argument('--with-slurm', action='store_true',
                    help="run the Slurm peer (../shared/peers/slurm/run.sh, root) after Gantry at each size, "
                         "and compare with those figures instead of the recorded ones")
    ap.add_argument('--tiny', action='store_true', help='CI: 4 nodes, 8 jobs of 1 s, 3 probes, 100 HTTP submits')
    a = ap.parse_args()
    if a.tiny:
        a.nodes, a.jobs_per_node, a.dur_min, a.dur_max, a.probes, a.http_submits, a.timeout = [4], 2, 1, 1, 3, 100, 120
    peer = load_peer()
    work = tempfile.gettempdir()
    results = []
    for n in a.nodes:
        print('== %d nodes' % n, file=sys.stderr, flush=True)
        r = run_size(a, peer, n, work)
        if a.with_slurm:
            print('== the Slurm peer at %d nodes' % n, file=sys.stderr, flush=True)
            r['slurm'] = run_slurm(a, n, work)
        print(json.dumps(r), file=sys.stderr, flush=True)
        results.append(r)
    with open(a.out, 'w') as f:
        json.dump(results, f, indent=1)
    print(table(results))
    # A run that lost jobs or hit errors must not pass as a benchmark (CI's tiny mode).
    bad = [r for r in results if r['finished'] != r['jobs'] or r['errors'] or not r['http_submits_per_s']]
    if bad:
        print('side-by-side: %s' % '; '.join('%d nodes: %d of %d finished, errors %s' % (
            r['nodes'], r['finished'], r['jobs'], r['errors']) for r in bad), file=sys.stderr)
        sys.exit(1)


if __name__ == '__main__':
    main()
