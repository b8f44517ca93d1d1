// Cluster config (spec section 1): YAML -> Catalog, PoolSpecs, QueueSpecs, PolicyConfig,
// then Cluster::Build and QueueTree::Build. Field problems are found here with their
// lines; the structural ones (duplicate names, cycles, guarantees) come from the core's
// Check functions and are given the line of the field they name.

#include "spec/config_reader.h"

#include <cmath>
#include <exception>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "base/rlimits.h"
#include "spec/decode.h"
#include "spec/doc.h"
#include "spec/read_file.h"

namespace gantry::spec {
namespace {

using core::Catalog;
using core::GpuModel;
using core::MigProfile;
using core::PoolSpec;
using core::QueueSpec;

constexpr double kMaxQueueGpus = 1e9;

// Field path -> line, for errors the core reports by field path.
class LineIndex {
 public:
  void Note(const std::string& path, int line) { lines_.emplace(path, line); }
  void NoteEntries(const Fields& f, const Doc& map) {
    for (const DocEntry& e : map.entries) Note(f.Path(e.key), e.line);
  }
  // The line of `path`, else of its closest recorded parent ("pools[a].x" -> "pools[a]").
  int Find(std::string path) const {
    while (!path.empty()) {
      if (auto it = lines_.find(path); it != lines_.end()) return it->second;
      const size_t cut = path.find_last_of(".[");
      if (cut == std::string::npos || cut == 0) break;
      path.erase(cut);
    }
    return 0;
  }

 private:
  std::unordered_map<std::string, int> lines_;
};

bool IsNameChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
         c == '_' || c == '.';
}

// Pool names and prefixes become node names, which agents pass on command lines and
// URLs: keep them to a safe alphabet.
bool CheckNodeName(Fields& f, std::string_view key, const std::string& value) {
  if (value.empty()) {
    f.Report(key, "must not be empty");
    return false;
  }
  for (char c : value) {
    if (!IsNameChar(c)) {
      f.Report(key, "may hold only letters, digits, '-', '_' and '.', got " + Quote(value));
      return false;
    }
  }
  return true;
}

std::string KnownModels(const Catalog& catalog) {
  std::string out;
  for (size_t i = 0; i < catalog.size(); ++i) {
    out += (i == 0 ? "" : ", ") + catalog.model(core::ModelId(static_cast<uint32_t>(i))).name;
  }
  return out;
}

class ConfigParser {
 public:
  ConfigParser(const std::string& file, Diagnostics& diags) : diags_(diags), d_(file, diags) {}

  std::optional<ClusterConfig> Parse(std::string_view text) {
    std::optional<Doc> doc = ParseYaml(text, d_.file(), diags_);
    if (!doc) return std::nullopt;
    if (doc->is_null()) {
      d_.Report(0, "", "the file is empty; a cluster config needs at least `pools`");
      return std::nullopt;
    }
    if (!doc->is_map()) {
      d_.Report(doc->line, "",
                "expected a mapping with cluster, gpu_models, pools, queues and policy, got " +
                    Describe(*doc));
      return std::nullopt;
    }
    Fields top(
        d_, *doc, "",
        {"cluster", "gpu_models", "pools", "queues", "policy", "accounting", "site", "kubernetes"});
    lines_.NoteEntries(top, *doc);
    std::string name = "gantry";
    if (auto n = top.String("cluster")) {
      if (n->empty()) {
        top.Report("cluster", "must not be empty");
      } else {
        name = *n;
      }
    }
    Catalog catalog = Catalog::BuiltIn();
    ReadModels(top, catalog);
    const bool kubernetes = top.has("kubernetes");
    std::vector<PoolSpec> pools =
        kubernetes && !top.has("pools") ? std::vector<PoolSpec>{} : ReadPools(top, catalog);
    std::vector<QueueSpec> queues = ReadQueues(top, catalog, pools);
    PolicyConfig policy = ReadPolicy(top);
    ReadAccounting(top, catalog, policy);
    SiteConfig site = ReadSite(top, catalog, pools, queues);
    KubernetesConfig kube = ReadKubernetes(top, queues);
    top.Finish();

    // The core's structural checks run even when some fields were bad, so every problem
    // shows at once; those about an item already reported would only echo it.
    ReportCore(core::Cluster::Check(catalog, pools));
    ReportCore(core::QueueTree::Check(queues));
    if (d_.reported() > 0) return std::nullopt;

    auto cluster = core::Cluster::Build(std::move(name), std::move(catalog), std::move(pools));
    if (!cluster.ok()) {
      ReportCore({cluster.error()});
      return std::nullopt;
    }
    auto tree = core::QueueTree::Build(std::move(queues));
    if (!tree.ok()) {
      ReportCore({tree.error()});
      return std::nullopt;
    }
    // Under Kubernetes the capacity is the API server's nodes, known only at run time.
    if (!kube.present) ReportCore(GuaranteesAboveCapacity(*cluster, *tree));
    if (d_.reported() > 0) return std::nullopt;
    return ClusterConfig{std::move(cluster).value(), std::move(tree).value(), policy,
                         std::move(site), std::move(kube)};
  }

 private:
  // Guarantees are promises: the top-level queues' (which bound their children's) must fit
  // in the cluster, in all and on each GPU model a queue guarantees by model.
  static std::vector<Error> GuaranteesAboveCapacity(const core::Cluster& cluster,
                                                    const core::QueueTree& tree) {
    std::vector<Error> errors;
    auto gpus = [](core::GpuUnits u) { return core::GpusText(u) + " GPUs"; };
    std::vector<core::GpuUnits> by_model(cluster.catalog().size(), 0);
    for (const core::Node& n : cluster.nodes()) {
      if (n.gpus > 0 && n.model.valid())
        by_model[n.model.v] += static_cast<core::GpuUnits>(n.gpus) * core::kGpuUnits;
    }
    const core::GpuUnits total = static_cast<core::GpuUnits>(cluster.gpu_count()) * core::kGpuUnits;
    core::GpuUnits sum = 0;
    std::vector<core::GpuUnits> sum_by_model(by_model.size(), 0);
    std::string first;  // the first top-level queue with a guarantee: where it is reported
    std::string parts;
    for (uint32_t i = 0; i < tree.size(); ++i) {
      const core::Queue& q = tree.queue(core::QueueId(i));
      if (q.parent.valid() || q.spec.guaranteed <= 0) continue;
      if (first.empty()) first = "queues[" + q.spec.name + "]";
      sum += q.spec.guaranteed;
      parts += (parts.empty() ? "" : ", ") + q.spec.name + " " + gpus(q.spec.guaranteed);
      for (const core::ModelGuarantee& g : q.spec.guaranteed_by_model)
        sum_by_model[g.model.v] += g.units;
    }
    if (sum > total) {
      errors.push_back(
          Error{first + ".guaranteed_gpus", "top-level queues' guarantees add up to " + gpus(sum) +
                                                " (" + parts + "), above the cluster's " +
                                                gpus(total) + ": they could not all be honoured"});
    }
    for (size_t m = 0; m < by_model.size(); ++m) {
      if (sum_by_model[m] <= by_model[m]) continue;
      const std::string& name =
          cluster.catalog().model(core::ModelId(static_cast<uint32_t>(m))).name;
      errors.push_back(Error{first + ".guaranteed_gpus_by_model." + name,
                             "guarantees on " + name + " add up to " + gpus(sum_by_model[m]) +
                                 ", above the cluster's " + gpus(by_model[m]) + " " + name});
    }
    return errors;
  }

