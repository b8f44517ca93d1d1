// The web console's sign-in (issue 15, item 1), over real HTTP against a real gantryd: the
// token is posted once and then held in an HttpOnly, SameSite=Strict cookie (the page never
// keeps it: no localStorage); a request that changes something and is signed in by cookie
// needs the session's X-CSRF-Token; a team's cookie sees what its token may see and no more;
// signing out expires the cookie; the CLI's bearer tokens need no CSRF token. And the page
// itself in Debian's headless chromium: with no session it shows the sign-in form and its
// script ran without an error.
#include <gtest/gtest.h>

#include <httplib.h>

#include <algorithm>
#include <filesystem>
#include <regex>
#include <string>

#include <nlohmann/json.hpp>

#include "harness.h"
#include "job_helpers.h"

namespace gantry::it {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

constexpr const char* kConsoleCluster = R"(cluster: console
pools:
  - name: h100
    count: 1
    gpus: 8
    gpu_model: H100-80GB
queues:
  - name: research
    guaranteed_gpus: 4
  - name: vision
    guaranteed_gpus: 4
)";

std::string Chromium() {
  for (const char* name : {"chromium", "chromium-browser"}) {
    RunResult which = it::Run({"sh", "-c", "command -v " + std::string(name)});
    if (which.rc == 0 && !which.out.empty()) return which.out.substr(0, which.out.find('\n'));
  }
  return "";
}

std::string SetCookie(const httplib::Result& r) {
  return r ? r->get_header_value("Set-Cookie") : std::string();
}

