// The Kubernetes objects' mapping (kube/objects.h): quantities, nodes, pods' effective
// requests and node selection, the cluster built from nodes, and the job a gang makes.
#include "kube/objects.h"

#include <gtest/gtest.h>

#include <set>
#include <string>
#include <tuple>

#include "core/ledger.h"
#include "core/model/feasibility.h"
#include "spec/config_reader.h"

namespace gantry::kube {
namespace {

using nlohmann::json;

spec::ClusterConfig Config(const std::string& extra = "") {
  spec::Diagnostics diags;
  auto c = spec::ParseClusterConfig(
      "cluster: k\n"
      "queues:\n  - name: team-a\n  - name: team-b\n"
      "kubernetes:\n  namespaces: {research: team-a}\n  default_queue: team-b\n"
      "  priority_classes: {serving: critical, scavenger: best-effort}\n"
      "  leaf_label: example.com/leaf\n" +
          extra,
      "k.yaml", diags);
  EXPECT_TRUE(c.has_value()) << diags.ToString();
  return *c;
}

json Node(const std::string& name, int gpus, const std::string& product = "NVIDIA-H100-80GB-HBM3",
          const std::string& leaf = "") {
  json labels = {{"nvidia.com/gpu.product", product}, {"kubernetes.io/hostname", name}};
  if (!leaf.empty()) labels["example.com/leaf"] = leaf;
  return {
      {"metadata", {{"name", name}, {"labels", labels}}},
      {"spec", json::object()},
      {"status",
       {{"allocatable",
         {{"cpu", "224"}, {"memory", "2063731376Ki"}, {"nvidia.com/gpu", std::to_string(gpus)}}},
        {"conditions", json::array({{{"type", "Ready"}, {"status", "True"}}})}}}};
}

json Pod(const std::string& name, json resources) {
  return {{"metadata", {{"name", name}, {"namespace", "research"}, {"uid", "u-" + name}}},
          {"spec",
           {{"schedulerName", "gantry"},
            {"containers", json::array({{{"name", "c"}, {"resources", resources}}})}}},
          {"status", {{"phase", "Pending"}}}};
}

TEST(KubeQuantity, ParsesWhatKubernetesWrites) {
  EXPECT_EQ(ParseQuantity("8"), 8);
  EXPECT_EQ(ParseQuantity("500m", 1000), 500);
  EXPECT_EQ(ParseQuantity("2", 1000), 2000);
  EXPECT_EQ(ParseQuantity("1.5", 1000), 1500);
  EXPECT_EQ(ParseQuantity("2Gi"), int64_t{2} << 30);
  EXPECT_EQ(ParseQuantity("2063731376Ki"), int64_t{2063731376} * 1024);
  EXPECT_EQ(ParseQuantity("1e3"), 1000);
  EXPECT_EQ(ParseQuantity("100M"), 100'000'000);
  EXPECT_EQ(ParseQuantity("1m"), 1);  // rounded up, as requests are
  for (const char* bad : {"", "x", "1.2.3", "5Q", "-1", "1e", "1e9999", "Gi"}) {
    EXPECT_FALSE(ParseQuantity(bad).has_value()) << bad;
  }
}

TEST(KubeNode, ReadsAllocatableReadinessTaintsAndModel) {
  json n = Node("n1", 8);
  n["spec"]["unschedulable"] = true;
  n["spec"]["taints"] = json::array({{{"key", "gpu"}, {"value", "yes"}, {"effect", "NoSchedule"}}});
  NodeInfo info = ParseNode(n);
  EXPECT_EQ(info.problem, "");
  EXPECT_EQ(info.gpus, 8);
  EXPECT_EQ(info.cpus_milli, 224'000);
  EXPECT_TRUE(info.ready);
  EXPECT_TRUE(info.unschedulable);
  ASSERT_EQ(info.taints.size(), 1u);
  const core::Catalog catalog = core::Catalog::BuiltIn();
  auto model = ModelOf(info, catalog);
  ASSERT_TRUE(model.has_value());
  EXPECT_EQ(catalog.model(*model).name, "H100-80GB");
  info.labels["nvidia.com/gpu.product"] = "NVIDIA-A100-SXM4-40GB";
  EXPECT_EQ(catalog.model(*ModelOf(info, catalog)).name, "A100-40GB");
  info.labels["nvidia.com/gpu.product"] = "Tesla-V100-SXM2-32GB";
  EXPECT_EQ(catalog.model(*ModelOf(info, catalog)).name, "V100-32GB");
  info.labels["nvidia.com/gpu.product"] = "NVIDIA-Something-Else";
  EXPECT_FALSE(ModelOf(info, catalog).has_value());
  json bad = Node("n2", 8);
  bad["status"]["allocatable"]["cpu"] = "lots";
  EXPECT_NE(ParseNode(bad).problem.find("allocatable.cpu"), std::string::npos);
}

TEST(KubePod, EffectiveRequestsCountInitSidecarsAndOverhead) {
  json p = Pod("p", {{"limits", {{"nvidia.com/gpu", "2"}}},
                     {"requests", {{"cpu", "4"}, {"memory", "8Gi"}}}});
  // an init container bigger than the containers, a sidecar beside them, an overhead
  p["spec"]["initContainers"] = json::array(
      {{{"name", "sidecar"},
        {"restartPolicy", "Always"},
        {"resources", {{"requests", {{"cpu", "1"}}}}}},
       {{"name", "warm"}, {"resources", {{"requests", {{"cpu", "10"}, {"memory", "1Gi"}}}}}}});
  p["spec"]["overhead"] = {{"cpu", "250m"}};
  PodInfo info = ParsePod(p);
  EXPECT_EQ(info.problem, "");
  EXPECT_EQ(info.gpus, 2);
  // max(containers 4 + sidecar 1, init 10 + sidecar 1) + overhead 0.25
  EXPECT_EQ(info.cpus_milli, 11'250);
  EXPECT_EQ(info.memory_bytes, int64_t{8} << 30);
}

TEST(KubePod, ItsJobIsItsPodGroupOrItself) {
  json p = Pod("p", json::object());
  PodInfo lone = ParsePod(p);
  EXPECT_EQ(lone.job, "pod:" + lone.uid);
  p["metadata"]["labels"] = {{"scheduling.x-k8s.io/pod-group", "train"}};
  PodInfo member = ParsePod(p);
  EXPECT_EQ(member.group, "train");
  EXPECT_EQ(member.job, "group:" + member.ns + "/train");
}

TEST(KubePod, UnsupportedAndMalformedAreSaidNotIgnored) {
  json p = Pod("p", {{"limits", {{"nvidia.com/gpu", "1"}}}});
  p["spec"]["affinity"]["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"] =
      json::array({{{"topologyKey", "kubernetes.io/hostname"},
                    {"namespaceSelector", {{"matchLabels", {{"team", "a"}}}}}}});
  p["spec"]["topologySpreadConstraints"] =
      json::array({{{"whenUnsatisfiable", "DoNotSchedule"},
                    {"maxSkew", 1},
                    {"topologyKey", "zone"},
                    {"matchLabelKeys", {"pod-template-hash"}}}});
  p["spec"]["containers"][0]["ports"] = json::array({{{"containerPort", 80}, {"hostPort", 80}}});
  PodInfo info = ParsePod(p);
  // (A namespaceSelector and matchLabelKeys are read, since 2026-12-02: hostPort is not.)
  ASSERT_EQ(info.unsupported.size(), 1u);
  EXPECT_NE(info.unsupported[0].find("hostPort"), std::string::npos);
  ASSERT_EQ(info.affinity.size(), 1u);
  EXPECT_TRUE(info.affinity[0].namespace_selector.has_value());
  json bad = Pod("q", {{"limits", {{"nvidia.com/gpu", "many"}}}});
  EXPECT_NE(ParsePod(bad).problem.find("nvidia.com/gpu"), std::string::npos);
  // hostile shapes never throw
  for (const json& odd :
       {json(nullptr), json(3), json::array(), json({{"metadata", 5}, {"spec", "x"}})}) {
    PodInfo o = ParsePod(odd);
    EXPECT_NE(o.problem, "");
  }
}

// Required pod anti-affinity: each term's selector, namespaces and topology key, and
// which pods it covers (its namespaces, else the pod's own; a null selector none).
TEST(KubePod, PodAffinityTermsAndThePodsTheyCover) {
  json p = Pod("web-1", {{"limits", {{"nvidia.com/gpu", "1"}}}});
  p["metadata"]["labels"] = {{"app", "web"}};
  p["spec"]["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"] =
      json::array(
          {{{"labelSelector",
             {{"matchLabels", {{"app", "web"}}},
              {"matchExpressions",
               json::array({{{"key", "tier"}, {"operator", "NotIn"}, {"values", {"x"}}}})}}},
            {"topologyKey", "kubernetes.io/hostname"}},
           {{"labelSelector", {{"matchLabels", {{"app", "db"}}}}},
            {"namespaces", {"data"}},
            {"topologyKey", "topology.kubernetes.io/zone"}},
           {{"topologyKey", "kubernetes.io/hostname"}}});
  p["spec"]["affinity"]["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"] =
      json::array({{{"labelSelector", {{"matchLabels", {{"app", "cache"}}}}},
                    {"topologyKey", "kubernetes.io/hostname"}}});
  const PodInfo web = ParsePod(p);
  ASSERT_EQ(web.problem, "");
  EXPECT_TRUE(web.unsupported.empty());
  ASSERT_EQ(web.affinity.size(), 1u) << "podAffinity's terms apart from podAntiAffinity's";
  EXPECT_EQ(web.affinity[0].selector.match_labels.at("app"), "cache");
  ASSERT_EQ(web.anti_affinity.size(), 3u);
  EXPECT_EQ(web.anti_affinity[1].topology_key, "topology.kubernetes.io/zone");
  PodInfo other = web;
  other.name = "web-2";
  EXPECT_TRUE(web.TermSelects(web.anti_affinity[0], other));
  other.labels["tier"] = "x";
  EXPECT_FALSE(web.TermSelects(web.anti_affinity[0], other)) << "NotIn";
  other.labels = {{"app", "db"}};
  EXPECT_FALSE(web.TermSelects(web.anti_affinity[1], other)) << "another namespace's pods only";
  other.ns = "data";
  EXPECT_TRUE(web.TermSelects(web.anti_affinity[1], other));
  EXPECT_FALSE(web.TermSelects(web.anti_affinity[2], other)) << "no selector: no pod";
  // matchLabelKeys and mismatchLabelKeys join the selector with the pod's own values.
  p["metadata"]["labels"] = {{"app", "web"}, {"track", "canary"}, {"rollout", "r2"}};
  p["spec"]["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"] =
      json::array({{{"labelSelector", {{"matchLabels", {{"app", "web"}}}}},
                    {"matchLabelKeys", {"rollout"}},
                    {"mismatchLabelKeys", {"track"}},
                    {"topologyKey", "kubernetes.io/hostname"}}});
  const PodInfo keyed = ParsePod(p);
  ASSERT_EQ(keyed.anti_affinity.size(), 1u);
  other.ns = keyed.ns;
  other.labels = {{"app", "web"}, {"rollout", "r2"}, {"track", "stable"}};
  EXPECT_TRUE(keyed.TermSelects(keyed.anti_affinity[0], other));
  other.labels["track"] = "canary";
  EXPECT_FALSE(keyed.TermSelects(keyed.anti_affinity[0], other)) << "mismatchLabelKeys";
  other.labels = {{"app", "web"}, {"rollout", "r1"}};
  EXPECT_FALSE(keyed.TermSelects(keyed.anti_affinity[0], other)) << "matchLabelKeys";
  // namespaceSelector: the namespaces whose labels it selects, besides those listed ({}:
  // every namespace); a term without a topology key is malformed.
  p["spec"]["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"] =
      json::array({{{"labelSelector", {{"matchLabels", {{"app", "web"}}}}},
                    {"namespaceSelector", {{"matchLabels", {{"team", "ml"}}}}},
                    {"namespaces", {"listed"}},
                    {"topologyKey", "k"}},
                   {{"labelSelector", {{"matchLabels", {{"app", "web"}}}}},
                    {"namespaceSelector", json::object()},
                    {"topologyKey", "k"}},
                   json::object()});
  const PodInfo odd = ParsePod(p);
  EXPECT_TRUE(odd.unsupported.empty());
  EXPECT_NE(odd.problem.find("topologyKey"), std::string::npos);
  ASSERT_EQ(odd.anti_affinity.size(), 3u);
  const NamespaceLabels namespaces = {{"research", {{"team", "ml"}}}, {"shop", {{"team", "web"}}}};
  other.labels = {{"app", "web"}};
  for (auto [ns, by_labels, any] : {std::tuple{"research", true, true},
                                    {"shop", false, true},
                                    {"listed", true, true},
                                    {"unlabelled", false, true},
                                    {"default", false, true}}) {
    other.ns = ns;
    EXPECT_EQ(odd.TermSelects(odd.anti_affinity[0], other, namespaces), by_labels) << ns;
    EXPECT_EQ(odd.TermSelects(odd.anti_affinity[1], other, namespaces), any) << ns;
  }
  EXPECT_EQ(
      ParseNamespace(json{{"metadata", {{"name", "research"}, {"labels", {{"team", "ml"}}}}}}),
      *namespaces.begin());
}

TEST(KubePod, PreferredTermsAreReadWithTheirWeights) {
  json p = Pod("p", json::object());
  p["spec"]["affinity"] = json::parse(R"({
    "nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
      {"weight": 30, "preference": {"matchExpressions": [
        {"key": "zone", "operator": "In", "values": ["b"]},
        {"key": "gpu", "operator": "Exists"}]}}]},
    "podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
      {"weight": 100, "podAffinityTerm": {"labelSelector": {"matchLabels": {"app": "svc"}},
                                          "topologyKey": "kubernetes.io/hostname"}}]},
    "podAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
      {"weight": 1, "podAffinityTerm": {"labelSelector": {"matchLabels": {"app": "db"}},
                                        "namespaces": ["data"], "topologyKey": "zone"}}]}})");
  PodInfo info = ParsePod(p);
  EXPECT_EQ(info.problem, "");
  ASSERT_EQ(info.preferred_nodes.size(), 1u);
  EXPECT_EQ(info.preferred_nodes[0].weight, 30);
  EXPECT_TRUE(MatchesAll(info.preferred_nodes[0].match, {{"zone", "b"}, {"gpu", "h100"}}));
  EXPECT_FALSE(MatchesAll(info.preferred_nodes[0].match, {{"zone", "b"}}));
  EXPECT_FALSE(MatchesAll(info.preferred_nodes[0].match, {{"zone", "a"}, {"gpu", "h100"}}));
  ASSERT_EQ(info.preferred_anti_affinity.size(), 1u);
  EXPECT_EQ(info.preferred_anti_affinity[0].weight, 100);
  EXPECT_EQ(info.preferred_anti_affinity[0].term.topology_key, "kubernetes.io/hostname");
  ASSERT_EQ(info.preferred_affinity.size(), 1u);
  EXPECT_EQ(info.preferred_affinity[0].term.namespaces, std::vector<std::string>{"data"});
  EXPECT_TRUE(info.affinity.empty() && info.anti_affinity.empty());  // nothing required
  // A weight outside 1-100 makes the pod malformed, said with the term.
  p["spec"]["affinity"]["podAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"][0]
   ["weight"] = 0;
  EXPECT_EQ(ParsePod(p).problem,
            "podAffinity preferred term: weight must be an integer from 1 to 100");
}

