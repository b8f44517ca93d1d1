// Agent: the main loop and the conversation with gantryd (heartbeats, the watch, log
// uploads, the fence). Its setup is in agent_setup.cc; the workers' side in agent_start.cc,
// agent_resolve.cc, agent_workers.cc, agent_mig.cc and agent_usage.cc.
#include "agent/agent.h"

#include <fcntl.h>
#include <httplib.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <thread>

#include "agent/launcher.h"
#include "base/log.h"

namespace gantry::agent {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr size_t kLogChunk = 256 * 1024;
constexpr size_t kDoneMemory = 100000;

std::string RandomId() {
  std::random_device rd;
  char buf[17];
  std::snprintf(buf, sizeof buf, "%08x%08x", rd(), rd());
  return buf;
}

}  // namespace

Agent::Agent(AgentOptions options, std::unique_ptr<GpuSource> gpus)
    : options_(std::move(options)),
      gpus_(std::move(gpus)),
      servers_(options_.server),
      agent_id_(RandomId()),
      heartbeat_ms_(options_.heartbeat_ms) {
  Connect();
}

void Agent::Connect() {
  http_ = std::make_unique<httplib::Client>(servers_.current());
  // Before the server has given a lease: 2 s; then well within the lease (as Heartbeat sets).
  const int64_t lease = lease_ms_.load();
  const int64_t timeout_ms = lease <= 0 ? 2000 : std::clamp<int64_t>(lease / 3, 300, 5000);
  http_->set_connection_timeout(timeout_ms / 1000, (timeout_ms % 1000) * 1000);
  http_->set_read_timeout(timeout_ms / 1000, (timeout_ms % 1000) * 1000);
  http_->set_write_timeout(timeout_ms / 1000, (timeout_ms % 1000) * 1000);
  http_->set_keep_alive(true);
  if (!options_.token.empty()) http_->set_bearer_token_auth(options_.token.c_str());
  if (!options_.ca_cert.empty()) http_->set_ca_cert_path(options_.ca_cert);
  std::lock_guard lk(watch_mu_);
  server_now_ = servers_.current();
}

Agent::~Agent() = default;

std::string Agent::Key(const Worker& w) { return proto::WorkerKey(w.job, w.run, w.rank, w.step); }

int64_t Agent::LogSize(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 ? static_cast<int64_t>(st.st_size) : 0;
}

