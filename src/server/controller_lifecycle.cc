#include "server/controller.h"

#include <numeric>

#include "base/log.h"
#include "server/controller_internal.h"

namespace gantry::server {

namespace fs = std::filesystem;
using nlohmann::json;

// ---------------------------------------------------------------- the job life cycle

void Controller::Touch(const Job& job) {
  for (const Worker& w : job.workers) watches_.Bump(w.alloc.node);
  if (!step_watches_.empty()) steps_changed_.insert(job.seq);
}

void Controller::RemoveRunning(const Job& job) {
  book_.RemoveRunning(job);
  // The run is over: its agents are sent nothing more of it.
  for (const Worker& w : job.workers) w.desired.reset();
}

void Controller::Pass(Ticks now) {
  const auto t0 = std::chrono::steady_clock::now();
  const std::vector<core::Decision>& decisions = sched_->Schedule(now);
  metrics_.Pass(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  NoteBudgets(now);
  for (const core::Decision& d : decisions) {
    Job& job = book_.ByCore(d.job);
    switch (d.kind) {
      case core::Decision::Kind::kStart:
        StartRun(job, now);
        break;
      case core::Decision::Kind::kPreempt:
        if (job.state == JobState::kRunning) {
          job.preempted_by = book_.ByCore(d.by).name;
          BeginStop(job, StopKind::kPreempt, d.reason, job.spec.grace, now);
        } else if (job.state == JobState::kStopping && job.stop == StopKind::kResize) {
          job.stop = StopKind::kPreempt;  // requeued when its run ends, not restarted
          job.preempted_by = book_.ByCore(d.by).name;
          job.stop_reason = d.reason;
          Persist(job);
        }
        break;
      case core::Decision::Kind::kReject:
        log_.Reject(now, job.name, d.reason);
        EndJob(job, JobEnd::kRejected, d.reason, now);
        break;
      case core::Decision::Kind::kWait:
        log_.Wait(now, job.name, d.reason, d.at);
        break;
      case core::Decision::Kind::kResize:
        Resized(job, now);
        break;
    }
  }
  dirty_ = false;
  next_pass_ = now + options_.pass_interval_ms;
}

void Controller::StartRun(Job& job, Ticks now, bool resized) {
  const core::JobRecord& rec = sched_->job(job.core);
  job.state = JobState::kRunning;
  job.size = static_cast<int>(rec.alloc.size());
  if (resized) sched_->RunBegan(job.core, now);  // its checkpoints count from now
  ++job.run;
  job.signals.clear();  // asked of the run before
  job.run_start = now;
  job.run_tier =
      rec.spec.tier != job.spec.tier ? std::optional<core::Tier>(rec.spec.tier) : std::nullopt;
  const bool first = job.first_start < 0;
  if (first) {
    job.first_start = now;
    metrics_.FirstStart(job.spec.queue, job.spec.tier,
                        static_cast<double>(now - job.submit) / 1000.0);
  }
  job.workers.clear();
  // A batch job's task slots in node order, as Slurm ranks them: its script runs on the
  // first node of its node list (an elastic job grown around the node it had, say).
  std::vector<size_t> order(rec.alloc.size());
  std::iota(order.begin(), order.end(), size_t{0});
  if (job.batch()) {
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return rec.alloc[a].node.v < rec.alloc[b].node.v; });
  }
  for (size_t i = 0; i < rec.alloc.size(); ++i) {
    Worker w;
    w.rank = static_cast<int>(i);
    w.alloc = rec.alloc[order[i]];
    job.workers.push_back(w);
    const core::Node& node = cluster_.node(w.alloc.node);
    StoredRun run;
    run.job_seq = job.seq;
    run.run = job.run;
    run.rank = w.rank;
    run.queue = job.queue;
    run.model = node.gpus > 0 ? cluster_.catalog().model(node.model).name : "cpu";
    run.gpus = static_cast<double>(job.spec.WorkerUnits(cluster_.catalog(), node.model)) /
               static_cast<double>(core::kGpuUnits);
    run.start_ms = WallMs(now);
    run.user = job.user;
    if (Status s = store_.StartRun(run); !s) StoreFailed(s.error());
  }
  job.stop = StopKind::kNone;
  job.signaled_at = job.stop_deadline = -1;
  job.stop_reason.clear();
  job.preempted_by.clear();
  job.steps.clear();
  if (job.batch()) NewRunToken(job);
  book_.AddRunning(job);
  Touch(job);
  if (!resized) log_.Start(now, job.name, rec.alloc);
  {
    std::string nodes;
    for (const std::string& n : JobNodes(job)) nodes += (nodes.empty() ? "" : ",") + n;
    job.Note(now, "run " + std::to_string(job.run) + " started on " + nodes +
                      (job.spec.elastic() ? " (" + std::to_string(job.size) + " of " +
                                                std::to_string(job.spec.min_replicas) + "-" +
                                                std::to_string(job.spec.replicas) + " workers)"
                                          : ""));
    log::Info("job started", {{"job", job.name},
                              {"run", std::to_string(job.run)},
                              {"queue", job.queue},
                              {"user", job.user},
                              {"nodes", nodes}});
  }
  Persist(job);
  // Jobs waiting for its start (--after NAME:started, Slurm's `after`) move on; the rest
  // wait for its end as before (their entries stay, and they are not looked at now: a job
  // after a 10,000-task array would be weighed anew at each task's start).
  if (first) {
    for (int64_t seq : book_.Dependents(job.name)) {
      auto h = book_.jobs().find(seq);
      if (h == book_.jobs().end()) continue;
      const std::vector<Dependency>& after = h->second.after;
      if (std::any_of(after.begin(), after.end(), [&](const Dependency& d) {
            return d.job == job.name && d.kind == Dependency::Kind::kStarted;
          }))
        Settle(h->second, now);
    }
  }
}

