// Independent replay of a Gantry event log; see invariant_checker.h.
//
// Units: GPU holdings are counted in 1/7000 of a GPU, so that a whole GPU (7000), a MIG
// compute slice (1000) and a thousandth of an MPS/timeslice share (7) are all integers and
// quota comparisons never involve floats. CPUs and memory are compared in thousandths.
// Times are doubles (the contract allows decimals) compared with a 1e-6 s tolerance.
#include "checker/invariant_checker.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <map>
#include <set>
#include <sstream>
#include <stdexcept>
#include <utility>

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>
#include <nlohmann/json.hpp>

namespace gantry::checker {
namespace {

using json = nlohmann::json;

constexpr double kTimeEps = 1e-6;
constexpr int64_t kUnitsPerGpu = 7000;
constexpr int64_t kUnitsPerMigSlice = 1000;
constexpr int64_t kUnitsPerShareMilli = 7;
constexpr double kSecondsPerDay = 86400.0;

struct InputError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

int64_t ToMilli(double x) { return std::llround(x * 1000.0); }
double FromMilli(int64_t m) { return static_cast<double>(m) / 1000.0; }

std::string FmtTime(double t) { return fmt::format("{:.6g}", t); }

// ---------------------------------------------------------------------------------------
// GPU catalog and MIG geometry, written from NVIDIA's MIG user guide ("Supported MIG
// Profiles" tables and `nvidia-smi mig -lgipp` placements): a MIG GPU has 7 compute and 8
// memory slices; placements as first memory slice:
//   7g: {0} (8 slices)   4g: {0} (4)   3g: {0,4} (4)   2g: {0,2,4} (2)
//   1g with a quarter of the memory: {0,2,4,6} (2)   smallest 1g: {0,...,6} (1)

struct MigProfile {
  std::string name;
  int compute = 0;     // compute (SM) slices of 7
  int mem_slices = 0;  // memory slices of 8
  double memory_gb = 0;
  std::vector<int> starts;  // allowed first memory slices
};

struct GpuModel {
  std::string name;
  double memory_gb = 0;
  std::vector<MigProfile> mig;  // empty: not MIG-capable

  const MigProfile* FindProfile(const std::string& profile) const {
    for (const MigProfile& p : mig) {
      if (p.name == profile) return &p;
    }
    return nullptr;
  }
};

std::vector<int> StandardStarts(int compute, int mem_slices) {
  switch (mem_slices) {
    case 8:
      return {0};
    case 4:
      return compute >= 4 ? std::vector<int>{0} : std::vector<int>{0, 4};
    case 2:
      return compute >= 2 ? std::vector<int>{0, 2, 4} : std::vector<int>{0, 2, 4, 6};
    case 1:
      return {0, 1, 2, 3, 4, 5, 6};
    default:
      return {};
  }
}

MigProfile Profile(int compute, int mem_slices, double memory_gb) {
  MigProfile p;
  p.name = fmt::format("{}g.{}gb", compute, memory_gb);
  p.compute = compute;
  p.mem_slices = mem_slices;
  p.memory_gb = memory_gb;
  p.starts = StandardStarts(compute, mem_slices);
  return p;
}

// The six GPU-instance profiles every MIG-capable data-center part of the catalog has:
// 1g (1/8 memory), 1g (2/8), 2g (2/8), 3g (4/8), 4g (4/8), 7g (all).
std::vector<MigProfile> MigFamily(double g1, double g1_large, double g2, double g3, double g4,
                                  double g7) {
  return {Profile(1, 1, g1), Profile(1, 2, g1_large), Profile(2, 2, g2),
          Profile(3, 4, g3), Profile(4, 4, g4),       Profile(7, 8, g7)};
}

std::map<std::string, GpuModel> BuiltinCatalog() {
  std::map<std::string, GpuModel> c;
  auto add = [&c](std::string name, double mem, std::vector<MigProfile> mig) {
    c[name] = GpuModel{name, mem, std::move(mig)};
  };
  add("A100-40GB", 40, MigFamily(5, 10, 10, 20, 20, 40));
  add("A100-80GB", 80, MigFamily(10, 20, 20, 40, 40, 80));
  add("H100-80GB", 80, MigFamily(10, 20, 20, 40, 40, 80));
  add("H100-94GB", 94, MigFamily(12, 24, 24, 47, 47, 94));
  add("H200-141GB", 141, MigFamily(18, 35, 35, 71, 71, 141));
  add("B200-180GB", 180, MigFamily(23, 45, 45, 90, 90, 180));
  add("L40S-48GB", 48, {});
  add("L4-24GB", 24, {});
  add("T4-16GB", 16, {});
  add("A10-24GB", 24, {});
  add("V100-16GB", 16, {});
  add("V100-32GB", 32, {});
  return c;
}

// "3g.40gb" on a GPU of `gpu_memory_gb`: compute from the prefix, memory slices from the
// compute size (and for 1g from whether it has about 1/8 or 1/4 of the memory).
MigProfile ProfileFromName(const std::string& name, double gpu_memory_gb) {
  int compute = 0;
  double mem = 0;
  char g = 0, dot = 0;
  std::istringstream in(name);
  in >> compute >> g >> dot >> mem;
  if (!in || g != 'g' || dot != '.' || compute < 1 || compute > 7) {
    throw InputError(fmt::format("mig profile '{}': expected a name like 1g.10gb", name));
  }
  int mem_slices = 0;
  if (compute == 7)
    mem_slices = 8;
  else if (compute >= 3)
    mem_slices = 4;
  else if (compute == 2)
    mem_slices = 2;
  else
    mem_slices = (mem * 8.0 > gpu_memory_gb * 1.5) ? 2 : 1;
  MigProfile p;
  p.name = name;
  p.compute = compute;
  p.mem_slices = mem_slices;
  p.memory_gb = mem;
  p.starts = StandardStarts(compute, mem_slices);
  return p;
}

// ---------------------------------------------------------------------------------------
// Small YAML / JSON accessors that name the field in their errors.

double YamlNumber(const YAML::Node& n, const std::string& key, double def, const std::string& ctx) {
  YAML::Node v = n[key];
  if (!v || v.IsNull()) return def;
  try {
    return v.as<double>();
  } catch (const YAML::Exception&) {
    throw InputError(fmt::format("{}: {}: expected a number", ctx, key));
  }
}

std::string YamlString(const YAML::Node& n, const std::string& key, const std::string& def,
                       const std::string& ctx) {
  YAML::Node v = n[key];
  if (!v || v.IsNull()) return def;
  if (!v.IsScalar()) throw InputError(fmt::format("{}: {}: expected a string", ctx, key));
  return v.as<std::string>();
}

bool YamlBool(const YAML::Node& n, const std::string& key, bool def, const std::string& ctx) {
  YAML::Node v = n[key];
  if (!v || v.IsNull()) return def;
  try {
    return v.as<bool>();
  } catch (const YAML::Exception&) {
    throw InputError(fmt::format("{}: {}: expected true or false", ctx, key));
  }
}

double JsonNumber(const json& j, const char* key, double def, const std::string& ctx) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return def;
  if (!it->is_number()) throw InputError(fmt::format("{}: {}: expected a number", ctx, key));
  return it->get<double>();
}

std::string JsonString(const json& j, const char* key, const std::string& def,
                       const std::string& ctx) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return def;
  if (!it->is_string()) throw InputError(fmt::format("{}: {}: expected a string", ctx, key));
  return it->get<std::string>();
}

// ---------------------------------------------------------------------------------------
// Cluster config.

struct Node {
  std::string name;
  int pool = 0;
  int index = 0;  // within the pool
  int leaf = 0;   // within the pool
  int gpus = 0;
  const GpuModel* model = nullptr;  // null for CPU-only nodes
  int domains = 1;
  int64_t cpus_milli = -1;  // -1: not limited by the config
  int64_t mem_milli = -1;
  bool spot = false;
  std::set<std::string> sharing;
};

struct Queue {
  std::string name;
  int parent = -1;
  int64_t burst_units = -1;   // -1: no burst limit
  bool budget_waits = false;  // budget.when_spent: wait
};

struct Config {
  std::map<std::string, GpuModel> models;
  std::vector<std::string> pool_names;
  std::vector<Node> nodes;
  std::map<std::string, int> node_by_name;
  std::vector<Queue> queues;
  std::map<std::string, int> queue_by_name;
  double reclaim_idle_after_s = 0;
  int64_t total_gpus = 0;
};

// The queue named `queue` and its ancestors, as indexes into config.queues; empty for an
// unknown queue.
std::vector<int> QueueChain(const Config& config, const std::string& queue) {
  std::vector<int> chain;
  auto it = config.queue_by_name.find(queue);
  if (it == config.queue_by_name.end()) return chain;
  for (int q = it->second; q >= 0; q = config.queues[static_cast<std::size_t>(q)].parent) {
    chain.push_back(q);
  }
  return chain;
}

