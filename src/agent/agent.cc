#include "agent/agent.h"
#include "base/image_reference.h"
#include "base/url.h"

#include <fcntl.h>
#include <grp.h>
#include <httplib.h>
#include <pwd.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <random>
#include <sstream>
#include <thread>

#include "agent/launcher.h"
#include "base/atomic_file.h"
#include "base/log.h"

namespace gantry::agent {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr size_t kLogChunk = 256 * 1024;
constexpr size_t kDoneMemory = 100000;
// A worker's exit waits this long for its MIG instance to be destroyed (its processes,
// SIGKILLed, release the GPU within moments); then it is reported anyway, the instance
// still tried, and a worker placed over it fails saying why.
constexpr int64_t kMigReleaseWaitMs = 10000;
constexpr int64_t kMigRetryMs = 100;

using gantry::UrlEncode;

std::string RandomId() {
  std::random_device rd;
  char buf[17];
  std::snprintf(buf, sizeof buf, "%08x%08x", rd(), rd());
  return buf;
}

}  // namespace

json NvmlUsage(const WorkerShare& share, const std::vector<GpuInfo>& gpus,
               const std::function<bool(int)>& mine) {
  auto gpu = [&](int index) -> const GpuInfo* {
    for (const GpuInfo& g : gpus) {
      if (g.index == index) return g.lost ? nullptr : &g;  // a lost GPU tells nothing true
    }
    return nullptr;
  };
  if (share.gpus.empty()) return json();
  if (share.sharing == "exclusive") {
    double util = 0;
    int64_t used = 0;
    for (int i : share.gpus) {
      const GpuInfo* g = gpu(i);
      if (!g) return json();
      util += g->utilization;
      used += g->memory_used_bytes;
    }
    return {{"util", util / static_cast<double>(share.gpus.size())}, {"vram_used_bytes", used}};
  }
  const GpuInfo* g = gpu(share.gpus.front());
  if (!g) return json();
  if (share.sharing == "mig") {
    for (const MigInstance& m : g->mig) {
      if (m.uuid != share.mig_uuid || share.mig_uuid.empty()) continue;
      std::optional<double> util = m.utilization;
      if (!util && m.processes.sampled) {
        util = 0.0;
        for (const GpuProcess& p : m.processes.list) *util += p.sm_util;
      }
      int64_t used = m.memory_used_bytes;
      if (used < 0 && m.processes.listed) {
        used = 0;
        for (const GpuProcess& p : m.processes.list) used += std::max<int64_t>(0, p.vram_bytes);
      }
      if (!util || used < 0) return json();
      return {{"util", std::min(1.0, *util)}, {"vram_used_bytes", used}};
    }
    return json();
  }
  // MPS, time-slicing: the GPU's numbers are all its tenants'; its own processes tell.
  // Under an MPS daemon NVML's utilization samples name the MPS server, not its clients
  // (seen on an H100 with driver 580: the server sampled at 93-99%, the clients never), so
  // where no client has a sample, a worker whose processes are MPS clients counts as busy
  // as the GPU's processes that are not clients (its servers) together: an upper bound, so
  // that a busy share is never taken for idle; an idle share beside a busy one is reclaimed
  // once the server is idle.
  if (!g->processes.listed || !g->processes.sampled || share.share_milli <= 0) return json();
  double sm = 0, servers = 0;
  bool client = false, clients_sampled = false;
  int64_t used = 0;
  for (const GpuProcess& p : g->processes.list) {
    clients_sampled = clients_sampled || (p.mps_client && p.sm_util > 0);
    if (!mine(p.pid)) {
      if (!p.mps_client) servers += p.sm_util;
      continue;
    }
    sm += p.sm_util;
    client = client || p.mps_client;
    used += std::max<int64_t>(0, p.vram_bytes);
  }
  if (client && !clients_sampled) sm = std::max(sm, servers);
  return {{"util", std::min(1.0, sm * 1000.0 / share.share_milli)}, {"vram_used_bytes", used}};
}

json Agent::Usage(const Worker& w, int64_t now, const std::map<int, std::string>& owners) const {
  if (gpus_->emulated()) {
    // The job's emulation model, from the server: busy at `util` until idle_after_ms of
    // run time, then 0; its VRAM held throughout.
    const json& m = w.emulate;
    if (!m.is_object()) return json();
    const int64_t idle_after = m.value("idle_after_ms", int64_t{-1});
    const bool idle = idle_after >= 0 && now - w.started_ms >= idle_after;
    return {{"util", idle ? 0.0 : m.value("util", 0.0)},
            {"vram_used_bytes", m.value("vram_used_bytes", int64_t{0})}};
  }
  const std::string key = Key(w.job, w.run, w.rank);
  return NvmlUsage(w.share, last_gpus_, [&](int pid) {
    auto it = owners.find(pid);
    return it != owners.end() && it->second == key;
  });
}

std::map<int, std::string> Agent::GpuProcessOwners() const {
  std::set<int> pids;
  for (const GpuInfo& g : last_gpus_) {
    for (const GpuProcess& p : g.processes.list) pids.insert(p.pid);
    for (const MigInstance& m : g.mig) {
      for (const GpuProcess& p : m.processes.list) pids.insert(p.pid);
    }
  }
  std::map<int, std::string> owners;
  if (pids.empty()) return owners;
  std::map<pid_t, std::string> by_session;
  for (const auto& [key, w] : workers_) {
    if (!w.exited && w.pid > 1) by_session[w.pid] = key;
  }
  std::map<std::string, std::vector<pid_t>> in_cgroup;  // read when first needed
  for (int pid : pids) {
    if (auto it = by_session.find(SessionOf(pid)); it != by_session.end()) {
      owners[pid] = it->second;
      continue;
    }
    if (!cgroups_) continue;
    for (const auto& [key, w] : workers_) {
      if (w.exited || w.cgroup.empty()) continue;
      auto procs = in_cgroup.find(key);
      if (procs == in_cgroup.end()) procs = in_cgroup.emplace(key, cgroups_->Procs(w.cgroup)).first;
      if (std::find(procs->second.begin(), procs->second.end(), pid) != procs->second.end()) {
        owners[pid] = key;
        break;
      }
    }
  }
  return owners;
}

json GpuReportJson(const GpuInfo& g, int64_t idle_ms) {
  json mig = json::array();
  for (const MigInstance& m : g.mig) {
    mig.push_back({{"uuid", m.uuid}, {"profile", m.profile}, {"start", m.start}});
    if (m.gpu_instance_id >= 0) mig.back()["gi_id"] = m.gpu_instance_id;
  }
  json gj = {{"index", g.index},
             {"uuid", g.uuid},
             {"name", g.name},
             {"memory_bytes", g.memory_bytes},
             {"memory_used_bytes", g.memory_used_bytes},
             {"mig_mode", g.mig_mode},
             {"mig", mig},
             {"utilization", g.utilization},
             {"idle_ms", idle_ms},
             {"lost", g.lost},
             {"nvlink_peers", g.nvlink_peers}};
  if (!g.model.empty()) gj["model"] = g.model;
  return gj;
}

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

