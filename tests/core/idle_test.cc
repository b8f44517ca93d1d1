#include "core/idle.h"

#include <gtest/gtest.h>

#include "test_util.h"

namespace gantry::core {
namespace {

using testing::MakeCluster;
using testing::MakeQueues;
using testing::Pool;
using testing::Shared;
using testing::Whole;

// One node of two H100s shared by MPS, 16 CPUs; queue "a" may hold one GPU at most.
class StrandedTest : public ::testing::Test {
 protected:
  StrandedTest()
      : catalog_(Catalog::BuiltIn()),
        cluster_(MakeCluster({Node()})),
        queues_(MakeQueues({QueueSpec{"a", "", 0, 1 * kGpuUnits, 1, {}, {}, false, {}, {}, {}, {}},
                            QueueSpec{"b", "", 0, -1, 1, {}, {}, false, {}, {}, {}, {}}})),
        sched_(cluster_, queues_, MakePolicy("fifo")) {}
  PoolSpec Node() const {
    PoolSpec p =
        Pool(catalog_, "h", 1, 2, "H100-80GB", 0, 1, Bit(Sharing::kExclusive) | Bit(Sharing::kMps));
    p.cpus_milli = 16'000;
    return p;
  }
  JobSpec Share(const char* id, int milli, int64_t cpus, const char* queue) {
    JobSpec j = Shared(catalog_, id, Sharing::kMps, milli, 8);
    j.cpus_milli = cpus * 1000;
    j.queue = *queues_.Find(queue);
    return j;
  }
  Catalog catalog_;
  Cluster cluster_;
  QueueTree queues_;
  Scheduler sched_;
};

// IdleByCause (issue 48 item 5: it had no unit test of its own): two H100 nodes and an
// A100 node; queue "a" may hold one GPU.
TEST(IdleByCause, EachFreeGpuCountsUnderTheFirstCauseThatHolds) {
  const Catalog catalog = Catalog::BuiltIn();
  const Cluster cluster =
      MakeCluster({Pool(catalog, "h", 2, 8, "H100-80GB"), Pool(catalog, "a", 1, 8, "A100-80GB")});
  const QueueTree queues =
      MakeQueues({QueueSpec{"a", "", 0, 1 * kGpuUnits, 1, {}, {}, false, {}, {}, {}, {}}});
  Scheduler sched(cluster, queues, MakePolicy("gantry"));
  const auto idle = [&] { return IdleByCause(sched); };
  const auto at = [](const IdleGpus& g, IdleCause c) { return g[static_cast<size_t>(c)]; };
  EXPECT_EQ(at(idle(), IdleCause::kNoDemand), 24) << "nothing waits";

  const auto h100 = [&](const char* id) {
    JobSpec j = Whole(catalog, id, 1, 1);
    j.models = ModelMask{1} << catalog.Find("H100-80GB")->v;
    return j;
  };
  sched.Submit(h100("runs"), 0);
  sched.Submit(h100("held"), 0);  // past queue a's burst of one GPU
  sched.Schedule(0);
  ASSERT_EQ(sched.pending().size(), 1u);
  IdleGpus g = idle();
  EXPECT_EQ(at(g, IdleCause::kLimits), 15)
      << "the H100s' free GPUs: their only taker is held by its queue";
  EXPECT_EQ(at(g, IdleCause::kWrongModel), 8) << "the A100s: no pending job takes their model";
  EXPECT_EQ(at(g, IdleCause::kNoDemand) + at(g, IdleCause::kDown) + at(g, IdleCause::kFragmented),
            0);
  double sum = 0;
  for (int c = 1; c < kIdleCauses; ++c) sum += g[static_cast<size_t>(c)];
  EXPECT_EQ(sum, 23) << "the causes other than down add up to the up GPUs not allocated";

  sched.SetNodeUp(*cluster.FindNode("a-0"), false);
  g = idle();
  EXPECT_EQ(at(g, IdleCause::kDown), 8);
  EXPECT_EQ(at(g, IdleCause::kWrongModel), 0);
  EXPECT_EQ(Name(IdleCause::kWrongModel), "wrong model");
}

constexpr GpuUnits kRemnant19 = 190 * kUnitsPerShareMilli;  // what a 0.81 share leaves

TEST_F(StrandedTest, RemnantsAndGpusNoPendingJobCanUseAreStranded) {
  sched_.Submit(Share("s81", 810, 12, "a"), 0);
  sched_.Schedule(0);
  EXPECT_EQ(StrandedUnits(sched_), kGpuUnits + kRemnant19)
      << "nothing waits: no free unit can be used";

  // Two whole GPUs can never be had while the share runs: the free GPU and the remnant
  // beside the share are both out of its reach.
  JobSpec w2 = Whole(catalog_, "w2", 1, 2);
  w2.queue = *queues_.Find("b");
  sched_.Submit(w2, 1);
  // A share that needs more CPUs than the node has left uses nothing either.
  sched_.Submit(Share("cpu-heavy", 100, 8, "b"), 1);
  sched_.Schedule(1);
  ASSERT_EQ(sched_.pending().size(), 2u);
  EXPECT_EQ(StrandedUnits(sched_), kGpuUnits + kRemnant19);

  // A 0.3 share held back by its queue's burst limit would fit the free GPU (not the
  // 0.19 left beside the 0.81): only the remnant stays stranded.
  sched_.Submit(Share("s30", 300, 1, "a"), 2);
  sched_.Schedule(2);
  ASSERT_EQ(sched_.pending().size(), 3u);
  EXPECT_EQ(StrandedUnits(sched_), kRemnant19);
}

TEST_F(StrandedTest, ADownNodeCountsNothing) {
  sched_.Submit(Share("s81", 810, 12, "a"), 0);
  JobSpec w2 = Whole(catalog_, "w2", 1, 2);
  w2.queue = *queues_.Find("b");
  sched_.Submit(w2, 0);
  sched_.Schedule(0);
  ASSERT_GT(StrandedUnits(sched_), 0);
  sched_.SetNodeUp(NodeId(0), false);
  EXPECT_EQ(StrandedUnits(sched_), 0);
}

}  // namespace
}  // namespace gantry::core