  void ReportCore(const std::vector<Error>& errors) {
    for (const Error& e : errors) {
      const std::string item = e.field.substr(0, e.field.find(']') + 1);
      if (!item.empty() && dirty_.count(item) > 0) continue;
      d_.Report(lines_.Find(e.field), e.field, e.message);
    }
  }

  // Duplicate names are found here rather than by the core: two items with one name
  // share a field path, and only the reader knows which line each came from.
  void CheckUnique(Fields& f, std::unordered_map<std::string, int>& seen, const std::string& name,
                   const char* what) {
    auto [it, fresh] = seen.emplace(name, f.Line("name"));
    if (!fresh) {
      f.Report("name", std::string("duplicate ") + what + " name " + Quote(name) +
                           ", first on line " + std::to_string(it->second));
    }
  }

  // Remembers `path` (an item such as "pools[h100]") as reported when `f` found problems.
  void NoteDirty(const std::string& path, size_t reported_before) {
    if (d_.reported() != reported_before) dirty_.insert(path);
  }

  // A list item that must be a mapping; reported otherwise.
  bool IsMapItem(const Doc& item, const std::string& path) {
    if (item.is_map()) return true;
    d_.Report(item.line, path, "expected a mapping, got " + Describe(item));
    return false;
  }

  void ReadModels(Fields& top, Catalog& catalog) {
    const Doc* list = top.List("gpu_models");
    if (list == nullptr) return;
    for (size_t i = 0; i < list->items.size(); ++i) {
      const Doc& item = list->items[i];
      const std::string path = "gpu_models[" + ItemKey(item, i) + "]";
      lines_.Note(path, item.line);
      if (!IsMapItem(item, path)) continue;
      Fields f(d_, item, path, {"name", "memory_gb", "mig_profiles"});
      lines_.NoteEntries(f, item);
      const size_t before = d_.reported();
      GpuModel model;
      model.builtin = false;
      if (auto n = f.String("name")) {
        model.name = *n;
        if (n->empty()) f.Report("name", "must not be empty");
      } else if (!f.has("name")) {
        f.Report("name", "required");
      }
      if (auto gb = f.Number("memory_gb", Range{0, true, kMaxGb})) {
        model.memory_bytes = std::llround(*gb * 1e9);
      } else if (!f.has("memory_gb")) {
        f.Report("memory_gb", "required");
      }
      if (const Doc* profiles = f.List("mig_profiles")) {
        for (size_t j = 0; j < profiles->items.size(); ++j) {
          if (auto p = ReadProfile(profiles->items[j], j, path)) model.mig_profiles.push_back(*p);
        }
      }
      f.Finish();
      if (d_.reported() != before) continue;
      if (auto added = catalog.Add(std::move(model)); !added.ok()) {
        const Error& e = added.error();
        const std::string field = e.field.empty() ? path : path + "." + e.field;
        d_.Report(lines_.Find(field), field, e.message);
      }
    }
  }

  std::optional<MigProfile> ReadProfile(const Doc& item, size_t index,
                                        const std::string& model_path) {
    const std::string path = model_path + ".mig_profiles[" + ItemKey(item, index) + "]";
    lines_.Note(path, item.line);
    if (!IsMapItem(item, path)) return std::nullopt;
    Fields f(d_, item, path,
             {"name", "compute_slices", "memory_slices", "memory_gb", "max_instances", "starts"});
    lines_.NoteEntries(f, item);
    const size_t before = d_.reported();
    MigProfile p;
    auto required = [&](std::string_view key) {
      if (!f.has(key)) f.Report(key, "required");
    };
    for (std::string_view key :
         {"name", "compute_slices", "memory_slices", "memory_gb", "max_instances", "starts"}) {
      required(key);
    }
    if (auto n = f.String("name")) p.name = *n;
    if (auto c = f.Integer("compute_slices", 1, core::kMigComputeSlices))
      p.compute_slices = static_cast<int>(*c);
    if (auto m = f.Integer("memory_slices", 1, core::kMigMemorySlices))
      p.memory_slices = static_cast<int>(*m);
    if (auto gb = f.Number("memory_gb", Range{0, true, kMaxGb}))
      p.memory_bytes = std::llround(*gb * 1e9);
    if (auto k = f.Integer("max_instances", 1, core::kMigComputeSlices))
      p.max_instances = static_cast<int>(*k);
    if (const Doc* starts = f.List("starts")) {
      for (size_t j = 0; j < starts->items.size(); ++j) {
        const Doc& s = starts->items[j];
        if (auto v = d_.Integer(s, s.line, f.Path("starts") + "[" + std::to_string(j) + "]", 0,
                                core::kMigMemorySlices - 1)) {
          p.starts.push_back(static_cast<int>(*v));
        }
      }
    }
    f.Finish();
    if (d_.reported() != before) return std::nullopt;
    return p;
  }

