// Cluster::Build: node names, leaves, GPU ids, NVLink domains, and its errors.

#include "core/model/cluster.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace gantry::core {
namespace {

PoolSpec GpuPool(std::string name, int count, int gpus, const char* model, int leaf_size = 0) {
  PoolSpec p;
  p.name = std::move(name);
  p.count = count;
  p.gpus = gpus;
  p.model = *Catalog::BuiltIn().Find(model);
  p.leaf_size = leaf_size;
  p.cpus_milli = 112'000;
  p.memory_bytes = 2048 * kGB;
  return p;
}

PoolSpec CpuPool(std::string name, int count) {
  PoolSpec p;
  p.name = std::move(name);
  p.count = count;
  p.cpus_milli = 224'000;
  return p;
}

std::string FirstError(std::vector<PoolSpec> pools) {
  auto c = Cluster::Build("t", Catalog::BuiltIn(), std::move(pools));
  return c.ok() ? "" : c.error().ToString();
}

TEST(ClusterTest, NamesNodesByPoolOrPrefix) {
  PoolSpec a = GpuPool("h100", 3, 8, "H100-80GB");
  PoolSpec b = GpuPool("l40s", 2, 4, "L40S-48GB");
  b.name_prefix = "inf";
  auto c = Cluster::Build("lab", Catalog::BuiltIn(), {a, b, CpuPool("cpu", 1)});
  ASSERT_TRUE(c.ok()) << c.error().ToString();
  std::vector<std::string> names;
  for (const Node& n : c->nodes()) names.push_back(n.name);
  EXPECT_EQ(names,
            (std::vector<std::string>{"h100-0", "h100-1", "h100-2", "inf-0", "inf-1", "cpu-0"}));
  EXPECT_EQ(c->name(), "lab");
  ASSERT_TRUE(c->FindNode("inf-1").has_value());
  EXPECT_EQ(c->FindNode("inf-1")->v, 4u);
  EXPECT_FALSE(c->FindNode("l40s-0").has_value());
  EXPECT_FALSE(c->FindNode("h100-3").has_value());
}

TEST(ClusterTest, GpuIdsAreContiguousPerNodeInNodeOrder) {
  auto c = Cluster::Build(
      "t", Catalog::BuiltIn(),
      {GpuPool("a", 2, 8, "H100-80GB"), CpuPool("cpu", 2), GpuPool("b", 3, 4, "T4-16GB")});
  ASSERT_TRUE(c.ok()) << c.error().ToString();
  EXPECT_EQ(c->gpu_count(), 2u * 8 + 3 * 4);
  uint32_t next = 0;
  for (uint32_t i = 0; i < c->nodes().size(); ++i) {
    const Node& n = c->node(NodeId(i));
    EXPECT_EQ(n.first_gpu.v, next) << n.name;
    for (int g = 0; g < n.gpus; ++g) EXPECT_EQ(c->gpu_node(GpuId(next + g)).v, i);
    next += static_cast<uint32_t>(n.gpus);
  }
  EXPECT_EQ(c->node(NodeId(2)).gpus, 0);  // cpu-0
  EXPECT_FALSE(c->node(NodeId(2)).model.valid());
  EXPECT_EQ(c->node(NodeId(4)).first_gpu.v, 16u);  // b-0 follows a-1's GPUs
}

TEST(ClusterTest, LeavesPerPool) {
  // 10 nodes in leaves of 4: 4 + 4 + 2; then a pool with leaf_size 0 (one leaf) and
  // one with leaf_size above its count (one leaf).
  auto c = Cluster::Build("t", Catalog::BuiltIn(),
                          {GpuPool("a", 10, 8, "H100-80GB", 4), GpuPool("b", 3, 8, "H100-80GB", 0),
                           GpuPool("c", 2, 8, "H100-80GB", 16)});
  ASSERT_TRUE(c.ok()) << c.error().ToString();
  ASSERT_EQ(c->leaves().size(), 5u);
  EXPECT_EQ(c->pool(PoolId(0)).leaf_count, 3);
  EXPECT_EQ(c->pool(PoolId(0)).first_leaf.v, 0u);
  EXPECT_EQ(c->pool(PoolId(1)).first_leaf.v, 3u);
  EXPECT_EQ(c->pool(PoolId(1)).leaf_count, 1);
  EXPECT_EQ(c->pool(PoolId(2)).first_leaf.v, 4u);
  EXPECT_EQ(c->pool(PoolId(2)).first_node.v, 13u);
  std::vector<size_t> sizes;
  for (const Leaf& l : c->leaves()) sizes.push_back(l.nodes.size());
  EXPECT_EQ(sizes, (std::vector<size_t>{4, 4, 2, 3, 2}));
  EXPECT_EQ(c->node(NodeId(0)).leaf.v, 0u);
  EXPECT_EQ(c->node(NodeId(3)).leaf.v, 0u);
  EXPECT_EQ(c->node(NodeId(4)).leaf.v, 1u);
  EXPECT_EQ(c->node(NodeId(9)).leaf.v, 2u);
  EXPECT_EQ(c->node(NodeId(10)).leaf.v, 3u);
  for (const Leaf& l : c->leaves()) {
    for (NodeId n : l.nodes) EXPECT_EQ(c->node(n).pool, l.pool);
  }
}

TEST(ClusterTest, NvlinkDomainsSplitTheNodeEvenly) {
  PoolSpec a = GpuPool("a", 1, 8, "H100-80GB");
  a.nvlink_domains = 2;
  PoolSpec b = GpuPool("b", 1, 8, "L40S-48GB");
  b.nvlink_domains = 8;
  auto c = Cluster::Build("t", Catalog::BuiltIn(), {a, b, GpuPool("c", 1, 4, "T4-16GB")});
  ASSERT_TRUE(c.ok()) << c.error().ToString();
  EXPECT_EQ(c->node(NodeId(0)).gpus_per_domain, 4);
  EXPECT_EQ(c->node(NodeId(1)).gpus_per_domain, 1);
  EXPECT_EQ(c->node(NodeId(2)).gpus_per_domain, 4);
}

TEST(ClusterTest, CopiesPoolPropertiesToNodes) {
  PoolSpec a = GpuPool("a", 2, 8, "H100-80GB");
  a.spot = true;
  a.sharing = Bit(Sharing::kExclusive) | Bit(Sharing::kMig);
  auto c = Cluster::Build("t", Catalog::BuiltIn(), {a, GpuPool("b", 1, 8, "H200-141GB")});
  ASSERT_TRUE(c.ok()) << c.error().ToString();
  const Node& n = c->node(NodeId(1));
  EXPECT_TRUE(n.spot);
  EXPECT_EQ(n.sharing, a.sharing);
  EXPECT_EQ(n.cpus_milli, 112'000);
  EXPECT_EQ(n.memory_bytes, 2048 * kGB);
  EXPECT_EQ(c->catalog().model(n.model).name, "H100-80GB");
  EXPECT_EQ(c->max_gpu_memory(), 141 * kGB);
  const Catalog& cat = c->catalog();
  EXPECT_EQ(c->present_models(), (ModelMask{1} << cat.Find("H100-80GB")->v) |
                                     (ModelMask{1} << cat.Find("H200-141GB")->v));
}

TEST(ClusterTest, EmptyPoolHasNoLeavesAndNoModelPresence) {
  auto c = Cluster::Build("t", Catalog::BuiltIn(),
                          {GpuPool("a", 0, 8, "H200-141GB"), CpuPool("cpu", 1)});
  ASSERT_TRUE(c.ok()) << c.error().ToString();
  EXPECT_EQ(c->pool(PoolId(0)).leaf_count, 0);
  EXPECT_EQ(c->leaves().size(), 1u);
  EXPECT_EQ(c->present_models(), 0u);
  EXPECT_EQ(c->max_gpu_memory(), 0);
}

TEST(ClusterTest, Errors) {
  PoolSpec p = GpuPool("a", -1, 8, "H100-80GB");
  EXPECT_EQ(FirstError({p}), "pools[a].count: must be at least 0, got -1");
  p = GpuPool("a", 1, -2, "H100-80GB");
  EXPECT_EQ(FirstError({p}), "pools[a].gpus: must be at least 0, got -2");
  p = GpuPool("a", 1, 65, "H100-80GB");
  EXPECT_EQ(FirstError({p}), "pools[a].gpus: must be at most 64, got 65");
  p = GpuPool("a", 1, 8, "H100-80GB");
  p.nvlink_domains = 3;
  EXPECT_EQ(FirstError({p}), "pools[a].nvlink_domains: 3 does not divide gpus 8 evenly");
  p.nvlink_domains = 0;
  EXPECT_EQ(FirstError({p}), "pools[a].nvlink_domains: must be at least 1, got 0");
  p = GpuPool("a", 1, 8, "H100-80GB");
  p.model = ModelId();
  EXPECT_EQ(FirstError({p}), "pools[a].gpu_model: required when gpus > 0");
  p = CpuPool("cpu", 1);
  p.model = ModelId(0);
  EXPECT_EQ(FirstError({p}), "pools[cpu].gpu_model: a CPU-only pool (gpus 0) has no GPU model");
  p = GpuPool("t4", 1, 4, "T4-16GB");
  p.sharing |= Bit(Sharing::kMig);
  EXPECT_EQ(FirstError({p}),
            "pools[t4].sharing: mig needs a MIG-capable GPU model; T4-16GB has no MIG profiles");
  EXPECT_EQ(FirstError({GpuPool("a", 1, 8, "H100-80GB"), GpuPool("a", 1, 8, "H100-80GB")}),
            "pools[a].name: duplicate pool name \"a\"");
  PoolSpec b = GpuPool("b", 1, 8, "H100-80GB");
  b.name_prefix = "a";
  EXPECT_EQ(FirstError({GpuPool("a", 1, 8, "H100-80GB"), b}),
            "pools[b].name_prefix: node names \"a-<i>\" collide with those of pool a");
  EXPECT_EQ(FirstError({GpuPool("", 1, 8, "H100-80GB")}), "pools[0].name: must not be empty");
  EXPECT_EQ(FirstError({CpuPool("x", 600'000), CpuPool("y", 600'000)}),
            "pools: the pools add up to 1200000 nodes; at most 1000000 are supported");
  EXPECT_EQ(FirstError({GpuPool("x", 70'000, 64, "H100-80GB")}),
            "pools: the pools add up to 4480000 GPUs; at most 4194304 are supported");
}

TEST(ClusterTest, CheckReportsEveryProblem) {
  PoolSpec a = GpuPool("a", -1, 70, "H100-80GB");
  PoolSpec b = GpuPool("b", 1, 8, "H100-80GB");
  b.nvlink_domains = 3;
  std::vector<Error> errors = Cluster::Check(Catalog::BuiltIn(), {a, b});
  ASSERT_EQ(errors.size(), 3u);
  EXPECT_EQ(errors[0].field, "pools[a].count");
  EXPECT_EQ(errors[1].field, "pools[a].gpus");
  EXPECT_EQ(errors[2].field, "pools[b].nvlink_domains");
}

}  // namespace
}  // namespace gantry::core
