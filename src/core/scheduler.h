// Scheduler: the pure, deterministic scheduling core.
//
// Drivers (the simulator, the server) tell it what happened (Submit, Finish, Requeue,
// SetNodeUp) and call Schedule(now), which returns decisions: start (the allocation is
// in the job's record and already in the ledger), preempt (signal the victim; it keeps
// its GPUs until the driver calls Requeue after its grace), reject, and wait (the reason
// a pending job waits, emitted only when it changes). The core reads no clock, file or
// socket; ties break on ids, so the same calls give the same decisions.
// A policy (fifo, ...) orders pending jobs and picks placements and victims through the
// small interface below; admission rules common to all policies (windows, burst limits,
// gang all-or-nothing, spot) live here.
// Thread-safety: none; one owner drives it.
#pragma once

#include <array>
#include <bitset>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <absl/container/btree_set.h>

#include "core/fragmentation.h"
#include "core/ledger.h"
#include "core/model/cluster.h"
#include "core/model/job.h"
#include "core/model/queue.h"
#include "core/placement.h"

namespace gantry::core {

enum class Phase : uint8_t { kPending, kRunning, kSignaled, kDone };

// Tunables shared by the policies (the cluster config's `policy` section).
struct PolicyParams {
  // Idle reclamation (the driver acts on it): a job whose GPUs stayed idle this long
  // ends; 0 = never. 15 minutes, as sites that reclaim commonly set it; per tier where
  // set (reclaim_idle_after_s_by_tier), and a queue's own setting wins over both.
  Ticks reclaim_idle_after = 900'000;
  std::array<std::optional<Ticks>, kTierCount> reclaim_idle_after_by_tier{};
  Ticks fairshare_half_life = 86'400'000;  // decay of past usage (Slurm: PriorityDecayHalfLife)
  Ticks aging = 4 * 3'600'000;             // a job waiting this long goes ahead of fair share
  Ticks min_run_before_repreempt =
      600'000;             // a resumed job runs this long before it can be preempted again
  int backfill_depth = 1;  // reservations per pass: 1 = EASY, more = conservative
  Ticks default_runtime_estimate = 3'600'000;  // when neither the job nor its queue's history tells
  // A job waiting this long may preempt jobs backfilled past their estimate (0 = never).
  Ticks backfill_lease_after = 48 * 3'600'000;
  // A job that is not critical, preempting for its guarantee, takes a victim that
  // checkpoints only this soon after one of its checkpoints, so the victim loses at most
  // this (plus its grace); it waits for the next checkpoint otherwise (0 = at any time).
  // A standard victim that never checkpoints is taken only this soon after its start.
  Ticks preempt_after_checkpoint = 120'000;
  // Jobs of this tier or above (standard, or critical only) may preempt best-effort work
  // beyond their queue's guarantee as well (inside it both may); none: no job does.
  // Kueue's borrowWithinCohort, its maxPriorityThreshold as a tier.
  std::optional<Tier> best_effort_yields_to = Tier::kStandard;
  // Where standard jobs may: beyond its guarantee a standard job takes a best-effort job
  // only while that job would lose at most this much of its run (since its start or last
  // checkpoint); critical work takes it regardless (0 = no limit). Young best-effort work
  // is cheap to restart; a notebook that has run for hours is not (docs/policies.md:
  // with this limit the queueing-delay target is met on every workload at load 1.2 and
  // above with less work lost than with `critical` alone).
  Ticks best_effort_yields_within = 3'600'000;
  // A job of one worker that finds no room may move running jobs of one worker (its tier
  // or lower, not critical, started at least min_run_before_repreempt ago) that would
  // lose at most this much of their run (since their start or last checkpoint) to other
  // nodes, a few at a time, where that makes room for it (core/policy/consolidator.h).
  // 0 = never (the default).
  Ticks consolidate_within = 0;
  // FGD's placement weighs the task mix's classes by the GPUs their workers ask, not by
  // how many workers ask (policy.fragmentation_weights: gpus; core/fragmentation.h).
  bool fragmentation_by_gpus = false;
  // Live idle reclamation: a GPU under this utilization (0..1) counts as idle.
  double reclaim_idle_below = 0.05;
  // Critical jobs are never reclaimed unless this is set.
  bool reclaim_critical = false;
  // Budgets: the Unix time (ms) of tick 0, for calendar periods, and each GPU model's
  // price per GPU-hour by ModelId, which weighs budgets (missing: 1).
  int64_t epoch_unix_ms = 0;
  std::vector<double> gpu_hour_price;
  // Attained-service orders (core/attained.h): the LAS levels' bounds in GPU-seconds,
  // ascending, and how often a pass re-ranks while such a queue's jobs wait.
  std::vector<double> las_thresholds_gpu_s = {3'600, 36'000};
  Ticks attained_quantum = 10'000;
  // A job pending this long (since it last became pending) drains: see GantryPolicy.
  // 0 = never; a queue's max_wait overrides it for the queues under it.
  Ticks max_wait = 0;
  // A pass after capacity was freed (a release, a node up, a window opening, a wakeup)
  // visits every pending job; at most one such full pass per this interval (Slurm's
  // bf_interval, the scheduling cycle of KAI and Volcano). Between, a pass tries only the
  // claims of jobs whose victims left and critical arrivals: work that is not critical
  // arriving meanwhile waits for the full pass with the jobs ahead of it (it must not take
  // GPUs freed for them), and freed GPUs wait at most this long. 0: every pass after a
  // release is full (the cost of a pass then grows with the backlog at every event).
  Ticks full_pass_interval = 0;
  // An elastic job resizes only at a checkpoint of its run: a whole number of checkpoint
  // intervals since it began, or at most this much past one. A driver whose passes do
  // not land on the millisecond sets it (gantryd: its passes come up to a pass interval
  // after the wakeup); what the run did past its checkpoint is lost. 0 (the simulator,
  // whose passes land on the wakeup): exactly at one.
  Ticks checkpoint_slack = 0;
  // A driver that stops a resized job's old run before starting the next (gantryd: the
  // checkpoint signal, then the workers' exit) sets this: the old run's workers that the
  // new size does not keep go on holding their GPUs until it says the new run began
  // (RunBegan) or the job ends, so nothing else is placed on GPUs still in use. Unset (the
  // simulator), a resize is instant.
  bool resize_waits_for_run = false;
  // A driver whose workers cannot move (Kubernetes: a bound pod stays on its node) sets
  // this: an elastic job grows by workers beside the ones it has (in its topology's
  // domain), which keep their places; unset, it is placed anew at the larger size.
  bool resize_in_place = false;
};

// The price of a GPU-hour on `model` (1 when the config names none).
inline double GpuHourPrice(const PolicyParams& params, ModelId model) {
  return model.valid() && model.v < params.gpu_hour_price.size() ? params.gpu_hour_price[model.v]
                                                                 : 1.0;
}

// How long `spec`'s GPUs may stay idle before its job is reclaimed; 0 = never. The
// nearest queue setting (the job's queue, then its ancestors) wins, then its tier's, then
// the policy's; critical jobs only with reclaim_critical; never a job that keeps_when_idle.
Ticks ReclaimIdleAfter(const JobSpec& spec, const QueueTree& queues, const PolicyParams& params);
// How fast `spec`'s work goes on `alloc` (JobSpec::model_speed): its slowest worker's
// model's speed; 1 for a job that gives none.
double RunSpeed(const JobSpec& spec, const Allocation& alloc, const Cluster& cluster);
// The max_wait in force for queue q: the nearest queue setting, else the policy's; 0 = off.
Ticks MaxWaitFor(QueueId q, const QueueTree& queues, const PolicyParams& params);

// Why a pending job waits: what code branches on (the reason text, whose first word names
// it, is for people and the event log). kNotYetPlaced: no pass has tried it since it
// became pending.
enum class WaitCause : uint8_t {
  kNotYetPlaced,
  kCapacity,
  kReservation,
  kPreemption,
  kQuota,
  kBudget,
  kWindow,
  kOther
};
inline constexpr int kWaitCauses = 8;
std::string_view Name(WaitCause c);  // "not yet placed", "capacity", "held for a reservation", ...
std::string_view Word(WaitCause c);  // the reason text's first word: "capacity", "reservation", ...
// What a wait's `at` means, for a display that puts it beside the reason text: "estimated
// start", ...; empty where the text gives its time itself (kWindow, whose time never moves).
// Reason texts leave out what moves from pass to pass (a reserved start, a holder's, the
// next checkpoint, a queue's usage): a new text is a new wait event, and the reserved
// jobs' moving starts made most of a big replay's events (664,000 of the 1M replay's 738,000).
std::string_view AtLabel(WaitCause c);
// A time as reason texts give it: seconds with up to millisecond decimals ("12", "12.345");
// the server turns "t=<that> s" into wall-clock times.
std::string SecondsText(Ticks t);

// Why a pending job waits, for code: what blocks it and, where known, the queue whose
// limit holds it, the job the room is held for, and when that may change. The reason
// text (JobRecord::wait_reason) says the same for people.
struct WaitReason {
  WaitCause cause = WaitCause::kNotYetPlaced;
  QueueId queue;  // kQuota, kBudget: the queue whose limit holds it
  JobId holder;   // kReservation: the job the GPUs are held for first; kQuota: the job the
                  // room is held for; kPreemption: the job it was preempted for
  Ticks at = -1;  // kWindow: when it opens; kReservation: the earliest start of the held
                  // GPUs' jobs; kCapacity with a reservation or drain of its own: the
                  // reserved start; kPreemption: when its victims' grace ends
  bool operator==(const WaitReason&) const = default;
  static WaitReason Of(WaitCause cause, QueueId queue = QueueId(), JobId holder = JobId(),
                       Ticks at = -1) {
    WaitReason w;
    w.cause = cause;
    w.queue = queue;
    w.holder = holder;
    w.at = at;
    return w;
  }
};

struct JobRecord {
  JobSpec spec;
  Phase phase = Phase::kPending;
  Ticks submit = 0;
  Ticks pending_since = 0;  // when it last became pending (submit or requeue)
  Ticks first_start = -1;
  Ticks last_start = -1;
  Ticks signaled_at = -1;
  Allocation alloc;    // while running or signaled
  GpuUnits units = 0;  // GPU units held now
  JobId preempted_by;
  std::string wait_reason;  // last reason reported for waiting
  WaitReason wait;          // the same, for code
  Ticks run_total = 0;      // run time of ended runs
  Ticks progress_kept = 0;  // checkpointed progress of ended runs (as the core reckons it)
  int preemptions = 0;      // times this job was preempted
  int released = 0;         // workers of the gang this run is without: let go while the rest runs
                            // on (ReleaseWorkers), or an elastic job's below its replicas
  int victims_pending = 0;  // signaled victims still holding the capacity this job needs
  Ticks expected_end = -1;  // while running: ExpectedEnd as of its start or signal
  Tier asked_tier = Tier::kStandard;  // spec.tier as submitted; spec.tier is best-effort
                                      // instead while a spent budget demotes it
  double cost_rate = 0;               // while running: weighted GPU-hours per tick it spends
  uint32_t shape = 0;                 // its request shape, interned at submit (Scheduler::shape_id)
  uint32_t fit_class = 0;             // its fit class, interned at submit (Scheduler::FitClassOf)
  GpuUnits min_units = 0;  // MinUnits(spec), from its submit (the spec's units never change)
  // The driver says it may not be preempted now (under Kubernetes: a PodDisruptionBudget
  // allows no disruption of its pods); policies then choose other victims.
  bool shielded = false;
  Fit fit = Fit::kBest;  // how it was placed at its start (an elastic job grows so)
};

struct Decision {
  // kResize: an elastic job runs on at a new size from now (job.alloc): a restart from
  // its checkpoint at that size (Scheduler::Schedule grows and shrinks them only at
  // checkpoints, so nothing is lost); it is never a start, preemption or requeue.
  enum class Kind : uint8_t { kStart, kPreempt, kReject, kWait, kResize };
  Kind kind = Kind::kWait;
  JobId job;
  JobId by;                             // kPreempt: the job the victim makes room for
  std::string reason;                   // kPreempt, kReject, kWait
  WaitCause cause = WaitCause::kOther;  // kWait
  Ticks at = -1;                        // kWait: the wait's `at` when its text was written
};

class Scheduler;

// A scheduling policy. Schedule() walks pending jobs in its own order and calls
// Scheduler::TryStart / Preempt; it must be deterministic.
class Policy {
 public:
  virtual ~Policy() = default;
  virtual std::string_view name() const = 0;
  // `full` is false when nothing was freed since the last pass, so only jobs that
  // arrived since then can possibly start.
  virtual void Schedule(Scheduler& s, Ticks now, bool full) = 0;
};

// Policies by name: "fifo". Returns null for an unknown name.
std::unique_ptr<Policy> MakePolicy(std::string_view name);
std::vector<std::string> PolicyNames();

class Scheduler {
 public:
  Scheduler(const Cluster& cluster, const QueueTree& queues, std::unique_ptr<Policy> policy,
            PolicyParams params = {});

