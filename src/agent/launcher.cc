#include "agent/launcher.h"

#include <dirent.h>
#include <fcntl.h>
#include <grp.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

#include <nlohmann/json.hpp>

#include "base/atomic_file.h"
#include "base/cpus.h"

namespace gantry::agent {

namespace {
// Variables of the agent's environment that jobs inherit; GANTRY_TOKEN and the rest do not.
// The MPS directories tell an MPS share where the site's MPS daemon listens (when not in
// the default /tmp/nvidia-mps), as the agent was started.
constexpr const char* kInherited[] = {"PATH",
                                      "HOME",
                                      "LANG",
                                      "LC_ALL",
                                      "TZ",
                                      "USER",
                                      "LOGNAME",
                                      "SHELL",
                                      "TMPDIR",
                                      "CUDA_MPS_PIPE_DIRECTORY",
                                      "CUDA_MPS_LOG_DIRECTORY"};

// A pid in decimal into `out` (24 bytes), for a child after fork: nothing that allocates.
// Its length.
int FormatPid(long pid, char* out) {
  char digits[24];
  int len = 0;
  for (long v = pid; v > 0; v /= 10) digits[len++] = static_cast<char>('0' + v % 10);
  for (int i = 0; i < len; ++i) out[i] = digits[len - 1 - i];
  out[len] = '\0';
  return len;
}

void WriteAll(int fd, const std::string& s) {
  size_t off = 0;
  while (off < s.size()) {
    ssize_t n = ::write(fd, s.data() + off, s.size() - off);
    if (n <= 0) return;
    off += static_cast<size_t>(n);
  }
}
}  // namespace

namespace {

// Sets this thread's file-system identity, what open() checks permissions against: the
// raw system calls, which change the calling thread only (glibc's setgroups would change
// every thread of the agent). Async-signal-safe. Whether it took.
bool SetFsIdentity(uid_t uid, gid_t gid, const gid_t* groups, size_t count) {
  if (::syscall(SYS_setgroups, count, groups) != 0) return false;
  ::syscall(SYS_setfsgid, gid);
  ::syscall(SYS_setfsuid, uid);
  return ::syscall(SYS_setfsuid, -1) == static_cast<long>(uid) &&
         ::syscall(SYS_setfsgid, -1) == static_cast<long>(gid);
}

// Becomes the worker's user (groups, gid, then uid), in a child after fork:
// async-signal-safe. Whether it took.
bool BecomeUser(const LaunchSpec& spec) {
  return ::setgroups(spec.groups.size(), spec.groups.data()) == 0 && ::setgid(spec.gid) == 0 &&
         ::setuid(spec.uid) == 0;
}

// The agent's own identity, to put back after SetFsIdentity.
struct Identity {
  uid_t uid = ::geteuid();
  gid_t gid = ::getegid();
  std::vector<gid_t> groups;
  Identity() {
    const int n = ::getgroups(0, nullptr);
    groups.resize(static_cast<size_t>(std::max(n, 0)));
    if (n > 0) groups.resize(static_cast<size_t>(std::max(::getgroups(n, groups.data()), 0)));
  }
  bool Restore() const { return SetFsIdentity(uid, gid, groups.data(), groups.size()); }
};

}  // namespace

int OpenAsUser(const std::string& path, uid_t uid, gid_t gid, const std::vector<gid_t>& groups) {
  const Identity agent;
  int fd = -1, err = EPERM;
  if (SetFsIdentity(uid, gid, groups.data(), groups.size())) {
    fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    err = errno;
  }
  if (!agent.Restore()) std::abort();  // a thread left with a job's identity must not go on
  errno = err;
  return fd;
}

Status MakeWorkdir(const LaunchSpec& spec) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (spec.workdir.empty() || fs::is_directory(spec.workdir, ec)) return Ok{};
  if (!spec.as_user || spec.own_workdir) {
    fs::create_directories(spec.workdir, ec);
    if (ec) return Error{"workdir", spec.workdir + ": " + ec.message()};
    if (spec.as_user && ::chown(spec.workdir.c_str(), spec.uid, spec.gid) != 0) {
      return Error{"workdir", spec.workdir + ": cannot give it to uid " + std::to_string(spec.uid) +
                                  ": " + std::strerror(errno)};
    }
    return Ok{};
  }
  // As the user: each prefix of the path, outermost first, prepared before fork (after
  // it only async-signal-safe calls: the agent has other threads).
  std::vector<std::string> prefixes;
  fs::path so_far;
  for (const fs::path& part : fs::absolute(spec.workdir, ec)) {
    so_far /= part;
    if (part != so_far.root_path()) prefixes.push_back(so_far.string());
  }
  const pid_t pid = ::fork();
  if (pid < 0) return Error{"workdir", std::string("fork: ") + std::strerror(errno)};
  if (pid == 0) {
    if (!BecomeUser(spec)) ::_exit(200);
    for (const std::string& p : prefixes) {
      if (::mkdir(p.c_str(), 0755) != 0 && errno != EEXIST) ::_exit(errno & 0x7f);
    }
    ::_exit(0);
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 255;
  if (code == 0) return Ok{};
  return Error{"workdir", spec.workdir + ": cannot create it as uid " + std::to_string(spec.uid) +
                              ": " +
                              (code == 200   ? "cannot become that user"
                               : code == 255 ? "killed"
                                             : std::strerror(code))};
}

Status Reachable(const LaunchSpec& spec, const std::vector<std::string>& paths) {
  if (paths.empty()) return Ok{};
  auto unreachable = [&](size_t i, int err) {
    return Error{"mount", paths[i] + ": not reachable as uid " +
                              std::to_string(spec.as_user ? spec.uid : ::getuid()) + ": " +
                              std::strerror(err)};
  };
  if (!spec.as_user) {
    for (size_t i = 0; i < paths.size(); ++i) {
      if (::access(paths[i].c_str(), F_OK) != 0) return unreachable(i, errno);
    }
    return Ok{};
  }
  // As the user, in a child (after fork only async-signal-safe calls): exits 0, or with
  // the index of the first path it cannot reach (1-based, at most 100) and errno apart.
  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_CLOEXEC) != 0)
    return Error{"mount", std::string("pipe: ") + std::strerror(errno)};
  const size_t n = std::min<size_t>(paths.size(), 100);
  const pid_t pid = ::fork();
  if (pid < 0) {
    const int err = errno;
    ::close(pipe_fds[0]);
    ::close(pipe_fds[1]);
    return Error{"mount", std::string("fork: ") + std::strerror(err)};
  }
  if (pid == 0) {
    ::close(pipe_fds[0]);
    if (!BecomeUser(spec)) ::_exit(200);
    for (size_t i = 0; i < n; ++i) {
      if (::access(paths[i].c_str(), F_OK) != 0) {
        const int err = errno;
        [[maybe_unused]] const ssize_t w = ::write(pipe_fds[1], &err, sizeof err);
        ::_exit(static_cast<int>(i + 1));
      }
    }
    ::_exit(0);
  }
  ::close(pipe_fds[1]);
  int err = 0;
  const ssize_t got = ::read(pipe_fds[0], &err, sizeof err);
  ::close(pipe_fds[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 255;
  if (code == 0) return paths.size() > n ? Reachable(spec, {paths.begin() + n, paths.end()}) : Ok{};
  if (code >= 1 && code <= static_cast<int>(n))
    return unreachable(static_cast<size_t>(code - 1), got == sizeof err ? err : EACCES);
  return Error{"mount", std::string("cannot check the mounts as uid ") + std::to_string(spec.uid) +
                            ": " + (code == 200 ? "cannot become that user" : "killed")};
}

Result<pid_t> Launch(const LaunchSpec& spec) {
  if (spec.argv.empty()) return Error{"command", "empty command"};
  if (Status made = MakeWorkdir(spec); !made) return made.error();
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(spec.log_path).parent_path(), ec);
  const int log = ::open(spec.log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0640);
  if (log < 0) return Error{"log", spec.log_path + ": " + std::strerror(errno)};
  const int err_log =
      spec.err_log_path.empty()
          ? log
          : ::open(spec.err_log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0640);
  if (err_log < 0) {
    const int err = errno;
    ::close(log);
    return Error{"log", spec.err_log_path + ": " + std::strerror(err)};
  }
  auto close_logs = [&] {
    ::close(log);
    if (err_log != log) ::close(err_log);
  };

  // Everything the child needs is prepared before fork: after it, only async-signal-safe
  // calls are allowed.
  std::vector<std::string> env_strings;
  for (const char* name : kInherited) {
    bool overridden = false;
    for (const auto& [k, v] : spec.env) overridden |= k == name;
    if (const char* v = std::getenv(name); v && !overridden)
      env_strings.push_back(std::string(name) + "=" + v);
  }
  // A name given twice: the later value, as podman's --env and a shell would take it (the
  // agent's CUDA_VISIBLE_DEVICES comes after the job's own variables and must win; glibc's
  // getenv would take the first).
  for (size_t i = 0; i < spec.env.size(); ++i) {
    const std::string& name = spec.env[i].first;
    const bool later = std::any_of(spec.env.begin() + static_cast<std::ptrdiff_t>(i) + 1,
                                   spec.env.end(), [&](const auto& e) { return e.first == name; });
    if (!later) env_strings.push_back(name + "=" + spec.env[i].second);
  }
  std::vector<char*> envp, argv;
  for (auto& s : env_strings) envp.push_back(s.data());
  // SLURM_TASK_PID: room for the pid, written in the child (nothing there may allocate).
  char task_pid_env[48] = "SLURM_TASK_PID=";
  if (spec.task_pid) envp.push_back(task_pid_env);
  envp.push_back(nullptr);
  std::vector<std::string> args = spec.argv;
  for (auto& s : args) argv.push_back(s.data());
  argv.push_back(nullptr);
  // PATH lookup with the job's PATH, not the agent's: resolve here.
  std::string program = args[0];
  if (program.find('/') == std::string::npos) {
    std::string path = "/usr/local/bin:/usr/bin:/bin";
    for (const auto& s : env_strings) {
      if (s.rfind("PATH=", 0) == 0) path = s.substr(5);
    }
    std::stringstream dirs(path);
    std::string dir;
    while (std::getline(dirs, dir, ':')) {
      const std::string candidate = (dir.empty() ? "." : dir) + "/" + program;
      if (::access(candidate.c_str(), X_OK) == 0) {
        program = candidate;
        break;
      }
    }
  }
  const std::string exec_error = "gantry-agent: cannot run " + args[0] + ": ";
  const std::string chdir_error = "gantry-agent: cannot enter workdir " + spec.workdir + ": ";
  const std::string join_error = "gantry-agent: cannot join the worker's cgroup: ";
  const std::string affinity_error =
      "gantry-agent: cannot bind the worker to CPUs " + FormatCpuList(spec.cpus) + ": ";
  cpu_set_t cpus;
  CPU_ZERO(&cpus);
  for (int c : spec.cpus) {
    if (c >= 0 && c < CPU_SETSIZE) CPU_SET(c, &cpus);
  }
  const std::string output_error = "gantry-agent: cannot open the output file ";
  const std::string stdout_where = spec.stdout_path + ": ", stderr_where = spec.stderr_path + ": ";
  const std::string user_error =
      "gantry-agent: cannot become uid " + std::to_string(spec.uid) + ": ";

  const bool fs_as_user = !spec.as_user && spec.files_as_user;
  std::optional<Identity> agent;  // put back after opening the output files as the user
  if (fs_as_user) agent.emplace();
  const std::string identity_error = "gantry-agent: cannot take the identity of uid " +
                                     std::to_string(spec.uid) + " to open the output files";

  // The shim's command line, but for the worker's pid (formatted in the child).
  const bool shimmed = !spec.shim_program.empty();
  std::string shim_program = spec.shim_program, shim_flag = "--shim-worker",
              shim_status = spec.shim_status, shim_lease = spec.shim_lease,
              shim_agent = spec.shim_agent, shim_signal = std::to_string(spec.shim_signal),
              shim_grace = std::to_string(spec.shim_grace_ms);
  char worker_pid_text[24] = {0};
  char* shim_argv[] = {shim_program.data(), shim_flag.data(),  worker_pid_text,
                       shim_status.data(),  shim_lease.data(), shim_agent.data(),
                       shim_signal.data(),  shim_grace.data(), nullptr};
  // The shim is the agent's own binary: it loads with the agent's library path (a bundle
  // whose libraries lie beside it, found through LD_LIBRARY_PATH, as on a GPU machine of
  // another distribution), and with nothing else of the agent's environment.
  const char* library_path = std::getenv("LD_LIBRARY_PATH");
  std::string shim_library_path =
      std::string("LD_LIBRARY_PATH=") + (library_path ? library_path : "");
  char* shim_envp[] = {library_path ? shim_library_path.data() : nullptr, nullptr};

  const pid_t launcher = ::getpid();
  // Every signal blocked across the fork: one sent to the new group while the child sets
  // itself up waits for the worker (it unblocks them once their handlers are its own),
  // instead of meeting the agent's handlers, or the shim's SIG_IGN, and being lost (a job
  // cancelled as it started ran on until its grace ran out). See SignalGroup too.
  sigset_t all, before;
  sigfillset(&all);
  ::pthread_sigmask(SIG_BLOCK, &all, &before);
  const pid_t pid = ::fork();
  if (pid != 0) ::pthread_sigmask(SIG_SETMASK, &before, nullptr);
  if (pid < 0) {
    const int err = errno;
    close_logs();
    return Error{"fork", std::strerror(err)};
  }
  if (pid == 0) {
    // The worker: `parent` is the process that forked it; `own_session`: it leads a
    // session of its own (else the shim's).
    auto worker = [&](pid_t parent, bool own_session) {
      auto fail = [&](const std::string& what, const std::string& where, const char* detail) {
        WriteAll(log, what);
        WriteAll(log, where);
        WriteAll(log, detail);
        WriteAll(log, "\n");
        ::_exit(127);
      };
      // Into the cgroup first, so that all the worker ever starts is in it.
      char pid_text[24];
      const int len = FormatPid(::getpid(), pid_text);
      for (const std::string& file : spec.join) {
        const int fd = ::open(file.c_str(), O_WRONLY | O_CLOEXEC);
        if (fd < 0 || ::write(fd, pid_text, static_cast<size_t>(len)) != len) {
          fail(join_error, file, std::strerror(errno));
        }
        ::close(fd);
      }
      if (own_session) ::setsid();  // new session and process group: pgid == pid
      // The submitter's limits, while still root (a hard limit may be raised).
      for (const LaunchSpec::Rlimit& l : spec.rlimits) {
        rlimit r{};
        if (::getrlimit(l.resource, &r) != 0) continue;
        r.rlim_cur = static_cast<rlim_t>(l.value);
        if (r.rlim_max < r.rlim_cur) r.rlim_max = r.rlim_cur;
        if (::setrlimit(l.resource, &r) != 0 && !l.error.empty()) {
          WriteAll(log, l.error);
          WriteAll(log, std::strerror(errno));
          WriteAll(log, "\n");
        }
      }
      // Its CPUs (a failure is the node's: the CPUs were the agent's own a moment ago).
      if (!spec.cpus.empty() && ::sched_setaffinity(0, sizeof(cpus), &cpus) != 0)
        fail(affinity_error, std::string(), std::strerror(errno));
      // The user before PDEATHSIG: a change of credentials clears it.
      if (spec.as_user && !BecomeUser(spec)) fail(user_error, std::string(), std::strerror(errno));
      if (spec.umask >= 0) ::umask(static_cast<mode_t>(spec.umask));
      if (spec.task_pid) FormatPid(::getpid(), task_pid_env + 15);
      // Dies with its parent (the agent's main loop, or its shim): a worker must not run on
      // unsupervised after an unclean death while the server requeues its job. What the
      // worker started lives on in its process group until the next agent kills it
      // (GroupMembersSince), or with its cgroup.
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) ::_exit(137);  // the parent died before the line above
      // Every signal as a new process has it: the agent's and the shim's SIG_IGNs would
      // outlive exec (a job that never gets its stop signal). Then unblocked (blocked since
      // the fork): a stop that came meanwhile ends the worker now.
      for (int sig = 1; sig < NSIG; ++sig) {
        if (sig != SIGKILL && sig != SIGSTOP) ::signal(sig, SIG_DFL);
      }
      sigset_t none;
      sigemptyset(&none);
      sigprocmask(SIG_SETMASK, &none, nullptr);
      const int in =
          ::open(spec.stdin_path.empty() ? "/dev/null" : spec.stdin_path.c_str(), O_RDONLY);
      if (in >= 0) ::dup2(in, 0);
      ::dup2(log, 1);
      ::dup2(err_log, 2);
      // sbatch -o/-e, opened as the worker's user (after setuid above, or with its file-system
      // identity for a container's podman): the user's own files.
      if (fs_as_user &&
          !SetFsIdentity(spec.uid, spec.gid, spec.groups.data(), spec.groups.size())) {
        fail(identity_error, std::string(), "");
      }
      const int mode = spec.append_output ? O_APPEND : O_TRUNC;
      if (!spec.stdout_path.empty()) {
        const int out = ::open(spec.stdout_path.c_str(), O_WRONLY | O_CREAT | mode, 0644);
        if (out < 0) fail(output_error, stdout_where, std::strerror(errno));
        ::dup2(out, 1);
        if (spec.stderr_path.empty() || spec.stderr_path == spec.stdout_path) ::dup2(out, 2);
        ::close(out);
      }
      if (!spec.stderr_path.empty() && spec.stderr_path != spec.stdout_path) {
        const int err = ::open(spec.stderr_path.c_str(), O_WRONLY | O_CREAT | mode, 0644);
        if (err < 0) fail(output_error, stderr_where, std::strerror(errno));
        ::dup2(err, 2);
        ::close(err);
      }
      if (fs_as_user && !agent->Restore()) fail(identity_error, std::string(), " (putting back)");
      if (!spec.bind_report_head.empty()) {
        WriteAll(2, spec.bind_report_head);
        char own[24];
        if (::write(2, own, static_cast<size_t>(FormatPid(::getpid(), own))) < 0) {
        }  // (nothing to tell of a failed write)
        WriteAll(2, spec.bind_report_tail);
      }
      if (!spec.workdir.empty() && ::chdir(spec.workdir.c_str()) != 0) {
        WriteAll(2, chdir_error);
        WriteAll(2, std::strerror(errno));
        WriteAll(2, "\n");
        ::_exit(127);
      }
      ::execve(program.c_str(), argv.data(), envp.data());
      WriteAll(2, exec_error);
      WriteAll(2, std::strerror(errno));
      WriteAll(2, "\n");
      ::_exit(127);
    };
    if (!shimmed) worker(launcher, true);
    // The shim: leader of the session and group, immune to the signals the agent sends
    // the group to stop a worker (SIG_IGN outlives exec), and to the agent's death.
    // (Signals still blocked: the worker forked below starts with them blocked too.)
    ::setsid();
    ::signal(SIGCHLD, SIG_DFL);
    const pid_t shim = ::getpid();
    const pid_t w = ::fork();
    if (w < 0) ::_exit(127);
    if (w == 0) worker(shim, false);
    // What the group was sent before the worker was in it, pending here, goes to the
    // worker (which gets it once it unblocks); then the shim ignores those signals.
    sigset_t pending;
    sigpending(&pending);
    for (int sig = 1; sig < NSIG; ++sig) {
      if (sig != SIGCHLD && sigismember(&pending, sig) == 1) ::kill(w, sig);
    }
    for (int sig : {SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGPIPE, SIGUSR1, SIGUSR2})
      ::signal(sig, SIG_IGN);
    if (spec.shim_signal > 0 && spec.shim_signal != SIGKILL && spec.shim_signal != SIGSTOP)
      ::signal(spec.shim_signal, SIG_IGN);  // the job's own stop signal
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    FormatPid(w, worker_pid_text);
    ::close_range(3, ~0U, 0);  // the agent's sockets and files
    ::execve(shim_program.c_str(), shim_argv, shim_envp);
    ::kill(w, SIGKILL);
    ::_exit(127);
  }
  close_logs();
  return pid;
}

