// Job specs (spec section 2) from JSON and YAML, traces and failure files (section 3).

#include "spec/job_reader.h"

#include "base/image_reference.h"
#include "spec/batch.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdlib>
#include <exception>
#include <memory>
#include <set>
#include <sstream>
#include <utility>

#include "spec/decode.h"
#include "spec/doc.h"
#include "spec/event_log.h"
#include "spec/read_file.h"

namespace gantry::spec {
namespace {

using core::JobSpec;
using core::ModelId;
using core::ModelMask;
using core::Sharing;
using core::Ticks;

constexpr size_t kMaxIdLength = 256;

enum class Mode { kSpec, kTrace };

// Ticks as seconds for messages: "5", "2.5".
std::string Seconds(Ticks t) {
  std::string out = std::to_string(t / 1000);
  if (Ticks frac = std::abs(t % 1000); frac != 0) {
    std::string digits = std::to_string(frac);
    digits.insert(0, 3 - digits.size(), '0');
    while (digits.back() == '0') digits.pop_back();
    out += "." + digits;
  }
  if (t < 0 && t > -1000) out.insert(0, "-");
  return out;
}

std::string Gb(int64_t bytes) {
  std::string out = std::to_string(bytes / core::kGB);
  if (int64_t frac = bytes % core::kGB; frac > 0) {
    std::string digits = std::to_string(frac);
    digits.insert(0, 9 - digits.size(), '0');
    while (digits.back() == '0') digits.pop_back();
    out += "." + digits;
  }
  return out;
}

std::string Join(const std::vector<std::string>& items, size_t max_shown = 20) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    if (i == max_shown) return out + ", ... (" + std::to_string(items.size()) + " in all)";
    out += (i == 0 ? "" : ", ") + items[i];
  }
  return out;
}

std::string ModelNames(ModelMask mask, const core::Catalog& catalog) {
  std::vector<std::string> names;
  for (size_t m = 0; m < catalog.size(); ++m) {
    if (mask >> m & 1u) names.push_back(catalog.model(ModelId(static_cast<uint32_t>(m))).name);
  }
  return Join(names);
}

ModelMask AllModels(const core::Catalog& catalog) {
  return catalog.size() >= 64 ? ~ModelMask{0} : (ModelMask{1} << catalog.size()) - 1;
}

// "HH:MM" -> minutes of the day.
std::optional<int> ParseClock(std::string_view s) {
  const size_t colon = s.find(':');
  if (colon == std::string_view::npos || colon == 0 || colon > 2 || s.size() != colon + 3) {
    return std::nullopt;
  }
  int h = 0;
  for (size_t i = 0; i < colon; ++i) {
    if (s[i] < '0' || s[i] > '9') return std::nullopt;
    h = h * 10 + (s[i] - '0');
  }
  if (s[colon + 1] < '0' || s[colon + 1] > '5' || s[colon + 2] < '0' || s[colon + 2] > '9') {
    return std::nullopt;
  }
  const int m = (s[colon + 1] - '0') * 10 + (s[colon + 2] - '0');
  if (h > 23) return std::nullopt;
  return h * 60 + m;
}

bool IsEnvName(std::string_view s) {
  if (s.empty() || (s[0] >= '0' && s[0] <= '9')) return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
  });
}

class JobDecoder {
 public:
  JobDecoder(Decoder& d, const ClusterConfig& config) : d_(d), config_(config) {}

