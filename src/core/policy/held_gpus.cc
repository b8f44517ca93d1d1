#include "core/policy/held_gpus.h"

#include <algorithm>
#include <bit>
#include <cassert>
#include <tuple>

namespace gantry::core {

namespace {

// Holds what is free now of local GPU `gpu` of `node`, a GPU that jobs (a claimant's
// victims) still partly use: its free MIG memory slices in [lo, hi) as MIG instances
// (those that use the fewest compute slices per memory slice first), or `share` and
// `vram` of a shared GPU's free share (all of it when negative), in the GPU's own mode.
// Instances are what the ledger knows how to hold; a slice no profile can take alone
// (the eighth) stays free, as no job can use it alone either.
void HoldFreePart(Ledger& ledger, NodeId node, int gpu, int lo, int hi, int share, int64_t vram,
                  Allocation& into) {
  const GpuState& g = ledger.gpu(ledger.gpu_id(node, gpu));
  const Node& n = ledger.cluster().node(node);
  if (g.mode == GpuMode::kShared) {
    const int free_share = kShareScale - g.share_used;
    const int64_t free_vram = ledger.cluster().catalog().model(n.model).memory_bytes - g.vram_used;
    WorkerAlloc p;
    p.node = node;
    p.sharing = g.share_mode;
    p.gpu = static_cast<int8_t>(gpu);
    p.share_milli = static_cast<int16_t>(share < 0 ? free_share : std::min(share, free_share));
    p.vram_bytes = vram < 0 ? free_vram : std::min(vram, free_vram);
    if (p.share_milli > 0 && ledger.Fits(p)) {
      ledger.Allocate(p);
      into.push_back(p);
    }
    return;
  }
  if (g.mode != GpuMode::kMig) return;
  const auto& profiles = ledger.cluster().catalog().model(n.model).mig_profiles;
  std::vector<int> order(profiles.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int>(i);
  std::sort(order.begin(), order.end(), [&](int a, int b) {
    const MigProfile& x = profiles[a];
    const MigProfile& y = profiles[b];
    return std::tuple(x.compute_slices * y.memory_slices, -x.memory_slices, a) <
           std::tuple(y.compute_slices * x.memory_slices, -y.memory_slices, b);
  });
  for (int i : order) {
    for (int start : profiles[i].starts) {
      if (start < lo || start + profiles[i].memory_slices > hi) continue;
      WorkerAlloc p;
      p.node = node;
      p.sharing = Sharing::kMig;
      p.gpu = static_cast<int8_t>(gpu);
      p.mig_profile = static_cast<int8_t>(i);
      p.mig_start = static_cast<int8_t>(start);
      if (!ledger.Fits(p)) continue;
      ledger.Allocate(p);
      into.push_back(p);
    }
  }
}

}  // namespace

void HeldGpus::HoldFree(Scheduler& s, const Allocation& alloc, uint64_t pools, Allocation& into,
                        bool fence) {
  Ledger& ledger = s.mutable_ledger();
  auto hold = [&](const WorkerAlloc& p) {
    if (!ledger.Fits(p)) return false;
    ledger.Allocate(p);
    into.push_back(p);
    return true;
  };
  for (const WorkerAlloc& w : alloc) {
    if ((PoolBit(s.cluster().node(w.node).pool) & pools) == 0) continue;
    // Whole GPUs: those still free, so a GPU taken meanwhile does not void the rest
    // (checked one by one, held as one allocation per node: a ledger update each).
    if (w.sharing == Sharing::kExclusive) {
      WorkerAlloc p;
      p.node = w.node;
      uint64_t free = 0, partly = 0;
      for (uint64_t m = w.gpu_mask; m != 0; m &= m - 1) {
        p.gpu_mask = uint64_t{1} << std::countr_zero(m);
        if (ledger.Fits(p)) {
          free |= p.gpu_mask;
        } else {
          partly |= p.gpu_mask;
        }
      }
      p.gpu_mask = free;
      if (free != 0) hold(p);
      // A claim also holds what its victims free of a GPU they share with others, as they
      // leave: else a job starting there voids the claim (and its victims, requeued,
      // are preempted again, for ever).
      for (uint64_t m = fence ? partly : 0; m != 0; m &= m - 1) {
        HoldFreePart(ledger, w.node, std::countr_zero(m), 0, kMigMemorySlices, -1, -1, into);
      }
      continue;
    }
    WorkerAlloc p = w;
    p.cpus_milli = 0;
    p.memory_bytes = 0;
    if (hold(p) || !fence) continue;
    if (w.sharing == Sharing::kMig) {
      const MigProfile& profile =
          s.cluster().catalog().model(s.cluster().node(w.node).model).mig_profiles[w.mig_profile];
      HoldFreePart(ledger, w.node, w.gpu, w.mig_start, w.mig_start + profile.memory_slices, -1, -1,
                   into);
    } else {
      // Of a GPU shared in its own mode, the share it needs; else all that is free (it
      // needs the GPU emptied of the other mode's sharers).
      const GpuState& g = ledger.gpu(ledger.gpu_id(w.node, w.gpu));
      const bool same = g.mode == GpuMode::kShared && g.share_mode == w.sharing;
      HoldFreePart(ledger, w.node, w.gpu, 0, kMigMemorySlices, same ? w.share_milli : -1,
                   same ? w.vram_bytes : -1, into);
    }
  }
}

void HeldGpus::Hold(Scheduler& s, JobId holder, const Allocation& alloc, uint64_t pools,
                    bool fence) {
  const size_t before = held_.parts.size();
  HoldFree(s, alloc, pools, held_.parts, fence);
  for (size_t i = before; i < held_.parts.size(); ++i) {
    pools_ |= PoolBit(s.cluster().node(held_.parts[i].node).pool);
  }
  held_.holders.resize(held_.parts.size(), holder);
}

void HeldGpus::LetGoIn(Scheduler& s, uint64_t pools, Parts* dropped) {
  LetGo(
      s,
      [&](const WorkerAlloc& p, JobId) {
        return (PoolBit(s.cluster().node(p.node).pool) & pools) != 0;
      },
      dropped);
}

HeldGpus::LetGoScope::LetGoScope(HeldGpus& held, Scheduler& s, uint64_t pools)
    : held_(held), s_(s), mark_(s.mutable_ledger().Checkpoint()) {
  held_.LetGoIn(s, pools, &held_.scratch_);
  kept_ = held_.held_.parts.size();
}

HeldGpus::LetGoScope::~LetGoScope() {
  if (done_) return;
  // The ledger as it was before the let-go; the parts held meanwhile are gone with it,
  // and those let go are held again, after the rest, as they were.
  s_.mutable_ledger().Rollback(mark_);
  Parts& held = held_.held_;
  assert(held.parts.size() >= kept_);
  held.parts.resize(kept_);
  held.holders.resize(kept_);
  held_.pools_ = 0;
  for (const WorkerAlloc& p : held.parts) held_.pools_ |= PoolBit(s_.cluster().node(p.node).pool);
  const Parts& dropped = held_.scratch_;
  for (size_t i = 0; i < dropped.parts.size(); ++i) {
    held.parts.push_back(dropped.parts[i]);
    held.holders.push_back(dropped.holders[i]);
    held_.pools_ |= PoolBit(s_.cluster().node(dropped.parts[i].node).pool);
  }
}

void HeldGpus::LetGoScope::Keep() {
  assert(!done_);
  s_.mutable_ledger().Commit(mark_);
  done_ = true;
}

}  // namespace gantry::core
