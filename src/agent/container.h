// Jobs that name an `image` run in a container through podman (Debian 12's podman): the
// worker process the agent starts, signals and waits for is `podman run` in the
// foreground, which forwards signals to the container (--sig-proxy, podman's default)
// and exits with the container's exit status; the container itself lives under podman's
// conmon, so whatever ends a worker also removes its container (`podman rm -f`), and a
// restarted agent removes the containers of this node no worker record names.
// Thread-safety: the functions are pure or start processes; no shared state.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "base/result.h"

namespace gantry::agent {

// How this node runs containers: gantry-agent --container-run "podman [global options]
// run [run options]". The podman command and its global options (`--runtime runc`), and
// the options every `podman run` gets (`--ulimit ...`).
struct ContainerRuntime {
  std::vector<std::string> podman = {"podman"};
  std::vector<std::string> run_options;
  bool init =
      false;  // --init: podman's catatonit is installed (signals reach the job, zombies are reaped)

  // Splits the --container-run text at the word `run`; an error when it has none.
  static Result<ContainerRuntime> Parse(const std::string& text);
};

struct ContainerSpec {
  std::string name;   // ContainerName
  std::string node;   // labels: gantry.node, gantry.agent, gantry.job
  std::string agent;  // the agent's scope (node and state directory): only it cleans up after
  std::string job;
  std::string image;
  std::vector<std::string> command;  // empty: the image's own
  std::vector<std::pair<std::string, std::string>> env;
  std::string workdir;  // mounted at the same path and the working directory
  std::vector<std::string>
      mounts;  // more host paths at the same path, read-only (the batch script)
  // More host paths where the job asked (srun --container-mounts, the user's home), and
  // the working directory inside when the job named one (else `workdir`).
  struct Bind {
    std::string source, target;
    bool read_only = false;
  };
  std::vector<Bind> binds;
  std::string inside_workdir;
  std::vector<std::string> devices;  // --device arguments (ContainerGpuDevices)
  int64_t memory_bytes = 0;          // 0: no limit
  int64_t cpus_milli = 0;            // 0: no limit
  std::string user;                  // "uid:gid", empty: the image's
  int umask = -1;                    // the job's umask (SLURM_UMASK); -1: podman's (0022)
  bool interactive = false;          // podman's stdin to the container (-i: a step's input)
};

// "gantry-NODE-SEQ-RUN-RANK", with characters podman refuses in names replaced by '-'.
// `step` >= 0: task `rank` of that job step (named ...-sSTEP-RANK).
std::string ContainerName(const std::string& node, int64_t seq, int run, int rank, int step = -1);

// The GPUs a worker is given, as --device arguments: CDI names (nvidia.com/gpu=UUID, as
// `nvidia-ctk cdi generate --device-name-strategy=uuid` writes them) where the node has
// CDI specs (cdi_dirs holds a .yaml or .json), else the device nodes: `nodes` (the agent's:
// /dev/nvidiaN by each GPU's minor number, a MIG instance's two nvidia-caps devices), and
// the driver's control nodes that exist. Nothing for no GPUs.
std::vector<std::string> ContainerGpuDevices(const std::vector<std::string>& uuids,
                                             const std::vector<std::string>& nodes,
                                             const std::vector<std::string>& cdi_dirs = {
                                                 "/etc/cdi", "/var/run/cdi"});

// The full argv of the worker's `podman run`.
std::vector<std::string> ContainerArgv(const ContainerRuntime& rt, const ContainerSpec& spec);

// The argv that removes container `name`, stopping it at once if it runs (no error when
// it is gone already).
std::vector<std::string> ContainerRemoveArgv(const ContainerRuntime& rt, const std::string& name);

// Starts argv with no input and its output discarded, and does not wait (the agent, a
// subreaper, reaps it with its other children). Async-signal-safe in the child.
void SpawnQuietly(const std::vector<std::string>& argv);

// Runs argv and returns its standard output, or an error with its exit status and
// standard error. Waits at most timeout_ms, then kills it.
Result<std::string> RunCapture(const std::vector<std::string>& argv, int timeout_ms = 30000);

// The names of this agent's containers, running or not: labelled gantry.node=NODE and
// gantry.agent=AGENT, or with no gantry.agent label (started by an agent before it was
// set); not those of another agent of the same node name (another cluster's on this
// machine).
Result<std::vector<std::string>> NodeContainers(const ContainerRuntime& rt, const std::string& node,
                                                const std::string& agent);

}  // namespace gantry::agent
