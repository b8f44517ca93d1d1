// ClusterHistory: the console's cluster history (GET /v1/cluster/history), one sample per
// interval of the GPUs up and used, the jobs waiting by the first word of their reason, the
// idle GPUs by cause and the GPUs each queue holds; the latest `kept` in memory and every
// sample in the store (table cluster_history), so a restart or a standby taking over keeps
// the console's day. Shared by the Controller and the Kubernetes scheduler.
// Thread-safety: none; its owner's thread.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/result.h"
#include "core/idle.h"
#include "core/scheduler.h"
#include "server/store.h"

namespace gantry::server {

class ClusterHistory {
 public:
  ClusterHistory(const core::QueueTree& queues, int64_t interval_ms, size_t kept)
      : queues_(queues), interval_ms_(interval_ms), kept_(kept) {}

  // The latest samples from the store (at start).
  Status Restore(Store& store);
  // A sample of `sched` at Unix ms `now_ms`, once `interval_ms` has passed since the last:
  // written to `store` (when given), then kept. A failed write keeps nothing and says why.
  Status Sample(const core::Scheduler& sched, int64_t now_ms, Store* store);
  // GET /v1/cluster/history's body: the samples after `since_unix_s`.
  nlohmann::json Body(double since_unix_s) const;

 private:
  struct Point {
    int64_t t_ms = 0;
    double up = 0, used = 0;             // GPUs
    std::map<std::string, int> pending;  // jobs by the first word of their wait reason
    core::IdleGpus idle{};
    std::vector<double> queues;  // GPUs held by each queue and those under it, by QueueId
  };
  // As the API gives it and the store keeps it (queues and idle causes by name: ones the
  // config no longer has are left out), and back.
  nlohmann::json ToJson(const Point& p) const;
  Point FromJson(const nlohmann::json& j) const;

  const core::QueueTree& queues_;
  int64_t interval_ms_;
  size_t kept_;
  std::deque<Point> points_;
  int64_t last_ms_ = -1;
};

}  // namespace gantry::server
