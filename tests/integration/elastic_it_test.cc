// Elastic gangs (issue 46, section 2) at cluster size, killed at the worst moment: 32 real
// agents (256 GPUs in 4 leaves), elastic jobs of 2-6 nodes that grow into idle nodes and
// shrink at their checkpoints for another team's stream of rigid jobs, while gantryd or
// one of the resizing job's agents is killed (-9) exactly while a resize stops its old
// run. Afterwards, from the jobs' own logs: every job finished, no job ran two runs at
// once, no GPU was used by two runs at once, and every run of an elastic job had a world
// size between its minimum and maximum, told to each of its workers.
#include <gtest/gtest.h>
#include <signal.h>

#include <atomic>
#include <random>
#include <set>
#include <thread>

#include "harness.h"
#include "job_helpers.h"

namespace gantry::it {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int kElasticNodes = 32;
constexpr int kElasticMin = 2, kElasticMax = 6;

TEST(Integration, ElasticGangsOn32NodesResizeThroughKillsOfGantrydAndAgents) {
  Harness h("elastic");
  if (std::getenv("GANTRY_KEEP")) h.Keep();
  // Guarantees well under the cluster: an elastic job's growth is burst, and the other
  // team's waiting jobs, within their guarantee, shrink it back.
  h.Setup("cluster: elastic\npools:\n  - name: h100\n    count: " + std::to_string(kElasticNodes) +
              "\n    gpus: 8\n    gpu_model: H100-80GB\n    leaf_size: 8\n    cpus: 64\n"
              "    memory_gb: 512\nqueues:\n  - name: research\n    guaranteed_gpus: 96\n"
              "    burst_gpus: 256\n  - name: nlp\n    guaranteed_gpus: 96\n    burst_gpus: 256\n",
          {{"a", "research"}, {"b", "nlp"}});
  h.Write("job.sh", kJobScript, true);
  h.Write("elastic.sh", kElasticScript, true);
  std::filesystem::create_directories(h.Path("out"));
  const std::vector<std::string> flags = {"--node-timeout-s", "6"};
  h.StartServer(flags);
  std::vector<int> agent;
  for (int i = 0; i < kElasticNodes; ++i)
    agent.push_back(h.StartAgent("h100-" + std::to_string(i)));
  ASSERT_TRUE(Harness::WaitFor([&] { return h.NodesUp(kElasticNodes); }, 60));

  std::mutex mu;
  std::set<std::string> elastic, rigid;
  auto submit = [&](const std::string& team, std::vector<std::string> args) {
    args.insert(args.begin(), "submit");
    RunResult r = h.Cli(args, h.token(team));
    if (r.rc != 0) return;  // gantryd was down: submits then fail with a clear error
    std::string id = r.out;
    while (!id.empty() && id.back() == '\n') id.pop_back();
    std::lock_guard lk(mu);
    (team == "a" ? elastic : rigid).insert(id);
  };
  std::atomic<bool> stop{false};
  // Team a: elastic jobs of 2-6 whole nodes, 6-12 s of work at full size, a checkpoint
  // each second, a second to clean up at the checkpoint signal (the window the kills aim
  // at). Team b: 1-, 2- and 4-node rigid jobs of 1-4 s, about 3 a second.
  std::thread submitter([&] {
    std::mt19937 r(3);
    for (int n = 0; !stop.load(); ++n) {
      if (n % 8 == 0) {
        submit("a", {"--queue", "research", "--gpus", "8", "--replicas",
                     std::to_string(kElasticMax), "--min-replicas", std::to_string(kElasticMin),
                     "--vram-gb", "20", "--checkpoint-s", "1", "--grace-s", "3", "--",
                     h.Path("elastic.sh"), h.Path("out"), std::to_string(6000 + r() % 6000), "1"});
      }
      const char* nodes[] = {"1", "1", "2", "4"};
      std::vector<std::string> args = {
          "--queue",   "nlp", "--gpus",         "8", "--replicas", nodes[r() % 4],
          "--vram-gb", "20",  "--checkpoint-s", "1", "--grace-s",  "1",
          "--"};
      for (std::string& s : Job(h, 1000 + static_cast<int>(r() % 3000), 0.2)) args.push_back(s);
      submit("b", args);
      std::this_thread::sleep_for(std::chrono::milliseconds(200 + r() % 300));
    }
  });

  // Kills aimed at resizes: whenever a job is stopping its run to resize, kill gantryd (and
  // start it again, as systemd would) or one of that job's agents (started again 0.3 s
  // later), in turn, at most one kill every 2 s, until 4 of each or 60 s.
  int server_kills = 0, agent_kills = 0;
  std::mt19937 r(5);
  const auto deadline = Clock::now() + std::chrono::seconds(60);
  while ((server_kills < 4 || agent_kills < 4) && Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    json resizing;
    for (const json& j : h.Jobs()) {
      if (j.value("state", "") == "stopping" && j.value("reason", "").rfind("resize:", 0) == 0 &&
          !j["nodes"].empty()) {
        resizing = j;
        break;
      }
    }
    if (resizing.is_null()) continue;
    if (server_kills <= agent_kills) {
      h.KillServer(SIGKILL);
      h.StartServer(flags);
      ++server_kills;
      std::cerr << "elastic: gantryd killed while " << resizing["id"] << " resized ("
                << resizing["reason"] << ")\n";
    } else {
      const json& nodes = resizing["nodes"];
      const std::string node = nodes[r() % nodes.size()];
      const size_t i = std::stoul(node.substr(node.rfind('-') + 1));
      h.StopAgent(agent[i], SIGKILL);
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      agent[i] = h.StartAgent(node);
      ++agent_kills;
      std::cerr << "elastic: agent " << node << " killed while " << resizing["id"] << " resized\n";
    }
    std::this_thread::sleep_for(std::chrono::seconds(2));
  }
  stop = true;
  submitter.join();
  EXPECT_EQ(server_kills, 4) << "too few resizes to aim at";
  EXPECT_EQ(agent_kills, 4) << "too few resizes to aim at";

  std::set<std::string> all = elastic;
  all.insert(rigid.begin(), rigid.end());
  ASSERT_TRUE(AllEndWhileProgressing(h, all, 90)) << h.Cli({"ls", "--all"}, h.token("admin")).out;
  const auto states = States(h);
  for (const std::string& id : all) {
    ASSERT_TRUE(states.count(id)) << id << " was accepted and then lost";
    EXPECT_EQ(states.at(id), "finished") << id << ": " << h.Job(id).dump();
  }
  const RunAudit audit = AuditRuns(h, all);

  // Every run of an elastic job: a size within its bounds, told to each of its workers.
  int runs = 0, whole = 0;
  std::set<int> sizes;
  for (const std::string& id : elastic) {
    for (const auto& [run, ranks] : Envs(h, id)) {
      ++runs;
      const auto& env = ranks.begin()->second;
      const int size = std::stoi(env.at("GANTRY_WORLD_SIZE"));
      sizes.insert(size);
      EXPECT_GE(size, kElasticMin) << id << " run " << run;
      EXPECT_LE(size, kElasticMax) << id << " run " << run;
      EXPECT_EQ(env.at("GANTRY_MIN_WORLD_SIZE"), std::to_string(kElasticMin));
      EXPECT_EQ(env.at("GANTRY_MAX_WORLD_SIZE"), std::to_string(kElasticMax));
      for (const auto& [rank, e] : ranks) {
        EXPECT_LT(rank, size) << id << " run " << run;
        EXPECT_EQ(e.at("GANTRY_WORLD_SIZE"), std::to_string(size)) << id << " run " << run;
        EXPECT_EQ(e.at("GANTRY_GPUS"), "0,1,2,3,4,5,6,7") << id << " run " << run;
      }
      whole += static_cast<int>(ranks.size()) == size;
    }
  }
  ASSERT_FALSE(sizes.empty()) << "no elastic job ran";
  // The event log (appended across gantryd's restarts) says the jobs grew and shrank.
  int grew = 0, shrank = 0;
  for (const json& e : Events(h)) {
    if (e.value("type", "") != "resize") continue;
    const int from = e["from"], size = e["size"];
    EXPECT_TRUE(elastic.count(e["job"])) << e.dump();
    EXPECT_GE(size, kElasticMin) << e.dump();
    EXPECT_LE(size, kElasticMax) << e.dump();
    ++(size > from ? grew : shrank);
  }
  EXPECT_GT(grew, 0);
  EXPECT_GT(shrank, 0);
  std::cerr << "elastic: " << elastic.size() << " elastic and " << rigid.size() << " rigid jobs; "
            << runs << " elastic runs (" << whole << " with every worker's "
            << "log), sizes " << *sizes.begin() << "-" << *sizes.rbegin() << "; " << grew
            << " grown, " << shrank << " shrunk; " << audit.runs << " runs on " << audit.gpus
            << " GPUs checked\n";
}

}  // namespace
}  // namespace gantry::it