  std::vector<PoolSpec> ReadPools(Fields& top, const Catalog& catalog) {
    std::vector<PoolSpec> pools;
    const Doc* list = top.List("pools");
    if (list == nullptr) {
      if (!top.bad("pools")) top.Report("pools", "required: list at least one pool of nodes");
      return pools;
    }
    if (list->items.empty()) top.Report("pools", "must list at least one pool of nodes");
    std::unordered_map<std::string, int> pool_lines;  // name -> line of its first pool
    for (size_t i = 0; i < list->items.size(); ++i) {
      const Doc& item = list->items[i];
      const std::string path = "pools[" + ItemKey(item, i) + "]";
      lines_.Note(path, item.line);
      if (!IsMapItem(item, path)) continue;
      const size_t before = d_.reported();
      Fields f(d_, item, path,
               {"name", "name_prefix", "count", "gpus", "gpu_model", "nvlink_domains", "leaf_size",
                "cpus", "memory_gb", "spot", "sharing", "mig_managed", "default_cpus_per_gpu",
                "default_memory_gb_per_gpu"});
      lines_.NoteEntries(f, item);
      PoolSpec p;
      // Names are kept even when reported, so the core's paths match the reader's.
      if (auto n = f.String("name")) {
        p.name = *n;
        if (CheckNodeName(f, "name", *n)) CheckUnique(f, pool_lines, *n, "pool");
      } else if (!f.has("name")) {
        f.Report("name", "required");
      }
      if (auto n = f.String("name_prefix")) {
        p.name_prefix = *n;
        CheckNodeName(f, "name_prefix", *n);
      }
      if (auto c = f.Integer("count", 0, core::kMaxNodes)) {
        p.count = static_cast<int>(*c);
      } else if (!f.has("count")) {
        f.Report("count", "required: the number of nodes in the pool");
      }
      if (auto g = f.Integer("gpus", 0, core::kMaxGpusPerNode)) {
        p.gpus = static_cast<int>(*g);
      } else if (!f.has("gpus")) {
        f.Report("gpus", "required: GPUs per node (0 for CPU-only nodes)");
      }
      if (auto m = f.String("gpu_model")) {
        if (!f.bad("gpus") && f.has("gpus") && p.gpus == 0) {
          f.Report("gpu_model", "a CPU-only pool (gpus 0) has no GPU model, got " + Quote(*m));
        } else if (auto id = catalog.Find(*m)) {
          p.model = *id;
        } else {
          f.Report("gpu_model", "unknown GPU model " + Quote(*m) + " (known: " +
                                    KnownModels(catalog) + "; declare others under gpu_models)");
        }
      } else if (!f.has("gpu_model") && p.gpus > 0) {
        f.Report("gpu_model", "required when gpus > 0");
      }
      if (auto n = f.Integer("nvlink_domains", 1, core::kMaxGpusPerNode)) {
        p.nvlink_domains = static_cast<int>(*n);
      }
      if (auto l = f.Integer("leaf_size", 0, core::kMaxNodes)) p.leaf_size = static_cast<int>(*l);
      if (auto c = f.Number("cpus", Range{0, false, kMaxCpus}))
        p.cpus_milli = std::llround(*c * 1000);
      if (auto m = f.Number("memory_gb", Range{0, false, kMaxGb})) {
        p.memory_bytes = std::llround(*m * 1e9);
      }
      if (auto c = f.Number("default_cpus_per_gpu", Range{0, false, kMaxCpus})) {
        p.default_cpus_per_gpu_milli = std::llround(*c * 1000);
      }
      if (auto m = f.Number("default_memory_gb_per_gpu", Range{0, false, kMaxGb})) {
        p.default_memory_per_gpu_bytes = std::llround(*m * 1e9);
      }
      if (auto s = f.Bool("spot")) p.spot = *s;
      const size_t before_sharing = d_.reported();
      p.sharing = ReadSharing(f, catalog, p);
      if (auto m = f.Bool("mig_managed")) {
        p.mig_managed = *m;
        // Only MIG jobs get instances made for them; without mig the flag would do nothing
        // (not said again where `sharing` itself was wrong).
        if (*m && (p.sharing & core::Bit(core::Sharing::kMig)) == 0 &&
            d_.reported() == before_sharing) {
          f.Report("mig_managed",
                   "the agents create MIG instances only for MIG jobs: list mig under "
                   "sharing, or drop mig_managed");
        }
      }
      f.Finish();
      NoteDirty(path, before);
      pools.push_back(std::move(p));
    }
    return pools;
  }

  // Exclusive use is always allowed; each listed mode adds to it.
  core::SharingMask ReadSharing(Fields& f, const Catalog& catalog, const PoolSpec& p) {
    core::SharingMask mask = core::Bit(core::Sharing::kExclusive);
    const Doc* v = f.Get("sharing");
    if (v == nullptr || v->is_null()) return mask;
    std::vector<std::pair<const Doc*, std::string>> modes;  // value, path
    if (v->kind == Doc::Kind::kString) {
      modes.emplace_back(v, f.Path("sharing"));
    } else if (v->is_list()) {
      for (size_t i = 0; i < v->items.size(); ++i) {
        modes.emplace_back(&v->items[i], f.Path("sharing") + "[" + std::to_string(i) + "]");
      }
    } else {
      f.Report("sharing",
               "expected a list of sharing modes (mig, mps, timeslice), got " + Describe(*v));
      return mask;
    }
    for (const auto& [mode, path] : modes) {
      auto s = d_.String(*mode, mode->line, path);
      if (!s) continue;
      if (*s == "exclusive") continue;
      if (*s == "mps") {
        mask |= core::Bit(core::Sharing::kMps);
      } else if (*s == "timeslice") {
        mask |= core::Bit(core::Sharing::kTimeslice);
      } else if (*s == "mig") {
        if (p.model.valid() && !catalog.model(p.model).mig_capable()) {
          d_.Report(mode->line, path,
                    "mig needs a MIG-capable GPU model; " + catalog.model(p.model).name +
                        " has no MIG profiles");
          continue;
        }
        mask |= core::Bit(core::Sharing::kMig);
      } else {
        d_.Report(mode->line, path, "must be one of mig, mps, timeslice, got " + Quote(*s));
      }
    }
    return mask;
  }

