// HttpApi: gantryd's HTTP/JSON interface (docs/api.yaml) over cpp-httplib.
//
// Handlers check the request's shape (sizes, query parameters, JSON syntax of agent
// reports), hand it to the Controller and map its reply codes to HTTP statuses in one
// table (StatusOf). Every error is a JSON body {"error": "...", "problems": [...]}.
// /healthz, /metrics and the dashboard page at / need no token (Prometheus scrapes the
// metrics; the page asks for a token and calls /v1); everything under /v1 does. Requests above `max_body_bytes` are refused with 413 before they are read.
// Thread-safety: handlers run on cpp-httplib's worker threads; the Controller is
// thread-safe. Stop() may be called from any thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "base/result.h"
#include "server/controller.h"

namespace httplib {
class Server;
}

namespace gantry::server {

int StatusOf(Code code);

struct HttpOptions {
  size_t max_body_bytes = 1 << 20;  // agents' log chunks stay well below
  size_t max_log_reply_bytes = 4 << 20;
};

class HttpApi {
 public:
  HttpApi(Controller& controller, HttpOptions options);
  ~HttpApi();

  // Binds to host:port (port 0: any free port) and returns the port.
  Result<int> Bind(const std::string& host, int port);
  // Serves until Stop().
  void Serve();
  void Stop();

 private:
  void Routes();

  Controller& controller_;
  HttpOptions options_;
  std::unique_ptr<httplib::Server> server_;
};

}  // namespace gantry::server
