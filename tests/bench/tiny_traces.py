#!/usr/bin/env python3
"""Writes a tiny stand-in for ../shared/traces: the files scripts/trace_runs.sh and
scripts/fill_compare.sh read, each family in its own source format (the columns the
converters of src/sim/convert expect; docs/traces.md), with a few dozen made-up rows.
For their --tiny modes (ctest -L bench), which must not read the real traces.

    tests/bench/tiny_traces.py DIR

Same files on every run (fixed seeds). Writes under DIR only.
"""
import gzip
import json
import os
import random
import sys


def write(path, text, gz=False):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    if gz:
        with gzip.open(path, "wt") as f:
            f.write(text)
    else:
        with open(path, "w") as f:
            f.write(text)


def openb(root, rng):
    d = f"{root}/alibaba-gpu-v2023-openb"
    nodes = ["sn,cpu_milli,memory_mib,gpu,model"]
    shapes = [(96000, 393216, 8, "G2")] * 4 + [(104000, 524288, 2, "T4")] * 3 + \
             [(96000, 393216, 8, "V100M32")] * 2 + [(64000, 262144, 0, "")] * 2
    for i, (cpu, mem, gpu, model) in enumerate(shapes):
        nodes.append(f"n{i},{cpu},{mem},{gpu},{model}")
    write(f"{d}/openb_node_list_all_node.csv", "\n".join(nodes) + "\n")
    full = ["name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,"
            "creation_time,deletion_time,scheduled_time"]
    short = ["name,cpu_milli,memory_mib,num_gpu,gpu_milli"]
    t = 0
    for i in range(60):
        t += rng.randint(1, 120)
        gpus = rng.choice([0, 1, 1, 1, 1, 2, 4, 8])
        milli = rng.choice([250, 500, 1000]) if gpus == 1 else (1000 if gpus else 0)
        spec = rng.choice(["", "", "", "T4", "G2|V100M32"]) if gpus else ""
        qos = rng.choice(["LS", "BE", "Burstable"])
        cpu, mem = rng.choice([1000, 4000, 8000, 16000]), rng.choice([2048, 8192, 30517])
        end = t + rng.randint(60, 7200)
        phase, scheduled = ("Pending", "") if i % 17 == 16 else ("Running", str(t + rng.randint(0, 5)))
        full.append(f"pod-{i},{cpu},{mem},{gpus},{milli},{spec},{qos},{phase},{t},{end},{scheduled}")
        short.append(f"mg-{i},{cpu},{mem},{rng.choice([1, 2, 4, 8])},1000")
    write(f"{d}/openb_pod_list_default.csv", "\n".join(full) + "\n")
    write(f"{d}/openb_pod_list_multigpu20.csv", "\n".join(short) + "\n")  # fill mode only


def philly(root, rng):
    rows = ["timestamp,duration,num_gpus,gpu_time,cluster"]
    for i in range(40):
        day, h, m = 4 + i // 12, rng.randint(0, 23), rng.randint(0, 59)
        dur, gpus = float(rng.randint(0, 20000)), rng.choice([1, 1, 2, 4, 8, 16])
        rows.append(f"2017-10-{day:02d} {h:02d}:{m:02d}:00,{dur},{gpus},{dur * gpus},{rng.choice(['vca', 'vcb', '6214e9'])}")
    write(f"{root}/philly-jobs-sia/philly.csv.gz", "\n".join(rows) + "\n", gz=True)


def gavel(root, rng):
    d = f"{root}/gavel-philly-vc"
    types = ["ResNet-18 (batch size 16)", "Transformer (batch size 32)", "LM (batch size 20)"]
    tp = {"v100": {}, "k80": {}}
    for t in types:
        for scale in (1, 2, 4, 8):
            tp["v100"][f"('{t}', {scale})"] = {"null": 2.0 * scale, f"('{types[0]}', 1)": [1.0, 1.0]}
            tp["k80"][f"('{t}', {scale})"] = {"null": 0.5 * scale}
    write(f"{d}/simulation_throughputs.json.gz", json.dumps(tp), gz=True)
    for seed in range(5):
        for vc in ("vc1", "vc2"):
            rows, t = [], 0.0
            for _ in range(12):
                t += rng.uniform(0, 600)
                rows.append(f"{rng.choice(types)}\tpython3 train.py\t--num_steps\t1\t{rng.randint(100, 20000)}\t"
                            f"{t:.6f}\t{rng.choice([1, 1, 2, 4, 8])}")
            write(f"{d}/seed={seed}/{vc}.trace" + (".gz" if vc == "vc2" else ""), "\n".join(rows) + "\n",
                  gz=vc == "vc2")


