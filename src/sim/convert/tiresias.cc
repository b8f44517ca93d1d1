// Tiresias simulator inputs: job CSVs (60_job.csv: job_id,num_gpu,submit_time,
// iterations,model_name,duration,interval; tf_job.csv: job_id,num_gpu,submit_time,
// start_time,duration,...) and cluster specs (num_switch,num_node_p_switch,
// num_gpu_p_node,num_cpu_p_node,mem_p_node). The columns are found by name, so either
// job file works. The yarn-gput*.csv files list durations only (no arrivals, no sizes)
// and are refused. See docs/traces.md "tiresias".

#include <map>
#include <vector>

#include "sim/convert/convert.h"
#include "sim/convert/line_reader.h"
#include "sim/convert/rigid.h"

namespace gantry::convert {
namespace {

// Column name -> index, from a header line.
std::map<std::string, size_t> Columns(const std::string& header) {
  std::map<std::string, size_t> cols;
  const auto f = SplitFields(header, ',');
  for (size_t i = 0; i < f.size(); ++i) cols.emplace(std::string(f[i]), i);
  return cols;
}

struct Spec {
  int switches = 1, nodes_per_switch = 16, gpus_per_node = 4;
  double cpus = 128, memory_gb = 256;
};

Result<Spec> ReadSpec(const std::string& path) {
  LineReader in;
  if (Status s = in.Open(path); !s.ok()) return Error{"--cluster-spec", s.error().message};
  std::string header, row;
  if (!in.Next(header) || !in.Next(row))
    return Error{"--cluster-spec", path + ": expected a header and one row"};
  auto cols = Columns(header);
  const auto f = SplitFields(row, ',');
  auto get = [&](const char* name) -> std::optional<double> {
    auto it = cols.find(name);
    if (it == cols.end() || it->second >= f.size()) return std::nullopt;
    return ParseDouble(f[it->second]);
  };
  auto sw = get("num_switch"), nps = get("num_node_p_switch"), gpn = get("num_gpu_p_node");
  if (!sw || !nps || !gpn || *sw < 1 || *nps < 1 || *gpn < 1 || *gpn > 64) {
    return Error{"--cluster-spec", path +
                                       ":2: expected num_switch, num_node_p_switch and "
                                       "num_gpu_p_node of at least 1"};
  }
  Spec s;
  s.switches = static_cast<int>(*sw);
  s.nodes_per_switch = static_cast<int>(*nps);
  s.gpus_per_node = static_cast<int>(*gpn);
  if (auto c = get("num_cpu_p_node")) s.cpus = *c;
  if (auto m = get("mem_p_node")) s.memory_gb = *m;
  return s;
}

}  // namespace

Result<ConvertSummary> ConvertTiresias(const ConvertOptions& o) {
  if (o.inputs.size() != 1) return Error{"--input", "tiresias takes one job CSV"};
  Spec spec;  // the n16g4 default of the Tiresias simulator when no spec is given
  if (!o.cluster_spec.empty()) {
    Result<Spec> s = ReadSpec(o.cluster_spec);
    if (!s.ok()) return s.error();
    spec = *s;
  }
  LineReader in;
  if (Status s = in.Open(o.inputs[0]); !s.ok()) return Error{"--input", s.error().message};
  std::string line;
  if (!in.Next(line)) return Error{"--input", o.inputs[0] + ": empty file"};
  auto cols = Columns(line);
  for (const char* need : {"job_id", "num_gpu", "submit_time", "duration"}) {
    if (!cols.count(need)) {
      const bool yarn = cols.size() == 1 && cols.count("duration");
      return Error{"--input", o.inputs[0] + ":1: no \"" + need + "\" column" +
                                  (yarn ? " (a yarn-gput file lists durations only: there are no "
                                          "arrivals or sizes to replay)"
                                        : "")};
    }
  }
  const size_t c_id = cols["job_id"], c_gpu = cols["num_gpu"], c_submit = cols["submit_time"],
               c_dur = cols["duration"];
  ConvertSummary summary;
  std::vector<RigidJob> jobs;
  std::map<std::string, int> seen;  // job_id -> times seen (tf_job.csv repeats one)
  while (in.Next(line)) {
    if (line.empty()) continue;
    ++summary.rows;
    const auto f = SplitFields(line, ',');
    std::optional<int64_t> gpus;
    std::optional<double> submit, dur;
    if (f.size() == cols.size()) {
      gpus = ParseInt(f[c_gpu]);
      submit = ParseDouble(f[c_submit]);
      dur = ParseDouble(f[c_dur]);
    }
    if (!gpus || !submit || !dur || *gpus < 1 || *submit < 0 || *dur < 0 || f[c_id].empty()) {
      ++summary.dropped["malformed row"];
      continue;
    }
    RigidJob j;
    const std::string base = "t" + std::string(f[c_id]);
    const int n = ++seen[base];
    j.id = n == 1 ? base : base + "-" + std::to_string(n);
    if (n > 1) ++summary.adjusted["repeated job_id renamed"];
    j.submit = *submit;
    j.duration = *dur;
    if (j.duration < 1) {
      j.duration = 1;
      ++summary.adjusted["duration raised to 1 s"];
    }
    j.gpus = static_cast<int>(*gpus);
    jobs.push_back(std::move(j));
  }
  if (!in.error().empty()) return Error{"--input", in.error()};

  RigidPlan plan;
  plan.cluster.name = o.name.empty() ? "tiresias" : o.name;
  plan.cluster.comments = {
      "Converted by `gantry trace convert --format tiresias` from " + o.inputs[0] +
          (o.cluster_spec.empty() ? "" : " and " + o.cluster_spec) + ".",
      "One switch = one leaf; P100 GPUs as in the Tiresias testbed; see docs/traces.md."};
  plan.cluster.models.push_back({"P100", 16});
  PoolOut pool;
  pool.name = "p100";
  pool.count = o.nodes > 0 ? o.nodes : spec.switches * spec.nodes_per_switch;
  pool.gpus = spec.gpus_per_node;
  pool.gpu_model = "P100";
  pool.leaf_size = spec.nodes_per_switch;
  pool.cpus = spec.cpus;
  pool.memory_gb = spec.memory_gb;
  plan.cluster.pools.push_back(pool);
  plan.queues = {"default"};
  plan.vram_gb = 16;
  plan.limit = o.limit;
  plan.out = o.out;
  return WriteRigid(std::move(plan), std::move(jobs), std::move(summary));
}

}  // namespace gantry::convert
