// VictimSelector: whom a preemption takes, for the gantry policy.
//
// It indexes the running jobs no rule protects, in groups kept across passes (each group
// in an order that does not move with the clock, read in a pass only as far as needed):
// never critical work, nor a
// job resumed less than `min_run_before_repreempt` ago (except in a queue ordered by
// attained service, whose ranks protect it once it has run a quantum); cheapest first:
// best-effort before standard, then the least work lost since the last checkpoint. For a
// job it picks, under one of four rules (Mode), the cheapest eligible victims (at most
// kMaxVictims), releases them on the ledger in a what-if until the job fits, then gives
// back any the job can do without, most expensive first. For a critical
// job whose cheapest victims leave no room (their GPUs scattered: shares of many GPUs,
// say) it tries the victims of one node at a time instead, cheapest nodes first.
// A job that is not critical takes a checkpointing victim only within
// `preempt_after_checkpoint` of one of its checkpoints (within a quantum under rank);
// next_checkpoint() then says when one left out for that comes into reach. A standard
// victim that never checkpoints counts its start as its only checkpoint.
// Thread-safety: none; one per policy, driven by one Scheduler.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <limits>
#include <optional>
#include <span>
#include <tuple>
#include <utility>
#include <vector>

#include <absl/container/btree_set.h>

#include "core/policy/queue_order.h"
#include "core/policy/what_if.h"
#include "core/scheduler.h"

namespace gantry::core {

class VictimSelector {
 public:
  // Whom a preemption may take.
  enum class Mode : uint8_t {
    kGuarantee,  // the job fits its guarantee: best-effort work, and borrowed capacity
    kLessees,    // due for a reservation: backfilled jobs past their lease (its tier or lower)
    kRank,       // its queue orders by attained service: its queue's jobs that rank worse
    kTier,       // beyond its guarantee (PolicyParams::best_effort_yields_to): best-effort work
  };

  explicit VictimSelector(QueueOrdering& ordering) : ordering_(ordering) {}

  // A new pass: the index is rebuilt on first use.
  void NewPass() { indexed_ = false; }
  // Whether Choose, where the cheapest victims leave no room, tries node by node: for
  // critical work under the guarantee's or the tier's rule (for the rest the extra
  // victims cost more than the wait).
  static bool ByNode(Tier tier, Mode mode) {
    return tier == Tier::kCritical && (mode == Mode::kGuarantee || mode == Mode::kTier);
  }
  // The victims that make room for `job` on GPUs of `models` (kGuarantee: where it is
  // inside its guarantee; ~0: anywhere) under `mode`, fewest of the cheapest, in
  // `needed`, and where the job goes once they are gone in `fit`; false when none do.
  // The caller preempts every job in `needed` (the index then counts them as gone).
  // `job_rank` is the job's rank (kRank); `overdue` says whether a running job is a
  // backfilled job past its lease (kLessees). Its what-ifs run in `w`. Call Prepare first.
  bool Choose(const Scheduler& s, WhatIf& w, const JobRecord& job, Mode mode, ModelMask models,
              double job_rank, Ticks now, const std::function<bool(JobId)>& overdue,
              std::vector<JobId>& needed, Allocation& fit);
  // Before Choose: the pass's index, built on first use (it takes the running jobs that
  // moved since the last pass from the scheduler).
  void Prepare(Scheduler& s, Ticks now) {
    if (!indexed_) Index(s, now);
  }
  // After Choose: the earliest next checkpoint of a victim left out for want of one, and
  // when a pass should look again (a victim no longer protected, a checkpoint).
  Ticks next_checkpoint() const { return next_checkpoint_; }
  Ticks wake_at() const { return wake_at_; }

