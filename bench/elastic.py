#!/usr/bin/env python3
"""Elastic gangs against the same jobs rigid (issue 46, section 2).

Each seed's workload of the policy grid (bench/policy_grid.py) is generated with `gantry gen
--elastic SHARE`: that share of its checkpointing whole-GPU gangs get min_replicas, half
their replicas; the generator draws it from a stream of its own, so the same trace with
min_replicas taken out is the workload rigid. Both replay under the default policy and the
table gives, per workload, elastic over rigid: mean JCT, mean queueing delay (JCT less run
time at full size; compared where the rigid delay is at least 60 s), utilisation, the
elastic jobs' own mean JCT, and lost work; with the resizes made. A run time in the trace
is at the full size and progress is linear in workers, so an elastic job that runs smaller
runs longer: JCT counts that.

    bench/elastic.py [--build DIR] [--share F] [--half tune|heldout|all] [--seeds 1,2,...]
                     [--max-gpus N] [--jobs N] [--out DIR] [--tiny]

Writes OUT/results.json and OUT/tables.md and prints the table. --tiny: the CI check that
the script still works end to end (two small workloads); exits 1 unless every row is there.
"""
import argparse
import concurrent.futures
import json
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import policy_grid  # noqa: E402

DELAY_FLOOR_S = policy_grid.DELAY_FLOOR_S


def replay(opts, d, trace, name):
    failures = ["--failures", f"{d}/failures.jsonl"] if os.path.exists(f"{d}/failures.jsonl") else []
    subprocess.run([opts.gantry, "sim", "--config", f"{d}/cluster.yaml", "--trace", trace, *failures,
                    "--policy", "gantry", "--report", f"{d}/{name}.json", "--events",
                    f"{d}/{name}.events.jsonl", "--no-wait-events", "-q"], check=True)
    ends = {}
    for e in map(json.loads, open(f"{d}/{name}.events.jsonl")):
        if e["type"] == "finish":
            ends[e["job"]] = e["t"]
    resizes = sum(1 for e in map(json.loads, open(f"{d}/{name}.events.jsonl")) if e["type"] == "resize")
    os.remove(f"{d}/{name}.events.jsonl")
    return json.load(open(f"{d}/{name}.json")), ends, resizes


def run_workload(w, opts):
    d = os.path.join(opts.out, f"grid-s{w['seed']}")
    os.makedirs(d, exist_ok=True)
    subprocess.run([opts.gantry, "gen", "--seed", str(w["seed"]), *w["args"], "--elastic",
                    str(opts.share), "--out", d, "-q"], check=True)
    jobs = [json.loads(line) for line in open(f"{d}/trace.jsonl")]
    elastic = {j["id"] for j in jobs if "min_replicas" in j}
    with open(f"{d}/rigid.jsonl", "w") as f:
        for j in jobs:
            j.pop("min_replicas", None)
            f.write(json.dumps(j, separators=(",", ":")) + "\n")
    submit = {j["id"]: j["submit"] for j in jobs}
    duration = {j["id"]: j["duration"] for j in jobs}
    gpus = policy_grid.capacity(f"{d}/cluster.yaml")
    out = {k: w[k] for k in ("seed", "gpus", "load", "gang_jobs", "checkpoint_s") if k in w}
    out.update(jobs=len(jobs), elastic_jobs=len(elastic))
    for name, trace in (("rigid", f"{d}/rigid.jsonl"), ("elastic", f"{d}/trace.jsonl")):
        r, ends, resizes = replay(opts, d, trace, name)
        busy = r["gpu_utilization_pct"] / 100 * gpus * r["makespan_s"] / 3600
        jct = [ends[j] - submit[j] for j in ends]
        own = [ends[j] - submit[j] for j in ends if j in elastic]
        out[name] = {"jct_s": sum(jct) / len(jct) if jct else 0,
                     "delay_s": (sum(jct) - sum(duration[j] for j in ends)) / len(jct) if jct else 0,
                     "util_pct": r["gpu_utilization_pct"],
                     "lost_pct": 100 * r["lost_gpu_hours"] / busy if busy else 0,
                     "elastic_jct_s": sum(own) / len(own) if own else None,
                     "finished": len(ends), "resizes": resizes}
    e, g = out["elastic"], out["rigid"]
    out["jct_ratio"] = e["jct_s"] / g["jct_s"] if g["jct_s"] else None
    out["delay_ratio"] = e["delay_s"] / g["delay_s"] if g["delay_s"] >= DELAY_FLOOR_S else None
    out["util_ratio"] = e["util_pct"] / g["util_pct"] if g["util_pct"] else None
    out["own_jct_ratio"] = (e["elastic_jct_s"] / g["elastic_jct_s"]
                            if e["elastic_jct_s"] and g["elastic_jct_s"] else None)
    return out


