// Gavel's per-VC Philly-derived traces (scheduler/traces/msr/seed=N/<vc>.trace): seven
// tab-separated columns job_type, command, num_steps_arg, needs_data_dir, total_steps,
// arrival_time, scale_factor. Run time = total_steps / isolated throughput (steps/s)
// of (job_type, scale_factor) on the chosen worker type, from Gavel's
// simulation_throughputs.json. See docs/traces.md "gavel".

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <vector>

#include "sim/convert/convert.h"
#include "sim/convert/line_reader.h"
#include "sim/convert/rigid.h"

namespace gantry::convert {
namespace {

namespace fs = std::filesystem;

// (job_type, scale_factor) -> isolated steps/s, for one worker type.
using Throughputs = std::map<std::pair<std::string, int>, double>;

// Keys look like "('ResNet-18 (batch size 16)', 1)".
bool ParseKey(const std::string& key, std::string& type, int& scale) {
  if (key.size() < 7 || key.compare(0, 2, "('") != 0 || key.back() != ')') return false;
  const size_t quote = key.rfind("', ");
  if (quote == std::string::npos || quote < 2) return false;
  type = key.substr(2, quote - 2);
  auto s = ParseInt(std::string_view(key).substr(quote + 3, key.size() - quote - 4));
  if (!s || *s < 1) return false;
  scale = static_cast<int>(*s);
  return true;
}

Result<Throughputs> ReadThroughputs(const std::string& path, const std::string& worker) {
  // A profile table of about 2 MB: parsed whole, unlike traces.
  Result<std::string> text = ReadSmallFile(path);
  if (!text.ok()) return Error{"--throughputs", text.error().message};
  nlohmann::json doc = nlohmann::json::parse(*text, nullptr, false);
  if (doc.is_discarded() || !doc.is_object()) {
    return Error{"--throughputs", path + ": not a JSON object"};
  }
  if (!doc.contains(worker) || !doc[worker].is_object()) {
    std::string known;
    for (auto it = doc.begin(); it != doc.end(); ++it) {
      if (!known.empty()) known += ", ";
      known += it.key();
    }
    return Error{"--worker-type",
                 "no worker type \"" + worker + "\" in " + path + " (known: " + known + ")"};
  }
  Throughputs out;
  for (auto it = doc[worker].begin(); it != doc[worker].end(); ++it) {
    std::string type;
    int scale = 0;
    if (!ParseKey(it.key(), type, scale) || !it.value().is_object()) continue;
    auto null = it.value().find("null");
    if (null == it.value().end() || !null->is_number() || !(null->get<double>() > 0)) continue;
    out[{type, scale}] = null->get<double>();
  }
  if (out.empty())
    return Error{"--throughputs", path + ": no isolated (\"null\") throughputs for " + worker};
  return out;
}

// Steps/s of a job: measured for its scale factor, else the largest measured scale
// factor below it scaled linearly (ideal scaling; Gavel measured 1, 2, 4 and 8 only,
// and only 1 for A3C, CycleGAN and Recommendation).
std::optional<double> Throughput(const Throughputs& table, const std::string& type, int scale,
                                 bool& extrapolated) {
  extrapolated = false;
  if (auto it = table.find({type, scale}); it != table.end()) return it->second;
  for (int s = scale - 1; s >= 1; --s) {
    if (auto it = table.find({type, s}); it != table.end()) {
      extrapolated = true;
      return it->second * scale / s;
    }
  }
  return std::nullopt;
}

std::string VcName(const fs::path& p) {
  std::string name = p.filename().string();
  for (const char* suffix : {".gz", ".trace"}) {
    const std::string s = suffix;
    if (name.size() > s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0) {
      name.erase(name.size() - s.size());
    }
  }
  return name;
}

}  // namespace

Result<ConvertSummary> ConvertGavel(const ConvertOptions& o) {
  if (o.throughputs.empty()) {
    return Error{"--throughputs", "required: Gavel's simulation_throughputs.json(.gz)"};
  }
  std::vector<std::string> files;
  for (const std::string& input : o.inputs) {
    std::error_code ec;
    if (fs::is_directory(input, ec)) {
      for (const auto& e : fs::directory_iterator(input, ec)) {
        const std::string n = e.path().filename().string();
        if (n.find(".trace") != std::string::npos) files.push_back(e.path().string());
      }
    } else {
      files.push_back(input);
    }
  }
  std::sort(files.begin(), files.end());
  if (files.empty())
    return Error{"--input", "no Gavel trace files (<vc>.trace or <vc>.trace.gz) given"};
  Result<Throughputs> table = ReadThroughputs(o.throughputs, o.worker_type);
  if (!table.ok()) return table.error();

  ConvertSummary summary;
  std::vector<RigidJob> jobs;
  std::vector<std::string> queues;
  for (const std::string& file : files) {
    const uint32_t queue = static_cast<uint32_t>(queues.size());
    queues.push_back(VcName(file));
    LineReader in;
    if (Status s = in.Open(file); !s.ok()) return Error{"--input", s.error().message};
    std::string line;
    while (in.Next(line)) {
      if (line.empty()) continue;
      ++summary.rows;
      const std::vector<std::string_view> f = SplitFields(line, '\t');
      std::optional<double> steps, arrival;
      std::optional<int64_t> scale;
      if (f.size() == 7) {
        steps = ParseDouble(f[4]);
        arrival = ParseDouble(f[5]);
        scale = ParseInt(f[6]);
      }
      if (!steps || !arrival || !scale || *steps <= 0 || *arrival < 0 || *scale < 1 ||
          *scale > 1024) {
        ++summary.dropped["malformed row"];
        continue;
      }
      const std::string type(f[0]);
      bool extrapolated = false;
      std::optional<double> rate = Throughput(*table, type, static_cast<int>(*scale), extrapolated);
      if (!rate) {
        ++summary.dropped["job type without a throughput"];
        continue;
      }
      if (extrapolated) ++summary.adjusted["throughput scaled from a smaller scale factor"];
      RigidJob j;
      j.id = queues.back() + "-" + std::to_string(in.line_number());
      j.submit = *arrival;
      j.duration = std::max(1.0, *steps / *rate);
      j.gpus = static_cast<int>(*scale);
      j.queue = queue;
      jobs.push_back(std::move(j));
    }
    if (!in.error().empty()) return Error{"--input", in.error()};
  }

  // The worker type names the cluster's GPU; the catalog has V100 and T4 (for K80, the
  // nearest old 16 GB part) built in and P100 is declared.
  RigidPlan plan;
  plan.cluster.name = o.name.empty() ? "gavel" : o.name;
  std::string model = "V100-32GB";
  std::string worker = o.worker_type.substr(0, o.worker_type.find('_'));
  if (worker == "p100") {
    model = "P100";
    plan.cluster.models.push_back({"P100", 16});
  } else if (worker == "k80") {
    model = "K80";
    plan.cluster.models.push_back({"K80", 12});
  }
  plan.cluster.comments = {
      "Converted by `gantry trace convert --format gavel` (worker type " + o.worker_type + ").",
      "One queue per Philly VC file; run time = total_steps / isolated throughput;",
      "8-GPU nodes sized from --nodes or the trace's peak; see docs/traces.md."};
  plan.node_shape.name = worker.empty() ? "gpu" : worker;
  plan.node_shape.gpus = 8;
  plan.node_shape.gpu_model = model;
  plan.node_shape.cpus = 40;
  plan.node_shape.memory_gb = 512;
  plan.nodes = o.nodes;
  plan.queues = std::move(queues);
  plan.vram_gb = model == "K80" ? 12 : 16;
  plan.limit = o.limit;
  plan.out = o.out;
  return WriteRigid(std::move(plan), std::move(jobs), std::move(summary));
}

}  // namespace gantry::convert
