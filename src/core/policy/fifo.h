// FifoPolicy: the baseline. Tier first, then arrival order; each job starts if it fits
// now with first-fit placement, otherwise it waits and later jobs may go ahead (greedy,
// no reservations, no preemption). Two of the gantry policy's pieces: ArrivalOrder
// (core/policy/queue_order.h) and the scheduler's TryStart, first-fit.
// Thread-safety: none; driven by one Scheduler.
#pragma once

#include "core/scheduler.h"

namespace gantry::core {

class FifoPolicy final : public Policy {
 public:
  std::string_view name() const override { return "fifo"; }
  void Schedule(Scheduler& s, Ticks now, bool full) override;

 private:
  std::vector<JobId> order_;  // reused between passes
};

}  // namespace gantry::core
