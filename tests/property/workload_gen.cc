// Random cluster + trace + failures generator; see workload_gen.h.
#include "property/workload_gen.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <stdexcept>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace gantry::property {
namespace {

using ojson = nlohmann::ordered_json;

// Portable draws from the engine (the <random> distributions differ between libraries).
class Rng {
 public:
  explicit Rng(uint64_t seed) : engine_(seed) {}
  // Uniform integer in [lo, hi].
  int64_t Int(int64_t lo, int64_t hi) {
    if (hi <= lo) return lo;
    const uint64_t span = static_cast<uint64_t>(hi - lo) + 1;
    return lo + static_cast<int64_t>(engine_() % span);
  }
  int Int(int lo, int hi) { return static_cast<int>(Int(int64_t{lo}, int64_t{hi})); }
  // Uniform real in [0, 1).
  double Real() { return static_cast<double>(engine_() >> 11) * 0x1.0p-53; }
  double Real(double lo, double hi) { return lo + (hi - lo) * Real(); }
  bool Chance(double p) { return Real() < p; }
  // Log-uniform in [lo, hi].
  double LogUniform(double lo, double hi) { return std::exp(Real(std::log(lo), std::log(hi))); }
  template <typename T>
  const T& Pick(const std::vector<T>& v) {
    return v[static_cast<std::size_t>(Int(0, static_cast<int>(v.size()) - 1))];
  }

 private:
  std::mt19937_64 engine_;
};

struct Model {
  std::string name;
  int memory_gb = 0;
  std::vector<std::pair<std::string, int>> mig;  // profile name, instance memory
};

// The generator's view of the catalog: the names the spec's built-in catalog carries.
std::vector<Model> MigModels() {
  auto family = [](int a, int b, int c, int d, int e, int f) {
    return std::vector<std::pair<std::string, int>>{
        {fmt::format("1g.{}gb", a), a}, {fmt::format("1g.{}gb", b), b},
        {fmt::format("2g.{}gb", c), c}, {fmt::format("3g.{}gb", d), d},
        {fmt::format("4g.{}gb", e), e}, {fmt::format("7g.{}gb", f), f}};
  };
  return {
      {"A100-40GB", 40, family(5, 10, 10, 20, 20, 40)},
      {"A100-80GB", 80, family(10, 20, 20, 40, 40, 80)},
      {"H100-80GB", 80, family(10, 20, 20, 40, 40, 80)},
      {"H100-94GB", 94, family(12, 24, 24, 47, 47, 94)},
      {"H200-141GB", 141, family(18, 35, 35, 71, 71, 141)},
      {"B200-180GB", 180, family(23, 45, 45, 90, 90, 180)},
  };
}

std::vector<Model> PlainModels() {
  return {{"L40S-48GB", 48, {}}, {"T4-16GB", 16, {}},   {"L4-24GB", 24, {}},
          {"A10-24GB", 24, {}},  {"V100-32GB", 32, {}}, {"V100-16GB", 16, {}}};
}

struct Pool {
  std::string name;
  std::string prefix;  // empty: node names use the pool name
  int count = 0;
  int gpus = 0;
  Model model;  // empty name for CPU-only pools
  int domains = 1;
  int leaf_size = 1;
  int cpus = 0;
  int memory_gb = 0;
  bool spot = false;
  std::vector<std::string> sharing;

