// NVML end to end against the fake libnvidia-ml.so.1 the tests build (fake_nvml.cc):
// LoadNvml resolves it with dlopen and dlsym as it would the driver's, DiscoverNvml reads
// GPUs, MIG instances, NVLink and the processes on each device, CreateMigNvml and
// DestroyMigNvml make and remove MIG instances, and NvmlUsage turns a
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
#include "agent/emulated.h"
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
  b["minor"] = 5;  // /dev/nvidia5 (NVML's minor number need not be the index)
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
  EXPECT_EQ(a.minor, 0);
  EXPECT_EQ(gpus[1].minor, 5);
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
  const auto ua = NvmlUsage(Shared(0, 250), gpus, of(a));
  ASSERT_TRUE(ua.has_value());
  EXPECT_DOUBLE_EQ(ua->util, 0.8);
  EXPECT_EQ(ua->vram_used_bytes, kGB + kGB / 2);
  const auto ub = NvmlUsage(Shared(0, 400, "timeslice"), gpus, of(b));
  EXPECT_DOUBLE_EQ(ub->util, 1.0) << "50% of the GPU on a 0.4 share: all of it, and more";
  EXPECT_EQ(ub->vram_used_bytes, 4 * kGB);
  // A worker whose processes have not touched the GPU (yet) uses none of it.
  const auto idle = NvmlUsage(Shared(0, 500), gpus, [](int) { return false; });
  EXPECT_DOUBLE_EQ(idle->util, 0);
  EXPECT_EQ(idle->vram_used_bytes, 0);
  // A whole GPU is read from the GPU's own numbers.
  const auto whole = NvmlUsage(Whole({0}), gpus, of(a));
  EXPECT_DOUBLE_EQ(whole->util, 0.8);
  EXPECT_EQ(whole->vram_used_bytes, 9 * kGB);
  EXPECT_FALSE(NvmlUsage(Shared(3, 500), gpus, of(a)).has_value())
      << "a GPU the node does not have";
}

