// A Kubernetes cluster's snapshot (`kubectl get nodes,pods -A -o json`, one or more files)
// -> a cluster config and a trace, for what-if runs of the cluster as it stands.
// The nodes and pods are read as gantryd --kubernetes reads them (kube/objects.h): nodes
// alike in model, GPUs, CPU and memory form a pool; a pod group (the
// scheduling.x-k8s.io/pod-group label) or a lone pod is one job, its queue its namespace.
// A snapshot is one instant: every job arrives at 0, the running ones first (by creation
// time), then those waiting; ended pods are gone from the API, and no pod's run time is
// known, so each job runs its gantry.dev/runtime-estimate-s annotation, else --duration-s.
// See docs/traces.md "kubernetes".

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <tuple>
#include <vector>

#include "kube/objects.h"
#include "sim/convert/convert.h"
#include "spec/read_file.h"

namespace gantry::convert {
namespace {

struct PoolKey {
  std::string model;
  int gpus;
  int64_t cpus_milli, memory_bytes;
  bool mig;
  auto operator<=>(const PoolKey&) const = default;
};

}  // namespace

Result<ConvertSummary> ConvertKubernetes(const ConvertOptions& o) {
  if (o.inputs.empty())
    return Error{"--input",
                 "kubernetes takes one or more `kubectl get nodes,pods -A -o json` files"};
  if (!(o.duration_s > 0)) return Error{"--duration-s", "must be above 0"};
  const core::Catalog catalog = core::Catalog::BuiltIn();
  ConvertSummary summary;
  std::vector<kube::NodeInfo> nodes;
  std::vector<kube::PodInfo> pods;
  for (const std::string& path : o.inputs) {
    spec::Diagnostics diags;
    auto text = spec::ReadWholeFile(path, diags);
    if (!text) return Error{"--input", diags.ToString()};
    const nlohmann::json doc = nlohmann::json::parse(*text, nullptr, false);
    if (!doc.is_object())
      return Error{"--input",
                   path + ": not a JSON object (expected `kubectl get nodes,pods -A -o json`)"};
    nlohmann::json items = doc.contains("items") && doc["items"].is_array()
                               ? doc["items"]
                               : nlohmann::json::array({doc});
    for (const nlohmann::json& item : items) {
      ++summary.rows;
      const std::string kind = item.is_object() && item.contains("kind") && item["kind"].is_string()
                                   ? item["kind"].get<std::string>()
                                   : "";
      if (kind == "Node") {
        nodes.push_back(kube::ParseNode(item));
      } else if (kind == "Pod") {
        pods.push_back(kube::ParsePod(item));
      } else {
        ++summary.dropped["not a node or a pod"];
      }
    }
  }

  // The cluster: pools of like nodes.
  std::map<PoolKey, int> pool_count;
  for (const kube::NodeInfo& n : nodes) {
    if (!n.problem.empty()) {
      ++summary.dropped["node: " + n.problem];
      continue;
    }
    PoolKey key{"", n.gpus, n.cpus_milli, n.memory_bytes, !n.mig.empty()};
    if (n.gpus > 0 || !n.mig.empty()) {
      auto model = kube::ModelOf(n, catalog);
      if (!model) {
        ++summary.dropped["node of an unknown GPU model (nvidia.com/gpu.product)"];
        continue;
      }
      key.model = catalog.model(*model).name;
      if (!n.mig.empty() && key.gpus == 0) {
        // MIG (single or mixed strategy): the node's GPUs, from GPU feature discovery.
        auto count = n.labels.find("nvidia.com/gpu.count");
        key.gpus = count == n.labels.end() ? 0 : std::atoi(count->second.c_str());
        if (key.gpus <= 0 || key.gpus > core::kMaxGpusPerNode) {
          ++summary.dropped["MIG node without nvidia.com/gpu.count"];
          continue;
        }
      }
    }
    ++pool_count[key];
  }
  ClusterOut cluster;
  cluster.name = o.name.empty() ? "kubernetes" : o.name;
  cluster.comments = {
      "Converted by `gantry trace convert --format kubernetes` from a snapshot of a live cluster.",
      "Pools are nodes alike in model, GPUs, CPU and memory; leaves are not known (one per pool)."};
  int index = 0;
  for (const auto& [key, count] : pool_count) {
    PoolOut p;
    p.name = (key.model.empty() ? std::string("cpu") : key.model + "x" + std::to_string(key.gpus)) +
             "-" + std::to_string(index++);
    p.count = count;
    p.gpus = key.model.empty() ? 0 : key.gpus;
    p.gpu_model = key.model;
    p.cpus = static_cast<double>(key.cpus_milli) / 1000.0;
    p.memory_gb = static_cast<double>(key.memory_bytes) / 1e9;
    if (key.mig) p.sharing = {"mig"};
    cluster.pools.push_back(p);
    summary.cluster_nodes += count;
    summary.cluster_gpus += int64_t{count} * p.gpus;
  }
  if (cluster.pools.empty()) return Error{"--input", "no usable node in the snapshot"};

  // The jobs: a gang per pod group, else a pod; ended pods are gone.
  struct Job {
    std::vector<const kube::PodInfo*> pods;
    bool running = false;
    int64_t created = 0;
    std::string key;
  };
  std::map<std::string, Job> jobs;
  for (const kube::PodInfo& p : pods) {
    if (!p.problem.empty()) {
      ++summary.dropped["malformed pod"];
      continue;
    }
    if (p.terminal() || p.deleting) {
      ++summary.dropped["ended or ending pod"];
      continue;
    }
    const std::string key = p.ns + "/" + (p.group.empty() ? p.name : p.group);
    Job& j = jobs[key];
    j.key = key;
    j.pods.push_back(&p);
    j.running |= !p.node_name.empty();
    if (p.created_ms > 0 && (j.created == 0 || p.created_ms < j.created)) j.created = p.created_ms;
  }
  std::vector<Job*> order;
  for (auto& [key, j] : jobs) order.push_back(&j);
  std::sort(order.begin(), order.end(), [](const Job* a, const Job* b) {
    return std::tie(b->running, a->created, a->key) < std::tie(a->running, b->created, b->key);
  });
  std::map<std::string, bool> namespaces;
  std::vector<JobOut> out;
  for (const Job* j : order) {
    if (o.limit > 0 && static_cast<int64_t>(out.size()) >= o.limit) break;
    if (auto why = kube::WhyNotAlike(j->pods)) {
      ++summary.dropped["pod group whose pods differ"];
      continue;
    }
    const kube::PodInfo& p = *j->pods.front();
    JobOut job;
    job.id = j->key;
    job.submit = 0;
    job.queue = p.ns;
    namespaces[p.ns] = true;
    job.replicas = static_cast<int>(j->pods.size());
    if (!p.mig_profile.empty()) {
      job.mig = p.mig_profile;
      job.sharing = "mig";
    } else {
      job.gpus = static_cast<double>(p.gpus);
    }
    job.cpus = static_cast<double>(p.cpus_milli) / 1000.0;
    job.memory_gb = static_cast<double>(p.memory_bytes) / 1e9;
    // A snapshot's bad annotation is left out (the what-if goes on without it).
    auto annotation = [&](const char* key) -> std::optional<double> {
      auto v = kube::AnnotationNumber(p, key, 0, 1e18);
      return v && *v && **v > 0 ? *v : std::nullopt;
    };
    if (auto runtime = annotation(kube::kRuntimeAnnotation)) {
      job.duration = *runtime;
    } else {
      job.duration = o.duration_s;
      ++summary.adjusted["run time unknown: --duration-s"];
    }
    if (auto vram = annotation(kube::kVramAnnotation)) job.vram_gb = *vram;
    if (auto ckpt = annotation(kube::kCheckpointAnnotation)) job.checkpoint_s = *ckpt;
    if (auto it = p.annotations.find(kube::kTopologyAnnotation); it != p.annotations.end())
      job.topology = it->second;
    if (job.uses_gpu() && job.vram_gb == 0) {
      job.vram_gb = 1;  // the trace needs a VRAM need for GPU jobs; any model holds 1 GB
      ++summary.adjusted["VRAM need unknown: 1 GB"];
    }
    if (j->running) ++summary.adjusted["running at the snapshot: arrives first"];
    out.push_back(std::move(job));
  }
  for (const auto& [ns, unused] : namespaces) {
    QueueOut q;
    q.name = ns;
    q.burst_gpus = static_cast<double>(summary.cluster_gpus);
    cluster.queues.push_back(q);
  }
  if (cluster.queues.empty())
    cluster.queues.push_back(
        QueueOut{"default", "", 0, static_cast<double>(summary.cluster_gpus), 1});
  auto cluster_path = OutPath(o.out, "cluster.yaml");
  if (!cluster_path) return cluster_path.error();
  if (Status s = WriteCluster(*cluster_path, cluster); !s) return s.error();
  auto trace_path = OutPath(o.out, "trace.jsonl");
  if (!trace_path) return trace_path.error();
  TraceWriter writer;
  if (Status s = writer.Open(*trace_path); !s) return s.error();
  for (const JobOut& job : out) {
    if (Status s = writer.Add(job); !s) return s.error();
  }
  if (Status s = writer.Close(); !s) return s.error();
  summary.trace = writer.stats();
  summary.files = {*cluster_path, *trace_path};
  return summary;
}

}  // namespace gantry::convert