// Topology spread constraints: DoNotSchedule ones read (maxSkew, minDomains, the key, the
// selector, nodeAffinityPolicy); ScheduleAnyway ones apart (weighed, not kept); bad values
// said.
TEST(KubePod, TopologySpreadConstraintsAreRead) {
  json p = Pod("web-1", {{"limits", {{"nvidia.com/gpu", "1"}}}});
  p["spec"]["topologySpreadConstraints"] = json::array(
      {{{"whenUnsatisfiable", "DoNotSchedule"},
        {"maxSkew", 2},
        {"minDomains", 3},
        {"topologyKey", "topology.kubernetes.io/zone"},
        {"labelSelector", {{"matchLabels", {{"app", "web"}}}}},
        {"nodeAffinityPolicy", "Ignore"}},
       {{"whenUnsatisfiable", "ScheduleAnyway"}, {"maxSkew", 1}, {"topologyKey", "k"}}});
  const PodInfo web = ParsePod(p);
  ASSERT_EQ(web.problem, "");
  EXPECT_TRUE(web.unsupported.empty());
  ASSERT_EQ(web.spread.size(), 1u);
  ASSERT_EQ(web.preferred_spread.size(), 1u);
  EXPECT_EQ(web.preferred_spread[0].topology_key, "k");
  EXPECT_EQ(web.spread[0].max_skew, 2);
  EXPECT_EQ(web.spread[0].min_domains, 3);
  EXPECT_EQ(web.spread[0].topology_key, "topology.kubernetes.io/zone");
  EXPECT_FALSE(web.spread[0].honour_node_selection);
  EXPECT_TRUE(Selects(web.spread[0].selector, {{"app", "web"}}));
  EXPECT_FALSE(web.spread[0].honour_taints);
  // matchLabelKeys: the pod's value of each key joins the selector (a Deployment's replicas
  // of one template spread apart from the last template's), a key it lacks is left out;
  // nodeTaintsPolicy Honor.
  p["metadata"]["labels"] = {{"app", "web"}, {"pod-template-hash", "7f9c"}};
  p["spec"]["topologySpreadConstraints"] =
      json::array({{{"whenUnsatisfiable", "DoNotSchedule"},
                    {"maxSkew", 1},
                    {"topologyKey", "topology.kubernetes.io/zone"},
                    {"labelSelector", {{"matchLabels", {{"app", "web"}}}}},
                    {"matchLabelKeys", {"pod-template-hash", "no-such-label"}},
                    {"nodeTaintsPolicy", "Honor"}}});
  const PodInfo keyed = ParsePod(p);
  ASSERT_EQ(keyed.problem, "");
  EXPECT_TRUE(keyed.unsupported.empty());
  ASSERT_EQ(keyed.spread.size(), 1u);
  EXPECT_TRUE(keyed.spread[0].honour_taints);
  EXPECT_TRUE(keyed.spread[0].honour_node_selection);
  EXPECT_TRUE(Selects(keyed.spread[0].selector, {{"app", "web"}, {"pod-template-hash", "7f9c"}}));
  EXPECT_FALSE(Selects(keyed.spread[0].selector, {{"app", "web"}, {"pod-template-hash", "55d1"}}));
  EXPECT_FALSE(Selects(keyed.spread[0].selector, {{"app", "web"}}));
  for (const json& bad :
       {json({{"whenUnsatisfiable", "DoNotSchedule"}, {"maxSkew", 0}, {"topologyKey", "k"}}),
        json({{"whenUnsatisfiable", "DoNotSchedule"}, {"maxSkew", 1}}),
        json({{"whenUnsatisfiable", "Sometimes"}, {"maxSkew", 1}, {"topologyKey", "k"}})}) {
    p["spec"]["topologySpreadConstraints"] = json::array({bad});
    EXPECT_NE(ParsePod(p).problem.find("topologySpreadConstraints"), std::string::npos) << bad;
  }
}