 private:
  // A running job that may be preempted, as the pass's index holds it.
  struct Victim {
    // Cheapest first: by category (0: best-effort, 1: standard), then lost (GPU units x
    // seconds since the last checkpoint), packed in one word, then id. (Packed, the
    // per-pass sort of the index takes half the time of a three-field comparison.)
    uint64_t cost;
    JobId id;
    uint32_t info;  // its entry in info_ (its place in Scheduler::running())
    static constexpr int kCategoryShift = 62;
    static uint64_t Cost(int category, GpuUnits lost) {
      // lost < 2^62: a 128-worker gang of 8 GPUs would need 10^5 years to reach it.
      return uint64_t(category) << kCategoryShift |
             std::min<uint64_t>(uint64_t(lost), (uint64_t{1} << kCategoryShift) - 1);
    }
    int category() const { return static_cast<int>(cost >> kCategoryShift); }
    GpuUnits lost() const {
      return static_cast<GpuUnits>(cost & ((uint64_t{1} << kCategoryShift) - 1));
    }
    bool operator<(const Victim& o) const { return cost != o.cost ? cost < o.cost : id < o.id; }
  };
  // What the rules read of a running job, by its place in Scheduler::running(): copied
  // from its record when the place's stamp moved, and kept across passes (so walks over
  // the index touch no job record, and a pass's index reads only the jobs that changed:
  // at 100,000 GPUs, reading some 18,000 running jobs' records at every pass, and again
  // in each walk, was most of a replay's time). Its group membership is kept the same way.
  // One cache line for each victim a walk reads (where a job runs, read only by the
  // node-by-node what-if, is apart in where_).
  struct alignas(64) Info {
    Ticks last_start = 0;
    Ticks checkpoint = 0;
    GpuUnits units = 0;
    // This pass: its last checkpoint at or before the pass (Since), kept across passes so
    // that a pass finds it without a division while no checkpoint came between.
    Ticks mark = kForever;
    uint64_t cost = 0;  // this pass: Victim::cost
    QueueId queue;
    int preemptions = 0;
    uint32_t group = UINT32_MAX;   // its group in groups_ (kept with the stamp)
    uint32_t bucket = UINT32_MAX;  // its bucket in that group; UINT32_MAX: in none
    JobId id;                      // the job it was read for (its bucket's entry is keyed by it)
    Tier tier = Tier::kStandard;
    // This pass: resumed less than min_run_before_repreempt ago: only an attained-service
    // order, whose ranks protect it, may take it (once it has run a quantum).
    bool guarded = false;
    bool signaled = false;  // Choose gave it as needed: its preemption is under way
    // An elastic job above its least size that checkpoints: it gives its growth back at its
    // next checkpoint (Scheduler::ShrinkElastic) before anything of it is taken whole.
    bool grown = false;
  };
  static_assert(sizeof(Info) == 64);
  // Where a running job holds GPUs, by its place (beside info_).
  struct Where {
    uint64_t pools = 0;           // pools it holds GPUs in (PoolBit)
    std::vector<uint32_t> nodes;  // its nodes, each once
  };
  // This pass, for a victim: the time since its last checkpoint (0 for a job that never
  // checkpoints).
  Ticks Since(const Info& v) const { return v.checkpoint > 0 ? now_ - v.mark : 0; }
  static int Category(const Info& v) { return v.tier == Tier::kBestEffort ? 0 : 1; }
  // The index, in groups: best-effort victims by the pools they hold GPUs in
  // (Info::pools), standard victims by pools and queue, so a walk reads only the groups
  // its rule may take from (at 100,000 GPUs in two pools, 94% of the victims a walk
  // read were in a pool its job could not use, and of the rest most were in queues
  // within their guarantee). Within a group, members are in buckets of one size (units)
  // and checkpoint interval, each kept in an order that does not move with the clock, so
  // a pass reads only as far into a group as its walks do. A member's cost is its units
  // x the seconds since its last checkpoint (since it started, without checkpoints); in
  // a bucket, that order is by `phase` (its start modulo the interval, or its start),
  // read downwards from the clock's own phase and round: at 100,000 GPUs, working out
  // every member's cost at every pass was a fifth of a steady pass.
  struct Entry {
    Ticks phase;
    uint32_t id;   // the job's (JobId::v): within a phase, read downwards, by id
    uint32_t pos;  // its place in Scheduler::running()
    bool operator<(const Entry& o) const {
      if (phase != o.phase) return phase < o.phase;
      if (id != o.id) return id > o.id;
      return pos < o.pos;
    }
  };
  // A B-tree, not std::set: at 100,000 GPUs the trees hold ~59,000 running jobs, and a
  // node per entry made each insert, erase and cursor step a cache miss (10% of a pass
  // with 10,000 pending jobs, with the end-ordered set below).
  using Entries = absl::btree_set<Entry>;
  struct Bucket {
    GpuUnits units = 0;
    Ticks checkpoint = 0;
    Entries entries;
    uint32_t skipped = 0;  // this pass: members no rule may take (guarded, not by rank)
  };
  // A bucket read cheapest first (this pass). Members of one cost (phases within a
  // second of each other) go by id, as a sort of the whole group would order them: a
  // run of them is read as one sub-cursor per phase, merged by id.
  struct Sub {
    Entries::const_iterator at, first;  // reading downwards from `at` to `first`
    Victim victim;                      // at's
  };
  struct Cursor {
    uint32_t bucket = 0;
    Entries::const_iterator start, at;  // the phases below `at` (round to `start`) are unread
    bool round = false;                 // read past the lowest phase, round to the top
    std::vector<Sub> subs;              // the run's phases: a min-heap by their victim's id
  };
  struct Group {
    uint64_t pools = 0;
    int category = 0;             // as Victim::category()
    QueueId queue;                // standard work's
    std::vector<Bucket> buckets;  // kept across passes (never dropped)
    std::vector<uint32_t>
        members;  // the same members, unordered (for All: a scan, not a tree walk)
    // This pass, made on first use: the victims in order as far as walks read (merged
    // from the buckets' cursors, a min-heap by their heads), min_units over the buckets
    // with a victim, and whether any has one.
    bool prepared = false;
    std::vector<Victim> victims;  // [0, ready) in order
    size_t ready = 0;
    // Read deeper than kLazyVictims in a pass: the rest are all in `victims`, sorted a
    // chunk at a time as reached (a walk past many ineligible victims, with 100,000
    // jobs waiting, read victims one at a time slower than a sort of them all).
    bool bulk = false;
    std::vector<Cursor> cursors;
    std::vector<uint32_t> heap;  // cursors with victims left
    GpuUnits min_units = 0;
    bool any = false;
    // This pass, made on first use: every victim, in no order (for node by node).
    bool all_made = false;
    std::vector<Victim> all;
    // The earliest a victim of it comes back into a preemption window (the next
    // checkpoint of one past its window), for the window of the rank rule ([1]) and of
    // the others ([0]); kForever for none. Whoever the rules take now, a job waiting for
    // room is woken then: borrowing moves, and a victim its rule leaves now may be one it
    // takes at that checkpoint (without the wake, seed 6 at load 1.2 waited 0.71x fifo's
    // delay instead of 0.53x: docs/policies.md). Made on first use in a pass.
    bool windows_made = false;
    Ticks next_window[2] = {kForever, kForever};
  };
  // What Choose is asked, as its helpers read it.
  struct Ask {
    const JobRecord& job;
    uint64_t accepts;  // the pools its workers may use (PoolBit), where it may preempt
    Mode mode;
    Ticks now;
    double rank;                                // kRank: the job's
    const std::function<bool(JobId)>& overdue;  // kLessees: whether a running job is past its lease
  };
  // Borrowed units already chosen: (queue, model, units).
  using Taken = std::vector<std::tuple<QueueId, ModelId, GpuUnits>>;

