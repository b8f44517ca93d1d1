#include "sim/report.h"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include <fmt/format.h>

namespace gantry::sim {

using core::kGpuUnits;
using core::kTicksPerSecond;
using core::kUnitTicksPerGpuHour;
using Json = nlohmann::ordered_json;

Percentiles Summarize(std::vector<double> v) {
  Percentiles p;
  p.count = v.size();
  if (v.empty()) return p;
  std::sort(v.begin(), v.end());
  double sum = 0;
  for (double x : v) sum += x;
  p.mean = sum / static_cast<double>(v.size());
  // Nearest-rank percentiles.
  auto rank = [&](double q) {
    size_t i = static_cast<size_t>(std::ceil(q * static_cast<double>(v.size())));
    return v[std::clamp<size_t>(i, 1, v.size()) - 1];
  };
  p.p50 = rank(0.50);
  p.p95 = rank(0.95);
  p.p99 = rank(0.99);
  p.max = v.back();
  return p;
}

Report::Report(const core::QueueTree& queues, std::string policy)
    : queues_(queues), policy_(std::move(policy)), by_queue_(queues.size()) {}

void Report::Advance(core::Ticks t, core::GpuUnits up_units, core::GpuUnits used_units) {
  cap_ += UnitMs{up_units_} * (t - last_t_);
  alloc_ += UnitMs{used_units_} * (t - last_t_);
  last_t_ = t;
  up_units_ = up_units;
  used_units_ = used_units;
  // The simulator advances after each instant: at the latest arrival's, the values
  // after its pass.
  if (t == last_submit_ && up_units > 0) {
    ratio_at_last_arrival_ =
        100.0 * static_cast<double>(used_units) / static_cast<double>(up_units);
  }
}

void Report::Fragmented(core::Ticks t, double gpus) {
  frag_ += frag_gpus_ * static_cast<double>(t - frag_t_);
  frag_t_ = t;
  frag_gpus_ = gpus;
  if (t == last_submit_ && up_units_ > 0) {
    frag_at_last_arrival_ =
        100.0 * gpus * static_cast<double>(kGpuUnits) / static_cast<double>(up_units_);
  }
}

double Report::fragmentation_mean_pct() const {
  const UnitMs cap = cap_at_finish_ - cap_at_submit_;
  if (cap <= 0) return 0;
  return 100.0 * (frag_at_finish_ - frag_at_submit_) * static_cast<double>(kGpuUnits) /
         static_cast<double>(cap);
}

void Report::Submitted(core::Ticks t) {
  ++submitted_;
  last_submit_ = t;
  if (first_submit_ < 0) {
    first_submit_ = t;
    cap_at_submit_ = cap_;
    alloc_at_submit_ = alloc_;
    frag_at_submit_ = frag_;
  }
}

void Report::Started(core::Tier tier, core::QueueId queue, core::Ticks wait, bool first_start) {
  ++starts_;
  if (!first_start) return;
  const auto w = static_cast<double>(wait);
  wait_ms_[static_cast<int>(tier)].push_back(w);
  by_queue_[queue.v].wait_ms.push_back(w);
}

void Report::Finished(core::Ticks t, core::Tier tier, core::QueueId queue, core::Ticks jct) {
  ++finished_;
  last_finish_ = t;
  cap_at_finish_ = cap_;
  alloc_at_finish_ = alloc_;
  frag_at_finish_ = frag_;
  const double s = static_cast<double>(jct) / kTicksPerSecond;
  jct_s_.push_back(s);
  by_tier_[static_cast<int>(tier)].jct_s.push_back(s);
  by_queue_[queue.v].jct_s.push_back(s);
}

void Report::RunEnded(core::QueueId queue, core::Tier tier, core::GpuUnits units, core::Ticks start,
                      core::Ticks end, core::Ticks lost_ms, Cause cause) {
  by_queue_[queue.v].alloc += UnitMs{units} * (end - start);
  by_tier_[static_cast<int>(tier)].alloc += UnitMs{units} * (end - start);
  lost_ += UnitMs{units} * lost_ms;
  lost_by_cause_[static_cast<int>(cause)] += UnitMs{units} * lost_ms;
  by_queue_[queue.v].lost_by_cause[static_cast<int>(cause)] += UnitMs{units} * lost_ms;
  by_tier_[static_cast<int>(tier)].lost_by_cause[static_cast<int>(cause)] +=
      UnitMs{units} * lost_ms;
}

double Report::gpu_utilization_pct() const {
  const UnitMs cap = cap_at_finish_ - cap_at_submit_;
  if (cap <= 0) return 0;
  return 100.0 * static_cast<double>(alloc_at_finish_ - alloc_at_submit_) /
         static_cast<double>(cap);
}

namespace {
Json Figures(const Percentiles& p) {
  return Json{{"mean", p.mean}, {"p50", p.p50}, {"p95", p.p95},
              {"p99", p.p99},   {"max", p.max}, {"count", p.count}};
}
// Unit-milliseconds (GPU units x ms) as GPU-hours.
template <typename T>
double GpuHours(T unit_ms) {
  return static_cast<double>(unit_ms) / kUnitTicksPerGpuHour;
}
}  // namespace

void Report::Write(std::ostream& out) const {
  Json j;
  auto by_cause = [](const UnitMs(&lost)[kCauses]) {
    return Json{{"preempt", GpuHours(lost[0])},
                {"requeue", GpuHours(lost[1])},
                {"reclaim", GpuHours(lost[2])}};
  };
  j["policy"] = policy_;
  j["jobs"] = {{"submitted", submitted_},
               {"finished", finished_},
               {"rejected", rejected_},
               {"reclaimed", reclaimed_},
               {"unfinished", unfinished_}};
  if (!rejected_jobs_.empty()) {
    Json rejected = Json::array();
    for (const auto& [job, reason] : rejected_jobs_)
      rejected.push_back({{"job", job}, {"reason", reason}});
    j["rejected_jobs"] = std::move(rejected);
  }
  j["gpu_utilization_pct"] = gpu_utilization_pct();
  j["allocation_ratio_at_last_arrival_pct"] = ratio_at_last_arrival_;
  j["fragmentation_at_last_arrival_pct"] = frag_at_last_arrival_;
  j["allocation_bound_at_last_arrival_pct"] = bound_at_last_arrival_;
  j["fragmentation_mean_pct"] = fragmentation_mean_pct();
  if (!idle_by_cause_.empty()) {
    Json idle = Json::object();
    for (const auto& [cause, gpus] : idle_by_cause_) idle[cause] = std::round(gpus * 1000) / 1000;
    j["idle_gpus_by_cause"] = std::move(idle);
  }
  std::vector<double> all;
  Json waits;
  for (int t = 0; t < core::kTierCount; ++t) {
    all.insert(all.end(), wait_ms_[t].begin(), wait_ms_[t].end());
  }
  waits["all"] = Figures(Summarize(all));
  for (int t = 0; t < core::kTierCount; ++t) {
    waits[std::string(core::Name(static_cast<core::Tier>(t)))] = Figures(Summarize(wait_ms_[t]));
  }
  waits["critical_in_guarantee"] = Figures(Summarize(critical_in_guarantee_wait_ms_));
  j["queue_wait_time_ms"] = waits;
  Percentiles jct = Summarize(jct_s_);
  j["jct_s"] = {{"mean", jct.mean}, {"p50", jct.p50}, {"p99", jct.p99}};
  j["preemption_rate_pct"] =
      starts_ ? 100.0 * static_cast<double>(preemptions_) / static_cast<double>(starts_) : 0.0;
  j["preemptions"] = preemptions_;
  j["requeues"] = requeues_;
  if (resizes_ > 0) j["resizes"] = resizes_;
  j["starts"] = starts_;
  j["lost_gpu_hours"] = GpuHours(lost_);
  j["lost_gpu_hours_by_cause"] = by_cause(lost_by_cause_);
  j["makespan_s"] = last_finish_ >= 0 && first_submit_ >= 0
                        ? static_cast<double>(last_finish_ - first_submit_) / kTicksPerSecond
                        : 0.0;
  Percentiles lat = Summarize(pass_ms_);
  j["scheduling_latency_ms"] = {{"p50", lat.p50},
                                {"p99", lat.p99},
                                {"max", lat.max},
                                {"mean", lat.mean},
                                {"passes", lat.count}};
  UnitMs total = 0;
  for (const Group& g : by_queue_) total += g.alloc;
  auto group = [&](const Group& g) {
    Percentiles w = Summarize(g.wait_ms), c = Summarize(g.jct_s);
    return Json{{"gpu_hours", GpuHours(g.alloc)},
                {"share_pct",
                 total ? 100.0 * static_cast<double>(g.alloc) / static_cast<double>(total) : 0.0},
                {"started", w.count},
                {"finished", c.count},
                {"queue_wait_ms", {{"mean", w.mean}, {"p50", w.p50}, {"p99", w.p99}}},
                {"jct_s", {{"mean", c.mean}, {"p99", c.p99}}},
                {"lost_gpu_hours_by_cause", by_cause(g.lost_by_cause)}};
  };
  // A parent's figures with its children's, for chargeback of a whole subtree.
  std::vector<UnitMs> subtree(queues_.size(), 0);
  std::vector<std::map<std::string, UnitMs>> subtree_by_model(queues_.size());
  for (uint32_t q = 0; q < queues_.size(); ++q) {
    for (core::QueueId a : queues_.queue(core::QueueId(q)).self_and_ancestors) {
      subtree[a.v] += by_queue_[q].alloc;
      for (const auto& [model, unit_ms] : by_queue_[q].alloc_by_model) {
        subtree_by_model[a.v][model] += unit_ms;
      }
    }
  }
  auto hours_by_model = [](const std::map<std::string, UnitMs>& m) {
    Json hours = Json::object();
    for (const auto& [model, unit_ms] : m) {
      hours[model] = GpuHours(unit_ms);
    }
    return hours;
  };
  Json by_queue = Json::object();
  for (uint32_t q = 0; q < queues_.size(); ++q) {
    const core::QueueSpec& spec = queues_.queue(core::QueueId(q)).spec;
    Json g = group(by_queue_[q]);
    g["gpu_hours_by_model"] = hours_by_model(by_queue_[q].alloc_by_model);
    g["gpu_hours_with_children"] = GpuHours(subtree[q]);
    g["gpu_hours_by_model_with_children"] = hours_by_model(subtree_by_model[q]);
    g["preemptions"] = by_queue_[q].preemptions;
    // Chargeback: GPU-hours by model at each model's price.
    auto cost = [&](const std::map<std::string, UnitMs>& by_model) {
      double c = 0;
      for (const auto& [model, unit_ms] : by_model) {
        auto price = prices_.find(model);
        c += GpuHours(unit_ms) * (price == prices_.end() ? 1.0 : price->second);
      }
      return c;
    };
    g["cost"] = cost(by_queue_[q].alloc_by_model);
    if (by_queue_[q].observed > 0) {
      g["observed_gpu_hours"] = GpuHours(by_queue_[q].observed);
      g["busy_gpu_hours"] = GpuHours(by_queue_[q].busy);
      g["right_sizing_frees_gpu_hours"] = GpuHours(by_queue_[q].frees);
    }
    g["cost_with_children"] = cost(subtree_by_model[q]);
    if (spec.budget) {
      g["budget"] = {{"gpu_hours", spec.budget->gpu_hours},
                     {"period", std::string(core::Name(spec.budget->period))},
                     {"when_spent", std::string(core::Name(spec.budget->when_spent))},
                     {"times_spent", by_queue_[q].budget_spent}};
    }
    g["guaranteed_gpus"] = static_cast<double>(spec.guaranteed) / kGpuUnits;
    if (!spec.guaranteed_by_model.empty()) {
      Json by_model = Json::object();
      for (const core::ModelGuarantee& m : spec.guaranteed_by_model) {
        by_model[m.name] = static_cast<double>(m.units) / kGpuUnits;
      }
      g["guaranteed_gpus_by_model"] = by_model;
    }
    if (spec.burst >= 0) g["burst_gpus"] = static_cast<double>(spec.burst) / kGpuUnits;
    by_queue[spec.name] = g;
  }
  j["by_queue"] = by_queue;
  // Jobs whose trace line carried observed usage: allocated vs used GPU-hours, and what
  // right-sizing (core::RightSize) would have freed.
  double observed = 0, busy = 0, frees = 0;
  for (const Group& g : by_queue_) {
    observed += g.observed;
    busy += g.busy;
    frees += g.frees;
  }
  if (observed > 0) {
    j["observed_usage"] = {{"gpu_hours", GpuHours(observed)},
                           {"busy_gpu_hours", GpuHours(busy)},
                           {"busy_pct", 100 * busy / observed},
                           {"right_sizing_frees_gpu_hours", GpuHours(frees)},
                           {"right_sizing_frees_pct", 100 * frees / observed}};
  }
  j["currency"] = currency_;
  Json by_tier = Json::object();
  for (int t = 0; t < core::kTierCount; ++t) {
    Group g = by_tier_[t];
    g.wait_ms = wait_ms_[t];
    by_tier[std::string(core::Name(static_cast<core::Tier>(t)))] = group(g);
  }
  j["by_tier"] = by_tier;
  j["events"] = events_;
  out << j.dump(2) << "\n";
}

void Report::Summary(std::ostream& out) const {
  std::vector<double> all;
  for (const auto& w : wait_ms_) all.insert(all.end(), w.begin(), w.end());
  Percentiles wait = Summarize(all);
  Percentiles jct = Summarize(jct_s_);
  Percentiles lat = Summarize(pass_ms_);
  out << fmt::format("policy {}: {} jobs submitted, {} finished, {} rejected, {} reclaimed\n",
                     policy_, submitted_, finished_, rejected_, reclaimed_);
  // Name what was rejected (a spec no node can ever satisfy): the first few, with why.
  constexpr size_t kNamed = 5;
  for (size_t i = 0; i < rejected_jobs_.size() && i < kNamed; ++i) {
    out << fmt::format("  rejected {}: {}\n", rejected_jobs_[i].first, rejected_jobs_[i].second);
  }
  if (rejected_jobs_.size() > kNamed) {
    out << fmt::format("  ... and {} more rejected (the report's rejected_jobs lists them all)\n",
                       rejected_jobs_.size() - kNamed);
  }
  if (unfinished_) {
    out << fmt::format(
        "  WARNING: {} jobs never finished (still waiting when nothing was left to happen)\n",
        unfinished_);
  }
  out << fmt::format("  GPU utilization     {:.1f}%\n", gpu_utilization_pct());
  out << fmt::format(
      "  allocation ratio    {:.1f}% of GPUs up, at the last arrival (at most {:.1f}% for the jobs "
      "then waiting)\n",
      ratio_at_last_arrival_, bound_at_last_arrival_);
  out << fmt::format("  fragmented GPUs     {:.1f}% of GPUs up at the last arrival, mean {:.1f}%\n",
                     frag_at_last_arrival_, fragmentation_mean_pct());
  if (!idle_by_cause_.empty()) {
    double total = 0;
    std::string causes;
    for (const auto& [cause, gpus] : idle_by_cause_) {
      total += gpus;
      if (gpus >= 0.05)
        causes += fmt::format("{}{:.1f} {}", causes.empty() ? "" : ", ", gpus, cause);
    }
    out << fmt::format("  idle GPUs           mean {:.1f}{}{}\n", total, causes.empty() ? "" : ": ",
                       causes);
  }
  out << fmt::format("  queue wait          mean {:.1f} s, p99 {:.1f} s\n", wait.mean / 1000,
                     wait.p99 / 1000);
  if (!critical_in_guarantee_wait_ms_.empty()) {
    const Percentiles c = Summarize(critical_in_guarantee_wait_ms_);
    out << fmt::format("  critical in guarantee: {} jobs, wait mean {:.1f} s, p99 {:.1f} s\n",
                       c.count, c.mean / 1000, c.p99 / 1000);
  }
  out << fmt::format("  job completion      mean {:.1f} s, p99 {:.1f} s\n", jct.mean, jct.p99);
  out << fmt::format(
      "  preemptions         {} ({:.2f}% of starts), {} requeued by failures\n", preemptions_,
      starts_ ? 100.0 * static_cast<double>(preemptions_) / static_cast<double>(starts_) : 0.0,
      requeues_);
  out << fmt::format(
      "  lost work           {:.2f} GPU-hours (preemption {:.2f}, failures {:.2f}, idle reclaim "
      "{:.2f})\n",
      GpuHours(lost_), GpuHours(lost_by_cause_[0]), GpuHours(lost_by_cause_[1]),
      GpuHours(lost_by_cause_[2]));
  out << fmt::format(
      "  makespan            {:.0f} s\n",
      last_finish_ >= 0 ? static_cast<double>(last_finish_ - first_submit_) / 1000 : 0.0);
  out << fmt::format("  scheduling latency  p50 {:.3f} ms, p99 {:.3f} ms over {} passes\n", lat.p50,
                     lat.p99, lat.count);
}

}  // namespace gantry::sim
