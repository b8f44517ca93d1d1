// End to end: gantryd, three gantry-agents emulating 8 H100s each, and the gantry CLI,
// as real processes. Jobs are a shell script that writes its environment to a file and
// logs timestamps ("start", "alive" every 0.1 s, "term" when signalled, "graceful" when
// it exits within its grace), so the tests can check what ran where, with what, when.
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <set>
#include <sstream>

#include <httplib.h>

#include <atomic>
#include <thread>

#include "harness.h"
#include "job_helpers.h"
#include "pg_harness.h"

namespace gantry::it {
namespace {

namespace fs = std::filesystem;

constexpr const char* kCluster = R"(cluster: it
pools:
  - name: h100
    count: 3
    gpus: 8
    gpu_model: H100-80GB
    leaf_size: 3
    cpus: 64
    memory_gb: 512
    sharing: [mig, mps]
queues:
  - name: research
    guaranteed_gpus: 8
    burst_gpus: 24
  - name: nlp
    guaranteed_gpus: 8
    burst_gpus: 24
  - name: serving
    guaranteed_gpus: 8
    burst_gpus: 16
)";

const std::map<std::string, std::string> kTeams = {{"a", "research"}, {"b", "nlp,serving"}};

void Prepare(Harness& h) {
  h.Setup(kCluster, kTeams);
  h.Write("job.sh", kJobScript, true);
  fs::create_directories(h.Path("out"));
}

void StartCluster(Harness& h, int agents = 3) {
  h.StartServer();
  for (int i = 0; i < agents; ++i) h.StartAgent("h100-" + std::to_string(i));
  ASSERT_TRUE(Harness::WaitFor([&] { return h.NodesUp(agents); }, 15)) << "agents did not come up";
}

// ---------------------------------------------------------------------------------

TEST(Integration, MixedWorkloadRunsAsRealProcessesWithTheRightEnvironment) {
  Harness h("mixed");
  Prepare(h);
  StartCluster(h);
  const std::string& a = "a";
  const std::string& b = "b";
  // A YAML spec: a gang of two 4-GPU workers on one node.
  h.Write("gang.yaml",
          "id: gang\nqueue: research\nreplicas: 2\ngpus: 4\nvram_gb: 60\ntopology: node\n"
          "checkpoint_s: 1\ngrace_s: 2\ncommand: [" +
              h.Path("job.sh") + ", " + h.Path("out") + ", \"2500\"]\n");
  std::set<std::string> ids;
  ids.insert(Submit(h, a, {h.Path("gang.yaml")}));
  // Best-effort borrowers that fill the cluster and will be preempted.
  for (const char* id : {"be1", "be2"}) {
    std::vector<std::string> args = {
        "--id",      id,   "--queue",   "research", "--tier",         "best-effort", "--gpus", "8",
        "--vram-gb", "40", "--grace-s", "3",        "--checkpoint-s", "1",           "--"};
    for (auto& s : Job(h, 5000)) args.push_back(s);
    ids.insert(Submit(h, a, args));
  }
  // Running as real processes (their env files written), so that a preemption finds a
  // process to signal: the preemptors below may come within milliseconds.
  ASSERT_TRUE(Harness::WaitFor(
      [&] {
        auto st = States(h);
        return st["gang"] == "running" && st["be1"] == "running" && st["be2"] == "running" &&
               !Envs(h, "gang").empty() && !Envs(h, "be1").empty() && !Envs(h, "be2").empty();
      },
      15));
  // MIG, MPS and a small exclusive job, from both teams.
  {
    std::vector<std::string> args = {"--id",      "mig",     "--queue",    "research",
                                     "--mig",     "1g.10gb", "--replicas", "3",
                                     "--vram-gb", "8",       "--"};
    for (auto& s : Job(h, 1500)) args.push_back(s);
    ids.insert(Submit(h, a, args));
  }
  {
    std::vector<std::string> args = {"--id",      "mps",       "--queue", "nlp",        "--gpus",
                                     "0.25",      "--sharing", "mps",     "--replicas", "2",
                                     "--vram-gb", "10",        "--"};
    for (auto& s : Job(h, 1500)) args.push_back(s);
    ids.insert(Submit(h, b, args));
  }
  {
    std::vector<std::string> args = {"--id", "nlp2",      "--queue", "nlp", "--gpus",
                                     "2",    "--vram-gb", "20",      "--"};
    for (auto& s : Job(h, 2000)) args.push_back(s);
    ids.insert(Submit(h, b, args));
  }
  // The cluster is full: waiting jobs say why in `ls`.
  RunResult ls = h.Cli({"ls"}, h.token(a));
  EXPECT_EQ(ls.rc, 0);
  EXPECT_NE(ls.out.find("NODELIST(REASON)"), std::string::npos) << ls.out;
  for (const json& j : h.Jobs()) {
    if (j["state"] == "pending") {
      EXPECT_FALSE(j["reason"].get<std::string>().empty()) << j.dump();
    }
  }
  // squeue -A: one queue (gantryd filters) or several (the CLI does).
  auto listed = [&](const std::string& queues) {
    RunResult r = h.Cli({"ls", "-A", queues, "--json"}, h.token(a));
    EXPECT_EQ(r.rc, 0) << r.err;
    std::set<std::string> out;
    for (const json& j : json::parse(r.out)) out.insert(j["id"].get<std::string>());
    return out;
  };
  EXPECT_EQ(listed("nlp"), (std::set<std::string>{"mps", "nlp2"}));
  const std::set<std::string> both = listed("nlp,research");
  EXPECT_TRUE(both.count("nlp2") && both.count("be1") && both.count("mig")) << both.size();
  // A critical job of team b: capacity must be taken back from team a's borrowers.
  {
    std::vector<std::string> args = {"--id",   "crit", "--queue",   "serving", "--tier", "critical",
                                     "--gpus", "8",    "--vram-gb", "40",      "--"};
    for (auto& s : Job(h, 1500)) args.push_back(s);
    ids.insert(Submit(h, b, args));
  }
  ASSERT_TRUE(Harness::WaitFor([&] { return AllEnded(h, ids); }, 60))
      << h.Cli({"ls", "--all"}, h.token(a)).out;
  for (const auto& [id, state] : States(h)) EXPECT_EQ(state, "finished") << id;

  // Every worker ran as a real process with the right environment.
  auto uuids = [](const std::string& v) {
    return v.empty() ? std::vector<std::string>{} : Split(v, ',');
  };
  for (const std::string& id : ids) {
    auto runs = Envs(h, id);
    ASSERT_FALSE(runs.empty()) << id << " never ran";
    for (const auto& [run, ranks] : runs) {
      for (const auto& [rank, env] : ranks) {
        EXPECT_EQ(env.at("GANTRY_JOB_ID"), id);
        EXPECT_EQ(env.at("GANTRY_RUN"), std::to_string(run));
        EXPECT_EQ(env.at("GANTRY_RANK"), std::to_string(rank));
        EXPECT_EQ(env.at("RANK"), std::to_string(rank));
        EXPECT_EQ(env.count("GANTRY_TOKEN"), 0u) << "the agent's token leaked into job " << id;
        EXPECT_EQ(env.at("GANTRY_MASTER_ADDR"), "127.0.0.1");
        EXPECT_EQ(env.at("GANTRY_MASTER_PORT"), ranks.begin()->second.at("GANTRY_MASTER_PORT"));
        EXPECT_EQ(env.at("GANTRY_WORLD_SIZE"), std::to_string(ranks.size()));
      }
    }
  }
  auto gang = Envs(h, "gang");
  ASSERT_EQ(gang.begin()->second.size(), 2u);
  for (const auto& [rank, env] : gang.begin()->second) {
    auto gpus = uuids(env.at("CUDA_VISIBLE_DEVICES"));
    EXPECT_EQ(gpus.size(), 4u);
    for (const auto& g : gpus) EXPECT_EQ(g.rfind("GPU-", 0), 0u) << g;
    EXPECT_EQ(uuids(env.at("GANTRY_GPUS")).size(), 4u) << env.at("GANTRY_GPUS");
    EXPECT_EQ(env.at("GANTRY_NODE"),
              gang.begin()->second.at(0).at("GANTRY_NODE"));  // topology: node
  }
  auto mig = Envs(h, "mig");
  ASSERT_EQ(mig.begin()->second.size(), 3u);
  std::set<std::string> mig_devices;
  for (const auto& [rank, env] : mig.begin()->second) {
    EXPECT_EQ(env.at("CUDA_VISIBLE_DEVICES").rfind("MIG-", 0), 0u)
        << env.at("CUDA_VISIBLE_DEVICES");
    EXPECT_EQ(env.at("GANTRY_MIG_PROFILE"), "1g.10gb");
    EXPECT_EQ(uuids(env.at("GANTRY_GPUS")).size(), 1u) << "the MIG instance's parent GPU";
    mig_devices.insert(env.at("GANTRY_NODE") + env.at("CUDA_VISIBLE_DEVICES"));
  }
  EXPECT_EQ(mig_devices.size(), 3u) << "two MIG workers were given the same instance";
  const auto mps = Envs(h, "mps");
  for (const auto& [rank, env] : mps.begin()->second) {
    EXPECT_EQ(uuids(env.at("CUDA_VISIBLE_DEVICES")).size(), 1u);
    EXPECT_EQ(env.at("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"), "25");
    EXPECT_EQ(uuids(env.at("GANTRY_GPUS")).size(), 1u);
    EXPECT_EQ(env.at("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"), "0=9537M");  // 10 GB in MiB
  }
  EXPECT_EQ(uuids(Envs(h, "nlp2").begin()->second.at(0).at("CUDA_VISIBLE_DEVICES")).size(), 2u);
  EXPECT_EQ(Envs(h, "crit").begin()->second.at(0).at("GANTRY_TIER"), "critical");

  // Preempted jobs got SIGTERM, their grace (they exited cleanly 0.3 s later, not killed),
  // and ran again to the end.
  const std::vector<json> events = Events(h);
  int signalled = 0;
  for (const json& e : events) {
    if (e["type"] != "preempt") continue;
    const std::string victim = e["job"];
    EXPECT_TRUE(victim == "be1" || victim == "be2" || victim == "gang")
        << victim << " should not be preempted";
    EXPECT_TRUE(e.contains("signaled")) << e.dump();
    const auto runs = Envs(h, victim);
    ASSERT_FALSE(runs.empty());
    EXPECT_GE(runs.rbegin()->first, 2) << victim << " was not run again";
    EXPECT_EQ(runs.rbegin()->second.at(0).at("GANTRY_RUN"), std::to_string(runs.rbegin()->first));
    // A victim preempted before its agent had started it has no first run to signal.
    if (!runs.count(1)) continue;
    const std::string log = h.Path("out/" + victim + ".1.0.log");
    const auto term = Times(log, "term"), graceful = Times(log, "graceful");
    ASSERT_EQ(term.size(), 1u) << victim << " got no SIGTERM";
    ASSERT_EQ(graceful.size(), 1u) << victim << " was killed before its grace ended";
    EXPECT_GE(graceful[0] - term[0], 0.25);
    ++signalled;
  }
  EXPECT_GE(signalled, 1) << "no running job was preempted";
  for (const std::string& id : ids) EXPECT_EQ(CountEvents(events, "finish", id), 1) << id;

  // The CLI's other views work against the live server.
  RunResult nodes = h.Cli({"nodes"}, h.token(a));
  EXPECT_EQ(nodes.rc, 0);
  ASSERT_NE(nodes.out.find("h100-2"), std::string::npos) << nodes.out;
  // What keeps each node's workers apart, as its agent says (cgroups here or not: either
  // way the agent says which).
  EXPECT_NE(nodes.out.find("ISOLATION"), std::string::npos) << nodes.out;
  const size_t at = nodes.out.find("h100-2");
  EXPECT_NE(nodes.out.substr(at, nodes.out.find('\n', at) - at).find("cgroups,"), std::string::npos)
      << nodes.out;
  RunResult queues = h.Cli({"queues"}, h.token(b));
  EXPECT_NE(queues.out.find("serving"), std::string::npos);
  RunResult usage = h.Cli({"usage", "--since", "1h", "--json"}, h.token(b));
  ASSERT_EQ(usage.rc, 0) << usage.err;
  double hours = 0;
  const json usage_json = json::parse(usage.out);
  for (const json& row : usage_json["usage"]) hours += row["gpu_hours"].get<double>();
  EXPECT_GT(hours, 0.005);
  RunResult logs = h.Cli({"logs", "gang", "--rank", "1"}, h.token(a));
  EXPECT_EQ(logs.rc, 0);
  RunResult other = h.Cli({"logs", "gang"}, h.token(b));
  EXPECT_EQ(other.rc, 2) << "team b read team a's job output";
  std::string metrics;
  int status = 0;
  (void)h.Get("/metrics", "", &status);
  EXPECT_EQ(status, 200);
}

TEST(Integration, KillingGantrydMidWorkloadLosesNothingAndRunsNothingTwice) {
  Harness h("crash");
  Prepare(h);
  StartCluster(h);
  std::set<std::string> ids;
  for (int i = 0; i < 12; ++i) {
    std::vector<std::string> args = {"--queue",
                                     "research",
                                     "--gpus",
                                     std::to_string(1 + i % 4),
                                     "--vram-gb",
                                     "20",
                                     "--idempotency-key",
                                     "crash-" + std::to_string(i),
                                     "--"};
    for (auto& s : Job(h, 2500)) args.push_back(s);
    ids.insert(Submit(h, "a", args));
  }
  EXPECT_EQ(ids.size(), 12u);
  ASSERT_TRUE(Harness::WaitFor(
      [&] {
        int running = 0;
        for (const auto& [id, st] : States(h)) running += st == "running";
        return running >= 4;
      },
      15));
  h.KillServer(SIGKILL);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  h.StartServer();
  // A retried submission (same idempotency key) is the same job, not a second one.
  {
    std::vector<std::string> args = {"--queue", "research",          "--gpus",  "1", "--vram-gb",
                                     "20",      "--idempotency-key", "crash-0", "--"};
    for (auto& s : Job(h, 2500)) args.push_back(s);
    EXPECT_TRUE(ids.count(Submit(h, "a", args)));
  }
  for (int i = 12; i < 15; ++i) {
    std::vector<std::string> args = {"--queue", "research", "--gpus", "2", "--vram-gb", "20", "--"};
    for (auto& s : Job(h, 1500)) args.push_back(s);
    ids.insert(Submit(h, "a", args));
  }
  ASSERT_TRUE(Harness::WaitFor([&] { return AllEnded(h, ids); }, 60))
      << h.Cli({"ls", "--all"}, h.token("a")).out;
  const auto states = States(h);
  EXPECT_EQ(states.size(), ids.size()) << "a job was lost or duplicated";
  const std::vector<json> events = Events(h);
  for (const std::string& id : ids) {
    EXPECT_EQ(states.at(id), "finished") << id;
    // One run each: re-adopted, never restarted, and one start line per worker.
    auto runs = Envs(h, id);
    EXPECT_EQ(runs.size(), 1u) << id << " ran " << runs.size() << " times";
    for (const auto& [rank, env] : runs.begin()->second) {
      EXPECT_EQ(Times(h.Path("out/" + id + ".1." + std::to_string(rank) + ".log"), "start").size(),
                1u)
          << id;
    }
    EXPECT_EQ(CountEvents(events, "start", id), 1) << id;
    EXPECT_EQ(CountEvents(events, "requeue", id), 0) << id;
  }
}

TEST(Integration, TeamsCannotTouchEachOthersQueuesAndBadRequestsChangeNothing) {
  Harness h("tokens");
  Prepare(h);
  StartCluster(h, 1);
  std::vector<std::string> args = {"--id", "bjob",      "--queue", "nlp", "--gpus",
                                   "1",    "--vram-gb", "10",      "--"};
  for (auto& s : Job(h, 20000)) args.push_back(s);
  Submit(h, "b", args);
  const size_t events_before = Events(h).size();
  const json jobs_before = h.Jobs();

  // Issue 16, bug 8: `--gpus -1` was sent as "no GPUs"; the CLI must reject what the
  // job reader rejects, with the reader's message.
  RunResult neg = h.Cli({"submit", "--queue", "nlp", "--gpus", "-1", "--", "true"}, h.token("b"));
  EXPECT_EQ(neg.rc, 2) << neg.out;
  EXPECT_NE(neg.err.find("gpus: must be at least 0, got -1"), std::string::npos) << neg.err;
  // Issue 16, bug 9: an unknown state is an error, not an empty list.
  RunResult bogus = h.Cli({"ls", "--state", "bogus"}, h.token("b"));
  EXPECT_NE(bogus.rc, 0) << bogus.out;
  EXPECT_NE(bogus.err.find("no state"), std::string::npos) << bogus.err;

  // Team a submits to team b's queue: refused, with the reason.
  RunResult r = h.Cli({"submit", "--queue", "nlp", "--gpus", "1", "--vram-gb", "10", "--", "true"},
                      h.token("a"));
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.err.find("team a may not submit to queue nlp"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("HTTP 403"), std::string::npos) << r.err;
  // ... and cancels in it.
  r = h.Cli({"cancel", "bjob"}, h.token("a"));
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.err.find("team a may not cancel job bjob"), std::string::npos) << r.err;
  // No token, a wrong one, an agent's, a team's for a cluster operation.
  r = h.Cli({"ls"}, "");
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.err.find("missing token"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("HTTP 401"), std::string::npos);
  r = h.Cli({"cancel", "bjob"}, "gty_0000");
  EXPECT_NE(r.err.find("invalid token"), std::string::npos) << r.err;
  r = h.Cli({"submit", "--queue", "nlp", "--gpus", "1", "--vram-gb", "10", "--", "true"},
            h.token("agent"));
  EXPECT_NE(r.err.find("HTTP 403"), std::string::npos) << r.err;
  r = h.Cli({"drain", "h100-0"}, h.token("b"));
  EXPECT_NE(r.err.find("needs the admin token"), std::string::npos) << r.err;
  // Malformed specs: every problem with file, line and field.
  h.Write("bad.yaml", "queue: nlp\ngpus: -2\nvram_gb: 10\ncolour: red\ncommand: [\"true\"]\n");
  r = h.Cli({"submit", h.Path("bad.yaml")}, h.token("b"));
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.err.find("bad.yaml:2: gpus: must be at least 0, got -2"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("bad.yaml:4: colour: unknown field"), std::string::npos) << r.err;
  h.Write("broken.yaml", "queue: [nlp\n");
  r = h.Cli({"submit", h.Path("broken.yaml")}, h.token("b"));
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.err.find("broken.yaml:"), std::string::npos) << r.err;
  int status = 0;
  json body = h.Post("/v1/jobs", "{\"queue\": \"nlp\", ", h.token("b"), &status);
  EXPECT_EQ(status, 400);
  EXPECT_TRUE(body.contains("error"));
  // Too large: refused before it is read, and under the HTTP limit but over the spec limit.
  body = h.Post("/v1/jobs", std::string(3 << 20, ' '), h.token("b"), &status);
  EXPECT_EQ(status, 413);
  EXPECT_NE(body.value("error", "").find("too large"), std::string::npos) << body.dump();
  body = h.Post("/v1/jobs",
                R"({"queue":"nlp","gpus":1,"vram_gb":10,"command":"true","env":{"X":")" +
                    std::string(200000, 'x') + "\"}}",
                h.token("b"), &status);
  EXPECT_EQ(status, 413);
  // A job no GPU could hold.
  r = h.Cli({"submit", "--queue", "nlp", "--gpus", "1", "--vram-gb", "500", "--", "true"},
            h.token("b"));
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.err.find("can never run"), std::string::npos) << r.err;

  // Nothing changed: the same jobs, bjob untouched, no new events but waits.
  const json jobs_after = h.Jobs();
  ASSERT_EQ(jobs_after.size(), jobs_before.size());
  EXPECT_EQ(h.Job("bjob")["state"], "running");
  const std::vector<json> events_after = Events(h);
  for (size_t i = events_before; i < events_after.size(); ++i) {
    EXPECT_EQ(events_after[i]["type"], "wait") << events_after[i].dump();
  }
  // Team b may cancel its own job.
  r = h.Cli({"cancel", "bjob"}, h.token("b"));
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_TRUE(Harness::WaitFor([&] { return h.Job("bjob")["state"] == "cancelled"; }, 10));
}