  // A new pass's index: the groups' members brought up to date (the running jobs neither
  // critical nor being stopped), and unprotect_.
  void Index(Scheduler& s, Ticks now);
  // Info at `pos` into its group's bucket, or out of it.
  void Join(uint32_t pos);
  void Leave(uint32_t pos);
  // A bucket's key for a member, and the clock's (the member's cost grows as the
  // clock's phase moves away from its own, downwards and round).
  static Ticks Phase(Ticks t, Ticks checkpoint) {
    return checkpoint > 0 ? ((t % checkpoint) + checkpoint) % checkpoint : t;
  }
  // When a victim past its window (preempt_after_checkpoint) is next inside it: at its
  // next checkpoint, rounded up to a multiple of a quarter of the window. It is still
  // inside then (it loses at most a quarter of the window more), and the wakes this asks
  // for fall on one grid for every waiting job and victim. Woken at each best-effort
  // checkpoint, waiting standard jobs made half the passes of the 100k replay (179k of
  // 362k; 225k with the grid).
  static Ticks WindowOpens(Ticks checkpoint_at, Ticks window) {
    const Ticks step = window / 4;
    return step > 1 ? (checkpoint_at + step - 1) / step * step : checkpoint_at;
  }
  // This pass: resumed less than min_run_before_repreempt ago.
  bool Guarded(const Scheduler& s, const Info& v) const {
    return v.preemptions > 0 && now_ - v.last_start < s.params().min_run_before_repreempt;
  }
  // Heap orders: a group's cursors by their heads (the cheapest on top), a run's
  // sub-cursors by their victim's id (the lowest on top).
  static bool HeadAfter(const Group& g, uint32_t x, uint32_t y) {
    return g.cursors[y].subs.front().victim < g.cursors[x].subs.front().victim;
  }
  static bool IdAfter(const Sub& x, const Sub& y) { return y.victim.id < x.victim.id; }
  // A member as a victim now, or nothing where no rule may take it (guarded, and its
  // queue not by rank); fills its Info's guarded, mark and cost for the pass.
  std::optional<Victim> Read(const Scheduler& s, const Group& g, uint32_t pos);
  // The group's cursors and min_units for this pass (made on first use).
  void Prepare(const Scheduler& s, Group& g);
  // Cursor c's head (its cheapest victim left): c.subs.front(), after starting its next
  // run where the last is read; false when it has none left.
  bool Fill(const Scheduler& s, const Group& g, Cursor& c);
  // Moves sub x to its next victim a rule may take; false when it has none left.
  bool Settle(const Scheduler& s, const Group& g, Sub& x);
  // Brings the group's next victims in order into g.victims[ready, ...); false when none
  // is left.
  bool More(const Scheduler& s, Group& g);
  // Bulk: sorts the next chunk, as long as the sorted part.
  static void SortChunk(Group& g);
  // Every victim of the group this pass, in no order.
  const std::vector<Victim>& All(const Scheduler& s, Group& g);
  // The group's next_window for this pass.
  void Windows(const Scheduler& s, Group& g);
  // Whether running job `c`, in a pool the job's workers may use, may make room for it.
  bool Eligible(const Scheduler& s, const Ask& a, const Victim& c);
  // Whether group `g` may hold a victim for the job (where not, Eligible is false for
  // each of its victims); prepares it where its victims decide.
  bool Reads(const Scheduler& s, const Ask& a, Group& g);
  // Calls visit(c) on the victims of the groups Reads() names, cheapest first (each
  // group read as far as needed), until visit returns false.
  template <typename Visit>
  void Walk(const Scheduler& s, const Ask& a, Visit visit);
  // Fills candidates_: the cheapest victims (at most kMaxVictims) that may make room for
  // the job.
  void Candidates(const Scheduler& s, const Ask& a);
  // Whether releasing `victims` could leave room for `spec` on pools `accepts`: an upper
  // bound, counting GPUs as the releases would leave them and ignoring CPUs, memory, VRAM
  // on whole GPUs and the placer's choices, so false is certain. `released_only`: on the
  // nodes they hold only (all of a single-node job's workers there), a guess, not a bound.
  bool MayMakeRoom(const Scheduler& s, const JobSpec& spec, uint64_t accepts,
                   std::span<const Victim> victims, bool released_only);
  // Whether the what-if may take victim `c`: standard work only where all of it is
  // borrowed, counting `taken`, which then grows by it.
  bool Take(const Scheduler& s, const Victim& c, Mode mode, Taken& taken);
  // What a running job holds as its queue's guarantee counts it: by model where the
  // guarantee is per model, else one total (model invalid). Fills holdings_.
  void Holdings(const Scheduler& s, const JobRecord& job);
  // Whether all a running job holds is borrowed: its queue keeps at least its guarantee
  // (on each model, where per model) without it and without the units in `taken`
  // already chosen. Only work wholly on borrowed capacity is reclaimed, so a victim's
  // queue never drops below its guarantee (and its requeued job never turns round to
  // preempt in its turn: no ping-pong).
  bool AllBorrowed(const Scheduler& s, const JobRecord& job, const Taken& taken);
  // Choose's what-if for a critical job when the cheapest victims overall leave it no
  // room: the eligible victims of one node at a time, cheapest nodes first, at most
  // kMaxNodeTries. (For standard work the extra victims cost more than its wait: lost
  // work rose on the gang mixes.) On success the victims in `chosen` are released on the
  // ledger and `fit` holds the job's placement, as after Choose's own loop.
  bool NodeByNode(const Scheduler& s, WhatIf& w, const Ask& a, const JobSpec& spec,
                  std::vector<JobId>& chosen, Allocation& fit);

