// Chaos (issue 13, item 5): a mixed workload from two teams (whole GPUs, 2-node gangs,
// elastic gangs of 1-3 nodes, MIG instances, MPS shares; best-effort, standard and
// critical) runs on real agents while, at random moments:
// - the leader gantryd is killed (-9): on PostgreSQL the standby takes over and the old
//   one comes back as the standby; on SQLite gantryd is restarted, as systemd would;
// - agents are killed (-9) and restarted, or frozen (SIGSTOP) for less than their lease;
// - a node is cut off the network (its link down in its network namespace) for 1-8 s,
//   past its lease or not, while the rest goes on;
// - (SQLite) the disk under the database, a small tmpfs, is filled for 0.5-4 s, and every
//   fsync is slow (an LD_PRELOAD shim adds 30 ms); gantryd rides through it (issue 47,
//   B5: it stays up, refuses calls with 503, agents hold their workers, and it reads its
//   state back once the disk takes writes again), so it must never exit;
// - (PostgreSQL) the database is stopped (a fast shutdown: sessions cut) for 0.5-3 s and
//   started again; the leader rides through it the same way and keeps the lease.
// Afterwards, from the jobs' own logs (not gantryd's word): every accepted job finished,
// no job ran two copies at once, and no GPU was used by two jobs at once beyond what its
// sharing allows (a whole GPU: one job; MIG: one job per instance, no MPS beside it;
// MPS: shares adding up to at most the GPU).
//
// Short in CI (GANTRY_CHAOS_EVENTS, default 8 events per test, about a minute each). The
// long run (bench/chaos_long.sh: GANTRY_CHAOS_LEADER_KILLS=100) repeats until that many
// leader kills happened. GANTRY_CHAOS_SEED picks the random sequence (default 1). Link
// cuts need network namespaces (root, iproute2); without them the tests say so and run
// the other events.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mount.h>

#include <httplib.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <thread>

#include "harness.h"
#include "job_helpers.h"
#include "pg_harness.h"

namespace gantry::it {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

constexpr const char* kChaosCluster = R"(cluster: chaos
pools:
  - name: h100
    count: 4
    gpus: 8
    gpu_model: H100-80GB
    leaf_size: 4
    cpus: 64
    memory_gb: 512
    sharing: [mig, mps]
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

constexpr int kAgents = 4;

int EnvInt(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::atoi(v) : fallback;
}

class Chaos {
 public:
  Chaos(Harness& h, Netns* net, server::testing::PgServer* pg, std::vector<std::string> flags,
        std::string disk)
      : h_(h),
        net_(net),
        pg_(pg),
        postgres_(pg != nullptr),
        flags_(std::move(flags)),
        disk_(std::move(disk)),
        rng_(static_cast<unsigned>(EnvInt("GANTRY_CHAOS_SEED", 1))),
        heal_at_(kAgents) {}

  ~Chaos() {
    stop_ = true;
    if (submitter_.joinable()) submitter_.join();
  }

  void Start() {
    h_.StartServer(flags_);
    if (postgres_) h_.StartPeer(flags_);
    urls_ = postgres_ ? h_.ServerUrl() + "," + h_.PeerUrl() : h_.ServerUrl();
    for (int i = 0; i < kAgents; ++i)
      agent_.push_back(h_.StartAgent("h100-" + std::to_string(i), urls_));
    ASSERT_TRUE(Harness::WaitFor([&] { return h_.NodesUp(kAgents); }, 15));
    submitter_ = std::thread([this] { Submit(); });
  }

