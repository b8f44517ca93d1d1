// Chaos (issue 13, item 5): a mixed workload from two teams runs on a leader and a standby
// gantryd (real PostgreSQL) and real agents, while at random moments the leader is killed
// (-9) and comes back as the standby, agents are killed (-9) and restarted, and agents
// are frozen (SIGSTOP) for less than their lease. Afterwards, from the jobs' own logs
// (not gantryd's word): every accepted job finished, no job ran two copies at once, and
// no GPU ran two jobs at once.
//
// Short in CI (GANTRY_CHAOS_EVENTS, default 8 events, about a minute). The long run
// (bench/chaos_long.sh: GANTRY_CHAOS_LEADER_KILLS=100) repeats until that many leader
// kills happened. GANTRY_CHAOS_SEED picks the random sequence (default 1).
#include <gtest/gtest.h>
#include <signal.h>

#include <httplib.h>

#include <atomic>
#include <cstdlib>
#include <random>
#include <thread>

#include "harness.h"
#include "job_helpers.h"
#include "pg_harness.h"

namespace gantry::it {
namespace {

constexpr const char* kChaosCluster = R"(cluster: chaos
pools:
  - name: h100
    count: 4
    gpus: 8
    gpu_model: H100-80GB
    leaf_size: 4
    cpus: 64
    memory_gb: 512
queues:
  - name: research
    guaranteed_gpus: 12
    burst_gpus: 32
  - name: nlp
    guaranteed_gpus: 12
    burst_gpus: 32
  - name: serving
    guaranteed_gpus: 8
    burst_gpus: 8
)";

int EnvInt(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::atoi(v) : fallback;
}

struct Interval {
  double from = 0, to = 0;
  std::string job;
  int run = 0;
};

// A run's time on its node, from its log: first line to last.
Interval RunInterval(const Harness& h, const std::string& id, int run, int rank) {
  const std::string log = h.Path("out/" + id + "." + std::to_string(run) + "." + std::to_string(rank) + ".log");
  Interval iv{1e300, 0, id, run};
  for (const char* kind : {"start", "alive", "term", "graceful", "end"}) {
    for (double t : Times(log, kind)) {
      iv.from = std::min(iv.from, t);
      iv.to = std::max(iv.to, t);
    }
  }
  return iv;
}

bool Overlap(const Interval& a, const Interval& b) { return a.from < b.to && b.from < a.to; }

TEST(Chaos, LeaderKillsAgentCrashesAndFreezesLoseNothingAndRunNothingTwice) {
  if (server::testing::NoPostgres()) GTEST_SKIP() << "GANTRY_NO_POSTGRES=1: no PostgreSQL server";
  const int events_wanted = EnvInt("GANTRY_CHAOS_EVENTS", 8);
  const int leader_kills_wanted = EnvInt("GANTRY_CHAOS_LEADER_KILLS", 0);
  std::mt19937 rng(static_cast<unsigned>(EnvInt("GANTRY_CHAOS_SEED", 1)));
  auto pg = server::testing::PgServer::Start();
  ASSERT_TRUE(pg) << pg.error().message;
  auto db = (*pg)->NewDatabase();
  ASSERT_TRUE(db) << db.error().message;
  Harness h("chaos");
  h.UseDb((*pg)->Url(*db));
  h.Setup(kChaosCluster, {{"a", "research,serving"}, {"b", "nlp"}});
  h.Write("job.sh", kJobScript, true);
  std::filesystem::create_directories(h.Path("out"));
  // Agents' lease: 60% of 6 s, longer than a failover (about 1.5 s + a restore).
  const std::vector<std::string> flags = {"--leader-ttl-s", "1.5", "--node-timeout-s", "6"};
  h.StartServer(flags);
  h.StartPeer(flags);
  const std::string both = h.ServerUrl() + "," + h.PeerUrl();
  std::vector<int> agent(4);
  for (int i = 0; i < 4; ++i) agent[i] = h.StartAgent("h100-" + std::to_string(i), both);
  ASSERT_TRUE(Harness::WaitFor([&] { return h.NodesUp(4); }, 15));

  // The workload: whole GPUs, 2-node gangs, three tiers, two teams, through both URLs.
  std::atomic<bool> stop{false};
  std::mutex mu;
  std::vector<std::string> accepted;
  std::string refusals;
  std::thread submitter([&] {
    std::mt19937 r(7);
    for (int i = 0; !stop.load(); ++i) {
      const bool team_a = r() % 2 == 0;
      std::vector<std::string> argv = {GANTRY_BINARY, "--server", both, "submit", "--vram-gb", "20"};
      const int kind = static_cast<int>(r() % 10);
      if (kind == 0 && team_a) {
        argv.insert(argv.end(), {"--queue", "serving", "--tier", "critical", "--gpus", "2"});
      } else if (kind <= 2) {
        argv.insert(argv.end(), {"--queue", team_a ? "research" : "nlp", "--gpus", "8", "--replicas", "2"});
      } else {
        const char* gpus[] = {"1", "2", "4", "8"};
        argv.insert(argv.end(), {"--queue", team_a ? "research" : "nlp", "--gpus", gpus[r() % 4], "--tier",
                                 kind == 3 ? "best-effort" : "standard"});
      }
      argv.insert(argv.end(), {"--grace-s", "1", "--checkpoint-s", "1", "--"});
      for (auto& s : Job(h, 500 + static_cast<int>(r() % 2000), 0.2)) argv.push_back(s);
      RunResult res = it::Run(argv, {{"GANTRY_TOKEN", h.token(team_a ? "a" : "b")}});
      std::string id = res.out;
      while (!id.empty() && id.back() == '\n') id.pop_back();
      std::lock_guard lk(mu);
      if (res.rc == 0) {
        accepted.push_back(id);
      } else {
        refusals += res.err;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100 + r() % 200));
    }
  });

