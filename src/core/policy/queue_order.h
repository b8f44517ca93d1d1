// QueueOrdering: the order in which the gantry policy offers the pending jobs of a tier;
// ArrivalOrder: fifo's, and the gantry policy's between full passes.
//
// Between queues, fair share: the queue whose next job fits its guarantee comes first,
// then the one with the least (decayed usage + current usage) / weight, its standing read
// again after each job it offers. Within a queue, arrival order (`order: fair-share`, the
// default) or rank (`order: las | gittins`, core/attained.h): a job's rank is the level
// of its attained service (LAS) or minus the Gittins index of the service it has had,
// from the queue's own completed run times; lower goes first, then arrival. Before both,
// a job's nice value (Slurm's --nice; lower first), once any job has one: it orders, and
// never preempts, where rank does both.
// Thread-safety: none; one per policy, driven by one Scheduler.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <vector>

#include "core/scheduler.h"

namespace gantry::core {

// The pending jobs in arrival order within tiers (Scheduler::PendingKey): every one
// (`all`), or those that arrived since the last pass. fifo's whole order; the gantry
// policy's between full passes.
void ArrivalOrder(const Scheduler& s, bool all, std::vector<JobId>& out);

class QueueOrdering {
 public:
  // Reads each queue's order (the nearest setting up the tree) once the scheduler's
  // queues are known; call at the start of every pass (cheap after the first).
  void Init(const Scheduler& s);
  // Queue q's order (fair-share before Init).
  QueueOrder Of(QueueId q) const {
    return q.v < orders_.size() ? orders_[q.v] : QueueOrder::kFairShare;
  }
  bool ByRank(QueueId q) const { return Of(q) != QueueOrder::kFairShare; }
  // Whether queue q's pending jobs are offered from a sorted list (by nice value or rank)
  // rather than in arrival order.
  bool Listed(const Scheduler& s, QueueId q) const { return ByRank(q) || s.any_nice(); }
  bool AnyByRank() const { return any_by_rank_; }  // some queue orders by attained service
  // A job's rank in its queue now: lower goes first (0 for every job under fair-share).
  double Rank(const Scheduler& s, const JobRecord& job, Ticks now);
  // Offers the pending jobs of `tier` submitted after `after` to `consider`, one at a
  // time, in the order above. `consider` may start the job it is given (or anything
  // else that changes the queues' usage): the order follows.
  void Offer(const Scheduler& s, Tier tier, Ticks after, Ticks now,
             const std::function<void(JobId)>& consider);

 private:
  double Gittins(const Scheduler& s, QueueId q, Ticks done);  // memoised GittinsIndex
  // Fills ranked_[q] with the pending jobs of `tier` in queue q that arrived after
  // `after`, lowest nice value first, then best rank.
  void RankPending(const Scheduler& s, Tier tier, QueueId q, Ticks after, Ticks now);

  std::vector<QueueOrder> orders_;
  bool any_by_rank_ = false;
  // Per queue: the sorted run times its Gittins indexes come from (as of `count`
  // completions) with the indexes computed so far, and the pass's ranked pending jobs.
  struct GittinsDist {
    uint64_t count = UINT64_MAX;
    std::vector<Ticks> sorted;
    std::map<Ticks, double> index;  // by work done
  };
  std::vector<GittinsDist> gittins_;
  std::vector<std::vector<JobId>> ranked_;
};

}  // namespace gantry::core
