// The gantry policy's pieces on their own (core/policy/reserver.h, victims.h, held_gpus.h): what
// each answers on a cluster small enough to reason about by hand.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <optional>

#include "core/policy/held_gpus.h"
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
        queues_(
            MakeQueues({QueueSpec{"prod", "", 8 * kGpuUnits, -1, 1, {}, {}, false, {}, {}, {}, {}},
                        QueueSpec{"lab", "", 0, -1, 1, {}, {}, false, {}, {}, {}, {}}})),
        sched_(cluster_, queues_, MakePolicy("fifo")) {}
  JobId Start(const char* id, int gpus, const char* queue, Tier tier, Ticks estimate, Ticks now,
              Ticks checkpoint = 0) {
    JobSpec j = Whole(catalog_, id, 1, gpus);
    j.queue = *queues_.Find(queue);
    j.tier = tier;
    j.runtime_estimate = estimate;
    j.checkpoint = checkpoint;
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
  // Reserver::Earliest in a what-if of its own.
  bool Earliest(Reserver& reserver, JobId id, Ticks now, const std::function<bool(JobId)>& ends_now,
                Ticks& start, Allocation& fit) {
    WhatIf w(sched_);
    return reserver.Earliest(sched_, w, id, now, ends_now, start, fit);
  }
  // The victims `job` needs at `now` (inside its guarantee), in a new pass of `victims`.
  std::vector<JobId> Victims(VictimSelector& victims, JobId job, Ticks now,
                             Allocation* fit = nullptr) {
    victims.NewPass();
    std::vector<JobId> needed;
    Allocation where;
    victims.Prepare(sched_, now);
    WhatIf w(sched_);
    EXPECT_TRUE(victims.Choose(sched_, w, sched_.job(job), VictimSelector::Mode::kGuarantee,
                               ~ModelMask{0}, 0, now, never_, needed, where));
    if (fit) *fit = where;
    return needed;
  }

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
  ASSERT_TRUE(Earliest(reserver, gang, 10 * kS, never_, start, fit));
  EXPECT_EQ(start, 1000 * kS) << "both nodes must be free: the long job's end";
  EXPECT_EQ(fit.size(), 2u);
  EXPECT_EQ(Used(), before) << "the what-if leaves the ledger as it was";

  // A job past its estimate is expected to run as long again as it has run, unless
  // ends_now says it ends now (a backfilled job past its lease).
  const JobId one = Pending("one", 1, 8, "lab", 200 * kS);
  ASSERT_TRUE(Earliest(reserver, one, 200 * kS, never_, start, fit));
  EXPECT_EQ(start, 400 * kS) << "the short job ran 200 s of its 100: 200 s more";
  reserver.NewPass();
  const std::function<bool(JobId)> ends_now = [](JobId) { return true; };
  ASSERT_TRUE(Earliest(reserver, one, 200 * kS, ends_now, start, fit));
  EXPECT_EQ(start, 200 * kS);
}

TEST_F(PiecesTest, AShapeThatFindsNoStartFailsForTheRestOfThePass) {
  Start("a", 8, "lab", Tier::kStandard, 100 * kS, 0);
  const JobId wide = Pending("wide", 2, 8, "lab", 0);
  Reserver reserver;
  Ticks start = -1;
  Allocation fit;
  ASSERT_TRUE(Earliest(reserver, wide, 0, never_, start, fit));
  sched_.SetNodeUp(NodeId(1), false);  // now it cannot fit however long it waits
  EXPECT_FALSE(Earliest(reserver, wide, 0, never_, start, fit));
  sched_.SetNodeUp(NodeId(1), true);
  EXPECT_FALSE(Earliest(reserver, wide, 0, never_, start, fit)) << "cached for the pass";
  reserver.NewPass();
  EXPECT_TRUE(Earliest(reserver, wide, 0, never_, start, fit));
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
  Allocation fit;
  const GpuUnits before = Used();
  EXPECT_EQ(Victims(victims, serve, 10 * kS, &fit), std::vector<JobId>{notebook})
      << "one best-effort job makes the room";
  EXPECT_EQ(fit.size(), 1u);
  EXPECT_EQ(Used(), before);

  // Asking 8: the notebook and the borrowed 4-GPU job on its node, not the 8-GPU job.
  const JobId big = Pending("big", 1, 8, "prod", 10 * kS);
  std::vector<JobId> needed = Victims(victims, big, 10 * kS);
  std::sort(needed.begin(), needed.end());
  EXPECT_EQ(needed, (std::vector<JobId>{notebook, train}));
  EXPECT_EQ(Used(), before);
}

