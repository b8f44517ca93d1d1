// The CLI's HTTP client to gantryd (client.cc's commands, srun.cc's Slurm commands
// inside jobs): the server list and token from the flags or the environment, the leader
// followed, a team's submit rate waited out.
// Thread-safety: none (a command-line front end).
#pragma once

#include <httplib.h>

#include <chrono>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "base/server_list.h"
#include "base/url.h"
#include "cli/exit_codes.h"

namespace gantry::cli {

using nlohmann::json;

struct Globals {
  std::string server, token, ca_cert;
};

using gantry::UrlEncode;

// One HTTP exchange; status 0 when the server could not be reached.
struct Response {
  int status = 0;
  std::string body;
  httplib::Headers headers;
  std::string error;  // transport error
  json Json() const { return json::parse(body, nullptr, false); }
};

// Talks to gantryd, following the leader: a server that cannot be reached, or a standby
// (503 naming the leader), sends the call to the next URL of --server (comma-separated)
// or to the leader named, for up to 15 s. A retried submit is safe: it carries its
// Idempotency-Key.
class Client {
 public:
  explicit Client(const Globals& g) : servers_(ServerSpec(g)) {
    token_ = g.token;
    if (token_.empty()) {
      const char* t = std::getenv("GANTRY_TOKEN");
      token_ = t ? t : "";
    }
    ca_cert_ = g.ca_cert;
    if (ca_cert_.empty()) {
      const char* c = std::getenv("GANTRY_CA_CERT");
      ca_cert_ = c ? c : "";
    }
    Connect();
  }

  Response Get(const std::string& path) {
    return Call([&] { return http_->Get(path.c_str()); });
  }
  Response Post(const std::string& path, const std::string& body, const std::string& type,
                const httplib::Headers& headers = {}) {
    return Call([&] { return http_->Post(path.c_str(), headers, body, type.c_str()); });
  }
  Response Delete(const std::string& path) {
    return Call([&] { return http_->Delete(path.c_str()); });
  }
  const std::string& server() const { return servers_.current(); }

 private:
  static std::string ServerSpec(const Globals& g) {
    if (!g.server.empty()) return g.server;
    const char* s = std::getenv("GANTRY_SERVER");
    return s ? s : "http://127.0.0.1:8080";
  }
  void Connect() {
    http_ = std::make_unique<httplib::Client>(servers_.current());
    http_->set_connection_timeout(5, 0);
    http_->set_read_timeout(30, 0);
    // Long listings come gzip-compressed (a tenth of the bytes); cpp-httplib inflates them.
    http_->set_default_headers({{"Accept-Encoding", "gzip"}});
    if (!token_.empty()) http_->set_bearer_token_auth(token_.c_str());
    if (!ca_cert_.empty()) http_->set_ca_cert_path(ca_cert_);  // https:// with a site's own CA
  }
  template <typename F>
  Response Call(const F& exchange) {
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(15);
    for (int attempt = 0;; ++attempt) {
      Response out = Wrap(exchange());
      std::string leader;
      if (out.status == 503) {
        json j = out.Json();
        if (j.is_object() && j.value("role", "") == "standby") leader = j.value("leader", "");
        if (j.is_object() && j.value("role", "") != "standby")
          return out;  // shutting down, not a standby
      } else if (out.status == 429) {
        // The team's submit rate: wait as told (once said on stderr) and try again.
        json j = out.Json();
        auto it = out.headers.find("Retry-After");
        const int64_t wait_s =
            it == out.headers.end() ? 1 : std::max<int64_t>(1, std::atoll(it->second.c_str()));
        if (std::chrono::steady_clock::now() + std::chrono::seconds(wait_s) >= give_up) return out;
        if (!said_limited_) {
          std::cerr << "gantry: " << (j.is_object() ? j.value("error", out.body) : out.body)
                    << " (waiting)\n";
          said_limited_ = true;
        }
        std::this_thread::sleep_for(std::chrono::seconds(wait_s));
        continue;
      } else if (out.status != 0) {
        return out;
      }
      if (servers_.size() == 1 && leader.empty() && out.status == 0) return out;
      if (std::chrono::steady_clock::now() >= give_up) return out;
      servers_.Failed(leader);
      Connect();
      // A full round of the list found no leader: the standby may be taking over.
      if (attempt > 0 && attempt % static_cast<int>(servers_.size()) == 0) {
        std::this_thread::sleep_for(std::chrono::milliseconds(250));
      }
    }
  }
  Response Wrap(httplib::Result r) {
    Response out;
    if (!r) {
      out.error =
          "cannot reach gantryd at " + servers_.current() + ": " + httplib::to_string(r.error());
      return out;
    }
    out.status = r->status;
    out.body = r->body;
    out.headers = r->headers;
    return out;
  }
  ServerList servers_;
  std::string token_, ca_cert_;
  bool said_limited_ = false;
  std::unique_ptr<httplib::Client> http_;
};

// Prints the error of a failed exchange and returns the exit status for it; 0 when the
// exchange succeeded.
inline int Check(const Response& r, const char* what) {
  if (r.status == 0) {
    std::cerr << "gantry " << what << ": " << r.error << "\n";
    return kExitRunFailure;
  }
  if (r.status >= 200 && r.status < 300) return 0;
  json j = r.Json();
  std::string message = j.is_object() ? j.value("error", r.body) : r.body;
  std::cerr << "gantry " << what << ": " << message << " (HTTP " << r.status << ")\n";
  if (j.is_object() && j.contains("problems")) {
    for (const auto& p : j["problems"]) std::cerr << "  " << p.get<std::string>() << "\n";
  }
  return r.status >= 500 ? kExitRunFailure : kExitBadInput;
}

}  // namespace gantry::cli
