// Cluster config reader: the spec's example, every validation error with its file,
// line and field, and YAML line numbers.

#include "spec/config_reader.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

namespace gantry::spec {
namespace {

using core::Bit;
using core::kGB;
using core::kGpuUnits;
using core::Sharing;

std::vector<std::string> Problems(const Diagnostics& d) {
  std::vector<std::string> out;
  for (const Diag& x : d.items()) out.push_back(x.ToString());
  return out;
}

// Parses `yaml` expecting failure; returns the problems as "FILE:LINE: FIELD: MESSAGE".
std::vector<std::string> Errors(const std::string& yaml) {
  Diagnostics d;
  auto config = ParseClusterConfig(yaml, "c.yaml", d);
  EXPECT_FALSE(config.has_value());
  EXPECT_FALSE(d.empty());
  return Problems(d);
}

std::string OneError(const std::string& yaml) {
  std::vector<std::string> e = Errors(yaml);
  EXPECT_EQ(e.size(), 1u) << ::testing::PrintToString(e);
  return e.empty() ? "" : e.front();
}

ClusterConfig Parse(const std::string& yaml) {
  Diagnostics d;
  auto config = ParseClusterConfig(yaml, "c.yaml", d);
  EXPECT_TRUE(config.has_value()) << d.ToString();
  EXPECT_TRUE(d.empty()) << d.ToString();
  if (!config) return ClusterConfig{};
  return std::move(*config);
}

// A minimal pool for tests about other sections.
const char* kPool = R"(pools:
  - name: p
    count: 1
    gpus: 8
    gpu_model: H100-80GB
)";

// Spec section 1's example, with the parent queue it names.
const char* kExample = R"(cluster: lab
gpu_models:
  - name: V100M32
    memory_gb: 32
pools:
  - name: h100
    count: 16
    gpus: 8
    gpu_model: H100-80GB
    nvlink_domains: 1
    leaf_size: 4
    cpus: 112
    memory_gb: 2048
    spot: false
    sharing: [mig, mps, timeslice]
  - name: v100
    name_prefix: old
    count: 2
    gpus: 4
    gpu_model: V100M32
    nvlink_domains: 2
    cpus: 40.5
    memory_gb: 0.5
    spot: true
  - name: cpu
    count: 3
    gpus: 0
    cpus: 224
queues:
  - name: serving
    guaranteed_gpus: 16
    burst_gpus: 16
    weight: 1
  - name: ml
    guaranteed_gpus: 8.5
  - name: research
    parent: ml
    guaranteed_gpus: 8
    burst_gpus: 64
    weight: 2
  - name: notebooks
    parent: ml
    guaranteed_gpus: 0.5
policy:
  reclaim_idle_after_s: 900
)";