Config LoadConfig(const std::string& path) {
  YAML::Node root;
  try {
    root = YAML::LoadFile(path);
  } catch (const YAML::Exception& e) {
    throw InputError(fmt::format("{}: {}", path, e.what()));
  }
  if (!root.IsMap()) throw InputError(fmt::format("{}: expected a mapping", path));
  Config c;
  c.models = BuiltinCatalog();
  if (YAML::Node models = root["gpu_models"]; models && models.IsSequence()) {
    for (std::size_t i = 0; i < models.size(); ++i) {
      const std::string ctx = fmt::format("{}: gpu_models[{}]", path, i);
      GpuModel m;
      m.name = YamlString(models[i], "name", "", ctx);
      m.memory_gb = YamlNumber(models[i], "memory_gb", 0, ctx);
      if (m.name.empty()) throw InputError(ctx + ": name: required");
      if (YAML::Node profiles = models[i]["mig_profiles"]; profiles && profiles.IsSequence()) {
        for (std::size_t k = 0; k < profiles.size(); ++k) {
          const YAML::Node p = profiles[k];
          if (p.IsScalar()) {
            m.mig.push_back(ProfileFromName(p.as<std::string>(), m.memory_gb));
            continue;
          }
          const std::string pctx = fmt::format("{}.mig_profiles[{}]", ctx, k);
          MigProfile prof = ProfileFromName(YamlString(p, "name", "", pctx), m.memory_gb);
          prof.compute = static_cast<int>(YamlNumber(p, "compute_slices", prof.compute, pctx));
          prof.mem_slices = static_cast<int>(YamlNumber(p, "memory_slices", prof.mem_slices, pctx));
          prof.memory_gb = YamlNumber(p, "memory_gb", prof.memory_gb, pctx);
          prof.starts = StandardStarts(prof.compute, prof.mem_slices);
          if (YAML::Node starts = p["starts"]; starts && starts.IsSequence()) {
            prof.starts.clear();
            for (const YAML::Node& s : starts) prof.starts.push_back(s.as<int>());
          }
          m.mig.push_back(std::move(prof));
        }
      }
      c.models[m.name] = std::move(m);
    }
  }
  YAML::Node pools = root["pools"];
  if (!pools || !pools.IsSequence()) throw InputError(path + ": pools: required list");
  for (std::size_t i = 0; i < pools.size(); ++i) {
    const YAML::Node p = pools[i];
    const std::string ctx = fmt::format("{}: pools[{}]", path, i);
    const std::string name = YamlString(p, "name", "", ctx);
    if (name.empty()) throw InputError(ctx + ": name: required");
    const std::string prefix = YamlString(p, "name_prefix", name, ctx);
    const int count = static_cast<int>(YamlNumber(p, "count", 0, ctx));
    const int gpus = static_cast<int>(YamlNumber(p, "gpus", 0, ctx));
    const std::string model_name = YamlString(p, "gpu_model", "", ctx);
    const GpuModel* model = nullptr;
    if (gpus > 0) {
      auto it = c.models.find(model_name);
      if (it == c.models.end()) {
        throw InputError(fmt::format("{}: gpu_model: unknown model '{}'", ctx, model_name));
      }
      model = &it->second;
    }
    int domains = static_cast<int>(YamlNumber(p, "nvlink_domains", 1, ctx));
    if (domains < 1) domains = 1;
    const int leaf_size = static_cast<int>(YamlNumber(p, "leaf_size", 0, ctx));
    const double cpus = YamlNumber(p, "cpus", -1, ctx);
    const double mem = YamlNumber(p, "memory_gb", -1, ctx);
    const bool spot = YamlBool(p, "spot", false, ctx);
    std::set<std::string> sharing;
    if (YAML::Node s = p["sharing"]; s && s.IsSequence()) {
      for (const YAML::Node& mode : s) sharing.insert(mode.as<std::string>());
    }
    const int pool_index = static_cast<int>(c.pool_names.size());
    c.pool_names.push_back(name);
    for (int k = 0; k < count; ++k) {
      Node n;
      n.name = fmt::format("{}-{}", prefix, k);
      n.pool = pool_index;
      n.index = k;
      n.leaf = leaf_size > 0 ? k / leaf_size : 0;  // no leaf_size: the pool is one leaf
      n.gpus = gpus;
      n.model = model;
      n.domains = domains;
      n.cpus_milli = cpus < 0 ? -1 : ToMilli(cpus);
      n.mem_milli = mem < 0 ? -1 : ToMilli(mem);
      n.spot = spot;
      n.sharing = sharing;
      if (c.node_by_name.count(n.name) != 0) {
        throw InputError(fmt::format("{}: duplicate node name {}", ctx, n.name));
      }
      c.node_by_name[n.name] = static_cast<int>(c.nodes.size());
      c.total_gpus += gpus;
      c.nodes.push_back(std::move(n));
    }
  }
  if (YAML::Node queues = root["queues"]; queues && queues.IsSequence()) {
    std::vector<std::string> parents;
    for (std::size_t i = 0; i < queues.size(); ++i) {
      const std::string ctx = fmt::format("{}: queues[{}]", path, i);
      Queue q;
      q.name = YamlString(queues[i], "name", "", ctx);
      const double burst = YamlNumber(queues[i], "burst_gpus", -1, ctx);
      q.burst_units = burst < 0 ? -1 : std::llround(burst * kUnitsPerGpu);
      if (YAML::Node b = queues[i]["budget"]; b && b.IsMap()) {
        q.budget_waits = YamlString(b, "when_spent", "best-effort", ctx + ".budget") == "wait";
      }
      parents.push_back(YamlString(queues[i], "parent", "", ctx));
      c.queue_by_name[q.name] = static_cast<int>(c.queues.size());
      c.queues.push_back(std::move(q));
    }
    for (std::size_t i = 0; i < parents.size(); ++i) {
      if (parents[i].empty()) continue;
      auto it = c.queue_by_name.find(parents[i]);
      if (it == c.queue_by_name.end()) {
        throw InputError(
            fmt::format("{}: queues[{}]: parent: unknown queue '{}'", path, i, parents[i]));
      }
      c.queues[i].parent = it->second;
    }
    // A cycle would make the ancestor walk loop forever.
    for (std::size_t i = 0; i < c.queues.size(); ++i) {
      int q = static_cast<int>(i);
      for (std::size_t steps = 0; q >= 0; ++steps) {
        if (steps > c.queues.size()) throw InputError(path + ": queues: parent cycle");
        q = c.queues[static_cast<std::size_t>(q)].parent;
      }
    }
  }
  if (YAML::Node policy = root["policy"]; policy && policy.IsMap()) {
    c.reclaim_idle_after_s = YamlNumber(policy, "reclaim_idle_after_s", 0, path + ": policy");
  }
  return c;
}

// ---------------------------------------------------------------------------------------
// Trace.

enum class Kind { kCpu, kWhole, kMig, kShare, kInvalid };

struct Job {
  std::string id;
  double submit = 0;
  double duration = 0;
  std::string queue;
  std::string tier = "standard";
  int replicas = 1;
  int min_replicas = 0;         // elastic: runs with min_replicas..replicas workers (0: rigid)
  std::vector<double> speedup;  // elastic: throughput at 1..replicas workers (empty: linear)
  // Its speed at `size` workers, in workers (the trace's `speedup` as a share of its full
  // size's, times replicas; `size` when linear).
  double Speed(int size) const {
    if (speedup.size() != static_cast<size_t>(replicas) || size < 1 || !(speedup.back() > 0))
      return size;
    return replicas * speedup[static_cast<size_t>(std::min(size, replicas) - 1)] / speedup.back();
  }
  bool linear() const { return speedup.size() != static_cast<size_t>(replicas); }
  // Its speed on each GPU model by name (the trace's speed_by_model; absent: 1).
  std::map<std::string, double> speed_by_model;
  Kind kind = Kind::kWhole;
  int whole_gpus = 0;
  std::string mig;
  int64_t share_milli = 0;
  std::string share_mode;           // "mps" or "timeslice"
  std::vector<std::string> models;  // empty: any
  double vram_gb = 0;
  int64_t cpus_milli = 0;
  int64_t mem_milli = 0;
  std::string topology = "spine";
  double checkpoint_s = 0;
  double grace_s = 0;
  bool has_window = false;
  double window_start = 0;  // seconds after midnight
  double window_end = 0;
  bool has_idle = false;
  double idle_after_s = 0;
};

double ParseHhMm(const std::string& s, const std::string& ctx) {
  int h = -1, m = -1;
  char colon = 0;
  std::istringstream in(s);
  in >> h >> colon >> m;
  if (!in || colon != ':' || h < 0 || h > 24 || m < 0 || m > 59) {
    throw InputError(fmt::format("{}: window: expected HH:MM, got '{}'", ctx, s));
  }
  return h * 3600.0 + m * 60.0;
}

