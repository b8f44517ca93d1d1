#include "server/cluster_history.h"

#include <cmath>

namespace gantry::server {

using nlohmann::json;

Status ClusterHistory::Restore(Store& store) {
  auto rows = store.ClusterSamples(static_cast<int64_t>(kept_));
  if (!rows) return rows.error();
  points_.clear();
  for (const auto& row : *rows) {
    const json j = json::parse(row.second, nullptr, false);
    if (!j.is_object()) continue;  // (written by gantryd: not expected)
    points_.push_back(FromJson(j));
  }
  last_ms_ = points_.empty() ? -1 : points_.back().t_ms;
  return Ok{};
}

Status ClusterHistory::Sample(const core::Scheduler& sched, int64_t now_ms, Store* store) {
  if (last_ms_ >= 0 && now_ms - last_ms_ < interval_ms_) return Ok{};
  last_ms_ = now_ms;
  Point p;
  p.t_ms = now_ms;
  p.up = static_cast<double>(sched.ledger().up_units()) / core::kGpuUnits;
  p.used = static_cast<double>(sched.ledger().used_units()) / core::kGpuUnits;
  for (const auto& key : sched.pending())
    ++p.pending[std::string(core::Word(sched.job(key.id).wait.cause))];
  p.idle = core::IdleByCause(sched);
  for (uint32_t q = 0; q < queues_.size(); ++q) {
    p.queues.push_back(static_cast<double>(sched.queue_usage(core::QueueId(q))) / core::kGpuUnits);
  }
  if (store != nullptr) {
    if (Status s = store->AddClusterSample(now_ms, ToJson(p).dump()); !s) return s;
  }
  points_.push_back(std::move(p));
  while (points_.size() > kept_) points_.pop_front();
  return Ok{};
}

json ClusterHistory::Body(double since_unix_s) const {
  json samples = json::array();
  for (const Point& p : points_) {
    if (static_cast<double>(p.t_ms) / 1000.0 <= since_unix_s) continue;  // the caller has it
    samples.push_back(ToJson(p));
  }
  return {{"interval_s", static_cast<double>(interval_ms_) / 1000.0},
          {"kept", kept_},
          {"samples", samples}};
}

json ClusterHistory::ToJson(const Point& p) const {
  json idle = json::object();
  for (int i = 0; i < core::kIdleCauses; ++i) {
    idle[std::string(core::Name(static_cast<core::IdleCause>(i)))] =
        std::round(p.idle[i] * 1000) / 1000;
  }
  json queues = json::object();
  for (size_t q = 0; q < p.queues.size(); ++q)
    queues[queues_.queue(core::QueueId(static_cast<uint32_t>(q))).spec.name] = p.queues[q];
  return {{"t", static_cast<double>(p.t_ms) / 1000.0},
          {"up_gpus", p.up},
          {"used_gpus", p.used},
          {"pending", p.pending},
          {"idle", idle},
          {"queues", queues}};
}

ClusterHistory::Point ClusterHistory::FromJson(const json& j) const {
  Point p;
  p.t_ms = std::llround(j.value("t", 0.0) * 1000);
  p.up = j.value("up_gpus", 0.0);
  p.used = j.value("used_gpus", 0.0);
  if (const auto pending = j.find("pending"); pending != j.end() && pending->is_object()) {
    for (const auto& [word, n] : pending->items()) {
      if (n.is_number_integer()) p.pending[word] = n.get<int>();
    }
  }
  if (const auto idle = j.find("idle"); idle != j.end() && idle->is_object()) {
    for (int i = 0; i < core::kIdleCauses; ++i)
      p.idle[i] = idle->value(std::string(core::Name(static_cast<core::IdleCause>(i))), 0.0);
  }
  p.queues.assign(queues_.size(), 0.0);
  if (const auto queues = j.find("queues"); queues != j.end() && queues->is_object()) {
    for (const auto& [name, gpus] : queues->items()) {
      if (auto q = queues_.Find(name); q && gpus.is_number()) p.queues[q->v] = gpus.get<double>();
    }
  }
  return p;
}

}  // namespace gantry::server