TEST(KubeSelection, SelectorsAffinityAndTaints) {
  NodeInfo node = ParseNode(Node("n1", 8));
  node.taints.push_back(Taint{"dedicated", "ml", "NoSchedule"});
  NodeSelection sel;
  EXPECT_FALSE(Allows(sel, node)) << "an untolerated NoSchedule taint";
  sel.tolerations.push_back(Toleration{"dedicated", "Equal", "ml", "NoSchedule"});
  EXPECT_TRUE(Allows(sel, node));
  sel.node_selector["kubernetes.io/hostname"] = "n2";
  EXPECT_FALSE(Allows(sel, node));
  sel.node_selector.clear();
  sel.terms.push_back({Requirement{"nvidia.com/gpu.product", "In", {"NVIDIA-H100-80GB-HBM3"}}});
  EXPECT_TRUE(Allows(sel, node));
  sel.terms[0].push_back(Requirement{"example.com/leaf", "Exists", {}});
  EXPECT_FALSE(Allows(sel, node));
  sel.terms.push_back({Requirement{"example.com/leaf", "DoesNotExist", {}}});
  EXPECT_TRUE(Allows(sel, node)) << "any term of the required affinity";
  // Pinned to a node (a ResourceClaim it shares is allocated there): that one only.
  const std::string unpinned = sel.Key();
  sel.node = "n2";
  EXPECT_FALSE(Allows(sel, node));
  EXPECT_NE(sel.Key(), unpinned);
  sel.node = "n1";
  EXPECT_TRUE(Allows(sel, node));
}

