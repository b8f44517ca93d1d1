#include "core/policy/gantry.h"

#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>

#include "test_util.h"

namespace gantry::core {
namespace {

using testing::MakeCluster;
using testing::MakeQueues;
using testing::Pool;
using testing::Whole;

using testing::kS;

class GantryTest : public ::testing::Test {
 protected:
  explicit GantryTest(PolicyParams params = Params())
      : catalog_(Catalog::BuiltIn()),
        cluster_(MakeCluster({Pool(catalog_, "h", 2, 8, "H100-80GB", 2)})),
        queues_(MakeQueues(
            {QueueSpec{
                 "serving", "", 8 * kGpuUnits, 16 * kGpuUnits, 1, {}, {}, false, {}, {}, {}, {}},
             QueueSpec{
                 "research", "", 4 * kGpuUnits, 16 * kGpuUnits, 1, {}, {}, false, {}, {}, {}, {}},
             QueueSpec{
                 "nlp", "", 4 * kGpuUnits, 16 * kGpuUnits, 1, {}, {}, false, {}, {}, {}, {}}})),
        sched_(cluster_, queues_, MakePolicy("gantry"), std::move(params)) {}

  static PolicyParams Params() {
    PolicyParams p;
    p.min_run_before_repreempt = 100 * kS;
    return p;
  }

  JobId Submit(const char* id, const char* queue, Tier tier, int replicas, int gpus, Ticks now,
               Ticks checkpoint = 0, std::optional<Ticks> estimate = std::nullopt) {
    JobSpec j = Whole(catalog_, id, replicas, gpus);
    j.queue = *queues_.Find(queue);
    j.tier = tier;
    j.checkpoint = checkpoint;
    j.grace = 30 * kS;
    j.runtime_estimate = estimate;
    return sched_.Submit(j, now);
  }

  std::vector<Decision> Pass(Ticks now) { return sched_.Schedule(now); }
  static std::vector<JobId> Preempted(const std::vector<Decision>& ds) {
    std::vector<JobId> out;
    for (const auto& d : ds) {
      if (d.kind == Decision::Kind::kPreempt) out.push_back(d.job);
    }
    return out;
  }

