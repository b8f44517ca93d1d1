// Ledger: who holds what, per GPU and per node, with indexes of free capacity.
//
// Every change goes through Allocate/Release (and SetUp for node failures), which keep
// the indexes exact:
//   - per pool and per k: the up nodes with exactly k free whole GPUs (bitset over the
//     pool's nodes), so "a node with at least g free GPUs" is a few word scans;
//   - per pool and MIG profile: the MIG-mode GPUs where that profile still fits;
//   - per pool and sharing mode: the shared GPUs with share left;
//   - per leaf and per pool: free whole GPUs.
// Invariants (checked by tests and by the independent event-log checker): a GPU is free,
// held whole by one worker, split into non-overlapping MIG instances with at most 7
// compute slices, or shared by MPS or time-slice workers whose shares add up to at most
// 1000 thousandths and whose VRAM fits; node CPUs and memory never go negative.
// Allocate's precondition is that the worker fits (Fits); violating it is a bug and
// asserts. Thread-safety: none; owned by one scheduler.
#pragma once

#include <cstdint>
#include <vector>

#include "base/bitset.h"
#include "core/model/cluster.h"
#include "core/model/types.h"

namespace gantry::core {

// What one worker holds.
struct WorkerAlloc {
  NodeId node;
  Sharing sharing = Sharing::kExclusive;
  uint64_t gpu_mask = 0;    // kExclusive: bit i = local GPU i held whole
  int8_t gpu = -1;          // kMig, kMps, kTimeslice: local GPU index
  int8_t mig_profile = -1;  // kMig: profile index in the node's model
  int8_t mig_start = -1;    // kMig: first memory slice
  int16_t share_milli = 0;  // kMps, kTimeslice
  int64_t vram_bytes = 0;   // kMps, kTimeslice: VRAM taken on the shared GPU
  int64_t cpus_milli = 0;
  int64_t memory_bytes = 0;
  bool operator==(const WorkerAlloc&) const = default;
};
using Allocation = std::vector<WorkerAlloc>;

enum class GpuMode : uint8_t { kFree, kWhole, kMig, kShared };

struct GpuState {
  GpuMode mode = GpuMode::kFree;
  Sharing share_mode = Sharing::kMps;  // when kShared
  uint8_t mig_memory = 0;              // occupied memory slices (bit per slice)
  uint8_t mig_compute = 0;             // compute slices in use
  uint16_t holders = 0;                // MIG instances or shares on this GPU
  int16_t share_used = 0;              // thousandths
  int64_t vram_used = 0;               // shared VRAM
};

// Free capacity of one GPU in GPU units: all of a free GPU, the free compute sevenths of
// a MIG GPU, the free part of a shared one.
inline GpuUnits FreeUnits(const GpuState& s) {
  switch (s.mode) {
    case GpuMode::kFree:
      return kGpuUnits;
    case GpuMode::kWhole:
      return 0;
    case GpuMode::kMig:
      return GpuUnits{kMigComputeSlices - s.mig_compute} * kUnitsPerMigSlice;
    case GpuMode::kShared:
      return GpuUnits{kShareScale - s.share_used} * kUnitsPerShareMilli;
  }
  return 0;
}

struct NodeState {
  bool up = true;
  int free_whole = 0;
  int64_t free_cpus_milli = 0;
  int64_t free_memory_bytes = 0;
};

class Ledger {
 public:
  explicit Ledger(const Cluster& cluster);

  const Cluster& cluster() const { return *cluster_; }
  const GpuState& gpu(GpuId g) const { return gpus_[g.v]; }
  const NodeState& node(NodeId n) const { return nodes_[n.v]; }
  GpuId gpu_id(NodeId n, int local) const {
    return GpuId(cluster_->node(n).first_gpu.v + static_cast<uint32_t>(local));
  }
  int domain_free(NodeId n, int domain) const { return domain_free_[domain_base_[n.v] + domain]; }
  int leaf_free(LeafId l) const { return leaf_free_[l.v]; }

  // Whole-GPU index: up nodes of `pool` with exactly k free whole GPUs (pool-local bits).
  const DynBitset& nodes_with_free(PoolId pool, int k) const { return buckets_[pool.v][k]; }
  // MIG-mode GPUs of up nodes of `pool` where `profile` fits (pool-local GPU bits).
  const DynBitset& mig_fit(PoolId pool, int profile) const { return mig_fit_[pool.v][profile]; }
  // Shared GPUs of up nodes of `pool` in `mode` with share left (pool-local GPU bits).
  const DynBitset& shared(PoolId pool, Sharing mode) const {
    return shared_[pool.v][mode == Sharing::kMps ? 0 : 1];
  }
  // The same split by free share: level l holds the GPUs with share left in
  // [l * kShareLevelWidth, (l + 1) * kShareLevelWidth), so a search for a share s walks
  // levels ShareLevel(s) .. kShareLevels - 1, tightest first, and skips fuller GPUs.
  static constexpr int kShareLevelWidth = 100;
  static constexpr int kShareLevels = kShareScale / kShareLevelWidth;
  static constexpr int ShareLevel(int share_left) { return share_left / kShareLevelWidth; }
  const DynBitset& shared_level(PoolId pool, Sharing mode, int level) const {
    return shared_level_[pool.v][(mode == Sharing::kMps ? 0 : kShareLevels) + level];
  }

