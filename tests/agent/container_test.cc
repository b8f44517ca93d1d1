// How the agent runs a job that names an image: the podman command line it builds, the
// GPUs it passes (CDI names where the node has CDI specs, else device nodes), and its
// --container-run setting. (The real podman runs in Containers.*, label integration.)
#include "agent/container.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

namespace gantry::agent {
namespace {

namespace fs = std::filesystem;

bool Has(const std::vector<std::string>& argv, const std::vector<std::string>& seq) {
  return std::search(argv.begin(), argv.end(), seq.begin(), seq.end()) != argv.end();
}

TEST(ContainerTest, TheRunSettingSplitsAtRun) {
  auto rt = ContainerRuntime::Parse("podman --runtime runc run --ulimit nofile=1024:1024");
  ASSERT_TRUE(rt.ok());
  EXPECT_EQ(rt->podman, (std::vector<std::string>{"podman", "--runtime", "runc"}));
  EXPECT_EQ(rt->run_options, (std::vector<std::string>{"--ulimit", "nofile=1024:1024"}));
  auto bad = ContainerRuntime::Parse("podman --runtime runc");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().ToString().find("--container-run"), std::string::npos);
  EXPECT_FALSE(ContainerRuntime::Parse("run").ok());
}

TEST(ContainerTest, TheCommandLineCarriesTheJobIntoItsContainer) {
  ContainerRuntime rt =
      *ContainerRuntime::Parse("podman --runtime runc run --ulimit nofile=1024:1024");
  rt.init = true;
  ContainerSpec s{.name = ContainerName("h100-0", 7, 2, 1),
                  .node = "h100-0",
                  .agent = "h100-0.1a2b3c4d",
                  .job = "train",
                  .image = "docker.io/pytorch/pytorch:latest",
                  .command = {"python", "train.py", "--lr", "0.1"},
                  .env = {{"CUDA_VISIBLE_DEVICES", "GPU-a"}, {"RANK", "1"}},
                  .workdir = "/home/ann/run",
                  .mounts = {"/var/lib/gantry-agent/scripts/7-2-1.sh"},
                  .binds = {{"/data/sets", "/data", true}, {"/scratch/ann", "/scratch/ann", false}},
                  .inside_workdir = "",
                  .devices = {"nvidia.com/gpu=GPU-a"},
                  .memory_bytes = 8'000'000'000,
                  .cpus_milli = 2500,
                  .user = "1000:1000",
                  .umask = 077};
  EXPECT_EQ(s.name, "gantry-h100-0-7-2-1");
  const std::vector<std::string> a = ContainerArgv(rt, s);
  EXPECT_TRUE(Has(a, {"podman", "--runtime", "runc", "run", "--ulimit", "nofile=1024:1024", "--rm",
                      "--name", "gantry-h100-0-7-2-1"}));
  EXPECT_TRUE(Has(a, {"--label", "gantry.node=h100-0"}));
  EXPECT_TRUE(Has(a, {"--label", "gantry.agent=h100-0.1a2b3c4d"}));
  EXPECT_TRUE(Has(a, {"--label", "gantry.job=train"}));
  EXPECT_TRUE(Has(a, {"--network", "host"}));
  EXPECT_TRUE(Has(a, {"--init"}));
  EXPECT_TRUE(Has(a, {"--user", "1000:1000"}));
  EXPECT_TRUE(Has(a, {"--umask", "0077"}));  // the submitter's (SLURM_UMASK), as Slurm's
  EXPECT_TRUE(Has(a, {"--volume", "/home/ann/run:/home/ann/run", "--workdir", "/home/ann/run"}));
  EXPECT_TRUE(
      Has(a, {"--volume",
              "/var/lib/gantry-agent/scripts/7-2-1.sh:/var/lib/gantry-agent/scripts/7-2-1.sh:ro"}));
  // srun --container-mounts: where asked, read-only as asked.
  EXPECT_TRUE(Has(a, {"--volume", "/data/sets:/data:ro"}));
  EXPECT_TRUE(Has(a, {"--volume", "/scratch/ann:/scratch/ann"}));
  EXPECT_TRUE(Has(a, {"--device", "nvidia.com/gpu=GPU-a"}));
  EXPECT_TRUE(Has(a, {"--memory", "8000000000b"}));
  EXPECT_TRUE(Has(a, {"--cpus", "2.500"}));
  EXPECT_TRUE(Has(a, {"--env", "CUDA_VISIBLE_DEVICES=GPU-a"}));
  EXPECT_TRUE(Has(a, {"--env", "RANK=1"}));
  // The image, then the command, last.
  EXPECT_TRUE(Has(a, {"docker.io/pytorch/pytorch:latest", "python", "train.py", "--lr", "0.1"}));
  EXPECT_EQ(a.back(), "0.1");
  EXPECT_EQ(ContainerRemoveArgv(rt, s.name),
            (std::vector<std::string>{"podman", "--runtime", "runc", "rm", "--force", "--ignore",
                                      "--time", "0", "gantry-h100-0-7-2-1"}));
  // --container-workdir: the working directory inside; the job's own is still mounted.
  s.inside_workdir = "/workspace";
  const std::vector<std::string> inside = ContainerArgv(rt, s);
  EXPECT_TRUE(Has(inside, {"--volume", "/home/ann/run:/home/ann/run", "--workdir", "/workspace"}));
  // Names podman refuses are made safe.
  EXPECT_EQ(ContainerName("rack 1/node:3", 1, 1, 0), "gantry-rack-1-node-3-1-1-0");
}

TEST(ContainerTest, GpusGoByCdiNameWhereTheNodeHasSpecsElseAsDeviceNodes) {
  const fs::path dir = fs::temp_directory_path() / ("gantry-cdi-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::vector<std::string> uuids = {"GPU-a", "MIG-b"};
  std::vector<std::string> nodes =
      ContainerGpuDevices(uuids, {"/dev/nvidia0", "/dev/nvidia3"}, {dir.string()});
  ASSERT_GE(nodes.size(), 2u);
  EXPECT_EQ(nodes[0], "/dev/nvidia0");
  EXPECT_EQ(nodes[1], "/dev/nvidia3");
  std::ofstream(dir / "nvidia.yaml") << "cdiVersion: 0.5.0\n";
  EXPECT_EQ(ContainerGpuDevices(uuids, {"/dev/nvidia0", "/dev/nvidia3"}, {dir.string()}),
            (std::vector<std::string>{"nvidia.com/gpu=GPU-a", "nvidia.com/gpu=MIG-b"}));
  EXPECT_TRUE(ContainerGpuDevices({}, {}, {dir.string()}).empty());
  fs::remove_all(dir);
}

TEST(ContainerTest, RunCaptureGivesOutputOrTheFailure) {
  auto ok = RunCapture({"sh", "-c", "echo out; echo err >&2"});
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(*ok, "out\n");
  auto failed = RunCapture({"sh", "-c", "echo why >&2; exit 4"});
  ASSERT_FALSE(failed.ok());
  EXPECT_NE(failed.error().message.find("exit status 4: why"), std::string::npos)
      << failed.error().message;
  auto missing = RunCapture({"/nonexistent/podman", "ps"});
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error().message.rfind("cannot run it", 0), 0u) << missing.error().message;
  auto slow = RunCapture({"sleep", "5"}, 100);
  ASSERT_FALSE(slow.ok());
  EXPECT_NE(slow.error().message.find("no answer"), std::string::npos);
}

}  // namespace
}  // namespace gantry::agent