std::string Agent::Key(const std::string& job, int run, int rank) {
  return job + "\n" + std::to_string(run) + "\n" + std::to_string(rank);
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
  std::error_code ec;
  for (const char* sub : {"logs", "work", "workers"})
    fs::create_directories(fs::path(options_.state_dir) / sub, ec);
  if (ec) {
    Say("cannot create the state directory " + options_.state_dir + ": " + ec.message());
    return 1;
  }
  // Orphaned descendants of workers are re-parented to the agent (and reaped by it)
  // rather than to init, which in a container may never reap them.
  ::prctl(PR_SET_CHILD_SUBREAPER, 1);
  std::string no_cgroups;
  // The subtree is named by node and state directory (stable across restarts, distinct
  // for test clusters on one machine): gantry-h100-3.1a2b3c4d.
  uint32_t hash = 2166136261u;  // FNV-1a
  for (char c : fs::absolute(options_.state_dir).lexically_normal().string()) {
    hash = (hash ^ static_cast<unsigned char>(c)) * 16777619u;
  }
  char hex[9];
  std::snprintf(hex, sizeof hex, "%08x", hash);
  auto cgroups = Cgroups::Open(options_.cgroups, options_.node + "." + hex, &no_cgroups);
  if (!cgroups) {
    Say("cannot isolate workers: " + cgroups.error().ToString(), true);
    return 1;
  }
  cgroups_ = std::move(*cgroups);
  Say(cgroups_ ? "workers run in cgroups: " + cgroups_->Describe()
               : "workers are NOT isolated (--cgroups " + options_.cgroups +
                     "): jobs' memory_gb and cpus are not "
                     "enforced" +
                     (no_cgroups.empty() ? std::string() : ": " + no_cgroups),
      cgroups_ == nullptr);
  const bool fences = cgroups_ && cgroups_->constrains_devices();
  if (cgroups_ && !fences) {
    Say("workers' GPU devices are NOT constrained (a job may open GPUs not its own): " +
            cgroups_->devices_why(),
        true);
  }
  // MIG instances' access devices: denied to the MIG workers sharing a GPU but their own
  // instance's, and given to a container as --device. No mig-minors file: no MIG-capable
  // driver, so no MIG instance.
  const bool mig_driver = fs::exists(options_.proc + "/driver/nvidia-caps/mig-minors");
  if (auto caps = MigCaps::Load(options_.proc)) {
    mig_caps_ = std::move(*caps);
    if (fences) {
      Say("MIG instances are fenced from each other: " + std::to_string(mig_caps_->size()) +
          " access devices (nvidia-caps, major " + std::to_string(mig_caps_->major_number()) + ")");
    }
  } else if (mig_driver) {
    Say("MIG instances are NOT fenced from each other, nor given to containers as devices: " +
            caps.error().ToString(),
        true);
  }
  // What the heartbeat says of it, for `gantry nodes`.
  isolation_ = {{"cgroups", cgroups_ != nullptr}, {"gpu_devices", fences}};
  if (mig_driver) isolation_["mig"] = fences && mig_caps_.has_value();
  const std::string run_as =
      options_.run_as.empty() ? (::geteuid() == 0 ? "user" : "agent") : options_.run_as;
  if (run_as != "user" && run_as != "agent") {
    Say("--run-as: expected user or agent, got " + run_as);
    return 1;
  }
  run_as_user_ = run_as == "user";
  if (run_as_user_ && ::geteuid() != 0) {
    Say("--run-as user needs root (to become each job's user); this agent runs as uid " +
        std::to_string(::geteuid()));
    return 1;
  }
  Say(run_as_user_       ? "jobs run as the Unix account their token names (--run-as user)"
      : ::geteuid() == 0 ? "jobs run as root, the agent's user (--run-as agent)"
                         : "jobs run as uid " + std::to_string(::geteuid()) + ", the agent's user");
  // One agent per state directory; its id is the directory's, so the server takes a
  // restarted agent for the one it replaces (and its re-adopted workers with it) at once.
  lock_fd_ = ::open((fs::path(options_.state_dir) / "agent.lock").c_str(),
                    O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (lock_fd_ < 0 || ::flock(lock_fd_, LOCK_EX | LOCK_NB) != 0) {
    Say("another gantry-agent uses the state directory " + options_.state_dir + " (" +
        (lock_fd_ < 0 ? std::strerror(errno) : "its lock is held") + ")");
    return 1;
  }
  {
    const fs::path id_path = fs::path(options_.state_dir) / "agent_id";
    std::string id;
    std::ifstream(id_path) >> id;
    if (id.empty()) {
      WriteFileAtomically(id_path.string(), agent_id_ + "\n");
    } else {
      agent_id_ = id;
    }
  }
  // The shims' supervisor (ShimMain): this process, until it ends.
  WriteFileAtomically(
      (fs::path(options_.state_dir) / "agent.pid").string(),
      std::to_string(::getpid()) + " " + std::to_string(ProcessStartTime(::getpid())) + "\n");
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
      Heartbeat(last_heartbeat);
      next_heartbeat = Now() + heartbeat_ms_;
    }
    std::optional<json> answer;
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
  // Shutdown: stop every worker within its grace (bounded), then tell the server.
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
  fence_stop = true;
  fence.join();
  Say("stopped");
  return 0;
}

void Agent::WriteRecord(const Worker& w) {
  // All a successor needs to take the worker over (Readopt).
  json r = {{"job", w.job},
            {"seq", w.seq},
            {"run", w.run},
            {"rank", w.rank},
            {"pid", w.pid},
            {"start_time", w.start_time},
            {"log", w.log_path},
            {"cgroup", w.cgroup},
            {"status", w.status_path},
            {"grace_ms", w.grace_ms},
            {"stop_signal", w.stop_signal},
            {"out_path", w.out_path},
            {"out_user", w.out_user},
            {"uid", w.uid},
            {"gid", w.gid},
            {"groups", w.groups},
            {"script_path", w.script_path},
            {"container", w.container},
            {"memory_bytes", w.memory_bytes},
            {"emulate", w.emulate},
            {"share",
             {{"sharing", w.share.sharing},
              {"gpus", w.share.gpus},
              {"share_milli", w.share.share_milli},
              {"mig_uuid", w.share.mig_uuid}}}};
  if (w.stopping) {  // signalled: SIGKILL at this wall-clock time (ms)
    r["kill_at_ms"] = WallMs() + (w.kill_at - Now());
  }
  WriteFileAtomically(w.record_path, r.dump() + "\n");
}

