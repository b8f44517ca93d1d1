#include "core/policy/fifo.h"

#include "core/policy/queue_order.h"

namespace gantry::core {

void FifoPolicy::Schedule(Scheduler& s, Ticks now, bool full) {
  ArrivalOrder(s, full, order_);
  for (JobId id : order_) s.TryStart(id, now, Fit::kFirst);
}

}  // namespace gantry::core
