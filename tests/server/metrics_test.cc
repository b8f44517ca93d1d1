// The Prometheus helpers, and what the controller renders on /metrics (a controller
// in-process with a fake clock, agents' heartbeats sent by hand): who holds each GPU,
// per-queue pending jobs, waits, reclaims and GPU-seconds held and busy.
#include "server/metrics.h"

#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <sstream>

#include "server/controller.h"
#include "server/sqlite_store.h"

namespace gantry::server {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

TEST(Metrics, HistogramIsCumulative) {
  Histogram h({0.1, 1});
  h.Observe(0.05);
  h.Observe(0.5);
  h.Observe(5);
  std::string out;
  h.Render(out, "x_seconds", "tier=\"critical\"");
  EXPECT_EQ(out,
            "x_seconds_bucket{tier=\"critical\",le=\"0.1\"} 1\n"
            "x_seconds_bucket{tier=\"critical\",le=\"1\"} 2\n"
            "x_seconds_bucket{tier=\"critical\",le=\"+Inf\"} 3\n"
            "x_seconds_sum{tier=\"critical\"} 5.55\n"
            "x_seconds_count{tier=\"critical\"} 3\n");
}

TEST(Metrics, LabelsAndValues) {
  EXPECT_EQ(EscapeLabel("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
  EXPECT_EQ(Labels({{"queue", "re\"s"}, {"gantry_job", ""}}), "queue=\"re\\\"s\",gantry_job=\"\"");
  EXPECT_EQ(Labels({}), "");
  EXPECT_EQ(FormatValue(3), "3");
  EXPECT_EQ(FormatValue(0.25), "0.25");
}

constexpr const char* kMetricsConfig = R"(
cluster: test
pools:
  - name: h100
    count: 2
    gpus: 8
    gpu_model: H100-80GB
    cpus: 64
    memory_gb: 512
    sharing: [mig, mps]
queues:
  - name: research
    guaranteed_gpus: 8
  - name: serving
    guaranteed_gpus: 8
policy:
  reclaim_idle_after_s: 1
)";

const char* kMetricsAlice = "alice-token";   // team a, queue research, user alice
const char* kMetricsTeamB = "team-b-token";  // queue serving, no user
const char* kMetricsAgent = "agent-token";
const char* kMetricsAdmin = "admin-token";

class ControllerMetricsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("gantry-metrics-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    spec::Diagnostics diags;
    config_ = spec::ParseClusterConfig(kMetricsConfig, "test.yaml", diags);
    ASSERT_TRUE(config_) << diags.ToString();
    auto store = SqliteStore::Open((dir_ / "state.db").string());
    ASSERT_TRUE(store.ok());
    for (auto [token, role, team, queue, user] :
         {std::tuple{kMetricsAdmin, "admin", "", "", ""},
          std::tuple{kMetricsAlice, "team", "a", "research", "alice"},
          std::tuple{kMetricsTeamB, "team", "b", "serving", ""},
          std::tuple{kMetricsAgent, "agent", "", "", ""}}) {
      StoredToken t;
      t.hash = Sha256Hex(token);
      t.role = role;
      t.team = team;
      t.user = user;
      if (*queue) t.queues = {queue};
      ASSERT_TRUE((*store)->AddToken(t).ok());
    }
    store_ = std::move(*store);
    Start();
  }
  void TearDown() override {
    ctl_.reset();
    store_.reset();
    fs::remove_all(dir_);
  }
  void Start() {
    ControllerOptions o;
    o.pass_interval_ms = 50;
    o.node_timeout_ms = 60'000;
    o.log_dir = (dir_ / "logs").string();
    ctl_ = std::make_unique<Controller>(*config_, *store_, o, &events_,
                                        [this] { return clock_.load(); });
    ASSERT_TRUE(ctl_->Start().ok());
    ctl_->Poke();  // the first batch: counters count from here
  }
  void Restart() {
    ctl_.reset();
    store_.reset();
    auto store = SqliteStore::Open((dir_ / "state.db").string());
    ASSERT_TRUE(store.ok());
    store_ = std::move(*store);
    Start();
  }
  std::string Submit(const char* token, const std::string& body, const std::string& after = "") {
    SubmitRequest r;
    r.body = body;
    r.after = after;
    Reply reply = ctl_->Submit(token, r);
    EXPECT_EQ(reply.code, Code::kCreated) << reply.body.dump();
    return reply.body.value("id", "");
  }
  // A heartbeat from h100-0: 8 GPUs "GPU-0".. at `util`, and what its workers report.
  // `mig`: MIG instances to report, by GPU index.
  void Beat(double util = 0, json running = json::array(), json exits = json::array(),
            json mig = json::object()) {
    json gpus = json::array();
    for (int i = 0; i < 8; ++i) {
      gpus.push_back({{"index", i},
                      {"uuid", "GPU-" + std::to_string(i)},
                      {"name", "Emulated H100-80GB"},
                      {"model", "H100-80GB"},
                      {"memory_bytes", 80'000'000'000},
                      {"utilization", util}});
      if (mig.contains(std::to_string(i))) gpus.back()["mig"] = mig[std::to_string(i)];
    }
    Reply r = ctl_->Heartbeat(kMetricsAgent, "h100-0",
                              {{"gpus", gpus},
                               {"running", running},
                               {"exits", exits},
                               {"isolation", {{"cgroups", true}, {"gpu_devices", false}}}},
                              "127.0.0.1");
    EXPECT_EQ(r.code, Code::kOk) << r.body.dump();
  }
  // The value of the series `series` ("name{labels}") in /metrics; -1 when absent.
  double Sample(const std::string& text, const std::string& series) {
    const size_t at = text.find("\n" + series + " ");
    if (at == std::string::npos) {
      ADD_FAILURE() << "no series " << series;
      return -1;
    }
    return std::stod(text.substr(at + series.size() + 2));
  }
  static int Count(const std::string& text, const std::string& part) {
    int n = 0;
    for (size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
    return n;
  }
  // The series lines of `metric` (its samples, without HELP and TYPE).
  static std::string Series(const std::string& text, const std::string& metric) {
    std::string out;
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);) {
      if (line.rfind(metric + "{", 0) == 0 || line.rfind(metric + " ", 0) == 0) out += line + "\n";
    }
    return out;
  }
  void Advance(int64_t ms) { clock_ += ms; }

  fs::path dir_;
  std::optional<spec::ClusterConfig> config_;
  std::unique_ptr<SqliteStore> store_;
  std::unique_ptr<Controller> ctl_;
  std::ostringstream events_;
  std::atomic<int64_t> clock_{1'700'000'000'000};
};

TEST_F(ControllerMetricsTest, EachGpuSaysWhoHoldsItWithDcgmExportersLabels) {
  Beat(0.5);
  const std::string whole =
      Submit(kMetricsAlice, R"({"queue":"research","gpus":2,"vram_gb":40,"command":"x"})");
  const std::string mig =
      Submit(kMetricsAlice, R"({"queue":"research","mig":"3g.40gb","vram_gb":30,"command":"x"})");
  const std::string mps =
      Submit(kMetricsTeamB,
             R"({"queue":"serving","gpus":0.5,"sharing":"mps","vram_gb":10,"command":"x"})");
  ctl_->Poke();
  const std::string m = ctl_->Metrics();
  const std::string alloc = Series(m, "gantry_gpu_allocated_ratio"),
                    busy = Series(m, "gantry_gpu_busy_ratio");
  EXPECT_EQ(Count(alloc, "gantry_gpu_allocated_ratio{"), 16)
      << alloc;  // h100-0: 4 held, 4 free; h100-1: 8 free
  EXPECT_EQ(
      Count(alloc, "Hostname=\"h100-0\",modelName=\"H100-80GB\",queue=\"research\",gantry_job=\"" +
                       whole + "\",user=\"alice\"} 1\n"),
      2);
  EXPECT_EQ(Count(alloc, "UUID=\"GPU-"), 8);
  EXPECT_EQ(Count(alloc, ",GPU_I_PROFILE=\"3g.40gb\",queue=\"research\",gantry_job=\"" + mig +
                             "\",user=\"alice\"} 0.428571429\n"),
            1);
  EXPECT_EQ(Count(alloc, ",queue=\"serving\",gantry_job=\"" + mps + "\",user=\"\"} 0.5\n"), 1);
  EXPECT_EQ(
      Count(
          alloc,
          "Hostname=\"h100-0\",modelName=\"H100-80GB\",queue=\"\",gantry_job=\"\",user=\"\"} 0\n"),
      4);
  EXPECT_EQ(Count(alloc,
                  "gantry_gpu_allocated_ratio{gpu=\"0\",UUID=\"\",Hostname=\"h100-1\",modelName="
                  "\"H100-80GB\","
                  "queue=\"\",gantry_job=\"\",user=\"\"} 0\n"),
            1);  // h100-1 never reported: no UUID, and free
  // Busy: reported GPUs of up nodes only; job labels where one job holds the GPU.
  EXPECT_EQ(Count(busy, "gantry_gpu_busy_ratio{"), 8) << busy;
  EXPECT_EQ(Count(busy, "UUID=\"GPU-"), 8);
  EXPECT_EQ(Count(busy, "queue=\"research\",gantry_job=\"" + whole + "\",user=\"alice\"} 0.5\n"),
            2);
  EXPECT_EQ(Count(busy, "queue=\"research\",gantry_job=\"" + mig + "\",user=\"alice\"} 0.5\n"), 1);
  EXPECT_EQ(Count(busy, "queue=\"serving\",gantry_job=\"" + mps + "\",user=\"\"} 0.5\n"), 1);
  // Once the agent reports the instance's GPU instance id, the series carries dcgm's GPU_I_ID.
  EXPECT_EQ(Count(alloc, "GPU_I_ID="), 0);
  const json placed = ctl_->ShowJob(kMetricsAdmin, mig).body["workers"][0]["alloc"];
  ASSERT_TRUE(placed.contains("gpu") && placed.contains("start")) << placed.dump();
  Beat(0.5, json::array(), json::array(),
       {{std::to_string(placed["gpu"].get<int>()),
         {{{"uuid", "MIG-x"}, {"profile", "3g.40gb"}, {"start", placed["start"]}, {"gi_id", 2}},
          {{"uuid", "MIG-y"}, {"profile", "1g.10gb"}, {"start", 6}, {"gi_id", 13}}}}});
  const std::string with_id = Series(ctl_->Metrics(), "gantry_gpu_allocated_ratio");
  EXPECT_EQ(
      Count(with_id, ",GPU_I_PROFILE=\"3g.40gb\",GPU_I_ID=\"2\",queue=\"research\",gantry_job=\"" +
                         mig + "\",user=\"alice\"} 0.428571429\n"),
      1)
      << with_id;
  EXPECT_EQ(Count(with_id, "GPU_I_ID="), 1);
  EXPECT_EQ(Count(busy, "queue=\"\",gantry_job=\"\",user=\"\"} 0.5\n"), 4);
  EXPECT_EQ(Sample(m, "gantry_node_up{node=\"h100-0\",Hostname=\"h100-0\",pool=\"h100\"}"), 1);
  EXPECT_EQ(Sample(m, "gantry_node_up{node=\"h100-1\",Hostname=\"h100-1\",pool=\"h100\"}"), 0);
  // What keeps each node's workers apart, as its agent reports it (h100-1 has none: no series).
  EXPECT_EQ(Sample(m, "gantry_node_isolated{node=\"h100-0\",Hostname=\"h100-0\",what=\"cgroups\"}"),
            1);
  EXPECT_EQ(
      Sample(m, "gantry_node_isolated{node=\"h100-0\",Hostname=\"h100-0\",what=\"gpu_devices\"}"),
      0);
  EXPECT_EQ(Count(Series(ctl_->Metrics(), "gantry_node_isolated"), "node=\"h100-1\""), 0);
  // Every queue and tier has a wait histogram from the start; two started in research.
  EXPECT_EQ(Sample(m, "gantry_queue_wait_seconds_count{queue=\"research\",tier=\"standard\"}"), 2);
  EXPECT_EQ(
      Sample(m, "gantry_queue_wait_seconds_bucket{queue=\"serving\",tier=\"standard\",le=\"1\"}"),
      1);
  EXPECT_EQ(Sample(m, "gantry_queue_wait_seconds_count{queue=\"serving\",tier=\"critical\"}"), 0);
}

TEST_F(ControllerMetricsTest, GpuSecondsHeldAndBusyCountPerQueueOnceAndRestartFromZero) {
  Beat();
  const std::string job =
      Submit(kMetricsAlice, R"({"queue":"research","gpus":2,"vram_gb":40,"command":"x"})");
  ctl_->Poke();
  const std::string held = "gantry_queue_gpu_seconds_total{queue=\"research\",model=\"H100-80GB\"}";
  const std::string busy =
      "gantry_queue_busy_gpu_seconds_total{queue=\"research\",model=\"H100-80GB\"}";
  EXPECT_EQ(Sample(ctl_->Metrics(), held), 0);
  Advance(10'000);
  EXPECT_DOUBLE_EQ(Sample(ctl_->Metrics(), held), 20);  // 2 GPUs x 10 s, while it runs
  const json running = {{{"job", job}, {"run", 1}, {"rank", 0}, {"util", 0.5}}};
  Beat(0.5, running);
  Advance(4'000);
  Beat(0.5, running);  // 4 s at 50% of 2 GPUs
  Beat(0.5, json::array(), {{{"job", job}, {"run", 1}, {"rank", 0}, {"exit_code", 0}}});
  Advance(5'000);
  std::string m = ctl_->Metrics();
  EXPECT_DOUBLE_EQ(Sample(m, held), 28);  // ended at 14 s: counted once, no more
  EXPECT_DOUBLE_EQ(Sample(m, busy), 4);
  EXPECT_EQ(Sample(m, "gantry_queue_gpu_seconds_total{queue=\"serving\",model=\"H100-80GB\"}"), 0);
  // A job running across a restart: the new process counts from its own start.
  Submit(kMetricsAlice, R"({"queue":"research","gpus":1,"vram_gb":40,"command":"x"})");
  ctl_->Poke();
  Advance(30'000);
  EXPECT_DOUBLE_EQ(Sample(ctl_->Metrics(), held), 28 + 30);
  Restart();
  Advance(1'000);
  m = ctl_->Metrics();
  EXPECT_DOUBLE_EQ(Sample(m, held), 1);
  EXPECT_EQ(Sample(m, busy), 0);
}

TEST_F(ControllerMetricsTest, PendingJobsAndReclaimsPerQueue) {
  Beat();
  const std::string nb = Submit(
      kMetricsTeamB, R"({"queue":"serving","gpus":1,"vram_gb":10,"grace_s":5,"command":"x"})");
  Submit(kMetricsTeamB, R"({"queue":"serving","gpus":1,"vram_gb":10,"command":"x"})",
         nb);  // held for nb
  ctl_->Poke();
  std::string m = ctl_->Metrics();
  EXPECT_EQ(Sample(m, "gantry_queue_pending_jobs{queue=\"serving\"}"), 1);
  EXPECT_EQ(Sample(m, "gantry_queue_pending_jobs{queue=\"research\"}"), 0);
  EXPECT_EQ(Sample(m, "gantry_reclaims_total{queue=\"serving\"}"), 0);
  // nb idles past reclaim_idle_after_s (1 s), is signalled, exits: reclaimed.
  const json idle = {{{"job", nb}, {"run", 1}, {"rank", 0}, {"util", 0.0}}};
  Beat(0, idle);
  Advance(1'500);
  Beat(0, idle);
  ctl_->Poke();
  Beat(0, json::array(), {{{"job", nb}, {"run", 1}, {"rank", 0}, {"signal", 15}}});
  ctl_->Poke();
  m = ctl_->Metrics();
  EXPECT_EQ(Sample(m, "gantry_reclaims_total{queue=\"serving\"}"), 1) << events_.str();
  EXPECT_EQ(Sample(m, "gantry_reclaims_total{queue=\"research\"}"), 0);
  EXPECT_EQ(Sample(m, "gantry_jobs_ended_total{end=\"reclaimed\"}"), 1);
  // The held job's dependency can no longer be met (nb did not finish): it ends too.
  EXPECT_EQ(Sample(m, "gantry_queue_pending_jobs{queue=\"serving\"}"), 0);
}

}  // namespace
}  // namespace gantry::server
