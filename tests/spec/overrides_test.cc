// What-if overrides of a cluster config (gantry compare --set): paths by key and by list
// item name, YAML values, and an error naming what did not match; the result read back by
// the config reader.
#include "spec/overrides.h"

#include <gtest/gtest.h>

#include "spec/config_reader.h"

namespace gantry::spec {
namespace {

constexpr const char* kConfig = R"(cluster: t
pools:
  - name: h100
    count: 2
    gpus: 8
    gpu_model: H100-80GB
  - name: a100
    count: 1
    gpus: 8
    gpu_model: A100-80GB
queues:
  - name: nlp
    guaranteed_gpus: 8
  - name: vision
    guaranteed_gpus: 4
)";

ClusterConfig Read(const std::string& yaml) {
  Diagnostics diags;
  auto c = ParseClusterConfig(yaml, "set.yaml", diags);
  EXPECT_TRUE(c) << diags.ToString();
  return std::move(*c);
}

TEST(Overrides, SetFieldsOfNamedItemsAndAddKeys) {
  auto yaml = ApplyOverrides(kConfig,
                             "pools.h100.count=4; queues.vision.guaranteed_gpus = 12 ;"
                             "pools.a100.sharing=[mig, mps]; policy.backfill_depth=20");
  ASSERT_TRUE(yaml) << yaml.error().message;
  const ClusterConfig c = Read(*yaml);
  EXPECT_EQ(c.cluster.gpu_count(), 40u);  // 4 x 8 H100 + 8 A100
  EXPECT_EQ(c.queues.queue(*c.queues.Find("vision")).spec.guaranteed, 12 * core::kGpuUnits);
  EXPECT_EQ(c.queues.queue(*c.queues.Find("nlp")).spec.guaranteed, 8 * core::kGpuUnits);
  EXPECT_EQ(c.policy.params.backfill_depth, 20);
  // The original is untouched by an empty override list.
  auto same = ApplyOverrides(kConfig, " ; ");
  ASSERT_TRUE(same);
  EXPECT_EQ(Read(*same).cluster.gpu_count(), 24u);
}

TEST(Overrides, WhatMatchesNothingIsNamed) {
  auto no_pool = ApplyOverrides(kConfig, "pools.h200.count=4");
  ASSERT_FALSE(no_pool);
  EXPECT_EQ(no_pool.error().message, "\"pools.h200.count=4\": pools has no item named \"h200\"");
  // A mistyped key is added, and the config reader names it.
  auto no_key = ApplyOverrides(kConfig, "poolz.h100.count=4");
  ASSERT_TRUE(no_key);
  Diagnostics typo;
  EXPECT_FALSE(ParseClusterConfig(*no_key, "set.yaml", typo));
  EXPECT_NE(typo.ToString().find("poolz"), std::string::npos) << typo.ToString();
  auto no_value = ApplyOverrides(kConfig, "pools.h100.count");
  ASSERT_FALSE(no_value);
  EXPECT_NE(no_value.error().message.find("expected PATH=VALUE"), std::string::npos);
  auto item = ApplyOverrides(kConfig, "pools.h100=3");
  ASSERT_FALSE(item);
  EXPECT_NE(item.error().message.find("name one of its fields"), std::string::npos);
  auto scalar = ApplyOverrides(kConfig, "cluster.name=x");
  ASSERT_FALSE(scalar);
  EXPECT_NE(scalar.error().message.find("cluster is a value"), std::string::npos);
  // A value the reader refuses is refused by the reader, with the field.
  auto bad = ApplyOverrides(kConfig, "pools.h100.count=-1");
  ASSERT_TRUE(bad);
  Diagnostics diags;
  EXPECT_FALSE(ParseClusterConfig(*bad, "set.yaml", diags));
  EXPECT_NE(diags.ToString().find("pools[h100].count"), std::string::npos) << diags.ToString();
}

}  // namespace
}  // namespace gantry::spec