  // Decodes `doc` into `out`; false when anything was reported. `id` receives the id as
  // written (for the trace's duplicate check), even when the job is bad.
  bool Decode(const Doc& doc, Mode mode, int line, core::TraceJob& out, std::string& id) {
    const size_t before = d_.reported();
    if (!doc.is_map()) {
      d_.Report(
          doc.line, "",
          std::string(doc.yaml || doc.is_null() ? "expected a mapping" : "expected a JSON object") +
              " holding a job spec, got " + Describe(doc));
      return false;
    }
    const std::initializer_list<std::string_view> spec_fields = {"id",
                                                                 "queue",
                                                                 "tier",
                                                                 "replicas",
                                                                 "min_replicas",
                                                                 "speedup",
                                                                 "speed_by_model",
                                                                 "gpus",
                                                                 "mig",
                                                                 "sharing",
                                                                 "gpu_model",
                                                                 "vram_gb",
                                                                 "cpus",
                                                                 "memory_gb",
                                                                 "topology",
                                                                 "workers_per_node",
                                                                 "fewest_nodes",
                                                                 "checkpoint_s",
                                                                 "grace_s",
                                                                 "nice",
                                                                 "window",
                                                                 "command",
                                                                 "env",
                                                                 "workdir",
                                                                 "runtime_estimate_s",
                                                                 "time_limit_s",
                                                                 "keep_when_idle",
                                                                 "emulate",
                                                                 "name",
                                                                 "pool",
                                                                 "constraint",
                                                                 "script",
                                                                 "stdout",
                                                                 "stderr",
                                                                 "signal",
                                                                 "image",
                                                                 "exclusive",
                                                                 "open_mode",
                                                                 "tasks_per_worker",
                                                                 "nodelist",
                                                                 "exclude_nodes"};
    const std::initializer_list<std::string_view> trace_fields = {"id",
                                                                  "queue",
                                                                  "tier",
                                                                  "replicas",
                                                                  "min_replicas",
                                                                  "speedup",
                                                                  "speed_by_model",
                                                                  "gpus",
                                                                  "mig",
                                                                  "sharing",
                                                                  "gpu_model",
                                                                  "vram_gb",
                                                                  "cpus",
                                                                  "memory_gb",
                                                                  "topology",
                                                                  "workers_per_node",
                                                                  "fewest_nodes",
                                                                  "checkpoint_s",
                                                                  "grace_s",
                                                                  "window",
                                                                  "command",
                                                                  "env",
                                                                  "workdir",
                                                                  "runtime_estimate_s",
                                                                  "submit",
                                                                  "duration",
                                                                  "idle_after_s",
                                                                  "util",
                                                                  "vram_used_gb",
                                                                  "keep_when_idle",
                                                                  "nice"};
    Fields f(d_, doc, "", mode == Mode::kTrace ? trace_fields : spec_fields);
    JobSpec& job = out.spec;
    ReadId(f, mode, line, job, id);
    ReadQueue(f, job);
    ReadTier(f, job);
    ReadConstraint(f, job);
    if (auto r = f.Integer("replicas", 1, kMaxReplicas)) job.replicas = static_cast<int>(*r);
    ReadShape(f, job);
    if (auto v = f.Number("cpus", Range{0, false, kMaxCpus}))
      job.cpus_milli = std::llround(*v * 1000);
    if (auto v = f.Number("memory_gb", Range{0, false, kMaxGb})) {
      job.memory_bytes = std::llround(*v * 1e9);
    }
    if (auto t = f.Choice("topology", {"nvlink", "node", "leaf", "spine"})) {
      job.topology = *t == "nvlink" ? core::Topology::kNvlink
                     : *t == "node" ? core::Topology::kNode
                     : *t == "leaf" ? core::Topology::kLeaf
                                    : core::Topology::kSpine;
    }
    if (auto b = f.Bool("fewest_nodes")) job.fewest_nodes = *b;
    if (auto w = f.Integer("workers_per_node", 1, kMaxReplicas)) {
      if (job.replicas % *w != 0) {
        f.Report("workers_per_node", std::to_string(*w) + " does not divide replicas (" +
                                         std::to_string(job.replicas) + ")");
      } else {
        job.workers_per_node = static_cast<int>(*w);
      }
    }
    if (auto m = f.Integer("min_replicas", 1, kMaxReplicas)) {
      if (*m > job.replicas) {
        f.Report("min_replicas", "must be at most replicas (" + std::to_string(job.replicas) + ")");
      } else if (job.sharing != core::Sharing::kExclusive) {
        f.Report("min_replicas", "MIG and shared-GPU jobs are not elastic");
      } else if (job.workers_per_node > 0 && *m % job.workers_per_node != 0) {
        f.Report("min_replicas", std::to_string(*m) + " is not a whole number of nodes' " +
                                     "workers (workers_per_node " +
                                     std::to_string(job.workers_per_node) + ")");
      } else if (*m < job.replicas) {
        job.min_replicas = static_cast<int>(*m);
      }
    }
    if (const Doc* sp = f.List("speedup")) ReadSpeedup(f, *sp, job);
    ReadModelSpeed(f, job);
    if (auto v = f.Number("checkpoint_s", Range{0, false, kMaxSeconds}))
      job.checkpoint = SecondsToTicks(*v);
    if (auto n = f.Integer("nice", -2147483645LL, 2147483645LL)) job.nice = static_cast<int>(*n);
    const core::Ticks max_grace = config_.policy.max_grace[static_cast<size_t>(job.tier)];
    if (auto v = f.Number("grace_s", Range{0, false, kMaxSeconds})) {
      job.grace = SecondsToTicks(*v);
      if (job.grace > max_grace && mode == Mode::kSpec) {
        f.Report("grace_s", FormatSeconds(job.grace) + " s is above this cluster's limit for " +
                                std::string(core::Name(job.tier)) +
                                " jobs (policy.max_grace_s: " + FormatSeconds(max_grace) + " s)");
      }
    } else if (mode == Mode::kSpec && !f.has("grace_s")) {
      job.grace = config_.policy.default_grace;  // the cluster's default (30 s unless set)
    }
    job.grace = std::min(job.grace, max_grace);  // a trace line's, or the default
    if (auto v = Duration(f, "runtime_estimate_s")) job.runtime_estimate = *v;
    if (auto v = Duration(f, "time_limit_s")) {
      job.time_limit = *v;
      if (!job.runtime_estimate) job.runtime_estimate = *v;  // as Slurm's backfill uses --time
    }
    ReadWindow(f, job);
    ReadKeepWhenIdle(f, job);
    ReadEmulate(f, job);
    ReadCommand(f, job);
    ReadEnv(f, job);
    if (auto w = f.String("workdir")) {
      if (w->empty()) {
        f.Report("workdir", "must not be empty");
      } else if (auto why =
                     mode == Mode::kSpec ? WhyWorkdirRefused(*w, config_.site) : std::nullopt) {
        f.Report("workdir", *why);
      }
      job.workdir = *w;
    }
    if (auto i = f.String("image")) {
      if (const std::string why = ImageReferenceProblem(*i); !why.empty()) {
        f.Report("image",
                 "expected a container image name such as "
                 "docker.io/pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime "
                 "(this one " +
                     why + ")");
      }
      job.image = *i;
    }
    if (mode == Mode::kSpec) ReadBatch(f, job);
    if (mode == Mode::kSpec) ReadExclusive(f, job);
    if (mode == Mode::kSpec) {
      ReadNodes(f, "nodelist", job.only_nodes);
      ReadNodes(f, "exclude_nodes", job.not_nodes);
    }
    if (mode == Mode::kSpec) {
      for (std::string_view key : {"submit", "duration", "idle_after_s", "util", "vram_used_gb"}) {
        // A pointed message rather than "unknown field".
        if (f.has(key)) {
          f.Report(key,
                   "only trace lines have this field; a job spec is submitted when it is "
                   "sent and runs until it ends");
          f.Handled(key);
        }
      }
    } else {
      out.line = line;
      if (auto s = f.Number("submit", Range{0, false, kMaxSeconds})) {
        out.submit = SecondsToTicks(*s);
      } else if (!f.has("submit")) {
        f.Report("submit", "required in a trace: the arrival time in seconds");
      }
      if (auto v = Duration(f, "duration")) {
        out.duration = *v;
      } else if (!f.has("duration")) {
        f.Report("duration", "required in a trace: the run time in seconds");
      }
      if (auto v = f.Number("idle_after_s", Range{0, false, kMaxSeconds})) {
        out.idle_after = SecondsToTicks(*v);
      }
      if (auto v = f.Number("util", Range{0, false, 1})) out.util = *v;
      if (auto v = f.Number("vram_used_gb", Range{0, false, kMaxGb}))
        out.vram_used_bytes = std::llround(*v * 1e9);
    }
    f.Finish();
    return d_.reported() == before;
  }

