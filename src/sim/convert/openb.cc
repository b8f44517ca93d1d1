// Alibaba GPU cluster trace v2023 ("openb", used by FGD, ATC'23): a node list
// (sn,cpu_milli,memory_mib,gpu,model) and pod lists (name,cpu_milli,memory_mib,num_gpu,
// gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time).
// Two modes: replay (pods at their creation times, running from scheduled to deletion)
// and FGD's fill mode (pods sampled with replacement, one per second, never leaving,
// until the GPUs asked for reach a multiple of capacity). See docs/traces.md "openb".

#include <algorithm>
#include <cmath>
#include <map>
#include <vector>

#include "sim/convert/convert.h"
#include "sim/convert/line_reader.h"
#include "sim/gen/random.h"

namespace gantry::convert {
namespace {

constexpr double kMib = 1048576.0 / 1e9;  // GB per MiB

struct ModelInfo {
  const char* trace_name;
  const char* gantry_name;
  double memory_gb;
  bool declared;  // not in the built-in catalog: declared under gpu_models
};

// The trace's GPU types. T4, A10 and the two V100s are built-in models of the catalog;
// P100 and the undisclosed G1/G2/G3 are declared with a memory guess (docs/traces.md).
// Memory only enters vram_gb, which is derived from the smallest acceptable model so
// that it never decides placement.
constexpr ModelInfo kModels[] = {
    {"T4", "T4-16GB", 16, false},
    {"A10", "A10-24GB", 24, false},
    {"V100M16", "V100-16GB", 16, false},
    {"V100M32", "V100-32GB", 32, false},
    {"P100", "P100", 16, true},
    {"G1", "G1", 16, true},
    {"G2", "G2", 32, true},
    {"G3", "G3", 32, true},
};
constexpr size_t kModelCount = sizeof(kModels) / sizeof(kModels[0]);

std::optional<size_t> FindModel(std::string_view trace_name) {
  for (size_t i = 0; i < kModelCount; ++i) {
    if (trace_name == kModels[i].trace_name) return i;
  }
  return std::nullopt;
}

// QoS -> (queue, tier). LS (latency-sensitive) and Guaranteed are served first and
// never preempted; Burstable is ordinary work; BE is best-effort.
struct QosInfo {
  const char* qos;
  const char* queue;
  const char* tier;
};
constexpr QosInfo kQos[] = {{"LS", "ls", "critical"},
                            {"Guaranteed", "guaranteed", "critical"},
                            {"Burstable", "burstable", "standard"},
                            {"BE", "be", "best-effort"}};
constexpr size_t kQosCount = sizeof(kQos) / sizeof(kQos[0]);

struct Pod {
  std::string name;
  double submit = 0;
  double duration = 0;
  int64_t cpu_milli = 0;
  int64_t memory_mib = 0;
  int num_gpu = 0;
  int gpu_milli = 0;
  uint32_t models = 0;  // bit per kModels index; 0 = any
  uint8_t qos = 0;
  double Request() const { return num_gpu == 1 ? gpu_milli / 1000.0 : num_gpu; }
};

struct PoolKey {
  std::string model;  // trace name; empty for CPU-only
  int64_t gpus, cpu_milli, memory_mib;
  bool operator==(const PoolKey&) const = default;
};

struct NodeList {
  std::vector<PoolKey> pools;  // first-appearance order
  std::vector<int> counts;
  uint32_t present = 0;  // models with at least one node
  int64_t gpus = 0;
};

Result<NodeList> ReadNodes(const std::string& path) {
  LineReader in;
  if (Status s = in.Open(path); !s.ok()) return Error{"--node-list", s.error().message};
  std::string line;
  if (!in.Next(line) || line != "sn,cpu_milli,memory_mib,gpu,model") {
    return Error{"--node-list", path + ":1: expected the header sn,cpu_milli,memory_mib,gpu,model"};
  }
  NodeList list;
  while (in.Next(line)) {
    if (line.empty()) continue;
    const auto f = SplitFields(line, ',');
    std::optional<int64_t> cpu, mem, gpus;
    if (f.size() == 5) {
      cpu = ParseInt(f[1]);
      mem = ParseInt(f[2]);
      gpus = ParseInt(f[3]);
    }
    if (!cpu || !mem || !gpus || *cpu < 0 || *mem < 0 || *gpus < 0 || *gpus > 64) {
      return Error{"--node-list", Where(in) + ": malformed node row \"" + line + "\""};
    }
    PoolKey key{std::string(*gpus > 0 ? f[4] : ""), *gpus, *cpu, *mem};
    if (*gpus > 0) {
      auto m = FindModel(key.model);
      if (!m) return Error{"--node-list", Where(in) + ": unknown GPU model \"" + key.model + "\""};
      list.present |= 1u << *m;
    }
    auto it = std::find(list.pools.begin(), list.pools.end(), key);
    if (it == list.pools.end()) {
      list.pools.push_back(key);
      list.counts.push_back(1);
    } else {
      ++list.counts[static_cast<size_t>(it - list.pools.begin())];
    }
    list.gpus += *gpus;
  }
  if (!in.error().empty()) return Error{"--node-list", in.error()};
  if (list.pools.empty()) return Error{"--node-list", path + ": no nodes"};
  return list;
}

// Pod-list columns are found by name: the multigpu* lists have only the first five
// (no gpu_spec, qos or times), which is enough for the fill mode.
Result<std::vector<Pod>> ReadPods(const std::string& path, bool need_times,
                                  ConvertSummary& summary) {
  LineReader in;
  if (Status s = in.Open(path); !s.ok()) return Error{"--input", s.error().message};
  std::string line;
  if (!in.Next(line)) return Error{"--input", path + ": empty file"};
  const auto header = SplitFields(line, ',');
  auto column = [&](std::string_view name) -> std::optional<size_t> {
    auto it = std::find(header.begin(), header.end(), name);
    if (it == header.end()) return std::nullopt;
    return static_cast<size_t>(it - header.begin());
  };
  std::optional<size_t> c_name = column("name"), c_cpu = column("cpu_milli"),
                        c_mem = column("memory_mib"), c_ngpu = column("num_gpu"),
                        c_milli = column("gpu_milli"), c_spec = column("gpu_spec"),
                        c_qos = column("qos"), c_created = column("creation_time"),
                        c_deleted = column("deletion_time"), c_sched = column("scheduled_time");
  if (!c_name || !c_cpu || !c_mem || !c_ngpu || !c_milli) {
    return Error{"--input", path +
                                ":1: expected the columns name, cpu_milli, memory_mib, "
                                "num_gpu and gpu_milli"};
  }
  if (need_times && (!c_created || !c_deleted)) {
    return Error{"--input", path +
                                ":1: no creation_time and deletion_time columns to replay; "
                                "this pod list serves the fill mode only (--fill)"};
  }
  if (!c_qos) ++summary.adjusted["no qos column: every pod taken as Burstable"];
  std::vector<Pod> pods;
  std::map<std::string, int> seen;  // name -> times seen, to keep ids unique
  while (in.Next(line)) {
    if (line.empty()) continue;
    ++summary.rows;
    const auto f = SplitFields(line, ',');
    if (f.size() != header.size()) {
      ++summary.dropped["malformed row"];
      continue;
    }
    auto field = [&](std::optional<size_t> c) { return c ? f[*c] : std::string_view(); };
    auto cpu = ParseInt(f[*c_cpu]), mem = ParseInt(f[*c_mem]), ngpu = ParseInt(f[*c_ngpu]),
         milli = ParseInt(f[*c_milli]);
    std::optional<double> created = ParseDouble(field(c_created)),
                          deleted = ParseDouble(field(c_deleted)),
                          scheduled = ParseDouble(field(c_sched));
    if (!cpu || !mem || !ngpu || !milli || *cpu < 0 || *mem < 0 || *ngpu < 0 || *ngpu > 64 ||
        *milli < 0 || *milli > 1000 || f[*c_name].empty() ||
        (need_times && (!created || !deleted))) {
      ++summary.dropped["malformed row"];
      continue;
    }
    Pod p;
    p.name = std::string(f[*c_name]);
    if (const int n = ++seen[p.name]; n > 1) {
      p.name += "-" + std::to_string(n);
      ++summary.adjusted["repeated name renamed"];
    }
    if (created && deleted) {
      p.submit = *created;
      // Run time: from the real scheduling to deletion; a pod never scheduled (Pending)
      // asked from creation to deletion.
      const double start = scheduled && *scheduled >= *created ? *scheduled : *created;
      p.duration = *deleted - start;
      if (p.duration < 1) {
        p.duration = 1;
        ++summary.adjusted["duration raised to 1 s"];
      }
    }
    p.cpu_milli = *cpu;
    p.memory_mib = *mem;
    p.num_gpu = static_cast<int>(*ngpu);
    p.gpu_milli = static_cast<int>(*milli);
    if (p.num_gpu == 1 && p.gpu_milli == 0) {
      ++summary.dropped["one GPU with gpu_milli 0"];
      continue;
    }
    if (p.num_gpu > 1 && p.gpu_milli < 1000) {
      ++summary.adjusted["multi-GPU pod taken as whole GPUs"];
    }
    if (p.num_gpu > 0 && !field(c_spec).empty()) {
      for (std::string_view name : SplitFields(field(c_spec), '|')) {
        if (auto m = FindModel(name)) {
          p.models |= 1u << *m;
        } else {
          ++summary.adjusted["unknown gpu_spec model ignored"];
        }
      }
    }
    p.qos = 2;  // Burstable: ordinary work, also when the list has no qos column
    if (c_qos) {
      bool known = false;
      for (size_t q = 0; q < kQosCount; ++q) {
        if (f[*c_qos] == kQos[q].qos) {
          p.qos = static_cast<uint8_t>(q);
          known = true;
        }
      }
      if (!known) ++summary.adjusted["unknown qos taken as Burstable"];
    }
    pods.push_back(std::move(p));
  }
  if (!in.error().empty()) return Error{"--input", in.error()};
  return pods;
}

std::string PoolName(const PoolKey& k) {
  std::string model;
  for (char c : k.model.empty() ? std::string("cpu") : k.model) {
    model += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  std::string name = model + "-";
  if (k.gpus > 0) name += std::to_string(k.gpus) + "gpu-";
  return name + Num(static_cast<double>(k.cpu_milli) / 1000) + "cpu-" +
         Num(static_cast<double>(k.memory_mib) / 1024, 1) + "gib";
}

}  // namespace

Result<ConvertSummary> ConvertOpenb(const ConvertOptions& o) {
  if (o.node_list.empty()) return Error{"--node-list", "required: openb_node_list_*.csv"};
  if (o.inputs.size() != 1)
    return Error{"--input", "openb takes one pod list (openb_pod_list_*.csv)"};
  if (o.fill < 0 || o.fill > 100) return Error{"--fill", "must be between 0 and 100"};
  ConvertSummary summary;
  Result<NodeList> nodes = ReadNodes(o.node_list);
  if (!nodes.ok()) return nodes.error();
  Result<std::vector<Pod>> read = ReadPods(o.inputs[0], o.fill == 0, summary);
  if (!read.ok()) return read.error();
  std::vector<Pod> pods = std::move(read).value();

  // The pods to write, in submit order.
  std::vector<Pod> trace;
  if (o.fill > 0) {
    // FGD: sample with replacement, submit one per second, no departures, until the
    // arrived GPU request reaches fill x capacity (the pod that crosses it included).
    if (std::none_of(pods.begin(), pods.end(), [](const Pod& p) { return p.Request() > 0; })) {
      return Error{"--input", o.inputs[0] + ": no pod asks for a GPU; nothing to fill with"};
    }
    gen::Random rng(o.seed);
    const double target = o.fill * static_cast<double>(nodes->gpus);
    double asked = 0;
    std::vector<size_t> picks;
    while (asked < target) {
      picks.push_back(static_cast<size_t>(rng.Index(pods.size())));
      asked += pods[picks.back()].Request();
    }
    // Long enough that nothing leaves before the last arrival, and a day more.
    const double stay = static_cast<double>(picks.size()) + 86400;
    for (size_t i = 0; i < picks.size(); ++i) {
      Pod p = pods[picks[i]];
      p.name += "-" + std::to_string(i);
      p.submit = static_cast<double>(i);
      p.duration = stay;
      trace.push_back(std::move(p));
    }
  } else {
    std::stable_sort(pods.begin(), pods.end(),
                     [](const Pod& a, const Pod& b) { return a.submit < b.submit; });
    trace = std::move(pods);
  }
  pods = {};
  if (o.limit > 0 && static_cast<int64_t>(trace.size()) > o.limit) {
    summary.dropped["beyond --limit"] += static_cast<int64_t>(trace.size()) - o.limit;
    trace.resize(static_cast<size_t>(o.limit));
  }

  // Cluster: one pool per (model, GPUs, CPUs, memory) shape of the node list.
  ClusterOut cluster;
  cluster.name = o.name.empty() ? "openb" : o.name;
  cluster.comments = {
      "Converted by `gantry trace convert --format openb` from " + o.node_list + " and " +
          o.inputs[0] +
          (o.fill > 0 ? " (fill " + Num(o.fill) + ", seed " + std::to_string(o.seed) + ")" : "") +
          ".",
      "Pools = node shapes; P100 and G1/G2/G3 memory are guesses; see docs/traces.md."};
  for (size_t m = 0; m < kModelCount; ++m) {
    if (kModels[m].declared)
      cluster.models.push_back({kModels[m].gantry_name, kModels[m].memory_gb});
  }
  for (size_t i = 0; i < nodes->pools.size(); ++i) {
    const PoolKey& k = nodes->pools[i];
    PoolOut p;
    p.name = PoolName(k);
    p.count = nodes->counts[i];
    p.gpus = static_cast<int>(k.gpus);
    if (k.gpus > 0) {
      p.gpu_model = kModels[*FindModel(k.model)].gantry_name;
      p.sharing = {"mps"};
    }
    p.cpus = static_cast<double>(k.cpu_milli) / 1000;
    p.memory_gb = std::floor(static_cast<double>(k.memory_mib) * kMib * 1000) / 1000;
    cluster.pools.push_back(std::move(p));
  }
  const int64_t capacity = nodes->gpus;
  std::vector<double> demand(kQosCount, 0);
  for (const Pod& p : trace) demand[p.qos] += p.Request() * p.duration;
  const std::vector<double> guaranteed = ProportionalGuarantees(demand, capacity);
  for (size_t q = 0; q < kQosCount; ++q) {
    QueueOut out;
    out.name = kQos[q].queue;
    out.guaranteed_gpus = guaranteed[q];
    out.burst_gpus = static_cast<double>(capacity);
    cluster.queues.push_back(out);
  }
  auto cluster_path = OutPath(o.out, "cluster.yaml");
  if (!cluster_path.ok()) return cluster_path.error();
  if (Status s = WriteCluster(*cluster_path, cluster); !s.ok()) return s.error();

  auto trace_path = OutPath(o.out, "trace.jsonl");
  if (!trace_path.ok()) return trace_path.error();
  TraceWriter writer;
  if (Status s = writer.Open(*trace_path); !s.ok()) return s.error();
  for (const Pod& p : trace) {
    JobOut j;
    j.id = p.name;
    j.submit = p.submit;
    j.duration = p.duration;
    j.queue = kQos[p.qos].queue;
    j.tier = kQos[p.qos].tier;
    j.cpus = static_cast<double>(p.cpu_milli) / 1000;
    j.memory_gb = std::floor(static_cast<double>(p.memory_mib) * kMib * 1000) / 1000;
    if (p.num_gpu > 0) {
      // Acceptable models: the pod's gpu_spec, else any model of the cluster.
      const uint32_t allowed = p.models != 0 ? p.models : nodes->present;
      double smallest = 0;
      for (size_t m = 0; m < kModelCount; ++m) {
        if (!(allowed >> m & 1u)) continue;
        if (p.models != 0) j.gpu_models.push_back(kModels[m].gantry_name);
        if (smallest == 0 || kModels[m].memory_gb < smallest) smallest = kModels[m].memory_gb;
      }
      if (p.num_gpu == 1 && p.gpu_milli < 1000) {
        j.gpus = p.gpu_milli / 1000.0;
        j.sharing = "mps";
      } else {
        j.gpus = p.num_gpu;
      }
      // openb has no GPU memory request: the share of the smallest acceptable GPU, so
      // memory never binds before the share does.
      j.vram_gb = std::floor(smallest * std::min(1.0, j.gpus) * 1000) / 1000;
    }
    if (Status s = writer.Add(j); !s.ok()) return s.error();
  }
  if (Status s = writer.Close(); !s.ok()) return s.error();
  summary.trace = writer.stats();
  summary.cluster_gpus = capacity;
  for (int c : nodes->counts) summary.cluster_nodes += c;
  summary.files = {*cluster_path, *trace_path};
  return summary;
}

}  // namespace gantry::convert