std::vector<Job> LoadTrace(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw InputError(fmt::format("{}: cannot open", path));
  std::vector<Job> jobs;
  std::set<std::string> ids;
  std::string text;
  for (int64_t line_no = 1; std::getline(in, text); ++line_no) {
    if (text.find_first_not_of(" \t\r\n") == std::string::npos) continue;
    const std::string ctx = fmt::format("{}:{}", path, line_no);
    json j;
    try {
      j = json::parse(text);
    } catch (const json::exception& e) {
      throw InputError(fmt::format("{}: {}", ctx, e.what()));
    }
    if (!j.is_object()) throw InputError(ctx + ": expected an object");
    Job job;
    job.id = JsonString(j, "id", "", ctx);
    if (job.id.empty()) throw InputError(ctx + ": id: required in a trace");
    if (!ids.insert(job.id).second) throw InputError(ctx + ": id: duplicate " + job.id);
    job.submit = JsonNumber(j, "submit", 0, ctx);
    job.duration = JsonNumber(j, "duration", 0, ctx);
    job.queue = JsonString(j, "queue", "", ctx);
    job.tier = JsonString(j, "tier", "standard", ctx);
    job.replicas = static_cast<int>(JsonNumber(j, "replicas", 1, ctx));
    job.min_replicas = static_cast<int>(JsonNumber(j, "min_replicas", 0, ctx));
    if (job.min_replicas >= job.replicas) job.min_replicas = 0;
    if (auto sp = j.find("speedup"); sp != j.end() && sp->is_array()) {
      for (const json& v : *sp) job.speedup.push_back(v.is_number() ? v.get<double>() : 0.0);
    }
    if (auto sm = j.find("speed_by_model"); sm != j.end() && sm->is_object()) {
      for (const auto& [model, v] : sm->items()) {
        if (!v.is_number() || !(v.get<double>() > 0))
          throw InputError(ctx + ": speed_by_model." + model + ": expected a number above 0");
        job.speed_by_model[model] = v.get<double>();
      }
    }
    job.vram_gb = JsonNumber(j, "vram_gb", 0, ctx);
    job.cpus_milli = ToMilli(JsonNumber(j, "cpus", 0, ctx));
    job.mem_milli = ToMilli(JsonNumber(j, "memory_gb", 0, ctx));
    job.topology = JsonString(j, "topology", "spine", ctx);
    job.checkpoint_s = JsonNumber(j, "checkpoint_s", 0, ctx);
    job.grace_s = JsonNumber(j, "grace_s", 0, ctx);
    if (auto it = j.find("idle_after_s"); it != j.end() && !it->is_null()) {
      job.has_idle = true;
      job.idle_after_s = JsonNumber(j, "idle_after_s", 0, ctx);
    }
    if (auto it = j.find("gpu_model"); it != j.end() && !it->is_null()) {
      if (it->is_string()) {
        job.models.push_back(it->get<std::string>());
      } else if (it->is_array()) {
        for (const json& m : *it) {
          if (!m.is_string()) throw InputError(ctx + ": gpu_model: expected strings");
          job.models.push_back(m.get<std::string>());
        }
      } else {
        throw InputError(ctx + ": gpu_model: expected a string or a list");
      }
    }
    if (auto it = j.find("window"); it != j.end() && !it->is_null()) {
      if (!it->is_object()) throw InputError(ctx + ": window: expected {start, end}");
      job.has_window = true;
      job.window_start = ParseHhMm(JsonString(*it, "start", "", ctx), ctx);
      job.window_end = ParseHhMm(JsonString(*it, "end", "", ctx), ctx);
    }
    const std::string sharing = JsonString(j, "sharing", "exclusive", ctx);
    const double gpus = JsonNumber(j, "gpus", 1, ctx);
    if (j.contains("mig") && !j["mig"].is_null()) {
      job.kind = Kind::kMig;
      job.mig = JsonString(j, "mig", "", ctx);
    } else if (sharing == "mps" || sharing == "timeslice") {
      job.kind = (gpus > 0 && gpus <= 1) ? Kind::kShare : Kind::kInvalid;
      job.share_milli = ToMilli(gpus);
      job.share_mode = sharing;
    } else if (gpus == 0) {
      job.kind = Kind::kCpu;
    } else if (gpus > 0 && std::floor(gpus) == gpus) {
      job.kind = Kind::kWhole;
      job.whole_gpus = static_cast<int>(gpus);
    } else {
      job.kind = Kind::kInvalid;  // fractional exclusive: can only be rejected
    }
    jobs.push_back(std::move(job));
  }
  return jobs;
}

struct Failure {
  double t = 0;
  std::string node;
  double down_s = 0;
};

std::vector<Failure> LoadFailures(const std::string& path, const Config& config) {
  std::vector<Failure> out;
  if (path.empty()) return out;
  std::ifstream in(path);
  if (!in) throw InputError(fmt::format("{}: cannot open", path));
  std::string text;
  for (int64_t line_no = 1; std::getline(in, text); ++line_no) {
    if (text.find_first_not_of(" \t\r\n") == std::string::npos) continue;
    const std::string ctx = fmt::format("{}:{}", path, line_no);
    json j;
    try {
      j = json::parse(text);
    } catch (const json::exception& e) {
      throw InputError(fmt::format("{}: {}", ctx, e.what()));
    }
    Failure f;
    f.t = JsonNumber(j, "t", 0, ctx);
    f.node = JsonString(j, "node", "", ctx);
    f.down_s = JsonNumber(j, "down_s", 0, ctx);
    if (config.node_by_name.count(f.node) == 0) {
      throw InputError(fmt::format("{}: node: unknown node '{}'", ctx, f.node));
    }
    out.push_back(std::move(f));
  }
  return out;
}

// ---------------------------------------------------------------------------------------
// Replay.

using Interval = std::pair<double, double>;

// Union of intervals clipped to [-inf, end], touching ones merged, empty ones dropped.
std::vector<Interval> NormalizeIntervals(std::vector<Interval> v, double end) {
  for (Interval& i : v) i.second = std::min(i.second, end);
  std::sort(v.begin(), v.end());
  std::vector<Interval> out;
  for (const Interval& i : v) {
    if (i.second - i.first <= 1e-9) continue;
    if (!out.empty() && i.first <= out.back().second + kTimeEps) {
      out.back().second = std::max(out.back().second, i.second);
    } else {
      out.push_back(i);
    }
  }
  return out;
}

struct Worker {
  int node = -1;
  Kind kind = Kind::kCpu;
  std::vector<int> gpus;  // whole GPUs
  int gpu = -1;           // MIG or share
  int mig_start = 0;
  int mig_mem = 0;
  int mig_compute = 0;
  double mig_memory_gb = 0;
  int64_t share_milli = 0;
};

enum class State { kNone, kPending, kRunning, kDone };

struct JobRun {
  State state = State::kNone;
  std::string final_type;
  bool ever_started = false;
  double submit_t = 0;
  double first_start = 0;
  double progress = 0;     // kept progress before the current run
  double runtime_sum = 0;  // run time of all ended runs, kept or not
  double run_start = 0;
  double finish_t = 0;
  int64_t run_units = 0;  // GPU units of the current run (all workers)
  std::map<std::string, int64_t> run_units_by_model;
  int64_t run_seq = 0;
  std::vector<Worker> workers;
  // Elastic jobs: the run's workers, and the work done in worker-milliseconds, as the
  // simulator keeps it (a run of k of n workers does k per ms; its finish is rounded up
  // to the millisecond).
  int size = 0;
  int64_t work_ms = 0;
  // How fast the run's work goes: its slowest worker's model's speed (speed_by_model).
  double speed = 1;
  // Work at the run's speed: `ms` of run time does this much (rounded, as the simulator).
  int64_t Work(int64_t ms) const {
    return speed == 1 ? ms : std::llround(static_cast<double>(ms) * speed);
  }
  // The run time `work_ms` of work takes at its speed, in ms, rounded up.
  int64_t Time(int64_t ms) const {
    return speed == 1 ? ms : static_cast<int64_t>(std::ceil(static_cast<double>(ms) / speed));
  }
};

struct MigInst {
  std::string job;
  int start = 0;
  int mem = 0;
  int compute = 0;
};

struct ShareInst {
  std::string job;
  int64_t milli = 0;
  double vram = 0;
  std::string mode;
};

struct GpuState {
  std::string whole;  // job holding it whole; empty when none
  std::vector<MigInst> mig;
  std::vector<ShareInst> shares;
};

struct NodeState {
  int64_t cpus_used = 0;
  int64_t mem_used = 0;
  std::vector<GpuState> gpus;
  bool down = false;
  double down_since = 0;
  std::vector<Interval> down_intervals;  // from the log
};

struct RunRecord {
  double start = 0;
  double end = 0;
  int64_t units = 0;
  std::string queue;
  std::map<std::string, int64_t> units_by_model;  // GPU model name -> units
};

struct Obligation {  // a job that must be released at a node_down's time
  std::string job;
  int64_t run_seq = 0;
  double t = 0;
  int64_t line = 0;
  std::string node;
};

class Replayer {
 public:
  Replayer(const Config& config, const std::vector<Job>& jobs, std::vector<Violation>& out,
           CheckStats& stats)
      : config_(config), out_(out), stats_(stats) {
    for (const Job& j : jobs) {
      jobs_[j.id] = &j;
      runs_[j.id];
    }
    nodes_.resize(config.nodes.size());
    for (std::size_t i = 0; i < config.nodes.size(); ++i) {
      nodes_[i].gpus.resize(static_cast<std::size_t>(std::max(0, config.nodes[i].gpus)));
    }
    holding_.assign(config.queues.size(), 0);
    budget_spent_.assign(config.queues.size(), false);
  }

  void Replay(const std::string& events_path) {
    std::ifstream in(events_path);
    if (!in) throw InputError(fmt::format("{}: cannot open", events_path));
    std::string text;
    for (int64_t line_no = 1; std::getline(in, text); ++line_no) {
      if (text.find_first_not_of(" \t\r\n") == std::string::npos) continue;
      ++stats_.events;
      OnLine(line_no, text);
    }
    FlushObligations(std::numeric_limits<double>::infinity());
    Finish();
  }

  // Results used by the report and failures checks.
  double last_t() const { return last_t_; }
  bool any_event() const { return any_event_; }
  const std::vector<NodeState>& nodes() const { return nodes_; }
  const std::vector<RunRecord>& run_records() const { return records_; }
  const std::map<std::string, JobRun>& runs() const { return runs_; }
  const Job& job(const std::string& id) const { return *jobs_.at(id); }
  double lost_gpu_seconds() const { return lost_gpu_seconds_; }
  int64_t count(const std::string& type) const {
    auto it = counts_.find(type);
    return it == counts_.end() ? 0 : it->second;
  }
  double first_submit() const { return first_submit_; }
  double last_finish() const { return last_finish_; }

