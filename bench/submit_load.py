#!/usr/bin/env python3
"""HTTP submits that start jobs, under heartbeating nodes (issue 49).

Starts gantryd (SQLite) on loopback, one gantry-swarm speaking for --nodes emulated nodes
of 8 H100s (2 s heartbeats), and --agents real gantry-agent processes (8 emulated A100s
each, `--run-as agent`), optionally runs a finished workload first (--prefill jobs of
`true` spread over everything, waited for), then has --threads keep-alive HTTP clients
submit --submits CPU-only jobs (`true`) as fast as gantryd answers, while a sampler
times GET /healthz every 50 ms (it waits for the controller thread, so its latency is
that thread's). Waits until every submitted job ended, then prints one JSON object:

    (--gpus G: H100 jobs of G GPUs running `sleep --sleep` on the swarm's nodes instead)

    submits_per_s, healthz_p50_ms / p99 / max (sampled by a thread beside the submitters)
    and healthz_ext_* (the same from a process of its own, real-time priority as root),
    heartbeat_rtt_p99_ms (the swarm's, over
    the submit phase), gantryd_cpu_s (during the submits), batches and
    batches_over_25_50_100_ms (the controller thread's batches during the submits, and how
    many took longer), lease_misses, ended, errors

    python3 bench/submit_load.py --nodes 1024 --agents 0 --submits 4096
    python3 bench/submit_load.py --tiny      # CI: 8 nodes, 1 agent, 200 submits

Every loop is bounded in time; all processes are stopped at the end.
"""
import argparse, http.client, json, os, shutil, signal, subprocess, sys, tempfile, threading, time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from slurm_side_by_side import Server, pct, start_cluster, stop_cluster  # noqa: E402 (the side-by-side's)
TICK = os.sysconf('SC_CLK_TCK')


# GET /healthz every 50 ms until the stop file exists; the latencies (ms) as JSON.
EXTERNAL_SAMPLER = '''
import http.client, json, os, sys, time
port, out, stop = int(sys.argv[1]), sys.argv[2], sys.argv[3]
c, ms = http.client.HTTPConnection('127.0.0.1', port, timeout=30), []
while not os.path.exists(stop):
    t = time.perf_counter()
    c.request('GET', '/healthz')
    c.getresponse().read()
    ms.append((time.perf_counter() - t) * 1000)
    time.sleep(0.05)
json.dump(ms, open(out, 'w'))
'''