  // Draws events until `events` happened and `leader_kills` leader kills among them.
  void Run(int events, int leader_kills) {
    // The kinds this setup has; each once first, then half leader kills and the rest even.
    std::vector<std::string> kinds = {"leader", "agent", "freeze"};
    if (net_) kinds.push_back("cut");
    if (!disk_.empty()) kinds.push_back("disk");
    if (pg_) kinds.push_back("db");
    int n = 0;
    while (n < events || leader_kills_ < leader_kills) {
      SleepAndHeal(std::chrono::milliseconds(1500 + rng_() % 2000));
      std::string what = n < static_cast<int>(kinds.size()) ? kinds[static_cast<size_t>(n)]
                         : rng_() % 2 == 0                  ? "leader"
                                           : kinds[1 + rng_() % (kinds.size() - 1)];
      ++n;
      if (what == "leader") {
        KillLeader();
      } else if (what == "agent") {
        const int i = static_cast<int>(rng_() % kAgents);
        h_.StopAgent(agent_[static_cast<size_t>(i)], SIGKILL);
        SleepAndHeal(std::chrono::milliseconds(300));
        agent_[static_cast<size_t>(i)] = h_.StartAgent("h100-" + std::to_string(i), urls_);
        ++agent_kills_;
      } else if (what == "freeze") {
        const pid_t pid = h_.agent_pid(agent_[rng_() % kAgents]);
        ::kill(pid, SIGSTOP);
        SleepAndHeal(std::chrono::milliseconds(500 + rng_() % 1500));  // within its 3.6 s lease
        ::kill(pid, SIGCONT);
        ++freezes_;
      } else if (what == "cut") {
        const size_t i = rng_() % kAgents;
        if (heal_at_[i] != Clock::time_point()) continue;  // already cut off
        net_->SetLink(static_cast<int>(i) + 1, false);
        heal_at_[i] =
            Clock::now() + std::chrono::milliseconds(1000 + rng_() % 7000);  // lease: 3.6 s
        ++cuts_;
      } else if (what == "db") {
        RestartDatabase();
      } else {
        FillDisk();
      }
    }
    for (size_t i = 0; i < heal_at_.size(); ++i) {
      if (heal_at_[i] != Clock::time_point()) net_->SetLink(static_cast<int>(i) + 1, true);
      heal_at_[i] = {};
    }
    stop_ = true;
    if (submitter_.joinable()) submitter_.join();
    std::cerr << "chaos: " << accepted_.size() << " jobs accepted, " << refused_
              << " submits refused; " << leader_kills_
              << " leader kills (longest until served again " << longest_outage_ << " s), "
              << agent_kills_ << " agent kills, " << freezes_ << " freezes, " << cuts_
              << " link cuts, " << disk_fulls_ << " full disks, " << db_restarts_
              << " database restarts (gantryd exited " << server_exits_ << " times)\n";
    EXPECT_EQ(server_exits_, 0) << "gantryd exited in a store outage instead of riding through";
  }

  // Every accepted job ended; none lost, none ran twice at once, no GPU overused.
  void Check() {
    std::set<std::string> ids(accepted_.begin(), accepted_.end());
    EXPECT_EQ(ids.size(), accepted_.size()) << "an id was given twice";
    // The backlog a long run leaves (hundreds of gangs after 100 kills) drains at the
    // cluster's pace: wait while jobs keep ending.
    ASSERT_TRUE(AllEndWhileProgressing(h_, ids, 90))
        << h_.Cli({"ls", "--all"}, h_.token("admin")).out;
    const auto states = States(h_);
    for (const std::string& id : ids) {
      ASSERT_TRUE(states.count(id)) << id << " was accepted and then lost";
      EXPECT_EQ(states.at(id), "finished") << id << ": " << h_.Job(id).dump();
    }
    const RunAudit audit = AuditRuns(h_, ids);
    const auto events = Events(h_);
    std::cerr << "chaos: " << audit.runs << " runs of " << ids.size() << " jobs checked on "
              << audit.gpus << " GPUs; "
              << std::count_if(events.begin(), events.end(),
                               [](const json& e) { return e.value("type", "") == "resize"; })
              << " resizes\n";
    EXPECT_GE(audit.runs, static_cast<int>(ids.size()));
    EXPECT_TRUE(audit.modes.count("exclusive") && audit.modes.count("mig") &&
                audit.modes.count("mps"))
        << "the mix should have run whole GPUs, MIG and MPS";
  }

