#include "core/ledger.h"

#include <gtest/gtest.h>

#include <tuple>
#include <vector>

#include "core/invariants.h"
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

// A what-if's ledger: everything done after a checkpoint is undone by its rollback, in
// any order of holders, and what an inner checkpoint committed goes with the outer one.
TEST_F(LedgerTest, RollbackUndoesAWhatIfAndNestedCommitsFollowTheOuterMark) {
  const WorkerAlloc whole = WholeOn(0, 0b1111), mig = MigOn(1, 0, "3g.40gb", 4),
                    share = ShareOn(1, 1, Sharing::kMps, 400, 20);
  ledger_.Allocate(whole);
  ledger_.Allocate(mig);
  ledger_.Allocate(share);
  auto snapshot = [&] {
    std::vector<std::tuple<int, int, int, int, int64_t>> gpus;
    for (uint32_t g = 0; g < cluster_.gpu_count(); ++g) {
      const GpuState& s = ledger_.gpu(GpuId(g));
      gpus.emplace_back(static_cast<int>(s.mode), s.mig_memory, s.mig_compute, s.share_used,
                        s.vram_used);
    }
    return std::tuple{gpus, ledger_.used_units(), ledger_.node(NodeId(0)).free_whole,
                      ledger_.node(NodeId(1)).free_cpus_milli,
                      ledger_.nodes_with_free(PoolId(0), 4).test(0)};
  };
  const auto before = snapshot();

  const Ledger::Mark outer = ledger_.Checkpoint();
  ledger_.Release(whole);  // a victim's GPUs, released in the what-if
  ledger_.Release(share);
  ledger_.Allocate(WholeOn(0, 0b11111111));  // the job placed where they were
  const Ledger::Mark inner = ledger_.Checkpoint();
  ledger_.Release(mig);
  ledger_.Allocate(MigOn(1, 0, "7g.80gb", 0));
  ledger_.Commit(inner);  // kept for now ...
  EXPECT_EQ(ledger_.node(NodeId(0)).free_whole, 0);
  const Ledger::Mark dropped = ledger_.Checkpoint();
  ledger_.Allocate(ShareOn(1, 2, Sharing::kTimeslice, 500, 10));
  ledger_.Rollback(dropped);  // ... this one undone at once
  EXPECT_EQ(ledger_.gpu(ledger_.gpu_id(NodeId(1), 2)).mode, GpuMode::kFree);
  ledger_.Rollback(outer);  // ... and all of it undone with the outer mark
  EXPECT_EQ(snapshot(), before);

  // A committed outermost checkpoint leaves its changes.
  const Ledger::Mark kept = ledger_.Checkpoint();
  ledger_.Release(share);
  ledger_.Commit(kept);
  EXPECT_EQ(ledger_.gpu(ledger_.gpu_id(NodeId(1), 1)).mode, GpuMode::kFree);
}

// Invariants hold in every build (core/invariants.h): what another worker holds is never
// given again, and the audit finds every count the ledger keeps equal to its GPU states
// through a long run of allocations, releases, nodes going down and up, and rollbacks.
TEST_F(LedgerTest, AnythingGivenTwiceIsRefusedInEveryBuild) {
  ledger_.Allocate(WholeOn(0, 0b11));
  EXPECT_THROW(ledger_.Allocate(WholeOn(0, 0b10)), InvariantBroken);
  ledger_.Allocate(MigOn(1, 0, "3g.40gb", 0));
  EXPECT_THROW(ledger_.Allocate(MigOn(1, 0, "3g.40gb", 0)), InvariantBroken);
  EXPECT_THROW(ledger_.Allocate(ShareOn(1, 0, Sharing::kMps, 500, 10)), InvariantBroken);
  ledger_.Allocate(ShareOn(1, 1, Sharing::kMps, 600, 10));
  EXPECT_THROW(ledger_.Allocate(ShareOn(1, 1, Sharing::kMps, 500, 10)), InvariantBroken);
  EXPECT_NO_THROW(ledger_.Audit());
}

TEST_F(LedgerTest, TheAuditAgreesThroughARandomRun) {
  uint64_t x = 88172645463325252ull;  // xorshift: the same run every time
  auto next = [&x] {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return x;
  };
  std::vector<WorkerAlloc> held;
  int given = 0, audited = 0;
  for (int step = 0; step < 4000; ++step) {
    const uint64_t r = next();
    const uint32_t node = static_cast<uint32_t>(r % 2);
    if (r % 7 == 0 && !held.empty()) {  // release one
      const size_t i = (r >> 8) % held.size();
      ledger_.Release(held[i]);
      held.erase(held.begin() + static_cast<std::ptrdiff_t>(i));
    } else if (r % 11 == 0) {  // a what-if, rolled back
      const Ledger::Mark mark = ledger_.Checkpoint();
      for (const WorkerAlloc& w : held) ledger_.Release(w);
      ledger_.Rollback(mark);
    } else if (r % 13 == 0) {  // a node goes down and comes back (its holdings stay)
      ledger_.SetUp(NodeId(node), false);
      ledger_.Audit();
      ledger_.SetUp(NodeId(node), true);
    } else {
      const int gpu = static_cast<int>((r >> 8) % 8);
      WorkerAlloc w;
      switch ((r >> 16) % 3) {
        case 0:
          w = WholeOn(node, uint64_t{1} << gpu);
          break;
        case 1:
          w = MigOn(node, gpu, "1g.10gb", static_cast<int>((r >> 24) % 7));
          break;
        default:
          w = ShareOn(node, gpu, Sharing::kTimeslice, 250, 5);
      }
      if (!ledger_.Fits(w)) continue;
      ledger_.Allocate(w);
      held.push_back(w);
      ++given;
    }
    if (step % 16 == 0) {
      ledger_.Audit();
      ++audited;
    }
  }
  ledger_.Audit();
  EXPECT_GT(given, 300);
  EXPECT_GT(audited, 100);
}

}  // namespace
}  // namespace gantry::core