TEST(Integration, AnAgentCutOffAndHealedLeavesNoDuplicateJob) {
  Harness h("partition");
  Prepare(h);
  h.StartServer();
  Proxy proxy(h.port());
  h.StartAgent("h100-0", "http://127.0.0.1:" + std::to_string(proxy.port()));
  h.StartAgent("h100-1");
  ASSERT_TRUE(Harness::WaitFor([&] { return h.NodesUp(2); }, 15));
  // Pin the job to h100-0 by draining h100-1 until it starts.
  ASSERT_EQ(h.Cli({"drain", "h100-1"}, h.token("admin")).rc, 0);
  std::vector<std::string> args = {"--id",      "p",  "--queue",   "research", "--gpus", "8",
                                   "--vram-gb", "40", "--grace-s", "1",        "--"};
  for (auto& s : Job(h, 4000, 0.1)) args.push_back(s);
  Submit(h, "a", args);
  ASSERT_TRUE(
      Harness::WaitFor([&] { return !Times(h.Path("out/p.1.0.log"), "alive").empty(); }, 10));
  ASSERT_EQ(h.Job("p")["nodes"][0], "h100-0");
  ASSERT_EQ(h.Cli({"resume", "h100-1"}, h.token("admin")).rc, 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(500));

  proxy.Cut(true);  // h100-0 can no longer reach gantryd
  ASSERT_TRUE(Harness::WaitFor([&] { return !Envs(h, "p")[2].empty(); }, 15)) << "p was not moved";
  EXPECT_EQ(Envs(h, "p")[2].at(0).at("GANTRY_NODE"), "h100-1");
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  proxy.Cut(false);  // healed
  ASSERT_TRUE(Harness::WaitFor([&] { return h.NodesUp(2); }, 15));
  ASSERT_TRUE(Harness::WaitFor([&] { return h.Job("p")["state"] == "finished"; }, 20));
  // The cut-off agent stopped its copy (it fenced itself when its lease ran out) before
  // the server started the new one: the two runs never overlapped.
  const auto run1 = Times(h.Path("out/p.1.0.log"), "alive");
  const auto run2 = Times(h.Path("out/p.2.0.log"), "alive");
  ASSERT_FALSE(run1.empty());
  ASSERT_FALSE(run2.empty());
  EXPECT_LT(*std::max_element(run1.begin(), run1.end()),
            *std::min_element(run2.begin(), run2.end()));
  EXPECT_EQ(Times(h.Path("out/p.1.0.log"), "term").size(), 1u);
  const std::vector<json> events = Events(h);
  EXPECT_EQ(CountEvents(events, "finish", "p"), 1);
  EXPECT_EQ(CountEvents(events, "requeue", "p"), 1);
  EXPECT_FALSE(fs::exists(h.Path("out/p.3.0.env")));
}

TEST(Integration, AFrozenAgentsWorkerIsStoppedByItsShimBeforeTheJobRunsElsewhere) {
  Harness h("frozen");
  Prepare(h);
  StartCluster(h, 2);
  ASSERT_EQ(h.Cli({"drain", "h100-1"}, h.token("admin")).rc, 0);
  std::vector<std::string> args = {"--id", "f",         "--queue", "research", "--gpus",
                                   "8",    "--vram-gb", "40",      "--"};
  for (auto& s : Job(h, 6000, 0.1)) args.push_back(s);
  Submit(h, "a", args);
  // Running for real: the worker process has logged that it is alive.
  ASSERT_TRUE(
      Harness::WaitFor([&] { return !Times(h.Path("out/f.1.0.log"), "alive").empty(); }, 10));
  ASSERT_EQ(h.Cli({"resume", "h100-1"}, h.token("admin")).rc, 0);
  // A frozen agent cannot fence: its worker's shim does, before the server moves the job.
  const double frozen =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  ::kill(h.agent_pid(0), SIGSTOP);
  ASSERT_TRUE(Harness::WaitFor([&] { return !Envs(h, "f")[2].empty(); }, 15)) << "f was not moved";
  ::kill(h.agent_pid(0), SIGCONT);
  ASSERT_TRUE(Harness::WaitFor([&] { return h.Job("f")["state"] == "finished"; }, 20));
  const auto run1 = Times(h.Path("out/f.1.0.log"), "alive");
  const auto run2 = Times(h.Path("out/f.2.0.log"), "alive");
  ASSERT_FALSE(run1.empty());
  ASSERT_FALSE(run2.empty());
  EXPECT_LT(*std::max_element(run1.begin(), run1.end()),
            *std::min_element(run2.begin(), run2.end()))
      << "the moved copy ran beside the new one";
  // Killed by its shim 2.7 s after the agent's last answered heartbeat (lease 1.8 s, its
  // fence's budget 0.6 s, half of the 0.6 s left), within the 3 s node timeout.
  EXPECT_LT(*std::max_element(run1.begin(), run1.end()), frozen + 3.0)
      << "it ran past the node timeout";
  EXPECT_EQ(Times(h.Path("out/f.1.0.log"), "end").size(), 0u) << "the moved copy ran to its end";
}

// orphan.sh OUT_DIR MILLISECONDS: job.sh's log, plus a child it leaves in its process
// group (`sleep 60 &`, its pid in OUT.child).
constexpr const char* kOrphanScript = R"SH(#!/bin/sh
out="$1/$GANTRY_JOB_ID.$GANTRY_RUN.$GANTRY_RANK"
sleep 60 &
echo $! > "$out.child"
echo "start $(date +%s.%N)" >> "$out.log"
end=$(( $(date +%s%3N) + $2 ))
while [ "$(date +%s%3N)" -lt "$end" ]; do echo "alive $(date +%s.%N)" >> "$out.log"; sleep 0.1; done
echo "end $(date +%s.%N)" >> "$out.log"
)SH";

// A live process (not a zombie waiting for a parent that does not reap).
bool Alive(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat;
  if (!std::getline(in, stat)) return false;
  const size_t close = stat.rfind(')');
  return close != std::string::npos && close + 2 < stat.size() && stat[close + 2] != 'Z';
}

// Issue 16, bug 4: an agent killed uncleanly left its worker running while the job was
// requeued. Now the worker dies with the agent (PDEATHSIG), and the restarted agent kills
// what the worker left in its process group; the job runs again, never overlapping.
// One agent and job r running orphan.sh for `ms`; the pid of the child it left in its
// group (0 when it did not start).
pid_t StartOrphanJob(Harness& h, int ms) {
  Prepare(h);
  h.Write("orphan.sh", kOrphanScript, true);
  StartCluster(h, 1);
  Submit(h, "a",
         {"--id", "r", "--queue", "research", "--gpus", "4", "--vram-gb", "40", "--",
          h.Path("orphan.sh"), h.Path("out"), std::to_string(ms)});
  const bool started = Harness::WaitFor(
      [&] {
        return !Times(h.Path("out/r.1.0.log"), "alive").empty() &&
               fs::exists(h.Path("out/r.1.0.child"));
      },
      10);
  return started ? std::stoi(h.Read("out/r.1.0.child")) : 0;
}

// An agent killed uncleanly (a crash, an upgrade's kill) and started again within its
// lease takes its worker over where it runs: the job runs once, to its own end, and is not
// requeued (workers run under a shim that outlives the agent: agent/launcher.h).
TEST(Integration, AnAgentKilledAndRestartedWithinItsLeaseReadoptsItsRunningWorker) {
  Harness h("agent-restart");
  const pid_t child = StartOrphanJob(h, 4000);
  ASSERT_GT(child, 0);
  h.StopAgent(0, SIGKILL);
  const size_t alive_then = Times(h.Path("out/r.1.0.log"), "alive").size();
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  EXPECT_GT(Times(h.Path("out/r.1.0.log"), "alive").size(), alive_then)
      << "the worker died with its agent";
  h.StartAgent("h100-0");
  ASSERT_TRUE(Harness::WaitFor([&] { return h.Job("r")["state"] == "finished"; }, 20))
      << h.Job("r").dump();
  EXPECT_EQ(Times(h.Path("out/r.1.0.log"), "end").size(), 1u)
      << "the worker did not run to its end";
  EXPECT_FALSE(fs::exists(h.Path("out/r.2.0.log"))) << "r ran again";
  EXPECT_EQ(CountEvents(Events(h), "requeue", "r"), 0);
  EXPECT_EQ(CountEvents(Events(h), "finish", "r"), 1);
  EXPECT_NE(h.Read("agent-h100-0.log").find("job r run 1 rank 0: re-adopted"), std::string::npos)
      << h.Read("agent-h100-0.log");
  // What the worker left in its group goes when it ends, as with any worker.
  EXPECT_TRUE(Harness::WaitFor([&] { return !Alive(child); }, 5)) << "its child outlived it";
  // An upgrade: SIGUSR2 makes the agent leave at once, its workers running, for the next.
  Submit(h, "a",
         {"--id", "u", "--queue", "research", "--gpus", "4", "--vram-gb", "40", "--",
          h.Path("orphan.sh"), h.Path("out"), "3000"});
  ASSERT_TRUE(
      Harness::WaitFor([&] { return !Times(h.Path("out/u.1.0.log"), "alive").empty(); }, 10));
  h.StopAgent(1, SIGUSR2);
  EXPECT_NE(h.Read("agent-h100-0.log").find("leaving 1 running worker(s) to the next gantry-agent"),
            std::string::npos)
      << h.Read("agent-h100-0.log");
  h.StartAgent("h100-0");
  ASSERT_TRUE(Harness::WaitFor([&] { return h.Job("u")["state"] == "finished"; }, 20))
      << h.Job("u").dump();
  EXPECT_EQ(Times(h.Path("out/u.1.0.log"), "end").size(), 1u);
  EXPECT_EQ(CountEvents(Events(h), "requeue", "u"), 0);
}

