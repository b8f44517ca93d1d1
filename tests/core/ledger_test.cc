#include "core/ledger.h"

#include <gtest/gtest.h>

#include "test_util.h"

namespace gantry::core {
namespace {

using testing::MakeCluster;
using testing::Pool;

class LedgerTest : public ::testing::Test {
 protected:
  LedgerTest()
      : catalog_(Catalog::BuiltIn()),
        cluster_(MakeCluster({Pool(catalog_, "h", 2, 8, "H100-80GB", 0, 2,
                                   Bit(Sharing::kExclusive) | Bit(Sharing::kMig) |
                                       Bit(Sharing::kMps) | Bit(Sharing::kTimeslice))})),
        ledger_(cluster_) {}

  WorkerAlloc WholeOn(uint32_t node, uint64_t mask) {
    WorkerAlloc w;
    w.node = NodeId(node);
    w.gpu_mask = mask;
    return w;
  }
  WorkerAlloc MigOn(uint32_t node, int gpu, const char* profile, int start) {
    WorkerAlloc w;
    w.node = NodeId(node);
    w.sharing = Sharing::kMig;
    w.gpu = static_cast<int8_t>(gpu);
    w.mig_profile = static_cast<int8_t>(catalog_.FindProfile(cluster_.node(w.node).model, profile));
    w.mig_start = static_cast<int8_t>(start);
    return w;
  }
  WorkerAlloc ShareOn(uint32_t node, int gpu, Sharing mode, int milli, int64_t vram_gb) {
    WorkerAlloc w;
    w.node = NodeId(node);
    w.sharing = mode;
    w.gpu = static_cast<int8_t>(gpu);
    w.share_milli = static_cast<int16_t>(milli);
    w.vram_bytes = vram_gb * kGB;
    return w;
  }