void Controller::BeginStop(Job& job, StopKind kind, std::string reason, Ticks grace, Ticks now) {
  Touch(job);
  job.state = JobState::kStopping;
  job.stop = kind;
  job.signaled_at = now;
  job.stop_deadline = now + grace;
  job.stop_reason = std::move(reason);
  for (Step& s : job.steps) {  // steps not started yet never will
    if (s.state != Step::State::kPending) continue;
    s.cancelled = true;
    s.End(now);
  }
  if (job.AllExited()) {
    EndStop(job, now);
  } else {
    Persist(job);
  }
}

void Controller::Resized(Job& job, Ticks now) {
  const core::JobRecord& rec = sched_->job(job.core);
  const int from = job.size, to = static_cast<int>(rec.alloc.size());
  job.size = to;
  ++job.resizes;
  log_.Resize(now, job.name, static_cast<size_t>(from), rec.alloc);
  metrics_.Resized(to > from);
  log::Info("job resized",
            {{"job", job.name}, {"from", std::to_string(from)}, {"size", std::to_string(to)}});
  if (job.state == JobState::kRunning) {
    const std::string why = std::string(to > from ? "grown" : "shrunk") + " from " +
                            std::to_string(from) + " to " + std::to_string(to) +
                            " workers at a checkpoint";
    job.Note(now, why);
    BeginStop(job, StopKind::kResize, why + ": the run restarts from it at the new size",
              job.spec.grace, now);
  } else {
    Persist(job);
  }
}

void Controller::EndRunRows(Job& job, Ticks now) {
  job.run_token_hashes.clear();  // the run's credentials end with it
  run_tokens_.erase(job.seq);
  if (job.run_start >= 0)
    job.usage.gpu_ms += static_cast<double>(std::max<Ticks>(0, now - job.run_start)) * JobGpus(job);
  metrics_.RunEnded(job, now);
  if (job.run > 0) {
    SaveRunUsage(job);
    if (Status s = store_.EndRun(job.seq, job.run, WallMs(now)); !s) StoreFailed(s.error());
  }
}