TEST(KubeCluster, PoolsByShapeAndSelectionWithTheirLeavesAndNames) {
  const spec::ClusterConfig config = Config();
  std::vector<NodeInfo> infos = {ParseNode(Node("a1", 8, "NVIDIA-H100-80GB-HBM3", "l1")),
                                 ParseNode(Node("a2", 8, "NVIDIA-H100-80GB-HBM3", "l2")),
                                 ParseNode(Node("a3", 8, "NVIDIA-H100-80GB-HBM3", "l2")),
                                 ParseNode(Node("b1", 8, "NVIDIA-A100-SXM4-80GB")),
                                 ParseNode(Node("x", 8, "Mystery-GPU"))};
  infos[2].ready = false;
  std::vector<const NodeInfo*> nodes;
  for (const NodeInfo& n : infos) nodes.push_back(&n);
  NodeSelection any;
  NodeSelection h100;
  h100.node_selector["nvidia.com/gpu.product"] = "NVIDIA-H100-80GB-HBM3";
  std::map<std::string, Usage> foreign = {{"b1", Usage{2, 0, 0, {}, {}}}};
  auto view = BuildCluster(nodes, {any, h100}, config, foreign);
  ASSERT_TRUE(view.ok()) << view.error().ToString();
  const core::Cluster& c = view->cluster;
  ASSERT_EQ(c.nodes().size(), 4u);
  ASSERT_EQ(view->skipped.size(), 1u);  // the unknown model, with why
  EXPECT_NE(view->skipped[0].find("x:"), std::string::npos);
  ASSERT_EQ(c.pools().size(), 2u);
  const core::Node& a2 = c.node(*c.FindNode("a2"));
  const core::Node& a3 = c.node(*c.FindNode("a3"));
  const core::Node& a1 = c.node(*c.FindNode("a1"));
  EXPECT_EQ(a2.leaf, a3.leaf);
  EXPECT_NE(a1.leaf, a2.leaf);
  EXPECT_EQ(c.node(*c.FindNode("b1")).gpus, 6) << "GPUs other schedulers' pods hold are used";
  ASSERT_EQ(view->down.size(), 1u);
  EXPECT_EQ(c.node(view->down[0]).name, "a3");
  EXPECT_EQ(view->pools_of[0].size(), 2u);
  ASSERT_EQ(view->pools_of[1].size(), 1u);
  EXPECT_EQ(c.pool(view->pools_of[1][0]).spec.gpus, 8);
}

// kubernetes.pools: the nodes that have a pool's labels form that pool, named as the config
// names it (split by shape: NAME, NAME-2), spot and with the NVLink domains it says; other
// nodes are pools by shape.
TEST(KubeCluster, ConfigPoolsSelectNodesByTheirLabels) {
  const spec::ClusterConfig config = Config(
      "  pools:\n"
      "    - {name: spot, node_labels: {example.com/spot: \"true\"}, spot: true}\n"
      "    - {name: pcie, node_labels: {example.com/box: pcie, example.com/rack: r1}, "
      "nvlink_domains: 4}\n");
  auto labelled = [](json node, std::map<std::string, std::string> labels) {
    for (const auto& [k, v] : labels) node["metadata"]["labels"][k] = v;
    return ParseNode(node);
  };
  std::vector<NodeInfo> infos = {
      labelled(Node("s1", 8), {{"example.com/spot", "true"}}),
      labelled(Node("s2", 8, "NVIDIA-A100-SXM4-80GB"), {{"example.com/spot", "true"}}),
      labelled(Node("p1", 8), {{"example.com/box", "pcie"}, {"example.com/rack", "r1"}}),
      labelled(Node("p2", 8), {{"example.com/box", "pcie"}, {"example.com/rack", "r1"}}),
      labelled(Node("o1", 8), {{"example.com/box", "pcie"}}),  // not every label of pcie
  };
  std::vector<const NodeInfo*> nodes;
  for (const NodeInfo& n : infos) nodes.push_back(&n);
  // Another scheduler's pod holds 2 of p2's GPUs: 6 do not split into 4 domains.
  std::map<std::string, Usage> foreign = {{"p2", Usage{2, 0, 0, {}, {}}}};
  auto view = BuildCluster(nodes, {NodeSelection{}}, config, foreign);
  ASSERT_TRUE(view.ok()) << view.error().ToString();
  const core::Cluster& c = view->cluster;
  auto pool_of = [&](const std::string& node) -> const core::PoolSpec& {
    return c.pool(c.node(*c.FindNode(node)).pool).spec;
  };
  std::set<std::string> spot_names = {pool_of("s1").name, pool_of("s2").name};
  EXPECT_EQ(spot_names, (std::set<std::string>{"spot", "spot-2"})) << "two shapes, one pool";
  EXPECT_TRUE(pool_of("s1").spot && pool_of("s2").spot);
  std::set<std::string> pcie_names = {pool_of("p1").name, pool_of("p2").name};
  EXPECT_EQ(pcie_names, (std::set<std::string>{"pcie", "pcie-2"})) << "8 and 6 free GPUs";
  EXPECT_EQ(pool_of("p1").nvlink_domains, 4);
  EXPECT_EQ(pool_of("p2").nvlink_domains, 1) << "6 free GPUs: no even split";
  EXPECT_FALSE(pool_of("p1").spot);
  EXPECT_EQ(pool_of("o1").name.rfind("H100-80GBx8-", 0), 0u) << pool_of("o1").name;
  // A config pool named as a later shape's pool would be: the two stay apart.
  const spec::ClusterConfig clash =
      Config("  pools:\n    - {name: H100-80GBx8-1, node_labels: {example.com/box: a}}\n");
  std::vector<NodeInfo> two = {
      labelled(Node("a1", 8, "NVIDIA-A100-SXM4-80GB"), {{"example.com/box", "a"}}),
      ParseNode(Node("h1", 8))};
  auto both = BuildCluster({&two[0], &two[1]}, {NodeSelection{}}, clash, {});
  ASSERT_TRUE(both.ok()) << both.error().ToString();
  EXPECT_NE(both->cluster.pool(both->cluster.node(*both->cluster.FindNode("a1")).pool).spec.name,
            both->cluster.pool(both->cluster.node(*both->cluster.FindNode("h1")).pool).spec.name);
  // A critical job is never placed on the spot pool's nodes.
  core::JobSpec critical;
  critical.tier = core::Tier::kCritical;
  EXPECT_FALSE(core::PoolAccepts(c, critical, c.node(*c.FindNode("s1")).pool));
  EXPECT_TRUE(core::PoolAccepts(c, critical, c.node(*c.FindNode("o1")).pool));
}

