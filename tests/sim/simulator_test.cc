#include "sim/simulator.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

namespace gantry::sim {
namespace {

namespace fs = std::filesystem;

constexpr const char* kOneNode = R"(cluster: t
pools:
  - name: h
    count: 1
    gpus: 8
    gpu_model: H100-80GB
    cpus: 64
    memory_gb: 512
    sharing: [mig, mps, timeslice]
queues:
  - name: q
    guaranteed_gpus: 8
    burst_gpus: 8
policy:
  reclaim_idle_after_s: 50
)";

class SimTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("gantry-simtest-" +
            std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Runs the simulator; returns the event log lines.
  std::string policy_ = "fifo";  // what Run replays under
  std::vector<std::string> Run(const std::string& trace, const std::string& failures = "",
                               const char* config_text = kOneNode) {
    spec::Diagnostics diags;
    auto config = spec::ParseClusterConfig(config_text, "cluster.yaml", diags);
    EXPECT_TRUE(config) << diags.ToString();
    config_ = std::move(config);
    std::ofstream(dir_ / "trace.jsonl") << trace;
    std::ofstream(dir_ / "failures.jsonl") << failures;
    std::vector<spec::Failure> fails;
    if (!failures.empty()) {
      auto f = spec::ReadFailures((dir_ / "failures.jsonl").string(), config_->cluster, diags);
      EXPECT_TRUE(f) << diags.ToString();
      fails = *f;
    }
    std::ostringstream events;
    SimOptions options;
    options.log_waits = false;
    options.policy = policy_;
    Simulator sim(*config_, options, events);
    spec::TraceReader reader((dir_ / "trace.jsonl").string(), *config_);
    EXPECT_TRUE(sim.Run(reader, fails, diags));
    EXPECT_TRUE(diags.empty()) << diags.ToString();
    std::ostringstream report;
    sim.report().Write(report);
    report_ = nlohmann::json::parse(report.str());
    std::ostringstream summary;
    sim.report().Summary(summary);
    summary_ = summary.str();
    timeline_ = sim.timeline().ToJson();
    std::vector<std::string> lines;
    std::istringstream in(events.str());
    for (std::string line; std::getline(in, line);) lines.push_back(line);
    return lines;
  }

  fs::path dir_;
  std::optional<spec::ClusterConfig> config_;
  nlohmann::json report_;
  std::string summary_;
  nlohmann::ordered_json timeline_;
};

TEST_F(SimTest, NodeFailureRequeuesAndTheJobResumesFromItsLastCheckpoint) {
  auto log = Run(
      R"({"id":"j","submit":0,"duration":1000,"queue":"q","gpus":8,"vram_gb":40,"checkpoint_s":300})"
      "\n",
      R"({"t":700,"node":"h-0","down_s":100})"
      "\n");
  std::vector<std::string> want = {
      R"({"t":0,"type":"submit","job":"j"})",
      R"({"t":0,"type":"start","job":"j","alloc":[{"node":"h-0","gpus":[0,1,2,3,4,5,6,7]}]})",
      R"({"t":700,"type":"node_down","node":"h-0"})",
      R"({"t":700,"type":"requeue","job":"j","reason":"node h-0 failed"})",
      R"({"t":800,"type":"node_up","node":"h-0"})",
      R"({"t":800,"type":"start","job":"j","alloc":[{"node":"h-0","gpus":[0,1,2,3,4,5,6,7]}]})",
      // 600 s of progress kept (two checkpoints), 400 s to go.
      R"({"t":1200,"type":"finish","job":"j"})",
  };
  EXPECT_EQ(log, want);
  // 100 s of 8 GPUs lost (700 run, 600 kept).
  EXPECT_NEAR(report_["lost_gpu_hours"].get<double>(), 8 * 100 / 3600.0, 1e-9);
  // Charged to its tier and its queue, by cause.
  for (const auto* group : {&report_["by_tier"]["standard"], &report_["by_queue"]["q"]}) {
    EXPECT_NEAR((*group)["lost_gpu_hours_by_cause"]["requeue"].get<double>(), 8 * 100 / 3600.0,
                1e-9);
    EXPECT_EQ((*group)["lost_gpu_hours_by_cause"]["preempt"].get<double>(), 0.0);
  }
  EXPECT_EQ(report_["by_tier"]["critical"]["lost_gpu_hours_by_cause"]["requeue"].get<double>(),
            0.0);
  // Allocated 700 + 400 s of 8 GPUs; capacity up 1100 of the 1200 s.
  EXPECT_NEAR(report_["gpu_utilization_pct"].get<double>(), 100.0, 1e-9);
  EXPECT_EQ(report_["jobs"]["finished"], 1);
  EXPECT_EQ(report_["requeues"], 1);
}

// Budgets in the simulator: the same core accounts. Its clock starts on Thursday
// 1970-01-01 00:00 UTC, so the first week ends 4 days in.
constexpr const char* kBudgetNode = R"(cluster: t
pools:
  - name: h
    count: 1
    gpus: 8
    gpu_model: H100-80GB
queues:
  - name: q
    budget: {gpu_hours: 2, period: week, when_spent: wait}
accounting:
  currency: EUR
  gpu_hour_prices: {H100-80GB: 2}
)";

