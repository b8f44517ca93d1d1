// MIG layouts made by the scheduler, live (issue 12 item 7): the real gantryd with a
// mig_managed pool, and the real gantry-agent on the fake NVML (LD_LIBRARY_PATH, as in
// agent_nvml_test.cc), through the gantry CLI. A MIG job runs on the instance the agent
// created at the placement gantryd chose, /v1/nodes shows it while it exists, and it is gone
// when the job ends; a creation NVML refuses leaves the job pending (requeued, with the
// reason in the event log and in the job's log) and drains the node with the reason, until
// an admin resumes it, when the job runs.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "agent/launcher.h"
#include "harness.h"
#include "job_helpers.h"

namespace gantry::it {
namespace {

namespace fs = std::filesystem;

constexpr const char* kCluster = R"(cluster: mig
pools:
  - name: mig
    count: 1
    gpus: 2
    gpu_model: H100-80GB
    sharing: [mig]
    mig_managed: true
queues:
  - name: q
    guaranteed_gpus: 2
)";

// gantry-agent for node mig-0 on the fake NVML; stopped (SIGTERM, then SIGKILL) and reaped
// by pid when it goes out of scope, before the harness removes its directory.
class FakeNvmlAgent {
 public:
  FakeNvmlAgent(const Harness& h, const std::string& script) {
    agent::LaunchSpec spec;
    spec.argv = {
        GANTRY_AGENT_BINARY,   "--server", h.ServerUrl(), "--node",    "mig-0", "--state-dir",
        h.Path("agent-mig-0"), "--run-as", "agent",       "--cgroups", "off"};
    spec.env = {{"GANTRY_TOKEN", h.token("agent")},
                {"LD_LIBRARY_PATH", FAKE_NVML_DIR "/full"},
                {"GANTRY_FAKE_NVML", script}};
    spec.log_path = h.Path("agent-mig-0.log");
    auto pid = agent::Launch(spec);
    EXPECT_TRUE(pid.ok()) << pid.error().message;
    pid_ = pid.ok() ? *pid : 0;
  }
  ~FakeNvmlAgent() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGTERM);
    for (int i = 0; i < 1000; ++i) {
      if (::waitpid(pid_, nullptr, WNOHANG) == pid_) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }

 private:
  pid_t pid_ = 0;
};