  int refused() const { return refused_; }
  const std::string& refusals() const { return refusals_; }

 private:
  // The workload: whole GPUs, 2-node gangs, MIG, MPS, three tiers, two teams, about 3
  // submits a second through every URL.
  void Submit() {
    std::mt19937 r(7);
    while (!stop_.load()) {
      const bool team_a = r() % 2 == 0;
      std::vector<std::string> argv = net_ ? net_->Exec(0) : std::vector<std::string>{};
      argv.insert(argv.end(), {GANTRY_BINARY, "--server", urls_, "submit"});
      const std::string queue = team_a ? "research" : "nlp";
      const int kind = static_cast<int>(r() % 12);
      bool elastic = false;
      if (kind == 0 && team_a) {
        argv.insert(argv.end(),
                    {"--queue", "serving", "--tier", "critical", "--gpus", "2", "--vram-gb", "20"});
      } else if (kind == 1) {
        argv.insert(argv.end(),
                    {"--queue", queue, "--gpus", "8", "--replicas", "2", "--vram-gb", "20"});
      } else if (kind == 2) {  // elastic: 1-3 nodes, resized at its checkpoints
        argv.insert(argv.end(), {"--queue", queue, "--gpus", "8", "--replicas", "3",
                                 "--min-replicas", "1", "--vram-gb", "20"});
        elastic = true;
      } else if (kind == 3) {
        const char* profile[][2] = {{"1g.10gb", "8"}, {"2g.20gb", "16"}, {"3g.40gb", "32"}};
        const auto& p = profile[r() % 3];
        argv.insert(argv.end(), {"--queue", queue, "--mig", p[0], "--vram-gb", p[1], "--replicas",
                                 std::to_string(1 + r() % 2)});
      } else if (kind == 4) {
        argv.insert(argv.end(), {"--queue", queue, "--sharing", "mps", "--gpus",
                                 r() % 2 ? "0.25" : "0.5", "--vram-gb", "10"});
      } else {
        const char* gpus[] = {"1", "2", "4", "8"};
        argv.insert(argv.end(), {"--queue", queue, "--gpus", gpus[r() % 4], "--vram-gb", "20",
                                 "--tier", kind == 5 ? "best-effort" : "standard"});
      }
      argv.insert(argv.end(), {"--grace-s", "1", "--checkpoint-s", "1", "--"});
      for (auto& s : Job(h_, 500 + static_cast<int>(r() % 2000), 0.2)) argv.push_back(s);
      if (elastic) argv[argv.size() - 4] = h_.Path("elastic.sh");
      RunResult res = it::Run(argv, {{"GANTRY_TOKEN", h_.token(team_a ? "a" : "b")}});
      std::string id = res.out;
      while (!id.empty() && id.back() == '\n') id.pop_back();
      {
        std::lock_guard lk(mu_);
        if (res.rc == 0) {
          accepted_.push_back(id);
        } else {
          ++refused_;
          refusals_ += res.err;
        }
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100 + r() % 200));
    }
  }

  bool Healthy(const std::string& url) const {
    bool ok = false;
    auto get = [&] {
      httplib::Client c(url);
      c.set_connection_timeout(1, 0);
      auto r = c.Get("/healthz");
      ok = r && r->status == 200;
    };
    if (net_) {
      net_->Within(0, get);
    } else {
      get();
    }
    return ok;
  }

  // Sleeps, healing cut links whose time has come.
  void SleepAndHeal(Clock::duration d) {
    const auto end = Clock::now() + d;
    while (Clock::now() < end) {
      for (size_t i = 0; i < heal_at_.size(); ++i) {
        if (heal_at_[i] != Clock::time_point() && Clock::now() >= heal_at_[i]) {
          net_->SetLink(static_cast<int>(i) + 1, true);
          heal_at_[i] = {};
        }
      }
      std::this_thread::sleep_for(
          std::min<Clock::duration>(end - Clock::now(), std::chrono::milliseconds(50)));
    }
  }

