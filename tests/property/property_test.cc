// Property tests: random clusters and workloads through the real `gantry sim`, checked by
// the independent invariant checker (tests/checker), which shares no code with src/.
//
// Environment:
//   GANTRY_PROPERTY_SEEDS    seeds 1..N (default 20), dealt to kSeedShards tests
//   GANTRY_PROPERTY_JOBS     jobs per workload (default 2000)
//   GANTRY_POLICIES          comma-separated --policy values (default "fifo,gantry")
//   GANTRY_PROPERTY_TIMEOUT  seconds one simulation may take (default 600)
//   GANTRY_BINARY            overrides the gantry path compiled in as GANTRY_BINARY
// A failing seed keeps its files under the temporary directory and prints how to rerun.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <yaml-cpp/yaml.h>
#include <nlohmann/json.hpp>

#include "checker/invariant_checker.h"
#include "property/workload_gen.h"

#ifndef GANTRY_BINARY
#define GANTRY_BINARY ""
#endif

namespace gantry::property {
namespace {

namespace fs = std::filesystem;

long EnvLong(const char* name, long def) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return def;
  char* end = nullptr;
  const long n = std::strtol(v, &end, 10);
  return (end != nullptr && *end == '\0' && n > 0) ? n : def;
}

std::vector<std::string> Policies() {
  const char* v = std::getenv("GANTRY_POLICIES");
  std::string s = (v == nullptr || *v == '\0') ? "fifo,gantry" : v;
  std::vector<std::string> out;
  std::stringstream in(s);
  for (std::string p; std::getline(in, p, ',');) {
    if (!p.empty()) out.push_back(p);
  }
  return out;
}

std::string GantryBinary() {
  const char* v = std::getenv("GANTRY_BINARY");
  return (v != nullptr && *v != '\0') ? std::string(v) : std::string(GANTRY_BINARY);
}

// Fails the current test (and returns false) when the simulator is not built.
bool BinaryReady(const std::string& binary) {
  std::error_code ec;
  if (binary.empty() || !fs::is_regular_file(binary, ec)) {
    ADD_FAILURE() << "gantry binary not found at '" << binary
                  << "': build the `gantry` target (or set GANTRY_BINARY) before the "
                     "property tests";
    return false;
  }
  return true;
}

std::string Quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += (c == '\'') ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

struct Outcome {
  int exit_code = -1;
  std::string output_tail;
};

// Runs `args` through the shell with stdout+stderr into `log`, under `timeout` when the
// machine has it so a hung simulator fails the test instead of stalling it.
Outcome RunCommand(const std::vector<std::string>& args, const fs::path& log) {
  std::string cmd;
  if (fs::exists("/usr/bin/timeout")) {
    cmd = "/usr/bin/timeout -k 10 " + std::to_string(EnvLong("GANTRY_PROPERTY_TIMEOUT", 600)) + " ";
  }
  for (const std::string& a : args) cmd += Quote(a) + " ";
  cmd += "> " + Quote(log.string()) + " 2>&1";
  const int status = std::system(cmd.c_str());
  Outcome o;
  if (status != -1 && WIFEXITED(status))
    o.exit_code = WEXITSTATUS(status);
  else if (status != -1 && WIFSIGNALED(status))
    o.exit_code = 128 + WTERMSIG(status);
  std::string out = ReadFile(log.string());
  if (out.size() > 4000) out = "..." + out.substr(out.size() - 4000);
  o.output_tail = out;
  return o;
}

fs::path ScratchDir(const std::string& name) {
  const fs::path dir =
      fs::temp_directory_path() / ("gantry_property_" + std::to_string(::getpid())) / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

// Removes a passing run's files, and the per-process parent once it is empty.
void RemoveScratch(const fs::path& dir) {
  std::error_code ec;
  fs::remove_all(dir, ec);
  fs::remove(dir.parent_path(), ec);  // fails harmlessly while other runs' files remain
}

struct SimFiles {
  WorkloadPaths inputs;
  std::string events;
  std::string report;
};

Outcome Simulate(const std::string& binary, const WorkloadPaths& in, const std::string& policy,
                 const fs::path& dir, SimFiles& files) {
  files.inputs = in;
  files.events = (dir / "events.jsonl").string();
  files.report = (dir / "report.json").string();
  return RunCommand(
      {binary, "sim", "--config", in.config, "--trace", in.trace, "--failures", in.failures,
       "--policy", policy, "--events", files.events, "--report", files.report},
      dir / "gantry.log");
}

std::string Reproduce(uint64_t seed, int jobs, const std::string& policy, const fs::path& dir) {
  return "reproduce: gantry-propgen --seed " + std::to_string(seed) + " --jobs " +
         std::to_string(jobs) +
         " --out D && gantry sim --config D/cluster.yaml --trace "
         "D/trace.jsonl --failures D/failures.jsonl --policy " +
         policy +
         " --events D/events.jsonl --report D/report.json && gantry-check --config "
         "D/cluster.yaml --trace D/trace.jsonl --failures D/failures.jsonl --events "
         "D/events.jsonl --report D/report.json\n(files kept in " +
         dir.string() + ")";
}

// ---------------------------------------------------------------------------------------
// The generator itself (no simulator needed).

TEST(WorkloadGen, SameSeedSameBytes) {
  const Workload a = GenerateWorkload({7, 300});
  const Workload b = GenerateWorkload({7, 300});
  EXPECT_EQ(a.config_yaml, b.config_yaml);
  EXPECT_EQ(a.trace_jsonl, b.trace_jsonl);
  EXPECT_EQ(a.failures_jsonl, b.failures_jsonl);
  const Workload c = GenerateWorkload({8, 300});
  EXPECT_NE(a.trace_jsonl, c.trace_jsonl);
}

// Field names must be the contract's exactly: Gantry rejects unknown fields.
TEST(WorkloadGen, UsesOnlyContractFieldNames) {
  const std::set<std::string> job_fields = {
      "id", "submit", "duration", "queue", "tier", "replicas", "gpus", "mig", "sharing",
      "gpu_model", "vram_gb", "cpus", "memory_gb", "topology", "checkpoint_s", "grace_s", "window",
      "idle_after_s", "command", "env", "workdir",
      // Gantry's additions (docs/formats.md): elastic gangs, speed per GPU model.
      "min_replicas", "speed_by_model"};
  const std::set<std::string> top = {"cluster", "gpu_models", "pools", "queues", "policy"};
  const std::set<std::string> pool_fields = {"name",      "name_prefix",    "count",     "gpus",
                                             "gpu_model", "nvlink_domains", "leaf_size", "cpus",
                                             "memory_gb", "spot",           "sharing"};
  // `order`, `max_wait_s`, the policy's attained-service settings, full_pass_interval_s and
  // best_effort_yields_to are Gantry's additions to the contract (docs/policies.md).
  const std::set<std::string> queue_fields = {"name",   "parent", "guaranteed_gpus", "burst_gpus",
                                              "weight", "order",  "max_wait_s"};
  const std::set<std::string> policy_fields = {"reclaim_idle_after_s", "las_thresholds_gpu_s",
                                               "attained_quantum_s",   "max_wait_s",
                                               "full_pass_interval_s", "best_effort_yields_to"};
  const std::set<std::string> model_fields = {"name", "memory_gb"};
  auto keys_within = [](const YAML::Node& n, const std::set<std::string>& allowed,
                        const std::string& where) {
    for (const auto& kv : n) {
      const std::string key = kv.first.as<std::string>();
      EXPECT_TRUE(allowed.count(key)) << where << ": unexpected field " << key;
    }
  };
  for (uint64_t seed = 1; seed <= 10; ++seed) {
    const Workload w = GenerateWorkload({seed, 200});
    const YAML::Node config = YAML::Load(w.config_yaml);
    keys_within(config, top, "config");
    for (const auto& p : config["pools"]) keys_within(p, pool_fields, "pool");
    for (const auto& q : config["queues"]) keys_within(q, queue_fields, "queue");
    for (const auto& m : config["gpu_models"]) keys_within(m, model_fields, "gpu_models");
    keys_within(config["policy"], policy_fields, "policy");
    std::stringstream in(w.trace_jsonl);
    double last_submit = 0;
    for (std::string line; std::getline(in, line);) {
      const nlohmann::json j = nlohmann::json::parse(line);
      for (const auto& [key, value] : j.items()) {
        EXPECT_TRUE(job_fields.count(key)) << "trace: unexpected field " << key;
      }
      EXPECT_TRUE(j.contains("vram_gb")) << line;
      EXPECT_GE(j["submit"].get<double>(), last_submit) << "trace not sorted by submit";
      last_submit = j["submit"].get<double>();
      if (j.contains("window")) {
        for (const auto& [key, value] : j["window"].items()) {
          EXPECT_TRUE(key == "start" || key == "end") << key;
        }
      }
    }
    std::stringstream fin(w.failures_jsonl);
    for (std::string line; std::getline(fin, line);) {
      const nlohmann::json f = nlohmann::json::parse(line);
      EXPECT_EQ(f.size(), 3U) << line;
      EXPECT_TRUE(f.contains("t") && f.contains("node") && f.contains("down_s")) << line;
    }
  }
}

// The workload mixes every kind of job the contract has, and the checker's own readers
// accept it (an empty log then only lacks the jobs' events).
TEST(WorkloadGen, CoversTheContractAndParses) {
  std::set<std::string> seen;
  for (uint64_t seed = 1; seed <= 5; ++seed) {
    const Workload w = GenerateWorkload({seed, 2000});
    EXPECT_EQ(w.job_ids.size(), 2000U);
    EXPECT_FALSE(w.impossible_jobs.empty()) << "seed " << seed;
    if (w.config_yaml.find("spot: true") != std::string::npos) seen.insert("spot");
    if (w.config_yaml.find("gpus: 0") != std::string::npos) seen.insert("cpu pool");
    if (w.config_yaml.find("nvlink_domains: 2") != std::string::npos) seen.insert("domains 2");
    if (w.config_yaml.find("parent: ml") != std::string::npos) seen.insert("queue tree");
    if (!w.failures_jsonl.empty()) seen.insert("failures");
    std::stringstream in(w.trace_jsonl);
    for (std::string line; std::getline(in, line);) {
      const nlohmann::json j = nlohmann::json::parse(line);
      if (j.contains("mig")) seen.insert("mig");
      if (j.value("sharing", "") == "mps") seen.insert("mps");
      if (j.value("sharing", "") == "timeslice") seen.insert("timeslice");
      if (j.contains("gpus") && j["gpus"] == 0) seen.insert("cpu job");
      if (j.value("replicas", 1) > 1) seen.insert("gang");
      if (j.contains("window")) seen.insert("window");
      if (j.contains("idle_after_s")) seen.insert("idle");
      if (j.contains("topology")) seen.insert("topology " + j["topology"].get<std::string>());
      if (j.contains("tier")) seen.insert("tier " + j["tier"].get<std::string>());
      if (j.contains("gpu_model") && j["gpu_model"].is_array()) seen.insert("model list");
    }
    const fs::path dir = ScratchDir("parse_" + std::to_string(seed));
    const WorkloadPaths p = WriteWorkload(w, dir.string());
    std::ofstream(dir / "empty.jsonl").close();
    const checker::CheckResult r = checker::CheckRunDetailed(p.config, p.trace, p.failures,
                                                             (dir / "empty.jsonl").string(), "");
    EXPECT_TRUE(r.input_error.empty()) << r.input_error;
    for (const checker::Violation& v : r.violations) {
      // Every job is missing from the empty log; failures from the file are not in it.
      EXPECT_TRUE(v.invariant == checker::inv::kFinalState ||
                  v.invariant == checker::inv::kFailures)
          << checker::FormatViolation(v);
    }
    RemoveScratch(dir);
  }
  for (const char* want : {"spot",
                           "cpu pool",
                           "domains 2",
                           "queue tree",
                           "failures",
                           "mig",
                           "mps",
                           "timeslice",
                           "cpu job",
                           "gang",
                           "window",
                           "idle",
                           "topology nvlink",
                           "topology node",
                           "topology leaf",
                           "topology spine",
                           "tier critical",
                           "tier standard",
                           "tier best-effort",
                           "model list"}) {
    EXPECT_TRUE(seen.count(want)) << "no workload of seeds 1..5 has: " << want;
  }
}

// ---------------------------------------------------------------------------------------
// The simulator under the checker.

// The seeds are dealt to kSeedShards tests (seed s to shard (s - 1) % kSeedShards), so
// ctest runs them side by side: under ASan one test of every seed took 200 s on one of
// CI's two cores while the other ran the rest of the suite in a third of that.
constexpr int kSeedShards = 6;
class PropertySeeds : public testing::TestWithParam<int> {};

TEST_P(PropertySeeds, RandomWorkloadsKeepEveryInvariant) {
  const std::string binary = GantryBinary();
  if (!BinaryReady(binary)) return;
  const long seeds = EnvLong("GANTRY_PROPERTY_SEEDS", 20);
  const int jobs = static_cast<int>(EnvLong("GANTRY_PROPERTY_JOBS", 2000));
  for (const std::string& policy : Policies()) {
    for (long s = 1 + GetParam(); s <= seeds; s += kSeedShards) {
      const auto seed = static_cast<uint64_t>(s);
      SCOPED_TRACE("seed " + std::to_string(seed) + " policy " + policy);
      const fs::path dir = ScratchDir("seed_" + std::to_string(seed) + "_" + policy);
      const Workload w = GenerateWorkload({seed, jobs});
      SimFiles files;
      const Outcome o = Simulate(binary, WriteWorkload(w, dir.string()), policy, dir, files);
      if (o.exit_code != 0) {
        ADD_FAILURE() << "seed " << seed << " policy " << policy << ": gantry sim exited "
                      << o.exit_code << "\n"
                      << o.output_tail << "\n"
                      << Reproduce(seed, jobs, policy, dir);
        continue;
      }
      const checker::CheckResult r =
          checker::CheckRunDetailed(files.inputs.config, files.inputs.trace, files.inputs.failures,
                                    files.events, files.report);
      bool ok = true;
      if (!r.violations.empty()) {
        ok = false;
        std::string first;
        for (std::size_t i = 0; i < r.violations.size() && i < 20; ++i) {
          first += "  " + checker::FormatViolation(r.violations[i]) + "\n";
        }
        ADD_FAILURE() << "seed " << seed << " policy " << policy << ": " << r.violations.size()
                      << " violations; the first:\n"
                      << first << Reproduce(seed, jobs, policy, dir);
      }
      // Every job fits an empty cluster except the impossible ones: exactly those must be
      // rejected, and nothing may be left waiting.
      const std::set<std::string> impossible(w.impossible_jobs.begin(), w.impossible_jobs.end());
      const std::set<std::string> rejected(r.stats.rejected_jobs.begin(),
                                           r.stats.rejected_jobs.end());
      std::string wrongly_rejected, not_rejected;
      for (const std::string& id : rejected) {
        if (impossible.count(id) == 0) wrongly_rejected += " " + id;
      }
      for (const std::string& id : impossible) {
        if (rejected.count(id) == 0) not_rejected += " " + id;
      }
      if (!wrongly_rejected.empty() || !not_rejected.empty() || r.stats.unfinished > 0) {
        ok = false;
        std::string waiting;
        for (std::size_t i = 0; i < r.stats.unfinished_jobs.size() && i < 20; ++i) {
          waiting += " " + r.stats.unfinished_jobs[i];
        }
        ADD_FAILURE() << "seed " << seed << " policy " << policy
                      << ":\n  feasible jobs rejected:" << wrongly_rejected
                      << "\n  impossible jobs not rejected:" << not_rejected << "\n  "
                      << r.stats.unfinished << " jobs still waiting at the end:" << waiting << "\n"
                      << Reproduce(seed, jobs, policy, dir);
      }
      if (ok) RemoveScratch(dir);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Property, PropertySeeds, testing::Range(0, kSeedShards));

TEST(Property, SameSeedGivesByteIdenticalEventLog) {
  const std::string binary = GantryBinary();
  if (!BinaryReady(binary)) return;
  const auto seed = static_cast<uint64_t>(EnvLong("GANTRY_PROPERTY_DETERMINISM_SEED", 1));
  const int jobs = static_cast<int>(EnvLong("GANTRY_PROPERTY_JOBS", 2000));
  const std::string policy = Policies().front();
  const Workload w = GenerateWorkload({seed, jobs});
  std::string logs[2];
  fs::path dirs[2];
  for (int run = 0; run < 2; ++run) {
    dirs[run] = ScratchDir("determinism_" + std::to_string(run));
    SimFiles files;
    const Outcome o =
        Simulate(binary, WriteWorkload(w, dirs[run].string()), policy, dirs[run], files);
    ASSERT_EQ(o.exit_code, 0) << "gantry sim exited " << o.exit_code << "\n" << o.output_tail;
    logs[run] = ReadFile(files.events);
  }
  ASSERT_FALSE(logs[0].empty()) << "empty event log";
  if (logs[0] != logs[1]) {
    std::stringstream a(logs[0]), b(logs[1]);
    std::string la, lb;
    int line = 0;
    while (true) {
      ++line;
      const bool more_a = static_cast<bool>(std::getline(a, la));
      const bool more_b = static_cast<bool>(std::getline(b, lb));
      if (!more_a || !more_b || la != lb) {
        ADD_FAILURE() << "seed " << seed << ": event logs differ at line " << line << ":\n  "
                      << (more_a ? la : "<end>") << "\n  " << (more_b ? lb : "<end>")
                      << "\n(files kept in " << dirs[0].parent_path().string() << ")";
        return;
      }
    }
  }
  for (const fs::path& d : dirs) RemoveScratch(d);
}

}  // namespace
}  // namespace gantry::property