  bool Allows(const std::string& mode) const {
    return std::find(sharing.begin(), sharing.end(), mode) != sharing.end();
  }
  std::string NodeName(int i) const {
    return fmt::format("{}-{}", prefix.empty() ? name : prefix, i);
  }
};

struct QueueSpec {
  std::string name;
  std::string parent;
  int guaranteed = 0;
  int burst = -1;  // -1: not given
  int weight = 1;
  int max_job_gpus = 0;  // the biggest job of this queue; its burst (and its parent's) allow it
  std::string order;     // empty: fair-share (not written)
  int max_wait_s = 0;    // 0: not written
};

constexpr int kMaxJobGpus = 64;  // no job asks for more

struct Cluster {
  std::vector<Model> declared;  // gpu_models entries
  std::vector<Pool> pools;
  std::vector<QueueSpec> queues;
  int reclaim_idle_after_s = 0;
  int total_gpus = 0;
  // Attained-service orders: the policy's settings when some queue has one.
  std::vector<int> las_thresholds_gpu_s;
  int attained_quantum_s = 0;
  int max_wait_s = 0;                 // 0: not written
  int full_pass_interval_s = 0;       // 0: not written
  std::string best_effort_yields_to;  // empty: not written (critical)
};

Cluster MakeCluster(Rng& rng) {
  Cluster c;
  const std::vector<Model> mig_models = MigModels();
  std::vector<Model> plain_models = PlainModels();
  if (rng.Chance(0.4)) {  // a model the config declares itself
    Model custom{"V100M32", 32, {}};
    c.declared.push_back(custom);
    plain_models.push_back(custom);
  }
  const std::vector<std::vector<std::string>> sharing_subsets = {
      {"mig", "mps", "timeslice"}, {"mig", "mps"}, {"mig", "timeslice"}, {"mig"}};
  auto make_pool = [&rng](std::string name, const Model& model, int gpus) {
    Pool p;
    p.name = std::move(name);
    p.model = model;
    p.gpus = gpus;
    p.count = rng.Int(2, 8);
    p.domains = (gpus >= 4 && rng.Chance(0.5)) ? 2 : 1;
    p.leaf_size = rng.Int(1, 4);
    p.cpus = gpus * rng.Int(8, 16);
    p.memory_gb = gpus * 64 * rng.Int(1, 4);
    return p;
  };
  // MIG-capable pools: the first allows every sharing mode.
  const int mig_pools = rng.Int(1, 2);
  for (int i = 0; i < mig_pools; ++i) {
    Pool p = make_pool(i == 0 ? "mig" : "mig2", rng.Pick(mig_models), rng.Chance(0.8) ? 8 : 4);
    p.sharing = i == 0 ? sharing_subsets[0] : rng.Pick(sharing_subsets);
    if (rng.Chance(0.3)) p.prefix = p.name + "n";
    c.pools.push_back(std::move(p));
  }
  // Plain pools, sometimes with MPS/timeslice sharing.
  const int plain_pools = rng.Int(1, 2);
  for (int i = 0; i < plain_pools; ++i) {
    Pool p =
        make_pool(i == 0 ? "plain" : "plain2", rng.Pick(plain_models), rng.Chance(0.5) ? 8 : 4);
    if (rng.Chance(0.4)) p.sharing = {"mps", "timeslice"};
    c.pools.push_back(std::move(p));
  }
  // Spot capacity: any model.
  {
    std::vector<Model> all = mig_models;
    all.insert(all.end(), plain_models.begin(), plain_models.end());
    Pool p = make_pool("spot", rng.Pick(all), rng.Chance(0.5) ? 8 : 4);
    p.spot = true;
    p.count = rng.Int(2, 6);
    if (rng.Chance(0.3)) p.sharing = {"mps", "timeslice"};
    c.pools.push_back(std::move(p));
  }
  if (rng.Chance(0.5)) {  // CPU-only nodes
    Pool p;
    p.name = "cpu";
    p.count = rng.Int(1, 4);
    p.gpus = 0;
    p.leaf_size = rng.Int(1, 4);
    p.cpus = 16 * rng.Int(2, 4);
    p.memory_gb = 64 * rng.Int(2, 8);
    c.pools.push_back(std::move(p));
  }
  for (const Pool& p : c.pools) c.total_gpus += p.count * p.gpus;

  // Queue tree: ml -> {research, nlp}; serving; batch (sometimes without a burst cap).
  // research and nlp take jobs up to 64 GPUs, serving up to 16 and batch up to 8, with
  // bursts a little above that so that quotas bind now and then.
  const int t = c.total_gpus;
  auto burst_above = [&rng, t](const QueueSpec& q, int slack_divisor) {
    return std::max(q.max_job_gpus, q.guaranteed + 1) + rng.Int(0, std::max(1, t / slack_divisor));
  };
  QueueSpec research{
      "research", "ml", std::max(1, t * rng.Int(5, 15) / 100), 0, rng.Int(1, 3), kMaxJobGpus,
      "",         0};
  QueueSpec nlp{"nlp", "ml", std::max(1, t * rng.Int(5, 15) / 100), 0, rng.Int(1, 3), kMaxJobGpus,
                "",    0};
  research.burst = burst_above(research, 4);
  nlp.burst = burst_above(nlp, 4);
  QueueSpec ml{"ml",
               "",
               research.guaranteed + nlp.guaranteed + t * rng.Int(0, 10) / 100,
               0,
               rng.Int(1, 3),
               kMaxJobGpus,
               "",
               0};
  ml.burst =
      std::max({ml.guaranteed + 1, research.burst, nlp.burst}) + rng.Int(0, std::max(1, t / 4));
  QueueSpec serving{"serving", "", std::max(1, t * rng.Int(5, 20) / 100), 0, rng.Int(1, 3), 16,
                    "",        0};
  serving.burst = burst_above(serving, 8);
  QueueSpec batch{"batch", "", t * rng.Int(0, 10) / 100, -1, 1, 8, "", 0};
  if (rng.Chance(0.7)) batch.burst = burst_above(batch, 10);
  c.queues = {ml, research, nlp, serving, batch};
  const std::vector<int> reclaim = {0, 300, 600, 900, 1800};
  c.reclaim_idle_after_s = rng.Pick(reclaim);
  // Attained-service orders on some queues (rank preemption inside them), with levels
  // low enough that jobs cross them.
  // Most workloads try orders or bounded waits, about a third both (with both, seed 147
  // once found a claimant whose victims' slices were taken as they left, for ever).
  const bool use_orders = rng.Chance(0.6);
  const bool use_waits = !use_orders || rng.Chance(0.6);
  const std::vector<std::string> orders = {"las", "gittins"};
  for (QueueSpec& q : c.queues) {
    if (use_orders && rng.Chance(0.4)) q.order = rng.Pick(orders);
  }
  const int first = rng.Int(60, 3600);
  c.las_thresholds_gpu_s = {first, first * rng.Int(2, 10)};
  c.attained_quantum_s = rng.Int(5, 120);
  // Bounded waits: sometimes for the site, sometimes for a queue; short enough that
  // many jobs drain (each draining job's reservation is kept, so they cost passes).
  if (use_waits && rng.Chance(0.7)) c.max_wait_s = rng.Int(1800, 14400);
  for (QueueSpec& q : c.queues) {
    if (use_waits && rng.Chance(0.2)) q.max_wait_s = rng.Int(300, 7200);
  }
  return c;
}

std::string ConfigYaml(const Cluster& c, uint64_t seed) {
  std::string y =
      fmt::format("# generated by gantry-propgen, seed {}\ncluster: prop-{}\n", seed, seed);
  if (!c.declared.empty()) {
    y += "gpu_models:\n";
    for (const Model& m : c.declared) {
      y += fmt::format("  - name: {}\n    memory_gb: {}\n", m.name, m.memory_gb);
    }
  }
  y += "pools:\n";
  for (const Pool& p : c.pools) {
    y += fmt::format("  - name: {}\n", p.name);
    if (!p.prefix.empty()) y += fmt::format("    name_prefix: {}\n", p.prefix);
    y += fmt::format("    count: {}\n    gpus: {}\n", p.count, p.gpus);
    if (p.gpus > 0) {
      y += fmt::format("    gpu_model: {}\n    nvlink_domains: {}\n", p.model.name, p.domains);
    }
    y += fmt::format("    leaf_size: {}\n    cpus: {}\n    memory_gb: {}\n    spot: {}\n",
                     p.leaf_size, p.cpus, p.memory_gb, p.spot ? "true" : "false");
    if (!p.sharing.empty()) {
      y += "    sharing: [";
      for (std::size_t i = 0; i < p.sharing.size(); ++i) {
        y += (i ? ", " : "") + p.sharing[i];
      }
      y += "]\n";
    }
  }
  y += "queues:\n";
  for (const QueueSpec& q : c.queues) {
    y += fmt::format("  - name: {}\n", q.name);
    if (!q.parent.empty()) y += fmt::format("    parent: {}\n", q.parent);
    y += fmt::format("    guaranteed_gpus: {}\n", q.guaranteed);
    if (q.burst >= 0) y += fmt::format("    burst_gpus: {}\n", q.burst);
    y += fmt::format("    weight: {}\n", q.weight);
    if (!q.order.empty()) y += fmt::format("    order: {}\n", q.order);
    if (q.max_wait_s > 0) y += fmt::format("    max_wait_s: {}\n", q.max_wait_s);
  }
  y += fmt::format("policy:\n  reclaim_idle_after_s: {}\n", c.reclaim_idle_after_s);
  y += fmt::format("  las_thresholds_gpu_s: [{}, {}]\n  attained_quantum_s: {}\n",
                   c.las_thresholds_gpu_s[0], c.las_thresholds_gpu_s[1], c.attained_quantum_s);
  if (c.max_wait_s > 0) y += fmt::format("  max_wait_s: {}\n", c.max_wait_s);
  if (c.full_pass_interval_s > 0)
    y += fmt::format("  full_pass_interval_s: {}\n", c.full_pass_interval_s);
  if (!c.best_effort_yields_to.empty())
    y += fmt::format("  best_effort_yields_to: {}\n", c.best_effort_yields_to);
  return y;
}

// One job before its submit time is known; `gpu_seconds` sizes the arrival span.
struct Draft {
  ojson spec;
  double gpu_seconds = 0;
  bool impossible = false;
};

// Whole seconds as JSON integers, other times as decimals.
ojson Seconds(double t) {
  if (std::floor(t) == t && std::fabs(t) < 9e15) return static_cast<int64_t>(t);
  return t;
}

std::string HhMm(int minutes) { return fmt::format("{:02}:{:02}", minutes / 60, minutes % 60); }

class JobMaker {
 public:
  JobMaker(Rng& rng, const Cluster& c) : rng_(rng), c_(c) {
    for (const Pool& p : c.pools) {
      if (p.gpus > 0) {
        max_memory_ = std::max(max_memory_, p.model.memory_gb);
        for (const auto& prof : p.model.mig) cluster_profiles_.insert(prof.first);
      }
      all_cpus_min_ = std::min(all_cpus_min_, p.cpus);
      all_mem_min_ = std::min(all_mem_min_, p.memory_gb);
    }
    for (const Model& m : MigModels()) {
      for (const auto& prof : m.mig) {
        if (cluster_profiles_.count(prof.first) == 0) foreign_profiles_.insert(prof.first);
      }
    }
  }

