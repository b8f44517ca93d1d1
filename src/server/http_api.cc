#include "server/http_api.h"

#include <httplib.h>

#include <fstream>

#include "server/dashboard.h"

namespace gantry::server {

using nlohmann::json;

int StatusOf(Code code) {
  switch (code) {
    case Code::kOk: return 200;
    case Code::kCreated: return 201;
    case Code::kBadRequest: return 400;
    case Code::kUnauthenticated: return 401;
    case Code::kForbidden: return 403;
    case Code::kNotFound: return 404;
    case Code::kConflict: return 409;
    case Code::kTooLarge: return 413;
    case Code::kUnprocessable: return 422;
    case Code::kUnavailable: return 503;
  }
  return 500;
}

namespace {

std::string TokenOf(const httplib::Request& req) {
  return BearerToken(req.get_header_value("Authorization"));
}

void Send(httplib::Response& res, const Reply& r) {
  res.status = StatusOf(r.code);
  if (r.code == Code::kUnauthenticated) res.set_header("WWW-Authenticate", "Bearer");
  if (!r.text.empty() || !r.content_type.empty()) {
    res.set_content(r.text, r.content_type.empty() ? "text/plain" : r.content_type.c_str());
  } else {
    res.set_content(r.body.dump() + "\n", "application/json");
  }
}

void SendError(httplib::Response& res, Code code, const std::string& message) {
  Send(res, Reply::Error(code, message));
}

// A numeric query parameter (std::stoll or std::stod as `parse`); `fallback` when absent.
// False (and a 400 naming the parameter sent) when malformed.
template <typename T, typename Parse>
bool NumberParam(const httplib::Request& req, httplib::Response& res, const char* name, T fallback,
                 T& out, Parse parse, const char* expected) {
  if (!req.has_param(name)) {
    out = fallback;
    return true;
  }
  const std::string v = req.get_param_value(name);
  try {
    size_t used = 0;
    out = parse(v, &used);
    if (used == v.size()) return true;
  } catch (const std::exception&) {
  }
  SendError(res, Code::kBadRequest,
            std::string(name) + ": expected " + expected + ", got \"" + v + "\"");
  return false;
}

bool IntParam(const httplib::Request& req, httplib::Response& res, const char* name,
              int64_t fallback, int64_t& out) {
  return NumberParam<int64_t>(
      req, res, name, fallback, out,
      [](const std::string& v, size_t* used) { return std::stoll(v, used); }, "an integer");
}

bool DoubleParam(const httplib::Request& req, httplib::Response& res, const char* name,
                 double fallback, double& out) {
  return NumberParam<double>(
      req, res, name, fallback, out,
      [](const std::string& v, size_t* used) { return std::stod(v, used); }, "a number");
}

std::string Basename(const std::string& s) {
  std::string b = s.substr(s.find_last_of('/') == std::string::npos ? 0 : s.find_last_of('/') + 1);
  std::string out;
  for (char c : b) {
    if (static_cast<unsigned char>(c) >= 0x20 && c != 0x7f) out += c;
  }
  return out.substr(0, 200);
}

}  // namespace

HttpApi::HttpApi(Controller& controller, HttpOptions options)
    : controller_(controller), options_(options), server_(std::make_unique<httplib::Server>()) {
  server_->set_payload_max_length(options_.max_body_bytes);
  server_->set_read_timeout(10, 0);
  server_->set_write_timeout(10, 0);
  server_->set_keep_alive_timeout(30);
  server_->set_error_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    std::string message;
    switch (res.status) {
      case 404: message = "no such endpoint: " + req.method + " " + req.path; break;
      case 413:
        message = "request body too large: the limit is " + std::to_string(options_.max_body_bytes) +
                  " bytes";
        break;
      case 400: message = "malformed HTTP request"; break;
      default: message = "HTTP " + std::to_string(res.status);
    }
    res.set_content(json{{"error", message}}.dump() + "\n", "application/json");
  });
  server_->set_exception_handler(
      [](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
        std::string what = "internal error";
        try {
          if (ep) std::rethrow_exception(ep);
        } catch (const std::exception& e) {
          what += std::string(": ") + e.what();
        } catch (...) {
        }
        res.status = 500;
        res.set_content(json{{"error", what}}.dump() + "\n", "application/json");
      });
  Routes();
}

HttpApi::~HttpApi() { Stop(); }

Result<int> HttpApi::Bind(const std::string& host, int port) {
  const int bound = port == 0 ? server_->bind_to_any_port(host) : (server_->bind_to_port(host, port) ? port : -1);
  if (bound <= 0) return Error{"listen", "cannot listen on " + host + ":" + std::to_string(port)};
  return bound;
}

void HttpApi::Serve() { server_->listen_after_bind(); }
void HttpApi::Stop() {
  if (server_) server_->stop();
}