void Controller::EndStop(Job& job, Ticks now) {
  EndRunRows(job, now);
  const Ticks ran = std::max<Ticks>(0, now - job.run_start);
  Ticks kept = job.spec.checkpoint > 0 ? ran / job.spec.checkpoint * job.spec.checkpoint : 0;
  // Progress counts in time at the job's full size: an elastic run of k of n workers did k/n.
  if (job.spec.elastic())
    kept = job.spec.WorkerTime(kept, static_cast<int>(job.workers.size())) /
           std::max(1, job.spec.replicas);
  if (job.spec.model_speed) {  // in time at speed 1, as the core counts it (model_speed)
    core::Allocation alloc;
    for (const Worker& w : job.workers) alloc.push_back(w.alloc);
    kept = core::JobSpec::WorkAt(kept, core::RunSpeed(job.spec, alloc, cluster_));
  }
  Touch(job);
  RemoveRunning(job);
  dirty_ = true;
  switch (job.stop) {
    case StopKind::kResize:
      job.progress += kept;
      job.Note(now, "run " + std::to_string(job.run) + " ended at its checkpoint: resized to " +
                        std::to_string(job.size) + " workers");
      StartRun(job, now, /*resized=*/true);
      return;
    case StopKind::kPreempt:
    case StopKind::kLost:
      job.progress += kept;
      if (job.stop == StopKind::kPreempt) {
        log_.Preempt(now, job.name, job.preempted_by, job.stop_reason, job.signaled_at);
        job.Note(now, "preempted" + (job.preempted_by.empty() ? "" : " for " + job.preempted_by) +
                          ": " + job.stop_reason);
        ++job.preemptions;
        metrics_.Preempted(job.spec.queue);
      } else {
        log_.Requeue(now, job.name, job.stop_reason);
        job.Note(now, "requeued: " + job.stop_reason);
        ++job.requeues;
        metrics_.Requeued();
      }
      sched_->Requeue(job.core, now);
      if (!job.hold.empty() && Withdraw(job, now))  // held while it ran: waits for a release
        ReleaseThrottled(job.array, job.array_limit, now);
      job.state = JobState::kPending;
      job.workers.clear();
      job.steps.clear();
      job.stop = StopKind::kNone;
      job.signaled_at = job.stop_deadline = -1;
      job.stop_reason.clear();
      job.preempted_by.clear();
      Persist(job);
      return;
    case StopKind::kCancel:
      sched_->Finish(job.core, now);
      log_.Cancel(now, job.name, job.stop_reason);
      EndJob(job, JobEnd::kCancelled, job.stop_reason, now);
      return;
    case StopKind::kRelease:  // its allocation was used and given back: completed
      sched_->Finish(job.core, now, /*completed=*/true);
      EndJob(job, JobEnd::kFinished, "", now);
      WriteFinishEvent(now, job);
      return;
    case StopKind::kFail:
      sched_->Finish(job.core, now);
      EndJob(job, JobEnd::kFailed, job.stop_reason, now);
      WriteFinishEvent(now, job);
      return;
    case StopKind::kReclaim:
      sched_->Finish(job.core, now);
      log_.Reclaim(now, job.name, job.stop_reason);
      metrics_.Reclaimed(job.queue);
      EndJob(job, JobEnd::kReclaimed, job.stop_reason, now);
      return;
    case StopKind::kNone:
      return;
  }
}

void Controller::FinishRun(Job& job, Ticks now) {
  EndRunRows(job, now);
  Touch(job);
  RemoveRunning(job);
  dirty_ = true;
  sched_->Finish(job.core, now, /*completed=*/true);
  EndJob(job, JobEnd::kFinished, "", now);
  WriteFinishEvent(now, job);
}

void Controller::WriteFinishEvent(Ticks t, const Job& job) {
  if (job.end == JobEnd::kFinished) {
    log_.Finish(t, job.name);
    return;
  }
  // A finish that failed: the same event with the exit status added (new fields are
  // allowed by the contract).
  event_buf_ << "{\"t\":" << spec::FormatSeconds(t) << ",\"type\":\"finish\",\"job\":";
  spec::WriteJsonString(event_buf_, job.name);
  event_buf_ << ",\"status\":\"failed\",\"exit_code\":" << job.exit_code << ",\"reason\":";
  spec::WriteJsonString(event_buf_, job.end_reason);
  event_buf_ << "}\n";
}

void Controller::LetGoOfCore(Job& job) {
  if (!job.core.valid()) return;
  sched_->Forget(job.core);
  book_.ClearCore(job);
}