  QueueOrdering& ordering_;
  std::vector<Group> groups_;  // kept across passes (their vectors' room with them)
  std::vector<std::vector<uint32_t>> group_of_;     // [0]: best-effort; [queue + 1]: standard
  std::vector<Group*> walk_;                        // Walk: the groups it reads
  std::vector<std::pair<uint32_t, size_t>> heads_;  // Walk: (group in walk_, next victim)
  std::vector<Info> info_;      // by place in Scheduler::running() (Victim::info)
  std::vector<Where> where_;    // by place, as info_
  std::vector<uint64_t> seen_;  // by place: Scheduler::running_stamps() when info_ was copied
  // By place: the last start of a member resumed after a preemption (the re-preemption
  // guard runs from it), else kNotResumed.
  static constexpr Ticks kNotResumed = std::numeric_limits<Ticks>::min();
  std::vector<Ticks> resumed_;
  std::vector<uint32_t> resumed_list_;  // places whose resumed_ may still guard
  std::vector<uint32_t> stamped_;       // Index's scratch: places stamped since the last pass
  std::vector<uint32_t> member_;        // by place: its index in its group's members
  std::vector<uint32_t> signaled_;  // places whose Info::signaled this pass set (reset at Index)
  bool indexed_ = false;
  Ticks now_ = 0;               // the pass's (Index)
  Ticks unprotect_ = kForever;  // earliest end of a re-preemption guard
  Ticks next_checkpoint_ = kForever;
  Ticks wake_at_ = kForever;  // Choose's
  std::vector<Victim> candidates_;
  std::vector<std::pair<ModelId, GpuUnits>> holdings_;  // Holdings' result
  // NodeByNode: what emptying a node of its eligible victims costs. Cheapest first: any
  // standard victim after best-effort ones only, then work lost, then the node's id.
  struct NodeCost {
    int category = 0;
    GpuUnits lost = 0;
    uint32_t node = 0;
    bool seen = false;  // holds an eligible victim (in one call)
    bool operator<(const NodeCost& o) const {
      return std::tie(category, lost, node) < std::tie(o.category, o.lost, o.node);
    }
  };
  std::vector<NodeCost> node_cost_;  // by node; all zero between calls
  std::vector<Victim> eligible_;     // NodeByNode: the eligible victims
  std::vector<NodeCost> nodes_;      // NodeByNode: the nodes it tries first, with their costs
  std::vector<uint32_t> touched_;    // NodeByNode: the same, by node
  // MayMakeRoom: the candidates' workers by node, and per node they touch the whole GPUs
  // free after releasing them (and that many more than now).
  std::vector<std::pair<uint32_t, const WorkerAlloc*>> holds_;
  struct After {
    uint32_t node;
    int free_whole;  // after
    int gained;      // GPUs free after, not now
  };
  std::vector<After> after_;                         // by node
  std::vector<std::pair<uint32_t, int>> leaf_gain_;  // GPUs gained by leaf

