#include "core/attained.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "core/scheduler.h"
#include "test_util.h"

namespace gantry::core {
namespace {

using testing::MakeCluster;
using testing::MakeQueues;
using testing::Pool;
using testing::Whole;

using testing::kS;

TEST(GittinsIndexTest, FavoursJobsLikelyToFinishSoonPerSecondOfService) {
  const std::vector<Ticks> runs = {100, 100, 100, 1000};
  // At 0: stopping at 100 finishes 3 of 4 for 3x100 + 1x100 of service: 3/400.
  EXPECT_DOUBLE_EQ(GittinsIndex(runs, 0), 3.0 / 400);
  // Past the short ones only the long one is left: 1 job per 900 more.
  EXPECT_DOUBLE_EQ(GittinsIndex(runs, 100), 1.0 / 900);
  EXPECT_DOUBLE_EQ(GittinsIndex(runs, 550), 1.0 / 450);
  // Outlived every job seen: the worst bet.
  EXPECT_EQ(GittinsIndex(runs, 1000), 0);
  EXPECT_EQ(GittinsIndex({}, 0), 0);
}

TEST(LasLevelTest, CountsTheThresholdsReached) {
  const std::vector<double> th = {10, 100};
  EXPECT_EQ(LasLevel(th, 0), 0);
  EXPECT_EQ(LasLevel(th, 9.9), 0);
  EXPECT_EQ(LasLevel(th, 10), 1);
  EXPECT_EQ(LasLevel(th, 150), 2);
  EXPECT_EQ(LasLevel({}, 1e9), 0);
}

// Two 8-GPU nodes and one queue capped at 8 GPUs, ordered as the test asks: its limit,
// not the GPUs, is what jobs wait for.
class AttainedOrderTest : public ::testing::TestWithParam<QueueOrder> {
 protected:
  AttainedOrderTest()
      : catalog_(Catalog::BuiltIn()),
        cluster_(MakeCluster({Pool(catalog_, "h", 2, 8, "H100-80GB")})),
        queues_(MakeQueues({Queue(GetParam())})),
        sched_(cluster_, queues_, MakePolicy("gantry"), Params()) {}

  static QueueSpec Queue(QueueOrder order) {
    QueueSpec q;
    q.name = "train";
    q.guaranteed = 8 * kGpuUnits;
    q.burst = 8 * kGpuUnits;
    q.order = order;
    return q;
  }
  static PolicyParams Params() {
    PolicyParams p;
    p.las_thresholds_gpu_s = {1000};
    return p;
  }

  JobId Submit(const char* id, Ticks now, Ticks checkpoint = kS, int gpus = 8) {
    JobSpec j = Whole(catalog_, id, 1, gpus);
    j.checkpoint = checkpoint;
    j.grace = 0;
    return sched_.Submit(j, now);
  }
  std::vector<Decision> Pass(Ticks now) { return sched_.Schedule(now); }
  static std::vector<JobId> Preempted(const std::vector<Decision>& ds,
                                      std::string* reason = nullptr) {
    std::vector<JobId> out;
    for (const auto& d : ds) {
      if (d.kind != Decision::Kind::kPreempt) continue;
      out.push_back(d.job);
      if (reason) *reason = d.reason;
    }
    return out;
  }
  // Three jobs of 100 s run one after the other, from t=0 to t=300 s: the queue's history.
  void ShortHistory() {
    for (int i = 0; i < 3; ++i) {
      const Ticks t = i * 100 * kS;
      JobId s = Submit(("short" + std::to_string(i)).c_str(), t);
      Pass(t);
      ASSERT_EQ(sched_.job(s).phase, Phase::kRunning);
      sched_.Finish(s, t + 100 * kS, true);
    }
  }