TEST(Console, SignInKeepsTheTokenInAnHttpOnlyCookieAndChangesNeedTheCsrfToken) {
  Harness h("console");
  h.Setup(kConsoleCluster, {{"a", "research"}, {"b", "vision"}});
  h.StartServer();
  const std::string mine =
      Submit(h, "a", {"--queue", "research", "--gpus", "8", "--vram-gb", "10", "--", "true"});
  const std::string theirs =
      Submit(h, "b", {"--queue", "vision", "--gpus", "8", "--vram-gb", "10", "--", "true"});
  httplib::Client cli(h.ServerUrl());

  // A wrong token: no session.
  auto wrong = cli.Post("/v1/session", json{{"token", "nope"}}.dump(), "application/json");
  ASSERT_TRUE(wrong);
  EXPECT_EQ(wrong->status, 401) << wrong->body;
  EXPECT_EQ(SetCookie(wrong), "");
  auto malformed = cli.Post("/v1/session", "{\"token\": 7}", "application/json");
  ASSERT_TRUE(malformed);
  EXPECT_EQ(malformed->status, 400);

  // Team a signs in.
  auto in = cli.Post("/v1/session", json{{"token", h.token("a")}}.dump(), "application/json");
  ASSERT_TRUE(in);
  ASSERT_EQ(in->status, 200) << in->body;
  // The cookie holds a session of the store, not the API token (issue 47: it was the
  // token itself, so a copied cookie was the token and signing out ended nothing).
  const std::string cookie = SetCookie(in);
  ASSERT_EQ(cookie.rfind("gantry_session=gss_", 0), 0u) << cookie;
  EXPECT_EQ(cookie.find(h.token("a")), std::string::npos) << cookie;
  const std::string secret =
      cookie.substr(std::string("gantry_session=").size(),
                    cookie.find(';') - std::string("gantry_session=").size());
  EXPECT_NE(cookie.find("; Max-Age=43200;"), std::string::npos) << cookie;
  EXPECT_NE(cookie.find("; HttpOnly"), std::string::npos) << cookie;
  EXPECT_NE(cookie.find("; SameSite=Strict"), std::string::npos) << cookie;
  EXPECT_NE(cookie.find("; Path=/"), std::string::npos) << cookie;
  const json session = json::parse(in->body);
  EXPECT_EQ(session.value("principal", ""), "team a") << session.dump();
  EXPECT_FALSE(session.value("admin", true));
  EXPECT_FALSE(session.contains("session")) << "the secret is for the HttpOnly cookie only";
  const std::string csrf = session.value("csrf", "");
  ASSERT_EQ(csrf.size(), 64u) << session.dump();
  const httplib::Headers by_cookie = {{"Cookie", "other=1; gantry_session=" + secret}};
  // A session is no API token (it cannot open another one, nor be a bearer token for one).
  auto nested = cli.Post("/v1/session", json{{"token", secret}}.dump(), "application/json");
  ASSERT_TRUE(nested);
  EXPECT_EQ(nested->status, 401) << nested->body;

  // Reading by cookie: its own jobs, not the other team's logs.
  auto again = cli.Get("/v1/session", by_cookie);
  ASSERT_TRUE(again);
  ASSERT_EQ(again->status, 200);
  EXPECT_EQ(json::parse(again->body).value("csrf", ""), csrf);
  auto jobs = cli.Get("/v1/jobs", by_cookie);
  ASSERT_TRUE(jobs);
  ASSERT_EQ(jobs->status, 200) << jobs->body;
  EXPECT_NE(jobs->body.find("\"" + mine + "\""), std::string::npos) << jobs->body;
  auto their_logs = cli.Get("/v1/jobs/" + theirs + "/logs", by_cookie);
  ASSERT_TRUE(their_logs);
  EXPECT_EQ(their_logs->status, 403) << their_logs->body;

  // Changing something by cookie: refused without the CSRF token or with a wrong one.
  auto forged = cli.Post("/v1/jobs/" + mine + "/cancel", by_cookie, "", "application/json");
  ASSERT_TRUE(forged);
  EXPECT_EQ(forged->status, 403);
  EXPECT_NE(forged->body.find("CSRF check failed"), std::string::npos) << forged->body;
  httplib::Headers wrong_csrf = by_cookie;
  wrong_csrf.emplace("X-CSRF-Token", std::string(64, '0'));
  auto guessed = cli.Post("/v1/jobs/" + mine + "/cancel", wrong_csrf, "", "application/json");
  ASSERT_TRUE(guessed);
  EXPECT_EQ(guessed->status, 403);
  EXPECT_EQ(h.Job(mine).value("state", ""), "pending");
  httplib::Headers with_csrf = by_cookie;
  with_csrf.emplace("X-CSRF-Token", csrf);
  auto not_mine = cli.Post("/v1/jobs/" + theirs + "/cancel", with_csrf, "", "application/json");
  ASSERT_TRUE(not_mine);
  EXPECT_EQ(not_mine->status, 403) << not_mine->body;  // the token's rules, not the cookie's
  auto cancel = cli.Post("/v1/jobs/" + mine + "/cancel", with_csrf, "", "application/json");
  ASSERT_TRUE(cancel);
  EXPECT_EQ(cancel->status, 200) << cancel->body;
  EXPECT_EQ(h.Job(mine).value("state", ""), "cancelled");

  // The CLI's bearer token needs no CSRF token.
  EXPECT_EQ(h.Cli({"cancel", theirs}, h.token("b")).rc, 0);

  // Signing out expires the cookie (and needs the CSRF token too).
  auto out_forged = cli.Delete("/v1/session", by_cookie);
  ASSERT_TRUE(out_forged);
  EXPECT_EQ(out_forged->status, 403);
  // A gantryd restart keeps the session (it is in the store, where a standby reads it too).
  h.KillServer(SIGTERM);
  h.StartServer();
  httplib::Client after(h.ServerUrl());
  auto kept = after.Get("/v1/session", by_cookie);
  ASSERT_TRUE(kept);
  EXPECT_EQ(kept->status, 200) << kept->body;
  auto out = after.Delete("/v1/session", with_csrf);
  ASSERT_TRUE(out);
  EXPECT_EQ(out->status, 200);
  EXPECT_NE(SetCookie(out).find("gantry_session=; Path=/; Max-Age=0; HttpOnly"), std::string::npos)
      << SetCookie(out);
  // Signed out, the cookie's secret is worth nothing, even kept by someone who copied it.
  auto ended = after.Get("/v1/jobs", by_cookie);
  ASSERT_TRUE(ended);
  EXPECT_EQ(ended->status, 401) << ended->body;
  EXPECT_NE(ended->body.find("session ended"), std::string::npos) << ended->body;

  // The page keeps no token where its scripts (or anyone's) could read it.
  auto page = after.Get("/");
  ASSERT_TRUE(page);
  EXPECT_EQ(page->body.find("localStorage"), std::string::npos);
  EXPECT_NE(page->body.find("'X-CSRF-Token'"), std::string::npos);

  // In a real browser with no session: the sign-in form shows, the tables are empty, and
  // the script ran to the end without an error (an error would leave the form hidden).
  const std::string chromium = Chromium();
  ASSERT_FALSE(chromium.empty())
      << "chromium not found: scripts/setup.sh installs Debian's chromium";
  const RunResult dom = it::Run({chromium, "--headless", "--no-sandbox", "--disable-gpu",
                                 "--no-first-run", "--user-data-dir=" + h.Path("profile"),
                                 "--virtual-time-budget=3000", "--dump-dom", h.ServerUrl() + "/"});
  ASSERT_EQ(dom.rc, 0);
  EXPECT_NE(dom.out.find("<form id=\"signin\">"), std::string::npos)
      << dom.out;  // no longer hidden
  EXPECT_NE(dom.out.find("<span id=\"who\" hidden=\"\">"), std::string::npos) << dom.out;
  EXPECT_NE(dom.out.find("<div id=\"page\"></div>"), std::string::npos) << dom.out;
}