 private:
  // A positive time in seconds, at least 1 ms after rounding.
  // An elastic job's measured throughput at 1..replicas workers (core::JobSpec::speedup).
  void ReadSpeedup(Fields& f, const Doc& list, core::JobSpec& job) {
    if (!job.elastic()) {
      f.Report("speedup", "only for an elastic job (min_replicas below replicas)");
      return;
    }
    if (list.items.size() != static_cast<size_t>(job.replicas)) {
      f.Report("speedup", "needs one throughput per size, 1 to replicas (" +
                              std::to_string(job.replicas) + "), got " +
                              std::to_string(list.items.size()));
      return;
    }
    std::vector<double> table;
    for (const Doc& v : list.items) {
      const double x = Decoder::AsNumber(v).value_or(-1);
      if (!(x > 0)) {
        f.Report("speedup", "throughputs must be numbers above 0, got \"" + v.text + "\"");
        return;
      }
      table.push_back(x);
    }
    job.speedup = std::make_shared<const std::vector<double>>(std::move(table));
  }

  // speed_by_model: {MODEL: speed above 0, ...} (core::JobSpec::model_speed), MODEL as
  // gpu_model names them; models it does not name go at 1.
  void ReadModelSpeed(Fields& f, JobSpec& job) {
    const Doc* v = f.Get("speed_by_model");
    if (v == nullptr || v->is_null()) return;
    if (!v->is_map() || v->entries.empty()) {
      f.Report("speed_by_model",
               "expected a mapping of GPU models to speeds above 0 (e.g. {H100-80GB: 2.1, "
               "A100-80GB: 1}), got " +
                   Describe(*v));
      return;
    }
    const core::Catalog& catalog = config_.cluster.catalog();
    std::vector<double> speed(catalog.size(), 1.0);
    for (const DocEntry& e : v->entries) {
      const std::string path = f.Path("speed_by_model") + "." + e.key;
      const ModelMask named = spec::GpuModelsNamed(e.key, catalog, config_.site);
      const double x = Decoder::AsNumber(e.value).value_or(-1);
      if (named == 0) {
        d_.Report(e.line, path, "unknown GPU model " + Quote(e.key));
      } else if (!(x > 0) || x > 1e6) {
        d_.Report(e.line, path, "a speed is a number above 0, got \"" + e.value.text + "\"");
      } else {
        for (ModelMask m = named; m != 0; m &= m - 1) speed[std::countr_zero(m)] = x;
        continue;
      }
      f.MarkBad("speed_by_model");
    }
    if (!f.bad("speed_by_model"))
      job.model_speed = std::make_shared<const std::vector<double>>(std::move(speed));
  }

  std::optional<Ticks> Duration(Fields& f, std::string_view key) {
    std::optional<double> v = f.Number(key, Range{0, true, kMaxSeconds});
    if (!v) return std::nullopt;
    const Ticks t = SecondsToTicks(*v);
    if (t < 1) {
      f.Report(key, "must be at least 0.001 (1 ms), got " + f.Get(key)->text);
      return std::nullopt;
    }
    return t;
  }

  // What `gantry sbatch` adds: a name, one pool, a script, output files, a signal.
  void ReadBatch(Fields& f, JobSpec& job) {
    if (auto s = f.String("name")) {
      if (s->empty() || s->size() > kMaxIdLength) {
        f.Report("name", "must be 1 to " + std::to_string(kMaxIdLength) + " characters, got " +
                             std::to_string(s->size()));
      }
      job.name = *s;
    }
    if (auto p = f.String("pool")) {
      const core::Cluster& cluster = config_.cluster;
      std::string known;
      for (size_t i = 0; i < cluster.pools().size(); ++i) {
        const std::string& name = cluster.pools()[i].spec.name;
        if (name == *p) job.pool = core::PoolId(static_cast<uint32_t>(i));
        known += (known.empty() ? "" : ", ") + name;
      }
      for (const auto& [partition, id] : config_.site.partitions) {  // Slurm's names
        if (!job.pool.valid() && partition == *p) job.pool = id;
        known += ", " + partition;
      }
      if (!job.pool.valid()) {
        f.Report("pool",
                 std::string(config_.site.partitions.empty() ? "unknown pool "
                                                             : "unknown pool or partition ") +
                     Quote(*p) + " (known: " + known + ")");
      }
    } else if (f.has("script") && config_.site.default_partition) {
      job.pool = *config_.site.default_partition;  // sbatch without -p: Slurm's default
    }
    if (auto s = f.String("script")) {
      if (s->rfind("#!", 0) != 0) {
        f.Report("script", "must start with #! and the interpreter, e.g. #!/bin/bash");
      }
      job.script = *s;
    }
    for (const char* key : {"stdout", "stderr"}) {
      if (auto s = f.String(key)) {
        if (auto why = CheckOutputPattern(*s)) f.Report(key, *why + ", got " + Quote(*s));
        (std::string_view(key) == "stdout" ? job.stdout_path : job.stderr_path) = *s;
      }
    }
    if (auto m = f.Choice("open_mode", {"truncate", "append"})) job.append_output = *m == "append";
    if (auto t = f.Integer("tasks_per_worker", 1, kMaxReplicas)) {
      if (!f.has("script")) {
        f.Report("tasks_per_worker", "is a batch job's (srun runs the tasks): needs a script");
      } else if (*t * job.replicas > kMaxReplicas) {
        f.Report("tasks_per_worker", "times replicas is above " + std::to_string(kMaxReplicas) +
                                         " tasks, got " + std::to_string(*t * job.replicas));
      } else {
        job.tasks_per_worker = static_cast<int>(*t);
      }
    }
    if (auto s = f.String("signal")) {
      const bool batch = s->rfind("B:", 0) == 0;  // sbatch --signal=B:SIG
      const int sig = SignalNumber(batch ? s->substr(2) : *s);
      if (sig <= 0) {
        f.Report("signal", "unknown signal " + Quote(*s) +
                               " (e.g. TERM, USR1, SIGUSR2, a number 1-64, or B:USR1 for a "
                               "batch script only)");
      } else {
        job.stop_signal = sig;
        job.signal_batch = batch;
      }
    }
  }

