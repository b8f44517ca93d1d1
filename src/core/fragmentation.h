// Fragmentation: how much free GPU capacity the expected work could not use (FGD).
//
// After Weng et al., "Beware of Fragmentation: Scheduling GPU-Sharing Workloads with
// Fragmentation Gradient Descent" (USENIX ATC'23). The target workload M is a mix of
// task classes m (the request shape of one worker) with popularity p_m. A node's
// fragmentation is F_n(M) = sum_m p_m F_n(m), where F_n(m) is the node's free GPU
// capacity that a worker of class m cannot use:
//   - all of it when m cannot go to the node at all: model, sharing mode, VRAM or spot
//     (critical work) rule it out, the node lacks the CPUs or memory, or it has fewer
//     free whole GPUs than a whole-GPU class asks for;
//   - else the free capacity of the GPUs m cannot use: for a whole-GPU class every
//     partly used GPU (shared or MIG); for an MPS/time-slice share the shared GPUs of
//     the other mode or with less share (or VRAM) left than m asks, and split MIG GPUs;
//     for a MIG profile the shared GPUs and the MIG GPUs where the profile no longer
//     fits.
// Free capacity is in GPU units (a free GPU 7000, a shared GPU its share left x 7, a
// MIG GPU its free compute slices x 1000), so every figure the placer compares is an
// integer: p_m is an integer weight (the class's decayed count) and FragmentedGpus, the
// report's figure, is sum_m weight_m F_n(m) over the total weight, as FGD defines it;
// NodeScore and Delta, what placement compares, are the same sum. With `by_gpus`
// (policy.fragmentation_weights: gpus) placement weighs each class by the GPUs its workers
// ask instead (its *demand*: count x GPUs a worker), while the report keeps FGD's figure.
// Counted by workers, a mix of many 1-GPU jobs and fewer 8-GPU gang workers makes FGD
// keep room for the small ones and break up the whole nodes the gangs need, though the
// gangs ask most of the GPUs (docs/policies.md, "Fragmentation weighed by GPUs": less
// queueing delay on gang-heavy workloads, a little more work lost to critical preemption).
//
// The mix is learned online (Observe, once per submitted job that uses GPUs, weighted
// by its workers; CPU-only jobs are left out. FGD's artifact counts them
// (isInvolvedCpuPods: true), which shifts every candidate's change alike and dilutes
// the GPU classes: no gain on the openb fill, docs/benchmarks.md, session 28): a bounded
// table of the last kTracked distinct shapes (VRAM counts exactly for shares only; for
// whole GPUs and MIG, as the set of models it fits) with decayed counts (all halved every
// kDecayEvery workers; a new shape evicts the lightest). The mix in
// use is frozen at rebuilds (the kMaxClasses heaviest shapes), which happen after every
// max(1, min(observed/8, 256)) workers, so scores only change when the ledger or a
// rebuild does. Per-node scores are cached against the ledger's node_version and the
// rebuild epoch: a placement query costs O(GPUs of the node x classes) per node it
// scores, never a scan of the cluster.
// Thread-safety: none; owned by one scheduler next to its ledger. The const queries
// fill caches (mutable), so even they must not run concurrently.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/ledger.h"
#include "core/model/job.h"

namespace gantry::core {

class Fragmentation {
 public:
  static constexpr size_t kMaxClasses = 128;     // classes in the mix in use (see .cc)
  static constexpr size_t kTracked = 256;        // distinct shapes counted
  static constexpr uint64_t kDecayEvery = 8192;  // workers between halvings of the counts

  // One task class of the mix: a single worker's request (replicas 1, spine), its weight
  // (decayed count of workers of that shape) and demand (weight x its GPUs, at least 1).
  struct TaskClass {
    JobSpec worker;
    uint64_t weight = 0;
    uint64_t demand = 0;
  };

  Fragmentation(const Ledger& ledger, bool by_gpus);

