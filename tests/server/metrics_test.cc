#include "server/metrics.h"

#include <gtest/gtest.h>

namespace gantry::server {
namespace {

TEST(Metrics, HistogramIsCumulative) {
  Histogram h({0.1, 1});
  h.Observe(0.05);
  h.Observe(0.5);
  h.Observe(5);
  std::string out;
  h.Render(out, "x_seconds", "tier=\"critical\"");
  EXPECT_EQ(out,
            "x_seconds_bucket{tier=\"critical\",le=\"0.1\"} 1\n"
            "x_seconds_bucket{tier=\"critical\",le=\"1\"} 2\n"
            "x_seconds_bucket{tier=\"critical\",le=\"+Inf\"} 3\n"
            "x_seconds_sum{tier=\"critical\"} 5.55\n"
            "x_seconds_count{tier=\"critical\"} 3\n");
}

TEST(Metrics, LabelsAndValues) {
  EXPECT_EQ(EscapeLabel("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
  EXPECT_EQ(FormatValue(3), "3");
  EXPECT_EQ(FormatValue(0.25), "0.25");
}

}  // namespace
}  // namespace gantry::server
