// Rigid jobs: a fixed number of whole GPUs for a known run time, charged to a team
// queue. Philly, Gavel, Pollux/Sia and Tiresias traces all reduce to these; this file
// turns a list of them into the cluster config and the trace, the same way for each.
//
// Rules (docs/traces.md, "Common rules"): jobs sorted by submit (stable: source order
// breaks ties), `--limit N` keeps the first N; the cluster is either given or sized
// from the trace: enough nodes for the peak of GPUs that would be running if every
// job started on arrival, and for the largest job; a job larger than the cluster is
// dropped and counted. Queues: one per source team, guaranteed GPUs in proportion to
// the team's GPU-hours (whole GPUs, adding up to the cluster), burst = the cluster, so
// no job exceeds its queue's burst. Jobs above one node's GPUs become gangs of equal
// workers (SplitGang).
// Memory: the RigidJob records (about 64 bytes per job).
// Thread-safety: stateless functions.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "sim/convert/convert.h"
#include "sim/convert/trace_files.h"

namespace gantry::convert {

struct RigidJob {
  std::string id;
  double submit = 0;    // s
  double duration = 0;  // s
  int gpus = 0;
  uint32_t queue = 0;  // index into RigidPlan::queues
  // Its run time at each GPU count 1..gpus (a measured profile; empty: none): with
  // RigidPlan::elastic_checkpoint_s, a gang of several workers becomes elastic with it.
  std::vector<double> run_time_by_gpus;
  // Its speed on each GPU model against `duration` (a profile per GPU type, as Sia's):
  // written as speed_by_model; empty: none.
  std::vector<std::pair<std::string, double>> speed_by_model;
};

struct RigidPlan {
  ClusterOut cluster;  // name, comments, models; pools: given, or empty to size
  PoolOut node_shape;  // with cluster.pools empty: the one pool, count computed
  int nodes = 0;       // with cluster.pools empty: fixed node count (0: from the trace)
  std::vector<std::string> queues;
  double vram_gb = 0;                   // per worker, for every job
  std::vector<std::string> gpu_models;  // job constraint; empty: any
  int64_t limit = 0;
  // Above 0: a job that splits into several workers and has run_time_by_gpus runs
  // elastic from one worker to all of them, at the profile's speed at each size
  // (`speedup`), checkpointing this often (pollux/sia --elastic).
  double elastic_checkpoint_s = 0;
  std::string out;
};

// Sorts, limits, sizes, writes DIR/cluster.yaml and DIR/trace.jsonl. `summary` carries
// the converter's counts (rows, drops) in and comes back completed.
Result<ConvertSummary> WriteRigid(RigidPlan plan, std::vector<RigidJob> jobs,
                                  ConvertSummary summary);

// The peak of concurrently running GPUs if every job started on arrival. O(n log n).
int64_t PeakGpus(const std::vector<RigidJob>& jobs);

}  // namespace gantry::convert
