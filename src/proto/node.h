// The node protocol: the messages gantryd and its agents (gantry-agent, gantry-swarm)
// exchange over HTTP, as typed values with their JSON codecs. This is the one place
// where the wire's keys are written: the server, the agent and the swarm encode and
// decode through it, and docs/api.yaml's Heartbeat, Gpu, DesiredWorker and Alloc
// schemas and the heartbeat and watch answers are checked against it by a test
// (tests/proto/node_test.cc).
//
//   POST /v1/agents/NODE/heartbeat   Heartbeat       -> HeartbeatReply
//   GET  /v1/agents/NODE/watch       (query string)  -> WatchAnswer
//   POST /v1/agents/NODE/logs        (bytes)         -> LogUploadReply
//   any of them refused              -> Refusal (the API's error body)
//
// Rules of the format (docs/formats.md): add fields, never rename one or change its
// meaning; a decoder ignores keys it does not know and takes a missing key as its
// default, so older and newer agents and servers talk. Encoding then decoding gives the
// same value back (a round-trip test says so), and the encodings are what the wire
// carried before this library existed, byte for byte (nlohmann::json sorts keys).
//
// Decoders never throw: malformed input is an Error naming the field's path
// (`running[2].rank: must be an integer`). No core types here: the server converts.
// Thread-safety: plain values and pure functions.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"