void Controller::EndJob(Job& job, JobEnd end, std::string reason, Ticks now) {
  const std::string word(Word(end));
  log::Write(end == JobEnd::kFailed ? log::Level::kWarning : log::Level::kInfo, "job " + word,
             {{"job", job.name}, {"queue", job.queue}, {"user", job.user}, {"reason", reason}});
  if (job.active()) --active_by_team_[job.team];
  // Whether it held a place of its array's throttle (a task still held frees none).
  const bool had_place = job.core.valid();
  job.state = JobState::kDone;
  job.Note(now, word + (reason.empty() ? "" : ": " + reason));
  job.end = end;
  job.end_reason = std::move(reason);
  job.end_time = now;
  LetGoOfCore(job);  // the store keeps the job
  job.stop = StopKind::kNone;
  Touch(job);
  RemoveRunning(job);
  metrics_.Ended(job.end);
  Persist(job);
  // Keep the last `recent_done` ended jobs in memory; older ones are in the store.
  book_.NoteEnded(job.seq);
  const auto keep = static_cast<size_t>(std::max<int64_t>(1, options_.recent_done));
  while (const std::optional<int64_t> seq = book_.PopEndedBeyond(keep)) {
    auto it = book_.jobs().find(*seq);
    if (it != book_.jobs().end() && !it->second.active()) DropEnded(it);
  }
  // Its array's tasks held by the array's throttle: the next ones take its place. (Read
  // first: settling dependents may end other jobs, and `job` may leave memory then.)
  const std::string throttled = job.array_limit > 0 && had_place ? job.array : std::string();
  const int limit = job.array_limit;
  // Jobs held for this one (--after) move on: released, still held, or cancelled.
  for (int64_t seq : book_.TakeDependents(job.name)) {
    if (auto h = book_.jobs().find(seq); h != book_.jobs().end()) Settle(h->second, now);
  }
  if (!throttled.empty()) ReleaseThrottled(throttled, limit, now);
}

void Controller::WorkerExited(Job& job, Worker& w, const ExitReport& e, Ticks now) {
  if (w.exited) return;
  Touch(job);
  w.exited = true;
  w.exit_code = e.exit_code;
  w.signal = e.signal;
  w.lost = e.lost;
  const std::string where =
      (job.batch() ? "the batch script" : "worker " + std::to_string(w.rank)) + " on " +
      cluster_.node(w.alloc.node).name;
  // The batch script ended: so does the allocation. While the job runs, steps still
  // running get SIGTERM and KillWait to end, then SIGKILL, as Slurm's slurmd ends a job's
  // steps, and the job ends when they have (kRelease, or kFail with the script's code);
  // lost, or already stopping, they are killed now.
  const bool script_ended = job.batch() && w.rank == 0;
  if (script_ended && (e.lost || job.state != JobState::kRunning)) {
    EndAllocation(job, "killed: the batch script ended");
  } else if (script_ended) {
    for (Worker& slot : job.workers) slot.exited = true;  // nothing of their own runs
  }
  const Ticks grace = script_ended ? kKillWaitMs : job.spec.grace;
  if (job.state == JobState::kRunning) {
    if (e.lost) {
      BeginStop(job, StopKind::kLost, where + " was lost" + (e.note.empty() ? "" : ": " + e.note),
                job.spec.grace, now);
    } else if (e.exit_code != 0 || e.signal != 0) {
      job.exit_code = e.exit_code != 0 ? e.exit_code : 128 + e.signal;
      BeginStop(job, StopKind::kFail,
                where +
                    (e.signal != 0 ? " was killed by signal " + std::to_string(e.signal)
                                   : " exited with code " + std::to_string(e.exit_code)) +
                    (e.note.empty() ? "" : ": " + e.note),
                grace, now);
    } else if (job.AllExited()) {
      FinishRun(job, now);
    } else if (script_ended) {
      BeginStop(job, StopKind::kRelease,
                "the batch script ended: its steps still running get SIGTERM, and SIGKILL " +
                    spec::FormatSeconds(kKillWaitMs) + " s later",
                kKillWaitMs, now);
    } else {
      Persist(job);
    }
  } else if (job.state == JobState::kStopping) {
    // A failing stop (its time limit): how the run ended is the job's exit, a signal's kill
    // (SIGTERM at the limit) too, as Slurm's ExitCode says; the first failure's is kept.
    if (job.stop == StopKind::kFail && job.exit_code == 0 && (e.exit_code != 0 || e.signal != 0))
      job.exit_code = e.exit_code != 0 ? e.exit_code : 128 + e.signal;
    if (job.AllExited()) {
      EndStop(job, now);
    } else {
      Persist(job);
    }
  }
}