TEST(KubeConfig, PoolsByLabelNameTheirLineAndField) {
  spec::Diagnostics d;
  EXPECT_FALSE(
      spec::ParseClusterConfig("cluster: k\nqueues:\n  - name: a\nkubernetes:\n"
                               "  pools:\n"
                               "    - {name: spot}\n"
                               "    - {name: spot, node_labels: {x: y}, color: red}\n"
                               "    - {node_labels: {x: \"1\"}, nvlink_domains: 0}\n",
                               "k.yaml", d));
  const std::string e = d.ToString();
  for (const char* want :
       {"k.yaml:6: kubernetes.pools[spot].node_labels: required: the labels (LABEL: VALUE)",
        "k.yaml:7: kubernetes.pools[spot].name: duplicate pool", "kubernetes.pools[spot].color",
        "k.yaml:8: kubernetes.pools[2].name: required",
        "k.yaml:8: kubernetes.pools[2].nvlink_domains"}) {
    EXPECT_NE(e.find(want), std::string::npos) << want << " in\n" << e;
  }
}

// A node whose GPUs are all MIG devices: allocatable nvidia.com/mig-<profile> (mixed
// strategy) or nvidia.com/gpu with the single strategy's labels.
json MigNode(const std::string& name, const std::string& product, json devices,
             bool single = false) {
  json node = Node(name, 0, product);
  node["status"]["allocatable"].erase("nvidia.com/gpu");
  for (auto it = devices.begin(); it != devices.end(); ++it)
    node["status"]["allocatable"][it.key()] = it.value();
  node["metadata"]["labels"]["nvidia.com/mig.strategy"] = single ? "single" : "mixed";
  return node;
}

TEST(KubeMig, NodesSplitIntoOneProfileArePoolsOfMigGpus) {
  const spec::ClusterConfig config = Config();
  std::vector<NodeInfo> infos = {
      // all-1g.10gb on 2 A100-80GB: 7 per GPU
      ParseNode(MigNode("m1", "NVIDIA-A100-SXM4-80GB", {{"nvidia.com/mig-1g.10gb", "14"}})),
      // the single strategy: 2 GPUs of 3g.40gb, 2 per GPU
      ParseNode(
          MigNode("s1", "NVIDIA-A100-SXM4-80GB-MIG-3g.40gb", {{"nvidia.com/gpu", "4"}}, true)),
      // all-balanced: several profiles, not offered
      ParseNode(MigNode("b1", "NVIDIA-A100-SXM4-80GB",
                        {{"nvidia.com/mig-1g.10gb", "4"}, {"nvidia.com/mig-3g.40gb", "2"}})),
      // not whole GPUs of the profile
      ParseNode(MigNode("p1", "NVIDIA-A100-SXM4-80GB", {{"nvidia.com/mig-1g.10gb", "3"}})),
      ParseNode(Node("w1", 8, "NVIDIA-A100-SXM4-80GB"))};
  EXPECT_TRUE(infos[1].mig_single);
  EXPECT_EQ(infos[1].gpus, 0);
  EXPECT_EQ(infos[1].mig.at("3g.40gb"), 4);
  std::vector<const NodeInfo*> nodes;
  for (const NodeInfo& n : infos) nodes.push_back(&n);
  NodeSelection any;
  // another scheduler's pod holds one 1g.10gb on m1: a GPU's worth is taken off
  std::map<std::string, Usage> foreign;
  foreign["m1"].mig["1g.10gb"] = 1;
  auto view = BuildCluster(nodes, {any}, config, foreign);
  ASSERT_TRUE(view.ok()) << view.error().ToString();
  const core::Cluster& c = view->cluster;
  ASSERT_EQ(view->devices.size(), c.pools().size());
  EXPECT_EQ(view->skipped.size(), 2u) << "b1 and p1's MIG devices, with why";
  auto pool_of = [&](const std::string& node) { return c.node(*c.FindNode(node)).pool; };
  EXPECT_EQ(view->devices[pool_of("m1").v].mig_profile, "1g.10gb");
  EXPECT_FALSE(view->devices[pool_of("m1").v].single);
  EXPECT_EQ(c.node(*c.FindNode("m1")).gpus, 1);
  EXPECT_EQ(c.pool(pool_of("m1")).spec.sharing, core::Bit(core::Sharing::kMig));
  EXPECT_EQ(view->devices[pool_of("s1").v].mig_profile, "3g.40gb");
  EXPECT_TRUE(view->devices[pool_of("s1").v].single);
  EXPECT_EQ(c.node(*c.FindNode("s1")).gpus, 2);
  EXPECT_EQ(c.catalog().model(c.node(*c.FindNode("s1")).model).name, "A100-80GB");
  EXPECT_EQ(c.node(*c.FindNode("b1")).gpus, 0) << "left for CPU-only pods";
  EXPECT_TRUE(view->devices[pool_of("w1").v].mig_profile.empty());

  // A pod asking a MIG device goes to the pools of its profile only, as a MIG job.
  PodInfo mig = ParsePod(Pod("m", {{"limits", {{"nvidia.com/mig-1g.10gb", "1"}}}}));
  ASSERT_TRUE(mig.unsupported.empty()) << mig.unsupported[0];
  auto job = JobOf({&mig}, config);
  ASSERT_TRUE(job.ok());
  job->pools = view->pools_of[0];
  EXPECT_EQ(FitDevices(mig, *view, c.catalog(), *job), std::nullopt);
  EXPECT_EQ(job->pools, std::vector<core::PoolId>{pool_of("m1")});
  EXPECT_EQ(job->sharing, core::Sharing::kMig);
  EXPECT_EQ(job->mig_profile, "1g.10gb");
  EXPECT_GE(job->mig_index[c.node(*c.FindNode("m1")).model.v], 0);

  // Whole GPUs never go to MIG pools; with only single-strategy nodes selected,
  // nvidia.com/gpu: 1 is one MIG device of their profile.
  PodInfo whole = ParsePod(Pod("w", {{"limits", {{"nvidia.com/gpu", "1"}}}}));
  job = JobOf({&whole}, config);
  job->pools = view->pools_of[0];
  EXPECT_EQ(FitDevices(whole, *view, c.catalog(), *job), std::nullopt);
  for (core::PoolId p : job->pools) EXPECT_TRUE(view->devices[p.v].mig_profile.empty());
  EXPECT_EQ(job->sharing, core::Sharing::kExclusive);
  job = JobOf({&whole}, config);
  job->pools = {pool_of("s1")};
  EXPECT_EQ(FitDevices(whole, *view, c.catalog(), *job), std::nullopt);
  EXPECT_EQ(job->mig_profile, "3g.40gb");
  whole.annotations[kVramAnnotation] = "60";
  job = JobOf({&whole}, config);
  job->pools = {pool_of("s1")};
  auto why = FitDevices(whole, *view, c.catalog(), *job);
  ASSERT_TRUE(why.has_value());
  EXPECT_NE(why->find("3g.40gb"), std::string::npos) << *why;

  // A profile no node offers whole is refused with where to look.
  PodInfo other = ParsePod(Pod("o", {{"limits", {{"nvidia.com/mig-2g.20gb", "1"}}}}));
  job = JobOf({&other}, config);
  job->pools = view->pools_of[0];
  why = FitDevices(other, *view, c.catalog(), *job);
  ASSERT_TRUE(why.has_value());
  EXPECT_NE(why->find("nvidia.com/mig-2g.20gb"), std::string::npos) << *why;
}

