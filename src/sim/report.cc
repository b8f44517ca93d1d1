#include "sim/report.h"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include <fmt/format.h>

namespace gantry::sim {

using core::kGpuUnits;
using core::kTicksPerSecond;
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
    : queues_(queues), policy_(std::move(policy)), queue_alloc_(queues.size(), 0) {}

void Report::Advance(core::Ticks t, core::GpuUnits up_units, core::GpuUnits used_units) {
  cap_ += up_units_ * (t - last_t_);
  alloc_ += used_units_ * (t - last_t_);
  last_t_ = t;
  up_units_ = up_units;
  used_units_ = used_units;
}

void Report::Submitted(core::Ticks t) {
  ++submitted_;
  if (first_submit_ < 0) {
    first_submit_ = t;
    cap_at_submit_ = cap_;
    alloc_at_submit_ = alloc_;
  }
}

void Report::Started(core::Tier tier, core::Ticks wait, bool first_start) {
  ++starts_;
  if (first_start) wait_ms_[static_cast<int>(tier)].push_back(static_cast<double>(wait));
}

void Report::Finished(core::Ticks t, core::Ticks jct) {
  ++finished_;
  last_finish_ = t;
  cap_at_finish_ = cap_;
  alloc_at_finish_ = alloc_;
  jct_s_.push_back(static_cast<double>(jct) / kTicksPerSecond);
}

void Report::RunEnded(core::QueueId queue, core::GpuUnits units, core::Ticks start,
                      core::Ticks end, core::Ticks lost_ms) {
  queue_alloc_[queue.v] += units * (end - start);
  lost_ += units * lost_ms;
}

double Report::gpu_utilization_pct() const {
  const int64_t cap = cap_at_finish_ - cap_at_submit_;
  if (cap <= 0) return 0;
  return 100.0 * static_cast<double>(alloc_at_finish_ - alloc_at_submit_) / static_cast<double>(cap);
}

namespace {
constexpr double kUnitMsPerGpuHour = double{kGpuUnits} * kTicksPerSecond * 3600;

Json Figures(const Percentiles& p) {
  return Json{{"mean", p.mean}, {"p50", p.p50}, {"p95", p.p95}, {"p99", p.p99}, {"max", p.max},
              {"count", p.count}};
}
}  // namespace

void Report::Write(std::ostream& out) const {
  Json j;
  j["policy"] = policy_;
  j["jobs"] = {{"submitted", submitted_},
               {"finished", finished_},
               {"rejected", rejected_},
               {"reclaimed", reclaimed_}};
  j["gpu_utilization_pct"] = gpu_utilization_pct();
  std::vector<double> all;
  Json waits;
  for (int t = 0; t < core::kTierCount; ++t) {
    all.insert(all.end(), wait_ms_[t].begin(), wait_ms_[t].end());
  }
  waits["all"] = Figures(Summarize(all));
  for (int t = 0; t < core::kTierCount; ++t) {
    waits[std::string(core::Name(static_cast<core::Tier>(t)))] = Figures(Summarize(wait_ms_[t]));
  }
  j["queue_wait_time_ms"] = waits;
  Percentiles jct = Summarize(jct_s_);
  j["jct_s"] = {{"mean", jct.mean}, {"p50", jct.p50}, {"p99", jct.p99}};
  j["preemption_rate_pct"] =
      starts_ ? 100.0 * static_cast<double>(preemptions_) / static_cast<double>(starts_) : 0.0;
  j["preemptions"] = preemptions_;
  j["requeues"] = requeues_;
  j["starts"] = starts_;
  j["lost_gpu_hours"] = static_cast<double>(lost_) / kUnitMsPerGpuHour;
  j["makespan_s"] = last_finish_ >= 0 && first_submit_ >= 0
                        ? static_cast<double>(last_finish_ - first_submit_) / kTicksPerSecond
                        : 0.0;
  Percentiles lat = Summarize(pass_ms_);
  j["scheduling_latency_ms"] = {{"p50", lat.p50}, {"p99", lat.p99}, {"max", lat.max},
                                {"mean", lat.mean}, {"passes", lat.count}};
  int64_t total = 0;
  for (int64_t q : queue_alloc_) total += q;
  Json by_queue = Json::object();
  for (uint32_t q = 0; q < queues_.size(); ++q) {
    const int64_t v = queue_alloc_[q];
    by_queue[queues_.queue(core::QueueId(q)).spec.name] = {
        {"gpu_hours", static_cast<double>(v) / kUnitMsPerGpuHour},
        {"share_pct", total ? 100.0 * static_cast<double>(v) / static_cast<double>(total) : 0.0}};
  }
  j["by_queue"] = by_queue;
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
  out << fmt::format("  GPU utilization     {:.1f}%\n", gpu_utilization_pct());
  out << fmt::format("  queue wait          mean {:.1f} s, p99 {:.1f} s\n", wait.mean / 1000,
                     wait.p99 / 1000);
  out << fmt::format("  job completion      mean {:.1f} s, p99 {:.1f} s\n", jct.mean, jct.p99);
  out << fmt::format("  preemptions         {} ({:.2f}% of starts), {} requeued by failures\n",
                     preemptions_,
                     starts_ ? 100.0 * static_cast<double>(preemptions_) / static_cast<double>(starts_) : 0.0,
                     requeues_);
  out << fmt::format("  lost work           {:.2f} GPU-hours\n",
                     static_cast<double>(lost_) / kUnitMsPerGpuHour);
  out << fmt::format("  makespan            {:.0f} s\n",
                     last_finish_ >= 0 ? static_cast<double>(last_finish_ - first_submit_) / 1000 : 0.0);
  out << fmt::format("  scheduling latency  p50 {:.3f} ms, p99 {:.3f} ms over {} passes\n", lat.p50,
                     lat.p99, lat.count);
}

}  // namespace gantry::sim