  // Adds a job that arrives at `now`. A job that could never run (no GPU of the cluster
  // could hold it, or it exceeds its queue's burst limit on its own) comes back as a
  // kReject decision from the next Schedule and never runs.
  JobId Submit(JobSpec spec, Ticks now);
  // The tier `id` was submitted at, where it runs at another (spec.tier): a job re-adopted
  // after a restart whose run started demoted by a spent budget. A requeued job goes back
  // to this tier unless a budget still demotes it.
  void SetAskedTier(JobId id, Tier asked) { Rec(id).asked_tier = asked; }
  // The job ended (finished, cancelled, reclaimed): its holdings are released. A
  // `completed` job's total run time feeds its queue's runtime estimates.
  void Finish(JobId job, Ticks now, bool completed = false);
  // The job goes back to pending (preemption released after grace, node failure).
  void Requeue(JobId job, Ticks now);
  // An elastic job's run at its new size (a kResize decision) began only now: a driver
  // that first stops the old run's workers (gantryd: the checkpoint signal, their exit)
  // says so, and the run's checkpoints, hence its next resize, count from now.
  void RunBegan(JobId job, Ticks now);
  // A running gang's pods that came after it started (Kubernetes: a PodGroup's pods beyond
  // those it was bound with) make it elastic between `min_replicas` and `replicas`, its
  // size now inside them: it may grow into them at its checkpoints. Whole-GPU gangs only.
  void SetSizes(JobId job, int min_replicas, int replicas);
  // The job's run-time estimate changed (gantryd: scontrol update TimeLimit, which the
  // estimate follows where it came from the time limit); nullopt: its queue's history.
  // A running job's expected end moves with it.
  void SetRuntimeEstimate(JobId job, std::optional<Ticks> estimate);
  // Some workers of a running gang ended while the others run on (under Kubernetes a pod
  // of a gang that succeeded or failed: its GPUs are free, as they are to the kubelet):
  // the workers at `gone` (indices into the job's alloc, ascending) release what they
  // hold, the others keep their order, and the queue's usage and budget follow. At least
  // one worker stays (the last one's end is Finish). O(workers).
  void ReleaseWorkers(JobId job, const std::vector<size_t>& gone, Ticks now);
  // Marks a node up or down. Going down returns the jobs with a worker on it, which
  // the driver must Requeue (their holdings stay until then).
  std::vector<JobId> SetNodeUp(NodeId node, bool up);