// An agent killed uncleanly and not back within its lease: the worker's shim stops it (its
// stop signal, then SIGKILL) before the server's node timeout, so when the server requeues
// the job nothing of the first run is left; the next agent runs it again.
TEST(Integration, AnAgentGoneForItsLeaseHasItsWorkerStoppedBeforeTheJobIsRequeued) {
  Harness h("agent-gone");
  const pid_t child = StartOrphanJob(h, 60000);
  ASSERT_GT(child, 0);
  const double killed_at =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  h.StopAgent(0, SIGKILL);
  ASSERT_TRUE(Harness::WaitFor([&] { return CountEvents(Events(h), "requeue", "r") == 1; }, 15));
  const auto run1 = Times(h.Path("out/r.1.0.log"), "alive");
  ASSERT_FALSE(run1.empty());
  // The lease is 1.8 s (60% of the 3 s node timeout), the shim checks every 0.1 s.
  EXPECT_GT(run1.back(), killed_at + 1.0) << "the worker did not outlive its agent";
  EXPECT_LT(run1.back(), killed_at + 3.0) << "the worker ran past the server's node timeout";
  EXPECT_FALSE(Alive(child)) << "its group was not stopped";
  // Requeued, it waits again (no run of it is on): `show` says so, not "running for".
  const RunResult shown = h.Cli({"show", "r"}, h.token("a"));
  EXPECT_NE(shown.out.find("again, after run 1"), std::string::npos) << shown.out;
  EXPECT_EQ(shown.out.find("running for"), std::string::npos) << shown.out;
  h.StartAgent("h100-0");
  ASSERT_TRUE(
      Harness::WaitFor([&] { return !Times(h.Path("out/r.2.0.log"), "alive").empty(); }, 15))
      << "r did not run again";
  EXPECT_LT(run1.back(), Times(h.Path("out/r.2.0.log"), "alive").front());
  EXPECT_NE(h.Read("agent-h100-0.log").find("stopped by its shim"), std::string::npos)
      << h.Read("agent-h100-0.log");
  EXPECT_EQ(CountEvents(Events(h), "requeue", "r"), 1);
  EXPECT_EQ(h.Cli({"cancel", "r"}, h.token("a")).rc, 0);
}

// A site's agents upgraded at once (SIGUSR2, every agent, then the new ones started), and
// then all killed at once (-9) and started again 300 ms later: every job runs once, to its
// end, never requeued. Real agents, one per node, each with two running workers (sites
// upgrade every node's agent together; one agent at a time proves little).
// GANTRY_IT_SITE_NODES sets the size (default 32; bench figures: docs/benchmarks.md).
TEST(Integration, EveryAgentOfASiteUpgradedAndThenKilledAtOnceKeepsEveryJobRunning) {
  const char* env = std::getenv("GANTRY_IT_SITE_NODES");
  const int nodes = env != nullptr && std::atoi(env) > 0 ? std::atoi(env) : 32;
  const int jobs = 2 * nodes;
  Harness h("site-upgrade");
  h.Setup("cluster: site\npools:\n  - name: h100\n    count: " + std::to_string(nodes) +
              "\n    gpus: 8\n    gpu_model: H100-80GB\n    leaf_size: 16\n    cpus: 64\n    "
              "memory_gb: 512\n"
              "queues:\n  - name: research\n    guaranteed_gpus: 8\n",
          {{"a", "research"}});
  // Start and end lines only: 64 workers logging every 0.1 s would load the machine more
  // than the agents do.
  h.Write("run.sh",
          "#!/bin/sh\nout=\"$1/$GANTRY_JOB_ID.$GANTRY_RUN.$GANTRY_RANK.log\"\n"
          "echo \"start $(date +%s.%N)\" >> \"$out\"\nsleep \"$2\"\necho \"end $(date +%s.%N)\" >> "
          "\"$out\"\n",
          true);
  fs::create_directories(h.Path("out"));
  // Site timings (a heartbeat a second, the 30 s node timeout: an 18 s lease).
  h.StartServer({"--heartbeat-ms", "1000", "--node-timeout-s", "30"});
  for (int i = 0; i < nodes; ++i) h.StartAgent("h100-" + std::to_string(i));
  ASSERT_TRUE(Harness::WaitFor([&] { return h.NodesUp(nodes); }, 60)) << "agents did not come up";
  const int seconds = 15 + nodes / 4;  // outlasts both rounds on a loaded 2-core machine
  for (int j = 0; j < jobs; ++j) {
    int status = 0;
    const json spec = {{"id", "w" + std::to_string(j)},
                       {"queue", "research"},
                       {"gpus", 4},
                       {"vram_gb", 40},
                       {"command", {h.Path("run.sh"), h.Path("out"), std::to_string(seconds)}}};
    const json reply = h.Post("/v1/jobs", spec.dump(), h.token("a"), &status);
    ASSERT_EQ(status, 201) << reply.dump();
  }
  auto started = [&] {
    int n = 0;
    for (int j = 0; j < jobs; ++j)
      n += !Times(h.Path("out/w" + std::to_string(j) + ".1.0.log"), "start").empty();
    return n;
  };
  ASSERT_TRUE(Harness::WaitFor([&] { return started() == jobs; }, 60))
      << started() << " of " << jobs << " started";
  auto readopted = [&] {
    size_t n = 0;
    for (int i = 0; i < nodes; ++i) {
      const std::string log = h.Read("agent-h100-" + std::to_string(i) + ".log");
      for (size_t at = log.find(": re-adopted,"); at != std::string::npos;
           at = log.find(": re-adopted,", at + 1))
        ++n;
    }
    return static_cast<int>(n);
  };
  // Every agent at once: signal all, then reap them, then start the successors.
  int first = 0;  // the running agents' indexes: [first, first + nodes)
  auto round = [&](int sig, int pause_ms, int expect) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = first; i < first + nodes; ++i) ::kill(h.agent_pid(i), sig);
    for (int i = first; i < first + nodes; ++i) h.StopAgent(i, sig);
    first += nodes;
    std::this_thread::sleep_for(std::chrono::milliseconds(pause_ms));
    for (int i = 0; i < nodes; ++i) h.StartAgent("h100-" + std::to_string(i));
    EXPECT_TRUE(Harness::WaitFor([&] { return readopted() == expect; }, 60))
        << readopted() << " re-adopted, not " << expect;
    std::cerr << "[ site ] " << nodes << " agents (" << strsignal(sig) << "): " << readopted()
              << " workers re-adopted in all, this round in "
              << std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()
              << " s\n";
  };
  round(SIGUSR2, 0, jobs);  // an upgrade: the agents leave their workers to the next
  std::this_thread::sleep_for(std::chrono::seconds(3));  // heartbeats answered: fresh leases
  round(SIGKILL, 300, 2 * jobs);                         // a crash of every agent
  std::set<std::string> ids;
  for (int j = 0; j < jobs; ++j) ids.insert("w" + std::to_string(j));
  ASSERT_TRUE(Harness::WaitFor([&] { return AllEnded(h, ids); }, seconds + 60));
  const std::vector<json> events = Events(h);
  for (const std::string& id : ids) {
    EXPECT_EQ(h.Job(id)["state"], "finished") << id;
    EXPECT_EQ(Times(h.Path("out/" + id + ".1.0.log"), "end").size(), 1u)
        << id << " did not run to its end once";
    EXPECT_FALSE(fs::exists(h.Path("out/" + id + ".2.0.log"))) << id << " ran again";
    EXPECT_EQ(CountEvents(events, "requeue", id), 0) << id;
    EXPECT_EQ(CountEvents(events, "finish", id), 1) << id;
  }
}

// Issue 16, isolation: each worker in a cgroup of its own (where the machine gives one):
// a job over its memory_gb is killed by the kernel and fails saying so, and a daemon a
// worker started in a session of its own (out of its process group's reach) ends with it.
TEST(Integration, WorkersRunInCgroupsAnOomKillIsReportedAndNothingOutlivesAWorker) {
  Harness h("cgroups");
  Prepare(h);
  StartCluster(h, 1);
  const std::string log = h.Read("agent-h100-0.log");
  if (log.find("workers run in cgroups") == std::string::npos) {
    GTEST_SKIP() << "the agent found no writable cgroup here: " << log;
  }
  Submit(h, "a",
         {"--id", "hog", "--queue", "research", "--gpus", "1", "--vram-gb", "10", "--memory-gb",
          "0.064", "--", "/bin/sh", "-c", "head -c 300000000 /dev/zero | tail"});
  const std::string daemon_file = h.Path("out/daemon.pid");
  Submit(
      h, "a",
      {"--id", "daemon", "--queue", "research", "--gpus", "1", "--vram-gb", "10", "--", "/bin/sh",
       "-c", "setsid sleep 300 > /dev/null 2>&1 & echo $! > " + daemon_file + "; sleep 0.5"});
  ASSERT_TRUE(Harness::WaitFor([&] { return h.Job("hog")["state"] == "failed"; }, 20))
      << h.Job("hog").dump();
  const std::string reason = h.Job("hog")["reason"];
  EXPECT_NE(reason.find("out of memory: it reached its memory limit of 0.064"), std::string::npos)
      << reason;
  EXPECT_EQ(h.Job("hog")["exit_code"], 137) << h.Job("hog").dump();
  const RunResult shown = h.Cli({"show", "hog"}, h.token("a"));
  EXPECT_NE(shown.out.find("  exited 137"), std::string::npos) << shown.out;  // its shell's code
  // A worker the kernel (or anyone) SIGKILLs says so, not "exited 0".
  Submit(h, "a",
         {"--id", "killed", "--queue", "research", "--gpus", "1", "--vram-gb", "10", "--",
          "/bin/sh", "-c", "kill -9 $$"});
  ASSERT_TRUE(Harness::WaitFor([&] { return h.Job("killed")["state"] == "failed"; }, 20))
      << h.Job("killed").dump();
  const RunResult killed = h.Cli({"show", "killed"}, h.token("a"));
  EXPECT_NE(killed.out.find("killed by SIGKILL"), std::string::npos) << killed.out;
  EXPECT_EQ(killed.out.find("exited 0"), std::string::npos) << killed.out;
  ASSERT_TRUE(Harness::WaitFor([&] { return h.Job("daemon")["state"] == "finished"; }, 20));
  const pid_t daemon = std::stoi(h.Read("out/daemon.pid"));
  EXPECT_TRUE(Harness::WaitFor([&] { return !Alive(daemon); }, 5))
      << "the daemon outlived its worker";
}

// Issue 16, identity: a token names a user of a team; their jobs show it (ls USER, show,
// usage per user) and, on an agent with --run-as user (the default for a root agent), run
// as that Unix account, never as root; a job whose user has no account, or that names no
// user, is refused there with the reason.
TEST(Integration, JobsRunAsTheUserTheirTokenNames) {
  if (::geteuid() != 0) GTEST_SKIP() << "running jobs as another user needs a root agent";
  Harness h("run-as");
  Prepare(h);
  h.AddToken("nobody", {"--team", "a", "--queues", "research", "--user", "nobody"});
  h.AddToken("ghost", {"--team", "a", "--queues", "research", "--user", "gantry-no-such-user"});
  h.StartServer();
  h.StartAgent("h100-0", "", {"--run-as", "user"});
  ASSERT_TRUE(Harness::WaitFor([&] { return h.NodesUp(1); }, 15));
  fs::permissions(h.Path("out"), fs::perms::all);  // nobody writes its answer there
  auto submit = [&](const std::string& who, const std::string& id) {
    const RunResult r =
        h.Cli({"submit", "--id", id, "--queue", "research", "--gpus", "1", "--vram-gb", "10", "--",
               "/bin/sh", "-c", "id -u > " + h.Path("out/" + id + ".uid") + "; echo $HOME $USER"},
              h.token(who));
    EXPECT_EQ(r.rc, 0) << r.err;
  };
  submit("nobody", "mine");
  submit("ghost", "ghost");
  submit("a", "anon");
  // A workdir where its user may not write is not made for it by the (root) agent, nor
  // given to it: the job fails saying so.
  fs::create_directories(h.Path("rootonly"));
  fs::permissions(h.Path("rootonly"), fs::perms::owner_all);
  ASSERT_EQ(h.Cli({"submit", "--id", "escape", "--queue", "research", "--gpus", "1", "--vram-gb",
                   "10", "--workdir", h.Path("rootonly/ssh"), "--", "true"},
                  h.token("nobody"))
                .rc,
            0);
  // sbatch -o naming a file its user may not write: not truncated (the worker opens it as
  // its user), and not read back as the job's log by the (root) agent either.
  h.Write("rootonly/secret.txt", "top secret\n");
  fs::permissions(h.Path("rootonly/secret.txt"), fs::perms::owner_read | fs::perms::owner_write);
  fs::create_directories(h.Path("open"));
  fs::permissions(h.Path("open"), fs::perms::all);
  h.Write("open/peek.sh", "#!/bin/sh\necho peeked\n", true);
  const RunResult peek =
      h.Cli({"sbatch", "-A", "research", "-G", "1", "-J", "peek", "-D", h.Path("open"), "-o",
             h.Path("rootonly/secret.txt"), h.Path("open/peek.sh")},
            h.token("nobody"));
  ASSERT_EQ(peek.rc, 0) << peek.err;
  ASSERT_EQ(peek.out.rfind("Submitted batch job ", 0), 0u) << peek.out;
  std::string peek_id = "j" + peek.out.substr(20);  // sbatch prints the number
  while (!peek_id.empty() && (peek_id.back() == '\n' || peek_id.back() == ' ')) peek_id.pop_back();
  ASSERT_TRUE(Harness::WaitFor([&] { return h.Job("mine")["state"] == "finished"; }, 20))
      << h.Job("mine").dump();
  EXPECT_EQ(h.Read("out/mine.uid"), "65534\n");
  EXPECT_EQ(h.Job("mine")["user"], "nobody");
  ASSERT_TRUE(Harness::WaitFor([&] { return h.Job("ghost")["state"] == "failed"; }, 20));
  EXPECT_NE(h.Job("ghost")["reason"].get<std::string>().find(
                "user gantry-no-such-user has no Unix account"),
            std::string::npos)
      << h.Job("ghost").dump();
  ASSERT_TRUE(Harness::WaitFor([&] { return h.Job("anon")["state"] == "failed"; }, 20));
  EXPECT_NE(h.Job("anon")["reason"].get<std::string>().find("names no user"), std::string::npos)
      << h.Job("anon").dump();
  EXPECT_FALSE(fs::exists(h.Path("out/anon.uid"))) << "a job without a user ran (as root)";
  ASSERT_TRUE(Harness::WaitFor([&] { return h.Job("escape")["state"] == "failed"; }, 20))
      << h.Job("escape").dump();
  EXPECT_NE(h.Job("escape")["reason"].get<std::string>().find(
                "cannot create it as uid 65534: Permission denied"),
            std::string::npos)
      << h.Job("escape").dump();
  EXPECT_FALSE(fs::exists(h.Path("rootonly/ssh")));
  ASSERT_TRUE(Harness::WaitFor([&] { return h.Job(peek_id)["state"] == "failed"; }, 20))
      << h.Job(peek_id).dump();
  EXPECT_EQ(h.Read("rootonly/secret.txt"), "top secret\n");
  ASSERT_TRUE(Harness::WaitFor(
      [&] {
        return h.Cli({"logs", peek_id}, h.token("nobody"))
                   .out.find("cannot open the output file") != std::string::npos;
      },
      10))
      << h.Cli({"logs", peek_id}, h.token("nobody")).out;
  EXPECT_EQ(h.Cli({"logs", peek_id}, h.token("nobody")).out.find("top secret"), std::string::npos);
  const RunResult ls = h.Cli({"ls", "--all"}, h.token("admin"));
  EXPECT_NE(ls.out.find("USER"), std::string::npos) << ls.out;
  EXPECT_NE(ls.out.find("nobody"), std::string::npos) << ls.out;
  const RunResult usage = h.Cli({"usage", "--json"}, h.token("admin"));
  EXPECT_NE(usage.out.find("\"user\":\"nobody\""), std::string::npos) << usage.out;
}