namespace {

int64_t MonotonicMs() {
  timespec t{};
  ::clock_gettime(CLOCK_MONOTONIC, &t);
  return static_cast<int64_t>(t.tv_sec) * 1000 + t.tv_nsec / 1'000'000;
}

void WriteShimStatus(const std::string& path, int exit_code, int sig, bool fenced) {
  WriteFileAtomically(
      path,
      nlohmann::json{{"exit_code", exit_code}, {"signal", sig}, {"fenced", fenced}}.dump() + "\n");
}

int64_t MtimeMs(const struct stat& st) {
  return static_cast<int64_t>(st.st_mtim.tv_sec) * 1000 + st.st_mtim.tv_nsec / 1'000'000;
}

}  // namespace

int ShimMain(int argc, char** argv) {
  if (argc != 8) {
    std::fprintf(stderr,
                 "gantry-agent --shim-worker PID STATUS LEASE AGENT SIGNAL GRACE_MS: started by "
                 "gantry-agent only\n");
    return 2;
  }
  const pid_t worker = static_cast<pid_t>(std::atoi(argv[2]));
  const std::string status = argv[3], lease = argv[4], agent = argv[5];
  const int stop_signal = std::atoi(argv[6]);
  const int64_t grace_ms = std::atoll(argv[7]);
  const rlimit no_core{0, 0};
  ::setrlimit(RLIMIT_CORE, &no_core);  // it may end by its worker's SIGSEGV
  // The stop signal reaches the whole group, the shim included: not to end it.
  if (stop_signal > 0 && stop_signal != SIGKILL && stop_signal != SIGSTOP)
    ::signal(stop_signal, SIG_IGN);
  // Whether an agent supervises the worker: the one named in AGENT, alive (the same process).
  auto supervised = [&] {
    std::ifstream in(agent);
    long long pid = 0, start = -2;
    return in >> pid >> start && pid > 1 && Running(static_cast<pid_t>(pid), start);
  };
  // The lease runs from the file's last rewrite (a stat per poll; read again only when it
  // changed): its age by the wall clock once, then by the monotonic clock from each rewrite
  // seen (a wall clock step must not fence).
  int64_t seen = -1;     // the file's mtime, ms
  int64_t fresh_at = 0;  // monotonic ms of the last rewrite
  int64_t lease_ms = 0, node_timeout_ms = 0;
  auto expired = [&](int64_t now) {
    struct stat st {};
    // Gone (the agent's state directory removed): nothing will renew it.
    if (::stat(lease.c_str(), &st) != 0) return true;
    if (MtimeMs(st) != seen) {
      const std::optional<LeaseFile> file = ReadLease(lease);
      fresh_at = seen < 0 && file ? now - file->age_ms : now;
      seen = MtimeMs(st);
      if (file && file->lease_ms > 0) {
        lease_ms = file->lease_ms;
        node_timeout_ms = file->node_timeout_ms;
      }
    }
    return lease_ms > 0 && now - fresh_at > lease_ms;
  };
  // Without an agent, the shim fences as the agent would (Agent::FenceLoop): the stop
  // signal once the lease has run out, SIGKILL after the grace, within half of what is
  // left of the server's node timeout.
  bool signalled = false;
  int64_t kill_at = 0;
  auto kill_all = [&] {
    WriteShimStatus(status, 0, SIGKILL, true);
    ::kill(0, SIGKILL);  // the worker, all it started in the group, and the shim
  };
  while (true) {
    int st = 0;
    const pid_t r = ::waitpid(worker, &st, WNOHANG);
    if (r == worker && (WIFEXITED(st) || WIFSIGNALED(st))) {
      const int code = WIFEXITED(st) ? WEXITSTATUS(st) : 0,
                sig = WIFSIGNALED(st) ? WTERMSIG(st) : 0;
      WriteShimStatus(status, code, sig, signalled);
      // Ends as its worker did (what the worker left in the group, the agent kills).
      if (sig != 0) {
        ::signal(sig, SIG_DFL);
        ::kill(::getpid(), sig);
        return 128 + sig;  // a signal that does not end a process
      }
      return code;
    }
    if (r < 0 && errno == ECHILD) {  // not its child: started wrongly
      WriteShimStatus(status, 127, 0, false);
      return 127;
    }
    const int64_t now = MonotonicMs();
    if (signalled && now >= kill_at) kill_all();
    if (!signalled && expired(now)) {
      const int64_t budget = std::max<int64_t>(0, (node_timeout_ms - lease_ms) / 2);
      if (!supervised()) {
        signalled = true;
        kill_at = now + std::min(grace_ms, budget);
        if (stop_signal > 0 && stop_signal != SIGKILL && now < kill_at) ::kill(0, stop_signal);
        continue;
      }
      // An agent that is there but cannot act (frozen by SIGSTOP, stuck) has not fenced
      // the worker by when its own fence would have killed it (lease + budget): SIGKILL,
      // halfway between then and the server's node timeout.
      const int64_t backstop =
          lease_ms + budget + std::max<int64_t>(0, node_timeout_ms - lease_ms - budget) / 2;
      if (node_timeout_ms > 0 && now - fresh_at > backstop) kill_all();
    }
    ::usleep(100'000);
  }
}

void WriteLease(const std::string& path, int64_t lease_ms, int64_t node_timeout_ms) {
  WriteFileAtomically(path,
                      std::to_string(lease_ms) + " " + std::to_string(node_timeout_ms) + "\n");
}

std::optional<LeaseFile> ReadLease(const std::string& path) {
  struct stat st {};
  std::ifstream in(path);
  LeaseFile f;
  if (!(in >> f.lease_ms >> f.node_timeout_ms) || ::stat(path.c_str(), &st) != 0)
    return std::nullopt;
  f.age_ms = std::max<int64_t>(0, WallMs() - MtimeMs(st));
  return f;
}

std::optional<ShimStatus> ReadShimStatus(const std::string& path) {
  std::ifstream in(path);
  const nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
  if (!j.is_object() || !j.contains("exit_code") || !j.contains("signal") || !j.contains("fenced"))
    return std::nullopt;
  return ShimStatus{j.value("exit_code", 0), j.value("signal", 0), j.value("fenced", false)};
}

void SignalGroup(pid_t pgid, int sig) {
  if (pgid <= 1) return;
  // A child launched a moment ago may not lead its group yet (setsid comes first thing,
  // with every signal blocked: Launch): the process itself then, which passes it on.
  if (::kill(-pgid, sig) != 0 && errno == ESRCH) ::kill(pgid, sig);
}

bool SignalChild(const std::string& proc, pid_t parent, int sig) {
  if (parent <= 1) return false;
  const std::string p = std::to_string(parent);
  std::ifstream in(proc + "/" + p + "/task/" + p + "/children");
  long child = 0;
  if (!(in >> child) || child <= 1) return false;
  return ::kill(static_cast<pid_t>(child), sig) == 0;
}

std::vector<Exited> Reap() {
  std::vector<Exited> out;
  while (true) {
    int status = 0;
    const pid_t pid = ::waitpid(-1, &status, WNOHANG);
    if (pid <= 0) break;
    Exited e;
    e.pid = pid;
    if (WIFEXITED(status)) e.exit_code = WEXITSTATUS(status);
    if (WIFSIGNALED(status)) e.signal = WTERMSIG(status);
    out.push_back(e);
  }
  return out;
}

namespace {

// Fields 3 (state), 5 (process group), 6 (session) and 22 (start time) of /proc/PID/stat;
// false when gone.
bool GroupAndStart(pid_t pid, long long& pgrp, long long& start, char* state = nullptr,
                   long long* session = nullptr) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat;
  if (!std::getline(in, stat)) return false;
  // The command name (field 2) is in parentheses and may hold spaces: count from the last ')'.
  const size_t close = stat.rfind(')');
  if (close == std::string::npos || close + 2 > stat.size()) return false;
  std::stringstream rest(stat.substr(close + 2));
  std::string field;
  for (int i = 3; i <= 22; ++i) {
    if (!(rest >> field)) return false;
    if (i == 3 && state) *state = field.empty() ? '?' : field[0];
    try {
      if (i == 3) continue;
      if (i == 5) pgrp = std::stoll(field);
      if (i == 6 && session) *session = std::stoll(field);
      if (i == 22) start = std::stoll(field);
    } catch (const std::exception&) {
      return false;
    }
  }
  return true;
}

}  // namespace