  std::vector<QueueSpec> ReadQueues(Fields& top, const Catalog& catalog,
                                    const std::vector<PoolSpec>& pools) {
    std::vector<QueueSpec> queues;
    const Doc* list = top.List("queues");
    if (list == nullptr) return queues;
    std::unordered_map<std::string, int> queue_lines;  // name -> line of its first queue
    for (size_t i = 0; i < list->items.size(); ++i) {
      const Doc& item = list->items[i];
      const std::string path = "queues[" + ItemKey(item, i) + "]";
      lines_.Note(path, item.line);
      if (!IsMapItem(item, path)) continue;
      const size_t before = d_.reported();
      Fields f(d_, item, path,
               {"name", "parent", "guaranteed_gpus", "guaranteed_gpus_by_model", "burst_gpus",
                "weight", "reclaim_idle_after_s", "allow_keep_when_idle", "budget", "order",
                "max_wait_s", "tiers"});
      lines_.NoteEntries(f, item);
      QueueSpec q;
      if (auto n = f.String("name")) {
        q.name = *n;
        if (n->empty()) {
          f.Report("name", "must not be empty");
        } else {
          CheckUnique(f, queue_lines, *n, "queue");
        }
      } else if (!f.has("name")) {
        f.Report("name", "required");
      }
      if (auto p = f.String("parent")) q.parent = *p;
      if (auto g = f.Number("guaranteed_gpus", Range{0, false, kMaxQueueGpus})) {
        q.guaranteed = std::llround(*g * static_cast<double>(core::kGpuUnits));
      }
      if (auto b = f.Number("burst_gpus", Range{0, false, kMaxQueueGpus})) {
        q.burst = std::llround(*b * static_cast<double>(core::kGpuUnits));
      }
      ReadModelGuarantees(f, catalog, pools, q);
      if (auto w = f.Number("weight", Range{0, true, 1e6})) q.weight = *w;
      if (auto r = f.Number("reclaim_idle_after_s", Range{0, false, kMaxSeconds})) {
        q.reclaim_idle_after = SecondsToTicks(*r);
      }
      if (auto a = f.Bool("allow_keep_when_idle")) q.allow_keep_when_idle = *a;
      if (auto w = f.Number("max_wait_s", Range{0, false, kMaxSeconds}))
        q.max_wait = SecondsToTicks(*w);
      if (auto o = f.Choice("order", {"fair-share", "las", "gittins"})) {
        q.order = *o == "las"       ? core::QueueOrder::kLas
                  : *o == "gittins" ? core::QueueOrder::kGittins
                                    : core::QueueOrder::kFairShare;
      }
      if (const Doc* t = f.Get("tiers"); t != nullptr && !t->is_null())
        q.tiers = ReadTiers(f, "tiers", *t);
      ReadBudget(f, q);
      f.Finish();
      NoteDirty(path, before);
      queues.push_back(std::move(q));
    }
    return queues;
  }

  // `guaranteed_gpus_by_model: {A100-80GB: 8, ...}`: the guarantee per GPU model (Kueue's
  // per-flavor nominal quota). guaranteed_gpus, when absent, is their sum.
  void ReadModelGuarantees(Fields& f, const Catalog& catalog, const std::vector<PoolSpec>& pools,
                           QueueSpec& q) {
    const Doc* v = f.Get("guaranteed_gpus_by_model");
    if (v == nullptr || v->is_null()) return;
    const std::string path = f.Path("guaranteed_gpus_by_model");
    if (!v->is_map()) {
      f.Report("guaranteed_gpus_by_model",
               "expected a mapping of GPU model to GPUs, got " + Describe(*v));
      return;
    }
    core::GpuUnits sum = 0;
    for (const DocEntry& e : v->entries) {
      const std::string field = path + "." + e.key;
      lines_.Note(field, e.line);
      const std::optional<core::ModelId> model = catalog.Find(e.key);
      if (!model) {
        d_.Report(e.line, field,
                  "unknown GPU model " + Quote(e.key) + " (known: " + KnownModels(catalog) + ")");
        continue;
      }
      if (std::none_of(pools.begin(), pools.end(),
                       [&](const PoolSpec& p) { return p.model == *model; })) {
        d_.Report(e.line, field, "no pool has GPUs of model " + Quote(e.key));
        continue;
      }
      if (auto g = d_.Number(e.value, e.line, field, Range{0, false, kMaxQueueGpus})) {
        const core::GpuUnits units = std::llround(*g * static_cast<double>(core::kGpuUnits));
        q.guaranteed_by_model.push_back(core::ModelGuarantee{*model, e.key, units});
        sum += units;
      }
    }
    if (!f.has("guaranteed_gpus")) q.guaranteed = sum;
  }

  // `tiers: [standard, best-effort]`: a list of tier names, each once (an empty list is
  // allowed: the queue may then hold nothing new, as a closed account).
  core::TierMask ReadTiers(Fields& f, std::string_view key, const Doc& v) {
    core::TierMask mask = 0;
    const std::string path = f.Path(key);
    if (!v.is_list()) {
      f.Report(key,
               "expected a list of tiers (critical, standard, best-effort), got " + Describe(v));
      return core::kAllTiers;
    }
    for (size_t j = 0; j < v.items.size(); ++j) {
      const Doc& item = v.items[j];
      const std::string field = path + "[" + std::to_string(j) + "]";
      auto name = d_.String(item, item.line, field);
      if (!name) continue;
      std::optional<core::Tier> tier = core::TierNamed(*name);
      if (!tier) {
        d_.Report(item.line, field,
                  "unknown tier " + Quote(*name) + " (known: critical, standard, best-effort)");
      } else if (mask & core::Bit(*tier)) {
        d_.Report(item.line, field, "tier " + *name + " is listed twice");
      } else {
        mask |= core::Bit(*tier);
      }
    }
    return mask;
  }

  // `budget: {gpu_hours: 5000, period: month, when_spent: best-effort}` (core/budget.h).
  void ReadBudget(Fields& f, QueueSpec& q) {
    const Doc* v = f.Get("budget");
    if (v == nullptr || v->is_null()) return;
    if (!v->is_map()) {
      f.Report("budget",
               "expected a mapping with gpu_hours, period and when_spent, got " + Describe(*v));
      return;
    }
    Fields b(d_, *v, f.Path("budget"), {"gpu_hours", "period", "when_spent", "applies_to"});
    lines_.NoteEntries(b, *v);
    core::BudgetSpec budget;
    if (auto h = b.Number("gpu_hours", Range{0, true, 1e12})) {
      budget.gpu_hours = *h;
    } else if (!b.has("gpu_hours")) {
      b.Report("gpu_hours", "required");
    }
    if (auto p = b.Choice("period", {"week", "month"})) {
      budget.period = *p == "week" ? core::BudgetPeriod::kWeek : core::BudgetPeriod::kMonth;
    }
    if (auto w = b.Choice("when_spent", {"best-effort", "wait"})) {
      budget.when_spent = *w == "wait" ? core::WhenSpent::kWait : core::WhenSpent::kBestEffort;
    }
    if (const Doc* t = b.Get("applies_to"); t != nullptr && !t->is_null()) {
      budget.applies_to = ReadTiers(b, "applies_to", *t);
    }
    b.Finish();
    q.budget = budget;
  }

