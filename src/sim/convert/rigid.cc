#include "sim/convert/rigid.h"

#include <algorithm>
#include <utility>

namespace gantry::convert {

int64_t PeakGpus(const std::vector<RigidJob>& jobs) {
  std::vector<std::pair<double, int64_t>> edges;  // (time, +gpus / -gpus)
  edges.reserve(jobs.size() * 2);
  for (const RigidJob& j : jobs) {
    edges.emplace_back(j.submit, j.gpus);
    edges.emplace_back(j.submit + j.duration, -int64_t{j.gpus});
  }
  // At one instant, ends before starts (a job ending at t frees its GPUs for t).
  std::sort(edges.begin(), edges.end());
  int64_t now = 0, peak = 0;
  for (const auto& [t, d] : edges) {
    now += d;
    peak = std::max(peak, now);
  }
  return peak;
}

Result<ConvertSummary> WriteRigid(RigidPlan plan, std::vector<RigidJob> jobs,
                                  ConvertSummary summary) {
  std::stable_sort(jobs.begin(), jobs.end(),
                   [](const RigidJob& a, const RigidJob& b) { return a.submit < b.submit; });
  if (plan.limit > 0 && static_cast<int64_t>(jobs.size()) > plan.limit) {
    summary.dropped["beyond --limit"] += static_cast<int64_t>(jobs.size()) - plan.limit;
    jobs.resize(static_cast<size_t>(plan.limit));
  }
  ClusterOut& cluster = plan.cluster;
  if (cluster.pools.empty()) {
    PoolOut pool = plan.node_shape;
    const int per = std::max(1, pool.gpus);
    if (plan.nodes > 0) {
      pool.count = plan.nodes;
    } else {
      int64_t largest = 0;
      for (const RigidJob& j : jobs) largest = std::max<int64_t>(largest, j.gpus);
      const int64_t need = std::max(PeakGpus(jobs), largest);
      pool.count = static_cast<int>(std::max<int64_t>(1, (need + per - 1) / per));
    }
    cluster.pools.push_back(pool);
  }
  const int64_t capacity = cluster.gpu_count();
  int per_node = 0;
  for (const PoolOut& p : cluster.pools) per_node = std::max(per_node, p.gpus);

  // Jobs no placement could ever hold are left out here rather than rejected later, so
  // the trace measures scheduling, not the cluster's size.
  std::vector<RigidJob> kept;
  kept.reserve(jobs.size());
  for (RigidJob& j : jobs) {
    if (j.gpus > capacity) {
      ++summary.dropped["more GPUs than the cluster has"];
      continue;
    }
    kept.push_back(std::move(j));
  }
  jobs = std::move(kept);

  // Queues: those with jobs, in the source's order of first appearance by name index.
  std::vector<double> demand(plan.queues.size(), 0);
  std::vector<bool> used(plan.queues.size(), false);
  for (const RigidJob& j : jobs) {
    demand[j.queue] += j.gpus * j.duration;
    used[j.queue] = true;
  }
  std::vector<size_t> live;
  std::vector<double> live_demand;
  for (size_t q = 0; q < plan.queues.size(); ++q) {
    if (!used[q]) continue;
    live.push_back(q);
    live_demand.push_back(demand[q]);
  }
  const std::vector<double> guaranteed = ProportionalGuarantees(live_demand, capacity);
  cluster.queues.clear();
  for (size_t k = 0; k < live.size(); ++k) {
    QueueOut q;
    q.name = plan.queues[live[k]];
    q.guaranteed_gpus = guaranteed[k];
    q.burst_gpus = static_cast<double>(capacity);
    cluster.queues.push_back(q);
  }
  if (cluster.queues.empty()) {
    QueueOut q;
    q.name = "default";
    q.guaranteed_gpus = q.burst_gpus = static_cast<double>(capacity);
    cluster.queues.push_back(q);
  }

  auto cluster_path = OutPath(plan.out, "cluster.yaml");
  if (!cluster_path.ok()) return cluster_path.error();
  if (Status s = WriteCluster(*cluster_path, cluster); !s.ok()) return s.error();
  auto trace_path = OutPath(plan.out, "trace.jsonl");
  if (!trace_path.ok()) return trace_path.error();
  TraceWriter writer;
  if (Status s = writer.Open(*trace_path); !s.ok()) return s.error();
  for (const RigidJob& j : jobs) {
    JobOut out;
    out.id = j.id;
    out.submit = j.submit;
    out.duration = j.duration;
    out.queue = plan.queues[j.queue];
    const Gang gang = SplitGang(j.gpus, per_node);
    out.replicas = gang.replicas;
    out.gpus = gang.gpus;
    if (plan.elastic_checkpoint_s > 0 && gang.replicas > 1 &&
        j.run_time_by_gpus.size() >= static_cast<size_t>(gang.replicas * gang.gpus)) {
      out.min_replicas = 1;
      out.checkpoint_s = plan.elastic_checkpoint_s;
      // Throughput at k workers against its full size's: run time there over run time at k.
      const double full = j.run_time_by_gpus[static_cast<size_t>(gang.replicas * gang.gpus - 1)];
      for (int k = 1; k <= gang.replicas; ++k)
        out.speedup.push_back(full / j.run_time_by_gpus[static_cast<size_t>(k * gang.gpus - 1)]);
    }
    out.speed_by_model = j.speed_by_model;
    out.gpu_models = plan.gpu_models;
    out.vram_gb = plan.vram_gb;
    if (Status s = writer.Add(out); !s.ok()) return s.error();
  }
  if (Status s = writer.Close(); !s.ok()) return s.error();
  summary.trace = writer.stats();
  summary.cluster_gpus = capacity;
  summary.cluster_nodes = 0;
  for (const PoolOut& p : cluster.pools) summary.cluster_nodes += p.count;
  summary.files = {*cluster_path, *trace_path};
  return summary;
}

}  // namespace gantry::convert
