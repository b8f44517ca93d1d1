#include "agent/cgroup.h"

#include <fcntl.h>
#include <linux/bpf.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstddef>
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
    out.push_back({f[3], f[4], type,
                   dash + 3 < f.size() ? Split(f[dash + 3], ',') : std::vector<std::string>{}});
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
std::string PrepareV2Base(const std::string& parent, const std::string& name,
                          const std::string& enable, std::vector<std::string>* problems) {
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

// A cgroup v2 device program (BPF_PROG_TYPE_CGROUP_DEVICE): denies the character devices
// in `denied`, allows every other device. Written out as instructions, as systemd's
// bpf-devices.c does: Debian's libbpf would need a BPF compiler (clang) at build time for
// a few instructions per device. With nothing denied: allow all (the probe).
std::vector<bpf_insn> DeviceProgram(const std::vector<CharDevice>& denied) {
  std::vector<bpf_insn> p;
  auto insn = [&](uint8_t code, uint8_t dst, uint8_t src, int16_t off, int32_t imm) {
    bpf_insn i{};
    i.code = code;
    i.dst_reg = dst & 0xf;
    i.src_reg = src & 0xf;
    i.off = off;
    i.imm = imm;
    p.push_back(i);
  };
  auto result = [&](int32_t verdict) {  // r0 = verdict; exit
    insn(BPF_ALU64 | BPF_MOV | BPF_K, BPF_REG_0, 0, 0, verdict);
    insn(BPF_JMP | BPF_EXIT, 0, 0, 0, 0);
  };
  if (denied.empty()) {
    result(1);
    return p;
  }
  // 0-4 load and test the type, load major and minor; then two tests per denied device
  // (another major: skip its minor's test); a jump to allow; deny (2 instructions), allow
  // (2). The verifier refuses unreachable instructions, so the deny block exists only with
  // a test that reaches it.
  const int n = static_cast<int>(denied.size()), deny = 6 + 2 * n, allow = deny + 2;
  auto to = [&](int target) {
    return static_cast<int16_t>(target - static_cast<int>(p.size()) - 1);
  };
  insn(BPF_LDX | BPF_W | BPF_MEM, BPF_REG_2, BPF_REG_1, offsetof(bpf_cgroup_dev_ctx, access_type),
       0);
  insn(BPF_ALU | BPF_AND | BPF_K, BPF_REG_2, 0, 0, 0xFFFF);  // the type; the access is above
  insn(BPF_JMP | BPF_JNE | BPF_K, BPF_REG_2, 0, to(allow), BPF_DEVCG_DEV_CHAR);
  insn(BPF_LDX | BPF_W | BPF_MEM, BPF_REG_3, BPF_REG_1, offsetof(bpf_cgroup_dev_ctx, major), 0);
  insn(BPF_LDX | BPF_W | BPF_MEM, BPF_REG_4, BPF_REG_1, offsetof(bpf_cgroup_dev_ctx, minor), 0);
  for (const CharDevice& d : denied) {
    insn(BPF_JMP | BPF_JNE | BPF_K, BPF_REG_3, 0, 1, d.major);
    insn(BPF_JMP | BPF_JEQ | BPF_K, BPF_REG_4, 0, to(deny), d.minor);
  }
  insn(BPF_JMP | BPF_JA, 0, 0, to(allow), 0);
  result(0);
  result(1);
  return p;
}

// Loads `program`; its fd, or -1 with errno set.
int LoadDeviceProgram(const std::vector<bpf_insn>& program) {
  static const char license[] = "GPL";
  bpf_attr attr{};
  attr.prog_type = BPF_PROG_TYPE_CGROUP_DEVICE;
  attr.insns = reinterpret_cast<uint64_t>(program.data());
  attr.insn_cnt = static_cast<uint32_t>(program.size());
  attr.license = reinterpret_cast<uint64_t>(license);
  return static_cast<int>(::syscall(__NR_bpf, BPF_PROG_LOAD, &attr, sizeof attr));
}

// Attaches a program denying `denied` to the cgroup v2 directory `dir` (beside any its
// ancestors have: all must allow). It stays attached while the cgroup exists.
std::string DenyDevices(const std::string& dir, const std::vector<CharDevice>& denied) {
  const int prog = LoadDeviceProgram(DeviceProgram(denied));
  if (prog < 0) return "cannot load a BPF device program for " + dir + ": " + Errno(errno);
  const int cg = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  int err = cg < 0 ? errno : 0;
  if (cg >= 0) {
    bpf_attr attr{};
    attr.target_fd = static_cast<uint32_t>(cg);
    attr.attach_bpf_fd = static_cast<uint32_t>(prog);
    attr.attach_type = BPF_CGROUP_DEVICE;
    attr.attach_flags = BPF_F_ALLOW_MULTI;
    if (::syscall(__NR_bpf, BPF_PROG_ATTACH, &attr, sizeof attr) != 0) err = errno;
    ::close(cg);
  }
  ::close(prog);
  return err == 0 ? std::string()
                  : "cannot attach a BPF device program to " + dir + ": " + Errno(err);
}

}  // namespace