// Nodes whose GPUs are split another way than into one profile as far as it goes
// (MIG manager's all-balanced, a custom layout): the counts the device plugin advertises
// over the GPUs GPU feature discovery counts make one split per GPU, and the core offers
// each profile exactly as many times as the node has it.
TEST(KubeMig, NodesOfAnyEvenSplitOfferEachProfileAsOftenAsTheyHaveIt) {
  const spec::ClusterConfig config = Config();
  auto node = [](const std::string& name, json devices, const char* gpus) {
    json n = MigNode(name, "NVIDIA-A100-SXM4-80GB", std::move(devices));
    if (gpus) n["metadata"]["labels"]["nvidia.com/gpu.count"] = gpus;
    return ParseNode(n);
  };
  std::vector<NodeInfo> infos = {
      // all-balanced on 8 A100-80GB: 2 1g.10gb, a 2g.20gb and a 3g.40gb on each
      node("bal",
           {{"nvidia.com/mig-1g.10gb", "16"},
            {"nvidia.com/mig-2g.20gb", "8"},
            {"nvidia.com/mig-3g.40gb", "8"}},
           "8"),
      node("odd", {{"nvidia.com/mig-1g.10gb", "3"}}, "1"),  // 3 where 7 would fit
      node("uneven", {{"nvidia.com/mig-1g.10gb", "5"}, {"nvidia.com/mig-3g.40gb", "2"}}, "2"),
      node("over", {{"nvidia.com/mig-3g.40gb", "4"}, {"nvidia.com/mig-2g.20gb", "2"}}, "2"),
      node("unlabelled", {{"nvidia.com/mig-1g.10gb", "4"}, {"nvidia.com/mig-3g.40gb", "2"}},
           nullptr)};
  std::vector<const NodeInfo*> nodes;
  for (const NodeInfo& n : infos) nodes.push_back(&n);
  auto view = BuildCluster(nodes, {NodeSelection{}}, config, {});
  ASSERT_TRUE(view.ok()) << view.error().ToString();
  const core::Cluster& c = view->cluster;
  std::string skipped;
  for (const std::string& s : view->skipped) skipped += s + "\n";
  EXPECT_EQ(view->skipped.size(), 3u) << skipped;
  EXPECT_NE(skipped.find("uneven: its MIG devices are not offered: 5 devices of 1g.10gb do not "
                         "split evenly over 2 GPUs"),
            std::string::npos)
      << skipped;
  EXPECT_NE(skipped.find("over: its MIG devices are not offered: its devices (2x3g.40gb+2g.20gb "
                         "on each of 2 GPUs) do not fit one GPU"),
            std::string::npos)
      << skipped;
  EXPECT_NE(skipped.find("unlabelled: its MIG devices are not offered: its devices are not whole "
                         "GPUs split into one profile, and without GPU feature discovery's label "
                         "nvidia.com/gpu.count"),
            std::string::npos)
      << skipped;
  const core::Node& bal = c.node(*c.FindNode("bal"));
  EXPECT_EQ(bal.gpus, 8);
  EXPECT_EQ(c.catalog().model(bal.model).name, "A100-80GB/3g.40gb+2g.20gb+2x1g.10gb");
  const PoolDevices& d = view->devices[bal.pool.v];
  EXPECT_EQ(d.mig_profile, "3g.40gb+2g.20gb+2x1g.10gb");
  EXPECT_EQ(d.profiles, (std::vector<std::string>{"1g.10gb", "2g.20gb", "3g.40gb"}));
  EXPECT_EQ(c.pool(bal.pool).spec.name.rfind("A100-80GBx8-mig-3g.40gb+2g.20gb+2x1g.10gb", 0), 0u)
      << c.pool(bal.pool).spec.name;
  EXPECT_EQ(c.node(*c.FindNode("odd")).gpus, 1);

  // Filled profile by profile, the smallest first, each fits as often as the node has it
  // and no more: 16, 8 and 8 on bal; 3 on odd.
  core::Ledger ledger(c);
  auto fill = [&](const core::Node& n, const std::string& profile) {
    const int idx = c.catalog().FindProfile(n.model, profile);
    int placed = 0;
    for (int g = 0; g < n.gpus; ++g) {
      const core::GpuId id(n.first_gpu.v + static_cast<uint32_t>(g));
      for (int start; (start = ledger.MigStart(id, idx)) >= 0; ++placed) {
        core::WorkerAlloc w;
        w.node = *c.FindNode(n.name);
        w.gpu = static_cast<int8_t>(g);
        w.sharing = core::Sharing::kMig;
        w.mig_profile = static_cast<int8_t>(idx);
        w.mig_start = static_cast<int8_t>(start);
        ledger.Allocate(w);
      }
    }
    return placed;
  };
  EXPECT_EQ(fill(bal, "1g.10gb"), 16);
  EXPECT_EQ(fill(bal, "2g.20gb"), 8);
  EXPECT_EQ(fill(bal, "3g.40gb"), 8);
  EXPECT_EQ(fill(c.node(*c.FindNode("odd")), "1g.10gb"), 3);

  // A pod asking one of them goes to that node's pool, as a MIG job of its split's model.
  PodInfo pod = ParsePod(Pod("p", {{"limits", {{"nvidia.com/mig-2g.20gb", "1"}}}}));
  auto job = JobOf({&pod}, config);
  ASSERT_TRUE(job.ok());
  job->pools = view->pools_of[0];
  EXPECT_EQ(FitDevices(pod, *view, c.catalog(), *job), std::nullopt);
  EXPECT_EQ(job->pools, std::vector<core::PoolId>{bal.pool});
  EXPECT_EQ(job->sharing, core::Sharing::kMig);
  EXPECT_NE(job->models & (core::ModelMask{1} << bal.model.v), 0u);
  EXPECT_EQ(job->mig_index[bal.model.v], c.catalog().FindProfile(bal.model, "2g.20gb"));
}

