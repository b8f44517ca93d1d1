// GantryPolicy: the default policy for a shared cluster.
//
// Order: tier first. Within a tier, jobs that have waited longer than `aging` go first
// (by arrival), so no job is passed over forever; the rest are taken queue by queue in
// fair-share order: queues still inside their guarantee first, then the lowest
// (decayed usage + current usage) / weight, recomputed as jobs start.
// Preemption: a job that fits inside its queue's guarantee but finds no room may signal
// victims: best-effort jobs first, then standard jobs of queues running above their
// guarantee (borrowed capacity); never critical work; never a job resumed less than
// `min_run_before_repreempt` ago. Among victims: least work lost since the last
// checkpoint, then the fewest victims. It preempts only if a what-if on the ledger shows
// the job then really fits; the victims keep their GPUs for their grace period and the
// job waits for them without preempting again.
// Backfill: the first `backfill_depth` jobs that find no room get a reservation: the
// earliest time they fit, found by releasing running jobs in order of expected end on the
// ledger (what-if), and the GPUs they would take. Those GPUs that are free now are held
// for the rest of the pass; a later job may use them only if its runtime estimate ends
// before the reservation starts. Critical jobs ignore reservations.
// Placement: best fit (fullest node, leaf and shared GPU first), keeping whole nodes and
// leaves free for big gangs.
// Thread-safety: none; driven by one Scheduler.
#pragma once

#include <map>
#include <set>
#include <tuple>
#include <string>
#include <vector>

#include "core/scheduler.h"

namespace gantry::core {

class GantryPolicy final : public Policy {
 public:
  std::string_view name() const override { return "gantry"; }
  void Schedule(Scheduler& s, Ticks now, bool full) override;

 private:
  struct Reservation {
    JobId job;
    Ticks start;
    Allocation alloc;
  };

  // A running job that may be preempted, as the pass's index of candidates holds it.
  struct Victim {
    int category;   // 0: best-effort, 1: standard
    GpuUnits lost;  // GPU units x seconds since the last checkpoint
    JobId id;
    uint64_t pools;  // pools it holds GPUs in (PoolBit)
    bool operator<(const Victim& o) const {
      return std::tie(category, lost, id) < std::tie(o.category, o.lost, o.id);
    }
  };
  struct PreemptKey {
    Scheduler::Shape shape;
    QueueId queue;
    Tier tier;
    auto operator<=>(const PreemptKey&) const = default;
  };

  void Consider(Scheduler& s, JobId id, Ticks now);
  // Fills victims_: the running jobs no rule protects, cheapest first.
  void IndexVictims(const Scheduler& s, Ticks now);
  // Fills candidates_: the cheapest victims (at most kMaxVictims) that may make room for
  // `job`, whose workers may use the pools in `accepts`.
  void Candidates(const Scheduler& s, const JobRecord& job, uint64_t accepts);
  bool TryPreempt(Scheduler& s, JobId id, Ticks now);
  bool Reserve(Scheduler& s, JobId id, Ticks now);
  // Holds (or drops) the parts of the reservations' and claims' allocations that are
  // free now, except those of `except`.
  void HoldPhantoms(Scheduler& s, JobId except = JobId());
  void Hold(Scheduler& s, const Reservation& r);
  Ticks Shadow() const;  // earliest start of a reservation or claim
  std::string Holders(const Scheduler& s) const;  // who the held GPUs are for
  void DropPhantoms(Scheduler& s);
  bool WithinGuarantee(const Scheduler& s, JobId id) const;
  // Whether queue q keeps at least its guarantee with `units` fewer: only work wholly on
  // borrowed capacity is reclaimed, so a victim's queue never drops below its guarantee
  // (and its requeued job never turns round to preempt in its turn: no ping-pong).
  bool Borrowed(const Scheduler& s, QueueId q, GpuUnits units) const;

  std::vector<Reservation> reservations_;
  // Jobs that preempted, until they start or leave: the capacity the what-if found for
  // them (victims' GPUs and the free ones beside them) is held for them meanwhile.
  std::vector<Reservation> claims_;
  std::vector<JobId> considered_;  // claimants already considered in this pass
  Allocation phantoms_;
  std::map<Scheduler::Shape, std::string> refined_;  // this pass: shape -> reason
  std::vector<JobId> order_;
  // Per pass: the preemption candidates (built on first use), and the requests that
  // found neither victims nor a reservation (they fail alike for the rest of the pass).
  std::vector<Victim> victims_;
  bool victims_indexed_ = false;
  Ticks unprotect_ = kForever;  // earliest end of a re-preemption guard
  bool victims_sorted_ = false;
  int candidate_walks_ = 0;
  std::vector<Victim> candidates_;
  std::set<PreemptKey> preempt_failed_;
  std::set<Scheduler::Shape> reserve_failed_;
};

}  // namespace gantry::core
