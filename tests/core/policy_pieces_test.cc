// The gantry policy's pieces on their own (core/policy/reserver.h, victims.h): what each
// answers on a cluster small enough to reason about by hand.
#include <gtest/gtest.h>

#include <functional>

#include "core/policy/queue_order.h"
#include "core/policy/reserver.h"
#include "core/policy/victims.h"
#include "test_util.h"

namespace gantry::core {
namespace {

using testing::MakeCluster;
using testing::MakeQueues;
using testing::Pool;
using testing::Whole;

using testing::kS;

class PiecesTest : public ::testing::Test {
 protected:
  PiecesTest()
      : catalog_(Catalog::BuiltIn()),
        cluster_(MakeCluster({Pool(catalog_, "h", 2, 8, "H100-80GB")})),
        queues_(MakeQueues({QueueSpec{"prod", "", 8 * kGpuUnits, -1, 1, {}, {}, false, {}, {}, {}},
                            QueueSpec{"lab", "", 0, -1, 1, {}, {}, false, {}, {}, {}}})),
        sched_(cluster_, queues_, MakePolicy("fifo")) {}
  JobId Start(const char* id, int gpus, const char* queue, Tier tier, Ticks estimate, Ticks now) {
    JobSpec j = Whole(catalog_, id, 1, gpus);
    j.queue = *queues_.Find(queue);
    j.tier = tier;
    j.runtime_estimate = estimate;
    const JobId job = sched_.Submit(j, now);
    sched_.Schedule(now);
    EXPECT_EQ(sched_.job(job).phase, Phase::kRunning) << id;
    return job;
  }
  JobId Pending(const char* id, int replicas, int gpus, const char* queue, Ticks now) {
    JobSpec j = Whole(catalog_, id, replicas, gpus);
    j.queue = *queues_.Find(queue);
    const JobId job = sched_.Submit(j, now);
    sched_.Schedule(now);
    EXPECT_EQ(sched_.job(job).phase, Phase::kPending) << id;
    return job;
  }
  GpuUnits Used() const { return sched_.ledger().used_units(); }

  Catalog catalog_;
  Cluster cluster_;
  QueueTree queues_;
  Scheduler sched_;
  const std::function<bool(JobId)> never_ = [](JobId) { return false; };
};

TEST_F(PiecesTest, AReservationStartsWhenEnoughRunningJobsAreExpectedToHaveEnded) {
  Start("short", 8, "lab", Tier::kStandard, 100 * kS, 0);
  Start("long", 8, "lab", Tier::kStandard, 1000 * kS, 0);
  const JobId gang = Pending("gang", 2, 8, "lab", 10 * kS);
  Reserver reserver;
  Ticks start = -1;
  Allocation fit;
  const GpuUnits before = Used();
  ASSERT_TRUE(reserver.Earliest(sched_, gang, 10 * kS, never_, start, fit));
  EXPECT_EQ(start, 1000 * kS) << "both nodes must be free: the long job's end";
  EXPECT_EQ(fit.size(), 2u);
  EXPECT_EQ(Used(), before) << "the what-if leaves the ledger as it was";

  // A job past its estimate is expected to run as long again as it has run, unless
  // ends_now says it ends now (a backfilled job past its lease).
  const JobId one = Pending("one", 1, 8, "lab", 200 * kS);
  ASSERT_TRUE(reserver.Earliest(sched_, one, 200 * kS, never_, start, fit));
  EXPECT_EQ(start, 400 * kS) << "the short job ran 200 s of its 100: 200 s more";
  reserver.NewPass();
  const std::function<bool(JobId)> ends_now = [](JobId) { return true; };
  ASSERT_TRUE(reserver.Earliest(sched_, one, 200 * kS, ends_now, start, fit));
  EXPECT_EQ(start, 200 * kS);
}

TEST_F(PiecesTest, AShapeThatFindsNoStartFailsForTheRestOfThePass) {
  Start("a", 8, "lab", Tier::kStandard, 100 * kS, 0);
  const JobId wide = Pending("wide", 2, 8, "lab", 0);
  Reserver reserver;
  Ticks start = -1;
  Allocation fit;
  ASSERT_TRUE(reserver.Earliest(sched_, wide, 0, never_, start, fit));
  sched_.SetNodeUp(NodeId(1), false);  // now it cannot fit however long it waits
  EXPECT_FALSE(reserver.Earliest(sched_, wide, 0, never_, start, fit));
  sched_.SetNodeUp(NodeId(1), true);
  EXPECT_FALSE(reserver.Earliest(sched_, wide, 0, never_, start, fit)) << "cached for the pass";
  reserver.NewPass();
  EXPECT_TRUE(reserver.Earliest(sched_, wide, 0, never_, start, fit));
}

TEST_F(PiecesTest, VictimsAreBestEffortFirstThenBorrowedAndNoMoreThanNeeded) {
  // prod is guaranteed 8 GPUs and holds none; lab borrows them all.
  const JobId notebook = Start("notebook", 4, "lab", Tier::kBestEffort, 1000 * kS, 0);
  const JobId train = Start("train", 4, "lab", Tier::kStandard, 1000 * kS, 0);
  Start("other", 8, "lab", Tier::kStandard, 1000 * kS, 0);
  const JobId serve = Pending("serve", 1, 4, "prod", 10 * kS);
  QueueOrdering ordering;
  ordering.Init(sched_);
  VictimSelector victims(ordering);
  std::vector<JobId> needed;
  Allocation fit;
  const GpuUnits before = Used();
  ASSERT_TRUE(victims.Choose(sched_, sched_.job(serve), VictimSelector::Mode::kGuarantee, ~ModelMask{0}, 0,
                             10 * kS, never_, needed, fit));
  EXPECT_EQ(needed, std::vector<JobId>{notebook}) << "one best-effort job makes the room";
  EXPECT_EQ(fit.size(), 1u);
  EXPECT_EQ(Used(), before);

  // Asking 8: the notebook and the borrowed 4-GPU job on its node, not the 8-GPU job.
  const JobId big = Pending("big", 1, 8, "prod", 10 * kS);
  victims.NewPass();
  ASSERT_TRUE(victims.Choose(sched_, sched_.job(big), VictimSelector::Mode::kGuarantee, ~ModelMask{0}, 0,
                             10 * kS, never_, needed, fit));
  std::sort(needed.begin(), needed.end());
  EXPECT_EQ(needed, (std::vector<JobId>{notebook, train}));
  EXPECT_EQ(Used(), before);
}

}  // namespace
}  // namespace gantry::core