void Controller::StopUnreadJob(const Job& job, Ticks grace, Ticks now) {
  const Ticks deadline =
      job.state == JobState::kStopping ? std::min(job.stop_deadline, now + grace) : now + grace;
  auto add = [&](core::NodeId n, proto::DesiredWorker d) {
    d.action = proto::DesiredWorker::Action::kStop;
    const std::string key = proto::WorkerKey(d.job, d.run, d.rank, d.step);
    nodes_.AddUnreadStop(
        {n, key, std::make_shared<const proto::DesiredWorker>(std::move(d)), deadline});
  };
  for (const Worker& w : job.workers) {
    if (w.exited || (job.batch() && w.rank != 0)) continue;  // a batch job's slots run nothing
    add(w.alloc.node, DesiredWorker(job, w));
  }
  for (const Step& s : job.steps) {
    if (s.state != Step::State::kRunning) continue;
    for (size_t i = 0; i < s.tasks.size(); ++i) {
      if (s.tasks[i].exited) continue;
      add(job.workers[static_cast<size_t>(s.tasks[i].slot)].alloc.node,
          StepDesired(job, s, static_cast<int>(i)));
    }
  }
}

void Controller::EndUnreadStops(core::NodeId n,
                                const std::function<bool(const UnreadStop&)>& gone) {
  if (!nodes_.EndUnreadStops(n, gone)) return;
  if (!nodes_.HeldByUnreadStop(n)) {
    log::Info("node takes work again: the workers of jobs failed at start have ended",
              {{"node", cluster_.node(n).name}});
  }
  SetCoreNodeUp(n);
}

void Controller::SetCoreNodeUp(core::NodeId n) {
  const bool up = nodes_.Usable(n);
  if (sched_->ledger().node(n).up == up) return;
  // Going down for a drain: the jobs there keep running (and holding their GPUs).
  (void)sched_->SetNodeUp(n, up);
  dirty_ = true;
}

void Controller::NodeDown(core::NodeId n, Ticks now, std::string_view why, std::string_view lost) {
  nodes_[n].up = false;
  PersistNode(n);
  EndUnreadStops(n, [](const UnreadStop&) { return true; });  // fenced by its agent
  const std::string& name = cluster_.node(n).name;
  log_.NodeDown(now, name);
  log::Warn("node down: " + std::string(why), {{"node", name}});
  // The agent has fenced its workers by now (its lease is shorter than the timeout).
  for (core::JobId id : sched_->SetNodeUp(n, false)) {
    Job& job = book_.ByCore(id);
    Touch(job);
    for (Worker& w : job.workers) {
      if (w.alloc.node == n && !w.exited) w.exited = w.lost = true;
    }
    for (Step& s : job.steps) {
      for (StepTask& t : s.tasks) {
        if (t.exited || job.workers[static_cast<size_t>(t.slot)].alloc.node != n) continue;
        t.exited = t.lost = true;
        t.note = "node " + name + " " + std::string(lost);
      }
    }
    if (job.stop == StopKind::kResize) {  // its next size needs the node: requeued instead
      job.stop = StopKind::kLost;
      job.stop_reason = "node " + name + " " + std::string(lost);
    }
    if (job.state == JobState::kRunning) {
      BeginStop(job, StopKind::kLost, "node " + name + " " + std::string(lost), job.spec.grace,
                now);
    } else if (job.state == JobState::kStopping) {
      if (job.AllExited()) {
        EndStop(job, now);
      } else {
        Persist(job);
      }
    }
  }
  dirty_ = true;
}

void Controller::DropEnded(std::map<int64_t, Job>::iterator it) {
  if (unsaved_.erase(it->second.seq) > 0) SaveJob(it->second);  // its last change
  book_.Drop(it);
}

void Controller::PurgeJobs(Ticks now) {
  // Hourly, at most kBatch at a time (a first purge of years of jobs must not hold the
  // controller thread): while batches come full, one more at every batch of requests.
  constexpr int64_t kBatch = 5000;
  if (options_.job_retention_ms <= 0) return;
  if (!purge_more_ && jobs_purged_ >= 0 && now - jobs_purged_ < 3'600'000) return;
  jobs_purged_ = now;
  auto purged = store_.PurgeJobs(WallMs(now) - options_.job_retention_ms, kBatch);
  if (!purged) StoreFailed(purged.error());
  purge_more_ = static_cast<int64_t>(purged->size()) == kBatch;
  for (int64_t seq : *purged) {
    unsaved_.erase(seq);  // gone from the store: not to be written back
    // Still in memory with recent_done above what ends in a retention period. (Its
    // entry among the book's ended jobs stays: EndJob skips jobs already gone.)
    if (auto it = book_.jobs().find(seq); it != book_.jobs().end() && !it->second.active())
      DropEnded(it);
    purged_logs_.push_back(seq);
  }
  metrics_.Purged(purged->size());
  if (!purged->empty()) {
    log::Info("ended jobs purged past their retention", {{"jobs", std::to_string(purged->size())}});
  }
}