namespace gantry::proto {

// One GPU as its agent sees it.
struct GpuReport {
  int index = 0;
  std::string uuid;
  std::string name;   // NVML's product name, or the emulated model
  std::string model;  // catalog model, when the agent knows it (emulation); absent when empty
  int64_t memory_bytes = 0;
  bool mig_mode = false;
  struct Mig {
    std::string uuid, profile;
    int start = -1;
    int gi_id = -1;  // NVML's GPU instance id, where the agent's driver said (absent: -1)
    bool operator==(const Mig&) const = default;
  };
  std::vector<Mig> mig;
  double utilization = 0;         // 0..1, last sample
  int64_t memory_used_bytes = 0;  // last sample
  int64_t idle_ms = 0;            // how long utilization has been 0
  bool lost = false;              // NVML says the GPU fell off the bus
  std::vector<int> nvlink_peers;
  bool operator==(const GpuReport&) const = default;
};

// What one worker uses now, when its agent can tell.
struct WorkerUsage {
  double util = 0;  // 0..1 of what it holds (decoding clamps)
  int64_t vram_used_bytes = 0;
  bool operator==(const WorkerUsage&) const = default;
};

// `step` (absent: -1) names a task of a job step (`srun` in a batch job): `rank` is then
// the task's id in that step (SLURM_PROCID), not a worker's rank.
struct RunningReport {
  std::string job;
  int run = 0, rank = 0;
  int64_t pid = 0;
  std::optional<WorkerUsage> usage;  // absent when the agent cannot tell
  int step = -1;
  bool operator==(const RunningReport&) const = default;
};

struct ExitReport {
  std::string job;
  int run = 0, rank = 0;
  int exit_code = 0, signal = 0;
  bool lost = false;  // ended by the agent itself (fence, shutdown, restart): requeue
  std::string note;
  std::string drain;  // a node problem that kept the worker from starting (absent when empty)
  int step = -1;      // as RunningReport's
  bool operator==(const ExitReport&) const = default;
};

// Heartbeat::isolation's keys: a cgroup per worker (memory and CPU limits, every process
// found); a worker may open only its own GPUs' device files; MIG workers sharing a GPU
// cannot open each other's instances (only said with a MIG-capable driver).
inline constexpr const char* kIsolationCgroups = "cgroups";
inline constexpr const char* kIsolationGpuDevices = "gpu_devices";
inline constexpr const char* kIsolationMig = "mig";

// POST /v1/agents/NODE/heartbeat.
struct Heartbeat {
  std::string agent_id;  // random per agent process
  bool leaving = false;  // the agent is shutting down: its node goes down now (absent: false)
  std::string address;   // where gang peers reach the node (absent when empty)
  std::vector<GpuReport> gpus;
  std::vector<RunningReport> running;
  std::vector<ExitReport> exits;
  // What keeps the node's workers apart: "cgroups", "gpu_devices", "mig"; absent from an
  // agent that does not say (the swarm, older agents).
  std::optional<std::map<std::string, bool>> isolation;
  bool operator==(const Heartbeat&) const = default;
};

// One worker's holding on its node, as the event log and the API write it.
struct Alloc {
  std::string node;
  std::string sharing = "exclusive";  // exclusive, mig, mps, timeslice
  std::vector<int> gpus;              // exclusive: GPU indexes
  int gpu = -1;                       // mig, mps, timeslice: the GPU index
  std::string mig;                    // mig: the profile
  int start = -1;                     // mig: the placement's first memory slice
  int share_milli = 0;                // mps, timeslice
  int64_t vram_bytes = 0;             // mps, timeslice
  int64_t cpus_milli = 0;
  int64_t memory_bytes = 0;
  // A mig_managed pool: the agent creates the instance (and destroys it when the worker
  // ends), so it is sent the placement's size too. Desired workers only.
  bool create = false;
  int memory_slices = 0, compute_slices = 0;
  bool operator==(const Alloc&) const = default;
};

// What the agent enforces on the worker's cgroup, and the CPUs it binds the worker to.
struct Limits {
  int64_t memory_bytes = 0;
  int64_t cpus_milli = 0;
  // Whole CPUs the job holds on the node (its SLURM_CPUS_ON_NODE: a batch job's at least
  // one per task); 0 (absent): cpus_milli rounded up. The agent gives the worker that many
  // of its CPUs (base/cpus.h); none when both are 0.
  int cpus = 0;
  bool operator==(const Limits&) const = default;
};

// Emulated agents only: how busy the worker looks (a test and benchmark aid).
struct Emulate {
  double util = 0;  // 0..1 while busy
  int64_t vram_used_bytes = 0;
  int64_t idle_after_ms = -1;  // run time after which it looks idle; -1: never
  bool operator==(const Emulate&) const = default;
};

// One worker a node should have: `run` starts it if the agent does not have it, `stop`
// signals it and SIGKILLs it after grace_ms; the agent kills its workers not listed.
struct DesiredWorker {
  enum class Action : uint8_t { kRun, kStop };
  std::string job;
  int64_t seq = 0;
  int run = 0, rank = 0;
  Action action = Action::kRun;
  int64_t grace_ms = 0;
  std::vector<std::string> command;
  std::map<std::string, std::string> env;
  std::string workdir;
  std::string user;  // the submitter's Unix account, when known
  Alloc alloc;
  Limits limits;
  // Absent when empty or 0:
  std::string script;  // `gantry sbatch`: the batch script the agent writes and runs
  std::string image;   // a container image: podman run in the foreground is the worker
  // Its container's more mounts (srun --container-mounts), its working directory inside
  // (else `workdir`, which is mounted at its path), and the user's home mounted at its path
  // ("mount_home", pyxis' default for steps).
  struct Mount {
    std::string source, target;
    bool read_only = false;
    bool operator==(const Mount&) const = default;
  };
  std::vector<Mount> mounts;
  std::string container_workdir;
  bool mount_home = false;
  // Whether `path` can be one side of a mount as podman's --volume takes it: absolute,
  // without its separators (':' and ','), at most 4096 bytes. gantryd checks what srun
  // sends, the agent what it is sent.
  static bool PlainMountPath(const std::string& path) {
    return !path.empty() && path.size() <= 4096 && path.front() == '/' &&
           path.find_first_of(std::string_view(":,\0", 3)) == std::string::npos;
  }
  int signal = 0;  // the first signal when stopped, instead of --preempt-signal
  std::string stdout_path, stderr_path;  // "stdout", "stderr": expanded, relative to workdir
  bool append_output = false;            // "open_mode": "append": appended to, not truncated
  // "signal_to": "script": the first signal goes to the batch script's shell alone, not
  // its process group (sbatch --signal=B:SIG, as Slurm sends it); SIGKILL still to all.
  bool signal_script_only = false;
  // "gpu_names": "index": CUDA_VISIBLE_DEVICES names whole GPUs by their index on the node,
  // as Slurm's gres does (sbatch jobs and their steps); absent: by UUID.
  bool gpus_by_index = false;
  std::optional<Emulate> emulate;
  // A task of job step `step` (`srun` in a batch job; absent: -1): `rank` is its id in the
  // step. It runs inside the job's allocation on this node and ends on its own.
  int step = -1;
  // A step's task: the step's CPUs here, as positions among the job's CPUs on this node
  // (the agent's sorted list of them, Limits::cpus long, wrapping where it holds fewer);
  // empty: all of the job's.
  std::vector<int> step_cpus;
  // A step's task: its standard input (srun's), base64; absent: /dev/null.
  std::string input;
  // Signals asked of the running worker (scancel --signal), numbered from 1 in the run:
  // the agent sends each once, those numbered above the last it sent, to the worker's
  // process group or, `script_only`, to the batch script's shell alone (scancel -b). A
  // worker started after a signal was asked does not get it.
  struct Signal {
    int n = 0;
    int signal = 0;
    bool script_only = false;
    bool operator==(const Signal&) const = default;
  };
  std::vector<Signal> signals;
  bool operator==(const DesiredWorker&) const = default;
};

// GET /v1/agents/NODE/watch, and the workers part of a heartbeat's answer. A node's
// answer is rebuilt whenever anything on it changes while most of its workers did not,
// so the entries are shared: built once per run by the server, copied by no one.
struct WatchAnswer {
  std::string instance;  // the answering gantryd process
  int64_t epoch = 0;     // its leader lease epoch; 0: a gantryd that does not say
  int64_t version = -1;  // the node's version of this list
  std::vector<std::shared_ptr<const DesiredWorker>> workers;
};

struct HeartbeatReply {
  WatchAnswer answer;
  int64_t heartbeat_ms = 0;     // the interval the agent should use
  int64_t lease_ms = 0;         // cut off this long, the agent stops its workers itself
  int64_t node_timeout_ms = 0;  // silent this long, the server calls the node down
};

// POST /v1/agents/NODE/logs: the size the server now has of that output.
struct LogUploadReply {
  int64_t size = -1;
};

// Any refusal (the API's error body): a standby names the leader.
struct Refusal {
  std::string error;
  std::string role;    // "standby" from a standby gantryd
  std::string leader;  // the leader's URL, where the standby knows it
  // From a leader whose store is unavailable (docs/control-plane.md, "Store outages"):
  // store "unavailable"; hold: nothing was recorded, keep the workers and report again
  // (the lease goes on); without hold, look for another server.
  std::string store;
  bool hold = false;
};

nlohmann::json Encode(const GpuReport& g);
nlohmann::json Encode(const std::vector<GpuReport>& gpus);
nlohmann::json Encode(const RunningReport& r);
nlohmann::json Encode(const ExitReport& e);
nlohmann::json Encode(const Heartbeat& h);
nlohmann::json Encode(const Alloc& a);
nlohmann::json Encode(const Limits& l);
nlohmann::json Encode(const Emulate& e);
nlohmann::json Encode(const DesiredWorker& w);
nlohmann::json Encode(const WatchAnswer& a);
nlohmann::json Encode(const HeartbeatReply& r);
nlohmann::json Encode(const LogUploadReply& r);

Result<std::vector<GpuReport>> DecodeGpus(const nlohmann::json& j);
Result<Heartbeat> DecodeHeartbeat(const nlohmann::json& j);
Result<Alloc> DecodeAlloc(const nlohmann::json& j);
Result<Emulate> DecodeEmulate(const nlohmann::json& j);
Result<DesiredWorker> DecodeDesiredWorker(const nlohmann::json& j);
Result<WatchAnswer> DecodeWatchAnswer(const nlohmann::json& j);
Result<HeartbeatReply> DecodeHeartbeatReply(const nlohmann::json& j);
Result<LogUploadReply> DecodeLogUploadReply(const nlohmann::json& j);
// Never fails: a body that is not an error object gives its text as the error.
Refusal DecodeRefusal(const std::string& body);

// Text in, value out: the JSON parse and the decode (what the fuzz target drives).
Result<Heartbeat> ParseHeartbeat(std::string_view text);
Result<HeartbeatReply> ParseHeartbeatReply(std::string_view text);
Result<WatchAnswer> ParseWatchAnswer(std::string_view text);

std::string_view Word(DesiredWorker::Action a);  // "run", "stop"

// What an agent files a worker under: job, run and rank, and the step for a step's task.
std::string WorkerKey(const std::string& job, int run, int rank, int step = -1);

// The requests' targets (path and query string), names escaped.
std::string HeartbeatTarget(const std::string& node);
// `instance` and `version`: the answer last applied ("" and -1: none); held up to timeout_ms.
std::string WatchTarget(const std::string& node, const std::string& instance, int64_t version,
                        int64_t timeout_ms);
// A chunk of a worker's output starting at byte `offset` of it.
// `step` >= 0: the output of task `rank` of that job step, its stderr with `err`
// (&stream=err).
std::string LogsTarget(const std::string& node, const std::string& job, int run, int rank,
                       int64_t offset, int step = -1, bool err = false);

}  // namespace gantry::proto