int64_t Agent::Now() const {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void Agent::Say(const std::string& line, bool warning) {
  log::Write(warning ? log::Level::kWarning : log::Level::kInfo, line, {{"node", options_.node}});
}

int Agent::Run(const std::atomic<bool>& stop, const std::atomic<bool>* leave) {
  if (!Setup()) return 1;
  Say("joining " + servers_.current() + " with " + gpus_->Describe());
  Recover();
  std::atomic<bool> fence_stop{false};
  std::thread fence([&] { FenceLoop(fence_stop); });
  std::atomic<bool> watch_stop{false};
  std::thread watch([&] { WatchLoop(watch_stop); });
  int64_t next_heartbeat = 0, last_heartbeat = 0;
  while (!stop.load()) {
    const int64_t now = Now();
    ReapChildren();
    RemoveCgroups();
    Escalate(now);
    ReleaseMigs(now);
    // Heartbeat on time, or at once when a worker ended (its node can take the next job);
    // at most every 20 ms.
    if (now >= next_heartbeat || (exits_pending_ && now - last_heartbeat >= 20)) {
      UploadLogs();
      last_heartbeat = Now();
      exits_pending_ = false;  // a failed heartbeat leaves them to the next one on time
      const bool joining = last_ok_.load() == 0 || !last_error_.empty();
      Heartbeat(last_heartbeat);
      next_heartbeat = Now() + (joining && last_error_.empty()
                                    ? FirstBeatAfterJoining(options_.node, heartbeat_ms_)
                                    : heartbeat_ms_);
    }
    std::optional<proto::WatchAnswer> answer;
    {
      std::unique_lock lk(watch_mu_);
      watch_cv_.wait_for(lk, std::chrono::milliseconds(20), [&] { return watched_.has_value(); });
      answer.swap(watched_);
    }
    if (answer) {
      Apply(*answer, Now());
    }
  }
  watch_stop = true;
  {
    std::lock_guard lk(watch_mu_);
    if (watch_http_) watch_http_->stop();
  }
  watch.join();
  if (leave && leave->load()) {  // an upgrade: the workers run on for the next agent
    fence_stop = true;
    fence.join();
    Say("leaving " + std::to_string(live_.size()) + " running worker(s) to the next gantry-agent");
    return 0;
  }
  Shutdown();
  fence_stop = true;
  fence.join();
  Say("stopped");
  return 0;
}

void Agent::Shutdown() {
  // Stop every worker within its grace (bounded), then tell the server.
  const int64_t now = Now();
  for (auto& [key, w] : workers_) {
    if (!w.exited) {
      w.lose_on_exit = true;
      Stop(w, w.stop_signal > 0 ? w.stop_signal : options_.preempt_signal,
           std::min(w.grace_ms, options_.max_shutdown_grace_ms), now);
    }
  }
  while (true) {
    ReapChildren();
    RemoveCgroups();
    Escalate(Now());
    bool alive = false;
    for (auto& [key, w] : workers_) alive |= !w.exited;
    if (!alive) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  // Their MIG instances, for a while; what is left is in mig.json for the next run.
  for (const int64_t until = Now() + 5000; Now() < until;) {
    ReleaseMigs(Now());
    bool held = false;
    for (const auto& [uuid, h] : migs_) held |= !h.owner.empty();
    if (!held) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  for (auto& [key, w] : workers_) {
    if (w.note.empty() && w.lost) w.note = "gantry-agent stopped";
  }
  UploadLogs();
  Heartbeat(Now(), /*leaving=*/true);
}

void Agent::FenceLoop(const std::atomic<bool>& stop) {
  bool active = false;
  while (!stop.load()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    const int64_t now = Now(), lease = lease_ms_.load(), last = last_ok_.load();
    if (lease <= 0 || last == 0 || now - last <= lease) {
      active = false;
      continue;
    }
    // Everything must be dead before the server's timeout ends: half of what is left.
    const int64_t budget = std::max<int64_t>(0, (node_timeout_ms_.load() - lease) / 2);
    std::lock_guard lk(fence_mu_);
    int signalled = 0;
    for (auto& [pid, live] : live_) {
      if (!live.signalled) {
        live.signalled = true;
        live.kill_at = now + std::min(live.grace_ms, budget);
        live.killed = live.kill_at <= now;
        if (live.killed) {
          Kill(pid, live.cgroup);
        } else {
          SignalGroup(pid, live.signal);
        }
        fenced_.insert(pid);
        ++signalled;
      } else if (!live.killed && now >= live.kill_at) {
        Kill(pid, live.cgroup);
        live.killed = true;
      }
    }
    if (!active || signalled > 0) {
      Say("no answer from the server for " + std::to_string(now - last) + " ms (lease " +
              std::to_string(lease) + " ms): stopping " + std::to_string(signalled) + " worker(s)",
          true);
    }
    active = true;
  }
}

void Agent::UploadLogs() {
  for (auto& [key, w] : workers_) {
    // sbatch -o: the worker's own file once it made it, read as its user (a worker that
    // could not open it wrote why to the agent's log, which is uploaded instead).
    int fd = -1;
    if (!w.out_path.empty()) {
      fd = w.out_user ? OpenAsUser(w.out_path, w.uid, w.gid, w.groups)
                      : ::open(w.out_path.c_str(), O_RDONLY | O_CLOEXEC);
    }
    if (fd < 0) fd = ::open(w.log_path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd >= 0 && !Upload(w, fd, false)) return;  // the server is away: at the next heartbeat
    if (w.err_path.empty()) continue;
    fd = ::open(w.err_path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd >= 0 && !Upload(w, fd, true)) return;
  }
}

bool Agent::Upload(Worker& w, int fd, bool err) {
  int64_t& uploaded = err ? w.err_uploaded : w.uploaded;
  struct stat st {};
  const int64_t size = ::fstat(fd, &st) == 0 ? static_cast<int64_t>(st.st_size) : -1;
  for (int chunk = 0; chunk < 8 && uploaded < size; ++chunk) {
    std::string data(static_cast<size_t>(std::min<int64_t>(size - uploaded, kLogChunk)), '\0');
    const ssize_t got_bytes = ::pread(fd, data.data(), data.size(), uploaded);
    if (got_bytes <= 0) break;
    data.resize(static_cast<size_t>(got_bytes));
    const std::string path =
        proto::LogsTarget(options_.node, w.job, w.run, w.rank, uploaded, w.step, err);
    auto res = http_->Post(path.c_str(), data, "application/octet-stream");
    if (!res) {
      ::close(fd);
      return false;
    }
    if (res->status == 404) {
      uploaded = size;  // the server forgot the job: nothing to upload to
      break;
    }
    if (res->status != 200) break;
    const json body = json::parse(res->body, nullptr, false);
    const Result<proto::LogUploadReply> reply =
        body.is_discarded() ? Result<proto::LogUploadReply>(Error{"", "not JSON"})
                            : proto::DecodeLogUploadReply(body);
    const int64_t got = reply ? reply->size : -1;
    if (got < 0) break;
    uploaded = std::min(got, size);
  }
  ::close(fd);
  return true;
}

void Agent::Heartbeat(int64_t now, bool leaving) {
  auto discovered = gpus_->Discover();
  if (discovered) {
    last_gpus_ = *discovered;
  } else if (last_error_ != discovered.error().message) {
    last_error_ = discovered.error().message;
    Say("GPU discovery failed: " + last_error_);
  }
  // Usage per worker; emulated GPUs show what their workers' models say.
  std::map<std::string, proto::WorkerUsage> usage;
  const std::map<int, std::string> owners = GpuProcessOwners();
  for (const auto& [key, w] : workers_) {
    if (w.exited) continue;
    std::optional<proto::WorkerUsage> u = Usage(w, now, owners);
    if (!u) continue;
    const std::vector<int>& held = w.share.gpus;
    if (gpus_->emulated() && w.share.sharing == "exclusive") {
      for (GpuInfo& g : last_gpus_) {
        if (std::find(held.begin(), held.end(), g.index) == held.end()) continue;
        g.utilization = u->util;
        g.memory_used_bytes = u->vram_used_bytes / static_cast<int64_t>(held.size());
      }
    }
    usage[key] = *u;
  }
  proto::Heartbeat beat;
  beat.agent_id = agent_id_;
  beat.address = options_.address;
  beat.leaving = leaving;
  beat.isolation = isolation_;
  for (const GpuInfo& g : last_gpus_) {
    // Idle time: how long NVML has sampled 0% utilization (emulated GPUs are always idle).
    auto it = busy_at_.emplace(g.index, now).first;
    if (g.utilization > 0) it->second = now;
    beat.gpus.push_back(WireGpu(g, now - it->second));
  }
  std::vector<std::string> reported;
  for (const auto& [key, w] : workers_) {
    if (!w.exited) {
      auto u = usage.find(key);
      beat.running.push_back({w.job, w.run, w.rank, w.pid,
                              u == usage.end() ? std::nullopt : std::optional(u->second), w.step});
    } else {
      std::string mig_note;
      if (MigPending(key, now, leaving, &mig_note)) continue;  // reported once its instance is gone
      // A step's task is reported once its output is uploaded: srun prints it all, then ends.
      if (w.step >= 0 && !leaving &&
          (w.uploaded < LogSize(w.log_path) ||
           (!w.err_path.empty() && w.err_uploaded < LogSize(w.err_path))))
        continue;
      beat.exits.push_back({w.job, w.run, w.rank, w.exit_code, w.signal, w.lost, w.note + mig_note,
                            w.drain, w.step});
      reported.push_back(key);
    }
  }
  const json body = proto::Encode(beat);
  auto res =
      http_->Post(proto::HeartbeatTarget(options_.node).c_str(), body.dump(), "application/json");
  if (!res) {
    // One line when the server becomes unreachable, not one per heartbeat.
    const std::string err = "cannot reach " + servers_.current();
    if (err != last_error_) Say(err + ": " + httplib::to_string(res.error()));
    last_error_ = err;
    if (servers_.size() > 1) {
      servers_.Failed();
      Connect();
    }
    return;
  }
  const proto::Refusal refusal =
      res->status == 200 ? proto::Refusal{} : proto::DecodeRefusal(res->body);
  if (res->status == 503 && refusal.store == "unavailable" && refusal.hold) {
    // The leader's store is out: nothing was recorded (the exits are reported again) and
    // nothing decided; its answer keeps the lease, so the workers run on.
    const std::string err = servers_.current() + ": the store is unavailable; holding";
    if (err != last_error_) Say(err);
    last_error_ = err;
    last_ok_ = now;
    WriteLease((fs::path(options_.state_dir) / "lease").string(), lease_ms_.load(),
               node_timeout_ms_.load());  // the shims' fence too
    return;
  }
  if (res->status == 503 && (refusal.role == "standby" || refusal.store == "unavailable")) {
    // A standby, or a leader whose store has been out past the hold: go to the leader it
    // names (or the next server), at once.
    const std::string err =
        servers_.current() + (refusal.role == "standby" ? " is a standby" : ": no store");
    if (err != last_error_)
      Say(err + (refusal.leader.empty() ? "" : "; the leader is " + refusal.leader));
    last_error_ = err;
    servers_.Failed(refusal.leader);
    Connect();
    return;
  }
  Result<proto::HeartbeatReply> reply =
      res->status == 200 ? proto::ParseHeartbeatReply(res->body)
                         : Result<proto::HeartbeatReply>(Error{"", refusal.error});
  if (!reply) {
    const std::string err =
        "server said " + std::to_string(res->status) + ": " +
        (res->status == 200 ? reply.error().ToString() + " in " + res->body : refusal.error);
    if (err != last_error_) Say(err);
    last_error_ = err;
    return;
  }
  if (!last_error_.empty()) Say("connected");
  last_error_.clear();
  last_ok_ = now;
  heartbeat_ms_ =
      std::clamp<int64_t>(reply->heartbeat_ms > 0 ? reply->heartbeat_ms : heartbeat_ms_, 10, 60000);
  const int64_t lease = reply->lease_ms;
  lease_ms_ = lease;
  node_timeout_ms_ = reply->node_timeout_ms;
  WriteLease((fs::path(options_.state_dir) / "lease").string(), lease,
             node_timeout_ms_.load());  // the shims' fence
  // Calls give up well within the lease, so a lost link is noticed and retried promptly.
  const int64_t timeout_ms = std::clamp<int64_t>(lease / 3, 300, 5000);
  http_->set_connection_timeout(timeout_ms / 1000, (timeout_ms % 1000) * 1000);
  http_->set_read_timeout(timeout_ms / 1000, (timeout_ms % 1000) * 1000);
  http_->set_write_timeout(timeout_ms / 1000, (timeout_ms % 1000) * 1000);
  // The server has recorded these exits: forget them, never to start them again.
  for (const std::string& key : reported) {
    auto it = workers_.find(key);
    if (it == workers_.end()) continue;
    std::error_code ec;
    if (!it->second.record_path.empty()) fs::remove(it->second.record_path, ec);
    if (!it->second.status_path.empty()) fs::remove(it->second.status_path, ec);
    if (!it->second.script_path.empty()) fs::remove(it->second.script_path, ec);
    if (!it->second.input_path.empty()) fs::remove(it->second.input_path, ec);
    workers_.erase(it);
    Remember(key);
  }
  Apply(reply->answer, now);
}

void Agent::Apply(const proto::WatchAnswer& answer, int64_t now) {
  const std::string& instance = answer.instance;
  const int64_t epoch = answer.epoch;  // 0: a gantryd that does not say
  const int64_t version = answer.version;
  {
    std::lock_guard lk(watch_mu_);
    if (epoch < applied_epoch_) return;  // from a leader since replaced
    if (epoch == applied_epoch_ && instance == applied_instance_ && version < applied_version_)
      return;
    applied_epoch_ = epoch;
    applied_instance_ = instance;
    applied_version_ = version;
  }
  Reconcile(answer.workers, now);
}

void Agent::WatchLoop(const std::atomic<bool>& stop) {
  std::string url;
  while (!stop.load()) {
    std::string instance;
    int64_t version = 0;
    {
      std::lock_guard lk(watch_mu_);
      instance = applied_instance_;
      version = applied_version_;
      if (url != server_now_) {  // heartbeats moved to another server (a new leader)
        url = server_now_;
        watch_http_ = std::make_unique<httplib::Client>(url);
        watch_http_->set_connection_timeout(2, 0);
        watch_http_->set_read_timeout(30, 0);  // the server answers within 20 s
        watch_http_->set_keep_alive(true);
        if (!options_.token.empty()) watch_http_->set_bearer_token_auth(options_.token.c_str());
        if (!options_.ca_cert.empty()) watch_http_->set_ca_cert_path(options_.ca_cert);
      }
    }
    if (last_ok_.load() == 0) {  // not registered yet: the first heartbeat comes first
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      continue;
    }
    const std::string path = proto::WatchTarget(options_.node, instance, version, 20000);
    auto res = watch_http_->Get(path.c_str());
    Result<proto::WatchAnswer> body = res && res->status == 200
                                          ? proto::ParseWatchAnswer(res->body)
                                          : Result<proto::WatchAnswer>(Error{"", "no answer"});
    if (!body) {
      // The server is away or refused: heartbeats report that; try again shortly.
      for (int i = 0; i < 25 && !stop.load(); ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      continue;
    }
    {
      std::lock_guard lk(watch_mu_);
      watched_ = std::move(*body);
    }
    watch_cv_.notify_one();
  }
}

void Agent::Remember(const std::string& key) {
  if (done_.insert(key).second) done_order_.push_back(key);
  while (done_order_.size() > kDoneMemory) {
    done_.erase(done_order_.front());
    done_order_.pop_front();
  }
}

void Agent::Reconcile(const std::vector<std::shared_ptr<const proto::DesiredWorker>>& desired,
                      int64_t now) {
  std::set<std::string> wanted;
  for (const auto& entry : desired) {
    const proto::DesiredWorker& d = *entry;
    const std::string key = proto::WorkerKey(d.job, d.run, d.rank, d.step);
    wanted.insert(key);
    auto it = workers_.find(key);
    if (d.action == proto::DesiredWorker::Action::kRun) {
      if (it == workers_.end() && !done_.count(key)) {
        StartWorker(d, now);
      } else if (it != workers_.end()) {
        SendAskedSignals(it->second, d.signals);
      }
      continue;
    }
    const int64_t grace = d.grace_ms;
    if (it != workers_.end()) {
      // The stop's own signal where it names one (SIGTERM at an sbatch job's time limit
      // after its --signal's lead), else the one it started with.
      const int sig = d.signal > 0                 ? d.signal
                      : it->second.stop_signal > 0 ? it->second.stop_signal
                                                   : options_.preempt_signal;
      Stop(it->second, sig, grace, now);
    } else if (!done_.count(key)) {
      // Stopped before it ever started here: report it ended, so the server need not wait.
      Worker w;
      w.job = d.job;
      w.seq = d.seq;
      w.run = d.run;
      w.rank = d.rank;
      w.step = d.step;
      w.exited = true;
      w.note = "stopped before it started";
      workers_[key] = w;
    }
  }
  for (auto& [key, w] : workers_) {
    if (!w.exited && !wanted.count(key) && !w.killed) {
      Say("job " + w.job + " run " + std::to_string(w.run) + " rank " + std::to_string(w.rank) +
          " is no longer assigned here: killing it");
      Stop(w, SIGKILL, 0, now);
    }
  }
}

void Agent::SendAskedSignals(Worker& w, const std::vector<proto::DesiredWorker::Signal>& asked) {
  if (w.exited || w.stopping || w.pid <= 1) return;
  const int before = w.signalled;
  for (const proto::DesiredWorker::Signal& s : asked) {
    if (s.n <= before || s.signal <= 0) continue;
    // -b: the batch shell alone (the shim's child), else the worker's process group.
    if (!(s.script_only && SignalChild(options_.proc, w.pid, s.signal)))
      SignalGroup(w.pid, s.signal);
    Say("job " + w.job + " run " + std::to_string(w.run) + " rank " + std::to_string(w.rank) +
        (w.step >= 0 ? " step " + std::to_string(w.step) : "") + ": sent signal " +
        std::to_string(s.signal) + (s.script_only ? " to its batch script" : "") + ", as asked");
    w.signalled = std::max(w.signalled, s.n);
  }
  if (w.signalled != before && !w.record_path.empty())
    WriteRecord(w);  // sent once, also by a successor
}

}  // namespace gantry::agent