// Issue 16, operational logging: with --log-format json every line gantryd and the agent
// write on stderr is a JSON object a log shipper reads, and they say who did what:
// registrations, submits (by whom), starts, ends with the reason, refusals.
TEST(Integration, OperationalLogsAreJsonLinesThatSayWhoDidWhat) {
  Harness h("oplog");
  Prepare(h);
  h.StartServer({"--log-format", "json"});
  h.StartAgent("h100-0", "", {"--log-format", "json"});
  ASSERT_TRUE(Harness::WaitFor([&] { return h.NodesUp(1); }, 15));
  Submit(h, "a",
         {"--id", "ok", "--queue", "research", "--gpus", "1", "--vram-gb", "10", "--", "true"});
  Submit(h, "a",
         {"--id", "bad", "--queue", "research", "--gpus", "1", "--vram-gb", "10", "--", "false"});
  EXPECT_NE(h.Cli({"submit", "--queue", "nlp", "--gpus", "1", "--vram-gb", "10", "--", "true"},
                  h.token("a"))
                .rc,
            0);
  ASSERT_TRUE(Harness::WaitFor(
      [&] { return h.Job("ok")["state"] == "finished" && h.Job("bad")["state"] == "failed"; }, 20));
  auto lines = [&](const std::string& file) {
    std::vector<json> out;
    std::istringstream in(h.Read(file));
    for (std::string line; std::getline(in, line);) {
      if (line.rfind("=== start", 0) == 0 || line.empty()) continue;  // the harness's own marker
      json j = json::parse(line, nullptr, false);
      EXPECT_TRUE(j.is_object() && j.contains("ts") && j.contains("level") && j.contains("msg"))
          << file << ": " << line;
      if (j.is_object()) out.push_back(j);
    }
    return out;
  };
  auto has = [](const std::vector<json>& log, const std::string& msg, const std::string& key,
                const std::string& value) {
    return std::any_of(log.begin(), log.end(), [&](const json& j) {
      return j.value("msg", "") == msg && j.value(key, "").find(value) != std::string::npos;
    });
  };
  ASSERT_TRUE(
      Harness::WaitFor([&] { return has(lines("gantryd.log"), "job failed", "job", "bad"); }, 5));
  const std::vector<json> server = lines("gantryd.log");
  EXPECT_TRUE(has(server, "node up", "node", "h100-0"));
  EXPECT_TRUE(has(server, "job submitted", "by", "team a"));
  EXPECT_TRUE(has(server, "job started", "job", "ok"));
  EXPECT_TRUE(has(server, "job finished", "job", "ok"));
  EXPECT_TRUE(has(server, "job failed", "reason", "exited with code 1"));
  EXPECT_TRUE(has(server, "refused", "error", "may not submit to queue nlp"));
  const std::vector<json> agent = lines("agent-h100-0.log");
  ASSERT_FALSE(agent.empty());
  EXPECT_EQ(agent[0].value("program", ""), "gantry-agent");
  EXPECT_EQ(agent[0].value("node", ""), "h100-0");

  // Refusals at start are log lines too (issue 47: some ignored --log-format json): a bad
  // config (with its file and line), a bad --listen, a store that cannot be opened.
  h.Write("bad.yaml", "pools:\n  - name: h100\n    count: -1\n");
  for (const auto& [extra, said] : std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{"--config", h.Path("bad.yaml"), "--db", h.Path("state.db")},
            "the cluster config is not valid:\n" + h.Path("bad.yaml") + ":2: pools[h100].gpus"},
           {{"--config", h.Path("cluster.yaml"), "--db", h.Path("state.db"), "--listen", "nowhere"},
            "--listen: expected HOST:PORT"},
           {{"--config", h.Path("cluster.yaml"), "--db", h.Path("missing/state.db")}, "--db: "}}) {
    std::vector<std::string> argv = {GANTRYD_BINARY, "--log-format", "json"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    const RunResult r = it::Run(argv, {}, 20);
    EXPECT_NE(r.rc, 0) << r.err;
    std::istringstream in(r.err);
    bool found = false;
    for (std::string line; std::getline(in, line);) {
      const json j = json::parse(line, nullptr, false);
      ASSERT_TRUE(j.is_object()) << "not a JSON line: " << line;
      found |= j.value("level", "") == "error" && j.value("msg", "").rfind(said, 0) == 0;
    }
    EXPECT_TRUE(found) << said << " not in:\n" << r.err;
  }
}

TEST(Integration, SeparateHostsInNetworkNamespaces) {
  std::string why;
  if (!Netns::Available(&why)) GTEST_SKIP() << "network namespaces unavailable: " << why;
  Netns net(4);
  Harness h("netns", &net);
  Prepare(h);
  StartCluster(h);
  std::set<std::string> ids;
  h.Write("gang.yaml", "id: gang\nqueue: research\nreplicas: 2\ngpus: 8\nvram_gb: 60\ncommand: [" +
                           h.Path("job.sh") + ", " + h.Path("out") + ", \"2000\"]\n");
  ids.insert(Submit(h, "a", {h.Path("gang.yaml")}));
  {
    std::vector<std::string> args = {"--id",    "mig",       "--queue", "nlp", "--mig",
                                     "1g.10gb", "--vram-gb", "8",       "--"};
    for (auto& s : Job(h, 1000)) args.push_back(s);
    ids.insert(Submit(h, "b", args));
  }
  {
    std::vector<std::string> args = {"--id",      "moved", "--queue",   "research", "--gpus", "8",
                                     "--vram-gb", "40",    "--grace-s", "1",        "--"};
    for (auto& s : Job(h, 5000, 0.1)) args.push_back(s);
    ids.insert(Submit(h, "a", args));
  }
  ASSERT_TRUE(
      Harness::WaitFor([&] { return !Times(h.Path("out/moved.1.0.log"), "alive").empty(); }, 20))
      << "moved did not start";
  // The gang's workers found their master at the address of rank 0's host.
  ASSERT_TRUE(Harness::WaitFor([&] { return Envs(h, "gang")[1].size() == 2; }, 15));
  const auto gang = Envs(h, "gang")[1];
  const std::string master = gang.at(0).at("GANTRY_MASTER_ADDR");
  EXPECT_EQ(master.rfind("10.", 0), 0u) << master;
  EXPECT_EQ(gang.at(1).at("GANTRY_MASTER_ADDR"), master);
  // Cut the host running `moved` off the network, then heal it.
  const std::string node = h.Job("moved")["nodes"][0];
  const int host = std::stoi(node.substr(node.find('-') + 1)) + 1;
  net.SetLink(host, false);
  ASSERT_TRUE(Harness::WaitFor([&] { return !Envs(h, "moved")[2].empty(); }, 20))
      << "moved was not moved";
  net.SetLink(host, true);
  ASSERT_TRUE(Harness::WaitFor([&] { return AllEnded(h, ids); }, 40))
      << h.Cli({"ls", "--all"}, h.token("a")).out;
  for (const auto& [id, state] : States(h)) EXPECT_EQ(state, "finished") << id;
  const auto run1 = Times(h.Path("out/moved.1.0.log"), "alive");
  const auto run2 = Times(h.Path("out/moved.2.0.log"), "alive");
  ASSERT_FALSE(run1.empty());
  ASSERT_FALSE(run2.empty());
  EXPECT_LT(*std::max_element(run1.begin(), run1.end()),
            *std::min_element(run2.begin(), run2.end()));
}

}  // namespace
}  // namespace gantry::it

