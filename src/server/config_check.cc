#include "server/config_check.h"

#include <nlohmann/json.hpp>

#include "core/model/feasibility.h"
#include "spec/job_reader.h"

namespace gantry::server {

std::optional<core::JobSpec> ReadJobSpec(const Job& job, const spec::ClusterConfig& config,
                                         std::vector<std::string>* problems) {
  spec::Diagnostics diags;
  const std::string file = job.spec_file.empty() ? "request" : job.spec_file;
  std::optional<core::JobSpec> spec = job.spec_format == "yaml"
                                          ? spec::ParseJobYaml(job.spec_text, file, config, diags)
                                          : spec::ParseJobJson(job.spec_text, file, config, diags);
  if (problems) {
    for (const spec::Diag& d : diags.items()) problems->push_back(d.ToString());
  }
  if (!diags.empty()) return std::nullopt;
  if (job.time_limit_set >= 0) ApplyTimeLimit(*spec, job.time_limit_set);
  return spec;
}

void ApplyTimeLimit(core::JobSpec& spec, core::Ticks limit) {
  const bool estimate_follows = spec.runtime_estimate == spec.time_limit;  // the reader's default
  spec.time_limit = limit > 0 ? std::optional<core::Ticks>(limit) : std::nullopt;
  if (estimate_follows) spec.runtime_estimate = spec.time_limit;
}

std::optional<core::JobSpec> ReadJobSpecAsWritten(const Job& job) {
  const std::optional<spec::ClusterConfig> stand_in = spec::StandInConfig({job.queue});
  if (!stand_in) return std::nullopt;
  return ReadJobSpec(job, *stand_in, nullptr);
}

Result<std::vector<std::string>> ConfigBreakage(const spec::ClusterConfig& config, Store& store) {
  auto stored = store.LoadJobs(0);
  if (!stored) return stored.error();
  std::vector<std::string> out;
  for (const StoredJob& sj : *stored) {
    if (!sj.active) continue;
    Job job;
    job.name = sj.name;
    const nlohmann::json doc = nlohmann::json::parse(sj.doc, nullptr, false);
    const std::string what = "job " + sj.name + " (" + doc.value("state", std::string("?")) +
                             ", queue " + sj.queue + ", team " + sj.team + ")";
    if (auto r = JobFromDoc(doc, config.cluster, job); !r) {
      out.push_back(what + ": its allocation cannot be read: " + r.error().ToString());
      continue;
    }
    std::vector<std::string> problems;
    auto spec = ReadJobSpec(job, config, &problems);
    if (!spec) {
      out.push_back(what +
                    ": its spec no longer reads: " + (problems.empty() ? "?" : problems.front()));
    } else if (auto why = core::WhyInfeasible(*spec, config.cluster)) {
      out.push_back(what + ": it could never run: " + *why);
    }
  }
  return out;
}

}  // namespace gantry::server