  Draft Make(int index) {
    Draft d;
    ojson& j = d.spec;
    j["id"] = fmt::format("j{:05}", index);
    j["submit"] = 0;  // set later
    const double kind = rng_.Real();
    const std::vector<std::string> tiers = {"critical", "standard",    "standard",
                                            "standard", "best-effort", "best-effort"};
    const std::vector<std::string> leaf_queues = {"research", "nlp", "serving", "batch"};
    const std::string tier = rng_.Pick(tiers);
    const std::string queue = rng_.Pick(leaf_queues);
    double duration = std::round(rng_.LogUniform(60, 4 * 3600));
    if (kind < 0.02) {
      MakeImpossible(j, tier, queue);
      d.impossible = true;
      j["duration"] = Seconds(duration);
      return d;
    }
    j["duration"] = Seconds(duration);
    j["queue"] = queue;
    j["tier"] = tier;
    double gpus_per_job = 0;
    if (kind < 0.10) {
      gpus_per_job = MakeCpu(j);
    } else if (kind < 0.22) {
      gpus_per_job = MakeMig(j, tier);
    } else if (kind < 0.35) {
      gpus_per_job = MakeShare(j, tier);
    } else if (kind < 0.50) {
      duration = std::round(rng_.LogUniform(60, 2 * 3600));
      j["duration"] = Seconds(duration);
      gpus_per_job = MakeWhole(j, tier, /*gang=*/true, MaxJobGpus(queue));
    } else {
      gpus_per_job = MakeWhole(j, tier, /*gang=*/false, MaxJobGpus(queue));
    }
    const std::vector<int> checkpoints = {300, 600, 900, 1800};
    if (rng_.Chance(0.5)) j["checkpoint_s"] = rng_.Pick(checkpoints);
    // Some whole-GPU gangs are elastic (JobSpec::min_replicas), checkpointing or not.
    if (kind >= 0.35 && kind < 0.50 && j.contains("replicas") && rng_.Chance(0.3)) {
      j["min_replicas"] = rng_.Int(1, j["replicas"].get<int>() - 1);
    }
    if (rng_.Chance(0.5)) j["grace_s"] = rng_.Int(0, 120);
    // Some whole-GPU jobs go faster on some models (speed_by_model, Sia's profiles).
    if (kind >= 0.35 && rng_.Chance(0.3)) {
      ojson speeds;
      for (const Pool& p : c_.pools) {
        if (p.gpus > 0 && rng_.Chance(0.7))
          speeds[p.model.name] = std::round(rng_.Real() * 2500 + 500) / 1000;  // 0.5 to 3
      }
      if (!speeds.empty()) j["speed_by_model"] = speeds;
    }
    if (rng_.Chance(0.05)) {
      const int start = rng_.Int(0, 23) * 60 + (rng_.Chance(0.5) ? 30 : 0);
      const int width = rng_.Int(2, 12) * 60;
      ojson w;
      w["start"] = HhMm(start);
      w["end"] = HhMm((start + width) % (24 * 60));
      j["window"] = w;
    }
    d.gpu_seconds = gpus_per_job * duration;
    return d;
  }

