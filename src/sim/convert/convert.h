// Trace converters: public GPU-cluster traces -> a Gantry cluster config and trace.
//
// `gantry trace convert --format F ... --out DIR` writes DIR/cluster.yaml and
// DIR/trace.jsonl (and DIR/failures.jsonl when the source has node failures; none of
// the supported ones does). Every mapping, guess and dropped field is described in
// docs/traces.md; the code names the same rules in its comments.
//
// Inputs are read line by line (gzip or plain, via zlib). A converter keeps one small
// fixed-size record per job (to sort by submit time and to size queues and the cluster
// from the whole trace), never the file's text.
// Errors: Error::field is "--out" for output problems (exit status 1), otherwise the
// input is at fault (exit status 2) and the message names the file and line.
// Thread-safety: stateless functions.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "base/result.h"
#include "sim/convert/trace_files.h"

namespace gantry::convert {

struct ConvertOptions {
  std::string format;  // openb, philly, gavel, pollux, sia, tiresias, kubernetes, helios
  std::vector<std::string> inputs;   // job files (or one folder of per-VC files for gavel)
  std::string out;                   // output folder
  std::string node_list;             // openb: node list CSV
  std::string throughputs;           // gavel: simulation_throughputs.json(.gz)
  std::string worker_type = "v100";  // gavel: throughput column and GPU of the cluster
  std::string profiles;              // pollux/sia: folder of per-application profiles
  std::string cluster_spec;          // tiresias: cluster spec CSV
  int nodes = 0;                     // cluster size in nodes (0: the format's default)
  int cluster_scale = 1;             // sia: multiplies every pool of the default cluster
  int64_t limit = 0;                 // keep the first N jobs in submit order (0: all)
  double fill = 0;                   // openb: FGD fill mode, multiple of GPU capacity
  uint64_t seed = 0;                 // openb fill: sampling seed
  std::string name;                  // cluster name (empty: the format's)
  double duration_s = 3600;          // kubernetes: the run time of a pod that states none
  double elastic_checkpoint_s = 0;   // pollux/sia: gangs elastic with their profiles' speedup
};

struct ConvertSummary {
  TraceStats trace;
  int64_t cluster_gpus = 0;
  int64_t cluster_nodes = 0;
  int64_t rows = 0;                         // source rows read
  std::map<std::string, int64_t> dropped;   // reason -> rows left out
  std::map<std::string, int64_t> adjusted;  // rule -> rows changed (e.g. duration raised to 1 s)
  std::vector<std::string> files;           // written
};

// The formats `--format` accepts, helios included (it explains why it cannot convert).
const std::vector<std::string>& Formats();

Result<ConvertSummary> Convert(const ConvertOptions& options);

// Per format (called by Convert; exposed for tests).
Result<ConvertSummary> ConvertOpenb(const ConvertOptions& options);
Result<ConvertSummary> ConvertPhilly(const ConvertOptions& options);
Result<ConvertSummary> ConvertGavel(const ConvertOptions& options);
Result<ConvertSummary> ConvertPollux(const ConvertOptions& options, bool sia);
Result<ConvertSummary> ConvertTiresias(const ConvertOptions& options);
Result<ConvertSummary> ConvertKubernetes(const ConvertOptions& options);

// The text `--format helios` fails with.
extern const char* const kHeliosUnavailable;

}  // namespace gantry::convert
