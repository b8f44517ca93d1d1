#include "core/ledger.h"

#include <bit>
#include <cassert>
#include <utility>

#include "core/invariants.h"

namespace gantry::core {

Ledger::Ledger(const Cluster& cluster) : cluster_(&cluster) {
  gpus_.resize(cluster.gpu_count());
  nodes_.resize(cluster.nodes().size());
  node_version_.assign(cluster.nodes().size(), 0);
  changed_flag_.assign(cluster.nodes().size(), 0);
  domain_base_.resize(cluster.nodes().size());
  leaf_free_.assign(cluster.leaves().size(), 0);
  const auto& pools = cluster.pools();
  buckets_.resize(pools.size());
  mig_fit_.resize(pools.size());
  shared_.resize(pools.size());
  shared_level_.resize(pools.size());
  share_level_.assign(cluster.gpu_count(), -1);
  pool_first_gpu_.resize(pools.size());
  for (size_t p = 0; p < pools.size(); ++p) {
    const PoolSpec& spec = pools[p].spec;
    const auto node_count = static_cast<uint32_t>(spec.count);
    const auto gpu_count = static_cast<uint32_t>(spec.count * spec.gpus);
    pool_first_gpu_[p] = spec.count > 0 ? cluster.node(pools[p].first_node).first_gpu.v : 0;
    buckets_[p].assign(static_cast<size_t>(spec.gpus) + 1, DynBitset(node_count));
    size_t profiles =
        spec.model.valid() ? cluster.catalog().model(spec.model).mig_profiles.size() : 0;
    mig_fit_[p].assign(profiles, DynBitset(gpu_count));
    shared_[p].assign(2, DynBitset(gpu_count));
    shared_level_[p].assign(2 * kShareLevels, DynBitset(gpu_count));
  }
  uint32_t domains = 0;
  for (size_t i = 0; i < nodes_.size(); ++i) {
    const Node& n = cluster.nodes()[i];
    nodes_[i].free_whole = n.gpus;
    nodes_[i].free_cpus_milli = n.cpus_milli;
    nodes_[i].free_memory_bytes = n.memory_bytes;
    domain_base_[i] = domains;
    int domain_count = n.gpus_per_domain > 0 ? n.gpus / n.gpus_per_domain : 0;
    for (int d = 0; d < domain_count; ++d) domain_free_.push_back(n.gpus_per_domain);
    domains += static_cast<uint32_t>(domain_count);
    leaf_free_[n.leaf.v] += n.gpus;
    up_units_ += GpuUnits{n.gpus} * kGpuUnits;
    Index(NodeId(static_cast<uint32_t>(i)));
  }
}

uint32_t Ledger::PoolLocalNode(NodeId n) const {
  return n.v - cluster_->pool(cluster_->node(n).pool).first_node.v;
}

uint32_t Ledger::PoolLocalGpu(GpuId g) const {
  return g.v - pool_first_gpu_[cluster_->node(cluster_->gpu_node(g)).pool.v];
}

int Ledger::MigStart(GpuId g, int profile) const {
  const Node& n = cluster_->node(cluster_->gpu_node(g));
  return MigStartOn(gpus_[g.v], cluster_->catalog().model(n.model).mig_profiles[profile]);
}

int Ledger::MigStartOn(const GpuState& s, const MigProfile& p) {
  if (s.mode != GpuMode::kFree && s.mode != GpuMode::kMig) return -1;
  if (s.mig_compute + p.compute_slices > kMigComputeSlices) return -1;
  for (int start : p.starts) {
    if ((s.mig_memory & SliceMask(start, p.memory_slices)) == 0) return start;
  }
  return -1;
}

bool Ledger::Fits(const WorkerAlloc& w, bool need_up) const {
  const NodeState& ns = nodes_[w.node.v];
  if ((need_up && !ns.up) || ns.free_cpus_milli < w.cpus_milli ||
      ns.free_memory_bytes < w.memory_bytes) {
    return false;
  }
  const Node& n = cluster_->node(w.node);
  switch (w.sharing) {
    case Sharing::kExclusive:
      for (uint64_t m = w.gpu_mask; m != 0; m &= m - 1) {
        int local = std::countr_zero(m);
        if (local >= n.gpus || gpus_[gpu_id(w.node, local).v].mode != GpuMode::kFree) return false;
      }
      return true;
    case Sharing::kMig: {
      if (w.gpu < 0 || w.gpu >= n.gpus || !n.model.valid()) return false;
      const GpuState& s = gpus_[gpu_id(w.node, w.gpu).v];
      const auto& profiles = cluster_->catalog().model(n.model).mig_profiles;
      if (w.mig_profile < 0 || static_cast<size_t>(w.mig_profile) >= profiles.size()) return false;
      const MigProfile& p = profiles[w.mig_profile];
      if (s.mode != GpuMode::kFree && s.mode != GpuMode::kMig) return false;
      bool start_ok = false;
      for (int start : p.starts) start_ok |= start == w.mig_start;
      return start_ok && s.mig_compute + p.compute_slices <= kMigComputeSlices &&
             (s.mig_memory & SliceMask(w.mig_start, p.memory_slices)) == 0;
    }
    case Sharing::kMps:
    case Sharing::kTimeslice: {
      if (w.gpu < 0 || w.gpu >= n.gpus) return false;
      return ShareFitsOn(gpus_[gpu_id(w.node, w.gpu).v], w.sharing, w.share_milli, w.vram_bytes,
                         cluster_->catalog().model(n.model).memory_bytes);
    }
  }
  return false;
}

GpuUnits Ledger::GpuUnitsHeld(const WorkerAlloc& w) const {
  switch (w.sharing) {
    case Sharing::kExclusive:
      return GpuUnits{std::popcount(w.gpu_mask)} * kGpuUnits;
    case Sharing::kMig: {
      const Node& n = cluster_->node(w.node);
      return GpuUnits{
                 cluster_->catalog().model(n.model).mig_profiles[w.mig_profile].compute_slices} *
             kUnitsPerMigSlice;
    }
    case Sharing::kMps:
    case Sharing::kTimeslice:
      return GpuUnits{w.share_milli} * kUnitsPerShareMilli;
  }
  return 0;
}

void Ledger::Rollback(Mark mark) {
  assert(open_ > 0 && mark <= journal_.size());
  --open_;  // what is undone below is not journaled
  const int open = std::exchange(open_, 0);
  while (journal_.size() > mark) {
    const Step step = journal_.back();
    journal_.pop_back();
    if (step.allocated) {
      Release(step.w);
    } else {
      Allocate(step.w);
    }
  }
  open_ = open;
}

void Ledger::Commit([[maybe_unused]] Mark mark) {
  assert(open_ > 0 && mark <= journal_.size());
  if (--open_ == 0) journal_.clear();
}

void Ledger::Allocate(const WorkerAlloc& w) {
  // In every build: a GPU, slice or share given twice is the one error no later check
  // could see (the counts would agree with themselves).
  Require(Fits(w, false),
          "Ledger::Allocate: a worker given what another holds (a GPU, MIG "
          "slice, share, VRAM, CPUs or memory over-allocated)");
  if (open_ > 0) journal_.push_back(Step{true, w});
  NodeState& ns = nodes_[w.node.v];
  const Node& n = cluster_->node(w.node);
  Touch(w.node);
  auto take_whole = [&](int local) {
    --ns.free_whole;
    --domain_free_[domain_base_[w.node.v] + local / n.gpus_per_domain];
    --leaf_free_[n.leaf.v];
  };
  if (w.sharing == Sharing::kExclusive) {
    for (uint64_t m = w.gpu_mask; m != 0; m &= m - 1) take_whole(std::countr_zero(m));
  } else if (gpus_[gpu_id(w.node, w.gpu).v].mode == GpuMode::kFree) {
    take_whole(w.gpu);
  }
  TakeGpus(gpus_.data() + n.first_gpu.v, w, cluster_->catalog(), n.model);
  ns.free_cpus_milli -= w.cpus_milli;
  ns.free_memory_bytes -= w.memory_bytes;
  used_units_ += GpuUnitsHeld(w);
  Retouch(w);
}

void Ledger::Release(const WorkerAlloc& w) {
  if (open_ > 0) journal_.push_back(Step{false, w});
  NodeState& ns = nodes_[w.node.v];
  const Node& n = cluster_->node(w.node);
  Touch(w.node);
  for (uint64_t m = ReleaseGpus(gpus_.data() + n.first_gpu.v, w, cluster_->catalog(), n.model);
       m != 0; m &= m - 1) {
    const int local = std::countr_zero(m);  // a GPU now free whole
    ++ns.free_whole;
    ++domain_free_[domain_base_[w.node.v] + local / n.gpus_per_domain];
    ++leaf_free_[n.leaf.v];
  }
  ns.free_cpus_milli += w.cpus_milli;
  ns.free_memory_bytes += w.memory_bytes;
  used_units_ -= GpuUnitsHeld(w);
  Retouch(w);
}

uint64_t Ledger::ReleaseGpus(GpuState* gpus, const WorkerAlloc& w, const Catalog& catalog,
                             ModelId model) {
  switch (w.sharing) {
    case Sharing::kExclusive:
      for (uint64_t m = w.gpu_mask; m != 0; m &= m - 1) {
        GpuState& s = gpus[std::countr_zero(m)];
        assert(s.mode == GpuMode::kWhole);
        s.mode = GpuMode::kFree;
      }
      return w.gpu_mask;
    case Sharing::kMig: {
      GpuState& s = gpus[w.gpu];
      const MigProfile& p = catalog.model(model).mig_profiles[w.mig_profile];
      assert(s.mode == GpuMode::kMig && s.holders > 0);
      s.mig_memory = static_cast<uint8_t>(s.mig_memory & ~SliceMask(w.mig_start, p.memory_slices));
      s.mig_compute = static_cast<uint8_t>(s.mig_compute - p.compute_slices);
      break;
    }
    case Sharing::kMps:
    case Sharing::kTimeslice: {
      GpuState& s = gpus[w.gpu];
      assert(s.mode == GpuMode::kShared && s.holders > 0);
      s.share_used = static_cast<int16_t>(s.share_used - w.share_milli);
      s.vram_used -= w.vram_bytes;
      break;
    }
  }
  GpuState& s =
      gpus[w.gpu];  // a MIG instance or a share: the GPU is free once its last holder goes
  if (--s.holders > 0) return 0;
  s = GpuState{};
  return uint64_t{1} << w.gpu;
}

void Ledger::TakeGpus(GpuState* gpus, const WorkerAlloc& w, const Catalog& catalog, ModelId model) {
  switch (w.sharing) {
    case Sharing::kExclusive:
      for (uint64_t m = w.gpu_mask; m != 0; m &= m - 1) {
        gpus[std::countr_zero(m)].mode = GpuMode::kWhole;
      }
      return;
    case Sharing::kMig: {
      GpuState& s = gpus[w.gpu];
      const MigProfile& p = catalog.model(model).mig_profiles[w.mig_profile];
      s.mode = GpuMode::kMig;
      s.mig_memory |= SliceMask(w.mig_start, p.memory_slices);
      s.mig_compute = static_cast<uint8_t>(s.mig_compute + p.compute_slices);
      ++s.holders;
      return;
    }
    case Sharing::kMps:
    case Sharing::kTimeslice: {
      GpuState& s = gpus[w.gpu];
      if (s.mode == GpuMode::kFree) {
        s.mode = GpuMode::kShared;
        s.share_mode = w.sharing;
      }
      s.share_used = static_cast<int16_t>(s.share_used + w.share_milli);
      s.vram_used += w.vram_bytes;
      ++s.holders;
      return;
    }
  }
}

// Every change of a node's holdings or state starts here (its change counters move).
// Allocate and Release then re-index only what a worker changes: the node's free-GPU
// bucket, and the one GPU of a MIG instance or share (a whole GPU going free <-> whole is
// in no MIG or shared index either way).
void Ledger::Touch(NodeId n) {
  ++node_version_[n.v];
  ++version_;
  if (!changed_flag_[n.v]) {
    changed_flag_[n.v] = 1;
    changed_.push_back(n.v);
  }
  if (!nodes_[n.v].up) return;
  buckets_[cluster_->node(n).pool.v][nodes_[n.v].free_whole].reset(PoolLocalNode(n));
}

void Ledger::Retouch(const WorkerAlloc& w) {
  if (!nodes_[w.node.v].up) return;
  buckets_[cluster_->node(w.node).pool.v][nodes_[w.node.v].free_whole].set(PoolLocalNode(w.node));
  if (w.sharing != Sharing::kExclusive) IndexGpu(gpu_id(w.node, w.gpu), true);
}

void Ledger::SetUp(NodeId n, bool up) {
  if (nodes_[n.v].up == up) return;
  const GpuUnits units = GpuUnits{cluster_->node(n).gpus} * kGpuUnits;
  if (up) {
    Touch(n);  // still down: only the counters move
    nodes_[n.v].up = true;
    up_units_ += units;
    Index(n);
  } else {
    Unindex(n);
    nodes_[n.v].up = false;
    up_units_ -= units;
  }
}

void Ledger::Unindex(NodeId n) {
  Touch(n);
  if (!nodes_[n.v].up) return;
  for (int i = 0; i < cluster_->node(n).gpus; ++i) IndexGpu(gpu_id(n, i), false);
}

void Ledger::Index(NodeId n) {
  if (!nodes_[n.v].up) return;
  const Node& node = cluster_->node(n);
  buckets_[node.pool.v][nodes_[n.v].free_whole].set(PoolLocalNode(n));
  for (int i = 0; i < node.gpus; ++i) IndexGpu(gpu_id(n, i), true);
}

void Ledger::IndexGpu(GpuId g, bool on) {
  const GpuState& s = gpus_[g.v];
  const PoolId pool = cluster_->node(cluster_->gpu_node(g)).pool;
  const uint32_t local = PoolLocalGpu(g);
  auto& fits = mig_fit_[pool.v];
  for (size_t p = 0; p < fits.size(); ++p) {
    fits[p].assign(local, on && s.mode == GpuMode::kMig && MigStart(g, static_cast<int>(p)) >= 0);
  }
  const bool has_room = on && s.mode == GpuMode::kShared && s.share_used < kShareScale;
  shared_[pool.v][0].assign(local, has_room && s.share_mode == Sharing::kMps);
  shared_[pool.v][1].assign(local, has_room && s.share_mode == Sharing::kTimeslice);
  // By free share: clear the bit where the GPU was, set the one where it is now.
  int8_t& level = share_level_[g.v];
  if (level >= 0) shared_level_[pool.v][static_cast<size_t>(level)].reset(local);
  level = -1;
  if (has_room) {
    level = static_cast<int8_t>((s.share_mode == Sharing::kMps ? 0 : kShareLevels) +
                                ShareLevel(kShareScale - s.share_used));
    shared_level_[pool.v][static_cast<size_t>(level)].set(local);
  }
}

void Ledger::Audit() const {
  std::vector<int> domain(domain_free_.size(), 0), leaf(leaf_free_.size(), 0);
  GpuUnits used = 0;
  for (uint32_t v = 0; v < nodes_.size(); ++v) {
    const NodeId n(v);
    const Node& node = cluster_->node(n);
    const NodeState& ns = nodes_[v];
    int free = 0;
    for (int i = 0; i < node.gpus; ++i) {
      const GpuState& g = gpus_[gpu_id(n, i).v];
      switch (g.mode) {
        case GpuMode::kFree:
          Require(g.holders == 0 && g.share_used == 0 && g.mig_memory == 0,
                  "Ledger::Audit: a free GPU with holders");
          ++free;
          ++domain[domain_base_[v] + i / node.gpus_per_domain];
          ++leaf[node.leaf.v];
          break;
        case GpuMode::kWhole:
          used += kGpuUnits;
          break;
        case GpuMode::kMig:
          Require(g.holders > 0 && g.mig_compute <= kMigComputeSlices,
                  "Ledger::Audit: a MIG GPU over its compute slices or with no holder");
          used += GpuUnits{g.mig_compute} * kUnitsPerMigSlice;
          break;
        case GpuMode::kShared:
          Require(g.holders > 0 && g.share_used > 0 && g.share_used <= kShareScale,
                  "Ledger::Audit: a shared GPU over its share or with no holder");
          used += GpuUnits{g.share_used} * kUnitsPerShareMilli;
          break;
      }
    }
    Require(free == ns.free_whole, "Ledger::Audit: a node's free GPUs miscounted");
    Require(ns.free_cpus_milli >= 0 && ns.free_cpus_milli <= node.cpus_milli &&
                ns.free_memory_bytes >= 0 && ns.free_memory_bytes <= node.memory_bytes,
            "Ledger::Audit: a node's CPUs or memory over-allocated");
  }
  Require(domain == domain_free_, "Ledger::Audit: an NVLink domain's free GPUs miscounted");
  Require(leaf == leaf_free_, "Ledger::Audit: a leaf's free GPUs miscounted");
  Require(used == used_units_, "Ledger::Audit: the GPU units held miscounted");
}

}  // namespace gantry::core
