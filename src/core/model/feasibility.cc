// WhyInfeasible (see feasibility.h): filters the pools step by step, each step with its
// own reason, so the message names the first requirement nothing in the cluster meets.

#include "core/model/feasibility.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

namespace gantry::core {
namespace {

constexpr int64_t kUnbounded = INT64_MAX / 4;

// Fixed-point numbers for messages, without floating point: `value / scale`, trimmed.
std::string Fixed(int64_t value, int64_t scale) {
  const bool negative = value < 0;
  const uint64_t mag = negative ? 0 - static_cast<uint64_t>(value) : static_cast<uint64_t>(value);
  const uint64_t s = static_cast<uint64_t>(scale);
  std::string out = (negative ? "-" : "") + std::to_string(mag / s);
  if (uint64_t frac = mag % s; frac != 0) {
    std::string digits = std::to_string(frac);
    const size_t width = std::to_string(s).size() - 1;
    digits.insert(0, width - digits.size(), '0');
    while (digits.back() == '0') digits.pop_back();
    out += "." + digits;
  }
  return out;
}
std::string Gb(int64_t bytes) { return Fixed(bytes, kGB); }
std::string Cpus(int64_t milli) { return Fixed(milli, 1000); }

bool IsWhole(const JobSpec& job) { return job.sharing == Sharing::kExclusive && job.gpus > 0; }

// One worker, as a user would say it: "8 GPUs", "1g.10gb", "0.25 GPU (mps)", "4 cpus".
std::string Worker(const JobSpec& job) {
  switch (job.sharing) {
    case Sharing::kExclusive:
      if (job.gpus > 0) return std::to_string(job.gpus) + (job.gpus == 1 ? " GPU" : " GPUs");
      if (job.cpus_milli == 1000) return "1 cpu";
      if (job.cpus_milli > 0) return Cpus(job.cpus_milli) + " cpus";
      return Gb(job.memory_bytes) + " GB memory";
    case Sharing::kMig:
      return job.mig_profile;
    case Sharing::kMps:
    case Sharing::kTimeslice:
      return Fixed(job.share_milli, 1000) + " GPU (" + std::string(Name(job.sharing)) + ")";
  }
  return "?";
}

std::string Gang(const JobSpec& job) {
  return "a gang of " + std::to_string(job.replicas) + " x " + Worker(job);
}

// The MIG profile a job asks for on `model`, or nullptr.
const MigProfile* Profile(const JobSpec& job, const Catalog& catalog, ModelId model) {
  if (model.v >= job.mig_index.size()) return nullptr;
  const int idx = job.mig_index[model.v];
  const std::vector<MigProfile>& profiles = catalog.model(model).mig_profiles;
  if (idx < 0 || static_cast<size_t>(idx) >= profiles.size()) return nullptr;
  return &profiles[idx];
}

std::string ModelList(ModelMask mask, const Catalog& catalog) {
  std::string out;
  int shown = 0;
  for (size_t m = 0; m < catalog.size() && m < static_cast<size_t>(kMaxModels); ++m) {
    if (!(mask >> m & 1u)) continue;
    if (shown == 8) return out + ", ...";
    if (shown++ > 0) out += ", ";
    out += catalog.model(ModelId(static_cast<uint32_t>(m))).name;
  }
  return out;
}

bool Accepts(const JobSpec& job, ModelId model) {
  return model.valid() && model.v < static_cast<uint32_t>(kMaxModels) &&
         (job.models >> model.v & 1u);
}

// Whole workers one GPU-bearing unit (a node's or an NVLink domain's `gpus`) can hold,
// by GPUs alone.
int64_t WorkersOnGpus(const JobSpec& job, const Catalog& catalog, const PoolSpec& p, int gpus) {
  switch (job.sharing) {
    case Sharing::kExclusive:
      return job.gpus > 0 ? gpus / job.gpus : kUnbounded;
    case Sharing::kMig: {
      const MigProfile* profile = Profile(job, catalog, p.model);
      return profile == nullptr ? 0 : int64_t{gpus} * profile->max_instances;
    }
    case Sharing::kMps:
    case Sharing::kTimeslice:
      return job.share_milli > 0 ? int64_t{gpus} * (kShareScale / job.share_milli) : 0;
  }
  return 0;
}

// Workers one node of `p` can hold by its CPUs and memory.
int64_t WorkersOnHost(const JobSpec& job, const PoolSpec& p) {
  int64_t k = kUnbounded;
  if (job.cpus_milli > 0) k = std::min(k, p.cpus_milli / job.cpus_milli);
  if (job.memory_bytes > 0) k = std::min(k, p.memory_bytes / job.memory_bytes);
  return k;
}

}  // namespace

std::optional<std::string> WhyInfeasible(const JobSpec& job, const Cluster& cluster) {
  const Catalog& catalog = cluster.catalog();
  const int64_t replicas = std::max(job.replicas, 1);
  std::vector<const PoolSpec*> pools;
  // With nodes named (only_nodes, not_nodes), each pool counts the nodes the job may use
  // (a leaf's size is then an upper bound).
  const bool named = !job.only_nodes.empty() || !job.not_nodes.empty();
  std::vector<PoolSpec> narrowed;
  narrowed.reserve(named ? cluster.pools().size() : 0);
  for (const Pool& pool : cluster.pools()) {
    if (!job.MayUse(PoolId(static_cast<uint32_t>(&pool - &cluster.pools()[0])))) continue;
    if (named) {
      PoolSpec p = pool.spec;
      p.count = 0;
      for (int i = 0; i < pool.spec.count; ++i)
        p.count += job.MayUseNode(NodeId(pool.first_node.v + static_cast<uint32_t>(i)));
      if (p.count == 0) continue;
      narrowed.push_back(std::move(p));
      pools.push_back(&narrowed.back());
    } else if (pool.spec.count > 0) {
      pools.push_back(&pool.spec);
    }
  }
  if (pools.empty() && named)
    return "its nodelist and exclude_nodes leave it no node of a pool it may use";
  if (pools.empty() && job.pool.valid())
    return "pool " + cluster.pool(job.pool).spec.name + " has no nodes";
  if (pools.empty() && !job.pools.empty()) return "no node matches its node selection";
  if (pools.empty()) return "the cluster has no nodes";
  const size_t all_pools = pools.size();

  // Keeps the pools that pass `keep`; returns false (and keeps them all) if none does.
  auto narrow = [&pools](auto keep) {
    std::vector<const PoolSpec*> kept;
    for (const PoolSpec* p : pools) {
      if (keep(*p)) kept.push_back(p);
    }
    if (kept.empty()) return false;
    pools = std::move(kept);
    return true;
  };

  if (job.uses_gpu()) {
    const bool mig = job.sharing == Sharing::kMig;
    // 1. A GPU of an accepted model (that has the MIG profile, for MIG jobs).
    if (!narrow([&](const PoolSpec& p) {
          return p.gpus > 0 && Accepts(job, p.model) &&
                 (!mig || Profile(job, catalog, p.model) != nullptr);
        })) {
      if (cluster.present_models() == 0) return "the cluster has no GPUs";
      if (mig) {
        bool anywhere = false;
        for (const PoolSpec* p : pools) {
          anywhere |= p->gpus > 0 && catalog.FindProfile(p->model, job.mig_profile) >= 0;
        }
        if (!anywhere)
          return "MIG profile " + job.mig_profile + ": no GPU of the cluster supports it";
        return "MIG profile " + job.mig_profile + ": no GPU of an accepted model (" +
               ModelList(job.models, catalog) + ") in the cluster supports it";
      }
      return "no GPU of an accepted model (" + ModelList(job.models, catalog) +
             ") in the cluster (it has " + ModelList(cluster.present_models(), catalog) + ")";
    }
    // 2. The sharing mode allowed on the pool.
    if (!narrow([&](const PoolSpec& p) { return (p.sharing & Bit(job.sharing)) != 0; })) {
      return std::string(Name(job.sharing)) +
             " sharing is allowed on no pool with an accepted model";
    }
    // 3. Enough memory on one GPU or MIG instance.
    auto capacity = [&](const PoolSpec& p) -> int64_t {
      if (mig) return Profile(job, catalog, p.model)->memory_bytes;
      return catalog.model(p.model).memory_bytes;
    };
    const PoolSpec* roomiest = pools.front();
    for (const PoolSpec* p : pools) {
      if (capacity(*p) > capacity(*roomiest)) roomiest = p;
    }
    const bool restricted = (cluster.present_models() & ~job.models) != 0;
    if (!narrow([&](const PoolSpec& p) { return capacity(p) >= job.vram_bytes; })) {
      const std::string& model = catalog.model(roomiest->model).name;
      if (mig) {
        return "vram_gb " + Gb(job.vram_bytes) + " exceeds MIG profile " + job.mig_profile +
               " on every GPU of the cluster (largest: " + Gb(capacity(*roomiest)) + " GB on " +
               model + ")";
      }
      return "vram_gb " + Gb(job.vram_bytes) + " exceeds every GPU " +
             (restricted ? "of an accepted model " : "") + "in the cluster (largest: " + model +
             ", " + Gb(capacity(*roomiest)) + " GB)";
    }
    // 4. Critical work never runs on spot capacity.
    if (job.tier == Tier::kCritical && !narrow([](const PoolSpec& p) { return !p.spot; })) {
      return "critical jobs never run on spot pools, and every pool that could hold this job "
             "is spot";
    }
    // 5. A worker's whole GPUs on one node.
    if (IsWhole(job)) {
      int largest = 0;
      for (const PoolSpec* p : pools) largest = std::max(largest, p->gpus);
      if (!narrow([&](const PoolSpec& p) { return p.gpus >= job.gpus; })) {
        return "no node has " + std::to_string(job.gpus) +
               " GPUs of an accepted model (largest: " + std::to_string(largest) + ")";
      }
    }
  } else if (job.tier == Tier::kCritical && !narrow([](const PoolSpec& p) { return !p.spot; })) {
    return "critical jobs never run on spot pools, and every pool is spot";
  }

  // 6. A worker's CPUs and memory on one node.
  const char* which = pools.size() == all_pools ? "every node" : "every node that fits its GPUs";
  {
    int64_t largest = 0;
    for (const PoolSpec* p : pools) largest = std::max(largest, p->cpus_milli);
    if (!narrow([&](const PoolSpec& p) { return p.cpus_milli >= job.cpus_milli; })) {
      return "cpus " + Cpus(job.cpus_milli) + " exceed " + which + " (largest: " + Cpus(largest) +
             ")";
    }
  }
  {
    int64_t largest = 0;
    for (const PoolSpec* p : pools) largest = std::max(largest, p->memory_bytes);
    if (!narrow([&](const PoolSpec& p) { return p.memory_bytes >= job.memory_bytes; })) {
      return "memory_gb " + Gb(job.memory_bytes) + " exceeds " + which +
             " (largest: " + Gb(largest) + ")";
    }
  }

  // 7. The gang in one domain of its topology. Counts are capped at `replicas`, so no
  // product overflows.
  auto per_node = [&](const PoolSpec& p) {
    return std::min({WorkersOnGpus(job, catalog, p, p.gpus), WorkersOnHost(job, p), replicas});
  };
  const bool whole = IsWhole(job);
  const std::string gang = Gang(job);
  Topology topology = job.topology;
  if (!job.uses_gpu() && topology == Topology::kNvlink) topology = Topology::kNode;
  // A GPU gang runs on GPUs of one model (Placer::Place): what the pools of one model hold
  // together (`count(p)` each, capped at `cap`), at most; for CPU-only work, all pools.
  std::string best_model;
  auto one_model = [&](auto count, int64_t cap) {
    int64_t best = 0;
    for (const PoolSpec* p : pools) {
      int64_t sum = 0;
      for (const PoolSpec* q : pools) {
        if (!job.uses_gpu() || q->model == p->model) sum = std::min(sum + count(*q), cap);
      }
      if (sum > best) {
        best = sum;
        if (job.uses_gpu()) best_model = catalog.model(p->model).name;
      }
    }
    return best;
  };
  const bool models = job.uses_gpu() && std::any_of(pools.begin(), pools.end(), [&](auto* p) {
                        return p->model != pools.front()->model;
                      });
  // workers_per_node: each group of that many on a node of its own.
  if (job.workers_per_node > 0) {
    const int64_t per = job.workers_per_node;
    const int64_t groups = replicas / per;
    const int64_t nodes = one_model(
        [&](const PoolSpec& p) { return per_node(p) >= per ? int64_t{p.count} : 0; }, groups);
    if (nodes < groups) {
      return gang + " with workers_per_node " + std::to_string(per) + " needs " +
             std::to_string(groups) + " nodes that each hold " + std::to_string(per) +
             " workers (the cluster has " + std::to_string(nodes) +
             (models && nodes > 0 ? " of one GPU model, " + best_model : "") + ")";
    }
  }
  if (replicas == 1) {
    // A single worker needs no gang domain, except NVLink for its own GPUs.
    if (topology == Topology::kNvlink && whole && job.gpus > 1) {
      int largest = 0;
      for (const PoolSpec* p : pools) largest = std::max(largest, p->gpus / p->nvlink_domains);
      if (largest < job.gpus) {
        return "a worker of " + std::to_string(job.gpus) +
               " GPUs with topology nvlink needs them in one NVLink domain (largest: " +
               std::to_string(largest) + ")";
      }
    }
    return std::nullopt;
  }
  switch (topology) {
    case Topology::kNvlink: {
      int64_t best = 0;
      int largest_domain = 0;
      for (const PoolSpec* p : pools) {
        const int domain = p->gpus / std::max(p->nvlink_domains, 1);
        largest_domain = std::max(largest_domain, domain);
        best = std::max(best, std::min({WorkersOnGpus(job, catalog, *p, domain),
                                        WorkersOnHost(job, *p), replicas}));
      }
      if (best >= replicas) return std::nullopt;
      if (whole && int64_t{largest_domain} < replicas * job.gpus) {
        return gang + " with topology nvlink needs " + std::to_string(replicas * job.gpus) +
               " GPUs in one NVLink domain (largest: " + std::to_string(largest_domain) + ")";
      }
      return gang + " with topology nvlink needs " + std::to_string(replicas) +
             " workers in one NVLink domain (at most " + std::to_string(best) + " fit)";
    }
    case Topology::kNode: {
      int64_t best = 0;
      int largest = 0;
      for (const PoolSpec* p : pools) {
        best = std::max(best, per_node(*p));
        largest = std::max(largest, p->gpus);
      }
      if (best >= replicas) return std::nullopt;
      if (whole && int64_t{largest} < replicas * job.gpus) {
        return gang + " with topology node needs " + std::to_string(replicas * job.gpus) +
               " GPUs on one node (largest: " + std::to_string(largest) + ")";
      }
      return gang + " with topology node needs " + std::to_string(replicas) +
             " workers on one node (at most " + std::to_string(best) + " fit)";
    }
    case Topology::kLeaf: {
      int64_t best = 0;
      for (const PoolSpec* p : pools) {
        const int leaf = LargestLeaf(*p);
        best = std::max(best, std::min(int64_t{leaf} * per_node(*p), replicas));
      }
      if (best >= replicas) return std::nullopt;
      return gang + " with topology leaf needs " + std::to_string(replicas) +
             " workers in one leaf (at most " + std::to_string(best) + " fit)";
    }
    case Topology::kSpine: {
      const int64_t best =
          one_model([&](const PoolSpec& p) { return int64_t{p.count} * per_node(p); }, replicas);
      if (best >= replicas) return std::nullopt;
      if (models) {
        return gang + " needs " + std::to_string(replicas) +
               " workers at once on GPUs of one model; the most one model holds is " +
               std::to_string(best) + " (" + best_model + ")";
      }
      return gang + " needs " + std::to_string(replicas) +
             " workers at once; the whole cluster holds at most " + std::to_string(best);
    }
  }
  return std::nullopt;
}

GpuUnits MinUnits(const JobSpec& job, const Catalog& catalog) {
  if (job.sharing != Sharing::kMig)
    return job.WorkerUnits(catalog, ModelId()) * job.least_replicas();
  GpuUnits best = kUnbounded;
  for (size_t m = 0; m < catalog.size(); ++m) {
    if (job.mig_index[m] < 0 || !(job.models >> m & 1u)) continue;
    best = std::min(best, job.WorkerUnits(catalog, ModelId(static_cast<uint32_t>(m))));
  }
  return best == kUnbounded ? 0 : best * job.replicas;
}

bool PoolAccepts(const Cluster& cluster, const JobSpec& job, PoolId pool) {
  const PoolSpec& p = cluster.pool(pool).spec;
  if (p.count == 0) return false;
  if (!job.MayUse(pool)) return false;
  if (p.spot && job.tier == Tier::kCritical) return false;
  if (!job.uses_gpu()) return true;
  if (p.gpus == 0 || !(job.models >> p.model.v & 1u)) return false;
  if (!(p.sharing & Bit(job.sharing))) return false;
  const GpuModel& model = cluster.catalog().model(p.model);
  if (job.sharing == Sharing::kMig) {
    int idx = job.mig_index[p.model.v];
    return idx >= 0 && model.mig_profiles[idx].memory_bytes >= job.vram_bytes;
  }
  if (IsWhole(job) && job.gpus > p.gpus) return false;
  return model.memory_bytes >= job.vram_bytes;
}

std::optional<std::string> WhyNeverStarts(const JobSpec& job, const Cluster& cluster,
                                          const QueueTree& queues) {
  if (auto why = queues.WhyTierRefused(job.queue, job.tier)) return why;
  if (job.elastic()) {  // it runs if its least size can
    JobSpec least = job;
    least.replicas = job.min_replicas;
    if (auto why = WhyInfeasible(least, cluster)) return why;
  } else if (auto why = WhyInfeasible(job, cluster)) {
    return why;
  }
  const GpuUnits need = MinUnits(job, cluster.catalog());
  for (QueueId q : queues.queue(job.queue).self_and_ancestors) {
    const QueueSpec& qs = queues.queue(q).spec;
    if (qs.burst >= 0 && need > qs.burst) {
      return "needs " + GpusText(need) + " GPUs, above the burst_gpus " + GpusText(qs.burst) +
             " of queue " + qs.name;
    }
  }
  return std::nullopt;
}

}  // namespace gantry::core
