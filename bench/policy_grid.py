#!/usr/bin/env python3
"""The policy grid (issue 46): the default policy against fifo on 64 generated workloads
nobody tuned for, split by seed into a tuning half and a held-out half before any was run
(bench/policy_grid/split.txt).

Each seed draws one workload from the grid (`grid_workload`): 32 to 1,024 H100 GPUs in
leaves, gangs of up to half the cluster making 0-50% of the jobs, load 0.8-1.6 (half of
the draws between 0.9 and 1.1), checkpoint intervals from none to an hour, with and
without critical inference and best-effort work. `gantry gen` writes it, `gantry sim`
replays it under fifo and under gantry, and each workload gives, as ratios to fifo's:
mean queueing delay (mean JCT less the mean run time; compared only where fifo's is at
least 60 s) and utilisation; and gantry's lost work, the report's `lost_gpu_hours` over
its busy GPU-hours (fifo loses work only to failures).

    bench/policy_grid.py [--build DIR] [--gantry BIN] [--gen-gantry BIN] [--out DIR]
                         [--half tune|heldout|all] [--seeds 1,2,...] [--max-gpus N]
                         [--shapes | --public [TRACES]]
                         [--set "KEY: VALUE"]... [--order QUEUE=ORDER]... [--jobs N]
                         [--baseline FILE] [--tiny]

  --build       build folder with src/gantry (default build/release)
  --gantry      the binary that runs `sim` (default BUILD/src/gantry); an older build
                replays the same files (the bisect of issue 46)
  --gen-gantry  the binary that runs `gen` (default BUILD/src/gantry)
  --out         work folder (default /tmp/gantry-policy-grid)
  --half        which seeds of the split (default tune; `all`: both)
  --seeds       these seeds instead of a half
  --max-gpus    leave out the workloads of more GPUs (older builds replay 1,024 GPUs slowly)
  --shapes      instead of the grid, issue 46's three named shapes (gang-heavy 48 GPUs,
                mixed 104 GPUs, gang-heavy with checkpoints from none to an hour), the
                seeds of --seeds (default 1-4) each
  --public      instead of the grid, workloads of the public traces (TRACES, default
                ../shared/traces): Philly on 100 nodes, Gavel's five seeds, Pollux's and
                Sia's Philly workloads, Tiresias' two job files, converted by `gantry trace
                convert` as scripts/trace_runs.sh does. Never used to tune: a check beside
                the held-out half (load-based targets do not apply: their loads differ)
  --set         a `policy:` setting added to every workload's config (repeatable), e.g.
                --set "best_effort_yields_to: critical": how a candidate default is tried
  --order       QUEUE=ORDER: that queue of every workload (and those under it) ordered by
                ORDER (fair-share, las, gittins), e.g. --order research=gittins (repeatable)
  --jobs        simulations at once (default 2)
  --baseline    a results.json of an earlier run on the same seeds: the rule for a
                default is checked against it (below), and the exit status is 1 if broken
  --tiny        the CI check that the script still works end to end (ctest -L bench):
                two small workloads, two days; exits 1 unless the table has every row

Writes OUT/results.json (per workload: its options and both policies' figures) and
OUT/tables.md (a row per workload, then the means with their standard errors), and
prints the tables. The rule for a default (docs/policies.md): on the held-out half, each
mean ratio (queueing delay, utilisation) and the mean lost work may be worse than the
baseline's by at most one standard error of that mean.
"""
import argparse
import concurrent.futures
import json
import math
import os
import random
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NO_KINDS = "realtime=0,batch=0,training=0,notebook=0,sweep=0,finetune=0"
DELAY_FLOOR_S = 60  # delays compared only where fifo's mean delay is at least this


def split():
    halves = {}
    for line in open(os.path.join(ROOT, "bench/policy_grid/split.txt")):
        if m := re.match(r"(tune|heldout): (.*)", line):
            halves[m.group(1)] = [int(s) for s in m.group(2).split()]
    return halves


def mean_gpu_hours(gpus, median_h, sigma, scale=1.0):
    """A job's expected GPU-hours: GPUs x the lognormal's mean (clamps ignored)."""
    return gpus * median_h * math.exp(sigma * sigma / 2) * scale