 private:
  void Add(int64_t line, double t, std::string subject, std::string_view invariant,
           std::string message) {
    out_.push_back(
        Violation{line, t, std::move(subject), std::string(invariant), std::move(message)});
  }

  void OnLine(int64_t line, const std::string& text) {
    json ev;
    try {
      ev = json::parse(text);
    } catch (const json::exception& e) {
      Add(line, last_t_, "", inv::kEventFormat, fmt::format("not JSON: {}", e.what()));
      return;
    }
    if (!ev.is_object() || !ev.contains("t") || !ev["t"].is_number() || !ev.contains("type") ||
        !ev["type"].is_string()) {
      Add(line, last_t_, "", inv::kEventFormat, "event needs a numeric t and a string type");
      return;
    }
    const double t = ev["t"].get<double>();
    const std::string type = ev["type"].get<std::string>();
    if (any_event_ && t < last_t_) {
      Add(line, t, "", inv::kTimeOrder,
          fmt::format("t={} is before the previous event's t={}", FmtTime(t), FmtTime(last_t_)));
    }
    FlushObligations(t);
    if (!any_event_ || t > last_t_) last_t_ = t;
    any_event_ = true;
    ++counts_[type];

    if (type == "node_down" || type == "node_up") {
      if (!ev.contains("node") || !ev["node"].is_string()) {
        Add(line, t, "", inv::kEventFormat, type + " without a node");
        return;
      }
      const std::string node = ev["node"].get<std::string>();
      auto it = config_.node_by_name.find(node);
      if (it == config_.node_by_name.end()) {
        Add(line, t, node, inv::kUnknownNode, "no such node in the config");
        return;
      }
      if (type == "node_down")
        OnNodeDown(line, t, it->second);
      else
        OnNodeUp(line, t, it->second);
      return;
    }
    if (type == "budget") {  // a queue's GPU-hour budget spent or renewed
      const std::string queue = ev.value("queue", "");
      const std::string state = ev.value("state", "");
      auto it = config_.queue_by_name.find(queue);
      if (it == config_.queue_by_name.end()) {
        Add(line, t, "", inv::kEventFormat, fmt::format("budget of unknown queue '{}'", queue));
      } else if (state != "spent" && state != "renewed") {
        Add(line, t, "", inv::kEventFormat,
            fmt::format("budget state '{}' (spent or renewed)", state));
      } else {
        budget_spent_[static_cast<std::size_t>(it->second)] = state == "spent";
      }
      return;
    }
    static const std::set<std::string> kJobEvents = {"submit", "start",   "preempt", "finish",
                                                     "reject", "reclaim", "requeue", "cancel",
                                                     "wait",   "resize"};
    if (kJobEvents.count(type) == 0) {
      Add(line, t, "", inv::kEventFormat, fmt::format("unknown event type '{}'", type));
      return;
    }
    if (!ev.contains("job") || !ev["job"].is_string()) {
      Add(line, t, "", inv::kEventFormat, type + " without a job");
      return;
    }
    const std::string id = ev["job"].get<std::string>();
    auto jit = jobs_.find(id);
    if (jit == jobs_.end()) {
      Add(line, t, id, inv::kUnknownJob, fmt::format("{} of a job that is not in the trace", type));
      return;
    }
    const Job& job = *jit->second;
    JobRun& run = runs_[id];
    if (type == "submit")
      OnSubmit(line, t, job, run);
    else if (type == "start")
      OnStart(line, t, job, run, ev);
    else if (type == "resize")
      OnResize(line, t, job, run, ev);
    else if (type == "finish")
      OnFinish(line, t, job, run);
    else if (type == "preempt" || type == "requeue" || type == "reclaim")
      OnInterrupt(line, t, job, run, type, ev);
    else if (type == "reject")
      OnReject(line, t, job, run);
    else if (type == "cancel")
      OnCancel(line, t, job, run);
    else if (type == "wait") {
      if (run.state != State::kPending) {
        Add(line, t, id, inv::kLifecycle, "wait event for a job that is not pending");
      }
    }
  }

  static const char* StateName(State s) {
    switch (s) {
      case State::kNone:
        return "not submitted";
      case State::kPending:
        return "pending";
      case State::kRunning:
        return "running";
      case State::kDone:
        return "in a final state";
    }
    return "?";
  }

  bool Expect(int64_t line, double t, const Job& job, const JobRun& run, State want,
              const std::string& type) {
    if (run.state == want) return true;
    std::string why = StateName(run.state);
    if (run.state == State::kDone) why += " (" + run.final_type + ")";
    Add(line, t, job.id, inv::kLifecycle, fmt::format("{} while the job is {}", type, why));
    return false;
  }

  void OnSubmit(int64_t line, double t, const Job& job, JobRun& run) {
    if (!Expect(line, t, job, run, State::kNone, "submit")) return;
    if (std::fabs(t - job.submit) > kTimeEps) {
      Add(line, t, job.id, inv::kSubmitTime,
          fmt::format("submitted at {} but the trace says {}", FmtTime(t), FmtTime(job.submit)));
    }
    run.state = State::kPending;
    run.submit_t = t;
    first_submit_ = std::min(first_submit_, t);
  }

  // Parses one alloc entry into `w`; false when it cannot be placed on the model at all.
  bool ParseWorker(int64_t line, double t, const Job& job, const json& e, std::size_t index,
                   Worker& w) {
    const std::string where = fmt::format("alloc[{}]", index);
    if (!e.is_object() || !e.contains("node") || !e["node"].is_string()) {
      Add(line, t, job.id, inv::kAllocShape, where + ": needs a node name");
      return false;
    }
    const std::string node_name = e["node"].get<std::string>();
    auto nit = config_.node_by_name.find(node_name);
    if (nit == config_.node_by_name.end()) {
      Add(line, t, job.id, inv::kUnknownNode,
          fmt::format("{}: no node named {}", where, node_name));
      return false;
    }
    w.node = nit->second;
    w.kind = job.kind;
    const Node& node = config_.nodes[static_cast<std::size_t>(w.node)];
    auto gpu_in_range = [&](const json& g, int& out) {
      if (!g.is_number_integer()) {
        Add(line, t, job.id, inv::kAllocShape, where + ": GPU index is not an integer");
        return false;
      }
      out = g.get<int>();
      if (out < 0 || out >= node.gpus) {
        Add(line, t, job.id, inv::kGpuIndex,
            fmt::format("{}: GPU {} on {} which has {} GPUs", where, out, node.name, node.gpus));
        return false;
      }
      return true;
    };
    auto check_model = [&]() {
      if (node.model == nullptr) return;  // index check already failed: node has no GPUs
      if (!job.models.empty() &&
          std::find(job.models.begin(), job.models.end(), node.model->name) == job.models.end()) {
        Add(line, t, job.id, inv::kGpuModel,
            fmt::format("{}: {} has {} which the job does not accept", where, node.name,
                        node.model->name));
      }
    };
    auto check_sharing = [&](const std::string& mode) {
      if (node.sharing.count(mode) == 0) {
        Add(line, t, job.id, inv::kSharingMode,
            fmt::format("{}: pool {} does not allow sharing mode {}", where,
                        config_.pool_names[static_cast<std::size_t>(node.pool)], mode));
      }
    };
    const bool has_gpu = e.contains("gpu"), has_mig = e.contains("mig"),
               has_share = e.contains("share");
    switch (job.kind) {
      case Kind::kCpu: {
        const bool gpus_empty = !e.contains("gpus") || (e["gpus"].is_array() && e["gpus"].empty());
        if (!gpus_empty || has_gpu || has_mig || has_share) {
          Add(line, t, job.id, inv::kAllocShape, where + ": a CPU-only worker holds GPUs");
          return false;
        }
        return true;
      }
      case Kind::kWhole: {
        if (!e.contains("gpus") || !e["gpus"].is_array() || has_mig || has_share) {
          Add(line, t, job.id, inv::kAllocShape,
              where + ": a whole-GPU worker needs a gpus list (and no mig/share)");
          return false;
        }
        const json& list = e["gpus"];
        if (static_cast<int>(list.size()) != job.whole_gpus) {
          Add(line, t, job.id, inv::kAllocShape,
              fmt::format("{}: {} GPUs for a worker of {}", where, list.size(), job.whole_gpus));
        }
        std::set<int> seen;
        bool ok = true;
        for (const json& g : list) {
          int idx = 0;
          if (!gpu_in_range(g, idx)) {
            ok = false;
            continue;
          }
          if (!seen.insert(idx).second) {
            Add(line, t, job.id, inv::kAllocShape,
                fmt::format("{}: GPU {} listed twice", where, idx));
            continue;
          }
          w.gpus.push_back(idx);
        }
        check_model();
        if (node.model != nullptr && job.vram_gb > node.model->memory_gb + 1e-9) {
          Add(line, t, job.id, inv::kVram,
              fmt::format("{}: vram_gb {} > {} GB of {}", where, job.vram_gb, node.model->memory_gb,
                          node.model->name));
        }
        return ok || !w.gpus.empty();
      }
      case Kind::kMig: {
        if (!has_gpu || !has_mig || !e["mig"].is_string() || !e.contains("start") ||
            !e["start"].is_number_integer() || has_share || e.contains("gpus")) {
          Add(line, t, job.id, inv::kAllocShape,
              where + ": a MIG worker needs gpu, mig and start (and no gpus/share)");
          return false;
        }
        const std::string profile = e["mig"].get<std::string>();
        if (profile != job.mig) {
          Add(line, t, job.id, inv::kAllocShape,
              fmt::format("{}: profile {} but the job asks for {}", where, profile, job.mig));
        }
        if (!gpu_in_range(e["gpu"], w.gpu)) return false;
        check_model();
        check_sharing("mig");
        const MigProfile* p = node.model->FindProfile(profile);
        if (p == nullptr) {
          Add(line, t, job.id, inv::kMigPlacement,
              fmt::format("{}: {} has no MIG profile {}", where, node.model->name, profile));
          return false;
        }
        w.mig_start = e["start"].get<int>();
        w.mig_mem = p->mem_slices;
        w.mig_compute = p->compute;
        w.mig_memory_gb = p->memory_gb;
        if (std::find(p->starts.begin(), p->starts.end(), w.mig_start) == p->starts.end()) {
          Add(line, t, job.id, inv::kMigPlacement,
              fmt::format("{}: {} cannot start at memory slice {} on {}", where, profile,
                          w.mig_start, node.model->name));
        }
        if (job.vram_gb > p->memory_gb + 1e-9) {
          Add(line, t, job.id, inv::kVram,
              fmt::format("{}: vram_gb {} > {} GB of a {} instance", where, job.vram_gb,
                          p->memory_gb, profile));
        }
        return true;
      }
      case Kind::kShare: {
        if (!has_gpu || !has_share || !e["share"].is_number() || has_mig || e.contains("gpus")) {
          Add(line, t, job.id, inv::kAllocShape,
              where + ": a shared worker needs gpu and share (and no gpus/mig)");
          return false;
        }
        w.share_milli = ToMilli(e["share"].get<double>());
        if (w.share_milli != job.share_milli) {
          Add(line, t, job.id, inv::kAllocShape,
              fmt::format("{}: share {} but the job asks for {}", where, e["share"].get<double>(),
                          FromMilli(job.share_milli)));
        }
        if (!gpu_in_range(e["gpu"], w.gpu)) return false;
        check_model();
        check_sharing(job.share_mode);
        if (job.vram_gb > node.model->memory_gb + 1e-9) {
          Add(line, t, job.id, inv::kVram,
              fmt::format("{}: vram_gb {} > {} GB of {}", where, job.vram_gb, node.model->memory_gb,
                          node.model->name));
        }
        return true;
      }
      case Kind::kInvalid:
        Add(line, t, job.id, inv::kAllocShape,
            "the job's gpus/sharing cannot be placed (fractional exclusive GPUs); it should "
            "have been rejected");
        return false;
    }
    return false;
  }

