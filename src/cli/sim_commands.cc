#include "cli/sim_commands.h"

#include <fmt/format.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <memory>
#include <optional>

#include "cli/example_data.h"
#include "cli/exit_codes.h"
#include "cli/progress.h"
#include "core/scheduler.h"
#include "sim/html_report.h"
#include "sim/run_summary.h"
#include "sim/simulator.h"
#include "spec/config_reader.h"
#include "spec/job_reader.h"
#include "spec/overrides.h"
#include "spec/read_file.h"

namespace gantry::cli {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::ordered_json;

struct InputArgs {
  std::string config, trace, failures;
};

struct SimArgs {
  InputArgs in;
  std::string policy = "gantry", events, report, html;
  bool no_waits = false, quiet = false, no_progress = false;
};

struct CompareArgs {
  InputArgs in;                   // in.config: one config, or several comma-separated
  std::vector<std::string> sets;  // --set: each a variant of the first config
  std::vector<std::string> policies = core::PolicyNames();
  std::string html, json;
  bool no_progress = false;
};

// The checked inputs of a run.
struct Inputs {
  std::optional<spec::ClusterConfig> config;
  std::vector<spec::Failure> failures;
  size_t jobs = 0;                  // in the trace
  std::optional<fs::path> example;  // the bundled example's folder, when it is used
};

// Writes the compiled-in example to a private directory and points the args at it.
std::optional<fs::path> UseExample(InputArgs& a) {
  fs::path dir = fs::temp_directory_path() / fmt::format("gantry-example-{}", ::getpid());
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return std::nullopt;
  auto put = [&](const char* name, const char* text) {
    std::ofstream(dir / name) << text;
    return (dir / name).string();
  };
  a.config = put("cluster.yaml", kExampleCluster);
  a.trace = put("trace.jsonl", kExampleTrace);
  if (a.failures.empty()) a.failures = put("failures.jsonl", kExampleFailures);
  return dir;
}

// Reads and checks the config, the failures and the whole trace, and the policy names,
// printing every problem at once. Returns 0, or the exit status.
int LoadInputs(const std::string& cmd, InputArgs& a, const std::vector<std::string>& policies,
               Inputs& in) {
  if (a.config.empty() != a.trace.empty()) {
    std::cerr << cmd << ": give both --config and --trace, or neither for the bundled example\n";
    return kExitBadInput;
  }
  if (a.config.empty()) {
    in.example = UseExample(a);
    if (!in.example) {
      std::cerr << cmd << ": cannot write the example to the temporary directory\n";
      return kExitRunFailure;
    }
  }
  if (policies.empty()) {
    std::cerr << cmd << ": --policy: name at least one policy\n";
    return kExitBadInput;
  }
  for (const std::string& policy : policies) {
    if (core::MakePolicy(policy)) continue;
    std::string known;
    for (const auto& n : core::PolicyNames()) known += (known.empty() ? "" : ", ") + n;
    std::cerr << fmt::format("{}: --policy: unknown policy \"{}\" (known: {})\n", cmd, policy,
                             known);
    return kExitBadInput;
  }
  spec::Diagnostics diags;
  in.config = spec::ReadClusterConfig(a.config, diags);
  if (in.config && !a.failures.empty()) {
    if (auto f = spec::ReadFailures(a.failures, in.config->cluster, diags))
      in.failures = std::move(*f);
  }
  if (in.config) {  // check the whole trace first: every problem at once, before any output
    spec::TraceReader check(a.trace, *in.config);
    if (!check.ok()) {
      diags.Add(a.trace, 0, "", "cannot open the trace");
    } else {
      core::TraceJob job;
      while (check.Next(job, diags)) ++in.jobs;
    }
  }
  if (!diags.empty() || !in.config) {
    std::cerr << diags.ToString();
    return kExitBadInput;
  }
  return 0;
}

// Replays the trace through one policy, with a progress line on a terminal.
std::unique_ptr<sim::Simulator> Replay(const Inputs& in, const std::string& trace_path,
                                       sim::SimOptions options, std::ostream& events, bool progress,
                                       const std::string& label) {
  ProgressLine line(progress, label, in.jobs);
  options.progress = line.Callback();  // called only inside Run, while `line` lives
  auto simulator = std::make_unique<sim::Simulator>(*in.config, options, events);
  spec::Diagnostics diags;
  spec::TraceReader trace(trace_path, *in.config);
  simulator->Run(trace, in.failures, diags);
  return simulator;
}

// Writes a file with `write`; false (and a message naming the option) when it fails.
bool WriteFile(const std::string& cmd, const char* option, const std::string& path,
               const std::function<void(std::ostream&)>& write) {
  std::ofstream out(path);
  write(out);
  if (!out.flush()) {
    std::cerr << fmt::format("{}: {}: cannot write {}\n", cmd, option, path);
    return false;
  }
  return true;
}

std::string Describe(const InputArgs& a, const Inputs& in) {
  if (in.example) return "the bundled example (examples/ in the source tree)";
  std::string s =
      fmt::format("trace {} on cluster {} ({})", a.trace, in.config->cluster.name(), a.config);
  if (!a.failures.empty()) s += ", failures " + a.failures;
  return s + fmt::format(", {} jobs", in.jobs);
}

int RunSim(SimArgs a) {
  const std::string cmd = "gantry sim";
  Inputs in;
  if (int rc = LoadInputs(cmd, a.in, {a.policy}, in)) return rc;
  if (in.example) {
    if (a.events.empty()) a.events = (*in.example / "events.jsonl").string();
    if (a.report.empty()) a.report = (*in.example / "report.json").string();
  }
  std::ofstream events(a.events.empty() ? "/dev/null" : a.events, std::ios::binary);
  if (!events) {
    std::cerr << fmt::format("{}: --events: cannot write {}\n", cmd, a.events);
    return kExitRunFailure;
  }
  sim::SimOptions options;
  options.policy = a.policy;
  options.log_waits = !a.no_waits;
  auto simulator = Replay(in, a.in.trace, options, events, ProgressLine::Wanted(a.no_progress), "");
  events.flush();
  if (!events) {
    std::cerr << fmt::format("{}: --events: write to {} failed\n", cmd, a.events);
    return kExitRunFailure;
  }
  const sim::Report& report = simulator->report();
  if (!a.report.empty() &&
      !WriteFile(cmd, "--report", a.report, [&](std::ostream& out) { report.Write(out); })) {
    return kExitRunFailure;
  }
  if (!a.html.empty()) {
    const std::vector<sim::RunSummary> runs{
        sim::SummarizeRun(a.policy, report, simulator->timeline())};
    const std::string title = fmt::format("Gantry simulation: policy {}", a.policy);
    if (!WriteFile(cmd, "--html", a.html, [&](std::ostream& out) {
          sim::WriteHtml(out, title, Describe(a.in, in), runs);
        })) {
      return kExitRunFailure;
    }
  }
  if (!a.quiet) {
    if (in.example) std::cout << "gantry sim: bundled example (examples/ in the source tree)\n";
    report.Summary(std::cout);
    if (!a.events.empty()) std::cout << "  event log           " << a.events << "\n";
    if (!a.report.empty()) std::cout << "  report              " << a.report << "\n";
    if (!a.html.empty()) std::cout << "  HTML report         " << a.html << "\n";
  }
  return 0;
}

// A column group of a comparison: a config (given, or the first with --set overrides).
struct Variant {
  std::string label;  // empty: the only one (columns are named by policy alone)
  InputArgs in;
  Inputs inputs;
};

std::string Stem(const std::string& path) { return fs::path(path).stem().string(); }

// The variants `a` asks for: each config of --config, and each --set on the first one
// (written to a temporary file the config reader checks like any other). Returns 0 or the
// exit status, having said why.
int LoadVariants(const std::string& cmd, CompareArgs& a, std::vector<Variant>& out) {
  std::vector<std::string> configs;
  for (size_t at = 0; !a.in.config.empty();) {
    const size_t comma = a.in.config.find(',', at);
    configs.push_back(
        a.in.config.substr(at, comma == std::string::npos ? std::string::npos : comma - at));
    if (comma == std::string::npos) break;
    at = comma + 1;
  }
  if (configs.empty()) configs.push_back("");  // the bundled example
  const bool several = configs.size() > 1 || !a.sets.empty();
  for (const std::string& config : configs) {
    Variant v;
    v.in = a.in;
    v.in.config = config;
    if (int rc = LoadInputs(cmd, v.in, a.policies, v.inputs)) return rc;
    v.label = !several ? "" : v.inputs.example ? "example" : Stem(config);
    out.push_back(std::move(v));
  }
  for (size_t i = 0; i < a.sets.size(); ++i) {
    const Variant& base = out.front();
    spec::Diagnostics diags;
    const std::optional<std::string> text = spec::ReadWholeFile(base.in.config, diags);
    if (!text) {  // read once already: it changed under us
      std::cerr << diags.ToString();
      return kExitBadInput;
    }
    auto yaml = spec::ApplyOverrides(*text, a.sets[i]);
    if (!yaml) {
      std::cerr << cmd << ": --set: " << yaml.error().message << "\n";
      return kExitBadInput;
    }
    const fs::path dir = fs::temp_directory_path() / fmt::format("gantry-compare-{}", ::getpid());
    std::error_code ec;
    fs::create_directories(dir, ec);
    const fs::path file = dir / fmt::format("{}-set{}.yaml", Stem(base.in.config), i + 1);
    if (!WriteFile(cmd, "--set", file.string(), [&](std::ostream& o) { o << *yaml; }))
      return kExitRunFailure;
    Variant v;
    v.in = base.in;
    v.in.config = file.string();
    std::cerr << fmt::format("{}: --set {} -> {}\n", cmd, a.sets[i], file.string());
    if (int rc = LoadInputs(cmd, v.in, a.policies, v.inputs)) return rc;
    v.label = a.sets[i];
    out.push_back(std::move(v));
  }
  return 0;
}

int RunCompare(CompareArgs a) {
  const std::string cmd = "gantry compare";
  std::vector<Variant> variants;
  if (int rc = LoadVariants(cmd, a, variants)) return rc;
  const bool progress = ProgressLine::Wanted(a.no_progress);
  std::vector<sim::RunSummary> runs;
  const size_t total = variants.size() * a.policies.size();
  for (const Variant& v : variants) {
    for (const std::string& policy : a.policies) {
      const std::string label = v.label.empty()          ? policy
                                : a.policies.size() == 1 ? v.label
                                                         : v.label + " / " + policy;
      std::ofstream events("/dev/null");  // compare keeps no event log
      sim::SimOptions options;
      options.policy = policy;
      options.log_waits = false;
      auto simulator = Replay(v.inputs, v.in.trace, options, events, progress,
                              fmt::format("{} ({}/{}): ", label, runs.size() + 1, total));
      runs.push_back(sim::SummarizeRun(label, simulator->report(), simulator->timeline()));
    }
  }
  const sim::FigureTable table = sim::MainFigures(runs);
  std::string about = Describe(variants.front().in, variants.front().inputs);
  if (variants.size() > 1) {
    about += "; configs:";
    for (const Variant& v : variants) about += " " + v.label + " (" + v.in.config + ")";
  }
  std::cout << "gantry compare: " << about << "\n\n";
  sim::PrintTable(std::cout, table);
  if (!a.html.empty()) {
    std::string names;
    for (const sim::RunSummary& r : runs) names += (names.empty() ? "" : ", ") + r.policy;
    const std::string title =
        (variants.size() > 1 ? "Gantry what-if comparison: " : "Gantry policy comparison: ") +
        names;
    if (!WriteFile(cmd, "--html", a.html,
                   [&](std::ostream& out) { sim::WriteHtml(out, title, about, runs); })) {
      return kExitRunFailure;
    }
    std::cout << "\nHTML report: " << a.html << "\n";
  }
  if (!a.json.empty()) {
    Json j;
    j["inputs"] = {{"config", a.in.config}, {"trace", a.in.trace}, {"failures", a.in.failures}};
    j["policies"] = a.policies;
    Json vs = Json::array();
    for (const Variant& v : variants) vs.push_back({{"label", v.label}, {"config", v.in.config}});
    j["variants"] = vs;
    Json labels = Json::array();
    for (const sim::RunSummary& r : runs) labels.push_back(r.policy);
    j["runs"] = labels;
    j["table"] = sim::ToJson(table);
    Json reports = Json::array();
    for (const sim::RunSummary& r : runs) reports.push_back(r.report);
    j["reports"] = reports;
    if (!WriteFile(cmd, "--json", a.json, [&](std::ostream& out) { out << j.dump(2) << "\n"; })) {
      return kExitRunFailure;
    }
    std::cout << (a.html.empty() ? "\n" : "") << "JSON: " << a.json << "\n";
  }
  return 0;
}

void AddInputOptions(CLI::App* c, InputArgs& in) {
  c->add_option("--config", in.config, "Cluster config (YAML)");
  c->add_option("--trace", in.trace, "Trace (JSON Lines)");
  c->add_option("--failures", in.failures, "Node failures (JSON Lines)");
}

}  // namespace