long long ProcessStartTime(pid_t pid) {
  long long pgrp = 0, start = 0;
  return GroupAndStart(pid, pgrp, start) ? start : -1;
}

bool Running(pid_t pid, long long start) {
  long long pgrp = 0, started = 0;
  char state = '?';
  return start >= 0 && GroupAndStart(pid, pgrp, started, &state) && started == start &&
         state != 'Z';
}

pid_t SessionOf(pid_t pid) {
  long long pgrp = 0, start = 0, session = -1;
  return GroupAndStart(pid, pgrp, start, nullptr, &session) ? static_cast<pid_t>(session) : -1;
}

std::vector<pid_t> GroupMembersSince(pid_t pgid, long long since) {
  std::vector<pid_t> out;
  DIR* proc = ::opendir("/proc");
  if (!proc) return out;
  while (dirent* e = ::readdir(proc)) {
    char* end = nullptr;
    const long v = std::strtol(e->d_name, &end, 10);
    if (*end != '\0' || v <= 1) continue;
    long long pgrp = 0, start = 0;
    char state = '?';
    if (GroupAndStart(static_cast<pid_t>(v), pgrp, start, &state) && pgrp == pgid &&
        start >= since && state != 'Z') {
      out.push_back(static_cast<pid_t>(v));
    }
  }
  ::closedir(proc);
  return out;
}

}  // namespace gantry::agent