  void KillLeader() {
    const auto t0 = Clock::now();
    h_.KillServer(SIGKILL);
    if (postgres_) {
      ASSERT_TRUE(Harness::WaitFor([&] { return Healthy(h_.PeerUrl()); }, 15)) << "no takeover";
      h_.SwapWithPeer();
      h_.StartPeer(flags_);  // back as the standby
    } else {
      h_.StartServer(flags_);  // as systemd's Restart= would
      ASSERT_TRUE(Harness::WaitFor([&] { return Healthy(h_.ServerUrl()); }, 15)) << "no restart";
    }
    longest_outage_ =
        std::max(longest_outage_, std::chrono::duration<double>(Clock::now() - t0).count());
    ++leader_kills_;
  }

  // Fills the tmpfs under the database for a while, then frees it. gantryd must ride
  // through it; one that exited anyway is counted (a failure) and restarted, as
  // systemd's Restart= would, so that the rest of the run still checks something.
  void FillDisk() {
    const std::string filler = disk_ + "/filler";
    {
      std::ofstream out(filler, std::ios::binary);
      const std::string mb(1 << 20, 'x');
      while (out.write(mb.data(), static_cast<std::streamsize>(mb.size())) && out.flush()) {
      }
      const std::string kb(1024, 'x');
      out.clear();
      while (out.write(kb.data(), static_cast<std::streamsize>(kb.size())) && out.flush()) {
      }
    }
    ++disk_fulls_;
    SleepAndHeal(std::chrono::milliseconds(500 + rng_() % 3500));
    fs::remove(filler);
    if (!h_.ServerRunning()) {
      ++server_exits_;
      const auto t0 = Clock::now();
      h_.StartServer(flags_);
      ASSERT_TRUE(Harness::WaitFor([&] { return Healthy(h_.ServerUrl()); }, 15)) << "no restart";
      longest_outage_ =
          std::max(longest_outage_, std::chrono::duration<double>(Clock::now() - t0).count());
    }
  }

  // Stops PostgreSQL (a fast shutdown cuts every session) for a while and starts it
  // again; the leader must still be the leader, serving, once it is back.
  void RestartDatabase() {
    const std::string leader = h_.ServerUrl();
    ASSERT_TRUE(pg_->Stop().ok());
    SleepAndHeal(std::chrono::milliseconds(500 + rng_() % 2500));
    auto resumed = pg_->Resume();
    ASSERT_TRUE(resumed.ok()) << resumed.error().message;
    ++db_restarts_;
    ASSERT_TRUE(Harness::WaitFor([&] { return Healthy(leader); }, 15))
        << "the leader did not serve again after the database restart";
    if (!h_.ServerRunning()) ++server_exits_;
  }

  Harness& h_;
  Netns* net_;
  server::testing::PgServer* pg_;  // null on SQLite
  const bool postgres_;
  const std::vector<std::string> flags_;
  const std::string disk_;
  std::mt19937 rng_;
  std::string urls_;
  std::vector<int> agent_;
  std::vector<Clock::time_point> heal_at_;  // per agent: when its cut link comes back
  std::thread submitter_;
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::vector<std::string> accepted_;
  std::string refusals_;
  int refused_ = 0;
  int leader_kills_ = 0, agent_kills_ = 0, freezes_ = 0, cuts_ = 0, disk_fulls_ = 0,
      db_restarts_ = 0, server_exits_ = 0;
  double longest_outage_ = 0;
};

// Link cuts when this machine allows network namespaces.
std::unique_ptr<Netns> MaybeNetns() {
  std::string why;
  if (Netns::Available(&why)) return std::make_unique<Netns>(kAgents + 1);
  std::cerr << "chaos: no link cuts: " << why << "\n";
  return nullptr;
}

