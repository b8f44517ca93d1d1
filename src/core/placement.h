// Placer: finds room for a whole gang in the ledger, or explains why there is none.
//
// Place() puts every worker of a job into the ledger or none of them (a failed attempt
// is rolled back), honouring GPU model, VRAM, sharing mode, spot (critical work never on
// spot pools), CPUs, memory and the job's topology domain (NVLink domain, node, leaf,
// spine). Searches walk the ledger's free-capacity bitsets, never every node, except
// for CPU-only workers and for fractional gangs with a node/leaf topology.
// Fit::kFirst takes the lowest ids (the fifo baseline); Fit::kBest packs: fullest node,
// fullest leaf, fullest shared GPU first, so whole nodes and leaves stay free.
// Thread-safety: none; works on one ledger.
#pragma once

#include <string>

#include "core/ledger.h"
#include "core/model/job.h"

namespace gantry::core {

enum class Fit : uint8_t { kFirst, kBest };

class Placer {
 public:
  explicit Placer(Ledger& ledger) : ledger_(ledger) {}

  // On success `out` holds one WorkerAlloc per worker, already in the ledger.
  bool Place(const JobSpec& job, Fit fit, Allocation& out);

  // Human-readable request, e.g. "2 x 8 GPUs of H100-80GB in one leaf".
  static std::string Describe(const JobSpec& job, const Catalog& catalog);

  // Whether a worker of `job` may ever go to `pool` (model, sharing, spot, VRAM).
  bool PoolAccepts(const JobSpec& job, PoolId pool) const;

 private:
  // Where a worker may go: one pool's node range [lo, hi), optionally one NVLink domain.
  struct Scope {
    PoolId pool;  // invalid: any pool
    uint32_t lo = 0, hi = 0;
    int domain = -1;
  };

  bool PlaceWorkers(const JobSpec& job, Fit fit, const Scope& scope, Allocation& out);
  bool PlaceWorker(const JobSpec& job, Fit fit, const Scope& scope, WorkerAlloc& w);
  bool PlaceWhole(const JobSpec& job, Fit fit, PoolId pool, const Scope& scope, WorkerAlloc& w);
  bool PlaceMig(const JobSpec& job, Fit fit, PoolId pool, const Scope& scope, WorkerAlloc& w);
  bool PlaceShared(const JobSpec& job, Fit fit, PoolId pool, const Scope& scope, WorkerAlloc& w);
  // A node of `pool` in the scope with at least `min_free` free whole GPUs that also has
  // the worker's CPUs and memory (and, with a domain, that many free in the domain).
  NodeId FindNode(const JobSpec& job, Fit fit, PoolId pool, const Scope& scope, int min_free);
  bool NodeHasRoom(const JobSpec& job, NodeId n) const;
  int FreeGpuInScope(NodeId n, const Scope& scope) const;
  void Rollback(Allocation& out);

  Ledger& ledger_;
};

}  // namespace gantry::core
