#!/usr/bin/env python3
"""How long gantryd's controller takes to cancel a big throttled array.

gantryd on SQLite, no agents (bench/gantryd_alone.py); one CPU-only array of 10,000 tasks
(`--array 0-9999%4`, the most one request takes), then `gantry cancel ARRAY`, timed (the
controller answers when every task is cancelled). Each held task's end used to scan the
whole array for a task to release (quadratic in the tasks).

    python3 bench/array_cancel.py [--build build/release]
"""
import argparse
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gantryd_alone import GantrydAlone  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build", "release"))
    args = ap.parse_args()
    with GantrydAlone(args.build) as g:
        r = g.cli("submit", "--id", "arr", "--queue", "research", "--gpus", "0", "--array",
                  "0-9999%4", "--", "true")
        if r.returncode != 0:
            raise SystemExit(r.stderr)
        t = time.time()
        r = g.cli("cancel", "arr")
        print("cancel of a 10,000-task array (%%4): %.2f s, rc %d: %s"
              % (time.time() - t, r.returncode, r.stdout.strip()))


if __name__ == "__main__":
    main()
