// Dynamic Resource Allocation as Gantry reads it (kube/dra.h): the CEL subset, slices into
// a node's GPUs and MIG placements, claims into what a pod asks, and the allocation written.
#include "kube/dra.h"

#include <gtest/gtest.h>

#include <string>

#include "kube/objects.h"
#include "spec/config_reader.h"

namespace gantry::kube {
namespace {

using nlohmann::json;

json Gpu(int i, int domain, const std::string& product = "NVIDIA H100 80GB HBM3") {
  return {{"name", "gpu-" + std::to_string(i)},
          {"attributes",
           {{"type", {{"string", "gpu"}}},
            {"index", {{"int", i}}},
            {"productName", {{"string", product}}},
            {"nvlinkDomain", {{"int", domain}}}}},
          {"capacity", {{"memory", {{"value", "80Gi"}}}}}};
}

json Slice(const std::string& node, json devices, int generation = 1) {
  return {{"metadata", {{"name", node + "-" + std::to_string(generation)}}},
          {"spec",
           {{"driver", "gpu.nvidia.com"},
            {"nodeName", node},
            {"pool", {{"name", node}, {"generation", generation}, {"resourceSliceCount", 1}}},
            {"devices", devices}}}};
}

DraDevice Device(const std::string& product, int64_t memory_gib, int index) {
  DraDevice d;
  d.name = "gpu-" + std::to_string(index);
  d.attributes["gpu.nvidia.com/productName"] = product;
  d.attributes["gpu.nvidia.com/index"] = int64_t{index};
  d.attributes["gpu.nvidia.com/type"] = std::string("gpu");
  d.capacity["gpu.nvidia.com/memory"] = memory_gib << 30;
  return d;
}

TEST(DraSelector, TheSubsetMatchesAsCelWould) {
  const DraDevice h100 = Device("NVIDIA H100 80GB HBM3", 80, 3);
  auto match = [&](const std::string& e) {
    auto s = DeviceSelector::Compile(e);
    EXPECT_TRUE(s.ok()) << e << ": " << s.error().ToString();
    return s.ok() && s->Matches("gpu.nvidia.com", h100);
  };
  EXPECT_TRUE(match("device.driver == 'gpu.nvidia.com'"));
  EXPECT_FALSE(match("device.driver == \"other.example.com\""));
  EXPECT_TRUE(
      match("device.attributes['gpu.nvidia.com'].index >= 2 && "
            "(device.attributes['gpu.nvidia.com'].index < 4)"));
  EXPECT_TRUE(
      match("device.attributes['gpu.nvidia.com'].productName in ['A', "
            "'NVIDIA H100 80GB HBM3']"));
  EXPECT_FALSE(match("device.attributes['gpu.nvidia.com'].productName != 'NVIDIA H100 80GB HBM3'"));
  EXPECT_TRUE(match("device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('80Gi')) >= 0"));
  EXPECT_FALSE(match("device.capacity['gpu.nvidia.com'].memory.isGreaterThan(quantity('80Gi'))"));
  EXPECT_TRUE(match("device.capacity['gpu.nvidia.com'].memory.isLessThan(quantity('81Gi'))"));
  EXPECT_FALSE(match("device.attributes['gpu.nvidia.com'].missing == 1"))
      << "no such key: no match";
  EXPECT_FALSE(match("device.attributes['gpu.nvidia.com'].index == '3'")) << "types differ";
  // ||, ! and their precedence (! then && then ||), as CEL has them.
  EXPECT_TRUE(
      match("device.attributes['gpu.nvidia.com'].index == 0 || "
            "device.attributes['gpu.nvidia.com'].index == 3"));
  EXPECT_FALSE(
      match("device.attributes['gpu.nvidia.com'].index == 0 || "
            "device.attributes['gpu.nvidia.com'].index == 1"));
  EXPECT_TRUE(match("!(device.driver == 'x')"));
  EXPECT_FALSE(match("!!(device.driver == 'x')"));
  EXPECT_TRUE(
      match("device.driver == 'x' && device.driver == 'y' || device.driver == "
            "'gpu.nvidia.com'"))
      << "&& before ||";
  EXPECT_FALSE(
      match("device.driver == 'x' && (device.driver == 'y' || device.driver == "
            "'gpu.nvidia.com')"));
  EXPECT_TRUE(
      match("!(device.attributes['gpu.nvidia.com'].index == 0) && "
            "device.attributes['gpu.nvidia.com'].productName != 'A'"));
  // A missing attribute is an error, which the other side of || or && settles, if it can.
  EXPECT_TRUE(
      match("device.attributes['gpu.nvidia.com'].missing == 1 || device.driver == "
            "'gpu.nvidia.com'"));
  EXPECT_FALSE(match("device.attributes['gpu.nvidia.com'].missing == 1 || device.driver == 'x'"));
  EXPECT_FALSE(match("device.attributes['gpu.nvidia.com'].missing == 1 && device.driver == 'x'"));
  EXPECT_FALSE(match("!(device.attributes['gpu.nvidia.com'].missing == 1)"));
  // Pinned: only what every match has, at the top level.
  auto pinned = [](const std::string& e, const std::string& attribute) {
    auto s = DeviceSelector::Compile(e);
    EXPECT_TRUE(s.ok()) << e;
    return s.ok() ? s->Pinned(attribute) : std::nullopt;
  };
  const std::string type = "device.attributes['gpu.nvidia.com'].type == 'gpu'";
  EXPECT_EQ(pinned("device.driver == 'd' && (" + type + " && device.driver != 'e')",
                   "gpu.nvidia.com/type"),
            AttributeValue(std::string("gpu")));
  EXPECT_EQ(pinned("device.driver == 'd' || " + type, "gpu.nvidia.com/type"), std::nullopt);
  EXPECT_EQ(pinned("!(" + type + ")", "gpu.nvidia.com/type"), std::nullopt);

  // Outside the subset: an error naming the column and what was expected.
  for (const char* e :
       {"device.attributes['gpu.nvidia.com'].index == 0 || true", "!device",
        "device.driver.startsWith('gpu')", "device.attributes['gpu.nvidia.com'].productName < 'b'",
        "device.capacity['gpu.nvidia.com'].memory > 3", "device.driver == 'x",
        "(device.driver == 'x'", "device.driver == 'x' ||"}) {
    auto s = DeviceSelector::Compile(e);
    ASSERT_FALSE(s.ok()) << e;
    EXPECT_NE(s.error().message.find("column"), std::string::npos) << s.error().message;
  }
  // Nesting is bounded: a hostile selector is refused, not a stack overflow.
  const std::string deep =
      std::string(100000, '(') + "device.driver == 'x'" + std::string(100000, ')');
  EXPECT_FALSE(DeviceSelector::Compile(deep).ok());
  EXPECT_FALSE(DeviceSelector::Compile(std::string(100000, '!') + "device.driver == 'x'").ok());
}

TEST(DraNode, GpusByIndexDomainsAndMigPlacements) {
  json devices = json::array();
  for (int i = 7; i >= 0; --i) devices.push_back(Gpu(i, i / 4));
  // a 3g.40gb placement of GPU 1 at memory slice 4, consuming slices 4-7
  devices.push_back(
      {{"name", "gpu-1-mig-3g-40gb-4"},
       {"attributes",
        {{"type", {{"string", "mig"}}},
         {"profile", {{"string", "3g.40gb"}}},
         {"parentIndex", {{"int", 1}}}}},
       {"consumesCounters", json::array({{{"counterSet", "gpu-1-counters"},
                                          {"counters",
                                           {{"memory-slice-4", {{"value", "1"}}},
                                            {"memory-slice-5", {{"value", "1"}}},
                                            {"memory-slice-6", {{"value", "1"}}},
                                            {"memory-slice-7", {{"value", "1"}}}}}}})}});
  const SliceInfo old = ParseSlice(Slice("n1", json::array({Gpu(0, 0)}), 1));
  const SliceInfo now = ParseSlice(Slice("n1", devices, 2));
  ASSERT_TRUE(now.problem.empty());
  const NodeGpus g = GpusOf({&old, &now});
  ASSERT_EQ(g.gpus.size(), 8u) << "the newest generation only";
  EXPECT_EQ(g.gpus[0].name, "gpu-0");
  EXPECT_EQ(g.gpus[7].name, "gpu-7");
  EXPECT_EQ(g.nvlink_domains, 2);
  EXPECT_EQ(g.product, "NVIDIA H100 80GB HBM3");
  ASSERT_EQ(g.migs.size(), 1u);
  EXPECT_EQ(g.mig_parent[0], 1);
  EXPECT_EQ(g.migs[0].memory_slices, (std::vector<int>{4, 5, 6, 7}));
  EXPECT_TRUE(DevicesPass(g, {"device.attributes['gpu.nvidia.com'].type == 'gpu'"}, ""));
  EXPECT_FALSE(DevicesPass(g, {"device.attributes['gpu.nvidia.com'].index < 4"}, ""))
      << "every GPU of the node must pass";
  EXPECT_TRUE(DevicesPass(g, {}, "3g.40gb"));
  EXPECT_FALSE(DevicesPass(g, {}, "1g.10gb"));

  // Domains that do not split the GPUs evenly in order are one domain.
  json uneven = json::array({Gpu(0, 0), Gpu(1, 1), Gpu(2, 0), Gpu(3, 1)});
  const SliceInfo u = ParseSlice(Slice("n2", uneven));
  EXPECT_EQ(GpusOf({&u}).nvlink_domains, 1);

  // The model comes from the driver's product name and memory.
  const spec::ClusterConfig config = [] {
    spec::Diagnostics d;
    return *spec::ParseClusterConfig("cluster: k\nqueues:\n  - name: a\nkubernetes: {}\n", "k.yaml",
                                     d);
  }();
  NodeInfo node;
  node.dra = g;
  auto model = ModelOf(node, config.cluster.catalog());
  ASSERT_TRUE(model.has_value());
  EXPECT_EQ(config.cluster.catalog().model(*model).name, "H100-80GB");
}

json Claim(const std::string& name, json requests, json constraints = json::array()) {
  return {{"metadata",
           {{"name", name}, {"namespace", "ml"}, {"uid", "c-" + name}, {"resourceVersion", "7"}}},
          {"spec", {{"devices", {{"requests", requests}, {"constraints", constraints}}}}}};
}

TEST(DraClaim, WhatAPodAsksAndTheAllocationWritten) {
  std::map<std::string, ClassInfo> classes;
  classes["gpu.nvidia.com"] = ParseClass(
      {{"metadata", {{"name", "gpu.nvidia.com"}}},
       {"spec",
        {{"selectors",
          json::array({{{"cel",
                         {{"expression",
                           "device.driver == 'gpu.nvidia.com' && "
                           "device.attributes['gpu.nvidia.com'].type == 'gpu'"}}}}})}}}});
  classes["mig.nvidia.com"] = ParseClass(
      {{"metadata", {{"name", "mig.nvidia.com"}}},
       {"spec",
        {{"selectors",
          json::array({{{"cel",
                         {{"expression",
                           "device.driver == 'gpu.nvidia.com' && "
                           "device.attributes['gpu.nvidia.com'].type == 'mig'"}}}}})}}}});
  classes["other"] = ParseClass(
      {{"metadata", {{"name", "other"}}},
       {"spec",
        {{"selectors",
          json::array({{{"cel", {{"expression", "device.driver == 'nic.example.com'"}}}}})}}}});

  const ClaimInfo four = ParseClaim(Claim(
      "four",
      json::array(
          {{{"name", "a"}, {"exactly", {{"deviceClassName", "gpu.nvidia.com"}, {"count", 3}}}},
           {{"name", "b"}, {"exactly", {{"deviceClassName", "gpu.nvidia.com"}}}}}),
      json::array({{{"matchAttribute", "gpu.nvidia.com/nvlinkDomain"}}})));
  auto ask = AskOf({&four}, classes);
  ASSERT_TRUE(ask.ok()) << ask.error().ToString();
  EXPECT_EQ(ask->gpus, 4);
  EXPECT_TRUE(ask->one_domain);
  ASSERT_EQ(ask->parts.size(), 1u);
  json patch = AllocationPatch(ask->parts[0], {"gpu-4", "gpu-5", "gpu-6", "gpu-7"}, "n1", "n1", "p",
                               "uid-p");
  EXPECT_EQ(patch["metadata"]["resourceVersion"], "7");
  const json& results = patch["status"]["allocation"]["devices"]["results"];
  ASSERT_EQ(results.size(), 4u);
  EXPECT_EQ(results[2]["request"], "a");
  EXPECT_EQ(results[3]["request"], "b");
  EXPECT_EQ(results[3]["device"], "gpu-7");
  EXPECT_EQ(results[3]["pool"], "n1");
  EXPECT_EQ(patch["status"]["reservedFor"][0]["uid"], "uid-p");
  EXPECT_EQ(patch["status"]["allocation"]["nodeSelector"]["nodeSelectorTerms"][0]["matchFields"][0]
                 ["values"][0],
            "n1");

  const ClaimInfo mig = ParseClaim(
      Claim("mig",
            json::array(
                {{{"name", "m"},
                  {"exactly",
                   {{"deviceClassName", "mig.nvidia.com"},
                    {"selectors", json::array({{{"cel",
                                                 {{"expression",
                                                   "device.attributes['gpu.nvidia.com'].profile == "
                                                   "'1g.10gb'"}}}}})}}}}})));
  ask = AskOf({&mig}, classes);
  ASSERT_TRUE(ask.ok()) << ask.error().ToString();
  EXPECT_EQ(ask->mig_profile, "1g.10gb");
  EXPECT_EQ(ask->gpus, 0);

  // What is refused, each with what to change.
  auto refused = [&](json requests, json constraints, const std::string& says) {
    const ClaimInfo c = ParseClaim(Claim("bad", requests, constraints));
    auto a = AskOf({&c}, classes);
    ASSERT_FALSE(a.ok()) << says;
    EXPECT_NE(a.error().ToString().find(says), std::string::npos) << a.error().ToString();
  };
  refused(json::array({{{"name", "x"}, {"exactly", {{"deviceClassName", "other"}}}}}),
          json::array(), "Gantry allocates devices of driver gpu.nvidia.com only");
  refused(json::array({{{"name", "x"}, {"exactly", {{"deviceClassName", "missing"}}}}}),
          json::array(), "DeviceClass missing not found");
  refused(json::array({{{"name", "x"}, {"exactly", {{"deviceClassName", "mig.nvidia.com"}}}}}),
          json::array(), "must name its profile");
  refused(json::array(
              {{{"name", "x"},
                {"exactly", {{"deviceClassName", "gpu.nvidia.com"}, {"allocationMode", "All"}}}}}),
          json::array(), "allocationMode All is not supported");
  refused(json::array({{{"name", "x"}, {"exactly", {{"deviceClassName", "gpu.nvidia.com"}}}}}),
          json::array({{{"matchAttribute", "gpu.nvidia.com/uuid"}}}),
          "matchAttribute gpu.nvidia.com/uuid is not supported");
}

// A claim allocated for one pod and shared by another: its node from the allocation's
// node selector, its pods in order, and the patch that adds a third after them.
TEST(DraClaim, ASharedClaimsNodeAndPodsAreReadAndAPodIsAddedAfterThem) {
  json obj =
      Claim("shared",
            json::array({{{"name", "gpu"}, {"exactly", {{"deviceClassName", "gpu.nvidia.com"}}}}}));
  obj["status"] = {
      {"allocation",
       {{"devices",
         {{"results", json::array({{{"request", "gpu"},
                                    {"driver", "gpu.nvidia.com"},
                                    {"pool", "n1"},
                                    {"device", "gpu-3"}}})}}},
        {"nodeSelector",
         {{"nodeSelectorTerms",
           json::array({{{"matchFields", json::array({{{"key", "metadata.name"},
                                                       {"operator", "In"},
                                                       {"values", json::array({"n1"})}}})}}})}}}}},
      {"reservedFor", json::array({{{"resource", "pods"}, {"name", "a"}, {"uid", "uid-a"}},
                                   {{"resource", "pods"}, {"name", "b"}, {"uid", "uid-b"}}})}};
  const ClaimInfo c = ParseClaim(obj);
  ASSERT_EQ(c.problem, "");
  EXPECT_TRUE(c.allocated);
  EXPECT_EQ(c.node, "n1");
  EXPECT_EQ(c.reserved_for, (std::vector<std::string>{"uid-a", "uid-b"}));
  EXPECT_EQ(c.reserved_names, (std::vector<std::string>{"a", "b"}));
  const json patch = ReservationPatch(c, "c", "uid-c");
  EXPECT_EQ(patch["metadata"]["uid"], "c-shared");
  EXPECT_EQ(patch["metadata"]["resourceVersion"], "7") << "the precondition";
  const json& reserved = patch["status"]["reservedFor"];
  ASSERT_EQ(reserved.size(), 3u);
  EXPECT_EQ(reserved[0]["uid"], "uid-a") << "the pod it was allocated for stays first";
  EXPECT_EQ(reserved[2], json({{"resource", "pods"}, {"name", "c"}, {"uid", "uid-c"}}));
  EXPECT_FALSE(patch["status"].contains("allocation")) << "the allocation is left as it is";
  // A node selector of another form names no node.
  obj["status"]["allocation"]["nodeSelector"]["nodeSelectorTerms"][0]["matchFields"][0]
     ["operator"] = "NotIn";
  EXPECT_EQ(ParseClaim(obj).node, "");
}

}  // namespace
}  // namespace gantry::kube
