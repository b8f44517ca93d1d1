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

}  // namespace
}  // namespace gantry::sim