 private:
  std::vector<const Pool*> GpuPools(const std::string& tier, const std::string& mode) const {
    std::vector<const Pool*> out;
    for (const Pool& p : c_.pools) {
      if (p.gpus == 0 || (p.spot && tier == "critical")) continue;
      if (mode == "mig" && (p.model.mig.empty() || !p.Allows("mig"))) continue;
      if ((mode == "mps" || mode == "timeslice") && !p.Allows(mode)) continue;
      out.push_back(&p);
    }
    return out;
  }

  // gpu_model: the target pool's model, a list holding it, or absent (any).
  void SetModel(ojson& j, const Pool& p) {
    const double r = rng_.Real();
    if (r < 0.35) {
      j["gpu_model"] = p.model.name;
    } else if (r < 0.55) {
      std::vector<Model> others = PlainModels();
      const std::vector<Model> mig = MigModels();
      others.insert(others.end(), mig.begin(), mig.end());
      std::string other = rng_.Pick(others).name;
      ojson list = ojson::array({p.model.name});
      if (other != p.model.name) list.push_back(other);
      j["gpu_model"] = list;
    }
  }

  // Per-worker CPUs and memory: at most the pool's per-GPU share times the worker's GPUs.
  void SetCpuMem(ojson& j, const Pool& p, int gpus_per_worker) {
    if (rng_.Chance(0.3)) return;
    const int cpu_cap = std::max(1, p.cpus * std::max(1, gpus_per_worker) / p.gpus);
    const int mem_cap = std::max(1, p.memory_gb * std::max(1, gpus_per_worker) / p.gpus);
    j["cpus"] = rng_.Int(1, cpu_cap);
    j["memory_gb"] = rng_.Int(1, mem_cap);
  }