  // First memory slice where `profile` fits on GPU g, or -1. O(placements).
  int MigStart(GpuId g, int profile) const;
  // The same for a GPU in state `s` (free or MIG), e.g. a what-if copy of a GPU's state.
  static int MigStartOn(const GpuState& s, const MigProfile& p);
  // Whether a share of `share_milli` (MPS or time-slicing, `mode`) taking `vram_bytes` fits
  // on a GPU in state `s` of `memory_bytes`: a free GPU, or one shared the same way with
  // share and memory left; e.g. on a what-if copy of a GPU's state.
  static bool ShareFitsOn(const GpuState& s, Sharing mode, int share_milli, int64_t vram_bytes,
                          int64_t memory_bytes) {
    if (s.mode == GpuMode::kFree) return vram_bytes <= memory_bytes;
    return s.mode == GpuMode::kShared && s.share_mode == mode &&
           s.share_used + share_milli <= kShareScale && s.vram_used + vram_bytes <= memory_bytes;
  }
  // MIG memory slices [start, start + count) as a bit mask.
  static constexpr uint8_t SliceMask(int start, int count) {
    return static_cast<uint8_t>(((1u << count) - 1u) << start);
  }
  // The GPU side of allocating worker `w` on a node whose GPUs (of `model`) are `gpus`:
  // what Allocate does to the ledger's GPU states, and what-ifs do to a copy.
  static void TakeGpus(GpuState* gpus, const WorkerAlloc& w, const Catalog& catalog, ModelId model);
  // Its counterpart for releasing `w`: the local GPUs it leaves free whole (bit i = GPU i).
  static uint64_t ReleaseGpus(GpuState* gpus, const WorkerAlloc& w, const Catalog& catalog,
                              ModelId model);
  // Whether worker `w` fits now: on an up node (unless !need_up: a rollback puts back
  // what a node that went down still holds), none of its GPUs, MIG slices, share, VRAM,
  // CPUs or memory taken.
  bool Fits(const WorkerAlloc& w, bool need_up = true) const;
  // Checks every count the ledger keeps against its GPU states (free whole GPUs per node,
  // NVLink domain and leaf, GPU units held, each GPU's own state, CPUs and memory within
  // the node's): O(GPUs + nodes). Throws InvariantBroken (core/invariants.h).
  void Audit() const;

  void Allocate(const WorkerAlloc& w);
  void Release(const WorkerAlloc& w);
  // Every worker of an allocation (released last first).
  void Allocate(const Allocation& alloc) {
    for (const WorkerAlloc& w : alloc) Allocate(w);
  }
  void Release(const Allocation& alloc) {
    for (auto it = alloc.rbegin(); it != alloc.rend(); ++it) Release(*it);
  }

  // What-ifs as transactions: after Checkpoint(), every Allocate and Release is journaled
  // until the mark is rolled back (each undone, last first: the ledger is then as it was,
  // its state being the sum of what is held whatever the order) or committed (kept; an
  // enclosing checkpoint can still roll them back). Marks nest; every Checkpoint must be
  // closed by one Rollback or Commit, innermost first. Not for SetUp.
  using Mark = size_t;
  Mark Checkpoint() {
    ++open_;
    return journal_.size();
  }
  void Rollback(Mark mark);
  void Commit(Mark mark);

  // A down node leaves every index (its holdings stay until released).
  void SetUp(NodeId n, bool up);

  // GPU units held now, and GPU units of capacity on up nodes.
  GpuUnits used_units() const { return used_units_; }
  GpuUnits up_units() const { return up_units_; }

  // Change counters, for caches of per-node figures (fragmentation.h): a node's counter
  // moves on every Allocate/Release/SetUp that touches it, version() on every change.
  uint64_t node_version(NodeId n) const { return node_version_[n.v]; }
  uint64_t version() const { return version_; }
  // The nodes changed since the last call (each once), for one consumer that keeps a
  // total over nodes up to date without walking them all (Fragmentation). Clears the list.
  template <typename F>
  void TakeChanged(F&& f) const {
    for (uint32_t n : changed_) {
      changed_flag_[n] = 0;
      f(NodeId(n));
    }
    changed_.clear();
  }

 private:
  void Unindex(NodeId n);
  void Touch(NodeId n);                // before a worker's change
  void Retouch(const WorkerAlloc& w);  // after it
  void Index(NodeId n);
  void IndexGpu(GpuId g, bool on);
  uint32_t PoolLocalNode(NodeId n) const;
  uint32_t PoolLocalGpu(GpuId g) const;
  GpuUnits GpuUnitsHeld(const WorkerAlloc& w) const;

  const Cluster* cluster_;
  std::vector<GpuState> gpus_;
  std::vector<NodeState> nodes_;
  std::vector<uint32_t> domain_base_;
  std::vector<int> domain_free_;
  std::vector<int> leaf_free_;
  std::vector<uint32_t> pool_first_gpu_;
  std::vector<std::vector<DynBitset>> buckets_;       // [pool][k]
  std::vector<std::vector<DynBitset>> mig_fit_;       // [pool][profile]
  std::vector<std::vector<DynBitset>> shared_;        // [pool][mps, timeslice]
  std::vector<std::vector<DynBitset>> shared_level_;  // [pool][mode * kShareLevels + level]
  std::vector<int8_t> share_level_;                   // per GPU: its bit in shared_level_, -1 none
  GpuUnits used_units_ = 0;
  GpuUnits up_units_ = 0;
  std::vector<uint64_t> node_version_;
  uint64_t version_ = 0;
  mutable std::vector<uint32_t> changed_;      // TakeChanged's list
  mutable std::vector<uint8_t> changed_flag_;  // per node: in changed_
  struct Step {
    bool allocated;  // else released
    WorkerAlloc w;
  };
  std::vector<Step> journal_;  // while a checkpoint is open
  int open_ = 0;               // checkpoints open
};

}  // namespace gantry::core
