// HttpServer: an event-driven HTTP/1.1 server (Boost.Beast on Boost.Asio, from Debian's
// libboost-dev). A connection costs a socket and a small coroutine frame, never a
// thread: a few I/O threads (`threads`, 2 by default) serve every connection, idle
// keep-alive ones and long polls included. Handlers are asynchronous: they get the
// request and a Respond callback that may be called later, from any thread, exactly
// once; until then the connection waits without holding a thread. This is what lets one
// gantryd hold a thousand agents, each with a heartbeat connection and a watch.
//
// Why Beast: cpp-httplib (the previous server) serves each connection on one thread of
// a fixed pool, so eight keep-alive agents took every thread and the controller's
// answers queued behind them (issue 13). Beast is the well-kept event-driven server in
// Debian 12; TLS comes from the same stack (OpenSSL through asio::ssl).
//
// Requests: the target is split into its path (percent-decoded segment by segment, so
// `a%2Fb` is one segment `a/b`) and its query parameters. Bodies above `max_body_bytes`
// are refused with 413 before they are read; a malformed request gets 400 and the
// connection is closed. Thread-safety: Bind before Serve; Serve runs the I/O threads
// until Stop (from any thread). Responds may come from any thread until the server is
// destroyed; whoever holds Responds (the controller) must answer or drop them before.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/result.h"

namespace gantry::server {

struct HttpRequest {
  std::string method;                          // "GET", "POST", ...
  std::string target;                          // as sent
  std::vector<std::string> segments;           // the path, split on '/' and decoded
  std::map<std::string, std::string> params;   // query parameters, decoded
  std::map<std::string, std::string> headers;  // names in lower case
  std::string body;
  std::string remote_addr;

  bool has_param(const std::string& k) const { return params.count(k) > 0; }
  std::string param(const std::string& k) const {
    auto it = params.find(k);
    return it == params.end() ? std::string() : it->second;
  }
  std::string header(const std::string& lower_name) const {
    auto it = headers.find(lower_name);
    return it == headers.end() ? std::string() : it->second;
  }
  // The path as written, decoded: "/v1/jobs/j1".
  std::string path() const;
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;
};

struct TlsFiles {
  std::string cert;  // PEM certificate chain
  std::string key;   // PEM private key
  bool enabled() const { return !cert.empty(); }
};

// Whether an Accept-Encoding value accepts gzip: `gzip` (or `x-gzip`) with q > 0, or,
// where neither is named, `*` with q > 0. Answers of 1 KB or more go gzip-compressed to
// such clients (browsers always ask; the console's node map is 1.4 MB at 1,000 nodes).
bool AcceptsGzip(std::string_view accept_encoding);
// `data` in the gzip format (zlib, level 1); nullopt when zlib fails.
std::optional<std::string> Gzip(std::string_view data);

struct HttpServerOptions {
  size_t max_body_bytes = 1 << 20;
  int threads = 2;                   // I/O threads
  int64_t idle_timeout_ms = 300000;  // a keep-alive connection with no request this long is closed
  int64_t io_timeout_ms = 30000;     // reading one request's body, writing one response
  TlsFiles tls;                      // serve HTTPS when set
};

class HttpServer {
 public:
  using Respond = std::function<void(HttpResponse)>;
  // Runs on an I/O thread: must not block. Calls respond now or later, once.
  using Handler = std::function<void(HttpRequest&, Respond)>;

  HttpServer(HttpServerOptions options, Handler handler);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds host:port (port 0: any free port); returns the port.
  Result<int> Bind(const std::string& host, int port);
  // Runs the I/O threads until Stop(); the calling thread is one of them.
  void Serve();
  void Stop();
  // Runs fn on an I/O thread (work a handler should not do on the caller's thread).
  void Defer(std::function<void()> fn);
  // Connections open now (gauge for /metrics and tests).
  int64_t connections() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace gantry::server