Result<std::unique_ptr<Cgroups>> Cgroups::Open(const std::string& mode, const std::string& scope,
                                               std::string* why) {
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
      // Device rules: a program that denies one GPU, attached to a cgroup made for the
      // probe (loading may succeed where attaching is refused: each needs its capability).
      const std::string probe = base + "/gantry-devices-probe";
      std::error_code ec;
      fs::create_directory(probe, ec);
      cg->devices_why_ = ec ? "cannot make " + probe + ": " + ec.message()
                            : DenyDevices(probe, {{kNvidiaMajor, 0}});
      ::rmdir(probe.c_str());
      return cg;
    }
  }
  // v1: the memory hierarchy (which also tracks the processes) and cpu where mounted.
  if (mode != "v2") {
    std::unique_ptr<Cgroups> cg(new Cgroups());
    cg->version_ = 1;
    for (const std::string controller : {"memory", "cpu", "devices"}) {
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
    cg->devices_why_ =
        Contains(cg->controllers_, "devices") ? "" : "no cgroup v1 devices hierarchy";
    for (const std::string& p : problems) {  // it exists, but its cgroup could not be made
      if (!cg->devices_why_.empty() && p.find("/devices/") != std::string::npos)
        cg->devices_why_ = p;
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
  if (version_ == 2 && devices_why_.empty()) controllers += ", devices";
  return "cgroup v" + std::to_string(version_) + " (" + controllers + ") under " + bases_[0];
}

std::vector<std::string> Cgroups::Dirs(const std::string& name) const {
  std::vector<std::string> out;
  for (const std::string& base : bases_) out.push_back(base + "/" + name);
  return out;
}

std::string Cgroups::Limit(size_t i, const std::string& dir, const CgroupLimits& limits,
                           bool resources, bool devices) const {
  std::string problem;  // the first limit that could not be set
  auto set = [&](const std::string& file, const std::string& value) {
    const int err = WriteFile(dir + "/" + file, value);
    if (err != 0 && problem.empty())
      problem = "cannot write " + value + " to " + dir + "/" + file + ": " + Errno(err);
  };
  auto optional = [&](const std::string& file, const std::string& value) {
    (void)WriteFile(dir + "/" + file, value);  // absent on some kernels
  };
  const std::string& c = controllers_[i];
  if (version_ == 2) {
    if (resources && limits.memory_bytes > 0) {
      set("memory.max", std::to_string(limits.memory_bytes));
      optional("memory.swap.max", "0");  // absent without swap accounting
    }
    if (devices && limits.memory_bytes > 0)
      optional("memory.oom.group", "1");  // an OOM kill takes the whole worker
    if (resources && limits.cpus_milli > 0 && Contains(controllers_, "cpu")) {
      set("cpu.max", std::to_string(limits.cpus_milli * 100) + " 100000");
    }
    if (devices && !limits.denied_devices.empty() && devices_why_.empty() && problem.empty()) {
      problem = DenyDevices(dir, limits.denied_devices);
    }
  } else if (c == "devices" && devices) {
    for (const CharDevice& d : limits.denied_devices) {
      set("devices.deny", "c " + std::to_string(d.major) + ":" + std::to_string(d.minor) + " rwm");
    }
  } else if (c == "memory" && resources && limits.memory_bytes > 0) {
    set("memory.limit_in_bytes", std::to_string(limits.memory_bytes));
    optional("memory.memsw.limit_in_bytes",
             std::to_string(limits.memory_bytes));  // no swap past it
  } else if (c == "cpu" && resources && limits.cpus_milli > 0) {
    set("cpu.cfs_period_us", "100000");
    set("cpu.cfs_quota_us", std::to_string(limits.cpus_milli * 100));
  }
  return problem;
}

Result<std::vector<std::string>> Cgroups::Create(const std::string& name,
                                                 const CgroupLimits& limits,
                                                 const std::string& group) {
  const std::string path = group.empty() ? name : group + "/" + name;
  if (fs::exists(bases_[0] + "/" + path)) KillAndRemove(path);
  std::vector<std::string> join;
  for (size_t i = 0; i < bases_.size(); ++i) {
    std::error_code ec;
    if (!group.empty()) {
      // The group: made with the limits by its first worker, kept as it is by the rest.
      const std::string dir = bases_[i] + "/" + group;
      if (fs::create_directory(dir, ec)) {
        std::string problem = Limit(i, dir, limits, /*resources=*/true, /*devices=*/false);
        if (version_ == 2 && problem.empty()) {  // its workers' own files (memory.events)
          std::string enable;
          for (const std::string& c : controllers_) enable += (enable.empty() ? "+" : " +") + c;
          if (const int err = WriteFile(dir + "/cgroup.subtree_control", enable))
            problem = "cannot enable " + enable + " in " + dir + ": " + Errno(err);
        }
        if (!problem.empty()) {
          ::rmdir(dir.c_str());
          return Error{"cgroup", problem};
        }
      } else if (ec) {
        return Error{"cgroup", "cannot make " + dir + ": " + ec.message()};
      }
    }
    const std::string dir = bases_[i] + "/" + path;
    fs::create_directory(dir, ec);
    if (ec) return Error{"cgroup", "cannot make " + dir + ": " + ec.message()};
    const std::string problem = Limit(i, dir, limits, /*resources=*/group.empty(), true);
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
  // Its group goes with its last worker.
  if (const size_t slash = name.find('/'); removed && slash != std::string::npos) {
    for (const std::string& dir : Dirs(name.substr(0, slash))) ::rmdir(dir.c_str());
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
    if (!e.is_directory()) continue;
    const std::string name = e.path().filename().string();
    // A group's workers by GROUP/WORKER; an empty group by its own name.
    bool any = false;
    if (name.rfind(kGroupPrefix, 0) == 0) {
      for (const auto& w : fs::directory_iterator(e.path(), ec)) {
        if (!w.is_directory()) continue;
        out.push_back(name + "/" + w.path().filename().string());
        any = true;
      }
    }
    if (!any) out.push_back(name);
  }
  return out;
}

}  // namespace gantry::agent
