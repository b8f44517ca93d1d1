// Seeded random workloads for property tests: a cluster config, a trace and a failures
// file under the file contracts (spec sections 1 and 3).
//
// The same seed gives the same bytes on every platform: randomness comes only from a
// std::mt19937_64 seeded explicitly, drawn through this file's own integer and real
// helpers (the standard distributions are implementation-defined).
//
// Every job is built to fit some pool of an empty cluster (shape, topology, model, vram,
// sharing, CPUs, memory and queue bursts), except the few listed in `impossible_jobs`,
// which no GPU of the cluster can ever hold. A scheduler must therefore finish or reject
// exactly those; it may never reject another.
//
// Thread-safety: pure functions; safe to call concurrently.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace gantry::property {

struct WorkloadOptions {
  uint64_t seed = 1;
  int jobs = 2000;
};

struct Workload {
  std::string config_yaml;                   // cluster config (section 1)
  std::string trace_jsonl;                   // one job per line, sorted by submit (section 3)
  std::string failures_jsonl;                // {"t","node","down_s"} per line, sorted by t
  std::vector<std::string> impossible_jobs;  // ids that can never be placed
  std::vector<std::string> job_ids;          // all ids, in trace order
};

Workload GenerateWorkload(const WorkloadOptions& options);

struct WorkloadPaths {
  std::string config;    // DIR/cluster.yaml
  std::string trace;     // DIR/trace.jsonl
  std::string failures;  // DIR/failures.jsonl
};

// Writes the three files (and impossible.txt, one id a line) into `dir`, creating it.
// Throws std::runtime_error when a file cannot be written.
WorkloadPaths WriteWorkload(const Workload& workload, const std::string& dir);

}  // namespace gantry::property