constexpr const char* kMapCluster = R"(cluster: console-map
pools:
  - name: h100
    count: 2
    gpus: 8
    gpu_model: H100-80GB
    sharing: [mig, mps]
queues:
  - name: research
  - name: vision
)";

// Checks that the console's map (its HTML) draws every GPU /v1/nodes lists, each with
// the jobs the API says hold it, and no other; returns the GPUs counted.
size_t ExpectMapDrawsEveryGpu(const std::string& map, const json& nodes) {
  const size_t cells = Occurrences(map, "data-gpu=\"");
  size_t gpus = 0;
  for (const json& node : nodes["nodes"]) {
    const size_t at = map.find("data-node=\"" + node.value("name", "") + "\"");
    if (at == std::string::npos) {
      ADD_FAILURE() << node.value("name", "") << " is not on the map";
      return gpus;
    }
    size_t from = at;
    for (const json& g : node["gpu_detail"]) {
      ++gpus;
      std::string holders;
      for (const json& j : g["jobs"])
        holders += (holders.empty() ? "" : ",") + j.get<std::string>();
      const std::string cell =
          "data-gpu=\"" + std::to_string(g.value("index", -1)) + "\" data-jobs=\"" + holders + "\"";
      from = map.find(cell, from);
      if (from == std::string::npos) {
        ADD_FAILURE() << node.value("name", "") << " " << cell << " is not on the map";
        return gpus;
      }
    }
  }
  EXPECT_EQ(cells, gpus);
  return gpus;
}

