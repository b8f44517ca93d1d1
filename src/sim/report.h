// Report: the figures of a run (spec section 6), accumulated as the run goes.
//
// The simulator feeds it every state change; Write() produces the JSON report and
// Summary() the lines printed on a terminal. Figures are derived from the same facts
// the event log records, so an independent reader of the log can recompute them.
// Thread-safety: none.
#pragma once

#include <map>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "core/model/queue.h"
#include "core/model/types.h"

namespace gantry::sim {

// Integrals of GPU units (7,000 a GPU) times ms. int64 overflows past about 1.3e15 GPU-ms,
// which a fill replay reaches (6,212 GPUs held for 10^9 s: the report said 0% utilisation):
// 128 bits (a GCC/Clang extension) keep them exact.
__extension__ typedef __int128 UnitMs;

struct Percentiles {
  double mean = 0, p50 = 0, p95 = 0, p99 = 0, max = 0;
  size_t count = 0;
};
Percentiles Summarize(std::vector<double> values);

class Report {
 public:
  Report(const core::QueueTree& queues, std::string policy);

  void Submitted(core::Ticks t);
  // Free GPUs over the run, time-weighted, by why nothing used them (Timeline's causes).
  void IdleByCause(std::vector<std::pair<std::string, double>> means) {
    idle_by_cause_ = std::move(means);
  }
  void Rejected(std::string job, std::string reason) {
    ++rejected_;
    rejected_jobs_.emplace_back(std::move(job), std::move(reason));
  }
  void Started(core::Tier tier, core::QueueId queue, core::Ticks wait, bool first_start);
  // The first start of a critical job that arrived inside its queue's guarantee (its
  // queue's usage, its queue's pending critical work and itself within the guarantee):
  // such jobs should never wait longer than their victims' grace period (issue 3).
  void CriticalInGuaranteeStarted(core::Ticks wait) {
    critical_in_guarantee_wait_ms_.push_back(static_cast<double>(wait));
  }
  void Finished(core::Ticks t, core::Tier tier, core::QueueId queue, core::Ticks jct);
  void Reclaimed() { ++reclaimed_; }
  void Preempted(core::QueueId queue) {
    ++preemptions_;
    ++by_queue_[queue.v].preemptions;
  }
  void Requeued() { ++requeues_; }
  void Resized() { ++resizes_; }
  // Jobs still pending or running when the run ended (nothing left could change them).
  void Unfinished(size_t n) { unfinished_ = n; }
  // Why a run ended early; work since the last checkpoint is lost.
  enum class Cause : uint8_t { kPreempt = 0, kRequeue = 1, kReclaim = 2 };
  static constexpr int kCauses = 3;
  // A run ended: its GPU units held from start to end. `lost_ms` of its run time is
  // thrown away, for `cause` (ignored when lost_ms is 0).
  void RunEnded(core::QueueId queue, core::Tier tier, core::GpuUnits units, core::Ticks start,
                core::Ticks end, core::Ticks lost_ms, Cause cause);
  // GPU units x ms a queue held GPUs of one model (the run of one worker, say).
  void ModelUsage(core::QueueId queue, const std::string& model, UnitMs unit_ms) {
    by_queue_[queue.v].alloc_by_model[model] += unit_ms;
  }
  // Capacity or allocation changed at t: advance the integrals.
  void Advance(core::Ticks t, core::GpuUnits up_units, core::GpuUnits used_units);
  // The cluster's fragmented GPUs (core::Scheduler::fragmented_gpus) from t on; call
  // right after Advance(t).
  void Fragmented(core::Ticks t, double gpus);
  void SchedulingPass(double wall_ms) { pass_ms_.push_back(wall_ms); }
  // Chargeback: each model's price per GPU-hour (by name; 1 where absent) and the
  // currency, for the cost figures.
  void SetPrices(std::map<std::string, double> price_by_model, std::string currency) {
    prices_ = std::move(price_by_model);
    currency_ = std::move(currency);
  }
  // A run of a job with observed usage: GPU unit-ms it held, unit-ms busy (utilization-
  // weighted), and unit-ms the right-sized shape would have left free.
  void ObservedUsage(core::QueueId queue, double held, double busy, double frees) {
    Group& g = by_queue_[queue.v];
    g.observed += held;
    g.busy += busy;
    g.frees += frees;
  }
  // A queue's budget ran out (core/budget.h): counted per queue.
  void BudgetSpent(core::QueueId queue) { ++by_queue_[queue.v].budget_spent; }
  void Events(size_t n) { events_ += n; }

