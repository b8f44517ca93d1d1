#include "sim/report.h"

#include <gtest/gtest.h>

namespace gantry::sim {
namespace {

TEST(ReportTest, NearestRankPercentiles) {
  std::vector<double> v;
  for (int i = 1; i <= 100; ++i) v.push_back(i);
  Percentiles p = Summarize(v);
  EXPECT_DOUBLE_EQ(p.mean, 50.5);
  EXPECT_DOUBLE_EQ(p.p50, 50);
  EXPECT_DOUBLE_EQ(p.p95, 95);
  EXPECT_DOUBLE_EQ(p.p99, 99);
  EXPECT_DOUBLE_EQ(p.max, 100);
  EXPECT_EQ(Summarize({}).count, 0u);
  EXPECT_DOUBLE_EQ(Summarize({7}).p99, 7);
}

// Fragmentation at the last arrival, and its mean weighted by time from the first
// submit to the latest finish (as utilization). 10 GPUs up throughout.
TEST(ReportTest, FragmentationFigures) {
  core::QueueSpec q;
  q.name = "q";
  auto queues = core::QueueTree::Build({q});
  ASSERT_TRUE(queues.ok());
  Report r(queues.value(), "gantry");
  const core::GpuUnits up = 10 * core::kGpuUnits;
  auto instant = [&](core::Ticks t, double fragmented) {
    r.Advance(t, up, 0);
    r.Fragmented(t, fragmented);
  };
  // As the simulator calls it: once before an instant's events, once after its pass.
  instant(0, 0);
  instant(1000, 0);
  r.Submitted(1000);
  instant(1000, 1.0);  // after the pass at the first arrival: 1 GPU fragmented
  instant(3000, 1.0);
  r.Submitted(3000);
  instant(3000, 2.0);  // the last arrival: 2 of 10 GPUs
  instant(5000, 2.0);
  r.Finished(5000, core::Tier::kStandard, core::QueueId(0), 4000);
  instant(5000, 0);
  EXPECT_DOUBLE_EQ(r.fragmentation_at_last_arrival_pct(), 20.0);
  // (1 GPU x 2 s + 2 GPUs x 2 s) / (10 GPUs x 4 s) = 15%
  EXPECT_DOUBLE_EQ(r.fragmentation_mean_pct(), 15.0);
}

}  // namespace
}  // namespace gantry::sim
