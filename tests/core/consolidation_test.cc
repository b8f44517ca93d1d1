// Consolidation (policy.consolidate_within_s, core/policy/consolidator.h): a job that
// fits nowhere moves running jobs elsewhere where that makes room, within the limits.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "core/scheduler.h"
#include "test_util.h"

namespace gantry::core {
namespace {

using testing::kS;

struct Case {
  Tier movers = Tier::kStandard;  // tier of the running shared jobs
  Tier job = Tier::kStandard;     // tier of the whole-GPU job that arrives
  Ticks checkpoint = 0;           // the running jobs' checkpoint interval
};

// Two nodes of one shared GPU. At 0 s three jobs of half a GPU start (two packed on one GPU,
// the third on the other); at 10 s one of the pair ends, leaving part of each GPU
// used. At 1,000 s (past min_run_before_repreempt, 600 s) a job of one whole GPU arrives:
// it fits nowhere as things are.
class ConsolidationTest : public ::testing::Test {
 protected:
  const Catalog catalog_ = Catalog::BuiltIn();
  const Cluster cluster_ =
      testing::MakeCluster({testing::Pool(catalog_, "s", 2, 1, "H100-80GB", 0, 1, testing::kAll)});
  const QueueTree queues_ =
      testing::MakeQueues({QueueSpec{"q", "", 0, -1, 1, {}, {}, false, {}, {}, {}, {}}});

  // Runs case `c` (the job arriving at `at`); returns the pass's decisions then (the pointers
  // Preemptions gives point into them).
  std::vector<Decision> Run(const Case& c, Ticks consolidate_within, Ticks at = 1000 * kS) {
    PolicyParams params;
    params.consolidate_within = consolidate_within;
    s_ = std::make_unique<Scheduler>(cluster_, queues_, MakePolicy("gantry"), params);
    running_.clear();
    for (int i = 0; i < 3; ++i) {
      JobSpec j = testing::Shared(catalog_, "shared" + std::to_string(i), Sharing::kMps, 500, 10);
      j.tier = c.movers;
      j.checkpoint = c.checkpoint;
      running_.push_back(s_->Submit(j, 0));
    }
    s_->Schedule(0);
    for (JobId id : running_) EXPECT_EQ(s_->job(id).phase, Phase::kRunning);
    // The one that shares its GPU with another ends.
    auto node = [&](size_t i) { return s_->job(running_[i]).alloc[0].node; };
    const JobId mate = node(1) == node(0) || node(2) == node(0) ? running_[0] : running_[1];
    EXPECT_TRUE(node(0) == node(1) || node(0) == node(2) || node(1) == node(2));
    s_->Finish(mate, 10 * kS, true);
    std::erase(running_, mate);
    JobSpec big = testing::Whole(catalog_, "big", 1, 1);
    big.tier = c.job;
    big_ = s_->Submit(big, at);
    return s_->Schedule(at);
  }

  static std::vector<const Decision*> Preemptions(const std::vector<Decision>& decisions) {
    std::vector<const Decision*> out;
    for (const Decision& d : decisions) {
      if (d.kind == Decision::Kind::kPreempt) out.push_back(&d);
    }
    return out;
  }

