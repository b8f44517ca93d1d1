#include "core/placement.h"

#include <gtest/gtest.h>
#include <bit>
#include <climits>
#include <map>
#include <random>
#include <set>

#include "test_util.h"

namespace gantry::core {
namespace {

using testing::MakeCluster;
using testing::Pool;
using testing::Whole;

using testing::kAll;

TEST(PlacementTest, GangIsAllOrNothing) {
  Catalog c = Catalog::BuiltIn();
  Cluster cluster = MakeCluster({Pool(c, "h", 2, 8, "H100-80GB")});
  Ledger ledger(cluster);
  Placer placer(ledger);
  Allocation a;
  ASSERT_TRUE(placer.Place(Whole(c, "a", 1, 4), Fit::kFirst, a));
  // 3 x 4 GPUs need 12 of the 12 left... spread over both nodes: fits.
  Allocation b;
  ASSERT_TRUE(placer.Place(Whole(c, "b", 3, 4), Fit::kFirst, b));
  EXPECT_EQ(b.size(), 3u);
  // Nothing is left: a gang of 1 x 1 fails and the ledger is unchanged.
  Allocation d;
  EXPECT_FALSE(placer.Place(Whole(c, "d", 1, 1), Fit::kFirst, d));
  EXPECT_TRUE(d.empty());
  for (auto& w : b) ledger.Release(w);
  // A gang of 3 x 4 with only 12 free but a 4-GPU hole per node layout works again,
  // while 4 x 4 (16 > 12 free) fails without leaving partial holds.
  Allocation e;
  EXPECT_FALSE(placer.Place(Whole(c, "e", 4, 4), Fit::kFirst, e));
  EXPECT_EQ(ledger.used_units(), 4 * kGpuUnits);
}

TEST(PlacementTest, TopologyDomainsHold) {
  Catalog c = Catalog::BuiltIn();
  // 4 nodes in leaves of 2; 2 NVLink domains of 4 GPUs per node.
  Cluster cluster = MakeCluster({Pool(c, "h", 4, 8, "H100-80GB", 2, 2)});
  Ledger ledger(cluster);
  Placer placer(ledger);
  Allocation a;
  // Take 5 GPUs on node 0 and 5 on node 2, leaving 3 free on each of them.
  ASSERT_TRUE(placer.Place(Whole(c, "a", 1, 5), Fit::kFirst, a));
  Allocation a2;
  ASSERT_TRUE(placer.Place(Whole(c, "a2", 1, 8), Fit::kFirst, a2));  // node 1
  Allocation a3;
  ASSERT_TRUE(placer.Place(Whole(c, "a3", 1, 5), Fit::kFirst, a3));  // node 2
  EXPECT_EQ(a3[0].node, NodeId(2));
  // A node-topology gang of 2 x 2 needs 4 GPUs on one node: only node 3 has them.
  Allocation b;
  ASSERT_TRUE(placer.Place(Whole(c, "b", 2, 2, Topology::kNode), Fit::kFirst, b));
  EXPECT_EQ(b[0].node, NodeId(3));
  EXPECT_EQ(b[1].node, NodeId(3));
  // nvlink: 2 x 2 inside one 4-GPU domain. Node 3 has 4 left in one domain.
  Allocation n;
  ASSERT_TRUE(placer.Place(Whole(c, "n", 2, 2, Topology::kNvlink), Fit::kFirst, n));
  uint64_t mask = n[0].gpu_mask | n[1].gpu_mask;
  EXPECT_TRUE(mask == 0x0F || mask == 0xF0) << mask;
  // leaf: 2 x 3 must sit in one leaf: leaf 0 has 3 free (node 0), leaf 1 has 3 (node 2).
  Allocation l;
  EXPECT_FALSE(placer.Place(Whole(c, "l", 2, 3, Topology::kLeaf), Fit::kFirst, l));
  Allocation s;
  EXPECT_TRUE(placer.Place(Whole(c, "s", 2, 3, Topology::kSpine), Fit::kFirst, s));
}

// Slurm's -N 3 --ntasks-per-node=2 (issue 47 A3): exactly 2 workers on each of 3
// distinct nodes, never 3+1+2 or 4+2, however the free GPUs lie.
TEST(PlacementTest, WorkersPerNodeGivesEachNodeItsGroup) {
  Catalog c = Catalog::BuiltIn();
  Cluster cluster = MakeCluster({Pool(c, "h", 4, 8, "H100-80GB")});
  Ledger ledger(cluster);
  Placer placer(ledger);
  Allocation hole;  // node 0 keeps room for one 2-GPU worker only
  ASSERT_TRUE(placer.Place(Whole(c, "hole", 1, 6), Fit::kFirst, hole));
  JobSpec job = Whole(c, "n3", 6, 2);
  job.workers_per_node = 2;
  for (Fit fit : {Fit::kFirst, Fit::kBest}) {
    Allocation a;
    ASSERT_TRUE(placer.Place(job, fit, a));
    ASSERT_EQ(a.size(), 6u);
    std::map<uint32_t, int> per_node;
    for (const WorkerAlloc& w : a) ++per_node[w.node.v];
    EXPECT_EQ(per_node.size(), 3u);
    for (const auto& [node, n] : per_node) {
      EXPECT_EQ(n, 2) << "node " << node;
      EXPECT_NE(node, 0u) << "node 0 cannot hold a group of two";
    }
    for (const WorkerAlloc& w : a) ledger.Release(w);
  }
  // Without the constraint the same gang fills the hole and packs: not 2 per node.
  Allocation packed;
  ASSERT_TRUE(placer.Place(Whole(c, "packed", 6, 2), Fit::kBest, packed));
  std::map<uint32_t, int> counts;
  for (const WorkerAlloc& w : packed) ++counts[w.node.v];
  EXPECT_TRUE(std::any_of(counts.begin(), counts.end(), [](auto& kv) { return kv.second != 2; }));
  for (const WorkerAlloc& w : packed) ledger.Release(w);
  // Four groups need four nodes with room: node 0 has none, so it waits, holding nothing.
  job.replicas = 8;
  Allocation four;
  EXPECT_FALSE(placer.Place(job, Fit::kFirst, four));
  EXPECT_TRUE(four.empty());
  EXPECT_EQ(ledger.used_units(), 6 * kGpuUnits);
}

// only_nodes and not_nodes (sbatch --nodelist, --exclude): every search, plain and FGD,
// whole GPUs, shares, MIG and CPU-only, places only on nodes the job may use, and waits
// (holding nothing) rather than go elsewhere.
TEST(PlacementTest, NamedNodesAreTheOnlyOnesAJobUses) {
  Catalog c = Catalog::BuiltIn();
  Cluster cluster = MakeCluster({Pool(c, "a", 6, 8, "A100-80GB", 0, 1, kAll)});
  Ledger ledger(cluster);
  Fragmentation frag(ledger, false);
  Placer first(ledger), fgd(ledger, &frag);
  std::vector<JobSpec> kinds = {Whole(c, "whole", 2, 4), testing::Mig(c, "mig", "1g.10gb"),
                                testing::Shared(c, "mps", Sharing::kMps, 300, 10),
                                Whole(c, "cpu", 1, 0)};
  kinds.back().cpus_milli = 1000;
  for (const JobSpec& kind : kinds) frag.Observe(kind);
  ASSERT_TRUE(frag.active());
  for (JobSpec job : kinds) {
    for (Placer* placer : {&first, &fgd}) {
      for (Fit fit : {Fit::kFirst, Fit::kBest}) {
        job.only_nodes = {NodeId(2), NodeId(4)};
        job.not_nodes = {NodeId(4)};
        Allocation a;
        ASSERT_TRUE(placer->Place(job, fit, a)) << job.id;
        for (const WorkerAlloc& w : a) EXPECT_EQ(w.node, NodeId(2)) << job.id;
        ledger.Release(a);
        job.only_nodes.clear();
        job.not_nodes = {NodeId(0), NodeId(1), NodeId(2), NodeId(3), NodeId(4)};
        ASSERT_TRUE(placer->Place(job, fit, a)) << job.id;
        for (const WorkerAlloc& w : a) EXPECT_EQ(w.node, NodeId(5)) << job.id;
        ledger.Release(a);
      }
    }
  }
  // Node 5 full: a job that may use only it waits, though the rest are free.
  Allocation full;
  JobSpec filler = Whole(c, "filler", 1, 8);
  filler.only_nodes = {NodeId(5)};
  ASSERT_TRUE(fgd.Place(filler, Fit::kBest, full));
  JobSpec late = Whole(c, "late", 1, 1);
  late.only_nodes = {NodeId(5)};
  Allocation none;
  EXPECT_FALSE(fgd.Place(late, Fit::kBest, none));
  EXPECT_FALSE(first.Place(late, Fit::kFirst, none));
  EXPECT_TRUE(none.empty());
  EXPECT_EQ(ledger.used_units(), 8 * kGpuUnits);
}

// preferred_nodes (Kubernetes' preferred affinities): the best-scoring nodes with room
// first, then the next score, then any node; a node scoring below 0 only when nothing
// else has room; a job's own restrictions hold at every step.
TEST(PlacementTest, PreferredNodesAreTriedBestFirst) {
  Catalog c = Catalog::BuiltIn();
  Cluster cluster = MakeCluster({Pool(c, "a", 4, 8, "A100-80GB", 0, 1, kAll)});
  Ledger ledger(cluster);
  Fragmentation frag(ledger, false);
  Placer first(ledger), fgd(ledger, &frag);
  for (Placer* placer : {&first, &fgd}) {
    for (Fit fit : {Fit::kFirst, Fit::kBest}) {
      JobSpec job = Whole(c, "p", 1, 4);
      // Node 0 is avoided (-10), node 2 preferred (5), node 3 preferred most (20).
      job.preferred_nodes = {{NodeId(0), -10}, {NodeId(2), 5}, {NodeId(3), 20}};
      Allocation a, b, d, e, f;
      ASSERT_TRUE(placer->Place(job, fit, a));
      EXPECT_EQ(a[0].node, NodeId(3));
      ASSERT_TRUE(placer->Place(job, fit, b));  // node 3's other half
      EXPECT_EQ(b[0].node, NodeId(3));
      ASSERT_TRUE(placer->Place(job, fit, d));  // node 3 full: the next score
      EXPECT_EQ(d[0].node, NodeId(2));
      job.not_nodes = {NodeId(2)};  // its own restriction holds: node 1 (0) before node 0
      ASSERT_TRUE(placer->Place(job, fit, e));
      EXPECT_EQ(e[0].node, NodeId(1));
      job.not_nodes.clear();
      job.gpus = 8;  // only node 0 has 8 free: the avoided node when nothing else fits
      ASSERT_TRUE(placer->Place(job, fit, f));
      EXPECT_EQ(f[0].node, NodeId(0));
      for (Allocation* x : {&a, &b, &d, &e, &f}) ledger.Release(*x);
      EXPECT_EQ(ledger.used_units(), 0);
    }
  }
  // A gang goes whole to the preferred nodes where it fits there, else anywhere.
  JobSpec gang = Whole(c, "g", 2, 8);
  gang.preferred_nodes = {{NodeId(1), 1}, {NodeId(2), 1}};
  Allocation g;
  ASSERT_TRUE(fgd.Place(gang, Fit::kBest, g));
  EXPECT_EQ((std::set<NodeId>{g[0].node, g[1].node}), (std::set<NodeId>{NodeId(1), NodeId(2)}));
  gang.preferred_nodes = {{NodeId(1), 1}};
  Allocation h;
  ASSERT_TRUE(fgd.Place(gang, Fit::kBest, h));
  EXPECT_EQ(h.size(), 2u);
}

// fewest_nodes (Slurm's -n without -N): one node where one has room for every worker,
// else as the topology allows rather than waiting.
TEST(PlacementTest, FewestNodesPutsTheGangOnOneNodeWhereOneHasRoom) {
  Catalog c = Catalog::BuiltIn();
  Cluster cluster = MakeCluster({Pool(c, "h", 3, 8, "H100-80GB")});
  Ledger ledger(cluster);
  Placer placer(ledger);
  Allocation holes;  // nodes 0 and 1 keep 6 free GPUs, node 2 keeps 5
  for (int n = 0; n < 3; ++n) {
    Allocation a;
    ASSERT_TRUE(placer.PlaceOn(Whole(c, "hole", 1, n == 2 ? 3 : 2), Fit::kFirst, NodeId(n), a));
    holes.insert(holes.end(), a.begin(), a.end());
  }
  JobSpec job = Whole(c, "n4", 4, 1);
  job.fewest_nodes = true;
  for (Fit fit : {Fit::kFirst, Fit::kBest}) {
    Allocation a;
    ASSERT_TRUE(placer.Place(job, fit, a));
    std::set<uint32_t> nodes;
    for (const WorkerAlloc& w : a) nodes.insert(w.node.v);
    EXPECT_EQ(nodes.size(), 1u);
    for (const WorkerAlloc& w : a) ledger.Release(w);
  }
  job.replicas = 8;  // no node has 8 free: spread, as the job's topology allows
  Allocation spread;
  ASSERT_TRUE(placer.Place(job, Fit::kBest, spread));
  EXPECT_EQ(spread.size(), 8u);
}

// More workers of a gang that runs (an elastic gang grown in place, Kubernetes): inside the
// domain of the gang's own topology, even for one new worker.
TEST(PlacementTest, WorkersBesideAGangStayInItsDomain) {
  Catalog c = Catalog::BuiltIn();
  Cluster cluster = MakeCluster({Pool(c, "h", 4, 8, "H100-80GB", /*leaf_size=*/2)});
  Ledger ledger(cluster);
  Placer placer(ledger);
  JobSpec job = Whole(c, "leafy", 1, 8);
  job.topology = Topology::kLeaf;
  Allocation held;
  ASSERT_TRUE(placer.PlaceOn(job, Fit::kFirst, NodeId(2), held));  // leaf 1: nodes 2 and 3
  Allocation more;
  ASSERT_TRUE(placer.PlaceBeside(job, Fit::kBest, held, more));
  ASSERT_EQ(more.size(), 1u);
  EXPECT_EQ(more[0].node.v, 3u) << "in the held worker's leaf, not nodes 0-1";
  EXPECT_FALSE(placer.PlaceBeside(job, Fit::kBest, held, more)) << "its leaf is full now";
  job.topology = Topology::kNode;
  EXPECT_FALSE(placer.PlaceBeside(job, Fit::kBest, held, more)) << "its node is full";
  job.topology = Topology::kSpine;
  ASSERT_TRUE(placer.PlaceBeside(job, Fit::kBest, held, more));
  EXPECT_LT(more[0].node.v, 2u);
}

TEST(PlacementTest, CriticalWorkNeverLandsOnSpot) {
  Catalog c = Catalog::BuiltIn();
  Cluster cluster =
      MakeCluster({Pool(c, "spot", 1, 8, "L40S-48GB", 0, 1, Bit(Sharing::kExclusive), true),
                   Pool(c, "h", 1, 8, "H100-80GB")});
  Ledger ledger(cluster);
  Placer placer(ledger);
  JobSpec crit = Whole(c, "c", 1, 8);
  crit.tier = Tier::kCritical;
  Allocation a;
  ASSERT_TRUE(placer.Place(crit, Fit::kFirst, a));
  EXPECT_EQ(cluster.node(a[0].node).pool, PoolId(1));
  Allocation b;
  EXPECT_FALSE(placer.Place(crit, Fit::kFirst, b));  // only spot left
  JobSpec be = Whole(c, "b", 1, 8);
  be.tier = Tier::kBestEffort;
  EXPECT_TRUE(placer.Place(be, Fit::kFirst, b));
}

TEST(PlacementTest, ModelAndVramFilter) {
  Catalog c = Catalog::BuiltIn();
  Cluster cluster = MakeCluster({Pool(c, "t4", 1, 4, "T4-16GB"), Pool(c, "h", 1, 8, "H100-80GB")});
  Ledger ledger(cluster);
  Placer placer(ledger);
  JobSpec j = Whole(c, "j", 1, 1);
  j.vram_bytes = 40 * kGB;  // T4 too small
  Allocation a;
  ASSERT_TRUE(placer.Place(j, Fit::kFirst, a));
  EXPECT_EQ(cluster.node(a[0].node).model, testing::Model(c, "H100-80GB"));
  JobSpec t = Whole(c, "t", 1, 1);
  t.models = ModelMask{1} << testing::Model(c, "T4-16GB").v;
  Allocation b;
  ASSERT_TRUE(placer.Place(t, Fit::kFirst, b));
  EXPECT_EQ(cluster.node(b[0].node).pool, PoolId(0));
}

// A gang that names no model runs on GPUs of one model (issue 47: an sbatch job without
// -p had its tasks on A100 and H100 nodes); a lone worker and CPU-only gangs go anywhere.
TEST(PlacementTest, AGangRunsOnOneModel) {
  Catalog c = Catalog::BuiltIn();
  Cluster cluster =
      MakeCluster({Pool(c, "a100", 2, 8, "A100-80GB"), Pool(c, "h100", 2, 8, "H100-80GB")});
  const ModelId a100 = testing::Model(c, "A100-80GB"), h100 = testing::Model(c, "H100-80GB");
  for (const Fit fit : {Fit::kFirst, Fit::kBest}) {
    Ledger ledger(cluster);
    Placer placer(ledger);
    // 3 nodes' worth: 4 nodes are free, but no model has 3.
    Allocation a;
    EXPECT_FALSE(placer.Place(Whole(c, "three", 3, 8), fit, a));
    EXPECT_EQ(ledger.used_units(), 0);
    // One A100 node busy: a 2-node gang takes both H100 nodes, not an A100 and an H100.
    Allocation busy, b;
    JobSpec one = Whole(c, "one", 1, 8);
    one.models = ModelMask{1} << a100.v;
    ASSERT_TRUE(placer.Place(one, fit, busy));
    ASSERT_TRUE(placer.Place(Whole(c, "two", 2, 8), fit, b));
    ASSERT_EQ(b.size(), 2u);
    for (const WorkerAlloc& w : b) EXPECT_EQ(cluster.node(w.node).model, h100);
    // What is left is one A100 node: a gang of 2 x 4 GPUs goes there.
    Allocation e;
    ASSERT_TRUE(placer.Place(Whole(c, "pair", 2, 4), fit, e));
    for (const WorkerAlloc& w : e) EXPECT_EQ(cluster.node(w.node).model, a100);
  }
  // The message says why a gang of 3 whole nodes never runs here.
  const auto why = WhyInfeasible(Whole(c, "three", 3, 8), cluster);
  ASSERT_TRUE(why.has_value());
  EXPECT_NE(why->find("on GPUs of one model; the most one model holds is 2"), std::string::npos)
      << *why;
  EXPECT_FALSE(WhyInfeasible(Whole(c, "two", 2, 8), cluster).has_value());
}

TEST(PlacementTest, MigFillsSplitGpusBeforeWholeOnes) {
  Catalog c = Catalog::BuiltIn();
  Cluster cluster = MakeCluster({Pool(c, "a", 1, 8, "A100-80GB", 0, 1, kAll)});
  Ledger ledger(cluster);
  Placer placer(ledger);
  for (int i = 0; i < 7; ++i) {
    Allocation a;
    ASSERT_TRUE(placer.Place(testing::Mig(c, "m", "1g.10gb"), Fit::kFirst, a));
    EXPECT_EQ(a[0].gpu, 0) << i;  // all seven on GPU 0
  }
  Allocation a;
  ASSERT_TRUE(placer.Place(testing::Mig(c, "m", "3g.40gb"), Fit::kFirst, a));
  EXPECT_EQ(a[0].gpu, 1);
  EXPECT_EQ(ledger.node(NodeId(0)).free_whole, 6);
}

TEST(PlacementTest, SharedBestFitPacksTheFullestGpu) {
  Catalog c = Catalog::BuiltIn();
  Cluster cluster = MakeCluster({Pool(c, "a", 1, 8, "A100-80GB", 0, 1, kAll)});
  Ledger ledger(cluster);
  Placer placer(ledger);
  Allocation x, y, z;
  ASSERT_TRUE(placer.Place(testing::Shared(c, "x", Sharing::kMps, 500, 10), Fit::kBest, x));
  ASSERT_TRUE(placer.Place(testing::Shared(c, "y", Sharing::kMps, 600, 10), Fit::kBest, y));
  EXPECT_NE(x[0].gpu, y[0].gpu);  // 1.1 does not fit on one GPU
  // 0.4 fits with y (0.6 -> 1.0, nothing left) and with x (0.5 -> 0.9); best fit takes y.
  ASSERT_TRUE(placer.Place(testing::Shared(c, "z", Sharing::kMps, 400, 10), Fit::kBest, z));
  EXPECT_EQ(z[0].gpu, y[0].gpu);
}

// FGD looks at a bounded number of shared GPUs per level of free share; where the only
// GPU with room lies past them, the plain search still finds it.
TEST(PlacementTest, FgdFindsTheOneSharedGpuWithRoomPastItsLooks) {
  Catalog c = Catalog::BuiltIn();
  Cluster cluster = MakeCluster({Pool(c, "a", 10, 8, "A100-80GB", 0, 1, kAll)});
  Ledger ledger(cluster);
  Fragmentation frag(ledger, false);
  Placer first(ledger), fgd(ledger, &frag);
  // GPUs 0-78: half their share and 75 of 80 GB taken; GPU 79: half its share, 10 GB.
  Allocation a;
  for (int i = 0; i < 79; ++i)
    ASSERT_TRUE(first.Place(testing::Shared(c, "full", Sharing::kMps, 500, 75), Fit::kFirst, a));
  ASSERT_TRUE(first.Place(testing::Shared(c, "roomy", Sharing::kMps, 500, 10), Fit::kFirst, a));
  ASSERT_EQ(a[0].node, NodeId(9));
  ASSERT_EQ(a[0].gpu, 7);
  ASSERT_GT(cluster.pool(PoolId(0)).spec.count * 8, Placer::kLooksPerBucket);
  const JobSpec job = testing::Shared(c, "x", Sharing::kMps, 300, 20);
  frag.Observe(job);
  ASSERT_TRUE(frag.active());
  Allocation x;
  ASSERT_TRUE(fgd.Place(job, Fit::kBest, x));
  EXPECT_EQ(x[0].node, NodeId(9));
  EXPECT_EQ(x[0].gpu, 7);
}

// The plain search for a share, on random ledgers, against a walk of every GPU: best fit
// takes the least share left, then the lowest GPU; first fit the lowest GPU with room; a
// free GPU only where no shared one has room.
TEST(PlacementTest, SharedSearchPicksWhatAWalkOfEveryGpuWould) {
  Catalog c = Catalog::BuiltIn();
  Cluster cluster = MakeCluster({Pool(c, "a", 4, 8, "A100-80GB", 0, 1, kAll)});
  const int64_t memory = c.model(cluster.pool(PoolId(0)).spec.model).memory_bytes;
  std::mt19937 rng(7);
  auto uniform = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  int checked = 0;
  for (int round = 0; round < 200; ++round) {
    Ledger ledger(cluster);
    Placer placer(ledger);
    for (int k = 0; k < 60; ++k) {  // shares of random size on random GPUs
      WorkerAlloc w;
      w.node = NodeId(static_cast<uint32_t>(uniform(0, 3)));
      w.gpu = static_cast<int8_t>(uniform(0, 7));
      w.sharing = Sharing::kMps;
      w.share_milli = static_cast<int16_t>(uniform(1, 9) * 100 - uniform(0, 1) * 50);
      w.vram_bytes = uniform(1, 40) * kGB;
      if (ledger.Fits(w)) ledger.Allocate(w);
    }
    const int share = uniform(1, 9) * 100 - uniform(0, 1) * 50;
    const JobSpec job = testing::Shared(c, "x", Sharing::kMps, share, uniform(1, 40));
    for (Fit fit : {Fit::kBest, Fit::kFirst}) {
      int want = -1, want_left = INT32_MAX;  // GPU index node * 8 + gpu
      for (int i = 0; i < 32 && !(fit == Fit::kFirst && want >= 0); ++i) {
        const GpuState& g = ledger.gpu(ledger.gpu_id(NodeId(static_cast<uint32_t>(i / 8)), i % 8));
        if (g.mode != GpuMode::kShared || g.share_mode != Sharing::kMps) continue;
        const int left = kShareScale - g.share_used - share;
        if (left < 0 || g.vram_used + job.vram_bytes > memory) continue;
        if (left < want_left) want = i, want_left = left;
      }
      std::vector<GpuMode> before;
      for (int i = 0; i < 32; ++i)
        before.push_back(
            ledger.gpu(ledger.gpu_id(NodeId(static_cast<uint32_t>(i / 8)), i % 8)).mode);
      Allocation got;
      const bool placed = placer.Place(job, fit, got);
      if (want < 0) {  // no shared GPU with room: a free GPU, if any
        if (placed) {
          EXPECT_EQ(before[got[0].node.v * 8 + static_cast<uint32_t>(got[0].gpu)], GpuMode::kFree);
        }
      } else {
        ASSERT_TRUE(placed);
        EXPECT_EQ(static_cast<int>(got[0].node.v) * 8 + got[0].gpu, want) << "round " << round;
        ++checked;
      }
      if (placed) ledger.Release(got);
    }
  }
  EXPECT_GT(checked, 200);  // most rounds had a shared GPU with room
}

TEST(PlacementTest, CpuOnlyJobsPreferCpuPools) {
  Catalog c = Catalog::BuiltIn();
  Cluster cluster = MakeCluster({Pool(c, "h", 1, 8, "H100-80GB"), Pool(c, "cpu", 2, 0, nullptr)});
  Ledger ledger(cluster);
  Placer placer(ledger);
  JobSpec j = Whole(c, "cpu", 1, 0);
  j.cpus_milli = 100'000;
  Allocation a, b, d;
  ASSERT_TRUE(placer.Place(j, Fit::kFirst, a));
  ASSERT_TRUE(placer.Place(j, Fit::kFirst, b));
  EXPECT_EQ(cluster.node(a[0].node).pool, PoolId(1));
  EXPECT_EQ(cluster.node(b[0].node).pool, PoolId(1));
  EXPECT_NE(a[0].node, b[0].node);
  ASSERT_TRUE(placer.Place(j, Fit::kFirst, d));  // CPU pools full: the GPU node takes it
  EXPECT_EQ(cluster.node(d[0].node).pool, PoolId(0));
  EXPECT_EQ(d[0].gpu_mask, 0u);
}

}  // namespace
}  // namespace gantry::core