def grid_workload(seed):
    """The workload a seed draws from the grid: `gantry gen` options and what they mean."""
    rng = random.Random(f"policy-grid-{seed}")
    gpus = rng.choice([32, 64, 128, 256, 512, 1024])
    load = rng.uniform(0.9, 1.1) if rng.random() < 0.5 else rng.choice(
        [rng.uniform(0.8, 0.9), rng.uniform(1.1, 1.6), rng.uniform(1.1, 1.6)])
    gang_jobs = rng.choice([0, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5])  # share of the jobs
    checkpoints = rng.choice(["0", "600", "1800", "3600", "0,600,1800,3600", "600,3600"])
    critical = rng.random() < 0.5
    best_effort = rng.random() < 0.5
    teams = rng.choice([2, 3, 4])
    equal = rng.random() < 0.5
    nodes = gpus // 8
    leaf = max(2, min(16, nodes // rng.choice([2, 4, 8])))
    # Critical inference is provisioned as sites do: its A100 pool is about twice what it
    # uses on average, whatever the load (gen sizes that pool by the realtime share plus
    # half the batch share, so batch inference, which runs on any GPU, pads it). Sized by
    # the realtime share alone, the pool was as loaded as the cluster and critical jobs
    # waited for hours at load 1 (tuning seed 7, in the grid's first version).
    realtime = rng.uniform(0.05, 0.15) if critical else 0
    a100 = max(1, math.ceil(2 * realtime * load * nodes)) if critical else 0
    batch = max(0.0, 2 * (a100 / nodes - realtime)) if critical else 0
    h100 = nodes - a100
    half = max(2, h100 // 2)
    sizes = [n for n in (2, 4, 8, 16, 32, 64) if n < half] + [half]
    # The gang kind's share of GPU-hours that makes `gang_jobs` of the jobs gangs (the
    # small and scavenger kinds' jobs are alike enough in GPU-hours to count as one).
    w = [1 / n for n in sizes]
    gang_h = sum(wi * mean_gpu_hours(8 * n, 4, 1, 1 + math.log2(n) / 4)
                 for wi, n in zip(w, sizes)) / sum(w)
    small_h = mean_gpu_hours(1.9, 1, 1)
    gang_share = gang_jobs * gang_h / (gang_jobs * gang_h + (1 - gang_jobs) * small_h)
    rest = 1 - gang_share
    scavenger = rng.uniform(0.1, 0.3) * rest if best_effort else 0
    other = 1 - realtime - batch  # the training pool's kinds share what is left
    mix = {"gang": gang_share * other, "scavenger": scavenger * other,
           "small": (rest - scavenger) * other, "realtime": realtime, "batch": batch}
    args = ["--gpus", str(gpus), "--days", "7", "--load", f"{load:.3f}", "--spot", "0",
            "--cpu-nodes", "0", "--teams", str(teams), "--leaf-nodes", str(leaf),
            "--checkpoint-s", checkpoints, "--gang-nodes", ",".join(map(str, sizes)),
            "--mix", NO_KINDS + "".join(f",{k}={v:.4f}" for k, v in mix.items())]
    if equal:
        args.append("--equal-teams")
    return {"seed": seed, "gpus": gpus, "load": round(load, 3), "gang_jobs": gang_jobs,
            "checkpoint_s": checkpoints, "critical": critical, "best_effort": best_effort,
            "gang_heavy": gang_jobs >= 0.25, "args": args}


def shape_workloads(seeds):
    """Issue 46's named shapes, to measure commits against (the bisect)."""
    out = []
    for seed in seeds:
        out.append({"seed": seed, "shape": "gang48", "gpus": 48, "load": 1.0, "gang_heavy": True,
                    "args": ["--gpus", "48", "--days", "7", "--load", "1.0", "--spot", "0",
                             "--cpu-nodes", "0", "--teams", "2", "--equal-teams",
                             "--leaf-nodes", "3", "--gang-nodes", "3,6", "--checkpoint-s", "600",
                             "--mix", NO_KINDS + ",gang=0.9,small=0.1"]})
        out.append({"seed": seed, "shape": "mixed104", "gpus": 104, "load": 1.0,
                    "gang_heavy": False,
                    "args": ["--gpus", "104", "--days", "7", "--load", "1.0"]})
        out.append({"seed": seed, "shape": "gangckpt96", "gpus": 96, "load": 1.0,
                    "gang_heavy": True,
                    "args": ["--gpus", "96", "--days", "7", "--load", "1.0", "--spot", "0",
                             "--cpu-nodes", "0", "--teams", "3", "--leaf-nodes", "4",
                             "--gang-nodes", "2,4,6", "--checkpoint-s", "0,600,1800,3600",
                             "--mix", NO_KINDS + ",gang=0.8,small=0.15,scavenger=0.05"]})
    return out


def public_workloads(traces):
    """The public traces' workloads: `gantry trace convert` arguments per workload."""
    t, profiles = traces, f"{traces}/sia-workloads/profiles"
    out = [("philly-nodes100", ["--format", "philly", f"{t}/philly-jobs-sia/philly.csv.gz",
                                "--nodes", "100"])]
    out += [(f"gavel-seed{s}", ["--format", "gavel", f"{t}/gavel-philly-vc/seed={s}",
                                "--throughputs",
                                f"{t}/gavel-philly-vc/simulation_throughputs.json.gz"])
            for s in range(5)]
    for fmt, folder in (("pollux", "pollux-workloads/workloads"), ("sia", "sia-workloads/philly")):
        for f in sorted(os.listdir(f"{t}/{folder}")) if os.path.isdir(f"{t}/{folder}") else []:
            if f.endswith(".csv"):
                out.append((f"{fmt}-{f[:-4]}", ["--format", fmt, f"{t}/{folder}/{f}",
                                                 "--profiles", profiles]))
    out += [("tiresias-60_job", ["--format", "tiresias", f"{t}/tiresias/60_job.csv",
                                 "--cluster-spec", f"{t}/tiresias/n32g4.csv"]),
            ("tiresias-tf_job", ["--format", "tiresias", f"{t}/tiresias/tf_job.csv",
                                 "--cluster-spec", f"{t}/tiresias/cluster_spec.csv"])]
    return [{"seed": i + 1, "shape": name, "gpus": 0, "load": None, "gang_heavy": False,
             "make": ["trace", "convert", *args]} for i, (name, args) in enumerate(out)]


def capacity(cluster_yaml):
    """GPUs of a generated cluster: count x gpus per pool, without a YAML parser."""
    total, count, section = 0, 0, None
    for line in open(cluster_yaml):
        if re.match(r"^\w", line):
            section = line.split(":")[0]
        elif section == "pools":
            if m := re.match(r"\s+(?:- )?count: (\d+)", line):
                count = int(m.group(1))
            elif m := re.match(r"\s+gpus: (\d+)", line):
                total += count * int(m.group(1))
    return total


def figures(report, gpus, floor_s):
    r = json.load(open(report))
    busy = r["gpu_utilization_pct"] / 100 * gpus * r["makespan_s"] / 3600
    return {"util_pct": r["gpu_utilization_pct"], "jct_s": r["jct_s"]["mean"],
            "delay_s": r["jct_s"]["mean"] - floor_s, "lost_gpu_h": r["lost_gpu_hours"],
            "lost_pct": 100 * r["lost_gpu_hours"] / busy if busy else 0,
            "preemptions": r["preemptions"], "unfinished": r["jobs"]["unfinished"]}


def run_workload(w, opts):
    d = os.path.join(opts.out, w.get("shape", "grid") + f"-s{w['seed']}")
    os.makedirs(d, exist_ok=True)
    make = w.get("make") or ["gen", "--seed", str(w["seed"]), *w["args"]]
    subprocess.run([opts.gen_gantry, *make, "--out", d, "-q"], check=True)
    if opts.set:
        text = open(f"{d}/cluster.yaml").read()
        if "\npolicy:\n" not in text:
            open(f"{d}/cluster.yaml", "a").write("policy:\n")
        elif not text.rstrip().split("\n")[-1].startswith("  "):
            sys.exit(f"policy_grid.py: {d}/cluster.yaml does not end with its policy section")
        with open(f"{d}/cluster.yaml", "a") as f:
            f.writelines(f"  {s}\n" for s in opts.set)
    for o in opts.order:
        queue, order = o.split("=")
        text = open(f"{d}/cluster.yaml").read()
        entry = f"\n  - name: {queue}\n"
        if entry not in text:
            sys.exit(f"policy_grid.py: {d}/cluster.yaml has no queue {queue} (--order)")
        open(f"{d}/cluster.yaml", "w").write(text.replace(entry, f"{entry}    order: {order}\n"))
    duration = {}
    for line in open(f"{d}/trace.jsonl"):
        j = json.loads(line)
        duration[j["id"]] = j["duration"]
    out = dict(w, jobs=len(duration))
    failures = ["--failures", f"{d}/failures.jsonl"] if os.path.exists(f"{d}/failures.jsonl") else []
    out["gpus"] = out["gpus"] or capacity(f"{d}/cluster.yaml")
    for policy in ("fifo", "gantry"):
        subprocess.run([opts.gantry, "sim", "--config", f"{d}/cluster.yaml", "--trace",
                        f"{d}/trace.jsonl", *failures, "--policy", policy, "--report",
                        f"{d}/{policy}.json", "--events", f"{d}/{policy}.events.jsonl",
                        "--no-wait-events", "-q"], check=True)
        # The JCT floor: the mean run time of the jobs that finished (the report's JCT is
        # theirs; reclaimed notebooks end early and count in neither).
        run = [duration[e["job"]] for e in map(json.loads, open(f"{d}/{policy}.events.jsonl"))
               if e["type"] == "finish"]
        os.remove(f"{d}/{policy}.events.jsonl")
        out[policy] = figures(f"{d}/{policy}.json", capacity(f"{d}/cluster.yaml"),
                              sum(run) / len(run))
    f, g = out["fifo"], out["gantry"]
    out["delay_ratio"] = g["delay_s"] / f["delay_s"] if f["delay_s"] >= DELAY_FLOOR_S else None
    out["util_ratio"] = g["util_pct"] / f["util_pct"] if f["util_pct"] else None
    return out


def mean_se(xs):
    xs = [x for x in xs if x is not None]
    if not xs:
        return None, None, 0
    m = sum(xs) / len(xs)
    se = (math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1) / len(xs))
          if len(xs) > 1 else 0)
    return m, se, len(xs)


def summary(results):
    return {"delay_ratio": mean_se([r["delay_ratio"] for r in results]),
            "util_ratio": mean_se([r["util_ratio"] for r in results]),
            "lost_pct": mean_se([r["gantry"]["lost_pct"] for r in results])}


def targets(results):
    """Issue 46's targets, per workload: (name, met, count of workloads it applies to)."""
    def load(r):
        return r["load"]
    rows = []
    d = [r for r in results if r["delay_ratio"] is not None]
    rows.append(("queueing delay never above fifo's",
                 [r["seed"] for r in d if r["delay_ratio"] > 1], len(d)))
    gh = [r for r in d if r["gang_heavy"] and load(r) is not None and 0.9 <= load(r) <= 1.1]
    rows.append(("gang-heavy at load 0.9-1.1: delay at most 0.7x fifo's",
                 [r["seed"] for r in gh if r["delay_ratio"] > 0.7], len(gh)))
    hi = [r for r in d if load(r) is not None and load(r) >= 1.2]
    rows.append(("load 1.2 and above: delay at most 0.5x fifo's",
                 [r["seed"] for r in hi if r["delay_ratio"] > 0.5], len(hi)))
    rows.append(("utilisation at least fifo's",
                 [r["seed"] for r in results if r["util_ratio"] < 0.9995], len(results)))
    rows.append(("lost work under 3% of busy GPU-hours",
                 [r["seed"] for r in results if r["gantry"]["lost_pct"] >= 3], len(results)))
    return rows


def fmt(m_se):
    m, se, n = m_se
    return "-" if m is None else f"{m:.3f} ± {se:.3f} (n={n})"


def tables(results, baseline):
    lines = ["| seed | shape | GPUs | load | gang jobs | checkpoints | critical | best-effort | "
             "jobs | fifo util % | gantry util % | fifo delay s | gantry delay s | delay ratio | "
             "util ratio | lost % | preemptions |",
             "|" + "---|" * 17]
    for r in sorted(results, key=lambda r: (r.get("shape", ""), r["seed"])):
        f, g = r["fifo"], r["gantry"]
        dr = "-" if r["delay_ratio"] is None else f"{r['delay_ratio']:.2f}"
        lines.append(
            f"| {r['seed']} | {r.get('shape', 'grid')} | {r['gpus']} | {r['load'] or '-'} | "
            f"{r.get('gang_jobs', '-')} | {r.get('checkpoint_s', '-')} | "
            f"{'yes' if r.get('critical') else 'no'} | {'yes' if r.get('best_effort') else 'no'} | "
            f"{r['jobs']} | {f['util_pct']:.1f} | {g['util_pct']:.1f} | {f['delay_s']:,.0f} | "
            f"{g['delay_s']:,.0f} | {dr} | {r['util_ratio']:.3f} | {g['lost_pct']:.2f} | "
            f"{g['preemptions']} |")
    s = summary(results)
    lines += ["", "| mean (± standard error) | delay ratio | util ratio | lost % |",
              "|---|---|---|---|",
              f"| this run | {fmt(s['delay_ratio'])} | {fmt(s['util_ratio'])} | "
              f"{fmt(s['lost_pct'])} |"]
    verdict = None
    if baseline:
        b = summary(baseline)
        lines.append(f"| baseline | {fmt(b['delay_ratio'])} | {fmt(b['util_ratio'])} | "
                     f"{fmt(b['lost_pct'])} |")
        # Worse: a higher delay ratio or lost work, a lower utilisation ratio.
        worse = []
        for key, sign in (("delay_ratio", 1), ("util_ratio", -1), ("lost_pct", 1)):
            (m, _, _), (bm, bse, _) = s[key], b[key]
            if m is not None and bm is not None and sign * (m - bm) > bse:
                worse.append(key)
        verdict = worse
        lines += ["", "rule for a default: " +
                  ("kept (no mean worse than the baseline's by more than its standard error)"
                   if not worse else "broken: " + ", ".join(worse) + " worse by more than one "
                   "standard error of the baseline's mean")]
    lines += ["", "| target | workloads | missed (seeds) |", "|---|---|---|"]
    for name, missed, n in targets(results):
        lines.append(f"| {name} | {n} | {len(missed)}: {' '.join(map(str, missed)) or '-'} |")
    return "\n".join(lines), verdict


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default="build/release")
    ap.add_argument("--gantry")
    ap.add_argument("--gen-gantry")
    ap.add_argument("--out", default="/tmp/gantry-policy-grid")
    ap.add_argument("--half", choices=["tune", "heldout", "all"], default="tune")
    ap.add_argument("--seeds")
    ap.add_argument("--max-gpus", type=int)
    ap.add_argument("--shapes", action="store_true")
    ap.add_argument("--public", nargs="?", const=os.path.join(os.path.dirname(ROOT), "shared/traces"))
    ap.add_argument("--set", action="append", default=[])
    ap.add_argument("--order", action="append", default=[])
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--baseline")
    ap.add_argument("--tiny", action="store_true")
    opts = ap.parse_args()
    os.chdir(ROOT)
    opts.gantry = opts.gantry or f"{opts.build}/src/gantry"
    opts.gen_gantry = opts.gen_gantry or f"{opts.build}/src/gantry"
    for b in (opts.gantry, opts.gen_gantry):
        if not os.access(b, os.X_OK):
            sys.exit(f"policy_grid.py: no {b} (build the gantry target first)")
    halves = split()
    seeds = ([int(s) for s in opts.seeds.split(",")] if opts.seeds else
             [1, 2, 3, 4] if opts.shapes else
             sorted(halves["tune"] + halves["heldout"]) if opts.half == "all" else
             halves[opts.half])
    if opts.tiny:
        seeds = [int(s) for s in opts.seeds.split(",")] if opts.seeds else [1]
        if opts.out == ap.get_default("out"):
            opts.out = f"{opts.build}/bench-tiny/policy_grid"
    workloads = (public_workloads(opts.public) if opts.public else
                 shape_workloads(seeds) if opts.shapes else [grid_workload(s) for s in seeds])
    if opts.max_gpus:
        workloads = [w for w in workloads if w["gpus"] <= opts.max_gpus]
    if opts.tiny:  # two small workloads over two days: a check, not a measurement
        workloads = shape_workloads(seeds)[:1] + [grid_workload(seeds[0])]
        for w in workloads:
            w["args"] = [a for a in w["args"]]
            i = w["args"].index("--days")
            w["args"][i + 1] = "2"
            if w.get("shape") is None:
                g = w["args"].index("--gpus")
                w["args"][g + 1] = "64"
                w["gpus"] = 64
                w["args"][w["args"].index("--gang-nodes") + 1] = "2,4"
                w["args"][w["args"].index("--leaf-nodes") + 1] = "4"
    os.makedirs(opts.out, exist_ok=True)
    with concurrent.futures.ThreadPoolExecutor(opts.jobs) as pool:
        results = list(pool.map(lambda w: run_workload(w, opts), workloads))
    json.dump(results, open(f"{opts.out}/results.json", "w"), indent=1)
    baseline = json.load(open(opts.baseline)) if opts.baseline else None
    if baseline:
        keys = {(r.get("shape"), r["seed"]) for r in results}
        baseline = [r for r in baseline if (r.get("shape"), r["seed"]) in keys]
    text, verdict = tables(results, baseline)
    open(f"{opts.out}/tables.md", "w").write(text + "\n")
    print(text)
    if opts.tiny:
        rows = [line for line in text.split("\n") if re.match(r"\| \d+ \|", line)]
        if len(rows) != len(workloads) or any(c.strip() == "" for r in rows for c in r.split("|")[1:-1]):
            sys.exit("policy_grid.py --tiny: a workload's row is missing or has an empty column")
    return 1 if verdict else 0


if __name__ == "__main__":
    sys.exit(main())