// Under a real MPS daemon (H100, driver 580, scripts/gpu_check.sh) NVML lists the clients
// with their memory but names only the MPS server in its utilization samples. A busy share
// must not read idle (it was reclaimed while busy): a client counts as busy as the server.
TEST_F(FakeNvmlTest, UnderAnMpsDaemonAShareCountsAsBusyAsItsServer) {
  const auto [a, a_child] = StartWorker("a");
  const auto [b, b_child] = StartWorker("b");
  ASSERT_GT(a_child, 0);
  ASSERT_GT(b_child, 0);
  const int server = ::getpid();  // someone else's process: not a worker's, not a client
  json gpu = H100("GPU-aaaa", "00000000:17:00.0");
  gpu["utilization"] = 99;
  gpu["processes"] = {{{"pid", server}, {"used_bytes", 66 << 20}, {"sm_util", 93}},
                      {{"pid", a_child}, {"used_bytes", 6 * kGB}, {"mps", true}},
                      {{"pid", b_child}, {"used_bytes", 4 * kGB}, {"mps", true}}};
  Script({{"gpus", {gpu}}});
  auto nvml = Open();
  ASSERT_TRUE(nvml);
  std::vector<GpuInfo> gpus = Sample(*nvml);
  auto of = [](pid_t worker) { return [worker](int pid) { return SessionOf(pid) == worker; }; };
  const auto ua = NvmlUsage(Shared(0, 500), gpus, of(a));
  ASSERT_TRUE(ua.has_value());
  EXPECT_DOUBLE_EQ(ua->util, 1.0) << "93% of the GPU on a half share: all of it";
  EXPECT_EQ(ua->vram_used_bytes, 6 * kGB) << "memory is the client's own";
  const auto ub = NvmlUsage(Shared(0, 250), gpus, of(b));
  EXPECT_DOUBLE_EQ(ub->util, 1.0) << "an upper bound: the idle one too";
  EXPECT_EQ(ub->vram_used_bytes, 4 * kGB);
  // A share that is no client (time-slicing beside the server) reads only its own samples.
  const auto none = NvmlUsage(Shared(0, 500), gpus, [](int) { return false; });
  EXPECT_DOUBLE_EQ(none->util, 0);
  // The server idle (no sample since the last read): every client is idle.
  gpu["processes"][0]["sm_util"] = 0;
  gpu["utilization"] = 0;
  Script({{"gpus", {gpu}}});
  gpus = Sample(*nvml);
  ASSERT_TRUE(gpus[0].processes.sampled);
  EXPECT_DOUBLE_EQ(NvmlUsage(Shared(0, 500), gpus, of(a))->util, 0);
  EXPECT_DOUBLE_EQ(NvmlUsage(Shared(0, 250), gpus, of(b))->util, 0);
  // A later driver that samples the clients themselves: their own samples count.
  gpu["processes"][1]["sm_util"] = 40;
  Script({{"gpus", {gpu}}});
  gpus = Sample(*nvml);
  EXPECT_DOUBLE_EQ(NvmlUsage(Shared(0, 500), gpus, of(a))->util, 0.8);
  EXPECT_DOUBLE_EQ(NvmlUsage(Shared(0, 250), gpus, of(b))->util, 0);
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
  const auto u0 = NvmlUsage(Mig(0, "MIG-b0"), gpus, nobody);
  ASSERT_TRUE(u0.has_value());
  EXPECT_DOUBLE_EQ(u0->util, 0.55);
  EXPECT_EQ(u0->vram_used_bytes, 2 * kGB) << "the instance's own memory in use";
  const auto u1 = NvmlUsage(Mig(0, "MIG-b1"), gpus, nobody);
  EXPECT_DOUBLE_EQ(u1->util, 0.6);
  EXPECT_EQ(u1->vram_used_bytes, 0);
  EXPECT_FALSE(NvmlUsage(Mig(0, "MIG-gone"), gpus, nobody).has_value());
  // Where NVML gives neither (no per-process samples on MIG devices), nothing is reported.
  gpu["process_utilization"] = false;
  Script({{"gpus", {gpu}}});
  const std::vector<GpuInfo> unsampled = Sample(*nvml);
  EXPECT_FALSE(unsampled[0].mig[0].processes.sampled);
  EXPECT_FALSE(NvmlUsage(Mig(0, "MIG-b0"), unsampled, nobody).has_value());
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
  EXPECT_DOUBLE_EQ(NvmlUsage(Shared(0, 500), gpus, mine)->util, 0.8);
  gpus = Sample(*nvml);  // the second sample: NVML_ERROR_GPU_IS_LOST
  ASSERT_EQ(gpus.size(), 2u);
  EXPECT_TRUE(gpus[0].lost);
  EXPECT_EQ(gpus[0].uuid, "") << "its queries fail; what is known of it is its index";
  EXPECT_FALSE(gpus[0].processes.listed);
  EXPECT_FALSE(gpus[1].lost);
  EXPECT_FALSE(NvmlUsage(Shared(0, 500), gpus, mine).has_value());
  EXPECT_FALSE(NvmlUsage(Whole({0}), gpus, mine).has_value());
  EXPECT_FALSE(NvmlUsage(Whole({0, 1}), gpus, mine).has_value()) << "one of its GPUs is lost";
  EXPECT_TRUE(NvmlUsage(Whole({1}), gpus, mine).has_value());
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
  EXPECT_FALSE(NvmlUsage(Shared(0, 500), gpus, mine).has_value())
      << "its utilization cannot be told";
  const auto whole = NvmlUsage(Whole({0}), gpus, mine);
  EXPECT_DOUBLE_EQ(whole->util, 0.75);
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

// ---------------------------------------------------------------- MIG instances made by the agent
// (mig_managed pools): created at exactly the scheduler's placement, destroyed when done.

const std::string kNoMigCreate = FAKE_NVML_DIR "/nomigcreate/libnvidia-ml.so.1";

// One H100 in MIG mode holding one instance laid out beforehand (1g.10gb at slice 6).
json MigGpu() {
  json g = H100("GPU-aaaa", "00000000:17:00.0");
  g["mig"] = {{{"uuid", "MIG-admin"},
               {"profile", "1g.10gb"},
               {"start", 6},
               {"size", 1},
               {"memory_bytes", 10 * kGB},
               {"memory_used_bytes", 0}}};
  return g;
}

MigPlacement Placement(const std::string& profile, int start, int memory_slices,
                       int compute_slices) {
  return MigPlacement{.profile = profile,
                      .start = start,
                      .memory_slices = memory_slices,
                      .compute_slices = compute_slices};
}

const MigInstance* At(const GpuInfo& g, int start) {
  for (const MigInstance& m : g.mig) {
    if (m.start == start) return &m;
  }
  return nullptr;
}

TEST_F(FakeNvmlTest, CreatesMigInstancesAtExactlyThePlacementAndDestroysThem) {
  Script({{"gpus", {MigGpu()}}});
  auto nvml = Open();
  ASSERT_TRUE(nvml);
  GpuInfo gpu = Sample(*nvml)[0];
  auto small = nvml->CreateMig(gpu, Placement("1g.10gb", 0, 1, 1));
  ASSERT_TRUE(small.ok()) << small.error().message;
  EXPECT_EQ(small->uuid, "MIG-GPU-aaaa-20");
  EXPECT_EQ(small->gpu_uuid, "GPU-aaaa");
  EXPECT_EQ(small->start, 0);
  EXPECT_EQ(small->size, 1);
  // One compute slice on two memory slices: NVML's 1_SLICE_REV2, told from 1_SLICE (and
  // its +me twin) by memory.
  auto large = nvml->CreateMig(gpu, Placement("1g.20gb", 2, 2, 1));
  ASSERT_TRUE(large.ok()) << large.error().message;
  auto half = nvml->CreateMig(gpu, Placement("3g.40gb", 4, 4, 3));
  ASSERT_FALSE(half.ok()) << "slices 4-7 hold the administrator's instance at 6";
  EXPECT_NE(half.error().message.find(
                "MIG instance MIG-admin (1g.10gb at memory slice 6) overlaps memory "
                "slices 4-7"),
            std::string::npos)
      << half.error().message;
  gpu = Sample(*nvml)[0];
  ASSERT_EQ(gpu.mig.size(), 3u);
  ASSERT_TRUE(At(gpu, 0) && At(gpu, 2) && At(gpu, 6));
  EXPECT_EQ(At(gpu, 0)->uuid, small->uuid);
  EXPECT_EQ(At(gpu, 0)->profile, "1g.10gb");
  EXPECT_EQ(At(gpu, 2)->profile, "1g.20gb");
  EXPECT_EQ(At(gpu, 2)->size, 2);
  EXPECT_EQ(nvml->MigUuid(gpu, "1g.20gb", 2), large->uuid);
  // Ours overlap too: never two tenants on one slice.
  auto again = nvml->CreateMig(gpu, Placement("2g.20gb", 0, 2, 2));
  ASSERT_FALSE(again.ok());
  EXPECT_NE(again.error().message.find("MIG instance " + small->uuid), std::string::npos)
      << again.error().message;
  ASSERT_TRUE(nvml->DestroyMig(*small).ok());
  gpu = Sample(*nvml)[0];
  EXPECT_EQ(gpu.mig.size(), 2u);
  EXPECT_FALSE(At(gpu, 0));
  EXPECT_TRUE(nvml->DestroyMig(*small).ok()) << "gone already is fine";
  // Its slices are free again.
  auto two = nvml->CreateMig(gpu, Placement("2g.20gb", 0, 2, 2));
  ASSERT_TRUE(two.ok()) << two.error().message;
  EXPECT_EQ(At(Sample(*nvml)[0], 0)->profile, "2g.20gb");
  // An instance nobody here made is never destroyed, even if asked with its ids.
  MadeMig admin = *two;
  admin.gpu_instance = 0;  // the script's instance 0 is MIG-admin, at slice 6, not 0
  ASSERT_TRUE(nvml->DestroyMig(admin).ok());
  EXPECT_TRUE(At(Sample(*nvml)[0], 6)) << "ids naming another placement are not ours";
}

TEST_F(FakeNvmlTest, AFailedCreationSaysWhyAndLeavesNothingBehind) {
  json gpu = MigGpu();
  gpu["fail_create"] = "insufficient_resources";
  Script({{"gpus", {gpu}}});
  auto nvml = Open();
  ASSERT_TRUE(nvml);
  auto made = nvml->CreateMig(Sample(*nvml)[0], Placement("1g.10gb", 0, 1, 1));
  ASSERT_FALSE(made.ok());
  EXPECT_EQ(made.error().message,
            "nvmlDeviceCreateGpuInstanceWithPlacement: Insufficient Resources");
  gpu["fail_create"] = "no_permission";
  Script({{"gpus", {gpu}}});
  made = nvml->CreateMig(Sample(*nvml)[0], Placement("1g.10gb", 0, 1, 1));
  ASSERT_FALSE(made.ok());
  EXPECT_EQ(made.error().message,
            "nvmlDeviceCreateGpuInstanceWithPlacement: Insufficient Permissions");
  // The GPU instance is made but its compute instance is refused: the GPU instance goes too.
  gpu.erase("fail_create");
  gpu["fail_compute"] = true;
  Script({{"gpus", {gpu}}});
  made = nvml->CreateMig(Sample(*nvml)[0], Placement("1g.10gb", 0, 1, 1));
  ASSERT_FALSE(made.ok());
  EXPECT_EQ(made.error().message, "nvmlGpuInstanceCreateComputeInstance: Insufficient Resources");
  gpu.erase("fail_compute");
  Script({{"gpus", {gpu}}});
  const GpuInfo after = Sample(*nvml)[0];
  EXPECT_EQ(after.mig.size(), 1u) << "nothing half-made is listed";
  auto fine = nvml->CreateMig(after, Placement("1g.10gb", 0, 1, 1));
  ASSERT_TRUE(fine.ok()) << "no GPU instance was left on slice 0: " << fine.error().message;
  ASSERT_TRUE(nvml->DestroyMig(*fine).ok());
  // Wrong input and GPUs that cannot: each said.
  made = nvml->CreateMig(after, Placement("1g.10gb+me", 1, 1, 1));
  ASSERT_FALSE(made.ok());
  EXPECT_NE(made.error().message.find("not of the form"), std::string::npos)
      << made.error().message;
  json empty = H100("GPU-aaaa", "00000000:17:00.0");
  empty["mig"] = json::array();  // in MIG mode, all slices free
  Script({{"gpus", {empty}}});
  made = nvml->CreateMig(Sample(*nvml)[0], Placement("6g.60gb", 0, 8, 6));
  ASSERT_FALSE(made.ok());
  EXPECT_NE(made.error().message.find("no MIG profile with 6 compute slice(s)"), std::string::npos)
      << made.error().message;
  Script({{"gpus", {H100("GPU-aaaa", "00000000:17:00.0")}}});
  made = nvml->CreateMig(Sample(*nvml)[0], Placement("1g.10gb", 0, 1, 1));
  ASSERT_FALSE(made.ok());
  EXPECT_NE(made.error().message.find("not in MIG mode"), std::string::npos)
      << made.error().message;
}

TEST_F(FakeNvmlTest, AnInstanceInUseIsDestroyedOnlyOnceItsProcessesAreGone) {
  Script({{"gpus", {MigGpu()}}});
  auto nvml = Open();
  ASSERT_TRUE(nvml);
  auto made = nvml->CreateMig(Sample(*nvml)[0], Placement("3g.40gb", 0, 4, 3));
  ASSERT_TRUE(made.ok()) << made.error().message;
  json gpu = MigGpu();
  gpu["busy"] = {0};
  Script({{"gpus", {gpu}}});
  Sample(*nvml);
  Status gone = nvml->DestroyMig(*made);
  ASSERT_FALSE(gone.ok());
  EXPECT_EQ(gone.error().message,
            "nvmlComputeInstanceDestroy: In use by another client (processes still run on it)");
  EXPECT_TRUE(At(Sample(*nvml)[0], 0));
  Script({{"gpus", {MigGpu()}}});
  Sample(*nvml);
  EXPECT_TRUE(nvml->DestroyMig(*made).ok());
  EXPECT_FALSE(At(Sample(*nvml)[0], 0));
}

// A driver that lists MIG instances but has no nvmlDeviceCreateGpuInstanceWithPlacement
// (nor the rest), and one with no MIG at all: a clear error, nothing else changes.
TEST_F(FakeNvmlTest, ADriverThatCannotCreateInstancesSaysSo) {
  Script({{"gpus", {MigGpu()}}});
  for (const std::string& library : {kNoMigCreate, kOld}) {
    SCOPED_TRACE(library);
    auto nvml = Open(library);
    ASSERT_TRUE(nvml);
    const GpuInfo gpu = Sample(*nvml)[0];
    auto made = nvml->CreateMig(gpu, Placement("1g.10gb", 0, 1, 1));
    ASSERT_FALSE(made.ok());
    EXPECT_NE(made.error().message.find(
                  "this driver's NVML lacks nvmlDeviceGetGpuInstanceProfileInfo: it cannot "
                  "create MIG instances at a placement"),
              std::string::npos)
        << made.error().message;
    if (library == kNoMigCreate) {
      EXPECT_EQ(gpu.mig.size(), 1u) << "instances laid out beforehand are still listed";
      EXPECT_EQ(nvml->MigUuid(gpu, "1g.10gb", 6), "MIG-admin");
    }
  }
}

// As the driver's, instances outlive the process that made them (the fake keeps them in
// $GANTRY_FAKE_NVML_STATE): a later process finds and destroys them by their ids.
TEST_F(FakeNvmlTest, InstancesOutliveTheProcessAndAreFoundAgainByTheirIds) {
  ::setenv("GANTRY_FAKE_NVML_STATE", (dir_ / "made.json").c_str(), 1);
  Script({{"gpus", {MigGpu()}}});
  MadeMig made;
  {
    auto nvml = Open();
    ASSERT_TRUE(nvml);
    auto m = nvml->CreateMig(Sample(*nvml)[0], Placement("1g.10gb", 3, 1, 1));
    ASSERT_TRUE(m.ok()) << m.error().message;
    made = *m;
  }
  auto nvml = Open();
  ASSERT_TRUE(nvml);
  EXPECT_TRUE(At(Sample(*nvml)[0], 3)) << "still there after nvmlShutdown and nvmlInit";
  EXPECT_TRUE(nvml->DestroyMig(made).ok());
  EXPECT_FALSE(At(Sample(*nvml)[0], 3));
  ::unsetenv("GANTRY_FAKE_NVML_STATE");
}

// Emulated GPUs lay out their instances too, so a mig_managed pool of emulated nodes works
// and shows its layout.
TEST(EmulatedMig, CreatesListsAndDestroysInstances) {
  EmulatedGpus gpus("n1", {.count = 2, .model = "H100-80GB", .memory_bytes = 80 * kGB});
  std::vector<GpuInfo> list = *gpus.Discover();
  auto made = gpus.CreateMig(list[1], Placement("3g.40gb", 4, 4, 3));
  ASSERT_TRUE(made.ok()) << made.error().message;
  EXPECT_EQ(made->uuid, gpus.MigUuid(list[1], "3g.40gb", 4));
  EXPECT_FALSE(gpus.CreateMig(list[1], Placement("1g.10gb", 6, 1, 1)).ok())
      << "overlaps slices 4-7";
  list = *gpus.Discover();
  ASSERT_EQ(list[1].mig.size(), 1u);
  EXPECT_EQ(list[1].mig[0].profile, "3g.40gb");
  EXPECT_EQ(list[1].mig[0].start, 4);
  EXPECT_TRUE(list[0].mig.empty());
  ASSERT_TRUE(gpus.DestroyMig(*made).ok());
  EXPECT_TRUE(gpus.Discover()->at(1).mig.empty());
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
