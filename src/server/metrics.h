// Prometheus text exposition (format 0.0.4) helpers: a cumulative histogram and label
// escaping. gantryd renders /metrics from the controller's state with these.
// Thread-safety: Histogram is not thread-safe (the controller thread owns it).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace gantry::core {
class QueueTree;
class Scheduler;
}  // namespace gantry::core

namespace gantry::server {

class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds)
      : bounds_(std::move(bounds)), counts_(bounds_.size()) {}
  void Observe(double v);
  // Appends `name_bucket{le=...}`, `name_sum` and `name_count` lines; `labels` is either
  // empty or "key=\"value\",..." without braces.
  void Render(std::string& out, std::string_view name, std::string_view labels = {}) const;

 private:
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;  // per bucket (not cumulative)
  uint64_t count_ = 0;
  double sum_ = 0;
};

// A label value with \, " and newline escaped.
std::string EscapeLabel(std::string_view v);
// `key="value",...` (values escaped, no braces) for Render and for series lines.
std::string Labels(std::initializer_list<std::pair<std::string_view, std::string_view>> labels);
// A sample value: integers without a decimal point, others with up to 9 significant digits.
std::string FormatValue(double v);
// "# HELP name help\n# TYPE name type\n"
void MetricHeader(std::string& out, std::string_view name, std::string_view type,
                  std::string_view help);
// The queues' budgets: gantry_queue_budget_gpu_seconds and _used_gpu_seconds, by queue and
// period, for the queues that have one (gantryd's both modes).
void BudgetMetrics(std::string& out, const core::QueueTree& queues, const core::Scheduler& sched);

}  // namespace gantry::server