  // `site: {workdir_roots: [/home, /scratch], max_active_jobs_per_team: 5000}`: absolute
  // directories, without `..`; a cap on each team's active jobs.
  SiteConfig ReadSite(Fields& top, const Catalog& catalog, const std::vector<PoolSpec>& pools,
                      const std::vector<QueueSpec>& queues) {
    SiteConfig site;
    const Doc* v = top.Get("site");
    if (v == nullptr || v->is_null()) return site;
    if (!v->is_map()) {
      top.Report("site",
                 "expected a mapping with workdir_roots, max_active_jobs_per_team, qos, "
                 "gpu_types, partitions, default_partition, accounts, default_account, features, "
                 "propagate_resource_limits_except, kill_invalid_depend, got " +
                     Describe(*v));
      return site;
    }
    Fields f(d_, *v, "site",
             {"workdir_roots", "max_active_jobs_per_team", "qos", "gpu_types", "partitions",
              "default_partition", "accounts", "default_account", "features",
              "propagate_resource_limits_except", "kill_invalid_depend"});
    ReadSiteNames(f, catalog, pools, queues, site);
    if (auto kill = f.Bool("kill_invalid_depend")) site.kill_invalid_depend = *kill;
    if (auto cap = f.Integer("max_active_jobs_per_team", 1, int64_t{100'000'000}))
      site.max_active_jobs_per_team = *cap;
    lines_.NoteEntries(f, *v);
    if (const Doc* list = f.List("workdir_roots")) {
      site.workdir_roots.emplace();
      for (size_t j = 0; j < list->items.size(); ++j) {
        const Doc& item = list->items[j];
        const std::string field = f.Path("workdir_roots") + "[" + std::to_string(j) + "]";
        auto root = d_.String(item, item.line, field);
        if (!root) continue;
        if (auto why = WhyNotAPlainAbsolutePath(*root)) {
          d_.Report(item.line, field, *why);
          continue;
        }
        site.workdir_roots->push_back(*root);
      }
    }
    if (const Doc* list = f.List("propagate_resource_limits_except")) {
      site.propagate_resource_limits_except.clear();
      for (size_t j = 0; j < list->items.size(); ++j) {
        const Doc& item = list->items[j];
        const std::string field =
            f.Path("propagate_resource_limits_except") + "[" + std::to_string(j) + "]";
        auto name = d_.String(item, item.line, field);
        if (!name) continue;
        if (!IsSlurmRlimit(*name)) {
          d_.Report(item.line, field,
                    "unknown limit " + Quote(*name) + " (" + SlurmRlimitNames() + ")");
          continue;
        }
        site.propagate_resource_limits_except.push_back(*name);
      }
    }
    f.Finish();
    return site;
  }

  // Each entry of the mapping `key` of `f` (absent or null: none), with its field's path.
  void EachEntry(Fields& f, std::string_view key,
                 const std::function<void(const std::string& name, const Doc& value, int line,
                                          const std::string& field)>& fn) {
    const Doc* m = f.Get(key);
    if (m == nullptr || m->is_null()) return;
    if (!m->is_map()) {
      f.Report(key, "expected a mapping, got " + Describe(*m));
      return;
    }
    for (const DocEntry& e : m->entries) {
      const std::string field = f.Path(key) + "." + e.key;
      lines_.Note(field, e.line);
      fn(e.key, e.value, e.line, field);
    }
  }

  // A site's names for tiers, one mapping shape for Kubernetes' priority classes and
  // Slurm's QoS: `{name: critical | standard | best-effort}`.
  std::vector<std::pair<std::string, core::Tier>> ReadTierNames(Fields& f, std::string_view key) {
    std::vector<std::pair<std::string, core::Tier>> out;
    EachEntry(f, key,
              [&](const std::string& name, const Doc& value, int line, const std::string& field) {
                auto tier = d_.String(value, line, field);
                if (!tier) return;
                if (auto t = core::TierNamed(*tier)) {
                  out.emplace_back(name, *t);
                } else {
                  d_.Report(line, field,
                            "must be one of critical, standard, best-effort, got " + Quote(*tier));
                }
              });
    return out;
  }

  // Slurm's names: `qos: {regular: standard}`, `gpu_types: {a100: [A100-40GB, A100-80GB]}`,
  // `partitions: {gpu: a100-pool}`, `default_partition: gpu`, `accounts: {proj1: nlp}`.
  void ReadSiteNames(Fields& f, const Catalog& catalog, const std::vector<PoolSpec>& pools,
                     const std::vector<QueueSpec>& queues, SiteConfig& site) {
    auto each = [&](std::string_view key, auto&& fn) { EachEntry(f, key, fn); };
    auto pool_named = [&](const std::string& name, int line,
                          const std::string& field) -> std::optional<core::PoolId> {
      for (size_t i = 0; i < pools.size(); ++i) {
        if (pools[i].name == name) return core::PoolId(static_cast<uint32_t>(i));
      }
      d_.Report(line, field, "no pool named " + Quote(name));
      return std::nullopt;
    };
    site.qos = ReadTierNames(f, "qos");
    each("gpu_types",
         [&](const std::string& alias, const Doc& value, int line, const std::string& field) {
           std::vector<std::pair<const Doc*, std::string>> names;
           if (value.is_list()) {
             for (size_t i = 0; i < value.items.size(); ++i)
               names.emplace_back(&value.items[i], field + "[" + std::to_string(i) + "]");
           } else {
             names.emplace_back(&value, field);
           }
           core::ModelMask mask = 0;
           for (const auto& [item, path] : names) {
             auto name = d_.String(*item, value.is_list() ? item->line : line, path);
             if (!name) continue;
             if (auto id = catalog.Find(*name)) {
               mask |= core::ModelMask{1} << id->v;
             } else {
               d_.Report(line, path, "no GPU model named " + Quote(*name) + " in the catalog");
             }
           }
           std::string lower;
           for (char c : alias)
             lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
           if (mask != 0) site.gpu_types.emplace_back(lower, mask);
         });
    each("partitions",
         [&](const std::string& partition, const Doc& value, int line, const std::string& field) {
           auto pool = d_.String(value, line, field);
           if (!pool) return;
           if (auto id = pool_named(*pool, line, field))
             site.partitions.emplace_back(partition, *id);
         });
    if (auto p = f.String("default_partition")) {
      for (const auto& [name, id] : site.partitions) {
        if (name == *p) site.default_partition = id;
      }
      if (!site.default_partition) {
        for (size_t i = 0; i < pools.size(); ++i) {
          if (pools[i].name == *p) site.default_partition = core::PoolId(static_cast<uint32_t>(i));
        }
      }
      if (!site.default_partition)
        f.Report("default_partition", "no partition or pool named " + Quote(*p));
    }
    each("features",
         [&](const std::string& pool, const Doc& value, int line, const std::string& field) {
           auto id = pool_named(pool, line, field);
           if (!id) return;
           if (!value.is_list()) {
             d_.Report(line, field, "expected a list of feature names, got " + Describe(value));
             return;
           }
           std::vector<std::string> names;
           for (size_t i = 0; i < value.items.size(); ++i) {
             const std::string path = field + "[" + std::to_string(i) + "]";
             auto name = d_.String(value.items[i], value.items[i].line, path);
             if (!name) continue;
             if (name->empty() || name->find_first_of("&|[]*,() ") != std::string::npos) {
               d_.Report(value.items[i].line, path,
                         "a feature is a plain name (no &, |, brackets, commas or blanks), got " +
                             Quote(*name));
               continue;
             }
             names.push_back(*name);
           }
           site.features.emplace_back(*id, std::move(names));
         });
    each("accounts",
         [&](const std::string& account, const Doc& value, int line, const std::string& field) {
           auto queue = d_.String(value, line, field);
           if (!queue) return;
           for (size_t i = 0; i < queues.size(); ++i) {
             if (queues[i].name == *queue) {
               site.accounts.emplace_back(account, core::QueueId(static_cast<uint32_t>(i)));
               return;
             }
           }
           d_.Report(line, field, "no queue named " + Quote(*queue));
         });
    if (auto a = f.String("default_account")) {
      for (const auto& [account, id] : site.accounts) {
        if (account == *a) site.default_account = id;
      }
      for (size_t i = 0; i < queues.size() && !site.default_account; ++i) {
        if (queues[i].name == *a) site.default_account = core::QueueId(static_cast<uint32_t>(i));
      }
      if (!site.default_account)
        f.Report("default_account", "no account or queue named " + Quote(*a));
    }
  }

