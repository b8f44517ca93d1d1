// QueueTree::Build: the forest's links and every error it reports.

#include "core/model/queue.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace gantry::core {
namespace {

QueueSpec Q(std::string name, std::string parent = "", double guaranteed = 0, double burst = -1,
            double weight = 1) {
  QueueSpec q;
  q.name = std::move(name);
  q.parent = std::move(parent);
  q.guaranteed = static_cast<GpuUnits>(guaranteed * kGpuUnits);
  q.burst = burst < 0 ? -1 : static_cast<GpuUnits>(burst * kGpuUnits);
  q.weight = weight;
  return q;
}

std::vector<std::string> Errors(std::vector<QueueSpec> specs) {
  std::vector<std::string> out;
  for (const Error& e : QueueTree::Check(specs)) out.push_back(e.ToString());
  return out;
}

TEST(QueueTreeTest, EmptyYieldsDefaultQueue) {
  auto t = QueueTree::Build({});
  ASSERT_TRUE(t.ok());
  ASSERT_EQ(t->size(), 1u);
  const Queue& q = t->queue(QueueId(0));
  EXPECT_EQ(q.spec.name, "default");
  EXPECT_EQ(q.spec.burst, -1);
  EXPECT_EQ(q.spec.guaranteed, 0);
  EXPECT_FALSE(q.parent.valid());
  EXPECT_EQ(t->Find("default")->v, 0u);
}

TEST(QueueTreeTest, LinksChildrenAndAncestors) {
  // Children may come before their parents.
  auto t = QueueTree::Build({Q("research", "ml", 8, 64, 2), Q("serving", "", 16, 16),
                             Q("ml", "", 12), Q("vision", "research", 4), Q("nlp", "ml", 4)});
  ASSERT_TRUE(t.ok()) << t.error().ToString();
  const QueueId research = *t->Find("research");
  const QueueId ml = *t->Find("ml");
  const QueueId vision = *t->Find("vision");
  EXPECT_EQ(t->queue(research).parent, ml);
  EXPECT_EQ(t->queue(ml).children, (std::vector<QueueId>{research, *t->Find("nlp")}));
  EXPECT_EQ(t->queue(vision).self_and_ancestors, (std::vector<QueueId>{vision, research, ml}));
  EXPECT_EQ(t->queue(*t->Find("serving")).self_and_ancestors.size(), 1u);
  EXPECT_EQ(t->queue(research).spec.guaranteed, 8 * kGpuUnits);
  EXPECT_EQ(t->queue(research).spec.burst, 64 * kGpuUnits);
  EXPECT_DOUBLE_EQ(t->queue(research).spec.weight, 2.0);
  EXPECT_FALSE(t->Find("nope").has_value());
}

// Issue 47 B2: any team could declare `critical`. A queue's `tiers` bound its own jobs
// and those of every queue under it; a child cannot widen what its parent allows.
TEST(QueueTreeTest, TiersBoundTheQueueAndEveryQueueUnderIt) {
  QueueSpec org = Q("org");
  org.tiers = Bit(Tier::kStandard) | Bit(Tier::kBestEffort);
  QueueSpec team = Q("team", "org");
  team.tiers = kAllTiers;  // cannot widen org's
  QueueSpec serving = Q("serving");
  serving.tiers = Bit(Tier::kCritical);
  auto t = QueueTree::Build({org, team, serving, Q("open")});
  ASSERT_TRUE(t.ok()) << t.error().ToString();
  EXPECT_EQ(
      t->WhyTierRefused(*t->Find("team"), Tier::kCritical),
      "asks for tier critical, which queue org may not use (its tiers: standard, best-effort)");
  EXPECT_EQ(t->WhyTierRefused(*t->Find("org"), Tier::kStandard), std::nullopt);
  EXPECT_EQ(t->WhyTierRefused(*t->Find("team"), Tier::kBestEffort), std::nullopt);
  EXPECT_EQ(t->WhyTierRefused(*t->Find("serving"), Tier::kBestEffort),
            "asks for tier best-effort, which queue serving may not use (its tiers: critical)");
  for (int tier = 0; tier < kTierCount; ++tier) {  // no setting: every tier
    EXPECT_EQ(t->WhyTierRefused(*t->Find("open"), static_cast<Tier>(tier)), std::nullopt);
  }
  EXPECT_EQ(TierList(0), "none");
}

TEST(QueueTreeTest, DuplicateName) {
  EXPECT_EQ(Errors({Q("a"), Q("b"), Q("a")}),
            (std::vector<std::string>{"queues[a].name: duplicate queue name \"a\""}));
}

TEST(QueueTreeTest, UnknownParent) {
  EXPECT_EQ(Errors({Q("a", "ml")}),
            (std::vector<std::string>{"queues[a].parent: unknown parent queue \"ml\""}));
}

TEST(QueueTreeTest, CyclesReportTheirPath) {
  EXPECT_EQ(
      Errors({Q("root"), Q("b", "c"), Q("a", "b"), Q("c", "a"), Q("x", "b")}),
      (std::vector<std::string>{"queues[b].parent: queue parents form a cycle: b -> c -> a -> b"}));
  EXPECT_EQ(
      Errors({Q("self", "self")}),
      (std::vector<std::string>{"queues[self].parent: queue parents form a cycle: self -> self"}));
  // Two separate cycles: two errors.
  EXPECT_EQ(Errors({Q("a", "b"), Q("b", "a"), Q("c", "d"), Q("d", "c")}).size(), 2u);
  auto t = QueueTree::Build({Q("a", "b"), Q("b", "a")});
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.error().field, "queues[a].parent");
}