  std::vector<int> WorkerGpus(const Worker& w) const {
    if (w.kind == Kind::kWhole) return w.gpus;
    if (w.gpu >= 0) return {w.gpu};
    return {};
  }

  void CheckTopology(int64_t line, double t, const Job& job, const std::vector<Worker>& ws) {
    if (ws.empty()) return;
    const std::string& topo = job.topology;
    if (topo != "nvlink" && topo != "node" && topo != "leaf") return;  // spine: anywhere
    const Node& first = config_.nodes[static_cast<std::size_t>(ws.front().node)];
    for (const Worker& w : ws) {
      const Node& n = config_.nodes[static_cast<std::size_t>(w.node)];
      if (topo == "leaf") {
        if (n.pool != first.pool || n.leaf != first.leaf) {
          Add(line, t, job.id, inv::kTopology,
              fmt::format("topology leaf but workers on {} and {} are under different leaves",
                          first.name, n.name));
          return;
        }
      } else if (w.node != ws.front().node) {
        Add(line, t, job.id, inv::kTopology,
            fmt::format("topology {} but workers on {} and {}", topo, first.name, n.name));
        return;
      }
    }
    if (topo != "nvlink" || first.gpus <= 0) return;
    std::set<int> domains;
    for (const Worker& w : ws) {
      for (int g : WorkerGpus(w)) domains.insert(g * first.domains / first.gpus);
    }
    if (domains.size() > 1) {
      Add(line, t, job.id, inv::kTopology,
          fmt::format("topology nvlink but GPUs span {} NVLink domains of {}", domains.size(),
                      first.name));
    }
  }

  static bool InWindow(const Job& job, double t) {
    double tod = std::fmod(t, kSecondsPerDay);
    if (tod < 0) tod += kSecondsPerDay;
    const double s = job.window_start, e = job.window_end;
    if (s == e) return true;  // a zero-length window is read as the whole day
    if (s < e) return tod >= s - kTimeEps && tod < e;
    return tod >= s - kTimeEps || tod < e;
  }

  int64_t WorkerUnits(const Worker& w) const {
    switch (w.kind) {
      case Kind::kWhole:
        return static_cast<int64_t>(w.gpus.size()) * kUnitsPerGpu;
      case Kind::kMig:
        return w.mig_compute * kUnitsPerMigSlice;
      case Kind::kShare:
        return w.share_milli * kUnitsPerShareMilli;
      default:
        return 0;
    }
  }

  // Places one worker in the capacity model, reporting every conflict.
  void Place(int64_t line, double t, const Job& job, const Worker& w) {
    const Node& node = config_.nodes[static_cast<std::size_t>(w.node)];
    NodeState& ns = nodes_[static_cast<std::size_t>(w.node)];
    ns.cpus_used += job.cpus_milli;
    ns.mem_used += job.mem_milli;
    if (node.cpus_milli >= 0 && ns.cpus_used > node.cpus_milli) {
      Add(line, t, job.id, inv::kNodeCapacity,
          fmt::format("{} cpus in use on {} which has {}", FromMilli(ns.cpus_used), node.name,
                      FromMilli(node.cpus_milli)));
    }
    if (node.mem_milli >= 0 && ns.mem_used > node.mem_milli) {
      Add(line, t, job.id, inv::kNodeCapacity,
          fmt::format("{} GB memory in use on {} which has {}", FromMilli(ns.mem_used), node.name,
                      FromMilli(node.mem_milli)));
    }
    auto describe = [&](const GpuState& g) {
      if (!g.whole.empty()) return fmt::format("held whole by {}", g.whole);
      if (!g.mig.empty()) return fmt::format("MIG-split (e.g. {})", g.mig.front().job);
      if (!g.shares.empty()) return fmt::format("shared (e.g. {})", g.shares.front().job);
      return std::string("free");
    };
    switch (w.kind) {
      case Kind::kWhole:
        for (int idx : w.gpus) {
          GpuState& g = ns.gpus[static_cast<std::size_t>(idx)];
          if (!g.whole.empty() || !g.mig.empty() || !g.shares.empty()) {
            Add(line, t, job.id, inv::kGpuExclusive,
                fmt::format("{} GPU {} taken whole but it is {}", node.name, idx, describe(g)));
          }
          if (g.whole.empty()) g.whole = job.id;
        }
        break;
      case Kind::kMig: {
        GpuState& g = ns.gpus[static_cast<std::size_t>(w.gpu)];
        if (!g.whole.empty() || !g.shares.empty()) {
          Add(line, t, job.id, inv::kGpuExclusive,
              fmt::format("{} GPU {} gets a MIG instance but it is {}", node.name, w.gpu,
                          describe(g)));
        }
        int compute = w.mig_compute;
        for (const MigInst& m : g.mig) {
          compute += m.compute;
          if (w.mig_start < m.start + m.mem && m.start < w.mig_start + w.mig_mem) {
            Add(line, t, job.id, inv::kMigOverlap,
                fmt::format("{} GPU {}: memory slices [{},{}) overlap {}'s [{},{})", node.name,
                            w.gpu, w.mig_start, w.mig_start + w.mig_mem, m.job, m.start,
                            m.start + m.mem));
          }
        }
        if (w.mig_start < 0 || w.mig_start + w.mig_mem > 8) {
          Add(line, t, job.id, inv::kMigOverlap,
              fmt::format("{} GPU {}: memory slices [{},{}) outside 0..8", node.name, w.gpu,
                          w.mig_start, w.mig_start + w.mig_mem));
        }
        if (compute > 7) {
          Add(line, t, job.id, inv::kMigOverlap,
              fmt::format("{} GPU {}: {} compute slices in use (max 7)", node.name, w.gpu,
                          compute));
        }
        g.mig.push_back(MigInst{job.id, w.mig_start, w.mig_mem, w.mig_compute});
        break;
      }
      case Kind::kShare: {
        GpuState& g = ns.gpus[static_cast<std::size_t>(w.gpu)];
        if (!g.whole.empty() || !g.mig.empty()) {
          Add(line, t, job.id, inv::kGpuExclusive,
              fmt::format("{} GPU {} gets a {} share but it is {}", node.name, w.gpu,
                          job.share_mode, describe(g)));
        }
        int64_t milli = w.share_milli;
        double vram = job.vram_gb;
        for (const ShareInst& s : g.shares) {
          milli += s.milli;
          vram += s.vram;
          if (s.mode != job.share_mode) {
            Add(line, t, job.id, inv::kShareCapacity,
                fmt::format("{} GPU {}: {} share next to {}'s {} share", node.name, w.gpu,
                            job.share_mode, s.job, s.mode));
          }
        }
        if (milli > 1000) {
          Add(line, t, job.id, inv::kShareCapacity,
              fmt::format("{} GPU {}: shares add up to {}", node.name, w.gpu, FromMilli(milli)));
        }
        if (node.model != nullptr && vram > node.model->memory_gb + 1e-9) {
          Add(line, t, job.id, inv::kShareCapacity,
              fmt::format("{} GPU {}: shared vram_gb adds up to {} > {} GB", node.name, w.gpu, vram,
                          node.model->memory_gb));
        }
        g.shares.push_back(ShareInst{job.id, w.share_milli, job.vram_gb, job.share_mode});
        break;
      }
      default:
        break;
    }
  }

