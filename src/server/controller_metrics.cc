// ControllerMetrics (controller_metrics.h) and Controller::Metrics, which renders it on
// the controller thread.
//
// Per-GPU series carry dcgm-exporter's labels (gpu, UUID, Hostname, modelName, and
// GPU_I_PROFILE for a MIG instance) so that its series join with ours on UUID, plus who
// holds the GPU: queue, gantry_job and user. The job's label is not `job`: Prometheus
// sets `job` on every series it scrapes and would rename ours to exported_job.
// Cardinality: one series per GPU and per job holding part of it; ended jobs drop out.
#include "server/controller_metrics.h"

#include "server/controller.h"

#include <algorithm>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "server/controller_internal.h"

namespace gantry::server {

namespace {

// A job's part of one GPU: a whole GPU, or the MIG instances or MPS shares it holds there.
struct Holding {
  const Job* job = nullptr;
  double share = 0;          // of the GPU
  std::string mig_profiles;  // the MIG profiles of those instances, comma-separated
  std::string mig_ids;       // their GPU instance ids as the agent reported them, likewise
};

void AddToList(std::string& list, const std::string& item) {
  if (item.empty()) return;
  const std::string padded = "," + list + ",";
  if (padded.find("," + item + ",") == std::string::npos) list += (list.empty() ? "" : ",") + item;
}

}  // namespace

ControllerMetrics::ControllerMetrics(const spec::ClusterConfig& config)
    : config_(config),
      cluster_(config.cluster),
      queue_wait_(config.queues.size() * static_cast<size_t>(core::kTierCount),
                  Histogram({1, 5, 15, 30, 60, 300, 900, 1800, 3600, 4 * 3600, 12 * 3600, 86400})),
      preemptions_(config.queues.size(), 0) {}

const std::string& ControllerMetrics::QueueName(uint32_t q) const {
  return config_.queues.queue(core::QueueId(q)).spec.name;
}

std::string ControllerMetrics::GpuModelName(core::NodeId n) const {
  const core::Node& node = cluster_.node(n);
  return node.gpus > 0 && node.model.valid() ? cluster_.catalog().model(node.model).name : "cpu";
}

void ControllerMetrics::AddHeldGpuMs(const Job& job, core::Ticks now,
                                     std::map<QueueModel, double>& into) const {
  if (since_ < 0 || job.run_start < 0) return;
  const core::Ticks from = std::max(job.run_start, since_);
  if (now <= from) return;
  for (const Worker& w : job.workers) {
    const double gpus = WorkerGpus(w.alloc, cluster_);
    if (gpus > 0)
      into[{job.queue, GpuModelName(w.alloc.node)}] += gpus * static_cast<double>(now - from);
  }
}

std::string ControllerMetrics::Render(const View& v) const {
  JobCounts counts;
  for (const auto& [seq, job] : v.jobs) {
    counts.pending += job.state == JobState::kPending;
    counts.running += job.state == JobState::kRunning;
    counts.stopping += job.state == JobState::kStopping;
    if (job.state == JobState::kPending) ++counts.pending_by_queue[job.queue];
  }
  std::string out;
  RenderQueues(out, v, counts);
  RenderGpuTime(out, v);
  RenderGpus(out, v);
  RenderJobsAndNodes(out, v, counts);
  return out;
}

// The cluster's allocation, the two timings, and each queue's waits, preemptions,
// reclaims, GPUs, guarantee, budget, burst and pending jobs.
void ControllerMetrics::RenderQueues(std::string& out, const View& v,
                                     const JobCounts& counts) const {
  const core::Ledger& ledger = v.sched.ledger();
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
  MetricHeader(out, "gantry_controller_batch_seconds", "histogram",
               "The controller thread's time per batch of calls (every call waits behind "
               "the batch in hand)");
  batch_seconds_.Render(out, "gantry_controller_batch_seconds");
  // Every queue and tier, observed or not, so that rate() sees a series from the start.
  MetricHeader(out, "gantry_queue_wait_seconds", "histogram",
               "Time from submit to first start, by queue and tier");
  for (uint32_t q = 0; q < config_.queues.size(); ++q) {
    for (int t = 0; t < core::kTierCount; ++t) {
      const auto tier = static_cast<core::Tier>(t);
      queue_wait_[q * static_cast<size_t>(core::kTierCount) + static_cast<size_t>(t)].Render(
          out, "gantry_queue_wait_seconds",
          Labels({{"queue", QueueName(q)}, {"tier", core::Name(tier)}}));
    }
  }
  const auto spec = [this](uint32_t q) -> const core::QueueSpec& {
    return config_.queues.queue(core::QueueId(q)).spec;
  };
  const auto gpus = [](core::GpuUnits u) {
    return FormatValue(static_cast<double>(u) / static_cast<double>(core::kGpuUnits));
  };
  PerQueue(out, "gantry_preemptions_total", "counter", "Jobs preempted, by queue",
           [&](uint32_t q) { return std::to_string(preemptions_[q]); });
  PerQueue(out, "gantry_reclaims_total", "counter",
           "Jobs ended for idle GPUs (reclaimed), by queue", [&](uint32_t q) {
             const auto it = reclaims_.find(QueueName(q));
             return std::to_string(it == reclaims_.end() ? 0 : it->second);
           });
  PerQueue(out, "gantry_queue_used_gpus", "gauge", "GPUs held by a queue and its descendants",
           [&](uint32_t q) { return gpus(v.sched.queue_usage(core::QueueId(q))); });
  PerQueue(out, "gantry_queue_guaranteed_gpus", "gauge", "A queue's guarantee",
           [&](uint32_t q) { return gpus(spec(q).guaranteed); });
  BudgetMetrics(out, config_.queues, v.sched);
  PerQueue(out, "gantry_queue_burst_gpus", "gauge", "A queue's burst limit (absent: none)",
           [&](uint32_t q) { return spec(q).burst >= 0 ? gpus(spec(q).burst) : std::string(); });
  PerQueue(out, "gantry_queue_pending_jobs", "gauge",
           "Jobs submitted to a queue and waiting (held by dependencies included)",
           [&](uint32_t q) {
             const auto it = counts.pending_by_queue.find(QueueName(q));
             return std::to_string(it == counts.pending_by_queue.end() ? 0 : it->second);
           });
}

void ControllerMetrics::PerQueue(std::string& out, std::string_view name, std::string_view type,
                                 std::string_view help,
                                 const std::function<std::string(uint32_t)>& value) const {
  MetricHeader(out, name, type, help);
  for (uint32_t q = 0; q < config_.queues.size(); ++q) {
    const std::string v = value(q);
    if (!v.empty())
      out += std::string(name) + "{queue=\"" + EscapeLabel(QueueName(q)) + "\"} " + v + "\n";
  }
}

// GPU-seconds by (queue, model): every queue and GPU model of the cluster from 0; the
// running jobs' time since their start (or this process's) is added here.
void ControllerMetrics::RenderGpuTime(std::string& out, const View& v) const {
  std::map<QueueModel, double> held = held_gpu_ms_, busy = busy_gpu_ms_;
  std::set<std::string> models;
  for (const core::Node& node : cluster_.nodes()) {
    if (node.gpus > 0 && node.model.valid())
      models.insert(cluster_.catalog().model(node.model).name);
  }
  for (uint32_t q = 0; q < config_.queues.size(); ++q) {
    for (const std::string& model : models) {
      held.try_emplace({QueueName(q), model}, 0.0);
      busy.try_emplace({QueueName(q), model}, 0.0);
    }
  }
  for (int64_t seq : v.running) AddHeldGpuMs(v.jobs.at(seq), v.now, held);
  MetricHeader(out, "gantry_queue_gpu_seconds_total", "counter",
               "GPU-seconds held by a queue's jobs, by GPU model, since this gantryd started");
  for (const auto& [key, ms] : held) {
    out += "gantry_queue_gpu_seconds_total{" +
           Labels({{"queue", key.first}, {"model", key.second}}) + "} " + FormatValue(ms / 1000.0) +
           "\n";
  }
  MetricHeader(out, "gantry_queue_busy_gpu_seconds_total", "counter",
               "GPU-seconds a queue's jobs kept busy (utilization x GPUs, as agents report "
               "it), by GPU model");
  for (const auto& [key, ms] : busy) {
    out += "gantry_queue_busy_gpu_seconds_total{" +
           Labels({{"queue", key.first}, {"model", key.second}}) + "} " + FormatValue(ms / 1000.0) +
           "\n";
  }
}

// Per GPU: who holds it (allocated ratio) and how busy the agent last saw it.
void ControllerMetrics::RenderGpus(std::string& out, const View& v) const {
  // Who holds each GPU, by (node, local index); book_.running() is in seq order, so the
  // series come out in a stable order.
  std::map<std::pair<uint32_t, int>, std::vector<Holding>> holdings;
  for (int64_t seq : v.running) {
    const Job& job = v.jobs.at(seq);
    for (const Worker& w : job.workers) {
      const auto hold = [&](int g, double share, const std::string& profile,
                            const std::string& gi_id) {
        std::vector<Holding>& hs = holdings[{w.alloc.node.v, g}];
        auto h =
            std::find_if(hs.begin(), hs.end(), [&](const Holding& x) { return x.job == &job; });
        if (h == hs.end()) h = hs.insert(hs.end(), Holding{&job, 0, "", ""});
        h->share += share;
        AddToList(h->mig_profiles, profile);
        AddToList(h->mig_ids, gi_id);
      };
      if (w.alloc.sharing == core::Sharing::kExclusive) {
        for (int g = 0; g < 64; ++g) {
          if ((w.alloc.gpu_mask >> g) & 1) hold(g, 1.0, "", "");
        }
      } else if (w.alloc.sharing == core::Sharing::kMig) {
        const core::GpuModel& m = cluster_.catalog().model(cluster_.node(w.alloc.node).model);
        const core::MigProfile& profile = m.mig_profiles[static_cast<size_t>(w.alloc.mig_profile)];
        // The instance at the placement, as the node's agent reported it.
        std::string gi_id;
        const NodeInfo& info = v.nodes[w.alloc.node.v];
        if (w.alloc.gpu >= 0 && static_cast<size_t>(w.alloc.gpu) < info.gpus.size()) {
          for (const GpuReport::Mig& mi : info.gpus[static_cast<size_t>(w.alloc.gpu)].mig) {
            if (mi.start == w.alloc.mig_start && mi.profile == profile.name && mi.gi_id >= 0) {
              gi_id = std::to_string(mi.gi_id);
            }
          }
        }
        hold(w.alloc.gpu, WorkerGpus(w.alloc, cluster_), profile.name, gi_id);
      } else {
        hold(w.alloc.gpu, WorkerGpus(w.alloc, cluster_), "", "");
      }
    }
  }
  MetricHeader(out, "gantry_gpu_allocated_ratio", "gauge",
               "Share of one GPU a job holds (one series per job holding part of it; job "
               "labels empty and 0 "
               "when free); labels join with dcgm-exporter's on UUID");
  MetricHeader(out, "gantry_gpu_busy_ratio", "gauge",
               "GPU utilization the agent last sampled (job labels: the job holding it, when "
               "only one does)");
  std::string busy_lines;
  for (uint32_t i = 0; i < v.nodes.size(); ++i) {
    const core::Node& node = cluster_.node(core::NodeId(i));
    const NodeInfo& info = v.nodes[i];
    for (int g = 0; g < node.gpus; ++g) {
      const GpuReport* rep =
          static_cast<size_t>(g) < info.gpus.size() ? &info.gpus[static_cast<size_t>(g)] : nullptr;
      const std::string gpu = Labels({{"gpu", std::to_string(g)},
                                      {"UUID", rep ? rep->uuid : ""},
                                      {"Hostname", node.name},
                                      {"modelName", cluster_.catalog().model(node.model).name}});
      const auto holder = [](const Job* job) {
        return Labels({{"queue", job ? job->queue : ""},
                       {"gantry_job", job ? job->name : ""},
                       {"user", job ? job->user : ""}});
      };
      const auto it = holdings.find({i, g});
      if (it == holdings.end()) {
        out += "gantry_gpu_allocated_ratio{" + gpu + "," + holder(nullptr) + "} 0\n";
      } else {
        for (const Holding& h : it->second) {
          std::string mig =
              h.mig_profiles.empty() ? "" : Labels({{"GPU_I_PROFILE", h.mig_profiles}}) + ",";
          if (!h.mig_ids.empty()) mig += Labels({{"GPU_I_ID", h.mig_ids}}) + ",";
          out += "gantry_gpu_allocated_ratio{" + gpu + "," + mig + holder(h.job) + "} " +
                 FormatValue(h.share) + "\n";
        }
      }
      if (rep && info.up) {
        const Job* sole =
            it != holdings.end() && it->second.size() == 1 ? it->second.front().job : nullptr;
        busy_lines += "gantry_gpu_busy_ratio{" + gpu + "," + holder(sole) + "} " +
                      FormatValue(rep->utilization) + "\n";
      }
    }
  }
  out += busy_lines;
}

// Jobs by state, the process's counters, nodes by state, and the store.
void ControllerMetrics::RenderJobsAndNodes(std::string& out, const View& v,
                                           const JobCounts& counts) const {
  MetricHeader(out, "gantry_jobs", "gauge", "Jobs by state");
  out += "gantry_jobs{state=\"pending\"} " + std::to_string(counts.pending) + "\n";
  out += "gantry_jobs{state=\"running\"} " + std::to_string(counts.running) + "\n";
  out += "gantry_jobs{state=\"stopping\"} " + std::to_string(counts.stopping) + "\n";
  MetricHeader(out, "gantry_scheduler_job_records", "gauge",
               "Jobs the scheduling core keeps a record of: the active ones (it forgets a "
               "job once it ends)");
  out += "gantry_scheduler_job_records " + std::to_string(v.sched.job_records()) + "\n";
  MetricHeader(out, "gantry_jobs_submitted_total", "counter", "Jobs accepted by this process");
  out += "gantry_jobs_submitted_total " + std::to_string(submitted_) + "\n";
  MetricHeader(out, "gantry_submits_rate_limited_total", "counter",
               "Submits refused with 429 for a team's submit rate limit");
  out += "gantry_submits_rate_limited_total " + std::to_string(v.submits_rate_limited) + "\n";
  MetricHeader(out, "gantry_agent_duplicates_refused_total", "counter",
               "Heartbeats refused because another live agent holds the node");
  out += "gantry_agent_duplicates_refused_total " + std::to_string(duplicate_agents_) + "\n";
  MetricHeader(out, "gantry_jobs_ended_total", "counter", "Jobs ended by this process, by how");
  for (JobEnd end : kJobEnds) {
    out += "gantry_jobs_ended_total{end=\"" + std::string(Word(end)) + "\"} " +
           std::to_string(ended_.count(end) ? ended_.at(end) : 0) + "\n";
  }
  MetricHeader(out, "gantry_jobs_purged_total", "counter",
               "Ended jobs deleted from the store past their retention (--job-retention-days)");
  out += "gantry_jobs_purged_total " + std::to_string(purged_) + "\n";
  MetricHeader(out, "gantry_requeues_total", "counter", "Runs ended by a node or worker loss");
  out += "gantry_requeues_total " + std::to_string(requeued_) + "\n";
  MetricHeader(out, "gantry_resizes_total", "counter",
               "Elastic jobs' resizes (min_replicas): grown into idle GPUs, or shrunk back");
  out += "gantry_resizes_total{direction=\"grow\"} " + std::to_string(grown_) + "\n";
  out += "gantry_resizes_total{direction=\"shrink\"} " + std::to_string(shrunk_) + "\n";
  {
    int now = 0, least = 0, most = 0;  // over the running elastic jobs
    for (int64_t seq : v.running) {
      const Job& job = v.jobs.at(seq);
      if (!job.spec.elastic()) continue;
      now += job.size;
      least += job.spec.min_replicas;
      most += job.spec.replicas;
    }
    MetricHeader(out, "gantry_elastic_workers", "gauge",
                 "Running elastic jobs' workers: their sizes now (size=\"current\"), and "
                 "their least and most (min_replicas, replicas)");
    out += "gantry_elastic_workers{size=\"current\"} " + std::to_string(now) + "\n";
    out += "gantry_elastic_workers{size=\"min\"} " + std::to_string(least) + "\n";
    out += "gantry_elastic_workers{size=\"max\"} " + std::to_string(most) + "\n";
  }
  MetricHeader(out, "gantry_nodes", "gauge", "Nodes by state");
  int up = 0, down = 0, drained = 0;
  for (const NodeInfo& n : v.nodes) {
    up += n.up && !n.drained;
    drained += n.up && n.drained;
    down += !n.up;
  }
  out += "gantry_nodes{state=\"up\"} " + std::to_string(up) + "\n";
  out += "gantry_nodes{state=\"drained\"} " + std::to_string(drained) + "\n";
  out += "gantry_nodes{state=\"down\"} " + std::to_string(down) + "\n";
  MetricHeader(out, "gantry_node_up", "gauge",
               "1 while a node's agent heartbeats (drained or not), else 0; Hostname as "
               "dcgm-exporter's");
  for (uint32_t i = 0; i < v.nodes.size(); ++i) {
    const core::Node& node = cluster_.node(core::NodeId(i));
    out += "gantry_node_up{" +
           Labels({{"node", node.name},
                   {"Hostname", node.name},
                   {"pool", cluster_.pool(node.pool).spec.name}}) +
           "} " + (v.nodes[i].up ? "1" : "0") + "\n";
  }
  // For alerting on a node whose agent cannot keep its workers apart (a kernel that
  // refused the device program, --cgroups off): only what each agent reported.
  MetricHeader(out, "gantry_node_isolated", "gauge",
               "1 where a node's agent keeps its workers apart this way (cgroups, "
               "gpu_devices, mig), else 0");
  for (uint32_t i = 0; i < v.nodes.size(); ++i) {
    const core::Node& node = cluster_.node(core::NodeId(i));
    for (const auto& [what, on] : v.nodes[i].isolation) {
      out += "gantry_node_isolated{" +
             Labels({{"node", node.name}, {"Hostname", node.name}, {"what", what}}) + "} " +
             (on ? "1" : "0") + "\n";
    }
  }
  MetricHeader(out, "gantry_store_available", "gauge",
               "1 while gantryd's store takes its writes, 0 during an outage");
  out += std::string("gantry_store_available ") + (v.store_available ? "1" : "0") + "\n";
  MetricHeader(out, "gantry_store_outages_total", "counter",
               "Store outages gantryd rode through (or is in) since it started");
  out += "gantry_store_outages_total " + std::to_string(outages_) + "\n";
}

void Controller::Metrics(std::string token, Done done) {
  Post(
      [this, token = std::move(token)]() -> Reply {
        if (options_.metrics_token) {  // its labels name jobs and users
          Reply refused;
          if (!Authenticate(token, refused)) return refused;
        }
        std::string out = metrics_.Render({*sched_, book_.jobs(), book_.running(), nodes_.all(),
                                           now_, outage_.since < 0, auth_.rate_limited()});
        Reply reply;
        reply.text = std::move(out);
        reply.content_type = "text/plain; version=0.0.4; charset=utf-8";
        return reply;
      },
      std::move(done), Kind::kRead);
}

}  // namespace gantry::server
