#include "server/http_api.h"

#include <cmath>
#include <fstream>

#include "base/clock.h"
#include "server/auth.h"
#include "server/dashboard.h"
#include "spec/batch.h"

namespace gantry::server {

using nlohmann::json;

int StatusOf(Code code) {
  switch (code) {
    case Code::kOk:
      return 200;
    case Code::kCreated:
      return 201;
    case Code::kBadRequest:
      return 400;
    case Code::kUnauthenticated:
      return 401;
    case Code::kForbidden:
      return 403;
    case Code::kNotFound:
      return 404;
    case Code::kConflict:
      return 409;
    case Code::kTooLarge:
      return 413;
    case Code::kUnprocessable:
      return 422;
    case Code::kTooManyRequests:
      return 429;
    case Code::kUnavailable:
      return 503;
  }
  return 500;
}

namespace {

HttpResponse ToResponse(const Reply& r) {
  HttpResponse res;
  res.status = StatusOf(r.code);
  if (r.code == Code::kUnauthenticated) res.headers.emplace_back("WWW-Authenticate", "Bearer");
  if ((r.code == Code::kTooManyRequests || r.code == Code::kUnavailable) &&
      r.body.contains("retry_after_s")) {
    res.headers.emplace_back("Retry-After", std::to_string(r.body["retry_after_s"].get<int64_t>()));
  }
  if (!r.text.empty() || !r.content_type.empty()) {
    res.content_type = r.content_type.empty() ? "text/plain" : r.content_type;
    res.body = r.text;
  } else {
    res.body = (r.encode ? r.encode() : r.body).dump() + "\n";
  }
  return res;
}

HttpResponse ErrorResponse(Code code, const std::string& message) {
  return ToResponse(Reply::Error(code, message));
}

// A numeric query parameter (std::stoll or std::stod as `parse`); `fallback` when absent.
// An error message naming the parameter when malformed.
template <typename T, typename Parse>
std::optional<std::string> NumberParam(const HttpRequest& req, const char* name, T fallback, T& out,
                                       Parse parse, const char* expected) {
  if (!req.has_param(name)) {
    out = fallback;
    return std::nullopt;
  }
  const std::string v = req.param(name);
  try {
    size_t used = 0;
    out = parse(v, &used);
    if (used == v.size()) return std::nullopt;
  } catch (const std::exception&) {
  }
  return std::string(name) + ": expected " + expected + ", got \"" + v + "\"";
}

std::optional<std::string> IntParam(const HttpRequest& req, const char* name, int64_t fallback,
                                    int64_t& out) {
  return NumberParam<int64_t>(
      req, name, fallback, out,
      [](const std::string& v, size_t* used) { return std::stoll(v, used); }, "an integer");
}

std::optional<std::string> DoubleParam(const HttpRequest& req, const char* name, double fallback,
                                       double& out) {
  return NumberParam<double>(
      req, name, fallback, out,
      [](const std::string& v, size_t* used) { return std::stod(v, used); }, "a number");
}

// A flag query parameter: 1 or true, 0 or false; false when absent.
std::optional<std::string> BoolParam(const HttpRequest& req, const char* name, bool& out) {
  const std::string v = req.param(name);
  out = v == "1" || v == "true";
  if (v.empty() || out || v == "0" || v == "false") return std::nullopt;
  return std::string(name) + ": expected true or false, got \"" + v + "\"";
}

// A log's ?stream=: out (the default) or err, a job step's task's stderr only (step >= 0).
std::optional<std::string> StreamParam(const HttpRequest& req, int64_t step, bool& err) {
  const std::string stream = req.param("stream");
  err = stream == "err";
  if (stream != "" && stream != "out" && !err) return "stream: out or err";
  if (err && step < 0) return "stream=err: a job step's task's only (step=N)";
  return std::nullopt;
}

std::string Basename(const std::string& s) {
  std::string b = s.substr(s.find_last_of('/') == std::string::npos ? 0 : s.find_last_of('/') + 1);
  std::string out;
  for (char c : b) {
    if (static_cast<unsigned char>(c) >= 0x20 && c != 0x7f) out += c;
  }
  return out.substr(0, 200);
}

// The web console signs in once (POST /v1/session) and then holds its token in an
// HttpOnly cookie, out of reach of the page's scripts; an Authorization header wins.
constexpr const char* kSessionCookie = "gantry_session";

std::string CookieOf(const HttpRequest& req, std::string_view name) {
  const std::string all = req.header("cookie");
  size_t at = 0;
  while (at < all.size()) {
    const size_t end = std::min(all.find(';', at), all.size());
    std::string_view pair = std::string_view(all).substr(at, end - at);
    while (!pair.empty() && pair.front() == ' ') pair.remove_prefix(1);
    if (pair.size() > name.size() && pair.substr(0, name.size()) == name &&
        pair[name.size()] == '=') {
      return std::string(pair.substr(name.size() + 1));
    }
    at = end + 1;
  }
  return "";
}

std::string TokenOf(const HttpRequest& req) {
  std::string bearer = BearerToken(req.header("authorization"));
  return bearer.empty() ? CookieOf(req, kSessionCookie) : bearer;
}

// The session cookie's Set-Cookie value: `token` for `max_age_s` (0 expires it).
std::string SessionCookie(const std::string& token, int max_age_s, bool secure) {
  return std::string(kSessionCookie) + "=" + token +
         "; Path=/; Max-Age=" + std::to_string(max_age_s) + "; HttpOnly; SameSite=Strict" +
         (secure ? "; Secure" : "");
}

// The CSRF token of a session: derived from its token (a hash no other site can compute
// without it), so any gantryd of a leader and its standbys checks it without shared state.
std::string CsrfFor(const std::string& token) { return Sha256Hex("gantry csrf\n" + token); }

// Equal strings, compared in time independent of where they differ.
bool SameSecret(const std::string& a, const std::string& b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i)
    diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

// Whether the path is `pattern`, where "*" matches any one segment (collected in order).
bool Match(const HttpRequest& req, std::initializer_list<const char*> pattern,
           std::vector<std::string>& args) {
  if (req.segments.size() != pattern.size()) return false;
  args.clear();
  size_t i = 0;
  for (const char* p : pattern) {
    const std::string& seg = req.segments[i++];
    if (std::string_view(p) == "*") {
      args.push_back(seg);
    } else if (seg != p) {
      return false;
    }
  }
  return true;
}

}  // namespace

HttpApi::HttpApi(ApiBackend& backend, HttpOptions options)
    : backend_(backend), options_(std::move(options)) {
  HttpServerOptions so;
  so.max_body_bytes = options_.max_body_bytes;
  so.threads = options_.threads;
  so.tls = options_.tls;
  server_ = std::make_unique<HttpServer>(so, [this](HttpRequest& req, HttpServer::Respond respond) {
    try {
      Handle(req, respond);
    } catch (const std::exception& e) {
      respond(ErrorResponse(Code::kBadRequest, std::string("bad request: ") + e.what()));
    }
  });
}

HttpApi::~HttpApi() { Stop(); }

Result<int> HttpApi::Bind(const std::string& host, int port) { return server_->Bind(host, port); }
void HttpApi::Serve() { server_->Serve(); }
void HttpApi::Stop() {
  if (server_) server_->Stop();
}
int64_t HttpApi::connections() const { return server_->connections(); }

void HttpApi::SendLog(const HttpRequest& req, const Reply& r, HttpServer::Respond respond) {
  if (!r.ok()) return respond(ToResponse(r));
  int64_t offset = 0;
  (void)IntParam(req, "offset", 0, offset);  // checked before the call
  std::ifstream in(r.body["path"].get<std::string>(), std::ios::binary);
  HttpResponse res;
  res.content_type = "text/plain; charset=utf-8";
  int64_t size = 0;
  if (in) {
    in.seekg(0, std::ios::end);
    size = static_cast<int64_t>(in.tellg());
    const auto limit = static_cast<int64_t>(options_.max_log_reply_bytes);
    // Without an offset: the tail, at most max_log_reply_bytes.
    const int64_t from = req.has_param("offset") ? std::clamp<int64_t>(offset, 0, size)
                                                 : std::max<int64_t>(0, size - limit);
    const int64_t len = std::min<int64_t>(size - from, limit);
    res.body.resize(static_cast<size_t>(len));
    in.seekg(from);
    in.read(res.body.data(), len);
  }
  res.headers.emplace_back("X-Gantry-Log-Size", std::to_string(size));
  res.headers.emplace_back("X-Gantry-Run", std::to_string(r.body["run"].get<int>()));
  respond(std::move(res));
}

void HttpApi::Handle(HttpRequest& req, HttpServer::Respond respond) {
  ApiBackend& c = backend_;
  HttpServer* server = server_.get();
  // The controller answers on its own thread: turn the reply into bytes on an I/O thread.
  auto reply = [server, respond](Reply r) {
    server->Defer([respond, r = std::move(r)] { respond(ToResponse(r)); });
  };
  auto bad = [&](const std::string& message) {
    respond(ErrorResponse(Code::kBadRequest, message));
  };
  const std::string& m = req.method;
  std::vector<std::string> a;

  // Signed in by cookie (the console): what changes something must carry the session's
  // CSRF token, which a page of another site cannot read, so it cannot forge the request.
  const std::string cookie =
      req.header("authorization").empty() ? CookieOf(req, kSessionCookie) : "";
  const bool signing_in = m == "POST" && Match(req, {"v1", "session"}, a);
  if (!cookie.empty() && m != "GET" && m != "HEAD" && !signing_in &&
      !SameSecret(req.header("x-csrf-token"), CsrfFor(cookie))) {
    return respond(ErrorResponse(Code::kForbidden,
                                 "CSRF check failed: a request signed in by cookie must carry "
                                 "the session's X-CSRF-Token (GET /v1/session gives it)"));
  }
  // Sessions: sign in (the token in the body, once), who is signed in, sign out.
  const bool secure = options_.tls.enabled();
  // The cookie holds the session's secret the backend made (never in the body: the
  // cookie is HttpOnly), or, from a backend without sessions, the token.
  auto session_reply = [server, respond, secure](std::string token, bool set_cookie) {
    return [server, respond, secure, token = std::move(token), set_cookie](Reply r) {
      server->Defer([respond, secure, token, set_cookie, r = std::move(r)]() mutable {
        std::string value = token;
        if (r.ok() && r.body.contains("session")) {
          value = r.body["session"].get<std::string>();
          r.body.erase("session");
        }
        if (r.ok()) r.body["csrf"] = CsrfFor(value);
        HttpResponse res = ToResponse(r);
        if (r.ok() && set_cookie) {
          res.headers.emplace_back("Set-Cookie",
                                   SessionCookie(value, ApiBackend::kSessionSeconds, secure));
        }
        respond(std::move(res));
      });
    };
  };
  if (signing_in) {
    json b = json::parse(req.body, nullptr, false);
    if (!b.is_object() || !b.contains("token") || !b["token"].is_string())
      return bad("body: expected {\"token\": \"...\"}");
    std::string token = b["token"].get<std::string>();
    // A cookie value may not hold these; no token Gantry issues does.
    if (token.find_first_of(";, \t\r\n\"\\") != std::string::npos)
      return bad("token: not a Gantry token");
    return c.SignIn(token, session_reply(token, true));
  }
  if (m == "GET" && Match(req, {"v1", "session"}, a))
    return c.WhoAmI(TokenOf(req), session_reply(TokenOf(req), false));
  if (m == "DELETE" && Match(req, {"v1", "session"}, a)) {
    // The session ends in the store (a copied cookie is useless from now on) and in the
    // browser.
    return c.SignOut(CookieOf(req, kSessionCookie), [server, respond, secure](Reply r) {
      server->Defer([respond, secure, r = std::move(r)] {
        HttpResponse res = r.ok() ? HttpResponse{} : ToResponse(r);
        if (r.ok()) res.body = "{\"signed_out\":true}\n";
        res.headers.emplace_back("Set-Cookie", SessionCookie("", 0, secure));
        respond(std::move(res));
      });
    });
  }

  if (m == "GET" && req.segments.empty()) {
    HttpResponse res;
    res.content_type = "text/html; charset=utf-8";
    res.body = kDashboardHtml;
    return respond(std::move(res));
  }
  if (m == "GET" && Match(req, {"healthz"}, a)) {
    return c.Health([server, respond](Reply r) {
      server->Defer([respond, r = std::move(r)] {
        HttpResponse res;
        res.status = r.ok() && !r.body.contains("error") ? 200 : 503;
        res.body = r.body.dump() + "\n";
        respond(std::move(res));
      });
    });
  }
  if (m == "GET" && Match(req, {"metrics"}, a)) return c.Metrics(TokenOf(req), reply);

  if (m == "POST" && Match(req, {"v1", "jobs"}, a)) {
    SubmitRequest sr;
    sr.body = std::move(req.body);
    sr.format = req.header("content-type").find("yaml") != std::string::npos ? "yaml" : "json";
    sr.file = Basename(req.header("x-gantry-file"));
    sr.idempotency_key = req.header("idempotency-key");
    sr.array = req.param("array");
    sr.after = req.param("after");
    if (req.has_param("begin")) {  // Unix seconds
      double begin = 0;
      if (auto problem = DoubleParam(req, "begin", 0, begin)) return bad(*problem);
      if (begin < 0) return bad("begin: expected Unix seconds, 0 or more");
      sr.begin_ms = static_cast<int64_t>(begin * 1000.0);
    }
    if (auto problem = BoolParam(req, "hold", sr.hold)) return bad(*problem);
    if (req.has_param("kill_invalid_dep")) {  // sbatch --kill-on-invalid-dep
      bool kill = false;
      if (auto problem = BoolParam(req, "kill_invalid_dep", kill)) return bad(*problem);
      sr.kill_invalid_dep = kill ? 1 : 0;
    }
    return c.Submit(TokenOf(req), std::move(sr), reply);
  }
  if (m == "GET" && Match(req, {"v1", "jobs"}, a)) {
    JobQuery q;
    q.state = req.param("state");
    q.queue = req.param("queue");
    q.user = req.param("user");
    q.all = req.param("all") == "1" || req.param("all") == "true";
    q.array = req.param("array");
    if (auto problem = IntParam(req, "limit", -1, q.limit)) return bad(*problem);
    if (req.has_param("limit") && q.limit < 0) return bad("limit: expected 0 or more");
    double since = -1;
    if (auto problem = DoubleParam(req, "ended_since", -1, since)) return bad(*problem);
    if (req.has_param("ended_since") && since < 0)
      return bad("ended_since: expected Unix seconds, 0 or more");
    if (since >= 0) q.ended_since_ms = static_cast<int64_t>(since * 1000.0);
    return c.ListJobs(TokenOf(req), std::move(q), reply);
  }
  if (m == "GET" && Match(req, {"v1", "jobs", "*"}, a)) return c.ShowJob(TokenOf(req), a[0], reply);
  if (m == "GET" && Match(req, {"v1", "jobs", "*", "usage"}, a))
    return c.JobUsageSeries(TokenOf(req), a[0], reply);
  if (m == "GET" && Match(req, {"v1", "jobs", "*", "allocation"}, a))
    return c.JobAllocation(TokenOf(req), a[0], reply);
  if (m == "POST" && Match(req, {"v1", "jobs", "*", "release"}, a)) {
    int64_t exit_code = 0;
    if (auto problem = IntParam(req, "exit_code", 0, exit_code)) return bad(*problem);
    if (exit_code < 0 || exit_code > 255) return bad("exit_code: expected 0..255");
    return c.ReleaseAllocation(TokenOf(req), a[0], static_cast<int>(exit_code), reply);
  }
  if ((m == "POST" && Match(req, {"v1", "jobs", "*", "cancel"}, a)) ||
      (m == "DELETE" && Match(req, {"v1", "jobs", "*"}, a))) {
    bool force = false;
    if (auto problem = BoolParam(req, "force", force)) return bad(*problem);
    return c.Cancel(TokenOf(req), a[0], force, reply);
  }
  if (m == "POST" && Match(req, {"v1", "jobs", "*", "requeue"}, a))
    return c.Requeue(TokenOf(req), a[0], reply);
  if (m == "POST" && Match(req, {"v1", "jobs", "*", "begin"}, a)) {
    double at = 0;
    if (auto problem = DoubleParam(req, "at", 0, at)) return bad(*problem);
    if (at < 0) return bad("at: expected Unix seconds, 0 or more (0: now)");
    return c.SetBegin(TokenOf(req), a[0], static_cast<int64_t>(at * 1000.0), reply);
  }
  if (m == "POST" && Match(req, {"v1", "jobs", "*", "after"}, a))  // after=SPEC; empty: none
    return c.SetAfter(TokenOf(req), a[0], req.param("after"), reply);
  if (m == "POST" && Match(req, {"v1", "jobs", "*", "spec"}, a)) {  // {"name": ..., "pool": ...}
    json fields = json::parse(req.body, nullptr, false);
    if (!fields.is_object()) return bad("expected a JSON object of the fields to change");
    return c.UpdateSpec(TokenOf(req), a[0], std::move(fields), reply);
  }
  if (m == "POST" && Match(req, {"v1", "jobs", "*", "throttle"}, a)) {  // limit=N; 0: none
    double limit = 0;
    if (auto problem = DoubleParam(req, "limit", 0, limit)) return bad(*problem);
    if (limit < 0 || limit > 1e7 || limit != std::floor(limit))
      return bad("limit: a whole number, 0 (none) or more");
    return c.SetThrottle(TokenOf(req), a[0], static_cast<int>(limit), reply);
  }
  if (m == "POST" && Match(req, {"v1", "jobs", "*", "time-limit"}, a)) {
    // s=SECONDS (0: none), or add=SECONDS (signed) to the limit the job has.
    const bool add = req.has_param("add");
    double s = 0;
    if (auto problem = DoubleParam(req, add ? "add" : "s", 0, s)) return bad(*problem);
    if (add == req.has_param("s")) return bad("give s=SECONDS (0: none) or add=SECONDS");
    if (std::abs(s) > 1e9 || (!add && s < 0))
      return bad(std::string(add ? "add" : "s") + ": at most 1e9 seconds" +
                 (add ? "" : ", 0 (none) or more"));
    return c.SetTimeLimit(TokenOf(req), a[0], static_cast<int64_t>(s * 1000.0), add, reply);
  }
  if (m == "POST" && (Match(req, {"v1", "jobs", "*", "hold"}, a) ||
                      Match(req, {"v1", "jobs", "*", "unhold"}, a))) {
    const std::string by = req.param("by");
    if (!by.empty() && by != "user" && by != "admin") return bad("by: expected user or admin");
    return c.Hold(TokenOf(req), a[0], req.segments.back() == "hold",
                  by.empty() ? std::nullopt : std::optional<bool>(by == "admin"), reply);
  }
  if (m == "POST" && Match(req, {"v1", "jobs", "*", "signal"}, a)) {
    const int signal = spec::SignalNumber(req.param("signal"));
    if (signal <= 0)
      return bad("signal: expected a signal name or number, got \"" + req.param("signal") + "\"");
    const std::string to = req.has_param("to") ? req.param("to") : "steps";
    return c.Signal(TokenOf(req), a[0], signal, to, reply);
  }
  if (m == "POST" && Match(req, {"v1", "jobs", "*", "steps"}, a)) {
    json body = json::parse(req.body, nullptr, false);
    if (body.is_discarded() || !body.is_object())
      return bad("step: the body must be a JSON object");
    return c.CreateStep(TokenOf(req), a[0], std::move(body), reply);
  }
  auto step_number = [&](const std::string& s) -> std::optional<int> {
    if (s.empty() || s.size() > 9 || s.find_first_not_of("0123456789") != std::string::npos)
      return std::nullopt;
    return std::stoi(s);
  };
  if (m == "GET" && Match(req, {"v1", "jobs", "*", "steps", "*"}, a)) {
    auto s = step_number(a[1]);
    if (!s) return bad("step: expected a step number, got " + a[1]);
    double wait_s = 0;
    if (auto problem = DoubleParam(req, "wait_s", 0, wait_s)) return bad(*problem);
    if (wait_s < 0 || wait_s > 60) return bad("wait_s: 0 to 60 seconds");
    return c.ShowStep(TokenOf(req), a[0], *s, req.param("version"),
                      static_cast<int64_t>(wait_s * 1000), reply);
  }
  if (m == "POST" && Match(req, {"v1", "jobs", "*", "steps", "*", "launch"}, a)) {
    auto s = step_number(a[1]);
    if (!s) return bad("step: expected a step number, got " + a[1]);
    json body = json::parse(req.body.empty() ? "{}" : req.body, nullptr, false);
    if (body.is_discarded() || !body.is_object())
      return bad("launch: the body must be a JSON object");
    return c.LaunchStep(TokenOf(req), a[0], *s, std::move(body), reply);
  }
  if (m == "DELETE" && Match(req, {"v1", "jobs", "*", "steps", "*"}, a)) {
    auto s = step_number(a[1]);
    if (!s) return bad("step: expected a step number, got " + a[1]);
    bool kill = false;
    if (auto problem = BoolParam(req, "kill", kill)) return bad(*problem);
    return c.CancelStep(TokenOf(req), a[0], *s, kill, reply);
  }
  if (m == "GET" && Match(req, {"v1", "jobs", "*", "logs"}, a)) {
    int64_t run = 0, rank = 0, offset = 0, step = -1;
    for (auto problem : {IntParam(req, "run", 0, run), IntParam(req, "rank", 0, rank),
                         IntParam(req, "offset", 0, offset), IntParam(req, "step", -1, step)}) {
      if (problem) return bad(*problem);
    }
    bool err = false;
    if (auto problem = StreamParam(req, step, err)) return bad(*problem);
    // The file is read on an I/O thread, never on the controller's.
    return c.LogPath(
        TokenOf(req), a[0], static_cast<int>(run), static_cast<int>(rank), static_cast<int>(step),
        err, [this, server, respond, req](Reply r) {
          server->Defer([this, respond, req, r = std::move(r)] { SendLog(req, r, respond); });
        });
  }
  if (m == "GET" && Match(req, {"v1", "nodes"}, a)) return c.Nodes(TokenOf(req), reply);
  if (m == "GET" && Match(req, {"v1", "cluster", "history"}, a)) {
    double since = 0;
    if (auto problem = DoubleParam(req, "since", 0, since)) return bad(*problem);
    return c.ClusterHistory(TokenOf(req), since, reply);
  }
  if (m == "POST" && (Match(req, {"v1", "nodes", "*", "drain"}, a) ||
                      Match(req, {"v1", "nodes", "*", "resume"}, a))) {
    const bool on = req.segments[3] == "drain";
    std::string reason;
    if (!req.body.empty()) {
      json b = json::parse(req.body, nullptr, false);
      if (!b.is_object() || (b.contains("reason") && !b["reason"].is_string())) {
        return bad("body: expected {\"reason\": \"...\"}");
      }
      reason = b.value("reason", std::string());
    }
    return c.Drain(TokenOf(req), a[0], on, reason, reply);
  }
  if (m == "GET" && Match(req, {"v1", "queues"}, a)) return c.Queues(TokenOf(req), reply);
  if (m == "GET" && Match(req, {"v1", "usage"}, a)) {
    const double now = WallSeconds();
    double from = 0, to = 0;
    for (auto problem :
         {DoubleParam(req, "since", now - 86400, from), DoubleParam(req, "until", now, to)}) {
      if (problem) return bad(*problem);
    }
    return c.Usage(TokenOf(req), from, to, reply);
  }

  if (m == "POST" && Match(req, {"v1", "agents", "*", "heartbeat"}, a)) {
    json body = json::parse(req.body, nullptr, false);
    if (body.is_discarded() || !body.is_object())
      return bad("heartbeat: the body must be a JSON object");
    return c.Heartbeat(TokenOf(req), a[0], std::move(body), req.remote_addr, reply);
  }
  if (m == "GET" && Match(req, {"v1", "agents", "*", "watch"}, a)) {
    int64_t version = 0, timeout_ms = 0;
    for (auto problem :
         {IntParam(req, "version", -1, version), IntParam(req, "timeout_ms", 20000, timeout_ms)}) {
      if (problem) return bad(*problem);
    }
    return c.Watch(TokenOf(req), a[0], req.param("instance"), version, timeout_ms, reply);
  }
  if (m == "POST" && Match(req, {"v1", "agents", "*", "logs"}, a)) {
    int64_t run = 0, rank = 0, offset = 0, step = -1;
    for (auto problem : {IntParam(req, "run", -1, run), IntParam(req, "rank", -1, rank),
                         IntParam(req, "offset", -1, offset), IntParam(req, "step", -1, step)}) {
      if (problem) return bad(*problem);
    }
    bool err = false;
    if (auto problem = StreamParam(req, step, err)) return bad(*problem);
    return c.UploadLog(TokenOf(req), a[0], req.param("job"), static_cast<int>(run),
                       static_cast<int>(rank), static_cast<int>(step), err, offset,
                       std::move(req.body), reply);
  }
  respond(ErrorResponse(Code::kNotFound, "no such endpoint: " + m + " " + req.path()));
}

}  // namespace gantry::server