  Catalog catalog_;
  Cluster cluster_;
  QueueTree queues_;
  Scheduler sched_;
};

TEST_F(GantryTest, CriticalInsideItsGuaranteePreemptsTheCheapestBestEffortVictims) {
  // research fills the cluster: 8 standard GPUs (4 borrowed) and 8 best-effort.
  JobId std1 = Submit("std1", "research", Tier::kStandard, 1, 8, 0);
  JobId be1 = Submit("be1", "research", Tier::kBestEffort, 1, 4, 0, 60 * kS);
  JobId be2 = Submit("be2", "research", Tier::kBestEffort, 1, 4, 0, 0);
  Pass(0);
  ASSERT_EQ(sched_.job(be2).phase, Phase::kRunning);
  // At t=130 s be1 lost 10 s since its checkpoint, be2 (no checkpoints) 130 s.
  JobId crit = Submit("crit", "serving", Tier::kCritical, 1, 4, 130 * kS);
  auto ds = Pass(130 * kS);
  EXPECT_EQ(Preempted(ds), std::vector<JobId>{be1});
  EXPECT_EQ(sched_.job(crit).phase, Phase::kPending);
  EXPECT_EQ(sched_.job(crit).victims_pending, 1);
  EXPECT_EQ(sched_.job(std1).phase, Phase::kRunning);
  // Nothing else is preempted while the victim serves its grace period.
  EXPECT_TRUE(Preempted(Pass(140 * kS)).empty());
  sched_.Requeue(be1, 160 * kS);  // grace over: the driver releases it
  Pass(160 * kS);
  EXPECT_EQ(sched_.job(crit).phase, Phase::kRunning);
  EXPECT_EQ(sched_.job(be1).phase, Phase::kPending);
}

TEST_F(GantryTest, APreemptorCancelledAndForgottenWhileItsVictimLeavesHoldsNothing) {
  JobId std1 = Submit("std1", "research", Tier::kStandard, 1, 8, 0);
  JobId be1 = Submit("be1", "research", Tier::kBestEffort, 1, 8, 0);
  Pass(0);
  JobId crit = Submit("crit", "serving", Tier::kCritical, 1, 8, 130 * kS);
  EXPECT_EQ(Preempted(Pass(130 * kS)), std::vector<JobId>{be1});
  // The driver cancels the critical job during be1's grace period and forgets it, as
  // gantryd does with every job that ends; its claim is never read again.
  sched_.Finish(crit, 135 * kS);
  ASSERT_TRUE(sched_.Forget(crit));
  Pass(136 * kS);
  sched_.Requeue(be1, 160 * kS);  // be1 leaves after all
  JobId next = Submit("next", "nlp", Tier::kStandard, 1, 8, 160 * kS);
  Pass(160 * kS);
  // The GPUs be1 left go to the first in line (standard before best-effort), not to the
  // forgotten claim.
  EXPECT_EQ(sched_.job(std1).phase, Phase::kRunning);
  EXPECT_EQ(sched_.job(next).phase, Phase::kRunning);
  EXPECT_EQ(sched_.job(be1).phase, Phase::kPending);
  EXPECT_EQ(sched_.ledger().used_units(), 16 * kGpuUnits);
  EXPECT_EQ(sched_.job(crit).phase, Phase::kDone);
}

// Full passes at most every 1,000 s: a claimant whose victim leaves in between starts
// at once (claims are tried at every pass), and its victim waits for the next full pass.
class GantryFullPassIntervalTest : public GantryTest {
 protected:
  GantryFullPassIntervalTest() : GantryTest(WithInterval()) {}
  static PolicyParams WithInterval() {
    PolicyParams p = Params();
    p.full_pass_interval = 1000 * kS;
    return p;
  }
};

TEST_F(GantryFullPassIntervalTest, AClaimantStartsAsItsVictimsLeaveBetweenFullPasses) {
  Submit("std1", "research", Tier::kStandard, 1, 8, 0);
  JobId be1 = Submit("be1", "research", Tier::kBestEffort, 1, 8, 0);
  Pass(0);
  JobId crit = Submit("crit", "serving", Tier::kCritical, 1, 8, 130 * kS);
  EXPECT_EQ(Preempted(Pass(130 * kS)), std::vector<JobId>{be1});
  sched_.Requeue(be1, 160 * kS);
  Pass(160 * kS);
  EXPECT_EQ(sched_.job(crit).phase, Phase::kRunning);
  EXPECT_EQ(sched_.job(be1).phase, Phase::kPending);
  EXPECT_EQ(sched_.next_wakeup(), 1000 * kS);
}

TEST_F(GantryTest, BorrowedCapacityIsTakenBackFromTheBorrower) {
  JobId r1 = Submit("r1", "research", Tier::kStandard, 1, 8, 0);  // 4 of it borrowed
  JobId r2 = Submit("r2", "research", Tier::kStandard, 1, 8, 0);  // all borrowed
  Pass(0);
  ASSERT_EQ(sched_.job(r2).phase, Phase::kRunning);
  // nlp asks for its guaranteed 4: research is above its guarantee, so it gives way.
  JobId n = Submit("n", "nlp", Tier::kStandard, 1, 4, 10 * kS);
  auto ds = Pass(10 * kS);
  auto victims = Preempted(ds);
  ASSERT_EQ(victims.size(), 1u);  // one 8-GPU victim suffices: the fewest victims
  sched_.Requeue(victims[0], 40 * kS);
  Pass(40 * kS);
  EXPECT_EQ(sched_.job(n).phase, Phase::kRunning);
  (void)r1;
}

TEST_F(GantryTest, AGrownElasticJobGivesItsGrowthBackAtItsCheckpointInsteadOfBeingTakenWhole) {
  // research holds its guarantee of 4 with r1; its elastic job (1 to 3 workers of 4 GPUs)
  // takes the other 12, all borrowed, at 3 workers.
  Submit("r1", "research", Tier::kStandard, 1, 4, 0);
  JobSpec e = Whole(catalog_, "e", 3, 4);
  e.queue = *queues_.Find("research");
  e.min_replicas = 1;
  e.checkpoint = 600 * kS;
  e.grace = 30 * kS;
  JobId el = sched_.Submit(e, 0);
  Pass(0);
  ASSERT_EQ(sched_.job(el).alloc.size(), 3u);
  // nlp asks for its guaranteed 4 just after e's checkpoint, when a rigid borrower would be
  // taken back whole: e is not; it shrinks at its next checkpoint and nlp starts then.
  JobId n = Submit("n", "nlp", Tier::kStandard, 1, 4, 650 * kS);
  EXPECT_TRUE(Preempted(Pass(650 * kS)).empty());
  EXPECT_EQ(sched_.job(n).phase, Phase::kPending);
  EXPECT_EQ(sched_.next_wakeup(), 1200 * kS);
  Pass(1200 * kS);
  EXPECT_EQ(sched_.job(el).alloc.size(), 1u);
  EXPECT_EQ(sched_.job(el).phase, Phase::kRunning);
  EXPECT_EQ(sched_.job(n).phase, Phase::kRunning);
}

TEST_F(GantryTest, OnlyWorkWhollyOnBorrowedCapacityIsTakenBack) {
  // research runs one 6-GPU job against its guarantee of 4: it borrows 2, but taking the
  // job back would leave research 4 below its guarantee, and its requeued job would be
  // inside the guarantee and preempt in its turn (ping-pong). serving fills the rest.
  Submit("s1", "serving", Tier::kStandard, 1, 8, 0);
  JobId r1 = Submit("r1", "research", Tier::kStandard, 1, 6, 0);
  Pass(0);
  ASSERT_EQ(sched_.job(r1).phase, Phase::kRunning);
  JobId n1 = Submit("n1", "nlp", Tier::kStandard, 1, 4, 10 * kS);  // inside nlp's guarantee
  EXPECT_TRUE(Preempted(Pass(10 * kS)).empty());
  EXPECT_EQ(sched_.job(n1).phase, Phase::kPending);
  // A second research job, wholly borrowed, may be taken back.
  sched_.Finish(n1, 20 * kS);
  JobId r2 = Submit("r2", "research", Tier::kStandard, 1, 2, 20 * kS);
  Pass(20 * kS);
  ASSERT_EQ(sched_.job(r2).phase, Phase::kRunning);
  JobId n2 = Submit("n2", "nlp", Tier::kStandard, 1, 2, 30 * kS);
  EXPECT_EQ(Preempted(Pass(30 * kS)), std::vector<JobId>{r2});
  (void)n2;
}

TEST_F(GantryTest, AJobThatCanWaitPreemptsOnlyJustAfterTheVictimsCheckpoint) {
  // research borrows the whole cluster with two jobs that checkpoint every 600 s.
  JobId r1 = Submit("r1", "research", Tier::kStandard, 1, 8, 0, 600 * kS);
  JobId r2 = Submit("r2", "research", Tier::kStandard, 1, 8, 0, 600 * kS);
  Pass(0);
  ASSERT_EQ(sched_.job(r2).phase, Phase::kRunning);
  // At 300 s either victim would lose 300 s of work: nlp, inside its guarantee, waits
  // for their next checkpoint and asks for a pass then.
  JobId n = Submit("n", "nlp", Tier::kStandard, 1, 4, 300 * kS);
  EXPECT_TRUE(Preempted(Pass(300 * kS)).empty());
  EXPECT_EQ(sched_.job(n).phase, Phase::kPending);
  EXPECT_NE(sched_.job(n).wait_reason.find(
                "jobs it may preempt are past their last checkpoint: tried again at the next"),
            std::string::npos)
      << sched_.job(n).wait_reason;
  EXPECT_EQ(sched_.next_wakeup(), 600 * kS);
  // Within preempt_after_checkpoint (120 s) of that checkpoint it takes one back.
  EXPECT_EQ(Preempted(Pass(650 * kS)).size(), 1u);
  EXPECT_EQ(sched_.job(n).victims_pending, 1);
  (void)r1;
}

TEST_F(GantryTest, AJobWaitingForCheckpointsIsWokenOnAGridInsideTheWindow) {
  // The victims checkpoint at 607 s and 613 s: one wake serves both, at the next multiple
  // of a quarter of preempt_after_checkpoint (120 s / 4 = 30 s), while they are inside it.
  JobId r1 = Submit("r1", "research", Tier::kStandard, 1, 8, 7 * kS, 600 * kS);
  Pass(7 * kS);
  JobId r2 = Submit("r2", "research", Tier::kStandard, 1, 8, 13 * kS, 600 * kS);
  Pass(13 * kS);
  ASSERT_EQ(sched_.job(r2).phase, Phase::kRunning);
  JobId n = Submit("n", "nlp", Tier::kStandard, 1, 4, 300 * kS);
  EXPECT_TRUE(Preempted(Pass(300 * kS)).empty());
  EXPECT_EQ(sched_.next_wakeup(), 630 * kS);
  EXPECT_EQ(Preempted(Pass(630 * kS)).size(), 1u);
  EXPECT_EQ(sched_.job(n).victims_pending, 1);
  (void)r1;
}

TEST_F(GantryTest, AJobIsNotToldToWaitForCheckpointsOfJobsItMayNotTake) {
  // serving (guarantee 8) and research (guarantee 4, one 6-GPU job: not wholly borrowed)
  // fill the cluster with jobs that checkpoint every 600 s; neither may be taken back.
  Submit("s1", "serving", Tier::kStandard, 1, 8, 0, 600 * kS);
  JobId r1 = Submit("r1", "research", Tier::kStandard, 1, 6, 0, 600 * kS);
  Pass(0);
  ASSERT_EQ(sched_.job(r1).phase, Phase::kRunning);
  JobId n = Submit("n", "nlp", Tier::kStandard, 1, 4, 300 * kS);  // inside its guarantee
  EXPECT_TRUE(Preempted(Pass(300 * kS)).empty());
  EXPECT_EQ(sched_.job(n).phase, Phase::kPending);
  // It is not told to wait for their checkpoints; it is woken at the next one all the same
  // (by then borrowing may have moved and made one of them a job it may take).
  EXPECT_EQ(sched_.job(n).wait_reason.find("checkpoint"), std::string::npos)
      << sched_.job(n).wait_reason;
  EXPECT_EQ(sched_.next_wakeup(), 600 * kS);
  EXPECT_TRUE(Preempted(Pass(650 * kS)).empty());
}

TEST_F(GantryTest, WorkThatNeverCheckpointsIsTakenOnlyJustAfterItsStart) {
  // research borrows the whole cluster with two jobs that never checkpoint: preempted,
  // each would lose its whole run. Its start is its only checkpoint: within
  // preempt_after_checkpoint (120 s) of it nlp takes one back
  // (BorrowedCapacityIsTakenBackFromTheBorrower, at 10 s); past that, nlp waits for them
  // to end, with no checkpoint to wait for; critical work takes one at any time.
  Submit("r1", "research", Tier::kStandard, 1, 8, 0);
  JobId r2 = Submit("r2", "research", Tier::kStandard, 1, 8, 0);
  Pass(0);
  ASSERT_EQ(sched_.job(r2).phase, Phase::kRunning);
  JobId n = Submit("n", "nlp", Tier::kStandard, 1, 4, 121 * kS);
  EXPECT_TRUE(Preempted(Pass(121 * kS)).empty());
  EXPECT_EQ(sched_.job(n).phase, Phase::kPending);
  EXPECT_EQ(sched_.job(n).wait_reason.find("checkpoint"), std::string::npos)
      << sched_.job(n).wait_reason;
  EXPECT_EQ(sched_.next_wakeup(), kForever);
  EXPECT_TRUE(Preempted(Pass(5'000 * kS)).empty());
  JobId c = Submit("c", "serving", Tier::kCritical, 1, 4, 5'000 * kS);
  EXPECT_EQ(Preempted(Pass(5'000 * kS)).size(), 1u);
  EXPECT_EQ(sched_.job(c).victims_pending, 1);
}

TEST_F(GantryTest, ACriticalJobPreemptsWithoutWaitingForACheckpoint) {
  Submit("r1", "research", Tier::kStandard, 1, 8, 0, 600 * kS);
  Submit("r2", "research", Tier::kStandard, 1, 8, 0, 600 * kS);
  Pass(0);
  JobId c = Submit("c", "serving", Tier::kCritical, 1, 4, 300 * kS);
  EXPECT_EQ(Preempted(Pass(300 * kS)).size(), 1u);
  EXPECT_EQ(sched_.job(c).victims_pending, 1);
}

TEST_F(GantryTest, NoPreemptionOutsideTheGuaranteeAndNeverOfCriticalWork) {
  Submit("c1", "serving", Tier::kCritical, 1, 8, 0);
  Submit("c2", "serving", Tier::kCritical, 1, 8, 0);  // serving at 16: beyond its guarantee 8
  Pass(0);
  JobId n = Submit("n", "nlp", Tier::kCritical, 1, 4, 10 * kS);
  auto ds = Pass(10 * kS);
  EXPECT_TRUE(Preempted(ds).empty());  // only critical work runs: nothing to take
  EXPECT_EQ(sched_.job(n).phase, Phase::kPending);
}

// Best-effort work gives way beyond a queue's guarantee too, to the tiers the site names
// (policy.best_effort_yields_to: critical by default, standard, none).
TEST(GantryPreemptionTest, BestEffortWorkGivesWayBeyondTheGuaranteeToTheTiersTheSiteNames) {
  const Catalog catalog = Catalog::BuiltIn();
  const Cluster cluster = MakeCluster({Pool(catalog, "h", 2, 8, "H100-80GB", 2)});
  const QueueTree queues = MakeQueues(
      {QueueSpec{"serving", "", 8 * kGpuUnits, 16 * kGpuUnits, 1, {}, {}, false, {}, {}, {}, {}},
       QueueSpec{"research", "", 4 * kGpuUnits, 16 * kGpuUnits, 1, {}, {}, false, {}, {}, {}, {}}});
  auto make = [&](std::optional<Tier> yields_to) {
    PolicyParams params;
    params.best_effort_yields_to = yields_to;
    return std::make_unique<Scheduler>(cluster, queues, MakePolicy("gantry"), params);
  };
  auto submit = [&](Scheduler& s, const char* id, const char* queue, Tier tier, int gpus,
                    Ticks now) {
    JobSpec j = Whole(catalog, id, 1, gpus);
    j.queue = *queues.Find(queue);
    j.tier = tier;
    j.grace = 30 * kS;
    return s.Submit(j, now);
  };
  auto preempted = [](const std::vector<Decision>& ds) {
    std::vector<JobId> out;
    for (const Decision& d : ds) {
      if (d.kind == Decision::Kind::kPreempt) out.push_back(d.job);
    }
    return out;
  };
  for (const std::optional<Tier> yields_to :
       {std::optional{Tier::kCritical}, std::optional{Tier::kStandard}, std::optional<Tier>()}) {
    SCOPED_TRACE(yields_to ? std::string(Name(*yields_to)) : "none");
    const std::unique_ptr<Scheduler> sched = make(yields_to);
    Scheduler& s = *sched;
    // Serving holds its guarantee (8 GPUs); research's best-effort job the other node.
    const JobId c1 = submit(s, "c1", "serving", Tier::kCritical, 8, 0);
    const JobId be = submit(s, "be", "research", Tier::kBestEffort, 8, 0);
    s.Schedule(0);
    ASSERT_EQ(s.job(c1).phase, Phase::kRunning);
    ASSERT_EQ(s.job(be).phase, Phase::kRunning);
    // Both beyond their queues' guarantees: a critical serving job, a standard research job.
    const JobId c2 = submit(s, "c2", "serving", Tier::kCritical, 4, 10 * kS);
    const JobId r = submit(s, "r", "research", Tier::kStandard, 4, 10 * kS);
    ASSERT_EQ(s.GuaranteedModels(s.job(c2).spec), ModelMask{0});
    ASSERT_EQ(s.GuaranteedModels(s.job(r).spec), ModelMask{0});
    const std::vector<JobId> taken = preempted(s.Schedule(10 * kS));
    if (!yields_to) {
      EXPECT_TRUE(taken.empty());
      continue;
    }
    // The critical job takes the best-effort job's GPUs; both fit once it is gone.
    EXPECT_EQ(taken, std::vector<JobId>{be});
    EXPECT_EQ(s.job(c2).victims_pending, 1);
    s.Requeue(be, 40 * kS);
    s.Schedule(40 * kS);
    EXPECT_EQ(s.job(c2).phase, Phase::kRunning);
    // The standard job starts in what the best-effort job left beside it.
    EXPECT_EQ(s.job(r).phase, Phase::kRunning);
  }
  // The default: a standard job beyond its guarantee does not take best-effort GPUs; with
  // `standard` it does.
  for (const std::optional<Tier> yields_to :
       {std::optional{Tier::kCritical}, std::optional{Tier::kStandard}}) {
    SCOPED_TRACE(std::string(Name(*yields_to)));
    const std::unique_ptr<Scheduler> sched = make(yields_to);
    Scheduler& s = *sched;
    submit(s, "fill", "serving", Tier::kCritical, 8, 0);
    const JobId be = submit(s, "be", "research", Tier::kBestEffort, 8, 0);
    s.Schedule(0);
    const JobId r = submit(s, "r", "research", Tier::kStandard, 4, 10 * kS);
    ASSERT_EQ(s.GuaranteedModels(s.job(r).spec), ModelMask{0});  // research holds 8 of its 4
    EXPECT_EQ(preempted(s.Schedule(10 * kS)),
              *yields_to == Tier::kStandard ? std::vector<JobId>{be} : std::vector<JobId>{});
    EXPECT_EQ(s.job(r).phase, Phase::kPending);
  }
}

TEST_F(GantryTest, ResumedJobsAreProtectedForTheirMinimumRunTime) {
  JobId be = Submit("be", "research", Tier::kBestEffort, 1, 8, 0);
  JobId fill = Submit("fill", "nlp", Tier::kCritical, 1, 8, 0);  // never a victim
  Pass(0);
  JobId c1 = Submit("c1", "serving", Tier::kCritical, 1, 8, 10 * kS, 0, 50 * kS);
  ASSERT_EQ(Preempted(Pass(10 * kS)), std::vector<JobId>{be});
  sched_.Requeue(be, 40 * kS);
  Pass(40 * kS);
  ASSERT_EQ(sched_.job(c1).phase, Phase::kRunning);
  sched_.Finish(c1, 60 * kS, true);
  Pass(60 * kS);
  ASSERT_EQ(sched_.job(be).phase, Phase::kRunning);  // resumed at 60 s
  JobId c2 = Submit("c2", "serving", Tier::kCritical, 1, 8, 70 * kS);
  EXPECT_TRUE(Preempted(Pass(70 * kS)).empty());  // be is protected until 160 s
  EXPECT_EQ(sched_.next_wakeup(), 160 * kS);
  EXPECT_EQ(Preempted(Pass(160 * kS)), std::vector<JobId>{be});
  (void)fill;
  (void)c2;
}

TEST_F(GantryTest, BackfillNeverDelaysTheReservationOfABigGang) {
  JobId a = Submit("a", "research", Tier::kStandard, 1, 8, 0, 0, 1000 * kS);
  JobId b = Submit("b", "research", Tier::kStandard, 1, 4, 0, 0, 500 * kS);
  Pass(0);
  // The gang needs both nodes: it gets a reservation at 1000 s (a's expected end).
  JobId gang = Submit("gang", "nlp", Tier::kStandard, 2, 8, 10 * kS, 0, 100 * kS);
  Pass(10 * kS);
  EXPECT_EQ(sched_.job(gang).phase, Phase::kPending);
  EXPECT_NE(sched_.job(gang).wait_reason.find("GPUs reserved for it"), std::string::npos)
      << sched_.job(gang).wait_reason;
  EXPECT_EQ(sched_.job(gang).wait.at, 1000 * kS);
  // b finishes early: 4 GPUs free on b's node. A long job would delay the gang...
  sched_.Finish(b, 20 * kS, true);
  JobId long_job = Submit("long", "research", Tier::kStandard, 1, 4, 20 * kS, 0, 5000 * kS);
  JobId short_job = Submit("short", "research", Tier::kStandard, 1, 4, 20 * kS, 0, 300 * kS);
  Pass(20 * kS);
  EXPECT_EQ(sched_.job(long_job).phase, Phase::kPending);
  EXPECT_NE(sched_.job(long_job).wait_reason.find("reservation"), std::string::npos)
      << sched_.job(long_job).wait_reason;
  // ...while a short one ends before the reservation and fills the gap.
  EXPECT_EQ(sched_.job(short_job).phase, Phase::kRunning);
  (void)a;
}

// A job backfilled on its estimate that runs past it is preempted for the reservation
// it now delays, once the reserving job has waited backfill_lease_after; jobs that did
// not start on held GPUs are not, however long they overrun.
TEST_F(GantryTest, BackfilledJobsPastTheirEstimateGiveWayToAStarvingReservation) {
  // The backfilled job checkpoints every 100 s (at 1,100 s it is 80 s past one, inside
  // preempt_after_checkpoint); one that never checkpoints would lose its whole run, so the
  // lease does not end it past the window of its start (the gang waits for it to end).
  for (auto [lease_after, checkpoint] :
       {std::pair{Ticks{500 * kS}, Ticks{100 * kS}}, std::pair{Ticks{0}, Ticks{100 * kS}},
        std::pair{Ticks{500 * kS}, Ticks{0}}}) {
    PolicyParams params = Params();
    params.backfill_lease_after = lease_after;
    Scheduler sched(cluster_, queues_, MakePolicy("gantry"), params);
    auto submit = [&](const char* id, const char* queue, int replicas, int gpus, Ticks now,
                      Ticks estimate, Ticks every = 0) {
      JobSpec j = Whole(catalog_, id, replicas, gpus);
      j.queue = *queues_.Find(queue);
      j.grace = 30 * kS;
      j.runtime_estimate = estimate;
      j.checkpoint = every;
      return sched.Submit(j, now);
    };
    JobId a = submit("a", "research", 1, 8, 0, 1000 * kS);
    JobId b = submit("b", "research", 1, 4, 0, 500 * kS);
    sched.Schedule(0);
    JobId gang = submit("gang", "nlp", 2, 8, 10 * kS, 100 * kS);
    sched.Schedule(10 * kS);
    sched.Finish(b, 20 * kS, true);
    // Ends by its estimate before the gang's reservation (t=1000 s): backfilled.
    JobId backfilled = submit("backfilled", "research", 1, 4, 20 * kS, 300 * kS, checkpoint);
    sched.Schedule(20 * kS);
    ASSERT_EQ(sched.job(backfilled).phase, Phase::kRunning);
    // t=1000 s: both overran. a did not start on held GPUs: never a victim here, and
    // the backfilled job alone is not enough room.
    EXPECT_TRUE(Preempted(sched.Schedule(1000 * kS)).empty());
    sched.Finish(a, 1100 * kS, true);
    auto ds = sched.Schedule(1100 * kS);
    if (lease_after == 0 || checkpoint == 0) {  // leases never end, or not for this job
      EXPECT_TRUE(Preempted(ds).empty());
      EXPECT_EQ(sched.job(backfilled).phase, Phase::kRunning);
      EXPECT_EQ(sched.job(gang).phase, Phase::kPending);
      continue;
    }
    ASSERT_EQ(Preempted(ds), std::vector<JobId>{backfilled});
    EXPECT_NE(sched.job(backfilled).preempted_by, JobId());
    sched.Requeue(backfilled, 1130 * kS);  // its grace is over
    sched.Schedule(1130 * kS);
    EXPECT_EQ(sched.job(gang).phase, Phase::kRunning);
  }
}

TEST_F(GantryTest, FairShareFavoursTheQueueThatUsedLess) {
  // Both queues want the whole cluster; nlp has used nothing, research a lot.
  for (int i = 0; i < 4; ++i)
    Submit(("r" + std::to_string(i)).c_str(), "research", Tier::kStandard, 1, 4, 0);
  Pass(0);
  for (uint32_t j = 0; j < 4; ++j) sched_.Finish(JobId(j), 36'000 * kS, true);
  JobId r = Submit("r-late", "research", Tier::kStandard, 1, 8, 36'000 * kS);
  JobId n = Submit("n-late", "nlp", Tier::kStandard, 1, 8, 36'000 * kS + 1);
  JobId r2 = Submit("r-late2", "research", Tier::kStandard, 1, 8, 36'000 * kS + 2);
  JobId n2 = Submit("n-late2", "nlp", Tier::kStandard, 1, 8, 36'000 * kS + 3);
  Pass(36'000 * kS + 3);
  // One node each: nlp's first job, then research's (nlp is then above research's use).
  EXPECT_EQ(sched_.job(n).phase, Phase::kRunning);
  EXPECT_EQ(sched_.job(r).phase, Phase::kRunning);
  EXPECT_EQ(sched_.job(r2).phase, Phase::kPending);
  EXPECT_EQ(sched_.job(n2).phase, Phase::kPending);
}

// Slurm's --nice: a job with a higher value waits behind its queue's other jobs, whatever
// their arrival; a negative one goes ahead; nice orders and never preempts.
TEST_F(GantryTest, ANicedJobWaitsBehindItsQueuesOtherJobsAndPreemptsNobody) {
  const JobId blocker = Submit("blocker", "research", Tier::kStandard, 2, 8, 0);
  Pass(0);
  ASSERT_EQ(sched_.job(blocker).phase, Phase::kRunning);
  auto submit = [&](const char* id, int nice, Ticks now) {
    JobSpec j = Whole(catalog_, id, 1, 8);
    j.queue = *queues_.Find("research");
    j.grace = 30 * kS;
    j.nice = nice;
    return sched_.Submit(j, now);
  };
  const JobId niced = submit("niced", 100, 1 * kS);
  const JobId plain = submit("plain", 0, 2 * kS);
  const JobId later = submit("later", 300, 3 * kS);
  Pass(3 * kS);
  sched_.SetNice(later, 0);  // scontrol update Nice=0: ahead of the niced job again
  sched_.Finish(blocker, 10 * kS, true);
  Pass(10 * kS);
  EXPECT_EQ(sched_.job(plain).phase, Phase::kRunning);
  EXPECT_EQ(sched_.job(later).phase, Phase::kRunning) << "ahead of the niced job, arrived before";
  EXPECT_EQ(sched_.job(niced).phase, Phase::kPending);
  // A negative value goes ahead of the rest; the niced job runs when room is left.
  const JobId eager = submit("eager", -5, 11 * kS);
  Pass(11 * kS);
  sched_.Finish(plain, 20 * kS, true);
  Pass(20 * kS);
  EXPECT_EQ(sched_.job(eager).phase, Phase::kRunning);
  EXPECT_EQ(sched_.job(niced).phase, Phase::kPending);
  sched_.Finish(later, 30 * kS, true);
  Pass(30 * kS);
  EXPECT_EQ(sched_.job(niced).phase, Phase::kRunning);
  // Running, the niced job is taken by nobody for its value: later arrivals wait.
  submit("after", 0, 31 * kS);
  EXPECT_TRUE(Preempted(Pass(31 * kS)).empty());
  EXPECT_TRUE(Preempted(Pass(200 * kS)).empty());
  EXPECT_EQ(sched_.job(niced).phase, Phase::kRunning);
}

// Guarantees per GPU model: one H100 node and one A100 node; serving's guarantee is 8
// GPUs, research's 8. research's job, free to run anywhere, sits on the A100s.
class GuaranteePerModelTest : public ::testing::Test {
 protected:
  GuaranteePerModelTest()
      : catalog_(Catalog::BuiltIn()),
        h100_(*catalog_.Find("H100-80GB")),
        a100_(*catalog_.Find("A100-80GB")),
        cluster_(MakeCluster(
            {Pool(catalog_, "h", 1, 8, "H100-80GB"), Pool(catalog_, "a", 1, 8, "A100-80GB")})) {}

  // serving's and research's guarantees: per model when `per_model`, else over all models.
  std::unique_ptr<Scheduler> Make(bool per_model) {
    QueueSpec serving{"serving", "", 8 * kGpuUnits, -1, 1, {}, {}, false, {}, {}, {}, {}};
    QueueSpec research{"research", "", 8 * kGpuUnits, -1, 1, {}, {}, false, {}, {}, {}, {}};
    if (per_model) {
      serving.guaranteed_by_model = {{a100_, "A100-80GB", 8 * kGpuUnits}};
      research.guaranteed_by_model = {{h100_, "H100-80GB", 8 * kGpuUnits}};
    }
    queues_ = MakeQueues({serving, research});
    return std::make_unique<Scheduler>(cluster_, queues_, MakePolicy("gantry"), PolicyParams{});
  }

  JobId Submit(Scheduler& s, const char* id, const char* queue, Tier tier, ModelMask models,
               Ticks now) {
    JobSpec j = Whole(catalog_, id, 1, 8);
    j.queue = *queues_.Find(queue);
    j.tier = tier;
    j.models = models;
    j.grace = 30 * kS;
    return s.Submit(j, now);
  }
  ModelMask Bit(ModelId m) const { return ModelMask{1} << m.v; }

  Catalog catalog_;
  ModelId h100_, a100_;
  Cluster cluster_;
  QueueTree queues_;
};

TEST_F(GuaranteePerModelTest, AQueueInsideItsTotalStillBorrowsTheModelsItHasNoGuaranteeOn) {
  for (bool per_model : {false, true}) {
    SCOPED_TRACE(per_model ? "per model" : "over all models");
    auto s = Make(per_model);
    // The H100 node is down, so research's job lands on the A100s.
    s->SetNodeUp(cluster_.pool(PoolId(0)).first_node, false);
    JobId r = Submit(*s, "r", "research", Tier::kStandard, ~ModelMask{0}, 0);
    s->Schedule(0);
    ASSERT_EQ(s->job(r).phase, Phase::kRunning);
    EXPECT_EQ(s->queue_usage_on(*queues_.Find("research"), a100_), per_model ? 8 * kGpuUnits : 0);
    JobId crit = Submit(*s, "crit", "serving", Tier::kCritical, Bit(a100_), 10 * kS);
    const std::vector<Decision> ds = s->Schedule(10 * kS);
    // Counted over all models research holds its own 8 and keeps them; per model its 8
    // A100 GPUs are borrowed (its guarantee is on H100) and serving takes them back.
    const bool preempted = std::any_of(ds.begin(), ds.end(), [&](const Decision& d) {
      return d.kind == Decision::Kind::kPreempt && d.job == r;
    });
    EXPECT_EQ(preempted, per_model);
    EXPECT_EQ(s->job(r).phase, per_model ? Phase::kSignaled : Phase::kRunning);
    EXPECT_EQ(s->job(crit).phase, Phase::kPending);
  }
}

TEST_F(GuaranteePerModelTest, AJobPreemptsOnlyOnTheModelsItsGuaranteeCovers) {
  for (bool per_model : {false, true}) {
    SCOPED_TRACE(per_model ? "per model" : "over all models");
    auto s = Make(per_model);
    // research fills both nodes: best-effort work on the H100s, standard on the A100s.
    JobId be = Submit(*s, "be", "research", Tier::kBestEffort, Bit(h100_), 0);
    JobId r = Submit(*s, "r", "research", Tier::kStandard, Bit(a100_), 0);
    s->Schedule(0);
    ASSERT_EQ(s->job(be).phase, Phase::kRunning);
    ASSERT_EQ(s->job(r).phase, Phase::kRunning);
    // A serving job that may run on either model. Over all models the cheapest victim
    // is the best-effort job; per model serving's guarantee is on A100 only, so it takes
    // back the A100s research borrows (research's guarantee is on H100).
    JobId job = Submit(*s, "job", "serving", Tier::kStandard, ~ModelMask{0}, 10 * kS);
    EXPECT_EQ(s->GuaranteedModels(s->job(job).spec), per_model ? Bit(a100_) : ~ModelMask{0});
    const std::vector<Decision> ds = s->Schedule(10 * kS);
    std::vector<JobId> preempted;
    for (const Decision& d : ds) {
      if (d.kind == Decision::Kind::kPreempt) preempted.push_back(d.job);
    }
    EXPECT_EQ(preempted, std::vector<JobId>{per_model ? r : be});
  }
}

TEST_F(GuaranteePerModelTest, UsagePerModelFollowsStartsAndEnds) {
  auto s = Make(true);
  const QueueId research = *queues_.Find("research");
  JobId h = Submit(*s, "h", "research", Tier::kStandard, Bit(h100_), 0);
  JobId a = Submit(*s, "a", "research", Tier::kStandard, Bit(a100_), 0);
  s->Schedule(0);
  EXPECT_EQ(s->queue_usage_on(research, h100_), 8 * kGpuUnits);
  EXPECT_EQ(s->queue_usage_on(research, a100_), 8 * kGpuUnits);
  s->Finish(a, 10 * kS);
  EXPECT_EQ(s->queue_usage_on(research, a100_), 0);
  s->Schedule(10 * kS);
  s->Requeue(h, 20 * kS);
  EXPECT_EQ(s->queue_usage_on(research, h100_), 0);
  EXPECT_EQ(s->queue_usage(research), 0);
  // research is inside its guarantee on H100 again, and has none on A100.
  EXPECT_EQ(s->GuaranteedModels(s->job(h).spec), Bit(h100_));
  JobId any = Submit(*s, "any", "research", Tier::kStandard, ~ModelMask{0}, 20 * kS);
  EXPECT_EQ(s->GuaranteedModels(s->job(any).spec), Bit(h100_));
}

// Best-effort shares fill every GPU, four to a GPU, one of them costly to stop on each.
// The 64 cheapest victims overall hold shares of many GPUs and clear none; taking the
// victims of one node at a time finds a GPU to empty. On 3 nodes the node-by-node what-if
// walks every victim; on 12 (8 or more nodes of best-effort victims only) it reads the
// pass's node index, and where asserts are on (the sanitized tests) checks that against
// the walk.
void SharesScatteredOverManyGpusAreClearedNodeByNode(int nodes) {
  const Catalog catalog = Catalog::BuiltIn();
  const Cluster cluster =
      MakeCluster({Pool(catalog, "a", nodes, 8, "A100-80GB", 0, 1,
                        SharingMask(Bit(Sharing::kExclusive) | Bit(Sharing::kMps)))});
  const QueueTree queues =
      MakeQueues({QueueSpec{"serving", "", 8 * kGpuUnits, -1, 1, {}, {}, false, {}, {}, {}, {}},
                  QueueSpec{"research", "", 0, -1, 1, {}, {}, false, {}, {}, {}, {}}});
  Scheduler s(cluster, queues, MakePolicy("gantry"), PolicyParams{});
  // Four shares are standard work of a borrowing queue (`research` has no guarantee), one
  // to a node (each asks for most of a node's CPUs): a critical job may take them, so
  // emptying those nodes would stop standard work, and nodes of best-effort work only
  // come first.
  std::vector<JobId> notebooks;
  for (int i = 0; i < nodes * 32; ++i) {
    JobSpec j = testing::Shared(catalog, "nb-" + std::to_string(i), Sharing::kMps, 250, 10);
    j.queue = *queues.Find("research");
    j.tier = i % 32 == 31 && i / 32 < 4 ? Tier::kStandard : Tier::kBestEffort;
    if (j.tier == Tier::kStandard) j.cpus_milli = 100'000;
    j.checkpoint = i % 4 == 0 ? 0 : 10 * kS;  // the first on each GPU never checkpoints
    notebooks.push_back(s.Submit(j, 0));
  }
  s.Schedule(0);
  std::set<NodeId> with_standard;
  for (JobId n : notebooks) {
    ASSERT_EQ(s.job(n).phase, Phase::kRunning);
    if (s.job(n).spec.tier == Tier::kStandard) with_standard.insert(s.job(n).alloc.at(0).node);
  }
  ASSERT_EQ(with_standard.size(), std::min<size_t>(static_cast<size_t>(nodes), 4));
  // Two critical jobs in one pass: the second's what-if reads the victims the first's
  // left (the node index counts the first's as gone).
  std::vector<JobId> crits;
  for (const char* id : {"crit-a", "crit-b"}) {
    JobSpec crit = Whole(catalog, id, 1, 1);
    crit.queue = *queues.Find("serving");
    crit.tier = Tier::kCritical;
    crit.grace = 30 * kS;
    crits.push_back(s.Submit(crit, 1005 * kS));
  }
  std::map<JobId, std::vector<JobId>> victims;  // by preemptor
  for (const Decision& d : s.Schedule(1005 * kS)) {
    if (d.kind == Decision::Kind::kPreempt) victims[d.by].push_back(d.job);
  }
  // For each, exactly the four sharers of one GPU, not the other's.
  ASSERT_EQ(victims.size(), 2u);
  std::set<std::pair<NodeId, int>> gpus;
  for (const auto& [by, taken] : victims) {
    ASSERT_EQ(taken.size(), 4u);
    const WorkerAlloc& first = s.job(taken[0]).alloc.at(0);
    for (JobId v : taken) {
      EXPECT_EQ(s.job(v).alloc.at(0).node, first.node);
      EXPECT_EQ(s.job(v).alloc.at(0).gpu, first.gpu);
      EXPECT_EQ(s.job(v).spec.tier, Tier::kBestEffort);
    }
    if (nodes > 4) {
      EXPECT_FALSE(with_standard.contains(first.node));  // a node of best-effort work only
    }
    gpus.emplace(first.node, first.gpu);
  }
  EXPECT_EQ(gpus.size(), 2u);
  for (const auto& [by, taken] : victims) {
    for (JobId v : taken) s.Requeue(v, 1035 * kS);
  }
  s.Schedule(1035 * kS);
  for (JobId c : crits) EXPECT_EQ(s.job(c).phase, Phase::kRunning);
}

TEST(GantryPreemptionTest, SharesScatteredOverManyGpusAreClearedNodeByNode) {
  SharesScatteredOverManyGpusAreClearedNodeByNode(3);
}

TEST(GantryPreemptionTest, SharesScatteredOverManyGpusAreClearedNodeByNodeFromTheNodeIndex) {
  SharesScatteredOverManyGpusAreClearedNodeByNode(12);
}

// A claim holds what its victims free of a GPU as they leave one by one: a job waiting
// for a MIG slice must not start in the slot the first victim left (the claimant would
// then find no room when the last one leaves, and preempt again; with an attained-service
// queue and max_wait this went on for ever: docs/policies.md, property seed 147).
TEST(GantryPreemptionTest, AClaimHoldsTheSlicesItsVictimsLeaveUntilTheLastIsGone) {
  const Catalog catalog = Catalog::BuiltIn();
  const Cluster cluster =
      MakeCluster({Pool(catalog, "h", 1, 1, "H100-80GB", 0, 1,
                        SharingMask(Bit(Sharing::kExclusive) | Bit(Sharing::kMig)))});
  const QueueTree queues =
      MakeQueues({QueueSpec{"serving", "", kGpuUnits, -1, 1, {}, {}, false, {}, {}, {}, {}},
                  QueueSpec{"research", "", 0, -1, 1, {}, {}, false, {}, {}, {}, {}}});
  PolicyParams params;
  params.best_effort_yields_to = Tier::kCritical;  // the small job waits (it does not preempt)
  Scheduler s(cluster, queues, MakePolicy("gantry"), params);
  auto submit = [&](const char* id, const char* profile, const char* queue, Tier tier, Ticks grace,
                    Ticks now) {
    JobSpec j = testing::Mig(catalog, id, profile);
    j.queue = *queues.Find(queue);
    j.tier = tier;
    j.grace = grace;
    return s.Submit(j, now);
  };
  // Two best-effort instances fill the GPU (3 + 4 compute slices, 4 + 4 memory slices).
  const JobId be1 = submit("be1", "3g.40gb", "research", Tier::kBestEffort, 10 * kS, 0);
  const JobId be2 = submit("be2", "4g.40gb", "research", Tier::kBestEffort, 60 * kS, 0);
  s.Schedule(0);
  ASSERT_EQ(s.job(be1).phase, Phase::kRunning);
  ASSERT_EQ(s.job(be2).phase, Phase::kRunning);
  // A small job waits for a slice; a critical job inside its guarantee wants the GPU.
  const JobId small = submit("small", "1g.10gb", "research", Tier::kStandard, 10 * kS, 50 * kS);
  s.Schedule(50 * kS);
  ASSERT_EQ(s.job(small).phase, Phase::kPending);
  const JobId crit = submit("crit", "7g.80gb", "serving", Tier::kCritical, 10 * kS, 100 * kS);
  int preemptions = 0;
  for (const Decision& d : s.Schedule(100 * kS)) preemptions += d.kind == Decision::Kind::kPreempt;
  ASSERT_EQ(preemptions, 2);
  // be1 leaves first: its slices stay held for the claim, not given to the small job.
  s.Requeue(be1, 110 * kS);
  for (const Decision& d : s.Schedule(110 * kS)) preemptions += d.kind == Decision::Kind::kPreempt;
  EXPECT_EQ(s.job(small).phase, Phase::kPending);
  EXPECT_EQ(s.job(crit).phase, Phase::kPending);
  // be2 leaves: the whole GPU is free for the claimant, which starts without preempting again.
  s.Requeue(be2, 160 * kS);
  for (const Decision& d : s.Schedule(160 * kS)) preemptions += d.kind == Decision::Kind::kPreempt;
  EXPECT_EQ(s.job(crit).phase, Phase::kRunning);
  EXPECT_EQ(preemptions, 2);
  EXPECT_EQ(s.job(small).phase, Phase::kPending);
}

// A critical claimant starts on the GPU it preempted for, not on another claimant's: two
// critical jobs each preempt one best-effort job, and both victims are gone by the next
// pass. Before, a critical claimant let go of every held GPU for its try and took the
// first that fit, here the other claim's (and held every claim again after each start:
// O(claims) per claimant, most of the pass after a mass preemption at 100,000 GPUs).
TEST(GantryPreemptionTest, ACriticalClaimantStartsOnTheGpuItClaimed) {
  const Catalog catalog = Catalog::BuiltIn();
  const Cluster cluster = MakeCluster({Pool(catalog, "h", 1, 4, "H100-80GB")});
  const QueueTree queues =
      MakeQueues({QueueSpec{"serving", "", 4 * kGpuUnits, -1, 1, {}, {}, false, {}, {}, {}, {}},
                  QueueSpec{"research", "", 0, -1, 1, {}, {}, false, {}, {}, {}, {}}});
  Scheduler s(cluster, queues, MakePolicy("gantry"), PolicyParams{});
  auto submit = [&](const char* id, const char* queue, Tier tier, Ticks now) {
    JobSpec j = Whole(catalog, id, 1, 1);
    j.queue = *queues.Find(queue);
    j.tier = tier;
    j.grace = 10 * kS;
    return s.Submit(j, now);
  };
  // Four best-effort jobs fill the node; the last started loses least, so it goes first.
  for (const char* id : {"be0", "be1", "be2"}) submit(id, "research", Tier::kBestEffort, 0);
  s.Schedule(0);
  submit("be3", "research", Tier::kBestEffort, 50 * kS);
  s.Schedule(50 * kS);
  const JobId c1 = submit("c1", "serving", Tier::kCritical, 100 * kS);
  const JobId c2 = submit("c2", "serving", Tier::kCritical, 100 * kS);
  std::map<JobId, JobId> victim_of;  // claimant -> its victim
  for (const Decision& d : s.Schedule(100 * kS)) {
    if (d.kind == Decision::Kind::kPreempt) victim_of[d.by] = d.job;
  }
  ASSERT_EQ(victim_of.size(), 2u);
  const uint64_t claimed1 = s.job(victim_of[c1]).alloc.at(0).gpu_mask;
  const uint64_t claimed2 = s.job(victim_of[c2]).alloc.at(0).gpu_mask;
  ASSERT_NE(claimed1, claimed2);
  // c1 comes first and its claim is the later GPU (be3's): a first fit would take c2's.
  ASSERT_GT(claimed1, claimed2);
  s.Requeue(victim_of[c1], 110 * kS);
  s.Requeue(victim_of[c2], 110 * kS);
  s.Schedule(110 * kS);
  ASSERT_EQ(s.job(c1).phase, Phase::kRunning);
  ASSERT_EQ(s.job(c2).phase, Phase::kRunning);
  EXPECT_EQ(s.job(c1).alloc.at(0).gpu_mask, claimed1);
  EXPECT_EQ(s.job(c2).alloc.at(0).gpu_mask, claimed2);
}

// A critical claimant whose own claim is gone (its node failed) takes GPUs held for
// another claim where nothing else is free: it tries its own claim first, then, free to
// use held GPUs, all of them.
TEST(GantryPreemptionTest, ACriticalClaimantWhoseClaimIsGoneTakesOtherHeldGpus) {
  const Catalog catalog = Catalog::BuiltIn();
  const Cluster cluster = MakeCluster({Pool(catalog, "h", 3, 1, "H100-80GB")});
  const QueueTree queues =
      MakeQueues({QueueSpec{"serving", "", kGpuUnits, -1, 1, {}, {}, false, {}, {}, {}, {}},
                  QueueSpec{"train", "", 2 * kGpuUnits, -1, 1, {}, {}, false, {}, {}, {}, {}},
                  QueueSpec{"research", "", 0, -1, 1, {}, {}, false, {}, {}, {}, {}}});
  Scheduler s(cluster, queues, MakePolicy("gantry"), PolicyParams{});
  auto submit = [&](const char* id, const char* queue, Tier tier, int replicas, Ticks grace,
                    Ticks now) {
    JobSpec j = Whole(catalog, id, replicas, 1);
    j.queue = *queues.Find(queue);
    j.tier = tier;
    j.grace = grace;
    return s.Submit(j, now);
  };
  const JobId v0 = submit("v0", "research", Tier::kBestEffort, 1, 1000 * kS, 0);
  const JobId v1 = submit("v1", "research", Tier::kBestEffort, 1, 10 * kS, 0);
  const JobId v2 = submit("v2", "research", Tier::kBestEffort, 1, 1000 * kS, 0);
  s.Schedule(0);
  // The critical job claims v0's GPU, the standard gang (inside its guarantee) v1's and v2's.
  const JobId crit = submit("crit", "serving", Tier::kCritical, 1, 10 * kS, 100 * kS);
  const JobId gang = submit("gang", "train", Tier::kStandard, 2, 10 * kS, 100 * kS);
  std::map<JobId, JobId> by;  // victim -> preemptor
  for (const Decision& d : s.Schedule(100 * kS)) {
    if (d.kind == Decision::Kind::kPreempt) by[d.job] = d.by;
  }
  ASSERT_EQ(by.size(), 3u);
  ASSERT_EQ(by[v0], crit);
  ASSERT_EQ(by[v1], gang);
  ASSERT_EQ(by[v2], gang);
  const NodeId claimed = s.job(v0).alloc.at(0).node;
  const NodeId held = s.job(v1).alloc.at(0).node;
  // v1 leaves: its GPU is held for the gang, which still waits for v2.
  s.Requeue(v1, 110 * kS);
  s.Schedule(110 * kS);
  ASSERT_EQ(s.job(gang).phase, Phase::kPending);
  // The critical job's claimed node fails (its victim with it): the only free GPU is
  // the one held for the gang.
  for (JobId hit : s.SetNodeUp(claimed, false)) s.Requeue(hit, 120 * kS);
  s.Schedule(120 * kS);
  ASSERT_EQ(s.job(crit).phase, Phase::kRunning);
  EXPECT_EQ(s.job(crit).alloc.at(0).node, held);
}

// max_wait: a gang kept waiting by a stream of small jobs that overrun their estimates
// (each backfilled because its estimate ended before the gang's receding reservation).
// Returns when the gang started (-1: still waiting at 2,000 s).
Ticks GangStartUnderAStreamOfSmallJobs(Ticks max_wait) {
  const Catalog catalog = Catalog::BuiltIn();
  const Cluster cluster = MakeCluster({Pool(catalog, "h", 1, 8, "H100-80GB")});
  QueueSpec q;
  q.name = "q";
  const QueueTree queues = MakeQueues({q});
  PolicyParams params;
  params.max_wait = max_wait;
  params.preempt_after_checkpoint = 5 * kS;
  params.best_effort_yields_to = Tier::kCritical;  // only the drain takes best-effort work
  Scheduler sched(cluster, queues, MakePolicy("gantry"), params);
  std::map<JobId, Ticks> runs;  // how long each small job runs once started
  auto small = [&](int i, Ticks now, Ticks run) {
    JobSpec j = Whole(catalog, "s" + std::to_string(i), 1, 1);
    j.runtime_estimate = 10 * kS;
    j.grace = 5 * kS;
    const JobId id = sched.Submit(j, now);
    runs[id] = run;
    return id;
  };
  // Eight small jobs, one per GPU, ending 100-170 s in; each is replaced as it ends by one
  // that runs 100 s, so the node never empties.
  int next = 0;
  for (int i = 0; i < 8; ++i) small(next++, 0, (100 + 10 * i) * kS);
  JobSpec g = Whole(catalog, "gang", 1, 8);
  g.runtime_estimate = 1000 * kS;
  const JobId gang = sched.Submit(g, 0);
  std::map<Ticks, std::vector<JobId>> ends;  // when the driver ends a run
  auto pass = [&](Ticks now) {
    for (const Decision& d : sched.Schedule(now)) {
      if (d.kind == Decision::Kind::kStart && d.job != gang)
        ends[now + runs[d.job]].push_back(d.job);
    }
  };
  pass(0);
  for (Ticks now = kS; now <= 2000 * kS; now += kS) {
    if (auto it = ends.find(now); it != ends.end()) {
      for (JobId id : it->second) {
        const JobRecord& job = sched.job(id);
        if (job.phase == Phase::kRunning && job.last_start + runs[id] == now) {
          sched.Finish(id, now, true);
          small(next++, now, 100 * kS);
        }
      }
      ends.erase(it);
    }
    pass(now);
    if (sched.job(gang).phase == Phase::kRunning) return now;
  }
  return -1;
}

TEST(GantryMaxWaitTest, AGangPastMaxWaitStartsWithinItsBound) {
  // Without a bound the stream keeps the gang out for good.
  EXPECT_EQ(GangStartUnderAStreamOfSmallJobs(0), -1);
  // Past 300 s it drains: no small job starts on its GPUs, so it starts when the last of
  // those running then ends: within 300 + 100 s.
  const Ticks start = GangStartUnderAStreamOfSmallJobs(300 * kS);
  EXPECT_GT(start, 300 * kS);
  EXPECT_LE(start, 400 * kS);
}

// max_wait against a queue's burst limit: the cluster has room, the queue's 8-GPU burst
// does not, and each 1-GPU job that ends gives its room to the next one (a 4-GPU job
// never finds four free at once). Returns when the 4-GPU job started (-1: not by 2,000 s).
Ticks WideJobStartUnderItsQueuesBurst(Ticks max_wait) {
  const Catalog catalog = Catalog::BuiltIn();
  const Cluster cluster = MakeCluster({Pool(catalog, "h", 2, 8, "H100-80GB")});
  QueueSpec q;
  q.name = "q";
  q.burst = 8 * kGpuUnits;
  const QueueTree queues = MakeQueues({q});
  PolicyParams params;
  params.max_wait = max_wait;
  Scheduler sched(cluster, queues, MakePolicy("gantry"), params);
  std::map<Ticks, std::vector<JobId>> ends;
  int next = 0;
  auto small = [&](Ticks now) {
    JobSpec j = Whole(catalog, "s" + std::to_string(next++), 1, 1);
    j.runtime_estimate = 100 * kS;
    return sched.Submit(j, now);
  };
  for (int i = 0; i < 8; ++i) small(0);
  JobSpec w = Whole(catalog, "wide", 1, 4);
  w.runtime_estimate = 100 * kS;
  const JobId wide = sched.Submit(w, 0);
  for (int i = 0; i < 8; ++i) small(0);  // queued behind it, ready to take any room
  Ticks step = 0;  // the first eight end 20 s apart, each later one 100 s after it starts
  for (Ticks now = 0; now <= 2000 * kS; now += kS) {
    if (auto it = ends.find(now); it != ends.end()) {
      for (JobId id : it->second) {
        sched.Finish(id, now, true);
        small(now);
      }
      ends.erase(it);
    }
    for (const Decision& d : sched.Schedule(now)) {
      if (d.kind != Decision::Kind::kStart || d.job == wide) continue;
      ends[now + (now == 0 ? (step += 20 * kS) : 100 * kS)].push_back(d.job);
    }
    if (sched.job(wide).phase == Phase::kRunning) return now;
  }
  return -1;
}

TEST(GantryMaxWaitTest, AJobKeptOutByItsQueuesBurstLimitStartsPastMaxWait) {
  EXPECT_EQ(WideJobStartUnderItsQueuesBurst(0), -1);
  // Past 300 s the room that frees under the burst is held for it: no 1-GPU job takes
  // it, so it starts once four have ended (one every 20 s here), well within 300 + 100 s.
  const Ticks start = WideJobStartUnderItsQueuesBurst(300 * kS);
  EXPECT_GT(start, 300 * kS);
  EXPECT_LE(start, 400 * kS);
}

// With best_effort_yields_to: standard (the default), beyond its guarantee a standard job
// takes best-effort work only while that work would lose at most best_effort_yields_within
// (an hour by default) since its start or last checkpoint; a critical job takes it
// regardless; with critical it is left to critical work alone.
TEST(GantryPreemptionTest, StandardWorkTakesOnlyYoungBestEffortWorkBeyondItsGuarantee) {
  const Catalog catalog = Catalog::BuiltIn();
  const Cluster cluster = MakeCluster({Pool(catalog, "h", 1, 8, "H100-80GB")});
  const QueueTree queues =
      MakeQueues({QueueSpec{"train", "", 0, -1, 1, {}, {}, false, {}, {}, {}, {}},
                  QueueSpec{"serve", "", 0, -1, 1, {}, {}, false, {}, {}, {}, {}},
                  QueueSpec{"lab", "", 0, -1, 1, {}, {}, false, {}, {}, {}, {}}});
  // Four best-effort jobs of 2 GPUs that never checkpoint fill the node: two started at
  // 0 s, two at 3,000 s. At 4,000 s a standard and then a critical job of 2 GPUs arrive.
  // Returns who each of them took (nothing: still waiting).
  auto run = [&](PolicyParams params, Tier tier) {
    Scheduler s(cluster, queues, MakePolicy("gantry"), params);
    std::vector<JobId> be;
    for (int i = 0; i < 4; ++i) {
      JobSpec j = Whole(catalog, "nb" + std::to_string(i), 1, 2);
      j.queue = *queues.Find("lab");
      j.tier = Tier::kBestEffort;
      const Ticks at = i < 2 ? 0 : 3000 * kS;
      be.push_back(s.Submit(j, at));
      s.Schedule(at);
    }
    JobSpec j = Whole(catalog, "job", 1, 2);
    j.queue = *queues.Find(tier == Tier::kCritical ? "serve" : "train");
    j.tier = tier;
    s.Submit(j, 4000 * kS);
    std::vector<int> taken;  // indexes into be
    for (const Decision& d : s.Schedule(4000 * kS)) {
      if (d.kind == Decision::Kind::kPreempt)
        taken.push_back(static_cast<int>(std::find(be.begin(), be.end(), d.job) - be.begin()));
    }
    return taken;
  };
  PolicyParams defaults;
  ASSERT_EQ(defaults.best_effort_yields_to, Tier::kStandard);
  ASSERT_EQ(defaults.best_effort_yields_within, 3600 * kS);
  // The standard job takes a job that ran 1,000 s (the cheapest), never one of 4,000 s.
  EXPECT_EQ(run(defaults, Tier::kStandard), std::vector<int>{2});
  // Within 500 s: none of them is young enough; the standard job waits.
  PolicyParams tight = defaults;
  tight.best_effort_yields_within = 500 * kS;
  EXPECT_EQ(run(tight, Tier::kStandard), std::vector<int>{});
  // Critical work takes the cheapest regardless of the limit.
  EXPECT_EQ(run(tight, Tier::kCritical), std::vector<int>{2});
  // No limit: the standard job takes the cheapest, as critical work does.
  PolicyParams unlimited = defaults;
  unlimited.best_effort_yields_within = 0;
  EXPECT_EQ(run(unlimited, Tier::kStandard), std::vector<int>{2});
  // With best_effort_yields_to: critical, standard work beyond its guarantee waits.
  PolicyParams critical_only = defaults;
  critical_only.best_effort_yields_to = Tier::kCritical;
  EXPECT_EQ(run(critical_only, Tier::kStandard), std::vector<int>{});
  EXPECT_EQ(run(critical_only, Tier::kCritical), std::vector<int>{2});
}

// max_wait with preemption: a standard gang outside its queue's guarantee behind
// best-effort jobs that run for hours (checkpointing every 100 s, 10 s of grace). Returns
// when the gang started and how many preemptions it took (-1: still waiting at 2,000 s).
std::pair<Ticks, int> GangStartBehindLongBestEffortJobs(Ticks max_wait) {
  const Catalog catalog = Catalog::BuiltIn();
  const Cluster cluster = MakeCluster({Pool(catalog, "h", 1, 8, "H100-80GB")});
  const QueueTree queues =
      MakeQueues({QueueSpec{"train", "", 0, -1, 1, {}, {}, false, {}, {}, {}, {}},
                  QueueSpec{"scavenge", "", 0, -1, 1, {}, {}, false, {}, {}, {}, {}}});
  PolicyParams params;
  params.max_wait = max_wait;
  params.preempt_after_checkpoint = 5 * kS;
  params.best_effort_yields_to = Tier::kCritical;  // only the drain takes best-effort work
  Scheduler sched(cluster, queues, MakePolicy("gantry"), params);
  for (int i = 0; i < 8; ++i) {
    JobSpec j = Whole(catalog, "be" + std::to_string(i), 1, 1);
    j.queue = *queues.Find("scavenge");
    j.tier = Tier::kBestEffort;
    j.checkpoint = 100 * kS;
    j.grace = 10 * kS;
    sched.Submit(j, 0);
  }
  sched.Schedule(0);
  JobSpec g = Whole(catalog, "gang", 1, 8);
  g.queue = *queues.Find("train");
  g.runtime_estimate = 1000 * kS;
  const JobId gang = sched.Submit(g, kS);
  std::map<Ticks, std::vector<JobId>> released;  // when each victim's grace ends
  int preemptions = 0;
  for (Ticks now = kS; now <= 2000 * kS; now += kS) {
    if (auto it = released.find(now); it != released.end()) {
      for (JobId v : it->second) sched.Requeue(v, now);
      released.erase(it);
    }
    for (const Decision& d : sched.Schedule(now)) {
      if (d.kind != Decision::Kind::kPreempt) continue;
      ++preemptions;
      released[now + 10 * kS].push_back(d.job);
      // The victims are told why: the gang waited past max_wait_s.
      EXPECT_EQ(
          d.reason,
          "standard job gang, waiting past max_wait_s, needs capacity held by best-effort work");
    }
    if (sched.job(gang).phase == Phase::kRunning) return {now, preemptions};
  }
  return {-1, preemptions};
}

TEST(GantryMaxWaitTest, ADrainPreemptsBestEffortWorkAtItsCheckpoints) {
  // Outside its guarantee the gang never preempts: the best-effort jobs keep the node.
  EXPECT_EQ(GangStartBehindLongBestEffortJobs(0), (std::pair<Ticks, int>(-1, 0)));
  // Past 300 s it drains the node and takes the eight jobs just after a checkpoint: it
  // starts within 300 s + a checkpoint interval (100 s) + their grace (10 s).
  const auto [start, preemptions] = GangStartBehindLongBestEffortJobs(300 * kS);
  EXPECT_GT(start, 300 * kS);
  EXPECT_LE(start, 410 * kS);
  EXPECT_EQ(preemptions, 8);
}

// A claim comes before a drain: a standard job inside its guarantee preempts the
// best-effort job on the GPUs a best-effort drain waits for. When its victim leaves, the
// claimant starts there; before, the drain took the GPUs, the claimant preempted the
// drain's owner, which drained again, and so on for ever (property seed 8).
TEST(GantryMaxWaitTest, AClaimOnADrainsGpusIsServedFirst) {
  const Catalog catalog = Catalog::BuiltIn();
  const Cluster cluster = MakeCluster({Pool(catalog, "h", 1, 4, "H100-80GB")});
  const QueueTree queues =
      MakeQueues({QueueSpec{"serving", "", 4 * kGpuUnits, -1, 1, {}, {}, false, {}, {}, {}, {}},
                  QueueSpec{"batch", "", 0, -1, 1, {}, {}, false, {}, {}, {}, {}}});
  PolicyParams params;
  params.max_wait = 100 * kS;
  Scheduler s(cluster, queues, MakePolicy("gantry"), params);
  auto submit = [&](const char* id, const char* queue, Tier tier, Ticks now) {
    JobSpec j = Whole(catalog, id, 1, 4);
    j.queue = *queues.Find(queue);
    j.tier = tier;
    j.grace = 30 * kS;
    j.runtime_estimate = 1000 * kS;
    return s.Submit(j, now);
  };
  int preemptions = 0;
  auto pass = [&](Ticks now) {
    for (const Decision& d : s.Schedule(now)) preemptions += d.kind == Decision::Kind::kPreempt;
  };
  const JobId running = submit("running", "batch", Tier::kBestEffort, 0);
  pass(0);
  const JobId drainer = submit("drainer", "batch", Tier::kBestEffort, kS);
  pass(kS);
  pass(101 * kS);  // past max_wait: it drains the node (best-effort work never preempts)
  ASSERT_EQ(s.job(drainer).phase, Phase::kPending);
  const JobId standard = submit("standard", "serving", Tier::kStandard, 200 * kS);
  pass(200 * kS);
  ASSERT_EQ(preemptions, 1);
  ASSERT_EQ(s.job(running).phase, Phase::kSignaled);
  s.Requeue(running, 230 * kS);
  pass(230 * kS);
  EXPECT_EQ(s.job(standard).phase, Phase::kRunning);
  EXPECT_EQ(s.job(drainer).phase, Phase::kPending);
  EXPECT_EQ(preemptions, 1);
}

}  // namespace
}  // namespace gantry::core
