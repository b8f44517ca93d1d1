// Timeline: bucket figures are time-weighted means (checked against hand-computed
// values), merging keeps them honest, memory stays bounded; and in a real run the
// series agree with each other and with the report.
#include "sim/timeline.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "sim/run_summary.h"
#include "sim/simulator.h"

namespace gantry::sim {
namespace {

using core::kGpuUnits;
using core::QueueId;
using core::Sharing;
using core::Tier;
namespace fs = std::filesystem;

core::QueueTree Queues() {
  // "team" is a child of "org": its usage counts toward org's guarantee and burst.
  auto q = core::QueueTree::Build(
      {core::QueueSpec{"org", "", 8 * kGpuUnits, 16 * kGpuUnits, 1, {}, {}, false, {}, {}, {}, {}},
       core::QueueSpec{"team", "org", 4 * kGpuUnits, -1, 1, {}, {}, false, {}, {}, {}, {}}});
  EXPECT_TRUE(q.ok());
  return std::move(q).value();
}

const uint32_t kStandard = Timeline::TierLevel(Tier::kStandard);

TEST(TimelineTest, BucketsHoldTimeWeightedMeans) {
  const core::QueueTree queues = Queues();
  Timeline tl(queues);
  tl.SetState(0, 16 * kGpuUnits, 0, 2);
  // One GPU from 0.5 s to 1.5 s: half of bucket 0 and half of bucket 1.
  tl.RunStarted(500, Tier::kStandard, QueueId(1), Sharing::kExclusive, kGpuUnits);
  tl.SetState(500, 16 * kGpuUnits, kGpuUnits, 1);
  // Half a GPU of MPS from 0.8 s to 2.6 s.
  tl.RunStarted(800, Tier::kStandard, QueueId(1), Sharing::kMps, kGpuUnits / 2);
  tl.RunEnded(1500, Tier::kStandard, QueueId(1), Sharing::kExclusive, kGpuUnits, 0,
              Timeline::Ending::kFinished);
  tl.RunEnded(2600, Tier::kStandard, QueueId(1), Sharing::kMps, kGpuUnits / 2, 300,
              Timeline::Ending::kPreempted);
  tl.SetState(2600, 16 * kGpuUnits, 0, 4);
  tl.Finish(3300);  // the last bucket, [3 s, 3.3 s), is partial

  ASSERT_EQ(tl.buckets(), 4u);
  EXPECT_EQ(tl.width(), 1000);
  // Bucket 0: 1 GPU for 500 ms, 0.5 GPU for 200 ms -> (7000*500 + 3500*200) / 1000.
  EXPECT_DOUBLE_EQ(tl.Mean(kStandard, 0), 4200);
  // Bucket 1: 1 GPU for 500 ms, 0.5 GPU for 1000 ms.
  EXPECT_DOUBLE_EQ(tl.Mean(kStandard, 1), (7000.0 * 500 + 3500.0 * 1000) / 1000);
  // Bucket 2: 0.5 GPU for 600 ms.
  EXPECT_DOUBLE_EQ(tl.Mean(kStandard, 2), 3500.0 * 600 / 1000);
  EXPECT_DOUBLE_EQ(tl.Mean(kStandard, 3), 0);
  EXPECT_DOUBLE_EQ(tl.Mean(Timeline::kMpsUnits, 1), 3500);
  EXPECT_DOUBLE_EQ(tl.Mean(Timeline::kMpsUnits, 0), 3500.0 * 200 / 1000);
  EXPECT_DOUBLE_EQ(tl.Mean(Timeline::QueueLevel(QueueId(1)), 1), tl.Mean(kStandard, 1));
  // Pending: 2 jobs for 500 ms then 1 -> 1.5; 1 job, then 4 from 2.6 s -> 0.6 + 1.6.
  EXPECT_DOUBLE_EQ(tl.Mean(Timeline::kPending, 0), 1.5);
  EXPECT_DOUBLE_EQ(tl.Mean(Timeline::kPending, 2), 2.2);
  EXPECT_DOUBLE_EQ(tl.Mean(Timeline::kPending, 3), 4);  // 300 ms at 4, over 300 ms
  EXPECT_DOUBLE_EQ(tl.Mean(Timeline::kUsedUnits, 0), 3500);
  // The preemption counts in bucket 2, with its lost work in unit-ms.
  EXPECT_EQ(tl.Count(Timeline::kPreemptions, 2), 1);
  EXPECT_EQ(tl.Count(Timeline::kLostPreempt, 2), 3500.0 * 300);
  // Whole-run mean: 7000 * 1000 + 3500 * 1800 unit-ms over 3300 ms.
  EXPECT_DOUBLE_EQ(tl.Mean(kStandard), (7000.0 * 1000 + 3500.0 * 1800) / 3300);
}

TEST(TimelineTest, MergingKeepsMeansHonestAndMemoryBounded) {
  const core::QueueTree queues = Queues();
  Timeline tl(queues);
  tl.SetState(0, 8 * kGpuUnits, 0, 0);
  // 2 GPUs over [1 s, 3 s): integrated at width 1 s, before any merge.
  tl.RunStarted(1000, Tier::kCritical, QueueId(0), Sharing::kExclusive, 2 * kGpuUnits);
  tl.RunEnded(3000, Tier::kCritical, QueueId(0), Sharing::kExclusive, 2 * kGpuUnits, 0,
              Timeline::Ending::kFinished);
  // 1 GPU over [2.5 s, 5000 s): spans the merges that reaching 5000 s forces.
  tl.RunStarted(2500, Tier::kCritical, QueueId(0), Sharing::kExclusive, kGpuUnits);
  tl.RunEnded(5'000'000, Tier::kCritical, QueueId(0), Sharing::kExclusive, kGpuUnits, 0,
              Timeline::Ending::kFinished);
  tl.Finish(5'000'000);
  // 5000 s needs width 4 s to fit in 2048 buckets (2048 * 2 s < 5000 s <= 2048 * 4 s).
  EXPECT_EQ(tl.width(), 4000);
  EXPECT_LE(tl.buckets(), Timeline::kMaxBuckets);
  EXPECT_EQ(tl.buckets(), 1250u);
  const uint32_t critical = Timeline::TierLevel(Tier::kCritical);
  // Bucket 0 = [0, 4 s): 2 GPUs for 2 s and 1 GPU for 1.5 s.
  EXPECT_DOUBLE_EQ(tl.Mean(critical, 0), (14000.0 * 2000 + 7000.0 * 1500) / 4000);
  EXPECT_DOUBLE_EQ(tl.Mean(critical, 1), 7000);
  EXPECT_DOUBLE_EQ(tl.Mean(critical, 1249), 7000);

  // However long the run, the buckets stay within the bound.
  Timeline many(queues);
  for (core::Ticks t = 0; t < 400'000'000; t += 3'999) {
    many.SetState(t, 8 * kGpuUnits, (t / 3'999) % 8 * kGpuUnits, static_cast<size_t>(t % 5));
  }
  many.Finish(400'000'000);
  EXPECT_LE(many.buckets(), Timeline::kMaxBuckets);
  EXPECT_GE(many.buckets(), Timeline::kMaxBuckets / 2);
}

TEST(TimelineTest, FragmentationIsSampledOncePerBucketAndHeld) {
  const core::QueueTree queues = Queues();
  Timeline tl(queues);
  ASSERT_TRUE(tl.WantsSample(0));
  tl.SetState(0, 8 * kGpuUnits, 0, 0);
  Timeline::IdleGpus idle{};
  idle[static_cast<int>(core::IdleCause::kFragmented)] = 2.0;
  tl.SampleFragmentation(0, 2.0, idle);
  EXPECT_FALSE(tl.WantsSample(900));
  idle[static_cast<int>(core::IdleCause::kFragmented)] = 4.0;
  tl.SampleFragmentation(900, 4.0, idle);  // a second sample in one bucket is averaged in
  EXPECT_TRUE(tl.WantsSample(1000));
  tl.SetState(3500, 8 * kGpuUnits, 0, 0);
  idle = {};
  idle[static_cast<int>(core::IdleCause::kNoDemand)] = 5.0;
  tl.SampleFragmentation(3500, 1.0, idle);
  tl.Finish(4000);
  const nlohmann::ordered_json j = tl.ToJson();
  // Buckets 1 and 2 saw no change: the value of bucket 0 holds.
  EXPECT_EQ(j["fragmented_gpus"], nlohmann::ordered_json::parse("[3.0, 3.0, 3.0, 1.0]"));
  EXPECT_EQ(j["idle_gpus_by_cause"]["fragmented"],
            nlohmann::ordered_json::parse("[3.0, 3.0, 3.0, 0.0]"));
  EXPECT_EQ(j["idle_gpus_by_cause"]["nothing waits"],
            nlohmann::ordered_json::parse("[0.0, 0.0, 0.0, 5.0]"));
  EXPECT_EQ(j["pending_jobs"].size(), 4u);  // 4 s exactly: no empty bucket at the end
  EXPECT_EQ(j["bucket_s"], 1.0);
  // Without samples the series is null (the HTML then says it is not measured).
  Timeline none(queues);
  none.SetState(0, 8 * kGpuUnits, 0, 0);
  none.Finish(1000);
  EXPECT_TRUE(none.ToJson()["fragmented_gpus"].is_null());
  EXPECT_TRUE(none.ToJson()["idle_gpus_by_cause"].is_null());
}

TEST(TimelineTest, QueueMeansIncludeChildQueues) {
  const core::QueueTree queues = Queues();
  Timeline tl(queues);
  tl.SetState(0, 16 * kGpuUnits, 0, 0);
  tl.RunStarted(0, Tier::kStandard, QueueId(1), Sharing::kExclusive, 4 * kGpuUnits);
  tl.RunStarted(0, Tier::kStandard, QueueId(0), Sharing::kExclusive, 2 * kGpuUnits);
  tl.RunEnded(5000, Tier::kStandard, QueueId(1), Sharing::kExclusive, 4 * kGpuUnits, 0,
              Timeline::Ending::kFinished);
  tl.Finish(10'000);
  const nlohmann::ordered_json j = tl.ToJson();
  ASSERT_EQ(j["queues"].size(), 2u);
  EXPECT_EQ(j["queues"][0]["name"], "org");
  EXPECT_DOUBLE_EQ(j["queues"][0]["mean_gpus"].get<double>(), 2.0);
  EXPECT_DOUBLE_EQ(j["queues"][0]["mean_subtree_gpus"].get<double>(), 4.0);  // 2 + 4 * 0.5
  EXPECT_DOUBLE_EQ(j["queues"][1]["mean_subtree_gpus"].get<double>(), 2.0);
  EXPECT_DOUBLE_EQ(j["queues"][0]["burst_gpus"].get<double>(), 16.0);
  EXPECT_TRUE(j["queues"][1]["burst_gpus"].is_null());
  EXPECT_EQ(j["by_queue"]["team"].size(), 10u);
}

// A real run: every bucket's tiers and queues add up to the allocated GPUs, sharing
// never exceeds them, counters add up to the report's, and the allocation ratio at the
// last arrival is the state after that arrival's pass.
class TimelineRunTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // One folder per test: ctest runs this suite's tests side by side.
    dir_ = fs::temp_directory_path() /
           ("gantry-timeline-" +
            std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

TEST_F(TimelineRunTest, SeriesAgreeWithEachOtherAndWithTheReport) {
  const std::string examples = std::string(GANTRY_SOURCE_DIR) + "/examples/";
  spec::Diagnostics diags;
  auto config = spec::ReadClusterConfig(examples + "cluster.yaml", diags);
  ASSERT_TRUE(config) << diags.ToString();
  auto failures = spec::ReadFailures(examples + "failures.jsonl", config->cluster, diags);
  ASSERT_TRUE(failures) << diags.ToString();
  std::ostringstream events;
  SimOptions options;
  options.policy = "gantry";
  std::vector<SimProgress> progress;
  options.progress = [&](const SimProgress& p) { progress.push_back(p); };
  options.progress_every = 10;
  Simulator sim(*config, options, events);
  spec::TraceReader trace(examples + "trace.jsonl", *config);
  ASSERT_TRUE(sim.Run(trace, *failures, diags));
  const Timeline& tl = sim.timeline();
  ASSERT_GT(tl.buckets(), 100u);
  for (size_t i = 0; i < tl.buckets(); ++i) {
    double tiers = 0, queues = 0;
    for (int t = 0; t < core::kTierCount; ++t)
      tiers += tl.Mean(Timeline::TierLevel(static_cast<Tier>(t)), i);
    for (uint32_t q = 0; q < config->queues.size(); ++q)
      queues += tl.Mean(Timeline::QueueLevel(QueueId(q)), i);
    const double used = tl.Mean(Timeline::kUsedUnits, i);
    EXPECT_NEAR(tiers, used, 1e-6) << "bucket " << i;
    EXPECT_NEAR(queues, used, 1e-6) << "bucket " << i;
    EXPECT_LE(tl.Mean(Timeline::kMigUnits, i) + tl.Mean(Timeline::kMpsUnits, i) +
                  tl.Mean(Timeline::kTimesliceUnits, i),
              used + 1e-6);
    EXPECT_LE(used, tl.Mean(Timeline::kUpUnits, i) + 1e-6);
  }
  const RunSummary run = SummarizeRun("gantry", sim.report(), tl);
  double preemptions = 0, requeues = 0, lost = 0;
  for (const auto& v : run.timeline["preemptions"]) preemptions += v.get<double>();
  for (const auto& v : run.timeline["requeues"]) requeues += v.get<double>();
  for (const auto& [cause, series] : run.timeline["lost_gpu_hours"].items()) {
    for (const auto& v : series) lost += v.get<double>();
  }
  EXPECT_EQ(preemptions, run.report["preemptions"].get<double>());
  EXPECT_EQ(requeues, run.report["requeues"].get<double>());
  EXPECT_NEAR(lost, run.report["lost_gpu_hours"].get<double>(), 1e-3);
  // Some of the example's jobs use each sharing mode.
  EXPECT_GT(tl.Mean(Timeline::kMigUnits), 0);
  EXPECT_GT(tl.Mean(Timeline::kMpsUnits), 0);
  EXPECT_GT(tl.Mean(Timeline::kTimesliceUnits), 0);
  // The CDF's last point is the tier's largest wait, at fraction 1.
  const auto& standard = run.wait_cdf["standard"];
  ASSERT_GT(standard["count"].get<size_t>(), 0u);
  EXPECT_EQ(standard["fraction"].back(), 1.0);
  EXPECT_DOUBLE_EQ(standard["wait_s"].back().get<double>(),
                   run.report["queue_wait_time_ms"]["standard"]["max"].get<double>() / 1000);
  // Progress came in order and never counted more jobs done than arrived.
  ASSERT_FALSE(progress.empty());
  for (size_t i = 1; i < progress.size(); ++i) {
    EXPECT_GE(progress[i].events, progress[i - 1].events + 10);
    EXPECT_GE(progress[i].now, progress[i - 1].now);
  }
  for (const SimProgress& p : progress) EXPECT_LE(p.done, p.submitted);
}

TEST_F(TimelineRunTest, AllocationRatioIsTakenAfterTheLastArrivalsPass) {
  constexpr const char* kConfig = R"(cluster: t
pools:
  - name: h
    count: 1
    gpus: 8
    gpu_model: H100-80GB
queues:
  - name: q
)";
  spec::Diagnostics diags;
  auto config = spec::ParseClusterConfig(kConfig, "cluster.yaml", diags);
  ASSERT_TRUE(config) << diags.ToString();
  // a (2 GPUs) finishes before the last arrival; b (4) runs; c (2) arrives last and
  // starts at once: 6 of 8 GPUs held just after the last arrival's pass.
  std::ofstream(dir_ / "trace.jsonl")
      << R"({"id":"a","submit":0,"duration":5,"queue":"q","gpus":2,"vram_gb":8})"
         "\n"
      << R"({"id":"b","submit":1,"duration":100,"queue":"q","gpus":4,"vram_gb":8})"
         "\n"
      << R"({"id":"c","submit":10,"duration":100,"queue":"q","gpus":2,"vram_gb":8})"
         "\n";
  std::ostringstream events;
  Simulator sim(*config, SimOptions{}, events);
  spec::TraceReader trace((dir_ / "trace.jsonl").string(), *config);
  ASSERT_TRUE(sim.Run(trace, {}, diags));
  EXPECT_DOUBLE_EQ(sim.report().allocation_ratio_at_last_arrival_pct(), 75.0);
  // Nothing waits then: the 2 free GPUs are stranded, the bound is what is held (taken
  // at the last arrival, not at the end, when every GPU is free and none is usable).
  EXPECT_DOUBLE_EQ(sim.report().allocation_bound_at_last_arrival_pct(), 75.0);
  std::ostringstream report;
  sim.report().Write(report);
  EXPECT_DOUBLE_EQ(
      nlohmann::json::parse(report.str())["allocation_ratio_at_last_arrival_pct"].get<double>(),
      75.0);
}

}  // namespace
}  // namespace gantry::sim
