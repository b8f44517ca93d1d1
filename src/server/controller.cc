#include "server/controller.h"

#include <pthread.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <future>
#include <set>

#include "base/log.h"
#include "core/model/feasibility.h"
#include "core/placement.h"
#include "server/config_check.h"
#include "server/controller_internal.h"
#include "spec/job_reader.h"

namespace gantry::server {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr Ticks kDay = 86'400'000;
// How long the controller thread sleeps without messages (Loop): the pass timer's, 10 ms
// to 1 s.
Ticks LoopTickMs(const ControllerOptions& o) {
  return std::clamp<Ticks>(o.pass_interval_ms, 10, 1000);
}

}  // namespace

Reply Reply::Error(Code code, std::string message, std::vector<std::string> problems) {
  Reply r;
  r.code = code;
  r.body = {{"error", std::move(message)}};
  if (!problems.empty()) r.body["problems"] = std::move(problems);
  return r;
}

Controller::Controller(const spec::ClusterConfig& config, Store& store, ControllerOptions options,
                       std::ostream* events, WallClock clock)
    : config_(config),
      cluster_(config.cluster),
      store_(store),
      options_(std::move(options)),
      events_out_(events),
      clock_(std::move(clock)),
      auth_(store, options_.submit_rate, options_.submit_burst),
      history_(config.queues, options_.history_sample_ms, options_.history_samples),
      log_(event_buf_, config.cluster),
      metrics_(config) {
  if (options_.lease_ms <= 0) options_.lease_ms = options_.node_timeout_ms * 6 / 10;
  auth_.SetJobCredentials(
      [this](const std::string& token, Reply& error) { return JobPrincipal(token, error); });
}

Controller::~Controller() { Stop(); }

Ticks Controller::Now() {
  last_now_ = std::max(last_now_, clock_() - epoch_ms_);
  return last_now_;
}

// ---------------------------------------------------------------- thread and mailbox

Status Controller::Start() {
  if (auto s = store_.Begin(); !s) return s;
  Status restored = Ok{};
  try {
    restored = Restore();
  } catch (const StoreDown& e) {
    restored = Error{"store", e.what()};
  }
  if (restored) {
    try {
      SaveJobs();
    } catch (const StoreDown& e) {
      restored = Error{"store", e.what()};
    }
  }
  if (!restored) {
    store_.Rollback();
    unsaved_.clear();
    return restored;
  }
  if (auto s = store_.Commit(); !s) return s;
  if (events_out_) {
    *events_out_ << event_buf_.str();
    events_out_->flush();
  }
  event_buf_.str("");
  inbox_.Open();
  thread_ = std::thread([this] {
    // Named for top -H, perf sched and gdb: /healthz's latency is this thread's.
    pthread_setname_np(pthread_self(), "gantryd-ctl");
    Loop();
  });
  return Ok{};
}

void Controller::Stop() {
  offload_.Stop();  // what it runs still posts its answers to the inbox
  if (!inbox_.Close()) return;
  if (thread_.joinable()) thread_.join();
}

void Controller::Post(std::function<Reply()> fn, Done done, Kind kind) {
  Message m{std::move(fn), std::move(done), kind};
  if (!inbox_.Push(std::move(m)))
    m.done(Reply::Error(Code::kUnavailable, "gantryd is shutting down"));
}

Reply Controller::Wait(const std::function<void(Done)>& start) {
  auto promise = std::make_shared<std::promise<Reply>>();
  std::future<Reply> future = promise->get_future();
  start([promise](Reply r) { promise->set_value(std::move(r)); });
  Reply r = future.get();
  if (r.encode) {  // a caller in this process reads the body
    r.body = r.encode();
    r.encode = nullptr;
  }
  return r;
}

void Controller::Loop() {
  auto wake = std::chrono::steady_clock::now();
  while (true) {
    bool closed = false;
    std::deque<Message> taken = inbox_.Take(wake, &closed);
    if (closed) {
      const Reply down = Reply::Error(Code::kUnavailable, "gantryd is shutting down");
      for (Message& m : taken) m.done(down);
      watches_.AnswerAll(down);
      AnswerStepWatches(now_, &down);
      return;
    }
    std::vector<Message> batch(std::make_move_iterator(taken.begin()),
                               std::make_move_iterator(taken.end()));
    RunBatch(batch);
    wake = std::chrono::steady_clock::now() + std::chrono::milliseconds(LoopTickMs(options_));
  }
}

