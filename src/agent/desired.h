// DesiredWorker: one of the workers a heartbeat's or a watch's answer says this node
// should have (docs/api.yaml, DesiredWorker), decoded into plain values.
// DecodeDesiredWorker is the one place in the agent that reads such an entry's keys; the
// rest of the agent sees only the struct, so the wire's spelling is kept in one function.
// Thread-safety: plain values and a pure function.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace gantry::agent {

// What the worker holds of this node's GPUs, as the scheduler placed it (docs/api.yaml,
// Alloc). Not checked against the node's GPUs: the agent resolves it (Agent::ResolveGpus).
struct DesiredAlloc {
  std::string sharing = "exclusive";  // exclusive, mig, mps or timeslice
  std::vector<int> gpus;              // exclusive: node GPU indexes
  int gpu = -1;                       // mig, mps, timeslice: the node GPU index
  std::string mig;                    // mig: the instance's profile, e.g. "1g.10gb"
  int start = -1;                     // mig: the first memory slice of its placement
  // mig on a mig_managed pool: the agent creates the instance, of the placement's size.
  bool create = false;
  int memory_slices = 0, compute_slices = 0;
  int share_milli = 0;     // mps, timeslice: thousandths of the GPU
  int64_t vram_bytes = 0;  // mps: its pinned device memory limit; 0: none
};

struct DesiredWorker {
  std::string job;
  int64_t seq = 0;
  int run = 0, rank = 0;
  bool start = true;     // "action" is "run" (or absent); else "stop": signal, then SIGKILL
  int64_t grace_ms = 0;  // from the first signal to SIGKILL
  std::vector<std::string> command;
  std::vector<std::pair<std::string, std::string>> env;  // the string-valued ones, by name
  std::string workdir;                                   // empty: the agent's own
  int signal = 0;  // the job's first signal when stopped; 0: the agent's --preempt-signal
  std::string stdout_path, stderr_path;  // sbatch -o/-e: relative to workdir unless absolute
  DesiredAlloc alloc;
  std::string user;    // the Unix account its token names; empty: none
  std::string script;  // sbatch: the batch script, run with command as its arguments
  int64_t memory_bytes = 0, cpus_milli = 0;  // its limits; 0: none
  std::string image;                         // run command in a container of this image
  nlohmann::json emulate;                    // emulated GPUs: the server's usage model (opaque)
};

// Decodes one entry of an answer's "workers". A missing key takes the default above but
// "job", "run" and "rank", which are required. Throws nlohmann::json's exception where a
// required key is missing or a key has the wrong type. Pure: no state, no system calls.
DesiredWorker DecodeDesiredWorker(const nlohmann::json& entry);

}  // namespace gantry::agent
