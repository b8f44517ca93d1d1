#include "agent/container.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <sstream>

extern char** environ;

namespace gantry::agent {

namespace fs = std::filesystem;

Result<ContainerRuntime> ContainerRuntime::Parse(const std::string& text) {
  std::vector<std::string> words;
  std::istringstream in(text);
  for (std::string w; in >> w;) words.push_back(w);
  ContainerRuntime rt;
  rt.podman.clear();
  bool seen_run = false;
  for (const std::string& w : words) {
    if (!seen_run && w == "run") {
      seen_run = true;
    } else {
      (seen_run ? rt.run_options : rt.podman).push_back(w);
    }
  }
  if (!seen_run || rt.podman.empty()) {
    return Error{"--container-run",
                 "expected \"podman [global options] run [run options]\", got \"" + text + "\""};
  }
  for (const char* p : {"/usr/libexec/podman/catatonit", "/usr/bin/catatonit"})
    rt.init |= ::access(p, X_OK) == 0;
  return rt;
}

std::string ContainerName(const std::string& node, int64_t seq, int run, int rank, int step) {
  std::string name = "gantry-" + node + "-" + std::to_string(seq) + "-" + std::to_string(run) +
                     (step >= 0 ? "-s" + std::to_string(step) : "") + "-" + std::to_string(rank);
  for (char& c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '.' && c != '-') c = '-';
  }
  return name;
}

std::vector<std::string> ContainerGpuDevices(const std::vector<std::string>& uuids,
                                             const std::vector<std::string>& nodes,
                                             const std::vector<std::string>& cdi_dirs) {
  std::vector<std::string> out;
  if (uuids.empty() && nodes.empty()) return out;
  bool cdi = false;
  for (const std::string& dir : cdi_dirs) {
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(dir, ec)) {
      const std::string ext = e.path().extension().string();
      cdi |= ext == ".yaml" || ext == ".json";
    }
  }
  if (cdi) {
    for (const std::string& u : uuids) out.push_back("nvidia.com/gpu=" + u);
    return out;
  }
  out = nodes;
  for (const char* c :
       {"/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia-modeset"}) {
    if (::access(c, F_OK) == 0) out.push_back(c);
  }
  return out;
}

std::vector<std::string> ContainerArgv(const ContainerRuntime& rt, const ContainerSpec& s) {
  std::vector<std::string> a = rt.podman;
  a.push_back("run");
  a.insert(a.end(), rt.run_options.begin(), rt.run_options.end());
  // Gang peers reach each other at the node's address (MASTER_ADDR, NCCL): the host's
  // network; NCCL's shared-memory transport wants the host's IPC, as NVIDIA's containers
  // are run.
  a.insert(a.end(), {"--rm", "--name", s.name, "--label", "gantry.node=" + s.node, "--label",
                     "gantry.agent=" + s.agent, "--label", "gantry.job=" + s.job, "--network",
                     "host", "--ipc", "host"});
  if (rt.init) a.push_back("--init");
  if (s.interactive) a.push_back("--interactive");
  if (!s.user.empty()) a.insert(a.end(), {"--user", s.user});
  if (s.umask >= 0) {
    char octal[8];
    std::snprintf(octal, sizeof octal, "%04o", static_cast<unsigned>(s.umask & 0777));
    a.insert(a.end(), {"--umask", octal});
  }
  if (!s.workdir.empty()) a.insert(a.end(), {"--volume", s.workdir + ":" + s.workdir});
  if (!s.inside_workdir.empty() || !s.workdir.empty())
    a.insert(a.end(), {"--workdir", s.inside_workdir.empty() ? s.workdir : s.inside_workdir});
  for (const std::string& m : s.mounts) a.insert(a.end(), {"--volume", m + ":" + m + ":ro"});
  for (const ContainerSpec::Bind& b : s.binds)
    a.insert(a.end(), {"--volume", b.source + ":" + b.target + (b.read_only ? ":ro" : "")});
  for (const std::string& d : s.devices) a.insert(a.end(), {"--device", d});
  if (s.memory_bytes > 0) a.insert(a.end(), {"--memory", std::to_string(s.memory_bytes) + "b"});
  if (s.cpus_milli > 0) {
    a.insert(a.end(), {"--cpus", std::to_string(s.cpus_milli / 1000) + "." +
                                     std::to_string(1000 + s.cpus_milli % 1000).substr(1)});
  }
  for (const auto& [k, v] : s.env) a.insert(a.end(), {"--env", k + "=" + v});
  a.push_back(s.image);
  a.insert(a.end(), s.command.begin(), s.command.end());
  return a;
}

