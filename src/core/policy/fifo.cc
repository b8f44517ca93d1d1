#include "core/policy/fifo.h"

#include <algorithm>

namespace gantry::core {

void FifoPolicy::Schedule(Scheduler& s, Ticks now, bool full) {
  order_.clear();
  if (full) {
    for (const auto& key : s.pending()) order_.push_back(key.id);
  } else {
    for (JobId id : s.arrived_since_last_pass()) {
      if (s.job(id).phase == Phase::kPending) order_.push_back(id);
    }
    std::sort(order_.begin(), order_.end(), [&](JobId a, JobId b) {
      const JobRecord& ja = s.job(a);
      const JobRecord& jb = s.job(b);
      return Scheduler::PendingKey{ja.spec.tier, ja.submit, a} <
             Scheduler::PendingKey{jb.spec.tier, jb.submit, b};
    });
  }
  for (JobId id : order_) s.TryStart(id, now, Fit::kFirst);
}

}  // namespace gantry::core