TEST_F(SimTest, ASpentBudgetHoldsNewWorkUntilTheNextWeekAndTheReportCharges) {
  auto log = Run(R"({"id":"a","submit":0,"duration":600,"queue":"q","gpus":4,"vram_gb":40})"
                 "\n"
                 R"({"id":"b","submit":600,"duration":600,"queue":"q","gpus":4,"vram_gb":40})"
                 "\n"
                 R"({"id":"c","submit":1000,"duration":100,"queue":"q","gpus":4,"vram_gb":40})"
                 "\n",
                 "", kBudgetNode);
  std::vector<std::string> want = {
      R"({"t":0,"type":"submit","job":"a"})",
      R"({"t":0,"type":"start","job":"a","alloc":[{"node":"h-0","gpus":[0,1,2,3]}]})",
      R"({"t":600,"type":"finish","job":"a"})",
      R"({"t":600,"type":"submit","job":"b"})",
      R"({"t":600,"type":"start","job":"b","alloc":[{"node":"h-0","gpus":[0,1,2,3]}]})",
      // 4 H100s at 2 each: 2 weighted GPU-hours after 900 s; b runs on.
      R"({"t":900,"type":"budget","queue":"q","state":"spent","spent_gpu_hours":2,"budget_gpu_hours":2})",
      R"({"t":1000,"type":"submit","job":"c"})",
      R"({"t":1200,"type":"finish","job":"b"})",
      R"({"t":345600,"type":"budget","queue":"q","state":"renewed","spent_gpu_hours":0,"budget_gpu_hours":2})",
      R"({"t":345600,"type":"start","job":"c","alloc":[{"node":"h-0","gpus":[0,1,2,3]}]})",
      R"({"t":345700,"type":"finish","job":"c"})",
  };
  EXPECT_EQ(log, want);
  const auto& q = report_["by_queue"]["q"];
  EXPECT_NEAR(q["gpu_hours"].get<double>(), 4 * 1300 / 3600.0, 1e-9);
  EXPECT_NEAR(q["cost"].get<double>(), 2 * 4 * 1300 / 3600.0, 1e-9);
  EXPECT_EQ(q["budget"]["times_spent"], 1);
  EXPECT_EQ(q["budget"]["period"], "week");
  EXPECT_EQ(report_["currency"], "EUR");
}