  void Write(std::ostream& out) const;
  void Summary(std::ostream& out) const;

  double gpu_utilization_pct() const;
  // Allocated over up GPU units just after the pass at the latest arrival (FGD's
  // "allocation ratio at 130% arrivals" when arrivals stop at 1.3x capacity).
  double allocation_ratio_at_last_arrival_pct() const { return ratio_at_last_arrival_; }
  // Fragmented over up GPUs just after the pass at the latest arrival, and its
  // time-weighted mean from the first submit to the latest finish (as utilization).
  double fragmentation_at_last_arrival_pct() const { return frag_at_last_arrival_; }
  // At the last arrival, after its pass: the GPU units of the up nodes that no pending job
  // could use (core::StrandedUnits). The allocation ratio no placement of the pending
  // jobs could pass from that state is 100% less these.
  void StrandedAtLastArrival(core::GpuUnits up_units, core::GpuUnits stranded_units) {
    if (up_units > 0) {
      bound_at_last_arrival_ =
          100.0 * static_cast<double>(up_units - stranded_units) / static_cast<double>(up_units);
    }
  }
  double allocation_bound_at_last_arrival_pct() const { return bound_at_last_arrival_; }
  core::Ticks last_submit() const { return last_submit_; }  // -1 before the first
  double fragmentation_mean_pct() const;
  // Queue waits (ms) of the jobs of a tier that started, in start order.
  const std::vector<double>& waits_ms(core::Tier tier) const {
    return wait_ms_[static_cast<int>(tier)];
  }

 private:
  const core::QueueTree& queues_;
  std::string policy_;
  std::map<std::string, double> prices_;
  std::string currency_;
  size_t submitted_ = 0, finished_ = 0, rejected_ = 0, reclaimed_ = 0;
  std::vector<std::pair<std::string, std::string>> rejected_jobs_;  // job, why
  std::vector<std::pair<std::string, double>> idle_by_cause_;       // cause, mean GPUs
  size_t starts_ = 0, preemptions_ = 0, requeues_ = 0, events_ = 0, unfinished_ = 0;
  size_t resizes_ = 0;  // elastic jobs' (written only where there were some)
  core::Ticks first_submit_ = -1, last_finish_ = -1;
  core::Ticks last_submit_ = -1;
  double ratio_at_last_arrival_ = 0;
  double frag_at_last_arrival_ = 0;
  double bound_at_last_arrival_ = 0;
  double frag_gpus_ = 0;  // fragmented GPUs in force since frag_t_
  core::Ticks frag_t_ = 0;
  double frag_ = 0, frag_at_submit_ = 0, frag_at_finish_ = 0;  // integrals, GPU-ms
  std::vector<double> wait_ms_[core::kTierCount];
  std::vector<double> jct_s_;
  std::vector<double> critical_in_guarantee_wait_ms_;
  std::vector<double> pass_ms_;
  // Integrals in unit-ms from t = 0, and their values at the first submit and the
  // latest finish.
  core::Ticks last_t_ = 0;
  core::GpuUnits up_units_ = 0, used_units_ = 0;
  UnitMs cap_ = 0, alloc_ = 0, cap_at_submit_ = 0, alloc_at_submit_ = 0;
  UnitMs cap_at_finish_ = 0, alloc_at_finish_ = 0;
  UnitMs lost_ = 0;
  UnitMs lost_by_cause_[kCauses] = {};
  struct Group {  // figures per queue and per tier
    UnitMs alloc = 0;
    std::map<std::string, UnitMs> alloc_by_model;  // queues only
    size_t preemptions = 0;
    UnitMs lost_by_cause[kCauses] = {};        // work its jobs lost, by Cause
    size_t budget_spent = 0;                   // times its budget ran out (queues only)
    double observed = 0, busy = 0, frees = 0;  // unit-ms, jobs with observed usage (queues only)
    std::vector<double> wait_ms, jct_s;
  };
  std::vector<Group> by_queue_;
  Group by_tier_[core::kTierCount];
};

}  // namespace gantry::sim
