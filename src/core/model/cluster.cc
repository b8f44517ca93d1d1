// Cluster::Build: pools -> nodes, leaves and GPU ids (see cluster.h).

#include "core/model/cluster.h"

#include <algorithm>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace gantry::core {
namespace {

std::string PoolPath(const PoolSpec& p, size_t index) {
  return "pools[" + (p.name.empty() ? std::to_string(index) : p.name) + "]";
}

std::string Prefix(const PoolSpec& p) { return p.name_prefix.empty() ? p.name : p.name_prefix; }

// Nodes per leaf: 0 or >= count puts the whole pool on one leaf.
int LeafSize(const PoolSpec& p) {
  return (p.leaf_size <= 0 || p.leaf_size >= p.count) ? p.count : p.leaf_size;
}

int LeafCount(const PoolSpec& p) {
  if (p.count == 0) return 0;
  if (p.node_leaves.empty()) return (p.count + LeafSize(p) - 1) / LeafSize(p);
  int top = 0;
  for (int l : p.node_leaves) top = std::max(top, l);
  return top + 1;
}

}  // namespace

int LargestLeaf(const PoolSpec& p) {
  if (p.node_leaves.empty()) return LeafSize(p);
  std::vector<int> size(static_cast<size_t>(LeafCount(p)), 0);
  for (int l : p.node_leaves) ++size[static_cast<size_t>(l)];
  return size.empty() ? 0 : *std::max_element(size.begin(), size.end());
}

std::vector<Error> Cluster::Check(const Catalog& catalog, const std::vector<PoolSpec>& pools) {
  std::vector<Error> errors;
  // Node names are `<prefix>-<i>` with i in plain decimal, so the text after the last '-'
  // is i and the text before it is the prefix: distinct prefixes give distinct names.
  std::unordered_map<std::string, size_t> pool_names;
  std::unordered_map<std::string, size_t> prefixes;
  int64_t total_nodes = 0;
  int64_t total_gpus = 0;
  for (size_t i = 0; i < pools.size(); ++i) {
    const PoolSpec& p = pools[i];
    const std::string path = PoolPath(p, i);
    auto add = [&](std::string field, std::string message) {
      errors.push_back(Error{path + "." + field, std::move(message)});
    };
    if (p.name.empty()) {
      add("name", "must not be empty");
    } else if (auto [it, fresh] = pool_names.emplace(p.name, i); !fresh) {
      add("name", "duplicate pool name \"" + p.name + "\"");
    } else {
      const std::string prefix = Prefix(p);
      if (auto [pit, pfresh] = prefixes.emplace(prefix, i); !pfresh) {
        add(p.name_prefix.empty() ? "name" : "name_prefix",
            "node names \"" + prefix + "-<i>\" collide with those of pool " +
                pools[pit->second].name);
      }
    }
    if (p.count < 0) {
      add("count", "must be at least 0, got " + std::to_string(p.count));
    } else if (p.count > kMaxNodes) {
      add("count",
          "must be at most " + std::to_string(kMaxNodes) + ", got " + std::to_string(p.count));
    } else {
      total_nodes += p.count;
      if (p.gpus > 0 && p.gpus <= kMaxGpusPerNode) total_gpus += int64_t{p.count} * p.gpus;
    }
    if (p.gpus < 0) {
      add("gpus", "must be at least 0, got " + std::to_string(p.gpus));
    } else if (p.gpus > kMaxGpusPerNode) {
      add("gpus",
          "must be at most " + std::to_string(kMaxGpusPerNode) + ", got " + std::to_string(p.gpus));
    }
    if (p.nvlink_domains < 1) {
      add("nvlink_domains", "must be at least 1, got " + std::to_string(p.nvlink_domains));
    } else if (p.gpus > 0 && p.gpus % p.nvlink_domains != 0) {
      add("nvlink_domains", std::to_string(p.nvlink_domains) + " does not divide gpus " +
                                std::to_string(p.gpus) + " evenly");
    }
    if (p.leaf_size < 0) add("leaf_size", "must be at least 0, got " + std::to_string(p.leaf_size));
    if (!p.node_names.empty() && p.node_names.size() != static_cast<size_t>(p.count)) {
      add("node_names",
          std::to_string(p.node_names.size()) + " names for " + std::to_string(p.count) + " nodes");
    }
    if (!p.node_leaves.empty() &&
        (p.node_leaves.size() != static_cast<size_t>(p.count) ||
         *std::min_element(p.node_leaves.begin(), p.node_leaves.end()) < 0 ||
         *std::max_element(p.node_leaves.begin(), p.node_leaves.end()) >= p.count)) {
      add("node_leaves", "must give each of the " + std::to_string(p.count) +
                             " nodes a leaf from 0 to " + std::to_string(p.count - 1));
    }
    if (p.cpus_milli < 0) add("cpus", "must be at least 0");
    if (p.memory_bytes < 0) add("memory_gb", "must be at least 0");
    const bool model_known = p.model.valid() && p.model.v < catalog.size();
    if (p.gpus > 0 && !model_known) {
      add("gpu_model", p.model.valid() ? "not in the catalog" : "required when gpus > 0");
    } else if (p.gpus == 0 && p.model.valid()) {
      add("gpu_model", "a CPU-only pool (gpus 0) has no GPU model");
    }
    if (p.gpus > 0 && model_known && (p.sharing & Bit(Sharing::kMig)) &&
        !catalog.model(p.model).mig_capable()) {
      add("sharing", "mig needs a MIG-capable GPU model; " + catalog.model(p.model).name +
                         " has no MIG profiles");
    }
    if (p.gpus == 0 && (p.sharing & ~Bit(Sharing::kExclusive))) {
      add("sharing", "a CPU-only pool (gpus 0) has no GPUs to share");
    }
  }
  if (total_nodes > kMaxNodes) {
    errors.push_back(Error{"pools", "the pools add up to " + std::to_string(total_nodes) +
                                        " nodes; at most " + std::to_string(kMaxNodes) +
                                        " are supported"});
  }
  if (total_gpus > kMaxGpus) {
    errors.push_back(Error{"pools", "the pools add up to " + std::to_string(total_gpus) +
                                        " GPUs; at most " + std::to_string(kMaxGpus) +
                                        " are supported"});
  }
  return errors;
}

