// gantryd at cluster size: 256 emulated nodes (one gantry-swarm process, two connections
// per node) through a workload shaped like the Slurm peer's (1-16 GPUs, 2-node gangs).
// The harness's settings are harsher than the defaults: heartbeats every 100 ms (20x the
// default rate: 2,560 a second here) and a 3 s node timeout (a 1.8 s lease). The control
// plane must keep every node's lease (no node may stop its jobs for want of an answer)
// and run every job exactly once.
#include <gtest/gtest.h>
#include <httplib.h>

#include <atomic>
#include <fstream>
#include <random>
#include <set>
#include <thread>

#include "harness.h"

namespace gantry::it {
namespace {

constexpr int kSwarmNodes = 256;

json ReadJson(const std::string& path) {
  std::ifstream in(path);
  return json::parse(in, nullptr, false);
}

TEST(Integration, SwarmOf256NodesRunsAWorkloadWithoutMissingALease) {
  Harness h("swarm");
  if (std::getenv("GANTRY_KEEP")) h.Keep();
  h.Setup("pools:\n  - name: gpu\n    count: " + std::to_string(kSwarmNodes) +
              "\n    gpus: 8\n    gpu_model: H100-80GB\n"
              "queues:\n  - name: research\n    guaranteed_gpus: 2048\n"
              "  - name: a\n    parent: research\n  - name: b\n    parent: research\n",
          {{"ta", "a"}, {"tb", "b"}});
  h.StartServer();
  h.StartSwarm({"gpu:" + std::to_string(kSwarmNodes) + ":8xH100-80GB"}, "swarm.json");
  ASSERT_TRUE(Harness::WaitFor([&] { return h.NodesUp(kSwarmNodes); }, 60))
      << "not every node registered";

  // The Slurm peer's mix: 1, 2, 4, 8 GPUs on one node, 16 as 2 nodes x 8; 1-3 s each.
  const int jobs = 1500;
  std::mt19937 rng(1);
  std::discrete_distribution<int> size({35, 20, 15, 15, 15});
  std::uniform_int_distribution<int> seconds(1, 3);
  std::vector<std::string> specs;
  for (int i = 0; i < jobs; ++i) {
    static const int kGpus[] = {1, 2, 4, 8, 8};
    const int s = size(rng);
    specs.push_back(json{{"queue", i % 2 ? "b" : "a"},
                         {"gpus", kGpus[s]},
                         {"replicas", s == 4 ? 2 : 1},
                         {"vram_gb", 40},
                         {"command", {"sleep", std::to_string(seconds(rng))}}}
                        .dump());
  }
  // Four submitters, as the Slurm peer's workload.
  std::atomic<int> next{0}, created{0};
  std::vector<std::thread> submitters;
  for (int t = 0; t < 4; ++t) {
    submitters.emplace_back([&] {
      for (int i = next++; i < jobs; i = next++) {
        int status = 0;
        h.Post("/v1/jobs", specs[static_cast<size_t>(i)], h.token(i % 2 ? "tb" : "ta"), &status);
        if (status == 201) ++created;
      }
    });
  }
  for (std::thread& t : submitters) t.join();
  ASSERT_EQ(created.load(), jobs);

  ASSERT_TRUE(Harness::WaitFor(
      [&] {
        const json health = h.Get("/healthz", "");
        return health.value("jobs_pending", -1) == 0 && health.value("jobs_running", -1) == 0;
      },
      240))
      << "the workload did not drain";
  for (const json& j : h.Jobs()) EXPECT_EQ(j["state"], "finished") << j.dump();
  // The scheduling core let go of every job once it ended (gantryd must not hold every
  // job it ever ran); the jobs are still listed above, from gantryd's own memory.
  {
    httplib::Client c(h.ServerUrl());
    auto m = c.Get("/metrics");
    ASSERT_TRUE(m);
    EXPECT_NE(m->body.find("\ngantry_scheduler_job_records 0\n"), std::string::npos);
  }
  // A few heartbeats more, so a late lease miss would show.
  std::this_thread::sleep_for(std::chrono::seconds(3));

  const json stats = ReadJson(h.Path("swarm.json"));
  ASSERT_TRUE(stats.is_object());
  EXPECT_EQ(stats["lease_misses"], 0) << stats.dump();
  EXPECT_EQ(stats["workers_stopped_by_lease"], 0) << stats.dump();
  EXPECT_EQ(stats["heartbeat_failures"], 0) << stats.dump();
  EXPECT_EQ(stats["nodes_registered"], kSwarmNodes) << stats.dump();
  EXPECT_GE(stats["workers_started"].get<int>(), jobs) << stats.dump();

  // Every job ran exactly once: one start, one finish, no requeue or preemption, and no
  // node went down.
  std::map<std::string, int> starts, finishes;
  int requeues = 0, node_downs = 0;
  std::ifstream in(h.Path("events.jsonl"));
  for (std::string line; std::getline(in, line);) {
    const json e = json::parse(line, nullptr, false);
    ASSERT_TRUE(e.is_object()) << line;
    const std::string type = e.value("type", "");
    if (type == "start") ++starts[e["job"]];
    if (type == "finish") ++finishes[e["job"]];
    requeues += type == "requeue" || type == "preempt";
    node_downs += type == "node_down";
  }
  EXPECT_EQ(static_cast<int>(starts.size()), jobs);
  EXPECT_EQ(static_cast<int>(finishes.size()), jobs);
  for (const auto& [job, n] : starts) EXPECT_EQ(n, 1) << job;
  for (const auto& [job, n] : finishes) EXPECT_EQ(n, 1) << job;
  EXPECT_EQ(requeues, 0);
  EXPECT_EQ(node_downs, 0);
  std::cerr << "swarm: " << stats.dump() << "\n";
}

}  // namespace
}  // namespace gantry::it
