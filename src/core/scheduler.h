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

#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "core/ledger.h"
#include "core/model/cluster.h"
#include "core/model/job.h"
#include "core/model/queue.h"
#include "core/placement.h"

namespace gantry::core {

enum class Phase : uint8_t { kPending, kRunning, kSignaled, kDone };

struct JobRecord {
  JobSpec spec;
  Phase phase = Phase::kPending;
  Ticks submit = 0;
  Ticks first_start = -1;
  Ticks last_start = -1;
  Ticks signaled_at = -1;
  Allocation alloc;         // while running or signaled
  GpuUnits units = 0;       // GPU units held now
  JobId preempted_by;
  std::string wait_reason;  // last reason reported for waiting
};

struct Decision {
  enum class Kind : uint8_t { kStart, kPreempt, kReject, kWait };
  Kind kind = Kind::kWait;
  JobId job;
  JobId by;            // kPreempt: the job the victim makes room for
  std::string reason;  // kPreempt, kReject, kWait
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
  Scheduler(const Cluster& cluster, const QueueTree& queues, std::unique_ptr<Policy> policy);

  // Adds a job that arrives at `now`. A job that could never run (no GPU of the cluster
  // could hold it, or it exceeds its queue's burst limit on its own) comes back as a
  // kReject decision from the next Schedule and never runs.
  JobId Submit(JobSpec spec, Ticks now);
  // The job ended (finished, cancelled, reclaimed): its holdings are released.
  void Finish(JobId job, Ticks now);
  // The job goes back to pending (preemption released after grace, node failure).
  void Requeue(JobId job, Ticks now);
  // Marks a node up or down. Going down returns the jobs with a worker on it, which
  // the driver must Requeue (their holdings stay until then).
  std::vector<JobId> SetNodeUp(NodeId node, bool up);

  // One scheduling pass. The returned reference is valid until the next call.
  const std::vector<Decision>& Schedule(Ticks now);
  // Earliest future time at which a pass could start something without any other
  // event (a window opening), or kForever.
  Ticks next_wakeup() const { return next_wakeup_; }

  const JobRecord& job(JobId id) const { return jobs_[id.v]; }
  size_t job_count() const { return jobs_.size(); }
  const Ledger& ledger() const { return ledger_; }
  const Cluster& cluster() const { return cluster_; }
  const QueueTree& queues() const { return queues_; }
  // GPU units held by the queue and its descendants.
  GpuUnits queue_usage(QueueId q) const { return queue_usage_[q.v]; }
  std::string_view policy_name() const { return policy_->name(); }

  // ---- for policies ----
  struct PendingKey {
    Tier tier;
    Ticks submit;
    JobId id;
    auto operator<=>(const PendingKey&) const = default;
  };
  const std::set<PendingKey>& pending() const { return pending_; }
  const std::vector<JobId>& arrived_since_last_pass() const { return arrived_; }
  // Tries to start a pending job now: window, burst limits, then placement with `fit`.
  // On failure records the wait reason (emitting a kWait decision when it changed).
  bool TryStart(JobId id, Ticks now, Fit fit);
  // Signals a running job to make room for `by`.
  void Preempt(JobId victim, JobId by, std::string reason, Ticks now);

 private:
  void Wait(JobId id, std::string reason);
  void Release(JobRecord& job);
  void AddUsage(QueueId q, GpuUnits units);
  // The queue (self or ancestor) whose burst limit `units` more would break, if any.
  std::optional<QueueId> BurstBlocker(QueueId q, GpuUnits units) const;
  GpuUnits MinUnits(const JobSpec& spec) const;
  // "Same request shape": jobs of one shape fit or fail together within a pass, so a
  // pass costs about the number of distinct shapes, not the number of pending jobs.
  struct Shape {
    Sharing sharing;
    bool critical;
    Topology topology;
    int replicas, gpus, share_milli;
    ModelMask models;
    int64_t vram_bytes, cpus_milli, memory_bytes;
    std::string mig_profile;
    auto operator<=>(const Shape&) const = default;
  };
  static Shape ShapeOf(const JobSpec& spec);

  const Cluster& cluster_;
  const QueueTree& queues_;
  std::unique_ptr<Policy> policy_;
  Ledger ledger_;
  Placer placer_;
  std::vector<JobRecord> jobs_;
  std::set<PendingKey> pending_;
  std::vector<JobId> arrived_;
  std::vector<std::pair<JobId, std::string>> rejects_;  // awaiting their kReject decision
  std::vector<GpuUnits> queue_usage_;
  std::vector<Decision> decisions_;
  std::map<Shape, std::string> failed_shapes_;  // this pass: shape -> why it failed
  bool freed_since_pass_ = true;
  Ticks next_wakeup_ = kForever;
  Ticks pass_wakeup_ = kForever;
  Allocation scratch_;
};

}  // namespace gantry::core
