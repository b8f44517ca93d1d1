// GantryPolicy: the default policy for a shared cluster.
//
// Order: tier first. Within a tier, jobs that have waited longer than `aging` go first
// (by arrival), so no job is passed over forever; the rest are taken queue by queue in
// fair-share order: queues still inside their guarantee first, then the lowest
// (decayed usage + current usage) / weight, recomputed as jobs start
// (core/policy/queue_order.h, which also ranks attained-service queues).
// Preemption: a job that fits inside its queue's guarantee but finds no room may signal
// victims: best-effort jobs first, then standard jobs of queues running above their
// guarantee (borrowed capacity); never critical work; never a job resumed less than
// `min_run_before_repreempt` ago. Beyond its guarantee a job of a tier that
// `best_effort_yields_to` names (critical by default) may still take best-effort jobs,
// and only those. Among victims: least work lost since the last
// checkpoint, then the fewest victims. It preempts only if a what-if on the ledger shows
// the job then really fits; the victims keep their GPUs for their grace period and the
// job waits for them without preempting again. A job that is not critical takes a victim
// that checkpoints only within `preempt_after_checkpoint` of the victim's last checkpoint
// (it waits for the next one otherwise), so the victim loses at most that plus its grace;
// standard work that never checkpoints, only within that of its start (else it waits for
// the victim to end).
// Backfill: the first `backfill_depth` jobs that find no room get a reservation: the
// earliest time they fit, found by releasing running jobs in order of expected end on the
// ledger (what-if), and the GPUs they would take. Those GPUs that are free now are held
// for the rest of the pass; a later job may use them only if its runtime estimate ends
// before the reservation starts. Critical jobs ignore reservations. Such a backfilled
// job holds a lease that ends with its estimate. Once it runs past that, a job due for
// a reservation that has waited longer than `backfill_lease_after` may preempt it (and
// only such jobs; of its own tier or lower, at the checkpoint windows above) when that
// lets it start now, and that job's reservation counts it as ending now: an estimate
// that was wrong (a long job whose queue's history says hours) cannot hold a big gang
// back for days. Slurm's time limit, applied only where a starving reservation waits for
// the GPUs, without throwing away more than a window's work.
// Attained-service orders (core/attained.h): a queue with `order: las` or `gittins`
// offers its jobs to fair share by rank (then arrival) instead of by arrival, and a job
// that finds no room may preempt running jobs of its own queue, of its tier or lower,
// that rank strictly worse now (the same checkpoint window and re-preemption guard as
// above); while such jobs wait, a pass re-ranks every `attained_quantum`.
// Bounded waits (`max_wait`, per queue or the policy's; off by default): a job pending
// that long drains. It is considered first; it keeps a reservation of its own beyond
// backfill_depth that stays where it was made (no job but a critical one starts on its
// GPUs, however short, and it does not recede as estimates overrun; it holds the free
// part of a GPU others still use); and the room its queues' burst limits leave is held
// for it. One drain at a time per pool (the longest waiting first), else drains starve
// one another's backfill and more jobs wait past the setting. A drain's owner that is
// not best-effort preempts as a job inside its guarantee does (best-effort work and
// other queues' borrowed capacity, just after their checkpoints). Its wait is then
// bounded by max_wait plus the drains before it plus, where such victims make room,
// their checkpoint interval and grace, else the longest remaining run of the jobs on
// its reserved GPUs (or under its queues' limits).
// A preempted job does not start again while its preemptor still waits on its claim,
// and a claim holds what its victims free as they leave, part of a GPU included (else
// another job starts in a victim's MIG slice or share and the claim lapses when the
// last victim leaves); claims are held before drains, and drains before reservations.
// Placement: best fit (fullest node, leaf and shared GPU first), keeping whole nodes and
// leaves free for big gangs. With `consolidate_within` set, a job of one worker that
// finds no room and no victims may move a few running jobs elsewhere, as preemptions
// under its claim (core/policy/consolidator.h).
// Thread-safety: none; driven by one Scheduler.
#pragma once

