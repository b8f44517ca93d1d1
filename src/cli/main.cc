// gantry: the command line. `sim` replays a trace through the scheduling core;
// `validate` checks input files. Exit status: 0 success, 1 failure at run time,
// 2 bad input (with a message naming file, line and field).
#include <CLI/CLI.hpp>
#include <filesystem>
#include <fmt/format.h>
#include <fstream>
#include <iostream>
#include <unistd.h>

#include "cli/client.h"
#include "cli/example_data.h"
#include "cli/trace_commands.h"
#include "cli/validate.h"
#include "core/scheduler.h"
#include "sim/simulator.h"
#include "spec/config_reader.h"
#include "spec/job_reader.h"

namespace fs = std::filesystem;
using namespace gantry;

namespace {

constexpr int kExitRunFailure = 1;
constexpr int kExitBadInput = 2;

struct SimArgs {
  std::string config, trace, failures, policy = "gantry", events, report;
  bool no_waits = false;
  bool quiet = false;
};

// Writes the compiled-in example to a private directory and points the args at it.
bool UseExample(SimArgs& a) {
  fs::path dir = fs::temp_directory_path() / fmt::format("gantry-example-{}", ::getpid());
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return false;
  auto put = [&](const char* name, const char* text) {
    std::ofstream(dir / name) << text;
    return (dir / name).string();
  };
  a.config = put("cluster.yaml", cli::kExampleCluster);
  a.trace = put("trace.jsonl", cli::kExampleTrace);
  if (a.failures.empty()) a.failures = put("failures.jsonl", cli::kExampleFailures);
  if (a.events.empty()) a.events = (dir / "events.jsonl").string();
  if (a.report.empty()) a.report = (dir / "report.json").string();
  return true;
}

int RunSim(SimArgs a) {
  if (a.config.empty() != a.trace.empty()) {
    std::cerr << "gantry sim: give both --config and --trace, or neither for the bundled example\n";
    return kExitBadInput;
  }
  const bool example = a.config.empty();
  if (example && !UseExample(a)) {
    std::cerr << "gantry sim: cannot write the example to the temporary directory\n";
    return kExitRunFailure;
  }
  if (!core::MakePolicy(a.policy)) {
    std::string known;
    for (const auto& n : core::PolicyNames()) known += (known.empty() ? "" : ", ") + n;
    std::cerr << fmt::format("gantry sim: --policy: unknown policy \"{}\" (known: {})\n", a.policy,
                             known);
    return kExitBadInput;
  }
  spec::Diagnostics diags;
  std::optional<spec::ClusterConfig> config = spec::ReadClusterConfig(a.config, diags);
  std::vector<spec::Failure> failures;
  if (config && !a.failures.empty()) {
    if (auto f = spec::ReadFailures(a.failures, config->cluster, diags)) failures = std::move(*f);
  }
  if (config) {  // check the whole trace first: every problem at once, before any output
    spec::TraceReader check(a.trace, *config);
    if (!check.ok()) {
      diags.Add(a.trace, 0, "", "cannot open the trace");
    } else {
      core::TraceJob job;
      while (check.Next(job, diags)) {
      }
    }
  }
  if (!diags.empty() || !config) {
    std::cerr << diags.ToString();
    return kExitBadInput;
  }
  std::ofstream events(a.events.empty() ? "/dev/null" : a.events, std::ios::binary);
  if (!events) {
    std::cerr << fmt::format("gantry sim: --events: cannot write {}\n", a.events);
    return kExitRunFailure;
  }
  sim::SimOptions options;
  options.policy = a.policy;
  options.log_waits = !a.no_waits;
  sim::Simulator simulator(*config, options, events);
  spec::TraceReader trace(a.trace, *config);
  simulator.Run(trace, failures, diags);
  events.flush();
  if (!events) {
    std::cerr << fmt::format("gantry sim: --events: write to {} failed\n", a.events);
    return kExitRunFailure;
  }
  if (!a.report.empty()) {
    std::ofstream report(a.report);
    simulator.report().Write(report);
    if (!report.flush()) {
      std::cerr << fmt::format("gantry sim: --report: cannot write {}\n", a.report);
      return kExitRunFailure;
    }
  }
  if (!a.quiet) {
    if (example) std::cout << "gantry sim: bundled example (examples/ in the source tree)\n";
    simulator.report().Summary(std::cout);
    if (!a.events.empty()) std::cout << "  event log           " << a.events << "\n";
    if (!a.report.empty()) std::cout << "  report              " << a.report << "\n";
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"gantry: GPU cluster scheduler"};
  app.require_subcommand(1);
  SimArgs sim_args;
  CLI::App* sim = app.add_subcommand("sim", "Replay a trace through a scheduling policy");
  sim->add_option("--config", sim_args.config, "Cluster config (YAML)");
  sim->add_option("--trace", sim_args.trace, "Trace (JSON Lines)");
  sim->add_option("--failures", sim_args.failures, "Node failures (JSON Lines)");
  sim->add_option("--policy", sim_args.policy, "Scheduling policy")->capture_default_str();
  sim->add_option("--events", sim_args.events, "Event log to write (JSON Lines)");
  sim->add_option("--report", sim_args.report, "Report to write (JSON)");
  sim->add_flag("--no-wait-events", sim_args.no_waits, "Leave wait-reason events out of the log");
  sim->add_flag("-q,--quiet", sim_args.quiet, "Print no summary");
  std::vector<std::string> files;
  CLI::App* validate = app.add_subcommand("validate", "Check input files without running");
  validate->add_option("files", files, "Cluster configs, job specs, traces, failure files")
      ->required();
  int tool_exit = -1;  // set by `trace convert` and `gen` when they ran
  cli::AddTraceCommands(app, tool_exit);
  cli::AddClientCommands(app, tool_exit);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);
    return rc == 0 ? 0 : kExitBadInput;
  }
  if (*sim) return RunSim(sim_args);
  if (*validate) return cli::Validate(files, std::cout, std::cerr);
  if (tool_exit >= 0) return tool_exit;
  return kExitBadInput;
}