// Observed usage on trace lines: allocated vs busy GPU-hours and what right-sizing would
// free, per queue and in all (issue 12 item 4).
TEST_F(SimTest, ObservedUsageGivesBusyHoursAndRightSizing) {
  Run(R"({"id":"big80","submit":0,"duration":3600,"queue":"q","gpus":1,"vram_gb":80,"util":0.1,"vram_used_gb":9})"
      "\n"
      // Busy at 0.8 for its first 1800 s of run time, then idle (reclaimed 50 s later).
      R"({"id":"nb","submit":0,"duration":7200,"queue":"q","gpus":2,"vram_gb":40,"util":0.8,"vram_used_gb":70,"idle_after_s":1800})"
      "\n"
      R"({"id":"plain","submit":0,"duration":3600,"queue":"q","gpus":1,"vram_gb":10})"
      "\n");
  const auto& o = report_["observed_usage"];
  // big80: 1 GPU-hour; nb: 2 GPUs for 1850 s.
  EXPECT_NEAR(o["gpu_hours"].get<double>(), 1 + 2 * 1850 / 3600.0, 1e-9);
  EXPECT_NEAR(o["busy_gpu_hours"].get<double>(), 0.1 + 2 * 0.8 * 0.5, 1e-9);
  // big80 fits a MIG 1g.20gb (9 GB + 20%): frees 6/7 of its hour. nb (70 GB, 0.8 of 2
  // GPUs + 20%: 1.92 GPUs) keeps its 2.
  EXPECT_NEAR(o["right_sizing_frees_gpu_hours"].get<double>(), 6.0 / 7, 1e-9);
  EXPECT_NEAR(report_["by_queue"]["q"]["busy_gpu_hours"].get<double>(), 0.9, 1e-9);
}

TEST_F(SimTest, IdleJobsAreReclaimed) {
  auto log = Run(
      R"({"id":"nb","submit":10,"duration":5000,"queue":"q","gpus":0.5,"sharing":"timeslice","vram_gb":8,"idle_after_s":100})"
      "\n");
  ASSERT_EQ(log.size(), 3u);
  EXPECT_EQ(
      log[1],
      R"({"t":10,"type":"start","job":"nb","alloc":[{"node":"h-0","gpu":0,"share":0.5,"sharing":"timeslice"}]})");
  EXPECT_EQ(log[2], R"({"t":160,"type":"reclaim","job":"nb","reason":"GPU idle for 50 s"})");
  EXPECT_EQ(report_["jobs"]["reclaimed"], 1);
}

// An elastic job with a measured profile (`speedup`) goes at its profile's speed at the
// size it runs: at 1 of 2 workers, 0.8 of its full speed (linear would be 0.5).
TEST_F(SimTest, AnElasticJobRunsAtItsProfilesSpeed) {
  auto log = Run(
      R"({"id":"hold","submit":0,"duration":100000,"queue":"q","gpus":4,"vram_gb":8})"
      "\n"
      R"({"id":"el","submit":1,"duration":1000,"queue":"q","replicas":2,"min_replicas":1,"speedup":[0.8,1],"gpus":4,"vram_gb":8,"checkpoint_s":100})"
      "\n");
  std::string all;
  for (const std::string& l : log) all += l + "\n";
  ASSERT_EQ(log.size(), 6u) << all;
  EXPECT_EQ(log[3],
            R"({"t":1,"type":"start","job":"el","alloc":[{"node":"h-0","gpus":[4,5,6,7]}]})");
  // 1000 s at its full size is 2000 worker-s; at 1 worker it does 2 x 0.8 a second.
  EXPECT_EQ(log[4], R"({"t":1251,"type":"finish","job":"el"})");
}

