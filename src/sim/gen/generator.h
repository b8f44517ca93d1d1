// Workload generator: a synthetic cluster, trace and failures file for `gantry gen`.
//
// One seed decides everything (std::mt19937_64 streams derived from it with MixSeed);
// nothing reads the clock, so the same options give byte-identical files. The cluster
// has H100 training nodes in leaves, A100 inference nodes with MIG/MPS/time-slicing, an
// optional spot pool and CPU nodes; team queues sit under a parent with guarantees
// below their bursts. Six kinds of work (docs/traces.md "gantry gen"), each a stream of
// jobs in submit order, merged on the fly: memory is one pending job per stream (a
// sweep's burst at most), never the whole trace.
// `load` is the offered GPU-hours over the capacity's GPU-hours in the period; each
// kind gets its `mix` share of it: a kind draws job shapes until their GPU-hours come
// closest to its share, then spreads that many arrivals over the period as a Poisson
// process conditioned on the count, following a day or work-week curve where the kind
// has one. So the offered load is met to within one job per kind.
// Thread-safety: stateless function.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "base/result.h"
#include "sim/convert/trace_files.h"

namespace gantry::gen {

// Shares of the offered GPU-hours, by kind; normalized to add up to 1.
struct Mix {
  double realtime = 0.15;  // diurnal real-time inference (critical, MIG or one GPU)
  double batch = 0.15;     // batch inference (standard, whole GPUs)
  double training = 0.45;  // training gangs (standard, 1-16 nodes x 8 GPUs)
  double notebook = 0.07;  // notebooks that go idle (best-effort, shared GPUs)
  double sweep = 0.08;     // hyper-parameter sweeps (bursts of small identical jobs)
  double finetune = 0.10;  // windowed fine-tuning (20:00-08:00)
  // Kinds for policy grids (docs/traces.md), none by default; on the H100 training pool,
  // each job's checkpoint interval drawn from GenOptions::checkpoint_s.
  double gang = 0;       // multi-node gangs (standard, GenOptions::gang_nodes x 8 GPUs)
  double small = 0;      // 1, 2 or 4 GPUs on one node (standard)
  double scavenger = 0;  // 1-8 GPUs on one node (best-effort)
};

// Parses "realtime=0.2,training=0.5,...": kinds not named keep their defaults.
Result<Mix> ParseMix(const std::string& text);

struct GenOptions {
  uint64_t seed = 0;
  int gpus = 256;  // GPUs in the cluster, rounded to whole 8-GPU nodes
  double days = 7;
  double load = 0.8;
  Mix mix;
  int teams = 4;                         // research teams (child queues of "research")
  double spot = 0.1;                     // share of the GPU nodes in a spot pool (0: none)
  int cpu_nodes = -1;                    // -1: one per 128 GPUs, at least 1
  double node_failures_per_day = 0.002;  // per GPU node
  double spot_revocations_per_day = 2;   // across the spot pool
  double reclaim_idle_after_s = 1800;
  // Guarantees per GPU model: serving's on the A100s, research's and its teams' on the
  // H100s (batch's stays over all models). Otherwise every guarantee counts any model.
  bool guarantees_by_model = false;
  // Trace lines carry observed usage (util, vram_used_gb), drawn from a stream of their
  // own, so the workload is the same with or without them.
  bool observed_usage = false;
  int leaf_nodes = 16;       // nodes per InfiniBand leaf in each GPU pool
  bool equal_teams = false;  // research teams of equal weight (else a is the largest)
  // The gang kind's sizes in nodes, equally likely by GPU-hours; empty: 2, 4, 8, ... and
  // half the training pool, up to half of it.
  std::vector<int> gang_nodes;
  // Checkpoint intervals the gang, small and scavenger kinds draw from, one per job,
  // equally likely (0: the job never checkpoints).
  std::vector<double> checkpoint_s = {600};
  // Share of the whole-GPU gangs that checkpoint made elastic, min_replicas half their
  // replicas (rounded up), drawn from a stream of its own: the workload is otherwise the
  // same, so it compares with its rigid self (docs/policies.md, "Elastic gangs").
  double elastic = 0;
  std::string out;
};

struct KindStats {
  int64_t jobs = 0;
  double gpu_hours = 0;
};

struct GenSummary {
  int64_t gpus = 0, nodes = 0;
  double capacity_gpu_hours = 0;
  std::map<std::string, KindStats> kinds;
  convert::TraceStats trace;
  int64_t failures = 0;
  std::vector<std::string> files;
  double offered_load() const {
    return capacity_gpu_hours > 0 ? trace.gpu_hours / capacity_gpu_hours : 0;
  }
};

// Errors: Error::field names the option ("--gpus") or "--out" for output problems.
Result<GenSummary> Generate(const GenOptions& options);

}  // namespace gantry::gen