  // A field that is one string or a list of them: `each(text, line, path)` for each string,
  // in order (path "key", or "key[i]" in a list); an empty list is reported with `empty`,
  // an item that is not a string too, marking the field bad.
  template <typename Each>
  void ForEachString(Fields& f, std::string_view key, const Doc& v, const char* empty, Each each) {
    if (v.is_list() && v.items.empty()) f.Report(key, empty);
    const size_t n = v.is_list() ? v.items.size() : 1;
    for (size_t i = 0; i < n; ++i) {
      const Doc& item = v.is_list() ? v.items[i] : v;
      const std::string path =
          v.is_list() ? f.Path(key) + "[" + std::to_string(i) + "]" : f.Path(key);
      const int line = v.is_list() ? item.line : f.Line(key);
      if (auto text = d_.String(item, line, path)) {
        each(*text, line, path);
      } else {
        f.MarkBad(key);
      }
    }
  }

  // nodelist / exclude_nodes (sbatch --nodelist, --exclude): node names, or Slurm host lists
  // ("h100-[0-3],a100-0"), as one string or a list of them; into `out`, ascending.
  void ReadNodes(Fields& f, std::string_view key, std::vector<core::NodeId>& out) {
    const Doc* v = f.Get(key);
    if (v == nullptr) return;
    const core::Cluster& cluster = config_.cluster;
    ForEachString(
        f, key, *v, "must name at least one node",
        [&](const std::string& text, int line, const std::string& path) {
          const std::optional<std::vector<std::string>> names = ExpandHostList(text);
          if (!names || names->empty()) {
            f.MarkBad(key);
            d_.Report(
                line, path,
                "expected node names or a host list such as h100-[0-3],a100-0, got " + Quote(text));
            return;
          }
          for (const std::string& name : *names) {
            if (auto n = cluster.FindNode(name)) {
              out.push_back(*n);
            } else {
              f.MarkBad(key);
              d_.Report(line, path,
                        "unknown node " + Quote(name) + " (this cluster's nodes are named like " +
                            (!cluster.nodes().empty() ? cluster.nodes().front().name
                                                      : std::string("<pool>-0")) +
                            ")");
            }
          }
        });
    std::sort(out.begin(), out.end());
    out.erase(std::unique(out.begin(), out.end()), out.end());
  }

  // exclusive (sbatch --exclusive): the nodes the job uses are its alone. It asks for all
  // of a node's GPUs (a GPU job), on nodes of one shape (the pools it may use), and its
  // workers then take all of the node's CPUs and memory too, so nothing else fits there.
  // A job asking for part of a node's GPUs is refused: Gantry gives the rest to others.
  void ReadExclusive(Fields& f, JobSpec& job) {
    auto e = f.Bool("exclusive");
    if (!e || !*e) return;
    const core::Cluster& cluster = config_.cluster;
    std::vector<core::PoolId> pools;
    if (job.pool.valid()) {
      pools = {job.pool};
    } else if (!job.pools.empty()) {
      pools = job.pools;
    } else {
      for (size_t i = 0; i < cluster.pools().size(); ++i) {
        const core::PoolSpec& p = cluster.pools()[i].spec;
        if ((p.gpus > 0) == job.uses_gpu() &&
            (job.models == 0 || !p.model.valid() || (job.models >> p.model.v) & 1))
          pools.push_back(core::PoolId(static_cast<uint32_t>(i)));
      }
    }
    const int per_node = job.workers_per_node > 0                ? job.workers_per_node
                         : job.topology == core::Topology::kNode ? job.replicas
                                                                 : 1;
    if (pools.empty()) {
      f.Report("exclusive", "no pool has nodes of the kind the job asks for");
      return;
    }
    const core::PoolSpec& first = cluster.pool(pools.front()).spec;
    for (core::PoolId id : pools) {
      const core::PoolSpec& p = cluster.pool(id).spec;
      if (job.uses_gpu() &&
          (job.sharing != core::Sharing::kExclusive || job.gpus * per_node != p.gpus)) {
        f.Report("exclusive",
                 "a node is the job's alone only when it asks for all of its GPUs: pool " + p.name +
                     "'s nodes have " + std::to_string(p.gpus) + " and the job asks " +
                     (job.sharing == core::Sharing::kExclusive
                          ? std::to_string(job.gpus * per_node)
                          : std::string("a share or MIG instance")) +
                     " per node (ask for " + std::to_string(p.gpus) +
                     ", or leave --exclusive out: Gantry gives the rest to other jobs)");
        return;
      }
      if (p.cpus_milli != first.cpus_milli || p.memory_bytes != first.memory_bytes) {
        f.Report("exclusive", "the pools it may use (" + first.name + ", " + p.name +
                                  ") have nodes of different CPUs or memory: give one (-p)");
        return;
      }
    }
    job.cpus_milli = first.cpus_milli / per_node;
    job.memory_bytes = first.memory_bytes / per_node;
  }

  void ReadId(Fields& f, Mode mode, int line, JobSpec& job, std::string& id) {
    if (auto s = f.String("id")) {
      id = *s;
      if (s->empty()) {
        f.Report("id", "must not be empty");
      } else if (s->size() > kMaxIdLength) {
        f.Report("id", "must be at most " + std::to_string(kMaxIdLength) + " characters, got " +
                           std::to_string(s->size()));
      } else if (std::any_of(s->begin(), s->end(), [](char c) {
                   return static_cast<unsigned char>(c) < 0x20 || c == 0x7f;
                 })) {
        f.Report("id", "must not hold control characters, got " + Quote(*s));
      }
      job.id = *s;
    } else if (!f.has("id") && mode == Mode::kTrace) {
      job.id = "line-" + std::to_string(line);
      id = job.id;
    }
  }