  Catalog catalog_;
  Cluster cluster_;
  QueueTree queues_;
  Scheduler sched_;
};

TEST_P(AttainedOrderTest, AJobThatHasHadLessServiceTakesTheGpusOfOneThatHadMore) {
  ShortHistory();
  JobId long_job = Submit("long", 300 * kS);
  Pass(300 * kS);
  ASSERT_EQ(sched_.job(long_job).phase, Phase::kRunning);
  // At 450 s the long job has run 150 s (1,200 GPU-seconds), past every job seen and past
  // the LAS threshold; a new job has had nothing.
  JobId fresh = Submit("fresh", 450 * kS);
  std::string reason;
  auto ds = Pass(450 * kS);
  if (GetParam() == QueueOrder::kFairShare) {
    EXPECT_TRUE(Preempted(ds).empty());  // arrival order: the new job waits
    EXPECT_EQ(sched_.job(fresh).phase, Phase::kPending);
    return;
  }
  EXPECT_EQ(Preempted(ds, &reason), std::vector<JobId>{long_job});
  EXPECT_NE(reason.find(std::string(Name(GetParam())) + " order"), std::string::npos) << reason;
  sched_.Requeue(long_job, 450 * kS);
  // A second new job arrives after the preempted one was requeued; when the first new job
  // ends, it still goes first: it ranks ahead of the job with 150 s of service.
  JobId later = Submit("later", 460 * kS);
  Pass(460 * kS);
  EXPECT_EQ(sched_.job(fresh).phase, Phase::kRunning);
  sched_.Finish(fresh, 560 * kS, true);
  Pass(560 * kS);
  EXPECT_EQ(sched_.job(later).phase, Phase::kRunning);
  EXPECT_EQ(sched_.job(long_job).phase, Phase::kPending);
}

// The attained-service orders only.
class RankedOrderTest : public AttainedOrderTest {};

TEST_P(RankedOrderTest, JobsThatRankAlikeKeepTheirArrivalOrderAndNobodyIsPreempted) {
  ShortHistory();
  JobId first = Submit("first", 300 * kS);
  Pass(300 * kS);
  // At 305 s the running job has had 5 s (40 GPU-seconds): in the same LAS level and, by
  // whole quanta (10 s), the same Gittins rank as a job that has had none.
  JobId second = Submit("second", 305 * kS);
  EXPECT_TRUE(Preempted(Pass(305 * kS)).empty());
  EXPECT_EQ(sched_.job(second).phase, Phase::kPending);
  EXPECT_EQ(sched_.job(first).phase, Phase::kRunning);
}

TEST_P(RankedOrderTest, AVictimThatCheckpointsIsTakenOnlyJustAfterACheckpoint) {
  ShortHistory();
  JobId long_job = Submit("long", 300 * kS, 300 * kS);  // checkpoints at 600 s, 900 s, ...
  Pass(300 * kS);
  Submit("fresh", 450 * kS);
  EXPECT_TRUE(Preempted(Pass(450 * kS)).empty());  // 150 s of work would be lost
  EXPECT_LE(sched_.next_wakeup(), 600 * kS);
  EXPECT_TRUE(Preempted(Pass(595 * kS)).empty());
  EXPECT_EQ(Preempted(Pass(600 * kS)), std::vector<JobId>{long_job});  // just checkpointed
}

std::string OrderName(const ::testing::TestParamInfo<QueueOrder>& param) {
  return param.param == QueueOrder::kFairShare ? "FairShare"
         : param.param == QueueOrder::kLas     ? "Las"
                                               : "Gittins";
}

TEST_P(RankedOrderTest, RoomUnderTheBurstLimitIsHeldForTheJobThatPreemptedForIt) {
  ShortHistory();
  JobId a = Submit("a", 300 * kS, kS, 4);
  JobId b = Submit("b", 300 * kS, kS, 4);
  Pass(300 * kS);
  ASSERT_EQ(sched_.job(b).phase, Phase::kRunning);  // the queue at its limit, 8 GPUs idle
  // At 600 s each has had 300 s (1,200 GPU-seconds): both must go for 8 GPUs of room.
  JobId fresh = Submit("fresh", 600 * kS);
  auto victims = Preempted(Pass(600 * kS));
  std::sort(victims.begin(), victims.end());
  EXPECT_EQ(victims, (std::vector<JobId>{a, b}));
  // a leaves first; the room it frees under the limit stays fresh's, though GPUs are
  // free: neither a nor a newcomer of the queue takes it.
  sched_.Requeue(a, 610 * kS);
  JobId newcomer = Submit("newcomer", 610 * kS, kS, 4);
  Pass(610 * kS);
  EXPECT_EQ(sched_.job(a).phase, Phase::kPending);
  EXPECT_NE(sched_.job(a).wait_reason.find("preempted for job fresh"), std::string::npos)
      << sched_.job(a).wait_reason;
  EXPECT_EQ(sched_.job(newcomer).phase, Phase::kPending);
  EXPECT_NE(sched_.job(newcomer).wait_reason.find("held for job fresh"), std::string::npos)
      << sched_.job(newcomer).wait_reason;
  sched_.Requeue(b, 620 * kS);
  Pass(620 * kS);
  EXPECT_EQ(sched_.job(fresh).phase, Phase::kRunning);
  EXPECT_EQ(sched_.job(a).phase, Phase::kPending);
}

INSTANTIATE_TEST_SUITE_P(Orders, AttainedOrderTest,
                         ::testing::Values(QueueOrder::kFairShare, QueueOrder::kLas,
                                           QueueOrder::kGittins),
                         OrderName);
INSTANTIATE_TEST_SUITE_P(Orders, RankedOrderTest,
                         ::testing::Values(QueueOrder::kLas, QueueOrder::kGittins), OrderName);

}  // namespace
}  // namespace gantry::core
