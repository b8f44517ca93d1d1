// NVML end to end against the fake libnvidia-ml.so.1 the tests build (fake_nvml.cc):
// LoadNvml resolves it with dlopen and dlsym as it would the driver's, DiscoverNvml reads
// GPUs, MIG instances, NVLink and the processes on each device, and NvmlUsage turns a
// sample into what each worker uses, with real processes standing for the workers'.
#include "agent/nvml.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "agent/agent.h"
#include "agent/launcher.h"

namespace gantry::agent {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr int64_t kGB = 1'000'000'000;
const std::string kFull = FAKE_NVML_DIR "/full/libnvidia-ml.so.1";
const std::string kOld = FAKE_NVML_DIR "/old/libnvidia-ml.so.1";
const std::string kBroken = FAKE_NVML_DIR "/broken/libnvidia-ml.so.1";

class FakeNvmlTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("gantry-nvml-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
    ::setenv("GANTRY_FAKE_NVML", (dir_ / "script.json").c_str(), 1);
  }
  void TearDown() override {
    for (pid_t p : started_) SignalGroup(p, SIGKILL);
    for (int i = 0; i < 100 && !started_.empty(); ++i) {
      for (const Exited& e : Reap()) std::erase(started_, e.pid);
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    fs::remove_all(dir_);
  }
  // The fake reads it again at each sample; written whole, then renamed into place.
  void Script(const json& j) {
    std::ofstream(dir_ / "script.tmp") << j.dump(2);
    fs::rename(dir_ / "script.tmp", dir_ / "script.json");
  }
  std::unique_ptr<NvmlGpus> Open(const std::string& library = kFull) {
    auto nvml = NvmlGpus::Open(library);
    EXPECT_TRUE(nvml.ok()) << nvml.error().message;
    return nvml.ok() ? std::move(*nvml) : nullptr;
  }
  std::vector<GpuInfo> Sample(NvmlGpus& nvml) {
    auto gpus = nvml.Discover();
    EXPECT_TRUE(gpus.ok()) << gpus.error().message;
    return gpus.ok() ? *gpus : std::vector<GpuInfo>{};
  }
  // A worker as the agent starts one (a session of its own) whose shell starts a child,
  // the process that would use the GPU; returns {worker, child}.
  std::pair<pid_t, pid_t> StartWorker(const std::string& name) {
    LaunchSpec spec;
    const std::string pid_file = (dir_ / (name + ".pid")).string();
    spec.argv = {"sh", "-c",
                 "sleep 60 & echo $! > " + pid_file + ".tmp; mv " + pid_file + ".tmp " + pid_file +
                     "; wait"};
    spec.log_path = (dir_ / (name + ".log")).string();
    auto pid = Launch(spec);
    EXPECT_TRUE(pid.ok());
    if (!pid.ok()) return {-1, -1};
    started_.push_back(*pid);
    pid_t child = -1;
    for (int i = 0; i < 500 && child < 0; ++i) {
      std::ifstream in(pid_file);
      if (!(in >> child)) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    EXPECT_GT(child, 0) << "the worker's child did not start";
    return {*pid, child};
  }
  static const GpuProcess* Process(const DeviceProcesses& d, int pid) {
    for (const GpuProcess& p : d.list) {
      if (p.pid == pid) return &p;
    }
    return nullptr;
  }

  fs::path dir_;
  std::vector<pid_t> started_;
};

WorkerShare Shared(int gpu, int milli, const std::string& sharing = "mps") {
  WorkerShare s;
  s.sharing = sharing;
  s.gpus = {gpu};
  s.share_milli = milli;
  return s;
}
WorkerShare Whole(std::vector<int> gpus) {
  WorkerShare s;
  s.gpus = std::move(gpus);
  return s;
}
WorkerShare Mig(int gpu, const std::string& uuid) {
  WorkerShare s = Shared(gpu, 0, "mig");
  s.mig_uuid = uuid;
  return s;
}

json H100(const std::string& uuid, const std::string& bus) {
  return {{"name", "NVIDIA H100 80GB HBM3"}, {"uuid", uuid},           {"bus", bus},
          {"memory_bytes", 85'520'809'984},  {"memory_used_bytes", 0}, {"utilization", 0}};
}

// Three GPUs: 0 and 1 joined by two NVLinks (0 has a third to an NVSwitch), 1 in MIG mode
// with two instances, 2 fallen off the bus.
json ThreeGpus() {
  json a = H100("GPU-aaaa", "00000000:17:00.0");
  a["utilization"] = 75;
  a["memory_used_bytes"] = 40 * kGB;
  a["nvlinks"] = {"0000:18:00.0", "0000:18:00.0", "0000:99:00.0"};
  json b = H100("GPU-bbbb", "00000000:18:00.0");
  b["nvlinks"] = {"0000:17:00.0", "0000:17:00.0"};
  b["mig"] = {{{"uuid", "MIG-b0"},
               {"profile", "1g.10gb"},
               {"start", 6},
               {"size", 1},
               {"memory_bytes", 10 * kGB},
               {"memory_used_bytes", 2 * kGB}},
              {{"uuid", "MIG-b1"},
               {"profile", "3g.40gb"},
               {"start", 0},
               {"size", 4},
               {"memory_bytes", 40 * kGB},
               {"memory_used_bytes", 0}}};
  json c = H100("GPU-cccc", "00000000:19:00.0");
  c["lost_after"] = 0;
  return {{"gpus", {a, b, c}}};
}

TEST_F(FakeNvmlTest, DiscoversGpusMigPlacementsAndNvlinkPeersThroughTheLibrary) {
  Script(ThreeGpus());
  auto nvml = Open();
  ASSERT_TRUE(nvml);
  const std::vector<GpuInfo> gpus = Sample(*nvml);
  ASSERT_EQ(gpus.size(), 3u);
  const GpuInfo& a = gpus[0];
  EXPECT_EQ(a.uuid, "GPU-aaaa");
  EXPECT_EQ(a.name, "NVIDIA H100 80GB HBM3");
  EXPECT_EQ(a.memory_bytes, 85'520'809'984);
  EXPECT_EQ(a.memory_used_bytes, 40 * kGB);
  EXPECT_DOUBLE_EQ(a.utilization, 0.75);
  EXPECT_FALSE(a.mig_mode);
  EXPECT_EQ(a.nvlink_peers, std::vector<int>{1});  // the NVSwitch link names no GPU
  EXPECT_TRUE(a.processes.listed);
  EXPECT_TRUE(a.processes.sampled);
  EXPECT_TRUE(a.processes.list.empty());
  const GpuInfo& b = gpus[1];
  EXPECT_TRUE(b.mig_mode);
  ASSERT_EQ(b.mig.size(), 2u);
  EXPECT_EQ(b.mig[0].profile, "1g.10gb");
  EXPECT_EQ(b.mig[0].start, 6);
  EXPECT_EQ(b.mig[0].uuid, "MIG-b0");
  EXPECT_EQ(b.mig[0].memory_bytes, 10 * kGB);
  EXPECT_EQ(b.mig[0].memory_used_bytes, 2 * kGB);
  EXPECT_FALSE(b.mig[0].utilization) << "NVML gives no utilization rates for MIG devices";
  EXPECT_EQ(b.mig[1].profile, "3g.40gb");
  EXPECT_EQ(b.mig[1].start, 0);
  EXPECT_EQ(b.nvlink_peers, std::vector<int>{0});
  EXPECT_FALSE(b.processes.listed) << "a GPU in MIG mode: its instances' processes, not its own";
  EXPECT_EQ(nvml->MigUuid(b, "3g.40gb", 0), "MIG-b1");
  const GpuInfo& c = gpus[2];
  EXPECT_TRUE(c.lost);
  EXPECT_FALSE(a.lost);
  EXPECT_FALSE(c.processes.listed);
}

// Each stride a driver writes the _v3 process list at: 24 (nvml.h), 32 (535.43-535.86),
// 16; with more processes and samples than the first buffers hold, so they are grown.
TEST_F(FakeNvmlTest, ReadsEachProcessWithItsMemoryAndUtilizationAtEveryEntryStride) {
  for (int stride : {24, 32, 16}) {
    SCOPED_TRACE("process_stride " + std::to_string(stride));
    json gpu = H100("GPU-aaaa", "00000000:17:00.0");
    gpu["processes"] = json::array();
    for (int i = 0; i < 60; ++i) {
      gpu["processes"].push_back(
          {{"pid", 1000 + i}, {"used_bytes", (i + 1) * kGB}, {"sm_util", i % 3 == 0 ? 0 : i}});
    }
    gpu["processes"].push_back(
        {{"pid", 2000}, {"sm_util", 30}, {"mps", true}, {"used_bytes", 3 * kGB}});
    gpu["processes"].push_back({{"pid", 2001}, {"sm_util", 5}});  // memory not available
    Script({{"process_stride", stride}, {"gpus", {gpu}}});
    auto nvml = Open();
    ASSERT_TRUE(nvml);
    const std::vector<GpuInfo> gpus = Sample(*nvml);
    ASSERT_EQ(gpus.size(), 1u);
    const DeviceProcesses& d = gpus[0].processes;
    EXPECT_TRUE(d.listed);
    EXPECT_TRUE(d.sampled);
    ASSERT_EQ(d.list.size(), 62u);
    for (int i = 0; i < 60; ++i) {
      const GpuProcess* p = Process(d, 1000 + i);
      ASSERT_NE(p, nullptr) << 1000 + i;
      EXPECT_EQ(p->vram_bytes, (i + 1) * kGB) << p->pid;
      EXPECT_DOUBLE_EQ(p->sm_util, i % 3 == 0 ? 0 : i / 100.0) << p->pid;
    }
    const GpuProcess* mps = Process(d, 2000);
    ASSERT_NE(mps, nullptr) << "an MPS client, from nvmlDeviceGetMPSComputeRunningProcesses";
    EXPECT_EQ(mps->vram_bytes, 3 * kGB);
    EXPECT_DOUBLE_EQ(mps->sm_util, 0.30);
    ASSERT_NE(Process(d, 2001), nullptr);
    EXPECT_EQ(Process(d, 2001)->vram_bytes, -1);
  }
}

TEST_F(FakeNvmlTest, OnlySamplesNewerThanTheLastOneReadCount) {
  json gpu = H100("GPU-aaaa", "00000000:17:00.0");
  gpu["processes"] = {{{"pid", 1000}, {"used_bytes", kGB}, {"sm_util", 40}, {"sampled_at", 5}}};
  Script({{"gpus", {gpu}}});
  auto nvml = Open();
  ASSERT_TRUE(nvml);
  std::vector<GpuInfo> gpus = Sample(*nvml);
  ASSERT_EQ(gpus[0].processes.list.size(), 1u);
  EXPECT_DOUBLE_EQ(gpus[0].processes.list[0].sm_util, 0.4);
  // Nothing newer than time 5: NVML_ERROR_NOT_FOUND, every process idle since.
  gpus = Sample(*nvml);
  ASSERT_TRUE(gpus[0].processes.sampled);
  ASSERT_EQ(gpus[0].processes.list.size(), 1u);
  EXPECT_DOUBLE_EQ(gpus[0].processes.list[0].sm_util, 0);
  EXPECT_EQ(gpus[0].processes.list[0].vram_bytes, kGB);
  gpu["processes"][0]["sampled_at"] = 9;
  Script({{"gpus", {gpu}}});
  gpus = Sample(*nvml);
  EXPECT_DOUBLE_EQ(gpus[0].processes.list[0].sm_util, 0.4);
}

// Two workers sharing GPU 0 by MPS, as real processes in sessions of their own; NVML lists
// their processes beside one of someone else's (this test's own).
TEST_F(FakeNvmlTest, WorkersOnASharedGpuReportTheirOwnProcesses) {
  const auto [a, a_child] = StartWorker("a");
  const auto [b, b_child] = StartWorker("b");
  ASSERT_GT(a_child, 0);
  ASSERT_GT(b_child, 0);
  EXPECT_EQ(SessionOf(a_child), a);
  json gpu = H100("GPU-aaaa", "00000000:17:00.0");
  gpu["utilization"] = 80;  // the GPU's: all its tenants'
  gpu["memory_used_bytes"] = 9 * kGB;
  gpu["processes"] = {{{"pid", a_child}, {"used_bytes", kGB}, {"sm_util", 20}, {"mps", true}},
                      {{"pid", a}, {"used_bytes", kGB / 2}, {"mps", true}},
                      {{"pid", b_child}, {"used_bytes", 4 * kGB}, {"sm_util", 50}, {"mps", true}},
                      {{"pid", ::getpid()}, {"used_bytes", 3 * kGB}, {"sm_util", 10}}};
  Script({{"gpus", {gpu}}});
  auto nvml = Open();
  ASSERT_TRUE(nvml);
  const std::vector<GpuInfo> gpus = Sample(*nvml);
  auto of = [](pid_t worker) { return [worker](int pid) { return SessionOf(pid) == worker; }; };
  // 20% of the GPU on a quarter of it: 0.8 of its share.
  const json ua = NvmlUsage(Shared(0, 250), gpus, of(a));
  ASSERT_TRUE(ua.is_object()) << ua;
  EXPECT_DOUBLE_EQ(ua["util"].get<double>(), 0.8);
  EXPECT_EQ(ua["vram_used_bytes"], kGB + kGB / 2);
  const json ub = NvmlUsage(Shared(0, 400, "timeslice"), gpus, of(b));
  EXPECT_DOUBLE_EQ(ub["util"].get<double>(), 1.0)
      << "50% of the GPU on a 0.4 share: all of it, and more";
  EXPECT_EQ(ub["vram_used_bytes"], 4 * kGB);
  // A worker whose processes have not touched the GPU (yet) uses none of it.
  const json idle = NvmlUsage(Shared(0, 500), gpus, [](int) { return false; });
  EXPECT_DOUBLE_EQ(idle["util"].get<double>(), 0);
  EXPECT_EQ(idle["vram_used_bytes"], 0);
  // A whole GPU is read from the GPU's own numbers.
  const json whole = NvmlUsage(Whole({0}), gpus, of(a));
  EXPECT_DOUBLE_EQ(whole["util"].get<double>(), 0.8);
  EXPECT_EQ(whole["vram_used_bytes"], 9 * kGB);
  EXPECT_TRUE(NvmlUsage(Shared(3, 500), gpus, of(a)).is_null()) << "a GPU the node does not have";
}

TEST_F(FakeNvmlTest, AWorkerOnAMigInstanceReportsTheInstance) {
  json gpu = ThreeGpus()["gpus"][1];
  gpu.erase("nvlinks");
  gpu["mig"][0]["processes"] = {{{"pid", 1000}, {"used_bytes", kGB}, {"sm_util", 30}},
                                {{"pid", 1001}, {"used_bytes", kGB / 2}, {"sm_util", 25}}};
  gpu["mig"][1]["processes"] = {{{"pid", 1002}, {"used_bytes", 7 * kGB}, {"sm_util", 90}}};
  gpu["mig"][1]["utilization"] = 60;  // where NVML gives a MIG device's own utilization
  Script({{"gpus", {gpu}}});
  auto nvml = Open();
  ASSERT_TRUE(nvml);
  const std::vector<GpuInfo> gpus = Sample(*nvml);
  ASSERT_EQ(gpus[0].mig.size(), 2u);
  const DeviceProcesses& in0 = gpus[0].mig[0].processes;
  EXPECT_TRUE(in0.listed && in0.sampled);
  ASSERT_EQ(in0.list.size(), 2u);
  EXPECT_EQ(Process(in0, 1001)->vram_bytes, kGB / 2);
  auto nobody = [](int) { return false; };  // the instance is the worker's alone
  // No utilization of its own: its processes' sampled SM utilization, of the instance.
  const json u0 = NvmlUsage(Mig(0, "MIG-b0"), gpus, nobody);
  ASSERT_TRUE(u0.is_object());
  EXPECT_DOUBLE_EQ(u0["util"].get<double>(), 0.55);
  EXPECT_EQ(u0["vram_used_bytes"], 2 * kGB) << "the instance's own memory in use";
  const json u1 = NvmlUsage(Mig(0, "MIG-b1"), gpus, nobody);
  EXPECT_DOUBLE_EQ(u1["util"].get<double>(), 0.6);
  EXPECT_EQ(u1["vram_used_bytes"], 0);
  EXPECT_TRUE(NvmlUsage(Mig(0, "MIG-gone"), gpus, nobody).is_null());
  // Where NVML gives neither (no per-process samples on MIG devices), nothing is reported.
  gpu["process_utilization"] = false;
  Script({{"gpus", {gpu}}});
  const std::vector<GpuInfo> unsampled = Sample(*nvml);
  EXPECT_FALSE(unsampled[0].mig[0].processes.sampled);
  EXPECT_TRUE(NvmlUsage(Mig(0, "MIG-b0"), unsampled, nobody).is_null());
}

TEST_F(FakeNvmlTest, AGpuThatFallsOffTheBusIsLostAndItsWorkersReportNothing) {
  json gpu = H100("GPU-aaaa", "00000000:17:00.0");
  gpu["lost_after"] = 1;
  gpu["utilization"] = 50;
  gpu["processes"] = {{{"pid", 1000}, {"used_bytes", kGB}, {"sm_util", 40}}};
  Script({{"gpus", {gpu, H100("GPU-bbbb", "00000000:18:00.0")}}});
  auto nvml = Open();
  ASSERT_TRUE(nvml);
  auto mine = [](int pid) { return pid == 1000; };
  std::vector<GpuInfo> gpus = Sample(*nvml);
  EXPECT_FALSE(gpus[0].lost);
  EXPECT_DOUBLE_EQ(NvmlUsage(Shared(0, 500), gpus, mine)["util"].get<double>(), 0.8);
  gpus = Sample(*nvml);  // the second sample: NVML_ERROR_GPU_IS_LOST
  ASSERT_EQ(gpus.size(), 2u);
  EXPECT_TRUE(gpus[0].lost);
  EXPECT_EQ(gpus[0].uuid, "") << "its queries fail; what is known of it is its index";
  EXPECT_FALSE(gpus[0].processes.listed);
  EXPECT_FALSE(gpus[1].lost);
  EXPECT_TRUE(NvmlUsage(Shared(0, 500), gpus, mine).is_null());
  EXPECT_TRUE(NvmlUsage(Whole({0}), gpus, mine).is_null());
  EXPECT_TRUE(NvmlUsage(Whole({0, 1}), gpus, mine).is_null()) << "one of its GPUs is lost";
  EXPECT_TRUE(NvmlUsage(Whole({1}), gpus, mine).is_object());
}

// An old driver: no _v3 process lists, no per-process utilization, no MIG, no NVLink.
TEST_F(FakeNvmlTest, AnOldDriverLoadsAndReportsLessWithoutFailing) {
  auto api = LoadNvml(kOld);
  ASSERT_TRUE(api.ok()) << api.error().message;
  EXPECT_NE(api->compute_processes, nullptr) << "nvmlDeviceGetComputeRunningProcesses_v2";
  EXPECT_EQ(api->process_utilization, nullptr);
  EXPECT_EQ(api->mps_processes, nullptr);
  EXPECT_EQ(api->mig_mode, nullptr);
  EXPECT_EQ(api->nvlink_state, nullptr);
  json script = ThreeGpus();
  script["process_stride"] =
      32;  // what _v3 would write; _v2 writes 24 bytes whatever the script says
  script["gpus"][0]["processes"] = {{{"pid", 1000}, {"used_bytes", kGB}, {"sm_util", 40}},
                                    {{"pid", 1001}, {"used_bytes", 2 * kGB}}};
  Script(script);
  auto nvml = Open(kOld);
  ASSERT_TRUE(nvml);
  const std::vector<GpuInfo> gpus = Sample(*nvml);
  ASSERT_EQ(gpus.size(), 3u);
  EXPECT_FALSE(gpus[1].mig_mode);
  EXPECT_TRUE(gpus[0].nvlink_peers.empty());
  EXPECT_TRUE(gpus[0].processes.listed);
  EXPECT_FALSE(gpus[0].processes.sampled);
  ASSERT_EQ(gpus[0].processes.list.size(), 2u);
  EXPECT_EQ(gpus[0].processes.list[1].vram_bytes, 2 * kGB);
  EXPECT_TRUE(gpus[2].lost);
  auto mine = [](int pid) { return pid == 1000; };
  EXPECT_TRUE(NvmlUsage(Shared(0, 500), gpus, mine).is_null()) << "its utilization cannot be told";
  const json whole = NvmlUsage(Whole({0}), gpus, mine);
  EXPECT_DOUBLE_EQ(whole["util"].get<double>(), 0.75);
}

TEST_F(FakeNvmlTest, ALibraryLackingARequiredEntryPointIsACleanError) {
  auto api = LoadNvml(kBroken);
  ASSERT_FALSE(api.ok());
  EXPECT_NE(api.error().message.find("lacks a required entry point"), std::string::npos)
      << api.error().message;
}

TEST_F(FakeNvmlTest, AFailingInitIsACleanError) {
  ::setenv("GANTRY_FAKE_NVML", (dir_ / "missing.json").c_str(), 1);
  auto nvml = NvmlGpus::Open(kFull);
  ASSERT_FALSE(nvml.ok());
  EXPECT_NE(nvml.error().message.find("nvmlInit"), std::string::npos) << nvml.error().message;
}

TEST(Nvml, MigProfileFromName) {
  EXPECT_EQ(MigProfileFromName("NVIDIA A100-SXM4-80GB MIG 1g.10gb"), "1g.10gb");
  EXPECT_EQ(MigProfileFromName("NVIDIA H100 80GB HBM3 MIG 3g.40gb"), "3g.40gb");
  EXPECT_EQ(MigProfileFromName("NVIDIA H100 80GB HBM3"), "");
}

TEST(Nvml, AMissingLibraryIsACleanError) {
  auto api = LoadNvml("libnvidia-ml-does-not-exist.so.1");
  ASSERT_FALSE(api.ok());
  EXPECT_NE(api.error().message.find("libnvidia-ml-does-not-exist.so.1"), std::string::npos)
      << api.error().message;
  auto gpus = NvmlGpus::Open("libnvidia-ml-does-not-exist.so.1");
  EXPECT_FALSE(gpus.ok());
}

}  // namespace
}  // namespace gantry::agent
