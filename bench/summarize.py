#!/usr/bin/env python3
"""Turns the benchmark results into the markdown tables of docs/benchmarks.md.

    bench/summarize.py FILE...

A FILE ending in .json is Google Benchmark's --benchmark_out (JSON) of bench/core_bench
(several are merged; a later file's benchmark of the same name wins); any other FILE
holds the lines bench/replay.sh prints. Missing or empty files are skipped (that part
is left out). Prints markdown to stdout. Targets are issue 5's, and issue 14's for the
replays (the 100,000-job replay with gantry under 20 s; 1,000,000 jobs under 5 minutes).

    bench/summarize.py --tiny

The CI check (ctest -L bench): writes a small core_bench JSON (every benchmark family
this script reads, with the counters bench/core_bench reports) and replay.sh lines (a
small run, one stopped at its time limit, a 1,000,000-job run) to a temporary folder,
summarizes them, and exits 1 unless every table and every kind of target verdict (met,
not met, n/a) is in the markdown. scripts/bench.sh --tiny runs it on real output.
"""
import json
import math
import re
import sys

DECISIONS_TARGET = 20_000      # placement decisions per second, at least
P99_TARGET_NS = 1_000_000      # p99 decision latency, under 1 ms
WALL_TARGET_S = 60             # 100,000-job replay on 10,000 GPUs
RSS_TARGET_MIB = 2048
GANTRY_WALL_TARGET_S = 20      # issue 14: the same replay with gantry
BIG_WALL_TARGET_S = 300        # issue 14: 1,000,000 jobs on 100,000 GPUs
BIG_RSS_TARGET_MIB = 4096


def load_core(path):
    try:
        with open(path) as f:
            data = json.load(f)
    except (OSError, ValueError):
        return {}
    out = {}
    for b in data.get("benchmarks", []):
        name = re.sub(r"/iterations:\d+.*$", "", b["name"])
        out[name] = b
    return out


def si(x, digits=3):
    if x is None:
        return "-"
    for div, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= div:
            return f"{x / div:.{digits}g}{suffix}"
    return f"{x:.{digits}g}"


def ns(x):
    """Nanoseconds, printed in the unit that reads best."""
    if x is None:
        return "-"
    if x >= 1e9:
        return f"{x / 1e9:.2f} s"
    if x >= 1e6:
        return f"{x / 1e6:.2f} ms"
    if x >= 1e3:
        return f"{x / 1e3:.2f} µs"
    return f"{x:.0f} ns"


def cost(b):
    """CPU time per decision where measured (robust on a shared machine), else wall."""
    return b.get("cpu_ns_per_decision", b["ns_per_decision"])


def verdict(ok):
    if ok is None:
        return "n/a (smaller run)"
    return "met" if ok else "**not met**"