void AddSimCommands(CLI::App& app, int& exit_code) {
  // The option structs live as long as the app: CLI11 writes into them while parsing.
  auto s = std::make_shared<SimArgs>();
  CLI::App* sim = app.add_subcommand("sim", "Replay a trace through a scheduling policy");
  AddInputOptions(sim, s->in);
  sim->add_option("--policy", s->policy, "Scheduling policy")->capture_default_str();
  sim->add_option("--events", s->events, "Event log to write (JSON Lines)");
  sim->add_option("--report", s->report, "Report to write (JSON)");
  sim->add_option("--html", s->html, "HTML report to write (self-contained, with plots)");
  sim->add_flag("--no-wait-events", s->no_waits, "Leave wait-reason events out of the log");
  sim->add_flag("--no-progress", s->no_progress, "No progress line on a terminal");
  sim->add_flag("-q,--quiet", s->quiet, "Print no summary");
  sim->callback([s, &exit_code] { exit_code = Guard("gantry sim", [&] { return RunSim(*s); }); });

  auto c = std::make_shared<CompareArgs>();
  CLI::App* compare = app.add_subcommand(
      "compare",
      "Replay a trace through several policies or what-if configs, figures side by side");
  AddInputOptions(compare, c->in);
  compare->add_option("--policy,--policies", c->policies, "Policies, comma-separated")
      ->delimiter(',')
      ->capture_default_str();
  compare->add_option(
      "--set", c->sets,
      "A what-if variant of the (first) config, compared beside it: PATH=VALUE pairs "
      "separated by ';', e.g. 'pools.h100.count=12' or 'queues.nlp.guaranteed_gpus=16; "
      "policy.backfill_depth=20' (repeatable: one variant each)");
  compare->add_option("--html", c->html,
                      "HTML report to write (the table and each policy's plots)");
  compare->add_option("--json", c->json, "JSON to write (the table and each policy's report)");
  compare->add_flag("--no-progress", c->no_progress, "No progress line on a terminal");
  compare->callback(
      [c, &exit_code] { exit_code = Guard("gantry compare", [&] { return RunCompare(*c); }); });
}

}  // namespace gantry::cli
