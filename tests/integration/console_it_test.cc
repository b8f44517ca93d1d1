// The web console's sign-in (issue 15, item 1), over real HTTP against a real gantryd: the
// token is posted once and then held in an HttpOnly, SameSite=Strict cookie (the page never
// keeps it: no localStorage); a request that changes something and is signed in by cookie
// needs the session's X-CSRF-Token; a team's cookie sees what its token may see and no more;
// signing out expires the cookie; the CLI's bearer tokens need no CSRF token. And the page
// itself in Debian's headless chromium: with no session it shows the sign-in form and its
// script ran without an error.
#include <gtest/gtest.h>

#include <httplib.h>

#include <string>

#include <nlohmann/json.hpp>

#include "harness.h"
#include "job_helpers.h"

namespace gantry::it {
namespace {

using nlohmann::json;

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

std::string SetCookie(const httplib::Result& r) {
  return r ? r->get_header_value("Set-Cookie") : std::string();
}

TEST(Console, SignInKeepsTheTokenInAnHttpOnlyCookieAndChangesNeedTheCsrfToken) {
  Harness h("console");
  h.Setup(kConsoleCluster, {{"a", "research"}, {"b", "vision"}});
  h.StartServer();
  const std::string mine = Submit(h, "a", {"--queue", "research", "--gpus", "8", "--vram-gb", "10", "--", "true"});
  const std::string theirs = Submit(h, "b", {"--queue", "vision", "--gpus", "8", "--vram-gb", "10", "--", "true"});
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
  const std::string cookie = SetCookie(in);
  EXPECT_EQ(cookie.rfind("gantry_session=" + h.token("a") + ";", 0), 0u) << cookie;
  EXPECT_NE(cookie.find("; HttpOnly"), std::string::npos) << cookie;
  EXPECT_NE(cookie.find("; SameSite=Strict"), std::string::npos) << cookie;
  EXPECT_NE(cookie.find("; Path=/"), std::string::npos) << cookie;
  const json session = json::parse(in->body);
  EXPECT_EQ(session.value("principal", ""), "team a") << session.dump();
  EXPECT_FALSE(session.value("admin", true));
  const std::string csrf = session.value("csrf", "");
  ASSERT_EQ(csrf.size(), 64u) << session.dump();
  const httplib::Headers by_cookie = {{"Cookie", "other=1; gantry_session=" + h.token("a")}};

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
  auto out = cli.Delete("/v1/session", with_csrf);
  ASSERT_TRUE(out);
  EXPECT_EQ(out->status, 200);
  EXPECT_NE(SetCookie(out).find("gantry_session=; Path=/; Max-Age=0; HttpOnly"), std::string::npos) << SetCookie(out);

  // The page keeps no token where its scripts (or anyone's) could read it.
  auto page = cli.Get("/");
  ASSERT_TRUE(page);
  EXPECT_EQ(page->body.find("localStorage"), std::string::npos);
  EXPECT_NE(page->body.find("'X-CSRF-Token'"), std::string::npos);

  // In a real browser with no session: the sign-in form shows, the tables are empty, and
  // the script ran to the end without an error (an error would leave the form hidden).
  std::string chromium;
  for (const char* name : {"chromium", "chromium-browser"}) {
    RunResult which = it::Run({"sh", "-c", "command -v " + std::string(name)});
    if (which.rc == 0 && !which.out.empty()) chromium = which.out.substr(0, which.out.find('\n'));
  }
  ASSERT_FALSE(chromium.empty()) << "chromium not found: scripts/setup.sh installs Debian's chromium";
  const RunResult dom = it::Run({chromium, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                             "--user-data-dir=" + h.Path("profile"), "--virtual-time-budget=3000", "--dump-dom",
                             h.ServerUrl() + "/"});
  ASSERT_EQ(dom.rc, 0);
  EXPECT_NE(dom.out.find("<form id=\"signin\">"), std::string::npos) << dom.out;  // no longer hidden
  EXPECT_NE(dom.out.find("<div id=\"who\" hidden=\"\">"), std::string::npos) << dom.out;
  EXPECT_NE(dom.out.find("<table id=\"jobs\"></table>"), std::string::npos) << dom.out;
}

}  // namespace
}  // namespace gantry::it
