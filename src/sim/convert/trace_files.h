// Writers of the files a conversion or a generated workload produces: the cluster
// config (spec section 1), the trace (section 3) and the failures file.
//
// Converters and the generator fill plain structs (ClusterOut, JobOut) and leave all
// formatting here, so every tool writes the same field names in the same order, times
// in seconds rounded to the millisecond and sizes in decimal GB. The output is a
// function of the structs only (no locale, no clock): same input, same bytes.
// TraceWriter checks what the trace reader would refuse (ids unique, submit sorted) as
// it goes, so a converter bug fails the conversion, not a later simulation.
// Thread-safety: none; one writer per file.
#pragma once

#include <cstdint>
#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include "base/result.h"

namespace gantry::convert {

// A number with at most `decimals` decimals, trailing zeros dropped: 2, 2.5, 0.001.
std::string Num(double x, int decimals = 3);
// A JSON string literal.
std::string JsonString(const std::string& s);
// A YAML scalar: plain when it is a safe name (a letter, then [A-Za-z0-9._-]),
// double-quoted otherwise.
std::string YamlString(const std::string& s);

struct ModelOut {
  std::string name;
  double memory_gb = 0;
};

struct PoolOut {
  std::string name;
  int count = 0;
  int gpus = 0;
  std::string gpu_model;   // empty for CPU-only pools
  int nvlink_domains = 0;  // 0: leave out (1)
  int leaf_size = 0;       // 0: leave out (one leaf per pool)
  double cpus = 0;
  double memory_gb = 0;
  bool spot = false;
  std::vector<std::string> sharing;  // mig, mps, timeslice
};

struct QueueOut {
  std::string name;
  std::string parent;
  double guaranteed_gpus = 0;
  double burst_gpus = 0;
  double weight = 1;
  // Per GPU model (model, GPUs); when not empty, written as guaranteed_gpus_by_model.
  std::vector<std::pair<std::string, double>> guaranteed_by_model = {};
};

struct ClusterOut {
  std::string name;
  std::vector<std::string> comments;  // written as "# ..." lines at the top
  std::vector<ModelOut> models;
  std::vector<PoolOut> pools;
  std::vector<QueueOut> queues;
  double reclaim_idle_after_s = 0;  // 0: no policy section

  int64_t gpu_count() const;
};

Status WriteCluster(const std::string& path, const ClusterOut& cluster);

struct WindowOut {
  std::string start, end;  // "HH:MM"
};

struct JobOut {
  std::string id;
  double submit = 0;    // s
  double duration = 0;  // s, above 0
  std::string queue;
  std::string tier = "standard";
  int replicas = 1;
  int min_replicas = 0;         // elastic: 1..replicas-1; 0: left out (rigid)
  std::vector<double> speedup;  // elastic: throughput at 1..replicas workers; empty: left out
  // Its speed on each GPU model (speed_by_model, by model name); empty: left out.
  std::vector<std::pair<std::string, double>> speed_by_model;
  double gpus = 0;                      // per worker; a fraction below 1 with sharing mps/timeslice
  std::string mig;                      // instead of gpus
  std::string sharing;                  // empty: exclusive (left out)
  std::vector<std::string> gpu_models;  // empty: any
  double vram_gb = 0;                   // written when the job uses GPUs
  double cpus = 0;                      // 0: left out
  double memory_gb = 0;                 // 0: left out
  std::string topology;                 // empty: left out (spine)
  double checkpoint_s = 0;              // 0: left out
  double grace_s = 0;                   // 0: left out
  std::optional<WindowOut> window;
  std::optional<double> idle_after_s;
  // Observed usage (issue 12): utilization of what a worker holds while busy, and its
  // peak VRAM. Left out unless known.
  std::optional<double> util;
  std::optional<double> vram_used_gb;

  bool uses_gpu() const { return !mig.empty() || gpus > 0; }
  // GPUs the whole job holds (a MIG instance counts its compute slices over 7).
  double total_gpus() const;
};

std::string JobJson(const JobOut& job);

// What a conversion or generation wrote, for the command's summary and the tests.
struct TraceStats {
  int64_t jobs = 0;
  double gpu_hours = 0;  // offered: total_gpus x duration
  double max_job_gpus = 0;
  double first_submit = 0, last_submit = 0;
  std::map<std::string, int64_t> by_queue;
  std::map<std::string, int64_t> by_tier;
};

// Streams jobs to a trace file. Ids must be unique and submits non-decreasing (an
// error names the job); memory: the ids written so far.
class TraceWriter {
 public:
  Status Open(const std::string& path);
  Status Add(const JobOut& job);
  Status Close();
  const TraceStats& stats() const { return stats_; }

 private:
  std::string path_;
  std::ofstream out_;
  std::unordered_set<std::string> ids_;
  TraceStats stats_;
};

struct FailureOut {
  double t = 0;
  std::string node;
  double down_s = 0;
};

// Writes failures sorted by (t, node).
Status WriteFailures(const std::string& path, std::vector<FailureOut> failures);

// Guaranteed GPUs per queue in proportion to `demand` (e.g. GPU-hours), as whole GPUs
// that add up to at most `capacity`; every queue gets at least `floor_gpus` when the
// capacity allows. Deterministic: remainders go to the largest fractions, ties by index.
std::vector<double> ProportionalGuarantees(const std::vector<double>& demand, int64_t capacity,
                                           int64_t floor_gpus = 0);

// How a job of `gpus` whole GPUs is split into a gang of identical workers on nodes of
// `per_node` GPUs: one worker when it fits a node, else the fewest workers of equal
// size that each fit a node (12 on 8-GPU nodes: 2 x 6; 7 on 4-GPU nodes: 7 x 1).
struct Gang {
  int replicas = 1;
  int gpus = 0;
};
Gang SplitGang(int gpus, int per_node);

// Creates `dir` (and parents) and returns "dir/name"; errors name --out.
Result<std::string> OutPath(const std::string& dir, const std::string& name);

}  // namespace gantry::convert
