// Golden event logs: every decision the policies make on a few fixed workloads, wait
// reasons included, compared line by line with the logs stored beside the workloads
// (tests/sim/golden). A change that is meant to leave decisions alone (a refactor of the
// policy pipeline, a faster data structure) must leave these logs as they are; a change
// that means to alter decisions rewrites them on purpose, and the diff shows what moved:
//
//   GANTRY_UPDATE_GOLDEN=1 build/release/tests/sim/golden_test
//
// The workloads are small `gantry gen` outputs (commands in tests/sim/golden/README.md)
// plus the bundled example, each under `gantry` and `fifo`.
#include <gtest/gtest.h>

#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "sim/simulator.h"
#include "spec/config_reader.h"
#include "spec/job_reader.h"

namespace gantry::sim {
namespace {

namespace fs = std::filesystem;

struct Case {
  std::string workload;  // folder holding cluster.yaml, trace.jsonl, failures.jsonl
  std::string policy;
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.workload << " under " << c.policy; }

fs::path Source() { return fs::path(GANTRY_SOURCE_DIR); }

fs::path WorkloadDir(const std::string& workload) {
  return workload == "example" ? Source() / "examples" : Source() / "tests/sim/golden" / workload;
}

fs::path GoldenPath(const Case& c) {
  return Source() / "tests/sim/golden" / (c.workload + "." + c.policy + ".events.jsonl");
}

std::vector<std::string> Lines(std::istream& in) {
  std::vector<std::string> out;
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

// The event log of one run, wait events included.
std::string Replay(const Case& c) {
  const fs::path dir = WorkloadDir(c.workload);
  spec::Diagnostics diags;
  auto config = spec::ReadClusterConfig((dir / "cluster.yaml").string(), diags);
  EXPECT_TRUE(config) << diags.ToString();
  if (!config) return "";
  auto failures = spec::ReadFailures((dir / "failures.jsonl").string(), config->cluster, diags);
  EXPECT_TRUE(failures) << diags.ToString();
  if (!failures) return "";
  std::ostringstream events;
  SimOptions options;
  options.policy = c.policy;
  options.log_waits = true;
  Simulator sim(*config, options, events);
  spec::TraceReader trace((dir / "trace.jsonl").string(), *config);
  EXPECT_TRUE(sim.Run(trace, *failures, diags));
  EXPECT_TRUE(diags.empty()) << diags.ToString();
  return events.str();
}

class Golden : public ::testing::TestWithParam<Case> {};

TEST_P(Golden, DecisionsMatchTheStoredEventLog) {
  const Case& c = GetParam();
  const std::string log = Replay(c);
  ASSERT_FALSE(log.empty());
  const fs::path golden = GoldenPath(c);
  if (const char* update = std::getenv("GANTRY_UPDATE_GOLDEN");
      update && *update && *update != '0') {
    std::ofstream(golden, std::ios::binary) << log;
    std::cout << "rewrote " << golden.string() << "\n";
    return;
  }
  std::ifstream in(golden, std::ios::binary);
  ASSERT_TRUE(in) << golden.string() << ": missing (GANTRY_UPDATE_GOLDEN=1 writes it)";
  std::istringstream got_in(log);
  const std::vector<std::string> want = Lines(in), got = Lines(got_in);
  size_t i = 0;
  while (i < want.size() && i < got.size() && want[i] == got[i]) ++i;
  if (i == want.size() && i == got.size()) return;
  ADD_FAILURE()
      << golden.string() << ": the decisions changed, first at line " << i + 1 << " of "
      << want.size() << " stored and " << got.size() << " now\n"
      << "  stored: " << (i < want.size() ? want[i] : "(end of log)") << "\n"
      << "  now:    " << (i < got.size() ? got[i] : "(end of log)") << "\n"
      << "If the change is meant, rewrite the logs with GANTRY_UPDATE_GOLDEN=1 and read the diff.";
}

std::vector<Case> Cases() {
  std::vector<Case> out;
  for (const char* workload : {"example", "load1.2-64gpu", "bymodel-32gpu", "training1.5-48gpu",
                               "waits-48gpu", "orders-32gpu"}) {
    for (const char* policy : {"gantry", "fifo"}) out.push_back({workload, policy});
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(Workloads, Golden, ::testing::ValuesIn(Cases()),
                         [](const ::testing::TestParamInfo<Case>& param) {
                           std::string name = param.param.workload + "_" + param.param.policy;
                           for (char& ch : name) {
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           }
                           return name;
                         });

}  // namespace
}  // namespace gantry::sim