// speed_by_model (Sia's per-GPU-type profiles): a job takes the fastest model it fits on
// now and runs its duration over that model's speed there; one arriving while the fast
// model is full starts at once on the slower one; a checkpointed run on a fast model keeps
// that much more work when it is preempted.
TEST_F(SimTest, AJobGoesAtItsModelsSpeedOnTheFastestThatFitsNow) {
  const char* two = R"(cluster: two
pools:
  - name: a
    count: 1
    gpus: 8
    gpu_model: A100-80GB
  - name: h
    count: 1
    gpus: 8
    gpu_model: H100-80GB
queues:
  - name: q
    guaranteed_gpus: 8
    burst_gpus: 16
  - name: r
    guaranteed_gpus: 8
    burst_gpus: 16
)";
  auto log = Run(
      R"({"id":"fast","submit":0,"duration":1000,"queue":"q","gpus":8,"vram_gb":8,"speed_by_model":{"H100-80GB":2.5,"A100-80GB":1}})"
      "\n"
      R"({"id":"slow","submit":1,"duration":1000,"queue":"q","gpus":8,"vram_gb":8,"speed_by_model":{"H100-80GB":4}})"
      "\n",
      "", two);
  std::string all;
  for (const std::string& l : log) all += l + "\n";
  ASSERT_EQ(log.size(), 6u) << all;
  EXPECT_EQ(
      log[1],
      R"({"t":0,"type":"start","job":"fast","alloc":[{"node":"h-0","gpus":[0,1,2,3,4,5,6,7]}]})");
  EXPECT_EQ(
      log[3],
      R"({"t":1,"type":"start","job":"slow","alloc":[{"node":"a-0","gpus":[0,1,2,3,4,5,6,7]}]})");
  EXPECT_EQ(log[4], R"({"t":400,"type":"finish","job":"fast"})");
  EXPECT_EQ(log[5], R"({"t":1001,"type":"finish","job":"slow"})");

  policy_ = "gantry";  // (fifo never preempts)
  // 3000 s of work at speed 2 on the H100s, checkpointing every 100 s, preempted at 250 s by
  // the other queue's job inside its guarantee (q holds 16, 8 borrowed): it keeps 200 s of run
  // time, 400 s of work, and needs 2600 s more on the A100s (speed 1).
  log = Run(
      R"({"id":"fill","submit":0,"duration":100000,"queue":"q","gpus":8,"vram_gb":8,"gpu_model":"A100-80GB"})"
      "\n"
      R"({"id":"ck","submit":0,"duration":3000,"queue":"q","gpus":8,"vram_gb":8,"checkpoint_s":100,"grace_s":0,"speed_by_model":{"H100-80GB":2}})"
      "\n"
      R"({"id":"claim","submit":250,"duration":10,"queue":"r","gpus":8,"vram_gb":8,"gpu_model":"H100-80GB"})"
      "\n",
      "", two);
  all.clear();
  for (const std::string& l : log) all += l + "\n";
  EXPECT_NE(all.find(R"({"t":0,"type":"start","job":"ck","alloc":[{"node":"h-0")"),
            std::string::npos)
      << all;
  EXPECT_NE(all.find(R"("type":"preempt","job":"ck")"), std::string::npos) << all;
  // Back on the H100s once the claim ends at 260: 2600 s of work at speed 2.
  EXPECT_NE(all.find(R"({"t":1560,"type":"finish","job":"ck"})"), std::string::npos) << all;
}

TEST_F(SimTest, WindowedJobsStartWhenTheWindowOpens) {
  auto log = Run(
      R"({"id":"w","submit":43200,"duration":60,"queue":"q","gpus":1,"vram_gb":8,"window":{"start":"20:00","end":"08:00"}})"
      "\n");
  ASSERT_EQ(log.size(), 3u);
  EXPECT_EQ(log[1].rfind(R"({"t":72000,"type":"start","job":"w")", 0), 0u) << log[1];
  EXPECT_EQ(log[2], R"({"t":72060,"type":"finish","job":"w"})");
}