bool Agent::Readopt(const json& r, Worker& w) {
  w.status_path = r.value("status", std::string());
  w.start_time = r.value("start_time", -2LL);
  if (w.status_path.empty() || w.pid <= 1 || w.start_time < 0) return false;
  if (!Running(w.pid, w.start_time)) return false;  // its shim, the same process, still runs
  w.grace_ms = r.value("grace_ms", int64_t{0});
  w.stop_signal = r.value("stop_signal", 0);
  w.out_path = r.value("out_path", std::string());
  w.out_user = r.value("out_user", false);
  w.uid = r.value("uid", uid_t{0});
  w.gid = r.value("gid", gid_t{0});
  w.groups = r.value("groups", std::vector<gid_t>{});
  w.script_path = r.value("script_path", std::string());
  w.cgroup = r.value("cgroup", std::string());
  w.container = r.value("container", std::string());
  w.memory_bytes = r.value("memory_bytes", int64_t{0});
  w.emulate = r.value("emulate", json());
  const json share = r.value("share", json::object());
  w.share.sharing = share.value("sharing", std::string("exclusive"));
  w.share.gpus = share.value("gpus", std::vector<int>{});
  w.share.share_milli = share.value("share_milli", 1000);
  w.share.mig_uuid = share.value("mig_uuid", std::string());
  w.started_ms = Now();
  w.adopted = true;
  if (r.contains("kill_at_ms")) {  // signalled already: only its SIGKILL is left to send
    w.stopping = true;
    w.kill_at = Now() + std::max<int64_t>(0, r.value("kill_at_ms", int64_t{0}) - WallMs());
  }
  std::lock_guard lk(fence_mu_);
  live_[w.pid] = Live{.grace_ms = w.grace_ms,
                      .signal = w.stop_signal > 0 ? w.stop_signal : options_.preempt_signal,
                      .cgroup = w.cgroup};
  return true;
}

void Agent::Recover() {
  std::error_code ec;
  // What the workers re-adopted hold stays: their cgroups, containers and MIG instances.
  std::set<std::string> kept_cgroups, kept_containers;
  std::map<std::string, std::string> kept_migs;  // MIG UUID -> its worker (Key)
  int readopted = 0;
  for (const auto& entry : fs::directory_iterator(fs::path(options_.state_dir) / "workers", ec)) {
    if (entry.path().extension() != ".json") continue;
    std::ifstream in(entry.path());
    json r = json::parse(in, nullptr, false);
    if (!r.is_object()) {
      fs::remove(entry.path(), ec);
      continue;
    }
    Worker w;
    w.job = r.value("job", std::string());
    w.seq = r.value("seq", int64_t{0});
    w.run = r.value("run", 0);
    w.rank = r.value("rank", 0);
    w.pid = static_cast<pid_t>(r.value("pid", 0));
    w.log_path = r.value("log", std::string());
    w.record_path = entry.path().string();
    const std::string key = Key(w.job, w.run, w.rank);
    const std::string what =
        "job " + w.job + " run " + std::to_string(w.run) + " rank " + std::to_string(w.rank);
    if (Readopt(r, w)) {
      kept_cgroups.insert(w.cgroup);
      kept_containers.insert(w.container);
      if (!w.share.mig_uuid.empty()) kept_migs[w.share.mig_uuid] = key;
      Say(what + ": re-adopted, still running (pid " + std::to_string(w.pid) + ")");
      ++readopted;
      workers_[key] = w;
      continue;
    }
    // Its shim is gone: it says how the worker ended, unless it was killed itself.
    const std::optional<ShimStatus> status =
        ReadShimStatus(w.status_path);  // none for "": an older record
    const long long started = w.start_time >= 0 ? w.start_time : r.value("start_time", -2LL);
    // What the worker started may still run in its group. Kill them all.
    const std::vector<pid_t> left =
        w.pid > 1 && started >= 0 ? GroupMembersSince(w.pid, started) : std::vector<pid_t>{};
    const bool leader = std::find(left.begin(), left.end(), w.pid) != left.end();
    for (pid_t p : left) ::kill(p, SIGKILL);
    // Its cgroup holds also what left the group; killing it reaches everything.
    const std::string cgroup = r.value("cgroup", std::string());
    const int in_cgroup = cgroups_ && !cgroup.empty() ? cgroups_->KillAndRemove(cgroup) : 0;
    const size_t killed = std::max<size_t>(left.size(), static_cast<size_t>(in_cgroup));
    const std::string leftovers =
        killed == 0 ? "" : "; killed " + std::to_string(killed) + " process(es) it left behind";
    w.exited = true;
    if (status) {  // its own end: reported as it was
      w.exit_code = status->exit_code;
      w.signal = status->signal;
      w.lost = status->fenced;
      w.note = (status->fenced ? "stopped by its shim: gantry-agent was down for its lease"
                               : "ended while gantry-agent was down") +
               leftovers;
    } else {
      w.note = leader        ? "left running by a previous gantry-agent; killed"
               : killed == 0 ? "ended while gantry-agent was down"
                             : "ended while gantry-agent was down" + leftovers;
      w.lost = true;
      w.exit_code = 0;
      w.signal = SIGKILL;
    }
    Say(what + ": " + w.note);
    workers_[key] = w;
  }
  LoadMigs(kept_migs);
  // Re-adopted workers are fenced from the previous agent's last answered heartbeat (the
  // lease file's time) until this one is answered: a successor that cannot reach the
  // server must not let them run on past the server's node timeout.
  if (readopted > 0) {
    const std::optional<LeaseFile> lease =
        ReadLease((fs::path(options_.state_dir) / "lease").string());
    if (lease && lease->lease_ms > 0) {
      lease_ms_ = lease->lease_ms;
      node_timeout_ms_ = lease->node_timeout_ms;
      last_ok_ = std::max<int64_t>(1, Now() - lease->age_ms);
    }
  }
  // Containers of this node that outlived a previous agent, but the re-adopted workers'.
  // Nothing to do, and no error, where podman is not installed.
  if (auto names = NodeContainers(options_.container, options_.node)) {
    for (const std::string& name : *names) {
      if (kept_containers.count(name)) continue;
      auto rm = RunCapture(ContainerRemoveArgv(options_.container, name));
      Say(rm ? "removed container " + name + " left by a previous gantry-agent"
             : "cannot remove container " + name + ": " + rm.error().ToString(),
          !rm);
    }
  } else if (names.error().message.rfind("cannot run it", 0) != 0) {
    Say("cannot list this node's containers: " + names.error().ToString(), true);
  }
  // Worker cgroups no record names (a crash between making one and writing the record).
  if (cgroups_) {
    for (const std::string& name : cgroups_->Names()) {
      if (kept_cgroups.count(name)) continue;
      if (const int killed = cgroups_->KillAndRemove(name)) {
        Say("killed " + std::to_string(killed) + " process(es) left in cgroup " + name);
      }
    }
  }
}

void Agent::RemoveCgroups() {
  std::erase_if(unremoved_, [&](const std::string& name) {
    cgroups_->Signal(name, SIGKILL);
    return cgroups_->Remove(name);
  });
}