namespace gantry::it {
namespace {

// Issue 16, bug 6: a wrong or missing --db started an empty cluster, whose agents then
// stopped their jobs. Creating a database is explicit now.
TEST(Integration, AMissingDatabaseIsAnErrorNotAnEmptyCluster) {
  Harness h("nodb");
  h.Write("cluster.yaml",
          "pools:\n  - name: h100\n    count: 1\n    gpus: 8\n    gpu_model: H100-80GB\n"
          "queues:\n  - name: q\n    guaranteed_gpus: 8\n");
  const std::string db = h.Path("typo.db");
  RunResult serve = it::Run(
      {GANTRYD_BINARY, "--config", h.Path("cluster.yaml"), "--db", db, "--listen", "127.0.0.1:0"});
  EXPECT_NE(serve.rc, 0);
  EXPECT_NE(serve.err.find("no database at " + db), std::string::npos) << serve.err;
  EXPECT_NE(serve.err.find("gantryd init"), std::string::npos) << serve.err;
  RunResult token = it::Run({GANTRYD_BINARY, "token", "create", "--db", db, "--admin"});
  EXPECT_NE(token.rc, 0);
  EXPECT_FALSE(std::filesystem::exists(db)) << "a missing database was created";
  RunResult init = it::Run({GANTRYD_BINARY, "init", "--db", db});
  EXPECT_EQ(init.rc, 0) << init.err;
  EXPECT_TRUE(std::filesystem::exists(db));
  RunResult again = it::Run({GANTRYD_BINARY, "init", "--db", db});
  EXPECT_NE(again.rc, 0);
  EXPECT_NE(again.err.find("already exists"), std::string::npos) << again.err;
}

// Issue 16, bug 7: SIGHUP ended gantryd and gantry-agent (exit 129). gantryd reopens its
// event log (log rotation); the agent ignores it; both keep serving.
TEST(Integration, SighupReopensTheEventLogAndEndsNothing) {
  Harness h("hup");
  Prepare(h);
  StartCluster(h, 1);
  const std::string first = Submit(h, "a", {"--queue", "research", "--gpus", "0", "--", "true"});
  ASSERT_TRUE(Harness::WaitFor([&] { return CountEvents(Events(h), "submit", first) == 1; }, 10));
  std::filesystem::rename(h.Path("events.jsonl"), h.Path("events.jsonl.1"));
  ASSERT_EQ(::kill(h.server_pid(), SIGHUP), 0);
  ASSERT_EQ(::kill(h.agent_pid(0), SIGHUP), 0);
  ASSERT_TRUE(Harness::WaitFor([&] { return std::filesystem::exists(h.Path("events.jsonl")); }, 10))
      << "the event log was not reopened";
  const std::string second =
      Submit(h, "a", {"--queue", "research", "--gpus", "1", "--vram-gb", "10", "--", "true"});
  ASSERT_TRUE(Harness::WaitFor([&] { return h.Job(second)["state"] == "finished"; }, 20))
      << "the job did not run after SIGHUP: " << h.Job(second).dump();
  EXPECT_EQ(CountEvents(Events(h), "submit", second), 1);
  EXPECT_EQ(CountEvents(Events(h), "submit", first), 0);  // that one is in the rotated file
  EXPECT_EQ(::kill(h.server_pid(), 0), 0) << "gantryd ended";
  EXPECT_EQ(::kill(h.agent_pid(0), 0), 0) << "gantry-agent ended";
  EXPECT_TRUE(h.NodesUp(1));
}

// --job-retention-days on a real gantryd: ended jobs past their retention leave the store
// and memory with their output (the first housekeeping of a process purges, then hourly);
// a purged id is never given again, also when it was the newest job before a restart.
TEST(Integration, EndedJobsPastTheirRetentionArePurgedWithTheirOutput) {
  Harness h("retention");
  Prepare(h);
  const std::vector<std::string> retention = {"--job-retention-days", "0.00005"};  // 4.3 s
  h.StartServer(retention);
  h.StartAgent("h100-0");
  ASSERT_TRUE(Harness::WaitFor([&] { return h.NodesUp(1); }, 15));
  const std::string old = Submit(
      h, "a",
      {"--queue", "research", "--gpus", "1", "--vram-gb", "10", "--", "sh", "-c", "echo hello"});
  ASSERT_TRUE(Harness::WaitFor([&] { return h.Job(old)["state"] == "finished"; }, 20))
      << h.Job(old).dump();
  ASSERT_TRUE(Harness::WaitFor(
      [&] {
        return h.Cli({"logs", old}, h.token("a")).out.find("hello") != std::string::npos;
      },
      10));
  ASSERT_FALSE(fs::is_empty(h.Path("logs")));
  std::this_thread::sleep_for(std::chrono::milliseconds(5000));  // past its retention
  h.KillServer(SIGTERM);
  h.StartServer(retention);
  int status = 0;
  ASSERT_TRUE(Harness::WaitFor(
      [&] {
        h.Get("/v1/jobs/" + old, h.token("admin"), &status);
        return status == 404;
      },
      10))
      << "status " << status;
  EXPECT_TRUE(fs::is_empty(h.Path("logs")));
  EXPECT_NE(h.Cli({"logs", old}, h.token("a")).rc, 0);
  httplib::Client c(h.ServerUrl());
  auto m = c.Get("/metrics");
  ASSERT_TRUE(m);
  EXPECT_NE(m->body.find("\ngantry_jobs_purged_total 1\n"), std::string::npos);
  const std::string next =
      Submit(h, "a", {"--queue", "research", "--gpus", "1", "--vram-gb", "10", "--", "true"});
  EXPECT_NE(next, old);
  ASSERT_TRUE(Harness::WaitFor([&] { return h.Job(next)["state"] == "finished"; }, 20))
      << h.Job(next).dump();
}

// /healthz of `url`: its JSON body (an empty object without one); *status 0 when nothing
// answered.
json Health(const std::string& url, int* status) {
  httplib::Client c(url);
  c.set_connection_timeout(1, 0);
  auto r = c.Get("/healthz");
  *status = r ? r->status : 0;
  json body = r ? json::parse(r->body, nullptr, false) : json();
  return body.is_object() ? body : json::object();
}

// A PostgreSQL server of the test's own (returned: it must outlive the gantryds) with the
// harness's database on it, then a leader and a standby gantryd with `flags`, once the
// standby names the leader. Null, with the failure added, when that does not come about.
std::unique_ptr<server::testing::PgServer> LeaderAndStandbyOnPostgres(
    Harness& h, const std::vector<std::string>& flags) {
  auto pg = server::testing::PgServer::Start();
  if (!pg) {
    ADD_FAILURE() << pg.error().message;
    return nullptr;
  }
  auto db = (*pg)->NewDatabase();
  if (!db) {
    ADD_FAILURE() << db.error().message;
    return nullptr;
  }
  h.UseDb((*pg)->Url(*db));
  Prepare(h);
  h.StartServer(flags);
  h.StartPeer(flags);
  int status = 0;
  if (!Harness::WaitFor(
          [&] { return Health(h.PeerUrl(), &status).value("leader", "") == h.ServerUrl(); }, 10)) {
    ADD_FAILURE() << "the standby did not name the leader";
    return nullptr;
  }
  return std::move(*pg);
}

// Three agents (h100-0..2) talking to `urls`, and four jobs of 2 GPUs each running
// `ms`, waited for until all four run; their ids (a failure added when they do not).
std::set<std::string> FourRunningJobs(Harness& h, const std::string& urls, int ms) {
  for (int i = 0; i < 3; ++i) h.StartAgent("h100-" + std::to_string(i), urls);
  if (!Harness::WaitFor([&] { return h.NodesUp(3); }, 15)) ADD_FAILURE() << "agents not up";
  std::set<std::string> ids;
  for (int i = 0; i < 4; ++i) {
    std::vector<std::string> args = {"--queue", "research", "--gpus", "2", "--vram-gb", "20", "--"};
    for (auto& s : Job(h, ms)) args.push_back(s);
    ids.insert(Submit(h, "a", args));
  }
  if (!Harness::WaitFor(
          [&] {
            int running = 0;
            for (const auto& [id, st] : States(h)) running += st == "running";
            return running == 4;
          },
          15)) {
    ADD_FAILURE() << "the four jobs did not all run";
  }
  return ids;
}

// A client submitting 1-GPU jobs of `job_ms` through `urls` as team b, one after the
// other with `pause_ms` between, until Stop (or its destructor: an ASSERT that returns
// early stops it instead of abandoning the thread).
class Submitter {
 public:
  Submitter(const Harness& h, const std::string& urls, int job_ms, int pause_ms)
      : thread_([this, &h, urls, job_ms, pause_ms] {
          while (!stop_.load()) {
            std::vector<std::string> argv = {GANTRY_BINARY, "--server", urls,     "submit",
                                             "--queue",     "nlp",      "--gpus", "1",
                                             "--vram-gb",   "10",       "--"};
            for (auto& s : Job(h, job_ms)) argv.push_back(s);
            RunResult r = it::Run(argv, {{"GANTRY_TOKEN", h.token("b")}});
            std::string id = r.out;
            while (!id.empty() && id.back() == '\n') id.pop_back();
            if (r.rc == 0) {
              accepted_.push_back(id);
            } else {
              refusals_ += r.err;
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(pause_ms));
          }
        }) {}
  ~Submitter() { Stop(); }
  void Stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }
  // After Stop.
  const std::vector<std::string>& accepted() const { return accepted_; }
  const std::string& refusals() const { return refusals_; }

 private:
  std::atomic<bool> stop_{false};
  std::vector<std::string> accepted_;
  std::string refusals_;
  std::thread thread_;  // last: it starts once the rest is made
};

// Every job of `ids` ends, finished, having run exactly once and never requeued (with
// `one_start`, one start event too).
void ExpectEachFinishedOnce(Harness& h, const std::set<std::string>& ids, bool one_start) {
  ASSERT_TRUE(Harness::WaitFor([&] { return AllEnded(h, ids); }, 60))
      << h.Cli({"ls", "--all"}, h.token("admin")).out;
  const auto states = States(h);
  const std::vector<json> events = Events(h);
  for (const std::string& id : ids) {
    ASSERT_TRUE(states.count(id)) << id << " was accepted and then lost";
    EXPECT_EQ(states.at(id), "finished") << id << ": " << h.Job(id).dump();
    EXPECT_EQ(Envs(h, id).size(), 1u) << id << " did not run exactly once";
    if (one_start) {
      EXPECT_EQ(CountEvents(events, "start", id), 1) << id;
    }
    EXPECT_EQ(CountEvents(events, "requeue", id), 0) << id;
  }
}

// Issue 13, a standby on PostgreSQL: a leader and a standby gantryd share one database.
// The leader is killed (-9) while jobs run and a client keeps submitting through both
// URLs; the standby must serve within 5 s, every accepted job must finish once (running
// ones re-adopted, not restarted), and agents must follow without stopping their
// workers. Then the old leader comes back as the standby.
TEST(Integration, AStandbyOnPostgresTakesOverWithinFiveSecondsAndLosesNothing) {
  if (server::testing::NoPostgres()) GTEST_SKIP() << "GANTRY_NO_POSTGRES=1: no PostgreSQL server";
  Harness h("failover");
  // The agents' lease (60% of 10 s) outlasts the failover, so they keep their workers.
  const std::vector<std::string> flags = {"--leader-ttl-s", "1.5", "--node-timeout-s", "10"};
  auto pg = LeaderAndStandbyOnPostgres(h, flags);
  ASSERT_TRUE(pg);
  int status = 0;
  Health(h.PeerUrl(), &status);
  EXPECT_EQ(status, 503);
  EXPECT_EQ(Health(h.PeerUrl(), &status).value("role", ""), "standby");
  const std::string both = h.ServerUrl() + "," + h.PeerUrl();
  std::set<std::string> ids = FourRunningJobs(h, both, 6000);
  ASSERT_FALSE(HasFailure());
  Submitter submitter(h, both, 300, 0);  // a client submitting all along, through both URLs
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  const auto killed = std::chrono::steady_clock::now();
  h.KillServer(SIGKILL);
  ASSERT_TRUE(Harness::WaitFor(
      [&] {
        Health(h.PeerUrl(), &status);
        return status == 200;
      },
      10))
      << "the standby did not take over";
  const double failover_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - killed).count();
  std::cerr << "failover: the standby served " << failover_s << " s after the leader was killed\n";
  EXPECT_LT(failover_s, 5.0);
  std::this_thread::sleep_for(std::chrono::seconds(1));
  submitter.Stop();
  EXPECT_EQ(submitter.refusals(), "") << "a submit failed across the failover";
  EXPECT_GE(submitter.accepted().size(), 3u);
  h.SwapWithPeer();
  h.StartPeer(flags);  // the old leader, back as the standby
  ASSERT_TRUE(Harness::WaitFor(
      [&] { return Health(h.PeerUrl(), &status).value("leader", "") == h.ServerUrl(); }, 10));
  EXPECT_EQ(status, 503);

  ids.insert(submitter.accepted().begin(), submitter.accepted().end());
  ExpectEachFinishedOnce(h, ids, /*one_start=*/true);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(::kill(h.agent_pid(i), 0), 0) << "agent " << i << " ended";
}

// A gantryd started while its PostgreSQL is down (a boot where it comes up first) waits
// for the server, saying so, and serves once it is up; it ended at once before.
TEST(Integration, AGantrydStartedBeforeItsPostgresWaitsForIt) {
  if (server::testing::NoPostgres()) GTEST_SKIP() << "GANTRY_NO_POSTGRES=1: no PostgreSQL server";
  Harness h("pg-late");
  auto pg = server::testing::PgServer::Start();
  ASSERT_TRUE(pg) << pg.error().message;
  auto db = (*pg)->NewDatabase();
  ASSERT_TRUE(db) << db.error().message;
  h.UseDb((*pg)->Url(*db));
  Prepare(h);
  ASSERT_TRUE((*pg)->Stop().ok());
  // gantryd started here (its start waits 10 s for its port, then for /healthz), the
  // server 3 s later from this thread (a server's parent-death signal follows the thread
  // that started it).
  std::thread start([&] { h.StartServer(); });
  std::this_thread::sleep_for(std::chrono::seconds(3));
  Status resumed = (*pg)->Resume();
  start.join();
  ASSERT_TRUE(resumed.ok()) << resumed.error().message;
  EXPECT_NE(h.Read("gantryd.log").find("the store cannot be reached yet; gantryd waits for it"),
            std::string::npos)
      << h.Read("gantryd.log");
  int status = 0;
  h.Get("/v1/jobs", h.token("b"), &status);
  EXPECT_EQ(status, 200);
}

// Issue 47, B5: a 6 s PostgreSQL restart ended both the leader and the standby, agents
// fenced at 18 s and jobs ran again. Now through a store outage shorter than the hold
// (9 s here: 3/4 of the node timeout less the agents' lease) plus the agents' lease,
// the leader stays up and keeps the lease, refuses calls with 503 and Retry-After, tells
// heartbeats to hold (agents keep their workers; exits are reported again), and reads
// its state back once the database answers; the standby stays a standby. Every accepted
// job finishes having run once, and the CLI's submits ride through.
TEST(Integration, APostgresRestartEndsNeitherGantrydNorItsJobs) {
  if (server::testing::NoPostgres()) GTEST_SKIP() << "GANTRY_NO_POSTGRES=1: no PostgreSQL server";
  Harness h("pg-restart");
  // Agents hold for 9 s after the last saved batch: 3/4 of (30 s - their 18 s lease).
  const std::vector<std::string> flags = {"--leader-ttl-s", "1.5", "--node-timeout-s", "30"};
  auto pg = LeaderAndStandbyOnPostgres(h, flags);
  ASSERT_TRUE(pg);
  int status = 0;
  const int64_t epoch = Health(h.ServerUrl(), &status).value("epoch", int64_t{-1});
  ASSERT_EQ(status, 200);
  const std::string both = h.ServerUrl() + "," + h.PeerUrl();
  std::set<std::string> ids = FourRunningJobs(h, both, 12000);
  ASSERT_FALSE(HasFailure());
  Submitter submitter(h, both, 1500, 200);  // short jobs: some end while the store is out
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));

  const auto down = std::chrono::steady_clock::now();
  ASSERT_TRUE(pg->Stop().ok());
  // The leader answers, and says why it cannot do anything.
  json said;
  ASSERT_TRUE(Harness::WaitFor(
      [&] {
        said = Health(h.ServerUrl(), &status);
        return status == 503 && said.value("status", "") == "store unavailable";
      },
      4))
      << status << " " << said.dump();
  {
    httplib::Client c(h.ServerUrl());
    c.set_bearer_token_auth(h.token("b").c_str());
    auto r = c.Post("/v1/jobs", R"({"queue": "nlp", "gpus": 1, "command": ["true"]})",
                    "application/json");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 503) << r->body;
    EXPECT_EQ(r->get_header_value("Retry-After"), "1");
    EXPECT_NE(r->body.find("store is unavailable"), std::string::npos) << r->body;
  }
  std::this_thread::sleep_for(std::chrono::seconds(6) - (std::chrono::steady_clock::now() - down));
  ASSERT_TRUE(pg->Resume().ok());
  ASSERT_TRUE(Harness::WaitFor(
      [&] {
        Health(h.ServerUrl(), &status);
        return status == 200;
      },
      10))
      << "the leader did not come back from the outage";
  const double back_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - down).count();
  std::cerr << "pg restart: the leader served again " << back_s
            << " s after the database stopped\n";
  json after = Health(h.ServerUrl(), &status);
  EXPECT_EQ(after.value("epoch", int64_t{-2}), epoch) << "the leader lost its lease";
  EXPECT_EQ(Health(h.PeerUrl(), &status).value("role", ""), "standby");
  EXPECT_EQ(status, 503);
  std::this_thread::sleep_for(std::chrono::seconds(2));
  submitter.Stop();
  EXPECT_EQ(submitter.refusals(), "") << "a submit failed across the outage";
  EXPECT_GE(submitter.accepted().size(), 5u);

  ids.insert(submitter.accepted().begin(), submitter.accepted().end());
  ExpectEachFinishedOnce(h, ids, /*one_start=*/false);
  const std::string log = h.Read("gantryd.log");
  EXPECT_NE(log.find("store unavailable"), std::string::npos);
  EXPECT_NE(log.find("store available again"), std::string::npos);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(::kill(h.agent_pid(i), 0), 0) << "agent " << i << " ended";
    EXPECT_EQ(h.Read("agent-h100-" + std::to_string(i) + ".log").find("no answer from the server"),
              std::string::npos)
        << "agent " << i << " fenced its workers";
  }
}

