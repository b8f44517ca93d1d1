#include "kube/client.h"

#include <sys/socket.h>
#include <sys/time.h>

#include <yaml-cpp/yaml.h>
#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "base/base64.h"

namespace gantry::kube {
namespace net = boost::asio;
namespace http = boost::beast::http;
using tcp = net::ip::tcp;

namespace {

constexpr const char* kServiceAccountDir = "/var/run/secrets/kubernetes.io/serviceaccount";

Result<std::string> ReadWhole(const std::string& path, const std::string& what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Error{what, "cannot read " + path};
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// base64 (the kubeconfig's *-data fields).
Result<std::string> Base64(const std::string& text, const std::string& what) {
  std::optional<std::string> bytes = Base64Decode(text);
  if (!bytes) return Error{what, "not valid base64"};
  return *std::move(bytes);
}

Status SplitUrl(const std::string& url, Credentials& c, const std::string& field) {
  const std::string https = "https://";
  if (url.rfind(https, 0) != 0) {
    return Error{field, "\"" + url + "\": only https:// API servers are supported"};
  }
  std::string rest = url.substr(https.size());
  const size_t slash = rest.find('/');
  if (slash != std::string::npos) {
    c.base_path = rest.substr(slash);
    if (!c.base_path.empty() && c.base_path.back() == '/') c.base_path.pop_back();
    rest = rest.substr(0, slash);
  }
  if (!rest.empty() && rest.front() == '[') {  // [IPv6]:port
    const size_t close = rest.find(']');
    if (close == std::string::npos) return Error{field, "\"" + url + "\": bad IPv6 address"};
    c.host = rest.substr(1, close - 1);
    c.port = close + 1 < rest.size() && rest[close + 1] == ':' ? rest.substr(close + 2) : "443";
  } else {
    const size_t colon = rest.rfind(':');
    c.host = colon == std::string::npos ? rest : rest.substr(0, colon);
    c.port = colon == std::string::npos ? "443" : rest.substr(colon + 1);
  }
  if (c.host.empty()) return Error{field, "\"" + url + "\": no host"};
  return Ok{};
}

// A kubeconfig's named entry (clusters, users, contexts) by name.
YAML::Node Named(const YAML::Node& list, const std::string& name) {
  if (!list.IsSequence()) return YAML::Node();
  for (const YAML::Node& item : list) {
    if (item["name"] && item["name"].as<std::string>() == name) return item;
  }
  return YAML::Node();
}

// A file path or inline base64 data for `key`, relative paths from the kubeconfig's
// directory, as kubectl resolves them.
Result<std::string> FileOrData(const YAML::Node& node, const std::string& key,
                               const std::string& dir, const std::string& where) {
  if (node[key + "-data"])
    return Base64(node[key + "-data"].as<std::string>(), where + "." + key + "-data");
  if (node[key]) {
    std::string path = node[key].as<std::string>();
    if (!path.empty() && path[0] != '/') path = dir + "/" + path;
    return ReadWhole(path, where + "." + key);
  }
  return std::string();
}

Result<Credentials> InCluster() {
  Credentials c;
  const char* host = std::getenv("KUBERNETES_SERVICE_HOST");
  const char* port = std::getenv("KUBERNETES_SERVICE_PORT");
  if (host == nullptr || port == nullptr) {
    return Error{"in-cluster", "KUBERNETES_SERVICE_HOST/PORT are not set: not running in a pod"};
  }
  c.host = host;
  c.port = port;
  c.source = "in-cluster service account";
  auto ca = ReadWhole(std::string(kServiceAccountDir) + "/ca.crt", "in-cluster");
  if (!ca) return ca.error();
  c.ca_pem = *ca;
  c.token_file = std::string(kServiceAccountDir) + "/token";
  auto ns = ReadWhole(std::string(kServiceAccountDir) + "/namespace", "in-cluster");
  c.namespace_ = ns ? *ns : "default";
  return c;
}

}  // namespace

Result<Credentials> LoadCredentials(const std::string& path) {
  if (path == "in-cluster") return InCluster();
  YAML::Node doc;
  try {
    doc = YAML::LoadFile(path);
  } catch (const YAML::Exception& e) {
    return Error{path, e.what()};
  }
  const std::string dir =
      path.find('/') == std::string::npos ? "." : path.substr(0, path.rfind('/'));
  try {
    Credentials c;
    c.source = path;
    if (!doc["current-context"]) return Error{path + ": current-context", "missing"};
    const std::string ctx_name = doc["current-context"].as<std::string>();
    const YAML::Node ctx = Named(doc["contexts"], ctx_name);
    if (!ctx) return Error{path + ": contexts", "no context named \"" + ctx_name + "\""};
    const YAML::Node context = ctx["context"];
    const std::string cluster_name = context["cluster"] ? context["cluster"].as<std::string>() : "";
    const std::string user_name = context["user"] ? context["user"].as<std::string>() : "";
    c.namespace_ = context["namespace"] ? context["namespace"].as<std::string>() : "default";
    const YAML::Node cl = Named(doc["clusters"], cluster_name);
    if (!cl || !cl["cluster"])
      return Error{path + ": clusters", "no cluster named \"" + cluster_name + "\""};
    const YAML::Node cluster = cl["cluster"];
    if (!cluster["server"])
      return Error{path + ": clusters[" + cluster_name + "].server", "missing"};
    if (Status s = SplitUrl(cluster["server"].as<std::string>(), c,
                            path + ": clusters[" + cluster_name + "].server");
        !s) {
      return s.error();
    }
    c.insecure =
        cluster["insecure-skip-tls-verify"] && cluster["insecure-skip-tls-verify"].as<bool>();
    auto ca = FileOrData(cluster, "certificate-authority", dir,
                         path + ": clusters[" + cluster_name + "]");
    if (!ca) return ca.error();
    c.ca_pem = *ca;
    const YAML::Node us = Named(doc["users"], user_name);
    if (us && us["user"]) {
      const YAML::Node user = us["user"];
      const std::string where = path + ": users[" + user_name + "]";
      if (user["exec"] || user["auth-provider"]) {
        return Error{where,
                     "exec and auth-provider plugins are not supported; use a client "
                     "certificate or a token"};
      }
      auto cert = FileOrData(user, "client-certificate", dir, where);
      if (!cert) return cert.error();
      auto key = FileOrData(user, "client-key", dir, where);
      if (!key) return key.error();
      c.cert_pem = *cert;
      c.key_pem = *key;
      if (user["token"]) c.token = user["token"].as<std::string>();
      if (user["tokenFile"]) c.token_file = user["tokenFile"].as<std::string>();
    }
    return c;
  } catch (const YAML::Exception& e) {
    return Error{path, e.what()};
  }
}

struct Client::Conn {
  net::io_context io;
  net::ssl::context ssl{net::ssl::context::tls_client};
  std::unique_ptr<net::ssl::stream<tcp::socket>> stream;
  boost::beast::flat_buffer buffer;
  std::string token;
};

Client::Client(Credentials creds, int timeout_s)
    : creds_(std::move(creds)), timeout_s_(timeout_s) {}
Client::~Client() = default;

void Client::Interrupt() {
  const int fd = fd_.load();
  if (fd >= 0) ::shutdown(fd, SHUT_RDWR);
}

Result<Client::Conn*> Client::Connect() {
  if (conn_ && conn_->stream) return conn_.get();
  auto c = std::make_unique<Conn>();
  boost::system::error_code ec;
  c->ssl.set_options(net::ssl::context::default_workarounds | net::ssl::context::no_sslv2 |
                     net::ssl::context::no_sslv3 | net::ssl::context::no_tlsv1 |
                     net::ssl::context::no_tlsv1_1);
  if (!creds_.ca_pem.empty()) {
    c->ssl.add_certificate_authority(net::buffer(creds_.ca_pem), ec);
    if (ec) return Error{creds_.source, "certificate authority: " + ec.message()};
  } else {
    c->ssl.set_default_verify_paths(ec);
  }
  if (!creds_.cert_pem.empty()) {
    c->ssl.use_certificate_chain(net::buffer(creds_.cert_pem), ec);
    if (ec) return Error{creds_.source, "client certificate: " + ec.message()};
    c->ssl.use_private_key(net::buffer(creds_.key_pem), net::ssl::context::pem, ec);
    if (ec) return Error{creds_.source, "client key: " + ec.message()};
  }
  c->token = creds_.token;
  if (!creds_.token_file.empty()) {
    auto t = ReadWhole(creds_.token_file, "token");
    if (!t) return t.error();
    c->token = *t;
    while (!c->token.empty() && (c->token.back() == '\n' || c->token.back() == '\r'))
      c->token.pop_back();
  }
  c->stream = std::make_unique<net::ssl::stream<tcp::socket>>(c->io, c->ssl);
  auto& s = *c->stream;
  s.set_verify_mode(creds_.insecure ? net::ssl::verify_none : net::ssl::verify_peer);
  if (!creds_.insecure) s.set_verify_callback(net::ssl::host_name_verification(creds_.host));
  SSL_set_tlsext_host_name(s.native_handle(), creds_.host.c_str());
  tcp::resolver resolver(c->io);
  auto endpoints = resolver.resolve(creds_.host, creds_.port, ec);
  const std::string where = "https://" + creds_.host + ":" + creds_.port;
  if (ec) return Error{where, "resolve: " + ec.message()};
  net::connect(s.next_layer(), endpoints, ec);
  if (ec) return Error{where, "connect: " + ec.message()};
  const int fd = s.next_layer().native_handle();
  timeval tv{};
  tv.tv_sec = timeout_s_;
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  s.next_layer().set_option(tcp::no_delay(true), ec);
  fd_.store(fd);
  s.handshake(net::ssl::stream_base::client, ec);
  if (ec) {
    fd_.store(-1);
    return Error{where, "TLS handshake: " + ec.message()};
  }
  conn_ = std::move(c);
  return conn_.get();
}

namespace {

http::request<http::string_body> MakeRequest(std::string_view method, const std::string& target,
                                             const std::string& host, const std::string& token,
                                             std::string_view body, std::string_view content_type) {
  http::request<http::string_body> req;
  req.method_string(boost::beast::string_view(method.data(), method.size()));
  req.target(target);
  req.version(11);
  req.set(http::field::host, host);
  req.set(http::field::user_agent, "gantry");
  req.set(http::field::accept, "application/json");
  if (!token.empty()) req.set(http::field::authorization, "Bearer " + token);
  if (!body.empty()) {
    req.set(http::field::content_type,
            boost::beast::string_view(content_type.data(), content_type.size()));
    req.body() = std::string(body);
  }
  req.keep_alive(true);
  req.prepare_payload();
  return req;
}

}  // namespace

Result<Response> Client::Request(std::string_view method, std::string_view target,
                                 std::string_view body, std::string_view content_type) {
  for (int attempt = 0; attempt < 2; ++attempt) {
    const bool reused = conn_ != nullptr;
    auto conn = Connect();
    if (!conn) return conn.error();
    Conn& c = **conn;
    auto req = MakeRequest(method, creds_.base_path + std::string(target), creds_.host, c.token,
                           body, content_type);
    boost::system::error_code ec;
    http::write(*c.stream, req, ec);
    http::response_parser<http::string_body> parser;
    parser.body_limit(boost::none);
    if (!ec) http::read(*c.stream, c.buffer, parser, ec);
    if (ec) {
      conn_.reset();
      fd_.store(-1);
      // A kept connection the server closed meanwhile: once more on a fresh one.
      if (reused && attempt == 0 &&
          (ec == http::error::end_of_stream || ec == net::error::eof ||
           ec == net::error::connection_reset || ec == net::error::broken_pipe ||
           ec == net::ssl::error::stream_truncated)) {
        continue;
      }
      return Error{std::string(method) + " " + std::string(target), ec.message()};
    }
    Response r;
    r.status = static_cast<int>(parser.get().result_int());
    r.body = std::move(parser.get().body());
    if (!parser.get().keep_alive()) {
      conn_.reset();
      fd_.store(-1);
    }
    return r;
  }
  return Error{std::string(method) + " " + std::string(target), "connection lost"};
}

Status Client::Watch(std::string_view target, const std::function<bool(std::string_view)>& on_line,
                     int* status) {
  // A watch holds its connection to the end: it gets a fresh one and closes it after.
  conn_.reset();
  auto conn = Connect();
  if (!conn) return conn.error();
  Conn& c = **conn;
  auto req =
      MakeRequest("GET", creds_.base_path + std::string(target), creds_.host, c.token, {}, {});
  req.keep_alive(false);
  boost::system::error_code ec;
  http::write(*c.stream, req, ec);
  http::response_parser<http::buffer_body> parser;
  parser.body_limit(boost::none);
  if (!ec) http::read_header(*c.stream, c.buffer, parser, ec);
  auto done = [&](Status s) {
    conn_.reset();
    fd_.store(-1);
    return s;
  };
  const std::string what = "watch " + std::string(target);
  if (ec) return done(Error{what, ec.message()});
  const int code = static_cast<int>(parser.get().result_int());
  if (status != nullptr) *status = code;
  std::string pending;
  std::string text;
  char chunk[64 * 1024];
  while (!parser.is_done()) {
    parser.get().body().data = chunk;
    parser.get().body().size = sizeof chunk;
    // read_some: a watch's events arrive one by one, and must not wait for a full buffer.
    http::read_some(*c.stream, c.buffer, parser, ec);
    if (ec == http::error::need_buffer) ec = {};
    if (ec) {
      if (ec == http::error::end_of_stream || ec == net::error::eof) break;
      return done(Error{what, ec.message()});
    }
    const size_t n = sizeof chunk - parser.get().body().size;
    if (code != 200) {
      text.append(chunk, n);
      continue;
    }
    pending.append(chunk, n);
    size_t start = 0;
    for (size_t nl; (nl = pending.find('\n', start)) != std::string::npos; start = nl + 1) {
      if (nl > start && !on_line(std::string_view(pending).substr(start, nl - start))) {
        return done(Ok{});
      }
    }
    pending.erase(0, start);
  }
  if (code != 200) return done(Error{what, "HTTP " + std::to_string(code) + ": " + text});
  if (!pending.empty()) on_line(pending);
  return done(Ok{});
}

}  // namespace gantry::kube
