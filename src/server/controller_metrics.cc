// Controller::Metrics: the Prometheus text exposition of /metrics, rendered on the
// controller thread from its state (see docs for the list of series).
#include "server/controller.h"

#include <string>

#include "server/controller_internal.h"

namespace gantry::server {

void Controller::Metrics(Done done) {
  Post([this]() -> Reply {
    std::string out;
    const core::Ledger& ledger = sched_->ledger();
    MetricHeader(out, "gantry_gpu_utilization_ratio", "gauge",
                 "GPU capacity of up nodes allocated to jobs (fractions by share)");
    out += "gantry_gpu_utilization_ratio " +
           FormatValue(ledger.up_units() > 0 ? static_cast<double>(ledger.used_units()) /
                                                   static_cast<double>(ledger.up_units())
                                             : 0.0) +
           "\n";
    MetricHeader(out, "gantry_scheduling_latency_seconds", "histogram",
                 "Wall-clock time of one scheduling pass");
    sched_latency_.Render(out, "gantry_scheduling_latency_seconds");
    MetricHeader(out, "gantry_queue_wait_seconds", "histogram",
                 "Time from submit to first start, by tier");
    for (int t = 0; t < core::kTierCount; ++t) {
      queue_wait_[static_cast<size_t>(t)].Render(
          out, "gantry_queue_wait_seconds",
          "tier=\"" + std::string(core::Name(static_cast<core::Tier>(t))) + "\"");
    }
    MetricHeader(out, "gantry_preemptions_total", "counter", "Jobs preempted, by queue");
    for (uint32_t q = 0; q < config_.queues.size(); ++q) {
      out += "gantry_preemptions_total{queue=\"" + EscapeLabel(config_.queues.queue(core::QueueId(q)).spec.name) +
             "\"} " + std::to_string(preemptions_[q]) + "\n";
    }
    const auto gpus = [](core::GpuUnits u) {
      return FormatValue(static_cast<double>(u) / static_cast<double>(core::kGpuUnits));
    };
    MetricHeader(out, "gantry_queue_used_gpus", "gauge", "GPUs held by a queue and its descendants");
    for (uint32_t q = 0; q < config_.queues.size(); ++q) {
      out += "gantry_queue_used_gpus{queue=\"" + EscapeLabel(config_.queues.queue(core::QueueId(q)).spec.name) +
             "\"} " + gpus(sched_->queue_usage(core::QueueId(q))) + "\n";
    }
    MetricHeader(out, "gantry_queue_guaranteed_gpus", "gauge", "A queue's guarantee");
    for (uint32_t q = 0; q < config_.queues.size(); ++q) {
      const core::QueueSpec& s = config_.queues.queue(core::QueueId(q)).spec;
      out += "gantry_queue_guaranteed_gpus{queue=\"" + EscapeLabel(s.name) + "\"} " + gpus(s.guaranteed) + "\n";
    }
    MetricHeader(out, "gantry_queue_burst_gpus", "gauge", "A queue's burst limit (absent: none)");
    for (uint32_t q = 0; q < config_.queues.size(); ++q) {
      const core::QueueSpec& s = config_.queues.queue(core::QueueId(q)).spec;
      if (s.burst >= 0) out += "gantry_queue_burst_gpus{queue=\"" + EscapeLabel(s.name) + "\"} " + gpus(s.burst) + "\n";
    }
    MetricHeader(out, "gantry_gpu_allocated_ratio", "gauge",
                 "Share of one GPU allocated to jobs (labels as dcgm-exporter's)");
    MetricHeader(out, "gantry_gpu_busy_ratio", "gauge", "GPU utilization the agent last sampled");
    std::string busy;
    for (uint32_t i = 0; i < nodes_.size(); ++i) {
      const core::Node& node = cluster_.node(core::NodeId(i));
      const NodeInfo& info = nodes_[i];
      for (int g = 0; g < node.gpus; ++g) {
        const core::GpuState& s = ledger.gpu(core::GpuId(node.first_gpu.v + static_cast<uint32_t>(g)));
        const double alloc = s.mode == core::GpuMode::kWhole    ? 1.0
                             : s.mode == core::GpuMode::kMig    ? s.mig_compute / 7.0
                             : s.mode == core::GpuMode::kShared ? s.share_used / 1000.0
                                                                : 0.0;
        const GpuReport* rep = static_cast<size_t>(g) < info.gpus.size() ? &info.gpus[static_cast<size_t>(g)] : nullptr;
        const std::string labels = "gpu=\"" + std::to_string(g) + "\",UUID=\"" +
                                   EscapeLabel(rep ? rep->uuid : "") + "\",Hostname=\"" +
                                   EscapeLabel(node.name) + "\",modelName=\"" +
                                   EscapeLabel(cluster_.catalog().model(node.model).name) + "\"";
        out += "gantry_gpu_allocated_ratio{" + labels + "} " + FormatValue(alloc) + "\n";
        if (rep && info.up) busy += "gantry_gpu_busy_ratio{" + labels + "} " + FormatValue(rep->utilization) + "\n";
      }
    }
    out += busy;
    MetricHeader(out, "gantry_jobs", "gauge", "Jobs by state");
    int pending = 0, running = 0, stopping = 0;
    for (const auto& [seq, job] : jobs_) {
      pending += job.state == JobState::kPending;
      running += job.state == JobState::kRunning;
      stopping += job.state == JobState::kStopping;
    }
    out += "gantry_jobs{state=\"pending\"} " + std::to_string(pending) + "\n";
    out += "gantry_jobs{state=\"running\"} " + std::to_string(running) + "\n";
    out += "gantry_jobs{state=\"stopping\"} " + std::to_string(stopping) + "\n";
    MetricHeader(out, "gantry_jobs_submitted_total", "counter", "Jobs accepted by this process");
    out += "gantry_jobs_submitted_total " + std::to_string(submitted_) + "\n";
    MetricHeader(out, "gantry_submits_rate_limited_total", "counter",
                 "Submits refused with 429 for a team's submit rate limit");
    out += "gantry_submits_rate_limited_total " + std::to_string(rate_limited_) + "\n";
    MetricHeader(out, "gantry_agent_duplicates_refused_total", "counter",
                 "Heartbeats refused because another live agent holds the node");
    out += "gantry_agent_duplicates_refused_total " + std::to_string(duplicate_agents_) + "\n";
    MetricHeader(out, "gantry_jobs_ended_total", "counter", "Jobs ended by this process, by how");
    for (const char* end : {"finished", "failed", "cancelled", "rejected", "reclaimed"}) {
      out += "gantry_jobs_ended_total{end=\"" + std::string(end) + "\"} " +
             std::to_string(ended_.count(end) ? ended_.at(end) : 0) + "\n";
    }
    MetricHeader(out, "gantry_requeues_total", "counter", "Runs ended by a node or worker loss");
    out += "gantry_requeues_total " + std::to_string(requeued_) + "\n";
    MetricHeader(out, "gantry_nodes", "gauge", "Nodes by state");
    int up = 0, down = 0, drained = 0;
    for (const NodeInfo& n : nodes_) {
      up += n.up && !n.drained;
      drained += n.up && n.drained;
      down += !n.up;
    }
    out += "gantry_nodes{state=\"up\"} " + std::to_string(up) + "\n";
    out += "gantry_nodes{state=\"drained\"} " + std::to_string(drained) + "\n";
    out += "gantry_nodes{state=\"down\"} " + std::to_string(down) + "\n";
    Reply reply;
    reply.text = std::move(out);
    reply.content_type = "text/plain; version=0.0.4; charset=utf-8";
    return reply;
  }, std::move(done));
}

}  // namespace gantry::server