  // One scheduling pass. The returned reference is valid until the next call.
  const std::vector<Decision>& Schedule(Ticks now);
  // Earliest future time at which a pass could start something without any other
  // event (a window opening), or kForever.
  Ticks next_wakeup() const { return next_wakeup_; }

  // A job forgotten (below) reads as an ended job with an empty spec.
  const JobRecord& job(JobId id) const {
    const Chunk* c = chunks_[id.v >> kChunkBits].get();
    return c != nullptr ? c->records[id.v & (kChunk - 1)] : kForgotten;
  }
  size_t job_count() const { return jobs_given_; }  // ids given so far, forgotten ones too
  size_t job_records() const { return jobs_given_ - forgotten_; }  // not forgotten
  // Frees the record of an ended job (phase kDone) that the driver no longer asks about:
  // a control plane that runs for months must not hold every job it ever ran (with its
  // command, environment and script). Its id is never given again; a policy that still
  // names it (a stale claim, say) reads it as ended. False, and nothing done, for a job
  // that has not ended or was forgotten already. The simulator forgets each job as it ends
  // too: every replay (golden logs, property tests) checks that no decision reads one.
  bool Forget(JobId id);
  const Ledger& ledger() const { return ledger_; }
  // Checks the ledger's totals against its GPUs and that every running gang holds its
  // workers where the ledger says so; throws InvariantBroken otherwise. O(GPUs + running
  // workers); a pass runs it every AuditEvery() passes.
  void Audit() const;
  // The cluster's fragmented GPUs under the task mix learned from submitted jobs (FGD,
  // fragmentation.h): free GPU capacity of up nodes that the expected work could not
  // use, in GPUs; 0 before any job was submitted. O(nodes) after a ledger change, else
  // O(1).
  double fragmented_gpus() const { return frag_.FragmentedGpus(); }
  const Fragmentation& fragmentation() const { return frag_; }
  const Cluster& cluster() const { return cluster_; }
  const QueueTree& queues() const { return queues_; }
  // GPU units held by the queue and its descendants.
  GpuUnits queue_usage(QueueId q) const { return queue_usage_[q.v]; }
  // GPU units held by the queue and its descendants on GPUs of `model`. Kept only when
  // some queue's guarantee is per model (QueueSpec::guaranteed_by_model); 0 otherwise.
  GpuUnits queue_usage_on(QueueId q, ModelId model) const {
    return model_usage_.empty() ? 0 : model_usage_[q.v * models_ + model.v];
  }
  // The models the job accepts on which starting it (plus `extra` units) keeps its
  // queue inside the queue's own guarantee: every model (~0) or none when the guarantee
  // counts any model, else those the queue lists with room for the job on them.
  ModelMask GuaranteedModels(const JobSpec& spec, GpuUnits extra = 0) const {
    return GuaranteedModels(spec, extra, MinUnits(spec));
  }
  // The same for a submitted job (its least units are kept from its submit: the fair-share
  // order asks for every queue's next job, and MIG jobs weigh every model to know them).
  ModelMask GuaranteedModels(JobId id) const {
    return GuaranteedModels(Rec(id).spec, 0, Rec(id).min_units);
  }
  // Whether queue q would still hold at least its guarantee without `units` of what it
  // holds on `model`, i.e. those units are borrowed (on that model for a per-model
  // guarantee; over all models, `model` ignored, otherwise).
  bool Borrowed(QueueId q, ModelId model, GpuUnits units) const;
  std::string_view policy_name() const { return policy_->name(); }
  const PolicyParams& params() const { return params_; }

