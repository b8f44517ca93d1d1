#include "kube/objects.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <ctime>
#include <functional>
#include <set>
#include <tuple>

#include "kube/json_fields.h"

namespace gantry::kube {
namespace {

using nlohmann::json;

using namespace json_fields;  // NOLINT: Member, Str, StrMap, Obj, Arr

std::vector<std::string> Tokens(std::string_view text) {
  std::vector<std::string> out;
  std::string cur;
  for (char c : text) {
    if (c == '-' || c == '_' || c == ' ' || c == '.') {
      if (!cur.empty()) out.push_back(cur);
      cur.clear();
    } else {
      cur += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    }
  }
  if (!cur.empty()) out.push_back(cur);
  return out;
}

// Requests of one container (requests, else limits, as the API server defaults them).
struct Req {
  int64_t gpus = 0, cpus = 0, mem = 0;
  int64_t shared = 0;  // nvidia.com/gpu.shared
  std::map<std::string, int64_t> mig;
};

bool AddResources(const json& resources, Req& r, std::string& problem) {
  const json& requests = Obj(resources, "requests");
  const json& limits = Obj(resources, "limits");
  std::set<std::string> keys;
  for (auto it = requests.begin(); it != requests.end(); ++it) keys.insert(it.key());
  for (auto it = limits.begin(); it != limits.end(); ++it) keys.insert(it.key());
  for (const std::string& k : keys) {
    const json& v = requests.contains(k) ? requests[k] : limits[k];
    if (!v.is_string() && !v.is_number()) {
      problem = "resources." + k + ": not a quantity";
      return false;
    }
    const std::string text = v.is_string() ? v.get<std::string>() : v.dump();
    const bool cpu = k == "cpu";
    auto q = ParseQuantity(text, cpu ? 1000 : 1);
    if (!q) {
      problem = "resources." + k + ": \"" + text + "\" is not a quantity";
      return false;
    }
    if (cpu)
      r.cpus += *q;
    else if (k == "memory")
      r.mem += *q;
    else if (k == kGpuResource)
      r.gpus += *q;
    else if (k == kSharedGpuResource)
      r.shared += *q;
    else if (k.rfind(kMigResourcePrefix, 0) == 0)
      r.mig[k.substr(std::char_traits<char>::length(kMigResourcePrefix))] += *q;
  }
  return true;
}

Req Max(Req a, const Req& b) {
  a.gpus = std::max(a.gpus, b.gpus);
  a.shared = std::max(a.shared, b.shared);
  a.cpus = std::max(a.cpus, b.cpus);
  a.mem = std::max(a.mem, b.mem);
  for (const auto& [k, v] : b.mig) a.mig[k] = std::max(a.mig[k], v);
  return a;
}
Req Sum(Req a, const Req& b) {
  a.gpus += b.gpus;
  a.shared += b.shared;
  a.cpus += b.cpus;
  a.mem += b.mem;
  for (const auto& [k, v] : b.mig) a.mig[k] += v;
  return a;
}

// A selector's matchExpressions (node affinity terms, label selectors).
std::vector<Requirement> Requirements(const json& selector) {
  std::vector<Requirement> out;
  for (const json& e : Arr(selector, "matchExpressions")) {
    Requirement r{Str(e, "key"), Str(e, "operator"), {}};
    for (const json& v : Arr(e, "values")) {
      if (v.is_string()) r.values.push_back(v.get<std::string>());
    }
    out.push_back(std::move(r));
  }
  return out;
}

// The label selector at obj[key]: absent or null selects nothing.
LabelSelector SelectorOf(const json& obj, const char* key) {
  LabelSelector sel;
  const json* s = Member(obj, key);
  if (s == nullptr || !s->is_object()) return sel;
  sel.given = true;
  sel.match_labels = StrMap(*s, "matchLabels");
  sel.match_expressions = Requirements(*s);
  return sel;
}

// A term's or constraint's matchLabelKeys (key In the pod's value) and mismatchLabelKeys
// (key NotIn it) added to its selector, as kube-apiserver merges them when it creates the
// pod (a second merge adds the same requirement again: no change to what it selects). A
// key the pod has no label for is left out; a selector not given selects nothing still.
void MergeLabelKeys(const json& obj, const std::map<std::string, std::string>& labels,
                    LabelSelector& sel) {
  if (!sel.given) return;
  for (auto [field, op] : {std::pair{"matchLabelKeys", "In"}, {"mismatchLabelKeys", "NotIn"}}) {
    for (const json& k : Arr(obj, field)) {
      if (!k.is_string()) continue;
      auto it = labels.find(k.get<std::string>());
      if (it != labels.end())
        sel.match_expressions.push_back(Requirement{it->first, op, {it->second}});
    }
  }
}

bool Matches(const Requirement& r, const std::map<std::string, std::string>& labels) {
  auto it = labels.find(r.key);
  const bool has = it != labels.end();
  auto in = [&] {
    return has && std::find(r.values.begin(), r.values.end(), it->second) != r.values.end();
  };
  if (r.op == "In") return in();
  if (r.op == "NotIn") return !in();
  if (r.op == "Exists") return has;
  if (r.op == "DoesNotExist") return !has;
  if ((r.op == "Gt" || r.op == "Lt") && has && r.values.size() == 1) {
    char* end = nullptr;
    const long long a = std::strtoll(it->second.c_str(), &end, 10);
    if (end == it->second.c_str() || *end != '\0') return false;
    const long long b = std::strtoll(r.values[0].c_str(), &end, 10);
    return r.op == "Gt" ? a > b : a < b;
  }
  return false;
}

}  // namespace

bool Tolerates(const std::vector<Toleration>& tols, const Taint& t) {
  for (const Toleration& x : tols) {
    if (!x.effect.empty() && x.effect != t.effect) continue;
    if (x.key.empty() && x.op == "Exists") return true;
    if (x.key != t.key) continue;
    if (x.op == "Exists" || x.value == t.value) return true;
  }
  return false;
}

bool MatchesAll(const std::vector<Requirement>& match,
                const std::map<std::string, std::string>& labels) {
  return std::all_of(match.begin(), match.end(),
                     [&](const Requirement& r) { return Matches(r, labels); });
}

std::optional<int64_t> ParseQuantity(std::string_view text, int64_t scale) {
  size_t i = 0;
  while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.'))
    ++i;
  if (i == 0 || i > 40) return std::nullopt;
  std::string number(text.substr(0, i));
  if (std::count(number.begin(), number.end(), '.') > 1 || number == ".") return std::nullopt;
  const std::string_view suffix = text.substr(i);
  long double mult = 1;
  static const std::pair<std::string_view, long double> kSuffixes[] = {
      {"", 1},
      {"n", 1e-9},
      {"u", 1e-6},
      {"m", 1e-3},
      {"k", 1e3},
      {"M", 1e6},
      {"G", 1e9},
      {"T", 1e12},
      {"P", 1e15},
      {"E", 1e18},
      {"Ki", 1024.0L},
      {"Mi", 1048576.0L},
      {"Gi", 1073741824.0L},
      {"Ti", 1099511627776.0L},
      {"Pi", 1125899906842624.0L},
      {"Ei", 1152921504606846976.0L}};
  bool known = false;
  for (const auto& [s, m] : kSuffixes) {
    if (suffix == s) {
      mult = m;
      known = true;
    }
  }
  if (!known) {  // decimal exponent: 1e3, 1E-2
    if (suffix.size() < 2 || (suffix[0] != 'e' && suffix[0] != 'E')) return std::nullopt;
    std::string_view exp = suffix.substr(1);
    const bool neg = exp[0] == '-';
    if (exp[0] == '-' || exp[0] == '+') exp.remove_prefix(1);
    if (exp.empty() || exp.size() > 3) return std::nullopt;
    for (char c : exp) {
      if (!std::isdigit(static_cast<unsigned char>(c))) return std::nullopt;
    }
    mult = std::pow(10.0L, (neg ? -1 : 1) * std::stoi(std::string(exp)));
  }
  const long double v = std::stold(number) * mult * static_cast<long double>(scale);
  if (!(v >= 0) || v > 9.0e18L) return std::nullopt;
  return static_cast<int64_t>(std::ceil(v - 1e-9L));
}

NodeInfo ParseNode(const json& obj) {
  NodeInfo n;
  const json& meta = Obj(obj, "metadata");
  n.name = Str(meta, "name");
  if (n.name.empty()) n.problem = "no metadata.name";
  n.labels = StrMap(meta, "labels");
  const json& spec = Obj(obj, "spec");
  if (const json* u = Member(spec, "unschedulable"); u != nullptr && u->is_boolean())
    n.unschedulable = u->get<bool>();
  for (const json& t : Arr(spec, "taints")) {
    n.taints.push_back(Taint{Str(t, "key"), Str(t, "value"), Str(t, "effect")});
  }
  const json& status = Obj(obj, "status");
  for (const json& c : Arr(status, "conditions")) {
    if (Str(c, "type") == "Ready") n.ready = Str(c, "status") == "True";
  }
  const json& alloc = Obj(status, "allocatable");
  for (auto it = alloc.begin(); it != alloc.end(); ++it) {
    if (!it->is_string()) continue;
    const std::string& k = it.key();
    const bool cpu = k == "cpu";
    auto q = ParseQuantity(it->get<std::string>(), cpu ? 1000 : 1);
    if (!q) {
      n.problem =
          "status.allocatable." + k + ": \"" + it->get<std::string>() + "\" is not a quantity";
      continue;
    }
    if (cpu)
      n.cpus_milli = *q;
    else if (k == "memory")
      n.memory_bytes = *q;
    else if (k == "pods")
      n.pods = *q;
    else if (k == kGpuResource || (k == kSharedGpuResource && *q > 0))
      n.gpus = static_cast<int>(std::min<int64_t>(*q, 1 << 20));
    else if (k.rfind(kMigResourcePrefix, 0) == 0 && *q > 0)
      n.mig[k.substr(std::char_traits<char>::length(kMigResourcePrefix))] = *q;
  }
  // The device plugin's single MIG strategy: every nvidia.com/gpu is a MIG device of the
  // profile GPU feature discovery names in the product (NVIDIA-A100-SXM4-80GB-MIG-3g.40gb).
  if (auto st = n.labels.find("nvidia.com/mig.strategy");
      st != n.labels.end() && st->second == "single" && n.gpus > 0) {
    auto product = n.labels.find("nvidia.com/gpu.product");
    const size_t at =
        product == n.labels.end() ? std::string::npos : product->second.find(kMigProductInfix);
    if (at != std::string::npos) {
      n.mig[product->second.substr(at + std::char_traits<char>::length(kMigProductInfix))] +=
          n.gpus;
      n.gpus = 0;
      n.mig_single = true;
    }
  }
  // Shared GPUs: GPU feature discovery's sharing labels (a node labelled with replicas
  // but no strategy is time-sliced, as before the strategy label existed).
  const bool renamed = alloc.contains(kSharedGpuResource);
  auto label = [&](const char* key) {
    auto it = n.labels.find(key);
    return it == n.labels.end() ? std::string() : it->second;
  };
  const std::string strategy = label("nvidia.com/gpu.sharing-strategy");
  const std::string replicas = label("nvidia.com/gpu.replicas");
  if (!replicas.empty() && n.gpus > 0 && n.mig.empty()) {
    char* end = nullptr;
    const long r = std::strtol(replicas.c_str(), &end, 10);
    if (end == replicas.c_str() || *end != '\0' || r < 1 || r > 1000) {
      n.problem = "label nvidia.com/gpu.replicas: \"" + replicas + "\" is not a number of replicas";
    } else if (r > 1) {
      if (n.gpus % r != 0) {
        n.problem = "advertises " + std::to_string(n.gpus) + " " +
                    (renamed ? kSharedGpuResource : kGpuResource) + ", not a multiple of its " +
                    std::to_string(r) + " replicas per GPU";
      } else {
        n.sharing = strategy == "mps" ? core::Sharing::kMps : core::Sharing::kTimeslice;
        n.replicas = static_cast<int>(r);
        n.renamed = renamed;
        n.gpus /= n.replicas;
      }
    }
  }
  if (renamed && n.sharing == core::Sharing::kExclusive && n.problem.empty()) {
    n.problem = std::string("advertises ") + kSharedGpuResource +
                " without the labels nvidia.com/gpu.replicas and nvidia.com/gpu.sharing-strategy";
  }
  if (n.gpus > core::kMaxGpusPerNode) {
    n.problem = "advertises " + std::to_string(n.gpus) + " nvidia.com/gpu; at most " +
                std::to_string(core::kMaxGpusPerNode) + " per node are supported";
  }
  return n;
}

std::string NodeSelection::Key() const {
  json j = json::object();
  j["s"] = node_selector;
  json terms_j = json::array();
  for (const auto& term : terms) {
    json t = json::array();
    for (const Requirement& r : term) t.push_back({r.key, r.op, r.values});
    terms_j.push_back(t);
  }
  j["a"] = terms_j;
  json tol = json::array();
  for (const Toleration& t : tolerations) tol.push_back({t.key, t.op, t.value, t.effect});
  j["t"] = tol;
  if (dra) j["d"] = {dra_mig, dra_selectors};
  if (!node.empty()) j["n"] = node;
  return j.dump();
}

namespace {

// Allows, with the selection's device selectors compiled (`devices`: nullopt when one is
// outside the subset, or the selection has none).
bool AllowsCompiled(const NodeSelection& sel, const NodeInfo& node,
                    const std::optional<std::vector<DeviceSelector>>& devices) {
  if (!sel.node.empty() && sel.node != node.name) return false;
  if (sel.dra && (!devices || !DevicesPassCompiled(node.dra, *devices, sel.dra_mig))) return false;
  for (const auto& [k, v] : sel.node_selector) {
    auto it = node.labels.find(k);
    if (it == node.labels.end() || it->second != v) return false;
  }
  if (!sel.terms.empty()) {
    bool any = false;
    for (const auto& term : sel.terms) {
      bool all = true;
      for (const Requirement& r : term) all = all && Matches(r, node.labels);
      any = any || all;
    }
    if (!any) return false;
  }
  for (const Taint& t : node.taints) {
    if ((t.effect == "NoSchedule" || t.effect == "NoExecute") && !Tolerates(sel.tolerations, t))
      return false;
  }
  return true;
}

}  // namespace

bool Allows(const NodeSelection& sel, const NodeInfo& node) {
  return AllowsCompiled(sel, node, sel.dra ? CompileAll(sel.dra_selectors) : std::nullopt);
}

PodInfo ParsePod(const json& obj) {
  PodInfo p;
  const json& meta = Obj(obj, "metadata");
  p.ns = Str(meta, "namespace");
  p.name = Str(meta, "name");
  p.uid = Str(meta, "uid");
  if (p.name.empty() || p.uid.empty()) p.problem = "no metadata.name or metadata.uid";
  p.labels = StrMap(meta, "labels");
  p.annotations = StrMap(meta, "annotations");
  p.deleting = Member(meta, "deletionTimestamp") != nullptr;
  if (std::string created = Str(meta, "creationTimestamp"); !created.empty()) {
    std::tm tm{};
    if (strptime(created.c_str(), "%Y-%m-%dT%H:%M:%SZ", &tm) != nullptr)
      p.created_ms = int64_t{timegm(&tm)} * 1000;
  }
  if (auto it = p.labels.find(kPodGroupLabel); it != p.labels.end()) p.group = it->second;
  p.job = p.group.empty() ? "pod:" + p.uid : "group:" + p.ns + "/" + p.group;
  for (const json& o : Arr(meta, "ownerReferences")) {
    if (const json* c = Member(o, "controller");
        c != nullptr && c->is_boolean() && c->get<bool>()) {
      p.owner_uid = Str(o, "uid");
    }
  }
  const json& spec = Obj(obj, "spec");
  p.node_name = Str(spec, "nodeName");
  p.scheduler_name = Str(spec, "schedulerName");
  if (p.scheduler_name.empty()) p.scheduler_name = "default-scheduler";
  p.priority_class = Str(spec, "priorityClassName");
  if (const json* g = Member(spec, "terminationGracePeriodSeconds");
      g != nullptr && g->is_number_integer()) {
    p.grace_s = std::max<int64_t>(0, g->get<int64_t>());
  }
  p.selection.node_selector = StrMap(spec, "nodeSelector");
  const json& affinity = Obj(spec, "affinity");
  const json& node_aff = Obj(affinity, "nodeAffinity");
  const json& required = Obj(node_aff, "requiredDuringSchedulingIgnoredDuringExecution");
  for (const json& term : Arr(required, "nodeSelectorTerms")) {
    std::vector<Requirement> reqs;
    for (Requirement& r : Requirements(term)) {
      static const std::set<std::string> kOps = {"In",           "NotIn", "Exists",
                                                 "DoesNotExist", "Gt",    "Lt"};
      if (!kOps.contains(r.op)) p.problem = "nodeAffinity: unknown operator \"" + r.op + "\"";
      reqs.push_back(std::move(r));
    }
    if (!Arr(term, "matchFields").empty()) {
      p.unsupported.push_back("node affinity by matchFields is not supported (use labels)");
    }
    p.selection.terms.push_back(std::move(reqs));
  }
  for (const json& t : Arr(spec, "tolerations")) {
    std::string op = Str(t, "operator");
    if (op.empty()) op = "Equal";
    p.selection.tolerations.push_back(
        Toleration{Str(t, "key"), op, Str(t, "value"), Str(t, "effect")});
  }
  // A preferred term's weight: an integer from 1 to 100, as the API server checks.
  auto weight_of = [&](const json& t, const std::string& what) {
    const json* w = Member(t, "weight");
    if (w != nullptr && w->is_number_integer() && w->get<int64_t>() >= 1 &&
        w->get<int64_t>() <= 100)
      return static_cast<int>(w->get<int64_t>());
    p.problem = what + ": weight must be an integer from 1 to 100";
    return 1;
  };
  for (const json& t : Arr(node_aff, "preferredDuringSchedulingIgnoredDuringExecution")) {
    PreferredNodeTerm pref;
    pref.weight = weight_of(t, "nodeAffinity preferred term");
    const json& term = Obj(t, "preference");
    for (Requirement& r : Requirements(term)) pref.match.push_back(std::move(r));
    if (!Arr(term, "matchFields").empty()) {
      p.unsupported.push_back("node affinity by matchFields is not supported (use labels)");
    }
    p.preferred_nodes.push_back(std::move(pref));
  }
  for (const char* kind : {"podAffinity", "podAntiAffinity"}) {
    const bool anti = std::string_view(kind) == "podAntiAffinity";
    auto read_term = [&](const json& t) {
      PodAffinityTerm term;
      term.selector = SelectorOf(t, "labelSelector");
      MergeLabelKeys(t, p.labels, term.selector);
      for (const json& n : Arr(t, "namespaces")) {
        if (n.is_string()) term.namespaces.push_back(n.get<std::string>());
      }
      term.topology_key = Str(t, "topologyKey");
      if (term.topology_key.empty()) p.problem = std::string(kind) + ": a term without topologyKey";
      if (LabelSelector ns = SelectorOf(t, "namespaceSelector"); ns.given)
        term.namespace_selector = std::move(ns);
      return term;
    };
    for (const json& t :
         Arr(Obj(affinity, kind), "requiredDuringSchedulingIgnoredDuringExecution")) {
      (anti ? p.anti_affinity : p.affinity).push_back(read_term(t));
    }
    for (const json& t :
         Arr(Obj(affinity, kind), "preferredDuringSchedulingIgnoredDuringExecution")) {
      WeightedPodAffinityTerm w;
      w.weight = weight_of(t, std::string(kind) + " preferred term");
      w.term = read_term(Obj(t, "podAffinityTerm"));
      (anti ? p.preferred_anti_affinity : p.preferred_affinity).push_back(std::move(w));
    }
  }
  for (const json& c : Arr(spec, "topologySpreadConstraints")) {
    const std::string when = Str(c, "whenUnsatisfiable");
    SpreadConstraint k;
    const json* skew = Member(c, "maxSkew");
    if (skew != nullptr && skew->is_number_integer() && skew->get<int64_t>() >= 1 &&
        skew->get<int64_t>() <= 1 << 20) {
      k.max_skew = static_cast<int>(skew->get<int64_t>());
    } else {
      p.problem = "topologySpreadConstraints: maxSkew must be an integer of 1 or more";
    }
    if (const json* m = Member(c, "minDomains"); m != nullptr && !m->is_null()) {
      if (m->is_number_integer() && m->get<int64_t>() >= 1 && m->get<int64_t>() <= 1 << 20)
        k.min_domains = static_cast<int>(m->get<int64_t>());
      else
        p.problem = "topologySpreadConstraints: minDomains must be an integer of 1 or more";
    }
    k.topology_key = Str(c, "topologyKey");
    if (k.topology_key.empty()) p.problem = "topologySpreadConstraints: no topologyKey";
    if (when != "DoNotSchedule" && when != "ScheduleAnyway" && !when.empty())
      p.problem = "topologySpreadConstraints: unknown whenUnsatisfiable \"" + when + "\"";
    k.selector = SelectorOf(c, "labelSelector");
    MergeLabelKeys(c, p.labels, k.selector);
    k.honour_node_selection = Str(c, "nodeAffinityPolicy") != "Ignore";
    k.honour_taints = Str(c, "nodeTaintsPolicy") == "Honor";
    (when == "ScheduleAnyway" ? p.preferred_spread : p.spread).push_back(std::move(k));
  }
  // Resource claims: the claim each names, or (from a template) the one made for the pod.
  std::map<std::string, std::string> made;
  for (const json& st : Arr(Obj(obj, "status"), "resourceClaimStatuses"))
    made[Str(st, "name")] = Str(st, "resourceClaimName");
  for (const json& rc : Arr(spec, "resourceClaims")) {
    PodInfo::ClaimRef ref{Str(rc, "name"), Str(rc, "resourceClaimName"),
                          !Str(rc, "resourceClaimTemplateName").empty()};
    if (ref.from_template) ref.claim = made[ref.name];
    p.claims.push_back(std::move(ref));
  }
  // Effective requests, as the kubelet admits a pod: sidecars (init containers that
  // restart Always) run beside the containers; every other init container runs alone,
  // beside the sidecars started before it.
  Req containers;
  Req sidecars;
  Req init_peak;
  std::string problem;
  for (const json& c : Arr(spec, "initContainers")) {
    Req r;
    if (!AddResources(Obj(c, "resources"), r, problem)) break;
    if (Str(c, "restartPolicy") == "Always") {
      sidecars = Sum(sidecars, r);
      init_peak = Max(init_peak, sidecars);
    } else {
      init_peak = Max(init_peak, Sum(r, sidecars));
    }
  }
  bool host_port = false;
  for (const json& c : Arr(spec, "containers")) {
    Req r;
    if (!AddResources(Obj(c, "resources"), r, problem)) break;
    containers = Sum(containers, r);
    for (const json& port : Arr(c, "ports")) host_port |= Member(port, "hostPort") != nullptr;
  }
  if (host_port) p.unsupported.push_back("hostPort is not supported");
  Req total = Max(Sum(containers, sidecars), init_peak);
  if (const json* pod_res = Member(spec, "resources"); pod_res != nullptr && pod_res->is_object()) {
    Req pod_level;
    if (AddResources(*pod_res, pod_level, problem)) {  // pod-level requests replace the sum
      if (pod_level.cpus > 0) total.cpus = pod_level.cpus;
      if (pod_level.mem > 0) total.mem = pod_level.mem;
    }
  }
  Req overhead;
  const json& oh = Obj(spec, "overhead");
  if (!oh.empty()) {
    json wrapped = {{"requests", oh}};
    if (AddResources(wrapped, overhead, problem)) total = Sum(total, overhead);
  }
  if (!problem.empty() && p.problem.empty()) p.problem = problem;
  p.gpus = total.gpus;
  if (total.shared > 0) {
    if (total.gpus > 0) p.problem = "asks for nvidia.com/gpu and nvidia.com/gpu.shared at once";
    p.gpus = total.shared;
    p.shared = true;
  }
  p.cpus_milli = total.cpus;
  p.memory_bytes = total.mem;
  for (const auto& [profile, n] : total.mig) {
    if (n <= 0) continue;
    if (!p.mig_profile.empty() || n > 1) {
      p.unsupported.push_back("more than one MIG device per pod is not supported");
      break;
    }
    p.mig_profile = profile;
  }
  if (p.gpus > 0 && !p.mig_profile.empty())
    p.problem = "asks for whole GPUs and a MIG device at once";
  if (!p.claims.empty() && (p.gpus > 0 || !p.mig_profile.empty()))
    p.problem = "asks for GPUs both through resource claims and nvidia.com resources";
  const json& status = Obj(obj, "status");
  p.phase = Str(status, "phase");
  for (const json& c : Arr(status, "conditions")) {
    if (Str(c, "type") == "PodScheduled" && Str(c, "status") == "False")
      p.scheduled_message = Str(c, "message");
  }
  return p;
}

GroupInfo ParseGroup(const json& obj) {
  GroupInfo g;
  const json& meta = Obj(obj, "metadata");
  g.ns = Str(meta, "namespace");
  g.name = Str(meta, "name");
  const json* m = Member(Obj(obj, "spec"), "minMember");
  if (m != nullptr && m->is_number_integer())
    g.min_member = static_cast<int>(std::clamp<int64_t>(m->get<int64_t>(), 1, 100'000));
  return g;
}

BudgetInfo ParseBudget(const json& obj) {
  BudgetInfo b;
  const json& meta = Obj(obj, "metadata");
  b.ns = Str(meta, "namespace");
  b.name = Str(meta, "name");
  b.selector = SelectorOf(Obj(obj, "spec"), "selector");
  const json* allowed = Member(Obj(obj, "status"), "disruptionsAllowed");
  if (allowed != nullptr && allowed->is_number_integer())
    b.disruptions_allowed = allowed->get<int64_t>();
  return b;
}

bool Selects(const LabelSelector& sel, const std::map<std::string, std::string>& labels) {
  if (!sel.given) return false;
  for (const auto& [k, v] : sel.match_labels) {
    auto it = labels.find(k);
    if (it == labels.end() || it->second != v) return false;
  }
  for (const Requirement& r : sel.match_expressions) {
    if (!Matches(r, labels)) return false;
  }
  return true;
}

bool Covers(const BudgetInfo& budget, const PodInfo& pod) {
  return budget.ns == pod.ns && Selects(budget.selector, pod.labels);
}

bool PodInfo::TermSelects(const PodAffinityTerm& t, const PodInfo& other,
                          const NamespaceLabels& namespaces) const {
  bool in_ns = false;
  if (t.namespaces.empty() && !t.namespace_selector) {
    in_ns = other.ns == ns;
  } else {
    in_ns = std::find(t.namespaces.begin(), t.namespaces.end(), other.ns) != t.namespaces.end();
    if (!in_ns && t.namespace_selector) {
      static const std::map<std::string, std::string> kNone;
      auto it = namespaces.find(other.ns);
      in_ns = Selects(*t.namespace_selector, it == namespaces.end() ? kNone : it->second);
    }
  }
  return in_ns && Selects(t.selector, other.labels);
}

NamespaceLabels::value_type ParseNamespace(const json& obj) {
  const json& meta = Obj(obj, "metadata");
  return {Str(meta, "name"), StrMap(meta, "labels")};
}

std::optional<core::ModelId> ModelOf(const NodeInfo& node, const core::Catalog& catalog) {
  if (auto it = node.labels.find("gantry.dev/gpu-model"); it != node.labels.end()) {
    return catalog.Find(it->second);
  }
  if (!node.dra.gpus.empty()) {  // what the DRA driver says of its GPUs
    auto mem = node.dra.gpus.front().capacity.find(std::string(kGpuDriver) + "/memory");
    return ModelOfProduct(node.dra.product,
                          mem == node.dra.gpus.front().capacity.end() ? 0 : mem->second >> 20,
                          catalog);
  }
  auto product = node.labels.find("nvidia.com/gpu.product");
  if (product == node.labels.end()) return std::nullopt;
  // A node whose GPUs are shared names them <product>-SHARED (GPU feature discovery,
  // without renameByDefault).
  std::string_view name = product->second;
  if (name.ends_with("-SHARED")) name.remove_suffix(7);
  // A single-strategy MIG node names the profile after the product, and its memory label
  // gives the instance's memory, not the GPU's.
  const size_t mig_at = name.find(kMigProductInfix);
  int64_t mib = 0;
  if (auto m = node.labels.find("nvidia.com/gpu.memory");
      m != node.labels.end() && mig_at == std::string::npos) {
    mib = std::strtoll(m->second.c_str(), nullptr, 10);
  }
  return ModelOfProduct(name.substr(0, mig_at), mib, catalog);
}

std::optional<core::ModelId> ModelOfProduct(std::string_view product, int64_t mib,
                                            const core::Catalog& catalog) {
  std::vector<std::string> tokens = Tokens(product);
  std::optional<core::ModelId> best;
  int best_score = -1;
  int64_t best_gap = 0;
  for (size_t i = 0; i < catalog.size(); ++i) {
    const core::GpuModel& model = catalog.model(core::ModelId(static_cast<uint32_t>(i)));
    const std::vector<std::string> want = Tokens(model.name);
    if (want.empty() || std::find(tokens.begin(), tokens.end(), want[0]) == tokens.end()) continue;
    int score = 1;  // the family (H100, A100, L40S) matches
    for (size_t k = 1; k < want.size(); ++k) {
      if (std::find(tokens.begin(), tokens.end(), want[k]) != tokens.end()) ++score;
    }
    const int64_t gap = mib > 0 ? std::llabs(model.memory_bytes - mib * 1048576) : 0;
    if (score > best_score || (score == best_score && gap < best_gap)) {
      best = core::ModelId(static_cast<uint32_t>(i));
      best_score = score;
      best_gap = gap;
    }
  }
  return best;
}

namespace {

// How node `n`'s MIG devices (of the device plugin) are offered to the core, or why they
// are not. The plugin advertises counts by profile and the kubelet picks the device, so
// the counts are what must hold. Where every GPU is split into one profile as far as it
// goes (MIG manager's all-<profile> layouts), the model's own table is the node's: any
// placement the core chooses is one the node has. Otherwise (all-balanced, a custom
// layout) the counts over the node's GPUs (GPU feature discovery's nvidia.com/gpu.count)
// make one split per GPU, packed by NVIDIA's placement rules, and the core gets a model of
// its own whose profiles go at that split's places only: each profile is offered exactly
// as many times as the node has it.
struct MigOffer {
  std::optional<core::GpuModel> split;  // the node's own model; none: the GPU model's table
  int gpus = 0;
  std::map<std::string, int> per_gpu;  // instances of each profile on each GPU
  std::string name;                    // "1g.10gb", or "3g.40gb+2g.20gb+2x1g.10gb"
};

Result<MigOffer> OfferMig(const NodeInfo& n, const core::Catalog& catalog, core::ModelId id) {
  const core::GpuModel& model = catalog.model(id);
  auto refuse = [](std::string why) { return Error{"mig", std::move(why)}; };
  if (n.gpus > 0) {
    return refuse(
        "it has whole GPUs beside them (Gantry offers MIG devices on nodes whose GPUs are all "
        "split)");
  }
  std::vector<int> index;  // the node's profiles' indexes in the model's table
  for (const auto& [profile, count] : n.mig) {
    const int idx = catalog.FindProfile(id, profile);
    if (idx < 0) return refuse("profile " + profile + " is not one of the " + model.name + "'s");
    index.push_back(idx);
  }
  MigOffer offer;
  if (n.mig.size() == 1) {
    const auto& [profile, count] = *n.mig.begin();
    const int max = model.mig_profiles[static_cast<size_t>(index[0])].max_instances;
    if (count % max == 0 && count / max <= core::kMaxGpusPerNode) {
      offer.gpus = static_cast<int>(count / max);
      offer.per_gpu[profile] = max;
      offer.name = profile;
      return offer;
    }
  }
  auto label = n.labels.find("nvidia.com/gpu.count");
  char* end = nullptr;
  const long gpus = label == n.labels.end() ? 0 : std::strtol(label->second.c_str(), &end, 10);
  if (label == n.labels.end() || *end != '\0' || gpus < 1 || gpus > core::kMaxGpusPerNode) {
    return refuse(
        "its devices are not whole GPUs split into one profile, and without GPU feature "
        "discovery's label nvidia.com/gpu.count its split per GPU is not known");
  }
  // One GPU's instances, the largest first, each at the first place left for it.
  std::vector<int> instances;
  for (size_t k = 0; k < index.size(); ++k) {
    const auto& [profile, count] = *std::next(n.mig.begin(), static_cast<long>(k));
    if (count % gpus != 0) {
      return refuse(std::to_string(count) + " devices of " + profile +
                    " do not split evenly over " + std::to_string(gpus) +
                    " GPUs (nvidia.com/gpu.count)");
    }
    offer.per_gpu[profile] = static_cast<int>(count / gpus);
    for (int64_t i = 0; i < count / gpus; ++i) instances.push_back(index[k]);
  }
  auto size = [&](int idx) {
    const core::MigProfile& p = model.mig_profiles[static_cast<size_t>(idx)];
    return std::pair(p.memory_slices, p.compute_slices);
  };
  std::stable_sort(instances.begin(), instances.end(),
                   [&](int a, int b) { return size(a) > size(b); });
  int compute = 0;
  for (int idx : instances) compute += size(idx).second;
  std::vector<int> starts(instances.size(), -1);
  // Backtracking over the few places each instance may take (at most 7 instances).
  std::function<bool(size_t, uint32_t)> place = [&](size_t i, uint32_t used) {
    if (i == instances.size()) return true;
    const core::MigProfile& p = model.mig_profiles[static_cast<size_t>(instances[i])];
    for (int start : p.starts) {
      const uint32_t mask = ((1u << p.memory_slices) - 1) << start;
      // Instances of one profile in ascending places (the same split, found once).
      if ((used & mask) != 0 ||
          (i > 0 && instances[i - 1] == instances[i] && start <= starts[i - 1]))
        continue;
      starts[i] = start;
      if (place(i + 1, used | mask)) return true;
    }
    return false;
  };
  std::string split;
  for (auto it = offer.per_gpu.rbegin(); it != offer.per_gpu.rend(); ++it) {
    split += (split.empty() ? "" : "+") +
             (it->second > 1 ? std::to_string(it->second) + "x" : std::string()) + it->first;
  }
  if (compute > core::kMigComputeSlices || !place(0, 0)) {
    return refuse("its devices (" + split + " on each of " + std::to_string(gpus) +
                  " GPUs) do not fit one GPU by NVIDIA's placement rules");
  }
  core::GpuModel own;
  own.name = model.name + "/" + split;
  own.memory_bytes = model.memory_bytes;
  for (size_t k = 0; k < index.size(); ++k) {
    core::MigProfile p = model.mig_profiles[static_cast<size_t>(index[k])];
    p.starts.clear();
    for (size_t i = 0; i < instances.size(); ++i) {
      if (instances[i] == index[k]) p.starts.push_back(starts[i]);
    }
    std::sort(p.starts.begin(), p.starts.end());
    p.max_instances = static_cast<int>(p.starts.size());
    own.mig_profiles.push_back(std::move(p));
  }
  offer.split = std::move(own);
  offer.gpus = static_cast<int>(gpus);
  offer.name = split;
  return offer;
}

}  // namespace

Result<ClusterView> BuildCluster(const std::vector<const NodeInfo*>& nodes,
                                 const std::vector<NodeSelection>& selections,
                                 const spec::ClusterConfig& config,
                                 const std::map<std::string, Usage>& foreign) {
  // The config's models, and a model of their own for nodes whose MIG split is not one of
  // a model's tables (OfferMig), one by split.
  core::Catalog catalog = config.cluster.catalog();
  std::map<std::string, uint32_t> splits;
  struct Shape {
    int gpus;
    uint32_t model;
    std::string mig;  // the profile of MIG GPUs; empty: whole GPUs; "*": DRA's, any
    bool single;
    bool dra;
    core::Sharing shared;  // shared GPUs' strategy (kExclusive: not shared)
    int replicas;          // per shared GPU
    bool renamed;          // nvidia.com/gpu.shared
    int domains;
    int64_t cpus, mem;
    std::vector<bool> allowed;
    int pool;  // the config's pool (kubernetes.pools) whose node_labels it has; -1: none
    auto operator<=>(const Shape&) const = default;
  };
  const std::vector<spec::KubernetesConfig::Pool>& by_label = config.kubernetes.pools;
  struct Member {
    std::string leaf, name;
    const NodeInfo* node;
  };
  std::map<Shape, std::vector<Member>> groups;
  ClusterView view;
  // Each selection's device selectors compiled once, not once per node.
  std::vector<std::optional<std::vector<DeviceSelector>>> devices;
  for (const NodeSelection& sel : selections)
    devices.push_back(sel.dra ? CompileAll(sel.dra_selectors) : std::nullopt);
  for (const NodeInfo* n : nodes) {
    if (!n->problem.empty()) {
      view.skipped.push_back(n->name + ": " + n->problem);
      continue;
    }
    Usage used;
    if (auto it = foreign.find(n->name); it != foreign.end()) used = it->second;
    Shape s;
    // Shared GPUs: what other schedulers' pods hold is in replicas; the GPUs whose
    // replicas are not all free are taken off (the device plugin, not Gantry, picks which
    // GPU a replica is on).
    s.gpus = static_cast<int>(
        std::max<int64_t>(0, (int64_t{n->gpus} * n->replicas - used.gpus) / n->replicas));
    s.model = UINT32_MAX;
    s.single = false;
    s.dra = false;
    s.shared = n->sharing;
    s.replicas = n->replicas;
    s.renamed = n->renamed;
    s.domains = 1;
    if (!n->dra.problem.empty()) view.skipped.push_back(n->name + ": " + n->dra.problem);
    if (!n->dra.gpus.empty() && (n->gpus > 0 || !n->mig.empty())) {
      view.skipped.push_back(n->name +
                             ": its DRA GPUs are not offered: it advertises the device plugin's "
                             "GPUs too");
    } else if (!n->dra.gpus.empty()) {
      // GPUs through DRA: those no other claim holds, in the driver's order; a GPU one of
      // whose MIG devices another claim holds is held whole.
      std::vector<bool> held(n->dra.gpus.size(), false);
      for (size_t i = 0; i < n->dra.gpus.size(); ++i)
        held[i] = used.devices.contains(n->dra.gpus[i].name);
      for (size_t i = 0; i < n->dra.migs.size(); ++i) {
        if (used.devices.contains(n->dra.migs[i].name))
          held[static_cast<size_t>(n->dra.mig_parent[i])] = true;
      }
      std::vector<int>& free = view.dra_gpus[n->name];
      for (size_t i = 0; i < held.size(); ++i) {
        if (!held[i]) free.push_back(static_cast<int>(i));
      }
      s.gpus = static_cast<int>(std::min<size_t>(free.size(), core::kMaxGpusPerNode));
      free.resize(static_cast<size_t>(s.gpus));
      s.dra = true;
      // The NVLink domains, while no GPU is held (a held one would split them unevenly).
      if (free.size() == held.size()) s.domains = n->dra.nvlink_domains;
    }
    if (n->gpus > 0 || !n->mig.empty() || s.dra) {
      auto model = ModelOf(*n, catalog);
      if (!model) {
        view.skipped.push_back(n->name +
                               ": its GPU model is not known (labels nvidia.com/gpu.product, "
                               "gantry.dev/gpu-model)");
        continue;
      }
      s.model = model->v;
    }
    if (s.dra && !n->dra.migs.empty() && catalog.model(core::ModelId(s.model)).mig_capable())
      s.mig = "*";  // MIG devices at any of the core's placements
    if (!n->mig.empty() && !s.dra) {
      auto offer = OfferMig(*n, catalog, core::ModelId(s.model));
      if (!offer) {
        view.skipped.push_back(n->name +
                               ": its MIG devices are not offered: " + offer.error().message);
      } else {
        if (offer->split) {
          auto [at, added] = splits.emplace(offer->split->name, 0);
          if (added) {
            auto id = catalog.Add(*offer->split);
            if (!id) return Error{"kubernetes", "node " + n->name + ": " + id.error().ToString()};
            at->second = id->v;
          }
          s.model = at->second;
        }
        // What other schedulers' pods hold is taken off in whole GPUs' worth of instances,
        // rounded up, so the core never offers an instance the node lacks.
        int64_t held = 0;
        for (const auto& [profile, per_gpu] : offer->per_gpu) {
          int64_t used_here = used.gpus * n->mig_single;
          if (auto u = used.mig.find(profile); u != used.mig.end()) used_here += u->second;
          held = std::max<int64_t>(held, (used_here + per_gpu - 1) / per_gpu);
        }
        s.gpus = static_cast<int>(std::max<int64_t>(0, offer->gpus - held));
        s.mig = offer->name;
        s.single = n->mig_single;
      }
    }
    if (s.gpus == 0) {
      s.model = UINT32_MAX;
      s.mig.clear();
      s.single = false;
      s.dra = false;
      s.shared = core::Sharing::kExclusive;
      s.replicas = 1;
      s.renamed = false;
      s.domains = 1;
    }
    s.cpus = std::max<int64_t>(0, n->cpus_milli - used.cpus_milli);
    s.mem = std::max<int64_t>(0, n->memory_bytes - used.memory_bytes);
    for (size_t i = 0; i < selections.size(); ++i)
      s.allowed.push_back(AllowsCompiled(selections[i], *n, devices[i]));
    s.pool = -1;
    for (size_t i = 0; i < by_label.size() && s.pool < 0; ++i) {
      const bool has_all = std::all_of(by_label[i].node_labels.begin(),
                                       by_label[i].node_labels.end(), [&](const auto& l) {
                                         auto it = n->labels.find(l.first);
                                         return it != n->labels.end() && it->second == l.second;
                                       });
      if (has_all) s.pool = static_cast<int>(i);
    }
    // A pool's NVLink domains, where the node's free GPUs split evenly (DRA says its own).
    if (s.pool >= 0 && !s.dra && s.gpus > 0) {
      const int d = by_label[static_cast<size_t>(s.pool)].nvlink_domains;
      if (d > 0 && s.gpus % d == 0) s.domains = d;
    }
    std::string leaf;
    if (!config.kubernetes.leaf_label.empty()) {
      if (auto it = n->labels.find(config.kubernetes.leaf_label); it != n->labels.end())
        leaf = it->second;
    }
    groups[s].push_back(Member{leaf, n->name, n});
  }
  std::vector<core::PoolSpec> pools;
  std::vector<const Shape*> shapes;
  std::map<int, int> named;  // config pool -> groups named after it so far
  std::set<std::string> used;
  for (auto& [shape, members] : groups) {
    std::sort(members.begin(), members.end(), [](const Member& a, const Member& b) {
      return std::tie(a.leaf, a.name) < std::tie(b.leaf, b.name);
    });
    core::PoolSpec p;
    // (A split's model is named MODEL/SPLIT: the pool says MODEL and its split.)
    const std::string& model_name =
        shape.gpus > 0 ? catalog.model(core::ModelId(shape.model)).name : std::string();
    p.name = (shape.gpus > 0 ? BaseModelName(model_name) + "x" + std::to_string(shape.gpus)
                             : std::string("cpu")) +
             (shape.mig.empty() || shape.dra ? "" : "-mig-" + shape.mig) +
             (shape.shared == core::Sharing::kExclusive
                  ? ""
                  : std::string(shape.shared == core::Sharing::kMps ? "-mps" : "-ts") +
                        std::to_string(shape.replicas)) +
             "-" + std::to_string(pools.size());
    if (shape.pool >= 0) {  // a pool by label: its name (NAME, NAME-2, ... by shape), spot
      const spec::KubernetesConfig::Pool& cp = by_label[static_cast<size_t>(shape.pool)];
      p.name.clear();
      for (int& k = named[shape.pool]; p.name.empty() || used.contains(p.name);)
        p.name = cp.name + (++k == 1 ? "" : "-" + std::to_string(k));
      p.spot = cp.spot;
    } else if (shape.dra) {
      p.name = "dra-" + p.name;
    }
    // (A shape's name may be one a config pool took before it: kept apart.)
    while (used.contains(p.name)) p.name += "-" + std::to_string(pools.size());
    used.insert(p.name);
    p.count = static_cast<int>(members.size());
    p.gpus = shape.gpus;
    if (shape.gpus > 0) p.model = core::ModelId(shape.model);
    p.nvlink_domains = shape.domains;
    if (shape.dra) {
      if (!shape.mig.empty()) p.sharing |= core::Bit(core::Sharing::kMig);
      view.devices.push_back(PoolDevices{"", false, true, core::Sharing::kExclusive, 1, false, {}});
    } else {
      if (!shape.mig.empty()) p.sharing = core::Bit(core::Sharing::kMig);
      if (shape.shared != core::Sharing::kExclusive) p.sharing |= core::Bit(shape.shared);
      PoolDevices d{shape.mig,      shape.single,  false, shape.shared,
                    shape.replicas, shape.renamed, {}};
      if (!shape.mig.empty()) {
        for (const core::MigProfile& m : catalog.model(core::ModelId(shape.model)).mig_profiles) {
          if (shape.mig == m.name || shape.model >= config.cluster.catalog().size())
            d.profiles.push_back(m.name);
        }
      }
      view.devices.push_back(std::move(d));
    }
    p.cpus_milli = shape.cpus;
    p.memory_bytes = shape.mem;
    std::map<std::string, int> leaves;
    for (const Member& m : members) {
      p.node_names.push_back(m.name);
      const int leaf = leaves.emplace(m.leaf, static_cast<int>(leaves.size())).first->second;
      p.node_leaves.push_back(leaf);
    }
    pools.push_back(std::move(p));
    shapes.push_back(&shape);
  }
  view.pools_of.resize(selections.size());
  for (size_t pi = 0; pi < shapes.size(); ++pi) {
    for (size_t s = 0; s < selections.size(); ++s) {
      if (shapes[pi]->allowed[s])
        view.pools_of[s].push_back(core::PoolId(static_cast<uint32_t>(pi)));
    }
  }
  auto cluster = core::Cluster::Build(config.cluster.name(), catalog, std::move(pools));
  if (!cluster) return cluster.error();
  view.cluster = std::move(cluster).value();
  for (const NodeInfo* n : nodes) {
    if (n->ready && !n->unschedulable) continue;
    if (auto id = view.cluster.FindNode(n->name)) view.down.push_back(*id);
  }
  return view;
}

std::optional<std::string> WhyNotAlike(const std::vector<const PodInfo*>& pods) {
  const PodInfo& a = *pods.front();
  for (const PodInfo* b : pods) {
    if (b->gpus != a.gpus || b->cpus_milli != a.cpus_milli || b->memory_bytes != a.memory_bytes ||
        b->mig_profile != a.mig_profile) {
      return "the pods of a group must ask for the same resources (" + a.name + " and " + b->name +
             " differ)";
    }
    if (!(b->selection == a.selection)) {
      return "the pods of a group must select the same nodes (" + a.name + " and " + b->name +
             " differ)";
    }
    if (b->priority_class != a.priority_class) {
      return "the pods of a group must have the same priority class (" + a.name + " and " +
             b->name + " differ)";
    }
  }
  return std::nullopt;
}

Result<std::optional<double>> AnnotationNumber(const PodInfo& pod, const char* key, double lo,
                                               double hi) {
  auto it = pod.annotations.find(key);
  if (it == pod.annotations.end()) return std::optional<double>();
  char* end = nullptr;
  const double v = std::strtod(it->second.c_str(), &end);
  if (end == it->second.c_str() || *end != '\0' || !(v >= lo && v <= hi)) {
    return Error{std::string("annotation ") + key, "\"" + it->second + "\" must be a number from " +
                                                       std::to_string(static_cast<int64_t>(lo)) +
                                                       " to " +
                                                       std::to_string(static_cast<int64_t>(hi))};
  }
  return std::optional<double>(v);
}

std::optional<core::QueueId> QueueOf(const std::string& ns, const spec::ClusterConfig& config) {
  const spec::KubernetesConfig& k = config.kubernetes;
  std::optional<core::QueueId> queue;
  for (const auto& [name, q] : k.namespaces) {
    if (name == ns) queue = q;
  }
  if (!queue) queue = k.default_queue;
  if (!queue) queue = config.queues.Find(ns);
  if (!queue) queue = config.queues.Find("default");
  return queue;
}

Result<core::JobSpec> JobOf(const std::vector<const PodInfo*>& pods,
                            const spec::ClusterConfig& config) {
  const PodInfo& p = *pods.front();
  const spec::KubernetesConfig& k = config.kubernetes;
  core::JobSpec job;
  job.id = p.group.empty() ? p.ns + "/" + p.name : p.ns + "/" + p.group;
  std::optional<core::QueueId> queue = QueueOf(p.ns, config);
  if (!queue) {
    return Error{"namespace", "namespace " + p.ns +
                                  " maps to no queue (kubernetes.namespaces or default_queue in "
                                  "Gantry's config)"};
  }
  job.queue = *queue;
  job.tier = core::Tier::kStandard;
  for (const auto& [cls, tier] : k.priority_classes) {
    if (cls == p.priority_class) job.tier = tier;
  }
  job.replicas = static_cast<int>(pods.size());
  job.gpus = static_cast<int>(std::min<int64_t>(p.gpus, core::kMaxGpusPerNode + 1));
  job.cpus_milli = p.cpus_milli;
  job.memory_bytes = p.memory_bytes;
  job.models = 0;
  for (size_t m = 0; m < config.cluster.catalog().size() && m < core::kMaxModels; ++m)
    job.models |= core::ModelMask{1} << m;
  job.mig_index.assign(config.cluster.catalog().size(), -1);
  auto vram = AnnotationNumber(p, kVramAnnotation, 0, 4096);
  if (!vram) return vram.error();
  if (*vram) job.vram_bytes = static_cast<int64_t>(**vram * core::kGB);
  auto checkpoint = AnnotationNumber(p, kCheckpointAnnotation, 0, 365.0 * 86400);
  if (!checkpoint) return checkpoint.error();
  if (*checkpoint) job.checkpoint = static_cast<core::Ticks>(**checkpoint * 1000);
  auto runtime = AnnotationNumber(p, kRuntimeAnnotation, 1, 365.0 * 86400);
  if (!runtime) return runtime.error();
  if (*runtime) job.runtime_estimate = static_cast<core::Ticks>(**runtime * 1000);
  if (auto it = p.annotations.find(kTopologyAnnotation); it != p.annotations.end()) {
    static const std::pair<const char*, core::Topology> kTopologies[] = {
        {"nvlink", core::Topology::kNvlink},
        {"node", core::Topology::kNode},
        {"leaf", core::Topology::kLeaf},
        {"spine", core::Topology::kSpine}};
    bool found = false;
    for (const auto& [name, t] : kTopologies) {
      if (it->second == name) {
        job.topology = t;
        found = true;
      }
    }
    if (!found) {
      return Error{std::string("annotation ") + kTopologyAnnotation,
                   "\"" + it->second + "\" must be one of nvlink, node, leaf, spine"};
    }
  }
  // Which tiers a queue may use (queues[].tiers): a namespace whose queue may not use the
  // pod's priority class's tier is refused, as a job spec asking for it is.
  if (auto why = config.queues.WhyTierRefused(job.queue, job.tier)) {
    return Error{"priorityClassName", "priority class " + p.priority_class + ": " + *why};
  }
  const core::Ticks cap = config.policy.max_grace[static_cast<size_t>(job.tier)];
  job.grace = std::min<core::Ticks>(p.grace_s * 1000, cap);
  return job;
}

std::optional<std::string> FitDevices(const PodInfo& pod, const ClusterView& view,
                                      const core::Catalog& catalog, core::JobSpec& job) {
  if (pod.gpus == 0 && pod.mig_profile.empty()) return std::nullopt;  // CPU only: any node
  std::vector<core::PoolId> whole, mig, single, shared;
  std::set<std::string> single_profiles;
  std::set<std::pair<core::Sharing, int>> shared_kinds;
  bool whole_gpus = false;
  for (core::PoolId p : job.pools) {
    const PoolDevices& d = view.devices[p.v];
    if (d.dra != pod.selection.dra) continue;  // claims go to DRA's GPUs, and only they do
    if (d.dra) {
      (pod.mig_profile.empty() ? whole : mig).push_back(p);
      whole_gpus = true;
    } else if (pod.shared != d.renamed) {
      continue;  // nvidia.com/gpu.shared is only on shared GPUs renamed so, and only it is
    } else if (d.shared != core::Sharing::kExclusive) {
      shared.push_back(p);
      shared_kinds.emplace(d.shared, d.replicas);
    } else if (d.mig_profile.empty()) {
      whole.push_back(p);
      whole_gpus |= view.cluster.pool(p).spec.gpus > 0;
    } else if (d.single) {
      single.push_back(p);
      single_profiles.insert(d.profiles.front());
    } else if (std::find(d.profiles.begin(), d.profiles.end(), pod.mig_profile) !=
               d.profiles.end()) {
      mig.push_back(p);
    }
  }
  // Shared GPUs: asked by name (nvidia.com/gpu.shared), or nvidia.com/gpu where the
  // selection allows nothing else; a whole GPU is never a replica unasked.
  if (pod.mig_profile.empty() &&
      (pod.shared || (!whole_gpus && single.empty() && !shared.empty()))) {
    if (shared.empty()) {
      return std::string("no node its selection allows offers ") + kSharedGpuResource +
             " (shared GPUs: labels nvidia.com/gpu.replicas and nvidia.com/gpu.sharing-strategy)";
    }
    if (shared_kinds.size() > 1) {
      return "its node selection allows shared GPUs of several kinds (strategy or replicas "
             "differ): select one, e.g. with the node selector nvidia.com/gpu.replicas";
    }
    const auto [mode, replicas] = *shared_kinds.begin();
    if (pod.gpus > 1) {
      return "asks for " + std::to_string(pod.gpus) +
             " replicas of shared GPUs; Gantry places one replica per pod (more replicas of a "
             "shared GPU are not more of it)";
    }
    job.pools = std::move(shared);
    job.sharing = mode;
    job.gpus = 0;
    job.share_milli = 1000 / replicas;
    return std::nullopt;
  }
  std::string profile = pod.mig_profile;
  if (!profile.empty()) {
    if (mig.empty() && pod.selection.dra) {
      return "no node offers MIG devices of " + profile + " that its claims' selectors allow";
    }
    if (mig.empty()) {
      return "no node its selection allows offers nvidia.com/mig-" + profile +
             " (Gantry offers MIG devices on nodes whose GPUs are all split, each the same way: "
             "its log says which nodes' devices are left out and why)";
    }
    job.pools = std::move(mig);
  } else if (whole_gpus || single.empty()) {
    job.pools = std::move(whole);  // whole GPUs are never a MIG device unasked
  } else {
    // Only single-strategy MIG nodes: nvidia.com/gpu there is one MIG device.
    if (single_profiles.size() > 1) {
      std::string names;
      for (const std::string& s : single_profiles) names += (names.empty() ? "" : ", ") + s;
      return "its node selection allows single-strategy MIG nodes of several profiles (" + names +
             "): select one, e.g. with the node selector nvidia.com/gpu.product";
    }
    if (pod.gpus > 1) {
      return "asks for " + std::to_string(pod.gpus) +
             " nvidia.com/gpu on single-strategy MIG nodes; Gantry places one MIG device per pod";
    }
    profile = *single_profiles.begin();
    job.pools = std::move(single);
  }
  if (profile.empty()) return std::nullopt;
  job.sharing = core::Sharing::kMig;
  job.gpus = 0;
  job.mig_profile = profile;
  // The models that have the profile, a node's own split's among them (the pod names no
  // model: its node selection chose the pools).
  job.models = job.ResolveMigIndex(catalog);
  bool holds = job.vram_bytes <= 0;
  for (size_t m = 0; m < catalog.size(); ++m) {
    const int idx = job.mig_index[m];
    if (idx >= 0)
      holds |= catalog.model(core::ModelId(static_cast<uint32_t>(m)))
                   .mig_profiles[static_cast<size_t>(idx)]
                   .memory_bytes >= job.vram_bytes;
  }
  if (!holds) {
    return std::string("annotation ") + kVramAnnotation +
           " asks for more memory than MIG profile " + profile + " has";
  }
  return std::nullopt;
}

}  // namespace gantry::kube