  auto healthy = [](const std::string& url) {
    httplib::Client c(url);
    c.set_connection_timeout(1, 0);
    auto r = c.Get("/healthz");
    return r && r->status == 200;
  };
  int leader_kills = 0, agent_kills = 0, freezes = 0, events = 0;
  double longest_failover = 0;
  while (events < events_wanted || leader_kills < leader_kills_wanted) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1500 + rng() % 2000));
    // Each kind once first, then half leader kills and a quarter each of the others.
    const int pick = static_cast<int>(rng() % 4);
    const int what = events < 3 ? events : pick <= 1 ? 0 : pick - 1;
    ++events;
    if (what == 0) {
      const auto t0 = std::chrono::steady_clock::now();
      h.KillServer(SIGKILL);
      ASSERT_TRUE(Harness::WaitFor([&] { return healthy(h.PeerUrl()); }, 15)) << "no takeover";
      longest_failover =
          std::max(longest_failover, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      h.SwapWithPeer();
      h.StartPeer(flags);  // back as the standby
      ++leader_kills;
    } else if (what == 1) {
      const int i = static_cast<int>(rng() % 4);
      h.StopAgent(agent[i], SIGKILL);
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      agent[i] = h.StartAgent("h100-" + std::to_string(i), both);
      ++agent_kills;
    } else {
      const int i = static_cast<int>(rng() % 4);
      ::kill(h.agent_pid(agent[i]), SIGSTOP);
      std::this_thread::sleep_for(std::chrono::milliseconds(500 + rng() % 1500));  // within its 3.6 s lease
      ::kill(h.agent_pid(agent[i]), SIGCONT);
      ++freezes;
    }
  }
  stop = true;
  submitter.join();
  std::cerr << "chaos: " << accepted.size() << " jobs accepted; " << leader_kills << " leader kills (longest failover "
            << longest_failover << " s), " << agent_kills << " agent kills, " << freezes << " freezes\n";
  EXPECT_EQ(refusals, "") << "a submit failed";
  std::set<std::string> ids(accepted.begin(), accepted.end());
  EXPECT_EQ(ids.size(), accepted.size()) << "an id was given twice";
  ASSERT_TRUE(Harness::WaitFor([&] { return AllEnded(h, ids); }, 180)) << h.Cli({"ls", "--all"}, h.token("admin")).out;

  const auto states = States(h);
  std::map<std::string, std::vector<Interval>> by_gpu;  // node/GPU -> runs that used it
  int runs = 0;
  for (const std::string& id : ids) {
    ASSERT_TRUE(states.count(id)) << id << " was accepted and then lost";
    EXPECT_EQ(states.at(id), "finished") << id << ": " << h.Job(id).dump();
    std::vector<Interval> mine;
    for (const auto& [run, ranks] : Envs(h, id)) {
      ++runs;
      for (const auto& [rank, env] : ranks) {
        const Interval iv = RunInterval(h, id, run, rank);
        if (iv.to == 0) continue;  // killed before its first line
        if (rank == 0) mine.push_back(iv);
        std::stringstream gpus(env.count("CUDA_VISIBLE_DEVICES") ? env.at("CUDA_VISIBLE_DEVICES") : "");
        for (std::string g; std::getline(gpus, g, ',');) by_gpu[env.at("GANTRY_NODE") + "/" + g].push_back(iv);
      }
    }
    for (size_t x = 0; x < mine.size(); ++x) {
      for (size_t y = x + 1; y < mine.size(); ++y) {
        EXPECT_FALSE(Overlap(mine[x], mine[y])) << id << " runs " << mine[x].run << " and " << mine[y].run
                                                << " ran at the same time";
      }
    }
  }
  for (const auto& [gpu, ivs] : by_gpu) {
    for (size_t x = 0; x < ivs.size(); ++x) {
      for (size_t y = x + 1; y < ivs.size(); ++y) {
        if (ivs[x].job == ivs[y].job && ivs[x].run == ivs[y].run) continue;
        EXPECT_FALSE(Overlap(ivs[x], ivs[y])) << gpu << " ran " << ivs[x].job << "." << ivs[x].run << " and "
                                              << ivs[y].job << "." << ivs[y].run << " at the same time";
      }
    }
  }
  std::cerr << "chaos: " << runs << " runs of " << ids.size() << " jobs checked on " << by_gpu.size() << " GPUs\n";
  EXPECT_GE(runs, static_cast<int>(ids.size()));
}

}  // namespace
}  // namespace gantry::it
