#include "agent/cgroup.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

namespace gantry::agent {

namespace fs = std::filesystem;

namespace {

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Returns 0 or the errno of the failed open or write.
int WriteFile(const std::string& path, const std::string& value) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return errno;
  const ssize_t n = ::write(fd, value.data(), value.size());
  const int err = n == static_cast<ssize_t>(value.size()) ? 0 : (n < 0 ? errno : EIO);
  ::close(fd);
  return err;
}

std::vector<std::string> Split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::stringstream in(s);
  std::string part;
  while (std::getline(in, part, sep)) out.push_back(part);
  return out;
}

bool Contains(const std::vector<std::string>& v, const std::string& x) {
  for (const std::string& s : v) {
    if (s == x) return true;
  }
  return false;
}

struct Mount {
  std::string root, point, type;
  std::vector<std::string> options;  // super options: the v1 controllers bound there
};

std::vector<Mount> CgroupMounts() {
  std::vector<Mount> out;
  std::ifstream in("/proc/self/mountinfo");
  std::string line;
  while (std::getline(in, line)) {
    // id parent major:minor root point options [optional...] - type source super-options
    std::istringstream s(line);
    std::vector<std::string> f;
    for (std::string w; s >> w;) f.push_back(w);
    size_t dash = 0;
    while (dash < f.size() && f[dash] != "-") ++dash;
    if (f.size() < 5 || dash + 2 >= f.size()) continue;
    const std::string& type = f[dash + 1];
    if (type != "cgroup" && type != "cgroup2") continue;
    out.push_back({f[3], f[4], type, dash + 3 < f.size() ? Split(f[dash + 3], ',') : std::vector<std::string>{}});
  }
  return out;
}

// The directory of this process's cgroup in the hierarchy mounted at `m`, given its path
// there (from /proc/self/cgroup); empty when the mount does not show it.
std::string OwnDir(const Mount& m, const std::string& path) {
  std::string rel = path;
  if (m.root != "/") {
    if (rel.rfind(m.root, 0) != 0) return {};
    rel = rel.substr(m.root.size());
  }
  return (fs::path(m.point) / fs::path(rel).relative_path()).lexically_normal().string();
}

std::string Errno(int err) { return std::strerror(err); }

// Makes `parent`/`name` with `enable` ("+memory +cpu") on for its children, enabling it in
// `parent` first; when `parent` holds processes (EBUSY), moves this agent into
// `parent`/`name`-agent and tries again. The base's path, or empty with the reason added
// to `problems`.
std::string PrepareV2Base(const std::string& parent, const std::string& name, const std::string& enable,
                          std::vector<std::string>* problems) {
  if (WriteFile(parent + "/cgroup.subtree_control", enable) != 0) {
    const std::string leaf = parent + "/" + name + "-agent";
    std::error_code ec;
    fs::create_directories(leaf, ec);
    if (const int err = WriteFile(leaf + "/cgroup.procs", std::to_string(::getpid()))) {
      problems->push_back("cannot move the agent into " + leaf + ": " + Errno(err));
      return {};
    }
    if (const int err = WriteFile(parent + "/cgroup.subtree_control", enable)) {
      problems->push_back("cannot enable " + enable + " in " + parent + ": " + Errno(err) +
                          (err == EBUSY ? " (other processes share it)" : ""));
      return {};
    }
  }
  const std::string base = parent + "/" + name;
  std::error_code ec;
  fs::create_directories(base, ec);
  if (ec) {
    problems->push_back("cannot make " + base + ": " + ec.message());
    return {};
  }
  if (const int err = WriteFile(base + "/cgroup.subtree_control", enable)) {
    problems->push_back("cannot enable " + enable + " in " + base + ": " + Errno(err));
    return {};
  }
  return base;
}

}  // namespace

