// WhyInfeasible: every reason, and the jobs that are feasible at the edge.

#include "core/model/feasibility.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace gantry::core {
namespace {

PoolSpec Pool(std::string name, int count, int gpus, const char* model, int leaf_size = 0) {
  PoolSpec p;
  p.name = std::move(name);
  p.count = count;
  p.gpus = gpus;
  if (model != nullptr) p.model = *Catalog::BuiltIn().Find(model);
  p.leaf_size = leaf_size;
  p.cpus_milli = 112'000;
  p.memory_bytes = 2048 * kGB;
  return p;
}

Cluster Build(std::vector<PoolSpec> pools) {
  auto c = Cluster::Build("t", Catalog::BuiltIn(), std::move(pools));
  EXPECT_TRUE(c.ok()) << c.error().ToString();
  return std::move(c).value();
}

// A lab: 16 H100 nodes of 8 GPUs (leaves of 4, MIG and MPS allowed), 4 spot H200 nodes
// and 2 big CPU nodes.
Cluster Lab() {
  PoolSpec h100 = Pool("h100", 16, 8, "H100-80GB", 4);
  h100.sharing = SharingMask(h100.sharing | Bit(Sharing::kMig) | Bit(Sharing::kMps));
  PoolSpec h200 = Pool("h200", 4, 8, "H200-141GB");
  h200.spot = true;
  PoolSpec cpu = Pool("cpu", 2, 0, nullptr);
  cpu.cpus_milli = 224'000;
  return Build({h100, h200, cpu});
}

JobSpec Gpus(const Cluster& c, int gpus, double vram_gb, int replicas = 1,
             Topology topology = Topology::kSpine) {
  JobSpec j;
  j.id = "j";
  j.gpus = gpus;
  j.vram_bytes = static_cast<int64_t>(vram_gb * kGB);
  j.replicas = replicas;
  j.topology = topology;
  j.models = (ModelMask{1} << c.catalog().size()) - 1;
  j.mig_index.assign(c.catalog().size(), -1);
  return j;
}

JobSpec Mig(const Cluster& c, const std::string& profile, double vram_gb) {
  JobSpec j = Gpus(c, 0, vram_gb);
  j.sharing = Sharing::kMig;
  j.mig_profile = profile;
  for (size_t m = 0; m < c.catalog().size(); ++m) {
    j.mig_index[m] =
        static_cast<int8_t>(c.catalog().FindProfile(ModelId(static_cast<uint32_t>(m)), profile));
  }
  return j;
}

ModelMask Only(const Cluster& c, const char* model) {
  return ModelMask{1} << c.catalog().Find(model)->v;
}

std::string Why(const JobSpec& j, const Cluster& c) {
  return WhyInfeasible(j, c).value_or("feasible");
}

// Named nodes (sbatch --nodelist, --exclude): the gang must fit on the nodes it may use.
TEST(FeasibilityTest, NamedNodesBoundWhatAGangCanHold) {
  const Cluster c = Lab();  // h100-0..15 are NodeIds 0..15, h200-0..3 16..19
  JobSpec two = Gpus(c, 8, 80, 2);
  two.workers_per_node = 1;
  two.only_nodes = {NodeId(0), NodeId(1)};
  EXPECT_EQ(Why(two, c), "feasible");
  two.not_nodes = {NodeId(1)};
  EXPECT_EQ(Why(two, c),
            "a gang of 2 x 8 GPUs with workers_per_node 1 needs 2 nodes that each hold 1 workers "
            "(the cluster has 1)");
  JobSpec spot = Gpus(c, 8, 141);  // only the H200s hold 141 GB
  spot.not_nodes = {NodeId(16), NodeId(17), NodeId(18), NodeId(19)};
  EXPECT_EQ(Why(spot, c).rfind("vram_gb 141 exceeds every GPU", 0), 0u) << Why(spot, c);
  JobSpec none = Gpus(c, 1, 10);
  none.only_nodes = {NodeId(20)};  // a CPU node: no GPU there
  EXPECT_EQ(Why(none, c).rfind("no GPU of an accepted model", 0), 0u) << Why(none, c);
  none.only_nodes = {NodeId(3)};
  none.not_nodes = {NodeId(3)};
  EXPECT_EQ(Why(none, c), "its nodelist and exclude_nodes leave it no node of a pool it may use");
}

TEST(FeasibilityTest, FeasibleJobs) {
  const Cluster c = Lab();
  EXPECT_EQ(Why(Gpus(c, 8, 80), c), "feasible");
  EXPECT_EQ(Why(Gpus(c, 8, 141), c), "feasible");  // on the spot H200s
  EXPECT_EQ(Why(Gpus(c, 8, 60, 4, Topology::kLeaf), c), "feasible");
  EXPECT_EQ(Why(Gpus(c, 8, 60, 16, Topology::kSpine), c), "feasible");
  // 20 nodes fit 60 GB, but a gang runs on one model: 16 H100 or 4 H200.
  EXPECT_EQ(Why(Gpus(c, 8, 60, 20, Topology::kSpine), c),
            "a gang of 20 x 8 GPUs needs 20 workers at once on GPUs of one model; the most one "
            "model holds is 16 (H100-80GB)");
  EXPECT_EQ(Why(Gpus(c, 1, 60, 8, Topology::kNode), c), "feasible");
  EXPECT_EQ(Why(Gpus(c, 2, 60, 4, Topology::kNvlink), c), "feasible");
  EXPECT_EQ(Why(Mig(c, "1g.10gb", 8), c), "feasible");
  JobSpec cpu = Gpus(c, 0, 0);
  cpu.cpus_milli = 200'000;
  EXPECT_EQ(Why(cpu, c), "feasible");
}

// Slurm's -N (workers_per_node): a group per node, on as many nodes as groups.
TEST(FeasibilityTest, WorkersPerNodeNeedAsManyNodesAsGroups) {
  const Cluster c = Lab();  // 16 H100 nodes and 4 H200 nodes of 8 GPUs
  JobSpec j = Gpus(c, 4, 60, 32);
  j.workers_per_node = 2;  // 16 groups of 2 x 4 GPUs: one per node, all 16 H100 nodes
  EXPECT_EQ(Why(j, c), "feasible");
  j.replicas = 34;  // 17 groups: no model has 17 nodes
  EXPECT_EQ(Why(j, c),
            "a gang of 34 x 4 GPUs with workers_per_node 2 needs 17 nodes that each hold 2 "
            "workers (the cluster has 16 of one GPU model, H100-80GB)");
  j.models = Only(c, "H100-80GB");
  EXPECT_EQ(Why(j, c),
            "a gang of 34 x 4 GPUs with workers_per_node 2 needs 17 nodes that each hold 2 "
            "workers (the cluster has 16)");
  j = Gpus(c, 4, 60, 6);
  j.workers_per_node = 3;  // 12 GPUs on a node of 8: none holds a group
  EXPECT_NE(Why(j, c).find("needs 2 nodes that each hold 3 workers (the cluster has 0)"),
            std::string::npos)
      << Why(j, c);
}

TEST(FeasibilityTest, VramExceedsEveryGpu) {
  const Cluster c = Lab();
  EXPECT_EQ(Why(Gpus(c, 1, 200), c),
            "vram_gb 200 exceeds every GPU in the cluster (largest: H200-141GB, 141 GB)");
  JobSpec j = Gpus(c, 1, 100);
  j.models = Only(c, "H100-80GB");
  EXPECT_EQ(Why(j, c),
            "vram_gb 100 exceeds every GPU of an accepted model in the cluster (largest: "
            "H100-80GB, 80 GB)");
  EXPECT_EQ(Why(Mig(c, "1g.10gb", 12), c),
            "vram_gb 12 exceeds MIG profile 1g.10gb on every GPU of the cluster (largest: 10 GB "
            "on H100-80GB)");
}

TEST(FeasibilityTest, NoGpuOfAnAcceptedModel) {
  const Cluster c = Lab();
  JobSpec j = Gpus(c, 1, 10);
  j.models = Only(c, "T4-16GB");
  EXPECT_EQ(Why(j, c),
            "no GPU of an accepted model (T4-16GB) in the cluster (it has H100-80GB, H200-141GB)");
  const Cluster cpu_only = Build({Pool("cpu", 2, 0, nullptr)});
  EXPECT_EQ(Why(Gpus(cpu_only, 1, 10), cpu_only), "the cluster has no GPUs");
}

TEST(FeasibilityTest, MigProfiles) {
  const Cluster c = Lab();
  // A100-40GB's 1g.5gb exists in the catalog but on no GPU of this cluster.
  EXPECT_EQ(Why(Mig(c, "1g.5gb", 4), c), "MIG profile 1g.5gb: no GPU of the cluster supports it");
  // H200's 1g.18gb exists here, but the job accepts only H100s.
  JobSpec j = Mig(c, "1g.18gb", 4);
  j.models = Only(c, "H100-80GB");
  EXPECT_EQ(
      Why(j, c),
      "MIG profile 1g.18gb: no GPU of an accepted model (H100-80GB) in the cluster supports it");
  // H200 has the profile but its pool does not allow MIG.
  EXPECT_EQ(Why(Mig(c, "1g.18gb", 4), c),
            "mig sharing is allowed on no pool with an accepted model");
}

TEST(FeasibilityTest, SharingModeNotAllowed) {
  const Cluster c = Lab();
  JobSpec j = Gpus(c, 0, 10);
  j.sharing = Sharing::kTimeslice;
  j.share_milli = 250;
  EXPECT_EQ(Why(j, c), "timeslice sharing is allowed on no pool with an accepted model");
  j.sharing = Sharing::kMps;
  EXPECT_EQ(Why(j, c), "feasible");
  j.models = Only(c, "H200-141GB");
  EXPECT_EQ(Why(j, c), "mps sharing is allowed on no pool with an accepted model");
}

TEST(FeasibilityTest, CriticalJobsIgnoreSpotPools) {
  const Cluster c = Lab();
  JobSpec j = Gpus(c, 8, 120);  // fits only the spot H200s
  EXPECT_EQ(Why(j, c), "feasible");
  j.tier = Tier::kCritical;
  EXPECT_EQ(
      Why(j, c),
      "critical jobs never run on spot pools, and every pool that could hold this job is spot");
  PoolSpec spot = Pool("s", 2, 0, nullptr);
  spot.spot = true;
  const Cluster all_spot = Build({spot});
  JobSpec cpu = Gpus(all_spot, 0, 0);
  cpu.tier = Tier::kCritical;
  EXPECT_EQ(Why(cpu, all_spot), "critical jobs never run on spot pools, and every pool is spot");
  // A critical gang larger than the non-spot capacity: spot nodes do not count.
  PoolSpec h100_spot = Pool("h100-spot", 4, 8, "H100-80GB");
  h100_spot.spot = true;
  const Cluster some_spot = Build({Pool("h100", 16, 8, "H100-80GB"), h100_spot});
  JobSpec gang = Gpus(some_spot, 8, 60, 17);
  EXPECT_EQ(Why(gang, some_spot), "feasible");
  gang.tier = Tier::kCritical;
  EXPECT_EQ(Why(gang, some_spot),
            "a gang of 17 x 8 GPUs needs 17 workers at once; the whole cluster holds at most 16");
}

TEST(FeasibilityTest, WorkerLargerThanEveryNode) {
  const Cluster c = Lab();
  EXPECT_EQ(Why(Gpus(c, 16, 10), c), "no node has 16 GPUs of an accepted model (largest: 8)");
  JobSpec cpu = Gpus(c, 0, 0);
  cpu.cpus_milli = 500'000;
  EXPECT_EQ(Why(cpu, c), "cpus 500 exceed every node (largest: 224)");
  JobSpec g = Gpus(c, 1, 10);
  g.cpus_milli = 150'000;
  EXPECT_EQ(Why(g, c), "cpus 150 exceed every node that fits its GPUs (largest: 112)");
  JobSpec mem = Gpus(c, 0, 0);
  mem.memory_bytes = 4096 * kGB;
  EXPECT_EQ(Why(mem, c), "memory_gb 4096 exceeds every node (largest: 2048)");
}

TEST(FeasibilityTest, GangTopologies) {
  const Cluster c = Lab();
  EXPECT_EQ(Why(Gpus(c, 8, 60, 3, Topology::kNode), c),
            "a gang of 3 x 8 GPUs with topology node needs 24 GPUs on one node (largest: 8)");
  // Leaves of 4 H100 nodes: 5 workers of 8 GPUs do not fit (the H200 pool is one leaf of 4).
  EXPECT_EQ(Why(Gpus(c, 8, 60, 5, Topology::kLeaf), c),
            "a gang of 5 x 8 GPUs with topology leaf needs 5 workers in one leaf (at most 4 fit)");
  EXPECT_EQ(Why(Gpus(c, 4, 60, 8, Topology::kLeaf), c), "feasible");
  // Per-node capacity counts CPUs too: 2 workers of 60 cpus per 112-cpu node.
  JobSpec cpu_bound = Gpus(c, 1, 60, 9, Topology::kLeaf);
  cpu_bound.cpus_milli = 50'000;
  cpu_bound.models = Only(c, "H100-80GB");
  EXPECT_EQ(Why(cpu_bound, c),
            "a gang of 9 x 1 GPU with topology leaf needs 9 workers in one leaf (at most 8 fit)");
  JobSpec node_cpu = Gpus(c, 1, 60, 3, Topology::kNode);
  node_cpu.cpus_milli = 50'000;
  EXPECT_EQ(Why(node_cpu, c),
            "a gang of 3 x 1 GPU with topology node needs 3 workers on one node (at most 2 fit)");
  EXPECT_EQ(Why(Gpus(c, 8, 60, 21), c),
            "a gang of 21 x 8 GPUs needs 21 workers at once on GPUs of one model; the most one "
            "model holds is 16 (H100-80GB)");
  JobSpec h100 = Gpus(c, 8, 60, 17);
  h100.models = Only(c, "H100-80GB");
  EXPECT_EQ(Why(h100, c),
            "a gang of 17 x 8 GPUs needs 17 workers at once; the whole cluster holds at most 16");
}

TEST(FeasibilityTest, NvlinkDomains) {
  PoolSpec p = Pool("a", 2, 8, "H100-80GB");
  p.nvlink_domains = 2;
  const Cluster c = Build({p});
  EXPECT_EQ(Why(Gpus(c, 4, 60, 1, Topology::kNvlink), c), "feasible");
  EXPECT_EQ(Why(Gpus(c, 8, 60, 1, Topology::kNvlink), c),
            "a worker of 8 GPUs with topology nvlink needs them in one NVLink domain (largest: 4)");
  EXPECT_EQ(Why(Gpus(c, 8, 60, 1, Topology::kNode), c), "feasible");
  EXPECT_EQ(Why(Gpus(c, 2, 60, 2, Topology::kNvlink), c), "feasible");
  EXPECT_EQ(
      Why(Gpus(c, 2, 60, 3, Topology::kNvlink), c),
      "a gang of 3 x 2 GPUs with topology nvlink needs 6 GPUs in one NVLink domain (largest: 4)");
}

TEST(FeasibilityTest, SharedAndMigGangsCountInstancesPerGpu) {
  PoolSpec p = Pool("a", 1, 1, "H100-80GB");
  p.sharing = SharingMask(p.sharing | Bit(Sharing::kMig) | Bit(Sharing::kMps));
  const Cluster c = Build({p});
  JobSpec mig = Mig(c, "1g.10gb", 8);
  mig.replicas = 7;
  mig.topology = Topology::kNode;
  EXPECT_EQ(Why(mig, c), "feasible");
  mig.replicas = 8;
  EXPECT_EQ(Why(mig, c),
            "a gang of 8 x 1g.10gb with topology node needs 8 workers on one node (at most 7 fit)");
  JobSpec mps = Gpus(c, 0, 10, 4);
  mps.sharing = Sharing::kMps;
  mps.share_milli = 250;
  EXPECT_EQ(Why(mps, c), "feasible");
  mps.replicas = 5;
  EXPECT_EQ(
      Why(mps, c),
      "a gang of 5 x 0.25 GPU (mps) needs 5 workers at once; the whole cluster holds at most 4");
}

TEST(FeasibilityTest, EmptyCluster) {
  const Cluster c = Build({Pool("a", 0, 8, "H100-80GB")});
  EXPECT_EQ(Why(Gpus(c, 1, 10), c), "the cluster has no nodes");
}

TEST(FeasibilityTest, LargeGangOnLargePool) {
  // Capacity is counted per pool (count x workers per node), never node by node.
  const Cluster c = Build({Pool("big", 100'000, 0, nullptr)});
  JobSpec j = Gpus(c, 0, 0, 100'000, Topology::kLeaf);
  j.cpus_milli = 1000;
  EXPECT_EQ(Why(j, c), "feasible");
}

}  // namespace
}  // namespace gantry::core