TEST(QueueTreeTest, BurstBelowGuarantee) {
  EXPECT_EQ(Errors({Q("a", "", 8, 4)}),
            (std::vector<std::string>{"queues[a].burst_gpus: 4 is below guaranteed_gpus 8"}));
  EXPECT_TRUE(Errors({Q("a", "", 8, 8)}).empty());
  EXPECT_TRUE(Errors({Q("a", "", 8)}).empty());  // no cap
}

TEST(QueueTreeTest, NegativeValues) {
  QueueSpec q = Q("a");
  q.guaranteed = -kGpuUnits / 2;
  q.burst = -2 * kGpuUnits;
  q.weight = -1;
  EXPECT_EQ(Errors({q}),
            (std::vector<std::string>{"queues[a].guaranteed_gpus: must be at least 0, got -0.5",
                                      "queues[a].burst_gpus: must be at least 0, got -2",
                                      "queues[a].weight: must be above 0, got -1"}));
  EXPECT_EQ(Errors({Q("z", "", 0, -1, 0)}),
            (std::vector<std::string>{"queues[z].weight: must be above 0, got 0"}));
}

TEST(QueueTreeTest, ChildrenGuaranteesAboveParent) {
  EXPECT_EQ(Errors({Q("ml", "", 8), Q("a", "ml", 6), Q("b", "ml", 2.5)}),
            (std::vector<std::string>{"queues[ml].guaranteed_gpus: children's guarantees add up to "
                                      "8.5 (a 6, b 2.5), above this queue's 8"}));
  EXPECT_TRUE(Errors({Q("ml", "", 8), Q("a", "ml", 6), Q("b", "ml", 2)}).empty());
}

TEST(QueueTreeTest, FractionalGuaranteesAreExactUnits) {
  // 1/7 GPU (a 1g MIG slice) is exactly 1000 units.
  auto t = QueueTree::Build({Q("a", "", 0.5), Q("b", "a", 0.5)});
  ASSERT_TRUE(t.ok()) << t.error().ToString();
  EXPECT_EQ(t->queue(QueueId(0)).spec.guaranteed, 3500);
}

TEST(QueueTreeTest, EmptyName) {
  EXPECT_EQ(Errors({Q("")}), (std::vector<std::string>{"queues[0].name: must not be empty"}));
}

}  // namespace
}  // namespace gantry::core
