#include "server/metrics.h"

#include "core/scheduler.h"

#include <cmath>
#include <cstdio>

namespace gantry::server {

void Histogram::Observe(double v) {
  for (size_t i = 0; i < bounds_.size(); ++i) {
    if (v <= bounds_[i]) {
      ++counts_[i];
      break;
    }
  }
  ++count_;
  sum_ += v;
}

void Histogram::Render(std::string& out, std::string_view name, std::string_view labels) const {
  const std::string sep = labels.empty() ? "" : ",";
  uint64_t cumulative = 0;
  for (size_t i = 0; i < bounds_.size(); ++i) {
    cumulative += counts_[i];
    out += std::string(name) + "_bucket{" + std::string(labels) + sep + "le=\"" +
           FormatValue(bounds_[i]) + "\"} " + std::to_string(cumulative) + "\n";
  }
  out += std::string(name) + "_bucket{" + std::string(labels) + sep + "le=\"+Inf\"} " +
         std::to_string(count_) + "\n";
  const std::string braces = labels.empty() ? "" : "{" + std::string(labels) + "}";
  out += std::string(name) + "_sum" + braces + " " + FormatValue(sum_) + "\n";
  out += std::string(name) + "_count" + braces + " " + std::to_string(count_) + "\n";
}

std::string EscapeLabel(std::string_view v) {
  std::string out;
  for (char c : v) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string Labels(std::initializer_list<std::pair<std::string_view, std::string_view>> labels) {
  std::string out;
  for (const auto& [key, value] : labels) {
    if (!out.empty()) out += ',';
    out += std::string(key) + "=\"" + EscapeLabel(value) + "\"";
  }
  return out;
}

std::string FormatValue(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  if (v == std::floor(v) && std::fabs(v) < 1e15) return std::to_string(static_cast<int64_t>(v));
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

void MetricHeader(std::string& out, std::string_view name, std::string_view type,
                  std::string_view help) {
  out += "# HELP " + std::string(name) + " " + std::string(help) + "\n";
  out += "# TYPE " + std::string(name) + " " + std::string(type) + "\n";
}

void BudgetMetrics(std::string& out, const core::QueueTree& queues, const core::Scheduler& sched) {
  // In GPU-seconds, Prometheus' base unit (promtool check metrics), as the budgets'
  // GPU-hours times 3,600.
  MetricHeader(out, "gantry_queue_budget_gpu_seconds", "gauge",
               "A queue's budget per period in GPU-seconds (its GPU-hours x 3600), weighted "
               "by GPU model prices (queues with one)");
  std::string used;
  for (uint32_t q = 0; q < queues.size(); ++q) {
    const core::Scheduler::BudgetAccount* a = sched.budget_account(core::QueueId(q));
    if (a == nullptr) continue;
    const core::QueueSpec& s = queues.queue(core::QueueId(q)).spec;
    const std::string labels = "{queue=\"" + EscapeLabel(s.name) + "\",period=\"" +
                               std::string(core::Name(s.budget->period)) + "\"} ";
    out +=
        "gantry_queue_budget_gpu_seconds" + labels + FormatValue(s.budget->gpu_hours * 3600) + "\n";
    used += "gantry_queue_budget_used_gpu_seconds" + labels + FormatValue(a->spent * 3600) + "\n";
  }
  MetricHeader(out, "gantry_queue_budget_used_gpu_seconds", "gauge",
               "Weighted GPU-seconds a queue and those under it spent this period (as of "
               "the last pass)");
  out += used;
}

}  // namespace gantry::server