  // `kubernetes: {scheduler_name: gantry, namespaces: {team-a: research}, default_queue:
  // ml, priority_classes: {inference: critical}, leaf_label: example.com/ib-leaf}`.
  // Queue ids are positions in `queues`, as QueueTree::Build numbers them.
  KubernetesConfig ReadKubernetes(Fields& top, const std::vector<QueueSpec>& queues) {
    KubernetesConfig k;
    const Doc* v = top.Get("kubernetes");
    if (v == nullptr) return k;
    k.present = true;
    if (v->is_null()) return k;
    if (!v->is_map()) {
      top.Report("kubernetes",
                 "expected a mapping with scheduler_name, namespaces, "
                 "default_queue, priority_classes, leaf_label, pools, got " +
                     Describe(*v));
      return k;
    }
    Fields f(d_, *v, "kubernetes",
             {"scheduler_name", "namespaces", "default_queue", "priority_classes", "leaf_label",
              "pools"});
    lines_.NoteEntries(f, *v);
    auto queue_named = [&](const std::string& name, int line,
                           const std::string& field) -> std::optional<core::QueueId> {
      for (size_t i = 0; i < queues.size(); ++i) {
        if (queues[i].name == name) return core::QueueId(static_cast<uint32_t>(i));
      }
      d_.Report(line, field, "no queue named " + Quote(name));
      return std::nullopt;
    };
    if (auto n = f.String("scheduler_name")) {
      if (n->empty())
        f.Report("scheduler_name", "must not be empty");
      else
        k.scheduler_name = *n;
    }
    if (auto l = f.String("leaf_label")) k.leaf_label = *l;
    if (auto q = f.String("default_queue")) {
      k.default_queue = queue_named(*q, f.Line("default_queue"), f.Path("default_queue"));
    }
    EachEntry(f, "namespaces",
              [&](const std::string& ns, const Doc& value, int line, const std::string& field) {
                auto queue = d_.String(value, line, field);
                if (!queue) return;
                if (auto id = queue_named(*queue, line, field)) k.namespaces.emplace_back(ns, *id);
              });
    k.priority_classes = ReadTierNames(f, "priority_classes");
    ReadKubePools(f, k);
    f.Finish();
    return k;
  }

  // kubernetes.pools: [{name, node_labels: {LABEL: VALUE}, spot, nvlink_domains}].
  void ReadKubePools(Fields& f, KubernetesConfig& k) {
    const Doc* list = f.List("pools");
    if (list == nullptr) return;
    std::unordered_map<std::string, int> names;
    for (size_t i = 0; i < list->items.size(); ++i) {
      const Doc& item = list->items[i];
      const std::string path = "kubernetes.pools[" + ItemKey(item, i) + "]";
      if (!IsMapItem(item, path)) continue;
      Fields p(d_, item, path, {"name", "node_labels", "spot", "nvlink_domains"});
      KubernetesConfig::Pool pool;
      if (auto n = p.String("name")) {
        pool.name = *n;
        if (CheckNodeName(p, "name", *n)) CheckUnique(p, names, *n, "pool");
      } else if (!p.has("name")) {
        p.Report("name", "required");
      }
      EachEntry(
          p, "node_labels",
          [&](const std::string& label, const Doc& value, int line, const std::string& field) {
            if (auto v = d_.String(value, line, field)) pool.node_labels.emplace_back(label, *v);
          });
      if (pool.node_labels.empty() && !p.bad("node_labels"))
        p.Report("node_labels", "required: the labels (LABEL: VALUE) a node of the pool has");
      if (auto s = p.Bool("spot")) pool.spot = *s;
      if (auto n = p.Integer("nvlink_domains", 1, core::kMaxGpusPerNode))
        pool.nvlink_domains = static_cast<int>(*n);
      p.Finish();
      k.pools.push_back(std::move(pool));
    }
  }

  // `accounting: {currency: EUR, gpu_hour_prices: {H100-80GB: 2.5, A100-80GB: 1.2}}`.
  void ReadAccounting(Fields& top, const Catalog& catalog, PolicyConfig& policy) {
    const Doc* v = top.Get("accounting");
    if (v == nullptr || v->is_null()) return;
    if (!v->is_map()) {
      top.Report("accounting",
                 "expected a mapping with currency and gpu_hour_prices, got " + Describe(*v));
      return;
    }
    Fields f(d_, *v, "accounting", {"currency", "gpu_hour_prices"});
    lines_.NoteEntries(f, *v);
    if (auto c = f.String("currency")) policy.currency = *c;
    const Doc* prices = f.Get("gpu_hour_prices");
    if (prices != nullptr && !prices->is_null()) {
      const std::string path = f.Path("gpu_hour_prices");
      if (!prices->is_map()) {
        f.Report("gpu_hour_prices",
                 "expected a mapping of GPU model to price per GPU-hour, got " + Describe(*prices));
      } else {
        policy.params.gpu_hour_price.assign(catalog.size(), 1.0);
        for (const DocEntry& e : prices->entries) {
          const std::string field = path + "." + e.key;
          lines_.Note(field, e.line);
          const std::optional<core::ModelId> model = catalog.Find(e.key);
          if (!model) {
            d_.Report(
                e.line, field,
                "unknown GPU model " + Quote(e.key) + " (known: " + KnownModels(catalog) + ")");
            continue;
          }
          if (auto p = d_.Number(e.value, e.line, field, Range{0, false, 1e9}))
            policy.params.gpu_hour_price[model->v] = *p;
        }
      }
    }
    f.Finish();
  }