// Issue 13, hardening: TLS for the API and the agents. gantryd serves HTTPS with a
// certificate made by openssl as docs/control-plane.md says; an agent and the CLI given
// the CA certificate run a job through it; plain HTTP to the port and a client that does
// not trust the certificate get nothing.
TEST(Integration, TlsCarriesTheApiAndAgentsAndRefusesUntrustedClients) {
  Harness h("tls");
  RunResult gen = it::Run({"openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout",
                           h.Path("key.pem"), "-out", h.Path("cert.pem"), "-days", "2", "-subj",
                           "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"});
  ASSERT_EQ(gen.rc, 0) << gen.err;
  h.UseTls(h.Path("cert.pem"), h.Path("key.pem"));
  Prepare(h);
  StartCluster(h, 1);
  ASSERT_EQ(h.ServerUrl().rfind("https://", 0), 0u);
  const std::string id =
      Submit(h, "a", {"--queue", "research", "--gpus", "1", "--vram-gb", "10", "--", "true"});
  ASSERT_TRUE(Harness::WaitFor([&] { return h.Job(id)["state"] == "finished"; }, 20))
      << h.Job(id).dump();

  httplib::Client plain("http://127.0.0.1:" + std::to_string(h.port()));
  plain.set_read_timeout(2, 0);
  auto r = plain.Get("/healthz");
  EXPECT_TRUE(!r || r->status != 200) << "plain HTTP was served on the TLS port";
  RunResult untrusted =
      it::Run({GANTRY_BINARY, "--server", h.ServerUrl(), "ls"}, {{"GANTRY_TOKEN", h.token("a")}});
  EXPECT_NE(untrusted.rc, 0) << untrusted.out;
  EXPECT_NE(untrusted.err.find("cannot reach gantryd"), std::string::npos) << untrusted.err;
}

// Issue 13: an array and a dependency through the CLI, as real processes: each task sees
// its index, and the job --after the array starts only once every task has ended.
TEST(Integration, AnArrayAndAJobAfterItRunInOrder) {
  Harness h("array");
  Prepare(h);
  StartCluster(h, 1);
  std::vector<std::string> args = {"--queue", "research", "--gpus", "1", "--vram-gb",
                                   "10",      "--array",  "0-3",    "--"};
  for (auto& s : Job(h, 400)) args.push_back(s);
  const std::string array = Submit(h, "a", args);
  ASSERT_FALSE(array.empty());
  std::vector<std::string> after = {"--queue", "research", "--gpus", "0", "--after", array, "--"};
  for (auto& s : Job(h, 100)) after.push_back(s);
  const std::string merge = Submit(h, "a", after);
  std::set<std::string> ids = {merge};
  for (int i = 0; i < 4; ++i) ids.insert(array + "_" + std::to_string(i));
  ASSERT_TRUE(Harness::WaitFor([&] { return AllEnded(h, ids); }, 30))
      << h.Cli({"ls", "--all"}, h.token("a")).out;
  double last_end = 0;
  std::set<std::string> seen;
  for (int i = 0; i < 4; ++i) {
    const std::string id = array + "_" + std::to_string(i);
    EXPECT_EQ(h.Job(id)["state"], "finished") << id;
    auto runs = Envs(h, id);
    ASSERT_EQ(runs.size(), 1u) << id;
    seen.insert(runs.begin()->second.at(0).at("GANTRY_ARRAY_TASK_ID"));
    EXPECT_EQ(runs.begin()->second.at(0).at("GANTRY_ARRAY_JOB_ID"), array);
    for (double t : Times(h.Path("out/" + id + ".1.0.log"), "end"))
      last_end = std::max(last_end, t);
  }
  EXPECT_EQ(seen, (std::set<std::string>{"0", "1", "2", "3"}));
  EXPECT_EQ(h.Job(merge)["state"], "finished");
  const std::vector<double> start = Times(h.Path("out/" + merge + ".1.0.log"), "start");
  ASSERT_EQ(start.size(), 1u);
  EXPECT_GT(start[0], last_end) << "the dependent job started before the array ended";
  RunResult cancel = h.Cli({"cancel", array}, h.token("a"));
  EXPECT_NE(cancel.out.find("0 task(s) cancelled"), std::string::npos) << cancel.out << cancel.err;
}