  void Unplace(const Job& job, const Worker& w) {
    NodeState& ns = nodes_[static_cast<std::size_t>(w.node)];
    ns.cpus_used -= job.cpus_milli;
    ns.mem_used -= job.mem_milli;
    switch (w.kind) {
      case Kind::kWhole:
        for (int idx : w.gpus) {
          GpuState& g = ns.gpus[static_cast<std::size_t>(idx)];
          if (g.whole == job.id) g.whole.clear();
        }
        break;
      case Kind::kMig: {
        auto& v = ns.gpus[static_cast<std::size_t>(w.gpu)].mig;
        v.erase(
            std::remove_if(v.begin(), v.end(), [&](const MigInst& m) { return m.job == job.id; }),
            v.end());
        break;
      }
      case Kind::kShare: {
        auto& v = ns.gpus[static_cast<std::size_t>(w.gpu)].shares;
        v.erase(
            std::remove_if(v.begin(), v.end(), [&](const ShareInst& s) { return s.job == job.id; }),
            v.end());
        break;
      }
      default:
        break;
    }
  }

  void OnStart(int64_t line, double t, const Job& job, JobRun& run, const json& ev) {
    if (!Expect(line, t, job, run, State::kPending, "start")) return;
    Occupy(line, t, job, run, ev, "start");
    if (!run.ever_started) run.first_start = t;
    run.ever_started = true;
    ++stats_.starts;
  }

  // An elastic job's run ends at a checkpoint and the next begins at another size.
  void OnResize(int64_t line, double t, const Job& job, JobRun& run, const json& ev) {
    if (!Expect(line, t, job, run, State::kRunning, "resize")) return;
    if (job.min_replicas == 0) {
      Add(line, t, job.id, inv::kGang, "resize of a job that is not elastic (no min_replicas)");
    }
    if (auto f = ev.find("from"); f == ev.end() || !f->is_number_integer() ||
                                  f->get<int>() != static_cast<int>(run.workers.size())) {
      Add(line, t, job.id, inv::kGang,
          fmt::format("resize from a size other than the run's {} workers", run.workers.size()));
    }
    const int64_t ran_ms = std::llround((t - run.run_start) * 1000);
    const int64_t ckpt_ms = std::llround(job.checkpoint_s * 1000);
    if (ckpt_ms <= 0 || ran_ms <= 0 || ran_ms % ckpt_ms != 0) {
      Add(line, t, job.id, inv::kProgress,
          fmt::format("resized {} s into its run, not at a checkpoint (every {} s): work lost",
                      FmtTime(t - run.run_start), FmtTime(job.checkpoint_s)));
    }
    if (ran_ms > 0 && ran_ms <= std::llround(RunLeft(job, run) * 1000)) {
      run.work_ms +=
          run.Work(job.linear() ? ran_ms * run.size
                                : std::llround(static_cast<double>(ran_ms) * job.Speed(run.size)));
      run.progress = static_cast<double>(run.work_ms) / job.replicas / 1000.0;
    }
    Release(t, job, run);
    run.state = State::kPending;  // between the two runs
    Occupy(line, t, job, run, ev, "resize");
    ++stats_.resizes;
  }

  // What is left of the job's work, in run time at the current run's size.
  static double RunLeft(const Job& job, const JobRun& run) {
    if (job.min_replicas == 0 || run.size <= 0) {
      if (run.speed == 1) return job.duration - run.progress;
      return static_cast<double>(run.Time(std::llround((job.duration - run.progress) * 1000))) /
             1000.0;
    }
    const int64_t total = std::llround(job.duration * 1000) * job.replicas;
    if (!job.linear()) {
      return static_cast<double>(run.Time(static_cast<int64_t>(
                 std::ceil(static_cast<double>(total - run.work_ms) / job.Speed(run.size))))) /
             1000.0;
    }
    return static_cast<double>(run.Time((total - run.work_ms + run.size - 1) / run.size)) / 1000.0;
  }

  void Occupy(int64_t line, double t, const Job& job, JobRun& run, const json& ev,
              std::string_view type) {
    std::vector<Worker> workers;
    auto ait = ev.find("alloc");
    if (ait == ev.end() || !ait->is_array()) {
      Add(line, t, job.id, inv::kAllocShape, fmt::format("{} without an alloc list", type));
    } else {
      const int n = static_cast<int>(ait->size());
      if (job.min_replicas > 0 ? n < job.min_replicas || n > job.replicas : n != job.replicas) {
        Add(line, t, job.id, inv::kGang,
            job.min_replicas > 0
                ? fmt::format("alloc has {} workers but the elastic gang runs with {} to {}", n,
                              job.min_replicas, job.replicas)
                : fmt::format("alloc has {} workers but the gang has {} replicas", n,
                              job.replicas));
      }
      for (std::size_t i = 0; i < ait->size(); ++i) {
        Worker w;
        if (ParseWorker(line, t, job, (*ait)[i], i, w)) workers.push_back(std::move(w));
      }
    }
    std::set<int> nodes_used;
    for (const Worker& w : workers) nodes_used.insert(w.node);
    for (int n : nodes_used) {
      const Node& node = config_.nodes[static_cast<std::size_t>(n)];
      if (job.tier == "critical" && node.spot) {
        Add(line, t, job.id, inv::kCriticalOnSpot,
            fmt::format("critical job placed on spot node {}", node.name));
      }
      if (nodes_[static_cast<std::size_t>(n)].down) {
        Add(line, t, job.id, inv::kNodeDownStart,
            fmt::format("started on {} which is down since {}", node.name,
                        FmtTime(nodes_[static_cast<std::size_t>(n)].down_since)));
      }
    }
    CheckTopology(line, t, job, workers);
    if (type == "start" && job.has_window && !InWindow(job, t)) {  // a window governs starts
      Add(line, t, job.id, inv::kWindow,
          fmt::format("started at {:02}:{:02}:{:02} UTC outside its window",
                      static_cast<int>(std::fmod(t, kSecondsPerDay) / 3600),
                      static_cast<int>(std::fmod(t, 3600.0) / 60),
                      static_cast<int>(std::fmod(t, 60.0))));
    }
    int64_t units = 0;
    std::map<std::string, int64_t> by_model;
    double speed = 0;  // the slowest worker's model's
    for (const Worker& w : workers) {
      Place(line, t, job, w);
      const int64_t worker_units = WorkerUnits(w);
      units += worker_units;
      const GpuModel* model = config_.nodes[static_cast<std::size_t>(w.node)].model;
      if (model != nullptr && worker_units > 0) by_model[model->name] += worker_units;
      double here = 1;
      if (auto it = model ? job.speed_by_model.find(model->name) : job.speed_by_model.end();
          it != job.speed_by_model.end())
        here = it->second;
      speed = speed == 0 ? here : std::min(speed, here);
    }
    run.speed = job.speed_by_model.empty() || speed == 0 ? 1 : speed;
    if (!job.queue.empty() && config_.queue_by_name.count(job.queue) == 0) {
      Add(line, t, job.id, inv::kUnknownQueue,
          fmt::format("started in queue '{}' which the config does not have", job.queue));
    }
    for (int q : QueueChain(config_, job.queue)) {
      const auto qi = static_cast<std::size_t>(q);
      if (job.tier != "critical" && config_.queues[qi].budget_waits && budget_spent_[qi]) {
        Add(line, t, job.id, inv::kBudget,
            fmt::format("started while queue {}'s budget is spent (when_spent: wait)",
                        config_.queues[qi].name));
      }
      holding_[qi] += units;
      const Queue& queue = config_.queues[qi];
      if (queue.burst_units >= 0 && holding_[qi] > queue.burst_units) {
        Add(line, t, job.id, inv::kBurst,
            fmt::format("queue {} holds {:.4f} GPUs > burst_gpus {}", queue.name,
                        static_cast<double>(holding_[qi]) / kUnitsPerGpu,
                        static_cast<double>(queue.burst_units) / kUnitsPerGpu));
      }
    }
    run.state = State::kRunning;
    run.run_start = t;
    run.run_units = units;
    run.run_units_by_model = std::move(by_model);
    run.size = static_cast<int>(workers.size());
    run.workers = std::move(workers);
    ++run.run_seq;
  }

  void Release(double t, const Job& job, JobRun& run) {
    for (const Worker& w : run.workers) Unplace(job, w);
    for (int q : QueueChain(config_, job.queue)) {
      holding_[static_cast<std::size_t>(q)] -= run.run_units;
    }
    records_.push_back(
        RunRecord{run.run_start, t, run.run_units, job.queue, run.run_units_by_model});
    run.runtime_sum += t - run.run_start;
    run.workers.clear();
  }

  void OnFinish(int64_t line, double t, const Job& job, JobRun& run) {
    if (!Expect(line, t, job, run, State::kRunning, "finish")) return;
    const double expected = run.run_start + RunLeft(job, run);
    if (std::fabs(t - expected) > kTimeEps) {
      Add(line, t, job.id, inv::kProgress,
          fmt::format("finished at {} but the run started at {} with {} s of {} done, so it "
                      "ends at {}",
                      FmtTime(t), FmtTime(run.run_start), FmtTime(run.progress),
                      FmtTime(job.duration), FmtTime(expected)));
    }
    Release(t, job, run);
    run.state = State::kDone;
    run.final_type = "finished";
    run.finish_t = t;
    ++stats_.finished;
    last_finish_ = std::max(last_finish_, t);
  }