  PolicyConfig ReadPolicy(Fields& top) {
    PolicyConfig policy;
    core::PolicyParams& p = policy.params;
    const Doc* v = top.Get("policy");
    if (v == nullptr || v->is_null()) return policy;
    if (!v->is_map()) {
      top.Report("policy", "expected a mapping, got " + Describe(*v));
      return policy;
    }
    Fields f(d_, *v, "policy",
             {"reclaim_idle_after_s",
              "fairshare_half_life_s",
              "aging_s",
              "min_run_before_repreempt_s",
              "backfill_depth",
              "default_runtime_estimate_s",
              "backfill_lease_after_s",
              "preempt_after_checkpoint_s",
              "default_grace_s",
              "reclaim_idle_below",
              "reclaim_critical",
              "las_thresholds_gpu_s",
              "attained_quantum_s",
              "max_wait_s",
              "reclaim_idle_after_s_by_tier",
              "full_pass_interval_s",
              "best_effort_yields_to",
              "best_effort_yields_within_s",
              "consolidate_within_s",
              "max_grace_s",
              "fragmentation_weights"});
    lines_.NoteEntries(f, *v);
    auto seconds = [&](std::string_view key, Range range, core::Ticks& out) {
      if (auto s = f.Number(key, range)) out = SecondsToTicks(*s);
    };
    seconds("reclaim_idle_after_s", Range{0, false, kMaxSeconds}, p.reclaim_idle_after);
    seconds("fairshare_half_life_s", Range{0, true, kMaxSeconds}, p.fairshare_half_life);
    seconds("aging_s", Range{0, false, kMaxSeconds}, p.aging);
    seconds("min_run_before_repreempt_s", Range{0, false, kMaxSeconds}, p.min_run_before_repreempt);
    seconds("default_runtime_estimate_s", Range{0, true, kMaxSeconds}, p.default_runtime_estimate);
    seconds("backfill_lease_after_s", Range{0, false, kMaxSeconds}, p.backfill_lease_after);
    seconds("preempt_after_checkpoint_s", Range{0, false, kMaxSeconds}, p.preempt_after_checkpoint);
    seconds("default_grace_s", Range{0, false, kMaxSeconds}, policy.default_grace);
    seconds("best_effort_yields_within_s", Range{0, false, kMaxSeconds},
            p.best_effort_yields_within);
    seconds("consolidate_within_s", Range{0, false, kMaxSeconds}, p.consolidate_within);
    if (auto n = f.Integer("backfill_depth", 0, 1000)) p.backfill_depth = static_cast<int>(*n);
    if (auto b = f.Number("reclaim_idle_below", Range{0, false, 1})) p.reclaim_idle_below = *b;
    if (auto c = f.Bool("reclaim_critical")) p.reclaim_critical = *c;
    // Which tiers take best-effort work's GPUs beyond their queue's guarantee too.
    if (auto t = f.Choice("best_effort_yields_to", {"critical", "standard", "none"})) {
      p.best_effort_yields_to = *t == "critical"   ? core::Tier::kCritical
                                : *t == "standard" ? std::optional{core::Tier::kStandard}
                                                   : std::nullopt;
    }
    // How FGD's placement weighs the task mix: by the workers that ask each shape (FGD's
    // own) or by the GPUs they ask.
    if (auto w = f.Choice("fragmentation_weights", {"workers", "gpus"}))
      p.fragmentation_by_gpus = *w == "gpus";
    // `max_grace_s: 300` (every tier) or `{critical: 900, best-effort: 30}` (the rest keep
    // their defaults).
    if (const Doc* g = f.Get("max_grace_s"); g != nullptr && !g->is_null()) {
      if (g->is_map()) {
        Fields t(d_, *g, f.Path("max_grace_s"), {"critical", "standard", "best-effort"});
        lines_.NoteEntries(t, *g);
        for (int tier = 0; tier < core::kTierCount; ++tier) {
          if (auto sec = t.Number(core::Name(static_cast<core::Tier>(tier)),
                                  Range{0, false, kMaxSeconds})) {
            policy.max_grace[static_cast<size_t>(tier)] = SecondsToTicks(*sec);
          }
        }
        t.Finish();
      } else if (auto sec = f.Number("max_grace_s", Range{0, false, kMaxSeconds})) {
        policy.max_grace.fill(SecondsToTicks(*sec));
      }
    }
    // `reclaim_idle_after_s_by_tier: {best-effort: 300, standard: 1800}`.
    if (const Doc* by = f.Get("reclaim_idle_after_s_by_tier"); by != nullptr && !by->is_null()) {
      if (!by->is_map()) {
        f.Report("reclaim_idle_after_s_by_tier",
                 "expected a mapping of tiers (critical, standard, best-effort) to seconds, got " +
                     Describe(*by));
      } else {
        Fields t(d_, *by, f.Path("reclaim_idle_after_s_by_tier"),
                 {"critical", "standard", "best-effort"});
        lines_.NoteEntries(t, *by);
        for (int tier = 0; tier < core::kTierCount; ++tier) {
          const std::string_view name = core::Name(static_cast<core::Tier>(tier));
          if (auto sec = t.Number(name, Range{0, false, kMaxSeconds})) {
            p.reclaim_idle_after_by_tier[static_cast<size_t>(tier)] = SecondsToTicks(*sec);
          }
        }
        t.Finish();
      }
    }
    seconds("attained_quantum_s", Range{0, true, kMaxSeconds}, p.attained_quantum);
    seconds("max_wait_s", Range{0, false, kMaxSeconds}, p.max_wait);
    seconds("full_pass_interval_s", Range{0, false, 3600}, p.full_pass_interval);
    if (const Doc* list = f.List("las_thresholds_gpu_s")) {
      p.las_thresholds_gpu_s.clear();
      for (size_t j = 0; j < list->items.size(); ++j) {
        const Doc& item = list->items[j];
        const std::string field = f.Path("las_thresholds_gpu_s") + "[" + std::to_string(j) + "]";
        auto x = d_.Number(item, item.line, field, Range{0, true, 1e15});
        if (!x) continue;
        if (!p.las_thresholds_gpu_s.empty() && *x <= p.las_thresholds_gpu_s.back()) {
          d_.Report(item.line, field, "must be above the one before it (the levels ascend)");
          continue;
        }
        p.las_thresholds_gpu_s.push_back(*x);
      }
    }
    // A half-life or estimate that rounds to 0 ms would divide by zero downstream.
    if (p.fairshare_half_life < 1) f.Report("fairshare_half_life_s", "must be at least 0.001");
    if (p.attained_quantum < 1) f.Report("attained_quantum_s", "must be at least 0.001");
    if (p.default_runtime_estimate < 1) {
      f.Report("default_runtime_estimate_s", "must be at least 0.001");
    }
    f.Finish();
    return policy;
  }