// Every view signed in, in a real browser driven over the DevTools protocol
// (console_cdp.py): the token typed into the form, then the cluster map, queues, jobs,
// usage and two job pages. No page error; the map draws every GPU the API lists, each
// with the jobs the API says hold it (a whole-GPU gang, a MIG instance, an MPS share, the
// other team's job); pending work is grouped by why it waits; a team's own job page shows
// its command, history and log, another team's shows neither command nor log. The
// screenshots are kept in the build tree (console-screenshots/) as the test's artefacts.
TEST(Console, EveryViewRendersSignedInAndATeamSeesOnlyWhatItsTokenMay) {
  const std::string chromium = Chromium();
  ASSERT_FALSE(chromium.empty())
      << "chromium not found: scripts/setup.sh installs Debian's chromium";
  Harness h("console-map");
  h.Setup(kMapCluster, {{"a", "research"}, {"b", "vision"}});
  h.StartServer({"--history-sample-s", "0.2"});
  h.StartAgent("h100-0");
  h.StartAgent("h100-1", "", {"--cgroups", "off"});  // its workers not isolated: the map says so
  ASSERT_TRUE(Harness::WaitFor([&] { return h.NodesUp(2); }, 15));
  const std::vector<std::string> sleep = {"--", "sh", "-c",
                                          "echo hello from $GANTRY_JOB_ID; sleep 120"};
  auto submit = [&](const std::string& team, std::vector<std::string> args) {
    args.insert(args.end(), sleep.begin(), sleep.end());
    return Submit(h, team, args);
  };
  const std::string train =
      submit("a", {"--id", "train", "--queue", "research", "--gpus", "4", "--vram-gb", "10"});
  const std::string mig =
      submit("a", {"--id", "slice", "--queue", "research", "--mig", "1g.10gb", "--vram-gb", "10"});
  const std::string share = submit("a", {"--id", "share", "--queue", "research", "--gpus", "0.5",
                                         "--sharing", "mps", "--vram-gb", "10"});
  const std::string theirs =
      submit("b", {"--id", "theirs", "--queue", "vision", "--gpus", "2", "--vram-gb", "10"});
  // Elastic (1 to 2 workers of 8 GPUs): no node is whole now, so it waits.
  const std::string wide = submit("a", {"--id", "wide", "--queue", "research", "--replicas", "2",
                                        "--min-replicas", "1", "--gpus", "8", "--vram-gb", "10"});
  // An array of 6 throttled to 1: its held tasks are one row of the jobs view.
  submit("a", {"--id", "sweep", "--queue", "research", "--gpus", "8", "--vram-gb", "10", "--array",
               "0-5%1"});
  ASSERT_TRUE(Harness::WaitFor(
      [&] {
        for (const std::string& id : {train, mig, share, theirs}) {
          if (h.Job(id).value("state", "") != "running") return false;
        }
        return h.Job(wide).value("state", "") == "pending" &&
               !h.Job(wide).value("reason", "").empty();
      },
      30))
      << h.Cli({"ls", "--all"}, h.token("admin")).out;
  ASSERT_TRUE(Harness::WaitFor(
      [&] {
        return h.Cli({"logs", train}, h.token("a")).out.find("hello from train") !=
               std::string::npos;
      },
      15));

  const std::string shots = (fs::current_path() / "console-screenshots").string();
  const RunResult run =
      it::Run({"python3", CONSOLE_CDP, chromium, h.ServerUrl() + "/", h.token("a"), shots, "map",
               "queues", "jobs", "usage", "job/" + train, "job/" + theirs, "job/" + wide},
              {}, 120);
  ASSERT_EQ(run.rc, 0) << run.err;
  const json r = json::parse(run.out, nullptr, false);
  ASSERT_TRUE(r.is_object()) << run.out << run.err;
  EXPECT_TRUE(r.value("signed_in", false)) << run.out;
  EXPECT_TRUE(r["console_errors"].empty()) << r["console_errors"].dump(2);
  for (const auto& [view, v] : r["views"].items()) {
    EXPECT_EQ(v.value("error", "?"), "") << view;
    std::string name = view;
    std::replace(name.begin(), name.end(), '/', '-');
    EXPECT_GT(fs::file_size(shots + "/" + name + ".png"), 1000u) << view;
  }

  // The map against /v1/nodes: every GPU, with the jobs holding it.
  const std::string map = r["views"]["map"].value("html", "");
  EXPECT_EQ(ExpectMapDrawsEveryGpu(map, h.Get("/v1/nodes", h.token("admin"))), 16u);
  for (const std::string& id : {train, mig, share, theirs})
    EXPECT_NE(map.find(id), std::string::npos) << id;
  // A node whose agent says its workers are not fully isolated has a dashed border: h100-1
  // (--cgroups off), h100-0 where this machine gives its agent no cgroups or device rules.
  int marked = 0;
  const json nodes = h.Get("/v1/nodes", h.token("admin"));
  for (const json& n : nodes["nodes"]) {
    bool open = false;
    const json isolation = n.value("isolation", json::object());
    for (const auto& [what, on] : isolation.items()) open |= !on.get<bool>();
    const std::string name = n.value("name", "");
    const size_t at = map.find("data-node=\"" + name + "\"");
    ASSERT_NE(at, std::string::npos) << name << " not on the map";
    const size_t div = map.rfind("<div class=\"node ", at);
    ASSERT_NE(div, std::string::npos) << name;
    EXPECT_EQ(map.substr(div, at - div).find("unisolated") != std::string::npos, open)
        << name << ": " << n.dump();
    marked += name == "h100-1" && open;
  }
  EXPECT_EQ(marked, 1) << "h100-1 runs its workers without cgroups: " << nodes.dump();

  // The map says the cluster in one line, and its legend comes before the nodes.
  EXPECT_NE(map.find("<p id=\"summary\">2 nodes (2 up), 16 GPUs: "), std::string::npos) << map;
  EXPECT_LT(map.find("class=\"legend\""), map.find("class=\"pool\"")) << map;

  // Jobs: pending work grouped by why it waits, as the API counts it; the charts before
  // the list; how long each has waited or run.
  const std::string jobs = r["views"]["jobs"].value("html", "");
  for (const json& g : h.Get("/v1/jobs?all=1&limit=500", h.token("a"))["waiting"]) {
    const int k = g.value("jobs", 0);
    const std::string said = std::to_string(k) + (k == 1 ? " job waits for " : " jobs wait for ") +
                             g.value("cause", "?");
    EXPECT_NE(jobs.find(said), std::string::npos) << said << "\n" << jobs;
  }
  EXPECT_LT(jobs.find("Pending jobs by why they wait"), jobs.find("data-job=")) << jobs;
  EXPECT_NE(jobs.find("<td class=\"pending\">waiting "), std::string::npos) << jobs;
  EXPECT_NE(jobs.find("<td class=\"running\">running "), std::string::npos) << jobs;
  EXPECT_NE(jobs.find("data-job=\"wide\""), std::string::npos) << jobs;
  // The array's 5 held tasks are one row, cancelled as the array; its first task its own.
  EXPECT_NE(jobs.find("data-job=\"sweep_1\" data-array=\"sweep\""), std::string::npos) << jobs;
  EXPECT_NE(jobs.find("sweep_[1-5]</a> <span class=\"muted\">(5 tasks)</span>"), std::string::npos)
      << jobs;
  EXPECT_NE(jobs.find("data-arg=\"sweep\">Cancel array"), std::string::npos) << jobs;
  EXPECT_NE(jobs.find("data-job=\"sweep_0\""), std::string::npos) << jobs;
  EXPECT_EQ(jobs.find("data-job=\"sweep_2\""), std::string::npos) << jobs;
  // Cancel is offered on team a's jobs only (the API refuses the rest).
  EXPECT_NE(jobs.find("data-action=\"cancel\" data-arg=\"train\""), std::string::npos) << jobs;
  EXPECT_EQ(jobs.find("data-action=\"cancel\" data-arg=\"theirs\""), std::string::npos) << jobs;
  // ... and over time, with the idle GPUs by cause (the API's history has samples).
  const json history = h.Get("/v1/cluster/history", h.token("a"));
  ASSERT_FALSE(history["samples"].empty()) << history.dump();
  const json& last = history["samples"].back();
  EXPECT_EQ(last["idle"].size(), 8u) << last.dump();
  EXPECT_NEAR(last["queues"].value("vision", -1.0), 2.0, 1e-9) << last.dump();
  // A poller asks only for what is newer than what it has (the console does).
  const json newer = h.Get("/v1/cluster/history?since=" + last["t"].dump(), h.token("a"));
  for (const json& s : newer["samples"])
    EXPECT_GT(s["t"].get<double>(), last["t"].get<double>()) << newer.dump();
  EXPECT_EQ(newer.value("kept", 0), history.value("kept", -1));
  int status = 0;
  h.Get("/v1/cluster/history?since=yesterday", h.token("a"), &status);
  EXPECT_EQ(status, 400);
  EXPECT_NE(r["views"]["queues"].value("html", "").find("data-series=\"vision\""),
            std::string::npos);
  EXPECT_NE(jobs.find("Idle GPUs by why nothing uses them"), std::string::npos) << jobs;
  EXPECT_NE(jobs.find("data-series=\"capacity\""), std::string::npos) << jobs;
  // Its own job: command, what happened, usage, log.
  const std::string mine = r["views"]["job/" + train].value("html", "");
  EXPECT_NE(mine.find("echo hello from $GANTRY_JOB_ID"), std::string::npos) << mine;
  EXPECT_NE(mine.find("submitted"), std::string::npos) << mine;
  EXPECT_NE(mine.find("run 1 started on h100-"), std::string::npos) << mine;
  EXPECT_NE(mine.find("hello from train"), std::string::npos) << mine;
  // An elastic job's page says its sizes.
  const std::string elastic = r["views"]["job/" + wide].value("html", "");
  EXPECT_NE(elastic.find("1-2 x 8 GPU(s)"), std::string::npos) << elastic;
  EXPECT_NE(elastic.find("elastic: 1 to 2"), std::string::npos) << elastic;
  // The other team's: what anyone sees of a job, not its command or log.
  const std::string other = r["views"]["job/" + theirs].value("html", "");
  EXPECT_NE(other.find("(not yours to see)"), std::string::npos) << other;
  EXPECT_EQ(other.find("echo hello"), std::string::npos) << other;
  EXPECT_EQ(other.find("hello from theirs"), std::string::npos) << other;
  EXPECT_NE(other.find("id=\"log\""), std::string::npos) << other;
  // Queues and usage name both queues.
  for (const char* view : {"queues", "usage"}) {
    const std::string html = r["views"][view].value("html", "");
    EXPECT_NE(html.find("research"), std::string::npos) << view << html;
  }
}