json Gpu(const std::string& uuid, const std::string& bus) {
  return {{"name", "NVIDIA H100 80GB HBM3"},
          {"uuid", uuid},
          {"bus", bus},
          {"memory_bytes", 85'520'809'984},
          {"memory_used_bytes", 0},
          {"utilization", 0},
          {"mig", json::array()}};  // in MIG mode, no instance yet
}

void Script(const Harness& h, const json& gpus) {
  h.Write("nvml.tmp", json{{"gpus", gpus}}.dump());
  fs::rename(h.Path("nvml.tmp"), h.Path("nvml.json"));
}

json Node(const Harness& h) {
  const json nodes = h.Get("/v1/nodes", h.token("admin"));
  return nodes.is_object() && !nodes["nodes"].empty() ? nodes["nodes"][0] : json();
}

// Every MIG instance /v1/nodes lists on the node, as "GPU/profile@start=uuid".
std::vector<std::string> Layout(const Harness& h) {
  std::vector<std::string> out;
  const json node = Node(h);
  if (!node.is_object()) return out;
  for (const json& g : node.value("gpu_detail", json::array())) {
    for (const json& m : g.value("mig", json::array())) {
      out.push_back(std::to_string(g.value("index", -1)) + "/" + m.value("profile", "") + "@" +
                    std::to_string(m.value("start", -1)) + "=" + m.value("uuid", ""));
    }
  }
  return out;
}

std::string SubmitMig(const Harness& h, const std::string& id) {
  return Submit(
      h, "a",
      {"--id", id, "--queue", "q", "--mig", "3g.40gb", "--vram-gb", "30", "--", "sh", "-c",
       "echo $CUDA_VISIBLE_DEVICES > " + h.Path("out/" + id + ".visible") + "; sleep 1"});
}

TEST(MigManaged, TheAgentLaysOutInstancesWhereGantrydPlacesThemAndAFailedCreationRequeuesTheJob) {
  Harness h("mig-managed");
  h.Setup(kCluster, {{"a", "q"}});
  fs::create_directories(h.Path("out"));
  json gpus = {Gpu("GPU-a", "00000000:17:00.0"), Gpu("GPU-b", "00000000:18:00.0")};
  Script(h, gpus);
  h.StartServer();
  FakeNvmlAgent agent(h, h.Path("nvml.json"));
  ASSERT_TRUE(Harness::WaitFor([&] { return h.NodesUp(1); }, 15)) << h.Read("agent-mig-0.log");

  // A MIG job: its instance is made at gantryd's placement, shown while it runs, gone after.
  SubmitMig(h, "m1");
  ASSERT_TRUE(Harness::WaitFor([&] { return fs::exists(h.Path("out/m1.visible")); }, 15))
      << h.Read("agent-mig-0.log");
  const std::string visible = h.Read("out/m1.visible");
  EXPECT_EQ(visible.rfind("MIG-GPU-", 0), 0u) << "the agent's instance: " << visible;
  const json m1 = h.Job("m1");
  ASSERT_EQ(m1["workers"].size(), 1u);
  const json alloc = m1["workers"][0]["alloc"];
  const std::string placed = std::to_string(alloc.value("gpu", -1)) + "/3g.40gb@" +
                             std::to_string(alloc.value("start", -1)) + "=" +
                             visible.substr(0, visible.find('\n'));
  EXPECT_TRUE(Harness::WaitFor([&] { return Layout(h) == std::vector<std::string>{placed}; }, 10))
      << "/v1/nodes: " << Node(h).dump();
  ASSERT_TRUE(Harness::WaitFor([&] { return h.Job("m1").value("state", "") == "finished"; }, 15))
      << h.Job("m1").dump();
  EXPECT_TRUE(Harness::WaitFor([&] { return Layout(h).empty(); }, 10)) << Node(h).dump();
  EXPECT_NE(h.Read("agent-mig-0.log")
                .find("destroyed MIG instance " + visible.substr(0, visible.find('\n'))),
            std::string::npos);

  // NVML refuses the next creation: the job goes back to pending with the reason, and the
  // node is drained with it, so the job does not come straight back to the same GPU.
  for (json& g : gpus) g["fail_create"] = "insufficient_resources";
  Script(h, gpus);
  SubmitMig(h, "m2");
  ASSERT_TRUE(Harness::WaitFor([&] { return Node(h).value("state", "") == "drained"; }, 15))
      << Node(h).dump() << h.Read("agent-mig-0.log");
  const std::string why = Node(h).value("reason", "");
  EXPECT_NE(why.find("cannot create MIG instance 3g.40gb at memory slice "), std::string::npos)
      << why;
  EXPECT_NE(
      why.find(
          "nvmlDeviceCreateGpuInstanceWithPlacement: Insufficient Resources (job m2 requeued)"),
      std::string::npos)
      << why;
  ASSERT_TRUE(Harness::WaitFor([&] { return h.Job("m2").value("state", "") == "pending"; }, 10));
  const json m2 = h.Job("m2");
  EXPECT_EQ(m2.value("requeues", 0), 1) << m2.dump();
  EXPECT_FALSE(fs::exists(h.Path("out/m2.visible"))) << "it never ran";
  RunResult nodes = h.Cli({"nodes"}, h.token("admin"));
  EXPECT_NE(nodes.out.find("Insufficient Resources"), std::string::npos) << nodes.out;
  bool requeued = false;
  for (const json& e : Events(h)) {
    if (e.value("type", "") == "requeue" && e.value("job", "") == "m2") {
      requeued = true;
      EXPECT_NE(e.value("reason", "").find("Insufficient Resources"), std::string::npos)
          << e.dump();
    }
  }
  EXPECT_TRUE(requeued) << "no requeue event for m2";
  RunResult logs = h.Cli({"logs", "m2"}, h.token("a"));
  EXPECT_NE(logs.out.find("gantry-agent: cannot start: cannot create MIG instance 3g.40gb"),
            std::string::npos)
      << logs.out << logs.err;
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  EXPECT_EQ(h.Job("m2").value("state", ""), "pending") << "not placed again on the drained node";

  // Fixed, and resumed by an admin: it runs on an instance made for it.
  for (json& g : gpus) g.erase("fail_create");
  Script(h, gpus);
  RunResult resume = h.Cli({"resume", "mig-0"}, h.token("admin"));
  EXPECT_EQ(resume.rc, 0) << resume.err;
  ASSERT_TRUE(Harness::WaitFor([&] { return h.Job("m2").value("state", "") == "finished"; }, 20))
      << h.Job("m2").dump() << h.Read("agent-mig-0.log");
  EXPECT_EQ(h.Read("out/m2.visible").rfind("MIG-GPU-", 0), 0u);
  EXPECT_TRUE(Harness::WaitFor([&] { return Layout(h).empty(); }, 10)) << Node(h).dump();
}

}  // namespace
}  // namespace gantry::it