  // constraint: Slurm's --constraint over the pools' features (site.features): NAME,
  // A&B (a pool with all), A|B or [A|B] (with any). The job may use those pools only.
  void ReadConstraint(Fields& f, JobSpec& job) {
    auto c = f.String("constraint");
    if (!c) return;
    std::string text = *c;
    if (text.size() >= 2 && text.front() == '[' && text.back() == ']')
      text = text.substr(1, text.size() - 2);
    const bool all = text.find('&') != std::string::npos;
    const bool any = text.find('|') != std::string::npos;
    if ((all && any) || text.empty() || text.find_first_of("[]*(),! ") != std::string::npos) {
      f.Report("constraint", "supported: NAME, A&B (all), A|B or [A|B] (any), got " + Quote(*c));
      return;
    }
    std::vector<std::string> names;
    std::stringstream in(text);
    for (std::string name; std::getline(in, name, all ? '&' : '|');) names.push_back(name);
    std::set<std::string> known;
    for (const auto& [pool, features] : config_.site.features)
      known.insert(features.begin(), features.end());
    for (const std::string& name : names) {
      if (!known.contains(name)) {
        f.Report("constraint",
                 "unknown feature " + Quote(name) + " (known: " +
                     (known.empty() ? std::string("none: site.features names them")
                                    : Join(std::vector<std::string>(known.begin(), known.end()))) +
                     ")");
        return;
      }
    }
    std::vector<core::PoolId> pools;
    for (const auto& entry : config_.site.features) {
      const std::vector<std::string>& features = entry.second;  // (a lambda may not capture
      auto has = [&features](const std::string& n) {            // a structured binding)
        return std::find(features.begin(), features.end(), n) != features.end();
      };
      if (all ? std::all_of(names.begin(), names.end(), has)
              : std::any_of(names.begin(), names.end(), has))
        pools.push_back(entry.first);
    }
    std::sort(pools.begin(), pools.end());
    if (pools.empty()) {
      f.Report("constraint", "no pool has the features " + Quote(*c));
      return;
    }
    job.pools = std::move(pools);
  }

  // tier: critical, standard, best-effort, or a QoS of site.qos (Slurm's `normal`, its
  // default, is standard unless the site maps it).
  void ReadTier(Fields& f, JobSpec& job) {
    auto t = f.String("tier");
    if (!t) return;
    if (auto tier = core::TierNamed(*t)) {
      job.tier = *tier;
      return;
    }
    for (const auto& [qos, tier] : config_.site.qos) {
      if (qos == *t) {
        job.tier = tier;
        return;
      }
    }
    if (*t == "normal") {
      job.tier = core::Tier::kStandard;
      return;
    }
    if (config_.site.qos.empty()) {
      f.Report("tier", "must be one of critical, standard, best-effort, got " + Quote(*t));
      return;
    }
    std::string known = "critical, standard, best-effort";
    for (const auto& [qos, tier] : config_.site.qos) known += ", " + qos;
    f.Report("tier", "unknown tier or QoS " + Quote(*t) + " (known: " + known + ")");
  }

  void ReadQueue(Fields& f, JobSpec& job) {
    const core::QueueTree& tree = config_.queues;
    auto known = [&] {
      std::vector<std::string> names;
      for (size_t i = 0; i < tree.size(); ++i) {
        names.push_back(tree.queue(core::QueueId(static_cast<uint32_t>(i))).spec.name);
      }
      return Join(names);
    };
    if (auto q = f.String("queue")) {
      if (auto id = tree.Find(*q)) {
        job.queue = *id;
        return;
      }
      for (const auto& [account, id] : config_.site.accounts) {  // sbatch -A
        if (account == *q) {
          job.queue = id;
          return;
        }
      }
      std::string accounts;
      for (const auto& [account, id] : config_.site.accounts) accounts += ", " + account;
      f.Report("queue",
               std::string(accounts.empty() ? "unknown queue " : "unknown queue or account ") +
                   Quote(*q) + " (known: " + known() + accounts + ")");
    } else if (!f.has("queue")) {
      if (config_.site.default_account) {
        job.queue = *config_.site.default_account;
      } else if (auto id = tree.Find("default")) {
        job.queue = *id;
      } else {
        f.Report("queue",
                 "required: this cluster has no site.default_account and no queue named "
                 "\"default\" (known: " +
                     known() + ")");
      }
    }
  }