void Agent::Kill(pid_t pid, const std::string& cgroup) const {
  SignalGroup(pid, SIGKILL);
  if (cgroups_ && !cgroup.empty()) cgroups_->Signal(cgroup, SIGKILL);
}

void Agent::ReapChildren() {
  for (const Exited& e : Reap()) {
    for (auto& [key, w] : workers_) {
      if (w.pid != e.pid || w.exited || w.adopted) continue;
      Ended(w, e.exit_code, e.signal);
      break;
    }
  }
  // Re-adopted workers: their shims are not this agent's children.
  for (auto& [key, w] : workers_) {
    if (!w.adopted || w.exited || Running(w.pid, w.start_time)) continue;
    if (const std::optional<ShimStatus> st = ReadShimStatus(w.status_path)) {
      if (st->fenced) w.lose_on_exit = true;
      Ended(w, st->exit_code, st->signal);
    } else {  // the shim was killed (with its group: the fence, a stop's SIGKILL)
      Ended(w, 0, SIGKILL);
    }
  }
}

void Agent::Ended(Worker& w, int exit_code, int signal) {
  SignalGroup(w.pid, SIGKILL);  // whatever the worker left behind in its group
  // Its container: a `podman run` that was killed leaves it to conmon (after a clean
  // exit --rm has removed it, and this removal is a no-op).
  if (!w.container.empty()) SpawnQuietly(ContainerRemoveArgv(options_.container, w.container));
  if (cgroups_ && !w.cgroup.empty()) {  // or in its cgroup
    // What it left is killed by RemoveCgroups, next in the loop, and reaped by this
    // agent (the subreaper); the cgroup goes once it is empty.
    unremoved_.push_back(w.cgroup);
    if (cgroups_->OomKilled(w.cgroup)) {
      w.note = "out of memory: it reached its memory limit of " +
               std::to_string(static_cast<double>(w.memory_bytes) / 1e9).substr(0, 6) +
               " GB (memory_gb) and the kernel killed it";
    }
  }
  bool fenced = false;
  {
    std::lock_guard lk(fence_mu_);
    fenced = fenced_.erase(w.pid) > 0;
    live_.erase(w.pid);
  }
  w.exited = true;
  exits_pending_ = true;
  w.exit_code = exit_code;
  w.signal = signal;
  w.lost = w.lose_on_exit || fenced;
  if (fenced && w.note.empty())
    w.note = "stopped by the agent when the server could not be reached";
  Say("job " + w.job + " run " + std::to_string(w.run) + " rank " + std::to_string(w.rank) +
      (signal ? " killed by signal " + std::to_string(signal)
              : " exited with code " + std::to_string(exit_code)));
}

void Agent::Stop(Worker& w, int sig, int64_t grace_ms, int64_t now) {
  if (w.exited || w.killed) return;
  if (w.stopping) {  // signalled already: only a shorter grace (a forced cancel) changes anything;
    // each answer restates the grace left, a little less by the time it arrives: ignored.
    if (now + std::max<int64_t>(0, grace_ms) + 1000 < w.kill_at) {
      w.kill_at = now + std::max<int64_t>(0, grace_ms);
      if (grace_ms <= 0) {
        Kill(w.pid, w.cgroup);
        w.killed = true;
      } else if (!w.record_path.empty()) {
        WriteRecord(w);
      }
    }
    return;
  }
  w.stopping = true;
  w.kill_at = now + std::max<int64_t>(0, grace_ms);
  if (grace_ms <= 0 || sig == SIGKILL) {
    Kill(w.pid, w.cgroup);
    w.killed = true;
  } else {
    SignalGroup(w.pid, sig);
    if (!w.record_path.empty()) WriteRecord(w);  // a successor keeps its deadline: no second signal
  }
}

void Agent::Escalate(int64_t now) {
  for (auto& [key, w] : workers_) {
    if (w.stopping && !w.exited && !w.killed && now >= w.kill_at) {
      Kill(w.pid, w.cgroup);
      w.killed = true;
    }
  }
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
    if (fd < 0) continue;
    struct stat st {};
    const int64_t size = ::fstat(fd, &st) == 0 ? static_cast<int64_t>(st.st_size) : -1;
    for (int chunk = 0; chunk < 8 && w.uploaded < size; ++chunk) {
      std::string data(static_cast<size_t>(std::min<int64_t>(size - w.uploaded, kLogChunk)), '\0');
      const ssize_t got_bytes = ::pread(fd, data.data(), data.size(), w.uploaded);
      if (got_bytes <= 0) break;
      data.resize(static_cast<size_t>(got_bytes));
      const std::string path = "/v1/agents/" + UrlEncode(options_.node) +
                               "/logs?job=" + UrlEncode(w.job) + "&run=" + std::to_string(w.run) +
                               "&rank=" + std::to_string(w.rank) +
                               "&offset=" + std::to_string(w.uploaded);
      auto res = http_->Post(path.c_str(), data, "application/octet-stream");
      if (!res) {  // the server is away: try again at the next heartbeat
        ::close(fd);
        return;
      }
      if (res->status == 404) {
        w.uploaded = size;  // the server forgot the job: nothing to upload to
        break;
      }
      if (res->status != 200) break;
      json body = json::parse(res->body, nullptr, false);
      const int64_t got = body.is_object() ? body.value("size", int64_t{-1}) : -1;
      if (got < 0) break;
      w.uploaded = std::min(got, size);
    }
    ::close(fd);
  }
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
  std::map<std::string, json> usage;
  const std::map<int, std::string> owners = GpuProcessOwners();
  for (const auto& [key, w] : workers_) {
    if (w.exited) continue;
    json u = Usage(w, now, owners);
    if (u.is_null()) continue;
    const std::vector<int>& held = w.share.gpus;
    if (gpus_->emulated() && w.share.sharing == "exclusive") {
      for (GpuInfo& g : last_gpus_) {
        if (std::find(held.begin(), held.end(), g.index) == held.end()) continue;
        g.utilization = u.value("util", 0.0);
        g.memory_used_bytes =
            u.value("vram_used_bytes", int64_t{0}) / static_cast<int64_t>(held.size());
      }
    }
    usage[key] = std::move(u);
  }
  json gpus = json::array();
  for (const GpuInfo& g : last_gpus_) {
    // Idle time: how long NVML has sampled 0% utilization (emulated GPUs are always idle).
    auto it = busy_at_.emplace(g.index, now).first;
    if (g.utilization > 0) it->second = now;
    gpus.push_back(GpuReportJson(g, now - it->second));
  }
  json running = json::array(), exits = json::array();
  std::vector<std::string> reported;
  for (const auto& [key, w] : workers_) {
    if (!w.exited) {
      running.push_back({{"job", w.job}, {"run", w.run}, {"rank", w.rank}, {"pid", w.pid}});
      if (auto u = usage.find(key); u != usage.end()) running.back().update(u->second);
    } else {
      std::string mig_note;
      if (MigPending(key, now, leaving, &mig_note)) continue;  // reported once its instance is gone
      exits.push_back({{"job", w.job},
                       {"run", w.run},
                       {"rank", w.rank},
                       {"exit_code", w.exit_code},
                       {"signal", w.signal},
                       {"lost", w.lost},
                       {"note", w.note + mig_note}});
      if (!w.drain.empty()) exits.back()["drain"] = w.drain;
      reported.push_back(key);
    }
  }
  json body = {{"agent_id", agent_id_},
               {"gpus", gpus},
               {"running", running},
               {"exits", exits},
               {"isolation", isolation_}};
  if (!options_.address.empty()) body["address"] = options_.address;
  if (leaving) body["leaving"] = true;
  auto res = http_->Post(("/v1/agents/" + UrlEncode(options_.node) + "/heartbeat").c_str(),
                         body.dump(), "application/json");
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
  json reply = json::parse(res->body, nullptr, false);
  if (res->status == 503 && reply.is_object() && reply.value("role", "") == "standby") {
    // A standby: go to the leader it names (or the next server), at once.
    const std::string err = servers_.current() + " is a standby";
    if (err != last_error_)
      Say(err + (reply.value("leader", "").empty()
                     ? ""
                     : "; the leader is " + reply.value("leader", "")));
    last_error_ = err;
    servers_.Failed(reply.value("leader", ""));
    Connect();
    return;
  }
  if (res->status != 200 || !reply.is_object()) {
    const std::string err = "server said " + std::to_string(res->status) + ": " +
                            (reply.is_object() ? reply.value("error", res->body) : res->body);
    if (err != last_error_) Say(err);
    last_error_ = err;
    return;
  }
  if (!last_error_.empty()) Say("connected");
  last_error_.clear();
  last_ok_ = now;
  heartbeat_ms_ = std::clamp<int64_t>(reply.value("heartbeat_ms", heartbeat_ms_), 10, 60000);
  const int64_t lease = reply.value("lease_ms", int64_t{0});
  lease_ms_ = lease;
  node_timeout_ms_ = reply.value("node_timeout_ms", int64_t{0});
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
    workers_.erase(it);
    Remember(key);
  }
  Apply(reply, now);
}