std::vector<std::string> ContainerRemoveArgv(const ContainerRuntime& rt, const std::string& name) {
  std::vector<std::string> a = rt.podman;
  a.insert(a.end(), {"rm", "--force", "--ignore", "--time", "0", name});
  return a;
}

namespace {

std::vector<char*> CArgv(std::vector<std::string>& argv) {
  std::vector<char*> out;
  for (std::string& s : argv) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

}  // namespace

void SpawnQuietly(const std::vector<std::string>& argv) {
  std::vector<std::string> args = argv;
  std::vector<char*> c = CArgv(args);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  for (int fd : {0, 1, 2})
    posix_spawn_file_actions_addopen(&fa, fd, "/dev/null", fd == 0 ? O_RDONLY : O_WRONLY, 0);
  pid_t pid = 0;
  (void)posix_spawnp(&pid, c[0], &fa, nullptr, c.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
}

Result<std::string> RunCapture(const std::vector<std::string>& argv, int timeout_ms) {
  int out[2], err[2];
  if (::pipe2(out, O_CLOEXEC) != 0) return Error{argv[0], "pipe failed"};
  if (::pipe2(err, O_CLOEXEC) != 0) {
    ::close(out[0]);
    ::close(out[1]);
    return Error{argv[0], "pipe failed"};
  }
  std::vector<std::string> args = argv;
  std::vector<char*> c = CArgv(args);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&fa, out[1], 1);
  posix_spawn_file_actions_adddup2(&fa, err[1], 2);
  pid_t pid = 0;
  const int rc = posix_spawnp(&pid, c[0], &fa, nullptr, c.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  ::close(out[1]);
  ::close(err[1]);
  if (rc != 0) {
    ::close(out[0]);
    ::close(err[0]);
    return Error{argv[0], std::string("cannot run it: ") + std::strerror(rc)};
  }
  std::string text[2];
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  pollfd fds[2] = {{out[0], POLLIN, 0}, {err[0], POLLIN, 0}};
  int open_fds = 2;
  bool timed_out = false;
  while (open_fds > 0) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      timed_out = true;
      break;
    }
    if (::poll(fds, 2, static_cast<int>(left.count())) < 0 && errno != EINTR) break;
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      char buf[4096];
      const ssize_t n = ::read(fds[i].fd, buf, sizeof buf);
      if (n > 0) {
        text[i].append(buf, static_cast<size_t>(n));
      } else {
        ::close(fds[i].fd);
        fds[i].fd = -1;
        --open_fds;
      }
    }
  }
  for (const pollfd& p : fds) {
    if (p.fd >= 0) ::close(p.fd);
  }
  if (timed_out) ::kill(pid, SIGKILL);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (timed_out) return Error{argv[0], "no answer in " + std::to_string(timeout_ms) + " ms"};
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return Error{argv[0], "exit status " +
                              std::to_string(WIFEXITED(status) ? WEXITSTATUS(status)
                                                               : 128 + WTERMSIG(status)) +
                              ": " + text[1]};
  }
  return text[0];
}

Result<std::vector<std::string>> NodeContainers(const ContainerRuntime& rt, const std::string& node,
                                                const std::string& agent) {
  std::vector<std::string> argv = rt.podman;
  argv.insert(argv.end(), {"ps", "--all", "--filter", "label=gantry.node=" + node, "--format",
                           "{{.Names}} {{index .Labels \"gantry.agent\"}}"});
  auto out = RunCapture(argv);
  if (!out) return out.error();
  std::vector<std::string> names;
  std::istringstream lines(*out);
  for (std::string line; std::getline(lines, line);) {
    std::istringstream words(line);
    std::string name, owner;
    if (!(words >> name)) continue;
    words >> owner;  // none (an older agent's), or "<no value>" where podman has no label
    if (owner.empty() || owner == "<no" || owner == agent) names.push_back(name);
  }
  return names;
}

}  // namespace gantry::agent