  void OnInterrupt(int64_t line, double t, const Job& job, JobRun& run, const std::string& type,
                   const json& ev) {
    if (!Expect(line, t, job, run, State::kRunning, type)) return;
    const double run_time = t - run.run_start;
    const double remaining = RunLeft(job, run);
    if (run_time > remaining + kTimeEps) {
      Add(line, t, job.id, inv::kProgress,
          fmt::format("{} after {} s of run time, but only {} s were left: it should have "
                      "finished at {}",
                      type, FmtTime(run_time), FmtTime(remaining),
                      FmtTime(run.run_start + remaining)));
    }
    if (type == "preempt") {
      ++stats_.preemptions;
      if (job.tier == "critical") {
        Add(line, t, job.id, inv::kCriticalPreempted, "a critical job was preempted");
      }
      if (auto s = ev.find("signaled"); s != ev.end() && s->is_number()) {
        const double signaled = s->get<double>();
        if (t - signaled > job.grace_s + kTimeEps) {
          Add(line, t, job.id, inv::kGrace,
              fmt::format("released {} s after the signal at {}; grace_s is {}",
                          FmtTime(t - signaled), FmtTime(signaled), FmtTime(job.grace_s)));
        }
        if (signaled > t + kTimeEps || signaled < run.run_start - kTimeEps) {
          Add(line, t, job.id, inv::kGrace,
              fmt::format("signaled at {}, outside the run [{}, {}]", FmtTime(signaled),
                          FmtTime(run.run_start), FmtTime(t)));
        }
      }
    }
    if (type == "reclaim") {
      // Whatever clock idle_after_s counts on (this run, or all run time so far), the GPUs
      // cannot have been idle for reclaim_idle_after_s before this bound.
      // idle_after_s counts in work, which goes at up to the job's fastest speed.
      double fastest = 1;
      for (const auto& [model, v] : job.speed_by_model) fastest = std::max(fastest, v);
      const double idle_from =
          std::max(0.0, job.idle_after_s - run.runtime_sum * fastest) / run.speed;
      if (config_.reclaim_idle_after_s <= 0) {
        Add(line, t, job.id, inv::kReclaim, "reclaim although policy.reclaim_idle_after_s is 0");
      } else if (!job.has_idle) {
        Add(line, t, job.id, inv::kReclaim, "reclaim of a job that never goes idle");
      } else if (run_time + kTimeEps < idle_from + config_.reclaim_idle_after_s) {
        Add(line, t, job.id, inv::kReclaim,
            fmt::format("reclaimed after {} s of run time; it can be idle for {} s only after "
                        "{} s",
                        FmtTime(run_time), FmtTime(config_.reclaim_idle_after_s),
                        FmtTime(idle_from + config_.reclaim_idle_after_s)));
      }
    }
    double kept = 0;
    if (job.checkpoint_s > 0) {
      kept = std::floor(run_time / job.checkpoint_s + 1e-9) * job.checkpoint_s;
    }
    kept = std::clamp(kept, 0.0, std::max(0.0, remaining));
    lost_gpu_seconds_ += (run_time - kept) * static_cast<double>(run.run_units) / kUnitsPerGpu;
    if (job.min_replicas > 0) {
      run.work_ms += run.Work(
          job.linear()
              ? std::llround(kept * 1000) * run.size
              : std::llround(static_cast<double>(std::llround(kept * 1000)) * job.Speed(run.size)));
      run.work_ms =
          std::min<int64_t>(run.work_ms, std::llround(job.duration * 1000) * job.replicas);
      run.progress = static_cast<double>(run.work_ms) / job.replicas / 1000.0;
    } else if (run.speed == 1) {
      run.progress += kept;
    } else {  // in time at speed 1, as the simulator keeps it (milliseconds)
      run.progress =
          std::min(job.duration, static_cast<double>(std::llround(run.progress * 1000) +
                                                     run.Work(std::llround(kept * 1000))) /
                                     1000.0);
    }
    Release(t, job, run);
    if (type == "reclaim") {
      run.state = State::kDone;
      run.final_type = "reclaimed";
      ++stats_.reclaimed;
    } else {
      run.state = State::kPending;
    }
  }

  void OnReject(int64_t line, double t, const Job& job, JobRun& run) {
    if (!Expect(line, t, job, run, State::kPending, "reject")) return;
    if (run.ever_started) {
      Add(line, t, job.id, inv::kLifecycle, "reject after the job had started");
    }
    run.state = State::kDone;
    run.final_type = "rejected";
    ++stats_.rejected;
    stats_.rejected_jobs.push_back(job.id);
  }

  void OnCancel(int64_t line, double t, const Job& job, JobRun& run) {
    if (run.state != State::kPending && run.state != State::kRunning) {
      Expect(line, t, job, run, State::kPending, "cancel");
      return;
    }
    if (run.state == State::kRunning) Release(t, job, run);
    run.state = State::kDone;
    run.final_type = "cancelled";
    ++stats_.cancelled;
  }

  void OnNodeDown(int64_t line, double t, int node_index) {
    NodeState& ns = nodes_[static_cast<std::size_t>(node_index)];
    const std::string& name = config_.nodes[static_cast<std::size_t>(node_index)].name;
    if (ns.down) return;  // overlapping failure merged into the current outage: tolerated
    ns.down = true;
    ns.down_since = t;
    for (const auto& [id, run] : runs_) {
      if (run.state != State::kRunning) continue;
      for (const Worker& w : run.workers) {
        if (w.node == node_index) {
          obligations_.push_back(Obligation{id, run.run_seq, t, line, name});
          break;
        }
      }
    }
  }

  void OnNodeUp(int64_t line, double t, int node_index) {
    NodeState& ns = nodes_[static_cast<std::size_t>(node_index)];
    const std::string& name = config_.nodes[static_cast<std::size_t>(node_index)].name;
    if (!ns.down) {
      Add(line, t, name, inv::kFailures, "node_up for a node that is not down");
      return;
    }
    ns.down = false;
    ns.down_intervals.emplace_back(ns.down_since, t);
  }

  // Jobs that still run (the same run) on a node after the instant it went down.
  void FlushObligations(double now) {
    std::vector<Obligation> keep;
    for (const Obligation& ob : obligations_) {
      if (now <= ob.t + kTimeEps) {
        keep.push_back(ob);
        continue;
      }
      const JobRun& run = runs_.at(ob.job);
      if (run.state == State::kRunning && run.run_seq == ob.run_seq) {
        Add(ob.line, ob.t, ob.job, inv::kNodeDownRelease,
            fmt::format("still running on {} after it went down at {} (no requeue at that t)",
                        ob.node, FmtTime(ob.t)));
      }
    }
    obligations_ = std::move(keep);
  }

  void Finish() {
    std::vector<std::string> unfinished;
    for (const auto& [id, run] : runs_) {
      switch (run.state) {
        case State::kNone:
          Add(0, last_t_, id, inv::kFinalState, "the log never submits this trace job");
          break;
        case State::kRunning:
          Add(0, last_t_, id, inv::kFinalState, "still running when the log ends");
          // Count the open run up to the end of the log in the utilisation.
          records_.push_back(RunRecord{run.run_start, last_t_, run.run_units, job(id).queue,
                                       run.run_units_by_model});
          break;
        case State::kPending:
          unfinished.push_back(id);
          break;
        case State::kDone:
          break;
      }
    }
    stats_.unfinished = static_cast<int64_t>(unfinished.size());
    stats_.unfinished_jobs = std::move(unfinished);
  }

  const Config& config_;
  std::vector<Violation>& out_;
  CheckStats& stats_;
  std::map<std::string, const Job*> jobs_;
  std::map<std::string, JobRun> runs_;
  std::vector<NodeState> nodes_;
  std::vector<int64_t> holding_;    // per queue, GPU units held by it and its descendants
  std::vector<bool> budget_spent_;  // per queue: its budget event said spent, not renewed
  std::vector<Obligation> obligations_;
  std::vector<RunRecord> records_;
  std::map<std::string, int64_t> counts_;
  double last_t_ = 0;
  bool any_event_ = false;
  double first_submit_ = std::numeric_limits<double>::infinity();
  double last_finish_ = -std::numeric_limits<double>::infinity();
  double lost_gpu_seconds_ = 0;
};

// node_down/node_up of the log against the failures file: the union of down time per node,
// up to the end of the log, must be the same.
void CheckFailures(const Config& config, const std::vector<Failure>& failures, const Replayer& r,
                   std::vector<Violation>& out) {
  const double end = r.last_t();
  std::map<int, std::vector<Interval>> expected;
  for (const Failure& f : failures) {
    expected[config.node_by_name.at(f.node)].emplace_back(f.t, f.t + f.down_s);
  }
  for (std::size_t i = 0; i < config.nodes.size(); ++i) {
    const NodeState& ns = r.nodes()[i];
    std::vector<Interval> got = ns.down_intervals;
    if (ns.down) got.emplace_back(ns.down_since, end);
    auto want_raw = expected[static_cast<int>(i)];
    const std::vector<Interval> want = NormalizeIntervals(want_raw, end);
    got = NormalizeIntervals(got, end);
    auto same = [](const Interval& a, const Interval& b) {
      return std::fabs(a.first - b.first) <= kTimeEps && std::fabs(a.second - b.second) <= kTimeEps;
    };
    const std::size_t n = std::max(want.size(), got.size());
    for (std::size_t k = 0; k < n; ++k) {
      if (k < want.size() && k < got.size() && same(want[k], got[k])) continue;
      std::string msg;
      if (k >= got.size()) {
        msg = fmt::format("failures file has it down [{}, {}) but the log does not",
                          FmtTime(want[k].first), FmtTime(want[k].second));
      } else if (k >= want.size()) {
        msg = fmt::format("log has it down [{}, {}) but the failures file does not",
                          FmtTime(got[k].first), FmtTime(got[k].second));
      } else {
        msg = fmt::format("log has it down [{}, {}) but the failures file says [{}, {})",
                          FmtTime(got[k].first), FmtTime(got[k].second), FmtTime(want[k].first),
                          FmtTime(want[k].second));
      }
      out.push_back(Violation{0, k < got.size() ? got[k].first : want[k].first,
                              config.nodes[i].name, std::string(inv::kFailures), msg});
      break;  // one mismatch per node is enough to find the bug
    }
  }
}

