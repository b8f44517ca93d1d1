#include "core/policy/gantry.h"

#include <algorithm>
#include <bit>
#include <functional>
#include <optional>
#include <tuple>

#include "core/policy/pools.h"

namespace gantry::core {

namespace {
// Job `id`'s entry in a table by job id, the table grown (zeroed) to the ids given so far.
template <typename T>
T& ByJob(std::vector<T>& table, JobId id, const Scheduler& s) {
  if (table.size() <= id.v) table.resize(s.job_count());
  return table[id.v];
}
}  // namespace

void GantryPolicy::Init(const Scheduler& s) {
  ordering_.Init(s);
  if (max_wait_.size() == s.queues().size()) return;
  max_wait_.assign(s.queues().size(), s.params().max_wait);
  for (uint32_t i = 0; i < max_wait_.size(); ++i) {
    max_wait_[i] = MaxWaitFor(QueueId(i), s.queues(), s.params());
    any_max_wait_ |= max_wait_[i] > 0;
  }
}

Ticks GantryPolicy::MaxWaitOf(const Scheduler& s, QueueId q) const {
  return q.v < max_wait_.size() ? max_wait_[q.v] : s.params().max_wait;
}

bool GantryPolicy::PastMaxWait(const Scheduler& s, const JobRecord& job, Ticks now) const {
  const Ticks limit = MaxWaitOf(s, job.spec.queue);
  return limit > 0 && job.phase == Phase::kPending && now - job.pending_since >= limit;
}

bool GantryPolicy::RoomHeld(const Scheduler& s, JobId id, WaitReason& wait) const {
  // Those owed room: claimants that preempted by rank, and draining jobs a limit stops.
  // (Neither without attained-service orders or drains: asked at every job of a pass.)
  if (owed_room_.empty() && !ordering_.AnyByRank()) return false;
  std::vector<JobId> owed = owed_room_;
  for (const Reservation& c : claims_) {
    if (ordering_.ByRank(s.job(c.job).spec.queue)) owed.push_back(c.job);
  }
  if (owed.empty()) return false;
  // Only those owed before it hold room against a job owed room itself: two that each
  // held the room the other needs would both wait for ever.
  const auto ahead = std::find(owed.begin(), owed.end(), id);
  owed.erase(ahead, owed.end());
  if (owed.empty()) return false;
  const JobRecord& job = s.job(id);
  const GpuUnits units = job.min_units;
  for (QueueId a : s.queues().queue(job.spec.queue).self_and_ancestors) {
    const GpuUnits burst = s.queues().queue(a).spec.burst;
    if (burst < 0) continue;
    GpuUnits held = 0;
    JobId holder;
    for (JobId o : owed) {
      const JobRecord& other = s.job(o);
      if (other.phase != Phase::kPending) continue;
      const auto& line = s.queues().queue(other.spec.queue).self_and_ancestors;
      if (std::find(line.begin(), line.end(), a) == line.end()) continue;
      held += other.min_units;
      if (!holder.valid()) holder = o;
    }
    if (held > 0 && s.queue_usage(a) + units + held > burst) {
      wait = WaitReason::Of(WaitCause::kQuota, a, holder);
      return true;
    }
  }
  return false;
}

bool GantryPolicy::LeasesExpireFor(const Scheduler& s, const JobRecord& job, Ticks now) const {
  const Ticks after = s.params().backfill_lease_after;
  return after > 0 && now - job.submit >= after;
}

bool GantryPolicy::Overdue(const Scheduler& s, JobId v, Ticks now) const {
  const JobRecord& job = s.job(v);
  if (job.phase != Phase::kRunning || now < job.expected_end) return false;
  const size_t i = FindLease(v);
  return i < leases_.size() && leases_[i].job == v && leases_[i].start == job.last_start;
}

size_t GantryPolicy::FindLease(JobId id) const {
  return static_cast<size_t>(std::lower_bound(leases_.begin(), leases_.end(), id,
                                              [](const Lease& l, JobId j) { return l.job < j; }) -
                             leases_.begin());
}

void GantryPolicy::PruneLeases(Scheduler& s, Ticks now) {
  Ticks next = kForever;
  std::erase_if(leases_, [&](const Lease& l) {
    const JobRecord& job = s.job(l.job);
    if (job.phase != Phase::kRunning || job.last_start != l.start) return true;
    if (job.expected_end > now) next = std::min(next, job.expected_end);
    return false;
  });
  if (next < kForever && !reservations_.empty()) s.WakeAt(next);
}

void GantryPolicy::HoldPhantoms(Scheduler& s, JobId except, uint64_t pools, bool claims,
                                bool reservations) {
  for (const Reservation& r : claims_) {
    if (claims && r.job != except) Hold(s, r, pools, /*fence=*/true);
  }
  for (const Reservation& r : reservations_) {
    if (reservations && r.job != except) Hold(s, r, pools);
  }
}

void GantryPolicy::HoldDrains(Scheduler& s) {
  for (Drain& d : drains_) {
    if (d.held.empty() && s.job(d.r.job).phase == Phase::kPending)
      HeldGpus::HoldFree(s, d.r.alloc, ~uint64_t{0}, d.held, true);
  }
}

void GantryPolicy::DropDrains(Scheduler& s) {
  for (Drain& d : drains_) {
    s.mutable_ledger().Release(d.held);
    d.held.clear();
  }
}

std::string GantryPolicy::Holders(const Scheduler& s) const {
  // The first few by name: a reason should read in one line, and it is copied to every job
  // it holds back (a pass with 4,000 claims at 100,000 GPUs spent most of its 5 s copying
  // a list of them to 100,000 waiting jobs).
  constexpr size_t kNamed = 3;
  std::string out;
  size_t named = 0;
  auto add = [&](const Reservation& r, const char* what) {
    if (named++ < kNamed) out += (out.empty() ? "" : ", ") + s.job(r.job).spec.id + what;
  };
  for (const Reservation& r : claims_) add(r, " (preempting)");
  for (const Reservation& r : reservations_) add(r, " (reserved)");
  for (const Drain& d : drains_) add(d.r, " (waiting past max_wait_s)");
  if (named > kNamed) out += " and " + std::to_string(named - kNamed) + " more";
  return out.empty() ? "other jobs" : "job(s) " + out;
}

void GantryPolicy::MarkConsidered(const Scheduler& s, JobId id) {
  ByJob(considered_in_, id, s) = pass_;
}

template <typename Pred>
void GantryPolicy::EraseClaims(Pred gone) {
  HeldChanged();
  std::erase_if(claims_, [&](const Reservation& c) {
    if (!gone(c)) return false;
    claiming_[c.job.v] = 0;  // (set when the claim was made)
    return true;
  });
}

const GantryPolicy::Reservation* GantryPolicy::FirstHeld() const {
  if (first_held_known_) return first_held_;
  const Reservation* first = nullptr;
  for (const auto* held : {&claims_, &reservations_}) {
    for (const Reservation& r : *held) {
      if (!first || r.start < first->start) first = &r;
    }
  }
  first_held_ = first;
  first_held_known_ = true;
  return first;
}

Ticks GantryPolicy::Shadow() const {
  const Reservation* first = FirstHeld();
  return first ? first->start : kForever;
}

void GantryPolicy::Schedule(Scheduler& s, Ticks now, bool full) {
  evicted_stale_ = true;  // jobs and claims moved since the last pass
  refined_.clear();
  preempt_failed_.clear();
  consolidate_failed_.clear();
  reserver_.NewPass();
  victims_.NewPass();
  consolidator_.NewPass();
  Init(s);  // per-queue settings, on first use
  // A drain lasts while its job waits and every node it names is up.
  std::erase_if(drains_, [&](const Drain& d) {
    if (s.job(d.r.job).phase != Phase::kPending) return true;
    return std::any_of(d.r.alloc.begin(), d.r.alloc.end(),
                       [&](const WorkerAlloc& w) { return !s.ledger().node(w.node).up; });
  });
  EraseClaims([&](const Reservation& c) { return s.job(c.job).phase != Phase::kPending; });
  // Held in order of precedence: claims (their victims were preempted for them: a drain
  // that took the GPUs they leave would void the claim, and the claimant would preempt
  // again, for ever), drains, reservations.
  HoldPhantoms(s, JobId(), ~uint64_t{0}, true, false);
  HoldDrains(s);  // for the whole pass: no job but a critical one or its owner gets them
  if (full) {
    reservations_.clear();
    HeldChanged();
    owed_room_.clear();
  }
  // Jobs whose victims have released their GPUs go first: the capacity was freed for
  // them, and giving it to anyone else (the requeued victim included) would start a
  // preemption loop. Before any reservation: a full pass has made none yet, and a pass
  // between full passes (full_pass_interval) sets aside those of the last one meanwhile
  // (one made while the victims were leaving would keep the claimant from the room it
  // preempted for, and it would preempt again, for ever).
  std::vector<Reservation> kept;
  kept.swap(reservations_);
  HeldChanged();
  if (++pass_ == 0) {
    std::fill(considered_in_.begin(), considered_in_.end(), 0);
    pass_ = 1;
  }
  for (size_t i = 0; i < claims_.size(); ++i) {
    const JobId id = claims_[i].job;
    if (s.job(id).victims_pending == 0) Consider(s, id, now);
  }
  // A claim whose victims are gone has had its chance: it holds nothing any longer
  // (the job started, or could not and waits like any other, preempting anew if it may).
  EraseClaims([&](const Reservation& c) { return s.job(c.job).victims_pending == 0; });
  std::erase_if(kept, [&](const Reservation& r) { return s.job(r.job).phase != Phase::kPending; });
  reservations_ = std::move(kept);
  HeldChanged();
  evicted_stale_ = true;
  held_.LetGoIn(s, ~uint64_t{0});
  HoldPhantoms(s);
  if (!full) {
    ArrivalOrder(s, /*all=*/false, order_);
    for (JobId id : order_) Consider(s, id, now);
    held_.LetGoIn(s, ~uint64_t{0});
    DropDrains(s);
    return;
  }
  // Jobs past their max_wait first, longest waiting first; wake when the next one is due.
  if (any_max_wait_) {
    std::vector<std::pair<Ticks, JobId>> due;
    Ticks next = kForever;
    for (const auto& key : s.pending()) {
      const JobRecord& job = s.job(key.id);
      const Ticks limit = MaxWaitOf(s, job.spec.queue);
      if (limit <= 0) continue;
      if (now - job.pending_since >= limit) {
        due.emplace_back(job.pending_since, key.id);
      } else {
        next = std::min(next, job.pending_since + limit);
      }
    }
    if (next < kForever) s.WakeAt(next);
    std::sort(due.begin(), due.end());
    for (const auto& [since, id] : due) Consider(s, id, now);
  }
  const Ticks aged_before = now - s.params().aging;
  for (int t = 0; t < kTierCount; ++t) {
    const Tier tier = static_cast<Tier>(t);
    // Jobs waiting longer than `aging` first, oldest first.
    order_.clear();
    auto& pending = s.pending();
    for (auto it = pending.lower_bound({tier, INT64_MIN, JobId(0)});
         it != pending.end() && it->tier == tier && it->submit <= aged_before; ++it) {
      order_.push_back(it->id);
    }
    for (JobId id : order_) Consider(s, id, now);
    // Then fair share: the queue with the best standing offers its next job.
    ordering_.Offer(s, tier, aged_before, now, [&](JobId id) { Consider(s, id, now); });
  }
  held_.LetGoIn(s, ~uint64_t{0});
  DropDrains(s);
  PruneLeases(s, now);  // and wake when one ends
}

void GantryPolicy::Consider(Scheduler& s, JobId id, Ticks now) {
  const JobRecord& job = s.job(id);
  if (job.phase != Phase::kPending) return;
  if (Considered(id)) return;
  Turn t = BeginTurn(s, id, now);
  if (Decide(s, t) == Verdict::kWaits) {
    SayWhy(s, t);
    s.Wait(id, t.wait, why_);
  }
}

GantryPolicy::Verdict GantryPolicy::Decide(Scheduler& s, Turn& t) {
  if (const Verdict v = WaitsBeforeTrying(s, t); v != Verdict::kGoOn) return v;
  if (TryStartWithHeld(s, t)) return Verdict::kStarted;
  if (GiveWayByRank(s, t)) return Verdict::kPreempted;
  if (t.wait.cause == WaitCause::kCapacity) {
    if (MakeRoom(s, t)) return Verdict::kPreempted;
    if (ReserveOrDrain(s, t)) return Verdict::kPreempted;
  }
  return Verdict::kWaits;
}

std::string GantryPolicy::VictimsLeaving(size_t victims) {
  return "preemption: waiting for " + std::to_string(victims) +
         " preempted job(s) to release their GPUs";
}

void GantryPolicy::SayWhy(const Scheduler& s, const Turn& t) {
  std::string& why = why_;
  switch (t.held_back) {
    case HeldBack::kVictims:
      why = VictimsLeaving(static_cast<size_t>(s.job(t.id).victims_pending));
      return;
    case HeldBack::kPreemptor:
      why = "preemption: preempted for job " + s.job(t.wait.holder).spec.id +
            ", which has yet to start";
      return;
    case HeldBack::kRoom: {
      const bool draining =
          std::find(owed_room_.begin(), owed_room_.end(), t.wait.holder) != owed_room_.end();
      why = "quota: room under queue " + s.queues().queue(t.wait.queue).spec.name +
            "'s burst limit is held for job " + s.job(t.wait.holder).spec.id +
            (draining ? " (waiting past max_wait_s)" : " (preempting)");
      return;
    }
    case HeldBack::kNo:
      break;
  }
  // why_ already says what its try found (TryStart's text, or whose reservation holds the
  // GPUs that fit); then what the turn did about it.
  if (t.owed_room) why += "; waited past max_wait_s: the room its queues free is held for it";
  switch (t.reserved) {
    case Reserved::kNo:
      break;
    case Reserved::kForBackfill:
      why += "; GPUs reserved for it";
      break;
    case Reserved::kDrain:
      why += "; waited past max_wait_s: draining GPUs for it";
      break;
    case Reserved::kNoDrain:
      why += "; waited past max_wait_s";
      break;
  }
  if (t.at_checkpoint < kForever)
    why += "; jobs it may preempt are past their last checkpoint: tried again at the next";
}

GantryPolicy::Turn GantryPolicy::BeginTurn(Scheduler& s, JobId id, Ticks now) {
  const JobRecord& job = s.job(id);
  Turn t;
  t.id = id;
  t.now = now;
  t.claimant = Claiming(id);
  if (t.claimant) MarkConsidered(s, id);
  t.draining = PastMaxWait(s, job, now);
  // A draining job uses the GPUs of its own drain, as a claimant those of its claim.
  t.own =
      std::find_if(drains_.begin(), drains_.end(), [&](const Drain& d) { return d.r.job == id; });
  t.owner = t.claimant || t.own != drains_.end();
  if (t.draining && !t.claimant) MarkConsidered(s, id);
  // A draining job is owed the room its queues' burst limits leave: else a queue-mate
  // takes it while its victims leave, and it preempts again, for ever.
  if ((t.own != drains_.end() || (t.draining && t.claimant)) &&
      std::find(owed_room_.begin(), owed_room_.end(), id) == owed_room_.end()) {
    owed_room_.push_back(id);
  }
  return t;
}

GantryPolicy::Verdict GantryPolicy::WaitsBeforeTrying(Scheduler& s, Turn& t) {
  const JobId id = t.id;
  const JobRecord& job = s.job(id);
  if (job.victims_pending > 0) {
    t.wait = WaitReason::Of(WaitCause::kPreemption);
    t.held_back = HeldBack::kVictims;
    return Verdict::kWaits;
  }
  // Preempted for a job whose claim still waits: not yet (on a GPU shared by slices or
  // shares it would start again in the slot it left, and be preempted again, for ever).
  // (Most jobs are no victim: the count spares them the walk.)
  if (id.v < evicted_count_.size() && evicted_count_[id.v] > 0) {
    // Dropped once the preemptor started or holds no claim; that changes only when a job
    // starts or claims are let go, so looked at again only then (every Consider of a
    // pass with thousands of preemptions made a pass quadratic).
    if (evicted_stale_) {
      std::erase_if(evicted_, [&](const std::pair<JobId, JobId>& e) {
        const bool gone = s.job(e.second).phase != Phase::kPending || !Claiming(e.second);
        if (gone) --evicted_count_[e.first.v];
        return gone;
      });
      evicted_stale_ = false;
    }
    for (const auto& [victim, by] : evicted_) {
      if (victim == id) {
        t.wait = WaitReason::Of(WaitCause::kPreemption, QueueId(), by);
        t.held_back = HeldBack::kPreemptor;
        return Verdict::kWaits;
      }
    }
  }
  // Room under burst limits held for another job: a claimant that preempted by rank in
  // its own queue may have done so for that room (else its victims, requeued, would take
  // it back at once, and so on for ever), and a draining job waits for it.
  if (!t.owner && RoomHeld(s, id, t.wait)) {
    t.held_back = HeldBack::kRoom;
    return Verdict::kWaits;
  }
  // A job whose window is closed and whose wait already says so: TryStart keeps its text
  // and asks for a pass when the window opens, and nothing below applies to it (held
  // GPUs and drains are let go only for a try that could place). A third of the 100k-job
  // replay's tries were such jobs.
  t.drains_let_go = !drains_.empty() && job.spec.tier == Tier::kCritical;
  if (job.wait.cause == WaitCause::kWindow && !t.owner && !t.drains_let_go &&
      s.WindowClosed(id, t.now)) {
    s.TryStart(id, t.now, Fit::kBest);
    return Verdict::kWindowClosed;
  }
  return Verdict::kGoOn;
}

bool GantryPolicy::TryStartWithHeld(Scheduler& s, Turn& t) {
  const JobId id = t.id;
  const Ticks now = t.now;
  const JobRecord& job = s.job(id);
  // Short jobs (by estimate) and critical jobs may use GPUs held for reservations and
  // claims; a claimant uses its own claim.
  t.free_pass = job.spec.tier == Tier::kCritical ||
                now + JobSpec::AtSpeed(s.Remaining(id), job.spec.SlowestSpeed()) <= Shadow();
  t.held = !held_.empty();
  // The held GPUs are let go for the job's try, only those in pools the job may use (the
  // others cannot change where it goes), and none when its shape already found no room
  // without them this pass (TryStart then fails it from the cache): dropping and holding
  // them again costs a ledger update per GPU. Nor when a window, budget or burst limit
  // holds the job before it is placed (4.15M of 4.21M lets-go on the 100k-job replay).
  t.pools = t.held ? AcceptedPools(s, job.spec) : 0;
  t.swap = (t.free_pass || t.owner) && (t.pools & held_.pools()) != 0 &&
           (t.owner || (!s.KnownNotToFit(id, 1) && !s.HeldBeforePlacement(id, now)));
  // A claimant lets go of its own claim's held parts first, and holds them again after
  // its try: what the others hold stays as it is (their holds on GPUs jobs partly use
  // are judged again after the claimants' turn, not after each start). Only a claimant
  // free to take others' held GPUs (a critical one) for which its own claim is not room
  // enough tries again with them all let go. Letting go of and holding again every claim
  // in its pools, for each claimant, took most of the pass after a mass preemption at
  // 100,000 GPUs (O(claims) each: quadratic in the claimants).
  const auto own = t.own;
  bool own_claim = t.swap && t.claimant && !t.drains_let_go && own == drains_.end();
  std::string& why = why_;  // (its buffer kept from call to call)
  bool started = false;
  if (own_claim) {
    held_.LetGo(s, [&](const WorkerAlloc&, JobId holder) { return holder == id; });
    s.set_shape_context(Scheduler::kNoShapeCache);
    why.clear();
    started = s.TryStart(id, now, Fit::kBest, &why, &t.wait);
    // The free pass below: the rest let go too (its own claim stays let go), and every
    // claim held again after its try, as for any owner.
    if (!started && t.free_pass) own_claim = false;
  }
  std::optional<HeldGpus::LetGoScope> let_go;
  if (!own_claim) {
    if (t.swap) {
      let_go.emplace(held_, s, t.pools);
      if (!t.free_pass) HoldPhantoms(s, id, t.pools);
    }
    // Drains stay held for everyone else, however short (no backfill there); a critical
    // job ignores them as it ignores reservations, and a draining job uses its own.
    if (t.drains_let_go) {
      DropDrains(s);
    } else if (own != drains_.end()) {
      s.mutable_ledger().Release(own->held);
      own->held.clear();
    }
    s.set_shape_context(t.drains_let_go || own != drains_.end() ? Scheduler::kNoShapeCache
                        : !t.held                               ? 0
                        : t.free_pass                           ? 1
                        : t.claimant                            ? Scheduler::kNoShapeCache
                                                                : 0);
    why.clear();
    started = s.TryStart(id, now, Fit::kBest, &why, &t.wait);
  }
  if (own_claim) {  // (a reservation of its own, if any, after the claims, as below)
    for (const Reservation& c : claims_) {
      if (c.job == id) Hold(s, c, t.pools, /*fence=*/true);
    }
    for (const Reservation& r : reservations_) {
      if (r.job == id) Hold(s, r, t.pools);
    }
  } else if (let_go && !started && t.free_pass && !t.owner && !t.drains_let_go) {
    // Nothing was held meanwhile and nothing moved (the try failed, and no drain was let
    // go): the let-go rolls back, held again as it was.
    let_go.reset();
  } else {
    if (let_go) let_go->Keep();
    // Held again in order of precedence: claims, drains, reservations.
    if (t.swap) held_.LetGoIn(s, t.pools);
    if (t.swap) HoldPhantoms(s, JobId(), t.pools, true, false);
    if (t.drains_let_go) HoldDrains(s);
    if (own != drains_.end() && !started)
      HeldGpus::HoldFree(s, own->r.alloc, ~uint64_t{0}, own->held, true);
    if (t.swap) HoldPhantoms(s, JobId(), t.pools, false, true);
  }
  s.set_shape_context(0);
  if (!started) return false;
  evicted_stale_ = true;  // it may be a preemptor
  if (t.held && t.free_pass && job.spec.tier != Tier::kCritical) {
    const size_t i = FindLease(id);
    if (i < leases_.size() && leases_[i].job == id) {
      leases_[i].start = now;
    } else {
      leases_.insert(leases_.begin() + static_cast<std::ptrdiff_t>(i), Lease{id, now});
    }
  }
  return true;
}

bool GantryPolicy::GiveWayByRank(Scheduler& s, Turn& t) {
  const JobRecord& job = s.job(t.id);
  const WaitCause block = t.wait.cause;  // what TryStart found
  // In a queue ordered by attained service its jobs that rank worse give way, for room
  // or for the queue's burst limit; ranks move as jobs run, so look again a quantum on.
  t.by_rank = job.spec.tier != Tier::kBestEffort && ordering_.ByRank(job.spec.queue);
  if (t.by_rank && (block == WaitCause::kCapacity || block == WaitCause::kQuota)) {
    s.WakeAt(t.now + std::max<Ticks>(1, s.params().attained_quantum));
  }
  if (t.by_rank && block == WaitCause::kQuota && TryPreempt(s, t.id, t.now, Mode::kRank))
    return true;
  if (t.draining && block == WaitCause::kQuota) {
    if (std::find(owed_room_.begin(), owed_room_.end(), t.id) == owed_room_.end())
      owed_room_.push_back(t.id);
    t.owed_room = true;
  }
  return false;
}

bool GantryPolicy::MakeRoom(Scheduler& s, Turn& t) {
  const JobId id = t.id;
  const Ticks now = t.now;
  const JobRecord& job = s.job(id);
  // Best-effort work never preempts: it is the first to go, not a reason to go.
  t.inside = job.spec.tier != Tier::kBestEffort ? s.GuaranteedModels(id) : ModelMask{0};
  // A draining job's what-ifs may use the GPUs its drain holds (they are for it).
  const bool drain_owner = t.own != drains_.end();
  const Asker asker = drain_owner ? Asker::kDrainOwner : Asker::kJob;
  if (drain_owner) {
    s.mutable_ledger().Release(t.own->held);
    t.own->held.clear();
  }
  bool preempted = false;
  if (t.inside != 0) {
    preempted = TryPreempt(s, id, now, Mode::kGuarantee, t.inside, asker);
    t.at_checkpoint = next_checkpoint_;
  }
  // Beyond its guarantee (on some models or all), best-effort work still gives way to
  // the tiers the site names (critical by default: inference must not wait behind it).
  const std::optional<Tier> yields_to = s.params().best_effort_yields_to;
  if (!preempted && yields_to && job.spec.tier <= *yields_to && t.inside != ~ModelMask{0}) {
    preempted = TryPreempt(s, id, now, Mode::kTier, ~ModelMask{0}, asker);
    t.at_checkpoint = std::min(t.at_checkpoint, next_checkpoint_);
  }
  if (!preempted && t.by_rank) {
    preempted = TryPreempt(s, id, now, Mode::kRank, ~ModelMask{0}, asker);
    t.at_checkpoint = std::min(t.at_checkpoint, next_checkpoint_);
  }
  if (!preempted && drain_owner) preempted = PreemptForDrain(s, id, now, t.inside, t.at_checkpoint);
  if (drain_owner) HeldGpus::HoldFree(s, t.own->r.alloc, ~uint64_t{0}, t.own->held, true);
  if (preempted) return true;
  if (!drain_owner && TryConsolidate(s, id, now)) return true;
  // A job due for a reservation that has waited past backfill_lease_after takes back
  // what backfilled jobs hold past their lease.
  const bool reservable =
      reservations_.size() < static_cast<size_t>(std::max(0, s.params().backfill_depth));
  return reservable && !leases_.empty() && LeasesExpireFor(s, job, now) &&
         TryPreempt(s, id, now, Mode::kLessees);
}

bool GantryPolicy::ReserveOrDrain(Scheduler& s, Turn& t) {
  const JobId id = t.id;
  const Ticks now = t.now;
  const JobRecord& job = s.job(id);
  std::string& why = why_;
  WaitReason& wait = t.wait;
  const uint32_t shape = s.shape_id(id);
  if (auto it = refined_.find(shape); it != refined_.end()) {
    std::tie(wait, why) = it->second;
  } else if ((t.pools & held_.pools()) != 0 && !t.free_pass) {
    // Would it fit but for the reservations? Then say whose. (Held GPUs outside the
    // job's pools cannot be what stops it.)
    HeldGpus::LetGoScope let_go(held_, s, t.pools);  // the probe rolled back with it
    Allocation probe;
    if (s.placer().Place(job.spec, Fit::kBest, probe)) {
      why = "reservation: the GPUs that fit are held for " + Holders(s) +
            ", and this job's estimate runs past the earliest start";
      const Reservation* first = FirstHeld();
      wait = WaitReason::Of(WaitCause::kReservation, QueueId(), first ? first->job : JobId(),
                            Shadow());
    }
    refined_.emplace(shape, std::pair{wait, why});
  }
  if (t.draining) {
    // Its own reservation, beyond backfill_depth, made once and kept where it is.
    auto drain = t.own;
    // One drain at a time per pool the job may use (the longest waiting first): each
    // holds GPUs idle while it gathers them, and drains that block one another's
    // backfill would make more jobs wait past the setting, and drain in their turn.
    const uint64_t accepts = AcceptedPools(s, job.spec);
    const bool room = std::none_of(drains_.begin(), drains_.end(), [&](const Drain& d) {
      return (AcceptedPools(s, s.job(d.r.job).spec) & accepts) != 0;
    });
    if (drain == drains_.end() && room && Reserve(s, id, now)) {
      // Reserve held its GPUs as a reservation's phantoms: hold them as a drain's.
      Reservation r = std::move(reservations_.back());
      reservations_.pop_back();
      HeldChanged();
      held_.LetGoIn(s, ~uint64_t{0});
      HoldPhantoms(s);
      drains_.push_back(Drain{std::move(r), {}});
      drain = drains_.end() - 1;
      // Its victims before it holds its GPUs.
      const bool preempted = PreemptForDrain(s, id, now, t.inside, t.at_checkpoint);
      HeldGpus::HoldFree(s, drain->r.alloc, ~uint64_t{0}, drain->held, true);
      if (preempted) return true;
    }
    if (drain != drains_.end()) {
      wait.at = drain->r.start;
      t.reserved = Reserved::kDrain;
    } else {
      t.reserved = Reserved::kNoDrain;
    }
  } else if (reservations_.size() < static_cast<size_t>(std::max(0, s.params().backfill_depth)) &&
             wait.cause == WaitCause::kCapacity) {
    Reserve(s, id, now);
    if (!reservations_.empty() && reservations_.back().job == id) {
      wait.at = reservations_.back().start;
      t.reserved = Reserved::kForBackfill;
    }
  }
  // Else only an unrelated event would bring the next pass (SayWhy says so).
  if (t.at_checkpoint < kForever) s.WakeAt(t.at_checkpoint);
  return false;
}

bool GantryPolicy::TryPreempt(Scheduler& s, JobId id, Ticks now, Mode mode, ModelMask models,
                              Asker asker) {
  const JobRecord& job = s.job(id);
  const bool cache = asker == Asker::kJob;
  // Within a pass, a request that found no victims enough keeps failing: jobs started
  // since hold more, not less, and signaled victims are no longer candidates.
  const double job_rank = mode == Mode::kRank ? ordering_.Rank(s, job, now) : 0;
  // By fit class for the node-by-node what-if and for kTier, which reads no queue either
  // (PreemptKey).
  const bool by_class = VictimSelector::ByNode(job.spec.tier, mode) || mode == Mode::kTier;
  const QueueId key_queue = mode == Mode::kTier ? QueueId() : job.spec.queue;
  PreemptKey key{by_class ? s.fit_class_id(id) : s.shape_id(id),
                 by_class,
                 key_queue,
                 job.spec.tier,
                 mode,
                 models,
                 job_rank};
  if (auto it = cache ? preempt_failed_.find(key) : preempt_failed_.end();
      it != preempt_failed_.end()) {
    next_checkpoint_ = it->second;
    return false;
  }
  std::vector<JobId> needed;
  Allocation fit;
  const std::function<bool(JobId)> overdue = [&](JobId v) { return Overdue(s, v, now); };
  victims_.Prepare(s, now);
  bool chosen;
  {
    WhatIf w(s);
    chosen = victims_.Choose(s, w, job, mode, models, job_rank, now, overdue, needed, fit);
  }
  if (const Ticks wake = victims_.wake_at(); wake < kForever) s.WakeAt(wake);
  if (!chosen) {
    next_checkpoint_ = victims_.next_checkpoint();
    if (cache) preempt_failed_.emplace(std::move(key), next_checkpoint_);
    return false;
  }
  std::sort(needed.begin(), needed.end());
  const std::string name = std::string(Name(job.spec.tier)) + " job " + job.spec.id;
  const std::string who = asker == Asker::kPastMaxWait ? name + ", waiting past max_wait_s," : name;
  Claim(s, id, needed, std::move(fit), now, [&](JobId v) {
    const JobRecord& victim = s.job(v);
    const std::string& queue = s.queues().queue(victim.spec.queue).spec.name;
    return mode == Mode::kLessees
               ? name + " is due for GPUs this job was backfilled onto; it ran past its estimate"
           : mode == Mode::kRank
               ? name + " comes first in queue " + queue + "'s " +
                     std::string(Name(ordering_.Of(job.spec.queue))) + " order (attained service)"
           : victim.spec.tier == Tier::kBestEffort
               ? who + " needs capacity held by best-effort work"
               : who + " needs capacity borrowed by queue " + queue;
  });
  return true;
}

template <typename Reason>
void GantryPolicy::Claim(Scheduler& s, JobId id, const std::vector<JobId>& needed, Allocation fit,
                         Ticks now, Reason reason) {
  for (JobId v : needed) {
    evicted_.emplace_back(v, id);
    ++ByJob(evicted_count_, v, s);
    s.Preempt(v, id, reason(v), now);
  }
  // Hold what the what-if found for the job until its victims are gone.
  Ticks release = now;
  for (JobId v : needed) release = std::max(release, now + s.job(v).spec.grace);
  s.Wait(id, WaitReason::Of(WaitCause::kPreemption, QueueId(), JobId(), release),
         VictimsLeaving(needed.size()));
  EraseClaims([&](const Reservation& c) { return c.job == id; });
  claims_.push_back(Reservation{id, release, std::move(fit)});
  HeldChanged();
  ByJob(claiming_, id, s) = 1;
  Hold(s, claims_.back(), ~uint64_t{0}, /*fence=*/true);
  MarkConsidered(s, id);
}

bool GantryPolicy::TryConsolidate(Scheduler& s, JobId id, Ticks now) {
  const JobRecord& job = s.job(id);
  if (s.params().consolidate_within <= 0 || job.spec.replicas != 1) return false;
  const std::pair key{s.shape_id(id), job.spec.tier};
  if (consolidate_failed_.contains(key)) return false;
  Consolidator::Plan plan;
  bool found;
  {
    WhatIf w(s);
    found = consolidator_.Find(s, w, job, now, plan);
  }
  if (!found) {
    consolidate_failed_.insert(key);
    return false;
  }
  const std::string name = std::string(Name(job.spec.tier)) + " job " + job.spec.id;
  std::vector<JobId> moved = plan.moved;
  std::sort(moved.begin(), moved.end());
  Claim(s, id, moved, std::move(plan.fit), now, [&](JobId v) {
    const auto i = static_cast<size_t>(std::find(plan.moved.begin(), plan.moved.end(), v) -
                                       plan.moved.begin());
    return "consolidation: moved to node " + s.cluster().node(plan.to[i][0].node).name +
           " to make room for " + name + " (policy.consolidate_within_s)";
  });
  // The victims' index and the movable jobs were read before these preemptions.
  victims_.NewPass();
  consolidator_.Reindex();
  return true;
}

bool GantryPolicy::PreemptForDrain(Scheduler& s, JobId id, Ticks now, ModelMask inside,
                                   Ticks& at_checkpoint) {
  // Inside its guarantee everywhere, the job has already tried these victims.
  if (s.job(id).spec.tier == Tier::kBestEffort || inside == ~ModelMask{0}) return false;
  const bool preempted =
      TryPreempt(s, id, now, Mode::kGuarantee, ~ModelMask{0}, Asker::kPastMaxWait);
  if (!preempted) at_checkpoint = std::min(at_checkpoint, next_checkpoint_);
  return preempted;
}

bool GantryPolicy::Reserve(Scheduler& s, JobId id, Ticks now) {
  // A backfilled job past its lease ends when the reservation needs its GPUs.
  const bool lessees_end = LeasesExpireFor(s, s.job(id), now);
  const std::function<bool(JobId)> ends_now = [&](JobId r) {
    return lessees_end && Overdue(s, r, now);
  };
  Ticks start = kForever;
  Allocation fit;
  bool found;
  {
    WhatIf w(s);
    found = reserver_.Earliest(s, w, id, now, ends_now, start, fit);
  }
  if (!found) return false;
  reservations_.push_back(Reservation{id, start, std::move(fit)});
  HeldChanged();
  Hold(s, reservations_.back());
  return true;
}

}  // namespace gantry::core
