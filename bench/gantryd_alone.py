"""gantryd by itself for a benchmark: SQLite in a new temporary directory, a 4-node H100
cluster config with one queue (`research`), no agents; a team token for the CLI.

    with GantrydAlone(build, ["--recent-done", "1"]) as g:
        g.cli("submit", ...)     # gantry --server URL --token TOKEN ...
        g.url                    # http://127.0.0.1:PORT
"""
import os
import subprocess
import tempfile
import time


def run(argv):
    return subprocess.run(argv, capture_output=True, text=True)


class GantrydAlone:
    def __init__(self, build, extra=()):
        self.bin_dir = os.path.join(os.path.abspath(build), "src")
        self.extra = list(extra)

    def __enter__(self):
        d = tempfile.mkdtemp(prefix="gantry-bench.")
        with open(os.path.join(d, "cluster.yaml"), "w") as f:
            f.write("cluster: bench\npools:\n  - name: h100\n    count: 4\n    gpus: 8\n"
                    "    gpu_model: H100-80GB\nqueues:\n  - name: research\n")
        db = os.path.join(d, "state.db")
        gantryd = os.path.join(self.bin_dir, "gantryd")
        run([gantryd, "init", "--db", db])
        self.token = run([gantryd, "token", "create", "--db", db, "--team", "a", "--queues",
                          "research"]).stdout.strip()
        port_file = os.path.join(d, "port")
        self.proc = subprocess.Popen(
            [gantryd, "--config", os.path.join(d, "cluster.yaml"), "--db", db, "--listen",
             "127.0.0.1:0", "--port-file", port_file] + self.extra,
            stderr=open(os.path.join(d, "gantryd.log"), "w"))
        while not (os.path.exists(port_file) and os.path.getsize(port_file) > 0):
            if self.proc.poll() is not None:
                raise SystemExit("gantryd ended; see " + os.path.join(d, "gantryd.log"))
            time.sleep(0.1)
        self.url = "http://127.0.0.1:" + open(port_file).read().strip()
        return self

    def cli(self, *args):
        return run([os.path.join(self.bin_dir, "gantry"), "--server", self.url, "--token",
                    self.token] + list(args))

    def __exit__(self, *exc):
        self.proc.terminate()
        self.proc.wait()
