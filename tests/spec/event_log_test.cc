#include "spec/event_log.h"

#include <gtest/gtest.h>

#include <sstream>

namespace gantry::spec {
namespace {

TEST(EventLogTest, SecondsAreIntegersWhenWholeElseShortDecimals) {
  EXPECT_EQ(FormatSeconds(0), "0");
  EXPECT_EQ(FormatSeconds(12'000), "12");
  EXPECT_EQ(FormatSeconds(12'500), "12.5");
  EXPECT_EQ(FormatSeconds(1), "0.001");
  EXPECT_EQ(FormatSeconds(3'010), "3.01");
}

TEST(EventLogTest, StringsAreEscaped) {
  std::ostringstream out;
  WriteJsonString(out, "a\"b\\c\nd\x01");
  EXPECT_EQ(out.str(), R"("a\"b\\c\nd\u0001")");
}

}  // namespace
}  // namespace gantry::spec