void Controller::RunBatch(std::vector<Message>& batch) {
  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  const Ticks now = now_ = Now();
  std::vector<Reply> replies(batch.size());
  if (outage_.since >= 0 && now < outage_.next_try) {
    AnswerInOutage(batch, replies, now);
    return;
  }
  if (Status s = store_.Begin(); !s) {
    if (s.error().field == "lease") Fatal("deposed: " + s.error().message);
    StoreLost(s.error().message, now, /*ahead=*/false);
    AnswerInOutage(batch, replies, now);
    return;
  }
  Clock::time_point t_run, t_pass;
  try {
    if (outage_.since >= 0) StoreBack(now);
    for (size_t i = 0; i < batch.size(); ++i) {
      try {
        replies[i] = batch[i].run();
      } catch (const json::exception& e) {
        replies[i] = Reply::Error(Code::kBadRequest, std::string("malformed JSON: ") + e.what());
      }
    }
    t_run = Clock::now();
    Housekeeping(now);
    if (dirty_ || now >= next_pass_ || now >= sched_->next_wakeup()) Pass(now);
    t_pass = Clock::now();
    SaveJobs();
    if (Status s = store_.Commit(); !s) StoreFailed(s.error());
  } catch (const StoreDown& e) {
    // Memory may now hold what the store does not: nothing of this batch is answered as
    // done, its events are not written, and the state is read back before the next one.
    store_.Rollback();
    event_buf_.str("");
    purged_logs_.clear();
    unsaved_.clear();  // memory is read back before the next batch
    StoreLost(e.what(), now, /*ahead=*/true);
    AnswerInOutage(batch, replies, now);
    return;
  }
  last_saved_ = now;
  const auto t_commit = Clock::now();
  if (outage_.since >= 0) {
    log::Info("store available again",
              {{"after_s", FormatValue(static_cast<double>(now - outage_.since) / 1000.0)},
               {"read_back", outage_.ahead ? "true" : "false"}});
    outage_ = Outage{};
  }
  for (int64_t seq : purged_logs_) {  // purged jobs' output, once the purge is durable
    std::error_code ec;
    fs::remove_all(fs::path(options_.log_dir) / std::to_string(seq), ec);
  }
  purged_logs_.clear();
  if (events_out_ && event_buf_.tellp() > 0) {
    *events_out_ << event_buf_.str();
    events_out_->flush();
  }
  event_buf_.str("");
  // Callers first, heartbeats after: the I/O threads take answers in the order they are
  // handed over, and a node's next beat can wait a few milliseconds where a person, a
  // script or a probe of /healthz should not wait behind a cluster's heartbeat answers.
  for (const bool beats : {false, true}) {
    for (size_t i = 0; i < batch.size(); ++i) {
      if (!replies[i].deferred && (batch[i].kind == Kind::kHeartbeat) == beats)
        batch[i].done(std::move(replies[i]));
    }
  }
  watches_.AnswerDue(now, [&](core::NodeId n) { return WatchReply(n, now); });
  AnswerStepWatches(now);
  const auto t_end = Clock::now();
  const double took = std::chrono::duration<double>(t_end - t0).count();
  metrics_.Batch(took);
  if (took > 0.1) {
    auto ms = [](Clock::duration d) {
      return FormatValue(std::chrono::duration<double, std::milli>(d).count());
    };
    log::Warn("slow batch: the controller thread took " + ms(t_end - t0) + " ms",
              {{"messages", std::to_string(batch.size())},
               {"calls_ms", ms(t_run - t0)},
               {"timers_and_pass_ms", ms(t_pass - t_run)},
               {"commit_ms", ms(t_commit - t_pass)},
               {"answers_ms", ms(t_end - t_commit)}});
  }
}

// ---------------------------------------------------------------- store outages