Result<Cluster> Cluster::Build(std::string name, Catalog catalog, std::vector<PoolSpec> pools) {
  if (std::vector<Error> errors = Check(catalog, pools); !errors.empty()) {
    return std::move(errors.front());
  }
  Cluster c;
  c.name_ = std::move(name);
  c.catalog_ = std::move(catalog);
  size_t total_nodes = 0;
  size_t total_gpus = 0;
  for (const PoolSpec& p : pools) {
    total_nodes += static_cast<size_t>(p.count);
    total_gpus += static_cast<size_t>(p.count) * static_cast<size_t>(p.gpus);
  }
  c.nodes_.reserve(total_nodes);
  c.gpu_node_.reserve(total_gpus);
  c.by_name_.reserve(total_nodes);
  c.pools_.reserve(pools.size());
  for (size_t pi = 0; pi < pools.size(); ++pi) {
    PoolSpec& spec = pools[pi];
    const PoolId pool_id(static_cast<uint32_t>(pi));
    const std::string prefix = Prefix(spec);
    const int leaf_size = LeafSize(spec);
    Pool pool;
    pool.first_node = NodeId(static_cast<uint32_t>(c.nodes_.size()));
    pool.first_leaf = LeafId(static_cast<uint32_t>(c.leaves_.size()));
    pool.leaf_count = LeafCount(spec);
    for (int l = 0; l < pool.leaf_count; ++l) c.leaves_.push_back(Leaf{pool_id, {}});
    for (int i = 0; i < spec.count; ++i) {
      const NodeId id(static_cast<uint32_t>(c.nodes_.size()));
      Node n;
      const auto at = static_cast<size_t>(i);
      n.name = spec.node_names.empty() ? prefix + "-" + std::to_string(i) : spec.node_names[at];
      n.pool = pool_id;
      n.leaf = LeafId(pool.first_leaf.v + static_cast<uint32_t>(spec.node_leaves.empty()
                                                                    ? i / leaf_size
                                                                    : spec.node_leaves[at]));
      n.first_gpu = GpuId(static_cast<uint32_t>(c.gpu_node_.size()));
      n.gpus = spec.gpus;
      n.gpus_per_domain = spec.gpus / spec.nvlink_domains;
      n.model = spec.gpus > 0 ? spec.model : ModelId();
      n.cpus_milli = spec.cpus_milli;
      n.memory_bytes = spec.memory_bytes;
      n.spot = spec.spot;
      n.sharing = spec.sharing;
      for (int g = 0; g < spec.gpus; ++g) c.gpu_node_.push_back(id);
      c.leaves_[n.leaf.v].nodes.push_back(id);
      if (!c.by_name_.emplace(n.name, id).second) {
        // Check() rules this out (distinct prefixes give distinct names); keep the
        // promise of an error anyway rather than a silently shadowed node.
        return Error{PoolPath(spec, pi) + ".name_prefix", "duplicate node name \"" + n.name + "\""};
      }
      c.nodes_.push_back(std::move(n));
    }
    if (spec.count > 0 && spec.gpus > 0) {
      const GpuModel& m = c.catalog_.model(spec.model);
      if (m.memory_bytes > c.max_gpu_memory_) c.max_gpu_memory_ = m.memory_bytes;
      c.present_models_ |= ModelMask{1} << spec.model.v;
    }
    pool.spec = std::move(spec);
    c.pools_.push_back(std::move(pool));
  }
  return c;
}

std::optional<NodeId> Cluster::FindNode(std::string_view name) const {
  auto it = by_name_.find(std::string(name));
  if (it == by_name_.end()) return std::nullopt;
  return it->second;
}

}  // namespace gantry::core