  // gpus / mig / sharing / gpu_model / vram_gb: what one worker takes.
  void ReadShape(Fields& f, JobSpec& job) {
    const core::Catalog& catalog = config_.cluster.catalog();
    job.mig_index.assign(catalog.size(), -1);  // filled for MIG jobs by ResolveMig
    std::optional<std::string> sharing =
        f.Choice("sharing", {"exclusive", "mig", "mps", "timeslice"});
    std::optional<std::string> mig = f.String("mig");
    std::optional<double> gpus = f.Number("gpus", Range{0, false, kMaxGpusPerWorker});
    // Its lower bound depends on whether the job uses GPUs (checked below): above 0 for
    // GPU jobs, 0 allowed for CPU-only ones.
    std::optional<double> vram = f.Number("vram_gb", Range{-kMaxGb, false, kMaxGb});
    if (vram) job.vram_bytes = std::llround(*vram * 1e9);

    bool shape_ok = !f.bad("sharing") && !f.bad("mig") && !f.bad("gpus");
    if (f.has("mig")) {
      if (mig && mig->empty()) {
        f.Report("mig", "must name a MIG profile, e.g. 1g.10gb");
        shape_ok = false;
      }
      if (f.has("gpus")) {
        f.Report("gpus", "excludes mig: a MIG job takes one instance per worker; give one of them");
        shape_ok = false;
      }
      if (sharing && *sharing != "mig") {
        f.Report("sharing", "must be mig or absent when mig is given, got " + Quote(*sharing));
        shape_ok = false;
      }
      job.sharing = Sharing::kMig;
      if (mig) job.mig_profile = *mig;
    } else if (sharing && *sharing == "mig") {
      f.Report("mig", "required with sharing mig: the MIG profile of each worker, e.g. 1g.10gb");
      shape_ok = false;
    } else {
      const bool shared = sharing && (*sharing == "mps" || *sharing == "timeslice");
      job.sharing = !shared             ? Sharing::kExclusive
                    : *sharing == "mps" ? Sharing::kMps
                                        : Sharing::kTimeslice;
      if (gpus) {
        const double x = *gpus;
        const bool whole = std::floor(x) == x;
        const std::string text = f.Get("gpus")->text;
        if (!shared) {
          if (whole) {
            job.gpus = static_cast<int>(x);
          } else if (x < 1) {
            f.Report("gpus", "fraction without a sharing mode: " + text +
                                 " of a GPU needs sharing mps or timeslice");
          } else {
            f.Report("gpus",
                     "must be a whole number, or a fraction below 1 with sharing mps or "
                     "timeslice, got " +
                         text);
          }
        } else if (x > 0 && x < 1) {
          const int64_t milli = std::llround(x * core::kShareScale);
          if (milli < 1 || milli > core::kShareScale - 1) {
            f.Report("gpus", "shares are thousandths of a GPU (0.001 to 0.999), got " + text);
          } else {
            job.share_milli = static_cast<int>(milli);
          }
        } else {
          f.Report("gpus", "with sharing " + *sharing +
                               ", must be a fraction of one GPU above 0 and below 1, got " + text);
        }
      } else if (shared && !f.has("gpus")) {
        f.Report("gpus", "required with sharing " + *sharing +
                             ": the share of one GPU each worker takes, e.g. 0.25");
      }
      if (f.bad("gpus")) shape_ok = false;
    }

    // Accepted models.
    job.models = AllModels(catalog);
    bool models_given = false;
    if (const Doc* v = f.Get("gpu_model")) {
      models_given = true;
      ModelMask mask = 0;
      ForEachString(
          f, "gpu_model", *v, "must name at least one GPU model",
          [&](const std::string& name, int line, const std::string& path) {
            if (const ModelMask named = spec::GpuModelsNamed(name, catalog, config_.site)) {
              mask |= named;  // a model's name in any case, a site alias, a product name
            } else {
              f.MarkBad("gpu_model");
              std::vector<std::string> known;
              for (size_t m = 0; m < catalog.size(); ++m) {
                known.push_back(catalog.model(ModelId(static_cast<uint32_t>(m))).name);
              }
              for (const auto& [alias, m] : config_.site.gpu_types) known.push_back(alias);
              d_.Report(line, path,
                        "unknown GPU model " + Quote(name) + " (known: " + Join(known, 64) + ")");
            }
          });
      if (mask != 0) job.models = mask;
    }
    if (!shape_ok) {
      if (vram && *vram < 0)
        f.Report("vram_gb", "must be at least 0, got " + f.Get("vram_gb")->text);
      return;
    }

    if (!job.uses_gpu()) {
      if (models_given && !f.bad("gpu_model")) {
        f.Report("gpu_model", "a job without GPUs (gpus 0) takes no gpu_model");
      }
      // vram_gb is optional for CPU-only jobs; 0 says "no GPU memory".
      if (vram && *vram < 0)
        f.Report("vram_gb", "must be at least 0, got " + f.Get("vram_gb")->text);
      return;
    }
    if (vram && job.vram_bytes <= 0) {
      f.Report("vram_gb", "must be above 0, got " + f.Get("vram_gb")->text);
    } else if (!f.has("vram_gb")) {
      f.Report("vram_gb",
               "required for a job that uses GPUs: the memory each worker needs on "
               "each of its GPUs, in GB");
    }
    if (job.sharing == Sharing::kMig && !f.bad("gpu_model")) ResolveMig(f, job, models_given);
  }

  void ResolveMig(Fields& f, JobSpec& job, bool models_given) {
    const core::Catalog& catalog = config_.cluster.catalog();
    const ModelMask having = job.ResolveMigIndex(catalog);
    if ((having & job.models) == 0) {
      // What the message offers instead: the cluster's own models where it has GPU pools
      // (not every model of the catalog: a site without A30s need not read of them).
      const ModelMask present = config_.cluster.present_models();
      const ModelMask shown = present != 0 ? present : ~ModelMask{0};
      if (models_given) {
        f.Report("mig", "MIG profile " + Quote(job.mig_profile) + " is offered by none of " +
                            ModelNames(job.models, catalog) +
                            ((having & shown) != 0
                                 ? " (it is offered by " + ModelNames(having & shown, catalog) + ")"
                                 : std::string()));
      } else {
        std::vector<std::string> known;
        for (size_t m = 0; m < catalog.size(); ++m) {
          if (!(shown >> m & 1u)) continue;
          for (const core::MigProfile& p :
               catalog.model(ModelId(static_cast<uint32_t>(m))).mig_profiles) {
            if (std::find(known.begin(), known.end(), p.name) == known.end())
              known.push_back(p.name);
          }
        }
        f.Report("mig", "unknown MIG profile " + Quote(job.mig_profile) +
                            " (known: " + Join(known, 64) + ")");
      }
      return;
    }
    // A model without the profile can never hold the job.
    job.models &= having;
    if (job.vram_bytes <= 0) return;  // missing or bad vram_gb is reported already
    std::string offers;
    for (size_t m = 0; m < catalog.size(); ++m) {
      if (!(job.models >> m & 1u)) continue;
      const core::GpuModel& model = catalog.model(ModelId(static_cast<uint32_t>(m)));
      const core::MigProfile& p = model.mig_profiles[static_cast<size_t>(job.mig_index[m])];
      if (p.memory_bytes >= job.vram_bytes) return;
      offers += (offers.empty() ? "" : ", ") + Gb(p.memory_bytes) + " GB on " + model.name;
    }
    f.Report("vram_gb", f.Get("vram_gb")->text + " does not fit MIG profile " + job.mig_profile +
                            " (" + offers + ")");
  }

  // keep_when_idle: REASON, allowed where the job's queue (or one above it) says
  // allow_keep_when_idle.
  void ReadKeepWhenIdle(Fields& f, JobSpec& job) {
    auto reason = f.String("keep_when_idle");
    if (!reason) return;
    if (reason->empty()) {
      f.Report("keep_when_idle",
               "give the reason the job may keep idle GPUs, e.g. \"serving: idles at night\"");
      return;
    }
    if (!job.queue.valid()) return;
    const core::QueueTree& tree = config_.queues;
    for (core::QueueId q : tree.queue(job.queue).self_and_ancestors) {
      if (tree.queue(q).spec.allow_keep_when_idle) {
        job.keep_when_idle = *reason;
        return;
      }
    }
    f.Report("keep_when_idle",
             "queue " + Quote(tree.queue(job.queue).spec.name) +
                 " does not allow jobs to opt out of idle reclamation (an administrator sets "
                 "allow_keep_when_idle: true on the queue)");
  }