// Long horizons (issue 14): 8,000 GPUs held for 10^9 s are 5.6e19 GPU unit-ms, past int64;
// the report said 0% utilisation for a fill replay the event log put at 65%.
TEST_F(SimTest, FiguresHoldOverLongHorizonsOnLargeClusters) {
  const char* big = R"(cluster: big
pools:
  - name: h
    count: 1000
    gpus: 8
    gpu_model: H100-80GB
queues:
  - name: q
    burst_gpus: 8000
)";
  std::string trace;
  // Half the cluster for 10^9 s from t = 0, the other half from t = 5e8 s: over the run
  // (1.5e9 s) held GPU-time is 2/3 of capacity.
  for (int i = 0; i < 1000; ++i) {
    trace += R"({"id":"j)" + std::to_string(i) + R"(","submit":)" + (i < 500 ? "0" : "500000000") +
             R"(,"duration":1000000000,"queue":"q","gpus":8,"vram_gb":8})" + "\n";
  }
  Run(trace, "", big);
  EXPECT_EQ(report_["jobs"]["finished"], 1000);
  EXPECT_NEAR(report_["gpu_utilization_pct"].get<double>(), 100.0 * 2 / 3, 1e-6) << report_.dump();
  EXPECT_NEAR(report_["by_queue"]["q"]["gpu_hours"].get<double>(), 8000.0 * 1e9 / 3600.0, 1.0);
  EXPECT_NEAR(report_["by_queue"]["q"]["share_pct"].get<double>(), 100.0, 1e-9);
}

// Why-waiting (issue 15 item 2): pending jobs by cause add up to the pending jobs in every
// bucket; jobs behind a full node wait, here for their queue's burst (8 GPUs, all in use),
// and the rejected one never counts.
TEST_F(SimTest, PendingJobsByCauseAddUpToThePendingJobs) {
  std::string trace;
  for (int i = 0; i < 4; ++i) {
    trace += R"({"id":"j)" + std::to_string(i) + R"(","submit":)" + std::to_string(i) +
             R"(,"duration":100,"queue":"q","gpus":8,"vram_gb":8})" + "\n";
  }
  trace += R"({"id":"big","submit":5,"duration":60,"queue":"q","gpus":1,"vram_gb":200})"
           "\n";
  Run(trace);
  const auto& by_cause = timeline_["pending_by_cause"];
  const auto& pending = timeline_["pending_jobs"];
  ASSERT_GT(pending.size(), 0u);
  double waited = 0;
  for (size_t i = 0; i < pending.size(); ++i) {
    double sum = 0;
    for (const auto& [cause, values] : by_cause.items()) sum += values[i].get<double>();
    EXPECT_NEAR(sum, pending[i].get<double>(), 1e-6) << "bucket " << i;
    waited += by_cause["queue at its burst"][i].get<double>();
  }
  // Three jobs wait behind the first for 100, 200 and 300 s less their arrival offsets.
  EXPECT_NEAR(waited, 100 - 1 + 200 - 2 + 300 - 3, 3) << by_cause["queue at its burst"].dump();
}

// Two pools of 8: H100 and A100. An H100 job holds 6 H100s for 100 s; a 4-GPU H100 job
// waits for it, beside 2 free H100s (fragmented: too few for it) and 8 free A100s it
// does not accept (wrong model). Then only the 4-GPU job runs: 4 H100s and the A100s
// idle with nothing waiting. Every sample adds up to the unallocated GPUs.
constexpr const char* kTwoModels = R"(cluster: t
pools:
  - name: h
    count: 1
    gpus: 8
    gpu_model: H100-80GB
  - name: a
    count: 1
    gpus: 8
    gpu_model: A100-80GB
queues:
  - name: q
)";

TEST_F(SimTest, IdleGpusAreExplainedByWhyNothingUsesThem) {
  Run(R"({"id":"six","submit":0,"duration":100,"queue":"q","gpus":6,"vram_gb":8,"gpu_model":"H100-80GB"})"
      "\n"
      R"({"id":"four","submit":0,"duration":100,"queue":"q","gpus":4,"vram_gb":8,"gpu_model":"H100-80GB"})"
      "\n",
      "", kTwoModels);
  const auto& idle = timeline_["idle_gpus_by_cause"];
  ASSERT_TRUE(idle.is_object()) << timeline_.dump();
  const auto& up = timeline_["capacity_gpus"];
  const auto& used = timeline_["allocated_gpus"];
  for (size_t i = 0; i < up.size(); ++i) {
    double sum = 0;
    for (const auto& [cause, values] : idle.items())
      sum += cause == "down" ? 0 : values[i].get<double>();
    EXPECT_NEAR(sum, up[i].get<double>() - used[i].get<double>(), 1e-6) << "bucket " << i;
  }
  // Over the 200 s: 100 s with 2 fragmented and 8 of the wrong model, 100 s with 12
  // idle while nothing waits.
  const auto& mean = report_["idle_gpus_by_cause"];
  EXPECT_NEAR(mean["fragmented"].get<double>(), 1.0, 0.05) << mean.dump();
  EXPECT_NEAR(mean["wrong model"].get<double>(), 4.0, 0.05) << mean.dump();
  EXPECT_NEAR(mean["nothing waits"].get<double>(), 6.0, 0.05) << mean.dump();
  EXPECT_EQ(mean["down"].get<double>(), 0.0);
  EXPECT_NE(
      summary_.find(
          "idle GPUs           mean 11.0: 6.0 nothing waits, 4.0 wrong model, 1.0 fragmented"),
      std::string::npos)
      << summary_;
}