def table(results):
    def f(x, spec=".3f"):
        return "-" if x is None else format(x, spec)
    lines = ["| seed | GPUs | load | jobs | elastic jobs | resizes | JCT ratio | delay ratio | "
             "util ratio | elastic jobs' JCT ratio | lost % rigid / elastic |",
             "|" + "---|" * 11]
    for r in sorted(results, key=lambda r: r["seed"]):
        lines.append(f"| {r['seed']} | {r['gpus']} | {r.get('load') or '-'} | {r['jobs']} | "
                     f"{r['elastic_jobs']} | {r['elastic']['resizes']} | {f(r['jct_ratio'])} | "
                     f"{f(r['delay_ratio'])} | {f(r['util_ratio'])} | {f(r['own_jct_ratio'])} | "
                     f"{r['rigid']['lost_pct']:.2f} / {r['elastic']['lost_pct']:.2f} |")
    lines += ["", "| mean (± standard error) | JCT ratio | delay ratio | util ratio | "
              "elastic jobs' JCT ratio |", "|---|---|---|---|---|",
              "| elastic / rigid | " + " | ".join(
                  policy_grid.fmt(policy_grid.mean_se([r[k] for r in results]))
                  for k in ("jct_ratio", "delay_ratio", "util_ratio", "own_jct_ratio")) + " |"]
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default="build/release")
    ap.add_argument("--share", type=float, default=0.5)
    ap.add_argument("--half", choices=["tune", "heldout", "all"], default="all")
    ap.add_argument("--seeds")
    ap.add_argument("--max-gpus", type=int)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--out", default="/tmp/gantry-elastic")
    ap.add_argument("--tiny", action="store_true")
    opts = ap.parse_args()
    os.chdir(policy_grid.ROOT)
    opts.gantry = f"{opts.build}/src/gantry"
    if not os.access(opts.gantry, os.X_OK):
        sys.exit(f"elastic.py: no {opts.gantry} (build the gantry target first)")
    halves = policy_grid.split()
    seeds = ([int(s) for s in opts.seeds.split(",")] if opts.seeds else
             sorted(halves["tune"] + halves["heldout"]) if opts.half == "all" else halves[opts.half])
    workloads = [policy_grid.grid_workload(s) for s in seeds]
    if opts.max_gpus:
        workloads = [w for w in workloads if w["gpus"] <= opts.max_gpus]
    if opts.tiny:  # two small workloads over two days: a check, not a measurement
        workloads = [policy_grid.grid_workload(s) for s in (seeds if opts.seeds else [1, 2])][:2]
        for w in workloads:
            a = w["args"]
            a[a.index("--days") + 1] = "2"
            a[a.index("--gpus") + 1] = "64"
            w["gpus"] = 64
            a[a.index("--gang-nodes") + 1] = "2,4"
            a[a.index("--leaf-nodes") + 1] = "4"
    os.makedirs(opts.out, exist_ok=True)
    with concurrent.futures.ThreadPoolExecutor(opts.jobs) as pool:
        results = list(pool.map(lambda w: run_workload(w, opts), workloads))
    json.dump(results, open(f"{opts.out}/results.json", "w"), indent=1)
    text = table(results)
    open(f"{opts.out}/tables.md", "w").write(text + "\n")
    print(text)
    if opts.tiny:
        rows = [line for line in text.split("\n") if re.match(r"\| \d+ \|", line)]
        if len(rows) != len(workloads):
            sys.exit("elastic.py --tiny: a workload's row is missing")
    return 0


if __name__ == "__main__":
    sys.exit(main())