void Controller::Housekeeping(Ticks now) {
  // Kept in the store too, so a restart or a standby taking over keeps the console's day
  // (pruned hourly with the usage series, Housekeeping).
  if (Status s = history_.Sample(*sched_, WallMs(now), &store_); !s) StoreFailed(s.error());
  metrics_.StartGpuTime(now);
  if (samples_pruned_ < 0 || now - samples_pruned_ >= 3'600'000) {  // the time series' retention
    samples_pruned_ = now;
    auto pruned = store_.PruneUsageSamples(WallMs(now) - options_.usage_retention_ms);
    if (!pruned) StoreFailed(pruned.error());
    // And the console's history beyond the samples it keeps.
    const int64_t kept_ms =
        static_cast<int64_t>(options_.history_samples) * options_.history_sample_ms;
    if (Status s = store_.PruneClusterSamples(WallMs(now) - kept_ms); !s) StoreFailed(s.error());
    if (Status s = store_.PruneSessions(WallMs(now)); !s) StoreFailed(s.error());  // expired
  }
  PurgeJobs(now);
  BeginDue(now);
  auth_.Flush(now);
  // The timers below walk every node and running job: at 1,000 nodes and 4,000 running
  // jobs, at every batch (hundreds a second under heartbeats and submits), they took a
  // fifth of the controller thread. Their deadlines are seconds long; a tenth of a second
  // late is nothing to them.
  if (now < next_timers_) return;
  next_timers_ = now + kTimersEveryMs;
  for (core::NodeId n : nodes_.Silent(now, options_.node_timeout_ms)) NodeDown(n, now);
  // Time limits (time_limit_s), per run as Slurm's: signal, grace, kill; the job fails.
  // And its steps' own (srun --time).
  // An sbatch --signal job gets its signal at time_limit_s and is stopped a lead later.
  std::vector<int64_t> timed_out;
  for (int64_t seq : book_.running()) {
    Job& job = book_.jobs().at(seq);
    TimeOutSteps(job, now);
    if (job.state != JobState::kRunning || !job.spec.time_limit ||
        now - job.run_start < *job.spec.time_limit)
      continue;
    if (!job.LimitSignalFirst()) {
      timed_out.push_back(seq);
      continue;
    }
    if (job.limit_signaled_run != job.run) {
      job.limit_signaled_run = job.run;
      AskSignal(job, job.spec.stop_signal,
                job.spec.signal_batch ? SignalTo::kBatch : SignalTo::kSteps);
      job.Note(now, "signal " + std::to_string(job.spec.stop_signal) + " sent " +
                        spec::FormatSeconds(job.spec.grace) + " s before its time limit");
      Persist(job);
    }
    if (now - job.run_start >= *job.spec.time_limit + job.SignalLead()) timed_out.push_back(seq);
  }
  for (int64_t seq : timed_out) {
    Job& job = book_.jobs().at(seq);
    BeginStop(job, StopKind::kFail,
              "time limit reached: ran " + spec::FormatSeconds(now - job.run_start) +
                  " s of its time limit " +
                  spec::FormatSeconds(*job.spec.time_limit + job.SignalLead()) + " s",
              job.LimitSignalFirst() ? kKillWaitMs : job.spec.grace, now);
  }
  ReclaimIdle(now);
  std::vector<int64_t> overdue;
  for (int64_t seq : book_.running()) {
    const Job& job = book_.jobs().at(seq);
    if (job.state == JobState::kStopping && now > job.stop_deadline + options_.kill_slack_ms) {
      overdue.push_back(seq);
    }
  }
  for (int64_t seq : overdue) {
    // Its agent has SIGKILLed what was left at the deadline, or will when it next hears
    // that these workers are no longer assigned.
    Job& job = book_.jobs().at(seq);
    EndAllocation(job, "killed at the end of the grace");
    EndStop(job, now);
  }
  // Likewise the workers of jobs failed at start (--force-config): their nodes take work again.
  auto past = [&](const UnreadStop& u) { return now > u.deadline + options_.kill_slack_ms; };
  for (core::NodeId n : nodes_.WithUnreadStops(past)) EndUnreadStops(n, past);
}

}  // namespace gantry::server
