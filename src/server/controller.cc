#include "server/controller.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <future>

#include "core/model/feasibility.h"
#include "core/placement.h"
#include "server/adopt.h"
#include "spec/job_reader.h"

namespace gantry::server {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr Ticks kDay = 86'400'000;

[[noreturn]] void Fatal(const std::string& what) {
  std::fprintf(stderr, "gantryd: fatal: %s\n", what.c_str());
  std::fflush(stderr);
  std::_Exit(1);
}

std::string Gpus(core::GpuUnits units) {
  return FormatValue(static_cast<double>(units) / static_cast<double>(core::kGpuUnits));
}

// Ports for a gang's rendezvous, spread by job and run so that two runs on one node
// rarely collide.
int MasterPort(int64_t seq, int run) { return 20000 + static_cast<int>((seq * 7919 + run) % 40000); }

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
      log_(event_buf_, config.cluster),
      queue_wait_(core::kTierCount,
                  Histogram({1, 5, 15, 30, 60, 300, 900, 1800, 3600, 4 * 3600, 12 * 3600, 86400})),
      preemptions_(config.queues.size(), 0) {
  if (options_.lease_ms <= 0) options_.lease_ms = options_.node_timeout_ms * 6 / 10;
}

Controller::~Controller() { Stop(); }

Ticks Controller::Now() {
  last_now_ = std::max(last_now_, clock_() - epoch_ms_);
  return last_now_;
}

// ---------------------------------------------------------------- thread and mailbox

Status Controller::Start() {
  if (auto s = store_.Begin(); !s) return s;
  Status restored = Restore();
  if (!restored) {
    store_.Rollback();
    return restored;
  }
  if (auto s = store_.Commit(); !s) return s;
  if (events_out_) {
    *events_out_ << event_buf_.str();
    events_out_->flush();
  }
  event_buf_.str("");
  thread_ = std::thread([this] { Loop(); });
  return Ok{};
}

void Controller::Stop() {
  {
    std::lock_guard lk(mu_);
    if (stopping_) return;
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

Reply Controller::Call(std::function<Reply()> fn) {
  std::promise<Reply> promise;
  std::future<Reply> future = promise.get_future();
  Reply result;
  Message m;
  m.run = [&] {
    try {
      result = fn();
    } catch (const json::exception& e) {
      result = Reply::Error(Code::kBadRequest, std::string("malformed JSON: ") + e.what());
    }
  };
  m.done = [&] { promise.set_value(std::move(result)); };
  m.cancel = [&] { promise.set_value(Reply::Error(Code::kUnavailable, "gantryd is shutting down")); };
  {
    std::lock_guard lk(mu_);
    if (stopping_ || !thread_.joinable()) {
      return Reply::Error(Code::kUnavailable, "gantryd is shutting down");
    }
    inbox_.push_back(std::move(m));
  }
  cv_.notify_one();
  return future.get();
}

void Controller::Loop() {
  std::unique_lock lk(mu_);
  auto wake = std::chrono::steady_clock::now();
  while (true) {
    cv_.wait_until(lk, wake, [&] { return stopping_ || !inbox_.empty(); });
    if (stopping_) {
      for (Message& m : inbox_) m.cancel();
      inbox_.clear();
      return;
    }
    std::vector<Message> batch(std::make_move_iterator(inbox_.begin()),
                               std::make_move_iterator(inbox_.end()));
    inbox_.clear();
    lk.unlock();
    RunBatch(batch);
    lk.lock();
    const int64_t tick = std::clamp<int64_t>(options_.pass_interval_ms, 10, 1000);
    wake = std::chrono::steady_clock::now() + std::chrono::milliseconds(tick);
  }
}

void Controller::RunBatch(std::vector<Message>& batch) {
  const Ticks now = now_ = Now();
  if (Status s = store_.Begin(); !s) Fatal("store: " + s.error().message);
  for (Message& m : batch) m.run();
  Housekeeping(now);
  if (dirty_ || now >= next_pass_ || now >= sched_->next_wakeup()) Pass(now);
  if (Status s = store_.Commit(); !s) Fatal("store commit: " + s.error().message);
  if (events_out_ && event_buf_.tellp() > 0) {
    *events_out_ << event_buf_.str();
    events_out_->flush();
  }
  event_buf_.str("");
  for (Message& m : batch) m.done();
}

// ---------------------------------------------------------------- restore

std::optional<core::JobSpec> Controller::ReadSpec(const Job& job, std::vector<std::string>* problems) {
  spec::Diagnostics diags;
  const std::string file = job.spec_file.empty() ? "request" : job.spec_file;
  std::optional<core::JobSpec> spec =
      job.spec_format == "yaml" ? spec::ParseJobYaml(job.spec_text, file, config_, diags)
                                : spec::ParseJobJson(job.spec_text, file, config_, diags);
  if (problems) {
    for (const spec::Diag& d : diags.items()) problems->push_back(d.ToString());
  }
  if (!diags.empty()) return std::nullopt;
  return spec;
}

Status Controller::Restore() {
  auto epoch = store_.GetMeta("epoch_ms");
  if (!epoch) return epoch.error();
  if (*epoch) {
    epoch_ms_ = std::stoll(**epoch);
  } else {
    // The Monday 00:00 UTC on or before today: core time 0 is a Monday midnight UTC.
    const int64_t day = clock_() / kDay;             // 1970-01-01 was a Thursday
    const int64_t monday = day - (((day - 4) % 7) + 7) % 7;  // 1970-01-05 was a Monday
    epoch_ms_ = monday * kDay;
    if (auto s = store_.SetMeta("epoch_ms", std::to_string(epoch_ms_)); !s) return s;
  }
  instance_ = NewToken().substr(4, 16);
  const Ticks now = now_ = Now();
  auto policy = core::MakePolicy(options_.policy);
  if (!policy) return Error{"policy", "unknown policy " + options_.policy};
  sched_ = std::make_unique<core::Scheduler>(cluster_, config_.queues, std::move(policy),
                                             config_.policy.params);

  nodes_.assign(cluster_.nodes().size(), NodeInfo{});
  auto stored_nodes = store_.LoadNodes();
  if (!stored_nodes) return stored_nodes.error();
  for (const StoredNode& sn : *stored_nodes) {
    auto n = cluster_.FindNode(sn.name);
    if (!n) continue;  // a node the config no longer has
    NodeInfo& info = nodes_[n->v];
    NodeFromDoc(json::parse(sn.doc, nullptr, false), info);
    if (info.up) info.last_seen = now;  // a full timeout to check in with the new process
  }

  auto max_seq = store_.MaxJobSeq();
  if (!max_seq) return max_seq.error();
  next_seq_ = *max_seq + 1;
  auto stored = store_.LoadJobs(options_.recent_done);
  if (!stored) return stored.error();
  std::vector<int64_t> adopt, resubmit;
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
      job.state = JobState::kPending;
      job.workers.clear();
      job.end_reason = r.error().ToString();
    }
    std::vector<std::string> problems;
    if (auto spec = ReadSpec(job, &problems)) {
      job.spec = std::move(*spec);
      job.spec.id = job.name;
    }
    Job& j = jobs_.emplace(job.seq, std::move(job)).first->second;
    by_name_[j.name] = j.seq;
    if (!j.active()) {
      done_order_.push_back(j.seq);
      continue;
    }
    if (!problems.empty() || !j.end_reason.empty()) {
      const std::string why = !problems.empty() ? problems.front() : j.end_reason;
      Done(j, "failed", "cannot be read back after a restart: " + why, now);
      continue;
    }
    (j.state == JobState::kPending ? resubmit : adopt).push_back(j.seq);
  }
  // Running jobs first, while nothing else is pending (see adopt.h).
  auto add_core = [&](Job& j, core::JobSpec spec, Ticks submit) {
    j.core = sched_->Submit(std::move(spec), submit);
    if (core_to_seq_.size() <= j.core.v) core_to_seq_.resize(j.core.v + 1, 0);
    core_to_seq_[j.core.v] = j.seq;
  };
  std::vector<int64_t> readopt_failed;
  for (int64_t seq : adopt) {
    Job& j = jobs_.at(seq);
    core::JobSpec spec = j.spec;
    spec.window.reset();  // a window governs starting only; this job has started
    add_core(j, std::move(spec), j.submit);
    if (sched_->job(j.core).phase != core::Phase::kPending) continue;  // rejected below
    core::Allocation alloc;
    for (const Worker& w : j.workers) alloc.push_back(w.alloc);
    if (Status s = Adopt(*sched_, j.core, alloc, j.run_start); !s) {
      core_to_seq_[j.core.v] = 0;
      j.core = core::JobId();
      EndRunRows(j, now);
      log_.Requeue(now, j.name, "could not re-adopt after a restart: " + s.error().message);
      j.state = JobState::kPending;
      j.workers.clear();
      j.stop = StopKind::kNone;
      ++j.requeues;
      readopt_failed.push_back(seq);
      Persist(j);
      continue;
    }
    running_.insert(seq);
  }
  // Clears the scheduler's per-pass state; only rejections can come out of it.
  for (const core::Decision& d : sched_->Schedule(now)) {
    if (d.kind != core::Decision::Kind::kReject) continue;
    Job& j = jobs_.at(core_to_seq_[d.job.v]);
    running_.erase(j.seq);
    log_.Reject(now, j.name, d.reason);
    Done(j, "rejected", d.reason, now);
  }
  resubmit.insert(resubmit.end(), readopt_failed.begin(), readopt_failed.end());
  std::sort(resubmit.begin(), resubmit.end());
  for (int64_t seq : resubmit) {
    Job& j = jobs_.at(seq);
    add_core(j, j.spec, j.submit);
  }
  for (uint32_t i = 0; i < nodes_.size(); ++i) {
    const core::NodeId n(i);
    if (nodes_[i].up) continue;
    for (core::JobId id : sched_->SetNodeUp(n, false)) {
      Job& j = jobs_.at(core_to_seq_[id.v]);
      for (Worker& w : j.workers) {
        if (w.alloc.node == n && !w.exited) w.exited = w.lost = true;
      }
      if (j.state == JobState::kRunning) {
        BeginStop(j, StopKind::kLost, "node " + cluster_.node(n).name + " failed", j.spec.grace, now);
      } else if (j.state == JobState::kStopping && j.AllExited()) {
        EndStop(j, now);
      }
    }
  }
  for (uint32_t i = 0; i < nodes_.size(); ++i) {
    if (nodes_[i].up && nodes_[i].drained) sched_->SetNodeUp(core::NodeId(i), false);
  }
  dirty_ = true;
  return Ok{};
}

// ---------------------------------------------------------------- persistence

void Controller::Persist(const Job& job) {
  StoredJob sj;
  sj.seq = job.seq;
  sj.name = job.name;
  sj.team = job.team;
  sj.queue = job.queue;
  sj.active = job.active();
  sj.idem_key = job.idem_key;
  sj.idem_hash = job.idem_hash;
  sj.doc = JobToDoc(job, cluster_).dump();
  if (Status s = store_.PutJob(sj); !s) Fatal("store: " + s.error().message);
}

void Controller::PersistNode(core::NodeId n) {
  StoredNode sn{cluster_.node(n).name, NodeToDoc(nodes_[n.v]).dump()};
  if (Status s = store_.PutNode(sn); !s) Fatal("store: " + s.error().message);
}

// ---------------------------------------------------------------- the job life cycle

void Controller::Pass(Ticks now) {
  const auto t0 = std::chrono::steady_clock::now();
  const std::vector<core::Decision>& decisions = sched_->Schedule(now);
  sched_latency_.Observe(
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  for (const core::Decision& d : decisions) {
    Job& job = jobs_.at(core_to_seq_[d.job.v]);
    switch (d.kind) {
      case core::Decision::Kind::kStart: StartRun(job, now); break;
      case core::Decision::Kind::kPreempt:
        if (job.state == JobState::kRunning) {
          job.preempted_by = jobs_.at(core_to_seq_[d.by.v]).name;
          BeginStop(job, StopKind::kPreempt, d.reason, job.spec.grace, now);
        }
        break;
      case core::Decision::Kind::kReject:
        log_.Reject(now, job.name, d.reason);
        Done(job, "rejected", d.reason, now);
        break;
      case core::Decision::Kind::kWait: log_.Wait(now, job.name, d.reason); break;
    }
  }
  dirty_ = false;
  next_pass_ = now + options_.pass_interval_ms;
}

void Controller::StartRun(Job& job, Ticks now) {
  const core::JobRecord& rec = sched_->job(job.core);
  job.state = JobState::kRunning;
  ++job.run;
  job.run_start = now;
  if (job.first_start < 0) {
    job.first_start = now;
    queue_wait_[static_cast<size_t>(job.spec.tier)].Observe(static_cast<double>(now - job.submit) / 1000.0);
  }
  job.workers.clear();
  for (size_t i = 0; i < rec.alloc.size(); ++i) {
    Worker w;
    w.rank = static_cast<int>(i);
    w.alloc = rec.alloc[i];
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
    if (Status s = store_.StartRun(run); !s) Fatal("store: " + s.error().message);
  }
  job.stop = StopKind::kNone;
  job.signaled_at = job.stop_deadline = -1;
  job.stop_reason.clear();
  job.preempted_by.clear();
  running_.insert(job.seq);
  log_.Start(now, job.name, rec.alloc);
  Persist(job);
}

void Controller::BeginStop(Job& job, StopKind kind, std::string reason, Ticks grace, Ticks now) {
  job.state = JobState::kStopping;
  job.stop = kind;
  job.signaled_at = now;
  job.stop_deadline = now + grace;
  job.stop_reason = std::move(reason);
  if (job.AllExited()) {
    EndStop(job, now);
  } else {
    Persist(job);
  }
}

void Controller::EndRunRows(Job& job, Ticks now) {
  if (job.run > 0) {
    if (Status s = store_.EndRun(job.seq, job.run, WallMs(now)); !s) Fatal("store: " + s.error().message);
  }
}

void Controller::EndStop(Job& job, Ticks now) {
  EndRunRows(job, now);
  const Ticks ran = std::max<Ticks>(0, now - job.run_start);
  const Ticks kept = job.spec.checkpoint > 0 ? ran / job.spec.checkpoint * job.spec.checkpoint : 0;
  running_.erase(job.seq);
  dirty_ = true;
  switch (job.stop) {
    case StopKind::kPreempt:
    case StopKind::kLost:
      job.progress += kept;
      if (job.stop == StopKind::kPreempt) {
        log_.Preempt(now, job.name, job.preempted_by, job.stop_reason, job.signaled_at);
        ++job.preemptions;
        ++preemptions_[job.spec.queue.v];
      } else {
        log_.Requeue(now, job.name, job.stop_reason);
        ++job.requeues;
        ++requeued_;
      }
      sched_->Requeue(job.core, now);
      job.state = JobState::kPending;
      job.workers.clear();
      job.stop = StopKind::kNone;
      job.signaled_at = job.stop_deadline = -1;
      job.stop_reason.clear();
      job.preempted_by.clear();
      Persist(job);
      return;
    case StopKind::kCancel:
      sched_->Finish(job.core, now);
      log_.Cancel(now, job.name, job.stop_reason);
      Done(job, "cancelled", job.stop_reason, now);
      return;
    case StopKind::kFail:
      sched_->Finish(job.core, now);
      Done(job, "failed", job.stop_reason, now);
      WriteFinishEvent(now, job);
      return;
    case StopKind::kNone: return;
  }
}

void Controller::FinishRun(Job& job, Ticks now) {
  EndRunRows(job, now);
  running_.erase(job.seq);
  dirty_ = true;
  sched_->Finish(job.core, now, /*completed=*/true);
  Done(job, "finished", "", now);
  WriteFinishEvent(now, job);
}

void Controller::WriteFinishEvent(Ticks t, const Job& job) {
  if (job.end == "finished") {
    log_.Finish(t, job.name);
    return;
  }
  // A finish that failed: the same event with the exit status added (new fields are
  // allowed by the contract).
  event_buf_ << "{\"t\":" << sim::FormatSeconds(t) << ",\"type\":\"finish\",\"job\":";
  sim::WriteJsonString(event_buf_, job.name);
  event_buf_ << ",\"status\":\"failed\",\"exit_code\":" << job.exit_code << ",\"reason\":";
  sim::WriteJsonString(event_buf_, job.end_reason);
  event_buf_ << "}\n";
}

void Controller::Done(Job& job, std::string end, std::string reason, Ticks now) {
  job.state = JobState::kDone;
  job.end = std::move(end);
  job.end_reason = std::move(reason);
  job.end_time = now;
  job.core = core::JobId();
  job.stop = StopKind::kNone;
  running_.erase(job.seq);
  ++ended_[job.end];
  Persist(job);
  // Keep the last `recent_done` ended jobs in memory; older ones are in the store.
  done_order_.push_back(job.seq);
  while (static_cast<int64_t>(done_order_.size()) > std::max<int64_t>(1, options_.recent_done)) {
    auto it = jobs_.find(done_order_.front());
    done_order_.pop_front();
    if (it == jobs_.end() || it->second.active()) continue;
    by_name_.erase(it->second.name);
    jobs_.erase(it);
  }
}

void Controller::WorkerExited(Job& job, Worker& w, const ExitReport& e, Ticks now) {
  if (w.exited) return;
  w.exited = true;
  w.exit_code = e.exit_code;
  w.signal = e.signal;
  w.lost = e.lost;
  const std::string where = "worker " + std::to_string(w.rank) + " on " + cluster_.node(w.alloc.node).name;
  if (job.state == JobState::kRunning) {
    if (e.lost) {
      BeginStop(job, StopKind::kLost, where + " was lost" + (e.note.empty() ? "" : ": " + e.note),
                job.spec.grace, now);
    } else if (e.exit_code != 0 || e.signal != 0) {
      job.exit_code = e.exit_code != 0 ? e.exit_code : 128 + e.signal;
      BeginStop(job, StopKind::kFail,
                where + (e.signal != 0 ? " was killed by signal " + std::to_string(e.signal)
                                       : " exited with code " + std::to_string(e.exit_code)),
                job.spec.grace, now);
    } else if (job.AllExited()) {
      FinishRun(job, now);
    } else {
      Persist(job);
    }
  } else if (job.state == JobState::kStopping) {
    if (job.AllExited()) {
      EndStop(job, now);
    } else {
      Persist(job);
    }
  }
}

void Controller::SetCoreNodeUp(core::NodeId n) {
  const NodeInfo& info = nodes_[n.v];
  const bool up = info.up && !info.drained;
  if (sched_->ledger().node(n).up == up) return;
  // Going down for a drain: the jobs there keep running (and holding their GPUs).
  (void)sched_->SetNodeUp(n, up);
  dirty_ = true;
}

void Controller::NodeDown(core::NodeId n, Ticks now) {
  NodeInfo& info = nodes_[n.v];
  info.up = false;
  PersistNode(n);
  const std::string& name = cluster_.node(n).name;
  log_.NodeDown(now, name);
  // The agent has fenced its workers by now (its lease is shorter than the timeout).
  for (core::JobId id : sched_->SetNodeUp(n, false)) {
    Job& job = jobs_.at(core_to_seq_[id.v]);
    for (Worker& w : job.workers) {
      if (w.alloc.node == n && !w.exited) w.exited = w.lost = true;
    }
    if (job.state == JobState::kRunning) {
      BeginStop(job, StopKind::kLost, "node " + name + " failed", job.spec.grace, now);
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

void Controller::Housekeeping(Ticks now) {
  if (now - tokens_flushed_ >= 10'000) {
    tokens_.clear();
    tokens_flushed_ = now;
  }
  for (uint32_t i = 0; i < nodes_.size(); ++i) {
    if (nodes_[i].up && now - nodes_[i].last_seen > options_.node_timeout_ms) {
      NodeDown(core::NodeId(i), now);
    }
  }
  std::vector<int64_t> overdue;
  for (int64_t seq : running_) {
    const Job& job = jobs_.at(seq);
    if (job.state == JobState::kStopping && now > job.stop_deadline + options_.kill_slack_ms) {
      overdue.push_back(seq);
    }
  }
  for (int64_t seq : overdue) {
    // Its agent has SIGKILLed what was left at the deadline, or will when it next hears
    // that these workers are no longer assigned.
    Job& job = jobs_.at(seq);
    for (Worker& w : job.workers) w.exited = true;
    EndStop(job, now);
  }
}

// ---------------------------------------------------------------- authentication

std::optional<Principal> Controller::Authenticate(const std::string& token, Reply& error) {
  if (token.empty()) {
    error = Reply::Error(Code::kUnauthenticated,
                         "missing token: send \"Authorization: Bearer TOKEN\" (gantry takes "
                         "--token or GANTRY_TOKEN)");
    return std::nullopt;
  }
  const std::string hash = Sha256Hex(token);
  if (auto it = tokens_.find(hash); it != tokens_.end()) return it->second;
  auto found = store_.FindToken(hash);
  if (!found) Fatal("store: " + found.error().message);
  if (!*found) {
    error = Reply::Error(Code::kUnauthenticated, "invalid token: no such token is registered");
    return std::nullopt;
  }
  Principal p = PrincipalOf(**found);
  if (tokens_.size() > 10000) tokens_.clear();
  tokens_.emplace(hash, p);
  return p;
}

Reply Controller::CallAsUser(const std::string& token,
                             const std::function<Reply(const Principal&)>& fn) {
  return Call([&]() -> Reply {
    Reply err;
    auto user = AuthenticateUser(token, err);
    return user ? fn(*user) : err;
  });
}

std::optional<Principal> Controller::AuthenticateUser(const std::string& token, Reply& error) {
  auto p = Authenticate(token, error);
  if (p && p->role == Role::kAgent) {
    error = Reply::Error(Code::kForbidden, "an agent token may only be used by gantry-agent");
    return std::nullopt;
  }
  return p;
}

bool Controller::MaySee(const Principal& p, const Job& job) const {
  return MaySubmitTo(p, config_.queues, job.queue);
}

Job* Controller::FindJob(const std::string& name) {
  auto it = by_name_.find(name);
  if (it == by_name_.end()) return nullptr;
  auto j = jobs_.find(it->second);
  return j == jobs_.end() ? nullptr : &j->second;
}

// ---------------------------------------------------------------- API: jobs

Reply Controller::Submit(const std::string& token, SubmitRequest req) {
  return CallAsUser(token, [&](const Principal& user) -> Reply {
    const Ticks now = now_;
    if (static_cast<int64_t>(req.body.size()) > options_.max_spec_bytes) {
      return Reply::Error(Code::kTooLarge, "job spec is " + std::to_string(req.body.size()) +
                                               " bytes; the limit is " +
                                               std::to_string(options_.max_spec_bytes));
    }
    Job job;
    job.spec_format = req.format == "yaml" ? "yaml" : "json";
    job.spec_text = req.body;
    job.spec_file = req.file.empty() ? "request" : req.file;
    std::vector<std::string> problems;
    std::optional<core::JobSpec> spec = ReadSpec(job, &problems);
    if (spec && spec->command.empty()) {
      problems.push_back(job.spec_file + ": command: required: the agent needs something to run");
    }
    if (!problems.empty()) return Reply::Error(Code::kBadRequest, "invalid job spec", problems);
    job.queue = config_.queues.queue(spec->queue).spec.name;
    if (!MaySubmitTo(user, config_.queues, job.queue)) {
      std::string own;
      for (const std::string& q : user.queues) own += (own.empty() ? "" : ", ") + q;
      return Reply::Error(Code::kForbidden, user.Describe() + " may not submit to queue " + job.queue +
                                                " (its queues: " + (own.empty() ? "none" : own) + ")");
    }
    job.team = user.admin() ? "admin" : user.team;
    if (!req.idempotency_key.empty()) {
      if (req.idempotency_key.size() > 200) {
        return Reply::Error(Code::kBadRequest, "Idempotency-Key: at most 200 characters");
      }
      job.idem_key = req.idempotency_key;
      job.idem_hash = Sha256Hex(job.spec_format + "\n" + req.body);
      auto prior = store_.FindIdempotent(job.team, job.idem_key);
      if (!prior) Fatal("store: " + prior.error().message);
      if (*prior) {
        if ((*prior)->idem_hash != job.idem_hash) {
          return Reply::Error(Code::kConflict, "Idempotency-Key " + job.idem_key +
                                                   " was already used with a different request");
        }
        Reply r;
        r.body = {{"id", (*prior)->name}, {"existing", true}};
        return r;
      }
    }
    job.seq = next_seq_;
    job.name = spec->id.empty() ? "j" + std::to_string(job.seq) : spec->id;
    if (by_name_.count(job.name)) {
      return Reply::Error(Code::kConflict, "job id " + job.name + " already exists");
    }
    if (auto old = store_.FindJob(job.name); !old || *old) {
      if (!old) Fatal("store: " + old.error().message);
      return Reply::Error(Code::kConflict, "job id " + job.name + " already exists");
    }
    spec->id = job.name;
    if (auto why = core::WhyInfeasible(*spec, cluster_)) {
      return Reply::Error(Code::kUnprocessable, "job can never run on this cluster: " + *why);
    }
    const core::GpuUnits need = sched_->MinUnits(*spec);
    for (core::QueueId q : config_.queues.queue(spec->queue).self_and_ancestors) {
      const core::QueueSpec& qs = config_.queues.queue(q).spec;
      if (qs.burst >= 0 && need > qs.burst) {
        return Reply::Error(Code::kUnprocessable, "job can never run: it needs " + Gpus(need) +
                                                      " GPUs, above the burst_gpus " + Gpus(qs.burst) +
                                                      " of queue " + qs.name);
      }
    }
    ++next_seq_;
    job.submit = now;
    job.spec = *spec;
    job.core = sched_->Submit(std::move(*spec), now);
    if (core_to_seq_.size() <= job.core.v) core_to_seq_.resize(job.core.v + 1, 0);
    core_to_seq_[job.core.v] = job.seq;
    Job& j = jobs_.emplace(job.seq, std::move(job)).first->second;
    by_name_[j.name] = j.seq;
    Persist(j);
    log_.Submit(now, j.name);
    ++submitted_;
    dirty_ = true;
    Reply r;
    r.code = Code::kCreated;
    r.body = {{"id", j.name}};
    return r;
  });
}

json Controller::JobSummary(const Job& job, bool details, const Principal* viewer) {
  std::string state = job.state == JobState::kDone ? job.end : std::string(Name(job.state));
  std::string reason;
  switch (job.state) {
    case JobState::kPending:
      reason = job.core.valid() ? sched_->job(job.core).wait_reason : "";
      if (reason.empty()) reason = "waiting for the next scheduling pass";
      break;
    case JobState::kRunning: break;
    case JobState::kStopping: reason = std::string(Name(job.stop)) + ": " + job.stop_reason; break;
    case JobState::kDone: reason = job.end_reason; break;
  }
  std::vector<std::string> nodes;
  for (const Worker& w : job.workers) {
    const std::string& n = cluster_.node(w.alloc.node).name;
    if (std::find(nodes.begin(), nodes.end(), n) == nodes.end()) nodes.push_back(n);
  }
  json j = {{"id", job.name},
            {"seq", job.seq},
            {"queue", job.queue},
            {"team", job.team},
            {"tier", std::string(core::Name(job.spec.tier))},
            {"state", state},
            {"reason", reason},
            {"request", core::Placer::Describe(job.spec, cluster_.catalog())},
            {"replicas", job.spec.replicas},
            {"submit", UnixSeconds(job.submit)},
            {"run", job.run},
            {"preemptions", job.preemptions},
            {"requeues", job.requeues},
            {"nodes", nodes},
            {"progress_s", static_cast<double>(job.progress) / 1000.0}};
  j["start"] = job.first_start >= 0 ? json(UnixSeconds(job.first_start)) : json(nullptr);
  j["end"] = job.end_time >= 0 ? json(UnixSeconds(job.end_time)) : json(nullptr);
  if (job.state == JobState::kRunning || job.state == JobState::kStopping) {
    j["run_start"] = UnixSeconds(job.run_start);
  }
  if (job.end == "failed") j["exit_code"] = job.exit_code;
  if (!details) return j;
  json workers = json::array();
  for (const Worker& w : job.workers) {
    workers.push_back({{"rank", w.rank},
                       {"alloc", WorkerAllocToJson(w.alloc, cluster_)},
                       {"exited", w.exited},
                       {"exit_code", w.exit_code},
                       {"signal", w.signal},
                       {"lost", w.lost}});
  }
  j["workers"] = workers;
  if (viewer && MaySee(*viewer, job)) {
    j["command"] = job.spec.command;
    json env = json::object();
    for (const auto& [k, v] : job.spec.env) env[k] = v;
    j["env"] = env;
    j["workdir"] = job.spec.workdir;
    j["spec"] = job.spec_text;
  }
  return j;
}

Reply Controller::ListJobs(const std::string& token, const std::string& state_filter, bool all) {
  return CallAsUser(token, [&](const Principal&) -> Reply {
    json jobs = json::array();
    for (const auto& [seq, job] : jobs_) {
      if (!all && !job.active()) continue;
      json s = JobSummary(job, false, nullptr);
      if (!state_filter.empty() && s["state"] != state_filter) continue;
      jobs.push_back(std::move(s));
    }
    Reply r;
    r.body = {{"jobs", jobs}};
    return r;
  });
}

Reply Controller::ShowJob(const std::string& token, const std::string& name) {
  return CallAsUser(token, [&](const Principal& user) -> Reply {
    if (Job* job = FindJob(name)) {
      Reply r;
      r.body = JobSummary(*job, true, &user);
      return r;
    }
    auto stored = store_.FindJob(name);
    if (!stored) Fatal("store: " + stored.error().message);
    if (!*stored) return Reply::Error(Code::kNotFound, "no job " + name);
    Job job;
    job.seq = (*stored)->seq;
    job.name = (*stored)->name;
    job.team = (*stored)->team;
    job.queue = (*stored)->queue;
    (void)JobFromDoc(json::parse((*stored)->doc, nullptr, false), cluster_, job);
    if (auto spec = ReadSpec(job, nullptr)) job.spec = *spec;
    Reply r;
    r.body = JobSummary(job, true, &user);
    return r;
  });
}

Reply Controller::Cancel(const std::string& token, const std::string& name) {
  return CallAsUser(token, [&](const Principal& user) -> Reply {
    Job* job = FindJob(name);
    if (!job) return Reply::Error(Code::kNotFound, "no job " + name);
    if (!MaySubmitTo(user, config_.queues, job->queue)) {
      return Reply::Error(Code::kForbidden, user.Describe() + " may not cancel job " + name +
                                                " in queue " + job->queue + " (team " + job->team + ")");
    }
    const Ticks now = now_;
    const std::string reason = "cancelled by " + user.Describe();
    switch (job->state) {
      case JobState::kDone:
        return Reply::Error(Code::kConflict, "job " + name + " already ended (" + job->end + ")");
      case JobState::kPending:
        sched_->Finish(job->core, now);
        log_.Cancel(now, job->name, reason);
        Done(*job, "cancelled", reason, now);
        dirty_ = true;
        break;
      case JobState::kRunning: BeginStop(*job, StopKind::kCancel, reason, job->spec.grace, now); break;
      case JobState::kStopping:
        job->stop = StopKind::kCancel;
        job->stop_reason = reason;
        Persist(*job);
        break;
    }
    Reply r;
    r.body = {{"id", job->name},
              {"state", job->state == JobState::kDone ? job->end : std::string(Name(job->state))}};
    return r;
  });
}

Reply Controller::LogPath(const std::string& token, const std::string& name, int run, int rank) {
  return CallAsUser(token, [&](const Principal& user) -> Reply {
    Job* job = FindJob(name);
    if (!job) return Reply::Error(Code::kNotFound, "no job " + name);
    if (!MaySee(user, *job)) {
      return Reply::Error(Code::kForbidden, user.Describe() + " may not read the output of job " + name +
                                                " in queue " + job->queue);
    }
    if (run <= 0) run = job->run;
    if (run <= 0) return Reply::Error(Code::kNotFound, "job " + name + " has not started yet");
    if (rank < 0 || rank >= job->spec.replicas) {
      return Reply::Error(Code::kBadRequest, "rank: must be 0.." + std::to_string(job->spec.replicas - 1));
    }
    const fs::path path = fs::path(options_.log_dir) / std::to_string(job->seq) /
                          (std::to_string(run) + "." + std::to_string(rank) + ".log");
    Reply r;
    r.body = {{"path", path.string()}, {"run", run}, {"rank", rank}};
    return r;
  });
}

// ---------------------------------------------------------------- API: nodes, queues, usage

Reply Controller::Nodes(const std::string& token) {
  return CallAsUser(token, [&](const Principal&) -> Reply {
    const Ticks now = now_;
    std::vector<std::vector<std::string>> gpu_jobs(cluster_.gpu_count());
    for (int64_t seq : running_) {
      const Job& job = jobs_.at(seq);
      for (const Worker& w : job.workers) {
        const core::Node& node = cluster_.node(w.alloc.node);
        auto add = [&](int local) { gpu_jobs[node.first_gpu.v + static_cast<uint32_t>(local)].push_back(job.name); };
        if (w.alloc.sharing == core::Sharing::kExclusive) {
          for (int i = 0; i < node.gpus; ++i) {
            if (w.alloc.gpu_mask >> i & 1u) add(i);
          }
        } else {
          add(w.alloc.gpu);
        }
      }
    }
    json nodes = json::array();
    for (uint32_t i = 0; i < nodes_.size(); ++i) {
      const core::Node& node = cluster_.node(core::NodeId(i));
      const NodeInfo& info = nodes_[i];
      std::string state = !info.refused.empty() ? "refused"
                          : !info.up             ? "down"
                          : info.drained         ? "drained"
                                                 : "up";
      json gpus = json::array();
      int free = 0;
      for (int g = 0; g < node.gpus; ++g) {
        const core::GpuId gid(node.first_gpu.v + static_cast<uint32_t>(g));
        const core::GpuState& s = sched_->ledger().gpu(gid);
        double alloc = s.mode == core::GpuMode::kWhole  ? 1.0
                       : s.mode == core::GpuMode::kMig  ? s.mig_compute / 7.0
                       : s.mode == core::GpuMode::kShared ? s.share_used / 1000.0
                                                         : 0.0;
        if (s.mode == core::GpuMode::kFree) ++free;
        json gj = {{"index", g}, {"allocated", alloc}, {"jobs", gpu_jobs[gid.v]}};
        if (static_cast<size_t>(g) < info.gpus.size()) {
          gj["uuid"] = info.gpus[static_cast<size_t>(g)].uuid;
          gj["utilization"] = info.gpus[static_cast<size_t>(g)].utilization;
          gj["idle_s"] = static_cast<double>(info.gpus[static_cast<size_t>(g)].idle_ms) / 1000.0;
        }
        gpus.push_back(std::move(gj));
      }
      json nj = {{"name", node.name},
                 {"pool", cluster_.pool(node.pool).spec.name},
                 {"model", node.gpus > 0 ? cluster_.catalog().model(node.model).name : ""},
                 {"gpus", node.gpus},
                 {"free_gpus", free},
                 {"state", state},
                 {"reason", !info.refused.empty() ? info.refused : info.drain_reason},
                 {"address", info.address},
                 {"gpu_detail", gpus}};
      nj["last_seen_s"] = info.last_seen >= 0 ? json(static_cast<double>(now - info.last_seen) / 1000.0)
                                              : json(nullptr);
      nodes.push_back(std::move(nj));
    }
    Reply r;
    r.body = {{"nodes", nodes}};
    return r;
  });
}

Reply Controller::Drain(const std::string& token, const std::string& node, bool drain,
                        std::string reason) {
  return CallAsUser(token, [&](const Principal& user) -> Reply {
    if (!user.admin()) {
      return Reply::Error(Code::kForbidden, std::string(drain ? "drain" : "resume") +
                                                " is a cluster operation: it needs the admin token, not " +
                                                user.Describe() + "'s");
    }
    auto n = cluster_.FindNode(node);
    if (!n) return Reply::Error(Code::kNotFound, "no node " + node + " in the cluster config");
    NodeInfo& info = nodes_[n->v];
    info.drained = drain;
    info.drain_reason = drain ? (reason.empty() ? "drained by admin" : reason) : "";
    SetCoreNodeUp(*n);
    PersistNode(*n);
    Reply r;
    r.body = {{"node", node}, {"drained", drain}};
    return r;
  });
}

Reply Controller::Queues(const std::string& token) {
  return CallAsUser(token, [&](const Principal&) -> Reply {
    std::vector<int> pending(config_.queues.size(), 0), running(config_.queues.size(), 0);
    for (const auto& [seq, job] : jobs_) {
      if (job.state == JobState::kPending) ++pending[job.spec.queue.v];
      if (job.state == JobState::kRunning || job.state == JobState::kStopping) ++running[job.spec.queue.v];
    }
    json queues = json::array();
    for (uint32_t i = 0; i < config_.queues.size(); ++i) {
      const core::Queue& q = config_.queues.queue(core::QueueId(i));
      const auto gpus = [](core::GpuUnits u) {
        return static_cast<double>(u) / static_cast<double>(core::kGpuUnits);
      };
      json qj = {{"name", q.spec.name},
                 {"parent", q.spec.parent},
                 {"guaranteed_gpus", gpus(q.spec.guaranteed)},
                 {"weight", q.spec.weight},
                 {"used_gpus", gpus(sched_->queue_usage(core::QueueId(i)))},
                 {"pending", pending[i]},
                 {"running", running[i]}};
      qj["burst_gpus"] = q.spec.burst >= 0 ? json(gpus(q.spec.burst)) : json(nullptr);
      if (!q.spec.guaranteed_by_model.empty()) {  // a guarantee per GPU model
        json guaranteed = json::object(), used = json::object();
        for (const core::ModelGuarantee& m : q.spec.guaranteed_by_model) {
          guaranteed[m.name] = gpus(m.units);
          used[m.name] = gpus(sched_->queue_usage_on(core::QueueId(i), m.model));
        }
        qj["guaranteed_gpus_by_model"] = std::move(guaranteed);
        qj["used_gpus_by_model"] = std::move(used);
      }
      queues.push_back(std::move(qj));
    }
    Reply r;
    r.body = {{"queues", queues}};
    return r;
  });
}

Reply Controller::Usage(const std::string& token, double from_s, double to_s) {
  return CallAsUser(token, [&](const Principal&) -> Reply {
    const int64_t now_ms = WallMs(now_);
    const int64_t from = static_cast<int64_t>(from_s * 1000);
    const int64_t to = std::min(now_ms, static_cast<int64_t>(to_s * 1000));
    if (to <= from) return Reply::Error(Code::kBadRequest, "the period is empty (--since after --until)");
    auto runs = store_.Runs(from, to);
    if (!runs) Fatal("store: " + runs.error().message);
    std::map<std::pair<std::string, std::string>, double> hours;
    for (const StoredRun& r : *runs) {
      const int64_t end = r.end_ms < 0 ? now_ms : r.end_ms;
      const int64_t overlap = std::min(end, to) - std::max(r.start_ms, from);
      if (overlap > 0) hours[{r.queue, r.model}] += r.gpus * static_cast<double>(overlap) / 3.6e6;
    }
    json rows = json::array();
    for (const auto& [key, h] : hours) {
      rows.push_back({{"queue", key.first}, {"model", key.second}, {"gpu_hours", h}});
    }
    Reply r;
    r.body = {{"from", static_cast<double>(from) / 1000.0}, {"to", static_cast<double>(to) / 1000.0},
              {"usage", rows}};
    return r;
  });
}

// ---------------------------------------------------------------- API: agents

json Controller::DesiredWorkers(core::NodeId n, Ticks now) {
  json out = json::array();
  for (int64_t seq : running_) {
    const Job& job = jobs_.at(seq);
    std::map<uint32_t, int> local_rank;  // node -> workers of this job seen there so far
    for (const Worker& w : job.workers) {
      const int local = local_rank[w.alloc.node.v]++;
      if (w.alloc.node != n || w.exited) continue;
      const Worker& leader = job.workers.front();
      const NodeInfo& leader_node = nodes_[leader.alloc.node.v];
      const std::string master =
          leader_node.address.empty() ? cluster_.node(leader.alloc.node).name : leader_node.address;
      const int port = MasterPort(job.seq, job.run);
      json env = json::object();
      for (const auto& [k, v] : job.spec.env) env[k] = v;
      env["GANTRY_JOB_ID"] = job.name;
      env["GANTRY_QUEUE"] = job.queue;
      env["GANTRY_TIER"] = std::string(core::Name(job.spec.tier));
      env["GANTRY_RUN"] = std::to_string(job.run);
      env["GANTRY_RANK"] = std::to_string(w.rank);
      env["GANTRY_LOCAL_RANK"] = std::to_string(local);
      env["GANTRY_WORLD_SIZE"] = std::to_string(job.workers.size());
      env["GANTRY_MASTER_ADDR"] = master;
      env["GANTRY_MASTER_PORT"] = std::to_string(port);
      env["GANTRY_PROGRESS_S"] = sim::FormatSeconds(job.progress);
      env["GANTRY_CHECKPOINT_S"] = sim::FormatSeconds(job.spec.checkpoint);
      env["GANTRY_GRACE_S"] = sim::FormatSeconds(job.spec.grace);
      // The names PyTorch's launcher reads, unless the job set them itself.
      for (auto [k, v] : {std::pair<const char*, std::string>{"RANK", std::to_string(w.rank)},
                          {"LOCAL_RANK", std::to_string(local)},
                          {"WORLD_SIZE", std::to_string(job.workers.size())},
                          {"MASTER_ADDR", master},
                          {"MASTER_PORT", std::to_string(port)}}) {
        if (!env.contains(k)) env[k] = v;
      }
      const bool stopping = job.state == JobState::kStopping;
      json wj = {{"job", job.name},
                 {"seq", job.seq},
                 {"run", job.run},
                 {"rank", w.rank},
                 {"action", stopping ? "stop" : "run"},
                 {"grace_ms", stopping ? std::max<Ticks>(0, job.stop_deadline - now) : job.spec.grace},
                 {"command", job.spec.command},
                 {"env", env},
                 {"workdir", job.spec.workdir},
                 {"alloc", WorkerAllocToJson(w.alloc, cluster_)}};
      out.push_back(std::move(wj));
    }
  }
  return out;
}

Reply Controller::Heartbeat(const std::string& token, const std::string& node, const json& body,
                            const std::string& remote_addr) {
  return Call([&]() -> Reply {
    Reply err;
    auto p = Authenticate(token, err);
    if (!p) return err;
    if (p->role != Role::kAgent && !p->admin()) {
      return Reply::Error(Code::kForbidden, "agent endpoints need an agent or admin token, not " +
                                                p->Describe() + "'s");
    }
    auto n = cluster_.FindNode(node);
    if (!n) {
      return Reply::Error(Code::kNotFound, "node " + node +
                                               " is not in the cluster config; pools name the nodes "
                                               "agents may register as");
    }
    AgentReport report = ParseAgentReport(body);  // throws on malformed input: nothing changed yet
    const Ticks now = now_;
    NodeInfo& info = nodes_[n->v];
    const core::Node& cn = cluster_.node(*n);
    // The agent's GPUs must be what the config says this node has.
    std::string refused;
    if (static_cast<int>(report.gpus.size()) != cn.gpus) {
      refused = "agent reports " + std::to_string(report.gpus.size()) + " GPUs; the cluster config gives " +
                node + " " + std::to_string(cn.gpus);
    } else if (cn.gpus > 0) {
      const core::GpuModel& model = cluster_.catalog().model(cn.model);
      for (const GpuReport& g : report.gpus) {
        if (!GpuMatchesModel(g, model)) {
          refused = "GPU " + std::to_string(g.index) + " is " + (g.model.empty() ? g.name : g.model) +
                    "; the cluster config gives " + node + " " + model.name;
          break;
        }
      }
    }
    if (!refused.empty()) {
      const bool changed = info.refused != refused;
      info.refused = refused;
      if (info.up) NodeDown(*n, now);
      if (changed) PersistNode(*n);
      return Reply::Error(Code::kConflict, "node " + node + " refused: " + refused);
    }
    info.refused.clear();
    info.last_seen = now;
    const std::string address = report.address.empty() ? remote_addr : report.address;
    // Utilization changes at every heartbeat; only the inventory is worth a write.
    auto inventory = [](std::vector<GpuReport> gpus) {
      for (GpuReport& g : gpus) {
        g.utilization = 0;
        g.idle_ms = 0;
      }
      return GpusToJson(gpus).dump();
    };
    bool changed = info.address != address || info.agent_id != report.agent_id ||
                   inventory(info.gpus) != inventory(report.gpus);
    info.address = address;
    info.agent_id = report.agent_id;
    info.gpus = std::move(report.gpus);
    if (!info.up) {
      info.up = true;
      log_.NodeUp(now, node);
      changed = true;
    }
    for (const GpuReport& g : info.gpus) {
      if (g.lost && !info.drained) {
        info.drained = true;
        info.drain_reason = "GPU " + std::to_string(g.index) + " (" + g.uuid + ") lost";
        changed = true;
      }
    }
    SetCoreNodeUp(*n);
    if (changed) PersistNode(*n);
    for (const ExitReport& e : report.exits) {
      Job* job = FindJob(e.job);
      if (!job || !job->active() || job->run != e.run || e.rank < 0 ||
          e.rank >= static_cast<int>(job->workers.size())) {
        continue;  // an old run, or already settled
      }
      Worker& w = job->workers[static_cast<size_t>(e.rank)];
      if (w.alloc.node != *n) continue;
      WorkerExited(*job, w, e, now);
    }
    if (report.leaving && info.up) NodeDown(*n, now);  // a clean agent shutdown
    Reply r;
    r.body = {{"instance", instance_},
              {"heartbeat_ms", options_.heartbeat_ms},
              {"lease_ms", options_.lease_ms},
              {"node_timeout_ms", options_.node_timeout_ms},
              {"workers", DesiredWorkers(*n, now)}};
    return r;
  });
}

Reply Controller::UploadLog(const std::string& token, const std::string& node, const std::string& name,
                            int run, int rank, int64_t offset, const std::string& data) {
  return Call([&]() -> Reply {
    Reply err;
    auto p = Authenticate(token, err);
    if (!p) return err;
    if (p->role != Role::kAgent && !p->admin()) {
      return Reply::Error(Code::kForbidden, "agent endpoints need an agent or admin token");
    }
    Job* job = FindJob(name);
    if (!job) return Reply::Error(Code::kNotFound, "no job " + name);
    if (run <= 0 || run > job->run || rank < 0 || rank >= job->spec.replicas || offset < 0) {
      return Reply::Error(Code::kBadRequest, "run, rank or offset out of range");
    }
    (void)node;
    const fs::path dir = fs::path(options_.log_dir) / std::to_string(job->seq);
    const fs::path path = dir / (std::to_string(run) + "." + std::to_string(rank) + ".log");
    std::error_code ec;
    fs::create_directories(dir, ec);
    int64_t size = fs::exists(path, ec) ? static_cast<int64_t>(fs::file_size(path, ec)) : 0;
    if (offset <= size && offset + static_cast<int64_t>(data.size()) > size) {
      std::ofstream out(path, std::ios::binary | std::ios::app);
      const size_t skip = static_cast<size_t>(size - offset);
      out.write(data.data() + skip, static_cast<std::streamsize>(data.size() - skip));
      out.flush();
      if (out) size += static_cast<int64_t>(data.size() - skip);
    }
    Reply r;
    r.body = {{"size", size}};
    return r;
  });
}

// ---------------------------------------------------------------- health and metrics

nlohmann::json Controller::Health() {
  Reply r = Call([&]() -> Reply {
    int up = 0;
    for (const NodeInfo& n : nodes_) up += n.up ? 1 : 0;
    Reply ok;
    ok.body = {{"status", "ok"},
               {"instance", instance_},
               {"nodes_up", up},
               {"jobs_running", running_.size()},
               {"jobs_pending", sched_->pending().size()}};
    return ok;
  });
  return r.body;
}

void Controller::Poke() {
  (void)Call([&]() -> Reply {
    dirty_ = true;
    return Reply{};
  });
}

std::string Controller::Metrics() {
  Reply r = Call([&]() -> Reply {
    std::string out;
    const core::Ledger& ledger = sched_->ledger();
    MetricHeader(out, "gantry_gpu_utilization_ratio", "gauge",
                 "GPU capacity of up nodes allocated to jobs (fractions by share)");
    out += "gantry_gpu_utilization_ratio " +
           FormatValue(ledger.up_units() > 0 ? static_cast<double>(ledger.used_units()) /
                                                   static_cast<double>(ledger.up_units())
                                             : 0.0) +
           "\n";
    MetricHeader(out, "gantry_scheduling_latency_seconds", "histogram",
                 "Wall-clock time of one scheduling pass");
    sched_latency_.Render(out, "gantry_scheduling_latency_seconds");
    MetricHeader(out, "gantry_queue_wait_seconds", "histogram",
                 "Time from submit to first start, by tier");
    for (int t = 0; t < core::kTierCount; ++t) {
      queue_wait_[static_cast<size_t>(t)].Render(
          out, "gantry_queue_wait_seconds",
          "tier=\"" + std::string(core::Name(static_cast<core::Tier>(t))) + "\"");
    }
    MetricHeader(out, "gantry_preemptions_total", "counter", "Jobs preempted, by queue");
    for (uint32_t q = 0; q < config_.queues.size(); ++q) {
      out += "gantry_preemptions_total{queue=\"" + EscapeLabel(config_.queues.queue(core::QueueId(q)).spec.name) +
             "\"} " + std::to_string(preemptions_[q]) + "\n";
    }
    const auto gpus = [](core::GpuUnits u) {
      return FormatValue(static_cast<double>(u) / static_cast<double>(core::kGpuUnits));
    };
    MetricHeader(out, "gantry_queue_used_gpus", "gauge", "GPUs held by a queue and its descendants");
    for (uint32_t q = 0; q < config_.queues.size(); ++q) {
      out += "gantry_queue_used_gpus{queue=\"" + EscapeLabel(config_.queues.queue(core::QueueId(q)).spec.name) +
             "\"} " + gpus(sched_->queue_usage(core::QueueId(q))) + "\n";
    }
    MetricHeader(out, "gantry_queue_guaranteed_gpus", "gauge", "A queue's guarantee");
    for (uint32_t q = 0; q < config_.queues.size(); ++q) {
      const core::QueueSpec& s = config_.queues.queue(core::QueueId(q)).spec;
      out += "gantry_queue_guaranteed_gpus{queue=\"" + EscapeLabel(s.name) + "\"} " + gpus(s.guaranteed) + "\n";
    }
    MetricHeader(out, "gantry_queue_burst_gpus", "gauge", "A queue's burst limit (absent: none)");
    for (uint32_t q = 0; q < config_.queues.size(); ++q) {
      const core::QueueSpec& s = config_.queues.queue(core::QueueId(q)).spec;
      if (s.burst >= 0) out += "gantry_queue_burst_gpus{queue=\"" + EscapeLabel(s.name) + "\"} " + gpus(s.burst) + "\n";
    }
    MetricHeader(out, "gantry_gpu_allocated_ratio", "gauge",
                 "Share of one GPU allocated to jobs (labels as dcgm-exporter's)");
    MetricHeader(out, "gantry_gpu_busy_ratio", "gauge", "GPU utilization the agent last sampled");
    std::string busy;
    for (uint32_t i = 0; i < nodes_.size(); ++i) {
      const core::Node& node = cluster_.node(core::NodeId(i));
      const NodeInfo& info = nodes_[i];
      for (int g = 0; g < node.gpus; ++g) {
        const core::GpuState& s = ledger.gpu(core::GpuId(node.first_gpu.v + static_cast<uint32_t>(g)));
        const double alloc = s.mode == core::GpuMode::kWhole    ? 1.0
                             : s.mode == core::GpuMode::kMig    ? s.mig_compute / 7.0
                             : s.mode == core::GpuMode::kShared ? s.share_used / 1000.0
                                                                : 0.0;
        const GpuReport* rep = static_cast<size_t>(g) < info.gpus.size() ? &info.gpus[static_cast<size_t>(g)] : nullptr;
        const std::string labels = "gpu=\"" + std::to_string(g) + "\",UUID=\"" +
                                   EscapeLabel(rep ? rep->uuid : "") + "\",Hostname=\"" +
                                   EscapeLabel(node.name) + "\",modelName=\"" +
                                   EscapeLabel(cluster_.catalog().model(node.model).name) + "\"";
        out += "gantry_gpu_allocated_ratio{" + labels + "} " + FormatValue(alloc) + "\n";
        if (rep && info.up) busy += "gantry_gpu_busy_ratio{" + labels + "} " + FormatValue(rep->utilization) + "\n";
      }
    }
    out += busy;
    MetricHeader(out, "gantry_jobs", "gauge", "Jobs by state");
    int pending = 0, running = 0, stopping = 0;
    for (const auto& [seq, job] : jobs_) {
      pending += job.state == JobState::kPending;
      running += job.state == JobState::kRunning;
      stopping += job.state == JobState::kStopping;
    }
    out += "gantry_jobs{state=\"pending\"} " + std::to_string(pending) + "\n";
    out += "gantry_jobs{state=\"running\"} " + std::to_string(running) + "\n";
    out += "gantry_jobs{state=\"stopping\"} " + std::to_string(stopping) + "\n";
    MetricHeader(out, "gantry_jobs_submitted_total", "counter", "Jobs accepted by this process");
    out += "gantry_jobs_submitted_total " + std::to_string(submitted_) + "\n";
    MetricHeader(out, "gantry_jobs_ended_total", "counter", "Jobs ended by this process, by how");
    for (const char* end : {"finished", "failed", "cancelled", "rejected"}) {
      out += "gantry_jobs_ended_total{end=\"" + std::string(end) + "\"} " +
             std::to_string(ended_.count(end) ? ended_.at(end) : 0) + "\n";
    }
    MetricHeader(out, "gantry_requeues_total", "counter", "Runs ended by a node or worker loss");
    out += "gantry_requeues_total " + std::to_string(requeued_) + "\n";
    MetricHeader(out, "gantry_nodes", "gauge", "Nodes by state");
    int up = 0, down = 0, drained = 0;
    for (const NodeInfo& n : nodes_) {
      up += n.up && !n.drained;
      drained += n.up && n.drained;
      down += !n.up;
    }
    out += "gantry_nodes{state=\"up\"} " + std::to_string(up) + "\n";
    out += "gantry_nodes{state=\"drained\"} " + std::to_string(drained) + "\n";
    out += "gantry_nodes{state=\"down\"} " + std::to_string(down) + "\n";
    Reply reply;
    reply.text = std::move(out);
    reply.content_type = "text/plain; version=0.0.4; charset=utf-8";
    return reply;
  });
  return r.text;
}

}  // namespace gantry::server
