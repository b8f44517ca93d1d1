#include "core/policy/reserver.h"

#include <algorithm>

#include "core/policy/pools.h"

namespace gantry::core {

bool Reserver::Earliest(const Scheduler& s, WhatIf& w, JobId id, Ticks now,
                        const std::function<bool(JobId)>& ends_now, Ticks& start, Allocation& fit) {
  const Ledger& ledger = w.ledger();
  const JobSpec& spec = s.job(id).spec;
  const uint32_t shape = s.shape_id(id);
  if (failed_.contains(shape)) return false;
  fit.clear();
  start = kForever;
  const GpuUnits need = s.MinUnits(spec);
  // Where nothing changed in the pools the job may use since it last found no room, it
  // finds none again (its placement reads only those): at 100,000 GPUs in two pools, half
  // of the placements a reservation tried were such.
  const uint64_t accepts = AcceptedPools(s, spec);
  bool changed = true;
  size_t steps = 0;
  Ticks latest = now;  // when every job released so far is expected to have ended
  const WhatIf::Mark what_if = w.Checkpoint();  // running jobs released, in order of end
  for (const auto& [end, r] : s.running_by_end()) {
    if (++steps > kMaxReserveSteps) break;
    const JobRecord& running = s.job(r);
    Ticks ends = end;
    if (end <= now && running.phase != Phase::kSignaled) {
      ends = ends_now(r) ? now : now + std::max<Ticks>(now - running.last_start, kTicksPerSecond);
    }
    latest = std::max(latest, ends);
    w.Release(running.alloc);
    for (const WorkerAlloc& worker : running.alloc) {
      changed = changed || (PoolBit(s.cluster().node(worker.node).pool) & accepts) != 0;
    }
    if (ledger.up_units() - ledger.used_units() < need || !changed) continue;  // cannot fit yet
    if (w.Place(spec, Fit::kBest, fit)) {
      start = latest;
      break;
    }
    changed = false;
  }
  w.Rollback(what_if);
  if (start == kForever) {
    failed_.insert(shape);
    return false;
  }
  return true;
}

}  // namespace gantry::core
