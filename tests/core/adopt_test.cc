// Scheduler::Adopt, gantryd's recovery after a restart: a fresh scheduler given the
// running jobs' allocations must end up with exactly the ledger the old one had.
#include "core/scheduler.h"

#include <gtest/gtest.h>

#include <random>

#include "test_util.h"

namespace gantry::core {
namespace {

using namespace testing;

struct World {
  Cluster cluster;
  QueueTree queues;
};

World MakeWorld() {
  const Catalog c = Catalog::BuiltIn();
  const SharingMask sharing = Bit(Sharing::kExclusive) | Bit(Sharing::kMig) | Bit(Sharing::kMps);
  return World{MakeCluster({testing::Pool(c, "h100", 4, 8, "H100-80GB", 2, 1, sharing)}),
               MakeQueues({})};
}

JobSpec RandomJob(const Catalog& c, std::mt19937& rng, int i) {
  const std::string id = "j" + std::to_string(i);
  switch (rng() % 6) {
    case 0:
      return Whole(c, id, 1, 1 + static_cast<int>(rng() % 4));
    case 1:
      return Whole(c, id, 2, 2 + static_cast<int>(rng() % 3), Topology::kNode);
    case 2:
      return Whole(c, id, 1, 8);
    case 3: {
      const char* profiles[] = {"1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb"};
      return Mig(c, id, profiles[rng() % 4]);
    }
    default:
      return Shared(c, id, Sharing::kMps, 100 + 50 * static_cast<int>(rng() % 10), 5);
  }
}

void ExpectSameLedger(const Ledger& a, const Ledger& b, const Cluster& cluster) {
  for (uint32_t g = 0; g < cluster.gpu_count(); ++g) {
    const GpuState& x = a.gpu(GpuId(g));
    const GpuState& y = b.gpu(GpuId(g));
    EXPECT_EQ(x.mode, y.mode) << "gpu " << g;
    EXPECT_EQ(x.mig_memory, y.mig_memory) << "gpu " << g;
    EXPECT_EQ(x.mig_compute, y.mig_compute) << "gpu " << g;
    EXPECT_EQ(x.share_used, y.share_used) << "gpu " << g;
    EXPECT_EQ(x.vram_used, y.vram_used) << "gpu " << g;
  }
  for (uint32_t n = 0; n < cluster.nodes().size(); ++n) {
    EXPECT_EQ(a.node(NodeId(n)).free_whole, b.node(NodeId(n)).free_whole);
    EXPECT_EQ(a.node(NodeId(n)).free_cpus_milli, b.node(NodeId(n)).free_cpus_milli);
    EXPECT_EQ(a.node(NodeId(n)).up, b.node(NodeId(n)).up);
  }
  EXPECT_EQ(a.used_units(), b.used_units());
}

TEST(Adopt, RestoresExactlyTheOldLedger) {
  World w = MakeWorld();
  const Catalog& c = w.cluster.catalog();
  for (uint32_t seed = 1; seed <= 30; ++seed) {
    std::mt19937 rng(seed);
    Scheduler old(w.cluster, w.queues, MakePolicy("fifo"));
    std::vector<JobId> ids;
    for (int i = 0; i < 40; ++i) ids.push_back(old.Submit(RandomJob(c, rng, i), 0));
    (void)old.Schedule(0);
    // Holes: end some jobs, start others into the gaps.
    for (JobId id : ids) {
      if (old.job(id).phase == Phase::kRunning && rng() % 3 == 0) old.Finish(id, 10);
    }
    for (int i = 40; i < 60; ++i) (void)old.Submit(RandomJob(c, rng, i), 20);
    (void)old.Schedule(20);

    Scheduler fresh(w.cluster, w.queues, MakePolicy("fifo"));
    int adopted = 0;
    for (uint32_t i = 0; i < old.job_count(); ++i) {
      const JobRecord& rec = old.job(JobId(i));
      if (rec.phase != Phase::kRunning) continue;
      const JobId id = fresh.Submit(rec.spec, rec.submit);
      std::string why;
      ASSERT_TRUE(fresh.Adopt(id, rec.alloc, rec.last_start, &why))
          << "seed " << seed << " job " << rec.spec.id << ": " << why;
      EXPECT_EQ(fresh.job(id).phase, Phase::kRunning);
      EXPECT_EQ(fresh.job(id).last_start, rec.last_start);
      ++adopted;
    }
    EXPECT_GT(adopted, 5) << "seed " << seed;
    EXPECT_TRUE(fresh.Schedule(30).empty());
    ExpectSameLedger(old.ledger(), fresh.ledger(), w.cluster);
    for (uint32_t q = 0; q < w.queues.size(); ++q) {
      EXPECT_EQ(old.queue_usage(QueueId(q)), fresh.queue_usage(QueueId(q)));
    }
  }
}

TEST(Adopt, RefusesAnAllocationThatOverlapsAnother) {
  World w = MakeWorld();
  const Catalog& c = w.cluster.catalog();
  Scheduler s(w.cluster, w.queues, MakePolicy("fifo"));
  WorkerAlloc gpus01;
  gpus01.node = NodeId(0);
  gpus01.gpu_mask = 0b11;
  const JobId a = s.Submit(Whole(c, "a", 1, 2), 0);
  ASSERT_TRUE(s.Adopt(a, {gpus01}, 0));
  WorkerAlloc gpus12 = gpus01;
  gpus12.gpu_mask = 0b110;
  const JobId b = s.Submit(Whole(c, "b", 1, 2), 0);
  std::string why;
  ASSERT_FALSE(s.Adopt(b, {gpus12}, 0, &why));
  EXPECT_NE(why.find("overlaps"), std::string::npos) << why;
  EXPECT_EQ(s.job(b).phase, Phase::kPending);
  EXPECT_EQ(s.ledger().node(NodeId(0)).free_whole, 6);
  // Every other node is still up and unblocked.
  for (uint32_t n = 1; n < w.cluster.nodes().size(); ++n)
    EXPECT_EQ(s.ledger().node(NodeId(n)).free_whole, 8);
}

TEST(Adopt, RefusesWhatTryStartWouldForTheQueuesBurstLimit) {
  World w = MakeWorld();
  const Catalog& c = w.cluster.catalog();
  const QueueTree queues =
      MakeQueues({QueueSpec{"q", "", 0, 6 * kGpuUnits, 1, {}, {}, false, {}, {}, {}, {}}});
  Scheduler s(w.cluster, queues, MakePolicy("fifo"));
  WorkerAlloc four;
  four.node = NodeId(1);
  four.gpu_mask = 0b1111;
  const JobId a = s.Submit(Whole(c, "a", 1, 4), 0);
  std::string why;
  ASSERT_TRUE(s.Adopt(a, {four}, 5, &why)) << why;
  EXPECT_EQ(s.job(a).phase, Phase::kRunning);
  EXPECT_EQ(s.job(a).last_start, 5);
  EXPECT_EQ(s.queue_usage(QueueId(0)), 4 * kGpuUnits);
  // Another 4 GPUs would take the queue to 8 of its 6: refused, nothing held for it.
  WorkerAlloc more = four;
  more.node = NodeId(2);
  const JobId b = s.Submit(Whole(c, "b", 1, 4), 0);
  ASSERT_FALSE(s.Adopt(b, {more}, 5, &why));
  EXPECT_NE(why.find("burst_gpus"), std::string::npos) << why;
  EXPECT_EQ(s.job(b).phase, Phase::kPending);
  EXPECT_EQ(s.ledger().node(NodeId(2)).free_whole, 8);
  EXPECT_EQ(s.queue_usage(QueueId(0)), 4 * kGpuUnits);
}

}  // namespace
}  // namespace gantry::core
