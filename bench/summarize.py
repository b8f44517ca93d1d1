#!/usr/bin/env python3
"""Turns the benchmark results into the markdown tables of docs/benchmarks.md.

    bench/summarize.py FILE...

A FILE ending in .json is Google Benchmark's --benchmark_out (JSON) of bench/core_bench
(several are merged; a later file's benchmark of the same name wins); any other FILE
holds the lines bench/replay.sh prints. Missing or empty files are skipped (that part
is left out). Prints markdown to stdout. Targets are issue 5's, and issue 14's for the
replays (the 100,000-job replay with gantry under 20 s; 1,000,000 jobs under 5 minutes).
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


def main():
    core, replay = {}, []
    for path in sys.argv[1:]:
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


if __name__ == "__main__":
    main()
