#include "server/accounts.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <tuple>

#include "core/budget.h"

namespace gantry::server {

using nlohmann::json;

namespace {
// Runs older than this many half-lives weigh under 1/1000 of their GPU time.
constexpr int64_t kDecayHorizon = 10;
}  // namespace

Status SeedAccounts(Store& store, const core::QueueTree& queues, const core::Catalog& catalog,
                    const core::PolicyParams& params, core::Scheduler& sched, core::Ticks now,
                    int64_t now_ms, bool adopts_from_run_start) {
  const auto half_life = static_cast<double>(std::max<core::Ticks>(1, params.fairshare_half_life));
  int64_t from = now_ms - kDecayHorizon * params.fairshare_half_life;
  std::vector<std::pair<int64_t, int64_t>> periods(queues.size(), {0, 0});
  for (uint32_t i = 0; i < queues.size(); ++i) {
    const core::Queue& q = queues.queue(core::QueueId(i));
    if (!q.spec.budget) continue;
    periods[i] = core::BudgetPeriodAt(q.spec.budget->period, now_ms);
    from = std::min(from, periods[i].first);
  }
  auto runs = store.Runs(from, now_ms);
  if (!runs) return runs.error();
  std::vector<double> decayed(queues.size(), 0.0), spent(queues.size(), 0.0);
  for (const StoredRun& r : *runs) {
    auto q = queues.Find(r.queue);
    if (!q) continue;  // a queue the config no longer has
    const int64_t start = std::min(r.start_ms, now_ms);
    const int64_t end = r.end_ms < 0 ? now_ms : std::min(r.end_ms, now_ms);
    if (end <= start) continue;
    // The core's average: usage u over [s, e] adds u (2^-(now-e)/h - 2^-(now-s)/h).
    const double weight = std::exp2(-static_cast<double>(now_ms - end) / half_life) -
                          std::exp2(-static_cast<double>(now_ms - start) / half_life);
    const double units = r.gpus * static_cast<double>(core::kGpuUnits) * weight;
    const bool counted = r.end_ms >= 0 || !adopts_from_run_start;
    const double price =
        core::GpuHourPrice(params, catalog.Find(r.model).value_or(core::ModelId()));
    for (core::QueueId a : queues.queue(*q).self_and_ancestors) {
      decayed[a.v] += units;
      const auto [pstart, pend] = periods[a.v];
      if (!counted || pend == 0) continue;
      const int64_t overlap = end - std::max(start, pstart);
      if (overlap > 0) spent[a.v] += r.gpus * price * static_cast<double>(overlap) / 3.6e6;
    }
  }
  sched.SeedDecayedUsage(std::move(decayed), now);
  for (uint32_t i = 0; i < queues.size(); ++i) {
    if (periods[i].second != 0) sched.AddBudgetSpent(core::QueueId(i), spent[i], now);
  }
  return Ok{};
}

void CarryAccounts(core::Scheduler& from, core::Scheduler& to, const core::QueueTree& queues,
                   core::Ticks now) {
  to.SeedDecayedUsage(from.DecayedUsageAt(now), now);
  for (uint32_t i = 0; i < queues.size(); ++i) {
    const core::QueueId q(i);
    if (queues.queue(q).spec.budget) to.AddBudgetSpent(q, from.BudgetSpentAt(q, now), now);
  }
}

json UsageBody(std::vector<StoredRun> runs, int64_t from_ms, int64_t to_ms, int64_t now_ms,
               const core::Catalog& catalog, const core::PolicyParams& params,
               const std::string& currency, const std::function<void(StoredRun&)>& live) {
  // GPU-hours held in the period; of the time agents reported on, how busy, and what
  // right-sizing would have freed. A run's usage is spread evenly over its length.
  struct Sums {
    double held = 0, busy = 0, reported = 0, free = 0, cost = 0;
  };
  std::map<std::tuple<std::string, std::string, std::string>, Sums> sums;  // queue, user, model
  for (StoredRun& r : runs) {
    const int64_t end = r.end_ms < 0 ? now_ms : r.end_ms;
    const int64_t overlap = std::min(end, to_ms) - std::max(r.start_ms, from_ms);
    if (overlap <= 0) continue;
    if (r.end_ms < 0 && live) live(r);  // still running: its usage so far is in memory
    const double share =
        static_cast<double>(overlap) / static_cast<double>(std::max<int64_t>(1, end - r.start_ms));
    Sums& s = sums[{r.queue, r.user, r.model}];
    s.held += r.gpus * static_cast<double>(overlap) / 3.6e6;
    const core::ModelId model = catalog.Find(r.model).value_or(core::ModelId());
    s.cost += r.gpus * static_cast<double>(overlap) / 3.6e6 * core::GpuHourPrice(params, model);
    s.busy += r.busy_gpu_ms * share / 3.6e6;
    s.reported += r.reported_gpu_ms * share / 3.6e6;
    if (r.fit_gpus >= 0)
      s.free += std::max(0.0, r.gpus - r.fit_gpus) * static_cast<double>(overlap) / 3.6e6;
  }
  json rows = json::array();
  for (const auto& [key, s] : sums) {
    const auto& [queue, user, model] = key;
    rows.push_back({{"queue", queue},
                    {"user", user},
                    {"model", model},
                    {"gpu_hours", s.held},
                    {"busy_gpu_hours", s.busy},
                    {"reported_gpu_hours", s.reported},
                    {"right_sizing_frees_gpu_hours", s.free},
                    {"cost", s.cost}});
  }
  return {{"from", static_cast<double>(from_ms) / 1000.0},
          {"to", static_cast<double>(to_ms) / 1000.0},
          {"currency", currency},
          {"usage", rows}};
}

}  // namespace gantry::server
