// Worker cgroups: each worker runs in a cgroup of its own, so that
//  - its memory and CPU limits (the job's memory_gb and cpus) are the kernel's to enforce,
//  - an out-of-memory kill is told apart from any other death and reported as such,
//  - every process of a worker, also one that left its process group (setsid, a daemon),
//    is found and killed: when the worker ends, when it is stopped, and by the next agent
//    after this one died uncleanly.
// Both cgroup v2 (the unified hierarchy) and v1 (the memory and cpu hierarchies, as on
// hybrid systems) are used as found. The agent's own cgroup is the root of its subtree
// (systemd's Delegate=yes hands it over), under which it makes `gantry-SCOPE/WORKER`; on v2
// the agent first moves itself into a leaf (`gantry-SCOPE-agent`) so that its cgroup may
// enable controllers for its children (the "no internal processes" rule).
// Written here, not taken from a library: Debian's libcgroup targets v1 tooling and
// neither it nor systemd's D-Bus API fits an agent that must work without systemd.
// Thread-safety: none; the agent's main loop owns it.
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "base/result.h"

namespace gantry::agent {

// A character device by number (what device rules match: not its path).
struct CharDevice {
  int major = 0, minor = 0;
  bool operator==(const CharDevice&) const = default;
};

// NVIDIA's GPU device files: /dev/nvidiaN is character device 195:N (/dev/nvidiactl 195:255).
constexpr int kNvidiaMajor = 195;

struct CgroupLimits {
  int64_t memory_bytes = 0;  // 0: none
  int64_t cpus_milli = 0;    // 0: none (else a CFS quota of this many CPUs)
  // Character devices the worker may not open, as Slurm's ConstrainDevices: the node's
  // GPUs that are not its own (/dev/nvidiaN), and on a GPU in MIG mode the access devices
  // of the MIG instances that are not its own (/dev/nvidia-caps/nvidia-capN, agent/mig_caps.h).
  // Every other device (/dev/nvidiactl, nvidia-uvm, /dev/null) stays open to it. Applied
  // where constrains_devices().
  std::vector<CharDevice> denied_devices;
};

class Cgroups {
 public:
  // mode: "auto" (use cgroups when a writable hierarchy is found, else nullptr and
  // `*why` says why), "v1" or "v2" (that or an error), "off" (nullptr).
  // `scope` names the agent's subtree (gantry-SCOPE), so that agents for several nodes,
  // or of several test clusters, may share a cgroup: the node and its state directory.
  static Result<std::unique_ptr<Cgroups>> Open(const std::string& mode, const std::string& scope,
                                               std::string* why);
  // Removes the subtree when no worker cgroup is left in it.
  ~Cgroups();

  // "cgroup v1 (memory, cpu, devices) under /sys/fs/cgroup/memory/.../gantry-h100-0"
  std::string Describe() const;
  // Whether Create can keep a worker from its node's other GPUs: v1 with the devices
  // hierarchy, v2 where a BPF device program (BPF_PROG_TYPE_CGROUP_DEVICE, which needs
  // CAP_SYS_ADMIN) loads and attaches to a probe cgroup at Open; else why not.
  bool constrains_devices() const { return devices_why_.empty(); }
  const std::string& devices_why() const { return devices_why_; }

  // Makes the worker's cgroup `name` with these limits (replacing a leftover of that
  // name); returns the files a process writes its pid to, to join it (Launch does so in
  // the child before exec). With `group` (kGroupPrefix...: a batch job's run on this node)
  // the worker's cgroup is GROUP/NAME, and the memory and CPU limits are the group's,
  // shared by its workers (set by the first, kept for the rest), as Slurm's job cgroup
  // holds its batch step and every step; the worker's own has its device rules (and, v2,
  // memory.oom.group). Every other call takes GROUP/NAME for such a worker.
  Result<std::vector<std::string>> Create(const std::string& name, const CgroupLimits& limits,
                                          const std::string& group = "");
  static constexpr const char* kGroupPrefix = "job-";
  // The live processes in it (none when it does not exist).
  std::vector<pid_t> Procs(const std::string& name) const;
  // Sends `sig` to each of them; returns how many.
  int Signal(const std::string& name, int sig) const;
  // True when the kernel's OOM killer killed a process in it.
  bool OomKilled(const std::string& name) const;
  // Kills everything in it and removes it, trying for up to `wait_ms` (a killed process
  // keeps the cgroup busy until its parent reaps it: the agent, for what it started, passes
  // 0 and calls Remove again after reaping); returns how many processes were signalled.
  int KillAndRemove(const std::string& name, int wait_ms = 5000);
  // Removes it if empty (and its group, if it was the group's last); true when it is gone.
  bool Remove(const std::string& name);
  // The worker cgroups that exist (a previous agent's, at start): a group's as GROUP/NAME,
  // an empty group by its name.
  std::vector<std::string> Names() const;

 private:
  Cgroups() = default;
  std::vector<std::string> Dirs(const std::string& name) const;
  // Writes `limits` into cgroup `dir` of hierarchy i: memory and CPU (`resources`), device
  // rules (`devices`); the first that could not be set, else "".
  std::string Limit(size_t i, const std::string& dir, const CgroupLimits& limits, bool resources,
                    bool devices) const;

  int version_ = 0;
  std::string devices_why_ = "not probed";  // empty: devices are constrained
  std::vector<std::string>
      bases_;  // gantry-NODE, one per hierarchy (v2: one); bases_[0] tracks processes
  std::vector<std::string> controllers_;
};

}  // namespace gantry::agent
