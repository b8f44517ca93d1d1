#include "sim/simulator.h"

#include "core/advice.h"
#include "core/idle.h"

#include <cassert>
#include <chrono>
#include <utility>

namespace gantry::sim {

using core::JobId;
using core::Ticks;

namespace {
Timeline::Ending EndingOf(Report::Cause cause) {
  switch (cause) {
    case Report::Cause::kPreempt:
      return Timeline::Ending::kPreempted;
    case Report::Cause::kRequeue:
      return Timeline::Ending::kRequeued;
    case Report::Cause::kReclaim:
      return Timeline::Ending::kReclaimed;
  }
  return Timeline::Ending::kPreempted;
}
}  // namespace

Simulator::Simulator(const spec::ClusterConfig& config, SimOptions options, std::ostream& events)
    : config_(config),
      options_(std::move(options)),
      sched_(config.cluster, config.queues, core::MakePolicy(options_.policy),
             config.policy.params),
      log_(events, config.cluster),
      report_(config.queues, options_.policy),
      timeline_(config.queues),
      node_up_at_(config.cluster.nodes().size(), -1),
      pending_critical_(config.queues.size(), 0),
      budget_out_(config.queues.size(), 0) {
  std::map<std::string, double> prices;
  for (size_t m = 0; m < config.cluster.catalog().size(); ++m) {
    const core::ModelId id(static_cast<uint32_t>(m));
    prices[config.cluster.catalog().model(id).name] = core::GpuHourPrice(config.policy.params, id);
  }
  report_.SetPrices(std::move(prices), config.policy.currency);
}

void Simulator::Push(Ticks t, Kind kind, uint32_t a, uint32_t run) {
  events_.push(Event{t, kind, seq_++, a, run});
}

void Simulator::Account(Ticks now) {
  report_.Advance(now, sched_.ledger().up_units(), sched_.ledger().used_units());
  report_.Fragmented(now, sched_.fragmented_gpus());
}

void Simulator::Observe(Ticks now) {
  last_t_ = now;
  timeline_.SetState(now, sched_.ledger().up_units(), sched_.ledger().used_units(),
                     sched_.pending().size());
  // Fragmentation costs O(nodes) after a change: sampled once per bucket.
  if (timeline_.WantsSample(now))
    timeline_.SampleFragmentation(now, sched_.fragmented_gpus(), core::IdleByCause(sched_));
  if (options_.progress && handled_ >= next_progress_) {
    next_progress_ = handled_ + options_.progress_every;
    options_.progress(SimProgress{handled_, now, jobs_.size(), jobs_.size() - active_});
  }
}

bool Simulator::Run(spec::TraceReader& trace, const std::vector<spec::Failure>& failures,
                    spec::Diagnostics& diags) {
  failures_ = &failures;
  for (size_t i = 0; i < failures.size(); ++i) {
    Push(failures[i].t, Kind::kNodeDown, static_cast<uint32_t>(i));
  }
  core::TraceJob next;
  bool have = trace.Next(next, diags);
  while (true) {
    Ticks t = events_.empty() ? core::kForever : events_.top().t;
    if (have && next.submit < t) t = next.submit;
    if (t == core::kForever) break;
    Account(t);  // integrate capacity and allocation up to t with the old values
    do {
      while (!events_.empty() && events_.top().t == t && events_.top().kind <= Kind::kNodeUp) {
        Event e = events_.top();
        events_.pop();
        Handle(e);
        ++handled_;
      }
      while (have && next.submit == t) {
        ++handled_;
        Arrive(std::move(next));
        next = core::TraceJob{};
        have = trace.Next(next, diags);
      }
      while (!events_.empty() && events_.top().t == t && events_.top().kind == Kind::kWakeup) {
        events_.pop();
      }
      Pass(t);
    } while (!events_.empty() && events_.top().t == t);
    Account(t);  // the values in force from t on
    if (!have && t == report_.last_submit()) {
      report_.StrandedAtLastArrival(sched_.ledger().up_units(), core::StrandedUnits(sched_));
    }
    Observe(t);
    // Stop once the trace is read, nothing runs or waits, and only failures remain.
    if (!have && active_ == 0) break;
  }
  report_.Unfinished(active_);
  timeline_.Finish(last_t_);
  const Timeline::IdleGpus idle = timeline_.IdleMeans();
  std::vector<std::pair<std::string, double>> means;
  for (int c = 0; c < Timeline::kIdleCauses; ++c) {
    means.emplace_back(core::Name(static_cast<core::IdleCause>(c)), idle[c]);
  }
  report_.IdleByCause(std::move(means));
  return true;
}

void Simulator::Arrive(core::TraceJob&& tj) {
  const Ticks t = tj.submit;
  SimJob s;
  s.duration = tj.duration;
  s.idle_after = tj.idle_after ? *tj.idle_after : -1;
  if (tj.util) {
    s.util = *tj.util;
    s.vram_used = tj.vram_used_bytes.value_or(tj.spec.vram_bytes * std::max(1, tj.spec.gpus));
  }
  if (tj.spec.tier == core::Tier::kCritical) {
    const core::QueueId q = tj.spec.queue;
    s.critical_pending = sched_.MinUnits(tj.spec);
    // Critical jobs of the queue still waiting count ahead of it (on every model, for a
    // per-model guarantee: a conservative count).
    s.in_guarantee = sched_.GuaranteedModels(tj.spec, pending_critical_[q.v]) != 0;
    pending_critical_[q.v] += s.critical_pending;
  }
  JobId id = sched_.Submit(std::move(tj.spec), t);
  assert(id.v == jobs_.size());
  jobs_.push_back(s);
  Waits(id, t, Timeline::WaitCause::kNotYetPlaced);
  log_.Submit(t, Name(id));
  report_.Submitted(t);
  report_.Events(1);
  ++active_;
}

void Simulator::Waits(JobId id, Ticks t, std::optional<Timeline::WaitCause> cause) {
  SimJob& s = jobs_[id.v];
  timeline_.Waiting(t, s.waits, cause);
  s.waits = cause;
}

void Simulator::Pass(Ticks now) {
  const auto start = std::chrono::steady_clock::now();
  const std::vector<core::Decision>& decisions = sched_.Schedule(now);
  const auto end = std::chrono::steady_clock::now();
  report_.SchedulingPass(std::chrono::duration<double, std::milli>(end - start).count());
  for (uint32_t q = 0; q < budget_out_.size(); ++q) {  // budgets spent or renewed
    const core::Scheduler::BudgetAccount* a = sched_.budget_account(core::QueueId(q));
    if (a == nullptr || a->out == (budget_out_[q] != 0)) continue;
    budget_out_[q] = a->out;
    const core::QueueSpec& spec = config_.queues.queue(core::QueueId(q)).spec;
    log_.Budget(now, spec.name, a->out ? "spent" : "renewed", a->spent, spec.budget->gpu_hours);
    if (a->out) report_.BudgetSpent(core::QueueId(q));
  }
  for (const core::Decision& d : decisions) {
    const core::JobRecord& job = sched_.job(d.job);
    SimJob& s = jobs_[d.job.v];
    switch (d.kind) {
      case core::Decision::Kind::kStart: {
        log_.Start(now, Name(d.job), job.alloc);
        report_.Started(job.spec.tier, job.spec.queue, now - job.submit,
                        job.first_start == now && s.run == 0);
        if (job.spec.tier == core::Tier::kCritical && job.first_start == now && s.run == 0) {
          pending_critical_[job.spec.queue.v] -= std::exchange(s.critical_pending, 0);
          if (s.in_guarantee) report_.CriticalInGuaranteeStarted(now - job.submit);
        }
        Waits(d.job, now, std::nullopt);
        BeginRun(d.job, now);
        break;
      }
      case core::Decision::Kind::kResize: {
        // The run so far ends at a checkpoint (nothing lost) and the next begins at the
        // new size.
        const size_t from = s.run_alloc.size();
        EndRun(d.job, now, Report::Cause::kPreempt, /*resize=*/true);
        log_.Resize(now, Name(d.job), from, job.alloc);
        report_.Resized();
        BeginRun(d.job, now);
        break;
      }
      case core::Decision::Kind::kPreempt:
        preempt_reason_[d.job.v] = d.reason;
        Push(now + job.spec.grace, Kind::kRelease, d.job.v, s.run);
        break;
      case core::Decision::Kind::kReject:
        log_.Reject(now, Name(d.job), d.reason);
        report_.Rejected(Name(d.job), d.reason);
        Waits(d.job, now, std::nullopt);
        pending_critical_[job.spec.queue.v] -= std::exchange(s.critical_pending, 0);
        --active_;
        sched_.Forget(d.job);  // as gantryd does with every job that ends
        break;
      case core::Decision::Kind::kWait:
        if (options_.log_waits) log_.Wait(now, Name(d.job), d.reason, d.at);
        Waits(d.job, now, d.cause);
        break;
    }
  }
  report_.Events(decisions.size());
  if (Ticks w = sched_.next_wakeup(); w < core::kForever && w > now && w != wakeup_at_) {
    wakeup_at_ = w;
    Push(w, Kind::kWakeup, 0);
  }
}

void Simulator::BeginRun(JobId id, Ticks now) {
  const core::JobRecord& job = sched_.job(id);
  SimJob& s = jobs_[id.v];
  s.run_start = now;
  s.run_units = job.units;
  timeline_.RunStarted(now, job.spec.tier, job.spec.queue, job.spec.sharing, job.units);
  // Its work goes at its models' speed (a job that gives none: 1, its duration as traced).
  s.run_speed = core::RunSpeed(job.spec, job.alloc, config_.cluster);
  Ticks finish = now + core::JobSpec::AtSpeed(s.duration - s.progress, s.run_speed);
  if (job.spec.elastic()) {  // at k of n workers it goes k/n as fast (or its profile's)
    s.run_alloc = job.alloc;
    finish = now + core::JobSpec::AtSpeed(job.spec.TimeFor(s.duration * job.spec.replicas - s.work,
                                                           static_cast<int>(job.alloc.size())),
                                          s.run_speed);
  }
  Push(finish, Kind::kFinish, id.v, s.run);
  // The same rule as gantryd's: queue settings, critical jobs, keep_when_idle.
  const Ticks reclaim_after =
      core::ReclaimIdleAfter(job.spec, config_.queues, config_.policy.params);
  if (s.idle_after >= 0 && reclaim_after > 0) {
    const Ticks idle_at = now + s.UntilIdle(s.progress);
    if (idle_at + reclaim_after < finish)
      Push(idle_at + reclaim_after, Kind::kReclaim, id.v, s.run);
  }
}

void Simulator::ModelUsage(JobId id, Ticks start, Ticks end, Ticks progress) {
  const core::Cluster& cluster = config_.cluster;
  const core::JobRecord& job = sched_.job(id);
  const SimJob& s = jobs_[id.v];
  for (const core::WorkerAlloc& w : job.spec.elastic() ? s.run_alloc : job.alloc) {
    const core::ModelId model = cluster.node(w.node).model;
    if (!model.valid()) continue;  // a CPU node
    const core::GpuUnits units = job.spec.WorkerUnits(cluster.catalog(), model);
    if (units == 0) continue;  // a CPU-only worker
    report_.ModelUsage(job.spec.queue, cluster.catalog().model(model).name,
                       UnitMs{units} * (end - start));
    if (s.util < 0) continue;
    const Ticks busy =
        s.idle_after < 0 ? end - start : std::min<Ticks>(s.UntilIdle(progress), end - start);
    const core::Advice a = core::RightSize(cluster, model, job.spec, {s.vram_used, s.util});
    const double fit_units =
        a.gpus > 0 ? static_cast<double>(units) * a.fit_gpus / a.gpus : static_cast<double>(units);
    report_.ObservedUsage(
        job.spec.queue, static_cast<double>(units) * static_cast<double>(end - start),
        static_cast<double>(units) * static_cast<double>(busy) * s.util,
        (static_cast<double>(units) - fit_units) * static_cast<double>(end - start));
  }
}

void Simulator::EndRun(JobId id, Ticks now, Report::Cause cause, bool resize) {
  const core::JobRecord& job = sched_.job(id);
  SimJob& s = jobs_[id.v];
  const Ticks run_time = now - s.run_start;
  const Ticks ckpt = job.spec.checkpoint;
  const Ticks kept = ckpt > 0 ? run_time / ckpt * ckpt : 0;
  const Ticks progress = s.progress;
  if (job.spec.elastic()) {
    s.work += core::JobSpec::WorkAt(job.spec.WorkerTime(kept, static_cast<int>(s.run_alloc.size())),
                                    s.run_speed);
    s.work = std::min(s.work, s.duration * job.spec.replicas);
    s.progress = s.work / job.spec.replicas;
  } else {
    s.progress = std::min(s.duration, s.progress + core::JobSpec::WorkAt(kept, s.run_speed));
  }
  report_.RunEnded(job.spec.queue, job.spec.tier, s.run_units, s.run_start, now, run_time - kept,
                   cause);
  ModelUsage(id, s.run_start, now, progress);
  timeline_.RunEnded(now, job.spec.tier, job.spec.queue, job.spec.sharing, s.run_units,
                     run_time - kept, resize ? Timeline::Ending::kFinished : EndingOf(cause));
  ++s.run;
}

void Simulator::Handle(const Event& e) {
  const Ticks t = e.t;
  report_.Events(1);
  switch (e.kind) {
    case Kind::kFinish: {
      JobId id(e.a);
      SimJob& s = jobs_[id.v];
      if (s.run != e.run) return;  // that run already ended
      const core::JobRecord& job = sched_.job(id);
      report_.RunEnded(job.spec.queue, job.spec.tier, s.run_units, s.run_start, t, 0,
                       Report::Cause::kPreempt);
      ModelUsage(id, s.run_start, t, s.progress);
      timeline_.RunEnded(t, job.spec.tier, job.spec.queue, job.spec.sharing, s.run_units, 0,
                         Timeline::Ending::kFinished);
      s.progress = s.duration;
      ++s.run;
      log_.Finish(t, Name(id));
      report_.Finished(t, job.spec.tier, job.spec.queue, t - job.submit);
      sched_.Finish(id, t, /*completed=*/true);
      sched_.Forget(id);
      --active_;
      return;
    }
    case Kind::kRelease: {
      JobId id(e.a);
      SimJob& s = jobs_[id.v];
      if (s.run != e.run) return;
      const core::JobRecord& job = sched_.job(id);
      const std::string by = job.preempted_by.valid() ? Name(job.preempted_by) : std::string();
      const Ticks signaled = job.signaled_at;
      EndRun(id, t, Report::Cause::kPreempt);
      log_.Preempt(t, Name(id), by, preempt_reason_[id.v], signaled);
      preempt_reason_.erase(id.v);
      report_.Preempted(job.spec.queue);
      sched_.Requeue(id, t);
      Waits(id, t, Timeline::WaitCause::kNotYetPlaced);
      return;
    }
    case Kind::kReclaim: {
      JobId id(e.a);
      SimJob& s = jobs_[id.v];
      if (s.run != e.run) return;
      EndRun(id, t, Report::Cause::kReclaim);
      log_.Reclaim(t, Name(id),
                   "GPU idle for " +
                       spec::FormatSeconds(core::ReclaimIdleAfter(
                           sched_.job(id).spec, config_.queues, config_.policy.params)) +
                       " s");
      report_.Reclaimed();
      sched_.Finish(id, t);
      sched_.Forget(id);
      --active_;
      return;
    }
    case Kind::kNodeDown: {
      const spec::Failure& f = (*failures_)[e.a];
      const core::NodeId n = f.node;
      const Ticks up_at = t + f.down;
      if (!sched_.ledger().node(n).up) {  // already down: the outage lasts until the later end
        if (up_at > node_up_at_[n.v]) {
          node_up_at_[n.v] = up_at;
          Push(up_at, Kind::kNodeUp, n.v);
        }
        return;
      }
      const std::string& name = config_.cluster.node(n).name;
      log_.NodeDown(t, name);
      for (JobId id : sched_.SetNodeUp(n, false)) {
        EndRun(id, t, Report::Cause::kRequeue);
        log_.Requeue(t, Name(id), "node " + name + " failed");
        report_.Requeued();
        preempt_reason_.erase(id.v);
        sched_.Requeue(id, t);
        Waits(id, t, Timeline::WaitCause::kNotYetPlaced);
      }
      node_up_at_[n.v] = up_at;
      Push(up_at, Kind::kNodeUp, n.v);
      return;
    }
    case Kind::kNodeUp: {
      const core::NodeId n(e.a);
      if (sched_.ledger().node(n).up || node_up_at_[n.v] != t) return;
      log_.NodeUp(t, config_.cluster.node(n).name);
      sched_.SetNodeUp(n, true);
      return;
    }
    case Kind::kWakeup:
      return;
  }
}

}  // namespace gantry::sim