  int MaxJobGpus(const std::string& queue) const {
    for (const QueueSpec& q : c_.queues) {
      if (q.name == queue) return q.max_job_gpus;
    }
    return kMaxJobGpus;
  }

  double MakeWhole(ojson& j, const std::string& tier, bool gang, int max_gpus) {
    const std::vector<const Pool*> pools = GpuPools(tier, "");
    const Pool& p = *rng_.Pick(pools);
    const int per_domain = p.gpus / p.domains;
    int g = 1, replicas = 1;
    std::string topology;
    if (!gang) {
      const std::vector<int> sizes = {1, 1, 1, 2, 2, 4, 8};
      do g = rng_.Pick(sizes);
      while (g > p.gpus || g > max_gpus);
      const double r = rng_.Real();
      if (r < 0.25 && g <= per_domain)
        topology = "nvlink";
      else if (r < 0.45)
        topology = "node";
      else if (r < 0.6)
        topology = "spine";
    } else {
      const std::vector<std::string> topologies = {"nvlink", "node", "leaf", "spine", "spine"};
      topology = rng_.Pick(topologies);
      if (topology == "nvlink" && per_domain < 2) topology = "node";
      if (topology == "node" && p.gpus < 2) topology = "leaf";
      const int leaf_nodes = std::min(p.leaf_size, p.count);
      if (topology == "leaf" && leaf_nodes < 2 && p.gpus < 2) topology = "spine";
      const std::vector<int> sizes = {1, 1, 2, 4, 8};
      for (int attempt = 0; attempt < 50; ++attempt) {
        g = rng_.Pick(sizes);
        if (g > p.gpus || g > max_gpus) continue;
        int max_workers = 0;
        if (topology == "nvlink")
          max_workers = per_domain / g;
        else if (topology == "node")
          max_workers = p.gpus / g;
        else if (topology == "leaf")
          max_workers = leaf_nodes * (p.gpus / g);
        else
          max_workers = p.count * (p.gpus / g);
        max_workers = std::min({max_workers, 8, max_gpus / g});
        if (max_workers < 2) continue;
        replicas = rng_.Int(2, max_workers);
        break;
      }
      if (replicas < 2) {  // no gang fits this pool's shape: a single worker then
        g = 1;
        topology = "spine";
      }
    }
    if (replicas > 1) j["replicas"] = replicas;
    j["gpus"] = g;
    SetModel(j, p);
    j["vram_gb"] = rng_.Int(1, p.model.memory_gb);
    SetCpuMem(j, p, g);
    if (!topology.empty()) j["topology"] = topology;
    if (!gang && g == 1 && tier == "best-effort" && rng_.Chance(0.3)) {
      j["idle_after_s"] = rng_.Int(300, 3600);  // a forgotten notebook
    }
    return static_cast<double>(g * replicas);
  }