// At a site's size (256 nodes of 8 GPUs from one gantry-swarm, 2,600 jobs): the map draws
// all 2,048 GPUs with their holders, and the jobs view counts every waiting job but draws
// a table of its first 500 rows (12,000 rows took 5 s to draw at every refresh). Timings
// at 1,000 nodes: bench/console_scale.sh.
TEST(Console, AtASitesSizeTheMapDrawsEveryGpuAndTheJobsTableIsCapped) {
  const std::string chromium = Chromium();
  ASSERT_FALSE(chromium.empty())
      << "chromium not found: scripts/setup.sh installs Debian's chromium";
  constexpr int kNodes = 256, kJobs = 2600;
  Harness h("console-scale");
  h.Setup("pools:\n  - name: gpu\n    count: " + std::to_string(kNodes) +
              "\n    gpus: 8\n    gpu_model: H100-80GB\nqueues:\n  - name: research\n  - name: "
              "vision\n",
          {{"a", "research"}, {"b", "vision"}});
  h.StartServer();
  h.StartSwarm({"gpu:" + std::to_string(kNodes) + ":8xH100-80GB"}, "swarm.json");
  ASSERT_TRUE(Harness::WaitFor([&] { return h.NodesUp(kNodes); }, 60))
      << "not every node registered";
  for (int i = 0; i < kJobs; ++i) {
    static const int kGpus[] = {1, 2, 4, 8};
    int status = 0;
    h.Post("/v1/jobs",
           json{{"queue", i % 2 ? "vision" : "research"},
                {"gpus", kGpus[i % 4]},
                {"vram_gb", 40},
                {"command", {"sleep", "3600"}}}
               .dump(),
           h.token(i % 2 ? "b" : "a"), &status);
    ASSERT_EQ(status, 201) << i;
  }
  // Settled: the cluster full (2,048 GPUs of the 3.75 per job asked on average), the rest waiting.
  json health;
  ASSERT_TRUE(Harness::WaitFor(
      [&] {
        health = h.Get("/healthz", "");
        return health.value("jobs_running", 0) + health.value("jobs_pending", 0) == kJobs &&
               health.value("jobs_running", 0) >= 500 && health.value("jobs_pending", 0) > 500;
      },
      60))
      << health.dump();
  const json pending = h.Get("/v1/jobs?state=pending", h.token("admin"));

  const std::string shots = (fs::current_path() / "console-scale-screenshots").string();
  const RunResult run = it::Run({"python3", CONSOLE_CDP, chromium, h.ServerUrl() + "/",
                                 h.token("admin"), shots, "jobs", "map", "jobs?queue=vision"},
                                {}, 180);
  ASSERT_EQ(run.rc, 0) << run.err;
  const json r = json::parse(run.out, nullptr, false);
  ASSERT_TRUE(r.is_object()) << run.out << run.err;
  EXPECT_TRUE(r["console_errors"].empty()) << r["console_errors"].dump(2);
  for (const auto& [view, v] : r["views"].items()) EXPECT_EQ(v.value("error", "?"), "") << view;
  EXPECT_EQ(ExpectMapDrawsEveryGpu(r["views"]["map"].value("html", ""),
                                   h.Get("/v1/nodes", h.token("admin"))),
            static_cast<size_t>(kNodes * 8));
  const std::string jobs = r["views"]["jobs"].value("html", "");
  EXPECT_NE(jobs.find("Showing 500 of " + std::to_string(kJobs) + " jobs"), std::string::npos)
      << jobs.substr(0, 2000);
  // The waiting line counts every pending job (by why it waits), not only the rows drawn.
  const size_t from = jobs.find("<p id=\"waiting\">");
  ASSERT_NE(from, std::string::npos) << jobs.substr(0, 2000);
  const std::string waiting = jobs.substr(from, jobs.find("</p>", from) - from);
  static const std::regex kGroup(R"(([0-9]+) jobs? waits? for )");
  size_t counted = 0;
  for (std::sregex_iterator it(waiting.begin(), waiting.end(), kGroup), e; it != e; ++it) {
    counted += std::stoul((*it)[1].str());
  }
  EXPECT_EQ(counted, pending["jobs"].size()) << waiting;
  EXPECT_EQ(Occurrences(jobs, "data-job=\""), 500u);
  // A queue chosen in the page: gantryd lists and counts that queue's jobs alone.
  const std::string vision = r["views"]["jobs?queue=vision"].value("html", "");
  EXPECT_NE(vision.find("Showing 500 of " + std::to_string(kJobs / 2) + " jobs"), std::string::npos)
      << vision.substr(0, 2000);
  EXPECT_EQ(Occurrences(vision, "\">vision</td>"), 500u);  // the queue column
  EXPECT_EQ(Occurrences(vision, "\">research</td>"), 0u);
}

}  // namespace
}  // namespace gantry::it
