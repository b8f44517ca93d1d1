#include "agent/launcher.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace gantry::agent {

namespace {
// Variables of the agent's environment that jobs inherit; GANTRY_TOKEN and the rest do not.
constexpr const char* kInherited[] = {"PATH", "HOME", "LANG", "LC_ALL", "TZ", "USER", "LOGNAME",
                                      "SHELL", "TMPDIR"};

void WriteAll(int fd, const std::string& s) {
  size_t off = 0;
  while (off < s.size()) {
    ssize_t n = ::write(fd, s.data() + off, s.size() - off);
    if (n <= 0) return;
    off += static_cast<size_t>(n);
  }
}
}  // namespace

Result<pid_t> Launch(const LaunchSpec& spec) {
  if (spec.argv.empty()) return Error{"command", "empty command"};
  std::error_code ec;
  if (!spec.workdir.empty()) std::filesystem::create_directories(spec.workdir, ec);
  std::filesystem::create_directories(std::filesystem::path(spec.log_path).parent_path(), ec);
  const int log = ::open(spec.log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0640);
  if (log < 0) return Error{"log", spec.log_path + ": " + std::strerror(errno)};

  // Everything the child needs is prepared before fork: after it, only async-signal-safe
  // calls are allowed.
  std::vector<std::string> env_strings;
  for (const char* name : kInherited) {
    bool overridden = false;
    for (const auto& [k, v] : spec.env) overridden |= k == name;
    if (const char* v = std::getenv(name); v && !overridden) env_strings.push_back(std::string(name) + "=" + v);
  }
  for (const auto& [k, v] : spec.env) env_strings.push_back(k + "=" + v);
  std::vector<char*> envp, argv;
  for (auto& s : env_strings) envp.push_back(s.data());
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

  const pid_t pid = ::fork();
  if (pid < 0) {
    const int err = errno;
    ::close(log);
    return Error{"fork", std::strerror(err)};
  }
  if (pid == 0) {
    ::setsid();  // new session and process group: pgid == pid
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    for (int sig : {SIGTERM, SIGINT, SIGHUP, SIGPIPE, SIGCHLD, SIGUSR1, SIGUSR2}) ::signal(sig, SIG_DFL);
    const int null = ::open("/dev/null", O_RDONLY);
    if (null >= 0) ::dup2(null, 0);
    ::dup2(log, 1);
    ::dup2(log, 2);
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
  }
  ::close(log);
  return pid;
}

void SignalGroup(pid_t pgid, int sig) {
  if (pgid > 1) ::kill(-pgid, sig);
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

long long ProcessStartTime(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat;
  if (!std::getline(in, stat)) return -1;
  // The command name (field 2) is in parentheses and may hold spaces: count from the last ')'.
  const size_t close = stat.rfind(')');
  if (close == std::string::npos) return -1;
  std::stringstream rest(stat.substr(close + 2));
  std::string field;
  for (int i = 3; i <= 22; ++i) {
    if (!(rest >> field)) return -1;
  }
  try {
    return std::stoll(field);
  } catch (const std::exception&) {
    return -1;
  }
}

}  // namespace gantry::agent