  double MakeMig(ojson& j, const std::string& tier) {
    const std::vector<const Pool*> pools = GpuPools(tier, "mig");
    if (pools.empty()) return MakeWhole(j, tier, false, 1);
    const Pool& p = *rng_.Pick(pools);
    const auto& [profile, memory] = rng_.Pick(p.model.mig);
    const int replicas = rng_.Chance(0.2) ? 2 : 1;
    if (replicas > 1) {
      j["replicas"] = replicas;
      if (rng_.Chance(0.5)) j["topology"] = "node";
    }
    j["mig"] = profile;
    SetModel(j, p);
    j["vram_gb"] = rng_.Int(1, memory);
    if (rng_.Chance(0.5)) {
      j["cpus"] = rng_.Int(1, 2);
      j["memory_gb"] = rng_.Int(1, 16);
    }
    if (tier == "best-effort" && rng_.Chance(0.3)) j["idle_after_s"] = rng_.Int(300, 3600);
    const int compute = profile[0] - '0';
    return replicas * compute / 7.0;
  }

  double MakeShare(ojson& j, const std::string& tier) {
    const std::string mode = rng_.Chance(0.5) ? "mps" : "timeslice";
    const std::vector<const Pool*> pools = GpuPools(tier, mode);
    if (pools.empty()) return MakeWhole(j, tier, false, 1);
    const Pool& p = *rng_.Pick(pools);
    const int tenths = rng_.Int(1, 9);
    j["gpus"] = tenths / 10.0;
    j["sharing"] = mode;
    SetModel(j, p);
    j["vram_gb"] = rng_.Int(1, std::max(1, p.model.memory_gb * tenths / 10));
    if (rng_.Chance(0.5)) {
      j["cpus"] = rng_.Int(1, 2);
      j["memory_gb"] = rng_.Int(1, 16);
    }
    if (rng_.Chance(0.4)) j["idle_after_s"] = rng_.Int(300, 3600);
    return tenths / 10.0;
  }

  double MakeCpu(ojson& j) {
    j["gpus"] = 0;
    j["vram_gb"] = 0;
    j["cpus"] = rng_.Int(1, std::max(1, all_cpus_min_ / 2));
    j["memory_gb"] = rng_.Int(1, std::max(1, all_mem_min_ / 2));
    if (rng_.Chance(0.2)) j["replicas"] = 2;
    return 0;
  }

  // vram_gb bigger than any GPU, or (gpu_model absent) a MIG profile no GPU here has.
  void MakeImpossible(ojson& j, const std::string& tier, const std::string& queue) {
    j["queue"] = queue;
    j["tier"] = tier;
    if (!foreign_profiles_.empty() && rng_.Chance(0.5)) {
      const std::vector<std::string> profiles(foreign_profiles_.begin(), foreign_profiles_.end());
      j["mig"] = rng_.Pick(profiles);
      j["vram_gb"] = 1;
      return;
    }
    j["gpus"] = 1;
    j["vram_gb"] = max_memory_ + rng_.Int(1, 200);
  }