#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "core/policy/consolidator.h"
#include "core/policy/held_gpus.h"
#include "core/policy/queue_order.h"
#include "core/policy/reserver.h"
#include "core/policy/victims.h"
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

  using Mode = VictimSelector::Mode;
  struct PreemptKey {
    // Scheduler::shape_id; for a critical job's guarantee what-if its fit class instead
    // (by_class): critical work is mostly small inference jobs whose VRAM varies from job
    // to job, and its node-by-node what-if walks every running job (half the time of the
    // 1M-job replay's first hours). Likewise taking best-effort work beyond the guarantee
    // (kTier), which reads no queue either (the key's queue is none there): per shape,
    // nearly every standard job missed. Other modes keep the shape: per class, they changed
    // which jobs preempted on a gen workload with gittins. Per class: the same decisions on
    // every workload compared, and a waiting job's checkpoint hint may differ (a cached
    // answer skips a walk, and walks decide when the index is sorted: docs/benchmarks.md).
    uint32_t shape;
    bool by_class;
    QueueId queue;
    Tier tier;
    Mode mode;
    ModelMask models;  // where the job may preempt
    double rank;       // kRank: the job's rank (0 otherwise)
    auto operator<=>(const PreemptKey&) const = default;
  };
  // A job started on GPUs held for a reservation, because its estimate ended first.
  struct Lease {
    JobId job;
    Ticks start;  // its run's start: the lease ends with that run
  };

  // Reservations of draining jobs: kept across passes where they were made, until the job
  // starts or leaves (or a node of theirs goes down); never let to backfill.
  struct Drain {
    Reservation r;
    Allocation held;  // what of it is held on the ledger now (during a pass)
  };

  // Per-queue settings (orders, max_wait), read once the scheduler's queues are known.
  void Init(const Scheduler& s);
  // One pending job's turn in a pass: Decide, then, if it waits, why (SayWhy).
  void Consider(Scheduler& s, JobId id, Ticks now);
  // How a turn ends: it started, it preempted (or moved jobs) for room, it waits, or its
  // window is closed (the scheduler has said so). kGoOn: the step settled nothing.
  enum class Verdict : uint8_t { kGoOn, kStarted, kPreempted, kWaits, kWindowClosed };
  // What held a job back before any try.
  enum class HeldBack : uint8_t {
    kNo,
    kVictims,    // its victims still hold their GPUs
    kPreemptor,  // it was preempted for a job that has yet to start (wait.holder)
    kRoom,       // room under a burst limit is held for another job (wait.queue, wait.holder)
  };
  // What the turn reserved for a job that found no room.
  enum class Reserved : uint8_t {
    kNo,
    kForBackfill,  // a reservation (backfill_depth)
    kDrain,        // past max_wait: its drain
    kNoDrain,      // past max_wait, another drain in its pools first
  };
  // What a job's turn knows as it goes through the steps.
  struct Turn {
    JobId id;
    Ticks now = 0;
    bool claimant = false;             // it holds a claim (it preempted and waits for its victims)
    bool draining = false;             // it waited past max_wait
    std::vector<Drain>::iterator own;  // its drain, or drains_.end()
    bool owner = false;                // it owns held GPUs: a claim or a drain
    bool drains_let_go = false;        // a critical job: it ignores drains
    bool free_pass = false;          // it may use GPUs held for others (critical, or short enough)
    bool held = false;               // GPUs are held for reservations or claims
    uint64_t pools = 0;              // the pools it may use where GPUs are held (PoolBit)
    bool swap = false;               // the held GPUs in `pools` are let go for its try
    bool by_rank = false;            // its queue orders by attained service
    WaitReason wait;                 // why it waits (the text is why_: SayWhy)
    ModelMask inside = 0;            // where it is inside its guarantee (kCapacity)
    Ticks at_checkpoint = kForever;  // victims that could make room, at their next checkpoint
    HeldBack held_back = HeldBack::kNo;
    bool owed_room = false;  // past max_wait, stopped by a burst limit: room is held for it
    Reserved reserved = Reserved::kNo;
  };
  // The steps below, in order, until one settles the turn.
  Verdict Decide(Scheduler& s, Turn& t);
  // Writes why_, the text of a waiting job's reason, once, from what its turn found: what
  // held it back, else its try's text (in why_ already) and what the turn did about it.
  void SayWhy(const Scheduler& s, const Turn& t);
  static std::string VictimsLeaving(size_t victims);  // the text while victims leave
  // Sets the turn up: claimant, drain, the room its queues owe a draining job.
  Turn BeginTurn(Scheduler& s, JobId id, Ticks now);
  // Before any try: it waits for its victims, for its preemptor, for room held for
  // another job (kWaits), or for its window (kWindowClosed).
  Verdict WaitsBeforeTrying(Scheduler& s, Turn& t);
  // Tries to start it, the held GPUs it may use let go for the try and held again after
  // it; a backfilled start gets a lease. True if it started.
  bool TryStartWithHeld(Scheduler& s, Turn& t);
  // No room under a burst limit (kQuota): jobs of its queue that rank worse give way. True
  // if it preempted.
  bool GiveWayByRank(Scheduler& s, Turn& t);
  // No room (kCapacity): preemptions inside its guarantee, of best-effort work, by rank,
  // for its drain; consolidation; ended leases. True if it preempted or moved jobs.
  bool MakeRoom(Scheduler& s, Turn& t);
  // Still no room: says what holds it (reservations), drains for a job past max_wait or
  // reserves GPUs for it (backfill), and when victims reach their next checkpoint. True
  // if a new drain preempted for it.
  bool ReserveOrDrain(Scheduler& s, Turn& t);
  // max_wait: the setting for queue q (nearest up the tree, else the policy's; 0 = off)
  // and whether a pending job has waited past it.
  Ticks MaxWaitOf(const Scheduler& s, QueueId q) const;
  bool PastMaxWait(const Scheduler& s, const JobRecord& job, Ticks now) const;
  // Whether room under a burst limit that `job` needs is held for another job (a claimant
  // that preempted by rank, or a draining job); `wait` says which queue and for whom.
  bool RoomHeld(const Scheduler& s, JobId id, WaitReason& wait) const;
  // Who asks TryPreempt: a job (whose failed requests the pass remembers, by request),
  // a drain's owner (it sees its drain's GPUs free, others do not: nothing remembered),
  // or a drain's owner past max_wait (as the owner; its victims' reason says so).
  enum class Asker { kJob, kDrainOwner, kPastMaxWait };
  // Preempts for job `id` on GPUs of `models` (kGuarantee: where it is inside its
  // guarantee; ~0: anywhere).
  bool TryPreempt(Scheduler& s, JobId id, Ticks now, Mode mode, ModelMask models = ~ModelMask{0},
                  Asker asker = Asker::kJob);
  // Signals `needed` for job `id` (each with the text reason(victim)) and holds `fit` as the job's
  // claim until they are gone.
  template <typename Reason>
  void Claim(Scheduler& s, JobId id, const std::vector<JobId>& needed, Allocation fit, Ticks now,
             Reason reason);
  // Moves running jobs elsewhere where that makes room for job `id` (Consolidator), when
  // the site allows it (consolidate_within); true if it did.
  bool TryConsolidate(Scheduler& s, JobId id, Ticks now);
  // The owner of drain `d` takes what best-effort work and capacity borrowed by other
  // queues hold (just after their checkpoints, cheapest first, anywhere it then fits), as
  // a job inside its guarantee does (its victims' reason says it waited past max_wait):
  // its wait is then bounded by max_wait plus those victims' checkpoint interval and
  // grace, not their runs. Only a drain's owner (one per pool at a time), not every job
  // past the setting: thousands may be. Best-effort work never preempts. `at_checkpoint`
  // falls to the next checkpoint of a victim left out for want of one. The caller holds
  // none of its drain's GPUs meanwhile: the what-if may use them (they are for it).
  bool PreemptForDrain(Scheduler& s, JobId id, Ticks now, ModelMask inside, Ticks& at_checkpoint);
  // Whether running job v is a backfilled job past the end of its lease, and whether
  // `job` has waited long enough to end such leases (backfill_lease_after).
  bool Overdue(const Scheduler& s, JobId v, Ticks now) const;
  bool LeasesExpireFor(const Scheduler& s, const JobRecord& job, Ticks now) const;
  // Drops the leases of runs that ended; asks for a pass when the next one ends.
  void PruneLeases(Scheduler& s, Ticks now);
  // The index of `id`'s lease, or where it would go (leases_ is sorted by job).
  size_t FindLease(JobId id) const;
  // Gives pending job `id` a reservation (Reserver) and holds its GPUs free now.
  bool Reserve(Scheduler& s, JobId id, Ticks now);
  // Holds (or drops) the parts of the reservations' and claims' allocations that are
  // free now, except those of `except`; only those in `pools` (PoolBit), else all.
  // (Claims, reservations or both.)
  void HoldPhantoms(Scheduler& s, JobId except = JobId(), uint64_t pools = ~uint64_t{0},
                    bool claims = true, bool reservations = true);
  void Hold(Scheduler& s, const Reservation& r, uint64_t pools = ~uint64_t{0}, bool fence = false) {
    held_.Hold(s, r.job, r.alloc, pools, fence);
  }
  // Drains are held for a whole pass (HoldDrains at its start, DropDrains at its end).
  void HoldDrains(Scheduler& s);
  void DropDrains(Scheduler& s);
  Ticks Shadow() const;                  // earliest start of a reservation or claim
  const Reservation* FirstHeld() const;  // that reservation or claim (null: none)
  // FirstHeld, kept until claims_ or reservations_ change (every job's try asks for it).
  mutable const Reservation* first_held_ = nullptr;
  mutable bool first_held_known_ = false;
  void HeldChanged() { first_held_known_ = false; }  // after any change to either
  std::string Holders(const Scheduler& s) const;     // who the held GPUs are for
  std::vector<Reservation> reservations_;
  std::vector<Drain> drains_;
  // Draining jobs that a burst limit stops (this full pass): room is held for them.
  std::vector<JobId> owed_room_;
  // (victim, preemptor): the victim does not start again while its preemptor waits on
  // a claim (on a shared GPU it would take back the slice it left, and the preemptor
  // would preempt it again, for ever).
  std::vector<std::pair<JobId, JobId>> evicted_;
  bool evicted_stale_ = true;  // a job started or claims were let go since evicted_ was pruned
  std::vector<uint32_t> evicted_count_;  // by job id: its entries in evicted_ as victim
  QueueOrdering ordering_;
  std::vector<Ticks> max_wait_;  // per queue (Init)
  bool any_max_wait_ = false;
  std::vector<Lease> leases_;  // sorted by job
  // Jobs that preempted, until they start or leave: the capacity the what-if found for
  // them (victims' GPUs and the free ones beside them) is held for them meanwhile.
  std::vector<Reservation> claims_;
  std::vector<uint8_t> claiming_;  // by job id: holds a claim in claims_ (kept with it)
  // By job id: the pass (pass_) it was last considered in as a claimant, a preemptor or a
  // draining job (each once a pass). Flags by id, not lists: a pass after a mass
  // preemption has thousands of claims, and every job of its backlog asked about both.
  std::vector<uint32_t> considered_in_;
  uint32_t pass_ = 1;  // (at its wrap, considered_in_ is cleared)
  bool Claiming(JobId id) const { return id.v < claiming_.size() && claiming_[id.v] != 0; }
  bool Considered(JobId id) const {
    return id.v < considered_in_.size() && considered_in_[id.v] == pass_;
  }
  void MarkConsidered(const Scheduler& s, JobId id);
  // Drops the claims `gone` names, their flags with them.
  template <typename Pred>
  void EraseClaims(Pred gone);
  HeldGpus held_;  // the free parts of claims' and reservations' GPUs, held for them
  std::map<uint32_t, std::pair<WaitReason, std::string>> refined_;  // this pass: shape id -> why
  std::vector<JobId> order_;
  std::string why_;  // Consider's wait reason, a member so its buffer is reused
  // Per pass: whom preemptions may take (built on first use), the requests that found
  // neither victims nor a reservation (they fail alike for the rest of the pass), and
  // after a failed TryPreempt the earliest next checkpoint of a victim left out.
  VictimSelector victims_{ordering_};
  std::map<PreemptKey, Ticks> preempt_failed_;  // with their next_checkpoint_
  Ticks next_checkpoint_ = kForever;
  Reserver reserver_;
  Consolidator consolidator_;
  // This pass: (shape id, tier) of jobs that found no moves (the tier decides who moves).
  std::set<std::pair<uint32_t, Tier>> consolidate_failed_;
};

}  // namespace gantry::core