  // NodeByNode's index of the pass, made on its first call, a pool at a time as asked
  // for: the victims on each node, and per pool the nodes holding best-effort victims by
  // the work emptying them of those loses. Nodes whose eligible victims are all
  // best-effort come first in NodeByNode's order, so where a pool's first such nodes are
  // enough, the what-if reads only them and not every running job (which it did once per
  // critical fit class and queue a pass: half of a pass at 100,000 GPUs).
  struct ByNodeIndex {
    bool made = false;
    bool single_pool = true;      // no victim holds GPUs in two pools (else: the walk)
    std::vector<bool> pool_made;  // by pool: the entries of its nodes below are made
    // By node: its victims are on[first[n], first[n] + count[n]).
    std::vector<uint32_t> first, count;
    std::vector<Victim> on;
    // By node: its best-effort victims that critical work (all NodeByNode serves) may
    // take (neither signaled nor guarded), how many and the work they would lose.
    std::vector<uint32_t> best_effort;
    std::vector<GpuUnits> lost;
    std::vector<std::vector<std::pair<GpuUnits, uint32_t>>> by_pool;  // (lost, node), sorted
  };
  // Starts by_node_ for the pass: whether any victim holds GPUs in two pools.
  void IndexNodes(const Scheduler& s);
  // Makes by_node_'s entries for the nodes of pool `p`.
  void IndexPool(const Scheduler& s, PoolId p);
  // by_node_ after the victim at info_[pos] was signaled.
  void Signaled(const Scheduler& s, uint32_t pos);
  // NodeByNode's order from every eligible victim: the kMaxNodeTries cheapest nodes, with
  // the eligible victims on each.
  void AllNodes(const Scheduler& s, const Ask& a, std::vector<NodeCost>& nodes,
                std::vector<std::vector<Victim>>& runs);
  // The kMaxNodeTries cheapest nodes in NodeByNode's order, with the eligible victims on
  // each, from by_node_: false where fewer nodes than that hold only best-effort eligible
  // victims (the order then needs every node's cost: the walk).
  bool CheapestNodes(const Scheduler& s, const Ask& a, std::vector<NodeCost>& nodes,
                     std::vector<std::vector<Victim>>& runs);
  ByNodeIndex by_node_;
};

}  // namespace gantry::core
