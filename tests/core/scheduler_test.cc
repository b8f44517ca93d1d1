#include "core/scheduler.h"

#include <algorithm>

#include <gtest/gtest.h>

#include "test_util.h"

namespace gantry::core {
namespace {

using testing::MakeCluster;
using testing::MakeQueues;
using testing::Pool;
using testing::Whole;

using testing::kS;

std::vector<Decision> Of(const std::vector<Decision>& ds, Decision::Kind kind) {
  std::vector<Decision> out;
  for (const auto& d : ds) {
    if (d.kind == kind) out.push_back(d);
  }
  return out;
}

class SchedulerTest : public ::testing::Test {
 protected:
  SchedulerTest()
      : catalog_(Catalog::BuiltIn()),
        cluster_(MakeCluster({Pool(catalog_, "h", 2, 8, "H100-80GB")})),
        queues_(MakeQueues(
            {QueueSpec{"a", "", 4 * kGpuUnits, 8 * kGpuUnits, 1, {}, {}, false, {}, {}, {}, {}},
             QueueSpec{"b", "", 4 * kGpuUnits, -1, 1, {}, {}, false, {}, {}, {}, {}}})),
        sched_(cluster_, queues_, MakePolicy("fifo")) {}

  JobSpec Job(const char* id, int replicas, int gpus, const char* queue = "b") {
    JobSpec j = Whole(catalog_, id, replicas, gpus);
    j.queue = *queues_.Find(queue);
    return j;
  }

