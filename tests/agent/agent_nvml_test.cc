// The real gantry-agent on the fake NVML (LD_LIBRARY_PATH), heartbeating to a stand-in for
// gantryd on loopback that hands it four workers: two MPS shares of GPU 0, GPU 1 whole and
// a MIG instance of GPU 2. Once the workers' processes show in NVML's process lists (with
// one of someone else's), each heartbeat carries each worker's own usage; when GPU 0 falls
// off the bus, its workers report nothing. And MIG on mig_managed pools: the agent creates
// each worker's instance at its placement, destroys it before reporting the worker's exit,
// never touches instances it did not make, and reports a creation NVML refuses as a lost
// worker with the reason and a request to drain the node.
#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <thread>

#include <nlohmann/json.hpp>

#include "agent/launcher.h"
#include "base/cpus.h"
#include "device_nodes.h"

namespace gantry::agent {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
constexpr int64_t kGB = 1'000'000'000;

// The parameter: --cgroups (off: GPU processes are told by session only).
class AgentOnFakeNvml : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("gantry-agent-nvml-" + std::to_string(::getpid()) + "-" + GetParam());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    server_.Post(
        "/v1/agents/n1/heartbeat", [this](const httplib::Request& req, httplib::Response& res) {
          std::lock_guard lk(mu_);
          heartbeats_.push_back(json::parse(req.body));
          json answer = {{"heartbeat_ms", 50}, {"lease_ms", 30000}, {"node_timeout_ms", 60000},
                         {"instance", "test"}, {"version", 1},      {"workers", workers_}};
          answer.update(heartbeat_answer_);
          res.set_content(answer.dump(), "application/json");
        });
    // Watch answers queued by a test, one per call; none: 404 (the agent tries again).
    server_.Get("/v1/agents/n1/watch", [this](const httplib::Request&, httplib::Response& res) {
      std::lock_guard lk(mu_);
      if (watch_answers_.empty()) {
        res.status = 404;
        return;
      }
      res.set_content(watch_answers_.front().dump(), "application/json");
      watch_answers_.erase(watch_answers_.begin());
    });
    server_.Post("/v1/agents/n1/logs",
                 [](const httplib::Request&, httplib::Response& res) { res.status = 404; });
    port_ = server_.bind_to_any_port("127.0.0.1");
    ASSERT_GT(port_, 0);
    serve_ = std::thread([this] { server_.listen_after_bind(); });
  }
  void TearDown() override {
    if (agent_ > 0) {
      ::kill(agent_, SIGTERM);
      for (int i = 0; i < 1000 && agent_ > 0; ++i) {
        for (const Exited& e : Reap()) {
          if (e.pid == agent_) agent_ = 0;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
      if (agent_ > 0) ::kill(agent_, SIGKILL);
    }
    // Only if it is still the process seen: the agent may have killed it already (by
    // cgroup), and its pid may since belong to another test's process (pids wrap at
    // 32768 here, and ctest runs tests side by side).
    for (const auto& [p, started] : stray_) {
      if (started >= 0 && ProcessStartTime(p) == started) ::kill(p, SIGKILL);
    }
    server_.stop();
    serve_.join();
    if (HasFailure()) {
      std::ifstream in(dir_ / "agent.log");
      std::cerr << "gantry-agent's log:\n" << in.rdbuf() << "\n(kept in " << dir_ << ")\n";
    } else {
      fs::remove_all(dir_);
    }
  }
  void Script(const json& j) {
    std::ofstream(dir_ / "nvml.tmp") << j.dump(2);
    fs::rename(dir_ / "nvml.tmp", dir_ / "nvml.json");
  }
  json Worker(const std::string& job, const json& alloc) {
    const std::string out = (dir_ / (job + ".pids")).string();
    // The process that would use the GPU, and one that leaves the worker's session.
    const std::string cmd = "sleep 60 & echo $! > " + out + ".tmp; setsid sleep 60 & echo $! >> " +
                            out + ".tmp; mv " + out + ".tmp " + out + "; wait";
    return {{"job", job},      {"run", 1},
            {"rank", 0},       {"seq", job.back() - 'a' + 1},
            {"action", "run"}, {"command", {"sh", "-c", cmd}},
            {"alloc", alloc}};
  }
  // The worker's GPU process and the one that left its session.
  std::pair<int, int> Pids(const std::string& job) {
    for (int i = 0; i < 1000; ++i) {
      std::ifstream in(dir_ / (job + ".pids"));
      int child = 0, escaped = 0;
      if (in >> child >> escaped) {
        stray_.emplace_back(escaped, ProcessStartTime(escaped));
        return {child, escaped};
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    ADD_FAILURE() << job << " did not start";
    return {0, 0};
  }
  // Waits for a heartbeat after `from` that satisfies `ok`.
  json Await(size_t from, const std::function<bool(const json&)>& ok) {
    for (int i = 0; i < 1000; ++i) {
      {
        std::lock_guard lk(mu_);
        for (size_t h = from; h < heartbeats_.size(); ++h) {
          if (ok(heartbeats_[h])) return heartbeats_[h];
        }
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    std::lock_guard lk(mu_);
    ADD_FAILURE() << "no such heartbeat; the last: "
                  << (heartbeats_.empty() ? json() : heartbeats_.back()).dump();
    return json();
  }
  size_t Heartbeats() {
    std::lock_guard lk(mu_);
    return heartbeats_.size();
  }
  static json Running(const json& heartbeat, const std::string& job) {
    for (const json& r : heartbeat.value("running", json::array())) {
      if (r.value("job", "") == job) return r;
    }
    return json();
  }
  static json Exit(const json& heartbeat, const std::string& job) {
    for (const json& r : heartbeat.value("exits", json::array())) {
      if (r.value("job", "") == job) return r;
    }
    return json();
  }
  // Starts gantry-agent on the fake NVML (its script dir_/nvml.json), with `env` added.
  void StartAgent(const std::vector<std::pair<std::string, std::string>>& env = {}) {
    LaunchSpec spec;
    spec.argv = {GANTRY_AGENT_BINARY,
                 "--server",
                 "http://127.0.0.1:" + std::to_string(port_),
                 "--node",
                 "n1",
                 "--state-dir",
                 (dir_ / "state").string(),
                 "--run-as",
                 "agent",
                 "--cgroups",
                 GetParam()};
    spec.argv.insert(spec.argv.end(), agent_args_.begin(), agent_args_.end());
    spec.env = {{"LD_LIBRARY_PATH", FAKE_NVML_DIR "/full"},
                {"GANTRY_FAKE_NVML", (dir_ / "nvml.json").string()}};
    spec.env.insert(spec.env.end(), env.begin(), env.end());
    spec.log_path = (dir_ / "agent.log").string();
    auto agent = Launch(spec);
    ASSERT_TRUE(agent.ok()) << agent.error().message;
    agent_ = *agent;
  }
  // kill -9 of the agent, reaped (agent_ is 0 once it is).
  void KillAgent() {
    ::kill(agent_, SIGKILL);
    for (int i = 0; i < 500 && agent_ > 0; ++i) {
      for (const Exited& x : Reap()) {
        if (x.pid == agent_) agent_ = 0;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  std::string AgentLog() const {
    std::ifstream in(dir_ / "agent.log");
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  // Whether the agent said at start that its workers' GPU devices are constrained.
  bool DevicesConstrained() const {
    const std::string log = AgentLog();
    return log.find("workers run in cgroups") != std::string::npos &&
           log.find("GPU devices are NOT constrained") == std::string::npos;
  }
  // What `file` holds once something is in it (polled for 10 s); empty, with a failure, if never.
  static std::string AwaitText(const fs::path& file) {
    for (int i = 0; i < 1000; ++i) {
      std::ifstream in(file);
      std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      if (!text.empty()) return text;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    ADD_FAILURE() << "nothing written to " << file;
    return std::string();
  }
  void SetWorkers(json workers) {
    std::lock_guard lk(mu_);
    workers_ = std::move(workers);
  }
  // A worker (seq `seq`, holding `alloc`) that tries to open each of `devices` (nodes in
  // the test's folder: device_nodes.h), writes the answers to dir_/JOB.opens (Opens) and
  // runs on.
  json Opener(const std::string& job, int seq, const std::vector<std::string>& devices,
              json alloc) const {
    const std::string out = (dir_ / (job + ".opens")).string();
    const std::string cmd = "cd " + dir_.string() + "; " + OpenEachCommand(devices) + " > " + out +
                            ".tmp; mv " + out + ".tmp " + out + "; sleep 60";
    return json{{"job", job},
                {"run", 1},
                {"rank", 0},
                {"seq", seq},
                {"action", "run"},
                {"command", {"sh", "-c", cmd}},
                {"alloc", std::move(alloc)}};
  }
  // What Opener's worker `job` wrote (polled for 10 s).
  std::string Opens(const std::string& job) const { return AwaitText(dir_ / (job + ".opens")); }
  // A made-up /proc for the agent (--proc): the nvidia-caps character major (kCapsMajor)
  // and the driver's list of MIG access devices, `mig_minors`.
  static constexpr int kCapsMajor = 236;
  void FakeProc(const std::string& mig_minors) {
    fs::create_directories(dir_ / "proc" / "driver" / "nvidia-caps");
    std::ofstream(dir_ / "proc" / "devices")
        << "Character devices:\n195 nvidia-frontend\n"
        << kCapsMajor << " nvidia-caps\n\nBlock devices:\n  8 sd\n";
    std::ofstream(dir_ / "proc" / "driver" / "nvidia-caps" / "mig-minors") << mig_minors;
    agent_args_.insert(agent_args_.end(), {"--proc", (dir_ / "proc").string()});
  }

  fs::path dir_;
  httplib::Server server_;
  std::thread serve_;
  int port_ = 0;
  std::mutex mu_;
  std::vector<json> heartbeats_;
  json workers_ = json::array();
  json heartbeat_answer_ = json::object();  // fields that replace the heartbeat answer's
  std::vector<json> watch_answers_;
  pid_t agent_ = 0;
  std::vector<std::string> agent_args_;             // more arguments for StartAgent
  std::vector<std::pair<pid_t, long long>> stray_;  // pid, start time
};

json Gpu(const std::string& uuid, const std::string& bus) {
  return {{"name", "NVIDIA H100 80GB HBM3"}, {"uuid", uuid},           {"bus", bus},
          {"memory_bytes", 85'520'809'984},  {"memory_used_bytes", 0}, {"utilization", 0}};
}

// A 1g.10gb MIG instance laid out at memory slice `start` (the fake's GPU instance id is
// its place in the GPU's list).
json Mig1g(const std::string& uuid, int start) {
  return {{"uuid", uuid}, {"profile", "1g.10gb"},     {"start", start},
          {"size", 1},    {"memory_bytes", 10 * kGB}, {"memory_used_bytes", 0}};
}

TEST_P(AgentOnFakeNvml, HeartbeatsCarryEachWorkersOwnUsageOnSharedGpus) {
  json gpus = {Gpu("GPU-a", "00000000:17:00.0"), Gpu("GPU-b", "00000000:18:00.0"),
               Gpu("GPU-c", "00000000:19:00.0")};
  gpus[2]["mig"] = json::array({Mig1g("MIG-c0", 6)});
  Script({{"gpus", gpus}});
  {
    std::lock_guard lk(mu_);
    workers_ = {Worker("a", {{"sharing", "mps"}, {"gpu", 0}, {"share_milli", 250}}),
                Worker("b", {{"sharing", "mps"}, {"gpu", 0}, {"share_milli", 500}}),
                Worker("c", {{"sharing", "exclusive"}, {"gpus", {1}}}),
                Worker("d", {{"sharing", "mig"}, {"gpu", 2}, {"mig", "1g.10gb"}, {"start", 6}})};
  }
  StartAgent();
  const auto [a, a_escaped] = Pids("a");
  const auto [b, b_escaped] = Pids("b");
  Pids("c");
  const auto [d, d_escaped] = Pids("d");
  ASSERT_GT(a, 0);
  ASSERT_GT(b, 0);
  ASSERT_GT(d, 0);
  const bool cgroups = AgentLog().find("workers run in cgroups") != std::string::npos;
  const json first = Await(0, [](const json& h) { return h["running"].size() == 4; });
  // The MIG instance with its place and NVML's GPU instance id (the fake numbers its
  // scripted instances from 0): the GPU_I_ID that gantryd's metrics carry.
  const json c0 = first["gpus"][2]["mig"][0];
  EXPECT_EQ(c0.value("uuid", ""), "MIG-c0") << first["gpus"][2].dump();
  EXPECT_EQ(c0.value("start", -1), 6);
  EXPECT_EQ(c0.value("gi_id", -1), 0) << c0.dump();
  // Its processes not on the GPU yet: idle, and using none of it.
  EXPECT_DOUBLE_EQ(Running(first, "a").value("util", -1.0), 0) << first.dump();
  EXPECT_EQ(Running(first, "a").value("vram_used_bytes", int64_t{-1}), 0);
  // The workers' processes on the GPUs, beside this test's own (someone else's).
  gpus[0]["utilization"] = 90;
  gpus[0]["memory_used_bytes"] = 20 * kGB;
  gpus[0]["processes"] = {{{"pid", a}, {"used_bytes", kGB}, {"sm_util", 20}, {"mps", true}},
                          {{"pid", a_escaped}, {"used_bytes", kGB}, {"sm_util", 5}, {"mps", true}},
                          {{"pid", b}, {"used_bytes", 2 * kGB}, {"sm_util", 10}, {"mps", true}},
                          {{"pid", ::getpid()}, {"used_bytes", 9 * kGB}, {"sm_util", 60}}};
  gpus[1]["utilization"] = 75;
  gpus[1]["memory_used_bytes"] = 30 * kGB;
  gpus[2]["mig"][0]["memory_used_bytes"] = 5 * kGB;
  gpus[2]["mig"][0]["processes"] = {{{"pid", d}, {"used_bytes", 4 * kGB}, {"sm_util", 40}}};
  Script({{"gpus", gpus}});
  const json busy = Await(Heartbeats(), [](const json& h) {
    return Running(h, "b").value("vram_used_bytes", int64_t{0}) > 0;
  });
  const json ua = Running(busy, "a"), ub = Running(busy, "b"), uc = Running(busy, "c"),
             ud = Running(busy, "d");
  // a: 20% of the GPU on a quarter of it; with cgroups, also what left its session (5%).
  EXPECT_DOUBLE_EQ(ua.value("util", -1.0), cgroups ? 1.0 : 0.8) << busy.dump();
  EXPECT_EQ(ua.value("vram_used_bytes", int64_t{0}), cgroups ? 2 * kGB : kGB);
  EXPECT_DOUBLE_EQ(ub.value("util", -1.0), 0.2) << "10% of the GPU on half of it";
  EXPECT_EQ(ub.value("vram_used_bytes", int64_t{0}), 2 * kGB);
  EXPECT_DOUBLE_EQ(uc.value("util", -1.0), 0.75) << "a whole GPU: the GPU's own numbers";
  EXPECT_EQ(uc.value("vram_used_bytes", int64_t{0}), 30 * kGB);
  EXPECT_DOUBLE_EQ(ud.value("util", -1.0), 0.4) << "a MIG instance: its processes' samples";
  EXPECT_EQ(ud.value("vram_used_bytes", int64_t{0}), 5 * kGB) << "a MIG instance: its own memory";
  // GPU 0 falls off the bus: its workers report nothing, the others go on.
  gpus[0]["lost_after"] = 0;
  Script({{"gpus", gpus}});
  const json lost =
      Await(Heartbeats(), [](const json& h) { return h["gpus"][0].value("lost", false); });
  EXPECT_FALSE(Running(lost, "a").contains("util")) << lost.dump();
  EXPECT_FALSE(Running(lost, "b").contains("util"));
  EXPECT_TRUE(Running(lost, "c").contains("util"));
  EXPECT_EQ(Running(lost, "a").value("pid", 0), Running(first, "a").value("pid", 0))
      << "still running";
}

// The chaos test's failure (issue 13): a gantryd dies with a watch answer in flight while
// the node's link is down; the link heals after its successor has started workers here, and
// TCP delivers the dead server's answer, which lacks them. It must not be applied (it would
// kill them, and their successor would fail the jobs); an answer from a later epoch is.
TEST_P(AgentOnFakeNvml, AnAnswerFromAReplacedServerArrivingLateKillsNothing) {
  Script({{"gpus", {Gpu("GPU-a", "00000000:17:00.0")}}});
  {
    std::lock_guard lk(mu_);
    workers_ = {Worker("x", {{"sharing", "exclusive"}, {"gpus", {0}}})};
    heartbeat_answer_ = {{"instance", "successor"}, {"epoch", 5}, {"version", 3}};
  }
  StartAgent();
  Pids("x");
  // The predecessor's answer (epoch 4, a higher version of its own count, no workers).
  {
    std::lock_guard lk(mu_);
    watch_answers_.push_back(
        {{"instance", "predecessor"}, {"epoch", 4}, {"version", 40}, {"workers", json::array()}});
  }
  ASSERT_TRUE([&] {
    for (int i = 0; i < 500; ++i) {
      {
        std::lock_guard lk(mu_);
        if (watch_answers_.empty()) return true;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return false;
  }()) << "the agent never watched";
  const size_t after = Heartbeats();
  const json later = Await(after + 3, [](const json&) { return true; });
  EXPECT_FALSE(Running(later, "x").is_null()) << later.dump();
  EXPECT_TRUE(Exit(later, "x").is_null()) << later.dump();
  EXPECT_EQ(AgentLog().find("no longer assigned"), std::string::npos) << AgentLog();
  // A later server's answer without the worker is applied: the worker is stopped.
  {
    std::lock_guard lk(mu_);
    watch_answers_.push_back(
        {{"instance", "next"}, {"epoch", 6}, {"version", 0}, {"workers", json::array()}});
  }
  const json stopped = Await(after, [](const json& h) { return !Exit(h, "x").is_null(); });
  EXPECT_EQ(Exit(stopped, "x").value("signal", 0), SIGKILL) << stopped.dump();
}

// A worker being stopped when its agent dies keeps its deadline: the successor re-adopts
// it as stopping and sends only the SIGKILL left, not its stop signal a second time (a
// second SIGTERM means "quit now" to some training frameworks).
TEST_P(AgentOnFakeNvml, AWorkerBeingStoppedWhenItsAgentDiesGetsItsStopSignalOnce) {
  Script({{"gpus", {Gpu("GPU-a", "00000000:17:00.0")}}});
  const fs::path terms = dir_ / "x.terms";
  json w = {{"job", "x"},
            {"run", 1},
            {"rank", 0},
            {"seq", 1},
            {"action", "run"},
            {"command",
             {"sh", "-c",
              "trap 'echo term >> " + terms.string() + "' TERM; while true; do sleep 0.05; done"}},
            {"alloc", {{"sharing", "exclusive"}, {"gpus", {0}}}}};
  SetWorkers({w});
  StartAgent();
  Await(0, [](const json& h) { return !h.value("running", json::array()).empty(); });
  w["action"] = "stop";
  w["grace_ms"] = 1500;
  SetWorkers({w});
  auto read = [&] {
    std::ifstream in(terms);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  };
  for (int i = 0; i < 300 && read().empty(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ASSERT_EQ(read(), "term\n");
  const auto signalled = std::chrono::steady_clock::now();
  KillAgent();
  ASSERT_EQ(agent_, 0);
  const size_t before = Heartbeats();
  StartAgent();  // the server still says stop
  const json ended = Await(before, [](const json& h) { return !Exit(h, "x").is_null(); });
  const double took =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - signalled).count();
  EXPECT_EQ(Exit(ended, "x").value("signal", 0), SIGKILL) << ended.dump();
  EXPECT_EQ(read(), "term\n") << "signalled again by the successor";
  EXPECT_GT(took, 1.0) << "killed before its grace was up";
  EXPECT_LT(took, 5.0);
  EXPECT_NE(AgentLog().find("job x run 1 rank 0: re-adopted"), std::string::npos) << AgentLog();
}

// One agent per state directory (its id and its workers' records are there): a second
// one refuses to start, and the first goes on.
TEST_P(AgentOnFakeNvml, ASecondAgentOnTheSameStateDirectoryRefusesToStart) {
  Script({{"gpus", {Gpu("GPU-a", "00000000:17:00.0")}}});
  StartAgent();
  Await(0, [](const json&) { return true; });
  const pid_t first = agent_;
  StartAgent();
  const pid_t second = agent_;
  agent_ = first;  // TearDown stops the first
  int code = -1;
  for (int i = 0; i < 500 && code < 0; ++i) {
    for (const Exited& e : Reap()) {
      if (e.pid == second) code = e.exit_code;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(code, 1);
  EXPECT_NE(AgentLog().find("another gantry-agent uses the state directory"), std::string::npos)
      << AgentLog();
  EXPECT_EQ(::kill(first, 0), 0) << "the first agent ended";
  const size_t now = Heartbeats();
  Await(now, [](const json&) { return true; });  // and still heartbeats
}

// Each worker may open only its own GPUs' device files (Slurm's ConstrainDevices), by
// NVML's minor numbers (GPU 2 is /dev/nvidia7 here): a whole GPU, a share of one (its
// GPU's), none for a CPU-only worker; /dev/nvidiactl always. The device nodes are made in
// the test's folder (the rule is by major and minor, not path: device_nodes.h). Without
// cgroups nothing is refused, and the agent says so at start.
TEST_P(AgentOnFakeNvml, EachWorkerOpensOnlyItsOwnGpusDeviceFiles) {
  json gpus = {Gpu("GPU-a", "00000000:17:00.0"), Gpu("GPU-b", "00000000:18:00.0"),
               Gpu("GPU-c", "00000000:19:00.0")};
  gpus[2]["minor"] = 7;
  Script({{"gpus", gpus}});
  if (const std::string why =
          MakeGpuNodes(dir_, {{"nvidia0", 0}, {"nvidia1", 1}, {"nvidia7", 7}, {"nvidiactl", 255}});
      !why.empty()) {
    GTEST_SKIP() << "cannot make device nodes here: " << why;
  }
  const std::vector<std::string> devices = {"nvidia0", "nvidia1", "nvidia7", "nvidiactl"};
  SetWorkers({Opener("whole", 1, devices, {{"sharing", "exclusive"}, {"gpus", {1}}}),
              Opener("share", 2, devices, {{"sharing", "mps"}, {"gpu", 2}, {"share_milli", 500}}),
              Opener("cpu", 3, devices, {{"sharing", "exclusive"}, {"gpus", json::array()}})});
  StartAgent();
  const std::string whole = Opens("whole"), share = Opens("share"), cpu = Opens("cpu");
  const bool constrained = DevicesConstrained();
  if (GetParam() == "off") {
    EXPECT_FALSE(constrained) << AgentLog();
    EXPECT_NE(AgentLog().find("workers are NOT isolated"), std::string::npos) << AgentLog();
  }
  if (GetParam() == "auto" && !constrained)
    GTEST_SKIP() << "no device control here: " << AgentLog();
  const std::map<std::string, std::vector<bool>> want = {// nvidia0, nvidia1, nvidia7 refused
                                                         {"whole", {true, false, true}},
                                                         {"share", {true, true, false}},
                                                         {"cpu", {true, true, true}}};
  for (const auto& [job, text] : {std::pair{"whole", whole}, {"share", share}, {"cpu", cpu}}) {
    const std::vector<bool>& w = want.at(job);
    EXPECT_EQ(Refused(text, "nvidia0"), constrained && w[0]) << job << ":\n" << text;
    EXPECT_EQ(Refused(text, "nvidia1"), constrained && w[1]) << job << ":\n" << text;
    EXPECT_EQ(Refused(text, "nvidia7"), constrained && w[2]) << job << ":\n" << text;
    EXPECT_FALSE(Refused(text, "nvidiactl")) << job << ":\n" << text;
    EXPECT_NE(text.find("nvidiactl "), std::string::npos) << job << ":\n" << text;
  }
}

// An sbatch job's worker names its GPUs by index, as Slurm's gres does. Where its device
// rules hide the node's other GPUs, CUDA sees only its own, numbered from 0: so are they
// named (Slurm under ConstrainDevices: gres_use_local_device_index), in index order, while
// GANTRY_GPUS (SLURM_JOB_GPUS) keeps the node's indexes; unconstrained, the node's indexes.
// A native job's are UUIDs either way.
TEST_P(AgentOnFakeNvml, AnSbatchJobsGpusByIndexCountFromZeroWhereItsDeviceRulesHideTheOthers) {
  json gpus = json::array();
  for (int i = 0; i < 4; ++i)
    gpus.push_back(Gpu("GPU-" + std::to_string(i), "00000000:" + std::to_string(17 + i) + ":00.0"));
  Script({{"gpus", gpus}});
  auto worker = [&](const std::string& job, int seq, std::vector<int> held, bool by_index) {
    const std::string out = (dir_ / (job + ".opens")).string();
    json w = {{"job", job},
              {"run", 1},
              {"rank", 0},
              {"seq", seq},
              {"action", "run"},
              {"command",
               {"sh", "-c",
                "echo \"$CUDA_VISIBLE_DEVICES $GANTRY_GPUS\" > " + out + ".tmp; mv " + out +
                    ".tmp " + out + "; sleep 60"}},
              {"alloc", {{"sharing", "exclusive"}, {"gpus", held}}}};
    if (by_index) w["gpu_names"] = "index";
    return w;
  };
  SetWorkers({worker("pair", 1, {3, 1}, true), worker("one", 2, {2}, true),
              worker("native", 3, {0}, false)});
  StartAgent();
  const std::string pair = Opens("pair"), one = Opens("one"), native = Opens("native");
  if (DevicesConstrained()) {
    EXPECT_EQ(pair, "0,1 1,3\n");
    EXPECT_EQ(one, "0 2\n");
  } else {
    EXPECT_EQ(pair, "1,3 1,3\n");
    EXPECT_EQ(one, "2 2\n");
  }
  EXPECT_EQ(native, "GPU-0 0\n");
}

// At a node's size: eight GPUs whose minor numbers run backwards (GPU i is
// /dev/nvidia(7-i)), shared by five workers at once (four, two and one whole GPUs, and
// two MPS shares of the last GPU): each opens exactly its own GPUs' device files.
TEST_P(AgentOnFakeNvml, OnAnEightGpuNodeEachOfFiveWorkersOpensExactlyItsOwnGpus) {
  json gpus = json::array();
  std::vector<std::pair<std::string, int>> nodes = {{"nvidiactl", 255}};
  std::vector<std::string> names;
  for (int i = 0; i < 8; ++i) {
    json g = Gpu("GPU-" + std::to_string(i), "00000000:" + std::to_string(17 + i) + ":00.0");
    g["minor"] = 7 - i;
    gpus.push_back(g);
    nodes.emplace_back("nvidia" + std::to_string(7 - i), 7 - i);
    names.push_back("nvidia" + std::to_string(7 - i));
  }
  Script({{"gpus", gpus}});
  if (const std::string why = MakeGpuNodes(dir_, nodes); !why.empty())
    GTEST_SKIP() << "cannot make device nodes here: " << why;
  names.push_back("nvidiactl");
  const std::map<std::string, std::pair<json, std::vector<int>>> workers = {
      // alloc, its GPUs (indexes)
      {"four", {{{"sharing", "exclusive"}, {"gpus", {0, 1, 2, 3}}}, {0, 1, 2, 3}}},
      {"two", {{{"sharing", "exclusive"}, {"gpus", {4, 5}}}, {4, 5}}},
      {"one", {{{"sharing", "exclusive"}, {"gpus", {6}}}, {6}}},
      {"mps1", {{{"sharing", "mps"}, {"gpu", 7}, {"share_milli", 500}}, {7}}},
      {"mps2", {{{"sharing", "mps"}, {"gpu", 7}, {"share_milli", 500}}, {7}}}};
  json list = json::array();
  int seq = 0;
  for (const auto& [job, w] : workers) list.push_back(Opener(job, ++seq, names, w.first));
  SetWorkers(list);
  StartAgent();
  Await(0, [](const json& h) { return h.value("running", json::array()).size() == 5; });
  const bool constrained = DevicesConstrained();
  if (GetParam() == "auto" && !constrained)
    GTEST_SKIP() << "no device control here: " << AgentLog();
  for (const auto& [job, w] : workers) {
    const std::string text = Opens(job);
    ASSERT_FALSE(text.empty()) << job << " wrote nothing";
    for (int gpu = 0; gpu < 8; ++gpu) {
      const bool own = std::find(w.second.begin(), w.second.end(), gpu) != w.second.end();
      EXPECT_EQ(Refused(text, "nvidia" + std::to_string(7 - gpu)), constrained && !own)
          << job << ", GPU " << gpu << ":\n"
          << text;
    }
    EXPECT_FALSE(Refused(text, "nvidiactl")) << job << ":\n" << text;
  }
}

// The device rules belong to the worker's cgroup, not to its agent: with the agent
// killed (kill -9) the worker still may not open another GPU's device file, nor once a
// new agent has re-adopted it. The worker opens the devices each time the test asks it
// (a file `go`), so every check is made by the same running process.
TEST_P(AgentOnFakeNvml, AWorkersDeviceRulesOutliveItsAgent) {
  Script({{"gpus", {Gpu("GPU-a", "00000000:17:00.0"), Gpu("GPU-b", "00000000:18:00.0")}}});
  if (const std::string why =
          MakeGpuNodes(dir_, {{"nvidia0", 0}, {"nvidia1", 1}, {"nvidiactl", 255}});
      !why.empty()) {
    GTEST_SKIP() << "cannot make device nodes here: " << why;
  }
  const std::string loop = "cd " + dir_.string() +
                           "; n=0; while :; do if [ -e go ]; then rm go; n=$((n+1)); (" +
                           OpenEachCommand({"nvidia0", "nvidia1", "nvidiactl"}) +
                           ") > opens.tmp; mv opens.tmp opens$n; fi; sleep 0.02; done";
  SetWorkers({{{"job", "x"},
               {"run", 1},
               {"rank", 0},
               {"seq", 1},
               {"action", "run"},
               {"command", {"sh", "-c", loop}},
               {"alloc", {{"sharing", "exclusive"}, {"gpus", {1}}}}}});
  StartAgent();
  Await(0, [](const json& h) { return !Running(h, "x").is_null(); });
  const bool constrained = DevicesConstrained();
  if (GetParam() == "auto" && !constrained)
    GTEST_SKIP() << "no device control here: " << AgentLog();
  int asked = 0;
  auto opens = [&] {  // asks the worker to open each device; its answer
    std::ofstream(dir_ / "go").flush();
    return AwaitText(dir_ / ("opens" + std::to_string(++asked)));
  };
  auto expect = [&](const std::string& when, const std::string& text) {
    EXPECT_EQ(Refused(text, "nvidia0"), constrained) << when << ":\n" << text;
    EXPECT_FALSE(Refused(text, "nvidia1")) << when << ":\n" << text;
    EXPECT_FALSE(Refused(text, "nvidiactl")) << when << ":\n" << text;
    EXPECT_NE(text.find("nvidiactl "), std::string::npos) << when << ":\n" << text;
  };
  expect("under its agent", opens());
  KillAgent();
  ASSERT_EQ(agent_, 0);
  expect("with its agent killed", opens());
  const size_t before = Heartbeats();
  StartAgent();
  Await(before, [](const json& h) { return !Running(h, "x").is_null(); });
  EXPECT_NE(AgentLog().find("job x run 1 rank 0: re-adopted"), std::string::npos) << AgentLog();
  expect("re-adopted by a new agent", opens());
}

// MIG workers sharing a GPU: each may open its GPU's /dev/nvidiaN and its own instance's
// two access devices (nvidia-caps: GPU instance, compute instance), not another
// instance's, also one made later for another worker. The driver's list of access devices
// is a made-up /proc (mig-minors, devices: major 236 for nvidia-caps); the nodes are made
// in the test's folder. GPU 0 has three instances laid out beforehand (GPU instances 0-2);
// on GPU 1 the agent makes the worker's (the fake numbers made GPU instances from 20).
TEST_P(AgentOnFakeNvml, MigWorkersOnOneGpuOpenOnlyTheirOwnInstancesAccessDevices) {
  json gpus = {Gpu("GPU-a", "00000000:17:00.0"), Gpu("GPU-b", "00000000:18:00.0")};
  for (int i = 0; i < 3; ++i) gpus[0]["mig"].push_back(Mig1g("MIG-a" + std::to_string(i), i));
  gpus[1]["mig"] = json::array();
  Script({{"gpus", gpus}});
  // Access devices: GPU g's GPU instance i is cap(100g + 2i + 10), its compute instance 0 the next.
  auto cap = [](int gpu, int gi, bool ci) { return 100 * gpu + 2 * gi + 10 + (ci ? 1 : 0); };
  std::vector<std::pair<std::string, int>> caps = {{"cap1", 1}, {"cap2", 2}};  // config, monitor
  std::string minors = "config 1\nmonitor 2\n";
  for (int g = 0; g < 2; ++g) {
    for (int gi : {0, 1, 2, 20}) {
      const std::string at = "gpu" + std::to_string(g) + "/gi" + std::to_string(gi);
      minors += at + "/access " + std::to_string(cap(g, gi, false)) + "\n" + at + "/ci0/access " +
                std::to_string(cap(g, gi, true)) + "\n";
      caps.emplace_back("cap" + std::to_string(cap(g, gi, false)), cap(g, gi, false));
      caps.emplace_back("cap" + std::to_string(cap(g, gi, true)), cap(g, gi, true));
    }
  }
  FakeProc(minors);
  std::vector<std::string> names = {"nvidia0", "nvidia1", "nvidiactl"};
  if (std::string why = MakeGpuNodes(dir_, {{"nvidia0", 0}, {"nvidia1", 1}, {"nvidiactl", 255}});
      !why.empty()) {
    GTEST_SKIP() << "cannot make device nodes here: " << why;
  }
  ASSERT_EQ(MakeGpuNodes(dir_, caps, kCapsMajor), "");
  for (const auto& [name, minor] : caps) names.push_back(name);
  // job -> its GPU, GPU instance
  const std::map<std::string, std::pair<int, int>> own = {
      {"a0", {0, 0}}, {"a2", {0, 2}}, {"made", {1, 20}}};
  SetWorkers(
      {Opener("a0", 1, names, {{"sharing", "mig"}, {"gpu", 0}, {"mig", "1g.10gb"}, {"start", 0}}),
       Opener("a2", 2, names, {{"sharing", "mig"}, {"gpu", 0}, {"mig", "1g.10gb"}, {"start", 2}}),
       Opener("made", 3, names,
              {{"sharing", "mig"},
               {"gpu", 1},
               {"mig", "1g.10gb"},
               {"start", 0},
               {"create", true},
               {"memory_slices", 1},
               {"compute_slices", 1}})});
  StartAgent();
  const json beat =
      Await(0, [](const json& h) { return h.value("running", json::array()).size() == 3; });
  const bool constrained = DevicesConstrained();
  // What the heartbeat says keeps workers apart (for `gantry nodes`).
  EXPECT_EQ(
      beat["isolation"],
      (json{{"cgroups", GetParam() != "off"}, {"gpu_devices", constrained}, {"mig", constrained}}))
      << beat.dump();
  if (GetParam() == "auto" && !constrained)
    GTEST_SKIP() << "no device control here: " << AgentLog();
  EXPECT_EQ(AgentLog().find("MIG instances are fenced from each other") != std::string::npos,
            constrained)
      << AgentLog();
  for (const auto& [job, where] : own) {
    const auto [gpu, gi] = where;
    const std::string text = Opens(job);
    ASSERT_FALSE(text.empty()) << job << " wrote nothing";
    for (int g = 0; g < 2; ++g) {
      EXPECT_EQ(Refused(text, "nvidia" + std::to_string(g)), constrained && g != gpu)
          << job << ":\n"
          << text;
      for (int i : {0, 1, 2, 20}) {
        for (bool ci : {false, true}) {
          const bool mine = g == gpu && i == gi;
          // Another GPU's instances are out of reach through its /dev/nvidiaN already; its
          // access devices are not denied (its own GPU's are what the rules must cover).
          if (g != gpu) continue;
          EXPECT_EQ(Refused(text, "cap" + std::to_string(cap(g, i, ci))), constrained && !mine)
              << job << ": GPU " << g << " GPU instance " << i << (ci ? " compute instance 0" : "")
              << ":\n"
              << text;
        }
      }
    }
    EXPECT_FALSE(Refused(text, "nvidiactl")) << job << ":\n" << text;
    EXPECT_FALSE(Refused(text, "cap1")) << job << ": config\n" << text;
    EXPECT_NE(text.find("cap1 "), std::string::npos) << job << ":\n" << text;
  }
}

// Where the driver's list has no access devices for a GPU (here /dev/nvidia5), its MIG
// workers run unfenced and the agent says so, naming the job and the GPU.
TEST_P(AgentOnFakeNvml, AMigWorkerTheDriversListDoesNotCoverRunsUnfencedAndTheAgentSaysSo) {
  json gpus = {Gpu("GPU-a", "00000000:17:00.0")};
  gpus[0]["minor"] = 5;
  gpus[0]["mig"] = json::array({Mig1g("MIG-a0", 0)});
  Script({{"gpus", gpus}});
  FakeProc("config 1\nmonitor 2\ngpu0/gi0/access 3\ngpu0/gi0/ci0/access 4\n");
  SetWorkers({Worker("a", {{"sharing", "mig"}, {"gpu", 0}, {"mig", "1g.10gb"}, {"start", 0}})});
  StartAgent();
  Pids("a");
  Await(0, [](const json& h) { return !Running(h, "a").is_null(); });
  const bool constrained = DevicesConstrained();
  if (GetParam() == "auto" && !constrained)
    GTEST_SKIP() << "no device control here: " << AgentLog();
  EXPECT_EQ(
      AgentLog().find(
          "job a: the MIG instances of GPU 0 are NOT fenced from it (in MIG-a0): the driver's "
          "mig-minors lists no access devices for /dev/nvidia5") != std::string::npos,
      constrained)
      << AgentLog();
}

// A job with an image runs in a container that gets its GPUs as devices (where the node
// has no CDI specs): /dev/nvidiaN by NVML's minor number, not the index, and for a MIG
// instance also its two access devices, with or without cgroups. podman is a script
// here that writes down how it was called.
TEST_P(AgentOnFakeNvml, AContainerGetsItsGpusDeviceFilesByMinorAndItsMigInstancesAccessDevices) {
  json gpus = {Gpu("GPU-a", "00000000:17:00.0"), Gpu("GPU-b", "00000000:18:00.0")};
  gpus[0]["minor"] = 7;
  gpus[1]["minor"] = 3;
  gpus[1]["mig"] = json::array({Mig1g("MIG-b0", 0)});
  Script({{"gpus", gpus}});
  FakeProc(
      "config 1\nmonitor 2\ngpu3/gi0/access 30\ngpu3/gi0/ci0/access 31\ngpu3/gi1/access 39\n"
      "gpu3/gi1/ci0/access 40\n");
  const fs::path podman = dir_ / "podman";
  {
    std::ofstream script(podman);
    script << "#!/bin/sh\n[ \"$1\" = run ] && echo \"$*\" >> " << (dir_ / "podman.log").string()
           << "\nexit 0\n";
  }
  fs::permissions(podman, fs::perms::owner_all);
  agent_args_.insert(agent_args_.end(), {"--container-run", podman.string() + " run"});
  auto worker = [](const std::string& job, int seq, const json& alloc) {
    return json{{"job", job},          {"run", 1},
                {"rank", 0},           {"seq", seq},
                {"action", "run"},     {"image", "docker.io/library/busybox:1.36"},
                {"command", {"true"}}, {"alloc", alloc}};
  };
  SetWorkers(
      {worker("whole", 1, {{"sharing", "exclusive"}, {"gpus", {0}}}),
       worker("mig", 2, {{"sharing", "mig"}, {"gpu", 1}, {"mig", "1g.10gb"}, {"start", 0}})});
  StartAgent();
  std::map<std::string, std::string> runs;  // container name's seq -> podman's arguments
  for (int i = 0; i < 1000 && runs.size() < 2; ++i) {
    std::ifstream in(dir_ / "podman.log");
    for (std::string line; std::getline(in, line);) {
      for (const char* seq : {"-1-1-0 ", "-2-1-0 "}) {
        if (line.find(seq) != std::string::npos) runs[seq] = line;
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_EQ(runs.size(), 2u) << AgentLog();
  const std::string whole = runs["-1-1-0 "], mig = runs["-2-1-0 "];
  EXPECT_NE(whole.find("--device /dev/nvidia7 "), std::string::npos) << whole;
  EXPECT_EQ(whole.find("--device /dev/nvidia0 "), std::string::npos) << whole;
  EXPECT_EQ(whole.find("nvidia-caps"), std::string::npos) << whole;
  EXPECT_NE(mig.find("--device /dev/nvidia3 --device /dev/nvidia-caps/nvidia-cap30 --device "
                     "/dev/nvidia-caps/nvidia-cap31 "),
            std::string::npos)
      << mig;
  EXPECT_EQ(mig.find("nvidia-cap39"), std::string::npos) << mig;
  EXPECT_EQ(mig.find("/dev/nvidia7"), std::string::npos) << mig;
}

// At a node's size: eight GPUs in MIG mode, seven 1g.10gb instances each, a worker on
// every instance (56), with the driver's whole list as an 8-GPU H100 driver writes it (32
// GPU minors x 15 GPU instances x (1 + 8 compute instances), numbered from 3 after config
// and monitor): each worker opens its GPU's /dev/nvidiaN and its own instance's two access
// devices, and none of its GPU's other instances' nor another GPU's /dev/nvidiaN.
TEST_P(AgentOnFakeNvml, OnAnEightGpuNodeInMigModeEachOfFiftySixWorkersOpensOnlyItsOwnInstance) {
  constexpr int kGpus = 8, kInstances = 7;
  auto cap = [](int gpu, int gi, int ci) { return 3 + 135 * gpu + 9 * gi + (ci < 0 ? 0 : 1 + ci); };
  std::string minors = "config 1\nmonitor 2\n";
  for (int g = 0; g < 32; ++g) {
    for (int gi = 0; gi < 15; ++gi) {
      const std::string at = "gpu" + std::to_string(g) + "/gi" + std::to_string(gi);
      minors += at + "/access " + std::to_string(cap(g, gi, -1)) + "\n";
      for (int ci = 0; ci < 8; ++ci) {
        minors +=
            at + "/ci" + std::to_string(ci) + "/access " + std::to_string(cap(g, gi, ci)) + "\n";
      }
    }
  }
  FakeProc(minors);
  json gpus = json::array();
  std::vector<std::pair<std::string, int>> nodes = {{"nvidiactl", 255}}, caps;
  for (int g = 0; g < kGpus; ++g) {
    json gpu = Gpu("GPU-" + std::to_string(g), "00000000:" + std::to_string(17 + g) + ":00.0");
    gpu["mig"] = json::array();
    for (int i = 0; i < kInstances; ++i) {
      gpu["mig"].push_back(Mig1g("MIG-" + std::to_string(g) + "-" + std::to_string(i), i));
      for (int ci : {-1, 0})
        caps.emplace_back("cap" + std::to_string(cap(g, i, ci)), cap(g, i, ci));
    }
    gpus.push_back(gpu);
    nodes.emplace_back("nvidia" + std::to_string(g), g);
  }
  Script({{"gpus", gpus}});
  if (std::string why = MakeGpuNodes(dir_, nodes); !why.empty())
    GTEST_SKIP() << "cannot make device nodes here: " << why;
  ASSERT_EQ(MakeGpuNodes(dir_, caps, kCapsMajor), "");
  json list = json::array();
  for (int g = 0; g < kGpus; ++g) {
    std::vector<std::string> names = {
        "nvidiactl"};  // every /dev/nvidiaN, and its GPU's access devices
    for (int other = 0; other < kGpus; ++other) names.push_back("nvidia" + std::to_string(other));
    for (int i = 0; i < kInstances; ++i) {
      for (int ci : {-1, 0}) names.push_back("cap" + std::to_string(cap(g, i, ci)));
    }
    for (int i = 0; i < kInstances; ++i) {
      list.push_back(Opener("g" + std::to_string(g) + "i" + std::to_string(i),
                            1 + g * kInstances + i, names,
                            {{"sharing", "mig"}, {"gpu", g}, {"mig", "1g.10gb"}, {"start", i}}));
    }
  }
  SetWorkers(list);
  StartAgent();
  Await(0, [](const json& h) {
    return h.value("running", json::array()).size() == kGpus * kInstances;
  });
  const bool constrained = DevicesConstrained();
  if (GetParam() == "auto" && !constrained)
    GTEST_SKIP() << "no device control here: " << AgentLog();
  EXPECT_EQ(AgentLog().find("MIG instances are fenced from each other: 4320 access devices") !=
                std::string::npos,
            constrained)
      << AgentLog();
  for (int g = 0; g < kGpus; ++g) {
    for (int i = 0; i < kInstances; ++i) {
      const std::string job = "g" + std::to_string(g) + "i" + std::to_string(i);
      const std::string text = Opens(job);
      ASSERT_FALSE(text.empty()) << job << " wrote nothing";
      for (int other = 0; other < kGpus; ++other) {
        EXPECT_EQ(Refused(text, "nvidia" + std::to_string(other)), constrained && other != g)
            << job << ":\n"
            << text;
      }
      for (int j = 0; j < kInstances; ++j) {
        for (int ci : {-1, 0}) {
          EXPECT_EQ(Refused(text, "cap" + std::to_string(cap(g, j, ci))), constrained && j != i)
              << job << ": instance " << j << (ci < 0 ? "" : " compute instance 0") << ":\n"
              << text;
        }
      }
      EXPECT_FALSE(Refused(text, "nvidiactl")) << job << ":\n" << text;
    }
  }
}

// A worker runs on CPUs of its own, near its GPUs: a sysfs of the test's (--sys) puts two
// of this machine's CPUs on NUMA nodes 0 and 1, and the GPUs' PCI devices likewise; a
// worker of one CPU on GPU 1 gets the CPU of node 1, though the other comes first, and
// the next, on GPU 0, the other. A restarted agent keeps them as they were.
TEST_P(AgentOnFakeNvml, AWorkerRunsOnCpusOfItsOwnNearItsGpus) {
  const std::vector<int> cpus = CpuTopology::Allowed();
  if (cpus.size() < 2) GTEST_SKIP() << "one CPU: nothing to tell apart";
  const fs::path sys = dir_ / "sys";
  for (int i = 0; i < 2; ++i) {
    const fs::path cpu =
        sys / "devices/system/cpu" / ("cpu" + std::to_string(cpus[i])) / "topology";
    fs::create_directories(cpu);
    std::ofstream(cpu / "physical_package_id") << i << "\n";
    std::ofstream(cpu / "core_id") << "0\n";
    fs::create_directories(sys / "devices/system/node" / ("node" + std::to_string(i)));
    std::ofstream(sys / "devices/system/node" / ("node" + std::to_string(i)) / "cpulist")
        << cpus[i] << "\n";
    const fs::path bus = sys / "bus/pci/devices" / (i == 0 ? "0000:17:00.0" : "0000:18:00.0");
    fs::create_directories(bus);
    std::ofstream(bus / "numa_node") << i << "\n";
  }
  agent_args_.insert(agent_args_.end(), {"--sys", sys.string()});
  Script({{"gpus", {Gpu("GPU-a", "00000000:17:00.0"), Gpu("GPU-b", "00000000:18:00.0")}}});
  auto worker = [&](const std::string& job, int gpu) {
    const std::string out = (dir_ / (job + ".cpus")).string();
    return json{{"job", job},
                {"run", 1},
                {"rank", 0},
                {"seq", job == "x" ? 1 : 2},
                {"action", "run"},
                {"command",
                 {"sh", "-c",
                  "grep Cpus_allowed_list /proc/self/status | cut -f2 > " + out + ".tmp; mv " +
                      out + ".tmp " + out + "; sleep 60"}},
                {"alloc", {{"sharing", "exclusive"}, {"gpus", {gpu}}}},
                {"limits", {{"cpus_milli", 1000}}}};
  };
  SetWorkers({worker("x", 1)});
  StartAgent();
  EXPECT_EQ(AwaitText(dir_ / "x.cpus"), std::to_string(cpus[1]) + "\n") << "near GPU 1";
  SetWorkers({worker("x", 1), worker("y", 0)});
  EXPECT_EQ(AwaitText(dir_ / "y.cpus"), std::to_string(cpus[0]) + "\n") << "near GPU 0";
  // y ends; kill -9 and a new agent: it re-adopts x and keeps its CPU as used, so a new
  // worker on GPU 1 gets the other CPU, far from its GPU, rather than x's (which it would
  // get, near and seemingly free, had the CPU been forgotten).
  const size_t before = Heartbeats();
  SetWorkers({worker("x", 1)});
  Await(before, [](const json& h) { return !Exit(h, "y").is_null(); });
  KillAgent();
  json z = worker("z", 1);
  z["seq"] = 3;
  SetWorkers({worker("x", 1), z});
  StartAgent();
  EXPECT_EQ(AwaitText(dir_ / "z.cpus"), std::to_string(cpus[0]) + "\n") << "x's is in use";
  EXPECT_NE(AgentLog().find("re-adopted"), std::string::npos) << AgentLog();
}

INSTANTIATE_TEST_SUITE_P(Cgroups, AgentOnFakeNvml, ::testing::Values("auto", "off"));

// ---------------------------------------------------------------- MIG on mig_managed pools
// (cgroups play no part: run without them).
class AgentMakesMig : public AgentOnFakeNvml {
 protected:
  // A worker that writes the MIG UUID it was given, then runs until stopped.
  json MigWorker(const std::string& job, int gpu, const std::string& profile, int start,
                 int memory_slices, int compute_slices, bool create) {
    const std::string out = (dir_ / (job + ".visible")).string();
    json alloc = {{"sharing", "mig"}, {"gpu", gpu}, {"mig", profile}, {"start", start}};
    if (create) {
      alloc["create"] = true;
      alloc["memory_slices"] = memory_slices;
      alloc["compute_slices"] = compute_slices;
    }
    return {{"job", job},
            {"run", 1},
            {"rank", 0},
            {"seq", 100 + job.back()},
            {"action", "run"},
            {"command",
             {"sh", "-c",
              "echo $CUDA_VISIBLE_DEVICES > " + out + ".tmp; mv " + out + ".tmp " + out +
                  "; exec sleep 60"}},
            {"alloc", alloc}};
  }
  std::string Visible(const std::string& job) {
    for (int i = 0; i < 1000; ++i) {
      std::ifstream in(dir_ / (job + ".visible"));
      std::string v;
      if (in >> v) return v;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    ADD_FAILURE() << job << " did not start";
    return "";
  }
  static json Mig(const json& heartbeat, int gpu, int start) {
    for (const json& m : heartbeat["gpus"][static_cast<size_t>(gpu)].value("mig", json::array())) {
      if (m.value("start", -1) == start) return m;
    }
    return json();
  }
  // The agent, on a driver whose state outlives it (the fake's state file), runs worker f
  // in an instance it made, and is killed (agent_ is 0 once reaped); returns the agent's
  // environment, for its successor.
  std::vector<std::pair<std::string, std::string>> RunFInAMadeInstanceAndKillTheAgent() {
    Script({{"gpus", Gpus()}});
    const std::vector<std::pair<std::string, std::string>> env = {
        {"GANTRY_FAKE_NVML_STATE", (dir_ / "driver.json").string()}};
    SetWorkers({MigWorker("f", 0, "7g.80gb", 0, 8, 7, true)});
    StartAgent(env);
    EXPECT_EQ(Visible("f"), "MIG-GPU-a-20");
    KillAgent();
    return env;
  }
  // GPU 0 in MIG mode with nothing on it; GPU 1 in MIG mode with an instance laid out
  // beforehand (1g.10gb at memory slice 6).
  json Gpus() {
    json gpus = {Gpu("GPU-a", "00000000:17:00.0"), Gpu("GPU-b", "00000000:18:00.0")};
    gpus[0]["mig"] = json::array();
    gpus[1]["mig"] = json::array({Mig1g("MIG-b6", 6)});
    return gpus;
  }
};

TEST_P(AgentMakesMig, CreatesEachInstanceAtItsPlacementAndDestroysItBeforeTheExitIsReported) {
  json gpus = Gpus();
  Script({{"gpus", gpus}});
  SetWorkers(
      {MigWorker("a", 0, "3g.40gb", 4, 4, 3, true), MigWorker("b", 1, "1g.10gb", 6, 1, 1, false)});
  StartAgent();
  EXPECT_EQ(Visible("a"), "MIG-GPU-a-20") << "the instance the agent created";
  EXPECT_EQ(Visible("b"), "MIG-b6") << "not mig_managed: the instance laid out beforehand";
  const json made = Await(0, [](const json& h) { return !Mig(h, 0, 4).is_null(); });
  // With the GPU instance id NVML gave the created instance (the fake numbers them from 20).
  EXPECT_EQ(Mig(made, 0, 4),
            (json{{"uuid", "MIG-GPU-a-20"}, {"profile", "3g.40gb"}, {"start", 4}, {"gi_id", 20}}));
  EXPECT_TRUE(fs::exists(dir_ / "state" / "mig.json")) << "kept for a restarted agent";
  // Its processes still hold the instance when the worker is stopped (NVML: in use): the
  // exit waits until the instance is gone, so the server frees the slices only then.
  gpus[0]["busy"] = {4};
  Script({{"gpus", gpus}});
  SetWorkers({MigWorker("b", 1, "1g.10gb", 6, 1, 1, false)});
  const size_t stopped = Heartbeats();
  std::this_thread::sleep_for(std::chrono::milliseconds(600));
  {
    std::lock_guard lk(mu_);
    for (size_t h = stopped; h < heartbeats_.size(); ++h) {
      EXPECT_TRUE(Exit(heartbeats_[h], "a").is_null())
          << "reported before its instance was destroyed";
    }
    EXPECT_FALSE(Mig(heartbeats_.back(), 0, 4).is_null());
  }
  EXPECT_NE(AgentLog().find(
                "cannot destroy MIG instance MIG-GPU-a-20 yet: nvmlComputeInstanceDestroy: In use"),
            std::string::npos)
      << AgentLog();
  gpus[0].erase("busy");
  Script({{"gpus", gpus}});
  const json ended = Await(stopped, [](const json& h) { return !Exit(h, "a").is_null(); });
  EXPECT_TRUE(Mig(ended, 0, 4).is_null()) << "destroyed before the exit went out: " << ended.dump();
  EXPECT_EQ(Exit(ended, "a").value("note", "x"), "");
  EXPECT_FALSE(Exit(ended, "a").contains("drain"));
  EXPECT_FALSE(fs::exists(dir_ / "state" / "mig.json"));
  // The instance laid out beforehand is used, and left when its worker ends.
  SetWorkers(json::array());
  const json b_ended = Await(Heartbeats(), [](const json& h) { return !Exit(h, "b").is_null(); });
  EXPECT_EQ(Mig(b_ended, 1, 6).value("uuid", ""), "MIG-b6");
  EXPECT_EQ(AgentLog().find("MIG instance MIG-b6"), std::string::npos)
      << "never touched: " << AgentLog();
}

TEST_P(AgentMakesMig, ACreationThatFailsEndsTheWorkerLostWithTheReasonAndAsksForADrain) {
  json gpus = Gpus();
  gpus[0]["fail_create"] = "insufficient_resources";
  Script({{"gpus", gpus}});
  SetWorkers({MigWorker("c", 0, "1g.10gb", 0, 1, 1, true),
              // Over the instance laid out beforehand (slices 4-7 hold slice 6): never moved.
              MigWorker("d", 1, "3g.40gb", 4, 4, 3, true),
              // Not mig_managed and nothing there: the job's failure, as before.
              MigWorker("e", 0, "1g.10gb", 2, 1, 1, false)});
  StartAgent();
  const json h = Await(0, [](const json& x) { return x["exits"].size() == 3; });
  const json c = Exit(h, "c"), d = Exit(h, "d"), e = Exit(h, "e");
  const std::string why_c =
      "cannot create MIG instance 1g.10gb at memory slice 0 on GPU 0 (GPU-a): "
      "nvmlDeviceCreateGpuInstanceWithPlacement: Insufficient Resources";
  EXPECT_EQ(c.value("note", ""), why_c);
  EXPECT_EQ(c.value("drain", ""), why_c);
  EXPECT_TRUE(c.value("lost", false)) << "not the job's fault: it goes back to pending";
  EXPECT_TRUE(d.value("lost", false));
  EXPECT_NE(d.value("drain", "")
                .find("cannot create MIG instance 3g.40gb at memory slice 4 on GPU 1 (GPU-b): "
                      "MIG instance MIG-b6 (1g.10gb at memory slice 6) overlaps memory slices 4-7"),
            std::string::npos)
      << d.dump();
  EXPECT_FALSE(e.value("lost", true));
  EXPECT_FALSE(e.contains("drain"));
  EXPECT_NE(e.value("note", "").find("no MIG instance 1g.10gb at memory slice 2 on GPU 0"),
            std::string::npos)
      << e.dump();
  EXPECT_TRUE(Mig(h, 0, 0).is_null());
  EXPECT_EQ(Mig(h, 1, 6).value("uuid", ""), "MIG-b6");
  std::ifstream log(dir_ / "state" / "logs" / "199-1-0.log");  // seq 100 + 'c'
  std::string first;
  std::getline(log, first);
  EXPECT_EQ(first, "gantry-agent: cannot start: " + why_c) << "the job's own log says why";
}

// An agent killed with its instance made restarts and destroys it (mig.json), as the
// driver keeps instances across processes (the fake's state file stands for that).
TEST_P(AgentMakesMig, ARestartedAgentDestroysWhatItsPreviousRunMade) {
  const auto env = RunFInAMadeInstanceAndKillTheAgent();
  ASSERT_EQ(agent_, 0);
  // Its worker is gone too (it outlives the agent under its shim, to be re-adopted:
  // killed here, as after a reboot).
  for (const auto& e : fs::directory_iterator(dir_ / "state" / "workers")) {
    if (e.path().extension() != ".json") continue;
    std::ifstream in(e.path());
    const json record = json::parse(in);
    ::kill(-record.at("pid").get<pid_t>(), SIGKILL);
  }
  SetWorkers(json::array());  // the server requeued it meanwhile
  const size_t before = Heartbeats();
  StartAgent(env);
  const json after = Await(before, [](const json& h) { return !Exit(h, "f").is_null(); });
  const json h = Await(before, [](const json& x) { return Mig(x, 0, 0).is_null(); });
  EXPECT_NE(
      AgentLog().find(
          "MIG instance MIG-GPU-a-20 (7g.80gb at memory slice 0) on GPU 0 was made by a previous "
          "gantry-agent: destroying it"),
      std::string::npos)
      << AgentLog();
  EXPECT_TRUE(Exit(after, "f").value("lost", false));
  EXPECT_FALSE(h.is_null());
  EXPECT_FALSE(fs::exists(dir_ / "state" / "mig.json"));
}

// A worker that a restarted agent re-adopts (it ran on under its shim) keeps its MIG
// instance while it runs; the instance goes once the worker ends.
TEST_P(AgentMakesMig, ARestartedAgentKeepsTheMigInstanceOfAWorkerItReadopts) {
  const auto env = RunFInAMadeInstanceAndKillTheAgent();
  ASSERT_EQ(agent_, 0);
  const size_t before = Heartbeats();
  StartAgent(env);  // the server still lists the worker
  auto running = [](const json& h) {
    for (const json& r : h.value("running", json::array())) {
      if (r.value("job", "") == "f") return true;
    }
    return false;
  };
  const json h = Await(before, running);
  EXPECT_FALSE(Mig(h, 0, 0).is_null())
      << "the instance of a running worker was destroyed: " << h.dump();
  EXPECT_NE(AgentLog().find("job f run 1 rank 0: re-adopted"), std::string::npos) << AgentLog();
  EXPECT_EQ(AgentLog().find("destroying it"), std::string::npos) << AgentLog();
  SetWorkers(json::array());  // stopped: it ends, and its instance goes
  const json ended = Await(Heartbeats(), [](const json& x) { return !Exit(x, "f").is_null(); });
  EXPECT_TRUE(Mig(ended, 0, 0).is_null()) << ended.dump();
  EXPECT_FALSE(fs::exists(dir_ / "state" / "mig.json"));
}

INSTANTIATE_TEST_SUITE_P(NoCgroups, AgentMakesMig, ::testing::Values("off"));

}  // namespace
}  // namespace gantry::agent
