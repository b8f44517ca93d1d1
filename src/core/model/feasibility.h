// WhyInfeasible: can a job ever run on a cluster, however empty the cluster is?
//
// "Cannot place now" is the scheduler's business; this answers "can never place": no
// GPU of an accepted model, too much vram for every such GPU (or MIG instance), a
// sharing mode no suitable pool allows, a critical job facing only spot capacity, a
// worker larger than every node, or a gang that no domain of its topology can hold
// even when idle. The reason is meant for users (the `reject` event's `error`).
// It agrees with core::Placer's rules: a single worker needs no gang domain, except
// NVLink for its own GPUs.
// Thread-safety: pure function of its arguments.
#pragma once

#include <optional>
#include <string>

#include "core/model/cluster.h"
#include "core/model/job.h"
#include "core/model/queue.h"

namespace gantry::core {

// Returns why no empty cluster could hold `job` (one worker, or the whole gang under its
// topology), or nullopt when it could. Precondition: `job` was resolved against
// cluster.catalog() (models and mig_index index it). Cost: O(pools), not O(nodes).
std::optional<std::string> WhyInfeasible(const JobSpec& job, const Cluster& cluster);

// The fewest GPU units `job` can run on: its workers' units (an elastic job's least size), a MIG
// job's on the model whose instance is smallest. Cost: O(models).
GpuUnits MinUnits(const JobSpec& job, const Catalog& catalog);

// Whether a worker of `job` may ever go to `pool` (model, sharing, spot, VRAM). O(1).
bool PoolAccepts(const Cluster& cluster, const JobSpec& job, PoolId pool);

// Why `job` can never start: its queue may not use its tier (QueueSpec::tiers),
// WhyInfeasible, or it needs more GPUs at once than its queue or a queue above it may ever
// hold (burst_gpus). The scheduler rejects such jobs at
// submit; `gantry validate` names them first. Cost: O(pools + queue depth).
std::optional<std::string> WhyNeverStarts(const JobSpec& job, const Cluster& cluster,
                                          const QueueTree& queues);

}  // namespace gantry::core