void Controller::StoreLost(const std::string& why, Ticks now, bool ahead) {
  if (outage_.since < 0) {
    outage_.since = now;
    outage_.backoff = 250;
    metrics_.StoreOutage();
    log::Error(
        "store unavailable: " + why +
            "; refusing calls with 503, agents hold their workers for up to " +
            FormatValue(static_cast<double>(std::max<Ticks>(0, last_saved_ + HoldMs() - now)) /
                        1000.0) +
            " s",
        {{"ahead", ahead ? "true" : "false"}});
  } else {
    outage_.backoff = std::min<Ticks>(outage_.backoff * 2, 1000);
  }
  outage_.why = why;
  outage_.ahead |= ahead;
  outage_.next_try = now + outage_.backoff;
  // Parked watches' answers would come from memory.
  const Reply unavailable = OutageReply("gantryd's store is unavailable (" + why + ")", now);
  watches_.AnswerAll(unavailable);
  AnswerStepWatches(now, &unavailable);
}

Reply Controller::OutageReply(const std::string& message, Ticks now) const {
  Reply r = Reply::Error(Code::kUnavailable, message);
  r.body["status"] = "store unavailable";
  r.body["store"] = "unavailable";
  r.body["store_unavailable_s"] = static_cast<double>(now - outage_.since) / 1000.0;
  r.body["role"] = "leader";
  r.body["retry_after_s"] = 1;
  return r;
}

void Controller::AnswerInOutage(std::vector<Message>& batch, const std::vector<Reply>& replies,
                                Ticks now) {
  const bool hold = now < last_saved_ + HoldMs();
  const std::string why = "gantryd's store is unavailable (" + outage_.why + ")";
  for (size_t i = 0; i < batch.size(); ++i) {
    if (replies[i].deferred) continue;  // a parked watch: StoreLost answered it
    Message& m = batch[i];
    Reply r;
    if (m.kind == Kind::kRead && !outage_.ahead) {  // else memory may be half read back
      try {
        r = m.run();
      } catch (const StoreDown& e) {
        r = OutageReply(why, now);
      }
      // srun's long poll, parked: answered by the next batch that reaches the store, or
      // (503) by the next try that fails.
      if (r.deferred) continue;
    } else if (m.kind == Kind::kHeartbeat) {
      // Nothing of the report is recorded and nothing new decided: the agent keeps what
      // it runs and reports it all again. Past the hold it looks for another server (a
      // standby may have taken over) and its lease runs out.
      r = OutageReply(why + (hold ? ": keep your workers and report again" : ""), now);
      r.body["hold"] = hold;
    } else {
      r = OutageReply(why + ": nothing was done; try again", now);
    }
    m.done(std::move(r));
  }
}

void Controller::StoreBack(Ticks now) {
  if (outage_.ahead) {
    ReadBack();
  } else {
    // Heartbeats were held, not read: every node gets a full timeout to report again.
    nodes_.HeardAll(now);
  }
}

// The state as a restart would read it: every record dropped and read again from the
// store, in the transaction at hand. Kept: the metrics' counters, the submit buckets, the
// current runs' credentials (their hashes are in the records), and the instance with each
// node's version moved on, so that an answer sent before the outage and delivered late
// (a watch held up in a cut link) is older than every answer after it: under a new
// instance an agent would apply it and kill what was started since.
void Controller::ReadBack() {
  const std::string instance = instance_;
  const std::vector<int64_t> versions = watches_.versions();
  sched_.reset();
  book_.Clear();
  auth_.Forget();
  active_by_team_.clear();
  next_timers_ = 0;
  jobs_purged_ = -1;
  purge_more_ = false;
  next_pass_ = 0;
  if (Status s = Restore(); !s) StoreFailed(s.error());
  instance_ = instance;
  watches_.MoveOn(versions);
}

// ---------------------------------------------------------------- watches

Reply Controller::WatchReply(core::NodeId n, Ticks now) {
  Reply r;
  r.encode = [answer = NodeAnswer(n, now)] { return proto::Encode(answer); };
  return r;
}

// ---------------------------------------------------------------- restore

std::optional<core::JobSpec> Controller::ReadSpec(const Job& job,
                                                  std::vector<std::string>* problems) {
  return ReadJobSpec(job, config_, problems);
}