  // emulate: {util, vram_used_gb, idle_after_s}: what an emulated agent makes the job's
  // GPUs look like (a test aid).
  void ReadEmulate(Fields& f, JobSpec& job) {
    const Doc* v = f.Get("emulate");
    if (v == nullptr) return;
    if (!v->is_map()) {
      f.Report("emulate",
               "expected a mapping {util: 0..1, vram_used_gb: GB, idle_after_s: S}, got " +
                   Describe(*v));
      return;
    }
    Fields e(d_, *v, "emulate", {"util", "vram_used_gb", "idle_after_s"});
    JobSpec::Emulate out;
    if (auto u = e.Number("util", Range{0, false, 1})) out.util = *u;
    if (auto g = e.Number("vram_used_gb", Range{0, false, kMaxGb}))
      out.vram_used_bytes = std::llround(*g * 1e9);
    if (auto s = e.Number("idle_after_s", Range{0, false, kMaxSeconds}))
      out.idle_after = SecondsToTicks(*s);
    e.Finish();
    job.emulate = out;
  }

  void ReadWindow(Fields& f, JobSpec& job) {
    const Doc* v = f.Get("window");
    if (v == nullptr) return;
    if (!v->is_map()) {
      f.Report("window",
               "expected a mapping {start: \"HH:MM\", end: \"HH:MM\"}, got " + Describe(*v));
      return;
    }
    Fields w(d_, *v, "window", {"start", "end"});
    std::optional<int> times[2];
    const char* keys[2] = {"start", "end"};
    for (int i = 0; i < 2; ++i) {
      if (auto s = w.String(keys[i])) {
        times[i] = ParseClock(*s);
        if (!times[i])
          w.Report(keys[i], "must be a time of day HH:MM (00:00 to 23:59), got " + Quote(*s));
      } else if (!w.has(keys[i])) {
        w.Report(keys[i], "required");
      }
    }
    w.Finish();
    if (times[0] && times[1]) {
      if (*times[0] == *times[1]) {
        f.Report("window", "start and end are both " + *w.String("start") +
                               "; the window would be empty (leave window out to allow any time)");
      } else {
        job.window = core::Window{*times[0], *times[1]};
      }
    }
  }

  void ReadCommand(Fields& f, JobSpec& job) {
    const Doc* v = f.Get("command");
    if (v == nullptr) return;
    if (v->is_list()) {
      if (v->items.empty()) f.Report("command", "must not be empty");
      for (size_t i = 0; i < v->items.size(); ++i) {
        const Doc& item = v->items[i];
        const std::string path = f.Path("command") + "[" + std::to_string(i) + "]";
        if (auto s = d_.String(item, item.line, path)) job.command.push_back(*s);
      }
      if (!job.command.empty() && job.command[0].empty()) {
        d_.Report(v->items[0].line, f.Path("command") + "[0]", "the program must not be empty");
      }
      return;
    }
    // A single string is a shell command line.
    if (auto s = f.String("command")) {
      if (s->empty()) {
        f.Report("command", "must not be empty");
      } else {
        job.command = {"/bin/sh", "-c", *s};
      }
    }
  }

  void ReadEnv(Fields& f, JobSpec& job) {
    const Doc* v = f.Get("env");
    if (v == nullptr || v->is_null()) return;
    if (!v->is_map()) {
      f.Report("env", "expected a mapping of variable names to strings, got " + Describe(*v));
      return;
    }
    for (size_t i = 0; i < v->entries.size(); ++i) {
      const DocEntry& e = v->entries[i];
      const std::string path = f.Path("env") + "." + e.key;
      if (!IsEnvName(e.key)) {
        d_.Report(e.line, f.Path("env"),
                  "variable names are letters, digits and _, not starting "
                  "with a digit; got " +
                      Quote(e.key));
        continue;
      }
      bool duplicate = false;
      for (size_t j = 0; j < i && !duplicate; ++j) duplicate = v->entries[j].key == e.key;
      if (duplicate) {
        d_.Report(e.line, path, "given twice");
        continue;
      }
      if (auto s = d_.String(e.value, e.line, path)) job.env.emplace_back(e.key, *s);
    }
  }

  Decoder& d_;
  const ClusterConfig& config_;
};

// One guard for every entry point: readers never throw.
template <typename F>
auto Guarded(const std::string& file, int line, Diagnostics& diags, F&& body) -> decltype(body()) {
  try {
    return body();
  } catch (const std::exception& e) {
    diags.Add(file, line, "", std::string("cannot read: ") + e.what());
  } catch (...) {
    diags.Add(file, line, "", "cannot read");
  }
  return std::nullopt;
}

std::optional<core::TraceJob> TraceLine(std::string_view text, const std::string& file, int line,
                                        const ClusterConfig& config, Diagnostics& diags,
                                        std::string& id) {
  std::optional<Doc> doc = ParseJson(text, file, line, diags);
  if (!doc) return std::nullopt;
  Decoder d(file, diags);
  core::TraceJob job;
  if (!JobDecoder(d, config).Decode(*doc, Mode::kTrace, line, job, id)) return std::nullopt;
  return job;
}

std::optional<JobSpec> SpecFromDoc(const Doc& doc, const std::string& file,
                                   const ClusterConfig& config, Diagnostics& diags) {
  Decoder d(file, diags);
  core::TraceJob job;
  std::string id;
  if (!JobDecoder(d, config).Decode(doc, Mode::kSpec, doc.line, job, id)) return std::nullopt;
  return std::move(job.spec);
}

bool Blank(std::string_view s) {
  return std::all_of(s.begin(), s.end(), [](char c) { return c == ' ' || c == '\t' || c == '\r'; });
}

}  // namespace

std::optional<core::TraceJob> ParseTraceLine(std::string_view text, const std::string& file,
                                             int line, const ClusterConfig& config,
                                             Diagnostics& diags) {
  return Guarded(file, line, diags, [&]() -> std::optional<core::TraceJob> {
    std::string id;
    return TraceLine(text, file, line, config, diags, id);
  });
}

