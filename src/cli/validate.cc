#include "cli/validate.h"

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>

#include "core/model/feasibility.h"
#include "core/scheduler.h"
#include "spec/config_reader.h"
#include "spec/job_reader.h"

namespace gantry::cli {

namespace {

enum class Kind { kConfig, kJobYaml, kTrace, kFailures, kUnknown };

bool EndsWith(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::optional<nlohmann::json> FirstRecord(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded()) return std::nullopt;
    return j;
  }
  return std::nullopt;
}

Kind KindOf(const std::string& path) {
  if (EndsWith(path, ".yaml") || EndsWith(path, ".yml")) {
    try {
      YAML::Node n = YAML::LoadFile(path);
      return n.IsMap() && n["pools"] ? Kind::kConfig : Kind::kJobYaml;
    } catch (const YAML::Exception&) {
      // The config reader reports the syntax error with its line; guess by name.
      return path.find("cluster") != std::string::npos ? Kind::kConfig : Kind::kJobYaml;
    }
  }
  if (EndsWith(path, ".jsonl") || EndsWith(path, ".json")) {
    auto first = FirstRecord(path);
    return first && first->is_object() && first->contains("down_s") ? Kind::kFailures
                                                                    : Kind::kTrace;
  }
  return Kind::kUnknown;
}

// Without a cluster config, queue names cannot be checked: accept every name the job
// files use, by building a queue tree of them.
std::set<std::string> QueueNames(const std::vector<std::string>& files) {
  std::set<std::string> names{"default"};
  for (const std::string& f : files) {
    if (EndsWith(f, ".yaml") || EndsWith(f, ".yml")) {
      try {
        YAML::Node n = YAML::LoadFile(f);
        if (n.IsMap() && n["queue"] && n["queue"].IsScalar())
          names.insert(n["queue"].as<std::string>());
      } catch (const YAML::Exception&) {
      }
      continue;
    }
    std::ifstream in(f);
    std::string line;
    while (std::getline(in, line)) {
      auto j = nlohmann::json::parse(line, nullptr, false);
      if (j.is_object() && j.contains("queue") && j["queue"].is_string()) {
        names.insert(j["queue"].get<std::string>());
      }
    }
  }
  return names;
}

std::optional<spec::ClusterConfig> Fallback(const std::vector<std::string>& files) {
  const std::set<std::string> names = QueueNames(files);
  return spec::StandInConfig({names.begin(), names.end()});
}

// max_wait_s bounds a job's wait by draining GPUs for it: whole GPUs, and what is free of
// GPUs others still use (free shares, free MIG memory slices). One that asks a MIG
// instance gets no such bound (an instance elsewhere on the GPU may still take the
// compute slices it needs), and neither does one with a window (it waits for it
// besides). Why, or nullopt when its queue has no max_wait_s or the bound holds.
std::optional<std::string> WhyUnbounded(const core::JobSpec& job,
                                        const spec::ClusterConfig& config) {
  if (core::MaxWaitFor(job.queue, config.queues, config.policy.params) <= 0) return std::nullopt;
  if (job.sharing == core::Sharing::kMig) {
    return "it asks a MIG instance, and a drain holds the free memory slices of its place, not the "
           "compute "
           "slices an instance elsewhere on the GPU may take";
  }
  if (job.window)
    return "it may start only inside its daily window, which the bound does not count";
  return std::nullopt;
}

}  // namespace

