#!/usr/bin/env python3
"""Elastic gangs on the Pollux workloads, with their measured throughput profiles (issue 46,
section 2).

Each of Pollux's eight `workloads/workload-N.csv` (160 jobs, 8 hours, load 1.0; the
shared traces' pollux-workloads) is converted twice with the Sia artifact's profiles:
rigid, as the user asked, and with `--elastic CKPT`: every job of several workers (gangs
of up to 4 GPUs per 4-GPU node) may run with one worker up to all of them, at the speed its
profile measures at each size (the trace's `speedup`), checkpointing every CKPT s. Both
replay under the default policy; every run is checked by gantry-check. The table gives the
mean JCT of each, and beside them the means Pollux's artifact publishes for the same files
(its `results-jobload/{pollux,tiresias,optimus}-1.0/summary.json`).

Not like for like: Pollux also adapts each job's batch size and learning rate (goodput),
and its JCTs come from its own simulator (60 s rounds, restart delays), where ours keep
the batch the user asked, resize only at checkpoints and lose nothing doing so.

    bench/elastic_pollux.py [--build DIR] [--checkpoint-s 60] [--out DIR]
"""
import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
TRACES = os.path.normpath(os.path.join(HERE, "..", "..", "shared", "traces"))


def run(opts, csv, name, extra):
    d = os.path.join(opts.out, name)
    subprocess.run([opts.gantry, "trace", "convert", "--format", "pollux", csv, "--profiles",
                    os.path.join(TRACES, "sia-workloads", "profiles"), *extra, "--out", d],
                   check=True, capture_output=True)
    subprocess.run([opts.gantry, "sim", "--config", f"{d}/cluster.yaml", "--trace", f"{d}/trace.jsonl",
                    "--policy", "gantry", "--report", f"{d}/report.json", "--events",
                    f"{d}/events.jsonl", "--no-wait-events", "-q"], check=True)
    check = subprocess.run([opts.check, "--config", f"{d}/cluster.yaml", "--trace", f"{d}/trace.jsonl",
                            "--events", f"{d}/events.jsonl", "--report", f"{d}/report.json", "--max", "5"],
                           capture_output=True, text=True)
    if check.returncode != 0:
        sys.exit(f"gantry-check on {d}: {check.stdout}{check.stderr}")
    r = json.load(open(f"{d}/report.json"))
    elastic = sum(1 for line in open(f"{d}/trace.jsonl") if '"min_replicas"' in line)
    return {"jct_s": r["jct_s"]["mean"], "util_pct": r["gpu_utilization_pct"],
            "resizes": r.get("resizes", 0), "elastic_jobs": elastic}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(HERE, "..", "build", "release"))
    ap.add_argument("--checkpoint-s", type=float, default=60)
    ap.add_argument("--out", default="/tmp/gantry-elastic-pollux")
    opts = ap.parse_args()
    opts.gantry = os.path.join(opts.build, "src", "gantry")
    opts.check = os.path.join(opts.build, "tests", "checker", "gantry-check")
    os.makedirs(opts.out, exist_ok=True)
    published = {}
    for policy in ("pollux", "tiresias", "optimus"):
        path = os.path.join(TRACES, "pollux-workloads", "expected_results", "results-jobload",
                            f"{policy}-1.0", "summary.json")
        published[policy] = json.load(open(path))["avgs"]
    rows = []
    for n in range(1, 9):
        csv = os.path.join(TRACES, "pollux-workloads", "workloads", f"workload-{n}.csv")
        rigid = run(opts, csv, f"workload-{n}-rigid", [])
        elastic = run(opts, csv, f"workload-{n}-elastic", ["--elastic", str(opts.checkpoint_s)])
        rows.append({"workload": n, "rigid": rigid, "elastic": elastic,
                     **{p: published[p][f"workload-{n}"] for p in published}})
    json.dump(rows, open(os.path.join(opts.out, "results.json"), "w"), indent=1)
    print("| workload | elastic jobs | resizes | Gantry rigid JCT s | Gantry elastic JCT s | elastic/rigid "
          "| utilisation % rigid / elastic | Pollux's JCT s | Tiresias' | Optimus' |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    mean = lambda k: sum(k(r) for r in rows) / len(rows)
    for r in rows:
        print(f"| {r['workload']} | {r['elastic']['elastic_jobs']} | {r['elastic']['resizes']} "
              f"| {r['rigid']['jct_s']:.0f} | {r['elastic']['jct_s']:.0f} "
              f"| {r['elastic']['jct_s'] / r['rigid']['jct_s']:.3f} "
              f"| {r['rigid']['util_pct']:.1f} / {r['elastic']['util_pct']:.1f} "
              f"| {r['pollux']:.0f} | {r['tiresias']:.0f} | {r['optimus']:.0f} |")
    print(f"| mean | | | {mean(lambda r: r['rigid']['jct_s']):.0f} | {mean(lambda r: r['elastic']['jct_s']):.0f} "
          f"| {mean(lambda r: r['elastic']['jct_s'] / r['rigid']['jct_s']):.3f} "
          f"| {mean(lambda r: r['rigid']['util_pct']):.1f} / {mean(lambda r: r['elastic']['util_pct']):.1f} "
          f"| {mean(lambda r: r['pollux']):.0f} | {mean(lambda r: r['tiresias']):.0f} "
          f"| {mean(lambda r: r['optimus']):.0f} |")


if __name__ == "__main__":
    main()
