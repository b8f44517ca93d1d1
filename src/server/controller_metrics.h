// ControllerMetrics: what gantryd counts for /metrics as its controller works (passes,
// batches, starts, preemptions, ends, GPU time), and the Prometheus exposition of every
// series from those counts and the state they describe (docs/control-plane.md, "Metrics
// and dashboards", lists the series; deploy/grafana/gantry.json queries them and a test
// checks that every name it queries is here). Counters start from 0 with each process;
// a store read-back after an outage keeps them.
// Thread-safety: none; the controller thread owns it.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/model/types.h"
#include "core/scheduler.h"
#include "server/metrics.h"
#include "server/state.h"
#include "spec/config_reader.h"

namespace gantry::server {

class ControllerMetrics {
 public:
  explicit ControllerMetrics(const spec::ClusterConfig& config);

  // What the exposition describes besides the counts: the controller's state now.
  struct View {
    const core::Scheduler& sched;
    const std::map<int64_t, Job>& jobs;  // by seq
    const std::set<int64_t>& running;    // seqs of running or stopping jobs
    const std::vector<NodeInfo>& nodes;  // by core NodeId
    core::Ticks now;
    bool store_available;
    uint64_t submits_rate_limited;
  };
  std::string Render(const View& v) const;

  // The counts (wall seconds for the two timings; `now` in the controller's ticks).
  void Pass(double seconds) { sched_latency_.Observe(seconds); }
  void Batch(double seconds) { batch_seconds_.Observe(seconds); }
  // A job's first start, `waited_s` after its submit.
  void FirstStart(core::QueueId q, core::Tier t, double waited_s) {
    queue_wait_[q.v * static_cast<size_t>(core::kTierCount) + static_cast<size_t>(t)].Observe(
        waited_s);
  }
  void Preempted(core::QueueId q) { ++preemptions_[q.v]; }
  void Requeued() { ++requeued_; }
  void Resized(bool grew) { ++(grew ? grown_ : shrunk_); }
  void Reclaimed(const std::string& queue) { ++reclaims_[queue]; }
  void Ended(JobEnd end) { ++ended_[end]; }
  void Submitted() { ++submitted_; }
  void Purged(size_t jobs) { purged_ += jobs; }
  void DuplicateAgent() { ++duplicate_agents_; }
  void StoreOutage() { ++outages_; }
  // The GPU-time counters count from the first batch's time on.
  void StartGpuTime(core::Ticks now) {
    if (since_ < 0) since_ = now;
  }
  // `job`'s current run ended at `now`: the GPU time it held since max(its start, the
  // first batch) counts.
  void RunEnded(const Job& job, core::Ticks now) { AddHeldGpuMs(job, now, held_gpu_ms_); }
  // A worker of `queue`'s on node n kept `gpu_ms` of GPU time busy (utilisation x GPUs x ms).
  void Busy(const std::string& queue, core::NodeId n, double gpu_ms) {
    busy_gpu_ms_[{queue, GpuModelName(n)}] += gpu_ms;
  }

 private:
  using QueueModel = std::pair<std::string, std::string>;
  void AddHeldGpuMs(const Job& job, core::Ticks now, std::map<QueueModel, double>& into) const;
  std::string GpuModelName(core::NodeId n) const;  // "cpu" for a node without GPUs
  const std::string& QueueName(uint32_t q) const;
  // `name`'s header, then one series per queue: `value(q)`, or none where it is "".
  void PerQueue(std::string& out, std::string_view name, std::string_view type,
                std::string_view help, const std::function<std::string(uint32_t)>& value) const;
  // The jobs by state, and the pending ones by queue: one walk of the jobs per rendering.
  struct JobCounts {
    int pending = 0, running = 0, stopping = 0;
    std::map<std::string, int> pending_by_queue;
  };
  // The parts of Render, in the exposition's order.
  void RenderQueues(std::string& out, const View& v, const JobCounts& counts) const;
  void RenderGpuTime(std::string& out, const View& v) const;
  void RenderGpus(std::string& out, const View& v) const;
  void RenderJobsAndNodes(std::string& out, const View& v, const JobCounts& counts) const;

  const spec::ClusterConfig& config_;
  const core::Cluster& cluster_;
  Histogram sched_latency_{
      {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1}};
  // The controller thread's time per batch, from taking it to answering it: what every
  // caller, /healthz included, may wait behind.
  Histogram batch_seconds_{
      {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5}};
  std::vector<Histogram> queue_wait_;  // by queue x tier
  std::vector<uint64_t> preemptions_;  // by queue
  uint64_t grown_ = 0, shrunk_ = 0;    // elastic jobs' resizes
  uint64_t submitted_ = 0, requeued_ = 0, purged_ = 0, duplicate_agents_ = 0, outages_ = 0;
  std::map<JobEnd, uint64_t> ended_;          // by end
  std::map<std::string, uint64_t> reclaims_;  // by queue
  // GPU time since the first batch (since_): held by runs that ended (the running ones are
  // added when rendered) and busy as agents report it, in GPU-ms by (queue, GPU model).
  core::Ticks since_ = -1;
  std::map<QueueModel, double> held_gpu_ms_, busy_gpu_ms_;
};

}  // namespace gantry::server