json SharedNode(const std::string& name, int replicas, const std::string& strategy, int advertised,
                bool renamed = false) {
  json node = Node(name, advertised, "NVIDIA-A100-SXM4-40GB-SHARED");
  if (renamed) {
    node["status"]["allocatable"].erase("nvidia.com/gpu");
    node["status"]["allocatable"]["nvidia.com/gpu.shared"] = std::to_string(advertised);
    node["metadata"]["labels"]["nvidia.com/gpu.product"] = "NVIDIA-A100-SXM4-40GB";
  }
  node["metadata"]["labels"]["nvidia.com/gpu.replicas"] = std::to_string(replicas);
  if (!strategy.empty()) node["metadata"]["labels"]["nvidia.com/gpu.sharing-strategy"] = strategy;
  return node;
}

TEST(KubeShared, TimeSlicedAndMpsNodesArePoolsOfSharedGpus) {
  const spec::ClusterConfig config = Config();
  std::vector<NodeInfo> infos = {
      ParseNode(SharedNode("ts", 4, "time-slicing", 32)),   // 8 GPUs of 4 replicas
      ParseNode(SharedNode("old", 2, "", 16)),              // no strategy label: time-sliced
      ParseNode(SharedNode("mps", 2, "mps", 8, true)),      // renamed: nvidia.com/gpu.shared
      ParseNode(SharedNode("odd", 4, "time-slicing", 30)),  // not whole GPUs
      ParseNode(SharedNode("bad", 0, "time-slicing", 8)),   // no replicas
      ParseNode(SharedNode("one", 1, "none", 8)),           // replicas 1: whole GPUs
      ParseNode(Node("w1", 8, "NVIDIA-A100-SXM4-40GB"))};
  EXPECT_EQ(infos[0].sharing, core::Sharing::kTimeslice);
  EXPECT_EQ(infos[0].replicas, 4);
  EXPECT_EQ(infos[0].gpus, 8);
  EXPECT_EQ(infos[1].sharing, core::Sharing::kTimeslice);
  EXPECT_EQ(infos[1].gpus, 8);
  EXPECT_EQ(infos[2].sharing, core::Sharing::kMps);
  EXPECT_EQ(infos[2].gpus, 4);
  EXPECT_NE(infos[3].problem.find("not a multiple of its 4 replicas"), std::string::npos)
      << infos[3].problem;
  EXPECT_NE(infos[4].problem.find("nvidia.com/gpu.replicas"), std::string::npos)
      << infos[4].problem;
  EXPECT_EQ(infos[5].sharing, core::Sharing::kExclusive);
  EXPECT_EQ(infos[5].gpus, 8);
  const core::Catalog& catalog = config.cluster.catalog();
  ASSERT_TRUE(ModelOf(infos[0], catalog).has_value()) << "the -SHARED product is still an A100";
  EXPECT_EQ(catalog.model(*ModelOf(infos[0], catalog)).name, "A100-40GB");

  std::vector<const NodeInfo*> nodes = {&infos[0], &infos[1], &infos[2], &infos[6]};
  // another scheduler's pods hold 5 replicas of ts: two of its GPUs are taken off
  std::map<std::string, Usage> foreign;
  foreign["ts"].gpus = 5;
  NodeSelection any, ts4, sliced;
  ts4.node_selector = {{"nvidia.com/gpu.replicas", "4"}};
  sliced.node_selector = {{"nvidia.com/gpu.product", "NVIDIA-A100-SXM4-40GB-SHARED"}};
  auto view = BuildCluster(nodes, {any, ts4, sliced}, config, foreign);
  ASSERT_TRUE(view.ok()) << view.error().ToString();
  const core::Cluster& c = view->cluster;
  auto pool_of = [&](const std::string& node) { return c.node(*c.FindNode(node)).pool; };
  EXPECT_EQ(c.node(*c.FindNode("ts")).gpus, 6);
  EXPECT_EQ(view->devices[pool_of("ts").v].shared, core::Sharing::kTimeslice);
  EXPECT_EQ(view->devices[pool_of("ts").v].replicas, 4);
  EXPECT_TRUE(c.pool(pool_of("ts")).spec.sharing & core::Bit(core::Sharing::kTimeslice));
  EXPECT_TRUE(c.pool(pool_of("mps")).spec.sharing & core::Bit(core::Sharing::kMps));
  EXPECT_EQ(view->devices[pool_of("w1").v].shared, core::Sharing::kExclusive);

  // nvidia.com/gpu: 1 with whole GPUs in its selection is a whole GPU, never a replica.
  PodInfo one = ParsePod(Pod("one", {{"limits", {{"nvidia.com/gpu", "1"}}}}));
  auto job = JobOf({&one}, config);
  job->pools = view->pools_of[0];
  EXPECT_EQ(FitDevices(one, *view, c.catalog(), *job), std::nullopt);
  EXPECT_EQ(job->pools, std::vector<core::PoolId>{pool_of("w1")});
  EXPECT_EQ(job->sharing, core::Sharing::kExclusive);
  // Selecting only the 4-replica nodes, it is a quarter of a GPU, time-sliced.
  job = JobOf({&one}, config);
  job->pools = view->pools_of[1];
  EXPECT_EQ(FitDevices(one, *view, c.catalog(), *job), std::nullopt);
  EXPECT_EQ(job->pools, std::vector<core::PoolId>{pool_of("ts")});
  EXPECT_EQ(job->sharing, core::Sharing::kTimeslice);
  EXPECT_EQ(job->gpus, 0);
  EXPECT_EQ(job->share_milli, 250);
  // Shared GPUs of two kinds (4 and 2 replicas) in its selection: it must say which.
  job = JobOf({&one}, config);
  job->pools = view->pools_of[2];
  auto why = FitDevices(one, *view, c.catalog(), *job);
  ASSERT_TRUE(why.has_value());
  EXPECT_NE(why->find("several kinds"), std::string::npos) << *why;
  // nvidia.com/gpu.shared goes to the renamed shared GPUs only (MPS here), and
  // nvidia.com/gpu never does.
  PodInfo shared = ParsePod(Pod("s", {{"limits", {{"nvidia.com/gpu.shared", "1"}}}}));
  EXPECT_TRUE(shared.shared);
  EXPECT_EQ(shared.gpus, 1);
  job = JobOf({&shared}, config);
  job->pools = view->pools_of[0];
  EXPECT_EQ(FitDevices(shared, *view, c.catalog(), *job), std::nullopt);
  EXPECT_EQ(job->pools, std::vector<core::PoolId>{pool_of("mps")});
  job = JobOf({&one}, config);
  job->pools = {pool_of("mps")};
  EXPECT_TRUE(FitDevices(one, *view, c.catalog(), *job).has_value() || job->pools.empty());
  job = JobOf({&shared}, config);
  job->pools = {pool_of("mps"), pool_of("w1")};
  EXPECT_EQ(FitDevices(shared, *view, c.catalog(), *job), std::nullopt);
  EXPECT_EQ(job->pools, std::vector<core::PoolId>{pool_of("mps")});
  EXPECT_EQ(job->sharing, core::Sharing::kMps);
  EXPECT_EQ(job->share_milli, 500);
  job = JobOf({&shared}, config);
  job->pools = {pool_of("w1")};
  why = FitDevices(shared, *view, c.catalog(), *job);
  ASSERT_TRUE(why.has_value());
  EXPECT_NE(why->find("nvidia.com/gpu.shared"), std::string::npos) << *why;
  // More than one replica is refused: they are not more of the GPU.
  PodInfo two = ParsePod(Pod("two", {{"limits", {{"nvidia.com/gpu", "2"}}}}));
  job = JobOf({&two}, config);
  job->pools = view->pools_of[1];
  why = FitDevices(two, *view, c.catalog(), *job);
  ASSERT_TRUE(why.has_value());
  EXPECT_NE(why->find("one replica per pod"), std::string::npos) << *why;
  PodInfo both = ParsePod(
      Pod("both", {{"limits", {{"nvidia.com/gpu", "1"}, {"nvidia.com/gpu.shared", "1"}}}}));
  EXPECT_FALSE(both.problem.empty());
}