bool Close(double a, double b) {
  const double diff = std::fabs(a - b);
  return diff <= 1e-6 || diff <= 1e-6 * std::max(std::fabs(a), std::fabs(b));
}

void CheckReport(const std::string& path, const Config& config, const Replayer& r,
                 std::vector<Violation>& out) {
  std::ifstream in(path);
  if (!in) throw InputError(fmt::format("{}: cannot open", path));
  json rep;
  try {
    rep = json::parse(in);
  } catch (const json::exception& e) {
    out.push_back(Violation{0, 0, "", std::string(inv::kReport),
                            fmt::format("{}: not JSON: {}", path, e.what())});
    return;
  }
  // Report fields by their keys, not a dotted string: queue and model names may hold dots.
  using Path = std::vector<std::string>;
  auto field = [&](const Path& keys) -> const json* {
    const json* cur = &rep;
    for (const std::string& key : keys) {
      if (!cur->is_object() || !cur->contains(key)) return nullptr;
      cur = &(*cur)[key];
    }
    return cur;
  };
  auto expect = [&](const Path& keys, double want) {
    const std::string name = fmt::format("{}", fmt::join(keys, "."));
    const json* v = field(keys);
    if (v == nullptr || !v->is_number()) {
      out.push_back(Violation{0, 0, "", std::string(inv::kReport),
                              fmt::format("{} is missing or not a number", name)});
      return;
    }
    const double got = v->get<double>();
    if (!Close(got, want)) {
      out.push_back(Violation{0, 0, "", std::string(inv::kReport),
                              fmt::format("{} is {} but the log gives {}", name, got, want)});
    }
  };

  expect({"jobs", "submitted"}, static_cast<double>(r.count("submit")));
  expect({"jobs", "finished"}, static_cast<double>(r.count("finish")));
  expect({"jobs", "rejected"}, static_cast<double>(r.count("reject")));
  expect({"jobs", "reclaimed"}, static_cast<double>(r.count("reclaim")));
  const double starts = static_cast<double>(r.count("start"));
  const double preempts = static_cast<double>(r.count("preempt"));
  expect({"preemptions"}, preempts);
  if (r.count("resize") > 0 || field({"resizes"}) != nullptr)  // written where there were some
    expect({"resizes"}, static_cast<double>(r.count("resize")));
  expect({"preemption_rate_pct"}, starts > 0 ? preempts / starts * 100.0 : 0.0);

  const double w0 = r.first_submit();
  const double w1 = r.last_finish();
  const bool window = std::isfinite(w0) && std::isfinite(w1) && w1 > w0;
  expect({"makespan_s"}, window ? w1 - w0 : 0.0);

  double alloc = 0;
  std::map<std::string, double> queue_gpu_s;
  // Per queue with its descendants (the report's *_with_children), and per GPU model.
  std::map<std::string, double> subtree_gpu_s;
  std::map<std::string, std::map<std::string, double>> model_gpu_s, subtree_model_gpu_s;
  for (const RunRecord& rec : r.run_records()) {
    const double gpus = static_cast<double>(rec.units) / kUnitsPerGpu;
    queue_gpu_s[rec.queue] += (rec.end - rec.start) * gpus;
    const std::vector<int> chain = QueueChain(config, rec.queue);
    auto name = [&](int q) -> const std::string& {
      return config.queues[static_cast<std::size_t>(q)].name;
    };
    for (int q : chain) subtree_gpu_s[name(q)] += (rec.end - rec.start) * gpus;
    for (const auto& [model, units] : rec.units_by_model) {
      const double model_s = (rec.end - rec.start) * static_cast<double>(units) / kUnitsPerGpu;
      model_gpu_s[rec.queue][model] += model_s;
      for (int q : chain) subtree_model_gpu_s[name(q)][model] += model_s;
    }
    if (window) {
      const double a = std::max(rec.start, w0), b = std::min(rec.end, w1);
      if (b > a) alloc += (b - a) * gpus;
    }
  }
  double capacity = 0;
  if (window) {
    capacity = static_cast<double>(config.total_gpus) * (w1 - w0);
    for (std::size_t i = 0; i < config.nodes.size(); ++i) {
      const NodeState& ns = r.nodes()[i];
      std::vector<Interval> down = ns.down_intervals;
      if (ns.down) down.emplace_back(ns.down_since, r.last_t());
      for (const Interval& d : NormalizeIntervals(down, r.last_t())) {
        const double a = std::max(d.first, w0), b = std::min(d.second, w1);
        if (b > a) capacity -= (b - a) * config.nodes[i].gpus;
      }
    }
  }
  expect({"gpu_utilization_pct"}, capacity > 0 ? alloc / capacity * 100.0 : 0.0);
  expect({"lost_gpu_hours"}, r.lost_gpu_seconds() / 3600.0);

  for (const auto& [queue, gpu_s] : queue_gpu_s) {
    if (queue.empty() || gpu_s == 0) continue;
    expect({"by_queue", queue, "gpu_hours"}, gpu_s / 3600.0);
  }
  if (const json* bq = field({"by_queue"}); bq != nullptr && bq->is_object()) {
    for (const auto& [queue, v] : bq->items()) {
      if (queue_gpu_s.count(queue) == 0 && config.queue_by_name.count(queue) != 0) {
        expect({"by_queue", queue, "gpu_hours"}, 0.0);
      }
      // Added fields: checked where the report has them (older reports lack them).
      if (v.contains("gpu_hours_with_children")) {
        expect({"by_queue", queue, "gpu_hours_with_children"}, subtree_gpu_s[queue] / 3600.0);
      }
      for (const auto& [key, want] :
           {std::pair{"gpu_hours_by_model", &model_gpu_s},
            std::pair{"gpu_hours_by_model_with_children", &subtree_model_gpu_s}}) {
        if (!v.contains(key)) continue;
        std::set<std::string> models;
        for (const auto& [model, x] : v[key].items()) models.insert(model);
        for (const auto& [model, x] : (*want)[queue]) models.insert(model);
        for (const std::string& model : models) {
          expect({"by_queue", queue, key, model}, (*want)[queue][model] / 3600.0);
        }
      }
    }
  } else {
    out.push_back(Violation{0, 0, "", std::string(inv::kReport), "by_queue is missing"});
  }

  double wait_sum = 0, jct_sum = 0;
  int64_t started = 0, finished = 0;
  for (const auto& [id, run] : r.runs()) {
    if (run.ever_started) {
      wait_sum += (run.first_start - run.submit_t) * 1000.0;
      ++started;
    }
    if (run.state == State::kDone && run.final_type == "finished") {
      jct_sum += run.finish_t - run.submit_t;
      ++finished;
    }
  }
  expect({"queue_wait_time_ms", "all", "mean"},
         started > 0 ? wait_sum / static_cast<double>(started) : 0.0);
  expect({"jct_s", "mean"}, finished > 0 ? jct_sum / static_cast<double>(finished) : 0.0);
}

}  // namespace

std::string FormatViolation(const Violation& v) {
  std::string where = v.line > 0 ? fmt::format("line {}", v.line) : std::string("end");
  std::string subject = v.subject.empty() ? std::string() : " " + v.subject;
  return fmt::format("{} t={}{} [{}] {}", where, FmtTime(v.t), subject, v.invariant, v.message);
}

CheckResult CheckRunDetailed(const std::string& config_yaml_path, const std::string& trace_path,
                             const std::string& failures_path, const std::string& events_path,
                             const std::string& report_path) {
  CheckResult result;
  try {
    const Config config = LoadConfig(config_yaml_path);
    const std::vector<Job> jobs = LoadTrace(trace_path);
    const std::vector<Failure> failures = LoadFailures(failures_path, config);
    result.stats.jobs = static_cast<int64_t>(jobs.size());
    Replayer replayer(config, jobs, result.violations, result.stats);
    replayer.Replay(events_path);
    CheckFailures(config, failures, replayer, result.violations);
    if (!report_path.empty()) CheckReport(report_path, config, replayer, result.violations);
  } catch (const InputError& e) {
    result.input_error = e.what();
  } catch (const std::exception& e) {  // yaml-cpp / json conversions of odd values
    result.input_error = e.what();
  }
  if (!result.input_error.empty()) {
    result.violations.push_back(Violation{0, 0, "", std::string(inv::kInput), result.input_error});
  }
  return result;
}

std::vector<Violation> CheckRun(const std::string& config_yaml_path, const std::string& trace_path,
                                const std::string& failures_path, const std::string& events_path,
                                const std::string& report_path) {
  return CheckRunDetailed(config_yaml_path, trace_path, failures_path, events_path, report_path)
      .violations;
}

}  // namespace gantry::checker