  std::unique_ptr<Scheduler> s_;
  std::vector<JobId> running_;  // the two shared jobs left running
  JobId big_;
};

TEST_F(ConsolidationTest, OffByDefaultTheJobWaits) {
  ASSERT_EQ(PolicyParams{}.consolidate_within, 0);
  EXPECT_TRUE(Preemptions(Run(Case{}, 0)).empty());
  EXPECT_EQ(s_->job(big_).phase, Phase::kPending);
  EXPECT_EQ(s_->job(big_).wait.cause, WaitCause::kCapacity);
}

TEST_F(ConsolidationTest, OneJobMovesAndBothStart) {
  const auto decisions = Run(Case{}, 3600 * kS);
  const auto moved = Preemptions(decisions);
  ASSERT_EQ(moved.size(), 1u);
  const JobId mover = moved[0]->job;
  const JobId stays = mover == running_[0] ? running_[1] : running_[0];
  EXPECT_EQ(moved[0]->by, big_);
  EXPECT_EQ(moved[0]->reason.rfind("consolidation: moved to node ", 0), 0u) << moved[0]->reason;
  EXPECT_NE(moved[0]->reason.find("to make room for standard job big"), std::string::npos)
      << moved[0]->reason;
  const NodeId freed = s_->job(mover).alloc[0].node;
  const NodeId other = s_->job(stays).alloc[0].node;
  EXPECT_NE(moved[0]->reason.find(cluster_.node(other).name), std::string::npos)
      << moved[0]->reason;
  EXPECT_EQ(s_->job(big_).wait.cause, WaitCause::kPreemption);
  // Its grace over, the moved job leaves; the big job takes its node, and the moved job
  // shares the other GPU with the one that stayed.
  s_->Requeue(mover, 1030 * kS);
  const auto after = s_->Schedule(1030 * kS);
  EXPECT_TRUE(Preemptions(after).empty());
  ASSERT_EQ(s_->job(big_).phase, Phase::kRunning);
  EXPECT_EQ(s_->job(big_).alloc[0].node, freed);
  ASSERT_EQ(s_->job(mover).phase, Phase::kRunning);
  EXPECT_EQ(s_->job(mover).alloc[0].node, other);
  EXPECT_EQ(s_->job(stays).phase, Phase::kRunning);
  EXPECT_EQ(s_->job(stays).preemptions, 0);
}

TEST_F(ConsolidationTest, NoMoveWhereTheMovedJobWouldFindNoRoom) {
  // Two jobs of 0.6, one per GPU: neither fits beside the other, so moving one makes
  // no room.
  PolicyParams params;
  params.consolidate_within = 3600 * kS;
  Scheduler s(cluster_, queues_, MakePolicy("gantry"), params);
  std::vector<JobId> jobs;
  for (int i = 0; i < 2; ++i) {
    jobs.push_back(s.Submit(
        testing::Shared(catalog_, "shared" + std::to_string(i), Sharing::kMps, 600, 10), 0));
  }
  s.Schedule(0);
  ASSERT_EQ(s.job(jobs[0]).phase, Phase::kRunning);
  ASSERT_EQ(s.job(jobs[1]).phase, Phase::kRunning);
  const JobId big = s.Submit(testing::Whole(catalog_, "big", 1, 1), 1000 * kS);
  EXPECT_TRUE(Preemptions(s.Schedule(1000 * kS)).empty());
  EXPECT_EQ(s.job(big).phase, Phase::kPending);
}

TEST_F(ConsolidationTest, OnlyJobsThatLoseLittleMove) {
  // The running jobs have run 1,000 s and never checkpoint: 50 s is too little to move them.
  EXPECT_TRUE(Preemptions(Run(Case{}, 50 * kS)).empty());
  EXPECT_EQ(s_->job(big_).phase, Phase::kPending);
  // Checkpointing every 60 s, at 1,000 s they would lose 40 s: they may move.
  Case checkpointing;
  checkpointing.checkpoint = 60 * kS;
  EXPECT_EQ(Preemptions(Run(checkpointing, 50 * kS)).size(), 1u);
}

TEST_F(ConsolidationTest, NotWithinMinRunOfTheirStart) {
  // At 100 s they started less than min_run_before_repreempt (600 s) ago: none moves.
  EXPECT_TRUE(Preemptions(Run(Case{}, 3600 * kS, 100 * kS)).empty());
  EXPECT_EQ(s_->job(big_).phase, Phase::kPending);
  EXPECT_EQ(Preemptions(Run(Case{}, 3600 * kS, 600 * kS)).size(), 1u);
}

TEST_F(ConsolidationTest, NeverCriticalWorkNorAHigherTier) {
  Case critical;
  critical.movers = Tier::kCritical;
  EXPECT_TRUE(Preemptions(Run(critical, 3600 * kS)).empty());
  Case lower;  // a best-effort job does not move standard work
  lower.job = Tier::kBestEffort;
  EXPECT_TRUE(Preemptions(Run(lower, 3600 * kS)).empty());
  Case same;  // best-effort work moves for best-effort work (which never preempts)
  same.movers = same.job = Tier::kBestEffort;
  EXPECT_EQ(Preemptions(Run(same, 3600 * kS)).size(), 1u);
  Case up;  // and standard work for critical work (not preemptible here: no guarantee)
  up.job = Tier::kCritical;
  const auto decisions = Run(up, 3600 * kS);
  const auto moved = Preemptions(decisions);
  ASSERT_EQ(moved.size(), 1u);
  EXPECT_EQ(moved[0]->reason.rfind("consolidation: ", 0), 0u) << moved[0]->reason;
}

}  // namespace
}  // namespace gantry::core