  Catalog catalog_;
  Cluster cluster_;
  Ledger ledger_;
};

TEST_F(LedgerTest, WholeGpusMoveBetweenBucketsAndBack) {
  const PoolId pool(0);
  EXPECT_TRUE(ledger_.nodes_with_free(pool, 8).test(0));
  ledger_.Allocate(WholeOn(0, 0b111));
  EXPECT_EQ(ledger_.node(NodeId(0)).free_whole, 5);
  EXPECT_FALSE(ledger_.nodes_with_free(pool, 8).test(0));
  EXPECT_TRUE(ledger_.nodes_with_free(pool, 5).test(0));
  EXPECT_EQ(ledger_.domain_free(NodeId(0), 0), 1);
  EXPECT_EQ(ledger_.domain_free(NodeId(0), 1), 4);
  EXPECT_EQ(ledger_.used_units(), 3 * kGpuUnits);
  EXPECT_FALSE(ledger_.Fits(WholeOn(0, 0b100)));  // GPU 2 is taken
  ledger_.Release(WholeOn(0, 0b111));
  EXPECT_TRUE(ledger_.nodes_with_free(pool, 8).test(0));
  EXPECT_EQ(ledger_.used_units(), 0);
}

TEST_F(LedgerTest, MigInstancesNeverOverlapAndComputeStaysWithinSeven) {
  ledger_.Allocate(MigOn(0, 0, "4g.40gb", 0));
  EXPECT_FALSE(ledger_.Fits(MigOn(0, 0, "3g.40gb", 0)));  // memory slices 0-3 taken
  EXPECT_TRUE(ledger_.Fits(MigOn(0, 0, "3g.40gb", 4)));
  ledger_.Allocate(MigOn(0, 0, "3g.40gb", 4));
  // 7 compute slices in use: even a free memory slice would not do, and there is none.
  EXPECT_FALSE(ledger_.Fits(MigOn(0, 0, "1g.10gb", 6)));
  EXPECT_EQ(ledger_.MigStart(ledger_.gpu_id(NodeId(0), 0), 0), -1);
  EXPECT_FALSE(ledger_.Fits(WholeOn(0, 0b1)));  // a MIG GPU is not whole-free
  EXPECT_EQ(ledger_.used_units(), 7 * kUnitsPerMigSlice);
  ledger_.Release(MigOn(0, 0, "4g.40gb", 0));
  ledger_.Release(MigOn(0, 0, "3g.40gb", 4));
  EXPECT_EQ(ledger_.gpu(ledger_.gpu_id(NodeId(0), 0)).mode, GpuMode::kFree);
  EXPECT_EQ(ledger_.node(NodeId(0)).free_whole, 8);
}

TEST_F(LedgerTest, SevenSmallestInstancesFillAGpuAndTheIndexFollows) {
  const int p = catalog_.FindProfile(cluster_.node(NodeId(0)).model, "1g.10gb");
  for (int s = 0; s < 7; ++s) {
    ASSERT_TRUE(ledger_.Fits(MigOn(0, 1, "1g.10gb", s))) << s;
    ledger_.Allocate(MigOn(0, 1, "1g.10gb", s));
    const bool room = s < 6;
    EXPECT_EQ(ledger_.mig_fit(PoolId(0), p).test(1), room) << s;
  }
  EXPECT_FALSE(ledger_.Fits(MigOn(0, 1, "1g.10gb", 7)));  // slice 7 is not a 1g start
}

TEST_F(LedgerTest, SharesAddUpToAtMostOneAndVramFits) {
  ledger_.Allocate(ShareOn(1, 3, Sharing::kMps, 500, 30));
  EXPECT_FALSE(ledger_.Fits(ShareOn(1, 3, Sharing::kTimeslice, 100, 1)));  // modes don't mix
  EXPECT_FALSE(ledger_.Fits(ShareOn(1, 3, Sharing::kMps, 600, 1)));        // 1.1 of a GPU
  EXPECT_FALSE(ledger_.Fits(ShareOn(1, 3, Sharing::kMps, 200, 60)));       // 90 GB > 80 GB
  EXPECT_TRUE(ledger_.Fits(ShareOn(1, 3, Sharing::kMps, 500, 50)));
  ledger_.Allocate(ShareOn(1, 3, Sharing::kMps, 500, 50));
  const uint32_t local = 8 + 3;  // pool-local GPU index of node 1, GPU 3
  EXPECT_FALSE(ledger_.shared(PoolId(0), Sharing::kMps).test(local));  // full
  ledger_.Release(ShareOn(1, 3, Sharing::kMps, 500, 30));
  EXPECT_TRUE(ledger_.shared(PoolId(0), Sharing::kMps).test(local));
  EXPECT_EQ(ledger_.used_units(), 500 * kUnitsPerShareMilli);
}

TEST_F(LedgerTest, CpuAndMemoryAreBounded) {
  WorkerAlloc w = WholeOn(0, 0b1);
  w.cpus_milli = 100'000;
  ledger_.Allocate(w);
  WorkerAlloc more = WholeOn(0, 0b10);
  more.cpus_milli = 30'000;  // 130 of 128 CPUs
  EXPECT_FALSE(ledger_.Fits(more));
  more.cpus_milli = 28'000;
  EXPECT_TRUE(ledger_.Fits(more));
}

TEST_F(LedgerTest, DownNodesLeaveEveryIndex) {
  ledger_.SetUp(NodeId(1), false);
  EXPECT_FALSE(ledger_.nodes_with_free(PoolId(0), 8).test(1));
  EXPECT_FALSE(ledger_.Fits(WholeOn(1, 0b1)));
  EXPECT_EQ(ledger_.up_units(), 8 * kGpuUnits);
  ledger_.SetUp(NodeId(1), true);
  EXPECT_TRUE(ledger_.nodes_with_free(PoolId(0), 8).test(1));
  EXPECT_EQ(ledger_.up_units(), 16 * kGpuUnits);
}

}  // namespace
}  // namespace gantry::core