TEST(ConfigReaderTest, ReadsTheSpecExample) {
  const ClusterConfig c = Parse(kExample);
  const core::Cluster& cl = c.cluster;
  EXPECT_EQ(cl.name(), "lab");
  ASSERT_EQ(cl.pools().size(), 3u);
  ASSERT_EQ(cl.nodes().size(), 21u);
  EXPECT_EQ(cl.node(core::NodeId(0)).name, "h100-0");
  EXPECT_EQ(cl.node(core::NodeId(15)).name, "h100-15");
  EXPECT_EQ(cl.node(core::NodeId(16)).name, "old-0");
  EXPECT_EQ(cl.node(core::NodeId(20)).name, "cpu-2");
  EXPECT_EQ(cl.leaves().size(), 4u + 1 + 1);
  EXPECT_EQ(cl.gpu_count(), 16u * 8 + 2 * 4);

  const core::PoolSpec& h100 = cl.pool(core::PoolId(0)).spec;
  EXPECT_EQ(h100.leaf_size, 4);
  EXPECT_EQ(h100.cpus_milli, 112'000);
  EXPECT_EQ(h100.memory_bytes, 2048 * kGB);
  EXPECT_FALSE(h100.spot);
  EXPECT_EQ(h100.sharing, Bit(Sharing::kExclusive) | Bit(Sharing::kMig) | Bit(Sharing::kMps) |
                              Bit(Sharing::kTimeslice));
  const core::PoolSpec& v100 = cl.pool(core::PoolId(1)).spec;
  EXPECT_EQ(cl.catalog().model(v100.model).name, "V100M32");
  EXPECT_FALSE(cl.catalog().model(v100.model).builtin);
  EXPECT_EQ(cl.catalog().model(v100.model).memory_bytes, 32 * kGB);
  EXPECT_EQ(v100.cpus_milli, 40'500);
  EXPECT_EQ(v100.memory_bytes, kGB / 2);
  EXPECT_TRUE(v100.spot);
  EXPECT_EQ(v100.sharing, Bit(Sharing::kExclusive));  // default: exclusive only
  EXPECT_EQ(cl.node(core::NodeId(16)).gpus_per_domain, 2);
  EXPECT_FALSE(cl.pool(core::PoolId(2)).spec.model.valid());

  ASSERT_EQ(c.queues.size(), 4u);
  const core::Queue& serving = c.queues.queue(*c.queues.Find("serving"));
  EXPECT_EQ(serving.spec.guaranteed, 16 * kGpuUnits);
  EXPECT_EQ(serving.spec.burst, 16 * kGpuUnits);
  const core::Queue& ml = c.queues.queue(*c.queues.Find("ml"));
  EXPECT_EQ(ml.spec.guaranteed, 8 * kGpuUnits + kGpuUnits / 2);
  EXPECT_EQ(ml.spec.burst, -1);  // no cap
  const core::Queue& research = c.queues.queue(*c.queues.Find("research"));
  EXPECT_EQ(research.parent, *c.queues.Find("ml"));
  EXPECT_DOUBLE_EQ(research.spec.weight, 2.0);
  EXPECT_EQ(c.policy.params.reclaim_idle_after, 900'000);
}

TEST(ConfigReaderTest, FractionalGpuAmountsAreExactUnits) {
  const ClusterConfig c = Parse(std::string(kPool) + R"(queues:
  - name: a
    guaranteed_gpus: 0.142857142857
    burst_gpus: 0.25
)");
  const core::Queue& a = c.queues.queue(core::QueueId(0));
  EXPECT_EQ(a.spec.guaranteed, 1000);  // one MIG slice: round(x * 7000)
  EXPECT_EQ(a.spec.burst, 1750);
}

TEST(ConfigReaderTest, NoQueuesMeansOneDefaultQueue) {
  const ClusterConfig c = Parse(kPool);
  ASSERT_EQ(c.queues.size(), 1u);
  EXPECT_EQ(c.queues.queue(core::QueueId(0)).spec.name, "default");
  EXPECT_EQ(c.queues.queue(core::QueueId(0)).spec.burst, -1);
  EXPECT_EQ(c.cluster.name(), "gantry");
  EXPECT_EQ(c.policy.params.reclaim_idle_after, 900'000);  // 15 minutes unless set
}

TEST(ConfigReaderTest, PolicyTunables) {
  const ClusterConfig c = Parse(std::string(kPool) + R"(policy:
  reclaim_idle_after_s: 1800
  fairshare_half_life_s: 3600
  aging_s: 0.5
  min_run_before_repreempt_s: 0
  backfill_depth: 4
  default_runtime_estimate_s: 60
  backfill_lease_after_s: 7200
  preempt_after_checkpoint_s: 30
  default_grace_s: 45
  best_effort_yields_to: critical
  best_effort_yields_within_s: 600
  consolidate_within_s: 900
  fragmentation_weights: gpus
)");
  const core::PolicyParams& p = c.policy.params;
  EXPECT_EQ(c.policy.default_grace, 45'000);
  EXPECT_EQ(Parse(kPool).policy.default_grace, 30'000);  // issue 16, bug 10: 30 s unless set
  EXPECT_EQ(p.reclaim_idle_after, 1'800'000);
  EXPECT_EQ(p.fairshare_half_life, 3'600'000);
  EXPECT_EQ(p.aging, 500);
  EXPECT_EQ(p.min_run_before_repreempt, 0);
  EXPECT_EQ(p.backfill_depth, 4);
  EXPECT_EQ(p.default_runtime_estimate, 60'000);
  EXPECT_EQ(p.backfill_lease_after, 7'200'000);
  EXPECT_EQ(p.preempt_after_checkpoint, 30'000);
  EXPECT_EQ(p.best_effort_yields_to, core::Tier::kCritical);
  EXPECT_EQ(p.best_effort_yields_within, 600'000);
  EXPECT_EQ(p.consolidate_within, 900'000);
  EXPECT_EQ(Parse(kPool).policy.params.consolidate_within, 0);  // off unless set
  EXPECT_TRUE(p.fragmentation_by_gpus);
  EXPECT_FALSE(Parse(kPool).policy.params.fragmentation_by_gpus);  // FGD's (workers) unless set
  // By default standard work takes best-effort work beyond its guarantee too, within an
  // hour of the victim's start or last checkpoint.
  EXPECT_EQ(Parse(kPool).policy.params.best_effort_yields_to, core::Tier::kStandard);
  EXPECT_EQ(Parse(kPool).policy.params.best_effort_yields_within, 3'600'000);
  // Absent keys keep the core's defaults.
  EXPECT_EQ(Parse(kPool).policy.params.fairshare_half_life,
            core::PolicyParams{}.fairshare_half_life);
  EXPECT_EQ(
      Errors(std::string(kPool) + R"(policy:
  fairshare_half_life_s: 0
  backfill_depth: -1
  aging_s: soon
)"),
      (std::vector<std::string>{"c.yaml:7: policy.fairshare_half_life_s: must be above 0, got 0",
                                "c.yaml:8: policy.backfill_depth: must be at least 0, got -1",
                                "c.yaml:9: policy.aging_s: expected a number, got \"soon\""}));
  EXPECT_EQ(OneError(std::string(kPool) + "policy:\n  best_effort_yields_to: everyone\n"),
            "c.yaml:7: policy.best_effort_yields_to: must be one of critical, standard, none, got "
            "\"everyone\"");
  EXPECT_EQ(OneError(std::string(kPool) + "policy: 5\n"),
            "c.yaml:6: policy: expected a mapping, got \"5\"");
}

TEST(ConfigReaderTest, YamlScalarsAreUntyped) {
  // YAML does not type scalars for us: a quoted "8" is still a count.
  const ClusterConfig c = Parse(R"(pools:
  - name: p
    count: "2"
    gpus: '8'
    gpu_model: H100-80GB
    spot: yes
)");
  EXPECT_EQ(c.cluster.nodes().size(), 2u);
  EXPECT_TRUE(c.cluster.pool(core::PoolId(0)).spec.spot);
}

TEST(ConfigReaderTest, WrongTypesQuoteTheValue) {
  EXPECT_EQ(OneError(R"(pools:
  - name: p
    count: abc
    gpus: 0
)"),
            "c.yaml:3: pools[p].count: expected a whole number, got \"abc\"");
  EXPECT_EQ(OneError(R"(pools:
  - name: p
    count: 1
    gpus: 0
    cpus: [1, 2]
)"),
            "c.yaml:5: pools[p].cpus: expected a number, got a list");
  EXPECT_EQ(OneError(R"(pools:
  - name: p
    count: 1
    gpus: 0
    spot: maybe
)"),
            "c.yaml:5: pools[p].spot: expected true or false, got \"maybe\"");
  EXPECT_EQ(OneError(R"(pools:
  - name: p
    count: 2.5
    gpus: 0
)"),
            "c.yaml:3: pools[p].count: must be a whole number, got 2.5");
  EXPECT_EQ(OneError("pools: 5\n"), "c.yaml:1: pools: expected a list, got \"5\"");
  EXPECT_EQ(OneError("- a\n- b\n"),
            "c.yaml:1: expected a mapping with cluster, gpu_models, pools, queues and policy, got "
            "a list");
}

TEST(ConfigReaderTest, UnknownFieldsAreErrors) {
  std::vector<std::string> e = Errors(R"(cluster: lab
pools:
  - name: h100
    count: 1
    gpus: 8
    gpu_model: H100-80GB
    vram_gb: 80
    nvlink_domain: 2
queues:
  - name: q
    guarantee: 4
policy:
  reclaim_idle: 10
extra: 1
)");
  EXPECT_EQ(
      e,
      (std::vector<std::string>{
          "c.yaml:7: pools[h100].vram_gb: unknown field (known: name, name_prefix, count, "
          "gpus, gpu_model, nvlink_domains, leaf_size, cpus, memory_gb, spot, sharing, "
          "mig_managed, "
          "default_cpus_per_gpu, default_memory_gb_per_gpu)",
          "c.yaml:8: pools[h100].nvlink_domain: unknown field; did you mean nvlink_domains?",
          "c.yaml:11: queues[q].guarantee: unknown field (known: name, parent, "
          "guaranteed_gpus, guaranteed_gpus_by_model, burst_gpus, weight, reclaim_idle_after_s, "
          "allow_keep_when_idle, "
          "budget, order, max_wait_s, tiers)",
          "c.yaml:13: policy.reclaim_idle: unknown field (known: reclaim_idle_after_s, "
          "fairshare_half_life_s, aging_s, min_run_before_repreempt_s, backfill_depth, "
          "default_runtime_estimate_s, backfill_lease_after_s, preempt_after_checkpoint_s, "
          "default_grace_s, reclaim_idle_below, reclaim_critical, las_thresholds_gpu_s, "
          "attained_quantum_s, max_wait_s, reclaim_idle_after_s_by_tier, full_pass_interval_s, "
          "best_effort_yields_to, best_effort_yields_within_s, consolidate_within_s, max_grace_s, "
          "fragmentation_weights)",
          "c.yaml:14: extra: unknown field (known: cluster, gpu_models, pools, queues, "
          "policy, accounting, site, kubernetes)"}));
}

// Issue 12: budgets per queue and prices per GPU model.
TEST(ConfigReaderTest, BudgetsAndPrices) {
  const ClusterConfig c = Parse(std::string(kPool) + R"(queues:
  - name: org
    budget: {gpu_hours: 5000}
  - name: nlp
    parent: org
    budget: {gpu_hours: 100.5, period: week, when_spent: wait}
  - name: free
accounting:
  currency: EUR
  gpu_hour_prices: {H100-80GB: 2.5}
)");
  const core::QueueSpec& org = c.queues.queue(*c.queues.Find("org")).spec;
  ASSERT_TRUE(org.budget);
  EXPECT_EQ(org.budget->gpu_hours, 5000);
  EXPECT_EQ(org.budget->period, core::BudgetPeriod::kMonth);  // the defaults
  EXPECT_EQ(org.budget->when_spent, core::WhenSpent::kBestEffort);
  const core::QueueSpec& nlp = c.queues.queue(*c.queues.Find("nlp")).spec;
  ASSERT_TRUE(nlp.budget);
  EXPECT_EQ(nlp.budget->gpu_hours, 100.5);
  EXPECT_EQ(nlp.budget->period, core::BudgetPeriod::kWeek);
  EXPECT_EQ(nlp.budget->when_spent, core::WhenSpent::kWait);
  EXPECT_FALSE(c.queues.queue(*c.queues.Find("free")).spec.budget);
  EXPECT_EQ(c.policy.currency, "EUR");
  const core::Catalog& cat = c.cluster.catalog();
  EXPECT_EQ(core::GpuHourPrice(c.policy.params, *cat.Find("H100-80GB")), 2.5);
  EXPECT_EQ(core::GpuHourPrice(c.policy.params, *cat.Find("A100-80GB")), 1.0);  // not named: 1

  EXPECT_EQ(
      Errors(std::string(kPool) + R"(queues:
  - name: a
    budget: {gpu_hours: 0, period: day, when_spent: never, cap: 3}
  - name: b
    budget: 12
  - name: c
    budget: {period: week}
accounting:
  gpu_hour_prices: {H200-141GB: -1, B300: 2}
  money: USD
)"),
      (std::vector<std::string>{
          "c.yaml:8: queues[a].budget.gpu_hours: must be above 0, got 0",
          "c.yaml:8: queues[a].budget.period: must be one of week, month, got \"day\"",
          "c.yaml:8: queues[a].budget.when_spent: must be one of best-effort, wait, got \"never\"",
          "c.yaml:8: queues[a].budget.cap: unknown field (known: gpu_hours, period, when_spent, "
          "applies_to)",
          "c.yaml:10: queues[b].budget: expected a mapping with gpu_hours, period and when_spent, "
          "got \"12\"",
          "c.yaml:12: queues[c].budget.gpu_hours: required",
          "c.yaml:14: accounting.gpu_hour_prices.H200-141GB: must be at least 0, got -1",
          "c.yaml:14: accounting.gpu_hour_prices.B300: unknown GPU model \"B300\" (known: "
          "A100-40GB, A100-80GB, "
          "H100-80GB, H100-94GB, H200-141GB, B200-180GB, L40S-48GB, L4-24GB, T4-16GB, A10-24GB, "
          "V100-16GB, "
          "V100-32GB)",
          "c.yaml:15: accounting.money: unknown field (known: currency, gpu_hour_prices)"}));
}

// Issue 47 B: which tiers a queue may use, which tiers a budget covers, and the grace
// a job may ask for per tier.
TEST(ConfigReaderTest, TiersPerQueueBudgetTiersAndGraceCaps) {
  const ClusterConfig c = Parse(std::string(kPool) + R"(queues:
  - name: serving
    tiers: [critical]
  - name: research
    tiers: [standard, best-effort]
    budget: {gpu_hours: 10, applies_to: [critical, standard, best-effort]}
  - name: open
policy:
  max_grace_s: {best-effort: 30, critical: 900}
)");
  const auto tiers = [&](const char* q) { return c.queues.queue(*c.queues.Find(q)).spec.tiers; };
  EXPECT_EQ(tiers("serving"), Bit(core::Tier::kCritical));
  EXPECT_EQ(tiers("research"), Bit(core::Tier::kStandard) | Bit(core::Tier::kBestEffort));
  EXPECT_EQ(tiers("open"), std::nullopt);
  EXPECT_EQ(c.queues.queue(*c.queues.Find("research")).spec.budget->applies_to, core::kAllTiers);
  EXPECT_EQ(c.policy.max_grace, (std::array<core::Ticks, 3>{900'000, 600'000, 30'000}));
  EXPECT_EQ(Parse(kPool).policy.max_grace, (std::array<core::Ticks, 3>{600'000, 600'000, 60'000}));
  EXPECT_EQ(Parse(std::string(kPool) + "policy:\n  max_grace_s: 120\n").policy.max_grace,
            (std::array<core::Ticks, 3>{120'000, 120'000, 120'000}));

  EXPECT_EQ(
      Errors(std::string(kPool) + R"(queues:
  - name: a
    tiers: [gold, standard, standard]
  - name: b
    tiers: critical
    budget: {gpu_hours: 1, applies_to: [urgent]}
policy:
  max_grace_s: {best_effort: 1, standard: -1}
)"),
      (std::vector<std::string>{
          "c.yaml:8: queues[a].tiers[0]: unknown tier \"gold\" (known: critical, standard, "
          "best-effort)",
          "c.yaml:8: queues[a].tiers[2]: tier standard is listed twice",
          "c.yaml:10: queues[b].tiers: expected a list of tiers (critical, standard, best-effort), "
          "got \"critical\"",
          "c.yaml:11: queues[b].budget.applies_to[0]: unknown tier \"urgent\" (known: critical, "
          "standard, "
          "best-effort)",
          "c.yaml:13: policy.max_grace_s.standard: must be at least 0, got -1",
          "c.yaml:13: policy.max_grace_s.best_effort: unknown field; did you mean best-effort?"}));
}

// Issue 47 B4: the directories a job's workdir may be under.
TEST(ConfigReaderTest, SiteWorkdirRoots) {
  EXPECT_EQ(Parse(kPool).site.workdir_roots, std::nullopt);
  EXPECT_EQ(
      Parse(std::string(kPool) + "site:\n  workdir_roots: [/home, /scratch]\n").site.workdir_roots,
      (std::vector<std::string>{"/home", "/scratch"}));
  EXPECT_EQ(Errors(std::string(kPool) + "site:\n  workdir_roots: [home, /a/../etc]\n  qoss: 1\n"),
            (std::vector<std::string>{
                "c.yaml:7: site.workdir_roots[0]: must be an absolute path (a relative one would "
                "resolve against "
                "the agent's own directory), got \"home\"",
                "c.yaml:7: site.workdir_roots[1]: must not go up with `..`, got \"/a/../etc\"",
                "c.yaml:8: site.qoss: unknown field; did you mean qos?"}));
  EXPECT_EQ(Parse(kPool).site.max_active_jobs_per_team, 0);
  EXPECT_EQ(Parse(std::string(kPool) + "site:\n  max_active_jobs_per_team: 500\n")
                .site.max_active_jobs_per_team,
            500);
  EXPECT_EQ(Errors(std::string(kPool) + "site:\n  max_active_jobs_per_team: 0\n").size(), 1u);
}

// Issue 47: which resource limits a job does not take from its submitter unless asked
// (Slurm's PropagateResourceLimitsExcept): MEMLOCK by default, a list of Slurm's names.
TEST(ConfigReaderTest, SitePropagateResourceLimitsExcept) {
  EXPECT_EQ(Parse(kPool).site.propagate_resource_limits_except,
            (std::vector<std::string>{"MEMLOCK"}));
  EXPECT_EQ(Parse(std::string(kPool) + "site:\n  propagate_resource_limits_except: []\n")
                .site.propagate_resource_limits_except,
            std::vector<std::string>{});
  EXPECT_EQ(
      Parse(std::string(kPool) + "site:\n  propagate_resource_limits_except: [MEMLOCK, CPU]\n")
          .site.propagate_resource_limits_except,
      (std::vector<std::string>{"MEMLOCK", "CPU"}));
  EXPECT_EQ(Errors(std::string(kPool) + "site:\n  propagate_resource_limits_except: [memlock]\n"),
            (std::vector<std::string>{
                "c.yaml:7: site.propagate_resource_limits_except[0]: unknown limit \"memlock\" "
                "(AS, CORE, CPU, DATA, FSIZE, MEMLOCK, NOFILE, NPROC, RSS, STACK)"}));
}

TEST(ConfigReaderTest, SiteKillInvalidDepend) {
  EXPECT_FALSE(Parse(kPool).site.kill_invalid_depend) << "Slurm's default: they wait";
  EXPECT_TRUE(
      Parse(std::string(kPool) + "site:\n  kill_invalid_depend: true\n").site.kill_invalid_depend);
  const std::vector<std::string> errors =
      Errors(std::string(kPool) + "site:\n  kill_invalid_depend: sometimes\n");
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_EQ(errors[0].rfind("c.yaml:7: site.kill_invalid_depend: ", 0), 0u) << errors[0];
}

// Issue 14: bounded waits, per queue and for the site.
TEST(ConfigReaderTest, MaxWait) {
  const ClusterConfig c = Parse(std::string(kPool) + R"(queues:
  - name: train
  - name: serve
    max_wait_s: 3600
policy:
  max_wait_s: 86400
)");
  EXPECT_EQ(c.queues.queue(*c.queues.Find("serve")).spec.max_wait, 3'600'000);
  EXPECT_FALSE(c.queues.queue(*c.queues.Find("train")).spec.max_wait);
  EXPECT_EQ(c.policy.params.max_wait, 86'400'000);
  // With an attained-service order beside it (refused until a claim held the slices its
  // victims left: docs/policies.md).
  const ClusterConfig both = Parse(std::string(kPool) + R"(queues:
  - name: train
    order: gittins
  - name: serve
    max_wait_s: 3600
)");
  EXPECT_EQ(both.queues.queue(*both.queues.Find("serve")).spec.max_wait, 3'600'000);
}

// The scheduling cycle: a full pass at most every full_pass_interval_s (0 by default).
TEST(ConfigReaderTest, FullPassInterval) {
  EXPECT_EQ(Parse(std::string(kPool)).policy.params.full_pass_interval, 0);
  const ClusterConfig c = Parse(std::string(kPool) + "policy:\n  full_pass_interval_s: 2.5\n");
  EXPECT_EQ(c.policy.params.full_pass_interval, 2'500);
  const auto e = Errors(std::string(kPool) + "policy:\n  full_pass_interval_s: 7200\n");
  ASSERT_EQ(e.size(), 1u);
  EXPECT_NE(e[0].find("policy.full_pass_interval_s"), std::string::npos) << e[0];
}

// Issue 14: attained-service orders per queue.
TEST(ConfigReaderTest, QueueOrdersAndTheirSettings) {
  const ClusterConfig c = Parse(std::string(kPool) + R"(queues:
  - name: train
    order: gittins
  - name: sweep
    order: las
  - name: serve
policy:
  las_thresholds_gpu_s: [600, 7200.5]
  attained_quantum_s: 30
)");
  EXPECT_EQ(c.queues.queue(*c.queues.Find("train")).spec.order, core::QueueOrder::kGittins);
  EXPECT_EQ(c.queues.queue(*c.queues.Find("sweep")).spec.order, core::QueueOrder::kLas);
  EXPECT_FALSE(c.queues.queue(*c.queues.Find("serve")).spec.order);
  EXPECT_EQ(c.policy.params.las_thresholds_gpu_s, (std::vector<double>{600, 7200.5}));
  EXPECT_EQ(c.policy.params.attained_quantum, 30'000);

  EXPECT_EQ(
      Errors(std::string(kPool) + R"(queues:
  - name: a
    order: shortest
policy:
  las_thresholds_gpu_s: [600, 600, -1, x]
  attained_quantum_s: 0
)"),
      (std::vector<std::string>{
          "c.yaml:8: queues[a].order: must be one of fair-share, las, gittins, got \"shortest\"",
          "c.yaml:10: policy.las_thresholds_gpu_s[1]: must be above the one before it (the levels "
          "ascend)",
          "c.yaml:10: policy.las_thresholds_gpu_s[2]: must be above 0, got -1",
          "c.yaml:10: policy.las_thresholds_gpu_s[3]: expected a number, got \"x\"",
          "c.yaml:11: policy.attained_quantum_s: must be above 0, got 0"}));
}

TEST(ConfigReaderTest, DuplicateKeys) {
  EXPECT_EQ(OneError(R"(pools:
  - name: p
    count: 1
    gpus: 0
    count: 2
)"),
            "c.yaml:5: pools[p].count: given twice (first on line 3)");
}

TEST(ConfigReaderTest, PoolErrors) {
  EXPECT_EQ(OneError(R"(pools:
  - name: h100
    count: 2
    gpus: -8
    cpus: 4
)"),
            "c.yaml:4: pools[h100].gpus: must be at least 0, got -8");
  EXPECT_EQ(OneError(R"(pools:
  - name: h100
    count: 2
    gpus: 8
)"),
            "c.yaml:2: pools[h100].gpu_model: required when gpus > 0");
  const std::string unknown = OneError(R"(pools:
  - name: h100
    count: 2
    gpus: 8
    gpu_model: H100-80
)");
  EXPECT_NE(unknown.find("c.yaml:5: pools[h100].gpu_model: unknown GPU model \"H100-80\" (known: "),
            std::string::npos)
      << unknown;
  EXPECT_NE(unknown.find("H100-80GB"), std::string::npos);
  EXPECT_NE(unknown.find("T4-16GB"), std::string::npos);
  EXPECT_EQ(OneError(R"(pools:
  - name: cpu
    count: 2
    gpus: 0
    gpu_model: H100-80GB
)"),
            "c.yaml:5: pools[cpu].gpu_model: a CPU-only pool (gpus 0) has no GPU model, got "
            "\"H100-80GB\"");
  EXPECT_EQ(OneError(R"(pools:
  - name: t4
    count: 2
    gpus: 4
    gpu_model: T4-16GB
    sharing: [mps, mig]
)"),
            "c.yaml:6: pools[t4].sharing[1]: mig needs a MIG-capable GPU model; T4-16GB has no MIG "
            "profiles");
  EXPECT_EQ(OneError(R"(pools:
  - name: p
    count: 2
    gpus: 4
    gpu_model: T4-16GB
    sharing: [vgpu]
)"),
            "c.yaml:6: pools[p].sharing[0]: must be one of mig, mps, timeslice, got \"vgpu\"");
  EXPECT_EQ(OneError(R"(pools:
  - name: p
    count: 2
    gpus: 8
    gpu_model: H100-80GB
    nvlink_domains: 3
)"),
            "c.yaml:6: pools[p].nvlink_domains: 3 does not divide gpus 8 evenly");
  EXPECT_EQ(OneError(R"(pools:
  - name: p
    gpus: 0
)"),
            "c.yaml:2: pools[p].count: required: the number of nodes in the pool");
  EXPECT_EQ(OneError(R"(pools:
  - name: bad name
    count: 1
    gpus: 0
)"),
            "c.yaml:2: pools[bad name].name: may hold only letters, digits, '-', '_' and '.', got "
            "\"bad name\"");
  EXPECT_EQ(OneError(R"(pools:
  - name: p
    count: 1
    gpus: 0
    memory_gb: -1
)"),
            "c.yaml:5: pools[p].memory_gb: must be at least 0, got -1");
  EXPECT_EQ(OneError(R"(pools:
  - name: p
    count: 1
    gpus: 65
    gpu_model: H100-80GB
)"),
            "c.yaml:4: pools[p].gpus: must be at most 64, got 65");
}

// Issue 12 item 7: pools whose agents lay out MIG instances where the scheduler places them.
TEST(ConfigReaderTest, MigManagedPools) {
  const ClusterConfig c = Parse(R"(pools:
  - name: managed
    count: 1
    gpus: 8
    gpu_model: H100-80GB
    sharing: [mig]
    mig_managed: true
  - name: laid-out
    count: 1
    gpus: 8
    gpu_model: A100-80GB
    sharing: [mig, mps]
)");
  EXPECT_TRUE(c.cluster.pool(core::PoolId(0)).spec.mig_managed);
  EXPECT_FALSE(c.cluster.pool(core::PoolId(1)).spec.mig_managed)
      << "not asked: instances laid out beforehand";
  EXPECT_EQ(
      OneError(R"(pools:
  - name: p
    count: 1
    gpus: 8
    gpu_model: H100-80GB
    sharing: [mps]
    mig_managed: true
)"),
      "c.yaml:7: pools[p].mig_managed: the agents create MIG instances only for MIG jobs: list mig "
      "under sharing, or drop mig_managed");
  EXPECT_EQ(OneError(R"(pools:
  - name: p
    count: 1
    gpus: 8
    gpu_model: H100-80GB
    sharing: [mig]
    mig_managed: sometimes
)"),
            "c.yaml:7: pools[p].mig_managed: expected true or false, got \"sometimes\"");
  // A model without MIG: said once, at sharing.
  EXPECT_EQ(OneError(R"(pools:
  - name: t4
    count: 1
    gpus: 4
    gpu_model: T4-16GB
    sharing: [mig]
    mig_managed: true
)"),
            "c.yaml:6: pools[t4].sharing[0]: mig needs a MIG-capable GPU model; T4-16GB has no MIG "
            "profiles");
  // Off needs nothing.
  EXPECT_FALSE(Parse(std::string(kPool) + "    mig_managed: false\n")
                   .cluster.pool(core::PoolId(0))
                   .spec.mig_managed);
}

TEST(ConfigReaderTest, CoreErrorsGetTheirLines) {
  EXPECT_EQ(OneError(R"(pools:
  - name: a
    count: 1
    gpus: 0
  - name: b
    name_prefix: a
    count: 1
    gpus: 0
)"),
            "c.yaml:6: pools[b].name_prefix: node names \"a-<i>\" collide with those of pool a");
  EXPECT_EQ(OneError(R"(pools:
  - name: a
    count: 1
    gpus: 0
  - name: a
    count: 1
    gpus: 0
)"),
            "c.yaml:5: pools[a].name: duplicate pool name \"a\", first on line 2");
  EXPECT_EQ(OneError(R"(pools: []
)"),
            "c.yaml:1: pools: must list at least one pool of nodes");
  EXPECT_EQ(OneError("cluster: x\n"), "c.yaml:1: pools: required: list at least one pool of nodes");
}

TEST(ConfigReaderTest, QueueErrors) {
  const std::string base = kPool;
  EXPECT_EQ(OneError(base + R"(queues:
  - name: a
  - name: b
  - name: a
)"),
            "c.yaml:9: queues[a].name: duplicate queue name \"a\", first on line 7");
  EXPECT_EQ(OneError(base + R"(queues:
  - name: research
    parent: ml
)"),
            "c.yaml:8: queues[research].parent: unknown parent queue \"ml\"");
  EXPECT_EQ(OneError(base + R"(queues:
  - name: a
    parent: c
  - name: b
    parent: a
  - name: c
    parent: b
)"),
            "c.yaml:8: queues[a].parent: queue parents form a cycle: a -> c -> b -> a");
  EXPECT_EQ(OneError(base + R"(queues:
  - name: research
    guaranteed_gpus: 8
    burst_gpus: 4
)"),
            "c.yaml:9: queues[research].burst_gpus: 4 is below guaranteed_gpus 8");
  EXPECT_EQ(Errors(base + R"(queues:
  - name: research
    guaranteed_gpus: -1
    burst_gpus: -2
    weight: 0
)"),
            (std::vector<std::string>{
                "c.yaml:8: queues[research].guaranteed_gpus: must be at least 0, got -1",
                "c.yaml:9: queues[research].burst_gpus: must be at least 0, got -2",
                "c.yaml:10: queues[research].weight: must be above 0, got 0"}));
  EXPECT_EQ(
      OneError(base + R"(queues:
  - name: ml
    guaranteed_gpus: 8
  - name: a
    parent: ml
    guaranteed_gpus: 6
  - name: b
    parent: ml
    guaranteed_gpus: 2.5
)"),
      "c.yaml:8: queues[ml].guaranteed_gpus: children's guarantees add up to 8.5 (a 6, b 2.5), "
      "above this queue's 8");
  EXPECT_EQ(OneError(base + R"(queues:
  - parent: x
)"),
            "c.yaml:7: queues[0].name: required");
}

// Guarantees are promises: the top-level queues' must fit in the cluster (issue 15: 200
// GPUs guaranteed on 8 passed validate), in all and per model.
TEST(ConfigReaderTest, GuaranteesAboveTheClusterAreRefused) {
  const std::string pools = R"(pools:
  - name: h
    count: 1
    gpus: 8
    gpu_model: H100-80GB
  - name: a
    count: 2
    gpus: 8
    gpu_model: A100-80GB
  - name: cpu
    count: 2
    gpus: 0
)";
  EXPECT_EQ(OneError(pools + R"(queues:
  - name: ml
    guaranteed_gpus: 200
  - name: x
    parent: ml
    guaranteed_gpus: 100
)"),
            "c.yaml:15: queues[ml].guaranteed_gpus: top-level queues' guarantees add up to 200 "
            "GPUs (ml 200 "
            "GPUs), above the cluster's 24 GPUs: they could not all be honoured");
  EXPECT_EQ(OneError(pools + R"(queues:
  - name: serving
    guaranteed_gpus_by_model: {A100-80GB: 12}
  - name: batch
    guaranteed_gpus_by_model: {A100-80GB: 8}
)"),
            "c.yaml:15: queues[serving].guaranteed_gpus_by_model.A100-80GB: guarantees on "
            "A100-80GB add up to 20 "
            "GPUs, above the cluster's 16 GPUs A100-80GB");
  // Exactly the cluster is fine; so are children summing to their parent.
  const ClusterConfig c = Parse(pools + R"(queues:
  - name: ml
    guaranteed_gpus: 16
  - name: x
    parent: ml
    guaranteed_gpus: 16
  - name: serving
    guaranteed_gpus_by_model: {H100-80GB: 8}
)");
  EXPECT_EQ(c.queues.size(), 3u);
}

// Guarantees per GPU model (Kueue's per-flavor quotas): read by model, summed into
// guaranteed_gpus, and every mistake named by its model.
TEST(ConfigReaderTest, GuaranteesPerModel) {
  const std::string pools = R"(pools:
  - name: h
    count: 2
    gpus: 8
    gpu_model: H100-80GB
  - name: a
    count: 2
    gpus: 8
    gpu_model: A100-80GB
)";
  const ClusterConfig c = Parse(pools + R"(queues:
  - name: serving
    guaranteed_gpus_by_model: {A100-80GB: 12, H100-80GB: 2.5}
  - name: research
    guaranteed_gpus: 4
)");
  const core::QueueSpec& serving = c.queues.queue(*c.queues.Find("serving")).spec;
  EXPECT_EQ(serving.guaranteed, 14.5 * kGpuUnits);
  ASSERT_EQ(serving.guaranteed_by_model.size(), 2u);
  EXPECT_EQ(serving.guaranteed_by_model[0].model, *c.cluster.catalog().Find("A100-80GB"));
  EXPECT_EQ(serving.guaranteed_by_model[0].units, 12 * kGpuUnits);
  EXPECT_EQ(serving.guaranteed_by_model[1].name, "H100-80GB");
  EXPECT_EQ(serving.guaranteed_by_model[1].units, 2.5 * kGpuUnits);
  EXPECT_TRUE(c.queues.queue(*c.queues.Find("research")).spec.guaranteed_by_model.empty());

  EXPECT_EQ(
      Errors(pools + R"(queues:
  - name: serving
    guaranteed_gpus: 10
    guaranteed_gpus_by_model:
      A100-80GB: 8
      B200: 1
      A100-40GB: 1
      H100-80GB: -1
  - name: batch
    guaranteed_gpus_by_model: 8
)"),
      (std::vector<std::string>{
          "c.yaml:15: queues[serving].guaranteed_gpus_by_model.B200: unknown GPU model "
          "\"B200\" (known: A100-40GB, A100-80GB, H100-80GB, H100-94GB, H200-141GB, "
          "B200-180GB, L40S-48GB, L4-24GB, T4-16GB, A10-24GB, V100-16GB, V100-32GB)",
          "c.yaml:16: queues[serving].guaranteed_gpus_by_model.A100-40GB: no pool has GPUs "
          "of model \"A100-40GB\"",
          "c.yaml:17: queues[serving].guaranteed_gpus_by_model.H100-80GB: must be at least 0, "
          "got -1",
          "c.yaml:19: queues[batch].guaranteed_gpus_by_model: expected a mapping of GPU "
          "model to GPUs, got \"8\""}));
  EXPECT_EQ(OneError(pools + R"(queues:
  - name: serving
    guaranteed_gpus: 10
    guaranteed_gpus_by_model: {A100-80GB: 8}
)"),
            "c.yaml:12: queues[serving].guaranteed_gpus: 10 is not the sum of "
            "guaranteed_gpus_by_model, 8");
  // A parent's guarantee on a model backs its children's on that model.
  EXPECT_EQ(OneError(pools + R"(queues:
  - name: ml
    guaranteed_gpus_by_model: {H100-80GB: 8, A100-80GB: 8}
  - name: a
    parent: ml
    guaranteed_gpus_by_model: {A100-80GB: 6}
  - name: b
    parent: ml
    guaranteed_gpus_by_model: {A100-80GB: 4}
)"),
            "c.yaml:12: queues[ml].guaranteed_gpus_by_model.A100-80GB: children's guarantees "
            "on A100-80GB add up to 10 (a 6, b 4), above this queue's 8");
}

TEST(ConfigReaderTest, GpuModels) {
  const ClusterConfig c = Parse(R"(gpu_models:
  - name: X100-96GB
    memory_gb: 96
    mig_profiles:
      - {name: 1g.12gb, compute_slices: 1, memory_slices: 1, memory_gb: 12, max_instances: 7, starts: [0, 1, 2, 3, 4, 5, 6]}
      - {name: 7g.96gb, compute_slices: 7, memory_slices: 8, memory_gb: 96, max_instances: 1, starts: [0]}
pools:
  - name: x
    count: 1
    gpus: 8
    gpu_model: X100-96GB
    sharing: [mig]
)");
  const core::Catalog& cat = c.cluster.catalog();
  auto id = cat.Find("X100-96GB");
  ASSERT_TRUE(id.has_value());
  ASSERT_EQ(cat.model(*id).mig_profiles.size(), 2u);
  EXPECT_EQ(cat.model(*id).mig_profiles[0].memory_bytes, 12 * kGB);
  EXPECT_EQ(cat.FindProfile(*id, "7g.96gb"), 1);
  EXPECT_NE(cat.Find("H100-80GB"), std::nullopt);  // built-ins stay

  EXPECT_EQ(OneError(std::string(R"(gpu_models:
  - name: H100-80GB
    memory_gb: 80
)") + kPool),
            "c.yaml:2: gpu_models[H100-80GB].name: duplicate GPU model \"H100-80GB\"");
  EXPECT_EQ(OneError(std::string(R"(gpu_models:
  - name: V100M32
    memory_gb: 0
)") + kPool),
            "c.yaml:3: gpu_models[V100M32].memory_gb: must be above 0, got 0");
  EXPECT_EQ(OneError(std::string(R"(gpu_models:
  - name: V100M32
)") + kPool),
            "c.yaml:2: gpu_models[V100M32].memory_gb: required");
  // The catalog's MIG rules, at the profile's field.
  EXPECT_EQ(
      OneError(std::string(R"(gpu_models:
  - name: X
    memory_gb: 80
    mig_profiles:
      - name: 4g.40gb
        compute_slices: 4
        memory_slices: 4
        memory_gb: 40
        max_instances: 1
        starts: [6]
)") + kPool),
      "c.yaml:10: gpu_models[X].mig_profiles[4g.40gb].starts: start 6 with 4 memory slices does "
      "not fit in slices 0 to 7");
  EXPECT_EQ(
      Errors(std::string(R"(gpu_models:
  - name: X
    memory_gb: 80
    mig_profiles:
      - name: 1g.10gb
        compute_slices: 9
        memory_slices: 1
        memory_gb: 10
        max_instances: 7
        starts: [0]
        extra: 1
)") + kPool),
      (std::vector<std::string>{
          "c.yaml:6: gpu_models[X].mig_profiles[1g.10gb].compute_slices: must be at most 7, got 9",
          "c.yaml:11: gpu_models[X].mig_profiles[1g.10gb].extra: unknown field (known: name, "
          "compute_slices, memory_slices, memory_gb, max_instances, starts)"}));
}

TEST(ConfigReaderTest, ReportsEveryProblemAtOnceInLineOrder) {
  std::vector<std::string> e = Errors(R"(cluster: lab
pools:
  - name: h100
    count: -16
    gpus: 8x
    gpu_model: H100-80GB
  - name: t4
    count: 2
    gpus: 4
    gpu_model: T4-16GB
    nvlink_domains: 3
queues:
  - name: a
    parent: b
  - name: b
    parent: a
policy:
  reclaim_idle_after_s: -5
)");
  EXPECT_EQ(e, (std::vector<std::string>{
                   "c.yaml:4: pools[h100].count: must be at least 0, got -16",
                   "c.yaml:5: pools[h100].gpus: expected a whole number, got \"8x\"",
                   "c.yaml:11: pools[t4].nvlink_domains: 3 does not divide gpus 4 evenly",
                   "c.yaml:14: queues[a].parent: queue parents form a cycle: a -> b -> a",
                   "c.yaml:18: policy.reclaim_idle_after_s: must be at least 0, got -5"}));
}

TEST(ConfigReaderTest, BrokenYaml) {
  const std::string e = OneError("pools:\n  - name: a\n    count: [1, 2\n");
  EXPECT_EQ(e.rfind("c.yaml:", 0), 0u) << e;
  EXPECT_NE(e.find("not valid YAML"), std::string::npos) << e;
  EXPECT_EQ(OneError(""), "c.yaml: the file is empty; a cluster config needs at least `pools`");
  EXPECT_EQ(OneError("a: 1\n---\nb: 2\n"),
            "c.yaml:3: unexpected content after the YAML document (a second document, or a stray "
            "',' or ']'); a file holds one document");
  // yaml-cpp's LoadAll never returns on this; the reader does.
  EXPECT_NE(OneError("- a\n,\n").find("unexpected content after the YAML document"),
            std::string::npos);
  const std::string dup = OneError("pools: []\n? [a, b]\n: 1\n");
  EXPECT_NE(dup.find("a mapping key must be a plain string"), std::string::npos) << dup;
}

TEST(ConfigReaderTest, HostileYamlIsBounded) {
  // An alias bomb expands past the value limit instead of eating memory.
  std::string bomb = "a: &a [x, x, x, x, x, x, x, x, x, x]\n";
  char prev = 'a';
  for (char c = 'b'; c <= 'h'; ++c) {
    bomb += std::string(1, c) + ": &" + c + " [";
    for (int i = 0; i < 10; ++i) bomb += std::string(i ? ", *" : "*") + prev;
    bomb += "]\n";
    prev = c;
  }
  const std::string e = OneError(bomb);
  EXPECT_NE(e.find("more than"), std::string::npos) << e;
  // Deep nesting.
  const std::string deep = "pools: " + std::string(200, '[') + std::string(200, ']') + "\n";
  EXPECT_NE(OneError(deep).find("nested deeper than"), std::string::npos);
}

TEST(ConfigReaderTest, ReadsFilesAndNamesThem) {
  const std::string path = ::testing::TempDir() + "/gantry_config_reader_test.yaml";
  {
    std::ofstream out(path);
    out << kExample << "bogus: 1\n";
  }
  Diagnostics d;
  EXPECT_FALSE(ReadClusterConfig(path, d).has_value());
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d.items()[0].file, path);
  const int lines = static_cast<int>(std::count(kExample, kExample + std::strlen(kExample), '\n'));
  EXPECT_EQ(d.items()[0].line, lines + 1);
  EXPECT_EQ(d.items()[0].field, "bogus");
  {
    std::ofstream out(path);
    out << kExample;
  }
  Diagnostics ok;
  EXPECT_TRUE(ReadClusterConfig(path, ok).has_value()) << ok.ToString();
  std::remove(path.c_str());

  Diagnostics missing;
  EXPECT_FALSE(ReadClusterConfig(path + ".nope", missing).has_value());
  ASSERT_EQ(missing.size(), 1u);
  EXPECT_NE(missing.ToString().find("cannot open"), std::string::npos);
}

}  // namespace
}  // namespace gantry::spec
