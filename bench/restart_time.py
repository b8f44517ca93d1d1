#!/usr/bin/env python3
"""How long gantryd takes to come back after a kill -9 with a full store (issue 47 B5).

Starts gantryd (SQLite) on loopback with one gantry-swarm speaking for --nodes emulated
nodes (8 H100s each), runs --ended CPU-only jobs to their end (the store and memory keep
them: the last 10,000 ended are read back), then starts --running 1-GPU jobs that sleep
an hour, kills gantryd with SIGKILL and starts it again on the same database and port.
The same read happens after a store outage in which a batch failed midway (ReadBack).
Prints one JSON line:
    restore_ms (gantryd's own figure: its "restored from the store" log line), first_answer_s
    (start to the first /healthz answer), healthy_s (to /healthz 200), readopted_s (to every
    node up and every running job running again), readopted (jobs), in_memory (jobs read),
    rss_mb (gantryd's after it).
"""
import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from slurm_side_by_side import ROOT, Server, start_cluster, stop_cluster  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--build', default=os.path.join(ROOT, 'build', 'release'))
    ap.add_argument('--nodes', type=int, default=256)
    ap.add_argument('--ended', type=int, default=10000, help='CPU-only jobs run to their end first')
    ap.add_argument('--running', type=int, default=2048, help='1-GPU jobs running at the kill')
    ap.add_argument('--threads', type=int, default=8)
    ap.add_argument('--tiny', action='store_true', help='CI: 8 nodes, 50 ended, 16 running')
    a = ap.parse_args()
    if a.tiny:
        a.nodes, a.ended, a.running = 8, 50, 16
    if a.running > 8 * a.nodes:
        ap.error('--running: at most 8 per node')
    b = os.path.abspath(a.build)
    d = tempfile.mkdtemp(prefix='gantry-restart-')
    procs, errors = [], []
    try:
        port, admin = start_cluster(b, d, a.nodes, 0, procs, up_within_s=120)
        srv = Server(port, admin)
        health = lambda: json.loads(srv.call('GET', '/healthz', token=False)[1])

        def submit(body, count):
            left = [count]
            lock = threading.Lock()

            def worker():
                while True:
                    with lock:
                        if left[0] == 0:
                            return
                        left[0] -= 1
                    st, data = srv.call('POST', '/v1/jobs', body=body)
                    if st != 201:
                        errors.append('submit %d %s' % (st, data[:200]))
            ths = [threading.Thread(target=worker) for _ in range(a.threads)]
            for t in ths:
                t.start()
            for t in ths:
                t.join()

        def wait_for(what, cond, timeout=600):
            t_end = time.time() + timeout
            while time.time() < t_end:
                try:
                    if cond():
                        return True
                except (OSError, ValueError):
                    pass
                time.sleep(0.05)
            errors.append('%s: not within %d s' % (what, timeout))
            return False

        submit(json.dumps({'queue': 'research', 'gpus': 0, 'command': ['true']}), a.ended)
        wait_for('ended jobs', lambda: health()['jobs_pending'] + health()['jobs_running'] == 0)
        submit(json.dumps({'queue': 'research', 'gpus': 1, 'gpu_model': 'H100-80GB', 'vram_gb': 40,
                           'command': ['sleep', '3600']}), a.running)
        wait_for('running jobs', lambda: health()['jobs_running'] == a.running)

        # The same command line, port fixed so the swarm finds it again.
        old = procs[0]
        args = list(old.args)
        args[args.index('127.0.0.1:0')] = '127.0.0.1:%d' % port
        old.send_signal(signal.SIGKILL)
        old.wait()
        log_path = os.path.join(d, 'gantryd-2.log')
        t0 = time.time()
        procs[0] = subprocess.Popen(args, stderr=open(log_path, 'w'))
        first = healthy = readopted = None

        def probe():
            nonlocal first, healthy
            st, body = srv.call('GET', '/healthz', token=False, timeout=5)
            first = first or time.time() - t0
            if st == 200:
                healthy = healthy or time.time() - t0
                h = json.loads(body)
                return h['nodes_up'] == a.nodes and h['jobs_running'] == a.running
            return False
        if wait_for('re-adopted', probe, timeout=120):
            readopted = time.time() - t0
        log = open(log_path).read()
        m = re.search(r'restored from the store.*', log)
        fields = dict(re.findall(r'(\w+)=("[^"]*"|\S+)', m.group(0))) if m else {}
        rss = None
        with open('/proc/%d/status' % procs[0].pid) as f:
            for line in f:
                if line.startswith('VmRSS:'):
                    rss = int(line.split()[1]) // 1024
        out = dict(nodes=a.nodes, ended=a.ended, running=a.running,
                   restore_ms=float(fields['ms']) if 'ms' in fields else None,
                   in_memory=int(fields['in_memory']) if 'in_memory' in fields else None,
                   readopted=int(fields['running_readopted']) if 'running_readopted' in fields else None,
                   first_answer_s=round(first, 3) if first else None,
                   healthy_s=round(healthy, 3) if healthy else None,
                   readopted_s=round(readopted, 3) if readopted else None, rss_mb=rss, errors=errors[:10])
        print(json.dumps(out))
        return 1 if errors or out['readopted'] != a.running else 0
    finally:
        stop_cluster(procs)
        shutil.rmtree(d, ignore_errors=True)


if __name__ == '__main__':
    sys.exit(main())