void Agent::Apply(const json& answer, int64_t now) {
  const std::string instance = answer.value("instance", std::string());
  const int64_t epoch = answer.value("epoch", int64_t{0});  // 0: a gantryd that does not say
  const int64_t version = answer.value("version", int64_t{-1});
  {
    std::lock_guard lk(watch_mu_);
    if (epoch < applied_epoch_) return;  // from a leader since replaced
    if (epoch == applied_epoch_ && instance == applied_instance_ && version < applied_version_)
      return;
    applied_epoch_ = epoch;
    applied_instance_ = instance;
    applied_version_ = version;
  }
  Reconcile(answer.value("workers", json::array()), now);
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
    const std::string path = "/v1/agents/" + UrlEncode(options_.node) +
                             "/watch?instance=" + UrlEncode(instance) +
                             "&version=" + std::to_string(version) + "&timeout_ms=20000";
    auto res = watch_http_->Get(path.c_str());
    json body = res && res->status == 200 ? json::parse(res->body, nullptr, false) : json();
    if (!body.is_object()) {
      // The server is away or refused: heartbeats report that; try again shortly.
      for (int i = 0; i < 25 && !stop.load(); ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      continue;
    }
    {
      std::lock_guard lk(watch_mu_);
      watched_ = std::move(body);
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

void Agent::Reconcile(const json& desired, int64_t now) {
  std::set<std::string> wanted;
  for (const json& e : desired) {
    const std::string key =
        Key(e.at("job").get<std::string>(), e.at("run").get<int>(), e.at("rank").get<int>());
    wanted.insert(key);
    const bool run = e.value("action", std::string("run")) == "run";
    auto it = workers_.find(key);
    if (run) {
      if (it == workers_.end() && !done_.count(key)) StartWorker(e, now);
      continue;
    }
    const int64_t grace = e.value("grace_ms", int64_t{0});
    if (it != workers_.end()) {
      Stop(it->second,
           it->second.stop_signal > 0 ? it->second.stop_signal : options_.preempt_signal, grace,
           now);
    } else if (!done_.count(key)) {
      // Stopped before it ever started here: report it ended, so the server need not wait.
      Worker w;
      w.job = e.at("job").get<std::string>();
      w.seq = e.value("seq", int64_t{0});
      w.run = e.at("run").get<int>();
      w.rank = e.at("rank").get<int>();
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

void Agent::StartWorker(const json& e, int64_t now) {
  Worker w;
  w.job = e.at("job").get<std::string>();
  w.seq = e.value("seq", int64_t{0});
  w.run = e.at("run").get<int>();
  w.rank = e.at("rank").get<int>();
  w.grace_ms = e.value("grace_ms", int64_t{0});
  const std::string stem =
      std::to_string(w.seq) + "-" + std::to_string(w.run) + "-" + std::to_string(w.rank);
  w.log_path = (fs::path(options_.state_dir) / "logs" / (stem + ".log")).string();
  w.record_path = (fs::path(options_.state_dir) / "workers" / (stem + ".json")).string();
  w.status_path = (fs::path(options_.state_dir) / "workers" / (stem + ".exit")).string();
  const std::string key = Key(w.job, w.run, w.rank);

  LaunchSpec spec;
  spec.argv = e.value("command", std::vector<std::string>{});
  const json env = e.value("env", json::object());
  for (const auto& [k, v] : env.items()) {
    if (v.is_string()) spec.env.emplace_back(k, v.get<std::string>());
  }
  spec.workdir = e.value("workdir", std::string());
  spec.own_workdir = spec.workdir.empty();
  if (spec.own_workdir)
    spec.workdir = (fs::path(options_.state_dir) / "work" / std::to_string(w.seq)).string();
  spec.log_path = w.log_path;
  w.stop_signal = e.value("signal", 0);
  // sbatch -o/-e: files on this node, relative to the workdir; the worker opens them as
  // its user (Launch), so it can write only where that user may.
  for (const auto& [field, out] :
       {std::pair<const char*, std::string*>{"stdout", &spec.stdout_path},
        {"stderr", &spec.stderr_path}}) {
    const std::string p = e.value(field, std::string());
    if (!p.empty()) *out = fs::path(p).is_absolute() ? p : (fs::path(spec.workdir) / p).string();
  }
  w.out_path = spec.stdout_path;

  // GPUs: what CUDA may see, by UUID (stable across reboots, unlike indexes).
  const json alloc = e.value("alloc", json::object());
  const std::string sharing = alloc.value("sharing", std::string("exclusive"));
  std::string visible, indexes, problem, visible_index;
  auto gpu = [&](int index) -> const GpuInfo* {
    for (const GpuInfo& g : last_gpus_) {
      if (g.index != index) continue;
      indexes += (indexes.empty() ? "" : ",") + std::to_string(index);
      return &g;
    }
    problem = "GPU " + std::to_string(index) + " is not on this node";
    return nullptr;
  };
  if (sharing == "exclusive") {
    for (int i : alloc.value("gpus", std::vector<int>{})) {
      if (const GpuInfo* g = gpu(i)) visible += (visible.empty() ? "" : ",") + g->uuid;
    }
  } else if (const GpuInfo* g = gpu(alloc.value("gpu", -1))) {
    if (sharing == "mig") {
      const std::string profile = alloc.value("mig", std::string());
      const int start = alloc.value("start", -1);
      const std::string where = profile + " at memory slice " + std::to_string(start) + " on GPU " +
                                std::to_string(g->index) + " (" + g->uuid + ")";
      if (alloc.value("create", false)) {  // a mig_managed pool: this agent lays the GPU out
        const MigPlacement want{.profile = profile,
                                .start = start,
                                .memory_slices = alloc.value("memory_slices", 0),
                                .compute_slices = alloc.value("compute_slices", 0)};
        auto mig = MigFor(*g, want, key, w.job, now);
        if (mig) {
          visible = *mig;
        } else {
          problem = "cannot create MIG instance " + where + ": " + mig.error().message;
          w.drain = problem;  // the GPU cannot take it now: requeue the job, drain the node
        }
      } else {
        visible = gpus_->MigUuid(*g, profile, start);
        if (visible.empty()) {
          problem = "no MIG instance " + where +
                    " (its pool is not mig_managed: the agent uses instances laid out beforehand)";
        }
      }
      w.share.mig_uuid = visible;
      spec.env.emplace_back("GANTRY_MIG_PROFILE", profile);
    } else {
      visible = g->uuid;
      const int milli = alloc.value("share_milli", 0);
      w.share.share_milli = milli;
      if (sharing == "mps") {
        // MPS: the share as a percentage of the GPU's threads, and the VRAM as a pinned
        // memory limit on (visible) device 0.
        spec.env.emplace_back(
            "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE",
            std::to_string(std::max(1, static_cast<int>(std::lround(milli / 10.0)))));
        const int64_t vram = alloc.value("vram_bytes", int64_t{0});
        if (vram > 0) {
          spec.env.emplace_back("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT",
                                "0=" + std::to_string((vram + (1 << 20) - 1) >> 20) + "M");
        }
      }
      spec.env.emplace_back("GANTRY_GPU_SHARE", std::to_string(milli / 1000.0).substr(0, 5));
    }
  }
  spec.env.emplace_back("CUDA_VISIBLE_DEVICES", visible);
  spec.env.emplace_back(
      "GANTRY_GPUS", indexes);  // the node's GPU indexes (MIG, MPS: the parent), as SLURM_JOB_GPUS
  for (std::stringstream in(indexes); std::getline(in, visible_index, ',');) {
    w.share.gpus.push_back(std::stoi(visible_index));
  }
  w.share.sharing = sharing;
  w.emulate = e.value("emulate", json());
  spec.env.emplace_back("NVIDIA_VISIBLE_DEVICES", visible.empty() ? "void" : visible);
  spec.env.emplace_back("GANTRY_NODE", options_.node);
  spec.env.emplace_back("GANTRY_LOG", w.log_path);

  // Its user: the account the job's token names, looked up here (names, not numbers,
  // are what sites keep in step across nodes).
  const std::string user = e.value("user", std::string());
  if (problem.empty() && !spec.own_workdir && !fs::path(spec.workdir).is_absolute()) {
    // gantryd refuses these; one from an older server would resolve against this agent's
    // own directory, and be made there as root.
    problem = "workdir " + spec.workdir + " is not an absolute path";
  }
  if (problem.empty() && run_as_user_) {
    if (user.empty()) {
      problem =
          "the job names no user (its token has none) and this agent runs jobs as their users "
          "(--run-as user)";
    } else {
      struct passwd pw {
      }, *found = nullptr;
      std::vector<char> buf(16384);
      if (::getpwnam_r(user.c_str(), &pw, buf.data(), buf.size(), &found) != 0 ||
          found == nullptr) {
        problem = "user " + user + " has no Unix account on this node";
      } else {
        spec.as_user = true;
        spec.uid = pw.pw_uid;
        spec.gid = pw.pw_gid;
        int n = 64;
        spec.groups.resize(static_cast<size_t>(n));
        if (::getgrouplist(user.c_str(), pw.pw_gid, spec.groups.data(), &n) < 0) {
          spec.groups.resize(static_cast<size_t>(n));
          ::getgrouplist(user.c_str(), pw.pw_gid, spec.groups.data(), &n);
        }
        spec.groups.resize(static_cast<size_t>(std::max(n, 0)));
        // The user's, not the agent's (root's), unless the job set them.
        for (auto [k, v] : {std::pair<std::string, std::string>{"HOME", pw.pw_dir},
                            {"USER", user},
                            {"LOGNAME", user}}) {
          bool set = false;
          for (const auto& kv : spec.env) set |= kv.first == k;
          if (!set) spec.env.emplace_back(k, v);
        }
      }
    }
  }
  // sbatch: the batch script is written here (as Slurm's slurmd keeps it in its spool),
  // owned by the job's user, and run with the job's command as its arguments.
  const std::string script = e.value("script", std::string());
  if (problem.empty() && !script.empty()) {
    w.script_path = (fs::path(options_.state_dir) / "scripts" / (stem + ".sh")).string();
    std::error_code ec;
    fs::create_directories(fs::path(w.script_path).parent_path(), ec);
    {
      std::ofstream f(w.script_path, std::ios::binary | std::ios::trunc);
      f << script;
      if (!f.flush()) problem = "cannot write the batch script " + w.script_path;
    }
    if (problem.empty() &&
        ((spec.as_user && ::chown(w.script_path.c_str(), spec.uid, spec.gid) != 0) ||
         ::chmod(w.script_path.c_str(), 0500) != 0)) {
      problem =
          "cannot give the batch script " + w.script_path + " to its user: " + std::strerror(errno);
    }
    spec.argv.insert(spec.argv.begin(), w.script_path);
  }
  // Its cgroup, with the job's limits (memory_gb, cpus, or the pool's defaults).
  const json limits = e.value("limits", json::object());
  w.memory_bytes = limits.value("memory_bytes", int64_t{0});
  const std::string image = e.value("image", std::string());
  if (problem.empty() && cgroups_) {
    // Its GPUs' device files only. Not for a container: its devices are podman's --device,
    // and the runtime podman starts from this cgroup must make those nodes.
    auto join =
        cgroups_->Create(stem, {.memory_bytes = w.memory_bytes,
                                .cpus_milli = limits.value("cpus_milli", int64_t{0}),
                                .denied_devices = image.empty() ? DeniedDevices(w.share, w.job)
                                                                : std::vector<CharDevice>{}});
    if (join) {
      w.cgroup = stem;
      spec.join = std::move(*join);
    } else {
      problem = join.error().ToString();
    }
  }
  // An image: the same command in a container, `podman run` in the foreground as the
  // worker. It runs as root (rootful podman), the job as its user inside.
  if (problem.empty() && !image.empty()) {
    // gantryd refuses such names; an agent runs none it is sent either (podman runs as root).
    if (const std::string why = ImageReferenceProblem(image); !why.empty())
      problem = "image " + image + ": " + why;
  }
  if (problem.empty() && !image.empty()) {
    ContainerSpec c{
        .name = ContainerName(options_.node, w.seq, w.run, w.rank),
        .node = options_.node,
        .job = w.job,
        .image = image,
        .command = spec.argv,
        .env = spec.env,
        .workdir = spec.workdir,
        .mounts = {},
        .devices = {},
        .memory_bytes = w.memory_bytes,
        .cpus_milli = limits.value("cpus_milli", int64_t{0}),
        .user = spec.as_user ? std::to_string(spec.uid) + ":" + std::to_string(spec.gid) : ""};
    if (!w.script_path.empty()) c.mounts.push_back(w.script_path);
    if (gpus_->Describe().rfind("emulated", 0) != 0) {  // emulated GPUs have no devices
      std::vector<std::string> uuids, nodes;
      for (std::stringstream in(visible); std::getline(in, visible_index, ',');)
        uuids.push_back(visible_index);
      for (const GpuInfo& g : last_gpus_) {  // by minor number: /dev/nvidiaN need not be GPU N
        if (std::find(w.share.gpus.begin(), w.share.gpus.end(), g.index) == w.share.gpus.end())
          continue;
        nodes.push_back("/dev/nvidia" + std::to_string(g.minor >= 0 ? g.minor : g.index));
        if (const auto mig = MigDevices(g, w.share.mig_uuid)) {
          nodes.insert(nodes.end(), {MigCaps::Path(mig->first), MigCaps::Path(mig->second)});
        }
      }
      c.devices = ContainerGpuDevices(uuids, nodes);
    }
    // Mounted as it is: made first as Launch would (as the job's user, unless it is ours).
    if (Status made = MakeWorkdir(spec); !made) problem = made.error().ToString();
    w.container = c.name;
    spec.argv = ContainerArgv(options_.container, c);
    spec.files_as_user = spec.as_user;  // podman runs as us; -o/-e are opened as the user
    spec.as_user = false;
    // The job's variables are the container's (--env above), not podman's: podman runs as
    // the agent, and a job's LD_PRELOAD or PATH (which finds `podman`) would run the
    // user's code as root.
    spec.env.clear();
  }
  if (!problem.empty()) {
    std::ofstream(w.log_path, std::ios::app) << "gantry-agent: cannot start: " << problem << "\n";
    w.exited = true;
    w.exit_code = 127;
    w.lost = !w.drain.empty();  // not the job's fault: requeued, not failed
    w.note = problem;
    Say("job " + w.job + ": " + problem, true);
    workers_[key] = w;
    return;
  }
  // What of its output the agent uploads, it reads as the job's user (sbatch -o may name
  // any file: /etc/shadow must not come back as a job's log).
  w.out_user = spec.as_user || spec.files_as_user;
  w.uid = spec.uid;
  w.gid = spec.gid;
  w.groups = spec.groups;
  // Through a shim, so that the worker outlives an agent restart (launcher.h, ShimMain).
  spec.shim_program = "/proc/self/exe";
  spec.shim_status = w.status_path;
  spec.shim_lease = (fs::path(options_.state_dir) / "lease").string();
  spec.shim_agent = (fs::path(options_.state_dir) / "agent.pid").string();
  spec.shim_signal = w.stop_signal > 0 ? w.stop_signal : options_.preempt_signal;
  spec.shim_grace_ms = w.grace_ms;
  {
    std::error_code ec;
    fs::remove(w.status_path, ec);  // a previous run's, with the same stem
  }
  auto pid = Launch(spec);
  if (!pid) {
    if (!w.cgroup.empty()) cgroups_->KillAndRemove(w.cgroup);
    w.exited = true;
    w.exit_code = 127;
    w.note = pid.error().ToString();
    Say("job " + w.job + ": cannot start: " + w.note, true);
    workers_[key] = w;
    return;
  }
  w.pid = *pid;
  w.start_time = ProcessStartTime(w.pid);
  w.started_ms = now;
  {
    std::lock_guard lk(fence_mu_);
    live_[w.pid] = Live{.grace_ms = w.grace_ms,
                        .signal = w.stop_signal > 0 ? w.stop_signal : options_.preempt_signal,
                        .cgroup = w.cgroup};
  }
  WriteRecord(w);
  Say("job " + w.job + " run " + std::to_string(w.run) + " rank " + std::to_string(w.rank) +
      " started, pid " + std::to_string(w.pid) +
      (visible.empty() ? "" : ", CUDA_VISIBLE_DEVICES=" + visible));
  workers_[key] = w;
}

std::vector<CharDevice> Agent::DeniedDevices(const WorkerShare& share, const std::string& job) {
  std::vector<CharDevice> denied;
  if (!cgroups_ || !cgroups_->constrains_devices()) return denied;  // said at start
  for (const GpuInfo& g : last_gpus_) {
    if (g.minor < 0) continue;  // no device file known (emulation)
    if (std::find(share.gpus.begin(), share.gpus.end(), g.index) == share.gpus.end()) {
      denied.push_back({kNvidiaMajor, g.minor});  // another GPU's /dev/nvidiaN
      continue;
    }
    // Its own GPU in MIG mode: every instance's access devices but its own instance's (a
    // worker given the whole GPU gets none: a GPU in MIG mode computes only in instances).
    // Instances made later for other workers are covered too: the driver lists all it could make.
    if (!g.mig_mode || !mig_caps_) continue;
    const std::vector<CharDevice> caps = mig_caps_->OnGpu(g.minor);
    const auto mine = MigDevices(g, share.mig_uuid);
    if (caps.empty() || (!share.mig_uuid.empty() && !mine)) {
      Say("job " + job + ": the MIG instances of GPU " + std::to_string(g.index) +
              " are NOT fenced from it" +
              (share.mig_uuid.empty() ? std::string() : " (in " + share.mig_uuid + ")") + ": " +
              (caps.empty()
                   ? "the driver's mig-minors lists no access devices for /dev/nvidia" +
                         std::to_string(g.minor)
                   : std::string(
                         "NVML or the driver did not tell its GPU and compute instance's devices")),
          true);
      continue;
    }
    for (const CharDevice& d : caps) {
      if (!mine || (d != mine->first && d != mine->second)) denied.push_back(d);
    }
  }
  return denied;
}

std::optional<std::pair<CharDevice, CharDevice>> Agent::MigDevices(const GpuInfo& gpu,
                                                                   const std::string& uuid) const {
  if (uuid.empty() || !mig_caps_ || gpu.minor < 0) return std::nullopt;
  int gi = -1, ci = -1;
  if (auto made = migs_.find(uuid); made != migs_.end()) {
    gi = static_cast<int>(made->second.made.gpu_instance);
    ci = static_cast<int>(made->second.made.compute_instance);
  } else {
    for (const MigInstance& m : gpu.mig) {
      if (m.uuid == uuid) std::tie(gi, ci) = std::pair{m.gpu_instance_id, m.compute_instance_id};
    }
  }
  if (gi < 0 || ci < 0) return std::nullopt;
  return mig_caps_->Instance(gpu.minor, gi, ci);
}

Result<std::string> Agent::MigFor(const GpuInfo& g, const MigPlacement& want,
                                  const std::string& key, const std::string& job, int64_t now) {
  const auto overlaps = [&](int start, int size) {
    return start < want.start + std::max(want.memory_slices, 1) &&
           want.start < start + std::max(size, 1);
  };
  ReleaseMigs(now, /*now_or_never=*/true);  // an ended worker's instance in the way goes first
  for (const auto& [uuid, h] : migs_) {
    if (h.made.gpu != g.index || !overlaps(h.made.start, h.made.size)) continue;
    return Error{"mig", "MIG instance " + uuid + " (" + h.made.profile + " at memory slice " +
                            std::to_string(h.made.start) + "), which this agent made for " +
                            (h.owner.empty() ? "a worker now gone" : "job " + h.job) +
                            ", is still there" + (h.error.empty() ? "" : ": " + h.error)};
  }
  if (const MigInstance* m = FindMig(g, want.profile, want.start)) {
    // Laid out by someone else (an administrator, a MIG manager): used as it is, never destroyed.
    for (const auto& [k, w] : workers_) {
      if (!w.exited && w.share.mig_uuid == m->uuid) {
        return Error{"mig", "MIG instance " + m->uuid + " is in use by job " + w.job + " here"};
      }
    }
    return m->uuid;
  }
  auto made = gpus_->CreateMig(g, want);
  if (!made) return made.error();
  HeldMig& h = migs_[made->uuid];
  h.made = *made;
  h.owner = key;
  h.job = job;
  SaveMigs();
  Say("created MIG instance " + made->uuid + " (" + made->profile + " at memory slice " +
      std::to_string(made->start) + ") on GPU " + std::to_string(g.index) + " for job " + job);
  return made->uuid;
}

void Agent::ReleaseMigs(int64_t now, bool now_or_never) {
  bool changed = false;
  for (auto it = migs_.begin(); it != migs_.end();) {
    HeldMig& h = it->second;
    if (!h.owner.empty()) {
      auto w = workers_.find(h.owner);
      if (w != workers_.end() && !w->second.exited) {
        ++it;
        continue;  // still running on it
      }
      if (h.ended_at < 0) h.ended_at = now;
    }
    if (!now_or_never && now < h.next_try) {
      ++it;
      continue;
    }
    if (Status s = gpus_->DestroyMig(h.made); !s) {
      if (h.error != s.error().message) {
        Say("cannot destroy MIG instance " + it->first + " yet: " + s.error().message, true);
      }
      h.error = s.error().message;
      h.next_try = now + kMigRetryMs;
      ++it;
      continue;
    }
    Say("destroyed MIG instance " + it->first + " (" + h.made.profile + " at memory slice " +
        std::to_string(h.made.start) + ") on GPU " + std::to_string(h.made.gpu));
    // Gone now, whatever the last sample says: never handed to the next worker.
    for (GpuInfo& g : last_gpus_) {
      std::erase_if(g.mig, [&](const MigInstance& m) { return m.uuid == it->first; });
    }
    if (!h.owner.empty()) exits_pending_ = true;  // its worker's exit can go now
    it = migs_.erase(it);
    changed = true;
  }
  if (changed) SaveMigs();
}

bool Agent::MigPending(const std::string& key, int64_t now, bool give_up, std::string* note) {
  for (auto& [uuid, h] : migs_) {
    if (h.owner != key) continue;
    if (!give_up && (h.ended_at < 0 || now - h.ended_at < kMigReleaseWaitMs)) return true;
    *note = "; its MIG instance " + uuid + " is not destroyed yet" +
            (h.error.empty() ? "" : ": " + h.error);
    Say("reporting job " + h.job + "'s worker ended, with its MIG instance " + uuid +
            " still there" + (h.error.empty() ? "" : ": " + h.error),
        true);
    h.owner.clear();  // still destroyed when it can be
    SaveMigs();
    return false;
  }
  return false;
}

void Agent::SaveMigs() const {
  json list = json::array();
  for (const auto& [uuid, h] : migs_) {
    const MadeMig& m = h.made;
    list.push_back({{"gpu", m.gpu},
                    {"gpu_uuid", m.gpu_uuid},
                    {"uuid", m.uuid},
                    {"profile", m.profile},
                    {"start", m.start},
                    {"size", m.size},
                    {"gpu_instance", m.gpu_instance},
                    {"compute_instance", m.compute_instance},
                    {"job", h.job}});
  }
  const fs::path path = fs::path(options_.state_dir) / "mig.json";
  std::error_code ec;
  if (list.empty()) {
    fs::remove(path, ec);
    return;
  }
  WriteFileAtomically(path.string(), list.dump() + "\n");
}

void Agent::LoadMigs(const std::map<std::string, std::string>& kept) {
  std::ifstream in(fs::path(options_.state_dir) / "mig.json");
  if (!in) return;
  const json list = json::parse(in, nullptr, false);
  if (!list.is_array()) return;
  for (const json& e : list) {
    if (!e.is_object()) continue;
    HeldMig h;
    h.made.gpu = e.value("gpu", -1);
    h.made.gpu_uuid = e.value("gpu_uuid", std::string());
    h.made.uuid = e.value("uuid", std::string());
    h.made.profile = e.value("profile", std::string());
    h.made.start = e.value("start", -1);
    h.made.size = e.value("size", 0);
    h.made.gpu_instance = e.value("gpu_instance", 0u);
    h.made.compute_instance = e.value("compute_instance", 0u);
    h.job = e.value("job", std::string());
    if (h.made.uuid.empty()) continue;
    if (auto k = kept.find(h.made.uuid); k != kept.end()) {
      h.owner = k->second;  // a re-adopted worker's: destroyed once it ends
      migs_[h.made.uuid] = std::move(h);
      continue;
    }
    Say("MIG instance " + h.made.uuid + " (" + h.made.profile + " at memory slice " +
        std::to_string(h.made.start) + ") on GPU " + std::to_string(h.made.gpu) +
        " was made by a previous gantry-agent: destroying it");
    migs_[h.made.uuid] = std::move(h);  // no owner: destroyed by the main loop
  }
}

}  // namespace gantry::agent
