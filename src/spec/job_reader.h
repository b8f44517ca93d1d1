// Reads job specs (spec section 2) from JSON objects (trace lines, API bodies) and
// YAML files, and trace files (section 3) and failure files as streams.
//
// One decoder serves JSON and YAML: both are turned into a small tree that remembers
// line numbers, so YAML problems name their own line. Checks that need the cluster
// (unknown queue, MIG profile that none of the named models has) are made here;
// whether any GPU of the cluster could ever hold the job is core::WhyInfeasible's
// business (the simulator rejects such jobs in the event log).
// Thread-safety: TraceReader is single-threaded; the functions are stateless.
#pragma once

#include <fstream>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/model/job.h"
#include "spec/config_reader.h"
#include "spec/diagnostics.h"

namespace gantry::spec {

// Parses one trace line (a JSON object with submit and duration). Problems go to
// diags with `line`.
std::optional<core::TraceJob> ParseTraceLine(std::string_view text, const std::string& file,
                                             int line, const ClusterConfig& config,
                                             Diagnostics& diags);

// Parses a job spec (no submit/duration) from JSON text, e.g. an API request body.
std::optional<core::JobSpec> ParseJobJson(std::string_view text, const std::string& file,
                                          const ClusterConfig& config, Diagnostics& diags);

// Reads a YAML job spec file.
std::optional<core::JobSpec> ReadJobYaml(const std::string& path, const ClusterConfig& config,
                                         Diagnostics& diags);
// The same from YAML text; `file` labels diagnostics.
std::optional<core::JobSpec> ParseJobYaml(std::string_view yaml_text, const std::string& file,
                                          const ClusterConfig& config, Diagnostics& diags);

// Limits of a job spec (larger values are reported as errors).
inline constexpr int kMaxReplicas = 100'000;
inline constexpr int kMaxGpusPerWorker = 1024;

// Streams a trace: one job per call, blank lines skipped. Ids must be unique and
// submit times non-decreasing (both reported as problems of the offending line).
class TraceReader {
 public:
  TraceReader(std::string path, const ClusterConfig& config);
  bool ok() const { return in_.good() || in_.eof(); }  // false when the file can't be opened
  // Returns false at the end of the file. A bad line adds diags and is skipped. A file
  // that cannot be opened adds one diag and reads as empty. Memory: one line plus the ids.
  bool Next(core::TraceJob& job, Diagnostics& diags);

 private:
  std::string path_;
  const ClusterConfig& config_;
  std::ifstream in_;
  std::string text_;
  int line_ = 0;
  core::Ticks last_submit_ = 0;
  std::unordered_map<std::string, int> seen_ids_;  // id -> line it was first seen on
  bool open_reported_ = false;
};

struct Failure {
  core::Ticks t = 0;
  core::NodeId node;
  core::Ticks down = 0;
  int line = 0;
};

// Reads a failures file ({"t","node","down_s"} per line), sorted by t on return.
std::optional<std::vector<Failure>> ReadFailures(const std::string& path,
                                                 const core::Cluster& cluster, Diagnostics& diags);

}  // namespace gantry::spec
