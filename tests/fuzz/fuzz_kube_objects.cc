// Fuzzes what gantryd --kubernetes reads from the API server (kube/objects.h): any bytes,
// parsed as JSON, read as a node, a pod, a namespace, a PodGroup and a PodDisruptionBudget, then
// made into a cluster and a job. Each gives a value (malformed ones with `problem` set) or a
// refusal, never a crash or a throw: a hostile or broken object must not stop the
// scheduler or block other pods.
#include <cstdint>
#include <map>
#include <string>
#include <string_view>

#include "kube/objects.h"
#include "spec/config_reader.h"

namespace {

const gantry::spec::ClusterConfig& Config() {
  static const gantry::spec::ClusterConfig config = [] {
    gantry::spec::Diagnostics diags;
    auto c = gantry::spec::ParseClusterConfig(
        "queues:\n  - name: a\nkubernetes:\n  default_queue: a\n  leaf_label: leaf\n", "fuzz.yaml",
        diags);
    if (!c) __builtin_trap();
    return *c;
  }();
  return config;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace gantry::kube;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const nlohmann::json obj = nlohmann::json::parse(text, nullptr, false);
  if (obj.is_discarded()) return 0;
  NodeInfo node = ParseNode(obj);
  // Dynamic Resource Allocation: the same object as a slice, a class and a claim; its
  // selectors through the CEL subset, whatever they say.
  const SliceInfo slice = ParseSlice(obj);
  node.dra = GpusOf({&slice});
  if (node.dra.mig_parent.size() != node.dra.migs.size()) __builtin_trap();
  const ClassInfo cls = ParseClass(obj);
  const ClaimInfo claim = ParseClaim(obj);
  if (claim.reserved_names.size() != claim.reserved_for.size()) __builtin_trap();
  (void)ReservationPatch(claim, "p", "u");
  for (const std::string& e : cls.selectors) {
    auto sel = DeviceSelector::Compile(e);
    if (sel && !slice.devices.empty()) (void)sel->Matches(slice.driver, slice.devices.front());
  }
  auto ask = AskOf({&claim}, {{cls.name, cls}});
  if (ask && ask->gpus < 0) __builtin_trap();
  const PodInfo pod = ParsePod(obj);
  // The same object as a namespace, whose labels a term's namespaceSelector reads.
  const NamespaceLabels namespaces = {ParseNamespace(obj)};
  for (const PodAffinityTerm& t : pod.anti_affinity) (void)pod.TermSelects(t, pod, namespaces);
  for (const PodAffinityTerm& t : pod.affinity) (void)pod.TermSelects(t, pod, namespaces);
  (void)ParseGroup(obj);
  const BudgetInfo budget = ParseBudget(obj);
  (void)Covers(budget, pod);
  (void)Allows(pod.selection, node);
  (void)pod.selection.Key();
  std::map<std::string, Usage> foreign;
  Usage& used = foreign[node.name];
  used = Usage{pod.gpus, pod.cpus_milli, pod.memory_bytes, {}, {}};
  if (!pod.mig_profile.empty()) used.mig[pod.mig_profile] = 1;
  auto view = BuildCluster({&node}, {pod.selection}, Config(), foreign);
  if (view && view->pools_of.size() != 1) __builtin_trap();
  if (view && view->devices.size() != view->cluster.pools().size()) __builtin_trap();
  if (pod.problem.empty()) {
    auto job = JobOf({&pod}, Config());
    if (job && (job->replicas != 1 || job->gpus < 0)) __builtin_trap();
    if (job && view) {
      job->pools = view->pools_of[0];
      if (!FitDevices(pod, *view, Config().cluster.catalog(), *job)) {
        for (gantry::core::PoolId p : job->pools) {
          const bool mig = !view->devices[p.v].mig_profile.empty();
          if (mig && job->sharing != gantry::core::Sharing::kMig && job->gpus > 0) __builtin_trap();
        }
      }
    }
  }
  return 0;
}