int Validate(const std::vector<std::string>& files, std::ostream& out, std::ostream& err) {
  spec::Diagnostics diags;
  std::optional<spec::ClusterConfig> config;
  std::vector<std::pair<std::string, Kind>> rest;
  for (const std::string& f : files) {
    if (!std::ifstream(f)) {
      diags.Add(f, 0, "", "cannot open the file");
      continue;
    }
    Kind kind = KindOf(f);
    if (kind == Kind::kConfig) {
      auto c = spec::ReadClusterConfig(f, diags);
      if (c) {
        out << fmt::format("{}: cluster config, {} nodes, {} GPUs, {} queues\n", f,
                           c->cluster.nodes().size(), c->cluster.gpu_count(), c->queues.size());
      }
      if (c && !config) config = std::move(c);
    } else if (kind == Kind::kUnknown) {
      diags.Add(f, 0, "", "unknown kind of file (expected .yaml, .yml, .jsonl or .json)");
    } else {
      rest.emplace_back(f, kind);
    }
  }
  std::optional<spec::ClusterConfig> fallback;
  if (!config && !rest.empty()) {
    fallback = Fallback(files);
    // Said, not silent: without a cluster config an "ok" checks far less.
    out << "note: no cluster config among the files: checked their syntax and GPU models "
           "(the built-in catalog) only, not pools, queues or capacity; name the cluster's "
           "config first to check those (gantry validate cluster.yaml job.yaml)\n";
  }
  const spec::ClusterConfig* against = config ? &*config : fallback ? &*fallback : nullptr;
  for (const auto& [f, kind] : rest) {
    if (!against) break;
    const size_t before = diags.size();
    if (kind == Kind::kJobYaml) {
      if (auto job = spec::ReadJobYaml(f, *against, diags); job && config) {
        if (auto why = core::WhyInfeasible(*job, config->cluster)) {
          diags.Add(f, 0, "", "no GPU of the cluster could ever hold this job: " + *why);
        } else if (auto never = core::WhyNeverStarts(*job, config->cluster, config->queues)) {
          diags.Add(f, 0, "", "this job can never start (gantryd rejects it): " + *never);
        } else if (auto unbounded = WhyUnbounded(*job, *config)) {
          out << f << ": ok, but max_wait_s cannot bound its wait: " << *unbounded << "\n";
          continue;
        }
      }
    } else if (kind == Kind::kFailures) {
      if (config) {
        (void)spec::ReadFailures(f, config->cluster, diags);
      } else {
        diags.Add(f, 0, "", "a failures file needs the cluster config in the same call");
      }
    } else {
      spec::TraceReader reader(f, *against);
      core::TraceJob job;
      size_t jobs = 0, impossible = 0, never = 0, unbounded = 0;
      std::vector<std::string> named;  // the first few that can never start, with why
      while (reader.Next(job, diags)) {
        ++jobs;
        if (!config) continue;
        if (core::WhyInfeasible(job.spec, config->cluster)) {
          ++impossible;
        } else if (auto why = core::WhyNeverStarts(job.spec, config->cluster, config->queues)) {
          if (++never <= 3) named.push_back(job.spec.id + " " + *why);
        } else if (WhyUnbounded(job.spec, *config)) {
          ++unbounded;
        }
      }
      if (diags.size() == before) {
        out << fmt::format("{}: trace, {} jobs", f, jobs);
        if (impossible)
          out << fmt::format(" ({} no GPU of the cluster could hold: the simulator rejects them)",
                             impossible);
        out << "\n";
        if (never) {
          out << fmt::format(
              "  {} can never start under their queues' burst_gpus (the simulator rejects them): ",
              never);
          for (size_t i = 0; i < named.size(); ++i) out << (i ? "; " : "") << named[i];
          out << (never > named.size() ? "; ..." : "") << "\n";
        }
        if (unbounded) {
          out << fmt::format(
              "  {} in queues with max_wait_s ask MIG instances, or have a window: "
              "max_wait_s cannot bound their wait\n",
              unbounded);
        }
      }
      continue;
    }
    if (diags.size() == before) out << f << ": ok\n";
  }
  if (!diags.empty()) {
    err << diags.ToString();
    err << fmt::format("{} problem{} found\n", diags.size(), diags.size() == 1 ? "" : "s");
    return 2;
  }
  return 0;
}

}  // namespace gantry::cli