TEST(KubeJob, QueueTierAnnotationsAndGrace) {
  const spec::ClusterConfig config = Config();
  PodInfo p =
      ParsePod(Pod("w-0", {{"limits", {{"nvidia.com/gpu", "8"}}}, {"requests", {{"cpu", "16"}}}}));
  p.group = "train";
  p.priority_class = "serving";
  p.grace_s = 3600;
  p.annotations[kCheckpointAnnotation] = "600";
  p.annotations[kTopologyAnnotation] = "leaf";
  PodInfo q = p;
  q.name = "w-1";
  auto job = JobOf({&p, &q}, config);
  ASSERT_TRUE(job.ok()) << job.error().ToString();
  EXPECT_EQ(job->id, "research/train");
  EXPECT_EQ(config.queues.queue(job->queue).spec.name, "team-a");
  EXPECT_EQ(job->tier, core::Tier::kCritical);
  EXPECT_EQ(job->replicas, 2);
  EXPECT_EQ(job->gpus, 8);
  EXPECT_EQ(job->cpus_milli, 16'000);
  EXPECT_EQ(job->checkpoint, 600'000);
  EXPECT_EQ(job->topology, core::Topology::kLeaf);
  EXPECT_EQ(job->grace, config.policy.max_grace[0]) << "grace capped by the tier's max_grace";
  p.ns = "elsewhere";
  EXPECT_EQ(config.queues.queue(JobOf({&p}, config)->queue).spec.name, "team-b");
  p.annotations[kTopologyAnnotation] = "rack";
  auto bad = JobOf({&p}, config);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().ToString().find(kTopologyAnnotation), std::string::npos);
  q.gpus = 4;
  EXPECT_TRUE(WhyNotAlike({&p, &q}).has_value());
}

TEST(KubeJob, AQueueKeepsToItsTiers) {
  // team-b may not use critical: a pod of a namespace that maps to it, naming the class
  // that maps to critical, is refused with the queue's rule, never run as critical.
  spec::Diagnostics diags;
  auto limited = spec::ParseClusterConfig(
      "queues:\n  - name: team-a\n  - name: team-b\n    tiers: [standard, best-effort]\n"
      "kubernetes:\n  default_queue: team-b\n  priority_classes: {serving: critical}\n",
      "k.yaml", diags);
  ASSERT_TRUE(limited.has_value()) << diags.ToString();
  PodInfo p = ParsePod(Pod("w-0", {{"limits", {{"nvidia.com/gpu", "1"}}}}));
  p.ns = "elsewhere";
  p.priority_class = "serving";
  auto job = JobOf({&p}, *limited);
  ASSERT_FALSE(job.ok());
  EXPECT_NE(job.error().ToString().find("team-b"), std::string::npos) << job.error().ToString();
  p.priority_class = "";
  EXPECT_TRUE(JobOf({&p}, *limited).ok());
}

TEST(KubeConfig, SectionErrorsNameTheirField) {
  spec::Diagnostics diags;
  auto c = spec::ParseClusterConfig(
      "queues:\n  - name: a\nkubernetes:\n  namespaces: {x: nope}\n  priority_classes: {p: "
      "urgent}\n"
      "  colour: blue\n",
      "k.yaml", diags);
  EXPECT_FALSE(c.has_value());
  const std::string text = diags.ToString();
  EXPECT_NE(text.find("kubernetes.namespaces.x"), std::string::npos) << text;
  EXPECT_NE(text.find("kubernetes.priority_classes.p"), std::string::npos) << text;
  EXPECT_NE(text.find("colour"), std::string::npos) << text;
}

}  // namespace
}  // namespace gantry::kube
