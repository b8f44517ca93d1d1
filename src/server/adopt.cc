#include "server/adopt.h"

#include <map>
#include <set>
#include <tuple>

namespace gantry::server {

using core::Allocation;
using core::GpuMode;
using core::Ledger;
using core::NodeId;
using core::WorkerAlloc;

namespace {

// What an allocation holds, per node, regardless of how it is split into workers: the
// core may split the same GPUs differently between identical workers.
struct Footprint {
  std::map<uint32_t, uint64_t> whole;  // node -> GPUs held whole
  std::multiset<std::tuple<uint32_t, int8_t, int8_t, int8_t>> mig;   // node, gpu, profile, start
  std::multiset<std::tuple<uint32_t, int8_t, int, int16_t, int64_t>> shares;
  std::map<uint32_t, std::pair<int64_t, int64_t>> host;  // node -> CPUs, memory
  bool operator==(const Footprint&) const = default;
};

Footprint FootprintOf(const Allocation& alloc) {
  Footprint f;
  for (const WorkerAlloc& w : alloc) {
    const uint32_t n = w.node.v;
    switch (w.sharing) {
      case core::Sharing::kExclusive: f.whole[n] |= w.gpu_mask; break;
      case core::Sharing::kMig: f.mig.emplace(n, w.gpu, w.mig_profile, w.mig_start); break;
      default:
        f.shares.emplace(n, w.gpu, static_cast<int>(w.sharing), w.share_milli, w.vram_bytes);
    }
    f.host[n].first += w.cpus_milli;
    f.host[n].second += w.memory_bytes;
  }
  return f;
}

// Fills every free GPU slot of node `n` with blockers (whole GPUs, MIG instances of any
// profile that still fits, the rest of shared GPUs). CPUs and memory are left free.
void Block(Ledger& ledger, NodeId n, Allocation& blockers) {
  const core::Cluster& cluster = ledger.cluster();
  const core::Node& node = cluster.node(n);
  WorkerAlloc whole;
  whole.node = n;
  for (int i = 0; i < node.gpus; ++i) {
    const core::GpuId g = ledger.gpu_id(n, i);
    const core::GpuState& s = ledger.gpu(g);
    if (s.mode == GpuMode::kFree) whole.gpu_mask |= uint64_t{1} << i;
    if (s.mode == GpuMode::kMig) {
      const auto& profiles = cluster.catalog().model(node.model).mig_profiles;
      for (bool placed = true; placed;) {
        placed = false;
        for (size_t p = 0; p < profiles.size() && !placed; ++p) {
          const int start = ledger.MigStart(g, static_cast<int>(p));
          if (start < 0) continue;
          WorkerAlloc w;
          w.node = n;
          w.sharing = core::Sharing::kMig;
          w.gpu = static_cast<int8_t>(i);
          w.mig_profile = static_cast<int8_t>(p);
          w.mig_start = static_cast<int8_t>(start);
          ledger.Allocate(w);
          blockers.push_back(w);
          placed = true;
        }
      }
    }
    if (s.mode == GpuMode::kShared && s.share_used < core::kShareScale) {
      WorkerAlloc w;
      w.node = n;
      w.sharing = s.share_mode;
      w.gpu = static_cast<int8_t>(i);
      w.share_milli = static_cast<int16_t>(core::kShareScale - s.share_used);
      w.vram_bytes = 0;
      if (ledger.Fits(w)) {
        ledger.Allocate(w);
        blockers.push_back(w);
      }
    }
  }
  if (whole.gpu_mask != 0) {
    ledger.Allocate(whole);
    blockers.push_back(whole);
  }
}

}  // namespace

Status Adopt(core::Scheduler& sched, core::JobId job, const Allocation& alloc, core::Ticks started) {
  Ledger& ledger = sched.mutable_ledger();
  const core::Cluster& cluster = sched.cluster();
  std::set<NodeId> nodes;
  for (const WorkerAlloc& w : alloc) {
    if (!w.node.valid() || w.node.v >= cluster.nodes().size()) {
      return Error{"alloc", "names a node that is not in the cluster"};
    }
    if (!ledger.node(w.node).up) {
      return Error{"alloc", "node " + cluster.node(w.node).name + " is not up"};
    }
    nodes.insert(w.node);
  }
  // 1. Take the job's own holdings, so the blockers cannot take them.
  Allocation taken;
  for (const WorkerAlloc& w : alloc) {
    if (!ledger.Fits(w)) {
      for (auto it = taken.rbegin(); it != taken.rend(); ++it) ledger.Release(*it);
      return Error{"alloc", "overlaps what another job holds on " + cluster.node(w.node).name};
    }
    ledger.Allocate(w);
    taken.push_back(w);
  }
  // 2. Block all other room on its nodes, and hide every other node.
  Allocation blockers;
  for (NodeId n : nodes) Block(ledger, n, blockers);
  std::vector<NodeId> hidden;
  for (uint32_t i = 0; i < cluster.nodes().size(); ++i) {
    const NodeId n(i);
    if (!nodes.count(n) && ledger.node(n).up) {
      ledger.SetUp(n, false);
      hidden.push_back(n);
    }
  }
  // 3. Free the job's holdings and let the scheduler place it into exactly that room.
  for (auto it = taken.rbegin(); it != taken.rend(); ++it) ledger.Release(*it);
  std::string why;
  const bool started_ok = sched.TryStart(job, started, core::Fit::kFirst, &why);
  // 4. Restore.
  for (auto it = blockers.rbegin(); it != blockers.rend(); ++it) ledger.Release(*it);
  for (NodeId n : hidden) ledger.SetUp(n, true);
  if (!started_ok) {
    sched.Finish(job, started);
    return Error{"alloc", "the scheduler would not place it again: " + why};
  }
  if (!(FootprintOf(sched.job(job).alloc) == FootprintOf(alloc))) {
    sched.Finish(job, started);
    return Error{"alloc", "the scheduler placed it differently"};
  }
  return Ok{};
}

}  // namespace gantry::server