// Issue 47's friction: `ls` and `top` cut long values and ran them into the next column
// ("columns glued by truncation"), and `top` put a worker's VRAM (all its GPUs) beside
// the per-GPU vram_gb it asked for. Now every column is as wide as its widest cell, two
// spaces apart, and top compares per worker.
TEST(Integration, ListingsNeitherCutNorGlueColumnsAndTopComparesVramPerWorker) {
  Harness h("tables");
  Prepare(h);
  h.StartServer();
  h.StartAgent("h100-0");
  ASSERT_TRUE(Harness::WaitFor([&] { return h.NodesUp(1); }, 15));
  const std::string id = "a-training-run-with-a-rather-long-name-0042";
  std::vector<std::string> args = {"--id",       id,          "--queue", "research",   "--gpus",
                                   "2",          "--vram-gb", "30",      "--replicas", "2",
                                   "--topology", "node",      "--"};
  for (auto& s : Job(h, 30'000)) args.push_back(s);
  Submit(h, "a", args);
  ASSERT_TRUE(Harness::WaitFor(
      [&] {
        return h.Job(id)["usage"].contains("vram_peak_gb") &&
               h.Job(id)["usage"].contains("util_now");
      },
      15))
      << h.Job(id).dump();
  // Each header's column starts where its cells do, after at least two spaces.
  auto check = [&](const std::vector<std::string>& cmd, const std::string& key) {
    const RunResult r = h.Cli(cmd, h.token("a"));
    ASSERT_EQ(r.rc, 0) << r.err;
    std::istringstream in(r.out);
    std::string head, row;
    std::getline(in, head);
    while (std::getline(in, row) && row.find(key) == std::string::npos) {
    }
    ASSERT_NE(row.find(key), std::string::npos) << r.out;
    EXPECT_EQ(r.out.find("+ "), std::string::npos) << "a cut value:\n" << r.out;
    for (size_t at = head.find(' '); at != std::string::npos; at = head.find(' ', at + 1)) {
      if (at + 1 >= head.size() || head[at + 1] == ' ' || at < 1 || head[at - 1] != ' ') continue;
      // `at + 1` starts a column: its cell does too, after two spaces (or the row ends).
      if (at + 1 < row.size()) {
        EXPECT_TRUE(row[at] == ' ' && row[at - 1] == ' ')  // (a cell may be empty)
            << "column at " << at + 1 << " of\n"
            << head << "\n"
            << row;
      }
    }
  };
  check({"ls"}, id);
  check({"top"}, id);
  check({"nodes"}, "h100-0");
  check({"queues"}, "research");
  // top: 2 x 30 GB asked per worker; the emulated agent reports what was asked in use.
  const std::string top = h.Cli({"top"}, h.token("a")).out;
  EXPECT_NE(top.find("VRAM/WORKER NOW/PEAK/ASKED GB"), std::string::npos) << top;
  EXPECT_NE(top.find("60/60/60"), std::string::npos) << top;
  EXPECT_NEAR(h.Job(id)["usage"].value("vram_asked_worker_gb", 0.0), 60.0, 1e-9);
  EXPECT_NEAR(h.Job(id)["usage"].value("vram_asked_gb", 0.0), 30.0, 1e-9);
}

// Issue 16, bug 5: removing a queue and restarting failed its running jobs for good, with
// nothing in gantryd's log. gantryd now refuses a config that would break active jobs
// (saying which), `gantryd check-config` says the same beforehand, and with the config
// restored the job carries on; --force-config fails them, loudly.
TEST(Integration, AConfigThatWouldBreakRunningJobsIsRefusedNotApplied) {
  Harness h("config");
  Prepare(h);
  const std::vector<std::string> slow_timeout = {"--node-timeout-s",
                                                 "30"};  // agents keep their lease
  h.StartServer(slow_timeout);
  h.StartAgent("h100-0");
  ASSERT_TRUE(Harness::WaitFor([&] { return h.NodesUp(1); }, 15));
  std::vector<std::string> args = {"--queue", "nlp", "--gpus", "2", "--vram-gb", "20", "--"};
  for (auto& s : Job(h, 4000)) args.push_back(s);
  const std::string id = Submit(h, "b", args);
  ASSERT_TRUE(Harness::WaitFor([&] { return h.Job(id)["state"] == "running"; }, 10));
  h.KillServer(SIGTERM);

  std::string without = kCluster;
  const size_t at = without.find("  - name: nlp\n");
  without.erase(at, without.find("  - name: serving") - at);
  h.Write("without-nlp.yaml", without);
  RunResult refused =
      it::Run({GANTRYD_BINARY, "--config", h.Path("without-nlp.yaml"), "--db", h.Path("state.db"),
               "--listen", "127.0.0.1:0", "--log-dir", h.Path("logs")},
              {}, 20);
  EXPECT_EQ(refused.rc, 2) << refused.err;
  EXPECT_NE(refused.err.find("would break 1 active job(s)"), std::string::npos) << refused.err;
  EXPECT_NE(refused.err.find("job " + id + " (running, queue nlp"), std::string::npos)
      << refused.err;
  EXPECT_NE(refused.err.find("nlp"), std::string::npos) << refused.err;
  RunResult check = it::Run({GANTRYD_BINARY, "check-config", "--config", h.Path("without-nlp.yaml"),
                             "--db", h.Path("state.db")});
  EXPECT_EQ(check.rc, 2) << check.err;
  EXPECT_NE(check.err.find("job " + id), std::string::npos) << check.err;
  RunResult fine = it::Run({GANTRYD_BINARY, "check-config", "--config", h.Path("cluster.yaml"),
                            "--db", h.Path("state.db")});
  EXPECT_EQ(fine.rc, 0) << fine.err;

  h.StartServer(slow_timeout);  // the config as it was: the job carries on
  // The restart says what it took over.
  EXPECT_NE(h.Read("gantryd.log")
                .find("restored from the store running_readopted=1 stopping=0 "
                      "requeued=0"),
            std::string::npos)
      << h.Read("gantryd.log");
  ASSERT_TRUE(Harness::WaitFor([&] { return h.Job(id)["state"] != "running"; }, 20));
  EXPECT_EQ(h.Job(id)["state"], "finished") << h.Job(id).dump();
  EXPECT_EQ(CountEvents(Events(h), "start", id), 1);

  // --force-config fails what it breaks, and says so. Its worker gets the checkpoint
  // signal and its grace, as a preemption gives (issue 47 B6: it was SIGKILLed), and its
  // node takes no new work until the worker has ended.
  std::vector<std::string> long_args = {"--queue", "nlp",       "--gpus", "2", "--vram-gb",
                                        "20",      "--grace-s", "20",     "--"};
  for (auto& s : Job(h, 60'000, 2.0)) long_args.push_back(s);  // 2 s to save after SIGTERM
  const std::string second = Submit(h, "b", long_args);
  ASSERT_TRUE(Harness::WaitFor([&] { return h.Job(second)["state"] == "running"; }, 10));
  h.KillServer(SIGTERM);
  h.Write("cluster.yaml", without);
  h.StartServer({"--node-timeout-s", "30", "--force-config"});
  std::vector<std::string> small = {"--queue", "research", "--gpus", "1", "--vram-gb", "20", "--"};
  for (auto& s : Job(h, 100)) small.push_back(s);
  const std::string after = Submit(h, "a", small);  // only h100-0 has an agent
  const std::string log = h.Path("out") + "/" + second + ".1.0.log";
  ASSERT_TRUE(Harness::WaitFor([&] { return !Times(log, "graceful").empty(); }, 20))
      << h.Read("agent-h100-0.log");
  ASSERT_TRUE(Harness::WaitFor([&] { return h.Job(after)["state"] == "finished"; }, 20))
      << h.Job(after).dump();
  ASSERT_EQ(Times(log, "term").size(), 1u);
  const std::vector<double> started = Times(h.Path("out") + "/" + after + ".1.0.log", "start");
  ASSERT_EQ(started.size(), 1u);
  EXPECT_GT(started[0], Times(log, "graceful")[0]) << "a job started on GPUs still held";
  const json failed = h.Job(second);
  EXPECT_EQ(failed["state"], "failed");
  // Its record keeps what it was and what its run used (issue 47 B6: it became a CPU-only
  // job with no command, its GPU-hours lost).
  EXPECT_EQ(failed["gpus"], 2) << failed.dump();
  EXPECT_TRUE(failed.contains("command") && !failed["command"].empty()) << failed.dump();
  EXPECT_GT(failed["usage"].value("gpu_hours", 0.0), 0.0) << failed.dump();
  EXPECT_NE(h.Read("gantryd.log").find("gantryd: job " + second + " failed: cannot be read back"),
            std::string::npos)
      << h.Read("gantryd.log");
}

}  // namespace
}  // namespace gantry::it

namespace gantry::it {
namespace {

// Issue 12: the live utilisation loop. Emulated agents make each job's GPUs look as its
// `emulate` block says; gantryd keeps what each job used and reclaims a job whose GPUs
// stayed idle for reclaim_idle_after_s, leaving busy, critical and opted-out jobs alone.
constexpr const char* kReclaimCluster = R"(cluster: reclaim
pools:
  - name: h100
    count: 2
    gpus: 8
    gpu_model: H100-80GB
    cpus: 64
    memory_gb: 512
    sharing: [mig, mps]
queues:
  - name: research
    guaranteed_gpus: 8
  - name: serving
    guaranteed_gpus: 8
    allow_keep_when_idle: true
policy:
  reclaim_idle_after_s: 2
)";

TEST(Integration, AnIdleJobIsReclaimedOnTimeAndNothingElseIsTouched) {
  Harness h("reclaim");
  h.Setup(kReclaimCluster, {{"a", "research"}, {"b", "serving"}});
  h.Write("job.sh", kJobScript, true);
  fs::create_directories(h.Path("out"));
  h.StartServer({"--usage-sample-s", "0.5"});  // the time series, sampled fast
  for (int i = 0; i < 2; ++i) h.StartAgent("h100-" + std::to_string(i));
  ASSERT_TRUE(Harness::WaitFor([&] { return h.NodesUp(2); }, 15));
  auto spec = [&](const std::string& id, const std::string& queue, const std::string& shape,
                  const std::string& extra, int ms) {
    h.Write(id + ".yaml", "id: " + id + "\nqueue: " + queue + "\n" + shape + "grace_s: 1\n" +
                              extra + "command: [" + h.Path("job.sh") + ", " + h.Path("out") +
                              ", \"" + std::to_string(ms) + "\"]\n");
    return h.Path(id + ".yaml");
  };
  std::set<std::string> ids;
  // A notebook on an MPS share: busy for 1 s, then idle; reclaimed 2 s later.
  ids.insert(Submit(
      h, "a",
      {spec("notebook", "research", "tier: best-effort\nsharing: mps\ngpus: 0.25\nvram_gb: 10\n",
            "emulate: {util: 0.6, vram_used_gb: 9, idle_after_s: 1}\n", 20000)}));
  // Busy jobs, an idle critical one, and an idle one that may keep its GPUs.
  ids.insert(Submit(h, "a",
                    {spec("busy", "research", "gpus: 1\nvram_gb: 80\n",
                          "emulate: {util: 0.5, vram_used_gb: 9}\n", 6000)}));
  // A job asking a whole 80 GB GPU that uses 9 GB and 10% of it.
  ids.insert(Submit(h, "a",
                    {spec("big80", "research", "gpus: 1\nvram_gb: 80\n",
                          "emulate: {util: 0.1, vram_used_gb: 9}\n", 6000)}));
  ids.insert(Submit(h, "b",
                    {spec("crit", "serving", "tier: critical\ngpus: 1\nvram_gb: 20\n",
                          "emulate: {idle_after_s: 0}\n", 6000)}));
  ids.insert(Submit(
      h, "b",
      {spec("kept", "serving", "gpus: 2\nvram_gb: 20\n",
            "keep_when_idle: \"serving: idles at night\"\nemulate: {idle_after_s: 0}\n", 6000)}));
  // Opting out needs the queue's leave.
  {
    RunResult r = h.Cli({"submit", spec("sneaky", "research", "gpus: 1\nvram_gb: 20\n",
                                        "keep_when_idle: \"mine\"\n", 1000)},
                        h.token("a"));
    EXPECT_NE(r.rc, 0);
    EXPECT_NE(r.err.find("allow_keep_when_idle"), std::string::npos) << r.err;
  }
  // While `busy` runs, gantryd knows what it uses.
  ASSERT_TRUE(
      Harness::WaitFor([&] { return h.Job("busy")["usage"].contains("vram_peak_gb"); }, 10));
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  const json busy = h.Job("busy")["usage"];
  EXPECT_NEAR(busy.value("vram_peak_gb", 0.0), 9.0, 1e-9) << busy.dump();
  EXPECT_NEAR(busy.value("utilization", 0.0), 0.5, 0.01) << busy.dump();
  EXPECT_NEAR(busy.value("vram_asked_gb", 0.0), 80.0, 1e-9);
  EXPECT_GT(busy.value("gpu_hours", 0.0), 0.0);
  RunResult shown = h.Cli({"show", "busy"}, h.token("a"));
  EXPECT_NE(shown.out.find("peak 9.0 GB"), std::string::npos) << shown.out;
  // gantry top: what each running job's GPUs do now.
  const std::string top = h.Cli({"top"}, h.token("a")).out;
  const size_t top_row = top.find("\nbusy ");
  ASSERT_NE(top_row, std::string::npos) << top;
  const std::string busy_row = top.substr(top_row + 1, top.find('\n', top_row + 1) - top_row - 1);
  EXPECT_NE(busy_row.find(" 50% "), std::string::npos) << busy_row;
  EXPECT_NE(busy_row.find("9/9/80"), std::string::npos) << busy_row;
  // Right-sizing: 9 GB + 20% headroom is past 1g.10gb; 1g.20gb holds it.
  const json big = h.Job("big80")["usage"];
  EXPECT_EQ(big["advice"].value("shape", ""), "MIG 1g.20gb") << big.dump();
  EXPECT_NEAR(big["advice"].value("fit_gpus_per_worker", 0.0), 1.0 / 7, 1e-9);
  EXPECT_EQ(busy["advice"].value("shape", ""), "MPS share 0.625") << busy.dump();  // 50% busy
  EXPECT_NE(h.Cli({"show", "big80"}, h.token("a")).out.find("MIG 1g.20gb would hold it"),
            std::string::npos);
  // Rolled up for the team: its jobs that could be smaller, and per queue.
  const std::string advice = h.Cli({"usage", "--advice", "--since", "1h"}, h.token("admin")).out;
  const size_t big_row = advice.find("\nbig80 ");
  ASSERT_NE(big_row, std::string::npos) << advice;
  EXPECT_NE(advice.find("MIG 1g.20gb", big_row), std::string::npos) << advice;
  EXPECT_NE(advice.find("\nbusy "), std::string::npos) << advice;
  EXPECT_NE(advice.find("RIGHT-SIZING FREES"), std::string::npos) << advice;

  ASSERT_TRUE(Harness::WaitFor([&] { return AllEnded(h, ids); }, 30))
      << h.Cli({"ls", "--all"}, h.token("admin")).out;
  const auto states = States(h);
  EXPECT_EQ(states.at("notebook"), "reclaimed");
  for (const char* id : {"busy", "big80", "crit", "kept"})
    EXPECT_EQ(states.at(id), "finished") << id;
  const json nb = h.Job("notebook");
  EXPECT_NE(nb.value("reason", "").find("GPU idle for"), std::string::npos) << nb.dump();
  // It got its signal within a heartbeat or two (100 ms here) of going idle + 2 s.
  const auto start = Times(h.Path("out/notebook.1.0.log"), "start");
  const auto term = Times(h.Path("out/notebook.1.0.log"), "term");
  ASSERT_EQ(start.size(), 1u);
  ASSERT_EQ(term.size(), 1u) << "the notebook was not signalled (checkpoint, grace)";
  EXPECT_GT(term[0] - start[0], 3.0 - 0.2);
  EXPECT_LT(term[0] - start[0], 3.0 + 0.6);
  const std::vector<json> events = Events(h);
  EXPECT_EQ(CountEvents(events, "reclaim", "notebook"), 1);
  for (const char* id : {"busy", "crit", "kept"})
    EXPECT_EQ(CountEvents(events, "reclaim", id), 0) << id;
  // The operational log says it once at the signal and once at the end.
  const std::string log = h.Read("gantryd.log");
  EXPECT_EQ(Occurrences(log, "reclaiming idle job job=notebook "), 1u) << log;
  EXPECT_EQ(Occurrences(log, "job reclaimed job=notebook "), 1u) << log;
  for (const char* id : {"busy", "crit", "kept"})
    EXPECT_TRUE(Times(h.Path(std::string("out/") + id + ".1.0.log"), "term").empty()) << id;
  // The metrics count it.
  httplib::Client c(h.ServerUrl());
  auto m = c.Get("/metrics");
  ASSERT_TRUE(m);
  EXPECT_NE(m->body.find("gantry_jobs_ended_total{end=\"reclaimed\"} 1"), std::string::npos);
  // Usage over the period, from the ended runs' rows: research held ~12.75 GPU-s as
  // reported, ~3.75 of them busy (busy 1 GPU x 0.5, big80 1 x 0.1, the notebook's share
  // 0.6 then idle); right-sizing would have freed most of big80 and part of busy.
  // serving's jobs idled throughout.
  const json usage = json::parse(h.Cli({"usage", "--json"}, h.token("admin")).out);
  std::map<std::string, json> by_queue;
  for (const json& row : usage["usage"]) by_queue[row.value("queue", "")] = row;
  ASSERT_TRUE(by_queue.count("research") && by_queue.count("serving")) << usage.dump();
  const json& research = by_queue["research"];
  const double reported = research.value("reported_gpu_hours", 0.0);
  ASSERT_GT(reported, 0.0) << research.dump();
  EXPECT_LE(reported, research.value("gpu_hours", 0.0) * 1.001);
  EXPECT_GT(research.value("busy_gpu_hours", 0.0) / reported, 0.2) << research.dump();
  EXPECT_LT(research.value("busy_gpu_hours", 0.0) / reported, 0.4) << research.dump();
  EXPECT_GT(research.value("right_sizing_frees_gpu_hours", 0.0), 5.0 / 3600) << research.dump();
  EXPECT_LT(research.value("right_sizing_frees_gpu_hours", 0.0), research.value("gpu_hours", 0.0));
  EXPECT_NEAR(by_queue["serving"].value("busy_gpu_hours", 1.0), 0.0, 1e-9)
      << by_queue["serving"].dump();
  // The time series: `busy` ran 6 s at 50% on one GPU using 9 GB, a sample per 0.5 s.
  const json series = h.Get("/v1/jobs/busy/usage", h.token("a"));
  ASSERT_TRUE(series.contains("samples")) << series.dump();
  EXPECT_GE(series["samples"].size(), 6u) << series.dump();
  for (const json& p : series["samples"]) {
    EXPECT_NEAR(p.value("util", 0.0), 0.5, 1e-9) << p.dump();
    EXPECT_EQ(p.value("gpus", 0.0), 1.0);
    EXPECT_NEAR(p.value("vram_peak_gb", 0.0), 9.0, 1e-9);
  }
  int status = 0;
  (void)h.Get("/v1/jobs/busy/usage", h.token("b"), &status);  // another team's job
  EXPECT_EQ(status, 403);
  const json nb_series = h.Get("/v1/jobs/notebook/usage", h.token("a"));
  ASSERT_FALSE(nb_series["samples"].empty()) << nb_series.dump();
  EXPECT_NEAR(nb_series["samples"].back().value("util", 1.0), 0.0, 1e-9);  // idle at the end
  EXPECT_NE(h.Cli({"show", "busy", "--series"}, h.token("a")).out.find(" 50%"), std::string::npos);
  EXPECT_NE(h.Cli({"usage"}, h.token("admin")).out.find("RIGHT-SIZING FREES"), std::string::npos);
}

// Issue 12 item 5: GPU-hour budgets live. research's budget runs out while its first job
// runs: that job is left alone, new work runs as best-effort. vision's runs out too and
// new work waits for the next period, with the reason, also after a gantryd restart.
// `gantry usage` agrees with the event log, costs weighted by the price of an H100-hour.
// Issue 47 B: an operator's first day. A best-effort job asked a grace of 1e9 s and
// ignored SIGTERM, so once cancelled it kept its GPUs ("victims' GPUs free by 2058");
// any team could declare `critical`. Now: the grace a tier may ask is capped, a queue
// says which tiers it may use, and `cancel --force` ends a stopping job's grace at once,
// killing its whole process group.
constexpr const char* kTierCluster = R"(cluster: tiers
pools:
  - name: h100
    count: 1
    gpus: 8
    gpu_model: H100-80GB
queues:
  - name: research
    tiers: [standard, best-effort]
  - name: serving
    tiers: [critical]
policy:
  max_grace_s: {best-effort: 60}
)";

TEST(Integration, GraceIsCappedPerTierQueuesBoundTiersAndForceCancelKillsTheGroup) {
  Harness h("tiers");
  h.Setup(kTierCluster, {{"a", "research"}, {"b", "serving"}});
  // Ignores SIGTERM, as do its children (SIG_IGN is inherited); writes both pids.
  h.Write("stubborn.sh", R"SH(#!/bin/sh
trap '' TERM
sleep 600 &
echo "$$ $!" > "$1/$GANTRY_JOB_ID.pids"
wait
)SH",
          true);
  fs::create_directories(h.Path("out"));
  h.StartServer();
  h.StartAgent("h100-0");
  ASSERT_TRUE(Harness::WaitFor([&] { return h.NodesUp(1); }, 15));

  RunResult hog = h.Cli(
      {"submit", "--id", "hog", "--queue", "research", "--tier", "best-effort", "--gpus", "1",
       "--vram-gb", "10", "--grace-s", "1000000000", "--", h.Path("stubborn.sh"), h.Path("out")},
      h.token("a"));
  EXPECT_NE(hog.rc, 0);
  EXPECT_NE(hog.err.find("grace_s: 1000000000 s is above this cluster's limit for best-effort jobs "
                         "(policy.max_grace_s: 60 s)"),
            std::string::npos)
      << hog.err;
  RunResult crit =
      h.Cli({"submit", "--id", "vip", "--queue", "research", "--tier", "critical", "--gpus", "1",
             "--vram-gb", "10", "--", h.Path("stubborn.sh"), h.Path("out")},
            h.token("a"));
  EXPECT_NE(crit.rc, 0);
  EXPECT_NE(crit.err.find(
                "asks for tier critical, which queue research may not use (its tiers: standard, "
                "best-effort)"),
            std::string::npos)
      << crit.err;
  EXPECT_EQ(h.Get("/v1/jobs/vip", h.token("admin")).value("state", "none"),
            "none");  // nothing kept

  Submit(h, "a",
         {"--id", "be", "--queue", "research", "--tier", "best-effort", "--gpus", "1", "--vram-gb",
          "10", "--grace-s", "60", "--", h.Path("stubborn.sh"), h.Path("out")});
  ASSERT_TRUE(Harness::WaitFor([&] { return fs::exists(h.Path("out/be.pids")); }, 10));
  pid_t shell = 0, child = 0;
  std::istringstream(h.Read("out/be.pids")) >> shell >> child;
  ASSERT_TRUE(Alive(shell) && Alive(child));
  ASSERT_EQ(h.Cli({"cancel", "be"}, h.token("a")).rc, 0);
  std::this_thread::sleep_for(std::chrono::seconds(2));
  EXPECT_EQ(h.Job("be").value("state", ""), "stopping");  // SIGTERM ignored: its grace runs
  EXPECT_TRUE(Alive(shell) && Alive(child));
  const auto forced = std::chrono::steady_clock::now();
  RunResult force = h.Cli({"cancel", "--force", "be"}, h.token("admin"));
  ASSERT_EQ(force.rc, 0) << force.err;
  ASSERT_TRUE(Harness::WaitFor([&] { return !Alive(shell) && !Alive(child); }, 5))
      << "the group outlived --force";
  ASSERT_TRUE(Harness::WaitFor([&] { return h.Job("be").value("state", "") == "cancelled"; }, 10))
      << h.Job("be").dump();
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - forced).count(), 10.0);
  EXPECT_NE(h.Job("be").value("reason", "").find("force-cancelled by admin"), std::string::npos)
      << h.Job("be").dump();

  // The serving team's critical work runs; a bad force value is refused.
  Submit(h, "b",
         {"--id", "inf", "--queue", "serving", "--tier", "critical", "--gpus", "1", "--vram-gb",
          "10", "--", h.Path("stubborn.sh"), h.Path("out")});
  ASSERT_TRUE(Harness::WaitFor([&] { return h.Job("inf").value("state", "") == "running"; }, 10));
  int status = 0;
  h.Post("/v1/jobs/inf/cancel?force=maybe", "", h.token("b"), &status);
  EXPECT_EQ(status, 400);
  ASSERT_EQ(h.Cli({"cancel", "--force", "inf"}, h.token("b")).rc, 0);
  ASSERT_TRUE(Harness::WaitFor([&] { return h.Job("inf").value("state", "") == "cancelled"; }, 10));
}