  // ---- budgets (core/budget.h) ----
  // A budgeted queue's account as of the last pass: weighted GPU-hours its subtree spent
  // in the current period, the period, and whether the budget is spent.
  struct BudgetAccount {
    double spent = 0;
    int64_t start_unix_ms = 0, end_unix_ms = 0;
    bool out = false;
    double rate = 0;  // weighted GPU-hours per tick its running jobs spend
    Ticks at = -1;    // `spent` counts up to here
  };
  // Null for a queue without a budget.
  const BudgetAccount* budget_account(QueueId q) const {
    return budgets_.empty() || !queues_.queue(q).spec.budget ? nullptr : &budgets_[q.v];
  }
  // Adds to budgeted queue q's account what its subtree spent before this scheduler
  // existed (a restarted server's ended runs of q's current period; each budgeted queue
  // gets its own sum). Call before the first pass, with `at` inside that period.
  void AddBudgetSpent(QueueId q, double gpu_hours, Ticks at);
  // Budgeted queue q's spending in its period as of `now` (its account brought up to
  // then; 0 without a budget), for a scheduler that replaces this one (AddBudgetSpent).
  double BudgetSpentAt(QueueId q, Ticks now);
  // Weighted GPU-hours per hour of `alloc` for a job of `spec`.
  double CostPerHour(const JobSpec& spec, const Allocation& alloc) const;
  // The spent budget that makes new work of queue q of `tier` wait / its standard work run
  // as best-effort, if any (only budgets whose applies_to has the tier; critical work a
  // spent budget covers waits, whatever its when_spent).
  std::optional<QueueId> BudgetHolds(QueueId q, Tier tier) const;
  std::optional<QueueId> BudgetDemotes(QueueId q) const;

