// HeldGpus: GPUs held free on the ledger for jobs that wait for them (GantryPolicy's
// claims and reservations; its drains hold theirs with HoldFree too), and whom each part is
// held for. Held parts are allocated on the ledger as workers of no job ("phantoms"), so
// placement sees them taken; a job that may use some lets them go for its try, in a
// LetGoScope, and they are held again after it.
// Thread-safety: none; owned by one policy.
#pragma once

#include <cstdint>
#include <vector>

#include "core/policy/pools.h"
#include "core/scheduler.h"

namespace gantry::core {

class HeldGpus {
 public:
  // Held parts and, part by part, the job each is held for.
  struct Parts {
    Allocation parts;
    std::vector<JobId> holders;
  };

  bool empty() const { return held_.parts.empty(); }
  // The pools some held part lies in (PoolBit).
  uint64_t pools() const { return pools_; }

  // Holds for `holder` the parts of `alloc` in `pools` that are free now (HoldFree).
  void Hold(Scheduler& s, JobId holder, const Allocation& alloc, uint64_t pools, bool fence);
  // Lets go of the held parts in `pools`, handing them back in `dropped` when given.
  void LetGoIn(Scheduler& s, uint64_t pools, Parts* dropped = nullptr);
  // Lets go of the held parts that `drop(part, holder)` names, the rest kept in order;
  // what it let go of is handed back in `dropped` when given.
  template <typename Pred>
  void LetGo(Scheduler& s, Pred drop, Parts* dropped = nullptr);

  // Allocates on the ledger the parts of `alloc` in `pools` that are free now and adds them
  // to `into`: whole GPUs one by one (a GPU taken meanwhile does not void the rest), other
  // workers whole. With `fence` (a claim's), also what is free now of a GPU that others
  // (its victims) still partly use: else a job starting there voids the claim.
  static void HoldFree(Scheduler& s, const Allocation& alloc, uint64_t pools, Allocation& into,
                       bool fence);

  // While it lives, the held parts in `pools` are let go. At its end, unless Keep() was
  // called, the ledger rolls back to where it stood before (whatever was allocated or
  // released meanwhile undone, on the ledger's Checkpoint/Rollback) and the parts are held
  // again as they were; parts held meanwhile are let go with the rollback. After Keep()
  // the ledger keeps what was done and the parts stay let go. One at a time.
  class LetGoScope {
   public:
    LetGoScope(HeldGpus& held, Scheduler& s, uint64_t pools);
    ~LetGoScope();
    LetGoScope(const LetGoScope&) = delete;
    LetGoScope& operator=(const LetGoScope&) = delete;
    void Keep();

   private:
    HeldGpus& held_;
    Scheduler& s_;
    Ledger::Mark mark_;
    size_t kept_;  // held parts left after the let-go
    bool done_ = false;
  };

 private:
  Parts held_;
  uint64_t pools_ = 0;
  Parts scratch_;  // what the open LetGoScope let go of (its buffer reused)
};

template <typename Pred>
void HeldGpus::LetGo(Scheduler& s, Pred drop, Parts* dropped) {
  if (dropped) {
    dropped->parts.clear();
    dropped->holders.clear();
  }
  Ledger& ledger = s.mutable_ledger();
  for (size_t i = held_.parts.size(); i-- > 0;) {
    if (drop(held_.parts[i], held_.holders[i])) ledger.Release(held_.parts[i]);
  }
  // The rest kept in order.
  pools_ = 0;
  size_t kept = 0;
  for (size_t i = 0; i < held_.parts.size(); ++i) {
    const WorkerAlloc& p = held_.parts[i];
    if (drop(p, held_.holders[i])) {
      if (dropped) {
        dropped->parts.push_back(p);
        dropped->holders.push_back(held_.holders[i]);
      }
      continue;
    }
    pools_ |= PoolBit(s.cluster().node(p.node).pool);
    held_.parts[kept] = p;
    held_.holders[kept++] = held_.holders[i];
  }
  held_.parts.resize(kept);
  held_.holders.resize(kept);
}

}  // namespace gantry::core