void HttpApi::Routes() {
  httplib::Server& s = *server_;
  Controller& c = controller_;

  s.Get("/", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(kDashboardHtml, "text/html; charset=utf-8");
  });
  s.Get("/healthz", [&c](const httplib::Request&, httplib::Response& res) {
    json h = c.Health();
    res.status = h.contains("error") ? 503 : 200;
    res.set_content(h.dump() + "\n", "application/json");
  });
  s.Get("/metrics", [&c](const httplib::Request&, httplib::Response& res) {
    res.set_content(c.Metrics(), "text/plain; version=0.0.4; charset=utf-8");
  });

  s.Post("/v1/jobs", [&c](const httplib::Request& req, httplib::Response& res) {
    SubmitRequest sr;
    sr.body = req.body;
    const std::string type = req.get_header_value("Content-Type");
    sr.format = type.find("yaml") != std::string::npos ? "yaml" : "json";
    sr.file = Basename(req.get_header_value("X-Gantry-File"));
    sr.idempotency_key = req.get_header_value("Idempotency-Key");
    Send(res, c.Submit(TokenOf(req), std::move(sr)));
  });
  s.Get("/v1/jobs", [&c](const httplib::Request& req, httplib::Response& res) {
    const bool all = req.get_param_value("all") == "1" || req.get_param_value("all") == "true";
    Send(res, c.ListJobs(TokenOf(req), req.get_param_value("state"), all));
  });
  s.Get(R"(/v1/jobs/([^/]+))", [&c](const httplib::Request& req, httplib::Response& res) {
    Send(res, c.ShowJob(TokenOf(req), req.matches[1]));
  });
  s.Post(R"(/v1/jobs/([^/]+)/cancel)", [&c](const httplib::Request& req, httplib::Response& res) {
    Send(res, c.Cancel(TokenOf(req), req.matches[1]));
  });
  s.Delete(R"(/v1/jobs/([^/]+))", [&c](const httplib::Request& req, httplib::Response& res) {
    Send(res, c.Cancel(TokenOf(req), req.matches[1]));
  });
  s.Get(R"(/v1/jobs/([^/]+)/logs)", [this, &c](const httplib::Request& req, httplib::Response& res) {
    int64_t run = 0, rank = 0, offset = 0;
    if (!IntParam(req, res, "run", 0, run) || !IntParam(req, res, "rank", 0, rank) ||
        !IntParam(req, res, "offset", 0, offset)) {
      return;
    }
    Reply r = c.LogPath(TokenOf(req), req.matches[1], static_cast<int>(run), static_cast<int>(rank));
    if (!r.ok()) return Send(res, r);
    std::ifstream in(r.body["path"].get<std::string>(), std::ios::binary);
    std::string text;
    int64_t size = 0;
    if (in) {
      in.seekg(0, std::ios::end);
      size = static_cast<int64_t>(in.tellg());
      // Without an offset: the tail, at most max_log_reply_bytes.
      int64_t from = req.has_param("offset") ? std::min(offset, size)
                                             : std::max<int64_t>(0, size - static_cast<int64_t>(options_.max_log_reply_bytes));
      const int64_t len = std::min<int64_t>(size - from, static_cast<int64_t>(options_.max_log_reply_bytes));
      text.resize(static_cast<size_t>(len));
      in.seekg(from);
      in.read(text.data(), len);
    }
    res.set_header("X-Gantry-Log-Size", std::to_string(size));
    res.set_header("X-Gantry-Run", std::to_string(r.body["run"].get<int>()));
    res.set_content(text, "text/plain; charset=utf-8");
  });

  s.Get("/v1/nodes", [&c](const httplib::Request& req, httplib::Response& res) {
    Send(res, c.Nodes(TokenOf(req)));
  });
  auto drain = [&c](bool on) {
    return [&c, on](const httplib::Request& req, httplib::Response& res) {
      std::string reason;
      if (!req.body.empty()) {
        json b = json::parse(req.body, nullptr, false);
        if (!b.is_object() || (b.contains("reason") && !b["reason"].is_string())) {
          return SendError(res, Code::kBadRequest, "body: expected {\"reason\": \"...\"}");
        }
        reason = b.value("reason", std::string());
      }
      Send(res, c.Drain(TokenOf(req), req.matches[1], on, reason));
    };
  };
  s.Post(R"(/v1/nodes/([^/]+)/drain)", drain(true));
  s.Post(R"(/v1/nodes/([^/]+)/resume)", drain(false));
  s.Get("/v1/queues", [&c](const httplib::Request& req, httplib::Response& res) {
    Send(res, c.Queues(TokenOf(req)));
  });
  s.Get("/v1/usage", [&c](const httplib::Request& req, httplib::Response& res) {
    const double now = static_cast<double>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                               std::chrono::system_clock::now().time_since_epoch())
                                               .count()) /
                       1000.0;
    double from = 0, to = 0;
    if (!DoubleParam(req, res, "since", now - 86400, from) || !DoubleParam(req, res, "until", now, to)) return;
    Send(res, c.Usage(TokenOf(req), from, to));
  });

  s.Post(R"(/v1/agents/([^/]+)/heartbeat)", [&c](const httplib::Request& req, httplib::Response& res) {
    json body = json::parse(req.body, nullptr, false);
    if (body.is_discarded() || !body.is_object()) {
      return SendError(res, Code::kBadRequest, "heartbeat: the body must be a JSON object");
    }
    Send(res, c.Heartbeat(TokenOf(req), req.matches[1], body, req.remote_addr));
  });
  s.Post(R"(/v1/agents/([^/]+)/logs)", [&c](const httplib::Request& req, httplib::Response& res) {
    int64_t run = 0, rank = 0, offset = 0;
    if (!IntParam(req, res, "run", -1, run) || !IntParam(req, res, "rank", -1, rank) ||
        !IntParam(req, res, "offset", -1, offset)) {
      return;
    }
    Send(res, c.UploadLog(TokenOf(req), req.matches[1], req.get_param_value("job"), static_cast<int>(run),
                          static_cast<int>(rank), offset, req.body));
  });
}

}  // namespace gantry::server
