// Agent: its workers' lives after the start: the records a successor re-adopts them from,
// recovery at start, reaping, stopping (signal, grace, SIGKILL) and cleaning up after them.
#include "agent/agent.h"

#include <signal.h>
#include <sys/types.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "agent/launcher.h"
#include "base/atomic_file.h"
#include "base/clock.h"

namespace gantry::agent {

namespace fs = std::filesystem;
using nlohmann::json;

void Agent::WriteRecord(const Worker& w) {
  // All a successor needs to take the worker over (Readopt).
  json r = {{"job", w.job},
            {"seq", w.seq},
            {"run", w.run},
            {"rank", w.rank},
            {"step", w.step},
            {"pid", w.pid},
            {"start_time", w.start_time},
            {"log", w.log_path},
            {"err", w.err_path},
            {"cgroup", w.cgroup},
            {"status", w.status_path},
            {"grace_ms", w.grace_ms},
            {"stop_signal", w.stop_signal},
            {"signal_script_only", w.signal_script_only},
            {"signalled", w.signalled},
            {"out_path", w.out_path},
            {"out_user", w.out_user},
            {"uid", w.uid},
            {"gid", w.gid},
            {"groups", w.groups},
            {"script_path", w.script_path},
            {"input_path", w.input_path},
            {"container", w.container},
            {"memory_bytes", w.memory_bytes},
            {"cpus", w.cpus},
            {"emulate", w.emulate ? proto::Encode(*w.emulate) : json()},
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
  w.signal_script_only = r.value("signal_script_only", false);
  w.signalled = r.value("signalled", 0);
  w.out_path = r.value("out_path", std::string());
  w.out_user = r.value("out_user", false);
  w.uid = r.value("uid", uid_t{0});
  w.gid = r.value("gid", gid_t{0});
  w.groups = r.value("groups", std::vector<gid_t>{});
  w.script_path = r.value("script_path", std::string());
  w.input_path = r.value("input_path", std::string());
  w.cgroup = r.value("cgroup", std::string());
  w.container = r.value("container", std::string());
  w.memory_bytes = r.value("memory_bytes", int64_t{0});
  w.cpus = r.value("cpus", std::vector<int>{});  // its job's here: kept from the next one's
  if (auto e = r.find("emulate"); e != r.end() && e->is_object()) {
    if (Result<proto::Emulate> m = proto::DecodeEmulate(*e)) w.emulate = *m;
  }
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
    w.step = r.value("step", -1);
    w.pid = static_cast<pid_t>(r.value("pid", 0));
    w.log_path = r.value("log", std::string());
    w.err_path = r.value("err", std::string());
    w.record_path = entry.path().string();
    const std::string key = Key(w);
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
  // Containers of this node that outlived a previous agent, but the re-adopted workers' (not
  // another cluster's agent's of the same node name: NodeContainers).
  // Nothing to do, and no error, where podman is not installed.
  if (auto names = NodeContainers(options_.container, options_.node, scope_)) {
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
    // The record first, so a successor keeps its deadline and sends no second signal (a
    // second SIGTERM means "quit now" to some training frameworks). Killed between the two,
    // the worker would get only its SIGKILL at the deadline: a window of one system call,
    // where the other order left one of the record's write and fsync (which a test that
    // kills the agent as soon as the worker has its signal met on a loaded machine).
    if (!w.record_path.empty()) WriteRecord(w);
    // sbatch --signal=B:SIG: the batch shell alone (the shim's child), as Slurm signals it.
    if (!(w.signal_script_only && sig == w.stop_signal && SignalChild(options_.proc, w.pid, sig)))
      SignalGroup(w.pid, sig);
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
}  // namespace gantry::agent