Status Controller::Restore() {
  const auto t0 = std::chrono::steady_clock::now();  // for the log line at the end
  auto epoch = store_.GetMeta("epoch_ms");
  if (!epoch) return epoch.error();
  if (*epoch) {
    epoch_ms_ = std::stoll(**epoch);
  } else {
    // The Monday 00:00 UTC on or before today: core time 0 is a Monday midnight UTC.
    const int64_t day = clock_() / kDay;                     // 1970-01-01 was a Thursday
    const int64_t monday = day - (((day - 4) % 7) + 7) % 7;  // 1970-01-05 was a Monday
    epoch_ms_ = monday * kDay;
    if (auto s = store_.SetMeta("epoch_ms", std::to_string(epoch_ms_)); !s) return s;
  }
  instance_ = NewToken().substr(4, 16);
  const Ticks now = now_ = Now();
  auto policy = core::MakePolicy(options_.policy);
  if (!policy) return Error{"policy", "unknown policy " + options_.policy};
  core::PolicyParams params = config_.policy.params;
  params.epoch_unix_ms = epoch_ms_;  // budgets' calendar periods
  // A pass comes at most a loop tick (Loop) and a batch after its wakeup: an elastic job
  // due to resize at a checkpoint then does so with what it ran past it lost.
  params.checkpoint_slack = LoopTickMs(options_) + 1000;
  params.resize_waits_for_run = true;  // a resize stops the old run first (Resized)
  sched_ = std::make_unique<core::Scheduler>(cluster_, config_.queues, std::move(policy), params);
  if (Status s = SeedFromRuns(now); !s) return s;

  if (Status s = history_.Restore(store_); !s) return s;
  nodes_.Reset(cluster_.nodes().size());
  book_.SetNodes(cluster_.nodes().size());
  watches_.Reset(cluster_.nodes().size());
  auto stored_nodes = store_.LoadNodes();
  if (!stored_nodes) return stored_nodes.error();
  for (const StoredNode& sn : *stored_nodes) {
    auto n = cluster_.FindNode(sn.name);
    if (!n) continue;  // a node the config no longer has
    NodeInfo& info = nodes_[*n];
    NodeFromDoc(json::parse(sn.doc, nullptr, false), info);
    if (info.up) info.last_seen = now;  // a full timeout to check in with the new process
  }

  restoring_ = true;  // jobs that end below release no array task: the loop below does
  auto max_seq = store_.MaxJobSeq();
  if (!max_seq) return max_seq.error();
  book_.SetNextSeq(*max_seq + 1);
  auto stored = store_.LoadJobs(options_.recent_done);
  if (!stored) return stored.error();
  std::vector<int64_t> adopt, resubmit, held;
  std::set<int64_t> open_run;  // jobs whose allocation no longer reads, stored as running
  for (const StoredJob& sj : *stored) {
    Job job;
    job.seq = sj.seq;
    job.name = sj.name;
    job.team = sj.team;
    job.queue = sj.queue;
    job.idem_key = sj.idem_key;
    job.idem_hash = sj.idem_hash;
    if (auto r = JobFromDoc(json::parse(sj.doc, nullptr, false), cluster_, job); !r) {
      if (!sj.active) continue;
      if (job.state != JobState::kPending) open_run.insert(job.seq);  // its rows end below
      job.state = JobState::kPending;
      job.workers.clear();
      job.end_reason = r.error().ToString();
    }
    std::vector<std::string> problems;
    if (auto spec = ReadSpec(job, &problems)) {
      job.spec = std::move(*spec);
      job.spec.id = job.name;
    }
    Job& j = book_.Add(std::move(job));
    if (j.active()) ++active_by_team_[j.team];
    if (!j.active()) {
      book_.NoteEnded(j.seq);
      continue;
    }
    if (!problems.empty() || !j.end_reason.empty()) {
      // Only with --force-config (gantryd refuses to start otherwise): said loudly. The
      // record keeps what the job was (its spec as written, read against a stand-in) and
      // what its run used (the run's rows end now, its GPU-hours counted).
      const std::string why = !problems.empty() ? problems.front() : j.end_reason;
      log::Error("job " + j.name + " failed: cannot be read back after a restart: " + why);
      if (!problems.empty()) {
        if (auto written = ReadJobSpecAsWritten(j)) {
          j.spec = std::move(*written);
          j.spec.id = j.name;
        }
      }
      if ((j.state != JobState::kPending || open_run.count(j.seq)) && j.run > 0) EndRunRows(j, now);
      if (!problems.empty() && j.state != JobState::kPending) {
        StopUnreadJob(j, j.spec.grace, now);  // its allocation reads: its nodes exist
        log::Warn("job " + j.name + ": its workers get the checkpoint signal and " +
                  spec::FormatSeconds(j.spec.grace) +
                  " s of grace; their nodes take no new work until they end");
      }
      EndJob(j, JobEnd::kFailed, "cannot be read back after a restart: " + why, now);
      continue;
    }
    if (j.state == JobState::kPending && (!j.after.empty() || HeldBack(j, now))) {
      held.push_back(j.seq);  // held for --after, a hold or a begin time: not in the scheduler
      continue;
    }
    (j.state == JobState::kPending ? resubmit : adopt).push_back(j.seq);
  }
  // A batch run's credentials are known by their hashes only: the run gets another, for a
  // script its agent starts from now on (its environment) and for salloc.
  for (int64_t seq : adopt) {
    Job& j = book_.jobs().at(seq);
    if (j.batch() && !j.run_token_hashes.empty() && !run_tokens_.contains(seq)) {
      NewRunToken(j, /*another=*/true);
      Persist(j);
    }
  }
  // Running jobs first, so the room they hold is theirs before anything else is placed.
  auto add_core = [&](Job& j, core::JobSpec spec, Ticks submit) {
    book_.SetCore(j, sched_->Submit(std::move(spec), submit));
    sched_->SetPreemptions(j.core, j.preemptions);  // its anti-thrash guard, as before the restart
  };
  std::vector<int64_t> readopt_failed;
  for (int64_t seq : adopt) {
    Job& j = book_.jobs().at(seq);
    if (j.state == JobState::kStopping && j.stop == StopKind::kResize) {
      // The size it was resizing to was the scheduler's, in memory: its old run, adopted as
      // it is, ends as a requeue, and the job starts again at what fits then.
      j.stop = StopKind::kLost;
      j.stop_reason = "gantryd restarted while it resized: requeued from its checkpoint";
    }
    core::JobSpec spec = j.spec;
    spec.window.reset();  // a window governs starting only; this job has started
    if (j.run_tier) spec.tier = *j.run_tier;  // it runs demoted (a spent budget)
    add_core(j, std::move(spec), j.submit);
    if (j.run_tier) sched_->SetAskedTier(j.core, j.spec.tier);  // requeued, it asks its own again
    if (sched_->job(j.core).phase != core::Phase::kPending) continue;  // rejected below
    core::Allocation alloc;
    for (const Worker& w : j.workers) alloc.push_back(w.alloc);
    if (std::string why; !sched_->Adopt(j.core, alloc, j.run_start, &why)) {
      sched_->Finish(j.core, j.run_start);  // out of the scheduler: resubmitted below
      LetGoOfCore(j);
      EndRunRows(j, now);
      log_.Requeue(now, j.name, "could not re-adopt after a restart: " + why);
      j.Note(now, "requeued: could not re-adopt after a restart: " + why);
      j.state = JobState::kPending;
      j.workers.clear();
      j.stop = StopKind::kNone;
      ++j.requeues;
      readopt_failed.push_back(seq);
      Persist(j);
      continue;
    }
    j.size = static_cast<int>(j.workers.size());
    book_.AddRunning(j);
  }
  // Clears the scheduler's per-pass state; only rejections can come out of it.
  for (const core::Decision& d : sched_->Schedule(now)) {
    if (d.kind != core::Decision::Kind::kReject) continue;
    Job& j = book_.ByCore(d.job);
    RemoveRunning(j);
    log_.Reject(now, j.name, d.reason);
    EndJob(j, JobEnd::kRejected, d.reason, now);
  }
  resubmit.insert(resubmit.end(), readopt_failed.begin(), readopt_failed.end());
  std::sort(resubmit.begin(), resubmit.end());
  // An array's throttle (%N) holds what it held: its running tasks count first, then the
  // pending ones in index order.
  std::unordered_map<std::string, int> given;  // per throttled array: tasks in the scheduler
  for (int64_t seq : resubmit) {
    Job& j = book_.jobs().at(seq);
    if (!j.active()) continue;
    if (j.array_limit > 0) {
      auto [it, fresh] = given.try_emplace(j.array, 0);
      if (fresh) it->second = InScheduler(j.array);
      if (it->second >= j.array_limit) continue;
      ++it->second;
    }
    add_core(j, j.spec, j.submit);
  }
  restoring_ = false;
  // Jobs held for --after wait again for what was still active; the rest move on, unless
  // held or waiting for their begin time (Release).
  for (int64_t seq : held) {
    for (const Dependency& d : book_.jobs().at(seq).after) book_.AddDependent(d.job, seq);
  }
  for (int64_t seq : held) Settle(book_.jobs().at(seq), now);
  for (uint32_t i = 0; i < nodes_.size(); ++i) {
    const core::NodeId n(i);
    if (nodes_[n].up) continue;
    for (core::JobId id : sched_->SetNodeUp(n, false)) {
      Job& j = book_.ByCore(id);
      for (Worker& w : j.workers) {
        if (w.alloc.node == n && !w.exited) w.exited = w.lost = true;
      }
      if (j.state == JobState::kRunning) {
        BeginStop(j, StopKind::kLost, "node " + cluster_.node(n).name + " failed", j.spec.grace,
                  now);
      } else if (j.state == JobState::kStopping && j.AllExited()) {
        EndStop(j, now);
      }
    }
  }
  for (uint32_t i = 0; i < nodes_.size(); ++i) {
    const core::NodeId n(i);
    if (nodes_[n].up && !nodes_.Usable(n)) sched_->SetNodeUp(n, false);
  }
  // What the restart took over, said once: running jobs re-adopted where they run, those
  // requeued because they could not be, pending and held ones, and the stopping ones.
  size_t readopted = 0, stopping = 0;
  for (int64_t seq : adopt) {
    const Job& j = book_.jobs().at(seq);
    readopted += j.state == JobState::kRunning;
    stopping += j.state == JobState::kStopping;
  }
  std::string requeued;
  for (int64_t seq : readopt_failed)
    requeued += (requeued.empty() ? "" : ",") + book_.jobs().at(seq).name;
  if (outage_.since < 0)  // (a read-back after an outage says so when it is saved)
    log::Info("restored from the store",
              {{"running_readopted", std::to_string(readopted)},
               {"stopping", std::to_string(stopping)},
               {"requeued", std::to_string(readopt_failed.size())},
               {"requeued_jobs", requeued.empty() ? "-" : requeued},
               {"pending", std::to_string(resubmit.size() - readopt_failed.size())},
               {"held", std::to_string(held.size())},
               {"in_memory", std::to_string(book_.jobs().size())},
               {"ms", FormatValue(std::chrono::duration<double, std::milli>(
                                      std::chrono::steady_clock::now() - t0)
                                      .count())}});
  dirty_ = true;
  return Ok{};
}