void PrepareChaos(Harness& h) {
  h.Setup(kChaosCluster, {{"a", "research,serving"}, {"b", "nlp"}});
  h.Write("job.sh", kJobScript, true);
  h.Write("elastic.sh", kElasticScript, true);
  fs::create_directories(h.Path("out"));
}

TEST(Chaos, LeaderKillsAgentCrashesFreezesAndCutLinksLoseNothingAndRunNothingTwice) {
  if (server::testing::NoPostgres()) GTEST_SKIP() << "GANTRY_NO_POSTGRES=1: no PostgreSQL server";
  auto pg = server::testing::PgServer::Start();
  ASSERT_TRUE(pg) << pg.error().message;
  auto db = (*pg)->NewDatabase();
  ASSERT_TRUE(db) << db.error().message;
  auto net = MaybeNetns();
  Harness h("chaos", net.get());
  h.UseDb((*pg)->Url(*db));
  PrepareChaos(h);
  // Agents' lease: 60% of 6 s, longer than a failover (about 1.5 s + a restore).
  Chaos chaos(h, net.get(), pg->get(), {"--leader-ttl-s", "1.5", "--node-timeout-s", "6"}, "");
  chaos.Start();
  if (HasFatalFailure()) return;
  chaos.Run(EnvInt("GANTRY_CHAOS_EVENTS", 8), EnvInt("GANTRY_CHAOS_LEADER_KILLS", 0));
  // The CLI follows the leader through both URLs: no submit may fail.
  EXPECT_EQ(chaos.refusals(), "") << "a submit failed";
  chaos.Check();
}

// A tmpfs of its own under the SQLite file, unmounted at the end.
class Tmpfs {
 public:
  Tmpfs(const std::string& dir, const std::string& size) : dir_(dir) {
    fs::create_directories(dir);
    if (::mount("tmpfs", dir.c_str(), "tmpfs", 0, ("size=" + size).c_str()) != 0) {
      why_ = std::string("cannot mount a tmpfs: ") + std::strerror(errno);
      return;
    }
    mounted_ = true;
  }
  ~Tmpfs() {
    if (mounted_) ::umount2(dir_.c_str(), MNT_DETACH);
  }
  bool mounted() const { return mounted_; }
  const std::string& why() const { return why_; }

 private:
  std::string dir_, why_;
  bool mounted_ = false;
};

TEST(Chaos, OnSqliteAFullDiskSlowFsyncRestartsAndCutLinksLoseNothing) {
  auto net = MaybeNetns();
  Harness h("chaos-sqlite", net.get());
  Tmpfs disk(h.Path("disk"), "24m");
  if (!disk.mounted()) GTEST_SKIP() << disk.why() << " (needs root)";
  h.UseDb(h.Path("disk/state.db"));
  PrepareChaos(h);
  h.ServerEnv({{"LD_PRELOAD", SLOW_FSYNC_LIBRARY}, {"GANTRY_SLOW_FSYNC_MS", "30"}});
  Chaos chaos(h, net.get(), nullptr, {"--node-timeout-s", "6"}, h.Path("disk"));
  chaos.Start();
  if (HasFatalFailure()) return;
  chaos.Run(EnvInt("GANTRY_CHAOS_EVENTS", 8), EnvInt("GANTRY_CHAOS_LEADER_KILLS", 0));
  EXPECT_NE(h.Read("gantryd.log").find("slow_fsync: each"), std::string::npos)
      << "the slow disk was not in force";
  // A submit may fail while the disk is full, with a clear error; none that was accepted
  // may be lost.
  if (chaos.refused() > 0) std::cerr << "chaos: refused submits said:\n" << chaos.refusals();
  chaos.Check();
}

}  // namespace
}  // namespace gantry::it
