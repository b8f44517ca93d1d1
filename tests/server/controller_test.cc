// The controller in-process, with a fake clock and a real SQLite file: job life cycle,
// node failure, preemption, restart with re-adoption, idempotency, team isolation.
#include "server/controller.h"

#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <future>
#include <limits>
#include <random>
#include <set>
#include <sstream>
#include <thread>

#include "server/controller_internal.h"
#include "server/http_api.h"
#include "server/sqlite_store.h"

namespace gantry::server {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr const char* kConfig = R"(
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
    guaranteed_gpus: 4
    burst_gpus: 16
  - name: serving
    guaranteed_gpus_by_model: {H100-80GB: 8}
    burst_gpus: 16
  - name: nlp
    parent: research
)";

const char* kAdmin = "admin-token";
const char* kTeamA = "team-a-token";  // research
const char* kTeamB = "team-b-token";  // serving
const char* kAgent = "agent-token";
const char* kAgent0 = "agent-h100-0-token";  // bound to node h100-0

json Gpus(int n) {
  json gpus = json::array();
  for (int i = 0; i < n; ++i) {
    gpus.push_back({{"index", i},
                    {"uuid", "GPU-" + std::to_string(i)},
                    {"name", "Emulated H100-80GB"},
                    {"model", "H100-80GB"},
                    {"memory_bytes", 80'000'000'000}});
  }
  return gpus;
}

class ControllerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("gantry-ctl-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    spec::Diagnostics diags;
    config_ = spec::ParseClusterConfig(kConfig, "test.yaml", diags);
    ASSERT_TRUE(config_) << diags.ToString();
    auto store = SqliteStore::Open((dir_ / "state.db").string());
    ASSERT_TRUE(store.ok());
    for (auto [token, role, team, queue] :
         {std::tuple{kAdmin, "admin", "", ""}, std::tuple{kTeamA, "team", "a", "research"},
          std::tuple{kTeamB, "team", "b", "serving"}, std::tuple{kAgent, "agent", "", ""},
          std::tuple{kAgent0, "agent", "", "h100-0"}}) {
      StoredToken t;
      t.hash = Sha256Hex(token);
      t.role = role;
      t.team = team;
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
    ControllerOptions o = options_;
    o.pass_interval_ms = 50;
    o.node_timeout_ms = 3000;
    o.kill_slack_ms = 1000;
    o.log_dir = (dir_ / "logs").string();
    ctl_ = std::make_unique<Controller>(*config_, *store_, o, &events_,
                                        [this] { return clock_.load(); });
    ASSERT_TRUE(ctl_->Start().ok());
  }
  // Simulates a crash: the controller is gone (everything it answered was committed),
  // and a new one is built on the same database.
  void Restart() {
    ctl_.reset();
    store_.reset();
    auto store = SqliteStore::Open((dir_ / "state.db").string());
    ASSERT_TRUE(store.ok());
    store_ = std::move(*store);
    Start();
  }
  void Advance(int64_t ms) { clock_ += ms; }

  Reply Submit(const std::string& token, const std::string& body, const std::string& key = "") {
    SubmitRequest r;
    r.body = body;
    r.idempotency_key = key;
    return ctl_->Submit(token, r);
  }
  Reply SubmitWith(const std::string& token, const std::string& body, const std::string& array,
                   const std::string& after, const std::string& key = "") {
    SubmitRequest r;
    r.body = body;
    r.array = array;
    r.after = after;
    r.idempotency_key = key;
    return ctl_->Submit(token, r);
  }
  json Beat(const std::string& node, json exits = json::array()) {
    Reply r = ctl_->Heartbeat(kAgent, node, {{"gpus", Gpus(8)}, {"exits", exits}}, "127.0.0.1");
    EXPECT_EQ(r.code, Code::kOk) << r.body.dump();
    return r.body;
  }
  // A batch job (an sbatch script) of 4 task slots, 2 on each node, started: its id and
  // the node its script runs on ("" when it did not start).
  std::pair<std::string, std::string> StartBatchJob() {
    Reply r = Submit(kTeamA, R"({"queue":"research","gpus":2,"vram_gb":1,"replicas":4,
                                 "workers_per_node":2,"script":"#!/bin/sh\nsrun true\n"})");
    EXPECT_EQ(r.code, Code::kCreated) << r.body.dump();
    const std::string id = r.body.value("id", "");
    Beat("h100-0");
    Beat("h100-1");
    ctl_->Poke();
    const json show = Show(id);
    if (show.value("state", "") != "running") {
      ADD_FAILURE() << show.dump();
      return {id, ""};
    }
    return {id, show["workers"][0]["alloc"].value("node", "")};
  }
  json Show(const std::string& id) {
    Reply r = ctl_->ShowJob(kAdmin, id);
    EXPECT_EQ(r.code, Code::kOk) << r.body.dump();
    return r.body;
  }
  // Submits `body` and starts it on h100-0: its id ("" when it did not start there).
  std::string StartOnH100(const std::string& token, const std::string& body) {
    Reply r = Submit(token, body);
    EXPECT_EQ(r.code, Code::kCreated) << r.body.dump();
    if (r.code != Code::kCreated) return "";
    const std::string id = r.body["id"];
    Beat("h100-0");
    ctl_->Poke();
    Beat("h100-0");
    return Show(id)["state"] == "running" ? id : "";
  }

  fs::path dir_;
  ControllerOptions options_;  // what Start() uses, besides the timings it sets
  std::optional<spec::ClusterConfig> config_;
  std::unique_ptr<SqliteStore> store_;
  std::unique_ptr<Controller> ctl_;
  std::ostringstream events_;
  std::atomic<int64_t> clock_{1'700'000'000'000};
};

TEST_F(ControllerTest, JobRunsOnAnAgentAndFinishes) {
  Reply r =
      Submit(kTeamA, R"({"queue":"research","gpus":2,"replicas":2,"vram_gb":40,"command":"true"})");
  ASSERT_EQ(r.code, Code::kCreated) << r.body.dump();
  const std::string id = r.body["id"];
  ctl_->Poke();
  EXPECT_EQ(Show(id)["state"], "pending");  // no node is up yet
  json beat = Beat("h100-0");
  ctl_->Poke();
  beat = Beat("h100-0");
  ASSERT_EQ(beat["workers"].size(), 2u) << beat.dump();
  const json& w0 = beat["workers"][0];
  EXPECT_EQ(w0["action"], "run");
  EXPECT_EQ(w0["env"]["GANTRY_JOB_ID"], id);
  EXPECT_EQ(w0["env"]["GANTRY_WORLD_SIZE"], "2");
  EXPECT_EQ(w0["env"]["GANTRY_MASTER_ADDR"], "127.0.0.1");
  EXPECT_EQ(w0["alloc"]["gpus"].size(), 2u);
  EXPECT_EQ(Show(id)["state"], "running");
  Advance(1000);
  Beat("h100-0", json::array({{{"job", id}, {"run", 1}, {"rank", 0}, {"exit_code", 0}}}));
  EXPECT_EQ(Show(id)["state"], "running");  // rank 1 still runs
  beat = Beat("h100-0", json::array({{{"job", id}, {"run", 1}, {"rank", 1}, {"exit_code", 0}}}));
  EXPECT_EQ(Show(id)["state"], "finished");
  EXPECT_TRUE(beat["workers"].empty());
  EXPECT_NE(events_.str().find("\"type\":\"finish\",\"job\":\"" + id + "\""), std::string::npos)
      << events_.str();
}

TEST_F(ControllerTest, TheSchedulerForgetsEndedJobsAndTheyStayListed) {
  // A daemon that runs for months must not hold every job it ran: once a job ends, the
  // scheduling core lets go of its record (the store and `recent_done` keep the job).
  auto records = [&] {
    const std::string m = ctl_->Metrics();
    const size_t at = m.find("\ngantry_scheduler_job_records ");
    return at == std::string::npos ? -1 : std::stoi(m.substr(at + 30));
  };
  Reply done = Submit(
      kTeamA, R"({"queue":"research","gpus":1,"vram_gb":40,"command":"true","env":{"A":"1"}})");
  Reply cancelled =
      Submit(kTeamA, R"({"queue":"research","gpus":8,"replicas":2,"vram_gb":40,"command":"true"})");
  EXPECT_EQ(records(), 2);
  Beat("h100-0");
  ctl_->Poke();
  const json beat = Beat("h100-0");
  ASSERT_EQ(beat["workers"].size(), 1u) << beat.dump();
  EXPECT_EQ(Show(cancelled.body["id"])["state"], "pending");  // one node: no room for 2 x 8
  ASSERT_EQ(ctl_->Cancel(kTeamA, cancelled.body["id"]).code, Code::kOk);
  Advance(1000);
  Beat("h100-0",
       json::array({{{"job", done.body["id"]}, {"run", 1}, {"rank", 0}, {"exit_code", 0}}}));
  EXPECT_EQ(Show(done.body["id"])["state"], "finished");
  EXPECT_EQ(Show(cancelled.body["id"])["state"], "cancelled");
  EXPECT_EQ(records(), 0);
  // New jobs still run where the forgotten ones ran.
  Reply next = Submit(kTeamA, R"({"queue":"research","gpus":8,"vram_gb":40,"command":"true"})");
  ctl_->Poke();
  EXPECT_EQ(Beat("h100-0")["workers"].size(), 1u);
  EXPECT_EQ(Show(next.body["id"])["state"], "running");
  EXPECT_EQ(records(), 1);
}

TEST_F(ControllerTest, EndedJobsArePurgedPastTheirRetentionWithTheirOutput) {
  // --job-retention-days: the store does not keep every job forever (as Slurm's
  // PurgeJobAfter); the job's output goes with it, its usage stays for accounting.
  options_.job_retention_ms = 86'400'000;
  Restart();
  auto purged = [&] {
    const std::string m = ctl_->Metrics();
    const size_t at = m.find("\ngantry_jobs_purged_total ");
    return at == std::string::npos ? -1 : std::stoi(m.substr(at + 26));
  };
  Reply live = Submit(kTeamA, R"({"queue":"research","gpus":1,"vram_gb":40,"command":"sleep 1d"})");
  Reply old = Submit(kTeamA, R"({"queue":"research","gpus":1,"vram_gb":40,"command":"true"})");
  ASSERT_EQ(old.code, Code::kCreated) << old.body.dump();
  const std::string id = old.body["id"];  // the newest job
  Beat("h100-0");
  ctl_->Poke();
  ASSERT_EQ(Beat("h100-0")["workers"].size(), 2u);
  ASSERT_EQ(ctl_->UploadLog(kAgent, "h100-0", id, 1, 0, 0, "hello\n").code, Code::kOk);
  Reply log = ctl_->LogPath(kTeamA, id, 1, 0);
  ASSERT_EQ(log.code, Code::kOk) << log.body.dump();
  // Issue 47 (low): a run the job never had is a 404 naming its runs, not an empty log.
  Reply missing = ctl_->LogPath(kTeamA, id, 9, 0);
  EXPECT_EQ(missing.code, Code::kNotFound);
  EXPECT_EQ(missing.body.value("error", ""), "job " + id + " has no run 9 (its runs: 1)")
      << missing.body.dump();
  const fs::path output = log.body["path"].get<std::string>();
  ASSERT_TRUE(fs::exists(output)) << output;
  Advance(1000);
  Beat("h100-0", json::array({{{"job", id}, {"run", 1}, {"rank", 0}, {"exit_code", 0}}}));
  EXPECT_EQ(Show(id)["state"], "finished");

  Advance(86'400'000 - 60'000);  // not yet a day since it ended
  Beat("h100-0");
  ctl_->Poke();
  EXPECT_EQ(Show(id)["state"], "finished");
  EXPECT_EQ(purged(), 0);
  Advance(2 * 3'600'000);  // past it, and an hour's purge has run
  Beat("h100-0");
  ctl_->Poke();
  EXPECT_EQ(ctl_->ShowJob(kAdmin, id).code, Code::kNotFound);
  EXPECT_EQ(purged(), 1);
  EXPECT_FALSE(fs::exists(output.parent_path())) << output;
  EXPECT_EQ(Show(live.body["id"])["state"], "running");  // running for a day: not ended, kept
  auto runs = store_->Runs(0, std::numeric_limits<int64_t>::max());
  ASSERT_TRUE(runs.ok());
  EXPECT_EQ(runs->size(), 2u);  // usage accounting keeps the purged job's run
  // Its seq is never given again, also after a restart (it was the newest job: the store
  // keeps the highest seq it purged).
  Restart();
  EXPECT_EQ(ctl_->ShowJob(kAdmin, id).code, Code::kNotFound);
  Reply next = Submit(kTeamA, R"({"queue":"research","gpus":1,"vram_gb":40,"command":"true"})");
  ASSERT_EQ(next.code, Code::kCreated) << next.body.dump();
  EXPECT_NE(next.body["id"], id);
  EXPECT_NE(next.body["id"], live.body["id"]);
}

TEST_F(ControllerTest, AFailedWorkerFailsTheGangAndStopsTheOthers) {
  Reply r = Submit(
      kTeamA,
      R"({"queue":"research","gpus":1,"replicas":2,"vram_gb":40,"grace_s":5,"command":"x"})");
  const std::string id = r.body["id"];
  Beat("h100-0");
  ctl_->Poke();
  json beat =
      Beat("h100-0", json::array({{{"job", id}, {"run", 1}, {"rank", 0}, {"exit_code", 3}}}));
  ASSERT_EQ(beat["workers"].size(), 1u);
  EXPECT_EQ(beat["workers"][0]["action"], "stop");
  EXPECT_EQ(beat["workers"][0]["rank"], 1);
  Beat("h100-0", json::array({{{"job", id}, {"run", 1}, {"rank", 1}, {"signal", 15}}}));
  json show = Show(id);
  EXPECT_EQ(show["state"], "failed");
  EXPECT_EQ(show["exit_code"], 3);
}

// A clean agent stop (its last heartbeat says leaving) is not a node failure: the node is
// down at once and its jobs are requeued saying the agent shut down.
TEST_F(ControllerTest, AnAgentThatLeavesRequeuesItsJobsAsStoppedNotFailed) {
  Reply r = Submit(kTeamA, R"({"queue":"research","gpus":8,"vram_gb":40,"command":"x"})");
  const std::string id = r.body["id"];
  Beat("h100-0");
  ctl_->Poke();
  ASSERT_EQ(Show(id)["nodes"], json::array({"h100-0"}));
  // (An agent reports its stopped workers lost with this heartbeat; one that could not
  // leaves them to the node's going down.)
  Reply bye =
      ctl_->Heartbeat(kAgent, "h100-0", {{"gpus", Gpus(8)}, {"leaving", true}}, "127.0.0.1");
  ASSERT_EQ(bye.code, Code::kOk) << bye.body.dump();
  EXPECT_NE(events_.str().find("\"type\":\"node_down\",\"node\":\"h100-0\""), std::string::npos);
  EXPECT_EQ(events_.str().find("node h100-0 failed"), std::string::npos) << events_.str();
  EXPECT_EQ(Show(id)["requeues"], 1) << Show(id).dump();
  EXPECT_NE(events_.str().find("node h100-0 stopped: its agent shut down"), std::string::npos)
      << events_.str();
}

TEST_F(ControllerTest, SilentNodeRequeuesItsJobsWithTheirCheckpoint) {
  Reply r = Submit(kTeamA,
                   R"({"queue":"research","gpus":8,"vram_gb":40,"checkpoint_s":1,"command":"x"})");
  const std::string id = r.body["id"];
  Beat("h100-0");
  ctl_->Poke();
  ASSERT_EQ(Show(id)["nodes"], json::array({"h100-0"}));
  Advance(2500);
  Beat("h100-0");
  Advance(3500);  // h100-0 silent past the 3 s timeout
  Beat("h100-1");
  ctl_->Poke();
  ctl_->Poke();
  json show = Show(id);
  EXPECT_EQ(show["requeues"], 1);
  EXPECT_DOUBLE_EQ(show["progress_s"].get<double>(), 6.0);  // floor(6 s / 1 s) * 1 s
  EXPECT_EQ(show["state"], "running");
  EXPECT_EQ(show["nodes"], json::array({"h100-1"}));
  EXPECT_NE(events_.str().find("\"type\":\"node_down\",\"node\":\"h100-0\""), std::string::npos);
  EXPECT_NE(events_.str().find("\"type\":\"requeue\",\"job\":\"" + id +
                               "\",\"reason\":\"node h100-0 failed\""),
            std::string::npos)
      << events_.str();
  // The node comes back: it is told nothing of the moved job (so it kills any copy).
  json beat = Beat("h100-0");
  EXPECT_TRUE(beat["workers"].empty());
}

TEST_F(ControllerTest, PreemptionSignalsTheVictimAndRequeuesItAfterItExits) {
  Beat("h100-0");
  Beat("h100-1");
  std::vector<std::string> borrowers;
  for (int i = 0; i < 2; ++i) {
    Reply r = Submit(
        kTeamA,
        R"({"queue":"research","tier":"best-effort","gpus":8,"vram_gb":40,"grace_s":7,"command":"x"})");
    borrowers.push_back(r.body["id"]);
  }
  ctl_->Poke();
  for (const auto& id : borrowers) ASSERT_EQ(Show(id)["state"], "running");
  Reply crit = Submit(
      kTeamB, R"({"queue":"serving","tier":"critical","gpus":8,"vram_gb":40,"command":"x"})");
  ASSERT_EQ(crit.code, Code::kCreated);
  ctl_->Poke();
  std::string victim;
  for (const auto& id : borrowers) {
    if (Show(id)["state"] == "stopping") victim = id;
  }
  ASSERT_FALSE(victim.empty());
  const std::string node = Show(victim)["nodes"][0];
  json beat = Beat(node);
  ASSERT_EQ(beat["workers"].size(), 1u);
  EXPECT_EQ(beat["workers"][0]["action"], "stop");
  EXPECT_EQ(beat["workers"][0]["grace_ms"], 7000);
  Advance(1000);
  Beat(node, json::array({{{"job", victim}, {"run", 1}, {"rank", 0}, {"exit_code", 0}}}));
  ctl_->Poke();
  EXPECT_EQ(Show(victim)["state"], "pending");
  EXPECT_EQ(Show(victim)["preemptions"], 1);
  EXPECT_EQ(Show(crit.body["id"])["state"], "running");
  EXPECT_NE(events_.str().find("\"type\":\"preempt\",\"job\":\"" + victim + "\",\"by\":\"" +
                               crit.body["id"].get<std::string>() + "\""),
            std::string::npos)
      << events_.str();
}

// Issue 46 section 2: an elastic job (min_replicas) in gantryd starts at what fits, grows
// into GPUs nobody waits for at a checkpoint and shrinks back when work waits, each time
// by stopping its run (the checkpoint signal, its grace) and starting the next at the new
// size; the GPUs it gives up take no other job until its workers there have exited.
TEST_F(ControllerTest, AnElasticJobGrowsAndShrinksAtItsCheckpoints) {
  Beat("h100-0");
  Beat("h100-1");
  const auto submit = [&](const char* token, const std::string& body) {
    Reply r = Submit(token, body);
    EXPECT_EQ(r.code, Code::kCreated) << r.body.dump();
    return r.body.value("id", "");
  };
  const auto exited = [&](const std::string& id, int run, int rank, const std::string& node) {
    Beat(node, json::array({{{"job", id}, {"run", run}, {"rank", rank}, {"exit_code", 0}}}));
    ctl_->Poke();
  };
  const auto wait = [&](int64_t ms) {  // the agents heartbeat meanwhile (node timeout 3 s)
    for (int64_t t = 0; t < ms; t += 1000) {
      Advance(std::min<int64_t>(1000, ms - t));
      Beat("h100-0");
      Beat("h100-1");
    }
    ctl_->Poke();
  };
  const auto run_workers = [&](const std::string& id, const std::string& node) {
    std::vector<json> out;
    const json beat = Beat(node);
    for (const json& w : beat["workers"])
      if (w["job"] == id && w["action"] == "run") out.push_back(w);
    return out;
  };
  const std::string blocker =
      submit(kTeamB, R"({"queue":"serving","gpus":8,"vram_gb":40,"command":"x"})");
  ctl_->Poke();
  ASSERT_EQ(Show(blocker)["state"], "running");
  const std::string blocked_node = Show(blocker)["nodes"][0];
  const std::string free_node = blocked_node == "h100-0" ? "h100-1" : "h100-0";
  const std::string el = submit(kTeamA, R"({"queue":"research","gpus":8,"vram_gb":40,"replicas":2,
      "min_replicas":1,"checkpoint_s":60,"grace_s":5,"command":"x"})");
  ctl_->Poke();
  json j = Show(el);
  ASSERT_EQ(j["state"], "running") << j.dump();
  EXPECT_EQ(j["size"], 1);  // what fits now, at least its least
  EXPECT_EQ(j["min_replicas"], 1);
  EXPECT_EQ(j["replicas"], 2);
  EXPECT_EQ(j["request"].get<std::string>().rfind("1-2 x 8 GPU(s)", 0), 0u) << j["request"];
  std::vector<json> ws = run_workers(el, free_node);
  ASSERT_EQ(ws.size(), 1u);
  EXPECT_EQ(ws[0]["env"]["GANTRY_WORLD_SIZE"], "1");
  EXPECT_EQ(ws[0]["env"]["GANTRY_MIN_WORLD_SIZE"], "1");
  EXPECT_EQ(ws[0]["env"]["GANTRY_MAX_WORLD_SIZE"], "2");

  // The blocker ends: at the elastic job's next checkpoint it grows into the idle node.
  wait(10'000);
  exited(blocker, 1, 0, blocked_node);
  EXPECT_EQ(Show(el)["size"], 1) << "no resize between checkpoints";
  wait(50'000);  // 60 s since its run began
  j = Show(el);
  ASSERT_EQ(j["state"], "stopping") << j.dump();
  EXPECT_EQ(j["size"], 2);
  EXPECT_NE(
      j["reason"].get<std::string>().find("resize: grown from 1 to 2 workers at a checkpoint"),
      std::string::npos)
      << j["reason"];
  json beat = Beat(free_node);
  ASSERT_EQ(beat["workers"].size(), 1u);
  EXPECT_EQ(beat["workers"][0]["action"], "stop");
  EXPECT_EQ(beat["workers"][0]["grace_ms"], 5000);
  wait(2'000);  // it checkpoints and exits
  exited(el, 1, 0, free_node);
  j = Show(el);
  ASSERT_EQ(j["state"], "running") << j.dump();
  EXPECT_EQ(j["run"], 2);
  EXPECT_EQ(j["nodes"].size(), 2u);
  EXPECT_EQ(j["resizes"], 1);
  for (const std::string node : {"h100-0", "h100-1"}) {
    ws = run_workers(el, node);
    ASSERT_EQ(ws.size(), 1u) << node;
    EXPECT_EQ(ws[0]["run"], 2);
    EXPECT_EQ(ws[0]["env"]["GANTRY_WORLD_SIZE"], "2");
    EXPECT_EQ(ws[0]["env"]["WORLD_SIZE"], "2");
  }

  // Work waits for room (inside serving's guarantee, but not critical: it does not take a
  // grown job whole): the job shrinks back at its next checkpoint, counted from run 2's start.
  const std::string waiter =
      submit(kTeamB, R"({"queue":"serving","gpus":8,"vram_gb":40,"command":"x"})");
  ctl_->Poke();
  ASSERT_EQ(Show(waiter)["state"], "pending");
  wait(59'000);
  EXPECT_EQ(Show(el)["state"], "running") << "run 2 began 59 s ago: not yet at its checkpoint";
  wait(1'000);
  j = Show(el);
  ASSERT_EQ(j["state"], "stopping") << j.dump();
  EXPECT_EQ(j["size"], 1);
  std::string kept_node, dropped_node;
  const json shown = ctl_->ShowJob(kAdmin, el).body;
  for (const json& w : shown["workers"]) {
    (w["rank"] == 0 ? kept_node : dropped_node) = w["alloc"]["node"].get<std::string>();
  }
  ASSERT_NE(kept_node, dropped_node);
  // Rank 1's node is held until rank 1 has exited: the waiting job does not start there.
  exited(el, 2, 0, kept_node);
  EXPECT_EQ(Show(waiter)["state"], "pending");
  wait(1'000);
  exited(el, 2, 1, dropped_node);
  j = Show(el);
  ASSERT_EQ(j["state"], "running") << j.dump();
  EXPECT_EQ(j["run"], 3);
  EXPECT_EQ(j["size"], 1);
  EXPECT_EQ(j["nodes"], json::array({kept_node}));
  ASSERT_EQ(Show(waiter)["state"], "running");
  EXPECT_EQ(Show(waiter)["nodes"], json::array({dropped_node}));

  // The event log: one start, then the two resizes (a resize is not a start).
  const std::string ev = events_.str();
  size_t starts = 0;
  for (size_t at = 0;
       (at = ev.find("\"type\":\"start\",\"job\":\"" + el + "\"", at)) != std::string::npos; ++at)
    ++starts;
  EXPECT_EQ(starts, 1u) << ev;
  EXPECT_NE(ev.find("\"type\":\"resize\",\"job\":\"" + el + "\",\"from\":1,\"size\":2"),
            std::string::npos)
      << ev;
  EXPECT_NE(ev.find("\"type\":\"resize\",\"job\":\"" + el + "\",\"from\":2,\"size\":1"),
            std::string::npos)
      << ev;
  const std::string m = ctl_->Metrics();
  EXPECT_NE(m.find("gantry_resizes_total{direction=\"grow\"} 1\n"), std::string::npos);
  EXPECT_NE(m.find("gantry_resizes_total{direction=\"shrink\"} 1\n"), std::string::npos);
  EXPECT_NE(m.find("gantry_elastic_workers{size=\"current\"} 1\n"), std::string::npos);
  EXPECT_NE(m.find("gantry_elastic_workers{size=\"max\"} 2\n"), std::string::npos);
}

// A gantryd restart while an elastic job's old run stops for a resize: the new size was
// the scheduler's, in memory; the old run is adopted, ends as a requeue, and the job starts
// again at what fits then (a requeue and a start in the event log, as for a lost node).
TEST_F(ControllerTest, AnElasticJobResizingAcrossARestartIsRequeuedFromItsCheckpoint) {
  Beat("h100-0");
  Reply r = Submit(kTeamA, R"({"queue":"research","gpus":8,"vram_gb":40,"replicas":2,
      "min_replicas":1,"checkpoint_s":60,"grace_s":30,"command":"x"})");
  ASSERT_EQ(r.code, Code::kCreated) << r.body.dump();
  const std::string el = r.body["id"];
  ctl_->Poke();
  ASSERT_EQ(Show(el)["size"], 1);  // h100-1's agent is not up yet
  for (int s = 0; s < 60; ++s) {
    Advance(1000);
    Beat("h100-0");
    Beat("h100-1");
  }
  ctl_->Poke();
  ASSERT_EQ(Show(el)["state"], "stopping");
  ASSERT_EQ(Show(el)["size"], 2);
  Restart();
  Beat("h100-0");
  Beat("h100-1");
  json j = Show(el);
  ASSERT_EQ(j["state"], "stopping") << j.dump();
  EXPECT_NE(j["reason"].get<std::string>().find("gantryd restarted while it resized"),
            std::string::npos)
      << j["reason"];
  Advance(1000);
  Beat("h100-0", json::array({{{"job", el}, {"run", 1}, {"rank", 0}, {"exit_code", 0}}}));
  ctl_->Poke();
  j = Show(el);
  ASSERT_EQ(j["state"], "running") << j.dump();
  EXPECT_EQ(j["run"], 2);
  EXPECT_EQ(j["size"], 2) << "both nodes free: it starts at its most";
  EXPECT_EQ(j["requeues"], 1);
  EXPECT_DOUBLE_EQ(j["progress_s"].get<double>(), 30.0) << "60 s at 1 of its 2 workers";
}

// Issue 47 B7: a job resumed after a preemption is shielded from another one for
// min_run_before_repreempt_s (600 s); a gantryd restart re-adopted it with no preemption
// on record, so the next claimant took it at once.
TEST_F(ControllerTest, AResumedJobKeepsItsRepreemptionShieldAcrossARestart) {
  Beat("h100-0");
  Beat("h100-1");
  const auto submit = [&](const char* token, const char* queue, const char* tier) {
    Reply r = Submit(token, std::string(R"({"queue":")") + queue + R"(","tier":")" + tier +
                                R"(","gpus":8,"vram_gb":40,"grace_s":1,"command":"x"})");
    EXPECT_EQ(r.code, Code::kCreated) << r.body.dump();
    return r.body["id"].get<std::string>();
  };
  const auto exited = [&](const std::string& id, int run) {
    Beat(Show(id)["nodes"][0],
         json::array({{{"job", id}, {"run", run}, {"rank", 0}, {"exit_code", 0}}}));
    ctl_->Poke();
  };
  const std::string p = submit(kTeamA, "research", "best-effort");
  const std::string other = submit(kTeamA, "research", "best-effort");
  ctl_->Poke();
  const std::string c1 = submit(kTeamB, "serving", "critical");
  ctl_->Poke();
  std::string victim = Show(p)["state"] == "stopping" ? p : other;
  const std::string kept = victim == p ? other : p;
  ASSERT_EQ(Show(victim)["state"], "stopping");
  Advance(500);
  exited(victim, 1);
  ASSERT_EQ(Show(c1)["state"], "running");
  Advance(500);
  exited(c1, 1);  // its GPUs go back to the victim: resumed, run 2
  ASSERT_EQ(Show(victim)["state"], "running");
  ASSERT_EQ(Show(victim)["run"], 2);
  ASSERT_EQ(Show(kept)["state"], "running");
  ASSERT_EQ(ctl_->Cancel(kAdmin, kept, /*force=*/true).code, Code::kOk);
  Advance(1500);  // past the kill slack
  ctl_->Poke();
  const std::string c3 = submit(kTeamB, "serving", "critical");  // takes the freed node
  ctl_->Poke();
  ASSERT_EQ(Show(c3)["state"], "running");

  Restart();
  Beat("h100-0");
  Beat("h100-1");
  ctl_->Poke();
  ASSERT_EQ(Show(victim)["state"], "running");
  EXPECT_EQ(Show(victim)["preemptions"], 1);
  const std::string c2 = submit(kTeamB, "serving", "critical");
  ctl_->Poke();
  EXPECT_EQ(Show(victim)["state"], "running")
      << "preempted again within min_run_before_repreempt_s";
  EXPECT_EQ(Show(c2)["state"], "pending");
  // Past the shield it may go.
  Advance(601'000);
  Beat("h100-0");
  Beat("h100-1");
  ctl_->Poke();
  EXPECT_NE(Show(victim)["state"], "running");
  EXPECT_EQ(Show(c2)["state"], "running");
}

// Beyond its queue's guarantee a critical job still takes best-effort work's GPUs (the
// default policy.best_effort_yields_to, standard, counts critical work in), through the same
// stop-and-requeue.
TEST_F(ControllerTest, ACriticalJobBeyondItsGuaranteeStopsBestEffortWork) {
  Beat("h100-0");
  Beat("h100-1");
  Reply fill = Submit(
      kTeamB, R"({"queue":"serving","tier":"critical","gpus":8,"vram_gb":40,"command":"x"})");
  Reply be = Submit(
      kTeamA,
      R"({"queue":"research","tier":"best-effort","gpus":8,"vram_gb":40,"grace_s":7,"command":"x"})");
  ctl_->Poke();
  ASSERT_EQ(Show(fill.body["id"])["state"], "running");
  const std::string victim = be.body["id"];
  ASSERT_EQ(Show(victim)["state"], "running");
  // serving holds its 8 guaranteed GPUs: this one is beyond them.
  Reply crit = Submit(
      kTeamB, R"({"queue":"serving","tier":"critical","gpus":8,"vram_gb":40,"command":"x"})");
  ctl_->Poke();
  ASSERT_EQ(Show(victim)["state"], "stopping");
  const std::string node = Show(victim)["nodes"][0];
  Advance(1000);
  Beat(node, json::array({{{"job", victim}, {"run", 1}, {"rank", 0}, {"exit_code", 0}}}));
  ctl_->Poke();
  EXPECT_EQ(Show(victim)["state"], "pending");
  EXPECT_EQ(Show(crit.body["id"])["state"], "running");
  EXPECT_NE(events_.str().find(
                "\"type\":\"preempt\",\"job\":\"" + victim + "\",\"by\":\"" +
                crit.body["id"].get<std::string>() + "\",\"reason\":\"critical job " +
                crit.body["id"].get<std::string>() + " needs capacity held by best-effort work\""),
            std::string::npos)
      << events_.str();
}

TEST_F(ControllerTest, RestartReadoptsRunningJobsAndKeepsPendingOnes) {
  Beat("h100-0");
  Reply a = Submit(kTeamA, R"({"queue":"research","gpus":4,"vram_gb":40,"command":"x"})");
  Reply m = Submit(kTeamA, R"({"queue":"research","mig":"3g.40gb","vram_gb":30,"command":"x"})");
  Reply s = Submit(kTeamA,
                   R"({"queue":"research","gpus":0.5,"sharing":"mps","vram_gb":30,"command":"x"})");
  Reply big = Submit(kTeamA, R"({"queue":"research","gpus":8,"vram_gb":40,"command":"x"})");
  ctl_->Poke();
  for (const Reply* r : {&a, &m, &s}) ASSERT_EQ(Show(r->body["id"])["state"], "running");
  ASSERT_EQ(Show(big.body["id"])["state"], "pending");
  const json before = Beat("h100-0")["workers"];
  Restart();
  Advance(500);
  ctl_->Poke();
  for (const Reply* r : {&a, &m, &s}) {
    json show = Show(r->body["id"]);
    EXPECT_EQ(show["state"], "running") << show.dump();
    EXPECT_EQ(show["run"], 1);  // not restarted
  }
  EXPECT_EQ(Show(big.body["id"])["state"], "pending");  // its node is still full
  const json after = Beat("h100-0")["workers"];
  ASSERT_EQ(after.size(), before.size());
  for (size_t i = 0; i < after.size(); ++i) EXPECT_EQ(after[i]["alloc"], before[i]["alloc"]);
  // A new job fits only in what is really free (the big one, reserving the node, goes).
  ASSERT_EQ(ctl_->Cancel(kTeamA, big.body["id"]).code, Code::kOk);
  Reply small = Submit(kTeamA, R"({"queue":"research","gpus":2,"vram_gb":40,"command":"x"})");
  ctl_->Poke();
  json placed = Show(small.body["id"]);
  ASSERT_EQ(placed["state"], "running") << placed.dump();
  const json gpus = Beat("h100-0")["workers"].back()["alloc"]["gpus"];
  for (const json& w : before) {
    if (!w["alloc"].contains("gpus")) continue;
    for (const json& g : w["alloc"]["gpus"])
      EXPECT_EQ(std::count(gpus.begin(), gpus.end(), g), 0) << g;
  }
}

TEST_F(ControllerTest, ARunningJobTheSchedulerWillNotTakeBackIsRequeuedAfterARestart) {
  Beat("h100-0");
  Reply a = Submit(kTeamA, R"({"queue":"research","gpus":4,"vram_gb":40,"command":"x"})");
  Reply b = Submit(kTeamA, R"({"queue":"research","gpus":4,"vram_gb":40,"command":"x"})");
  ctl_->Poke();
  for (const Reply* r : {&a, &b}) ASSERT_EQ(Show(r->body["id"])["state"], "running");
  // While gantryd is down the site lowers research's burst to 4 GPUs: one of the two
  // fits under it again, the other is requeued (and its workers stopped), not lost.
  std::string yaml = kConfig;
  yaml.replace(yaml.find("burst_gpus: 16"), 14, "burst_gpus: 4");
  spec::Diagnostics diags;
  config_ = spec::ParseClusterConfig(yaml, "test.yaml", diags);
  ASSERT_TRUE(config_) << diags.ToString();
  Restart();
  Advance(500);
  ctl_->Poke();
  const json first = Show(a.body["id"]), second = Show(b.body["id"]);
  EXPECT_EQ(first["state"], "running") << first.dump();
  EXPECT_EQ(first["run"], 1) << "re-adopted, not restarted";
  EXPECT_EQ(second["state"], "pending") << second.dump();
  EXPECT_NE(second.dump().find("could not re-adopt"), std::string::npos) << second.dump();
  EXPECT_EQ(Beat("h100-0")["workers"].size(), 1u) << "the requeued job's worker is stopped";
}

// A queue's usage moves with every start and end in it: the core's text leaves it out (a
// new text is a new event for every job the limit holds), gantryd adds it as of now.
TEST_F(ControllerTest, AJobHeldByItsQueuesBurstSaysWhatTheQueueHoldsNow) {
  Beat("h100-0");
  Beat("h100-1");
  Reply a = Submit(kTeamA, R"({"queue":"research","gpus":8,"vram_gb":40,"command":"x"})");
  Reply b = Submit(kTeamA, R"({"queue":"research","gpus":4,"vram_gb":40,"command":"x"})");
  ctl_->Poke();
  for (const Reply* r : {&a, &b}) ASSERT_EQ(Show(r->body["id"])["state"], "running");
  Reply c = Submit(kTeamA, R"({"queue":"research","gpus":8,"vram_gb":40,"command":"x"})");
  ctl_->Poke();
  const json held = Show(c.body["id"]);
  ASSERT_EQ(held["state"], "pending") << held.dump();
  EXPECT_EQ(held["wait"]["cause"], "quota") << held.dump();
  EXPECT_EQ(held["reason"],
            "quota: queue research would pass its burst_gpus 16 with this job; it holds 12 now")
      << held.dump();
}

TEST_F(ControllerTest, APendingJobSaysWhyItWaitsForPrograms) {
  Beat("h100-0");
  Reply a = Submit(kTeamA, R"({"queue":"research","gpus":8,"vram_gb":40,"command":"x"})");
  Reply b = Submit(kTeamA, R"({"queue":"research","gpus":8,"vram_gb":40,"command":"x"})");
  ctl_->Poke();
  ASSERT_EQ(Show(a.body["id"])["state"], "running");
  const json waiting = Show(b.body["id"]);
  ASSERT_EQ(waiting["state"], "pending") << waiting.dump();
  // No room: the cause is the reason's first word; it holds a reservation for when the
  // running job is expected to end, a time after now.
  EXPECT_EQ(waiting["wait"]["cause"], "capacity") << waiting.dump();
  EXPECT_EQ(waiting["reason"].get<std::string>().rfind("capacity", 0), 0u) << waiting.dump();
  ASSERT_TRUE(waiting["wait"].contains("at")) << waiting.dump();
  EXPECT_GT(waiting["wait"]["at"].get<double>(), Show(a.body["id"])["run_start"].get<double>());
  // For people the reason gives that time too, as of now (the core's text leaves it out:
  // it moves from pass to pass, and a new text is a new event).
  const std::string reason = waiting["reason"];
  EXPECT_NE(reason.find("; GPUs reserved for it; estimated start "), std::string::npos) << reason;
  EXPECT_NE(reason.find(" UTC (in "), std::string::npos) << reason;
  EXPECT_FALSE(Show(a.body["id"]).contains("wait"));
}

TEST_F(ControllerTest, IdempotencyKeyReturnsTheSameJob) {
  const std::string body = R"({"queue":"research","gpus":1,"vram_gb":10,"command":"x"})";
  Reply first = Submit(kTeamA, body, "key-1");
  ASSERT_EQ(first.code, Code::kCreated);
  Reply again = Submit(kTeamA, body, "key-1");
  EXPECT_EQ(again.code, Code::kOk);
  EXPECT_EQ(again.body["id"], first.body["id"]);
  Restart();
  Reply after_restart = Submit(kTeamA, body, "key-1");
  EXPECT_EQ(after_restart.body["id"], first.body["id"]);
  Reply other =
      Submit(kTeamA, R"({"queue":"research","gpus":2,"vram_gb":10,"command":"x"})", "key-1");
  EXPECT_EQ(other.code, Code::kConflict);
  Reply list = ctl_->ListJobs(kAdmin, "", true);
  EXPECT_EQ(list.body["jobs"].size(), 1u);
}

// A job's record is written once per batch (Controller::SaveJobs): a retry that lands in
// the same batch as its first try must still find that job by its key.
TEST_F(ControllerTest, ARetryInTheSameBatchAsItsFirstTryGetsTheSameJob) {
  SubmitRequest req;
  req.body = R"({"queue":"research","gpus":1,"vram_gb":10,"command":"x"})";
  req.idempotency_key = "key-2";
  std::promise<Reply> first, again;
  ctl_->RunExclusive([&] {  // both wait behind this batch, and go in the next one together
    ctl_->Submit(kTeamA, req, [&](Reply r) { first.set_value(std::move(r)); });
    ctl_->Submit(kTeamA, req, [&](Reply r) { again.set_value(std::move(r)); });
  });
  Reply a = first.get_future().get(), b = again.get_future().get();
  ASSERT_EQ(a.code, Code::kCreated) << a.body.dump();
  EXPECT_EQ(b.code, Code::kOk) << b.body.dump();
  EXPECT_EQ(b.body["id"], a.body["id"]);
  EXPECT_EQ(ctl_->ListJobs(kAdmin, "", true).body["jobs"].size(), 1u);
  Restart();  // and what was answered was saved
  EXPECT_EQ(Submit(kTeamA, req.body, "key-2").body["id"], a.body["id"]);
  EXPECT_EQ(ctl_->ListJobs(kAdmin, "", true).body["jobs"].size(), 1u);
}

TEST_F(ControllerTest, QueuesShowUsageAgainstTheirGuarantees) {
  Reply r = Submit(kTeamB, R"({"queue":"serving","gpus":3,"vram_gb":10,"command":"x"})");
  ASSERT_EQ(r.code, Code::kCreated) << r.body.dump();
  Beat("h100-0");
  ctl_->Poke();
  Beat("h100-0");
  ASSERT_EQ(Show(r.body["id"])["state"], "running");
  json queues = ctl_->Queues(kAdmin).body["queues"];
  ASSERT_EQ(queues.size(), 3u);
  EXPECT_EQ(queues[0]["name"], "research");
  EXPECT_EQ(queues[0]["guaranteed_gpus"], 4.0);
  EXPECT_FALSE(queues[0].contains("guaranteed_gpus_by_model"));  // any model
  EXPECT_EQ(queues[1]["name"], "serving");
  EXPECT_EQ(queues[1]["guaranteed_gpus"], 8.0);
  EXPECT_EQ(queues[1]["used_gpus"], 3.0);
  EXPECT_EQ(queues[1]["guaranteed_gpus_by_model"], json({{"H100-80GB", 8.0}}));
  EXPECT_EQ(queues[1]["used_gpus_by_model"], json({{"H100-80GB", 3.0}}));
}

// Fair share remembers what each queue used across a restart, read back from the stored
// runs (it was forgotten: every queue started even again after each restart).
TEST_F(ControllerTest, FairShareRemembersAQueuesUseAcrossARestart) {
  const std::string id =
      StartOnH100(kTeamB, R"({"queue":"serving","gpus":4,"vram_gb":10,"command":"x"})");
  ASSERT_FALSE(id.empty());
  for (int i = 0; i < 600; ++i) {  // ten minutes, a heartbeat a second
    Advance(1000);
    Beat("h100-0");
  }
  ctl_->Poke();  // a pass while it runs (the core averages the use up to its passes)
  Beat("h100-0", json::array({{{"job", id}, {"run", 1}, {"rank", 0}, {"exit_code", 0}}}));
  ASSERT_EQ(Show(id)["state"], "finished");
  auto fair_share = [&](const char* queue) {
    const json queues = ctl_->Queues(kAdmin).body["queues"];
    for (const json& q : queues) {
      if (q["name"] == queue) return q["fair_share_gpus"].get<double>();
    }
    return -1.0;
  };
  ctl_->Poke();
  const double before = fair_share("serving");
  // 4 GPUs for 10 minutes, averaged over a day's half-life: about 4 x 600/86400 x ln 2.
  EXPECT_NEAR(before, 4 * (1 - std::exp2(-600.0 / 86400)), 0.002);
  EXPECT_EQ(fair_share("research"), 0);
  Restart();
  EXPECT_NEAR(fair_share("serving"), before, 0.01 * before);
  EXPECT_EQ(fair_share("research"), 0);
}

// A parent queue counts its children's jobs (issue 15: the console showed a parent with 0
// pending and 0 running while its children ran jobs).
TEST_F(ControllerTest, AParentQueueCountsItsChildrensJobs) {
  Reply runs = Submit(kTeamA, R"({"queue":"nlp","gpus":8,"vram_gb":10,"command":"x"})");
  ASSERT_EQ(runs.code, Code::kCreated) << runs.body.dump();
  Beat("h100-0");
  ctl_->Poke();
  Beat("h100-0");
  ASSERT_EQ(Show(runs.body["id"])["state"], "running");
  Reply waits = Submit(kTeamA, R"({"queue":"nlp","gpus":8,"vram_gb":10,"command":"x"})");
  Reply own = Submit(kTeamA, R"({"queue":"research","gpus":8,"vram_gb":10,"command":"x"})");
  ASSERT_EQ(waits.code, Code::kCreated);
  ASSERT_EQ(own.code, Code::kCreated);
  std::map<std::string, json> by_name;
  const json queues = ctl_->Queues(kAdmin).body["queues"];
  for (const json& q : queues) by_name[q["name"].get<std::string>()] = q;
  EXPECT_EQ(by_name["nlp"]["running"], 1);
  EXPECT_EQ(by_name["nlp"]["pending"], 1);
  EXPECT_EQ(by_name["research"]["running"], 1);  // its child's
  EXPECT_EQ(by_name["research"]["pending"], 2);  // its child's and its own
  EXPECT_EQ(by_name["research"]["used_gpus"], 8.0);
  EXPECT_EQ(by_name["serving"]["pending"], 0);
}

// --nice below 0 is a place ahead of the queue's other jobs: an admin's to give, as
// Slurm's; 0 and above anyone's. The value is kept in the job's spec across restarts.
TEST_F(ControllerTest, ANegativeNiceIsAnAdminsToGive) {
  Reply ahead =
      Submit(kTeamA, R"({"queue":"research","gpus":1,"vram_gb":1,"nice":-5,"command":"x"})");
  EXPECT_EQ(ahead.code, Code::kForbidden);
  EXPECT_NE(ahead.body["error"].get<std::string>().find(
                "nice: -5: only an admin may give a negative value"),
            std::string::npos)
      << ahead.body.dump();
  EXPECT_EQ(
      Submit(kTeamA, R"({"queue":"research","gpus":1,"vram_gb":1,"nice":100,"command":"x"})").code,
      Code::kCreated);
  EXPECT_EQ(
      Submit(kAdmin, R"({"queue":"research","gpus":1,"vram_gb":1,"nice":-5,"command":"x"})").code,
      Code::kCreated);
  Reply odd =
      Submit(kTeamA, R"({"queue":"research","gpus":1,"vram_gb":1,"nice":1.5,"command":"x"})");
  EXPECT_EQ(odd.code, Code::kBadRequest) << odd.body.dump();
}

// scontrol update JobName= of a running job: renamed where it runs, as Slurm's; its other
// fields only while it waits; an ended job's not at all.
TEST_F(ControllerTest, ARunningJobIsRenamedAndNothingElseOfItChanges) {
  Reply r = Submit(kTeamA, R"({"id":"run","name":"first","queue":"research","gpus":1,)"
                           R"("vram_gb":1,"script":"#!/bin/sh\ntrue\n"})");
  ASSERT_EQ(r.code, Code::kCreated) << r.body.dump();
  ctl_->Poke();
  Beat("h100-0");
  ctl_->Poke();
  json beat = Beat("h100-0");
  ASSERT_EQ(Show("run")["state"], "running") << beat.dump();
  Reply renamed = ctl_->UpdateSpec(kTeamA, "run", {{"name", "second"}});
  ASSERT_EQ(renamed.code, Code::kOk) << renamed.body.dump();
  EXPECT_EQ(renamed.body["updated"], 1);
  EXPECT_EQ(Show("run")["name"], "second");
  EXPECT_EQ(Show("run")["state"], "running") << "it runs on where it is";
  Reply queue = ctl_->UpdateSpec(kTeamA, "run", {{"name", "third"}, {"queue", "nlp"}});
  EXPECT_EQ(queue.code, Code::kConflict) << queue.body.dump();
  EXPECT_EQ(Show("run")["name"], "second");
  Advance(1000);
  Beat("h100-0", json::array({{{"job", "run"}, {"run", 1}, {"rank", 0}, {"exit_code", 0}}}));
  ASSERT_EQ(Show("run")["state"], "finished");
  Reply ended = ctl_->UpdateSpec(kTeamA, "run", {{"name", "fourth"}});
  EXPECT_EQ(ended.code, Code::kConflict);
  EXPECT_NE(ended.body["error"].get<std::string>().find("an ended job's name is not changed"),
            std::string::npos)
      << ended.body.dump();
}

TEST_F(ControllerTest, TeamsStayInTheirQueues) {
  Reply b = Submit(kTeamB, R"({"queue":"serving","gpus":1,"vram_gb":10,"command":"x"})");
  ASSERT_EQ(b.code, Code::kCreated);
  Reply into_b = Submit(kTeamA, R"({"queue":"serving","gpus":1,"vram_gb":10,"command":"x"})");
  EXPECT_EQ(into_b.code, Code::kForbidden);
  EXPECT_NE(into_b.body["error"].get<std::string>().find("team a may not submit to queue serving"),
            std::string::npos);
  Reply cancel = ctl_->Cancel(kTeamA, b.body["id"]);
  EXPECT_EQ(cancel.code, Code::kForbidden);
  EXPECT_EQ(ctl_->Cancel("", b.body["id"]).code, Code::kUnauthenticated);
  EXPECT_EQ(ctl_->Cancel("nope", b.body["id"]).code, Code::kUnauthenticated);
  EXPECT_EQ(ctl_->Cancel(kAgent, b.body["id"]).code, Code::kForbidden);
  EXPECT_EQ(Show(b.body["id"])["state"], "pending");
  EXPECT_EQ(ctl_->Cancel(kTeamB, b.body["id"]).code, Code::kOk);
  EXPECT_EQ(Show(b.body["id"])["state"], "cancelled");
  EXPECT_EQ(ctl_->Drain(kTeamA, "h100-0", true, "").code, Code::kForbidden);
  EXPECT_EQ(ctl_->Heartbeat(kTeamA, "h100-0", {{"gpus", Gpus(8)}}, "x").code, Code::kForbidden);
}

// Issue 47 (low): a second drain replaced the first drain's reason; both hold until resume.
TEST_F(ControllerTest, ASecondDrainAddsItsReasonAndResumeClearsThem) {
  Beat("h100-0");
  const auto reason = [&] {
    const Reply nodes = ctl_->Nodes(kAdmin);
    for (const json& n : nodes.body["nodes"]) {
      if (n["name"] == "h100-0") return n.value("reason", std::string());
    }
    return std::string("?");
  };
  ASSERT_EQ(ctl_->Drain(kAdmin, "h100-0", true, "bad GPU 3").code, Code::kOk);
  ASSERT_EQ(ctl_->Drain(kAdmin, "h100-0", true, "rack maintenance").code, Code::kOk);
  ASSERT_EQ(ctl_->Drain(kAdmin, "h100-0", true, "bad GPU 3").code, Code::kOk);  // said once
  EXPECT_EQ(reason(), "bad GPU 3; rack maintenance");
  ASSERT_EQ(ctl_->Drain(kAdmin, "h100-0", false, "").code, Code::kOk);
  EXPECT_EQ(reason(), "");
  ASSERT_EQ(ctl_->Drain(kAdmin, "h100-0", true, "").code, Code::kOk);
  EXPECT_EQ(reason(), "drained by admin");
}

TEST_F(ControllerTest, RejectsWhatCanNeverRunAndAgentsWithTheWrongGpus) {
  Reply r = Submit(kTeamA, R"({"queue":"research","gpus":1,"vram_gb":100,"command":"x"})");
  EXPECT_EQ(r.code, Code::kUnprocessable);
  r = Submit(kTeamA, R"({"queue":"research","gpus":1,"vram_gb":10})");
  EXPECT_EQ(r.code, Code::kBadRequest);
  r = Submit(kTeamA, "{not json");
  EXPECT_EQ(r.code, Code::kBadRequest);
  EXPECT_EQ(ctl_->ListJobs(kAdmin, "", true).body["jobs"].size(), 0u);
  Reply beat = ctl_->Heartbeat(kAgent, "h100-0", {{"gpus", Gpus(4)}}, "x");
  EXPECT_EQ(beat.code, Code::kConflict);
  EXPECT_NE(beat.body["error"].get<std::string>().find("agent reports 4 GPUs"), std::string::npos);
  EXPECT_EQ(ctl_->Heartbeat(kAgent, "nosuch", {{"gpus", Gpus(8)}}, "x").code, Code::kNotFound);
}

TEST_F(ControllerTest, ALostGpuDrainsItsNode) {
  json gpus = Gpus(8);
  gpus[3]["lost"] = true;
  Reply r = ctl_->Heartbeat(kAgent, "h100-0", {{"gpus", gpus}}, "x");
  ASSERT_EQ(r.code, Code::kOk);
  json nodes = ctl_->Nodes(kAdmin).body["nodes"];
  EXPECT_EQ(nodes[0]["state"], "drained");
  EXPECT_NE(nodes[0]["reason"].get<std::string>().find("GPU 3"), std::string::npos);
}

// What keeps a node's workers apart, as its agent reports it, is in the node list and
// outlives a restart of the server; a malformed report is refused.
TEST_F(ControllerTest, EachNodeShowsWhatIsolatesItsWorkersAsItsAgentSays) {
  const json isolation = {{"cgroups", true}, {"gpu_devices", false}, {"mig", false}};
  ASSERT_EQ(
      ctl_->Heartbeat(kAgent, "h100-0", {{"gpus", Gpus(8)}, {"isolation", isolation}}, "x").code,
      Code::kOk);
  ASSERT_EQ(ctl_->Heartbeat(kAgent, "h100-1", {{"gpus", Gpus(8)}}, "x").code,
            Code::kOk);  // an older agent
  auto node = [&](const std::string& name) {
    const json nodes = ctl_->Nodes(kAdmin).body["nodes"];
    for (const json& n : nodes) {
      if (n["name"] == name) return n;
    }
    return json();
  };
  EXPECT_EQ(node("h100-0")["isolation"], isolation);
  EXPECT_EQ(node("h100-1")["isolation"], json::object());
  Restart();
  EXPECT_EQ(node("h100-0")["isolation"], isolation) << "kept in the store";
  EXPECT_EQ(ctl_->Heartbeat(kAgent, "h100-0",
                            {{"gpus", Gpus(8)}, {"isolation", {{"cgroups", "yes"}}}}, "x")
                .code,
            Code::kBadRequest);
}

// Issue 16, bug 1: a user's id j28 blocked every later submission without an id once the
// server's counter reached it (409 for every team, across restarts).
TEST_F(ControllerTest, UsersCannotTakeTheServersOwnIds) {
  Reply r = Submit(kTeamA, R"({"id":"j2","queue":"research","gpus":0,"command":"x"})");
  EXPECT_EQ(r.code, Code::kBadRequest) << r.body.dump();
  EXPECT_NE(r.body.dump().find("reserved"), std::string::npos) << r.body.dump();
  for (int i = 0; i < 3; ++i) {
    Reply own = Submit(kTeamB, R"({"queue":"serving","gpus":0,"command":"x"})");
    EXPECT_EQ(own.code, Code::kCreated) << own.body.dump();
  }
  EXPECT_EQ(Submit(kTeamA, R"({"id":"j2x","queue":"research","gpus":0,"command":"x"})").code,
            Code::kCreated);
}

// Issue 16, bug 2: ids with '/' could not be shown or cancelled, and '../x' reached log paths.
TEST_F(ControllerTest, JobNamesAreLimitedToASafeSet) {
  for (const char* bad : {"exp/run1", "../x", ".hidden", "-x", "a b", "x\\y"}) {
    Reply r = Submit(
        kTeamA, json{{"id", bad}, {"queue", "research"}, {"gpus", 0}, {"command", "x"}}.dump());
    EXPECT_EQ(r.code, Code::kBadRequest) << bad;
    ASSERT_TRUE(r.body.contains("problems")) << r.body.dump();
    EXPECT_NE(r.body["problems"][0].get<std::string>().find("id:"), std::string::npos)
        << r.body.dump();
  }
  Reply ok = Submit(kTeamA, R"({"id":"exp.run-1_a","queue":"research","gpus":0,"command":"x"})");
  EXPECT_EQ(ok.code, Code::kCreated) << ok.body.dump();
  EXPECT_EQ(ctl_->ListJobs(kAdmin, "", true).body["jobs"].size(), 1u);
}

// Issue 16, bug 9: `ls --state failed` was empty without --all; `--state bogus` said nothing.
TEST_F(ControllerTest, ListingByAnEndedStateNeedsNoAllAndUnknownStatesAreErrors) {
  Reply r = Submit(kTeamA, R"({"queue":"research","gpus":0,"command":"x"})");
  ASSERT_EQ(r.code, Code::kCreated);
  ASSERT_EQ(ctl_->Cancel(kTeamA, r.body["id"]).code, Code::kOk);
  EXPECT_EQ(ctl_->ListJobs(kAdmin, "", false).body["jobs"].size(), 0u);
  EXPECT_EQ(ctl_->ListJobs(kAdmin, "cancelled", false).body["jobs"].size(), 1u);
  Reply bogus = ctl_->ListJobs(kAdmin, "bogus", false);
  EXPECT_EQ(bogus.code, Code::kBadRequest);
  EXPECT_NE(bogus.body["error"].get<std::string>().find("cancelled"), std::string::npos);
}

// `array`: one array's tasks only (sbatch --wait on an array asks for them), ended too.
TEST_F(ControllerTest, ListingByArrayGivesThatArraysTasksOnly) {
  Reply a = SubmitWith(kTeamA, R"({"queue":"research","gpus":0,"command":"x"})", "0-2", "");
  ASSERT_EQ(a.code, Code::kCreated) << a.body.dump();
  Reply b = SubmitWith(kTeamA, R"({"queue":"research","gpus":0,"command":"x"})", "0-1", "");
  ASSERT_EQ(b.code, Code::kCreated) << b.body.dump();
  Submit(kTeamA, R"({"queue":"research","gpus":0,"command":"x"})");
  ASSERT_EQ(ctl_->Cancel(kTeamA, a.body["id"].get<std::string>() + "_1").code, Code::kOk);
  JobQuery q;
  q.all = true;
  q.array = a.body["id"];
  Reply r = ctl_->ListJobs(kAdmin, q);
  ASSERT_EQ(r.code, Code::kOk) << r.body.dump();
  std::set<std::string> ids;
  for (const json& j : r.body["jobs"]) ids.insert(j["id"]);
  const std::string base = a.body["id"];
  EXPECT_EQ(ids, (std::set<std::string>{base + "_0", base + "_1", base + "_2"}));
  q.array = "j999";
  EXPECT_EQ(ctl_->ListJobs(kAdmin, q).body["jobs"].size(), 0u);
}

// A console's jobs view at a site's size asks for one page and the counts of the rest.
TEST_F(ControllerTest, AListingPageShowsActiveJobsFirstAndCountsEveryMatch) {
  Beat("h100-0");  // one node of 8 GPUs
  std::vector<std::string> ids;
  for (int i = 0; i < 3; ++i) {  // the first runs; the other two wait for room
    Reply r = Submit(kTeamA, R"({"queue":"research","gpus":8,"vram_gb":40,"command":"x"})");
    ASSERT_EQ(r.code, Code::kCreated) << r.body.dump();
    ids.push_back(r.body["id"]);
  }
  Reply held = SubmitWith(kTeamA, R"({"queue":"research","gpus":0,"command":"x"})", "", ids[0]);
  ASSERT_EQ(held.code, Code::kCreated) << held.body.dump();
  ctl_->Poke();
  Beat("h100-0");
  Reply gone = Submit(kTeamB, R"({"queue":"serving","gpus":8,"vram_gb":40,"command":"x"})");
  ASSERT_EQ(ctl_->Cancel(kTeamB, gone.body["id"]).code, Code::kOk);  // pending: ends at once
  ASSERT_EQ(Show(ids[0])["state"], "running");

  JobQuery all;
  all.all = true;
  all.limit = 3;
  Reply page = ctl_->ListJobs(kAdmin, all);
  ASSERT_EQ(page.code, Code::kOk) << page.body.dump();
  EXPECT_EQ(page.body["total"], 5);
  // Pending first, oldest first, then running; the cancelled one is past the page.
  ASSERT_EQ(Show(gone.body["id"])["state"], "cancelled");
  ASSERT_EQ(page.body["jobs"].size(), 3u);
  EXPECT_EQ(page.body["jobs"][0]["id"], ids[1]);
  EXPECT_EQ(page.body["jobs"][1]["id"], ids[2]);
  EXPECT_EQ(page.body["jobs"][2]["id"], held.body["id"]);
  // Every pending job is counted by what holds it, most first.
  EXPECT_EQ(page.body["waiting"],
            json::parse(R"([{"cause":"capacity","jobs":2},{"cause":"dependency","jobs":1}])"))
      << page.body["waiting"].dump();
  EXPECT_EQ(page.body["values"]["queue"], json::parse(R"(["research","serving"])"));
  EXPECT_EQ(page.body["values"]["state"], json::parse(R"(["cancelled","pending","running"])"));
  // Filters narrow the list and the counts; the values stay those of every job listed.
  JobQuery serving = all;
  serving.queue = "serving";
  serving.limit = 10;
  Reply narrow = ctl_->ListJobs(kAdmin, serving);
  EXPECT_EQ(narrow.body["total"], 1);
  ASSERT_EQ(narrow.body["jobs"].size(), 1u);
  EXPECT_EQ(narrow.body["jobs"][0]["id"], gone.body["id"]);
  EXPECT_TRUE(narrow.body["waiting"].empty());
  EXPECT_EQ(narrow.body["values"]["queue"].size(), 2u);
  // Without a limit: every match, in submission order, as before.
  Reply every = ctl_->ListJobs(kAdmin, "", true);
  ASSERT_EQ(every.body["jobs"].size(), 5u);
  EXPECT_EQ(every.body["jobs"][0]["id"], ids[0]);
}

// Issue 13, hardening: a team over its submit rate gets 429 with when to retry; other
// teams and admins are not slowed by it, and the bucket refills with time.
TEST_F(ControllerTest, ATeamOverItsSubmitRateGets429AndOthersDoNot) {
  options_.submit_rate = 10;
  options_.submit_burst = 3;
  Restart();
  const std::string job = R"({"queue":"research","gpus":0,"command":"x"})";
  for (int i = 0; i < 3; ++i) EXPECT_EQ(Submit(kTeamA, job).code, Code::kCreated) << i;
  Reply limited = Submit(kTeamA, job);
  ASSERT_EQ(limited.code, Code::kTooManyRequests) << limited.body.dump();
  EXPECT_EQ(StatusOf(limited.code), 429);
  EXPECT_EQ(limited.body["retry_after_s"], 1);
  EXPECT_NE(limited.body["error"].get<std::string>().find("team a is over its submit rate"),
            std::string::npos)
      << limited.body.dump();
  EXPECT_EQ(Submit(kTeamB, R"({"queue":"serving","gpus":0,"command":"x"})").code, Code::kCreated);
  EXPECT_EQ(Submit(kAdmin, job).code, Code::kCreated);
  Advance(100);  // one request's worth at 10 a second
  EXPECT_EQ(Submit(kTeamA, job).code, Code::kCreated);
  EXPECT_EQ(Submit(kTeamA, job).code, Code::kTooManyRequests);
  EXPECT_EQ(ctl_->ListJobs(kAdmin, "", true).body["jobs"].size(), 6u);  // nothing refused was kept
  EXPECT_NE(ctl_->Metrics().find("gantry_submits_rate_limited_total 2"), std::string::npos);
}

// Issue 16, bug 3: two agents with the same --node were both accepted and a job ran on
// both. A node-bound agent token speaks for its node only, and a second live agent for a
// node is refused until the first has been silent for its lease.
TEST_F(ControllerTest, AnAgentCredentialIsBoundToItsNodeAndASecondLiveAgentIsRefused) {
  auto beat = [&](const char* token, const std::string& node, const std::string& agent_id) {
    return ctl_->Heartbeat(token, node, {{"gpus", Gpus(8)}, {"agent_id", agent_id}}, "127.0.0.1");
  };
  Reply other = beat(kAgent0, "h100-1", "a1");
  EXPECT_EQ(other.code, Code::kForbidden) << other.body.dump();
  EXPECT_NE(other.body["error"].get<std::string>().find("bound to node h100-0"), std::string::npos);
  ASSERT_EQ(beat(kAgent0, "h100-0", "first").code, Code::kOk);
  Reply second = beat(kAgent, "h100-0", "second");
  EXPECT_EQ(second.code, Code::kConflict) << second.body.dump();
  EXPECT_NE(
      second.body["error"].get<std::string>().find("held by another live agent (instance first"),
      std::string::npos)
      << second.body.dump();
  // The first keeps beating and keeps the node; the second is refused each time.
  Advance(1000);
  ASSERT_EQ(beat(kAgent0, "h100-0", "first").code, Code::kOk);
  Advance(1000);
  EXPECT_EQ(beat(kAgent, "h100-0", "second").code, Code::kConflict);
  // Once the first has been silent for its lease (60% of the 3 s timeout), the second wins.
  Advance(1900);
  EXPECT_EQ(beat(kAgent, "h100-0", "second").code, Code::kOk);
  EXPECT_EQ(beat(kAgent0, "h100-0", "first").code, Code::kConflict);
  EXPECT_NE(ctl_->Metrics().find("gantry_agent_duplicates_refused_total 3"), std::string::npos);
}

// Issue 13: `gantry submit --array 0-999` is one request: one transaction, 1,000 jobs
// named ID_INDEX, each told its index; a repeat with the same key is the same array; the
// array's id cancels what is left of it.
TEST_F(ControllerTest, AnArrayIsOneRequestForManyJobs) {
  const std::string body = R"({"queue":"research","gpus":0,"command":"x"})";
  Reply r = SubmitWith(kTeamA, body, "0-999", "", "arr-1");
  ASSERT_EQ(r.code, Code::kCreated) << r.body.dump();
  const std::string id = r.body["id"];
  EXPECT_EQ(id, "j1");
  EXPECT_EQ(r.body["tasks"], 1000);
  EXPECT_EQ(ctl_->ListJobs(kAdmin, "", true).body["jobs"].size(), 1000u);
  EXPECT_EQ(Show("j1_0")["array"], "j1");
  EXPECT_EQ(Show("j1_999")["array_index"], 999);
  Reply again = SubmitWith(kTeamA, body, "0-999", "", "arr-1");
  EXPECT_EQ(again.body["id"], "j1");
  EXPECT_EQ(again.body["existing"], true);
  EXPECT_EQ(ctl_->ListJobs(kAdmin, "", true).body["jobs"].size(), 1000u);
  // Slurm's other forms; bad ones are refused whole.
  Reply stepped = SubmitWith(kTeamA, body, "0-15:4,20", "");
  ASSERT_EQ(stepped.code, Code::kCreated) << stepped.body.dump();
  EXPECT_EQ(stepped.body["tasks"], 5);
  EXPECT_EQ(Show(stepped.body["id"].get<std::string>() + "_12")["array_index"], 12);
  for (const char* bad : {"5-1", "x", "0-10%0", "0-10%x", "%3", "0-10%20000", "", "0-20000"}) {
    if (!*bad) continue;
    EXPECT_EQ(SubmitWith(kTeamA, body, bad, "").code, Code::kBadRequest) << bad;
  }
  EXPECT_EQ(Submit(kTeamA, R"({"id":"j1_5","queue":"research","gpus":0,"command":"x"})").code,
            Code::kBadRequest);
  // Each task is told its index.
  Reply gpu = SubmitWith(
      kTeamA, R"({"id":"sweep","queue":"research","gpus":1,"vram_gb":10,"command":"x"})", "3", "");
  ASSERT_EQ(gpu.code, Code::kCreated) << gpu.body.dump();
  EXPECT_EQ(gpu.body["id"], "sweep");
  EXPECT_EQ(ctl_->Cancel(kTeamA, "j1").code, Code::kOk);
  EXPECT_EQ(ctl_->Cancel(kTeamA, stepped.body["id"]).code, Code::kOk);
  Beat("h100-0");
  ctl_->Poke();
  json beat = Beat("h100-0");
  ASSERT_EQ(beat["workers"].size(), 1u) << beat.dump();
  EXPECT_EQ(beat["workers"][0]["env"]["GANTRY_ARRAY_JOB_ID"], "sweep");
  EXPECT_EQ(beat["workers"][0]["env"]["GANTRY_ARRAY_TASK_ID"], "3");
  EXPECT_EQ(Show("j1_500")["state"], "cancelled");
  EXPECT_EQ(SubmitWith(kTeamA, body, "0-1", "").body["tasks"], 2);
}

// The console's history (a sample a minute, GET /v1/cluster/history) outlives a restart:
// gantryd keeps it in the store, so a restart or a standby taking over keeps the day.
TEST_F(ControllerTest, TheClusterHistoryOutlivesARestart) {
  auto history = [&] {
    std::promise<Reply> p;
    ctl_->ClusterHistory(kAdmin, 0, [&](Reply r) { p.set_value(std::move(r)); });
    return p.get_future().get().body;
  };
  ASSERT_EQ(Submit(kTeamA, R"({"queue":"research","gpus":2,"vram_gb":40,"command":"x"})").code,
            Code::kCreated);
  for (int i = 0; i < 3; ++i) {
    Beat("h100-0");
    ctl_->Poke();
    Advance(60'000);
  }
  // (A batch answers its requests before it samples: this one's sample comes after.)
  const json before = history();
  ASSERT_EQ(before["samples"].size(), 3u) << before.dump();
  EXPECT_EQ(before["samples"][2]["used_gpus"], 2.0) << before.dump();
  EXPECT_EQ(before["samples"][2]["queues"]["research"], 2.0) << before.dump();
  Restart();
  const json after = history();
  ASSERT_EQ(after["samples"].size(), 4u) << after.dump();
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(after["samples"][i], before["samples"][i]) << i;
  Advance(60'000);  // and it goes on from there
  ctl_->Poke();
  EXPECT_EQ(history()["samples"].size(), 5u);
}

// --metrics-token: /metrics (whose labels name jobs and users) needs a valid token.
TEST_F(ControllerTest, MetricsNeedATokenWhenTheSiteAsks) {
  EXPECT_NE(ctl_->Metrics().find("gantry_jobs"), std::string::npos) << "open by default";
  ctl_.reset();
  options_.metrics_token = true;
  Restart();
  EXPECT_EQ(ctl_->Metrics(), "") << "refused without a token";
  EXPECT_EQ(ctl_->Metrics("not-a-token"), "");
  EXPECT_NE(ctl_->Metrics(kTeamA).find("gantry_jobs"), std::string::npos);
  EXPECT_NE(ctl_->Metrics(kAgent).find("gantry_jobs"), std::string::npos);
}

// site.max_active_jobs_per_team: a team's active jobs (pending, held, running; each array
// task one) are capped at submit, as Slurm's MaxSubmitJobs; ended jobs free their place,
// admins are not capped, and a restart counts what is active again.
TEST_F(ControllerTest, ATeamsActiveJobsAreCappedBySiteAndEndedOnesFreeTheirPlace) {
  ctl_.reset();
  spec::Diagnostics diags;
  config_ = spec::ParseClusterConfig(
      std::string(kConfig) + "site:\n  max_active_jobs_per_team: 3\n", "test.yaml", diags);
  ASSERT_TRUE(config_) << diags.ToString();
  Restart();
  const std::string body = R"({"queue":"research","gpus":0,"command":"x"})";
  Reply first = Submit(kTeamA, body);
  ASSERT_EQ(first.code, Code::kCreated);
  // An array of 3 would make 4: refused whole, nothing of it kept.
  Reply array = SubmitWith(kTeamA, body, "0-2", "");
  EXPECT_EQ(array.code, Code::kConflict) << array.body.dump();
  EXPECT_NE(array.body.dump().find("site.max_active_jobs_per_team is 3"), std::string::npos)
      << array.body.dump();
  ASSERT_EQ(SubmitWith(kTeamA, body, "0-1", "").code, Code::kCreated);  // 3 active now
  Reply fourth = Submit(kTeamA, body);
  EXPECT_EQ(fourth.code, Code::kConflict) << fourth.body.dump();
  EXPECT_EQ(Submit(kTeamB, R"({"queue":"serving","gpus":0,"command":"x"})").code, Code::kCreated)
      << "another team has its own cap";
  EXPECT_EQ(Submit(kAdmin, body).code, Code::kCreated) << "admins are not capped";
  Restart();  // counted again from the store
  EXPECT_EQ(Submit(kTeamA, body).code, Code::kConflict);
  ASSERT_EQ(ctl_->Cancel(kTeamA, first.body["id"]).code, Code::kOk);
  EXPECT_EQ(Submit(kTeamA, body).code, Code::kCreated) << "a cancelled job frees its place";
}

// policy.full_pass_interval_s: GPUs freed (a node coming up, a job's end) go to waiting
// jobs at the next full pass, at most that often, which gantryd runs when it is due.
TEST_F(ControllerTest, WithAFullPassIntervalFreedGpusGoToWaitingJobsAtTheNextFullPass) {
  ctl_.reset();
  spec::Diagnostics diags;
  config_ = spec::ParseClusterConfig(std::string(kConfig) + "policy:\n  full_pass_interval_s: 30\n",
                                     "test.yaml", diags);
  ASSERT_TRUE(config_) << diags.ToString();
  Restart();  // its first pass is full
  const std::string body = R"({"queue":"research","gpus":8,"vram_gb":40,"command":"x"})";
  const std::string a = Submit(kTeamA, body).body["id"];
  const std::string b = Submit(kTeamA, body).body["id"];
  auto beat_for = [&](int64_t ms) {  // heartbeats every second (the node timeout is 3 s)
    for (; ms > 0; ms -= 1000) {
      Advance(1000);
      Beat("h100-0");
      ctl_->Poke();
    }
  };
  beat_for(1000);  // a node comes up 1 s after that pass: owed 29 s later
  beat_for(27'000);
  EXPECT_TRUE(Beat("h100-0")["workers"].empty());
  EXPECT_EQ(Show(a)["state"], "pending");
  beat_for(2000);
  EXPECT_EQ(Beat("h100-0")["workers"].size(), 1u);
  EXPECT_EQ(Show(a)["state"], "running");
  EXPECT_EQ(Show(b)["state"], "pending");
  Advance(1000);
  Beat("h100-0", json::array({{{"job", a}, {"run", 1}, {"rank", 0}, {"exit_code", 0}}}));
  ctl_->Poke();
  EXPECT_EQ(Show(a)["state"], "finished");
  beat_for(27'000);
  EXPECT_EQ(Show(b)["state"], "pending");  // freed 1 s after the last full pass
  beat_for(2000);
  EXPECT_EQ(Show(b)["state"], "running");
}

// Slurm's array throttle, --array 0-5%2: at most two tasks at once (pending in the
// scheduler, running or stopping), the next in index order as each ends or is cancelled,
// the rest held with the reason; a restart keeps the throttle.
TEST_F(ControllerTest, AnArrayThrottleRunsAtMostNTasksAtOnceInIndexOrder) {
  Reply r = SubmitWith(kTeamA, R"({"queue":"research","gpus":1,"vram_gb":40,"command":"x"})",
                       "0-5%2", "");
  ASSERT_EQ(r.code, Code::kCreated) << r.body.dump();
  const std::string a = r.body["id"];
  EXPECT_EQ(r.body["tasks"], 6);
  auto task = [&](int i) { return a + "_" + std::to_string(i); };
  auto running = [&] {
    std::vector<std::string> names;
    for (int i = 0; i < 6; ++i) {
      if (Show(task(i))["state"] == "running") names.push_back(task(i));
    }
    return names;
  };
  auto exit = [&](int i) {
    Beat("h100-0", json::array({{{"job", task(i)}, {"run", 1}, {"rank", 0}, {"exit_code", 0}}}));
    ctl_->Poke();
    Beat("h100-0");
  };
  Beat("h100-0");
  ctl_->Poke();
  EXPECT_EQ(Beat("h100-0")["workers"].size(), 2u);  // 8 GPUs free, two tasks
  EXPECT_EQ(running(), (std::vector<std::string>{task(0), task(1)}));
  const json held = Show(task(2));
  EXPECT_EQ(held["state"], "pending");
  EXPECT_NE(held["reason"].get<std::string>().find("throttle: at most 2 of array " + a),
            std::string::npos)
      << held.dump();
  exit(0);
  EXPECT_EQ(running(), (std::vector<std::string>{task(1), task(2)}));
  EXPECT_EQ(Show(task(0))["state"], "finished");
  ASSERT_EQ(ctl_->Cancel(kTeamA, task(3)).code, Code::kOk);  // held: ends at once, frees nothing
  exit(1);
  EXPECT_EQ(running(), (std::vector<std::string>{task(2), task(4)}));
  Restart();
  Beat("h100-0");
  ctl_->Poke();
  EXPECT_EQ(Beat("h100-0")["workers"].size(), 2u);
  EXPECT_EQ(running(), (std::vector<std::string>{task(2), task(4)}));
  EXPECT_EQ(Show(task(5))["state"], "pending");
  exit(2);
  EXPECT_EQ(running(), (std::vector<std::string>{task(4), task(5)}));
  exit(4);
  exit(5);
  for (int i : {0, 1, 2, 4, 5}) EXPECT_EQ(Show(task(i))["state"], "finished") << i;
  EXPECT_EQ(Show(task(3))["state"], "cancelled");
}

// Cancelling a throttled array: its held tasks end first and none is handed to the
// scheduler meanwhile (each running task's end released the next, to be cancelled in
// turn: quadratic in the tasks); an ended task the cancel drops from memory
// (recent_done 1) is not read after (it was, through a pointer kept from before).
TEST_F(ControllerTest, CancellingAThrottledArrayReleasesNoHeldTask) {
  options_.recent_done = 1;
  Restart();
  Reply r = SubmitWith(kTeamA, R"({"queue":"research","gpus":1,"vram_gb":40,"command":"x"})",
                       "0-9%2", "");
  ASSERT_EQ(r.code, Code::kCreated) << r.body.dump();
  const std::string a = r.body["id"];
  auto task = [&](int i) { return a + "_" + std::to_string(i); };
  Beat("h100-0");
  ctl_->Poke();
  EXPECT_EQ(Beat("h100-0")["workers"].size(), 2u);
  ASSERT_EQ(ctl_->Cancel(kTeamA, task(8)).code, Code::kOk);  // held: ended, the latest in memory
  ASSERT_EQ(ctl_->Cancel(kTeamA, a).code, Code::kOk);
  for (int i : {2, 3, 4, 5, 6, 7, 9}) {
    const json t = Show(task(i));
    EXPECT_EQ(t["state"], "cancelled") << i;
    EXPECT_EQ(t.dump().find("released by its array's throttle"), std::string::npos) << t.dump();
  }
  // The two that ran stop; their ends release nothing.
  for (int i : {0, 1}) {
    Beat("h100-0", json::array({{{"job", task(i)}, {"run", 1}, {"rank", 0}, {"exit_code", 143}}}));
  }
  ctl_->Poke();
  EXPECT_TRUE(Beat("h100-0")["workers"].empty());
  for (int i : {0, 1}) EXPECT_EQ(Show(task(i))["state"], "cancelled") << i;
}

// sacct's window past memory (ended_since): the store's ended jobs are decoded off the
// controller thread and listed by a later message, in submission order with those in
// memory; a listing still in flight when the controller stops is answered.
TEST_F(ControllerTest, EndedJobsPastMemoryAreListedAndAnsweredAtStop) {
  options_.recent_done = 1;
  Restart();
  std::vector<std::string> ids;
  for (int i = 0; i < 4; ++i) {
    Reply r = Submit(kTeamA, R"({"queue":"research","gpus":0,"command":"x"})");
    ASSERT_EQ(r.code, Code::kCreated) << r.body.dump();
    ids.push_back(r.body["id"]);
    ASSERT_EQ(ctl_->Cancel(kTeamA, ids.back()).code, Code::kOk);
  }
  JobQuery q;
  q.all = true;
  EXPECT_EQ(ctl_->ListJobs(kTeamA, q).body["jobs"].size(), 1u);  // memory keeps the last only
  q.ended_since_ms = 0;
  const json all = ctl_->ListJobs(kTeamA, q).body;
  ASSERT_EQ(all["jobs"].size(), 4u) << all.dump();
  for (size_t i = 0; i < ids.size(); ++i) {
    EXPECT_EQ(all["jobs"][i]["id"], ids[i]);
    EXPECT_EQ(all["jobs"][i]["state"], "cancelled");
  }
  EXPECT_EQ(all["total"], 4);
  q.state = "running";  // filters apply to the stored ones
  EXPECT_EQ(ctl_->ListJobs(kTeamA, q).body["jobs"].size(), 0u);
  q.state = "";
  std::atomic<int> answered{0}, listed{0};
  for (int i = 0; i < 50; ++i) {
    ctl_->ListJobs(kTeamA, q, [&](Reply r) {
      if (r.code == Code::kOk) {
        EXPECT_EQ(r.body["jobs"].size(), 4u);
        ++listed;
      } else {
        EXPECT_EQ(r.code, Code::kUnavailable) << r.body.dump();
      }
      ++answered;
    });
  }
  // Stopped while some are listed and others are read, decoded or waiting to be listed.
  for (int i = 0; i < 10000 && listed.load() == 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  ctl_->Stop();
  EXPECT_EQ(answered.load(), 50);
  EXPECT_GT(listed.load(), 0);
}

// Issue 13: --after JOB[:ok|any]. A job waits (held, with the reason) until its
// dependencies end; :ok needs a clean finish and is cancelled, saying why, when that can
// no longer happen; :any takes any end. Held jobs stay held across a restart.
TEST_F(ControllerTest, DependenciesHoldJobsUntilTheirJobsEnd) {
  Reply a =
      Submit(kTeamA, R"({"id":"prep","queue":"research","gpus":1,"vram_gb":10,"command":"x"})");
  ASSERT_EQ(a.code, Code::kCreated);
  Reply b =
      SubmitWith(kTeamA, R"({"id":"train","queue":"research","gpus":1,"vram_gb":10,"command":"x"})",
                 "", "prep");
  ASSERT_EQ(b.code, Code::kCreated) << b.body.dump();
  Reply c = SubmitWith(kTeamA, R"({"id":"report","queue":"research","gpus":0,"command":"x"})", "",
                       "train:any");
  ASSERT_EQ(c.code, Code::kCreated) << c.body.dump();
  Reply d = SubmitWith(kTeamA, R"({"id":"eval","queue":"research","gpus":0,"command":"x"})", "",
                       "train:ok");
  ASSERT_EQ(d.code, Code::kCreated) << d.body.dump();
  EXPECT_EQ(SubmitWith(kTeamA, R"({"queue":"research","gpus":0,"command":"x"})", "", "nosuch").code,
            Code::kNotFound);
  // Another team's job may be waited for, as in Slurm (and `show` shows any job's state).
  Reply other = SubmitWith(kTeamB, R"({"queue":"serving","gpus":0,"command":"x"})", "", "prep");
  ASSERT_EQ(other.code, Code::kCreated) << other.body.dump();
  EXPECT_EQ(Show(other.body["id"])["reason"], "dependency: waiting for prep to finish");
  ASSERT_EQ(ctl_->Cancel(kTeamB, other.body["id"]).code, Code::kOk);
  EXPECT_EQ(
      SubmitWith(kTeamA, R"({"queue":"research","gpus":0,"command":"x"})", "", "prep:later").code,
      Code::kBadRequest);
  Beat("h100-0");
  ctl_->Poke();
  Beat("h100-0");
  EXPECT_EQ(Show("prep")["state"], "running");
  json train = Show("train");
  EXPECT_EQ(train["state"], "pending");
  EXPECT_EQ(train["reason"], "dependency: waiting for prep to finish");

  Restart();  // held jobs are held again, not scheduled
  Beat("h100-0");
  ctl_->Poke();
  EXPECT_EQ(Show("train")["state"], "pending");
  EXPECT_EQ(Show("train")["reason"], "dependency: waiting for prep to finish");

  Beat("h100-0", json::array({{{"job", "prep"}, {"run", 1}, {"rank", 0}, {"exit_code", 0}}}));
  EXPECT_EQ(Show("prep")["state"], "finished");
  ctl_->Poke();
  Beat("h100-0");
  EXPECT_EQ(Show("train")["state"], "running");
  EXPECT_EQ(Show("report")["reason"], "dependency: waiting for train to end");
  Beat("h100-0", json::array({{{"job", "train"}, {"run", 1}, {"rank", 0}, {"exit_code", 2}}}));
  EXPECT_EQ(Show("train")["state"], "failed");
  json eval = Show("eval");
  EXPECT_EQ(eval["state"], "cancelled");
  EXPECT_NE(eval["reason"].get<std::string>().find("dependency train ended failed"),
            std::string::npos)
      << eval.dump();
  ctl_->Poke();
  EXPECT_NE(Show("report")["state"], "pending");  // :any: released
  // On an ended job: :ok of a failed one is refused at once; of a finished one runs.
  EXPECT_EQ(SubmitWith(kTeamA, R"({"queue":"research","gpus":0,"command":"x"})", "", "train").code,
            Code::kUnprocessable);
  Reply e =
      SubmitWith(kTeamA, R"({"queue":"research","gpus":0,"command":"x"})", "", "prep,train:any");
  ASSERT_EQ(e.code, Code::kCreated);
  EXPECT_NE(Show(e.body["id"])["reason"].get<std::string>().rfind("dependency", 0), 0u);
  // An array stands for all its tasks.
  Reply arr =
      SubmitWith(kTeamA, R"({"id":"shard","queue":"research","gpus":0,"command":"x"})", "0-2", "");
  Reply merge = SubmitWith(kTeamA, R"({"id":"merge","queue":"research","gpus":0,"command":"x"})",
                           "", "shard");
  ASSERT_EQ(merge.code, Code::kCreated) << merge.body.dump();
  EXPECT_EQ(Show("merge")["reason"],
            "dependency: waiting for shard_0 to finish, shard_1 to finish, shard_2 to finish");
  Reply arr4 =
      SubmitWith(kTeamA, R"({"id":"shard4","queue":"research","gpus":0,"command":"x"})", "0-3", "");
  ASSERT_EQ(arr4.code, Code::kCreated);
  Reply merge4 = SubmitWith(kTeamA, R"({"queue":"research","gpus":0,"command":"x"})", "", "shard4");
  EXPECT_EQ(Show(merge4.body["id"])["reason"],
            "dependency: waiting for shard4_0 to finish, shard4_1 to finish, shard4_2 to finish "
            "and 1 more");
  EXPECT_NE(events_.str().find("\"type\":\"cancel\",\"job\":\"eval\""), std::string::npos)
      << events_.str();
}

// Issue 47: sbatch -H and --begin, scontrol hold, uhold and release, as Slurm's. A held
// job or one before its begin time waits outside the scheduler, through a restart; only
// an admin lifts an admin's hold; a running job's hold applies when it is requeued; a held
// task of a throttled array gives its place to the next.
TEST_F(ControllerTest, HeldJobsAndJobsBeforeTheirBeginTimeWaitUntilReleased) {
  auto submit = [&](const std::string& id, bool hold, int64_t begin_ms,
                    const std::string& array = "") {
    SubmitRequest r;
    r.body = R"({"id":")" + id + R"(","queue":"research","gpus":1,"vram_gb":1,"command":"x"})";
    r.hold = hold;
    r.begin_ms = begin_ms;
    r.array = array;
    Reply reply = ctl_->Submit(kTeamA, r);
    EXPECT_EQ(reply.code, Code::kCreated) << reply.body.dump();
  };
  auto pass = [&] {
    Beat("h100-0");
    ctl_->Poke();
    Beat("h100-0");
  };
  submit("late", false, clock_.load() + 60'000);
  submit("held", true, 0);
  submit("gone-by", false, clock_.load() - 1000);  // a begin time gone by: at once
  submit("admins", false, 0);
  ASSERT_EQ(ctl_->Hold(kAdmin, "admins", true).code, Code::kOk);  // before any pass
  pass();
  EXPECT_EQ(Show("gone-by")["state"], "running");
  json late = Show("late"), held = Show("held"), admins = Show("admins");
  EXPECT_EQ(late["state"], "pending");
  EXPECT_EQ(late["reason"].get<std::string>().rfind("begin: not before ", 0), 0u) << late.dump();
  EXPECT_EQ(late["begin"].get<int64_t>(), (clock_.load() + 60000) / 1000);
  EXPECT_EQ(held["state"], "pending");
  EXPECT_EQ(held["hold"], "user");
  EXPECT_EQ(held["reason"], "held: by its user (gantry release held, or scontrol release)");
  EXPECT_EQ(admins["hold"], "admin");
  // Who may lift what: not another team; an admin's hold only an admin.
  EXPECT_EQ(ctl_->Hold(kTeamB, "held", false).code, Code::kForbidden);
  Reply refused = ctl_->Hold(kTeamA, "admins", false);
  EXPECT_EQ(refused.code, Code::kForbidden);
  EXPECT_NE(refused.body.dump().find("held by an admin: only an admin releases it"),
            std::string::npos)
      << refused.body.dump();
  EXPECT_EQ(ctl_->Hold(kTeamA, "held", true, true).code, Code::kForbidden);  // no admin's hold
  EXPECT_EQ(ctl_->Hold(kAdmin, "admins", true, false).code, Code::kOk);  // uhold: the user's now
  EXPECT_EQ(Show("admins")["hold"], "user");
  EXPECT_EQ(ctl_->Hold(kTeamA, "nosuch", false).code, Code::kNotFound);

  Restart();  // held again, and before its time still
  pass();
  EXPECT_EQ(Show("held")["state"], "pending");
  EXPECT_EQ(Show("held")["hold"], "user");
  EXPECT_EQ(Show("admins")["state"], "pending");
  EXPECT_EQ(Show("late")["state"], "pending");
  Advance(59'000);
  pass();
  EXPECT_EQ(Show("late")["state"], "pending");
  Advance(1'500);
  pass();
  EXPECT_EQ(Show("late")["state"], "running");
  ASSERT_EQ(ctl_->Hold(kTeamA, "held", false).code, Code::kOk);
  EXPECT_EQ(ctl_->Hold(kTeamA, "held", false).code, Code::kOk);  // not held: nothing to do
  pass();
  EXPECT_EQ(Show("held")["state"], "running");
  EXPECT_FALSE(Show("held").contains("hold"));

  // A running job held (scontrol hold on it is accepted, as Slurm's) keeps running; once
  // requeued it waits for a release, with its requeue counted.
  ASSERT_EQ(ctl_->Hold(kTeamA, "late", true).code, Code::kOk);
  EXPECT_EQ(Show("late")["state"], "running");
  ASSERT_EQ(ctl_->Requeue(kTeamA, "late").code, Code::kOk);
  Beat("h100-0", json::array({{{"job", "late"}, {"run", 1}, {"rank", 0}, {"exit_code", 0}}}));
  pass();
  json requeued = Show("late");
  EXPECT_EQ(requeued["state"], "pending");
  EXPECT_EQ(requeued["requeues"], 1);
  EXPECT_EQ(requeued["hold"], "user");
  ASSERT_EQ(ctl_->Hold(kTeamA, "late", false).code, Code::kOk);
  pass();
  EXPECT_EQ(Show("late")["state"], "running");
  EXPECT_EQ(Show("late")["run"], 2);

  // A throttled array (%1) submitted held: none runs; a task released runs though an
  // earlier one is held (the throttle's place goes to the first task not held).
  submit("arr", true, 0, "0-2%1");
  pass();
  for (int i = 0; i < 3; ++i) EXPECT_EQ(Show("arr_" + std::to_string(i))["hold"], "user") << i;
  ASSERT_EQ(ctl_->Hold(kTeamA, "arr_1", false).code, Code::kOk);
  pass();
  EXPECT_EQ(Show("arr_1")["state"], "running");
  EXPECT_EQ(Show("arr_0")["state"], "pending");
  ASSERT_EQ(ctl_->Hold(kTeamA, "arr", false).code, Code::kOk);  // the array's id: every task
  pass();
  EXPECT_EQ(Show("arr_0")["state"], "pending");  // the throttle holds it now
  EXPECT_EQ(Show("arr_0")["reason"].get<std::string>().rfind("throttle", 0), 0u);
  Beat("h100-0", json::array({{{"job", "arr_1"}, {"run", 1}, {"rank", 0}, {"exit_code", 0}}}));
  pass();
  EXPECT_EQ(Show("arr_0")["state"], "running");
  EXPECT_EQ(ctl_->Hold(kTeamA, "arr_1", true).code, Code::kConflict);  // ended

  // scontrol update StartTime: a pending job in the scheduler (8 GPUs: it waits for room)
  // leaves it until then, and comes back when its time is cleared; a held one, released,
  // waits for its time, then runs once it is cleared. Only a pending job's, by its team.
  ASSERT_EQ(
      Submit(kTeamA, R"({"id":"big","queue":"research","gpus":8,"vram_gb":1,"command":"x"})").code,
      Code::kCreated);
  pass();
  ASSERT_TRUE(Show("big").contains("wait")) << Show("big").dump();  // the scheduler's reason
  ASSERT_EQ(ctl_->SetBegin(kTeamA, "big", clock_.load() + 3'600'000).code, Code::kOk);
  EXPECT_EQ(ctl_->SetBegin(kTeamB, "big", 0).code, Code::kForbidden);
  pass();
  EXPECT_FALSE(Show("big").contains("wait")) << "still in the scheduler";
  EXPECT_EQ(Show("big")["reason"].get<std::string>().rfind("begin: not before ", 0), 0u);
  ASSERT_EQ(ctl_->SetBegin(kTeamA, "big", 0).code, Code::kOk);
  pass();
  EXPECT_TRUE(Show("big").contains("wait")) << Show("big").dump();
  EXPECT_FALSE(Show("big").contains("begin"));
  submit("moved", true, 0);
  ASSERT_EQ(ctl_->SetBegin(kTeamA, "moved", clock_.load() + 3'600'000).code, Code::kOk);
  ASSERT_EQ(ctl_->Hold(kTeamA, "moved", false).code, Code::kOk);
  pass();
  EXPECT_EQ(Show("moved")["reason"].get<std::string>().rfind("begin: not before ", 0), 0u);
  ASSERT_EQ(ctl_->SetBegin(kTeamA, "moved", 0).code, Code::kOk);
  pass();
  EXPECT_EQ(Show("moved")["state"], "running");
  EXPECT_EQ(ctl_->SetBegin(kTeamA, "moved", clock_.load() + 60'000).code, Code::kConflict);
}

// A batch job whose dependency can never be met waits until cancelled, as Slurm 22.05's
// default (DependencyNeverSatisfied; bench/slurm_scripts/dependency_never.sbatch), also one
// submitted after the failure; sbatch --kill-on-invalid-dep=yes, or the site's
// kill_invalid_depend, cancels it. It stays so through a restart.
TEST_F(ControllerTest, ABatchJobWhoseDependencyCanNeverBeMetWaitsUntilCancelled) {
  auto batch = [&](const std::string& id, const std::string& after, int kill = -1) {
    SubmitRequest r;
    r.body = R"({"id":")" + id + R"(","queue":"research","gpus":0,"script":"#!/bin/sh\ntrue\n"})";
    r.after = after;
    r.kill_invalid_dep = kill;
    Reply reply = ctl_->Submit(kTeamA, r);
    EXPECT_EQ(reply.code, Code::kCreated) << id << ": " << reply.body.dump();
  };
  auto state = [&](const std::string& id) { return Show(id)["state"].get<std::string>(); };
  ASSERT_EQ(
      Submit(kTeamA, R"({"id":"main","queue":"research","gpus":1,"vram_gb":1,"command":"x"})").code,
      Code::kCreated);
  batch("waits", "main:ok");
  batch("killed", "main:ok", 1);
  batch("either", "main:ok?main:notok");
  Beat("h100-0");
  ctl_->Poke();
  Beat("h100-0");
  ASSERT_EQ(state("main"), "running");
  Beat("h100-0", json::array({{{"job", "main"}, {"run", 1}, {"rank", 0}, {"exit_code", 1}}}));
  ctl_->Poke();
  EXPECT_EQ(state("main"), "failed");
  EXPECT_EQ(state("killed"), "cancelled");
  EXPECT_EQ(state("waits"), "pending");
  const std::string why =
      "dependency never satisfied: dependency main ended failed, so --after "
      "main:ok can never be met (it waits until cancelled)";
  EXPECT_EQ(Show("waits")["reason"], why);
  EXPECT_NE(state("either"), "pending") << "main:notok is met";
  // Submitted after the failure: taken, and waits (a native job is refused, saying why).
  batch("late", "main:ok");
  EXPECT_EQ(state("late"), "pending");
  EXPECT_EQ(Show("late")["reason"], why);
  batch("late-killed", "main:ok", 1);
  EXPECT_EQ(state("late-killed"), "cancelled");
  EXPECT_EQ(
      SubmitWith(kTeamA, R"({"queue":"research","gpus":0,"command":"x"})", "", "main:ok").code,
      Code::kUnprocessable);
  // Through a restart, and then cancelled.
  Restart();
  Beat("h100-0");
  ctl_->Poke();
  EXPECT_EQ(state("waits"), "pending");
  EXPECT_EQ(Show("waits")["reason"], why);
  ASSERT_EQ(ctl_->Cancel(kTeamA, "waits").code, Code::kOk);
  EXPECT_EQ(state("waits"), "cancelled");
}

// aftercorr (sbatch --dependency=aftercorr:ID, the API's ID:corr): each task of an array
// waits for the task of the other array of its own index, as Slurm 22.05's
// (bench/slurm_scripts/dependency_corr.sbatch); a task whose counterpart failed or does not
// exist, or a job that is not an array task, waits DependencyNeverSatisfied (a native job
// is refused); a job that is not an array is followed as afterok.
TEST_F(ControllerTest, AftercorrMakesEachArrayTaskWaitForTheTaskOfItsIndex) {
  auto batch = [&](const std::string& id, const std::string& array, const std::string& after) {
    SubmitRequest r;
    r.body = R"({"id":")" + id + R"(","queue":"research","gpus":0,"script":"#!/bin/sh\ntrue\n"})";
    r.array = array;
    r.after = after;
    Reply reply = ctl_->Submit(kTeamA, r);
    EXPECT_EQ(reply.code, Code::kCreated) << id << ": " << reply.body.dump();
  };
  auto state = [&](const std::string& id) { return Show(id)["state"].get<std::string>(); };
  auto pass = [&](json exits = json::array()) {
    Beat("h100-0", exits);
    ctl_->Poke();
    Beat("h100-0");
  };
  ASSERT_EQ(
      SubmitWith(kTeamA, R"({"id":"pre","queue":"research","gpus":1,"vram_gb":1,"command":"x"})",
                 "0-2", "")
          .code,
      Code::kCreated);
  ASSERT_EQ(
      Submit(kTeamA, R"({"id":"one","queue":"research","gpus":1,"vram_gb":1,"command":"x"})").code,
      Code::kCreated);
  batch("train", "0-3", "pre:corr");
  batch("lone", "", "pre:corr");
  batch("each", "0-1", "one:corr");
  EXPECT_EQ(
      SubmitWith(kTeamA, R"({"queue":"research","gpus":0,"command":"x"})", "3", "pre:corr").code,
      Code::kUnprocessable)
      << "a native job whose dependency can never be met is refused";
  pass();
  for (const char* id : {"pre_0", "pre_1", "pre_2", "one"}) ASSERT_EQ(state(id), "running") << id;
  for (const char* id : {"train_0", "train_1", "train_2", "each_0", "each_1"})
    EXPECT_EQ(state(id), "pending") << id;
  const std::string no_task =
      "dependency never satisfied: dependency pre:corr can never be met: array pre has no task 3 "
      "(it waits until cancelled)";
  EXPECT_EQ(Show("train_3")["reason"], no_task);
  EXPECT_EQ(Show("lone")["reason"],
            "dependency never satisfied: dependency pre:corr can never be met: the job is not an "
            "array task, so array pre has no task of its index (it waits until cancelled)");
  // pre_0 finishes: train_0 runs, alone; pre_1 fails: train_1 waits for ever.
  pass(json::array({{{"job", "pre_0"}, {"run", 1}, {"rank", 0}, {"exit_code", 0}},
                    {{"job", "pre_1"}, {"run", 1}, {"rank", 0}, {"exit_code", 1}}}));
  EXPECT_NE(state("train_0"), "pending");
  EXPECT_EQ(state("train_1"), "pending");
  EXPECT_EQ(Show("train_1")["reason"],
            "dependency never satisfied: dependency pre_1 ended failed, so --after pre_1:ok can "
            "never be met (it waits until cancelled)");
  EXPECT_EQ(state("train_2"), "pending");
  EXPECT_EQ(state("each_0"), "pending");
  // Through a restart: pre_2 and one finish, and what waited on them runs.
  Restart();
  pass(json::array({{{"job", "pre_2"}, {"run", 1}, {"rank", 0}, {"exit_code", 0}},
                    {{"job", "one"}, {"run", 1}, {"rank", 0}, {"exit_code", 0}}}));
  for (const char* id : {"train_2", "each_0", "each_1"}) EXPECT_NE(state(id), "pending") << id;
  EXPECT_EQ(state("train_1"), "pending");
  EXPECT_EQ(Show("train_3")["reason"], no_task);
}

// scontrol update JobName=, Partition=, QOS=, Account=: a pending job's spec fields, the
// site's names resolved as at submission, all checked before any is changed; a new queue
// or tier hands it to the scheduler anew, and it runs so; kept through a restart; only a
// pending job, only its team's, only queues its user may submit to.
TEST_F(ControllerTest, APendingJobsNamePartitionQosAndAccountAreUpdatedAsScontrolDoes) {
  ctl_.reset();
  spec::Diagnostics diags;
  config_ = spec::ParseClusterConfig(std::string(kConfig) + R"(site:
  qos: {normal: standard, low: best-effort, top: critical}
  partitions: {gpu: h100}
  accounts: {proj: research, nlpa: nlp, serve: serving}
)",
                                     "test.yaml", diags);
  ASSERT_TRUE(config_) << diags.ToString();
  Restart();
  ASSERT_EQ(Submit(kTeamA, R"({"id":"job","name":"first","queue":"proj","gpus":1,"vram_gb":1,)"
                           R"("tier":"normal","script":"#!/bin/sh\ntrue\n"})")
                .code,
            Code::kCreated);
  ctl_->Poke();  // in the scheduler: no node is up yet
  ASSERT_EQ(Show("job")["state"], "pending");
  auto update = [&](const std::string& token, const json& fields) {
    return ctl_->UpdateSpec(token, "job", fields);
  };
  Reply r = update(kTeamA, {{"name", "renamed"}});
  ASSERT_EQ(r.code, Code::kOk) << r.body.dump();
  EXPECT_EQ(r.body["updated"], 1);
  EXPECT_EQ(Show("job")["name"], "renamed");
  // Nice=: 0 and above anyone's, below an admin's (scontrol update Nice=N).
  r = update(kTeamA, {{"nice", 50}});
  ASSERT_EQ(r.code, Code::kOk) << r.body.dump();
  EXPECT_EQ(Show("job")["nice"], 50);
  EXPECT_EQ(update(kTeamA, {{"nice", -1}}).code, Code::kForbidden);
  EXPECT_EQ(update(kTeamA, {{"nice", "x"}}).code, Code::kBadRequest);
  EXPECT_EQ(update(kTeamA, {{"nice", 3000000000LL}}).code, Code::kBadRequest) << "out of range";
  r = update(kAdmin, {{"nice", -1}});
  ASSERT_EQ(r.code, Code::kOk) << r.body.dump();
  EXPECT_EQ(Show("job")["nice"], -1);
  ASSERT_EQ(update(kAdmin, {{"nice", 0}}).code, Code::kOk);
  EXPECT_FALSE(Show("job").contains("nice"));
  r = update(kTeamA, {{"tier", "low"}, {"queue", "nlpa"}, {"pool", "gpu"}});
  ASSERT_EQ(r.code, Code::kOk) << r.body.dump();
  EXPECT_EQ(Show("job")["tier"], "best-effort");
  EXPECT_EQ(Show("job")["queue"], "nlp");
  EXPECT_EQ(Show("job")["state"], "pending");
  EXPECT_EQ(Show("job")["slurm"], json({{"partition", "gpu"}, {"account", "nlpa"}, {"qos", "low"}}))
      << "as squeue and sacct show them: the site's names, as given";
  // What does not resolve, or is not the user's, changes nothing.
  r = update(kTeamA, {{"tier", "urgent"}, {"name", "lost"}});
  EXPECT_EQ(r.code, Code::kBadRequest) << r.body.dump();
  EXPECT_NE(r.body.dump().find("unknown tier or QoS \\\"urgent\\\""), std::string::npos)
      << r.body.dump();
  r = update(kTeamA, {{"pool", "cpu"}});
  EXPECT_EQ(r.code, Code::kBadRequest) << r.body.dump();
  EXPECT_NE(r.body.dump().find("unknown pool or partition"), std::string::npos) << r.body.dump();
  r = update(kTeamA, {{"queue", "serve"}});
  EXPECT_EQ(r.code, Code::kForbidden) << r.body.dump();
  EXPECT_EQ(update(kTeamB, {{"name", "theirs"}}).code, Code::kForbidden);
  EXPECT_EQ(update(kTeamA, {{"nodes", "2"}}).code, Code::kBadRequest);
  EXPECT_EQ(update(kTeamA, {{"name", 3}}).code, Code::kBadRequest);
  EXPECT_EQ(Show("job")["name"], "renamed");
  EXPECT_EQ(Show("job")["queue"], "nlp");
  // Through a restart, and then it runs as updated.
  Restart();
  EXPECT_EQ(Show("job")["tier"], "best-effort");
  EXPECT_EQ(Show("job")["name"], "renamed");
  Beat("h100-0");
  Beat("h100-1");
  ctl_->Poke();
  EXPECT_EQ(Show("job")["state"], "running") << Show("job").dump();
  EXPECT_EQ(Show("job")["queue"], "nlp");
  r = update(kTeamA, {{"queue", "proj"}});
  EXPECT_EQ(r.code, Code::kConflict) << r.body.dump();  // running: its name only
  r = update(kTeamA, {{"name", "late"}});
  EXPECT_EQ(r.code, Code::kOk) << r.body.dump();
  EXPECT_EQ(Show("job")["name"], "late");
}

// scontrol update Dependency=: a pending job's dependencies replaced, resolved as at
// submission: a job waiting on another runs once they are cleared, one waiting
// DependencyNeverSatisfied is mended by a dependency that can be met, a job in the
// scheduler comes out of it to wait; only a pending job, only its team's.
TEST_F(ControllerTest, APendingJobsDependencyIsReplacedAsScontrolUpdateDoes) {
  auto submit = [&](const std::string& id, const std::string& after, bool batch = false) {
    const std::string body = R"({"id":")" + id + R"(","queue":"research","gpus":0,)" +
                             (batch ? R"("script":"#!/bin/sh\ntrue\n"})" : R"("command":"x"})");
    Reply r = SubmitWith(kTeamA, body, "", after);
    EXPECT_EQ(r.code, Code::kCreated) << id << ": " << r.body.dump();
  };
  auto state = [&](const std::string& id) { return Show(id)["state"].get<std::string>(); };
  auto pass = [&] {
    Beat("h100-0");
    ctl_->Poke();
    Beat("h100-0");
  };
  ASSERT_EQ(
      Submit(kTeamA, R"({"id":"main","queue":"research","gpus":1,"vram_gb":1,"command":"x"})").code,
      Code::kCreated);
  submit("next", "main:ok");
  submit("free", "");
  submit("pipeline", "main:ok", true);
  pass();
  ASSERT_EQ(state("main"), "running");
  EXPECT_EQ(state("next"), "pending");
  // Cleared: it runs.
  ASSERT_EQ(ctl_->SetAfter(kTeamA, "next", "").code, Code::kOk);
  pass();
  EXPECT_EQ(state("next"), "running");
  // A job that would run now waits on main from now on.
  ASSERT_EQ(state("free"), "running");
  ASSERT_EQ(SubmitWith(kTeamA,
                       R"({"id":"later","queue":"research","gpus":8,"vram_gb":1,"replicas":2,)"
                       R"("command":"x"})",
                       "", "")
                .code,
            Code::kCreated);
  ASSERT_EQ(state("later"), "pending") << "main holds a GPU of the 16";
  ASSERT_EQ(ctl_->SetAfter(kTeamA, "later", "main:any").code, Code::kOk);
  pass();
  EXPECT_EQ(state("later"), "pending");
  EXPECT_EQ(Show("later")["reason"], "dependency: waiting for main to end");
  // main fails: the batch job waits, never satisfied; mended with afternotok, it runs.
  Beat("h100-0", json::array({{{"job", "main"}, {"run", 1}, {"rank", 0}, {"exit_code", 1}}}));
  pass();
  EXPECT_EQ(Show("later")["reason"].get<std::string>().rfind("capacity", 0), 0u)
      << "main ended: back in the scheduler (the other jobs hold CPUs it needs) "
      << Show("later").dump();
  EXPECT_EQ(Show("pipeline")["reason"].get<std::string>().rfind("dependency never satisfied", 0),
            0u);
  ASSERT_EQ(ctl_->SetAfter(kTeamA, "pipeline", "main:notok").code, Code::kOk);
  pass();
  EXPECT_EQ(state("pipeline"), "running");
  // Set to one never to be met: a native job is refused, as at submission.
  submit("native", "later:ok");
  EXPECT_EQ(ctl_->SetAfter(kTeamA, "native", "main:ok").code, Code::kUnprocessable);
  EXPECT_EQ(ctl_->SetAfter(kTeamA, "native", "nosuch:ok").code, Code::kNotFound);
  EXPECT_EQ(ctl_->SetAfter(kTeamB, "native", "").code, Code::kForbidden);
  EXPECT_EQ(ctl_->SetAfter(kTeamA, "free", "").code, Code::kConflict) << "running";
  EXPECT_EQ(Show("native")["reason"], "dependency: waiting for later to finish") << "unchanged";
}

// scontrol update ArrayTaskThrottle=N: raised, held tasks are handed to the scheduler at
// once; lowered, tasks pending there above it come out (the last by index first) while
// running ones run on; 0 takes the throttle away. Only an array's, only its team's.
TEST_F(ControllerTest, AnArraysThrottleIsChangedAsScontrolUpdateDoes) {
  // Whole-node tasks on a cluster of two nodes: two run at most.
  Reply a =
      SubmitWith(kTeamA, R"({"id":"sweep","queue":"research","gpus":8,"vram_gb":1,"command":"x"})",
                 "0-5%1", "");
  ASSERT_EQ(a.code, Code::kCreated) << a.body.dump();
  auto pass = [&] {
    Beat("h100-0");
    Beat("h100-1");
    ctl_->Poke();
    Beat("h100-0");
    Beat("h100-1");
  };
  auto states = [&] {
    std::string out;
    for (int i = 0; i < 6; ++i) {
      const json j = Show("sweep_" + std::to_string(i));
      const std::string reason = j.value("reason", "");
      out += j["state"].get<std::string>() == "running" ? "R"
             : reason.rfind("throttle", 0) == 0         ? "t"
                                                        : "p";
    }
    return out;
  };
  pass();
  EXPECT_EQ(states(), "Rttttt");
  ASSERT_EQ(ctl_->SetThrottle(kTeamA, "sweep", 4).code, Code::kOk);
  pass();
  EXPECT_EQ(states(), "RRpptt") << "four in the scheduler, two of them waiting for room";
  EXPECT_NE(Show("sweep_4")["reason"].get<std::string>().find("at most 4"), std::string::npos);
  ASSERT_EQ(ctl_->SetThrottle(kTeamA, "sweep", 2).code, Code::kOk);
  EXPECT_EQ(states(), "RRtttt") << "the waiting ones back to the throttle; the running run on";
  Beat("h100-0", json::array({{{"job", "sweep_0"}, {"run", 1}, {"rank", 0}, {"exit_code", 0}}}));
  Beat("h100-1", json::array({{{"job", "sweep_0"}, {"run", 1}, {"rank", 0}, {"exit_code", 0}}}));
  pass();
  EXPECT_EQ(Show("sweep_0")["state"], "finished");
  EXPECT_EQ(states().substr(1), "RRttt") << "the next by index took its place";
  ASSERT_EQ(ctl_->SetThrottle(kTeamA, "sweep", 0).code, Code::kOk);
  EXPECT_EQ(states().substr(1), "RRppp") << "no throttle: all in the scheduler";
  EXPECT_EQ(ctl_->SetThrottle(kTeamB, "sweep", 1).code, Code::kForbidden);
  EXPECT_EQ(ctl_->SetThrottle(kTeamA, "nosuch", 1).code, Code::kNotFound);
  EXPECT_EQ(ctl_->SetThrottle(kTeamA, "sweep_1", 1).code, Code::kBadRequest)
      << "a task, not an array";
}

// Issue 47: the rest of Slurm's dependency types. notok (afternotok) runs after a failure
// and is cancelled by a success; started (after) runs once its job has started; '?' is any
// one of them (a failed one does not cancel the job while another may still be met);
// singleton waits for every earlier active job of its name and user.
TEST_F(ControllerTest, DependencyKindsAnyOneOfAndSingleton) {
  auto submit = [&](const std::string& id, const std::string& after, const std::string& name = "") {
    Reply r =
        SubmitWith(kTeamA,
                   R"({"id":")" + id + R"(","queue":"research","gpus":1,"vram_gb":1,)" +
                       (name.empty() ? "" : R"("name":")" + name + R"(",)") + R"("command":"x"})",
                   "", after);
    EXPECT_EQ(r.code, Code::kCreated) << id << ": " << r.body.dump();
  };
  auto exit = [&](const std::string& id, int code) {
    Beat("h100-0", json::array({{{"job", id}, {"run", 1}, {"rank", 0}, {"exit_code", code}}}));
    ctl_->Poke();
    Beat("h100-0");
  };
  auto state = [&](const std::string& id) { return Show(id)["state"].get<std::string>(); };
  submit("main", "");
  submit("rescue", "main:notok");
  submit("report", "main:ok");
  submit("watcher", "main:started");
  submit("either", "main:ok?rescue:ok");
  EXPECT_EQ(Show("either")["reason"], "dependency: waiting for main to finish or rescue to finish");
  EXPECT_EQ(Show("watcher")["reason"], "dependency: waiting for main to start");
  Beat("h100-0");
  ctl_->Poke();
  Beat("h100-0");
  EXPECT_EQ(state("main"), "running");
  ctl_->Poke();
  EXPECT_EQ(state("watcher"), "running");  // main started
  EXPECT_EQ(state("rescue"), "pending");
  exit("main", 1);
  EXPECT_EQ(state("main"), "failed");
  EXPECT_EQ(state("report"), "cancelled");
  EXPECT_NE(Show("report")["reason"].get<std::string>().find(
                "dependency main ended failed, so --after main:ok can never be met"),
            std::string::npos);
  EXPECT_EQ(state("rescue"), "running");
  EXPECT_EQ(state("either"), "pending") << "rescue may still finish";
  exit("rescue", 0);
  EXPECT_EQ(state("either"), "running");
  // At submission: met already, or never.
  EXPECT_EQ(
      SubmitWith(kTeamA, R"({"queue":"research","gpus":0,"command":"x"})", "", "main:ok").code,
      Code::kUnprocessable);
  EXPECT_EQ(SubmitWith(kTeamA, R"({"queue":"research","gpus":0,"command":"x"})", "",
                       "main:ok?rescue:notok")
                .code,
            Code::kUnprocessable);
  Reply met = SubmitWith(kTeamA, R"({"id":"met","queue":"research","gpus":0,"command":"x"})", "",
                         "main:notok?nosuch2:ok");
  EXPECT_EQ(met.code, Code::kNotFound);  // every name must exist
  EXPECT_EQ(SubmitWith(kTeamA, R"({"queue":"research","gpus":0,"command":"x"})", "",
                       "main:ok,rescue:any?main:any")
                .code,
            Code::kBadRequest);

  // singleton: "chain" jobs of one team and user run one after another; another name and
  // another team's job of that name do not wait.
  submit("c1", "", "chain");
  submit("c2", "singleton", "chain");
  submit("c3", "singleton", "chain");
  submit("other", "singleton", "other-name");
  Reply b = SubmitWith(
      kTeamB,
      R"({"id":"theirs","queue":"serving","gpus":1,"vram_gb":1,"name":"chain","command":"x"})", "",
      "singleton");
  ASSERT_EQ(b.code, Code::kCreated) << b.body.dump();
  EXPECT_EQ(Show("c3")["reason"], "dependency: waiting for c1 to end, c2 to end");
  Beat("h100-0");
  ctl_->Poke();
  Beat("h100-0");
  EXPECT_EQ(state("c1"), "running");
  EXPECT_EQ(state("c2"), "pending");
  EXPECT_EQ(state("other"), "running");
  EXPECT_EQ(state("theirs"), "running");
  Restart();  // kinds and '?' kept
  EXPECT_EQ(Show("c3")["reason"], "dependency: waiting for c1 to end, c2 to end");
  Beat("h100-0");
  exit("c1", 3);
  EXPECT_EQ(state("c2"), "running");
  EXPECT_EQ(state("c3"), "pending");
  exit("c2", 0);
  EXPECT_EQ(state("c3"), "running");
}

// Issue 16: wait reasons say times as people read them, not the core's seconds.
TEST(HumanTimeTest, CoreSecondsBecomeWallTimesWithHowLongFromNow) {
  const int64_t now = 1'795'608'000'000;    // 2026-11-25 12:00:00 UTC
  const int64_t epoch = 1'795'392'000'000;  // Monday 2026-11-23 00:00 UTC, core time 0
  EXPECT_EQ(HumanTime(now + (2 * 3600 + 10 * 60) * 1000, now), "14:10 UTC (in 2 h 10 min)");
  EXPECT_EQ(HumanTime(now - 180'000, now), "11:57 UTC (3 min ago)");
  EXPECT_EQ(HumanTime(now + 22 * 3600'000, now), "2026-11-26 10:00 UTC (in 22 h 0 min)");
  // 2 days 12 h after the epoch is now; 7,800 s more is 14:10.
  const double at = (2 * 86400 + 12 * 3600 + 7800);
  // (The one core text that still gives a time: an arrival waiting for the owed full pass.)
  EXPECT_EQ(HumanTimes("not yet placed: it is tried at the next, at t=" +
                           std::to_string(static_cast<int>(at)) + " s",
                       epoch, now),
            "not yet placed: it is tried at the next, at 14:10 UTC (in 2 h 10 min)");
  EXPECT_EQ(HumanTimes("no times here", epoch, now), "no times here");
}

// Issue 16: time_limit_s is enforced as Slurm's --time: at the limit the run gets its
// checkpoint signal and grace, then the job fails saying why. It also serves as the
// runtime estimate when none is given.
TEST_F(ControllerTest, ARunPastItsTimeLimitIsStoppedAndTheJobFails) {
  const std::string id = StartOnH100(
      kTeamA,
      R"({"queue":"research","gpus":1,"vram_gb":10,"grace_s":1,"time_limit_s":2,"command":"x"})");
  ASSERT_FALSE(id.empty());
  Advance(1500);
  ctl_->Poke();
  EXPECT_EQ(Show(id)["state"], "running");
  Advance(600);
  ctl_->Poke();
  json beat = Beat("h100-0");
  ASSERT_EQ(beat["workers"].size(), 1u) << beat.dump();
  EXPECT_EQ(beat["workers"][0]["action"], "stop");
  EXPECT_EQ(beat["workers"][0]["grace_ms"], 1000);
  Beat("h100-0", json::array({{{"job", id}, {"run", 1}, {"rank", 0}, {"signal", 15}}}));
  json show = Show(id);
  EXPECT_EQ(show["state"], "failed");
  EXPECT_NE(show["reason"].get<std::string>().find("time limit reached"), std::string::npos)
      << show.dump();
  EXPECT_EQ(Submit(kTeamA, R"({"queue":"research","gpus":0,"time_limit_s":-1,"command":"x"})").code,
            Code::kBadRequest);
}

// scontrol update TimeLimit (issue 47): a user lowers a job's limit, only an admin raises
// it or takes it away; an sbatch job's --signal lead comes off the --time given, as at
// submission; the new limit is kept across a restart and stops a running job at it.
TEST_F(ControllerTest, TimeLimitsAreUpdatedAsScontrolUpdateSetsThem) {
  const std::string run = StartOnH100(
      kTeamA,
      R"({"queue":"research","gpus":1,"vram_gb":10,"grace_s":1,"time_limit_s":600,"command":"x"})");
  ASSERT_FALSE(run.empty());
  // As `sbatch --time=10:00 --signal=USR1@30` writes it: the signal at 570 s, the kill at 600.
  const std::string batch = StartOnH100(
      kTeamA, R"({"queue":"research","gpus":1,"vram_gb":10,"script":"#!/bin/sh\nsleep 1000\n",)"
              R"("signal":"USR1","grace_s":30,"time_limit_s":570})");
  ASSERT_FALSE(batch.empty());
  EXPECT_EQ(Show(batch)["time_limit_s"], 570);
  EXPECT_EQ(Show(batch)["slurm_time_limit_s"], 600);
  EXPECT_FALSE(Show(run).contains("slurm_time_limit_s"));

  // Raising or taking it away needs an admin; another team may not touch it.
  EXPECT_EQ(ctl_->SetTimeLimit(kTeamA, run, 1'200'000).code, Code::kForbidden);
  EXPECT_EQ(ctl_->SetTimeLimit(kTeamA, run, 0).code, Code::kForbidden);
  EXPECT_EQ(ctl_->SetTimeLimit(kTeamA, run, 60'000, true).code, Code::kForbidden);
  EXPECT_EQ(ctl_->SetTimeLimit(kTeamB, run, 300'000).code, Code::kForbidden);
  EXPECT_EQ(ctl_->SetTimeLimit(kTeamA, "nosuch", 300'000).code, Code::kNotFound);
  ASSERT_EQ(ctl_->SetTimeLimit(kTeamA, run, 300'000).code, Code::kOk);
  EXPECT_EQ(Show(run)["time_limit_s"], 300);
  // -1:00 off the batch job's 10:00: 9:00 as Slurm shows it, the signal at 8:30.
  ASSERT_EQ(ctl_->SetTimeLimit(kTeamA, batch, -60'000, true).code, Code::kOk);
  EXPECT_EQ(Show(batch)["slurm_time_limit_s"], 540);
  EXPECT_EQ(Show(batch)["time_limit_s"], 510);
  Reply inside_lead = ctl_->SetTimeLimit(kTeamA, batch, 30'000);
  EXPECT_EQ(inside_lead.code, Code::kBadRequest);
  EXPECT_NE(inside_lead.body.dump().find("signal comes 30 s before its limit"), std::string::npos)
      << inside_lead.body.dump();
  ASSERT_EQ(ctl_->SetTimeLimit(kAdmin, run, 900'000).code, Code::kOk);  // an admin raises it
  EXPECT_EQ(Show(run)["time_limit_s"], 900);

  // A held job's (pending) limit, then none at all by an admin; nothing to add to then.
  SubmitRequest held;
  held.body = R"({"id":"held","queue":"research","gpus":1,"vram_gb":1,"time_limit_s":60,)"
              R"("command":"x"})";
  held.hold = true;
  ASSERT_EQ(ctl_->Submit(kTeamA, held).code, Code::kCreated);
  ASSERT_EQ(ctl_->SetTimeLimit(kTeamA, "held", 30'000).code, Code::kOk);
  EXPECT_EQ(Show("held")["time_limit_s"], 30);
  ASSERT_EQ(ctl_->SetTimeLimit(kAdmin, "held", 0).code, Code::kOk);
  EXPECT_FALSE(Show("held").contains("time_limit_s"));
  EXPECT_EQ(ctl_->SetTimeLimit(kTeamA, "held", 60'000, true).code, Code::kConflict);

  Restart();  // the limits set are the jobs' still
  EXPECT_EQ(Show(run)["time_limit_s"], 900);
  EXPECT_EQ(Show(batch)["slurm_time_limit_s"], 540);
  EXPECT_FALSE(Show("held").contains("time_limit_s"));
  // Lowered below what it has run: stopped at once as at its limit.
  Beat("h100-0");
  Advance(2'500);
  ASSERT_EQ(ctl_->SetTimeLimit(kTeamA, run, 2'000).code, Code::kOk);
  ctl_->Poke();
  json beat = Beat("h100-0");
  bool stopped = false;
  for (const json& w : beat["workers"]) stopped |= w["job"] == run && w["action"] == "stop";
  EXPECT_TRUE(stopped) << beat.dump();
  Beat("h100-0", json::array({{{"job", run}, {"run", 1}, {"rank", 0}, {"signal", 15}}}));
  json show = Show(run);
  EXPECT_EQ(show["state"], "failed");
  EXPECT_NE(show["reason"].get<std::string>().find("time limit reached"), std::string::npos)
      << show.dump();
  EXPECT_EQ(ctl_->SetTimeLimit(kTeamA, run, 1'000).code, Code::kConflict);  // it has ended
}

// sbatch --time=1:30 --signal=B:USR1@30, as Slurm runs it: USR1 to the batch script alone
// 30 s before the limit (the script runs on), then at the limit SIGTERM to all of it and
// SIGKILL a KillWait (30 s) later; the job ends TIMEOUT ("time limit reached").
TEST_F(ControllerTest, AnSbatchSignalComesItsLeadBeforeTheLimitAndSigtermAtIt) {
  const std::string id = StartOnH100(
      kTeamA, R"({"queue":"research","gpus":1,"vram_gb":10,"script":"#!/bin/sh\nsleep 1000\n",)"
              R"("signal":"B:USR1","grace_s":30,"time_limit_s":60})");
  ASSERT_FALSE(id.empty());
  auto mine = [&](const json& beat) {
    for (const json& w : beat["workers"])
      if (w["job"] == id) return w;
    return json();
  };
  // Time goes by with the node's agent heard from (a node silent for 3 s is lost).
  auto pass_time = [&](Ticks ms) {
    for (; ms > 0; ms -= 1'000) {
      Beat("h100-0");
      Advance(std::min<Ticks>(ms, 1'000));
      ctl_->Poke();
    }
    return mine(Beat("h100-0"));
  };
  json w = pass_time(59'000);
  EXPECT_EQ(w["action"], "run");
  EXPECT_FALSE(w.contains("signals")) << w.dump();
  w = pass_time(1'500);
  EXPECT_EQ(w["action"], "run") << "the signal first, the run goes on";
  ASSERT_EQ(w["signals"].size(), 1u) << w.dump();
  EXPECT_EQ(w["signals"][0]["signal"], SIGUSR1);
  EXPECT_EQ(w["signals"][0]["to"], "script");
  EXPECT_EQ(Show(id)["state"], "running");
  Restart();  // the signal is not sent twice
  w = pass_time(28'000);
  EXPECT_EQ(w["action"], "run");
  EXPECT_EQ(w["signals"].size(), 1u) << w.dump();
  w = pass_time(2'000);  // 90.5 s: past the limit itself
  EXPECT_EQ(w["action"], "stop") << w.dump();
  EXPECT_EQ(w["signal"], SIGTERM);
  EXPECT_FALSE(w.contains("signal_to")) << "to all of it, not the script alone";
  EXPECT_EQ(w["grace_ms"], 30'000);
  Beat("h100-0", json::array({{{"job", id}, {"run", 1}, {"rank", 0}, {"signal", SIGTERM}}}));
  json show = Show(id);
  EXPECT_EQ(show["state"], "failed");
  EXPECT_NE(show["reason"].get<std::string>().find("time limit reached"), std::string::npos)
      << show.dump();
  EXPECT_EQ(show["exit_signal"], SIGTERM) << show.dump();
}

// srun --mpi=pmix's held step (cli/pmix_server.h): placed (its tasks' nodes known, so srun
// can register them with its PMIx server) but sent to no agent until its srun launches it,
// then with srun's variables and each task's PMIX_RANK and PMIX_HOSTNAME. No other
// credential launches it, nor is it launched twice; one its srun never launches (srun
// killed) is cancelled a minute after it was placed, having started nothing.
TEST_F(ControllerTest, AHeldStepStartsOnlyWhenItsSrunLaunchesIt) {
  const auto [id, first] = StartBatchJob();
  ASSERT_FALSE(first.empty());
  const std::string token = Beat(first)["workers"][0]["env"]["GANTRY_TOKEN"];
  auto tasks_on = [&](const std::string& node, int step) {
    std::vector<json> out;
    const json beat = Beat(node);
    for (const json& w : beat["workers"])
      if (w.value("step", -1) == step) out.push_back(w);
    return out;
  };
  const json body = {{"command", {"./app"}},
                     {"held", true},
                     {"overlap", true},
                     {"env", {{"SLURM_MPI_TYPE", "pmix"}}}};
  Reply held = ctl_->CreateStep(token, id, body);
  ASSERT_EQ(held.code, Code::kCreated) << held.body.dump();
  ASSERT_EQ(held.body["state"], "running") << held.body.dump();
  ASSERT_EQ(held.body["tasks"].size(), 4u) << held.body.dump();
  const int step = held.body["step"];
  EXPECT_TRUE(tasks_on("h100-0", step).empty()) << "sent before its launch";
  EXPECT_TRUE(tasks_on("h100-1", step).empty()) << "sent before its launch";
  EXPECT_EQ(ctl_->LaunchStep(kTeamA, id, step, json::object()).code, Code::kForbidden);
  Reply launched =
      ctl_->LaunchStep(token, id, step, {{"env", {{"PMIX_NAMESPACE", "gantry.pmix.x"}}}});
  ASSERT_EQ(launched.code, Code::kOk) << launched.body.dump();
  EXPECT_EQ(ctl_->LaunchStep(token, id, step, json::object()).code, Code::kConflict);
  for (const std::string node : {"h100-0", "h100-1"}) {
    const std::vector<json> tasks = tasks_on(node, step);
    ASSERT_EQ(tasks.size(), 2u) << node;
    for (const json& t : tasks) {
      EXPECT_EQ(t["env"]["PMIX_NAMESPACE"], "gantry.pmix.x") << t.dump();
      EXPECT_EQ(t["env"]["PMIX_RANK"], t["env"]["SLURM_PROCID"]) << t.dump();
      EXPECT_EQ(t["env"]["PMIX_HOSTNAME"], node) << t.dump();
    }
  }
  Reply orphan = ctl_->CreateStep(token, id, body);
  ASSERT_EQ(orphan.code, Code::kCreated) << orphan.body.dump();
  const int left = orphan.body["step"];
  for (int s = 0; s < 59; ++s) {
    Advance(1000);
    EXPECT_TRUE(tasks_on("h100-0", left).empty());
    EXPECT_TRUE(tasks_on("h100-1", left).empty());
    ctl_->Poke();
  }
  EXPECT_EQ(ctl_->ShowStep(token, id, left).body["state"], "running");
  for (int s = 0; s < 2; ++s) {
    Advance(1000);
    Beat("h100-0");
    Beat("h100-1");
    ctl_->Poke();
  }
  const json ended = ctl_->ShowStep(token, id, left).body;
  EXPECT_EQ(ended["state"], "cancelled") << ended.dump();
  EXPECT_TRUE(tasks_on("h100-0", left).empty());
  EXPECT_EQ(Show(id)["state"], "running") << "the job runs on";
}

// Issue 47 A1: a batch job is an allocation. Only its script runs (rank 0, with every GPU of
// the job on its node, and the run's own credential); srun's steps run on the slots, wait
// for busy ones, end when their tasks do; the script's end ends the job and kills what runs.
// Step requests come from srun, but a job's credential is in the hands of whatever the
// job runs: hostile bodies (wrong types, huge or negative counts, duplicate or foreign
// node names, junk) get 400 or 422 with why, or a step whose tasks sit on the job's own
// nodes; nothing crashes (CI runs this under ASan and UBSan). Found: `-w a,a` (a node
// named twice) read out of bounds while checking whether the step could ever fit.
TEST_F(ControllerTest, HostileStepBodiesAreRefusedOrPlacedOnTheJobsOwnNodes) {
  const auto [id, first] = StartBatchJob();
  ASSERT_FALSE(first.empty());
  const std::string token = Beat(first)["workers"][0]["env"]["GANTRY_TOKEN"];

  // A node named twice is that node once, as Slurm reads `-w a,a`.
  for (const json& list : {json({"h100-0", "h100-0"}), json({"h100-0", "h100-1", "h100-0"})}) {
    const size_t tasks = list.size() == 2 ? 2 : 4;  // a node's 2 slots; the job's 4 tasks
    Reply twice = ctl_->CreateStep(
        token, id, {{"command", {"x"}}, {"nodelist", list}, {"ntasks", tasks}, {"overlap", true}});
    ASSERT_EQ(twice.code, Code::kCreated) << twice.body.dump();
    EXPECT_EQ(twice.body["state"], "running") << twice.body.dump();
    EXPECT_EQ(twice.body["tasks"].size(), tasks) << twice.body.dump();
    for (const json& t : twice.body["tasks"]) {
      EXPECT_NE(std::find(list.begin(), list.end(), t["node"]), list.end()) << twice.body.dump();
    }
  }

  std::mt19937 rng(47);
  auto pick = [&](size_t n) { return static_cast<int>(rng() % n); };
  auto number = [&]() -> json {
    switch (pick(8)) {
      case 0:
        return -1 - pick(5);
      case 1:
        return std::numeric_limits<int>::max();
      case 2:
        return std::numeric_limits<int64_t>::min();
      case 3:
        return 1e300;
      case 4:
        return 100000;
      case 5:
        return 2.5;
      default:
        return pick(10);
    }
  };
  auto junk = [&]() -> json {
    switch (pick(6)) {
      case 0:
        return nullptr;
      case 1:
        return "x";
      case 2:
        return json::array({1, "a"});
      case 3:
        return json::object({{"a", 1}});
      case 4:
        return true;
      default:
        return number();
    }
  };
  const std::vector<std::string> names = {
      "h100-0", "h100-1", "h100-0", "h100-9", "", "h100-[0-1]", std::string(300, 'n')};
  int created = 0, refused = 0;
  for (int i = 0; i < 400; ++i) {
    json body = json::object();
    if (pick(10) != 0) {
      body["command"] = pick(8) == 0 ? junk() : json::array({pick(6) == 0 ? "" : "true"});
    }
    for (const char* key :
         {"nodes", "ntasks", "ntasks_per_node", "cpus_per_task", "gpus_per_task"}) {
      if (pick(3) == 0) body[key] = pick(4) == 0 ? junk() : number();
    }
    if (pick(3) == 0) {
      json list = json::array();
      for (int k = pick(5); k > 0; --k)
        list.push_back(names[static_cast<size_t>(pick(names.size()))]);
      body["nodelist"] = pick(6) == 0 ? junk() : list;
    }
    if (pick(4) == 0) body["overlap"] = pick(3) == 0 ? junk() : json(pick(2) == 0);
    if (pick(5) == 0) body["env"] = pick(2) == 0 ? junk() : json({{"A", "1"}});
    if (pick(6) == 0) body["workdir"] = pick(2) == 0 ? junk() : json("relative");
    Reply s = ctl_->CreateStep(token, id, body);
    ASSERT_TRUE(s.code == Code::kCreated || s.code == Code::kBadRequest ||
                s.code == Code::kUnprocessable)
        << static_cast<int>(s.code) << " for " << body.dump() << ": " << s.body.dump();
    if (s.code != Code::kCreated) {
      EXPECT_FALSE(s.body.value("error", "").empty()) << body.dump();
      ++refused;
      continue;
    }
    ++created;
    for (const json& t : s.body["tasks"]) {
      EXPECT_TRUE(t["node"] == "h100-0" || t["node"] == "h100-1") << s.body.dump();
    }
    if (body.contains("nodelist") && body["nodelist"].is_array() && s.body["state"] == "running") {
      for (const json& t : s.body["tasks"]) {
        EXPECT_NE(std::find(body["nodelist"].begin(), body["nodelist"].end(), t["node"]),
                  body["nodelist"].end())
            << "a task outside -w: " << body.dump() << " " << s.body.dump();
      }
    }
  }
  EXPECT_GT(created, 20);
  EXPECT_GT(refused, 20);
  // The job is whole: still running, its agents answered.
  EXPECT_EQ(Show(id)["state"], "running");
  EXPECT_FALSE(Beat(first)["workers"].empty());
}

// A batch run's credential through gantryd restarts: the store keeps hashes only, so a
// restarted gantryd gives the run another one (the script's own stays valid): in the
// script's environment for an agent that starts it after the restart, and to salloc
// (GET /v1/jobs/{id}/allocation), which said 409 before. All end with the run.
TEST_F(ControllerTest, ABatchRunsCredentialOutlivesRestartsAndEndsWithTheRun) {
  const auto [id, first] = StartBatchJob();
  ASSERT_FALSE(first.empty());
  const std::string script = Beat(first)["workers"][0]["env"]["GANTRY_TOKEN"];
  ASSERT_EQ(script.rfind("gjt_", 0), 0u);
  auto allocation = [&] {
    std::promise<Reply> p;
    ctl_->JobAllocation(kAdmin, id, [&](Reply r) { p.set_value(std::move(r)); });
    return p.get_future().get();
  };
  auto works = [&](const std::string& token) {
    return ctl_->CreateStep(token, id, {{"command", {"x"}}, {"ntasks", 1}, {"overlap", true}})
               .code == Code::kCreated;
  };
  EXPECT_EQ(allocation().body["token"], script);
  Restart();
  Beat("h100-0");
  Beat("h100-1");
  EXPECT_TRUE(works(script)) << "the script's own credential, after the restart";
  const Reply granted = allocation();
  ASSERT_EQ(granted.code, Code::kOk) << granted.body.dump();
  const std::string after = granted.body["token"];
  EXPECT_NE(after, script);
  EXPECT_TRUE(works(after));
  // A script its agent starts from now on gets it (it had none).
  const json beat = Beat(first);
  json desired;
  for (const json& w : beat["workers"]) {
    if (w["rank"] == 0 && w.value("step", -1) < 0) desired = w;
  }
  ASSERT_TRUE(desired.is_object());
  EXPECT_EQ(desired["env"].value("GANTRY_TOKEN", ""), after);
  Restart();
  Beat("h100-0");
  Beat("h100-1");
  EXPECT_TRUE(works(script));
  EXPECT_TRUE(works(after)) << "kept in the store beside the first";
  const std::string third = allocation().body["token"];
  EXPECT_TRUE(works(third));
  ASSERT_EQ(ctl_->Cancel(kTeamA, id, /*force=*/true).code, Code::kOk);
  Beat(first, json::array({{{"job", id}, {"run", 1}, {"rank", 0}, {"exit_code", 137}}}));
  ctl_->Poke();
  ASSERT_EQ(Show(id)["state"], "cancelled") << Show(id).dump();
  for (const std::string& t : {script, after, third}) EXPECT_FALSE(works(t));
}

TEST_F(ControllerTest, ABatchJobRunsItsScriptOnceAndItsStepsOnItsSlots) {
  const auto [id, first] = StartBatchJob();
  ASSERT_FALSE(first.empty());
  const std::string second = first == "h100-0" ? "h100-1" : "h100-0";
  json a = Beat(first), b = Beat(second);
  ASSERT_EQ(a["workers"].size(), 1u) << a.dump();  // the script only: rank 1 is a slot
  EXPECT_TRUE(b["workers"].empty()) << b.dump();
  const json& script = a["workers"][0];
  EXPECT_EQ(script["rank"], 0);
  EXPECT_EQ(script["alloc"]["gpus"].size(), 4u) << "all the job's GPUs on its node";
  EXPECT_EQ(script["env"]["SLURM_GPUS_ON_NODE"], "4");
  EXPECT_FALSE(script["env"].contains("RANK"));
  const std::string token = script["env"]["GANTRY_TOKEN"];
  ASSERT_EQ(token.rfind("gjt_", 0), 0u);

  // Nobody else runs its steps; it runs none of another job's.
  const json step = {{"command", {"python", "train.py"}}, {"env", {{"A", "1"}}}, {"workdir", "/w"}};
  EXPECT_EQ(ctl_->CreateStep(kTeamA, id, step).code, Code::kForbidden);
  EXPECT_EQ(ctl_->CreateStep(token, "j999", step).code, Code::kForbidden);
  // Shapes the allocation cannot hold are refused with why.
  Reply bad = ctl_->CreateStep(token, id, {{"command", {"x"}}, {"nodes", 3}});
  EXPECT_EQ(bad.code, Code::kUnprocessable);
  EXPECT_NE(bad.body["error"].get<std::string>().find("the job has 2 nodes"), std::string::npos);
  Reply cpus = ctl_->CreateStep(token, id, {{"command", {"x"}}, {"cpus_per_task", 999}});
  EXPECT_EQ(cpus.code, Code::kUnprocessable);
  EXPECT_EQ(cpus.body["error"].get<std::string>().rfind(
                "More processors requested than permitted (4 tasks of 999 CPUs", 0),
            0u)
      << cpus.body.dump();
  EXPECT_EQ(ctl_->CreateStep(token, id, {{"command", {"x"}}, {"ntasks", 9}}).code,
            Code::kUnprocessable);
  EXPECT_EQ(ctl_->CreateStep(token, id, {{"command", {"x"}}, {"gpus_per_task", 1}}).code,
            Code::kUnprocessable);
  EXPECT_EQ(ctl_->CreateStep(token, id, {{"command", {"x"}}, {"nodelist", {"h100-9"}}}).code,
            Code::kUnprocessable);

  // The default step: the job's 4 tasks, 2 on each node, each seeing its node's 4 GPUs.
  Reply s0 = ctl_->CreateStep(token, id, step);
  ASSERT_EQ(s0.code, Code::kCreated) << s0.body.dump();
  EXPECT_EQ(s0.body["state"], "running");
  EXPECT_EQ(s0.body["tasks"].size(), 4u);
  // One task on the first node: a second step waits for a free slot there.
  Reply s1 = ctl_->CreateStep(token, id, {{"command", {"y"}}, {"ntasks", 1}});
  ASSERT_EQ(s1.code, Code::kCreated) << s1.body.dump();
  EXPECT_EQ(s1.body["state"], "pending");
  a = Beat(first);
  b = Beat(second);
  ASSERT_EQ(a["workers"].size(), 3u) << a.dump();  // the script and two tasks
  ASSERT_EQ(b["workers"].size(), 2u) << b.dump();
  for (const json& w : b["workers"]) {
    EXPECT_EQ(w["step"], 0);
    EXPECT_EQ(w["command"], json({"python", "train.py"}));
    EXPECT_EQ(w["workdir"], "/w");
    EXPECT_EQ(w["alloc"]["gpus"].size(), 4u);
    const json& env = w["env"];
    EXPECT_EQ(env["A"], "1");
    EXPECT_EQ(env["SLURM_STEP_ID"], "0");
    EXPECT_EQ(env["SLURM_NODEID"], "1");
    EXPECT_EQ(env["SLURM_NTASKS"], "4");
    EXPECT_EQ(env["SLURM_NNODES"], "2");
    EXPECT_EQ(env["SLURM_TASKS_PER_NODE"], "2(x2)");
    EXPECT_EQ(env["SLURM_PROCID"], std::to_string(w["rank"].get<int>()));
    EXPECT_EQ(env["SLURM_LOCALID"], std::to_string(w["rank"].get<int>() - 2));
    EXPECT_EQ(env["SLURMD_NODENAME"], second);
  }
  // Step 0's tasks end (one fails): it has ended, and step 1 starts.
  json exits = json::array();
  for (int t = 0; t < 4; ++t) {
    exits.push_back(
        {{"job", id}, {"run", 1}, {"rank", t}, {"step", 0}, {"exit_code", t == 3 ? 2 : 0}});
  }
  // srun's long poll: parked while step 0 is as the caller saw it, answered as soon as a
  // task of it exits (or, unchanged, at the wait's end).
  const auto poll = [&](const std::string& version, int64_t wait_ms) {
    auto promise = std::make_shared<std::promise<Reply>>();
    ctl_->ShowStep(token, id, 0, version, wait_ms,
                   [promise](Reply r) { promise->set_value(std::move(r)); });
    return promise->get_future();
  };
  const std::string seen = ctl_->ShowStep(token, id, 0).body["version"];
  ASSERT_EQ(seen.size(), 16u);
  std::future<Reply> unchanged = poll(seen, 2000);
  ctl_->Poke();
  EXPECT_EQ(unchanged.wait_for(std::chrono::milliseconds(100)), std::future_status::timeout);
  Advance(2000);
  ctl_->Poke();
  ASSERT_EQ(unchanged.wait_for(std::chrono::seconds(5)), std::future_status::ready);
  EXPECT_EQ(unchanged.get().body["version"], seen) << "the wait ended, nothing changed";
  std::future<Reply> moved = poll(seen, 60000);
  ctl_->Poke();
  EXPECT_EQ(moved.wait_for(std::chrono::milliseconds(100)), std::future_status::timeout);
  Beat(first, json::array({exits[0], exits[1]}));
  ASSERT_EQ(moved.wait_for(std::chrono::seconds(5)), std::future_status::ready);
  const json after = moved.get().body;
  EXPECT_NE(after["version"], seen);
  EXPECT_EQ(after["tasks"][0]["exited"], true) << after.dump();
  EXPECT_EQ(poll("stale", 60000).get().body["version"], after["version"])
      << "a version that is not the step's is answered at once";
  EXPECT_EQ(ctl_->ShowStep(token, id, 0).body["state"], "running");
  Beat(second, json::array({exits[2], exits[3]}));
  json ended = ctl_->ShowStep(token, id, 0).body;
  EXPECT_EQ(ended["state"], "ended") << ended.dump();
  EXPECT_EQ(ended["tasks"][3]["exit_code"], 2);
  EXPECT_EQ(ctl_->ShowStep(token, id, 1).body["state"], "running");
  EXPECT_EQ(Show(id)["state"], "running") << "a failed step is the script's business";

  // A restart keeps the steps and the credential (its hash is in the job's record).
  Restart();
  EXPECT_EQ(ctl_->ShowStep(token, id, 1).body["state"], "running");
  a = Beat(first);
  ASSERT_EQ(a["workers"].size(), 2u) << a.dump();  // the script and step 1's task
  // The script ends: the task still running gets SIGTERM and KillWait (Slurm's), the job
  // finishes once it has ended, and the credential ends with it.
  Beat(first, json::array({{{"job", id}, {"run", 1}, {"rank", 0}, {"exit_code", 0}}}));
  EXPECT_EQ(Show(id)["state"], "stopping") << Show(id).dump();
  a = Beat(first);
  ASSERT_EQ(a["workers"].size(), 1u) << a.dump();
  EXPECT_EQ(a["workers"][0]["action"], "stop");
  EXPECT_EQ(a["workers"][0]["step"], 1);
  EXPECT_EQ(a["workers"][0]["signal"], 15);
  EXPECT_GT(a["workers"][0]["grace_ms"].get<int64_t>(), 25000) << "KillWait: 30 s";
  Beat(first, json::array({{{"job", id}, {"run", 1}, {"rank", 0}, {"step", 1}, {"signal", 15}}}));
  EXPECT_EQ(Show(id)["state"], "finished") << Show(id).dump();
  EXPECT_TRUE(Beat(first)["workers"].empty());
  EXPECT_EQ(ctl_->ShowStep(kTeamA, id, 1).body["tasks"][0]["signal"], 15);
  EXPECT_EQ(ctl_->ShowStep(token, id, 1).code, Code::kUnauthenticated);
}

// Issue 47: a task farm in one allocation. A step given --exact (--exclusive, -c) holds
// only its tasks' CPUs, the lowest free positions among the job's CPUs on its node, which
// its task is sent (step_cpus); one that is not holds them all; steps wait for CPUs to free
// up, also across a restart, and a later one that fits starts before an earlier one that
// waits, as Slurm's sruns each retry on their own (bench/slurm_scripts/task_farm*.sbatch,
// steps_overtake.sbatch: Slurm's).
TEST_F(ControllerTest, ExactStepsHoldTheirOwnCpusAndOthersWaitForThem) {
  const auto [id, first] = StartBatchJob();
  ASSERT_FALSE(first.empty());
  const std::string second = first == "h100-0" ? "h100-1" : "h100-0";
  const json script = Beat(first)["workers"][0];
  const std::string token = script["env"]["GANTRY_TOKEN"];
  const int cpus = script["limits"]["cpus"];
  ASSERT_GE(cpus, 2) << script.dump();
  auto make = [&](json body) {
    body["command"] = {"work"};
    Reply r = ctl_->CreateStep(token, id, body);
    EXPECT_EQ(r.code, Code::kCreated) << r.body.dump();
    return r.body;
  };
  auto task_of = [&](const std::string& node, int step) {
    const json beat = Beat(node);
    for (const json& w : beat["workers"])
      if (w.value("step", -1) == step) return w;
    return json::object();
  };
  const json one = {{"ntasks", 1}, {"exact", true}, {"nodelist", {first}}};
  // As many one-CPU steps as the node has CPUs run side by side, each on a CPU of its own.
  std::set<int> held;
  for (int i = 0; i < cpus; ++i) {
    const json s = make(one);
    ASSERT_EQ(s["state"], "running") << i << ": " << s.dump();
    const json task = task_of(first, s["step"]);
    ASSERT_EQ(task["step_cpus"].size(), 1u) << task.dump();
    held.insert(task["step_cpus"][0].get<int>());
    EXPECT_EQ(task["env"]["SLURM_CPUS_ON_NODE"], "1");
  }
  EXPECT_EQ(held.size(), static_cast<size_t>(cpus));
  EXPECT_EQ(*held.rbegin(), cpus - 1) << "positions among the job's CPUs there";
  // The next waits; so does one that is not exact; a later one on the free node starts.
  const json waits = make(one);
  EXPECT_EQ(waits["state"], "pending");
  const json whole = make({{"ntasks", 1}, {"nodelist", {first}}});
  EXPECT_EQ(whole["state"], "pending");
  EXPECT_EQ(make({{"ntasks", 1}, {"exact", true}, {"nodelist", {second}}})["state"], "running");
  // A restart keeps what each holds.
  Restart();
  EXPECT_EQ(ctl_->ShowStep(token, id, waits["step"]).body["state"], "pending");
  // Step 0's task ends: the waiting one takes its CPU, the whole-node one still waits.
  const int freed = task_of(first, 0)["step_cpus"][0];
  Beat(first, json::array({{{"job", id}, {"run", 1}, {"rank", 0}, {"step", 0}, {"exit_code", 0}}}));
  EXPECT_EQ(ctl_->ShowStep(token, id, waits["step"]).body["state"], "running");
  EXPECT_EQ(task_of(first, waits["step"])["step_cpus"], json({freed}));
  EXPECT_EQ(ctl_->ShowStep(token, id, whole["step"]).body["state"], "pending");
  // The rest end: the step that is not exact runs alone, on all of them (none sent).
  json exits = json::array();
  for (int i = 1; i < cpus; ++i)
    exits.push_back({{"job", id}, {"run", 1}, {"rank", 0}, {"step", i}, {"exit_code", 0}});
  exits.push_back(
      {{"job", id}, {"run", 1}, {"rank", 0}, {"step", waits["step"]}, {"exit_code", 0}});
  Beat(first, exits);
  EXPECT_EQ(ctl_->ShowStep(token, id, whole["step"]).body["state"], "running");
  const json alone = task_of(first, whole["step"]);
  EXPECT_FALSE(alone.contains("step_cpus")) << alone.dump();
  // -c is exact too: the rest of the second node's CPUs, where an exact step runs already.
  const json rest = make({{"ntasks", 1}, {"cpus_per_task", cpus - 1}, {"nodelist", {second}}});
  EXPECT_EQ(rest["state"], "running") << rest.dump();
  json positions = json::array();
  for (int c = 1; c < cpus; ++c) positions.push_back(c);
  EXPECT_EQ(task_of(second, rest["step"])["step_cpus"], positions);
  EXPECT_EQ(task_of(second, rest["step"])["env"]["SLURM_CPUS_ON_NODE"], std::to_string(cpus - 1));
  EXPECT_EQ(make({{"ntasks", 1}, {"exact", true}, {"nodelist", {second}}})["state"], "pending");
}

// Issue 47 A5: Slurm's ids are numbers (SLURM_JOB_ID); a job's number is its seq and
// stands for it wherever a name does: show, cancel, dependencies; an array's number (its
// first task's) for the array, NUMBER_INDEX for a task.
TEST_F(ControllerTest, AJobsNumberStandsForIt) {
  Reply r = Submit(kTeamA, R"({"queue":"research","gpus":1,"vram_gb":1,"command":"x"})");
  ASSERT_EQ(r.code, Code::kCreated) << r.body.dump();
  const std::string id = r.body["id"];
  const std::string number = std::to_string(Show(id)["seq"].get<int64_t>());
  EXPECT_EQ(ctl_->ShowJob(kTeamA, number).body["id"], id);
  Reply after = SubmitWith(kTeamA, R"({"queue":"research","gpus":1,"vram_gb":1,"command":"y"})", "",
                           number + ":any");
  ASSERT_EQ(after.code, Code::kCreated) << after.body.dump();
  EXPECT_NE(Show(after.body["id"])["reason"].get<std::string>().find("waiting for " + id),
            std::string::npos);
  Reply arr =
      SubmitWith(kTeamA, R"({"queue":"research","gpus":1,"vram_gb":1,"command":"z"})", "0-2", "");
  ASSERT_EQ(arr.code, Code::kCreated) << arr.body.dump();
  const std::string array = arr.body["id"];
  ASSERT_EQ(array[0], 'j');
  EXPECT_EQ(ctl_->ShowJob(kTeamA, array.substr(1) + "_1").body["id"], array + "_1");
  // Each task has its own number, as Slurm's: the array's goes with its last task, the
  // others' follow it (array 41's tasks 0-2 are 42, 43 and 41).
  const int64_t first = std::stoll(array.substr(1));
  EXPECT_EQ(arr.body["number"], first);
  for (int k = 0; k < 3; ++k) {
    const json task = Show(array + "_" + std::to_string(k));
    EXPECT_EQ(task["number"], k < 2 ? first + 1 + k : first) << k;
    EXPECT_EQ(task["array_number"], first);
    if (k < 2) {
      EXPECT_EQ(ctl_->ShowJob(kTeamA, std::to_string(first + 1 + k)).body["id"], task["id"]);
    }
  }
  Reply cancelled = ctl_->Cancel(kTeamA, array.substr(1));
  EXPECT_EQ(cancelled.body["cancelled"], 3) << cancelled.body.dump();
  EXPECT_EQ(ctl_->Cancel(kTeamA, number).body["id"], id);
  EXPECT_EQ(ctl_->ShowJob(kTeamA, "99999").code, Code::kNotFound);
  // Names of digits would stand for other jobs' numbers: refused.
  EXPECT_TRUE(BadJobName("42"));
  EXPECT_TRUE(BadJobName("41_3"));
  EXPECT_FALSE(BadJobName("run42"));
  EXPECT_FALSE(BadJobName("42b"));
}

// SLURM_ARRAY_TASK_COUNT/_MIN/_MAX/_STEP describe the whole array as submitted, also once
// its ended tasks have left memory (recent_done) and after a restart (they counted the
// tasks in memory: 3 of 4 here).
TEST_F(ControllerTest, AnArrayTasksSlurmVariablesDescribeTheWholeArrayAfterARestart) {
  options_.recent_done = 1;
  Restart();
  Reply arr = SubmitWith(
      kTeamA, R"({"queue":"research","gpus":1,"vram_gb":1,"script":"#!/bin/sh\ntrue\n"})",
      "0-12:4%1", "");
  ASSERT_EQ(arr.code, Code::kCreated) << arr.body.dump();
  const std::string array = arr.body["id"];
  for (int k = 0; k < 4; ++k) {
    const std::string task = array + "_" + std::to_string(k * 4);
    Beat("h100-0");
    ctl_->Poke();
    json beat = Beat("h100-0");
    ASSERT_EQ(beat["workers"].size(), 1u) << k << " " << beat.dump();
    const json& env = beat["workers"][0]["env"];
    EXPECT_EQ(env["SLURM_ARRAY_TASK_ID"], std::to_string(k * 4));
    EXPECT_EQ(env["SLURM_ARRAY_TASK_COUNT"], "4") << k;
    EXPECT_EQ(env["SLURM_ARRAY_TASK_MIN"], "0") << k;
    EXPECT_EQ(env["SLURM_ARRAY_TASK_MAX"], "12") << k;
    EXPECT_EQ(env["SLURM_ARRAY_TASK_STEP"], "4") << k;
    Beat("h100-0", json::array({{{"job", task}, {"run", 1}, {"rank", 0}, {"exit_code", 0}}}));
    ASSERT_EQ(Show(task)["state"], "finished") << Show(task).dump();
    if (k == 1) Restart();
  }
}

}  // namespace
}  // namespace gantry::server