  Rng& rng_;
  const Cluster& c_;
  int max_memory_ = 0;
  int all_cpus_min_ = 1 << 30;
  int all_mem_min_ = 1 << 30;
  std::set<std::string> cluster_profiles_;
  std::set<std::string> foreign_profiles_;
};

std::string Failures(Rng& rng, const Cluster& c, double span) {
  std::vector<std::pair<double, ojson>> lines;
  for (const Pool& p : c.pools) {
    const double rate = p.spot ? 0.8 : 0.25;  // expected failures per node over the span
    for (int i = 0; i < p.count; ++i) {
      if (!rng.Chance(rate)) continue;
      const double t = std::round(rng.Real(0.0, span));
      const int down = rng.Int(300, 7200);
      ojson f;
      f["t"] = Seconds(t);
      f["node"] = p.NodeName(i);
      f["down_s"] = down;
      lines.emplace_back(t, f);
      if (rng.Chance(0.15)) {  // a second failure while the node is still down
        ojson g;
        g["t"] = Seconds(t + std::round(down / 2.0));
        g["node"] = p.NodeName(i);
        g["down_s"] = rng.Int(300, 3600);
        lines.emplace_back(t + std::round(down / 2.0), g);
      }
    }
  }
  std::stable_sort(lines.begin(), lines.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  std::string out;
  for (const auto& [t, f] : lines) out += f.dump() + "\n";
  return out;
}

}  // namespace

Workload GenerateWorkload(const WorkloadOptions& options) {
  Rng rng(options.seed);
  Cluster cluster = MakeCluster(rng);
  // A third of the workloads run full passes at most every 1-60 s (drawn apart, so the
  // other draws, and so each seed's workload, stay as they were before the setting).
  Rng cycle(options.seed ^ 0xc1c1e);
  if (cycle.Chance(0.35)) cluster.full_pass_interval_s = cycle.Int(1, 60);
  // Whom best-effort work gives way to beyond a queue's guarantee: the default (standard)
  // on a third, critical or none on the rest (drawn apart too).
  Rng yields(options.seed ^ 0xbe5e);
  const std::vector<std::string> yields_to = {"", "critical", "none"};
  cluster.best_effort_yields_to = yields.Pick(yields_to);
  Workload w;
  w.config_yaml = ConfigYaml(cluster, options.seed);

  JobMaker maker(rng, cluster);
  std::vector<Draft> drafts;
  double demand = 0;
  for (int i = 0; i < options.jobs; ++i) {
    drafts.push_back(maker.Make(i));
    demand += drafts.back().gpu_seconds;
  }
  // Arrivals over a span that loads the cluster to 40-110 % on average.
  const double load = rng.Real(0.4, 1.1);
  const double span = std::max(3600.0, demand / std::max(1, cluster.total_gpus) / load);
  std::vector<double> submits;
  for (std::size_t i = 0; i < drafts.size(); ++i) {
    double t = rng.Real(0.0, span);
    t = rng.Chance(0.2) ? std::round(t * 10) / 10 : std::round(t);  // some decimals
    submits.push_back(t);
  }
  std::sort(submits.begin(), submits.end());
  for (std::size_t i = 0; i < drafts.size(); ++i) {
    ojson& j = drafts[i].spec;
    j["submit"] = Seconds(submits[i]);
    w.trace_jsonl += j.dump() + "\n";
    w.job_ids.push_back(j["id"].get<std::string>());
    if (drafts[i].impossible) w.impossible_jobs.push_back(w.job_ids.back());
  }
  w.failures_jsonl = Failures(rng, cluster, span);
  return w;
}

WorkloadPaths WriteWorkload(const Workload& workload, const std::string& dir) {
  namespace fs = std::filesystem;
  fs::create_directories(dir);
  WorkloadPaths paths{(fs::path(dir) / "cluster.yaml").string(),
                      (fs::path(dir) / "trace.jsonl").string(),
                      (fs::path(dir) / "failures.jsonl").string()};
  auto write = [](const std::string& path, const std::string& text) {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out << text;
    if (!out) throw std::runtime_error("cannot write " + path);
  };
  write(paths.config, workload.config_yaml);
  write(paths.trace, workload.trace_jsonl);
  write(paths.failures, workload.failures_jsonl);
  std::string impossible;
  for (const std::string& id : workload.impossible_jobs) impossible += id + "\n";
  write((fs::path(dir) / "impossible.txt").string(), impossible);
  return paths;
}

}  // namespace gantry::property
