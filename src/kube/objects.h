// Kubernetes objects as the scheduler reads them: nodes, pods and pod groups parsed from
// the API's JSON into plain values, the node selection a pod asks for, and the mapping
// onto the core (docs/kubernetes.md): a cluster built from the nodes, a JobSpec from a
// gang of pods.
// Parsing never throws: a malformed object is a value with `problem` set, which the
// scheduler reports on the pod and skips, so one bad pod never blocks the others.
// Thread-safety: plain values and pure functions.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "base/result.h"
#include "core/model/cluster.h"
#include "core/model/job.h"
#include "kube/dra.h"
#include "spec/config_reader.h"

namespace gantry::kube {

// The GPU resource of NVIDIA's device plugin, and its MIG resources' prefix.
inline constexpr const char* kGpuResource = "nvidia.com/gpu";
inline constexpr const char* kMigResourcePrefix = "nvidia.com/mig-";
// The device plugin's shared GPUs under a time-slicing or MPS config with renameByDefault:
// each is one replica of a GPU (without the rename they are nvidia.com/gpu).
inline constexpr const char* kSharedGpuResource = "nvidia.com/gpu.shared";
// GPU feature discovery's product label on a single-strategy MIG node: <product>-MIG-<profile>.
inline constexpr const char* kMigProductInfix = "-MIG-";
// scheduler-plugins' coscheduling: the pod label naming its PodGroup.
inline constexpr const char* kPodGroupLabel = "scheduling.x-k8s.io/pod-group";
// Gantry's pod annotations (docs/kubernetes.md).
inline constexpr const char* kVramAnnotation = "gantry.dev/vram-gb";
inline constexpr const char* kCheckpointAnnotation = "gantry.dev/checkpoint-interval-s";
inline constexpr const char* kTopologyAnnotation = "gantry.dev/topology";
inline constexpr const char* kRuntimeAnnotation = "gantry.dev/runtime-estimate-s";

// A Kubernetes quantity ("8", "500m", "2Gi", "1.5e3") times `scale` (1000 for CPU
// milli-units, 1 for bytes and counts), rounded up; nullopt when not a quantity.
std::optional<int64_t> ParseQuantity(std::string_view text, int64_t scale = 1);

struct Taint {
  std::string key, value, effect;
  bool operator==(const Taint&) const = default;
};

struct NodeInfo {
  std::string name;
  std::map<std::string, std::string> labels;
  std::vector<Taint> taints;
  bool unschedulable = false;  // cordoned
  bool ready = false;
  int gpus = 0;  // allocatable nvidia.com/gpu
  int64_t cpus_milli = 0, memory_bytes = 0, pods = 110;
  // MIG devices by profile: allocatable nvidia.com/mig-<profile> (the device plugin's
  // mixed strategy), or with the single strategy (label nvidia.com/mig.strategy=single)
  // its nvidia.com/gpu, whose devices are then all MIG devices of the profile named in
  // nvidia.com/gpu.product (`gpus` is then 0 and `mig_single` true).
  std::map<std::string, int64_t> mig;
  bool mig_single = false;
  // GPUs the device plugin shares (GPU feature discovery's nvidia.com/gpu.sharing-strategy
  // time-slicing or mps, nvidia.com/gpu.replicas R): each GPU is R replicas, advertised as
  // nvidia.com/gpu or, renamed, nvidia.com/gpu.shared. `gpus` is then the physical GPUs
  // (allocatable / R), `sharing` kTimeslice or kMps and `replicas` R; kExclusive and 1
  // otherwise.
  core::Sharing sharing = core::Sharing::kExclusive;
  int replicas = 1;
  bool renamed = false;  // its shared GPUs are nvidia.com/gpu.shared
  NodeGpus dra;          // its GPUs published through Dynamic Resource Allocation (kube/dra.h)
  std::string problem;   // why it cannot be used, if so
  // Every field is one the scheduler reads: a node that compares equal needs no rebuild.
  bool operator==(const NodeInfo&) const = default;
};
NodeInfo ParseNode(const nlohmann::json& obj);

struct Requirement {  // a node selector requirement
  std::string key, op;
  std::vector<std::string> values;
  bool operator==(const Requirement&) const = default;
};
struct Toleration {
  std::string key, op, value, effect;
  bool operator==(const Toleration&) const = default;
};

// Where a pod may go: everything of its spec that selects nodes. Equal for pods that may
// go to the same nodes.
struct NodeSelection {
  std::map<std::string, std::string> node_selector;
  std::vector<std::vector<Requirement>> terms;  // required node affinity: any term, all of it
  std::vector<Toleration> tolerations;
  // Its resource claims (resolved by the scheduler): devices of gpu.nvidia.com that all
  // pass these selectors, GPUs or MIG devices of `dra_mig`.
  bool dra = false;
  std::string dra_mig;
  std::vector<std::string> dra_selectors;
  // The one node it may go to: where a ResourceClaim it shares with another pod is
  // allocated (empty: any).
  std::string node;
  bool operator==(const NodeSelection&) const = default;
  std::string Key() const;  // a canonical text, equal exactly when the selections are
};
bool Allows(const NodeSelection& sel, const NodeInfo& node);
// Whether one of `tols` tolerates taint `t` (its key, value and effect).
bool Tolerates(const std::vector<Toleration>& tols, const Taint& t);

// A label selector (matchLabels and matchExpressions): a null one selects nothing, an
// empty one everything.
struct LabelSelector {
  bool given = false;
  std::map<std::string, std::string> match_labels;
  std::vector<Requirement> match_expressions;
  bool operator==(const LabelSelector&) const = default;
};
bool Selects(const LabelSelector& sel, const std::map<std::string, std::string>& labels);

// Namespaces' labels by name (a pod affinity term's namespaceSelector reads them).
using NamespaceLabels = std::map<std::string, std::map<std::string, std::string>>;

// The node label that names the node itself, as topology keys use it.
inline constexpr const char* kHostnameLabel = "kubernetes.io/hostname";

// A required pod (anti-)affinity term: the pods its selector matches (in its namespaces)
// and the domains of `topology_key` they are in (the nodes sharing a value of that node
// label; kubernetes.io/hostname is the node itself). Affinity: a pod goes to a domain
// that holds one; anti-affinity: no two pods, one of which has the term and the other
// matches it, in one domain. `matchLabelKeys` and `mismatchLabelKeys` are in `selector`.
struct PodAffinityTerm {
  LabelSelector selector;
  // The namespaces of the pods it covers: those listed and those `namespace_selector`
  // selects by their labels ({}: all); neither given: the pod's own.
  std::vector<std::string> namespaces;
  std::optional<LabelSelector> namespace_selector;
  std::string topology_key;
  bool operator==(const PodAffinityTerm&) const = default;
};

// Preferred (soft) terms and their weights (1-100), as kube-scheduler weighs them: a
// node's score is the sum of the weights of the node affinity preferences its labels
// match, plus those of the pod affinity terms whose domain there holds a pod they select,
// less those of such anti-affinity terms. Placement tries the best-scoring nodes first.
struct PreferredNodeTerm {
  int weight = 1;
  std::vector<Requirement> match;  // all of them (none: every node)
  bool operator==(const PreferredNodeTerm&) const = default;
};
struct WeightedPodAffinityTerm {
  int weight = 1;
  PodAffinityTerm term;
  bool operator==(const WeightedPodAffinityTerm&) const = default;
};
// Whether a node with these labels matches every requirement.
bool MatchesAll(const std::vector<Requirement>& match,
                const std::map<std::string, std::string>& labels);

// A topology spread constraint with whenUnsatisfiable DoNotSchedule: of the domains of
// `topology_key` among the nodes the pod may use, a pod goes to one where the pods of its
// namespace `selector` matches (itself counted) would exceed the fewest in any such domain
// by at most `max_skew` (0 pods in the fewest while there are under `min_domains`).
// `matchLabelKeys` are in `selector` (the pod's values of those labels, as kube-apiserver
// merges them).
struct SpreadConstraint {
  int max_skew = 1;
  std::string topology_key;
  LabelSelector selector;
  int min_domains = 1;
  bool honour_node_selection = true;  // nodeAffinityPolicy Honor (else Ignore)
  bool honour_taints = false;         // nodeTaintsPolicy Honor (else Ignore)
  bool operator==(const SpreadConstraint&) const = default;
};

struct PodInfo {
  std::string ns, name, uid, node_name, scheduler_name, phase, priority_class, group;
  std::string owner_uid;   // the controller owning it (a Job, a ReplicaSet), if any
  bool deleting = false;   // metadata.deletionTimestamp set
  int64_t created_ms = 0;  // metadata.creationTimestamp, Unix ms (0: not given)
  bool terminal() const { return phase == "Succeeded" || phase == "Failed"; }
  // The job it belongs to in gantryd --kubernetes: "group:NS/GROUP" for a PodGroup's pod,
  // "pod:UID" for a lone pod (made once here: a pass looks it up for every pod).
  std::string job;
  // Effective requests (containers, init and sidecar containers, overhead).
  int64_t gpus = 0, cpus_milli = 0, memory_bytes = 0;
  std::string mig_profile;  // nvidia.com/mig-<profile>: 1 (more per pod is refused)
  bool shared = false;      // its `gpus` are nvidia.com/gpu.shared: replicas of shared GPUs
  // spec.resourceClaims: the ResourceClaim each names (from a template: the one made for
  // the pod, empty until it is). The scheduler resolves them into gpus or mig_profile,
  // and into the node selection (`selection.dra`).
  struct ClaimRef {
    std::string name, claim;
    bool from_template = false;
    // The claim is allocated for another pod already (the first in its reservedFor): this
    // one shares its devices, on their node, and holds none of them (set by the scheduler).
    bool shared = false;
  };
  std::vector<ClaimRef> claims;
  std::string claims_wait;  // why its claims do not say yet what it needs, if so
  NodeSelection selection;
  int64_t grace_s = 30;
  std::map<std::string, std::string> annotations;
  std::map<std::string, std::string> labels;
  // Its required pod affinity (the scheduler places it in a domain of a pod each term
  // matches) and anti-affinity (off the domains of the pods they match, and other pods'
  // terms off its own).
  std::vector<PodAffinityTerm> affinity, anti_affinity;
  std::vector<SpreadConstraint> spread;  // topologySpreadConstraints that DoNotSchedule
  // Its preferred node affinity and pod (anti-)affinity (preferredDuringScheduling...).
  std::vector<PreferredNodeTerm> preferred_nodes;
  std::vector<WeightedPodAffinityTerm> preferred_affinity, preferred_anti_affinity;
  std::vector<SpreadConstraint> preferred_spread;  // those that ScheduleAnyway
  // Whether term `t` of its own covers pod `other` (its namespace and labels);
  // `namespaces`: each namespace's labels, for a term's namespace selector (a namespace
  // not in it has none).
  bool TermSelects(const PodAffinityTerm& t, const PodInfo& other,
                   const NamespaceLabels& namespaces = {}) const;
  // Why Gantry cannot schedule it as asked (pod affinity, topology spread, hostPort, ...);
  // each goes into its PodScheduled=False message.
  std::vector<std::string> unsupported;
  std::string problem;  // malformed: no name, a bad quantity, ...
  // Our last PodScheduled=False message, read back so a restart does not rewrite it.
  std::string scheduled_message;
};
PodInfo ParsePod(const nlohmann::json& obj);
// A Namespace: its name and labels.
NamespaceLabels::value_type ParseNamespace(const nlohmann::json& obj);

// A gang's group (scheduling.x-k8s.io/v1alpha1 PodGroup).
struct GroupInfo {
  std::string ns, name;
  int min_member = 1;
};
GroupInfo ParseGroup(const nlohmann::json& obj);

// A PodDisruptionBudget (policy/v1): which pods it covers and how many of them may be
// evicted now.
struct BudgetInfo {
  std::string ns, name;
  LabelSelector selector;  // a null selector covers no pod; an empty one every pod
  int64_t disruptions_allowed = 0;
};
BudgetInfo ParseBudget(const nlohmann::json& obj);
bool Covers(const BudgetInfo& budget, const PodInfo& pod);

// The catalog model of a node, from GPU feature discovery's labels
// (nvidia.com/gpu.product such as NVIDIA-H100-80GB-HBM3, nvidia.com/gpu.memory in MiB).
std::optional<core::ModelId> ModelOf(const NodeInfo& node, const core::Catalog& catalog);
// The same from a product name (NVIDIA-H100-80GB-HBM3, NVIDIA H100 80GB HBM3) and the
// GPU's memory in MiB (0: not known).
std::optional<core::ModelId> ModelOfProduct(std::string_view product, int64_t mib,
                                            const core::Catalog& catalog);

// The core's view of the nodes: nodes alike in shape, leaf label aside, and in which of
// `selections` allow them form a pool (named by shape, with the nodes' own names), so a
// pod's node selection is a set of pools. Nodes that are not Ready or are cordoned are in
// it, as down (`down`), so the pods already on them are still known.
// What pods Gantry did not place hold on a node (they count as used).
struct Usage {
  int64_t gpus = 0, cpus_milli = 0, memory_bytes = 0;
  std::map<std::string, int64_t> mig;  // MIG devices by profile
  std::set<std::string> devices;       // DRA devices other claims hold
};

// What a pool's GPUs are to pods: whole GPUs, or MIG devices of one profile laid out
// beforehand (by NVIDIA's MIG manager: every GPU of the node split into as many instances
// of `mig_profile` as NVIDIA's table allows, so the core's placement of that profile is
// the node's own layout).
struct PoolDevices {
  // MIG devices: the profile, or the node's split (OfferMig: "3g.40gb+2g.20gb+2x1g.10gb");
  // empty: whole GPUs.
  std::string mig_profile;
  bool single = false;  // the single strategy: pods ask nvidia.com/gpu for them
  // Dynamic Resource Allocation: GPUs of gpu.nvidia.com, and MIG devices at the core's
  // placements where the node publishes them (the pool's sharing then includes MIG).
  bool dra = false;
  // Shared GPUs (NodeInfo::sharing): each of the pool's GPUs is `replicas` replicas, one
  // per pod, time-sliced or under MPS; kExclusive: not shared.
  core::Sharing shared = core::Sharing::kExclusive;
  int replicas = 1;
  bool renamed = false;  // pods ask nvidia.com/gpu.shared for them (else nvidia.com/gpu)
  std::vector<std::string> profiles;  // MIG devices: the profiles offered
};

// The GPU model of a model BuildCluster made for a node's MIG split ("A100-80GB/3g.40gb+
// 2g.20gb+2x1g.10gb" is "A100-80GB"); any other model's name as it is.
inline std::string BaseModelName(const std::string& model) {
  return model.substr(0, model.find('/'));
}

struct ClusterView {
  core::Cluster cluster;
  std::vector<core::NodeId> down;
  // per selection (index into `selections`): the pools it allows, ascending
  std::vector<std::vector<core::PoolId>> pools_of;
  std::vector<PoolDevices> devices;  // per pool
  // DRA nodes: node name -> per local GPU of the core, its position in NodeInfo.dra.gpus.
  std::map<std::string, std::vector<int>> dra_gpus;
  std::vector<std::string> skipped;  // nodes, or their MIG devices, left out, with why
};
Result<ClusterView> BuildCluster(const std::vector<const NodeInfo*>& nodes,
                                 const std::vector<NodeSelection>& selections,
                                 const spec::ClusterConfig& config,
                                 const std::map<std::string, Usage>& foreign);

// Narrows `job.pools` (the pools its node selection allows) to those whose devices are
// what the pod asks for, and makes `job` a MIG job where they are MIG devices: a pod asking
// nvidia.com/mig-<profile> goes to pools of that profile; one asking nvidia.com/gpu to
// pools of whole GPUs, or, where its selection allows only single-strategy pools of one
// profile, to those as one MIG device. The reason when none fits.
std::optional<std::string> FitDevices(const PodInfo& pod, const ClusterView& view,
                                      const core::Catalog& catalog, core::JobSpec& job);

// The number Gantry's annotation `key` gives, from `lo` to `hi`: nullopt when the pod
// does not set it, an error naming the annotation when it is not such a number.
Result<std::optional<double>> AnnotationNumber(const PodInfo& pod, const char* key, double lo,
                                               double hi);

// The queue of a namespace's pods: kubernetes.namespaces, else default_queue, else the
// queue named as the namespace, else one named "default".
std::optional<core::QueueId> QueueOf(const std::string& ns, const spec::ClusterConfig& config);

// The job a gang of pods makes (pods[0] speaks for all; the caller checks they are alike):
// its queue from the namespace, tier from the priority class, GPUs, CPU and memory per
// worker, Gantry's annotations. An error says what the pod must change.
Result<core::JobSpec> JobOf(const std::vector<const PodInfo*>& pods,
                            const spec::ClusterConfig& config);

// Why the pods of a gang cannot be one job (their requests or node selections differ).
std::optional<std::string> WhyNotAlike(const std::vector<const PodInfo*>& pods);

}  // namespace gantry::kube
