// Label `gpu`: on a machine with NVIDIA's driver, NVML finds the real GPUs and a process
// started the way the agent starts workers sees exactly the GPU it is given. Skips itself
// (and says why) where there is no driver.
#include <gtest/gtest.h>

#include <sys/wait.h>

#include <filesystem>
#include <fstream>

#include "agent/launcher.h"
#include "agent/nvml.h"

namespace gantry::agent {
namespace {

TEST(NvmlGpu, DiscoversRealGpusAndRunsACudaVisibleJob) {
  auto nvml = NvmlGpus::Open();
  if (!nvml.ok()) GTEST_SKIP() << "no NVML here: " << nvml.error().message;
  auto gpus = (*nvml)->Discover();
  ASSERT_TRUE(gpus.ok()) << gpus.error().message;
  ASSERT_FALSE(gpus->empty());
  for (const GpuInfo& g : *gpus) {
    EXPECT_EQ(g.uuid.rfind("GPU-", 0), 0u) << g.uuid;
    EXPECT_GT(g.memory_bytes, 1'000'000'000);
    std::cout << "GPU " << g.index << ": " << g.name << " " << g.uuid << " "
              << g.memory_bytes / 1'000'000'000 << " GB, MIG " << (g.mig_mode ? "on" : "off")
              << ", NVLink peers " << g.nvlink_peers.size() << "\n";
  }
  if (::access("/usr/bin/nvidia-smi", X_OK) != 0) GTEST_SKIP() << "no nvidia-smi to play the job";
  const std::string dir =
      std::filesystem::temp_directory_path() / ("gantry-gpu-" + std::to_string(::getpid()));
  LaunchSpec spec;
  spec.argv = {"nvidia-smi", "--query-gpu=uuid", "--format=csv,noheader"};
  spec.env = {{"CUDA_VISIBLE_DEVICES", (*gpus)[0].uuid},
              {"NVIDIA_VISIBLE_DEVICES", (*gpus)[0].uuid}};
  spec.log_path = dir + "/out.log";
  auto pid = Launch(spec);
  ASSERT_TRUE(pid.ok());
  int status = 0;
  ASSERT_EQ(::waitpid(*pid, &status, 0), *pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  std::ifstream in(spec.log_path);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find((*gpus)[0].uuid), std::string::npos) << text;
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace gantry::agent