def pollux_workload(rng, rows=30, period=60.0):
    out, t = ["name,time,application,num_replicas,batch_size"], 0.0
    for i in range(rows):
        t += rng.uniform(0, period)
        app = rng.choice(["toy", "cifar10", "bert", "ncf", "imagenet", "deepspeech2", "yolov3"])
        out.append(f"{app}-{i},{t:.1f},{app},{rng.choice([1, 2, 4, 8, 12])},{rng.choice([64, 128, 256, 1024])}")
    return "\n".join(out) + "\n"


def pollux_sia(root, rng):
    prof = f"{root}/sia-workloads/profiles/toy"
    write(f"{prof}/validation-64.csv", "progress,iteration,metric,grad_sqr,grad_var\n1,10,0,0,0\n2,100,0,0,0\n")
    write(f"{prof}/validation-128.csv", "progress,iteration,metric,grad_sqr,grad_var\n1,5,0,0,0\n2,60,0,0,0\n")
    write(f"{prof}/placements.csv", "placement,local_bsz,step_time,sync_time\n"
                                    "1,32,1.0,0.1\n1,64,2.0,0.2\n2,32,1.5,0.3\n2,64,2.5,0.5\n")
    write(f"{prof}/scalability.csv", "num_nodes,num_replicas,local_bsz,step_time,sync_time\n"
                                     "5,20,8,4.0,1.0\n5,20,16,6.0,2.0\n")
    for d in ("workloads", "workloads-0.5", "workloads-1.5", "workloads-2.0", "workloads-realistic"):
        write(f"{root}/pollux-workloads/{d}/workload-1.csv", pollux_workload(rng))
    sia = ["philly", "saturn", "newtrace"] + [f"scale/rate_{r}" for r in (10, 20, 30, 40, 50)] + \
          [f"scale/scale_{k}x" for k in (2, 4, 8, 16, 32)]
    for d in sia:
        write(f"{root}/sia-workloads/{d}/workload-1.csv", pollux_workload(rng))


def tiresias(root, rng):
    d = f"{root}/tiresias"
    spec = "num_switch,num_node_p_switch,num_gpu_p_node,num_cpu_p_node,mem_p_node\n"
    write(f"{d}/n32g4.csv", spec + "1,8,4,40,256\n")
    write(f"{d}/cluster_spec.csv", spec + "2,4,4,128,254\n")
    rows, t = ["job_id,num_gpu,submit_time,iterations,model_name,duration,interval"], 0
    for i in range(30):
        t += rng.randint(0, 90)
        rows.append(f"{i},{rng.choice([1, 2, 4, 8])},{t},{rng.randint(10, 900)},vgg19,{rng.randint(10, 3000)},30")
    write(f"{d}/60_job.csv", "\n".join(rows) + "\n")
    rows, t = ["job_id,num_gpu,submit_time,start_time,duration,model_size,aggr_interval,model_name,model_scale"], 0
    for i in range(30):
        t += rng.randint(0, 90)
        rows.append(f"{10 + i // 2},{rng.choice([1, 2, 4, 12])},{t},{t + 3},{rng.randint(10, 3000)},400,0,vgg19,1")
    write(f"{d}/tf_job.csv", "\n".join(rows) + "\n")


def main():
    root = sys.argv[1]
    for i, family in enumerate((openb, philly, gavel, pollux_sia, tiresias)):
        family(root, random.Random(49 + i))
    return 0


if __name__ == "__main__":
    sys.exit(main())
