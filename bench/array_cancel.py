#!/usr/bin/env python3
"""How long gantryd's controller takes to cancel a big throttled array.

gantryd on SQLite, no agents; one CPU-only array of 10,000 tasks (`--array 0-9999%4`, the
most one request takes), then `gantry cancel ARRAY`, timed (the controller answers when
every task is cancelled). Each held task's end used to scan the whole array for a task to
release (quadratic in the tasks).

    python3 bench/array_cancel.py [--build build/release]
"""
import argparse
import os
import subprocess
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build", "release"))
    args = ap.parse_args()
    gantryd = os.path.join(os.path.abspath(args.build), "src", "gantryd")
    gantry = os.path.join(os.path.abspath(args.build), "src", "gantry")
    d = tempfile.mkdtemp(prefix="gantry-array-cancel.")
    with open(os.path.join(d, "cluster.yaml"), "w") as f:
        f.write("cluster: c\npools:\n  - name: h100\n    count: 4\n    gpus: 8\n"
                "    gpu_model: H100-80GB\nqueues:\n  - name: research\n")
    db = os.path.join(d, "state.db")

    def run(argv):
        return subprocess.run(argv, capture_output=True, text=True)

    run([gantryd, "init", "--db", db])
    token = run([gantryd, "token", "create", "--db", db, "--team", "a", "--queues",
                 "research"]).stdout.strip()
    port_file = os.path.join(d, "port")
    proc = subprocess.Popen([gantryd, "--config", os.path.join(d, "cluster.yaml"), "--db", db,
                             "--listen", "127.0.0.1:0", "--port-file", port_file],
                            stderr=open(os.path.join(d, "gantryd.log"), "w"))
    try:
        while not (os.path.exists(port_file) and os.path.getsize(port_file) > 0):
            time.sleep(0.1)
        url = "http://127.0.0.1:" + open(port_file).read().strip()

        def cli(*a):
            return run([gantry, "--server", url, "--token", token] + list(a))

        r = cli("submit", "--id", "arr", "--queue", "research", "--gpus", "0", "--array",
                "0-9999%4", "--", "true")
        if r.returncode != 0:
            raise SystemExit(r.stderr)
        t = time.time()
        r = cli("cancel", "arr")
        print("cancel of a 10,000-task array (%%4): %.2f s, rc %d: %s"
              % (time.time() - t, r.returncode, r.stdout.strip()))
    finally:
        proc.terminate()
        proc.wait()


if __name__ == "__main__":
    main()
