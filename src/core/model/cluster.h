// Cluster: the hardware, as an immutable topology.
//
// spine -> leaves -> nodes -> NVLink domains -> GPUs. Built once from the pools of a
// cluster config; ids are dense indexes (NodeId, GpuId, LeafId, PoolId) so the
// allocation ledger can keep flat vectors. Node names are `<prefix>-<i>`. Each pool
// has its own leaves of `leaf_size` nodes; all leaves hang off one spine.
// Thread-safety: immutable after Build; share read-only.
#pragma once

#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "base/result.h"
#include "core/model/catalog.h"
#include "core/model/types.h"

namespace gantry::core {

// Limits that keep a config from asking for more than any real cluster has (and keep a
// fuzzed or mistyped config from allocating gigabytes).
inline constexpr int kMaxGpusPerNode = 64;
inline constexpr int64_t kMaxNodes = 1'000'000;        // per cluster
inline constexpr int64_t kMaxGpus = int64_t{1} << 22;  // per cluster

struct PoolSpec {
  std::string name;
  std::string name_prefix;  // empty: the pool's name
  int count = 0;            // nodes
  int gpus = 0;             // GPUs per node; 0 = CPU-only
  ModelId model;            // invalid for CPU-only pools
  int nvlink_domains = 1;   // GPUs of a node split evenly into this many domains
  int leaf_size = 0;        // nodes per leaf; 0 = the whole pool on one leaf
  int64_t cpus_milli = 0;
  int64_t memory_bytes = 0;
  bool spot = false;
  SharingMask sharing = Bit(Sharing::kExclusive);
  // Server mode: the cgroup limits of a worker whose job gives no cpus / memory_gb, per
  // GPU it holds (Slurm's DefCpuPerGPU, DefMemPerGPU); 0 = no limit.
  int64_t default_cpus_per_gpu_milli = 0;
  int64_t default_memory_per_gpu_bytes = 0;
  // Server mode: the agents create and destroy MIG instances at the placements the
  // scheduler chooses (`mig_managed`); otherwise they use instances laid out beforehand.
  bool mig_managed = false;
  // Nodes that name themselves (Kubernetes): when set, one name per node, used instead of
  // `<prefix>-<i>`, and per node its leaf within the pool (0-based; leaves need not be the
  // same size), used instead of leaf_size.
  std::vector<std::string> node_names;
  std::vector<int> node_leaves;
};

// The most nodes on one leaf of pool `p`.
int LargestLeaf(const PoolSpec& p);

struct Pool {
  PoolSpec spec;
  NodeId first_node;
  LeafId first_leaf;
  int leaf_count = 0;
};

struct Node {
  std::string name;
  PoolId pool;
  LeafId leaf;
  GpuId first_gpu;  // GPUs of a node are contiguous: first_gpu .. first_gpu + gpus - 1
  int gpus = 0;
  int gpus_per_domain = 0;
  ModelId model;
  int64_t cpus_milli = 0;
  int64_t memory_bytes = 0;
  bool spot = false;
  SharingMask sharing = Bit(Sharing::kExclusive);
};

struct Leaf {
  PoolId pool;
  std::vector<NodeId> nodes;
};

class Cluster {
 public:
  // Errors name the pool field: count/gpus negative, nvlink_domains not dividing gpus,
  // more than 64 GPUs per node, duplicate node names, a CPU-only pool with a model.
  // Also: more than kMaxNodes nodes or kMaxGpus GPUs, a model not in the catalog, mig sharing on a
  // model without MIG, an empty pool name, duplicate pool names or node-name prefixes. Error::field
  // is "pools[<name>].<field>" ("pools[<index>]" for an unnamed pool). Cost: O(pools + nodes +
  // GPUs).
  static Result<Cluster> Build(std::string name, Catalog catalog, std::vector<PoolSpec> pools);
  // Every problem Build would refuse, in pool order (Build returns the first). O(pools).
  static std::vector<Error> Check(const Catalog& catalog, const std::vector<PoolSpec>& pools);

  const std::string& name() const { return name_; }
  const Catalog& catalog() const { return catalog_; }
  const std::vector<Pool>& pools() const { return pools_; }
  const std::vector<Node>& nodes() const { return nodes_; }
  const std::vector<Leaf>& leaves() const { return leaves_; }
  const Node& node(NodeId id) const { return nodes_[id.v]; }
  const Leaf& leaf(LeafId id) const { return leaves_[id.v]; }
  const Pool& pool(PoolId id) const { return pools_[id.v]; }
  size_t gpu_count() const { return gpu_node_.size(); }
  NodeId gpu_node(GpuId g) const { return gpu_node_[g.v]; }
  std::optional<NodeId> FindNode(std::string_view name) const;

  // Largest GPU memory of any model present (for "could never hold" checks).
  int64_t max_gpu_memory() const { return max_gpu_memory_; }
  // Models present in at least one node, as a mask.
  ModelMask present_models() const { return present_models_; }

 private:
  std::string name_;
  Catalog catalog_;
  std::vector<Pool> pools_;
  std::vector<Node> nodes_;
  std::vector<Leaf> leaves_;
  std::vector<NodeId> gpu_node_;
  std::unordered_map<std::string, NodeId> by_name_;
  int64_t max_gpu_memory_ = 0;
  ModelMask present_models_ = 0;
};

}  // namespace gantry::core
