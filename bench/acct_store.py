#!/usr/bin/env python3
"""What `gantry acct` costs when its window reaches past the jobs gantryd keeps in memory.

gantryd on SQLite (bench/gantryd_alone.py) with `--recent-done 1` (so every ended job
but the last is read from the store), no agents; N CPU-only jobs made as arrays of 5,000 tasks (at most one running at
once, none do: no agents) and cancelled, so N ended jobs are in the store. Then one
`gantry acct -S 1h -X` reads them all back (GET /v1/jobs?all=1&ended_since=...), while a
probe asks /healthz every 50 ms: its worst answer is how long the controller thread was
busy with the read (it answers /healthz between requests).

    python3 bench/acct_store.py [--build build/release] [--jobs 20000]

Prints the time to make the jobs, acct's rows and time, and /healthz's worst and median
latency during it. A few seconds per 10,000 jobs.
"""
import argparse
import os
import sys
import threading
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gantryd_alone import GantrydAlone  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build", "release"))
    ap.add_argument("--jobs", type=int, default=20000, help="ended jobs in the store (a multiple of 5,000)")
    args = ap.parse_args()
    with GantrydAlone(args.build, ["--recent-done", "1"]) as g:
        t = time.time()
        for i in range(0, args.jobs, 5000):
            for r in (g.cli("submit", "--id", "f%d" % i, "--queue", "research", "--gpus", "0",
                            "--array", "0-4999%1", "--", "true"), g.cli("cancel", "f%d" % i)):
                if r.returncode != 0:
                    sys.exit("making the jobs: " + r.stderr)
        print("%d ended jobs made in %.1f s" % (args.jobs, time.time() - t), flush=True)
        time.sleep(2)
        latencies, stop = [], threading.Event()

        def probe():
            while not stop.is_set():
                t0 = time.time()
                urllib.request.urlopen(g.url + "/healthz", timeout=60).read()
                latencies.append(time.time() - t0)
                time.sleep(0.05)

        prober = threading.Thread(target=probe)
        prober.start()
        time.sleep(1)
        t = time.time()
        r = g.cli("acct", "-S", "1h", "-X", "-n", "-P", "-o", "JobID")
        took = time.time() - t
        time.sleep(0.5)
        stop.set()
        prober.join()
        latencies.sort()
        print("gantry acct: %d rows in %.2f s (rc %d)%s; /healthz during it: worst %.3f s, median %.3f s"
              % (len(r.stdout.splitlines()), took, r.returncode,
                 (", said: " + r.stderr.strip()) if r.stderr.strip() else "",
                 latencies[-1], latencies[len(latencies) // 2]))


if __name__ == "__main__":
    main()