def main(paths=None):
    core, replay = {}, []
    for path in sys.argv[1:] if paths is None else paths:
        if path.endswith(".json"):
            core.update(load_core(path))
            continue
        try:
            with open(path) as f:
                replay += [l.rstrip("\n").split("\t") for l in f if l.startswith("replay\t")]
        except OSError:
            pass

    head = [(p, core.get(f"schedule/{p}/gpus:10000/pending:100000")) for p in ("fifo", "gantry", "fifo-timed", "gantry-timed")]
    head = [(p, b) for p, b in head if b]
    if head:
        print("### Scheduling passes: 1,250 nodes x 8 H100, 100,000 pending jobs\n")
        print("Each pass is a full pass after a churn step (32 finishes, requeues of preempted jobs, 32 arrivals).")
        print("Per-decision cost = pass wall time / jobs the pass considered; its p50/p99 are over passes.\n")
        print("| policy | passes | decisions/pass | decisions/s | per decision: mean | p50 | p99 | pass p50 | pass p99 | pass max | starts/pass | GPU fill |")
        print("|---|---|---|---|---|---|---|---|---|---|---|---|")
        for p, b in head:
            print(f"| {p} (wall) | {b['iterations']} | {si(b['decisions_per_pass'])} | {si(b['decisions_per_s'])} | "
                  f"{ns(b['ns_per_decision'])} | {ns(b['ns_per_decision_p50'])} | {ns(b['ns_per_decision_p99'])} | "
                  f"{ns(b['pass_ms_p50'] * 1e6)} | {ns(b['pass_ms_p99'] * 1e6)} | {ns(b['pass_ms_max'] * 1e6)} | "
                  f"{b['starts_per_pass']:.0f} | {100 * b['fill']:.1f}% |")
            if "cpu_ns_per_decision" in b:
                print(f"| {p} (CPU) | | | {si(b['cpu_decisions_per_s'])} | {ns(b['cpu_ns_per_decision'])} | "
                      f"{ns(b['cpu_ns_per_decision_p50'])} | {ns(b['cpu_ns_per_decision_p99'])} | "
                      f"{ns(b['cpu_pass_ms_p50'] * 1e6)} | {ns(b['cpu_pass_ms_p99'] * 1e6)} | | | |")
        for p, t in head:
            if p.endswith("-timed") and "decision_ns_p99" in t:
                print(f"\n`{p}` clocks every single decision inside those passes (from one `TryStart` to the "
                      f"next, what-ifs of preemption and reservation included; "
                      f"{si(t['decisions_per_pass'] * t['iterations'])} decisions): "
                      f"p50 {ns(t['decision_ns_p50'])}, p99 {ns(t['decision_ns_p99'])}, "
                      f"p99.9 {ns(t['decision_ns_p999'])}, max {ns(t['decision_ns_max'])} "
                      f"(the clock read itself adds a few tens of ns to each figure).")
        print()

    place = [(f, core.get(f"place/{f}/gpus:10000")) for f in ("first", "best")]
    place = [(f, b) for f, b in place if b]
    if place:
        print("### Single placements: `Placer::Place` at ~85% fill, 10,000 GPUs\n")
        print("| fit (policy) | calls | decisions/s | mean | p50 | p99 | p99.9 | max | placed | GPU fill |")
        print("|---|---|---|---|---|---|---|---|---|---|")
        for f, b in place:
            label = {"first": "first (fifo)", "best": "best (gantry)"}[f]
            print(f"| {label} | {si(b['iterations'])} | {si(b['decisions_per_s'])} | {ns(b['ns_per_decision'])} | "
                  f"{ns(b['ns_p50'])} | {ns(b['ns_p99'])} | {ns(b['ns_p999'])} | {ns(b['ns_max'])} | "
                  f"{100 * b['placed_frac']:.0f}% | {100 * b['fill']:.1f}% |")
        print()

    scale = {}
    for name, b in core.items():
        m = re.match(r"(?:scale|schedule)/(fifo|gantry)/gpus:(\d+)/pending:(\d+)$", name)
        if m:
            scale[(m.group(1), int(m.group(2)), int(m.group(3)))] = b
    if scale:
        print("### Scale curve: cost per decision (full pass time / jobs considered)\n")
        gpus_all = sorted({k[1] for k in scale})
        pend_all = sorted({k[2] for k in scale})
        for policy in ("fifo", "gantry"):
            if not any(k[0] == policy for k in scale):
                continue
            print(f"**{policy}** (rows: GPUs; columns: pending jobs; cell: CPU time per decision, "
                  f"wall time of a full pass (p50) in brackets)\n")
            print("| GPUs \\ pending | " + " | ".join(f"{p:,}" for p in pend_all) + " |")
            print("|---" * (len(pend_all) + 1) + "|")
            for g in gpus_all:
                cells = []
                for p in pend_all:
                    b = scale.get((policy, g, p))
                    cells.append(f"{ns(cost(b))} ({ns(b['pass_ms_p50'] * 1e6)})" if b else "not run")
                print(f"| {g:,} | " + " | ".join(cells) + " |")
            print()
            # Growth: per-decision cost ratio across each axis, against the log factor an
            # n log n pass allows (log(n_max) / log(n_min)).
            lines = []
            for g in gpus_all:
                lo, hi = scale.get((policy, g, pend_all[0])), scale.get((policy, g, pend_all[-1]))
                if lo and hi:
                    r = cost(hi) / cost(lo)
                    allow = math.log(pend_all[-1]) / math.log(pend_all[0])
                    lines.append(f"- {g:,} GPUs, pending {pend_all[0]:,} -> {pend_all[-1]:,}: per-decision cost x{r:.2f} "
                                 f"(n log n allows x{allow:.2f}): {'within' if r <= allow else 'above'} n log n")
            for p in pend_all:
                lo, hi = scale.get((policy, gpus_all[0], p)), scale.get((policy, gpus_all[-1], p))
                if lo and hi:
                    r = cost(hi) / cost(lo)
                    allow = math.log(gpus_all[-1]) / math.log(gpus_all[0])
                    lines.append(f"- {p:,} pending, GPUs {gpus_all[0]:,} -> {gpus_all[-1]:,}: per-decision cost x{r:.2f} "
                                 f"(log factor x{allow:.2f}): {'within' if r <= allow else 'above'} n log n")
            if lines:
                print("\n".join(lines) + "\n")

    splace = {}
    for name, b in core.items():
        m = re.match(r"scale-place/(\w+)/gpus:(\d+)$", name)
        if m:
            splace[(m.group(1), int(m.group(2)))] = b
    if splace:
        print("**Single placements against cluster size** (`Placer::Place` at ~85% fill)\n")
        print("| fit | GPUs | mean | p50 | p99 | p99.9 | placed |")
        print("|---|---|---|---|---|---|---|")
        for (f, g), b in sorted(splace.items()):
            print(f"| {f} | {g:,} | {ns(b['ns_per_decision'])} | {ns(b['ns_p50'])} | {ns(b['ns_p99'])} | "
                  f"{ns(b['ns_p999'])} | {100 * b['placed_frac']:.0f}% |")
        print()

    if replay:
        print("### Whole-trace replay (`gantry sim`, /usr/bin/time -v, gantry-check)\n")
        print("| policy | jobs | wall | CPU (user+sys) | peak RSS | violations | exit | passes | pass p50 | pass p99 | pass max |")
        print("|---|---|---|---|---|---|---|---|---|---|---|")
        for r in replay:
            _, policy, jobs, wall, rss, viol, rc, passes, p50, p99, mx, cpu = (r + ["-"] * 12)[:12]
            status = "" if rc == "0" else (" (stopped at the time limit)" if rc in ("124", "137") else f" (exit {rc})")
            fmt = lambda v: v if v == "-" else f"{float(v):.3f} ms"
            print(f"| {policy} | {int(jobs):,} | {float(wall):.1f} s{status} | {cpu} s | {int(rss):,} MiB | {viol} | {rc} | "
                  f"{passes} | {fmt(p50)} | {fmt(p99)} | {fmt(mx)} |")
        print()

    # Targets.
    rows = []
    for p, b in head:
        if p.endswith("-timed"):
            if "decision_ns_p99" in b:
                rows.append((f"core, {p[:-6]}: p99 of single decisions < 1 ms", ns(b["decision_ns_p99"]),
                             b["decision_ns_p99"] < P99_TARGET_NS))
            continue
        rows.append((f"core, {p}: >= 20,000 decisions/s (wall; CPU)",
                     f"{si(b['decisions_per_s'])}/s; {si(b.get('cpu_decisions_per_s', 0))}/s",
                     b["decisions_per_s"] >= DECISIONS_TARGET))
        rows.append((f"core, {p}: p99 decision latency < 1 ms (p99 over passes of pass time / decisions, wall)",
                     ns(b["ns_per_decision_p99"]), b["ns_per_decision_p99"] < P99_TARGET_NS))
    for f, b in place:
        rows.append((f"core, Place {f} fit: p99 < 1 ms, >= 20,000/s",
                     f"{ns(b['ns_p99'])}, {si(b['decisions_per_s'])}/s",
                     b["ns_p99"] < P99_TARGET_NS and b["decisions_per_s"] >= DECISIONS_TARGET))
    for r in replay:
        _, policy, jobs, wall, rss, viol, rc, _, _, _, _, cpu = (r + ["-"] * 12)[:12]
        measured = f"{float(wall):.1f} s wall ({cpu} s CPU), {int(rss):,} MiB, {viol} violations"
        if int(jobs) >= 900_000:
            ok = rc == "0" and float(wall) < BIG_WALL_TARGET_S and int(rss) < BIG_RSS_TARGET_MIB and viol == "0"
            rows.append((f"replay (issue 14), {policy}, {int(jobs):,} jobs: < 5 min wall, < 4 GiB, 0 violations",
                         measured, ok))
            continue
        ok = rc == "0" and float(wall) < WALL_TARGET_S and int(rss) < RSS_TARGET_MIB and viol == "0"
        if int(jobs) < 90_000:
            ok = None  # a smaller run (--quick): not the size the target names
        rows.append((f"replay, {policy}, {int(jobs):,} jobs: < 60 s wall, < 2 GiB, 0 violations", measured, ok))
        if policy == "gantry":
            rows.append((f"replay (issue 14), gantry, {int(jobs):,} jobs: < 20 s wall", measured,
                         None if ok is None else ok and float(wall) < GANTRY_WALL_TARGET_S))
    if rows:
        print("### Targets (issues 5 and 14)\n")
        print("| target | measured | |")
        print("|---|---|---|")
        for what, value, ok in rows:
            print(f"| {what} | {value} | {verdict(ok)} |")
        print()


