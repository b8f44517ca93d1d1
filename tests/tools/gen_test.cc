// The workload generator: deterministic for a seed, accepted by the project's readers
// with no diagnostics, and shaped as documented (load, kinds, queues, windows, curves).
#include "sim/gen/generator.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "test_files.h"

namespace gantry::gen {
namespace {

using testing::TempDirTest;

class GenTest : public TempDirTest {
 protected:
  GenOptions Options(const std::string& out) const {
    GenOptions o;
    o.seed = 11;
    o.gpus = 128;
    o.days = 3;
    o.load = 0.7;
    o.out = Path(out);
    return o;
  }
  GenSummary Run(const GenOptions& o) {
    Result<GenSummary> r = Generate(o);
    EXPECT_TRUE(r.ok()) << (r.ok() ? "" : r.error().ToString());
    return r.ok() ? *r : GenSummary{};
  }
};

TEST_F(GenTest, SameSeedSameBytes) {
  Run(Options("a"));
  Run(Options("b"));
  GenOptions other = Options("c");
  other.seed = 12;
  Run(other);
  for (const char* f : {"cluster.yaml", "trace.jsonl", "failures.jsonl"}) {
    EXPECT_EQ(Read(Path(std::string("a/") + f)), Read(Path(std::string("b/") + f))) << f;
  }
  EXPECT_NE(Read(Path("a/trace.jsonl")), Read(Path("c/trace.jsonl")));
  EXPECT_FALSE(Read(Path("a/trace.jsonl")).empty());
}

TEST_F(GenTest, OutputPassesTheReadersAndHasEveryKind) {
  GenOptions o = Options("out");
  o.node_failures_per_day = 0.05;  // enough failures to see some in three days
  const GenSummary s = Run(o);
  size_t jobs = 0;
  auto config = ReadOutput(Path("out"), &jobs);
  ASSERT_TRUE(config);
  EXPECT_EQ(static_cast<int64_t>(jobs), s.trace.jobs);
  EXPECT_EQ(config->cluster.gpu_count(), 128u);
  EXPECT_GT(s.failures, 0);
  for (const char* kind :
       {"realtime", "batch", "training", "notebook", "sweep", "finetune", "cpu"}) {
    EXPECT_GT(s.kinds.count(kind) ? s.kinds.at(kind).jobs : 0, 0) << kind;
  }
  // The offered load is met to within one job per kind.
  EXPECT_NEAR(s.offered_load(), 0.7, 0.1);

  // Shapes: tiers, windows, topology, idle notebooks; no job above its queue's burst
  // (nor its parent's).
  std::map<std::string, std::pair<double, std::string>> burst;  // queue -> (burst, parent)
  for (size_t i = 0; i < config->queues.size(); ++i) {
    const core::Queue& q = config->queues.queue(core::QueueId(static_cast<uint32_t>(i)));
    burst[q.spec.name] = {static_cast<double>(q.spec.burst) / core::kGpuUnits, q.spec.parent};
    EXPECT_LT(q.spec.guaranteed, q.spec.burst) << q.spec.name;
  }
  EXPECT_EQ(burst.at("team-a").second, "research");
  std::map<std::string, int> windows, idle, critical;
  double last_submit = 0;
  for (const std::string& line : Lines(Path("out/trace.jsonl"))) {
    const auto j = nlohmann::json::parse(line);
    const std::string id = j["id"];
    const std::string kind = id.substr(0, id.find('-'));
    EXPECT_GE(j["submit"].get<double>(), last_submit);
    last_submit = j["submit"];
    double gpus = j.contains("mig") ? 1 : j["gpus"].get<double>();
    gpus *= j.value("replicas", 1);
    for (std::string q = j["queue"]; !q.empty(); q = burst.at(q).second) {
      EXPECT_LE(gpus, burst.at(q).first) << line;
    }
    if (j.contains("window")) ++windows[kind];
    if (j.contains("idle_after_s")) ++idle[kind];
    if (j["tier"] == "critical") ++critical[kind];
    if (kind == "tr") {
      EXPECT_LE(j.value("replicas", 1), 16);
      EXPECT_EQ(j["topology"], j.value("replicas", 1) == 1 ? "node" : "leaf");
      EXPECT_GT(j["checkpoint_s"].get<double>(), 0);
      EXPECT_GT(j["grace_s"].get<double>(), 0);
    }
  }
  EXPECT_EQ(windows.size(), 1u);
  EXPECT_GT(windows["ft"], 0);
  EXPECT_EQ(idle.size(), 1u);
  EXPECT_GT(idle["nb"], 0);
  EXPECT_EQ(critical.size(), 1u);
  EXPECT_GT(critical["rt"], 0);
}

TEST_F(GenTest, RealTimeArrivalsFollowTheDay) {
  GenOptions o = Options("out");
  o.days = 7;
  Run(o);
  int afternoon = 0, night = 0;  // 12:00-16:00 vs 00:00-04:00 UTC
  for (const std::string& line : Lines(Path("out/trace.jsonl"))) {
    if (line.rfind(R"({"id":"rt-)", 0) != 0) continue;
    const double t = nlohmann::json::parse(line)["submit"];
    const double hour = std::fmod(t, 86400) / 3600;
    afternoon += hour >= 12 && hour < 16;
    night += hour < 4;
  }
  EXPECT_GT(afternoon, 2 * night) << afternoon << " vs " << night;
}

// The policy grid's shape (bench/policy_grid.py): an all-H100 cluster in small leaves,
// two equal teams, gangs of the sizes asked (leaf or spine), small jobs and best-effort
// work, checkpoint intervals drawn from the list.
TEST_F(GenTest, ElasticMakesAShareOfTheCheckpointingGangsElasticAndChangesNothingElse) {
  GenOptions o = Options("rigid");
  o.gpus = 64;
  o.mix =
      *ParseMix("realtime=0,batch=0,training=0,notebook=0,sweep=0,finetune=0,gang=0.7,small=0.3");
  o.gang_nodes = {2, 4};
  o.leaf_nodes = 4;
  o.checkpoint_s = {0, 600};
  Run(o);
  o.out = Path("elastic");
  o.elastic = 0.5;
  Run(o);
  ASSERT_TRUE(ReadOutput(Path("elastic")));  // the readers take min_replicas
  const std::vector<std::string> rigid = Lines(Path("rigid/trace.jsonl"));
  const std::vector<std::string> elastic = Lines(Path("elastic/trace.jsonl"));
  ASSERT_EQ(rigid.size(), elastic.size());
  int gangs = 0, made = 0;
  for (size_t i = 0; i < rigid.size(); ++i) {
    auto j = nlohmann::json::parse(elastic[i]);
    const auto r = nlohmann::json::parse(rigid[i]);
    if (j.contains("min_replicas")) {
      ++made;
      EXPECT_GT(j.value("checkpoint_s", 0.0), 0) << elastic[i];
      EXPECT_EQ(j["min_replicas"].get<int>(), (j["replicas"].get<int>() + 1) / 2) << elastic[i];
      j.erase("min_replicas");
    }
    EXPECT_EQ(j, r) << "line " << i + 1 << ": only min_replicas may differ";
    gangs += r.value("replicas", 1) > 1 && r.value("checkpoint_s", 0.0) > 0;
  }
  EXPECT_GT(made, gangs / 4);
  EXPECT_LT(made, gangs * 3 / 4);
}

TEST_F(GenTest, GridKindsMakeTheShapeAsked) {
  GenOptions o = Options("out");
  o.gpus = 48;
  o.days = 7;
  o.load = 1.0;
  o.spot = 0;
  o.cpu_nodes = 0;
  o.teams = 2;
  o.equal_teams = true;
  o.leaf_nodes = 3;
  o.gang_nodes = {3, 6};
  o.checkpoint_s = {0, 600, 3600};
  o.mix = *ParseMix(
      "realtime=0,batch=0,training=0,notebook=0,sweep=0,finetune=0,gang=0.8,"
      "small=0.15,scavenger=0.05");
  const GenSummary s = Run(o);
  auto config = ReadOutput(Path("out"));
  ASSERT_TRUE(config);
  EXPECT_EQ(config->cluster.gpu_count(), 48u);
  EXPECT_EQ(config->cluster.pools().size(), 1u);  // H100 only: no inference, spot or CPU pool
  EXPECT_EQ(s.kinds.size(), 3u);
  EXPECT_NEAR(s.offered_load(), 1.0, 0.15);
  std::map<std::string, double> guaranteed;
  for (size_t i = 0; i < config->queues.size(); ++i) {
    const core::Queue& q = config->queues.queue(core::QueueId(static_cast<uint32_t>(i)));
    guaranteed[q.spec.name] = static_cast<double>(q.spec.guaranteed);
  }
  EXPECT_EQ(guaranteed.count("serving"), 0u);
  EXPECT_EQ(guaranteed.at("team-a"), guaranteed.at("team-b"));
  std::map<std::string, int> sizes, tiers, checkpoints;
  for (const std::string& line : Lines(Path("out/trace.jsonl"))) {
    const auto j = nlohmann::json::parse(line);
    const std::string id = j["id"];
    const std::string kind = id.substr(0, id.find('-'));
    ++checkpoints[std::to_string(j.value("checkpoint_s", 0.0))];
    ++tiers[kind + ":" + j["tier"].get<std::string>()];
    if (kind == "gg") {
      const int n = j["replicas"];
      ++sizes[std::to_string(n)];
      EXPECT_EQ(j["topology"], n == 3 ? "leaf" : "spine") << line;
    } else {
      EXPECT_EQ(j["topology"], "node") << line;
      EXPECT_LE(j["gpus"].get<double>(), kind == "sm" ? 4 : 8) << line;
    }
  }
  EXPECT_EQ(sizes.size(), 2u);
  EXPECT_GT(sizes["3"], sizes["6"]);  // equal GPU-hours per size: twice as many of 3
  EXPECT_EQ(checkpoints.size(), 3u);
  EXPECT_GT(tiers["gg:standard"], 0);
  EXPECT_GT(tiers["sm:standard"], 0);
  EXPECT_GT(tiers["be:best-effort"], 0);
  EXPECT_EQ(tiers.size(), 3u);

  o.gang_nodes = {7};  // more than the pool's 6 nodes
  EXPECT_EQ(Generate(o).error().field, "--gang-nodes");
}

TEST_F(GenTest, BadOptionsNameTheOption) {
  GenOptions o = Options("out");
  o.gpus = 4;
  EXPECT_EQ(Generate(o).error().field, "--gpus");
  o = Options("out");
  o.days = 0;
  EXPECT_EQ(Generate(o).error().field, "--days");
  EXPECT_EQ(ParseMix("training=x").error().field, "--mix");
  EXPECT_EQ(ParseMix("gaming=1").error().field, "--mix");
  Result<Mix> mix = ParseMix("training=1,realtime=0");
  ASSERT_TRUE(mix.ok());
  EXPECT_EQ(mix->training, 1);
  EXPECT_EQ(mix->realtime, 0);
  EXPECT_EQ(mix->batch, Mix{}.batch);
}

}  // namespace
}  // namespace gantry::gen
