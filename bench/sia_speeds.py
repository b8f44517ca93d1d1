#!/usr/bin/env python3
"""Sia's heterogeneous workloads with a speed per GPU type (issue 46, section 2).

Each of Sia's workload files (`sia-workloads/philly/workload-{1..8}.csv` and
`saturn/workload-{1..10}.csv`, 160 jobs over 8 hours each) is converted with the Sia
artifact's profiles (`gantry trace convert --format sia --profiles`): Sia's default cluster
of 64 GPUs (6 nodes of 4 T4s, 3 of 8 RTX 2080 Tis, 2 of 8 A100s), each job's run time from
the T4 profile and its speed on the RTX and A100 nodes from their own profiles
(`speed_by_model`). Each replays under fifo and gantry twice: with the speeds (a job takes
the fastest model it fits on now and runs its duration over that model's speed), and
with them taken out of the trace (every model as fast as a T4: what the converter wrote
before), and converted with `--elastic 60` too (gangs elastic down to one worker at their
profile's speed per size, checkpointing every 60 s) under gantry. Every run is checked by
gantry-check. The table gives the mean JCT and the utilisation of each.

Not like for like with Sia's published figures: Sia also picks each job's GPU count and
batch size (goodput, adaptive), re-plans every 60 s round and pays restart costs; here a
job keeps the GPUs and batch its user asked and never moves once placed.

    bench/sia_speeds.py [--build DIR] [--out DIR] [--sets philly,saturn]
"""
import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
TRACES = os.path.normpath(os.path.join(HERE, "..", "..", "shared", "traces"))


def replay(opts, d, policy):
    report, events = f"{d}/{policy}.json", f"{d}/{policy}.events.jsonl"
    subprocess.run([opts.gantry, "sim", "--config", f"{d}/cluster.yaml", "--trace", f"{d}/trace.jsonl",
                    "--policy", policy, "--report", report, "--events", events, "--no-wait-events", "-q"],
                   check=True)
    check = subprocess.run([opts.check, "--config", f"{d}/cluster.yaml", "--trace", f"{d}/trace.jsonl",
                            "--events", events, "--report", report, "--max", "5"],
                           capture_output=True, text=True)
    if check.returncode != 0:
        sys.exit(f"gantry-check on {d} ({policy}): {check.stdout}{check.stderr}")
    r = json.load(open(report))
    return {"jct_s": r["jct_s"]["mean"], "util_pct": r["gpu_utilization_pct"]}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(HERE, "..", "build", "release"))
    ap.add_argument("--out", default="/tmp/gantry-sia-speeds")
    ap.add_argument("--sets", default="philly,saturn")
    opts = ap.parse_args()
    opts.gantry = os.path.join(opts.build, "src", "gantry")
    opts.check = os.path.join(opts.build, "tests", "checker", "gantry-check")
    rows = []
    for name in opts.sets.split(","):
        folder = os.path.join(TRACES, "sia-workloads", name)
        files = sorted((f for f in os.listdir(folder) if f.endswith(".csv")),
                       key=lambda f: int(f.split("-")[1].split(".")[0]))
        for f in files:
            tag = f"{name}-{f[:-4]}"
            fast = os.path.join(opts.out, tag, "speeds")
            flat = os.path.join(opts.out, tag, "flat")
            subprocess.run([opts.gantry, "trace", "convert", "--format", "sia", os.path.join(folder, f),
                            "--profiles", os.path.join(TRACES, "sia-workloads", "profiles"), "--out", fast],
                           check=True, capture_output=True)
            os.makedirs(flat, exist_ok=True)
            with open(f"{fast}/cluster.yaml") as a, open(f"{flat}/cluster.yaml", "w") as b:
                b.write(a.read())
            with_speeds = 0
            with open(f"{fast}/trace.jsonl") as a, open(f"{flat}/trace.jsonl", "w") as b:
                for line in a:
                    job = json.loads(line)
                    with_speeds += "speed_by_model" in job
                    job.pop("speed_by_model", None)
                    b.write(json.dumps(job) + "\n")
            # Elastic too (--elastic 60): gangs run from one worker up, at their profile's
            # speed at each size, and at their models' speeds.
            elastic = os.path.join(opts.out, tag, "elastic")
            subprocess.run([opts.gantry, "trace", "convert", "--format", "sia", os.path.join(folder, f),
                            "--profiles", os.path.join(TRACES, "sia-workloads", "profiles"),
                            "--elastic", "60", "--out", elastic], check=True, capture_output=True)
            row = {"workload": tag, "jobs_with_speeds": with_speeds,
                   "elastic_jobs": sum('"min_replicas"' in line for line in open(f"{elastic}/trace.jsonl"))}
            for policy in ("fifo", "gantry"):
                row[policy] = {"speeds": replay(opts, fast, policy), "flat": replay(opts, flat, policy)}
            row["gantry"]["elastic"] = replay(opts, elastic, "gantry")
            rows.append(row)
    os.makedirs(opts.out, exist_ok=True)
    json.dump(rows, open(os.path.join(opts.out, "results.json"), "w"), indent=1)
    print("| workload | jobs with speeds | gantry JCT s: speeds / T4 everywhere | fifo JCT s: speeds / T4 everywhere "
          "| gantry utilisation %: speeds / T4 everywhere | elastic jobs | gantry JCT s elastic, with speeds |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        g, f = r["gantry"], r["fifo"]
        print(f"| {r['workload']} | {r['jobs_with_speeds']} | {g['speeds']['jct_s']:.0f} / {g['flat']['jct_s']:.0f} "
              f"| {f['speeds']['jct_s']:.0f} / {f['flat']['jct_s']:.0f} "
              f"| {g['speeds']['util_pct']:.1f} / {g['flat']['util_pct']:.1f} "
              f"| {r['elastic_jobs']} | {g['elastic']['jct_s']:.0f} |")
    for name in opts.sets.split(","):
        part = [r for r in rows if r["workload"].startswith(name + "-")]
        if not part:
            continue
        mean = lambda k: sum(k(r) for r in part) / len(part)
        ratio = [r["gantry"]["speeds"]["jct_s"] / r["gantry"]["flat"]["jct_s"] for r in part]
        m = sum(ratio) / len(ratio)
        se = (sum((x - m) ** 2 for x in ratio) / (len(ratio) - 1) / len(ratio)) ** 0.5 if len(ratio) > 1 else 0
        el = [r["gantry"]["elastic"]["jct_s"] / r["gantry"]["speeds"]["jct_s"] for r in part]
        em = sum(el) / len(el)
        ese = (sum((x - em) ** 2 for x in el) / (len(el) - 1) / len(el)) ** 0.5 if len(el) > 1 else 0
        print(f"| {name} mean | | {mean(lambda r: r['gantry']['speeds']['jct_s']):.0f} / "
              f"{mean(lambda r: r['gantry']['flat']['jct_s']):.0f} (ratio {m:.3f} ± {se:.3f}) "
              f"| {mean(lambda r: r['fifo']['speeds']['jct_s']):.0f} / {mean(lambda r: r['fifo']['flat']['jct_s']):.0f} "
              f"| {mean(lambda r: r['gantry']['speeds']['util_pct']):.1f} / "
              f"{mean(lambda r: r['gantry']['flat']['util_pct']):.1f} "
              f"| | {mean(lambda r: r['gantry']['elastic']['jct_s']):.0f} (over rigid with speeds {em:.3f} ± {ese:.3f}) |")


if __name__ == "__main__":
    main()