  // Counts a submitted job's workers into the mix (a gang of 4 counts 4 times).
  void Observe(const JobSpec& job);
  // The mix in use (heaviest first, ties by shape), its total weight, the total that
  // placement's scores weigh by (the weight's, or the demand's with by_gpus), and whether
  // there is one: without a mix every score is 0 and the placer does plain best fit.
  const std::vector<TaskClass>& mix() const { return mix_; }
  uint64_t total_weight() const { return total_weight_; }
  uint64_t placing_total() const { return placing_total_; }
  bool active() const { return total_weight_ > 0; }

  // sum_m x_m F_n(m) of an up node now, in GPU units x weight, x_m the weight (by_gpus:
  // the demand): what placement compares. Cached.
  int64_t NodeScore(NodeId n) const;
  // NodeScore after allocating `w` minus before; `w` must fit (Ledger::Fits).
  // O(GPUs of the node x classes).
  int64_t Delta(const WorkerAlloc& w) const;
  // F_n(M) in GPUs, by the classes' weights (0 without a mix), and its sum over the up
  // nodes: the cluster's fragmented GPUs. FragmentedGpus is O(nodes) after the mix changed, else
  // O(nodes changed since the last call) (it consumes Ledger::TakeChanged: one Fragmentation per
  // ledger).
  double NodeFragmentedGpus(NodeId n) const;
  double FragmentedGpus() const;

 private:
  struct Key {
    Sharing sharing;
    bool critical;
    int gpus, share_milli;
    std::string mig_profile;
    ModelMask models;
    int64_t vram_bytes;   // shares only
    ModelMask vram_fits;  // whole GPUs and MIG: the models whose (profile) memory holds it
    int64_t cpus_milli, memory_bytes;
    auto operator<=>(const Key&) const = default;
  };
  struct Tracked {
    uint64_t weight = 0;
    std::vector<int8_t> mig_index;
    int64_t vram_bytes = 0;  // the largest seen
  };
  // What scoring reads of a class, packed (mig_index points into mix_).
  struct ClassView {
    Sharing sharing;
    int gpus, share_milli;
    int64_t vram_bytes, cpus_milli, memory_bytes;
    int64_t weight, placing;  // its weight, and what placement weighs it by
    const int8_t* mig_index;
  };
  // A node's sum_m x_m F_n(m) by weight (the report's) and as placement weighs.
  struct Scores {
    int64_t weighted = 0, placing = 0;
  };
  struct CacheEntry {
    uint64_t node_version = 0;
    uint64_t epoch = 0;
    Scores scores;
  };

  void Rebuild();
  ModelMask FitsVram(const JobSpec& job) const;
  // Score of node n if its GPUs were in `gpus` with these CPUs and memory free.
  Scores Score(NodeId n, const GpuState* gpus, int64_t cpus_milli, int64_t memory_bytes) const;
  const Scores& NodeScores(NodeId n) const;  // cached

  const Ledger& ledger_;
  bool by_gpus_;       // placement weighs classes by demand
  bool spot_ = false;  // the cluster has spot pools (critical work is a class of its own)
  std::map<Key, Tracked> tracked_;
  uint64_t observed_ = 0;  // workers ever observed
  uint64_t since_decay_ = 0;
  uint64_t since_rebuild_ = 0;
  std::vector<TaskClass> mix_;
  uint64_t total_weight_ = 0;
  uint64_t placing_total_ = 0;
  std::vector<ClassView> views_;  // mix_, packed for Score
  std::vector<uint8_t> pool_ok_;  // [pool * mix_.size() + class]: class may use the pool
  uint64_t epoch_ = 0;            // rebuilds so far
  mutable std::vector<CacheEntry> cache_;
  mutable std::vector<GpuState> scratch_;  // Delta's what-if copy of a node's GPUs
  mutable uint64_t total_version_ = UINT64_MAX;
  mutable uint64_t total_epoch_ = UINT64_MAX;
  mutable double total_gpus_ = 0;
  mutable std::vector<int64_t> summed_;  // per node: its score in total_sum_ (0: down)
  mutable int64_t total_sum_ = 0;
};

}  // namespace gantry::core
