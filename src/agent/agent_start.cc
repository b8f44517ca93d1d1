// Agent: starting a desired worker: its files, its launch description (the request
// resolved against this node: agent_resolve.cc), its batch script, cgroup and container,
// and the launch under a shim (launcher.h), recorded for a successor.
#include "agent/agent.h"

#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "agent/launcher.h"
#include "base/base64.h"
#include "base/image_reference.h"
#include "base/rlimits.h"

namespace gantry::agent {

namespace fs = std::filesystem;

void Agent::StartWorker(const proto::DesiredWorker& d, int64_t now) {
  Worker w;
  w.job = d.job;
  w.seq = d.seq;
  w.run = d.run;
  w.rank = d.rank;
  w.step = d.step;
  w.grace_ms = d.grace_ms;
  const std::string stem = std::to_string(w.seq) + "-" + std::to_string(w.run) + "-" +
                           (w.step >= 0 ? "s" + std::to_string(w.step) + "." : "") +
                           std::to_string(w.rank);
  w.log_path = (fs::path(options_.state_dir) / "logs" / (stem + ".log")).string();
  if (w.step >= 0) w.err_path = (fs::path(options_.state_dir) / "logs" / (stem + ".err")).string();
  w.record_path = (fs::path(options_.state_dir) / "workers" / (stem + ".json")).string();
  w.status_path = (fs::path(options_.state_dir) / "workers" / (stem + ".exit")).string();
  const std::string key = Key(w);

  LaunchSpec spec;
  spec.argv = d.command;
  spec.env.assign(d.env.begin(), d.env.end());
  spec.workdir = d.workdir;
  spec.own_workdir = spec.workdir.empty();
  if (spec.own_workdir)
    spec.workdir = (fs::path(options_.state_dir) / "work" / std::to_string(w.seq)).string();
  spec.log_path = w.log_path;
  spec.err_log_path = w.err_path;
  w.stop_signal = d.signal;
  w.signal_script_only = d.signal_script_only;
  for (const proto::DesiredWorker::Signal& s : d.signals) w.signalled = std::max(w.signalled, s.n);
  // sbatch -o/-e: files on this node, relative to the workdir; the worker opens them as
  // its user (Launch), so it can write only where that user may.
  for (const auto& [p, out] :
       {std::pair<const std::string*, std::string*>{&d.stdout_path, &spec.stdout_path},
        {&d.stderr_path, &spec.stderr_path}}) {
    if (!p->empty())
      *out = fs::path(*p).is_absolute() ? *p : (fs::path(spec.workdir) / *p).string();
  }
  w.out_path = spec.stdout_path;
  spec.append_output = d.append_output;

  std::string problem;
  // (A container's devices are named by UUID: CDI's names and the runtime's.)
  const std::string visible =
      ResolveGpus(d.alloc, key, now, w, spec, problem, d.gpus_by_index && d.image.empty());
  // Slurm's gres/gpu names a batch job's GPUs (a step's task's) for AMD's and OpenCL's
  // runtimes as well, over what the environment had (a job submitted from inside another).
  if (d.gpus_by_index && d.image.empty() && d.alloc.sharing == "exclusive" && !visible.empty()) {
    for (const char* k : {"GPU_DEVICE_ORDINAL", "ROCR_VISIBLE_DEVICES"})
      spec.env.emplace_back(k, visible);
  }
  w.emulate = d.emulate;
  spec.env.emplace_back("GANTRY_NODE", options_.node);
  spec.env.emplace_back("GANTRY_LOG", w.log_path);
  // A batch job's script and its steps carry the job's own credential (GANTRY_TOKEN) for
  // srun, scontrol, sbatch, squeue, scancel and sacct: where gantryd is, and those
  // commands first on PATH.
  if (d.env.contains("GANTRY_TOKEN")) {
    if (!d.env.contains("GANTRY_SERVER")) spec.env.emplace_back("GANTRY_SERVER", options_.server);
    if (!options_.ca_cert.empty()) spec.env.emplace_back("GANTRY_CA_CERT", options_.ca_cert);
    if (!options_.slurm_commands.empty()) {
      const char* own = std::getenv("PATH");
      auto it = d.env.find("PATH");
      const std::string path = it != d.env.end() ? it->second
                               : own             ? own
                                                 : "/usr/local/bin:/usr/bin:/bin";
      spec.env.emplace_back("PATH", options_.slurm_commands + ":" + path);
    }
  }

  // Its user: the account the job's token names, looked up here (names, not numbers,
  // are what sites keep in step across nodes).
  if (problem.empty() && !spec.own_workdir && !fs::path(spec.workdir).is_absolute()) {
    // gantryd refuses these; one from an older server would resolve against this agent's
    // own directory, and be made there as root.
    problem = "workdir " + spec.workdir + " is not an absolute path";
  }
  if (problem.empty() && run_as_user_) problem = ResolveUser(d.user, spec);
  // Slurm's identity of the job (gantryd gives every job SLURM_JOB_ID): the account it
  // runs as here, which gantryd does not know where the token names no user.
  if (problem.empty() && d.env.contains("SLURM_JOB_ID")) {
    const uid_t uid = spec.as_user ? spec.uid : ::getuid();
    const gid_t gid = spec.as_user ? spec.gid : ::getgid();
    std::vector<std::pair<std::string, std::string>> ids = {{"SLURM_JOB_UID", std::to_string(uid)},
                                                            {"SLURM_JOB_GID", std::to_string(gid)}};
    struct passwd pw {
    }, *found = nullptr;
    std::vector<char> buf(16384);
    if (::getpwuid_r(uid, &pw, buf.data(), buf.size(), &found) == 0 && found != nullptr)
      ids.emplace_back("SLURM_JOB_USER", pw.pw_name);
    for (auto& [k, v] : ids) {
      if (!d.env.contains(k)) spec.env.emplace_back(k, std::move(v));
    }
    spec.task_pid = !d.env.contains("SLURM_TASK_PID");
    // The submitter's resource limits (SLURM_RLIMIT_*, base/rlimits.h), set on the worker as
    // Slurm's slurmstepd sets them; the variables are not the job's to see, as there.
    for (const SlurmRlimit& l : kSlurmRlimits) {
      const std::string var = std::string("SLURM_RLIMIT_") + l.name;
      auto it = d.env.find(var);
      if (it == d.env.end()) continue;
      if (const std::optional<PropagatedRlimit> r = ParseSlurmRlimit(it->second)) {
        const std::string value = r->value == static_cast<uint64_t>(RLIM_INFINITY)
                                      ? "'unlimited'"
                                      : std::to_string(r->value);
        spec.rlimits.push_back({.resource = l.resource,
                                .value = r->value,
                                .error = r->asked ? "gantry-agent: cannot propagate RLIMIT_" +
                                                        std::string(l.name) + " of " + value +
                                                        " from the submit host: "
                                                  : ""});
      }
      std::erase_if(spec.env, [&](const auto& e) { return e.first == var; });
    }
    // The submitter's umask (sbatch sets SLURM_UMASK, srun its own for a step), as Slurm's
    // slurmstepd applies it: files a job of a user with umask 077 writes are that user's
    // alone. A batch script does not see the variable (Slurm's takes it out); a step's
    // tasks do, as under Slurm.
    if (auto u = d.env.find("SLURM_UMASK"); u != d.env.end()) {
      char* end = nullptr;
      const long mask = std::strtol(u->second.c_str(), &end, 8);
      if (!u->second.empty() && *end == '\0' && mask >= 0 && mask <= 0777)
        spec.umask = static_cast<int>(mask);
      if (d.step < 0)
        std::erase_if(spec.env, [](const auto& e) { return e.first == "SLURM_UMASK"; });
    }
  }
  // Its CPUs: the job's here; a step's task its step's part of them (srun --exact,
  // --exclusive, -c: positions in the job's), and its own part of that (--cpu-bind).
  w.cpus = CpusFor(d, w.share);
  spec.cpus = w.cpus;
  // (Where the node has fewer CPUs than the job holds there, an emulated node's, the
  // positions wrap around those it has.)
  if (!d.step_cpus.empty() && !w.cpus.empty()) {
    std::set<int> part;
    for (int p : d.step_cpus)
      if (p >= 0) part.insert(w.cpus[static_cast<size_t>(p) % w.cpus.size()]);
    spec.cpus.assign(part.begin(), part.end());
  }
  if (problem.empty() && d.step >= 0) problem = BindTask(d, spec);
  if (problem.empty() && !d.script.empty()) problem = WriteScript(d.script, stem, w, spec);
  if (problem.empty() && !d.input.empty()) problem = WriteInput(d, stem, w, spec);
  // Its cgroup, with the job's limits (memory_gb, cpus, or the pool's defaults).
  w.memory_bytes = d.limits.memory_bytes;
  if (problem.empty() && cgroups_) problem = JoinCgroup(d, stem, w, spec);
  if (problem.empty() && !d.image.empty()) problem = RunInContainer(d, visible, w, spec);
  if (!problem.empty()) {
    // (A step's task: on its stderr, which srun shows as such.)
    std::ofstream(w.err_path.empty() ? w.log_path : w.err_path, std::ios::app)
        << "gantry-agent: cannot start: " << problem << "\n";
    w.exited = true;
    w.exit_code = 127;
    w.lost = !w.drain.empty();  // not the job's fault: requeued, not failed
    w.note = problem;
    Say("job " + w.job + ": " + problem, true);
    workers_[key] = w;
    return;
  }
  LaunchWorker(key, visible, now, w, spec);
}

std::vector<int> Agent::CpusFor(const proto::DesiredWorker& d, const WorkerShare& share) const {
  const int64_t count = d.limits.cpus > 0 ? d.limits.cpus : (d.limits.cpus_milli + 999) / 1000;
  if (count <= 0 || cpu_topology_.cpus.empty()) return {};
  // A batch job's script and its steps' tasks here hold the job's CPUs together, as its
  // cgroup group (JoinCgroup) holds them; every other worker its own.
  auto batch = [](const Worker& w) { return w.step >= 0 || !w.script_path.empty(); };
  const bool grouped = !d.script.empty() || d.step >= 0;
  std::map<int, int> uses;  // by CPU: the jobs (runs) on it
  std::set<std::pair<int64_t, int>> counted;
  for (const auto& [key, w] : workers_) {
    if (w.exited || w.cpus.empty()) continue;
    if (grouped && batch(w) && w.seq == d.seq && w.run == d.run) return w.cpus;
    if (batch(w) && !counted.insert({w.seq, w.run}).second) continue;
    for (int c : w.cpus) ++uses[c];
  }
  // Near its GPUs: their NUMA nodes, as the kernel places their PCI devices (none known for
  // emulated GPUs, or where the firmware says -1).
  std::vector<int> near;
  for (const GpuInfo& g : last_gpus_) {
    if (g.pci_bus_id.empty() ||
        std::find(share.gpus.begin(), share.gpus.end(), g.index) == share.gpus.end())
      continue;
    std::ifstream in(fs::path(options_.sys) / "bus" / "pci" / "devices" / g.pci_bus_id /
                     "numa_node");
    int numa = -1;
    if (in >> numa && numa >= 0 && std::find(near.begin(), near.end(), numa) == near.end())
      near.push_back(numa);
  }
  return PickCpus(cpu_topology_, uses, static_cast<int>(count), near, cpu_rotate_);
}

std::string Agent::BindTask(const proto::DesiredWorker& d, LaunchSpec& spec) const {
  auto var = [&](const char* name) {
    auto it = d.env.find(name);
    return it == d.env.end() ? std::string() : it->second;
  };
  if (var("SLURM_CPU_BIND").empty()) return "";
  std::string why;
  const std::optional<CpuBind> bind = CpuBind::Parse(var("SLURM_CPU_BIND"), why);
  const int local = std::atoi(var("SLURM_LOCALID").c_str());
  const int per_task =
      var("SLURM_CPUS_PER_TASK").empty() ? 1 : std::atoi(var("SLURM_CPUS_PER_TASK").c_str());
  const std::optional<std::vector<int>> cpus =
      bind ? TaskCpus(*bind, cpu_topology_, spec.cpus, local, per_task, var("SLURM_DISTRIBUTION"),
                      why)
           : std::nullopt;
  if (!cpus) return why;
  spec.cpus = *cpus;
  if (bind->verbose) {  // as Slurm's task/affinity reports it, on the task's stderr
    auto two = [](const std::string& n) { return n.size() < 2 ? " " + n : n; };
    spec.bind_report_head =
        "cpu-bind=" + std::string(bind->kind == CpuBind::Kind::kNone ? "NONE" : "MASK") + " - " +
        options_.node + ", task " + two(var("SLURM_PROCID")) + " " + two(var("SLURM_LOCALID")) +
        " [";
    spec.bind_report_tail = "]: mask " + CpuMask(*cpus) + " set\n";
  }
  return "";
}

std::string Agent::WriteInput(const proto::DesiredWorker& d, const std::string& stem, Worker& w,
                              LaunchSpec& spec) const {
  const std::optional<std::string> bytes = Base64Decode(d.input);
  if (!bytes) return "its input is not base64";
  w.input_path = (fs::path(options_.state_dir) / "scripts" / (stem + ".in")).string();
  std::error_code ec;
  fs::create_directories(fs::path(w.input_path).parent_path(), ec);
  {
    std::ofstream f(w.input_path, std::ios::binary | std::ios::trunc);
    f << *bytes;
    if (!f.flush()) return "cannot write its input " + w.input_path;
  }
  if ((spec.as_user && ::chown(w.input_path.c_str(), spec.uid, spec.gid) != 0) ||
      ::chmod(w.input_path.c_str(), 0400) != 0)
    return "cannot give its input " + w.input_path + " to its user: " + std::strerror(errno);
  spec.stdin_path = w.input_path;
  return "";
}

std::string Agent::WriteScript(const std::string& script, const std::string& stem, Worker& w,
                               LaunchSpec& spec) const {
  // sbatch: the batch script is written here (as Slurm's slurmd keeps it in its spool),
  // owned by the job's user, and run with the job's command as its arguments.
  std::string problem;
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
  return problem;
}

std::string Agent::JoinCgroup(const proto::DesiredWorker& d, const std::string& stem, Worker& w,
                              LaunchSpec& spec) {
  // Its GPUs' device files only. Not for a container: its devices are podman's --device,
  // and the runtime podman starts from this cgroup must make those nodes.
  // A batch job's script and its steps' tasks share its limits on this node, in a group for
  // its run (as Slurm's job cgroup holds the batch step and the steps): tasks together get
  // what the job asked, not each of them.
  const std::string group =
      !d.script.empty() || d.step >= 0
          ? Cgroups::kGroupPrefix + std::to_string(d.seq) + "-" + std::to_string(d.run)
          : "";
  auto join = cgroups_->Create(stem,
                               {.memory_bytes = w.memory_bytes,
                                .cpus_milli = d.limits.cpus_milli,
                                .denied_devices = d.image.empty() ? DeniedDevices(w.share, w.job)
                                                                  : std::vector<CharDevice>{}},
                               group);
  if (!join) return join.error().ToString();
  w.cgroup = group.empty() ? stem : group + "/" + stem;
  spec.join = std::move(*join);
  return "";
}

std::string Agent::RunInContainer(const proto::DesiredWorker& d, const std::string& visible,
                                  Worker& w, LaunchSpec& spec) const {
  // An image: the same command in a container, `podman run` in the foreground as the
  // worker. It runs as root (rootful podman), the job as its user inside.
  // gantryd refuses such names; an agent runs none it is sent either (podman runs as root).
  if (const std::string why = ImageReferenceProblem(d.image); !why.empty())
    return "image " + d.image + ": " + why;
  ContainerSpec c{
      .name = ContainerName(options_.node, w.seq, w.run, w.rank, w.step),
      .node = options_.node,
      .agent = scope_,
      .job = w.job,
      .image = d.image,
      .command = spec.argv,
      .env = spec.env,
      .workdir = spec.workdir,
      .mounts = {},
      .binds = {},
      .inside_workdir = d.container_workdir,
      .devices = {},
      .memory_bytes = w.memory_bytes,
      .cpus_milli = d.limits.cpus_milli,
      .user = spec.as_user ? std::to_string(spec.uid) + ":" + std::to_string(spec.gid) : "",
      .umask = spec.umask,
      .interactive = !spec.stdin_path.empty()};
  if (!w.script_path.empty()) c.mounts.push_back(w.script_path);
  // srun --container-mounts and the user's home (pyxis' options), where the job's user can
  // reach them on this node: a root podman binds anything, the user may not see anything.
  std::vector<std::string> sources;
  for (const proto::DesiredWorker::Mount& m : d.mounts) {
    if (!proto::DesiredWorker::PlainMountPath(m.source) ||
        !proto::DesiredWorker::PlainMountPath(m.target))
      return "mount " + m.source + ":" + m.target + ": absolute paths without ':' or ','";
    c.binds.push_back({m.source, m.target, m.read_only});
    sources.push_back(m.source);
  }
  if (Status reachable = Reachable(spec, sources); !reachable) return reachable.error().ToString();
  if (d.mount_home) {  // its home as this node's passwd says (or the job's HOME), if it has one
    for (const auto& [k, v] : spec.env) {
      if (k == "HOME" && proto::DesiredWorker::PlainMountPath(v) && Reachable(spec, {v}))
        c.binds.push_back({v, v, false});
    }
  }
  if (gpus_->Describe().rfind("emulated", 0) != 0) {  // emulated GPUs have no devices
    std::vector<std::string> uuids, nodes;
    std::string uuid;
    for (std::stringstream in(visible); std::getline(in, uuid, ',');) uuids.push_back(uuid);
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
  std::string problem;
  if (Status made = MakeWorkdir(spec); !made) problem = made.error().ToString();
  // One that exists, below a directory the user may not enter (/root/public), would be
  // given to it by podman's mount (as mounts above).
  if (Status reachable = Reachable(spec, {spec.workdir}); problem.empty() && !reachable)
    problem = "workdir " + reachable.error().ToString();
  w.container = c.name;
  spec.argv = ContainerArgv(options_.container, c);
  spec.files_as_user = spec.as_user;  // podman runs as us; -o/-e are opened as the user
  spec.as_user = false;
  // The job's variables are the container's (--env above), not podman's: podman runs as
  // the agent, and a job's LD_PRELOAD or PATH (which finds `podman`) would run the
  // user's code as root.
  spec.env.clear();
  return problem;
}

void Agent::LaunchWorker(const std::string& key, const std::string& visible, int64_t now, Worker& w,
                         LaunchSpec& spec) {
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

}  // namespace gantry::agent