def cpu_s(pid):
    with open('/proc/%d/stat' % pid) as f:
        fields = f.read().rsplit(')', 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / float(TICK)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--build', default=os.path.join(ROOT, 'build', 'release'))
    ap.add_argument('--nodes', type=int, default=64)
    ap.add_argument('--agents', type=int, default=2)
    ap.add_argument('--prefill', type=int, default=0, help='jobs run to their end before the submits')
    ap.add_argument('--prefill-gpu', action='store_true', help='the prefill is GPU jobs and gangs (1 s each)')
    ap.add_argument('--submits', type=int, default=4000)
    ap.add_argument('--threads', type=int, default=8)
    ap.add_argument('--gpus', type=int, default=0, help='GPUs per submitted job (0: CPU-only `true`)')
    ap.add_argument('--sleep', type=float, default=5, help='how long a GPU job runs (the swarm reads `sleep N`)')
    ap.add_argument('--timeout', type=float, default=300)
    ap.add_argument('--tiny', action='store_true', help='CI: 8 nodes, 1 agent, 20 prefill, 200 submits')
    ap.add_argument('--keep', action='store_true', help='keep the work directory')
    ap.add_argument('--perf', help="record gantryd's submit phase with perf into this file")
    ap.add_argument('--sched', help="record gantryd's scheduler events in the submit phase (perf sched) into this "
                                    "file and print how long its controller thread (gantryd-ctl) waited for a CPU")
    ap.add_argument('--gantryd-flag', action='append', default=[], help='passed to gantryd')
    ap.add_argument('--in-step', action='store_true',
                    help="the swarm's nodes beat in step (gantry-swarm --in-step: the worst case)")
    a = ap.parse_args()
    if a.tiny:
        a.nodes, a.agents, a.prefill, a.submits, a.threads, a.timeout = 8, 1, 20, 200, 4, 120
    b = os.path.abspath(a.build)
    d = tempfile.mkdtemp(prefix='gantry-load-')
    procs, errors = [], []
    try:
        port, admin = start_cluster(b, d, a.nodes, a.agents, procs, a.gantryd_flag, up_within_s=120,
                                    swarm_flags=['--in-step'] if a.in_step else [])
        stats_path = os.path.join(d, 'swarm.json')
        srv = Server(port, admin)
        health = lambda: json.loads(srv.call('GET', '/healthz')[1])

        body = json.dumps({'queue': 'research', 'gpus': 0, 'command': ['true']} if not a.gpus else
                          {'queue': 'research', 'gpus': a.gpus, 'gpu_model': 'H100-80GB', 'vram_gb': 40,
                           'command': ['sleep', str(a.sleep)]})

        def drain(what):
            t_end = time.time() + a.timeout
            while time.time() < t_end:
                h = health()
                if h['jobs_pending'] == 0 and h['jobs_running'] == 0:
                    return True
                time.sleep(0.2)
            errors.append('%s: jobs still active after %.0f s' % (what, a.timeout))
            return False

        for i in range(a.prefill):
            # The side-by-side's mix on the swarm: 1, 2, 4 and 8 GPUs and 2-node gangs, 1 s.
            gpus, reps = [(1, 1), (2, 1), (4, 1), (8, 1), (8, 2)][i % 5] if a.prefill_gpu else (0, 1)
            pre = body if not a.prefill_gpu else json.dumps(
                {'queue': 'research', 'gpus': gpus, 'replicas': reps, 'gpu_model': 'H100-80GB', 'vram_gb': 40,
                 'command': ['sh', '-c', 'sleep 1']})
            st, data = srv.call('POST', '/v1/jobs', body=pre)
            if st != 201:
                errors.append('prefill submit %d %s' % (st, data[:200]))
        if a.prefill:
            drain('prefill')

        # The controller thread's batches during the submits (/healthz waits behind the one in
        # hand): how many took over 25, 50 and 100 ms, from gantry_controller_batch_seconds.
        def batch_buckets():
            st, metrics = srv.call('GET', '/metrics')
            le = {}
            for line in metrics.decode().splitlines() if st == 200 else []:
                if line.startswith('gantry_controller_batch_seconds_bucket{le="'):
                    le[line.split('"')[1]] = int(float(line.rsplit(' ', 1)[1]))
            return le

        swarm0 = json.load(open(stats_path)) if os.path.exists(stats_path) else {}
        le0 = batch_buckets()
        health_ms, stop = [], threading.Event()

        def sampler():
            c = http.client.HTTPConnection('127.0.0.1', port, timeout=30)
            while not stop.is_set():
                ts = time.time()
                srv.call('GET', '/healthz', conn=c)
                health_ms.append((time.time() - ts) * 1000)
                stop.wait(0.05)
            c.close()

        lock, counter = threading.Lock(), [0]

        def submitter():
            c = http.client.HTTPConnection('127.0.0.1', port, timeout=30)
            while True:
                with lock:
                    if counter[0] >= a.submits:
                        break
                    counter[0] += 1
                st, data = srv.call('POST', '/v1/jobs', body=body, conn=c)
                if st != 201:
                    errors.append('submit %d %s' % (st, data[:200]))
            c.close()

        th = threading.Thread(target=sampler, daemon=True)
        th.start()
        # The same sampling from a process of its own: the in-process sampler shares the
        # GIL with the submitters, so its figure also holds the time it waited for it.
        ext_out, ext_stop = os.path.join(d, 'healthz_ext.json'), os.path.join(d, 'healthz_ext.stop')
        # At real-time priority where it may (root), so its own waits for a CPU are not in it.
        rt = ['chrt', '-f', '10'] if os.geteuid() == 0 and shutil.which('chrt') else []
        ext = subprocess.Popen(rt + [sys.executable, '-c', EXTERNAL_SAMPLER, str(port), ext_out, ext_stop])
        perf = subprocess.Popen(['perf', 'record', '-F', '999', '--call-graph', 'dwarf,16384', '-o', a.perf, '-p',
                                 str(procs[0].pid)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) if a.perf else None
        sched = subprocess.Popen(['perf', 'sched', 'record', '-o', a.sched, '-p', str(procs[0].pid)],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) if a.sched else None
        if perf or sched:
            time.sleep(1)
        cpus0, t0 = [cpu_s(p.pid) for p in procs], time.time()
        ths = [threading.Thread(target=submitter) for _ in range(a.threads)]
        for t in ths:
            t.start()
        for t in ths:
            t.join()
        wall = time.time() - t0
        cpus = [cpu_s(p.pid) - c for p, c in zip(procs, cpus0)]
        cpu = cpus[0]
        stop.set()
        th.join(timeout=10)
        open(ext_stop, 'w').close()
        ext.wait(timeout=30)
        ext_ms = json.load(open(ext_out)) if os.path.exists(ext_out) else []
        if perf:
            perf.send_signal(signal.SIGINT)
            perf.wait(timeout=60)
        if sched:
            sched.send_signal(signal.SIGINT)
            sched.wait(timeout=60)
            # Per thread: run time, switches, average and worst wait from wakeup to running.
            lat = subprocess.run(['perf', 'sched', 'latency', '-i', a.sched, '--sort', 'max'],
                                 capture_output=True, text=True, timeout=300).stdout
            for line in lat.splitlines():
                if 'gantryd' in line:
                    print('sched: ' + ' '.join(line.split()))
        le1 = batch_buckets()
        batches = le1.get('+Inf', 0) - le0.get('+Inf', 0)
        over = {ms: batches - (le1.get(str(ms / 1000.0), 0) - le0.get(str(ms / 1000.0), 0)) for ms in (25, 50, 100)}
        time.sleep(1.2)  # the swarm rewrites its stats each second
        swarm1 = json.load(open(stats_path)) if os.path.exists(stats_path) else {}
        drain('submits')
        drained_s = time.time() - t0
        h = health()
        st, data = srv.call('GET', '/v1/jobs?all=1&limit=%d' % (a.submits + a.prefill + 10), timeout=120)
        listed = json.loads(data).get('jobs', []) if st == 200 else []
        on_agents = sum(1 for j in listed[:a.submits] if any(str(n).startswith('probe-') for n in j.get('nodes', [])))
        out = dict(nodes=a.nodes, agents=a.agents, prefill=a.prefill, submits=a.submits, threads=a.threads,
                   submits_per_s=round(a.submits / wall, 1), gantryd_cpu_s=round(cpu, 2),
                   swarm_cpu_s=round(cpus[1], 2) if a.nodes else None,
                   agents_cpu_s=round(sum(cpus[1 + (a.nodes > 0):]), 2),
                   healthz_p50_ms=pct(health_ms, 50), healthz_p99_ms=pct(health_ms, 99),
                   healthz_max_ms=max(health_ms) if health_ms else None,
                   healthz_ext_p50_ms=pct(ext_ms, 50), healthz_ext_p99_ms=pct(ext_ms, 99),
                   healthz_ext_max_ms=max(ext_ms) if ext_ms else None, healthz_ext_samples=len(ext_ms),
                   heartbeat_rtt_p99_ms=swarm1.get('heartbeat_rtt_ms', {}).get('p99'),
                   batches=batches, batches_over_25_50_100_ms=[over[25], over[50], over[100]],
                   lease_misses=swarm1.get('lease_misses', 0) - swarm0.get('lease_misses', 0),
                   on_agents_of_last=on_agents, all_ended_s=round(drained_s, 2),
                   active_after=h['jobs_pending'] + h['jobs_running'], errors=errors[:10])
        for k in ('healthz_p50_ms', 'healthz_p99_ms', 'healthz_max_ms', 'healthz_ext_p50_ms', 'healthz_ext_p99_ms',
                  'healthz_ext_max_ms'):
            if out[k] is not None:
                out[k] = round(out[k], 1)
        print(json.dumps(out))
        return 1 if errors or out['active_after'] else 0
    finally:
        stop_cluster(procs)
        if not a.keep:
            shutil.rmtree(d, ignore_errors=True)
        else:
            print('kept ' + d, file=sys.stderr)


if __name__ == '__main__':
    sys.exit(main())