std::optional<JobSpec> ParseJobJson(std::string_view text, const std::string& file,
                                    const ClusterConfig& config, Diagnostics& diags) {
  const size_t before = diags.size();
  std::optional<JobSpec> spec = Guarded(file, 0, diags, [&]() -> std::optional<JobSpec> {
    std::optional<Doc> doc = ParseJson(text, file, 1, diags);
    if (!doc) return std::nullopt;
    return SpecFromDoc(*doc, file, config, diags);
  });
  diags.SortByLine(before);  // a multi-line body reads top to bottom
  return spec;
}

std::optional<JobSpec> ParseJobYaml(std::string_view yaml_text, const std::string& file,
                                    const ClusterConfig& config, Diagnostics& diags) {
  const size_t before = diags.size();
  std::optional<JobSpec> spec = Guarded(file, 0, diags, [&]() -> std::optional<JobSpec> {
    std::optional<Doc> doc = ParseYaml(yaml_text, file, diags);
    if (!doc) return std::nullopt;
    if (doc->is_null()) {
      diags.Add(file, 0, "", "the file is empty; expected a job spec");
      return std::nullopt;
    }
    return SpecFromDoc(*doc, file, config, diags);
  });
  diags.SortByLine(before);
  return spec;
}

std::optional<JobSpec> ReadJobYaml(const std::string& path, const ClusterConfig& config,
                                   Diagnostics& diags) {
  std::optional<std::string> text =
      Guarded(path, 0, diags, [&] { return ReadWholeFile(path, diags); });
  if (!text) return std::nullopt;
  return ParseJobYaml(*text, path, config, diags);
}

TraceReader::TraceReader(std::string path, const ClusterConfig& config)
    : path_(std::move(path)), config_(config), in_(path_, std::ios::binary) {}

bool TraceReader::Next(core::TraceJob& job, Diagnostics& diags) {
  if (!in_.is_open()) {
    if (!open_reported_) diags.Add(path_, 0, "", "cannot open the trace");
    open_reported_ = true;
    return false;
  }
  while (std::getline(in_, text_)) {
    ++line_;
    if (Blank(text_)) continue;
    std::string id;
    std::optional<core::TraceJob> parsed = Guarded(
        path_, line_, diags, [&] { return TraceLine(text_, path_, line_, config_, diags, id); });
    if (!id.empty()) {
      auto [it, fresh] = seen_ids_.emplace(id, line_);
      if (!fresh) {
        diags.Add(path_, line_, "id",
                  "duplicate id " + Quote(id) + ", first on line " + std::to_string(it->second));
        continue;
      }
    }
    if (!parsed) continue;
    if (parsed->submit < last_submit_) {
      diags.Add(path_, line_, "submit",
                "submit " + Seconds(parsed->submit) + " is before the previous line's " +
                    Seconds(last_submit_) + "; traces must be sorted by submit");
      continue;
    }
    last_submit_ = parsed->submit;
    job = std::move(*parsed);
    return true;
  }
  return false;
}

namespace {
std::optional<std::vector<Failure>> ReadFailuresUnguarded(const std::string& path,
                                                          const core::Cluster& cluster,
                                                          Diagnostics& diags);
}  // namespace

std::optional<std::vector<Failure>> ReadFailures(const std::string& path,
                                                 const core::Cluster& cluster, Diagnostics& diags) {
  return Guarded(path, 0, diags, [&] { return ReadFailuresUnguarded(path, cluster, diags); });
}

namespace {

std::optional<std::vector<Failure>> ReadFailuresUnguarded(const std::string& path,
                                                          const core::Cluster& cluster,
                                                          Diagnostics& diags) {
  std::ifstream in(path, std::ios::binary);
  if (!in.is_open()) {
    diags.Add(path, 0, "", "cannot open the failures file");
    return std::nullopt;
  }
  const size_t before = diags.size();
  std::vector<Failure> failures;
  std::string text;
  int line = 0;
  auto known_nodes = [&] {
    std::vector<std::string> ranges;
    for (const core::Pool& p : cluster.pools()) {
      if (p.spec.count == 0) continue;
      const std::string& first = cluster.node(p.first_node).name;
      const std::string& last =
          cluster.node(core::NodeId(p.first_node.v + static_cast<uint32_t>(p.spec.count) - 1)).name;
      ranges.push_back(p.spec.count == 1 ? first : first + " .. " + last);
    }
    return Join(ranges);
  };
  while (std::getline(in, text)) {
    ++line;
    if (Blank(text)) continue;
    Guarded(path, line, diags, [&]() -> std::optional<int> {
      std::optional<Doc> doc = ParseJson(text, path, line, diags);
      if (!doc) return std::nullopt;
      Decoder d(path, diags);
      if (!doc->is_map()) {
        d.Report(line, "",
                 "expected a JSON object {\"t\", \"node\", \"down_s\"}, got " + Describe(*doc));
        return std::nullopt;
      }
      Fields f(d, *doc, "", {"t", "node", "down_s"});
      Failure fail;
      fail.line = line;
      if (auto t = f.Number("t", Range{0, false, kMaxSeconds})) {
        fail.t = SecondsToTicks(*t);
      } else if (!f.has("t")) {
        f.Report("t", "required: when the node goes down, in seconds");
      }
      if (auto n = f.String("node")) {
        if (auto id = cluster.FindNode(*n)) {
          fail.node = *id;
        } else {
          f.Report("node", "unknown node " + Quote(*n) + " (nodes: " + known_nodes() + ")");
        }
      } else if (!f.has("node")) {
        f.Report("node", "required");
      }
      if (auto s = f.Number("down_s", Range{0, true, kMaxSeconds})) {
        fail.down = SecondsToTicks(*s);
        if (fail.down < 1)
          f.Report("down_s", "must be at least 0.001 (1 ms), got " + f.Get("down_s")->text);
      } else if (!f.has("down_s")) {
        f.Report("down_s", "required: how long the node stays down, in seconds");
      }
      f.Finish();
      if (d.reported() == 0) failures.push_back(fail);
      return 0;
    });
  }
  if (diags.size() != before) return std::nullopt;
  std::stable_sort(failures.begin(), failures.end(),
                   [](const Failure& a, const Failure& b) { return a.t < b.t; });
  return failures;
}

}  // namespace

}  // namespace gantry::spec
