// gantry-agent: joins a node to a Gantry cluster.
//
//   gantry-agent --server URL --node NAME [--emulate COUNTxMODEL] [--state-dir DIR]
//
// The server URL defaults to $GANTRY_SERVER and the token to $GANTRY_TOKEN (or
// --token-file). Without --emulate the GPUs come from NVML; a machine without NVIDIA's
// driver then needs --emulate, or --no-gpus for a CPU-only node.
// SIGHUP is ignored (nothing to reload). SIGUSR2 (an upgrade): it exits at once leaving its
// workers running, for the next gantry-agent on the same state directory to take over
// (within the lease; else their shims stop them). Exit status: 0 after SIGTERM/SIGINT
// (workers stopped and reported), 75 after SIGUSR2 (so systemd's Restart=on-failure starts
// the new binary), 1 on a run-time failure, 2 on bad input.
#include <csignal>

#include <CLI/CLI.hpp>
#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string_view>

#include "agent/agent.h"
#include "agent/emulated.h"
#include "agent/launcher.h"
#include "agent/nvml.h"
#include "base/log.h"

using namespace gantry;

namespace {

std::atomic<bool> g_stop{false};
std::atomic<bool> g_leave{false};
extern "C" void OnStop(int) { g_stop.store(true); }
extern "C" void OnLeave(int) {
  g_leave.store(true);
  g_stop.store(true);
}

class NoGpus final : public agent::GpuSource {
 public:
  std::string Describe() const override { return "no GPUs"; }
  Result<std::vector<agent::GpuInfo>> Discover() override { return std::vector<agent::GpuInfo>{}; }
};

int SignalNumber(const std::string& s) {
  static const std::pair<const char*, int> kNames[] = {{"TERM", SIGTERM}, {"INT", SIGINT},
                                                       {"USR1", SIGUSR1}, {"USR2", SIGUSR2},
                                                       {"HUP", SIGHUP},   {"KILL", SIGKILL}};
  std::string n = s.rfind("SIG", 0) == 0 ? s.substr(3) : s;
  for (const auto& [name, num] : kNames) {
    if (n == name) return num;
  }
  return -1;
}

}  // namespace

