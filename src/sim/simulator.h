// Simulator: replays a trace and a failures file through the scheduling core in
// virtual time, writing the event log (spec section 4) and the report (section 6).
//
// Discrete events in (time, kind, sequence) order: at one instant, releases come
// first (finishes, grace expiries, reclaims), then node failures and recoveries, then
// arrivals, then a scheduling pass. The trace is streamed: arrivals are read one line
// ahead, never all at once. Preempted and requeued jobs keep the progress of their last
// checkpoint; idle jobs are reclaimed after the policy's reclaim_idle_after.
// The simulator measures the wall-clock time of each scheduling pass (the only clock
// it reads); everything written to the event log is a function of the inputs. Besides
// the report it keeps the run's time series (Timeline) for the HTML report.
// Thread-safety: none.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <ostream>
#include <queue>
#include <string>
#include <vector>

#include "core/scheduler.h"
#include "sim/report.h"
#include "sim/timeline.h"
#include "spec/config_reader.h"
#include "spec/event_log.h"
#include "spec/job_reader.h"

namespace gantry::sim {

// Where a run stands, for a progress display (SimOptions::progress).
struct SimProgress {
  uint64_t events = 0;   // arrivals, finishes, releases, reclaims, failures handled
  core::Ticks now = 0;   // simulated time
  size_t submitted = 0;  // jobs arrived so far
  size_t done = 0;       // of those: finished, rejected or reclaimed
};

struct SimOptions {
  std::string policy = "fifo";
  bool log_waits = true;  // write "wait" events when a job's reason to wait changes
  // Called after the instant in which every `progress_every`-th event was handled. The
  // simulator reads no clock for it: a display throttles itself (see src/cli).
  std::function<void(const SimProgress&)> progress;
  uint64_t progress_every = 1024;
};

class Simulator {
 public:
  Simulator(const spec::ClusterConfig& config, SimOptions options, std::ostream& events);

  // Runs to the end of the trace and of every job. Trace problems found on the way go
  // to `diags` (the caller validates the trace beforehand, so there should be none).
  // Returns false if the policy name is unknown.
  bool Run(spec::TraceReader& trace, const std::vector<spec::Failure>& failures,
           spec::Diagnostics& diags);

  const Report& report() const { return report_; }
  // The run's time series (closed when Run returns).
  const Timeline& timeline() const { return timeline_; }

 private:
  enum class Kind : uint8_t { kFinish, kRelease, kReclaim, kNodeDown, kNodeUp, kWakeup };
  struct Event {
    core::Ticks t;
    Kind kind;
    uint64_t seq;
    uint32_t a;  // job or node (or failure index for kNodeDown)
    uint32_t run;
    bool operator>(const Event& o) const {
      if (t != o.t) return t > o.t;
      if (kind != o.kind) return kind > o.kind;
      return seq > o.seq;
    }
  };
  struct SimJob {
    core::Ticks duration = 0;  // its run time at speed 1 (JobSpec::model_speed)
    core::Ticks idle_after = -1;
    double util = -1;  // observed usage (trace util, vram_used_gb); -1: unknown
    int64_t vram_used = 0;
    core::Ticks progress = 0;  // kept across runs (checkpoints), in time at its full size
    core::Ticks run_start = 0;
    core::GpuUnits run_units = 0;  // what the run holds
    double run_speed = 1;          // how fast the run goes on its GPUs' models (RunSpeed)
    // Run time until a run from `from` (its kept progress) idles: idle_after counts in work,
    // as duration does. Only with an idle_after.
    core::Ticks UntilIdle(core::Ticks from) const {
      return core::JobSpec::AtSpeed(std::max<core::Ticks>(0, idle_after - from), run_speed);
    }
    // Elastic jobs: work done in worker-ticks (a run of k workers does k per tick; the job
    // needs duration x replicas), and the run's workers (the core's are the next run's
    // once it resizes).
    int64_t work = 0;
    core::Allocation run_alloc;
    uint32_t run = 0;  // bumped when a run ends; stale events carry an old value
    core::GpuUnits critical_pending =
        0;                      // critical, not started yet: its units in pending_critical_
    bool in_guarantee = false;  // critical, arrived inside its queue's guarantee
    std::optional<Timeline::WaitCause> waits;  // pending: why (the timeline's levels)
  };
  // A job's pending cause changed (null: not pending).
  void Waits(core::JobId id, core::Ticks t, std::optional<Timeline::WaitCause> cause);

  void Push(core::Ticks t, Kind kind, uint32_t a, uint32_t run = 0);
  void Handle(const Event& e);
  void Arrive(core::TraceJob&& tj);
  void Pass(core::Ticks now);
  // Ends the current run of a job that goes back to pending (preempt, requeue) or away
  // (reclaim): keeps checkpointed progress, accounts lost work. Returns run time.
  // A resize's run ends at a checkpoint: nothing is lost and it is not a preemption.
  void EndRun(core::JobId id, core::Ticks now, Report::Cause cause, bool resize = false);
  // A run starts now on what the core's record holds: its finish (and reclaim) events.
  void BeginRun(core::JobId id, core::Ticks now);
  // Reports the GPU units x time of a run ending now, per GPU model its workers held.
  // With observed usage, also what the workers kept busy (up to idle_after of run time,
  // counted from `progress` at the run's start) and what right-sizing would have freed.
  void ModelUsage(core::JobId id, core::Ticks start, core::Ticks end, core::Ticks progress);
  void Account(core::Ticks now);
  // After each instant: the timeline's state and samples, and progress.
  void Observe(core::Ticks now);
  const std::string& Name(core::JobId id) const { return sched_.job(id).spec.id; }

  const spec::ClusterConfig& config_;
  SimOptions options_;
  core::Scheduler sched_;
  spec::EventLog log_;
  Report report_;
  Timeline timeline_;
  std::priority_queue<Event, std::vector<Event>, std::greater<>> events_;
  std::vector<SimJob> jobs_;
  std::map<uint32_t, std::string> preempt_reason_;  // signaled jobs: why
  std::vector<core::Ticks> node_up_at_;             // latest scheduled recovery per node
  const std::vector<spec::Failure>* failures_ = nullptr;
  uint64_t seq_ = 0;
  core::Ticks wakeup_at_ = core::kForever;
  size_t active_ = 0;                             // jobs submitted and not yet done
  std::vector<core::GpuUnits> pending_critical_;  // per queue: units of critical jobs never started
  std::vector<char> budget_out_;                  // by queue, as of the last pass
  uint64_t handled_ = 0;                          // events handled (SimProgress::events)
  uint64_t next_progress_ = 0;
  core::Ticks last_t_ = 0;  // latest instant handled
};

}  // namespace gantry::sim
