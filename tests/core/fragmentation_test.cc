#include "core/fragmentation.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "core/placement.h"
#include "core/scheduler.h"
#include "test_util.h"

namespace gantry::core {
namespace {

using testing::MakeCluster;
using testing::Pool;
using testing::Shared;
using testing::Whole;

using testing::kAll;

WorkerAlloc Share(NodeId node, int gpu, int milli, Sharing mode = Sharing::kMps) {
  WorkerAlloc w;
  w.node = node;
  w.sharing = mode;
  w.gpu = static_cast<int8_t>(gpu);
  w.share_milli = static_cast<int16_t>(milli);
  w.vram_bytes = 1 * kGB;
  return w;
}

WorkerAlloc WholeGpus(NodeId node, uint64_t mask) {
  WorkerAlloc w;
  w.node = node;
  w.gpu_mask = mask;
  return w;
}

TEST(FragmentationTest, LearnsTheMixByWorkers) {
  Catalog c = Catalog::BuiltIn();
  Cluster cluster = MakeCluster({Pool(c, "a", 2, 4, "A100-80GB", 0, 1, kAll)});
  Ledger ledger(cluster);
  Fragmentation frag(ledger, false);
  EXPECT_FALSE(frag.active());
  EXPECT_EQ(frag.FragmentedGpus(), 0.0);
  frag.Observe(Whole(c, "one", 1, 1));
  frag.Observe(Whole(c, "gang", 3, 1));  // same worker shape, 3 workers
  frag.Observe(Shared(c, "half", Sharing::kMps, 500, 8));
  ASSERT_TRUE(frag.active());
  ASSERT_EQ(frag.mix().size(), 2u);
  EXPECT_EQ(frag.mix()[0].worker.gpus, 1);  // heaviest first
  EXPECT_EQ(frag.mix()[0].weight, 4u);
  EXPECT_EQ(frag.mix()[1].worker.share_milli, 500);
  EXPECT_EQ(frag.mix()[1].weight, 1u);
  EXPECT_EQ(frag.total_weight(), 5u);
}

// Whole-GPU jobs that differ only in VRAM make one class while the same models hold
// them (its VRAM the largest seen); shares keep their VRAM.
TEST(FragmentationTest, VramSplitsClassesOnlyWhereItMatters) {
  Catalog c = Catalog::BuiltIn();
  Cluster cluster = MakeCluster({Pool(c, "a", 1, 8, "A100-80GB", 0, 1, kAll)});
  Ledger ledger(cluster);
  Fragmentation frag(ledger, false);
  JobSpec small = Whole(c, "small", 1, 1), large = small, huge = small;
  small.vram_bytes = 10 * kGB;
  large.vram_bytes = 14 * kGB;  // both fit every built-in model (16 GB and up)
  huge.vram_bytes = 70 * kGB;   // fits only the 80 GB and larger ones
  frag.Observe(small);
  frag.Observe(large);
  frag.Observe(huge);
  frag.Observe(Shared(c, "s8", Sharing::kMps, 250, 8));
  frag.Observe(Shared(c, "s9", Sharing::kMps, 250, 9));
  ASSERT_EQ(frag.mix().size(), 4u);
  int64_t whole_vram_max = 0;
  int shares = 0;
  for (const auto& m : frag.mix()) {
    if (m.worker.sharing == Sharing::kMps) {
      ++shares;
    } else if (m.weight == 2) {
      whole_vram_max = m.worker.vram_bytes;
    }
  }
  EXPECT_EQ(shares, 2);
  EXPECT_EQ(whole_vram_max, 14 * kGB);
}

TEST(FragmentationTest, LeavesCpuOnlyJobsOutOfTheMix) {
  Catalog c = Catalog::BuiltIn();
  Cluster cluster = MakeCluster({Pool(c, "a", 1, 8, "A100-80GB", 0, 1, kAll)});
  Ledger ledger(cluster);
  Fragmentation frag(ledger, false);
  for (int k = 0; k < 100; ++k) frag.Observe(Whole(c, "cpu", 2, 0));
  EXPECT_FALSE(frag.active());  // no mix: the placer does plain best fit
  frag.Observe(Whole(c, "w", 1, 1));
  ASSERT_EQ(frag.mix().size(), 1u);
  EXPECT_EQ(frag.mix()[0].worker.gpus, 1);
  EXPECT_EQ(frag.total_weight(), 1u);
}

TEST(FragmentationTest, KeepsTheHeaviestClassesAndDecays) {
  Catalog c = Catalog::BuiltIn();
  Cluster cluster = MakeCluster({Pool(c, "a", 1, 8, "A100-80GB", 0, 1, kAll)});
  Ledger ledger(cluster);
  Fragmentation frag(ledger, false);
  // kMaxClasses + 8 distinct shapes (share 5, 10, ... milli); the first 8 seen once,
  // the others twice.
  const int shapes = static_cast<int>(Fragmentation::kMaxClasses) + 8;
  for (int i = 0; i < shapes; ++i) {
    for (int k = 0; k < (i < 8 ? 1 : 2); ++k) {
      frag.Observe(Shared(c, "s", Sharing::kMps, 5 * (i + 1), 1));
    }
  }
  // The mix in use is frozen between rebuilds (at most every 256 workers): 300 more of
  // one shape make sure one happened since.
  for (int k = 0; k < 300; ++k) frag.Observe(Shared(c, "s", Sharing::kMps, 400, 1));
  ASSERT_EQ(frag.mix().size(), Fragmentation::kMaxClasses);
  for (size_t i = 1; i < frag.mix().size(); ++i) {
    EXPECT_GE(frag.mix()[i - 1].weight, frag.mix()[i].weight);
  }
  EXPECT_EQ(frag.mix()[0].worker.share_milli, 400);
  EXPECT_GT(frag.mix()[0].weight, 2u);  // counts as of the last rebuild: up to 302
  EXPECT_LE(frag.mix()[0].weight, 302u);
  for (const auto& m : frag.mix()) EXPECT_GT(m.worker.share_milli, 40);  // the lightest 8 left
  // Every kDecayEvery workers all counts halve (564 seen so far; the halving comes
  // during the next 8192).
  for (uint64_t k = 0; k < Fragmentation::kDecayEvery; ++k) frag.Observe(Whole(c, "w", 1, 2));
  EXPECT_EQ(frag.mix()[0].worker.gpus, 2);
  bool found = false;
  for (const auto& m : frag.mix()) {
    if (m.worker.share_milli != 400) continue;
    found = true;
    EXPECT_EQ(m.weight, 151u);
  }
  EXPECT_TRUE(found);
}

// Hand computation: one node of 4 A100s. GPU0 shared with 0.7 used (0.3 free), GPU1
// shared with 0.4 used (0.6 free), GPU2 and GPU3 free. Mix: 1 whole GPU (weight 1),
// an MPS share of 0.5 (weight 1).
//   F(1 GPU)  = 0.3 + 0.6 = 0.9 (the partial GPUs)
//   F(0.5)    = 0.3         (GPU0 has less than 0.5 left)
//   F(M)      = (0.9 + 0.3) / 2 = 0.6 GPUs
TEST(FragmentationTest, NodeFragmentationByHand) {
  Catalog c = Catalog::BuiltIn();
  Cluster cluster = MakeCluster({Pool(c, "a", 2, 4, "A100-80GB", 0, 1, kAll)});
  Ledger ledger(cluster);
  Fragmentation frag(ledger, false);
  frag.Observe(Whole(c, "one", 1, 1));
  frag.Observe(Shared(c, "half", Sharing::kMps, 500, 8));
  ledger.Allocate(Share(NodeId(0), 0, 700));
  ledger.Allocate(Share(NodeId(0), 1, 400));
  EXPECT_EQ(frag.NodeScore(NodeId(0)), (900 + 300) * kUnitsPerShareMilli);
  EXPECT_DOUBLE_EQ(frag.NodeFragmentedGpus(NodeId(0)), 0.6);
  EXPECT_DOUBLE_EQ(frag.NodeFragmentedGpus(NodeId(1)), 0.0);  // all free, all usable
  EXPECT_DOUBLE_EQ(frag.FragmentedGpus(), 0.6);

  // A 4-GPU whole class cannot go to node 0 at all (2 free whole GPUs): all of its free
  // capacity, 2.9 GPUs, is fragmented for it; node 1 (4 free) has none.
  frag.Observe(Whole(c, "four", 1, 4));
  // F(M) = (0.9 + 0.3 + 2.9) / 3
  EXPECT_NEAR(frag.NodeFragmentedGpus(NodeId(0)), 4.1 / 3, 1e-12);
  EXPECT_NEAR(frag.FragmentedGpus(), 4.1 / 3, 1e-12);

  // Taking node 1's GPU 3 whole: 3 free whole GPUs left there, so the 4-GPU class loses
  // it: F = 3 for that class, 0 for the others.
  ledger.Allocate(WholeGpus(NodeId(1), 0b1000));
  EXPECT_NEAR(frag.NodeFragmentedGpus(NodeId(1)), 1.0, 1e-12);
  EXPECT_NEAR(frag.FragmentedGpus(), 4.1 / 3 + 1.0, 1e-12);
  // A down node does not count.
  ledger.SetUp(NodeId(1), false);
  EXPECT_NEAR(frag.FragmentedGpus(), 4.1 / 3, 1e-12);
}

TEST(FragmentationTest, CpuAndModelRuleOutAClass) {
  Catalog c = Catalog::BuiltIn();
  Cluster cluster =
      MakeCluster({Pool(c, "a", 1, 2, "A100-80GB", 0, 1, kAll), Pool(c, "t", 1, 2, "T4-16GB")});
  Ledger ledger(cluster);
  Fragmentation frag(ledger, false);
  JobSpec big = Whole(c, "cpu-heavy", 1, 1);
  big.cpus_milli = 100'000;  // the nodes have 128 CPUs
  big.models = ModelMask{1} << testing::Model(c, "A100-80GB").v;
  frag.Observe(big);
  // T4 node: the class may not use it at all: both free GPUs are fragmented for it.
  EXPECT_DOUBLE_EQ(frag.NodeFragmentedGpus(NodeId(1)), 2.0);
  EXPECT_DOUBLE_EQ(frag.NodeFragmentedGpus(NodeId(0)), 0.0);
  // Take 64 CPUs on the A100 node: now it lacks the class's CPUs.
  WorkerAlloc cpu;
  cpu.node = NodeId(0);
  cpu.cpus_milli = 64'000;
  ledger.Allocate(cpu);
  EXPECT_DOUBLE_EQ(frag.NodeFragmentedGpus(NodeId(0)), 2.0);
}

TEST(FragmentationTest, DeltaMatchesAllocateAndRelease) {
  Catalog c = Catalog::BuiltIn();
  Cluster cluster = MakeCluster({Pool(c, "a", 4, 4, "A100-80GB", 0, 1, kAll)});
  Ledger ledger(cluster);
  Fragmentation frag(ledger, false);
  frag.Observe(Whole(c, "one", 1, 1));
  frag.Observe(Whole(c, "two", 1, 2));
  frag.Observe(Shared(c, "q", Sharing::kMps, 250, 4));
  frag.Observe(Shared(c, "h", Sharing::kMps, 500, 4));
  frag.Observe(testing::Mig(c, "m3", "3g.40gb"));
  frag.Observe(testing::Mig(c, "m1", "1g.10gb"));
  Placer placer(ledger, &frag);
  std::mt19937_64 rng(7);
  const std::vector<JobSpec> jobs = {Whole(c, "one", 1, 1),
                                     Whole(c, "two", 1, 2),
                                     Shared(c, "q", Sharing::kMps, 250, 4),
                                     Shared(c, "h", Sharing::kMps, 500, 4),
                                     testing::Mig(c, "m3", "3g.40gb"),
                                     testing::Mig(c, "m1", "1g.10gb")};
  std::vector<Allocation> live;
  for (int step = 0; step < 400; ++step) {
    if (!live.empty() && rng() % 3 == 0) {
      const size_t i = rng() % live.size();
      for (const WorkerAlloc& w : live[i]) ledger.Release(w);
      live.erase(live.begin() + static_cast<std::ptrdiff_t>(i));
      continue;
    }
    Allocation a;
    if (!placer.Place(jobs[rng() % jobs.size()], Fit::kBest, a)) continue;
    // Undo and check that Delta predicted the change exactly.
    ASSERT_EQ(a.size(), 1u);
    ledger.Release(a[0]);
    const int64_t before = frag.NodeScore(a[0].node);
    const int64_t delta = frag.Delta(a[0]);
    ledger.Allocate(a[0]);
    EXPECT_EQ(frag.NodeScore(a[0].node) - before, delta) << "step " << step;
    live.push_back(a);
  }
}

// The cluster's total is kept from the nodes that changed since it was last read; it
// must equal the sum over up nodes read one by one, through allocations, releases,
// what-ifs rolled back, nodes going down and up, and the mix changing under it.
TEST(FragmentationTest, TotalFollowsChangedNodesOnly) {
  Catalog c = Catalog::BuiltIn();
  Cluster cluster = MakeCluster(
      {Pool(c, "a", 6, 4, "A100-80GB", 0, 1, kAll), Pool(c, "h", 5, 8, "H100-80GB", 2)});
  Ledger ledger(cluster);
  Fragmentation frag(ledger, false);
  const std::vector<JobSpec> jobs = {Whole(c, "one", 1, 1), Whole(c, "four", 1, 4),
                                     Shared(c, "q", Sharing::kMps, 250, 4),
                                     testing::Mig(c, "m1", "1g.10gb")};
  for (const JobSpec& j : jobs) frag.Observe(j);
  Placer placer(ledger, &frag);
  std::mt19937_64 rng(11);
  std::vector<Allocation> live;
  auto by_nodes = [&] {
    double sum = 0;
    for (uint32_t n = 0; n < cluster.nodes().size(); ++n) {
      if (ledger.node(NodeId(n)).up) sum += frag.NodeFragmentedGpus(NodeId(n));
    }
    return sum;
  };
  for (int step = 0; step < 600; ++step) {
    const uint64_t roll = rng() % 10;
    if (roll < 3 && !live.empty()) {
      const size_t i = rng() % live.size();
      ledger.Release(live[i]);
      live.erase(live.begin() + static_cast<std::ptrdiff_t>(i));
    } else if (roll ==
               3) {  // a node fails (its jobs end, as the scheduler ends them) or comes back
      const NodeId n(static_cast<uint32_t>(rng() % cluster.nodes().size()));
      if (ledger.node(n).up) {
        std::erase_if(live, [&](const Allocation& a) {
          const bool on =
              std::any_of(a.begin(), a.end(), [&](const WorkerAlloc& w) { return w.node == n; });
          if (on) ledger.Release(a);
          return on;
        });
      }
      ledger.SetUp(n, !ledger.node(n).up);
    } else if (roll == 4) {
      const Ledger::Mark mark = ledger.Checkpoint();
      for (const Allocation& a : live) ledger.Release(a);
      ledger.Rollback(mark);
    } else if (roll == 5) {
      frag.Observe(jobs[rng() % jobs.size()]);  // the mix moves (a rebuild, now and then)
    } else {
      Allocation a;
      if (placer.Place(jobs[rng() % jobs.size()], Fit::kBest, a)) live.push_back(a);
    }
    if (rng() % 4 == 0) continue;  // read now and then: changes pile up between reads
    ASSERT_NEAR(frag.FragmentedGpus(), by_nodes(), 1e-9) << "step " << step;
  }
}

// FGD finds room exactly where plain best fit does (it searches a superset of best fit's
// places, and falls back to it only past kLooksPerBucket), over random ledger states.
TEST(FragmentationTest, FitsWhereverBestFitFits) {
  Catalog c = Catalog::BuiltIn();
  Cluster cluster =
      MakeCluster({Pool(c, "a", 6, 4, "A100-80GB", 3, 2, kAll), Pool(c, "h", 4, 8, "H100-80GB", 2),
                   Pool(c, "cpu", 2, 0, nullptr)});
  Ledger ledger(cluster);
  Fragmentation frag(ledger, false);
  Placer fgd(ledger, &frag), plain(ledger);
  std::vector<JobSpec> jobs = {Whole(c, "w1", 1, 1),
                               Whole(c, "w2", 1, 2),
                               Whole(c, "w4", 1, 4),
                               Whole(c, "w8", 1, 8),
                               Whole(c, "cpu", 1, 0),
                               Whole(c, "g", 2, 2, Topology::kNode),
                               Whole(c, "l", 2, 4, Topology::kLeaf),
                               Shared(c, "m3", Sharing::kMps, 300, 8),
                               Shared(c, "t6", Sharing::kTimeslice, 600, 8),
                               testing::Mig(c, "1g", "1g.10gb"),
                               testing::Mig(c, "3g", "3g.40gb")};
  for (size_t i = 0; i < jobs.size(); ++i) {
    jobs[i].cpus_milli = int64_t{8'000} * static_cast<int64_t>(i % 4 + 1);
    frag.Observe(jobs[i]);
  }
  std::mt19937_64 rng(11);
  std::vector<Allocation> live;
  int agreed = 0;
  for (int step = 0; step < 3000; ++step) {
    if (!live.empty() && rng() % 3 == 0) {
      const size_t i = rng() % live.size();
      for (const WorkerAlloc& w : live[i]) ledger.Release(w);
      live.erase(live.begin() + static_cast<std::ptrdiff_t>(i));
      continue;
    }
    const JobSpec& job = jobs[rng() % jobs.size()];
    Allocation a, b;
    const bool plain_ok = plain.Place(job, Fit::kBest, b);
    for (auto it = b.rbegin(); it != b.rend(); ++it) ledger.Release(*it);
    const bool fgd_ok = fgd.Place(job, Fit::kBest, a);
    ASSERT_EQ(fgd_ok, plain_ok) << job.id << " at step " << step;
    ++agreed;
    if (fgd_ok) live.push_back(a);
  }
  EXPECT_GT(agreed, 1000);
}

// A 0.5 share: plain best fit takes the first pool with room and breaks a free GPU there;
// FGD puts it on the shared GPU of the second pool, keeping the GPU that the popular
// 1-GPU class needs.
TEST(FragmentationTest, ShareDoesNotBreakAWholeGpu) {
  Catalog c = Catalog::BuiltIn();
  Cluster cluster = MakeCluster(
      {Pool(c, "p0", 1, 2, "A100-80GB", 0, 1, kAll), Pool(c, "p1", 1, 2, "A100-80GB", 0, 1, kAll)});
  const JobSpec half = Shared(c, "half", Sharing::kMps, 500, 8);
  for (bool fgd : {false, true}) {
    Ledger ledger(cluster);
    Fragmentation frag(ledger, false);
    for (int i = 0; i < 8; ++i) frag.Observe(Whole(c, "one", 1, 1));
    frag.Observe(half);
    Placer placer(ledger, fgd ? &frag : nullptr);
    ledger.Allocate(WholeGpus(NodeId(0), 0b01));  // p0: one free GPU
    ledger.Allocate(WholeGpus(NodeId(1), 0b01));  // p1: GPU1 shared, 0.5 used
    ledger.Allocate(Share(NodeId(1), 1, 500));
    const double before = frag.FragmentedGpus();
    Allocation a;
    ASSERT_TRUE(placer.Place(half, Fit::kBest, a));
    if (fgd) {
      EXPECT_EQ(a[0].node, NodeId(1));
      EXPECT_EQ(a[0].gpu, 1);
      EXPECT_LT(frag.FragmentedGpus(), before);
    } else {
      EXPECT_EQ(a[0].node, NodeId(0));  // plain best fit breaks p0's last free GPU
      EXPECT_GT(frag.FragmentedGpus(), before);
    }
  }
}

// Among shared GPUs best fit takes the tightest; FGD takes the one whose remainder the
// popular 0.5 class can still use.
TEST(FragmentationTest, ShareLeavesAUsableRemainder) {
  Catalog c = Catalog::BuiltIn();
  Cluster cluster = MakeCluster({Pool(c, "a", 2, 1, "A100-80GB", 0, 1, kAll)});
  const JobSpec small = Shared(c, "small", Sharing::kMps, 300, 4);
  for (bool fgd : {false, true}) {
    Ledger ledger(cluster);
    Fragmentation frag(ledger, false);
    for (int i = 0; i < 4; ++i) frag.Observe(Shared(c, "half", Sharing::kMps, 500, 4));
    frag.Observe(small);
    Placer placer(ledger, fgd ? &frag : nullptr);
    ledger.Allocate(Share(NodeId(0), 0, 400));  // 0.6 left: 0.3 after, too little for 0.5
    ledger.Allocate(Share(NodeId(1), 0, 200));  // 0.8 left: 0.5 after, still a 0.5 slot
    Allocation a;
    ASSERT_TRUE(placer.Place(small, Fit::kBest, a));
    EXPECT_EQ(a[0].node, fgd ? NodeId(1) : NodeId(0));
  }
}

// A MIG instance goes to a start slice that keeps the popular 4g.40gb placeable (4g
// only fits at slice 0), where plain best fit takes the first start.
TEST(FragmentationTest, MigKeepsThePopularProfilePlaceable) {
  Catalog c = Catalog::BuiltIn();
  Cluster cluster = MakeCluster({Pool(c, "a", 1, 1, "A100-80GB", 0, 1, kAll)});
  const JobSpec one = testing::Mig(c, "one", "1g.10gb");
  const JobSpec four = testing::Mig(c, "four", "4g.40gb");
  for (bool fgd : {false, true}) {
    Ledger ledger(cluster);
    Fragmentation frag(ledger, false);
    for (int i = 0; i < 4; ++i) frag.Observe(four);
    frag.Observe(one);
    Placer placer(ledger, fgd ? &frag : nullptr);
    Allocation a;
    ASSERT_TRUE(placer.Place(one, Fit::kBest, a));
    // FGD: any place past the 4g's (4, 5 or 6: they tie); best fit: the first.
    if (fgd) {
      EXPECT_GE(a[0].mig_start, 4);
    } else {
      EXPECT_EQ(a[0].mig_start, 0);
    }
    Allocation b;
    EXPECT_EQ(placer.Place(four, Fit::kBest, b), fgd);
  }
}

// Places FGD cannot tell apart are picked as its scheduler's random pick would, yet the
// same way on every run: among untouched nodes alike, by a hash of the place and the job
// (the first share of each of six jobs on an idle cluster does not always go to the first
// node); once a node is in use and no class of the mix tells the places apart, the share
// joins it (best fit's order) rather than opening another.
TEST(FragmentationTest, TiedPlacesArePickedTheSameWayOnEveryRun) {
  Catalog c = Catalog::BuiltIn();
  Cluster cluster = MakeCluster({Pool(c, "a", 4, 8, "A100-80GB", 0, 1, kAll)});
  std::vector<std::vector<NodeId>> runs;
  for (int run = 0; run < 2; ++run) {
    std::vector<NodeId> firsts;
    for (int i = 0; i < 6; ++i) {
      Ledger ledger(cluster);
      Fragmentation frag(ledger, false);
      frag.Observe(Shared(c, "s", Sharing::kMps, 300, 8));
      Placer placer(ledger, &frag);
      Allocation a;
      ASSERT_TRUE(
          placer.Place(Shared(c, "s" + std::to_string(i), Sharing::kMps, 300, 8), Fit::kBest, a));
      firsts.push_back(a[0].node);
    }
    runs.push_back(firsts);
  }
  EXPECT_EQ(runs[0], runs[1]);
  EXPECT_GT(std::set<NodeId>(runs[0].begin(), runs[0].end()).size(), 1u);
  Ledger ledger(cluster);
  Fragmentation frag(ledger, false);
  frag.Observe(Shared(c, "s", Sharing::kMps, 300, 8));
  Placer placer(ledger, &frag);
  std::set<NodeId> nodes;
  for (int i = 0; i < 6; ++i) {
    Allocation a;
    ASSERT_TRUE(
        placer.Place(Shared(c, "s" + std::to_string(i), Sharing::kMps, 300, 8), Fit::kBest, a));
    nodes.insert(a[0].node);
  }
  EXPECT_EQ(nodes.size(), 1u) << "six 0.3 shares fit one node's GPUs";
}

// Where no class of the mix tells places apart (a mix of 1-GPU jobs only: every node
// can hold them whatever it holds), FGD's changes tie to the unit and best fit's order
// decides: small jobs share a node in use, of either pool, before an untouched one, so
// whole nodes stay free for the first gang (before, a random pick among the tied nodes
// put four 1-GPU jobs on four nodes of an idle cluster).
TEST(FragmentationTest, SmallJobsTheMixCannotTellApartPackNodesAsBestFitDoes) {
  Catalog c = Catalog::BuiltIn();
  Cluster cluster =
      MakeCluster({Pool(c, "h", 4, 8, "H100-80GB", 2), Pool(c, "a", 2, 8, "A100-80GB", 2)});
  Ledger ledger(cluster);
  Fragmentation frag(ledger, false);
  for (int i = 0; i < 8; ++i) frag.Observe(Whole(c, "one", 1, 1));
  Placer placer(ledger, &frag);
  std::set<NodeId> nodes;
  for (int i = 0; i < 12; ++i) {
    Allocation a;
    ASSERT_TRUE(placer.Place(Whole(c, "s" + std::to_string(i), 1, 1), Fit::kBest, a));
    nodes.insert(a[0].node);
  }
  EXPECT_EQ(nodes.size(), 2u) << "12 one-GPU jobs on 8-GPU nodes need two";
}

// Whole GPUs: best fit takes the fullest node (2 free GPUs) and leaves it 1, which the
// popular 2-GPU class cannot use; FGD takes the node with 3 free and keeps a pair on both.
TEST(FragmentationTest, WholeWorkerKeepsPairsForThePopularClass) {
  Catalog c = Catalog::BuiltIn();
  Cluster cluster = MakeCluster({Pool(c, "a", 2, 4, "A100-80GB")});
  for (bool fgd : {false, true}) {
    Ledger ledger(cluster);
    Fragmentation frag(ledger, false);
    for (int i = 0; i < 4; ++i) frag.Observe(Whole(c, "pair", 1, 2));
    frag.Observe(Whole(c, "one", 1, 1));
    Placer placer(ledger, fgd ? &frag : nullptr);
    ledger.Allocate(WholeGpus(NodeId(0), 0b0011));  // node 0: 2 free
    ledger.Allocate(WholeGpus(NodeId(1), 0b0001));  // node 1: 3 free
    const double before = frag.FragmentedGpus();
    EXPECT_DOUBLE_EQ(before, 0.0);
    Allocation a;
    ASSERT_TRUE(placer.Place(Whole(c, "one", 1, 1), Fit::kBest, a));
    EXPECT_EQ(a[0].node, fgd ? NodeId(1) : NodeId(0));
    // Best fit: node 0's last GPU is fragmented for the pair class (weight 4 of 5).
    EXPECT_DOUBLE_EQ(frag.FragmentedGpus(), fgd ? 0.0 : 4.0 / 5.0);
  }
}

// policy.fragmentation_weights: gpus. Many 1-GPU workers and fewer 4- and 8-GPU ones: by
// count FGD puts a 1-GPU worker on the untouched node (it breaks only the 8-GPU shape's
// room there, the lighter loss by count); weighed by the GPUs each shape asks it goes
// beside the half-used node's work and keeps the whole node. The report's figure stays
// FGD's (by count) either way.
TEST(FragmentationTest, WeighedByGpusAWorkerKeepsTheWholeNodeBigShapesAsk) {
  Catalog c = Catalog::BuiltIn();
  Cluster cluster = MakeCluster({Pool(c, "a", 2, 8, "H100-80GB")});
  for (bool by_gpus : {false, true}) {
    Ledger ledger(cluster);
    Fragmentation frag(ledger, by_gpus);
    for (int i = 0; i < 10; ++i) frag.Observe(Whole(c, "one", 1, 1));
    for (int i = 0; i < 3; ++i) frag.Observe(Whole(c, "four", 1, 4));
    frag.Observe(Whole(c, "eight", 1, 8));
    EXPECT_EQ(frag.total_weight(), 14u);
    EXPECT_EQ(frag.placing_total(), by_gpus ? 10u + 12u + 8u : 14u);
    Placer placer(ledger, &frag);
    ledger.Allocate(WholeGpus(NodeId(0), 0x0f));  // node 0: 4 free, node 1: 8
    Allocation a;
    ASSERT_TRUE(placer.Place(Whole(c, "one", 1, 1), Fit::kBest, a));
    EXPECT_EQ(a[0].node, by_gpus ? NodeId(0) : NodeId(1)) << "by_gpus " << by_gpus;
    // By count: node 0 with 3 free loses them for the 4- and 8-GPU shapes (3 x 3 + 1 x 3);
    // else node 0's 4 and node 1's 7 for the 8-GPU shape (1 x 4 + 1 x 7); over 14.
    EXPECT_DOUBLE_EQ(frag.FragmentedGpus(), by_gpus ? 12.0 / 14 : 11.0 / 14);
  }
}

// The FGD search looks at kLooksPerBucket nodes per bucket; beyond them the exhaustive
// best-fit search still finds room.
TEST(FragmentationTest, FallsBackBeyondTheLookedAtNodes) {
  Catalog c = Catalog::BuiltIn();
  const int nodes = Placer::kLooksPerBucket + 10;
  Cluster cluster = MakeCluster({Pool(c, "a", nodes, 1, "A100-80GB")});
  Ledger ledger(cluster);
  Fragmentation frag(ledger, false);
  JobSpec job = Whole(c, "one", 1, 1);
  job.cpus_milli = 64'000;
  frag.Observe(job);
  Placer placer(ledger, &frag);
  for (int n = 0; n < Placer::kLooksPerBucket + 5; ++n) {  // no CPUs left on these
    WorkerAlloc cpu;
    cpu.node = NodeId(static_cast<uint32_t>(n));
    cpu.cpus_milli = 100'000;
    ledger.Allocate(cpu);
  }
  Allocation a;
  ASSERT_TRUE(placer.Place(job, Fit::kBest, a));
  EXPECT_EQ(a[0].node, NodeId(static_cast<uint32_t>(Placer::kLooksPerBucket + 5)));
}

TEST(FragmentationTest, LedgerIndexesSharedGpusByFreeShare) {
  Catalog c = Catalog::BuiltIn();
  Cluster cluster = MakeCluster({Pool(c, "a", 1, 2, "A100-80GB", 0, 1, kAll)});
  Ledger ledger(cluster);
  auto level_of = [&](uint32_t local, Sharing mode) {
    int found = -1;
    for (int l = 0; l < Ledger::kShareLevels; ++l) {
      if (ledger.shared_level(PoolId(0), mode, l).test(local)) {
        EXPECT_EQ(found, -1) << "in two levels";
        found = l;
      }
    }
    return found;
  };
  const WorkerAlloc a = Share(NodeId(0), 0, 250);
  ledger.Allocate(a);
  EXPECT_EQ(level_of(0, Sharing::kMps), 7);  // 750 left
  const WorkerAlloc b = Share(NodeId(0), 0, 700);
  ledger.Allocate(b);
  EXPECT_EQ(level_of(0, Sharing::kMps), 0);  // 50 left
  ledger.Allocate(Share(NodeId(0), 0, 50));
  EXPECT_EQ(level_of(0, Sharing::kMps), -1);  // full
  ledger.Release(b);
  EXPECT_EQ(level_of(0, Sharing::kMps), 7);  // 700 left
  const WorkerAlloc t = Share(NodeId(0), 1, 100, Sharing::kTimeslice);
  ledger.Allocate(t);
  EXPECT_EQ(level_of(1, Sharing::kTimeslice), 9);
  EXPECT_EQ(level_of(1, Sharing::kMps), -1);
  ledger.SetUp(NodeId(0), false);
  EXPECT_EQ(level_of(0, Sharing::kMps), -1);
  EXPECT_EQ(level_of(1, Sharing::kTimeslice), -1);
  ledger.SetUp(NodeId(0), true);
  EXPECT_EQ(level_of(0, Sharing::kMps), 7);
  ledger.Release(t);
  EXPECT_EQ(level_of(1, Sharing::kTimeslice), -1);  // free again
}

TEST(FragmentationTest, SchedulerReportsFragmentedGpus) {
  Catalog c = Catalog::BuiltIn();
  Cluster cluster = MakeCluster({Pool(c, "a", 1, 2, "A100-80GB", 0, 1, kAll)});
  QueueSpec q;
  q.name = "q";
  QueueTree queues = testing::MakeQueues({q});
  Scheduler s(cluster, queues, MakePolicy("gantry"));
  EXPECT_EQ(s.fragmented_gpus(), 0.0);
  s.Submit(Whole(c, "one", 1, 1), 0);
  s.Submit(Shared(c, "third", Sharing::kMps, 300, 4), 0);
  s.Schedule(0);
  // The 1-GPU worker holds GPU0 and the share GPU1: 0.7 left there, fragmented for the
  // 1-GPU class (weight 1), usable by the 0.3 class: F = 0.7 / 2.
  EXPECT_NEAR(s.fragmented_gpus(), 0.35, 1e-12);
}

}  // namespace
}  // namespace gantry::core