int main(int argc, char** argv) {
  // A worker's shim (agent/launcher.h), exec'd by the agent: nothing else of the agent runs.
  if (argc > 1 && std::string_view(argv[1]) == "--shim-worker") return agent::ShimMain(argc, argv);
  CLI::App app{"gantry-agent: runs Gantry jobs on one node"};
  agent::AgentOptions o;
  std::string emulate, token_file, emulate_lost, preempt_signal = "TERM",
                                                 container_run = "podman run";
  bool no_gpus = false;
  if (const char* s = std::getenv("GANTRY_SERVER")) o.server = s;
  if (const char* t = std::getenv("GANTRY_TOKEN")) o.token = t;
  if (const char* c = std::getenv("GANTRY_CA_CERT")) o.ca_cert = c;
  app.add_option("--server", o.server, "gantryd URL (default: $GANTRY_SERVER)");
  app.add_option("--node", o.node, "This node's name in the cluster config")->required();
  app.add_option("--ca-cert", o.ca_cert,
                 "For https:// servers: trust this PEM CA certificate (default: $GANTRY_CA_CERT, "
                 "else the system's)");
  app.add_option("--token-file", token_file,
                 "File holding the agent token (default: $GANTRY_TOKEN)");
  app.add_option("--emulate", emulate, "Emulate GPUs instead of NVML, e.g. 8xH100-80GB");
  app.add_option("--emulate-lost-file", emulate_lost,
                 "With --emulate: a file of GPU indexes to report as lost (tests)");
  app.add_flag("--no-gpus", no_gpus, "A CPU-only node: report no GPUs, skip NVML");
  app.add_option(
         "--state-dir", o.state_dir,
         "Logs, work directories, worker records and the agent's id (one agent per directory; "
         "a restarted agent on it takes over the workers still running)")
      ->default_str("/var/lib/gantry-agent");
  app.add_option("--cgroups", o.cgroups,
                 "Worker isolation: auto (a cgroup per worker when a writable v2 or v1 hierarchy "
                 "is found), "
                 "v2, v1 (that or fail) or off")
      ->capture_default_str();
  app.add_option(
      "--run-as", o.run_as,
      "user: each job as the Unix account its token names (default when root); agent: as this "
      "agent's user");
  std::string log_format = "text";
  app.add_option("--log-format", log_format, "Log on stderr: text or json (JSON Lines)")
      ->capture_default_str();
  app.add_option("--address", o.address,
                 "Address gang peers reach this node at (default: as the server sees it)");
  app.add_option("--preempt-signal", preempt_signal, "Signal sent first when a job is preempted")
      ->capture_default_str();
  app.add_option("--container-run", container_run,
                 "How jobs that name an image run: podman [global options] run [run options], e.g. "
                 "\"podman --runtime runc run --ulimit nofile=1024:1024\"")
      ->capture_default_str();
  bool no_slurm_commands = false;
  app.add_option(
      "--slurm-commands", o.slurm_commands,
      "Directory of srun, salloc, scontrol, sbatch, squeue, scancel and sacct for batch jobs, "
      "first on their PATH (default: slurm/ beside this program, else "
      "../lib/gantry/slurm from it)");
  app.add_flag("--no-slurm-commands", no_slurm_commands,
               "Put no Slurm commands on batch jobs' PATH (a real Slurm's are used there)");
  app.add_option("--proc", o.proc, "Where /proc is (tests)")->group("");
  app.add_option("--sys", o.sys, "Where /sys is (tests)")->group("");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }
  if (!log::Configure("gantry-agent", log_format)) {
    std::cerr << "gantry-agent: --log-format: expected text or json, got " << log_format << "\n";
    return 2;
  }
  if (o.state_dir.empty()) o.state_dir = "/var/lib/gantry-agent";
  if (no_slurm_commands) {
    o.slurm_commands.clear();
  } else if (o.slurm_commands.empty()) {
    std::error_code ec;
    const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
    for (const char* rel : {"slurm", "../lib/gantry/slurm"}) {
      const std::filesystem::path dir = self.parent_path() / rel;
      if (!ec && std::filesystem::exists(dir / "srun")) {
        o.slurm_commands = std::filesystem::weakly_canonical(dir).string();
        break;
      }
    }
  }
  if (o.server.empty()) {
    log::Error("--server or GANTRY_SERVER is required");
    return 2;
  }
  if (o.server.find("://") == std::string::npos) o.server = "http://" + o.server;
  if (!token_file.empty()) {
    std::ifstream in(token_file);
    if (!(in >> o.token)) {
      log::Error("--token-file: cannot read " + token_file);
      return 2;
    }
  }
  auto containers = agent::ContainerRuntime::Parse(container_run);
  if (!containers) {
    log::Error(containers.error().ToString());
    return 2;
  }
  o.container = std::move(*containers);
  o.preempt_signal = SignalNumber(preempt_signal);
  if (o.preempt_signal < 0) {
    log::Error("--preempt-signal: unknown signal " + preempt_signal);
    return 2;
  }
  std::unique_ptr<agent::GpuSource> gpus;
  if (no_gpus) {
    gpus = std::make_unique<NoGpus>();
  } else if (!emulate.empty()) {
    auto spec = agent::ParseEmulate(emulate);
    if (!spec) {
      log::Error("--emulate: " + spec.error().message);
      return 2;
    }
    gpus = std::make_unique<agent::EmulatedGpus>(o.node, *spec, emulate_lost);
  } else {
    auto nvml = agent::NvmlGpus::Open();
    if (!nvml) {
      log::Error("no NVML (" + nvml.error().message +
                 "); use --emulate COUNTxMODEL on a machine without GPUs, or --no-gpus");
      return 1;
    }
    gpus = std::move(*nvml);
  }
  struct sigaction sa {};
  sa.sa_handler = OnStop;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, nullptr);
  // SIGHUP (a closed terminal, `systemctl reload`) must not end the agent and its jobs:
  // it logs to stderr (journald) and takes its settings from the command line, so there
  // is nothing to reopen or reload.
  std::signal(SIGHUP, SIG_IGN);
  sigaction(SIGINT, &sa, nullptr);
  struct sigaction leave {};
  leave.sa_handler = OnLeave;
  sigemptyset(&leave.sa_mask);
  sigaction(SIGUSR2, &leave, nullptr);
  std::signal(SIGPIPE, SIG_IGN);
  agent::Agent a(o, std::move(gpus));
  const int rc = a.Run(g_stop, &g_leave);
  return rc == 0 && g_leave.load() ? 75 : rc;
}
