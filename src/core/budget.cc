#include "core/budget.h"

namespace gantry::core {

namespace {
constexpr int64_t kDayMs = 86'400'000;

int64_t FloorDiv(int64_t a, int64_t b) { return a / b - (a % b != 0 && (a < 0) != (b < 0)); }

// Civil dates from days since 1970-01-01 and back (proleptic Gregorian), after Howard
// Hinnant's "chrono-Compatible Low-Level Date Algorithms". Written here because the
// core includes no <chrono> (tests/core/purity_test.cc: no clocks in the core).
struct Civil {
  int64_t year;
  unsigned month, day;  // 1..12, 1..31
};
Civil CivilFromDays(int64_t z) {
  z += 719468;
  const int64_t era = FloorDiv(z, 146097);
  const auto doe = static_cast<unsigned>(z - era * 146097);
  const unsigned yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
  const unsigned doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
  const unsigned mp = (5 * doy + 2) / 153;
  const unsigned d = doy - (153 * mp + 2) / 5 + 1;
  const unsigned m = mp < 10 ? mp + 3 : mp - 9;
  return {static_cast<int64_t>(yoe) + era * 400 + (m <= 2), m, d};
}
int64_t DaysFromCivil(int64_t y, unsigned m, unsigned d) {
  y -= m <= 2;
  const int64_t era = FloorDiv(y, 400);
  const auto yoe = static_cast<unsigned>(y - era * 400);
  const unsigned doy = (153 * (m > 2 ? m - 3 : m + 9) + 2) / 5 + d - 1;
  const unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + static_cast<int64_t>(doe) - 719468;
}

std::string Two(unsigned v) { return (v < 10 ? "0" : "") + std::to_string(v); }
}  // namespace

std::string_view Name(BudgetPeriod p) { return p == BudgetPeriod::kWeek ? "week" : "month"; }
std::string_view Name(WhenSpent w) { return w == WhenSpent::kWait ? "wait" : "best-effort"; }

std::pair<int64_t, int64_t> BudgetPeriodAt(BudgetPeriod period, int64_t unix_ms) {
  const int64_t day = FloorDiv(unix_ms, kDayMs);
  if (period == BudgetPeriod::kWeek) {
    const int64_t monday = day - (((day - 4) % 7) + 7) % 7;  // 1970-01-05 was a Monday
    return {monday * kDayMs, (monday + 7) * kDayMs};
  }
  const Civil c = CivilFromDays(day);
  const int64_t first = DaysFromCivil(c.year, c.month, 1);
  const int64_t next =
      c.month == 12 ? DaysFromCivil(c.year + 1, 1, 1) : DaysFromCivil(c.year, c.month + 1, 1);
  return {first * kDayMs, next * kDayMs};
}

std::string UtcMinute(int64_t unix_ms) {
  const int64_t day = FloorDiv(unix_ms, kDayMs);
  const Civil c = CivilFromDays(day);
  const auto minute = static_cast<unsigned>((unix_ms - day * kDayMs) / 60'000);
  return std::to_string(c.year) + "-" + Two(c.month) + "-" + Two(c.day) + " " + Two(minute / 60) +
         ":" + Two(minute % 60) + " UTC";
}

}  // namespace gantry::core
