// Right-sizing advice (issue 12): from what a job's workers were seen to use (peak VRAM,
// peak utilization), the smallest shape on the cluster that would have held them with
// headroom: a MIG instance or an MPS share of the model they ran on, or fewer whole GPUs.
// Offered only where a pool of that model allows the mode, and only when it is smaller
// than what the job asked. Pure: the server (gantry show, gantry usage --advice) and the
// simulator's report use it alike.
#pragma once

#include <string>

#include "core/model/cluster.h"
#include "core/model/job.h"

namespace gantry::core {

// What one worker was seen to use.
struct Observed {
  int64_t vram_peak_bytes = 0;  // the most one worker held (all its GPUs together)
  double util_peak = 0;  // 0..1 of what it holds (its GPUs, instance or share), highest sample
};

struct Advice {
  double gpus = 0;      // GPU-equivalents one worker holds as asked (MIG: compute/7, shares)
  double fit_gpus = 0;  // the same for the advised shape; == gpus when there is no advice
  std::string shape;    // e.g. "MIG 1g.10gb", "MPS share 0.25", "2 GPUs"; empty: none
  std::string text;     // for people: what and why
};

// Headroom over what was seen: 20% on VRAM and on utilization.
inline constexpr double kAdviceHeadroom = 1.2;

// `model` is the GPU model the worker ran on.
Advice RightSize(const Cluster& cluster, ModelId model, const JobSpec& spec, const Observed& seen);

}  // namespace gantry::core
