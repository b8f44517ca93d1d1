// Placer: finds room for a whole gang in the ledger, or explains why there is none.
//
// Place() puts every worker of a job into the ledger or none of them (a failed attempt
// is rolled back), honouring GPU model, VRAM, sharing mode, spot (critical work never on
// spot pools), CPUs, memory and the job's topology domain (NVLink domain, node, leaf,
// spine). A gang's workers all get GPUs of one model, as Kueue gives a pod set one
// flavor: a job that names no model (or several) would otherwise run at the pace of its
// slowest GPUs (a leaf, a node and an NVLink domain are of one pool, so one model). Searches walk
// the ledger's free-capacity bitsets, never every node, except for CPU-only workers and for
// fractional gangs with a node/leaf topology. Fit::kFirst takes the lowest ids (the fifo baseline);
// Fit::kBest packs: fullest node, fullest leaf, fullest shared GPU first, so whole nodes and leaves
// stay free. With a Fragmentation that has a mix, Fit::kBest places each worker where the node's
// fragmentation grows least (FGD, fragmentation.h), ties to the best-fit order above.
// It scores a bounded set of candidates from the ledger's indexes, across the pools
// that accept the worker: per pool and count k of free whole GPUs, the first
// kNodesPerBucket usable nodes of bucket k (looking at kLooksPerBucket at most); for
// shares and MIG instances also the partly used GPUs (at most kSplitLevels distinct
// states, kPerSplitLevel GPUs each; shares tightest first, looking at kLooksPerBucket
// GPUs per level of free share at most; MIG lowest ids first) and, for MIG, every start
// slice where the profile fits. Those cover every place plain best fit would try except
// nodes and shared GPUs past kLooksPerBucket; when the search stopped there and found
// nothing, the plain search runs, so FGD never fails where best fit would not.
// Thread-safety: none; works on one ledger.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "core/fragmentation.h"
#include "core/ledger.h"
#include "core/model/feasibility.h"
#include "core/model/job.h"

namespace gantry::core {

enum class Fit : uint8_t { kFirst, kBest };

class Placer {
 public:
  // `frag` (may be null: plain best fit) must outlive the placer and watch `ledger`.
  explicit Placer(Ledger& ledger, const Fragmentation* frag = nullptr)
      : ledger_(ledger), frag_(frag) {}

  // Candidates per search (see above); small, so a placement stays O(pools x GPUs).
  static constexpr int kNodesPerBucket = 3;
  static constexpr int kLooksPerBucket = 64;  // nodes examined per bucket (CPU, memory)
  static constexpr int kSplitLevels = 12;
  static constexpr int kPerSplitLevel = 2;

  // On success `out` holds one WorkerAlloc per worker, already in the ledger.
  bool Place(const JobSpec& job, Fit fit, Allocation& out);
  // The same, every worker on node `n` (false where its pool does not accept the job).
  bool PlaceOn(const JobSpec& job, Fit fit, NodeId n, Allocation& out);
  // More workers of a gang that holds `held` (in the ledger), inside the same domain its
  // topology asks for: its node, its leaf, or anywhere on its GPU model (a spine gang is of
  // one model). Not for NVLink gangs nor workers_per_node (false).
  bool PlaceBeside(const JobSpec& job, Fit fit, const Allocation& held, Allocation& out);

  // Human-readable request, e.g. "2 x 8 GPUs of H100-80GB in one leaf".
  static std::string Describe(const JobSpec& job, const Catalog& catalog);
  // The same as the API shows a job's request: an elastic one's with its least size too,
  // "2-4 x 8 GPU(s) ...".
  static std::string DescribeSizes(const JobSpec& job, const Catalog& catalog) {
    return (job.elastic() ? std::to_string(job.min_replicas) + "-" : "") + Describe(job, catalog);
  }

  // Whether a worker of `job` may ever go to `pool` (model, sharing, spot, VRAM).
  bool PoolAccepts(const JobSpec& job, PoolId pool) const;

 private:
  // Where a worker may go: one pool's node range [lo, hi), optionally one NVLink domain.
  struct Scope {
    PoolId pool;  // invalid: any pool
    uint32_t lo = 0, hi = 0;
    int domain = -1;
  };
  Scope LeafScope(LeafId leaf) const;  // the nodes of one leaf

