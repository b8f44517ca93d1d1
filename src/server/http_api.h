// HttpApi: gantryd's HTTP/JSON interface (docs/api.yaml) on the event-driven HttpServer.
//
// Handlers check the request's shape (sizes, query parameters, JSON syntax of agent
// reports), hand it to the backend (the Controller, or the Kubernetes scheduler:
// server/api_backend.h) asynchronously and map its reply codes to HTTP statuses in one
// table (StatusOf). No handler waits: the connection is answered when the backend's
// reply arrives, so idle keep-alive connections and agents' watches
// (long polls) hold no thread. Every error is a JSON body {"error": "...", "problems":
// [...]}. /healthz, /metrics and the dashboard page at / need no token (Prometheus
// scrapes the metrics; the page asks for a token and calls /v1); everything under /v1
// does. Requests above `max_body_bytes` are refused with 413 before they are read.
// Thread-safety: handlers run on the server's I/O threads; the backend is thread-safe. Stop() may
// be called from any thread. The backend must be stopped before the HttpApi is destroyed (it may
// hold replies for this server's connections).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "base/result.h"
#include "server/api_backend.h"
#include "server/http_server.h"

namespace gantry::server {

int StatusOf(Code code);

struct HttpOptions {
  size_t max_body_bytes = 1 << 20;  // agents' log chunks stay well below
  size_t max_log_reply_bytes = 4 << 20;
  int threads = 2;  // I/O threads
  TlsFiles tls;
};

class HttpApi {
 public:
  HttpApi(ApiBackend& backend, HttpOptions options);
  ~HttpApi();

  // Binds to host:port (port 0: any free port) and returns the port.
  Result<int> Bind(const std::string& host, int port);
  // Serves until Stop().
  void Serve();
  void Stop();
  int64_t connections() const;

 private:
  void Handle(HttpRequest& req, HttpServer::Respond respond);
  void SendLog(const HttpRequest& req, const Reply& r, HttpServer::Respond respond);

  ApiBackend& backend_;
  HttpOptions options_;
  std::unique_ptr<HttpServer> server_;
};

}  // namespace gantry::server
