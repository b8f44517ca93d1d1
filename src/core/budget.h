// GPU-hour budgets (issue 12): a queue may spend so many GPU-hours per calendar week or
// month (UTC), weighted by each GPU model's price (an H100-hour may count twice an
// A100-hour). A queue's budget covers it and the queues under it; any budget on the way
// up that is spent stops new work of the queues below: it runs only as best-effort, or
// waits for the next period. Running work is left alone. The Scheduler keeps the
// accounts (scheduler.h); these are the pieces it and the drivers share.
// Pure: periods are computed from a Unix time with the C++20 calendar, no clock is read.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

#include "core/model/types.h"

namespace gantry::core {

enum class BudgetPeriod : uint8_t { kWeek, kMonth };
// What new work of a queue past its budget does: runs as best-effort, or waits.
enum class WhenSpent : uint8_t { kBestEffort, kWait };

struct BudgetSpec {
  double gpu_hours = 0;  // weighted GPU-hours per period
  BudgetPeriod period = BudgetPeriod::kMonth;
  WhenSpent when_spent = WhenSpent::kBestEffort;
  // The tiers whose new work the budget stops once spent (the site decides; by default
  // critical work is exempt). Critical work cannot run as best-effort (its reserved
  // capacity and spot rules differ), so when the budget covers it, it waits.
  TierMask applies_to = Bit(Tier::kStandard) | Bit(Tier::kBestEffort);
};

std::string_view Name(BudgetPeriod p);  // "week", "month"
std::string_view Name(WhenSpent w);     // "best-effort", "wait"

// [start, end) in Unix ms of the period holding `unix_ms`: weeks from Monday 00:00 UTC,
// months from the 1st 00:00 UTC.
std::pair<int64_t, int64_t> BudgetPeriodAt(BudgetPeriod period, int64_t unix_ms);

// "2026-12-01 00:00 UTC".
std::string UtcMinute(int64_t unix_ms);

}  // namespace gantry::core