constexpr const char* kBudgetCluster = R"(cluster: budget
pools:
  - name: h100
    count: 2
    gpus: 8
    gpu_model: H100-80GB
    cpus: 64
    memory_gb: 512
queues:
  - name: research
    guaranteed_gpus: 8
    budget: {gpu_hours: 0.004, period: month}
  - name: vision
    guaranteed_gpus: 8
    budget: {gpu_hours: 0.004, period: week, when_spent: wait}
accounting:
  currency: EUR
  gpu_hour_prices: {H100-80GB: 2}
)";

TEST(Integration, SpentBudgetsMakeNewWorkBestEffortOrWaitAndUsageMatchesTheEventLog) {
  Harness h("budget");
  h.Setup(kBudgetCluster, {{"a", "research"}, {"b", "vision"}});
  h.Write("job.sh", kJobScript, true);
  fs::create_directories(h.Path("out"));
  h.StartServer();
  for (int i = 0; i < 2; ++i) h.StartAgent("h100-" + std::to_string(i));
  ASSERT_TRUE(Harness::WaitFor([&] { return h.NodesUp(2); }, 15));
  auto spec = [&](const std::string& id, const std::string& queue, int gpus, int ms) {
    h.Write(id + ".yaml", "id: " + id + "\nqueue: " + queue + "\ngpus: " + std::to_string(gpus) +
                              "\nvram_gb: 20\ngrace_s: 1\ncommand: [" + h.Path("job.sh") + ", " +
                              h.Path("out") + ", \"" + std::to_string(ms) + "\"]\n");
    return h.Path(id + ".yaml");
  };
  auto budget = [&](const std::string& queue) {
    const json all = h.Get("/v1/queues", h.token("admin"));
    for (const json& q : all.value("queues", json::array())) {
      if (q.value("name", "") == queue) return q.value("budget", json::object());
    }
    return json::object();
  };
  // 0.004 weighted GPU-hours at 2 per H100-hour: 7.2 H100 GPU-seconds. r1 (4 GPUs)
  // spends it in 1.8 s, v1 (2 GPUs) in 3.6 s; both run 5 s.
  std::set<std::string> ids;
  ids.insert(Submit(h, "a", {spec("r1", "research", 4, 5000)}));
  ids.insert(Submit(h, "b", {spec("v1", "vision", 2, 5000)}));
  ASSERT_TRUE(Harness::WaitFor([&] { return budget("research").value("spent", false); }, 10))
      << budget("research");
  EXPECT_EQ(budget("research").value("period", ""), "month");
  EXPECT_GE(budget("research").value("spent_gpu_hours", 0.0), 0.004 * (1 - 1e-6));
  EXPECT_FALSE(budget("vision").value("spent", true)) << budget("vision");
  EXPECT_EQ(h.Job("r1").value("state", ""), "running");

  ids.insert(Submit(h, "a", {spec("r2", "research", 2, 9000)}));
  ASSERT_TRUE(Harness::WaitFor([&] { return h.Job("r2").value("state", "") != "pending"; }, 10));
  const json r2 = h.Job("r2");
  EXPECT_EQ(r2.value("tier", ""), "standard");
  EXPECT_EQ(r2.value("tier_now", ""), "best-effort") << r2.dump();
  EXPECT_NE(r2.value("tier_reason", "").find("queue research spent its GPU-hours"),
            std::string::npos)
      << r2.dump();
  EXPECT_NE(h.Cli({"ls"}, h.token("a")).out.find("best-effort*"), std::string::npos);

  ASSERT_TRUE(Harness::WaitFor([&] { return budget("vision").value("spent", false); }, 10))
      << budget("vision");
  ids.insert(Submit(h, "b", {spec("v2", "vision", 1, 1000)}));
  auto held = [&] {
    const json v2 = h.Job("v2");
    return v2.value("state", "") == "pending" &&
           v2.value("reason", "")
                   .find("budget: queue vision spent its 0.004 GPU-hours of the week from") !=
               std::string::npos &&
           v2.value("reason", "").find("new work waits until") != std::string::npos;
  };
  ASSERT_TRUE(Harness::WaitFor(held, 10)) << h.Job("v2").dump();
  RunResult queues = h.Cli({"queues"}, h.token("admin"));
  EXPECT_NE(queues.out.find("per week, spent: new work wait"), std::string::npos) << queues.out;

  // A restart keeps what was spent (the ended runs of the period from the database, the
  // running ones from their start).
  ASSERT_TRUE(Harness::WaitFor([&] { return h.Job("v1").value("state", "") == "finished"; }, 10));
  h.KillServer(SIGKILL);
  h.StartServer();
  ASSERT_TRUE(Harness::WaitFor([&] { return budget("vision").value("spent", false); }, 15))
      << budget("vision");
  EXPECT_GE(budget("vision").value("spent_gpu_hours", 0.0), 0.004 * (1 - 1e-6));
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  EXPECT_TRUE(held()) << h.Job("v2").dump();
  // Said spent once in the period: the restart does not say it again.
  const auto vision_spent = [&] {
    int n = 0;
    for (const json& e : Events(h)) {
      n += e.value("type", "") == "budget" && e.value("queue", "") == "vision" &&
           e.value("state", "") == "spent";
    }
    return n;
  };
  EXPECT_EQ(vision_spent(), 1);
  ASSERT_EQ(h.Cli({"cancel", "v2"}, h.token("b")).rc, 0);
  // r2's run started demoted and is adopted so: still best-effort (first to be preempted).
  const json r2_after = h.Job("r2");
  EXPECT_EQ(r2_after.value("state", ""), "running") << r2_after.dump();
  EXPECT_EQ(r2_after.value("tier_now", ""), "best-effort") << r2_after.dump();

  ASSERT_TRUE(Harness::WaitFor([&] { return AllEnded(h, ids); }, 30))
      << h.Cli({"ls", "--all"}, h.token("admin")).out;
  const auto states = States(h);
  for (const char* id : {"r1", "r2", "v1"}) EXPECT_EQ(states.at(id), "finished") << id;
  EXPECT_EQ(states.at("v2"), "cancelled");

  // The event log: budget events, and GPU-hours per queue from its starts and ends.
  const std::vector<json> events = Events(h);
  std::map<std::string, std::string> queue_of = {
      {"r1", "research"}, {"r2", "research"}, {"v1", "vision"}, {"v2", "vision"}};
  std::map<std::string, std::pair<double, double>> open;  // job -> start, gpus
  std::map<std::string, double> from_log;                 // queue -> GPU-hours
  int spent_events = 0;
  for (const json& e : events) {
    const std::string type = e.value("type", ""), job = e.value("job", "");
    if (type == "budget" && e.value("state", "") == "spent") ++spent_events;
    if (type == "start") {
      double gpus = 0;
      for (const json& w : e["alloc"])
        gpus += static_cast<double>(w.value("gpus", json::array()).size());
      open[job] = {e["t"].get<double>(), gpus};
    } else if ((type == "finish" || type == "preempt" || type == "requeue" || type == "cancel" ||
                type == "reclaim") &&
               open.count(job)) {
      from_log[queue_of[job]] += open[job].second * (e["t"].get<double>() - open[job].first) / 3600;
      open.erase(job);
    }
  }
  EXPECT_EQ(spent_events, 2);  // each queue once (the restart does not say vision's again)
  const json usage = json::parse(h.Cli({"usage", "--json", "--since", "1h"}, h.token("admin")).out);
  EXPECT_EQ(usage.value("currency", ""), "EUR");
  std::map<std::string, double> held_hours, cost;
  for (const json& row : usage["usage"]) {
    held_hours[row.value("queue", "")] += row.value("gpu_hours", 0.0);
    cost[row.value("queue", "")] += row.value("cost", 0.0);
  }
  for (const char* q : {"research", "vision"}) {
    EXPECT_GT(from_log[q], 0.0) << q;
    EXPECT_NEAR(held_hours[q], from_log[q], 1e-6) << q;  // the same instants, to the ms
    EXPECT_NEAR(cost[q], 2 * held_hours[q], 1e-9) << q;
  }
  // The same by queue as CSV, for a chargeback sheet, over a calendar period.
  const std::time_t yesterday = std::time(nullptr) - 86400;
  std::tm tm{};
  gmtime_r(&yesterday, &tm);
  char date[16];
  std::strftime(date, sizeof date, "%Y-%m-%d", &tm);
  RunResult csv = h.Cli({"usage", "--by", "queue", "--csv", "--since", date}, h.token("admin"));
  ASSERT_EQ(csv.rc, 0) << csv.err;
  EXPECT_EQ(csv.out.substr(0, csv.out.find('\n')),
            "queue,gpu_hours,busy_gpu_hours,reported_gpu_hours,cost,currency,right_sizing_frees_"
            "gpu_hours");
  EXPECT_NE(csv.out.find("\nresearch,"), std::string::npos) << csv.out;
  EXPECT_NE(csv.out.find(",EUR,"), std::string::npos) << csv.out;
  EXPECT_NE(h.Cli({"usage", "--since", "2026-02-30"}, h.token("admin")).rc, 0);
}

}  // namespace
}  // namespace gantry::it

namespace gantry::it {
namespace {

// Consolidation live (policy.consolidate_within_s, docs/policies.md): two nodes of one
// shared GPU, half of each used; a job of a whole GPU moves one half-GPU job to the other
// node, and every job runs as a real process, the moved one from a second run.
constexpr const char* kConsolidateCluster = R"(cluster: consolidate
pools:
  - name: s
    count: 2
    gpus: 1
    gpu_model: H100-80GB
    cpus: 16
    memory_gb: 64
    sharing: [mps]
queues:
  - name: research
policy:
  consolidate_within_s: 3600
  min_run_before_repreempt_s: 0  # the jobs to move started a second ago
)";

TEST(Integration, AJobThatFitsNowhereMovesAHalfGpuJobAndAllRunAsRealProcesses) {
  Harness h("consolidate");
  h.Setup(kConsolidateCluster, {{"a", "research"}});
  h.Write("job.sh", kJobScript, true);
  fs::create_directories(h.Path("out"));
  h.StartServer();
  for (int i = 0; i < 2; ++i)
    h.StartAgent("s-" + std::to_string(i), "", {"--emulate", "1xH100-80GB"});
  ASSERT_TRUE(Harness::WaitFor([&] { return h.NodesUp(2); }, 15));
  auto spec = [&](const std::string& id, const std::string& shape, int ms) {
    h.Write(id + ".yaml", "id: " + id + "\nqueue: research\n" + shape + "grace_s: 1\ncommand: [" +
                              h.Path("job.sh") + ", " + h.Path("out") + ", \"" +
                              std::to_string(ms) + "\"]\n");
    return h.Path(id + ".yaml");
  };
  const std::string half = "sharing: mps\ngpus: 0.5\nvram_gb: 20\n";
  // h1 and h2 share a GPU (best fit packs them), h3 takes the other; h2 is cancelled.
  for (const char* id : {"h1", "h2", "h3"}) {
    Submit(h, "a", {spec(id, half, 6000)});
    ASSERT_TRUE(Harness::WaitFor([&] { return h.Job(id)["state"] == "running"; }, 10)) << id;
  }
  const std::string packed = h.Job("h1")["nodes"][0];
  ASSERT_EQ(h.Job("h2")["nodes"][0], packed);
  const std::string other = h.Job("h3")["nodes"][0];
  ASSERT_NE(other, packed);
  ASSERT_EQ(h.Cli({"cancel", "h2"}, h.token("a")).rc, 0);
  ASSERT_TRUE(Harness::WaitFor(
      [&] { return h.Job("h2")["state"] != "running" && h.Job("h2")["state"] != "stopping"; }, 10));
  // Half of each GPU is free: a whole GPU fits nowhere until one half-GPU job moves.
  Submit(h, "a", {spec("big", "gpus: 1\nvram_gb: 40\n", 2000)});
  const std::set<std::string> ids = {"h1", "h3", "big"};
  ASSERT_TRUE(Harness::WaitFor([&] { return AllEnded(h, ids); }, 40))
      << h.Cli({"ls", "--all"}, h.token("a")).out;
  for (const std::string& id : ids) EXPECT_EQ(h.Job(id)["state"], "finished") << id;
  // One of them moved, for big, and said so.
  std::string moved;
  for (const json& e : Events(h)) {
    if (e.value("type", "") != "preempt") continue;
    EXPECT_TRUE(moved.empty()) << "a second preemption: " << e.dump();
    moved = e.value("job", "");
    EXPECT_EQ(e.value("by", ""), "big");
    EXPECT_EQ(e.value("reason", "").rfind("consolidation: moved to node ", 0), 0u) << e.dump();
  }
  ASSERT_TRUE(moved == "h1" || moved == "h3") << moved;
  const std::string stayed = moved == "h1" ? "h3" : "h1";
  const std::string left = moved == "h1" ? packed : other;  // the node it left, big's
  const std::string to = moved == "h1" ? other : packed;
  EXPECT_EQ(h.Job("big")["nodes"][0], left);
  EXPECT_EQ(h.Job(moved)["nodes"][0], to);
  // Its first run was signaled and ended before big started; its second ran to the end
  // beside the job that stayed, which ran once, untouched.
  const auto runs = Envs(h, moved);  // run -> rank -> env
  ASSERT_EQ(runs.size(), 2u);
  auto log = [&](const std::string& id, int run) {
    return h.Path("out/" + id + "." + std::to_string(run) + ".0.log");
  };
  const int first = runs.begin()->first, second = runs.rbegin()->first;
  ASSERT_EQ(Times(log(moved, first), "term").size(), 1u);
  EXPECT_TRUE(Times(log(moved, first), "end").empty());
  EXPECT_EQ(Times(log(moved, second), "end").size(), 1u);
  const std::vector<double> big_start = Times(log("big", 1), "start");
  ASSERT_EQ(big_start.size(), 1u);
  EXPECT_LE(Times(log(moved, first), "graceful").at(0), big_start[0]);
  EXPECT_EQ(Envs(h, stayed).size(), 1u);
}

}  // namespace
}  // namespace gantry::it
