// WhatIf: all that a policy piece (Reserver, VictimSelector, Consolidator) may change of the
// scheduler: its ledger, for a what-if. Opened on a ledger checkpoint and rolled back when
// it ends, whatever was released, allocated or placed through it; tries inside it nest
// (Checkpoint, then Rollback or Commit, innermost first). Everything else a piece reads
// through a const Scheduler&; what it finds (victims, a fit, a start, when to look again)
// is its answer, which the policy acts on.
// Thread-safety: none; one at a time per scheduler, inside a pass.
#pragma once

#include "core/scheduler.h"

namespace gantry::core {

class WhatIf {
 public:
  explicit WhatIf(Scheduler& s)
      : ledger_(s.mutable_ledger()), placer_(s.placer()), mark_(ledger_.Checkpoint()) {}
  ~WhatIf() { ledger_.Rollback(mark_); }
  WhatIf(const WhatIf&) = delete;
  WhatIf& operator=(const WhatIf&) = delete;

  const Ledger& ledger() const { return ledger_; }
  void Allocate(const Allocation& alloc) { ledger_.Allocate(alloc); }
  void Release(const Allocation& alloc) { ledger_.Release(alloc); }
  // Placement on the ledger as it stands in the what-if (`out` is allocated there).
  bool Place(const JobSpec& spec, Fit fit, Allocation& out) {
    return placer_.Place(spec, fit, out);
  }
  bool PlaceOn(const JobSpec& spec, Fit fit, NodeId node, Allocation& out) {
    return placer_.PlaceOn(spec, fit, node, out);
  }
  // A try inside the what-if.
  using Mark = Ledger::Mark;
  Mark Checkpoint() { return ledger_.Checkpoint(); }
  void Rollback(Mark mark) { ledger_.Rollback(mark); }
  void Commit(Mark mark) { ledger_.Commit(mark); }

 private:
  Ledger& ledger_;
  Placer& placer_;
  Ledger::Mark mark_;
};

}  // namespace gantry::core