Result<std::unique_ptr<Cgroups>> Cgroups::Open(const std::string& mode, const std::string& scope, std::string* why) {
  if (mode == "off") return std::unique_ptr<Cgroups>();
  if (mode != "auto" && mode != "v1" && mode != "v2") {
    return Error{"--cgroups", "expected auto, v1, v2 or off, got " + mode};
  }
  const std::vector<Mount> mounts = CgroupMounts();
  std::string v2_path;
  std::vector<std::pair<std::vector<std::string>, std::string>> v1_paths;  // controllers, path
  {
    std::ifstream in("/proc/self/cgroup");
    std::string line;
    while (std::getline(in, line)) {
      const size_t a = line.find(':'), b = line.find(':', a + 1);
      if (a == std::string::npos || b == std::string::npos) continue;
      const std::string controllers = line.substr(a + 1, b - a - 1), path = line.substr(b + 1);
      if (line.substr(0, a) == "0" && controllers.empty()) {
        v2_path = path;
      } else {
        v1_paths.emplace_back(Split(controllers, ','), path);
      }
    }
  }
  std::vector<std::string> problems;
  const std::string name = "gantry-" + scope;

  // v2, when its hierarchy offers the memory controller to this process's cgroup.
  if (mode != "v1") {
    for (const Mount& m : mounts) {
      if (m.type != "cgroup2" || v2_path.empty()) continue;
      const std::string own = OwnDir(m, v2_path);
      if (own.empty()) continue;
      std::istringstream listed(ReadFile(own + "/cgroup.controllers"));
      std::vector<std::string> available;
      for (std::string c; listed >> c;) available.push_back(c);
      std::vector<std::string> wanted;
      for (const std::string c : {"memory", "cpu", "pids"}) {
        if (Contains(available, c)) wanted.push_back(c);
      }
      if (!Contains(wanted, "memory")) {
        problems.push_back("cgroup v2 at " + own + " offers no memory controller");
        continue;
      }
      std::string enable;
      for (const std::string& c : wanted) enable += (enable.empty() ? "+" : " +") + c;
      // Enabling controllers for children needs a cgroup without processes of its own (the
      // root excepted), so the workers' base goes where that holds: under this agent's
      // cgroup after moving the agent into a leaf of its own (the systemd unit with
      // Delegate=yes, a container), else, when others share the agent's cgroup (started
      // from a shell or a script: EBUSY), under the hierarchy's root beside it, as Slurm
      // does without systemd (cgroup.conf IgnoreSystemd).
      std::string base = PrepareV2Base(own, name, enable, &problems);
      if (base.empty() && own != m.point) base = PrepareV2Base(m.point, name, enable, &problems);
      if (base.empty()) continue;
      std::unique_ptr<Cgroups> cg(new Cgroups());
      cg->version_ = 2;
      cg->bases_ = {base};
      cg->controllers_ = wanted;
      return cg;
    }
  }
  // v1: the memory hierarchy (which also tracks the processes) and cpu where mounted.
  if (mode != "v2") {
    std::unique_ptr<Cgroups> cg(new Cgroups());
    cg->version_ = 1;
    for (const std::string controller : {"memory", "cpu"}) {
      std::string base;
      for (const auto& [controllers, path] : v1_paths) {
        if (!Contains(controllers, controller)) continue;
        for (const Mount& m : mounts) {
          if (m.type == "cgroup" && Contains(m.options, controller)) {
            const std::string own = OwnDir(m, path);
            if (!own.empty()) base = own + "/" + name;
          }
        }
      }
      if (base.empty()) {
        problems.push_back("no cgroup v1 " + controller + " hierarchy");
        continue;
      }
      std::error_code ec;
      fs::create_directories(base, ec);
      if (ec) {
        problems.push_back("cannot make " + base + ": " + ec.message());
        continue;
      }
      cg->bases_.push_back(base);
      cg->controllers_.push_back(controller);
    }
    if (!cg->controllers_.empty() && cg->controllers_[0] == "memory") return cg;
  }
  std::string text = "no writable cgroup with a memory controller";
  for (const std::string& p : problems) text += "; " + p;
  if (mode != "auto") return Error{"--cgroups " + mode, text};
  if (why) *why = text;
  return std::unique_ptr<Cgroups>();
}

Cgroups::~Cgroups() {
  for (const std::string& base : bases_) ::rmdir(base.c_str());
}

std::string Cgroups::Describe() const {
  std::string controllers;
  for (const std::string& c : controllers_) controllers += (controllers.empty() ? "" : ", ") + c;
  return "cgroup v" + std::to_string(version_) + " (" + controllers + ") under " + bases_[0];
}