def tiny():
    """Summarizes sample inputs of every kind; 0 when each part of the markdown is there."""
    import contextlib
    import io
    import os
    import tempfile

    sched = {"decisions_per_pass": 98_000, "decisions_per_s": 1.2e6, "ns_per_decision": 830,
             "ns_per_decision_p50": 800, "ns_per_decision_p99": 990, "pass_ms_p50": 80, "pass_ms_p99": 97,
             "pass_ms_max": 99, "starts_per_pass": 900, "fill": 0.97, "cpu_decisions_per_s": 1.3e6,
             "cpu_ns_per_decision": 770, "cpu_ns_per_decision_p50": 760, "cpu_ns_per_decision_p99": 950,
             "cpu_pass_ms_p50": 75, "cpu_pass_ms_p99": 93}
    timed = dict(sched, decision_ns_p50=400, decision_ns_p99=2_000_000, decision_ns_p999=3e6, decision_ns_max=4e6)
    place = {"decisions_per_s": 3e6, "ns_per_decision": 330, "ns_p50": 130, "ns_p99": 1700, "ns_p999": 1900,
             "ns_max": 35_000, "placed_frac": 0.91, "fill": 0.85}
    benchmarks = []
    def bench(name, iterations, counters):
        benchmarks.append(dict(counters, name=f"{name}/iterations:{iterations}/manual_time", iterations=iterations))
    for p in ("fifo", "gantry"):
        bench(f"schedule/{p}/gpus:10000/pending:100000", 10, sched)
        bench(f"schedule/{p}-timed/gpus:10000/pending:100000", 10, timed)  # p99 2 ms: not met
        for g in (1000, 10000):
            for n in (1000, 10000):
                grow = g / 100 + n / 100 if p == "fifo" else -g / 100 - n / 1000  # above n log n, within
                bench(f"scale/{p}/gpus:{g}/pending:{n}", 40, dict(sched, cpu_ns_per_decision=300 + grow))
    for f in ("first", "best"):
        bench(f"place/{f}/gpus:10000", 200_000, place)
        for g in (1000, 10000):
            bench(f"scale-place/{f}/gpus:{g}", 100_000, place)
    replay = ["replay\tfifo\t2000\t1.5\t120\t0\t0\t900\t0.01\t0.2\t0.9\t1.40",
              "replay\tgantry\t2000\t700\t150\t-\t124\t-\t-\t-\t-\t690",
              "replay\tgantry (full passes every 10 s)\t1000000\t250\t3000\t0\t0\t5000\t1\t20\t90\t240"]
    expected = ["### Scheduling passes", "| gantry (CPU) |", "`gantry-timed` clocks every single decision",
                "### Single placements: `Placer::Place`", "| best (gantry) |", "### Scale curve",
                "**fifo** (rows: GPUs", "**gantry** (rows: GPUs", "within n log n", "above n log n",
                "**Single placements against cluster size**", "### Whole-trace replay",
                "(stopped at the time limit)", "| 1,000,000 |", "### Targets (issues 5 and 14)",
                "| met |", "| **not met** |", "| n/a (smaller run) |", "1,000,000 jobs: < 5 min wall"]
    with tempfile.TemporaryDirectory(prefix="summarize-tiny.") as d:
        core_path, replay_path = os.path.join(d, "core.json"), os.path.join(d, "replay.tsv")
        with open(core_path, "w") as f:
            json.dump({"context": {}, "benchmarks": benchmarks}, f)
        with open(replay_path, "w") as f:
            f.write("# a comment line the summary skips\n" + "\n".join(replay) + "\n")
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            main([core_path, replay_path, os.path.join(d, "missing.json"), os.path.join(d, "missing.tsv")])
    text = out.getvalue()
    print(text, end="")
    missing = [e for e in expected if e not in text]
    rows = text.count("\n| ")
    if missing or rows < 30:
        print(f"summarize.py --tiny: the summary lacks {missing} ({rows} table rows)", file=sys.stderr)
        return 1
    print(f"summarize.py --tiny: ok ({rows} table rows, every section and verdict)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    if sys.argv[1:] == ["--tiny"]:
        sys.exit(tiny())
    main()