// A victim signaled in one pass stays out of the index in the next, while it is being
// stopped: what the index keeps of running jobs is read again where the scheduler stamped
// their places (a mutant that does not stamp a signal's place chooses the notebook twice).
TEST_F(PiecesTest, AVictimBeingStoppedIsNotChosenAgainInTheNextPass) {
  const JobId notebook = Start("notebook", 4, "lab", Tier::kBestEffort, 1000 * kS, 0);
  const JobId other = Start("other", 4, "lab", Tier::kBestEffort, 1000 * kS, 0);
  Start("rest", 8, "lab", Tier::kStandard, 1000 * kS, 0);
  const JobId serve = Pending("serve", 1, 4, "prod", 10 * kS);
  QueueOrdering ordering;
  ordering.Init(sched_);
  VictimSelector victims(ordering);
  ASSERT_EQ(Victims(victims, serve, 10 * kS), std::vector<JobId>{notebook})
      << "the one that lost least (the lower id)";
  sched_.Preempt(notebook, serve, "for serve", 10 * kS);
  const JobId serve2 = Pending("serve2", 1, 4, "prod", 11 * kS);
  EXPECT_EQ(Victims(victims, serve2, 11 * kS), std::vector<JobId>{other})
      << "the notebook is being stopped already";
}

// The cheapest victim is the one that loses least (GPUs x whole seconds since its last
// checkpoint, or since it started without checkpoints; ties by id), at whatever time the
// clock reads: the index keeps victims in an order that does not move with the clock
// (by their checkpoint phase), read from the clock's phase round.
TEST_F(PiecesTest, TheCheapestVictimIsTheOneThatLosesLeastAsTheClockMoves) {
  auto start = [&](const char* id, int gpus, Tier tier, Ticks checkpoint, Ticks now) {
    return Start(id, gpus, "lab", tier, 1000 * kS, now, checkpoint);
  };
  const JobId a = start("a", 1, Tier::kBestEffort, 100 * kS, 0);
  const JobId b = start("b", 2, Tier::kBestEffort, 100 * kS, 30 * kS);
  const JobId e = start("e", 1, Tier::kBestEffort, 100 * kS, 500);  // half a second after a
  start("c", 1, Tier::kBestEffort, 0, 50 * kS);  // never checkpoints: lost since its start
  const JobId d = start("d", 1, Tier::kBestEffort, 100 * kS, 60 * kS);
  start("fill", 8, Tier::kStandard, 0, 60 * kS);
  start("rest", 2, Tier::kStandard, 0, 60 * kS);
  ASSERT_EQ(Used(), 16 * kGpuUnits);
  JobSpec serve = Whole(catalog_, "serve", 1, 1);
  serve.queue = *queues_.Find("prod");
  serve.tier = Tier::kCritical;
  const JobId waiting = sched_.Submit(serve, 60 * kS);
  QueueOrdering ordering;
  ordering.Init(sched_);
  VictimSelector victims(ordering);
  auto cheapest = [&](Ticks now) {
    const std::vector<JobId> needed = Victims(victims, waiting, now);
    EXPECT_EQ(needed.size(), 1u);
    return needed.empty() ? JobId() : needed[0];
  };
  // Lost at 120.2 s: a 20 s, e 19 s, b 2 x 90, c 70, d 60.
  EXPECT_EQ(cheapest(120'200), e);
  // At 120.6 s a and e have both lost 20 whole seconds: the lower id.
  EXPECT_EQ(cheapest(120'600), a);
  // At 170 s: a 70, e 69, b 2 x 40, c 120, d 10.
  EXPECT_EQ(cheapest(170 * kS), d);
  // At 205 s a and e checkpointed again (5 and 4 s), b 2 x 75, c 155, d 45.
  EXPECT_EQ(cheapest(205 * kS), e);
  // At 255 s: a 55, e 54, b 2 x 25 (50), c 205, d 95.
  EXPECT_EQ(cheapest(255 * kS), b);
  // At 100,050 s: a 50, e 49 (49.5), b 2 x 20 (40), c 100,000, d 90.
  EXPECT_EQ(cheapest(100'050 * kS), b);
}

// Choose releases its candidates only where a bound on what they free says the job could
// fit (VictimSelector::MayMakeRoom); wherever asserts are on, the bound is checked against
// the what-if itself. Each kind of request, once where the best-effort victims cannot make
// room (other work stays on the GPUs, nodes or leaf it needs) and once where they can.
TEST(VictimBound, VictimsThatCannotMakeRoomAreNotTakenAndThoseThatCanAre) {
  const Catalog catalog = Catalog::BuiltIn();
  // Leaves of two nodes; the last node's two GPUs take MIG instances and MPS shares.
  const Cluster cluster = MakeCluster(
      {Pool(catalog, "h", 4, 8, "H100-80GB", 2),
       Pool(catalog, "split", 1, 2, "H100-80GB", 0, 1, Bit(Sharing::kMig) | Bit(Sharing::kMps))});
  const QueueTree queues =
      MakeQueues({QueueSpec{"lab", "", 0, -1, 1, {}, {}, false, {}, {}, {}, {}}});
  Scheduler sched(cluster, queues, MakePolicy("fifo"));
  const ModelId h100 = testing::Model(catalog, "H100-80GB");
  auto run = [&](JobSpec spec, Tier tier, WorkerAlloc at) {
    spec.tier = tier;
    const JobId id = sched.Submit(spec, 0);
    std::string why;
    EXPECT_TRUE(sched.Adopt(id, {at}, 0, &why)) << spec.id << ": " << why;
    return id;
  };
  auto whole = [&](uint32_t node, uint64_t mask) {
    return WorkerAlloc{.node = NodeId(node), .gpu_mask = mask};
  };
  // Leaf 0: node 0 best-effort, node 1 critical. Leaf 1: node 2 half best-effort, half
  // critical; node 3 best-effort.
  const JobId be0 = run(Whole(catalog, "be0", 1, 8), Tier::kBestEffort, whole(0, 0xff));
  run(Whole(catalog, "crit1", 1, 8), Tier::kCritical, whole(1, 0xff));
  const JobId be2 = run(Whole(catalog, "be2", 1, 4), Tier::kBestEffort, whole(2, 0x0f));
  run(Whole(catalog, "crit2", 1, 4), Tier::kCritical, whole(2, 0xf0));
  const JobId be3 = run(Whole(catalog, "be3", 1, 8), Tier::kBestEffort, whole(3, 0xff));
  // The split node: GPU 0 holds two 3g.40gb instances (best-effort at slice 0, critical
  // at 4); GPU 1 MPS shares of 0.5 (critical) and 0.3 (best-effort).
  const int g3 = catalog.FindProfile(h100, "3g.40gb");
  ASSERT_GE(g3, 0);
  auto mig = [&](int start) {
    return WorkerAlloc{.node = NodeId(4),
                       .sharing = Sharing::kMig,
                       .gpu = 0,
                       .mig_profile = static_cast<int8_t>(g3),
                       .mig_start = static_cast<int8_t>(start)};
  };
  auto mps = [&](int milli) {
    return WorkerAlloc{.node = NodeId(4),
                       .sharing = Sharing::kMps,
                       .gpu = 1,
                       .share_milli = static_cast<int16_t>(milli),
                       .vram_bytes = 10 * kGB};
  };
  const JobId be_mig = run(testing::Mig(catalog, "be-mig", "3g.40gb"), Tier::kBestEffort, mig(0));
  run(testing::Mig(catalog, "crit-mig", "3g.40gb"), Tier::kCritical, mig(4));
  run(testing::Shared(catalog, "crit-mps", Sharing::kMps, 500, 10), Tier::kCritical, mps(500));
  const JobId be_mps =
      run(testing::Shared(catalog, "be-mps", Sharing::kMps, 300, 10), Tier::kBestEffort, mps(300));

  QueueOrdering ordering;
  ordering.Init(sched);
  VictimSelector victims(ordering);
  const std::function<bool(JobId)> never = [](JobId) { return false; };
  const GpuUnits used = sched.ledger().used_units();
  // The victims Choose picks for a standard job of this shape beyond its guarantee
  // (best_effort_yields_to: standard), or nullopt for none. (For a critical job Choose
  // would go on node by node where the cheapest victims leave no room.)
  auto choose = [&](JobSpec spec) -> std::optional<std::vector<JobId>> {
    spec.tier = Tier::kStandard;
    const JobId id = sched.Submit(spec, 10 * kS);
    victims.NewPass();
    std::vector<JobId> needed;
    Allocation fit;
    victims.Prepare(sched, 10 * kS);
    bool ok;
    {
      WhatIf w(sched);
      ok = victims.Choose(sched, w, sched.job(id), VictimSelector::Mode::kTier, ~ModelMask{0}, 0,
                          10 * kS, never, needed, fit);
    }
    EXPECT_EQ(sched.ledger().used_units(), used)
        << spec.id << ": the what-if leaves the ledger as it was";
    sched.Finish(id, 10 * kS);  // gone again
    if (!ok) return std::nullopt;
    std::sort(needed.begin(), needed.end());
    return needed;
  };
  using Victims = std::optional<std::vector<JobId>>;
  // Two whole nodes in one leaf: each leaf keeps a critical job on one of its nodes.
  EXPECT_EQ(choose(Whole(catalog, "leaf-gang", 2, 8, Topology::kLeaf)), Victims{});
  EXPECT_EQ(choose(Whole(catalog, "leaf-halves", 3, 4, Topology::kLeaf)), (Victims{{be2, be3}}));
  EXPECT_EQ(choose(Whole(catalog, "spine-gang", 2, 8, Topology::kSpine)), (Victims{{be0, be3}}));
  EXPECT_EQ(choose(Whole(catalog, "node-8", 1, 8, Topology::kNode)), (Victims{{be0}}));
  EXPECT_EQ(choose(Whole(catalog, "node-16", 2, 8, Topology::kNode)), Victims{});
  EXPECT_EQ(choose(Whole(catalog, "spine-3", 3, 8, Topology::kSpine)), Victims{});
  // A whole GPU's instance: the critical instance stays on GPU 0, shares on GPU 1.
  EXPECT_EQ(choose(testing::Mig(catalog, "mig-7g", "7g.80gb")), Victims{});
  EXPECT_EQ(choose(testing::Mig(catalog, "mig-3g", "3g.40gb")), (Victims{{be_mig}}));
  // Shares: 0.5 stays taken on GPU 1.
  EXPECT_EQ(choose(testing::Shared(catalog, "mps-0.6", Sharing::kMps, 600, 10)), Victims{});
  EXPECT_EQ(choose(testing::Shared(catalog, "mps-0.5", Sharing::kMps, 500, 10)),
            (Victims{{be_mps}}));
}

TEST_F(PiecesTest, HeldGpusLetGoForATryAreHeldAgainAsTheyWereUnlessKept) {
  Start("running", 4, "lab", Tier::kStandard, 100 * kS, 0);
  const JobId gang = Pending("gang", 2, 8, "lab", 0);
  // Held for the gang: node 0's four free GPUs and all of node 1's (the rest is taken).
  Allocation want;
  for (uint32_t n = 0; n < 2; ++n) {
    WorkerAlloc w;
    w.node = NodeId(n);
    w.gpu_mask = 0xff;
    want.push_back(w);
  }
  HeldGpus held;
  held.Hold(sched_, gang, want, ~uint64_t{0}, /*fence=*/false);
  EXPECT_EQ(Used(), 16 * kGpuUnits);
  EXPECT_FALSE(held.empty());
  EXPECT_EQ(held.pools(), uint64_t{1});
  Allocation other;
  const JobSpec small = Whole(catalog_, "small", 1, 2);
  EXPECT_FALSE(sched_.placer().Place(small, Fit::kBest, other)) << "held GPUs look taken";
  {
    // Let go for a try that places something: rolled back at the scope's end.
    HeldGpus::LetGoScope let_go(held, sched_, ~uint64_t{0});
    EXPECT_TRUE(held.empty());
    EXPECT_EQ(Used(), 4 * kGpuUnits);
    ASSERT_TRUE(sched_.placer().Place(small, Fit::kBest, other));
    EXPECT_EQ(Used(), 6 * kGpuUnits);
  }
  EXPECT_EQ(Used(), 16 * kGpuUnits);
  EXPECT_FALSE(held.empty());
  EXPECT_FALSE(sched_.placer().Place(small, Fit::kBest, other));
  // Kept: what was placed stays and what was let go stays let go.
  {
    HeldGpus::LetGoScope let_go(held, sched_, ~uint64_t{0});
    ASSERT_TRUE(sched_.placer().Place(small, Fit::kBest, other));
    let_go.Keep();
  }
  EXPECT_TRUE(held.empty());
  EXPECT_EQ(Used(), 6 * kGpuUnits);
  // Holding again takes only what is free now, and none of another pool's GPUs.
  held.Hold(sched_, gang, want, ~uint64_t{0}, false);
  EXPECT_EQ(Used(), 16 * kGpuUnits);
  held.LetGoIn(sched_, uint64_t{2});  // a pool it holds nothing in
  EXPECT_EQ(Used(), 16 * kGpuUnits);
  held.LetGoIn(sched_, ~uint64_t{0});
  EXPECT_EQ(Used(), 6 * kGpuUnits);
}

}  // namespace
}  // namespace gantry::core