  Catalog catalog_;
  Cluster cluster_;
  QueueTree queues_;
  Scheduler sched_;
};

TEST_F(SchedulerTest, TiersFirstThenArrivalAndGreedyBackfillOfWhatFits) {
  JobId big = sched_.Submit(Job("big", 1, 8), 0);
  JobId huge = sched_.Submit(Job("huge", 2, 8), 0);  // does not fit after big
  JobId small = sched_.Submit(Job("small", 1, 4), 0);
  JobSpec c = Job("crit", 1, 4);
  c.tier = Tier::kCritical;
  JobId crit = sched_.Submit(c, 1);
  auto starts = Of(sched_.Schedule(1 * kS), Decision::Kind::kStart);
  ASSERT_EQ(starts.size(), 3u);
  EXPECT_EQ(starts[0].job, crit);  // critical first despite arriving last
  EXPECT_EQ(starts[1].job, big);
  EXPECT_EQ(starts[2].job, small);
  EXPECT_EQ(sched_.job(huge).phase, Phase::kPending);
  EXPECT_NE(sched_.job(huge).wait_reason.find("capacity"), std::string::npos);
}

TEST_F(SchedulerTest, BurstLimitHoldsAndTheReasonSaysSo) {
  JobId a1 = sched_.Submit(Job("a1", 1, 8, "a"), 0);
  JobId a2 = sched_.Submit(Job("a2", 1, 1, "a"), 0);
  auto ds = sched_.Schedule(0);
  EXPECT_EQ(sched_.job(a1).phase, Phase::kRunning);
  EXPECT_EQ(sched_.job(a2).phase, Phase::kPending);
  EXPECT_EQ(sched_.queue_usage(*queues_.Find("a")), 8 * kGpuUnits);
  auto waits = Of(ds, Decision::Kind::kWait);
  ASSERT_EQ(waits.size(), 1u);
  EXPECT_NE(waits[0].reason.find("burst_gpus 8"), std::string::npos) << waits[0].reason;
  sched_.Finish(a1, 10 * kS);
  sched_.Schedule(10 * kS);
  EXPECT_EQ(sched_.job(a2).phase, Phase::kRunning);
}

TEST_F(SchedulerTest, JobsThatCouldNeverRunAreRejected) {
  JobSpec too_much_vram = Job("v", 1, 1);
  too_much_vram.vram_bytes = 200 * kGB;
  JobId v = sched_.Submit(too_much_vram, 0);
  JobId q = sched_.Submit(Job("q", 2, 8, "a"), 0);  // 16 GPUs > burst 8 of queue a
  auto rejects = Of(sched_.Schedule(0), Decision::Kind::kReject);
  ASSERT_EQ(rejects.size(), 2u);
  EXPECT_EQ(rejects[0].job, v);
  EXPECT_EQ(rejects[1].job, q);
  EXPECT_NE(rejects[1].reason.find("burst_gpus 8 of queue a"), std::string::npos);
  EXPECT_EQ(sched_.job(v).phase, Phase::kDone);
}

TEST(SchedulerTiers, AJobOfATierItsQueueMayNotUseIsRejected) {
  const Catalog catalog = Catalog::BuiltIn();
  const Cluster cluster = MakeCluster({Pool(catalog, "h", 1, 8, "H100-80GB")});
  QueueSpec team{"team", "", 0, -1, 1, {}, {}, false, {}, {}, {}, {}};
  team.tiers = Bit(Tier::kStandard) | Bit(Tier::kBestEffort);
  const QueueTree queues = MakeQueues({team});
  Scheduler sched(cluster, queues, MakePolicy("gantry"), PolicyParams{});
  JobSpec critical = Whole(catalog, "c", 1, 1);
  critical.tier = Tier::kCritical;
  const JobId c = sched.Submit(critical, 0);
  const JobId s = sched.Submit(Whole(catalog, "s", 1, 1), 0);
  auto rejects = Of(sched.Schedule(0), Decision::Kind::kReject);
  ASSERT_EQ(rejects.size(), 1u);
  EXPECT_EQ(rejects[0].job, c);
  EXPECT_EQ(
      rejects[0].reason,
      "asks for tier critical, which queue team may not use (its tiers: standard, best-effort)");
  EXPECT_EQ(sched.job(s).phase, Phase::kRunning);
}

TEST_F(SchedulerTest, WindowsHoldJobsUntilTheyOpen) {
  JobSpec j = Job("w", 1, 1);
  j.window = Window{20 * 60, 8 * 60};
  JobId w = sched_.Submit(j, 12 * 3600 * kS);  // noon
  sched_.Schedule(12 * 3600 * kS);
  EXPECT_EQ(sched_.job(w).phase, Phase::kPending);
  EXPECT_EQ(sched_.next_wakeup(), 20 * 3600 * kS);
  sched_.Schedule(20 * 3600 * kS);
  EXPECT_EQ(sched_.job(w).phase, Phase::kRunning);
}

TEST_F(SchedulerTest, NodeFailureReturnsItsJobsAndRequeueKeepsTheirPlace) {
  JobId a = sched_.Submit(Job("a", 1, 8), 0);
  JobId b = sched_.Submit(Job("b", 1, 8), 0);
  sched_.Schedule(0);
  const NodeId node_of_a = sched_.job(a).alloc[0].node;
  auto hit = sched_.SetNodeUp(node_of_a, false);
  ASSERT_EQ(hit.size(), 1u);
  EXPECT_EQ(hit[0], a);
  sched_.Requeue(a, 5 * kS);
  JobId c = sched_.Submit(Job("c", 1, 8), 6 * kS);
  sched_.Schedule(6 * kS);
  EXPECT_EQ(sched_.job(a).phase, Phase::kPending);  // its node is down, the other is b's
  sched_.SetNodeUp(node_of_a, true);
  sched_.Schedule(7 * kS);
  EXPECT_EQ(sched_.job(a).phase, Phase::kRunning);  // a was in line before c
  EXPECT_EQ(sched_.job(c).phase, Phase::kPending);
  EXPECT_EQ(sched_.job(b).phase, Phase::kRunning);
}

TEST_F(SchedulerTest, WorkersThatEndEarlyFreeTheirGpusWhileTheRestRunsOn) {
  // A gang of two whole nodes; one worker ends (a Kubernetes pod that succeeded): its node
  // is free for the next job while the other worker keeps its node and the job runs on.
  JobId gang = sched_.Submit(Job("gang", 2, 8), 0);
  sched_.Schedule(0);
  ASSERT_EQ(sched_.job(gang).phase, Phase::kRunning);
  JobId next = sched_.Submit(Job("next", 1, 8), 1 * kS);
  sched_.Schedule(1 * kS);
  EXPECT_EQ(sched_.job(next).phase, Phase::kPending);
  const WorkerAlloc stays = sched_.job(gang).alloc[1];
  EXPECT_EQ(sched_.queue_usage(*queues_.Find("b")), 16 * kGpuUnits);
  sched_.ReleaseWorkers(gang, {0}, 2 * kS);
  EXPECT_EQ(sched_.job(gang).phase, Phase::kRunning);
  ASSERT_EQ(sched_.job(gang).alloc.size(), 1u);
  EXPECT_EQ(sched_.job(gang).alloc[0].node, stays.node);
  EXPECT_EQ(sched_.job(gang).units, 8 * kGpuUnits);
  EXPECT_EQ(sched_.queue_usage(*queues_.Find("b")), 8 * kGpuUnits);
  sched_.Audit();  // the gang holds all its workers but the one released
  sched_.Schedule(2 * kS);
  ASSERT_EQ(sched_.job(next).phase, Phase::kRunning);
  EXPECT_NE(sched_.job(next).alloc[0].node, stays.node);
  sched_.Audit();
  // Its next run (after a requeue) is the whole gang again.
  sched_.Requeue(gang, 3 * kS);
  EXPECT_EQ(sched_.queue_usage(*queues_.Find("b")), 8 * kGpuUnits);
  sched_.Finish(next, 4 * kS, true);
  sched_.Schedule(4 * kS);
  ASSERT_EQ(sched_.job(gang).phase, Phase::kRunning);
  EXPECT_EQ(sched_.job(gang).alloc.size(), 2u);
  sched_.Audit();
  // Not all of them, nor a worker it does not have.
  EXPECT_THROW(sched_.ReleaseWorkers(gang, {0, 1}, 5 * kS), InvariantBroken);
  EXPECT_THROW(sched_.ReleaseWorkers(gang, {2}, 5 * kS), InvariantBroken);
  EXPECT_EQ(sched_.job(gang).alloc.size(), 2u);
}

TEST_F(SchedulerTest, AnElasticGangStartsAtWhatFitsGrowsAndShrinksAtItsCheckpoints) {
  JobId big = sched_.Submit(Job("big", 1, 8), 0);
  JobSpec e = Job("elastic", 4, 4);
  e.min_replicas = 2;
  e.checkpoint = 100 * kS;
  JobId el = sched_.Submit(e, 0);
  auto ds = sched_.Schedule(0);
  ASSERT_EQ(Of(ds, Decision::Kind::kStart).size(), 2u);
  // 8 GPUs are left after big: 2 of its 4 workers, the least it may run with.
  EXPECT_EQ(sched_.job(el).alloc.size(), 2u);
  EXPECT_EQ(sched_.job(el).released, 2);
  EXPECT_EQ(sched_.queue_usage(*queues_.Find("b")), 16 * kGpuUnits);
  sched_.Audit();
  // big ends; the elastic job grows only at its checkpoint (a resize loses nothing then).
  sched_.Finish(big, 50 * kS, true);
  ds = sched_.Schedule(50 * kS);
  EXPECT_TRUE(Of(ds, Decision::Kind::kResize).empty());
  EXPECT_EQ(sched_.next_wakeup(), 100 * kS);
  ds = sched_.Schedule(100 * kS);
  ASSERT_EQ(Of(ds, Decision::Kind::kResize).size(), 1u);
  EXPECT_EQ(sched_.job(el).alloc.size(), 4u);
  EXPECT_EQ(sched_.job(el).released, 0);
  EXPECT_EQ(sched_.job(el).last_start, 100 * kS);
  EXPECT_EQ(sched_.job(el).progress_kept, 50 * kS) << "100 s at 2 of 4 workers";
  EXPECT_EQ(sched_.queue_usage(*queues_.Find("b")), 16 * kGpuUnits);
  sched_.Audit();
  // Work arrives that needs a node: the growth gives way at the next checkpoint.
  JobId next = sched_.Submit(Job("next", 1, 8), 120 * kS);
  ds = sched_.Schedule(120 * kS);
  EXPECT_EQ(sched_.job(next).phase, Phase::kPending);
  EXPECT_EQ(sched_.next_wakeup(), 200 * kS);
  ds = sched_.Schedule(200 * kS);
  ASSERT_EQ(Of(ds, Decision::Kind::kResize).size(), 1u);
  EXPECT_EQ(sched_.job(el).alloc.size(), 2u);
  EXPECT_EQ(sched_.job(next).phase, Phase::kRunning) << "in the same pass, on what it freed";
  EXPECT_EQ(sched_.job(el).progress_kept, 150 * kS);
  sched_.Audit();
  // While next runs and nothing waits, no growth: the elastic job has no room.
  ds = sched_.Schedule(300 * kS);
  EXPECT_TRUE(Of(ds, Decision::Kind::kResize).empty());
  // An elastic job that cannot start even at its least size now waits, saying so; one
  // whose least size could never fit is rejected.
  JobSpec never = Job("never", 4, 8);
  never.min_replicas = 3;
  JobId n = sched_.Submit(never, 301 * kS);
  JobSpec wide = Job("wide", 4, 8);
  wide.min_replicas = 2;
  JobId w = sched_.Submit(wide, 301 * kS);
  sched_.Schedule(301 * kS);
  EXPECT_EQ(sched_.job(w).phase, Phase::kPending);
  EXPECT_NE(sched_.job(w).wait_reason.find("2 x 8 GPU"), std::string::npos)
      << sched_.job(w).wait_reason;
  EXPECT_EQ(sched_.job(n).phase, Phase::kDone);
}

// A driver that stops the old run before starting the next (gantryd): the workers a shrink
// leaves out keep their GPUs until it says the new run began, a pass up to
// checkpoint_slack late still resizes, and the next checkpoint counts from RunBegan.
TEST_F(SchedulerTest, AResizeThatWaitsForTheDriversRunHoldsTheOldWorkersGpus) {
  PolicyParams params;
  params.resize_waits_for_run = true;
  params.checkpoint_slack = 2 * kS;
  Scheduler sched(cluster_, queues_, MakePolicy("fifo"), params);
  JobSpec e = Job("elastic", 2, 8);
  e.min_replicas = 1;
  e.checkpoint = 100 * kS;
  JobId el = sched.Submit(e, 0);
  sched.Schedule(0);
  ASSERT_EQ(sched.job(el).alloc.size(), 2u);  // the whole cluster
  JobId next = sched.Submit(Job("next", 1, 8), 10 * kS);
  sched.Schedule(10 * kS);
  EXPECT_EQ(sched.next_wakeup(), 100 * kS);
  // The pass comes 1.5 s late: within the slack, at the checkpoint.
  auto ds = sched.Schedule(101'500);
  ASSERT_EQ(Of(ds, Decision::Kind::kResize).size(), 1u);
  EXPECT_EQ(sched.job(el).alloc.size(), 1u);
  EXPECT_EQ(sched.job(next).phase, Phase::kPending) << "rank 1 still runs on the GPUs it gave up";
  sched.Audit();
  ds = sched.Schedule(103 * kS);
  EXPECT_EQ(sched.job(next).phase, Phase::kPending);
  EXPECT_TRUE(Of(ds, Decision::Kind::kResize).empty()) << "mid-resize: no second one";
  sched.RunBegan(el, 104 * kS);  // the old run's workers have ended
  ds = sched.Schedule(104 * kS);
  EXPECT_EQ(sched.job(next).phase, Phase::kRunning);
  EXPECT_EQ(sched.job(el).last_start, 104 * kS);
  sched.Audit();
  // next ends: the job grows back at its new run's checkpoint, 100 s after RunBegan.
  sched.Finish(next, 150 * kS, true);
  sched.Schedule(150 * kS);
  EXPECT_EQ(sched.next_wakeup(), 204 * kS);
  ds = sched.Schedule(204 * kS);
  ASSERT_EQ(Of(ds, Decision::Kind::kResize).size(), 1u);
  EXPECT_EQ(sched.job(el).alloc.size(), 2u);
  sched.RunBegan(el, 206 * kS);
  sched.Finish(el, 207 * kS);
  sched.Audit();
}

TEST_F(SchedulerTest, PassesWithoutReleasesOnlyLookAtNewArrivals) {
  sched_.Submit(Job("a", 2, 8), 0);  // fills the cluster
  JobId w = sched_.Submit(Job("w", 1, 1), 0);
  sched_.Schedule(0);
  EXPECT_EQ(sched_.job(w).phase, Phase::kPending);
  JobId x = sched_.Submit(Job("x", 1, 1), 1);
  const auto& ds = sched_.Schedule(1);
  // Only x is looked at: one wait decision for it, none repeated for w.
  ASSERT_EQ(ds.size(), 1u);
  EXPECT_EQ(ds[0].job, x);
}

TEST_F(SchedulerTest, AnEndedJobForgottenReadsAsEndedAndItsIdIsNeverGivenAgain) {
  JobSpec spec = Job("a", 1, 8);
  spec.command = {"train", "--epochs", "3"};
  spec.env = {{"HOME", "/home/u"}, {"PATH", "/usr/bin"}};
  spec.script = std::string(4096, '#');  // an sbatch script
  JobId a = sched_.Submit(spec, 0);
  JobId never = sched_.Submit(Job("never", 3, 8), 0);  // more GPUs than the cluster has
  ASSERT_EQ(Of(sched_.Schedule(0), Decision::Kind::kReject).size(), 1u);
  EXPECT_FALSE(sched_.Forget(a));  // running: still the scheduler's
  EXPECT_EQ(sched_.job(a).spec.command.size(), 3u);
  sched_.Finish(a, 10 * kS, true);
  EXPECT_TRUE(sched_.Forget(a));
  EXPECT_TRUE(sched_.Forget(never));  // rejected: ended too
  EXPECT_FALSE(sched_.Forget(a));     // once
  EXPECT_EQ(sched_.job(a).phase, Phase::kDone);
  EXPECT_TRUE(sched_.job(a).spec.command.empty());
  EXPECT_TRUE(sched_.job(a).spec.env.empty());
  // Its memory is given back, though later jobs of its chunk of records still run.
  EXPECT_EQ(sched_.job(a).spec.env.capacity(), 0u);
  EXPECT_EQ(sched_.job(a).spec.command.capacity(), 0u);
  EXPECT_LT(sched_.job(a).spec.script.capacity(), 64u);
  // New jobs get new ids and the GPUs a held; the forgotten run still counts in the
  // queue's runtime history.
  JobId b = sched_.Submit(Job("b", 2, 8), 11 * kS);
  EXPECT_GT(b.v, never.v);
  EXPECT_EQ(Of(sched_.Schedule(11 * kS), Decision::Kind::kStart).size(), 1u);
  EXPECT_EQ(sched_.job(b).phase, Phase::kRunning);
  EXPECT_EQ(sched_.Estimate(b), 10 * kS);
}

// full_pass_interval: GPUs freed within the interval of the last full pass wait for the
// next one, with the jobs in line ahead of any that arrive meanwhile; critical arrivals do
// not wait; without a release an arrival is tried at once as before.
// What a piece that keeps running jobs' records across passes is told: every place
// stamped since its last call (a start, a job moved into an ended one's place), all of
// them or a plain "read everything" (the first call, another taker in between).
TEST_F(SchedulerTest, RunningChangesNameEveryStampedPlaceOrSayReadAll) {
  std::vector<uint32_t> changed;
  const int me = 0, other = 0;
  EXPECT_FALSE(sched_.TakeRunningChanges(&me, changed));  // the first call: read all
  JobId a = sched_.Submit(Job("a", 1, 4), 0);
  JobId b = sched_.Submit(Job("b", 1, 4), 0);
  JobId c = sched_.Submit(Job("c", 1, 4), 0);
  sched_.Schedule(1 * kS);
  ASSERT_EQ(sched_.running().size(), 3u);
  auto stamped = [&](const void* taker) {
    const bool all = sched_.TakeRunningChanges(taker, changed);
    std::sort(changed.begin(), changed.end());
    changed.erase(std::unique(changed.begin(), changed.end()), changed.end());
    return all;
  };
  ASSERT_TRUE(stamped(&me));
  EXPECT_EQ(changed, (std::vector<uint32_t>{0, 1, 2}));  // three starts
  ASSERT_TRUE(stamped(&me));
  EXPECT_TRUE(changed.empty());  // nothing since
  // a ends: the last job moves into its place (stamped); the last place is gone (the
  // running set is shorter: a taker drops what it kept past the end).
  const uint32_t at = sched_.running_place(a);
  const std::vector<uint64_t> before = sched_.running_stamps();
  sched_.Finish(a, 2 * kS, true);
  ASSERT_TRUE(stamped(&me));
  ASSERT_EQ(sched_.running().size(), 2u);
  for (uint32_t pos = 0; pos < 2;
       ++pos) {  // exactly the places whose stamp moved, and the gone one
    const bool moved = sched_.running_stamps()[pos] != before[pos];
    EXPECT_EQ(moved, std::find(changed.begin(), changed.end(), pos) != changed.end()) << pos;
  }
  EXPECT_NE(std::find(changed.begin(), changed.end(), at), changed.end());
  (void)b;
  (void)c;
  // Another taker in between: both are told to read everything once.
  sched_.Submit(Job("d", 1, 4), 3 * kS);
  sched_.Schedule(3 * kS);
  EXPECT_FALSE(stamped(&other));
  EXPECT_FALSE(stamped(&me));
  EXPECT_TRUE(stamped(&me));
}

TEST(FullPassInterval, FreedGpusWaitForTheNextFullPassWithTheLineKept) {
  Catalog c = Catalog::BuiltIn();
  Cluster cluster = MakeCluster({Pool(c, "h", 2, 8, "H100-80GB")});
  QueueTree queues = MakeQueues({});
  for (const char* policy : {"fifo", "gantry"}) {
    SCOPED_TRACE(policy);
    PolicyParams params;
    params.full_pass_interval = 10 * kS;
    Scheduler s(cluster, queues, MakePolicy(policy), params);
    const JobId a = s.Submit(Whole(c, "a", 2, 8), 0);  // the whole cluster
    const JobId w = s.Submit(Whole(c, "w", 1, 8), 0);
    s.Schedule(0);  // the first pass is full
    ASSERT_EQ(s.job(a).phase, Phase::kRunning);
    s.Finish(a, 1 * kS);
    s.Schedule(1 * kS);  // 1 s after the last full pass: owed at 10 s
    EXPECT_EQ(s.job(w).phase, Phase::kPending);
    EXPECT_EQ(s.next_wakeup(), 10 * kS);
    // Arrivals meanwhile: a critical job starts, a standard one waits its turn untried.
    JobSpec crit = Whole(c, "crit", 1, 1);
    crit.tier = Tier::kCritical;
    const JobId cr = s.Submit(crit, 2 * kS);
    const JobId x = s.Submit(Whole(c, "x", 1, 8), 2 * kS);
    s.Schedule(2 * kS);
    EXPECT_EQ(s.job(cr).phase, Phase::kRunning);
    EXPECT_EQ(s.job(x).phase, Phase::kPending);
    EXPECT_EQ(s.job(x).wait.cause, WaitCause::kNotYetPlaced);
    EXPECT_EQ(s.job(x).wait.at, 10 * kS);
    EXPECT_EQ(s.job(x).wait_reason,
              "not yet placed: GPUs were freed since the last full pass; it is tried at the next, "
              "at t=10 s, "
              "after the jobs ahead of it (policy.full_pass_interval_s)");
    EXPECT_EQ(s.next_wakeup(), 10 * kS);
    // The owed full pass: w, first in line, takes the free node; x finds no room.
    s.Schedule(10 * kS);
    EXPECT_EQ(s.job(w).phase, Phase::kRunning);
    EXPECT_EQ(s.job(x).phase, Phase::kPending);
    EXPECT_NE(s.job(x).wait.cause, WaitCause::kNotYetPlaced);
    // Nothing freed since: a job that fits is tried and starts as it arrives.
    JobSpec short_job = Whole(c, "y", 1, 2);
    short_job.runtime_estimate = 60 * kS;  // (gantry: it ends before x's reservation)
    const JobId y = s.Submit(short_job, 11 * kS);
    s.Schedule(11 * kS);
    EXPECT_EQ(s.job(y).phase, Phase::kRunning);
  }
}

TEST(SchedulerDeterminism, SameCallsGiveSameDecisions) {
  Catalog c = Catalog::BuiltIn();
  Cluster cluster = MakeCluster({Pool(c, "h", 4, 8, "H100-80GB", 2, 2)});
  QueueTree queues = MakeQueues({});
  auto run = [&] {
    Scheduler s(cluster, queues, MakePolicy("fifo"));
    std::vector<std::pair<uint32_t, uint64_t>> trail;
    for (int i = 0; i < 40; ++i) {
      s.Submit(
          Whole(c, "j" + std::to_string(i), 1 + i % 3, 1 + i % 8, static_cast<Topology>(i % 4)), i);
      for (const auto& d : s.Schedule(i)) {
        if (d.kind == Decision::Kind::kStart) {
          for (const auto& w : s.job(d.job).alloc)
            trail.emplace_back(d.job.v * 1000 + w.node.v, w.gpu_mask);
        }
      }
      if (i % 5 == 4) {
        for (uint32_t j = 0; j < s.job_count(); ++j) {
          if (s.job(JobId(j)).phase == Phase::kRunning) {
            s.Finish(JobId(j), i);
            break;
          }
        }
      }
    }
    return trail;
  };
  EXPECT_EQ(run(), run());
}

TEST_F(SchedulerTest, VramSplitsFitClassesOnlyWhereItChangesWhichModelsHoldTheJob) {
  using testing::Mig;
  using testing::Shared;
  auto fit_class = [&](int64_t vram_gb, JobSpec j) {
    j.vram_bytes = vram_gb * kGB;
    return Scheduler::FitClassOf(j, catalog_);
  };
  const JobSpec whole = Job("w", 1, 2);
  // Whole GPUs (the built-in models hold 16 to 180 GB): 10 and 14 GB fit every model,
  // 20 GB leaves out the 16 GB ones; 50 and 75 GB fit the same models (80 GB and up),
  // 45 GB also the 48 GB one.
  EXPECT_EQ(fit_class(10, whole), fit_class(14, whole));
  EXPECT_NE(fit_class(14, whole), fit_class(20, whole));
  EXPECT_EQ(fit_class(50, whole), fit_class(75, whole));
  EXPECT_NE(fit_class(45, whole), fit_class(50, whole));
  // Exact shapes still tell them apart (the other caches are per shape).
  JobSpec a = whole, b = whole;
  a.vram_bytes = 50 * kGB;
  b.vram_bytes = 75 * kGB;
  EXPECT_NE(Scheduler::ShapeOf(a), Scheduler::ShapeOf(b));
  // A MIG slice: against the profile's memory (1g.10gb holds 10 GB on an A100-80GB).
  const JobSpec mig = Mig(catalog_, "m", "1g.10gb");
  EXPECT_EQ(fit_class(4, mig), fit_class(9, mig));
  EXPECT_NE(fit_class(9, mig), fit_class(11, mig));
  // A shared GPU: the amount decides what fits beside the others on it.
  const JobSpec share = Shared(catalog_, "s", Sharing::kMps, 250, 10);
  EXPECT_NE(fit_class(10, share), fit_class(11, share));
}

}  // namespace
}  // namespace gantry::core