  Diagnostics& diags_;
  Decoder d_;
  LineIndex lines_;
  std::unordered_set<std::string> dirty_;  // items with field problems
};

}  // namespace

std::optional<std::string> WhyNotAPlainAbsolutePath(std::string_view path) {
  if (path.empty() || path.front() != '/') {
    return "must be an absolute path (a relative one would resolve against the agent's own "
           "directory), got " +
           Quote(path);
  }
  for (const auto& part : std::filesystem::path(path)) {
    if (part == "..") return "must not go up with `..`, got " + Quote(path);
  }
  return std::nullopt;
}

namespace {

// Upper-case words of a product or model name: "nvidia_h100_80gb_hbm3" -> NVIDIA H100 80GB HBM3.
std::vector<std::string> Words(std::string_view text) {
  std::vector<std::string> out(1);
  for (char c : text) {
    if (c == '-' || c == '_' || c == ' ' || c == '.' || c == '/') {
      if (!out.back().empty()) out.emplace_back();
    } else {
      out.back() += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    }
  }
  if (out.back().empty()) out.pop_back();
  return out;
}

bool IsMemoryWord(const std::string& w) {
  return w.size() > 2 && w.ends_with("GB") &&
         std::all_of(w.begin(), w.end() - 2, [](char c) { return std::isdigit(c) != 0; });
}

}  // namespace

core::ModelMask GpuModelsNamed(std::string_view name, const core::Catalog& catalog,
                               const SiteConfig& site) {
  std::string lower;
  for (char c : name) lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (const auto& [alias, mask] : site.gpu_types) {
    if (alias == lower) return mask;
  }
  const std::vector<std::string> words = Words(name);
  std::string memory;
  for (const std::string& w : words) {
    if (IsMemoryWord(w)) memory = w;
  }
  core::ModelMask exact = 0, family = 0;
  for (size_t m = 0; m < catalog.size() && m < core::kMaxModels; ++m) {
    const std::string& model = catalog.model(core::ModelId(static_cast<uint32_t>(m))).name;
    const std::vector<std::string> mw = Words(model);
    if (mw == words) exact |= core::ModelMask{1} << m;
    if (mw.empty() || std::find(words.begin(), words.end(), mw[0]) == words.end()) continue;
    // The family is named (H100, A100); a memory size, where the name gives one, must match.
    const auto own = std::find_if(mw.begin(), mw.end(), IsMemoryWord);
    if (!memory.empty() && own != mw.end() && *own != memory) continue;
    family |= core::ModelMask{1} << m;
  }
  return exact != 0 ? exact : family;
}

std::optional<std::string> WhyWorkdirRefused(std::string_view workdir, const SiteConfig& site) {
  if (auto why = WhyNotAPlainAbsolutePath(workdir)) return why;
  const std::filesystem::path dir = std::filesystem::path(workdir).lexically_normal();
  const auto under = [&](const std::filesystem::path& root) {
    const std::filesystem::path rel = dir.lexically_relative(root);
    return !rel.empty() && *rel.begin() != "..";
  };
  if (site.workdir_roots) {
    for (const std::string& root : *site.workdir_roots) {
      if (under(std::filesystem::path(root).lexically_normal())) return std::nullopt;
    }
    std::string roots;
    for (const std::string& r : *site.workdir_roots) roots += (roots.empty() ? "" : ", ") + r;
    return Quote(workdir) + " is not under this cluster's workdir roots (site.workdir_roots: " +
           (roots.empty() ? "none" : roots) + ")";
  }
  for (const char* system :
       {"/etc", "/proc", "/sys", "/dev", "/boot", "/bin", "/sbin", "/lib", "/lib32", "/lib64",
        "/libx32", "/usr", "/run", "/var/lib", "/var/run"}) {
    if (dir == "/" || under(system)) {
      return Quote(workdir) +
             " is a system directory; a job's workdir belongs under the users' own (set "
             "site.workdir_roots to name them)";
    }
  }
  return std::nullopt;
}

std::optional<ClusterConfig> ParseClusterConfig(std::string_view yaml_text, const std::string& file,
                                                Diagnostics& diags) {
  const size_t before = diags.size();
  try {
    ConfigParser parser(file, diags);
    std::optional<ClusterConfig> config = parser.Parse(yaml_text);
    diags.SortByLine(before);
    return config;
  } catch (const std::exception& e) {
    diags.Add(file, 0, "", std::string("cannot read the config: ") + e.what());
  } catch (...) {
    diags.Add(file, 0, "", "cannot read the config");
  }
  if (diags.size() == before) diags.Add(file, 0, "", "cannot read the config");
  return std::nullopt;
}

std::optional<ClusterConfig> StandInConfig(const std::vector<std::string>& queue_names) {
  auto cluster = core::Cluster::Build("none", core::Catalog::BuiltIn(), {});
  std::vector<core::QueueSpec> queues;
  for (const std::string& name : queue_names) {
    core::QueueSpec q;
    q.name = name;
    queues.push_back(std::move(q));
  }
  auto tree = core::QueueTree::Build(std::move(queues));
  if (!cluster || !tree) return std::nullopt;
  return ClusterConfig{std::move(*cluster), std::move(*tree), {}, {}, {}};
}

std::optional<ClusterConfig> ReadClusterConfig(const std::string& path, Diagnostics& diags) {
  std::optional<std::string> text;
  try {
    text = ReadWholeFile(path, diags);
  } catch (const std::exception& e) {
    diags.Add(path, 0, "", std::string("cannot read the file: ") + e.what());
  }
  if (!text) return std::nullopt;
  return ParseClusterConfig(*text, path, diags);
}

}  // namespace gantry::spec