  // ---- for policies ----
  // "Same request shape": jobs of one shape fit or fail together within a pass, so a
  // pass costs about the number of distinct shapes, not the number of pending jobs.
  // Each job's shape is interned once, at submit: the per-pass caches are indexed by its
  // number (a map keyed by the whole struct cost 7% of a replay in comparisons).
  struct Shape {
    Sharing sharing;
    bool critical;
    Topology topology;
    int replicas, min_replicas, gpus, share_milli;
    ModelMask models, vram_fits;  // vram_fits: fit classes only (FitClassOf)
    int64_t vram_bytes, cpus_milli, memory_bytes;
    std::string mig_profile;
    PoolId pool;
    std::vector<PoolId> pools;
    auto operator<=>(const Shape&) const = default;
  };
  // The shape as asked.
  static Shape ShapeOf(const JobSpec& spec);
  // Its fit class, which decides whether it finds room: where VRAM matters only through
  // which models can hold it (a whole GPU, a MIG slice: the placer reads the amount
  // nowhere else), the models that can (vram_fits) instead of the amount, so jobs asking
  // 55.5 and 60.1 GB of 80 GB GPUs are one class (the 1M-job replay's 4,636 shapes are
  // 25 classes). A pass's no-room cache is per class. The policy's other per-pass caches
  // stay per shape: what they find also depends on what moved earlier in the pass (whose
  // GPUs are held, which work is borrowed), and shared by a class they changed wait
  // reasons and, for preemption, which jobs preempted on gen workloads.
  static Shape FitClassOf(const JobSpec& spec, const Catalog& catalog);
  // The number of job `id`'s shape: equal for two jobs exactly when their shapes are.
  uint32_t shape_id(JobId id) const { return Rec(id).shape; }
  uint32_t fit_class_id(JobId id) const { return Rec(id).fit_class; }  // FitClassOf, interned

  struct PendingKey {
    Tier tier;
    Ticks submit;
    JobId id;
    auto operator<=>(const PendingKey&) const = default;
  };
  const std::set<PendingKey>& pending() const { return pending_; }
  const std::vector<JobId>& arrived_since_last_pass() const { return arrived_; }
  // Tries to start a pending job now: window, burst limits, then placement with `fit`.
  // On failure records the wait reason (emitting a kWait decision when it changed), or,
  // with `why`, hands the reason back unrecorded for the policy to refine. `wait`, when
  // given, says which check failed (cause kWindow, kBudget, kQuota or kCapacity;
  // kNotYetPlaced after a start).
  bool TryStart(JobId id, Ticks now, Fit fit, std::string* why = nullptr,
                WaitReason* wait = nullptr);
  // Whether job `id` has a window and it is closed at `now`.
  bool WindowClosed(JobId id, Ticks now) const {
    const auto& window = Rec(id).spec.window;
    return window && !window->Contains(now);
  }
  // Whether TryStart would refuse job `id` before placing it (its window is closed, its
  // queue's budget is spent, or a burst limit leaves no room): then nothing on the ledger
  // can change the outcome.
  bool HeldBeforePlacement(JobId id, Ticks now) const;
  // Whether TryStart under shape context `context` would fail job `id` from the pass's
  // cache of fit classes that found no room (so without placing anything).
  bool KnownNotToFit(JobId id, uint8_t context) const;
  // Recovery (gantryd after a restart): the pending job `id`, just submitted, runs again
  // from `started` holding exactly `alloc`, as it did before, with no decision emitted.
  // Refused (false, the reason in `why`; the job stays pending) where a node of `alloc`
  // is unknown or down, `alloc` overlaps what is held, or TryStart would refuse the job
  // for its queue's budget or burst limits. Cost: O(workers + log jobs).
  bool Adopt(JobId id, const Allocation& alloc, Ticks started, std::string* why = nullptr);
  // Shields a running job from preemption, or lifts the shield (see JobRecord::shielded).
  void SetShielded(JobId id, bool shielded);
  // A driver restoring a job (a restarted gantryd) gives the preemptions it had, before
  // Adopt: the anti-thrash guard (min_run_before_repreempt) shields only resumed jobs.
  void SetPreemptions(JobId id, int preemptions) { Rec(id).preemptions = preemptions; }
  // A pending job's nice value changed (scontrol update Nice=): its place in its queue
  // follows from the next pass.
  void SetNice(JobId id, int nice) {
    Rec(id).spec.nice = nice;
    any_nice_ |= nice != 0;
  }
  // Signals a running job to make room for `by`.
  void Preempt(JobId victim, JobId by, std::string reason, Ticks now);
  // Records why a job waits (emits a kWait decision when the reason changed).
  void Wait(JobId id, const WaitReason& wait, std::string_view reason);