std::vector<std::string> Cgroups::Dirs(const std::string& name) const {
  std::vector<std::string> out;
  for (const std::string& base : bases_) out.push_back(base + "/" + name);
  return out;
}

Result<std::vector<std::string>> Cgroups::Create(const std::string& name, const CgroupLimits& limits) {
  if (fs::exists(bases_[0] + "/" + name)) KillAndRemove(name);
  std::vector<std::string> join;
  for (size_t i = 0; i < bases_.size(); ++i) {
    const std::string dir = bases_[i] + "/" + name;
    std::error_code ec;
    fs::create_directory(dir, ec);
    if (ec) return Error{"cgroup", "cannot make " + dir + ": " + ec.message()};
    std::string problem;  // the first limit that could not be set
    auto set = [&](const std::string& file, const std::string& value) {
      const int err = WriteFile(dir + "/" + file, value);
      if (err != 0 && problem.empty()) problem = "cannot write " + value + " to " + dir + "/" + file + ": " + Errno(err);
      return err == 0;
    };
    auto optional = [&](const std::string& file, const std::string& value) {  // absent on some kernels
      (void)WriteFile(dir + "/" + file, value);
    };
    const std::string& c = controllers_[i];
    if (version_ == 2) {
      if (limits.memory_bytes > 0) {
        set("memory.max", std::to_string(limits.memory_bytes));
        optional("memory.swap.max", "0");  // absent without swap accounting
        optional("memory.oom.group", "1");  // an OOM kill takes the whole worker
      }
      if (limits.cpus_milli > 0 && Contains(controllers_, "cpu")) {
        set("cpu.max", std::to_string(limits.cpus_milli * 100) + " 100000");
      }
    } else if (c == "memory" && limits.memory_bytes > 0) {
      set("memory.limit_in_bytes", std::to_string(limits.memory_bytes));
      optional("memory.memsw.limit_in_bytes", std::to_string(limits.memory_bytes));  // no swap past it
    } else if (c == "cpu" && limits.cpus_milli > 0) {
      set("cpu.cfs_period_us", "100000");
      set("cpu.cfs_quota_us", std::to_string(limits.cpus_milli * 100));
    }
    if (!problem.empty()) return Error{"cgroup", problem};
    join.push_back(dir + "/cgroup.procs");
  }
  return join;
}

std::vector<pid_t> Cgroups::Procs(const std::string& name) const {
  std::vector<pid_t> out;
  std::istringstream in(ReadFile(bases_[0] + "/" + name + "/cgroup.procs"));
  for (long pid; in >> pid;) out.push_back(static_cast<pid_t>(pid));
  return out;
}

int Cgroups::Signal(const std::string& name, int sig) const {
  int n = 0;
  for (pid_t pid : Procs(name)) n += ::kill(pid, sig) == 0;
  return n;
}

bool Cgroups::OomKilled(const std::string& name) const {
  const std::string file = version_ == 2 ? "/memory.events" : "/memory.oom_control";
  std::istringstream in(ReadFile(bases_[0] + "/" + name + file));
  std::string key;
  long long value = 0;
  while (in >> key >> value) {
    if (key == "oom_kill" && value > 0) return true;
  }
  return false;
}

bool Cgroups::Remove(const std::string& name) {
  bool removed = true;
  for (const std::string& dir : Dirs(name)) {
    std::error_code ec;
    if (fs::exists(dir, ec) && ::rmdir(dir.c_str()) != 0) removed = false;
  }
  return removed;
}

int Cgroups::KillAndRemove(const std::string& name, int wait_ms) {
  int killed = 0;
  std::vector<pid_t> seen;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(wait_ms);
  for (;;) {
    for (pid_t pid : Procs(name)) {  // a fork racing the kill is caught by the next round
      if (::kill(pid, SIGKILL) == 0 && std::find(seen.begin(), seen.end(), pid) == seen.end()) {
        seen.push_back(pid);
        ++killed;
      }
    }
    if (Remove(name) || std::chrono::steady_clock::now() >= deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));  // until the dying are reaped
  }
  return killed;
}

std::vector<std::string> Cgroups::Names() const {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(bases_[0], ec)) {
    if (e.is_directory()) out.push_back(e.path().filename().string());
  }
  return out;
}

}  // namespace gantry::agent
