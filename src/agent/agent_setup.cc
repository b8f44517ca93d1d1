// Agent: what it sets up before it joins: its state directory (and the lock that makes it
// the directory's one agent), cgroups, MIG instances' access devices, and whose user jobs
// run as.
#include "agent/agent.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include "agent/launcher.h"
#include "base/atomic_file.h"

namespace gantry::agent {

namespace fs = std::filesystem;

bool Agent::Setup() {
  std::error_code ec;
  for (const char* sub : {"logs", "work", "workers"})
    fs::create_directories(fs::path(options_.state_dir) / sub, ec);
  if (ec) {
    Say("cannot create the state directory " + options_.state_dir + ": " + ec.message());
    return false;
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
  scope_ = options_.node + "." + hex;
  auto cgroups = Cgroups::Open(options_.cgroups, scope_, &no_cgroups);
  if (!cgroups) {
    Say("cannot isolate workers: " + cgroups.error().ToString(), true);
    return false;
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
  // The CPUs jobs are given and bound to: those this agent may run on (a site that keeps
  // some for the system starts it with fewer: taskset, systemd's CPUAffinity).
  const std::vector<int> allowed = CpuTopology::Allowed();
  cpu_topology_ = CpuTopology::Read(options_.sys + "/devices/system", allowed);
  if (gpus_->emulated()) cpu_rotate_ = hash;  // emulated nodes on one machine: spread over it
  Say("jobs are bound to CPUs of " + FormatCpuList(allowed));
  // What the heartbeat says of it, for `gantry nodes`.
  isolation_ = {{proto::kIsolationCgroups, cgroups_ != nullptr},
                {proto::kIsolationGpuDevices, fences}};
  if (mig_driver) isolation_[proto::kIsolationMig] = fences && mig_caps_.has_value();
  const std::string run_as =
      options_.run_as.empty() ? (::geteuid() == 0 ? "user" : "agent") : options_.run_as;
  if (run_as != "user" && run_as != "agent") {
    Say("--run-as: expected user or agent, got " + run_as);
    return false;
  }
  run_as_user_ = run_as == "user";
  if (run_as_user_ && ::geteuid() != 0) {
    Say("--run-as user needs root (to become each job's user); this agent runs as uid " +
        std::to_string(::geteuid()));
    return false;
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
    return false;
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
  return true;
}

}  // namespace gantry::agent