  // Pending jobs of one tier and queue, by (submit, id).
  const std::set<std::pair<Ticks, JobId>>& pending_in(Tier tier, QueueId q) const {
    return pending_by_queue_[static_cast<size_t>(tier) * queues_.size() + q.v];
  }
  // Running or signaled jobs, in no particular order (a dense set: O(1) to add and
  // remove, contiguous to walk).
  const std::vector<JobId>& running() const { return running_; }
  // Beside running(), position by position: a stamp that is new whenever the job there
  // changes (another job moved into the place, a new run, a signal), so a policy can keep
  // what it reads of running jobs' records across passes and read again only what moved.
  const std::vector<uint64_t>& running_stamps() const { return running_stamp_; }
  // The places stamped since `taker`'s last call, into `out` (some may be past the end
  // of running() now: gone; some twice). False where they were not all kept (the first
  // call, another taker since, or more stamps than there are running jobs): then every
  // place must be read. So the one piece that keeps what it read across passes reads
  // what moved without a walk over every running job (59,000 at 100,000 GPUs).
  bool TakeRunningChanges(const void* taker, std::vector<uint32_t>& out);
  // A running or signaled job's place in running() (stable within a pass: the set only
  // grows until a job's run ends, between passes).
  uint32_t running_place(JobId id) const { return running_pos_[id.v]; }
  // Runtime estimate: the job's own, else the mean of its queue's last completed jobs,
  // else the default.
  Ticks Estimate(JobId id) const;
  // Run time the job still needs by its estimate, at least 1 s; a job resumed past its
  // estimate is expected to run as long again as it has run.
  Ticks Remaining(JobId id) const;
  // Running and signaled jobs by expected end, as reckoned when each started or was
  // signaled (estimates learnt later do not move them), then id.
  const absl::btree_set<std::pair<Ticks, JobId>>& running_by_end() const { return by_end_; }
  // The work (progress, without lost work) of the queue's last 1,024 completed jobs, in
  // no particular order, and how many were ever recorded (changes with each): the
  // Gittins order's distribution of run times.
  const std::vector<Ticks>& observed_runs(QueueId q) const { return observed_[q.v]; }
  uint64_t observed_count(QueueId q) const { return observed_count_[q.v]; }
  // Whether a job with a nice value other than 0 was ever submitted (then queues order
  // their pending jobs by it first).
  bool any_nice() const { return any_nice_; }
  // Exponentially decayed usage of a queue (GPU units, averaged with the half-life).
  double decayed_usage(QueueId q) const { return decayed_[q.v]; }
  // Every queue's decayed usage brought from the last pass up to `now`, for a scheduler
  // built anew over the same queues to go on from (SeedDecayedUsage).
  std::vector<double> DecayedUsageAt(Ticks now) const;
  // Sets every queue's decayed usage (GPU units, by QueueId) as of `at`: what a restarted
  // server read back from its stored runs, or what the scheduler this one replaces had.
  // Call before the first pass.
  void SeedDecayedUsage(std::vector<double> decayed, Ticks at);
  // How far `units` more in queue q would go past the burst limit of q or an ancestor
  // (the most over any of them; 0 when within every limit).
  GpuUnits BurstExcess(QueueId q, GpuUnits units) const;
  // GPU units a job would hold (the least over the models it accepts, for MIG).
  GpuUnits MinUnits(const JobSpec& spec) const;
  // GPU units `alloc`'s workers of `spec` hold, each on its node's model. O(workers).
  GpuUnits UnitsOf(const JobSpec& spec, const Allocation& alloc) const;
  // For what-if evaluations inside a pass: the ledger and placer, to be left exactly as
  // found (every Allocate undone by a Release and vice versa) except through TryStart.
  Ledger& mutable_ledger() { return ledger_; }
  Placer& placer() { return placer_; }
  const Placer& placer() const { return placer_; }
  // Extra context mixed into the pass's shape cache (0 or 1), e.g. "reservations
  // ignored"; kNoShapeCache: neither read nor fill the cache (a one-off view of the ledger).
  static constexpr uint8_t kShapeContexts = 2;
  static constexpr uint8_t kNoShapeCache = 255;
  void set_shape_context(uint8_t c) { shape_context_ = c; }
  // Asks for a full pass at `t` (e.g. when a protected victim becomes preemptible).
  void WakeAt(Ticks t) { pass_wakeup_ = std::min(pass_wakeup_, t); }