// ---------------------------------------------------------------- persistence

void Controller::Persist(const Job& job) {
  unsaved_.insert(job.seq);
  if (!step_watches_.empty()) steps_changed_.insert(job.seq);  // srun's long polls look
}

void Controller::SaveJobs() {
  for (int64_t seq : unsaved_) {
    if (auto it = book_.jobs().find(seq); it != book_.jobs().end())
      SaveJob(it->second);  // else purged
  }
  unsaved_.clear();
}

void Controller::SaveJob(const Job& job) {
  StoredJob sj;
  sj.seq = job.seq;
  sj.name = job.name;
  sj.team = job.team;
  sj.queue = job.queue;
  sj.active = job.active();
  sj.idem_key = job.idem_key;
  sj.idem_hash = job.idem_hash;
  sj.doc = JobToDoc(job, cluster_).dump();
  sj.ended_ms = job.active() ? -1 : WallMs(job.end_time);
  if (Status s = store_.PutJob(sj); !s) StoreFailed(s.error());
}

void Controller::PersistNode(core::NodeId n) {
  StoredNode sn{cluster_.node(n).name, NodeToDoc(nodes_[n]).dump()};
  if (Status s = store_.PutNode(sn); !s) StoreFailed(s.error());
}

// ---------------------------------------------------------------- the job life cycle
}  // namespace gantry::server
