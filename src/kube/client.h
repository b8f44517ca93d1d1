// A Kubernetes API client: the credentials of a kubeconfig (or of a pod's service
// account), plain requests, and watch streams, over HTTPS.
//
// Boost.Beast on Boost.Asio with OpenSSL, as gantryd's own server: there is no
// Kubernetes client library for C++ in Debian, and the API is plain HTTP/JSON, so this
// file does what client-go's rest client does and no more: TLS with the cluster's CA,
// client certificates or bearer tokens (no exec or auth-provider plugins), keep-alive, a
// request timeout, and a watch read line by line. Lists, watches, relists after 410 Gone
// and backoff are the caller's (kube/informer.h).
// Thread-safety: one Client per thread; Interrupt() may be called from any thread.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "base/result.h"

namespace gantry::kube {

struct Credentials {
  std::string host;  // of the API server's URL
  std::string port;
  std::string base_path;  // the URL's path, if any ("" for most)
  std::string ca_pem;     // empty: the system's CAs
  bool insecure = false;  // insecure-skip-tls-verify
  std::string cert_pem;   // client certificate (with key_pem), or
  std::string key_pem;
  std::string token;       // a bearer token
  std::string token_file;  // re-read on each connection (service-account tokens rotate)
  std::string namespace_;  // the context's namespace
  std::string source;      // where they came from, for messages
};

// Reads a kubeconfig: its current context's cluster and user. `path` "in-cluster" reads
// the pod's service account instead (KUBERNETES_SERVICE_HOST/PORT and
// /var/run/secrets/kubernetes.io/serviceaccount). Errors name the file and the field.
Result<Credentials> LoadCredentials(const std::string& path);

struct Response {
  int status = 0;
  std::string body;
};

class Client {
 public:
  explicit Client(Credentials creds, int timeout_s = 30);
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // One request; a connection is kept for the next. Any HTTP status is a Response; an
  // error is a transport failure (refused, TLS, timeout). Reconnects once if a kept
  // connection turns out closed before anything was sent.
  Result<Response> Request(std::string_view method, std::string_view target,
                           std::string_view body = {},
                           std::string_view content_type = "application/json");
  // A watch (target with ?watch=1...): calls on_line with each line (one event) until
  // the server ends the stream (Ok), on_line returns false (Ok), or an error. A status
  // other than 200 is an error whose message carries the status and body.
  Status Watch(std::string_view target, const std::function<bool(std::string_view)>& on_line,
               int* status = nullptr);
  // Ends a blocked Request or Watch from another thread (it returns an error).
  void Interrupt();
  const Credentials& credentials() const { return creds_; }

 private:
  struct Conn;
  Result<Conn*> Connect();
  Credentials creds_;
  int timeout_s_;
  std::unique_ptr<Conn> conn_;
  std::atomic<int> fd_{-1};
};

}  // namespace gantry::kube