  // For benchmarks: called at the start of every TryStart, so a driver with a clock can
  // time decisions (from one call to the next is one job's decision and whatever the
  // policy did with its outcome: preemption and reservation what-ifs). The core reads no
  // clock itself.
  void set_decision_hook(std::function<void()> hook) { decision_hook_ = std::move(hook); }

 private:
  bool TryStartJob(JobId id, Ticks now, Fit fit, std::string* why, WaitReason* wait);
  // What its spec's request interns to (min_units, shape, fit_class): at submit, and when
  // SetSizes changes it.
  void InternShape(JobRecord& rec);
  ModelMask GuaranteedModels(const JobSpec& spec, GpuUnits extra, GpuUnits least) const;
  // A pending job whose `alloc` is held in the ledger starts running at `now`.
  void Begin(JobId id, Ticks now, GpuUnits units);
  void Release(JobId id, Ticks now);
  // Elastic jobs (JobSpec::min_replicas). PlaceLargest: the largest size in [lo, hi] of
  // `spec` that fits now, placed into `out` (0 and nothing placed when none does); sizes
  // that fit are taken to be closed downward, so it costs log2(hi - lo + 2) + 1 placements.
  // With workers_per_node, sizes are whole groups (multiples of it). With `beside`, the
  // workers are more of a gang that holds it (Placer::PlaceBeside).
  int PlaceLargest(const JobSpec& spec, Fit fit, int lo, int hi, Allocation& out,
                   const Allocation* beside = nullptr);
  // At a checkpoint of its run (a whole number of checkpoints since it began, so a resize
  // loses nothing), an elastic job shrinks to min_replicas while work waits for room
  // (before the policy's pass, which then sees the GPUs), and grows as far as it fits and
  // its queue's burst allows while none waits (after the pass). Both set a wakeup at the
  // job's next checkpoint while they may act then.
  void ShrinkElastic(Ticks now);
  void GrowElastic(Ticks now);
  bool WorkWaitsForRoom() const;  // a pending job waits for capacity (not a limit or window)
  // The job runs on from now holding `alloc` (already in the ledger; the old one released
  // by the caller): the run so far ends at a checkpoint, kept as progress at its old size.
  void Resize(JobId id, Allocation alloc, GpuUnits units, Ticks now);
  // resize_waits_for_run: per job mid-resize, its old run's workers the new size left out,
  // still in the ledger (few at a time, so beside the records rather than in each).
  std::unordered_map<uint32_t, Allocation> draining_;
  void ReleaseDraining(JobId id);
  std::set<JobId> elastic_;  // running elastic jobs
  // When a running job is expected to release its holdings (from the estimate now).
  Ticks ExpectedEnd(JobId id) const;
  void SetExpectedEnd(JobId id, Ticks end);  // -1: not running
  void AddPending(JobId id);
  void RemovePending(JobId id);
  void DecayUsage(Ticks now);
  // `usage` (the decayed usage as of decayed_at_) brought to `now` at the usage held since.
  void DecayTo(std::vector<double>& usage, Ticks now) const;
  // Adds (sign 1) or removes (sign -1) a job's holdings from its queue and ancestors at
  // `now`: the decayed usage first counts the holdings as they were up to then.
  void AddUsage(const JobSpec& spec, const Allocation& alloc, GpuUnits units, int sign, Ticks now);
  // The queue (self or ancestor) whose burst limit `units` more would break, if any.
  std::optional<QueueId> BurstBlocker(QueueId q, GpuUnits units) const;
  // Budgets: brings accounts up to `now` (a new period starts afresh), updates which are
  // spent and retiers pending jobs where that changed; a job starting (sign 1) or
  // stopping (-1) at `t` changes its queues' spending rate.
  bool UpdateBudgets(Ticks now);        // true when some budget became spent or renewed
  Ticks BudgetWakeup(Ticks now) const;  // when a budget runs out or a spent one renews
  void AdvanceBudget(QueueId q, Ticks t);
  void BudgetRun(JobId id, Ticks t, int sign);
  void Retier(JobId id);  // pending: best-effort while a budget demotes it, else as asked

