// DecodeDesiredWorker: a heartbeat answer's desired-worker entry, as gantryd writes it
// (Controller::DesiredWorker), into the value the agent starts and stops workers from.
#include "proto/node.h"

#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

namespace gantry::proto {
namespace {

using nlohmann::json;
using Env = std::map<std::string, std::string>;

DesiredWorker Decode(const json& j) {
  Result<DesiredWorker> d = DecodeDesiredWorker(j);
  EXPECT_TRUE(d) << d.error().ToString();
  return d ? *d : DesiredWorker{};
}

// Rank 1 of an sbatch job in an image, on two whole GPUs, with its limits.
json Exclusive() {
  return json::parse(R"({
    "job": "train-7", "seq": 42, "run": 2, "rank": 1, "action": "run", "grace_ms": 30000,
    "command": ["python", "train.py", "--epochs", "3"],
    "env": {"GANTRY_RANK": "1", "NCCL_DEBUG": "INFO"},
    "workdir": "/home/ada/run", "user": "ada", "signal": 10,
    "stdout": "out-1.log", "stderr": "/tmp/err-1.log",
    "script": "#!/bin/sh\nexec \"$@\"\n", "image": "docker.io/library/python:3.12",
    "alloc": {"node": "h100-3", "sharing": "exclusive", "gpus": [0, 3],
              "cpus_milli": 8000, "memory_bytes": 68719476736},
    "limits": {"memory_bytes": 68719476736, "cpus_milli": 8000},
    "emulate": {"util": 0.9, "vram_used_bytes": 1000, "idle_after_ms": -1}})");
}

TEST(DesiredWorkerTest, DecodesAnExclusiveWorkerWithItsLimitsAndEnv) {
  const DesiredWorker d = Decode(Exclusive());
  EXPECT_EQ(d.job, "train-7");
  EXPECT_EQ(d.seq, 42);
  EXPECT_EQ(d.run, 2);
  EXPECT_EQ(d.rank, 1);
  EXPECT_EQ(d.action, DesiredWorker::Action::kRun);
  EXPECT_EQ(d.grace_ms, 30000);
  EXPECT_EQ(d.command, (std::vector<std::string>{"python", "train.py", "--epochs", "3"}));
  EXPECT_EQ(d.env, (Env{{"GANTRY_RANK", "1"}, {"NCCL_DEBUG", "INFO"}}))
      << "by name; a value that is not a string is left out";
  EXPECT_EQ(d.workdir, "/home/ada/run");
  EXPECT_EQ(d.user, "ada");
  EXPECT_EQ(d.signal, 10);
  EXPECT_EQ(d.stdout_path, "out-1.log") << "resolved against the workdir by the agent, not here";
  EXPECT_EQ(d.stderr_path, "/tmp/err-1.log");
  EXPECT_EQ(d.script, "#!/bin/sh\nexec \"$@\"\n");
  EXPECT_EQ(d.image, "docker.io/library/python:3.12");
  EXPECT_EQ(d.alloc.sharing, "exclusive");
  EXPECT_EQ(d.alloc.gpus, (std::vector<int>{0, 3}));
  EXPECT_EQ(d.alloc.gpu, -1);
  EXPECT_FALSE(d.alloc.create);
  EXPECT_EQ(d.limits.memory_bytes, int64_t{68719476736}) << "from limits";
  EXPECT_EQ(d.limits.cpus_milli, 8000);
  ASSERT_TRUE(d.emulate.has_value());
  EXPECT_EQ(*d.emulate, (Emulate{0.9, 1000, -1}));
}

TEST(DesiredWorkerTest, DecodesAnMpsShare) {
  const DesiredWorker d = Decode(json::parse(R"({
    "job": "infer", "seq": 9, "run": 0, "rank": 0, "action": "run", "command": ["serve"],
    "alloc": {"node": "a100-1", "sharing": "mps", "gpu": 2, "share_milli": 250,
              "vram_bytes": 10737418240, "cpus_milli": 2000, "memory_bytes": 0},
    "limits": {"memory_bytes": 0, "cpus_milli": 2000}})"));
  EXPECT_EQ(d.alloc.sharing, "mps");
  EXPECT_EQ(d.alloc.gpu, 2);
  EXPECT_TRUE(d.alloc.gpus.empty());
  EXPECT_EQ(d.alloc.share_milli, 250);
  EXPECT_EQ(d.alloc.vram_bytes, int64_t{10737418240});
  EXPECT_EQ(d.limits.cpus_milli, 2000);
  EXPECT_EQ(d.limits.memory_bytes, 0);
}

TEST(DesiredWorkerTest, DecodesAMigInstanceTheAgentCreates) {
  const DesiredWorker d = Decode(json::parse(R"({
    "job": "nb", "seq": 5, "run": 1, "rank": 0, "action": "run", "command": ["jupyter"],
    "alloc": {"node": "h100-2", "sharing": "mig", "gpu": 1, "mig": "3g.40gb", "start": 4,
              "create": true, "memory_slices": 4, "compute_slices": 3}})"));
  EXPECT_EQ(d.alloc.sharing, "mig");
  EXPECT_EQ(d.alloc.gpu, 1);
  EXPECT_EQ(d.alloc.mig, "3g.40gb");
  EXPECT_EQ(d.alloc.start, 4);
  EXPECT_TRUE(d.alloc.create);
  EXPECT_EQ(d.alloc.memory_slices, 4);
  EXPECT_EQ(d.alloc.compute_slices, 3);
  EXPECT_EQ(d.alloc.share_milli, 0);
}

TEST(DesiredWorkerTest, AStopEntryTakesTheDefaultsForWhatItLeavesOut) {
  const DesiredWorker d = Decode(
      json::parse(R"({"job": "old", "run": 3, "rank": 2, "action": "stop", "grace_ms": 1500})"));
  EXPECT_EQ(d.job, "old");
  EXPECT_EQ(d.run, 3);
  EXPECT_EQ(d.rank, 2);
  EXPECT_EQ(d.action, DesiredWorker::Action::kStop);
  EXPECT_EQ(d.grace_ms, 1500);
  EXPECT_EQ(d.seq, 0);
  EXPECT_TRUE(d.command.empty());
  EXPECT_TRUE(d.env.empty());
  EXPECT_EQ(d.workdir, "") << "the agent's own";
  EXPECT_EQ(d.signal, 0) << "the agent's --preempt-signal";
  EXPECT_EQ(d.alloc.sharing, "exclusive");
  EXPECT_TRUE(d.alloc.gpus.empty());
  EXPECT_EQ(d.alloc.gpu, -1);
  EXPECT_EQ(d.alloc.start, -1);
  EXPECT_FALSE(d.alloc.create);
  EXPECT_EQ(d.limits.memory_bytes, 0);
  EXPECT_EQ(d.limits.cpus_milli, 0);
  EXPECT_TRUE(d.image.empty());
  EXPECT_FALSE(d.emulate.has_value());
  EXPECT_TRUE(Decode(json::parse(R"({"job": "x", "run": 0, "rank": 0})")).action ==
              DesiredWorker::Action::kRun)
      << "no action: run";
}

TEST(DesiredWorkerTest, AnEntryWithoutItsIdentityOrWithAWrongTypeIsAnError) {
  auto no_rank = DecodeDesiredWorker(json::parse(R"({"job": "x", "run": 0})"));
  ASSERT_FALSE(no_rank);
  EXPECT_EQ(no_rank.error().ToString(), "rank: is required");
  auto bad = DecodeDesiredWorker(
      json::parse(R"({"job": "x", "run": 0, "rank": 0, "command": "not a list"})"));
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().ToString(), "command: must be a list");
  auto odd_env =
      DecodeDesiredWorker(json::parse(R"({"job": "x", "run": 0, "rank": 0, "env": {"A": 7}})"));
  ASSERT_FALSE(odd_env);
  EXPECT_EQ(odd_env.error().ToString(), "env.A: must be a string");
}

}  // namespace
}  // namespace gantry::proto