  bool PlaceWorkers(const JobSpec& job, Fit fit, const Scope& scope, Allocation& out);
  // A spine gang: each accepted model in turn, in the order of the pools that have it.
  bool PlaceOneModel(const JobSpec& job, Fit fit, Allocation& out);
  bool PlaceWorker(const JobSpec& job, Fit fit, const Scope& scope, WorkerAlloc& w);
  bool PlaceWhole(const JobSpec& job, Fit fit, PoolId pool, const Scope& scope, WorkerAlloc& w);
  bool PlaceMig(const JobSpec& job, Fit fit, PoolId pool, const Scope& scope, WorkerAlloc& w);
  bool PlaceShared(const JobSpec& job, Fit fit, PoolId pool, const Scope& scope, WorkerAlloc& w);
  // A node of `pool` in the scope with at least `min_free` free whole GPUs that also has
  // the worker's CPUs and memory (and, with a domain, that many free in the domain).
  NodeId FindNode(const JobSpec& job, Fit fit, PoolId pool, const Scope& scope, int min_free);
  bool NodeHasRoom(const JobSpec& job, NodeId n) const;
  // PlaceWorkers for a job with workers_per_node: each group on a node of its own.
  bool PlaceGroups(const JobSpec& job, Fit fit, const Scope& scope, Allocation& out);
  int FreeGpuInScope(NodeId n, const Scope& scope) const;
  void Rollback(Allocation& out);
  // The free GPUs a whole worker takes on node n (the fullest NVLink domain with room);
  // fewer than `gpus` bits when there is no room.
  uint64_t WholeMask(NodeId n, const Scope& scope, int gpus) const;

  // FGD: the best-scored candidate so far (FgdScore; on ties the lowest TieKey), and the
  // job's salt for TieKey.
  struct Best {
    uint64_t salt = 0;
    bool found = false;
    int score = 0;
    int64_t delta = 0;  // the fragmentation change w makes (score is it, coarser)
    int leaf_free = 0;  // free whole GPUs on the leaf of w's node (before w)
    int node_free = 0;  // and on w's node
    uint64_t tie = 0;
    WorkerAlloc w;
  };
  // FGD's own resolution: its plugin scores a node int(100 x sigmoid(-change)), the
  // change being in fragmented GPUs (as Fragmentation weighs the classes), so
  // changes within a few hundredths of a GPU tie,
  // and the scheduler then picks one of the tied nodes at random. Scored exactly, with
  // the first in best-fit order kept on ties, the openb fill averaged 95.27% over 40
  // seeds; scored as FGD does, 95.43% (FGD's figure: 95.39% on its ten seeds, where
  // gantry gives 95.35%; docs/benchmarks.md). Only called while the mix is active.
  int FgdScore(int64_t delta) const;
  // A tie-break that spreads tied candidates the way a random pick does, yet is the
  // same on every run and for every placement of one job on one ledger state: a hash
  // of the candidate's place and the job's salt (FNV-1a of its id).
  static uint64_t TieKey(const WorkerAlloc& w, uint64_t salt);
  bool PlaceWorkerFgd(const JobSpec& job, const Scope& scope, WorkerAlloc& w);
  void Consider(const WorkerAlloc& w, Best& best) const;
  // Whether a partly used GPU in `state` joins the candidates (levels_ counts them): at
  // most kPerSplitLevel GPUs per state; kStop at a state past kSplitLevels distinct ones.
  enum class Take : uint8_t { kYes, kNo, kStop };
  Take TakeSplit(int state);
  // Candidates on nodes of `pool` taken from the free-GPU buckets, k >= min_free;
  // `add(n)` scores the node's candidates.
  template <typename Add>
  void ForBucketNodes(const JobSpec& job, PoolId pool, const Scope& scope, int min_free, Add add);
  // Score every candidate of one pool for a worker like `w` into `best`.
  void WholeCandidates(const JobSpec& job, PoolId pool, const Scope& scope, WorkerAlloc w,
                       Best& best);
  void SharedCandidates(const JobSpec& job, PoolId pool, const Scope& scope, WorkerAlloc w,
                        Best& best);
  void MigCandidates(const JobSpec& job, PoolId pool, const Scope& scope, WorkerAlloc w,
                     Best& best);

  Ledger& ledger_;
  const Fragmentation* frag_;
  std::vector<std::pair<int, uint32_t>> levels_;  // scratch: (state, count) of split GPUs seen
  std::vector<std::pair<int, uint32_t>> splits_;  // scratch: (best-fit key, GPU) candidates
  bool fgd_truncated_ = false;  // the last FGD search skipped nodes (kLooksPerBucket)
  std::vector<NodeId> avoid_;   // PlaceGroups: nodes this job's groups use or could not
};

}  // namespace gantry::core
