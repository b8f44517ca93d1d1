#include "sim/run_summary.h"

#include <fmt/format.h>
#include <algorithm>
#include <cmath>
#include <sstream>

namespace gantry::sim {

using Json = nlohmann::ordered_json;

namespace {

Json WaitCdf(std::vector<double> waits_ms) {
  std::sort(waits_ms.begin(), waits_ms.end());
  const size_t n = waits_ms.size();
  const size_t k = std::min(n, kCdfPoints);
  Json wait_s = Json::array(), fraction = Json::array();
  for (size_t p = 1; p <= k; ++p) {
    const size_t i = (p * n + k - 1) / k - 1;  // ceil(p * n / k) - 1: nearest rank
    wait_s.push_back(waits_ms[i] / 1000.0);
    fraction.push_back(static_cast<double>(i + 1) / static_cast<double>(n));
  }
  return Json{{"count", n}, {"wait_s", wait_s}, {"fraction", fraction}};
}

struct Figure {
  const char* label;
  const char* pointer;  // JSON pointer into the report
  double scale;
  int decimals;
};

// The main figures, in the order they are shown.
constexpr Figure kFigures[] = {
    {"jobs submitted", "/jobs/submitted", 1, 0},
    {"jobs finished", "/jobs/finished", 1, 0},
    {"jobs rejected", "/jobs/rejected", 1, 0},
    {"jobs unfinished", "/jobs/unfinished", 1, 0},
    {"GPU utilisation (%)", "/gpu_utilization_pct", 1, 1},
    {"allocation ratio at last arrival (%)", "/allocation_ratio_at_last_arrival_pct", 1, 1},
    {"fragmented GPUs at last arrival (% of up)", "/fragmentation_at_last_arrival_pct", 1, 1},
    {"fragmented GPUs, mean (% of up)", "/fragmentation_mean_pct", 1, 1},
    {"JCT mean (s)", "/jct_s/mean", 1, 1},
    {"JCT p99 (s)", "/jct_s/p99", 1, 1},
    {"queue wait mean (s)", "/queue_wait_time_ms/all/mean", 1e-3, 1},
    {"queue wait p99 (s)", "/queue_wait_time_ms/all/p99", 1e-3, 1},
    {"critical queue wait p99 (s)", "/queue_wait_time_ms/critical/p99", 1e-3, 1},
    {"critical in guarantee, wait p99 (s)", "/queue_wait_time_ms/critical_in_guarantee/p99", 1e-3,
     1},
    {"standard queue wait p99 (s)", "/queue_wait_time_ms/standard/p99", 1e-3, 1},
    {"best-effort queue wait p99 (s)", "/queue_wait_time_ms/best-effort/p99", 1e-3, 1},
    {"preemption rate (% of starts)", "/preemption_rate_pct", 1, 2},
    {"preemptions", "/preemptions", 1, 0},
    {"GPU-hours lost to preemption", "/lost_gpu_hours_by_cause/preempt", 1, 2},
    {"GPU-hours lost, all causes", "/lost_gpu_hours", 1, 2},
    {"makespan (s)", "/makespan_s", 1, 0},
    {"scheduling latency p99 (ms)", "/scheduling_latency_ms/p99", 1, 3},
};

const Json& EmptyObject() {
  static const Json kEmpty = Json::object();
  return kEmpty;
}

// A run's report's per-queue figures (empty when it has none), without copying them.
const Json& ByQueue(const RunSummary& r) {
  const auto it = r.report.find("by_queue");
  return it != r.report.end() && it->is_object() ? *it : EmptyObject();
}

std::string Format(const Json& report, const Figure& f) {
  const Json::json_pointer ptr(f.pointer);
  if (!report.contains(ptr) || !report.at(ptr).is_number()) return "-";
  return fmt::format("{:.{}f}", report.at(ptr).get<double>() * f.scale, f.decimals);
}

}  // namespace

RunSummary SummarizeRun(std::string policy, const Report& report, const Timeline& timeline) {
  RunSummary r;
  r.policy = std::move(policy);
  std::ostringstream text;
  report.Write(text);
  r.report = Json::parse(text.str());
  r.timeline = timeline.ToJson();
  r.wait_cdf = Json::object();
  for (int t = 0; t < core::kTierCount; ++t) {
    const auto tier = static_cast<core::Tier>(t);
    r.wait_cdf[std::string(core::Name(tier))] = WaitCdf(report.waits_ms(tier));
  }
  return r;
}

FigureTable MainFigures(const std::vector<RunSummary>& runs) {
  FigureTable t;
  t.columns.push_back("figure");
  for (const RunSummary& r : runs) t.columns.push_back(r.policy);
  for (const Figure& f : kFigures) {
    std::vector<std::string> row{f.label};
    for (const RunSummary& r : runs) row.push_back(Format(r.report, f));
    t.rows.push_back(std::move(row));
  }
  // What the GPU-hours cost (accounting.gpu_hour_prices, 1 where absent), in all and per
  // GPU-hour held: a what-if's price.
  std::vector<std::string> cost{"cost"}, per_hour{"cost per GPU-hour"};
  for (const RunSummary& r : runs) {
    double total = 0, hours = 0;
    for (const auto& [name, q] : ByQueue(r).items()) {
      total += q.value("cost", 0.0);
      hours += q.value("gpu_hours", 0.0);
    }
    cost.push_back(fmt::format("{:.2f}", total));
    per_hour.push_back(hours > 0 ? fmt::format("{:.3f}", total / hours) : "-");
  }
  t.rows.push_back(std::move(cost));
  t.rows.push_back(std::move(per_hour));
  // Per queue (every queue any run has, first seen first): its wait and its GPU-hours.
  std::vector<std::string> queues;
  for (const RunSummary& r : runs) {
    for (const auto& [name, q] : ByQueue(r).items()) {
      if (std::find(queues.begin(), queues.end(), name) == queues.end()) queues.push_back(name);
    }
  }
  for (const std::string& name : queues) {
    std::vector<std::string> wait{"queue " + name + ": wait mean (s)"},
        held{"queue " + name + ": GPU-hours"};
    for (const RunSummary& r : runs) {
      const auto it = ByQueue(r).find(name);
      const Json& q = it != ByQueue(r).end() ? *it : EmptyObject();
      const Json w = q.value("queue_wait_ms", Json::object());
      wait.push_back(w.contains("mean") && w["mean"].is_number() && q.value("started", 0) > 0
                         ? fmt::format("{:.1f}", w["mean"].get<double>() / 1000)
                         : "-");
      held.push_back(q.contains("gpu_hours") ? fmt::format("{:.1f}", q["gpu_hours"].get<double>())
                                             : "-");
    }
    t.rows.push_back(std::move(wait));
    t.rows.push_back(std::move(held));
  }
  return t;
}

void PrintTable(std::ostream& out, const FigureTable& table) {
  std::vector<size_t> width(table.columns.size(), 0);
  auto widen = [&](const std::vector<std::string>& row) {
    for (size_t i = 0; i < row.size() && i < width.size(); ++i)
      width[i] = std::max(width[i], row[i].size());
  };
  widen(table.columns);
  for (const auto& row : table.rows) widen(row);
  auto line = [&](const std::vector<std::string>& row) {
    std::string s = fmt::format("{:<{}}", row[0], width[0]);
    for (size_t i = 1; i < row.size(); ++i) s += fmt::format("  {:>{}}", row[i], width[i]);
    out << s << "\n";
  };
  line(table.columns);
  for (const auto& row : table.rows) line(row);
}

Json ToJson(const FigureTable& table) {
  return Json{{"columns", table.columns}, {"rows", table.rows}};
}

}  // namespace gantry::sim