  const Cluster& cluster_;
  const QueueTree& queues_;
  std::unique_ptr<Policy> policy_;
  PolicyParams params_;
  Ledger ledger_;
  Fragmentation frag_;  // before placer_, which scores placements with it
  Placer placer_;
  // Job records by id, in chunks of kChunk: contiguous, as one vector would keep them
  // (a pass reads thousands; records allocated one by one made a replay 6% slower), yet
  // freed once every job of a chunk is forgotten. A forgotten job's record is emptied
  // at once (its spec's command, environment and script are most of it), so each job
  // still active keeps at most one chunk of empty records (64 x 744 bytes: 47 KB).
  static constexpr uint32_t kChunkBits = 6, kChunk = 1u << kChunkBits;
  struct Chunk {
    std::array<JobRecord, kChunk> records;
    std::bitset<kChunk> forgotten;
  };
  std::vector<std::unique_ptr<Chunk>> chunks_;  // null: every job of it forgotten
  uint32_t jobs_given_ = 0;
  uint32_t forgotten_ = 0;
  static const JobRecord kForgotten;  // an emptied record: what job() reads once forgotten
  bool Forgotten(JobId id) const;
  JobRecord& Rec(JobId id) {
    return chunks_[id.v >> kChunkBits]->records[id.v & (kChunk - 1)];
  }  // not forgotten
  const JobRecord& Rec(JobId id) const {
    return chunks_[id.v >> kChunkBits]->records[id.v & (kChunk - 1)];
  }
  // A signaled victim let go of its GPUs: its preemptor waits for one fewer (one
  // forgotten meanwhile waits for none).
  void VictimLeft(const JobRecord& victim);
  std::set<PendingKey> pending_;
  std::vector<JobId> arrived_;
  std::vector<std::pair<JobId, std::string>> rejects_;  // awaiting their kReject decision
  std::vector<GpuUnits> queue_usage_;
  size_t models_ = 0;                  // catalog size: the stride of model_usage_
  std::vector<GpuUnits> model_usage_;  // [queue * models_ + model]; empty: no per-model guarantee
  std::vector<Decision> decisions_;
  std::map<Shape, uint32_t> shape_ids_;  // every shape submitted so far -> its number
  std::map<Shape, uint32_t> class_ids_;  // every fit class so far -> its number
  // This pass: [fit class * kShapeContexts + context] -> whether it found no room (where
  // the pass number matches).
  std::vector<uint64_t> failed_shapes_;
  uint64_t pass_ = 1;
  // Per fit class: "capacity: no room now for ...", written on its first failure (the text
  // depends on the class alone; it was 7% of a replay's time when written at each).
  std::vector<std::string> no_room_text_;
  bool freed_since_pass_ = true;
  Ticks last_full_pass_ = -1;    // when the last full pass ran (-1: none yet)
  bool full_pass_owed_ = false;  // one was due within full_pass_interval of the last
  Ticks next_wakeup_ = kForever;
  Ticks pass_wakeup_ = kForever;
  Allocation scratch_;
  uint8_t shape_context_ = 0;
  std::vector<std::set<std::pair<Ticks, JobId>>> pending_by_queue_;  // [tier * queues + q]
  std::vector<JobId> running_;
  std::vector<uint32_t> running_pos_;    // per job: its index in running_ while there
  std::vector<uint64_t> running_stamp_;  // beside running_ (running_stamps())
  uint64_t stamps_ = 0;
  void Stamp(uint32_t pos);        // a new stamp at pos, noted for TakeRunningChanges
  std::vector<uint32_t> stamped_;  // places stamped since the last TakeRunningChanges
  bool stamped_all_ = false;       // stamped_ holds every one of them
  const void* stamps_taker_ = nullptr;
  absl::btree_set<std::pair<Ticks, JobId>> by_end_;
  std::function<void()> decision_hook_;
  std::vector<double> decayed_;
  Ticks decayed_at_ = 0;
  // The full audit (ledger and running gangs, core/invariants.h) every AuditEvery()
  // passes: at least 1,024, and as many as the cluster has GPUs, so its O(GPUs + running
  // workers) stays a small part of the passes between at any size (every 12,500 passes it
  // cost the 1M replay at 100,000 GPUs 13%, ~60 ms an audit).
  uint64_t AuditEvery() const { return std::max<uint64_t>(1024, cluster_.gpu_count()); }
  static constexpr size_t kHistory = 32;
  std::vector<std::vector<Ticks>> history_;  // per queue: last completed run totals (ring)
  std::vector<size_t> history_next_;
  std::vector<Ticks> history_sum_;  // per queue: sum of the ring
  static constexpr size_t kObserved = 1024;
  std::vector<std::vector<Ticks>> observed_;  // per queue: last kObserved completed runs (ring)
  std::vector<uint64_t> observed_count_;      // per queue: runs ever added
  bool any_nice_ = false;
  std::vector<QueueId> budgeted_;       // queues with a budget
  std::vector<BudgetAccount> budgets_;  // by queue; empty when no queue has a budget
  std::vector<JobId> budget_check_;     // submitted or requeued since the last pass
};

}  // namespace gantry::core