TEST_F(SimTest, ImpossibleJobsAreRejectedWithTheReason) {
  auto log = Run(R"({"id":"big","submit":0,"duration":60,"queue":"q","gpus":1,"vram_gb":200})"
                 "\n"
                 R"({"id":"ok","submit":1,"duration":60,"queue":"q","mig":"3g.40gb","vram_gb":20})"
                 "\n");
  ASSERT_EQ(log.size(), 5u);
  EXPECT_NE(log[1].find(R"("type":"reject","job":"big","error":"vram_gb 200)"), std::string::npos)
      << log[1];
  EXPECT_EQ(
      log[3],
      R"({"t":1,"type":"start","job":"ok","alloc":[{"node":"h-0","gpu":0,"mig":"3g.40gb","start":0}]})");
  EXPECT_EQ(report_["jobs"]["rejected"], 1);
  // Named, with the reason, in the report and in the summary.
  ASSERT_EQ(report_["rejected_jobs"].size(), 1u) << report_.dump();
  EXPECT_EQ(report_["rejected_jobs"][0]["job"], "big");
  EXPECT_EQ(report_["rejected_jobs"][0]["reason"].get<std::string>().rfind("vram_gb 200", 0), 0u);
  EXPECT_NE(summary_.find("  rejected big: vram_gb 200"), std::string::npos) << summary_;
}

TEST_F(SimTest, GangsWaitForRoomAndStartWhole) {
  auto log = Run(
      R"({"id":"a","submit":0,"duration":100,"queue":"q","gpus":6,"vram_gb":8})"
      "\n"
      R"({"id":"g","submit":0,"duration":100,"queue":"q","replicas":2,"gpus":2,"vram_gb":8,"topology":"node"})"
      "\n");
  // g needs 4 GPUs and only 2 are free until a finishes at 100.
  EXPECT_EQ(log[3], R"({"t":100,"type":"finish","job":"a"})");
  EXPECT_EQ(
      log[4],
      R"({"t":100,"type":"start","job":"g","alloc":[{"node":"h-0","gpus":[0,1]},{"node":"h-0","gpus":[2,3]}]})");
  EXPECT_NEAR(report_["queue_wait_time_ms"]["all"]["max"].get<double>(), 100000, 1e-9);
}

TEST_F(SimTest, SameInputsGiveTheSameLog) {
  std::string trace;
  for (int i = 0; i < 200; ++i) {
    trace += R"({"id":"j)" + std::to_string(i) + R"(","submit":)" + std::to_string(i * 7) +
             R"(,"duration":)" + std::to_string(100 + i * 13 % 900) + R"(,"queue":"q","gpus":)" +
             std::to_string(1 + i % 4) + R"(,"vram_gb":8,"checkpoint_s":60})" + "\n";
  }
  const std::string failures = R"({"t":300,"node":"h-0","down_s":50})"
                               "\n";
  auto first = Run(trace, failures);
  auto second = Run(trace, failures);
  EXPECT_EQ(first, second);
  EXPECT_GT(first.size(), 600u);
}

}  // namespace
}  // namespace gantry::sim
