#include "server/http_server.h"

#include <pthread.h>
#include <zlib.h>
#include <algorithm>
#include <array>
#include <atomic>
#include <boost/asio.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <cctype>
#include <chrono>
#include <thread>

namespace gantry::server {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;

namespace {

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Percent-decodes; '+' means a space in query strings only.
std::string Decode(std::string_view s, bool plus_is_space) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size() && HexValue(s[i + 1]) >= 0 && HexValue(s[i + 2]) >= 0) {
      out += static_cast<char>(HexValue(s[i + 1]) * 16 + HexValue(s[i + 2]));
      i += 2;
    } else if (plus_is_space && s[i] == '+') {
      out += ' ';
    } else {
      out += s[i];
    }
  }
  return out;
}

void SplitTarget(const std::string& target, HttpRequest& req) {
  const size_t q = target.find('?');
  const std::string_view path = std::string_view(target).substr(0, q);
  size_t start = 0;
  while (start < path.size()) {
    size_t end = path.find('/', start);
    if (end == std::string_view::npos) end = path.size();
    if (end > start) req.segments.push_back(Decode(path.substr(start, end - start), false));
    start = end + 1;
  }
  if (q == std::string::npos) return;
  std::string_view query = std::string_view(target).substr(q + 1);
  while (!query.empty()) {
    size_t amp = query.find('&');
    std::string_view kv = query.substr(0, amp);
    const size_t eq = kv.find('=');
    std::string key = Decode(kv.substr(0, eq), true);
    std::string value =
        eq == std::string_view::npos ? std::string() : Decode(kv.substr(eq + 1), true);
    if (!key.empty()) req.params.emplace(std::move(key), std::move(value));
    if (amp == std::string_view::npos) break;
    query.remove_prefix(amp + 1);
  }
}

std::string ErrorBody(const std::string& message) {
  std::string escaped;
  for (char c : message) {
    if (c == '"' || c == '\\') escaped += '\\';
    escaped += c;
  }
  return "{\"error\":\"" + escaped + "\"}\n";
}

// Answers this big or bigger go compressed to clients that accept gzip.
constexpr size_t kGzipMinBytes = 1024;

}  // namespace

bool AcceptsGzip(std::string_view accept) {
  // Codings separated by commas, each with optional parameters (";q=0.5"); q=0 refuses.
  std::optional<bool> gzip, any;
  while (!accept.empty()) {
    const size_t comma = accept.find(',');
    std::string_view item = accept.substr(0, comma);
    accept = comma == std::string_view::npos ? std::string_view() : accept.substr(comma + 1);
    const size_t semi = item.find(';');
    std::string_view coding = item.substr(0, semi),
                     params = semi == std::string_view::npos ? "" : item.substr(semi + 1);
    auto trim = [](std::string_view v) {
      while (!v.empty() && (v.front() == ' ' || v.front() == '\t')) v.remove_prefix(1);
      while (!v.empty() && (v.back() == ' ' || v.back() == '\t')) v.remove_suffix(1);
      return v;
    };
    coding = trim(coding);
    bool accepted = true;
    for (params = trim(params); !params.empty();) {
      const size_t next = params.find(';');
      std::string_view p = trim(params.substr(0, next));
      params = next == std::string_view::npos ? std::string_view() : params.substr(next + 1);
      if (p.size() >= 2 && (p[0] == 'q' || p[0] == 'Q') && p[1] == '=') {
        accepted =
            p.substr(2).find_first_not_of("0.") != std::string_view::npos;  // q=0, 0.0, 0.000: no
      }
    }
    auto is = [&](std::string_view name) {
      return coding.size() == name.size() &&
             std::equal(coding.begin(), coding.end(), name.begin(), [](char a, char b) {
               return std::tolower(static_cast<unsigned char>(a)) == b;
             });
    };
    if (is("gzip") || is("x-gzip")) gzip = accepted;
    if (coding == "*") any = accepted;
  }
  return gzip.value_or(any.value_or(false));
}

std::optional<std::string> Gzip(std::string_view data) {
  // zlib's own gzip wrapper (windowBits 15 + 16), at level 1: JSON shrinks to about a
  // tenth at some 100 MB/s, which costs an I/O thread a few ms for a megabyte.
  z_stream z{};
  if (deflateInit2(&z, 1, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK) return std::nullopt;
  std::string out(deflateBound(&z, static_cast<uLong>(data.size())), '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data()));
  z.avail_in = static_cast<uInt>(data.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  const int rc = deflate(&z, Z_FINISH);
  out.resize(z.total_out);
  deflateEnd(&z);
  if (rc != Z_STREAM_END) return std::nullopt;
  return out;
}

std::string HttpRequest::path() const {
  std::string p;
  for (const std::string& s : segments) p += "/" + s;
  return p.empty() ? "/" : p;
}

struct HttpServer::Impl {
  HttpServerOptions options;
  Handler handler;
  net::io_context ioc;
  tcp::acceptor acceptor{ioc};
  std::unique_ptr<net::ssl::context> ssl;
  std::atomic<int64_t> connections{0};
  std::atomic<bool> stopped{false};

  Impl(HttpServerOptions o, Handler h) : options(std::move(o)), handler(std::move(h)) {}

  // Hands the request to the handler and resumes the session with its response, on
  // the session's executor, whenever (and from whichever thread) it arrives.
  template <typename Token>
  auto AsyncHandle(HttpRequest& req, Token&& token) {
    return net::async_initiate<Token, void(HttpResponse)>(
        [this, &req](auto completion) {
          auto ex = net::get_associated_executor(completion);
          // std::function needs a copyable callable; the completion is move-only.
          auto shared = std::make_shared<decltype(completion)>(std::move(completion));
          handler(req, [shared, ex](HttpResponse res) {
            net::post(ex, [shared, res = std::move(res)]() mutable { (*shared)(std::move(res)); });
          });
        },
        token);
  }

  template <typename Stream>
  net::awaitable<void> Session(Stream& stream, std::string remote) {
    beast::flat_buffer buffer;
    auto& lowest = beast::get_lowest_layer(stream);
    while (true) {
      http::request_parser<http::string_body> parser;
      parser.body_limit(options.max_body_bytes);
      parser.header_limit(64 * 1024);
      beast::error_code ec;
      lowest.expires_after(std::chrono::milliseconds(options.idle_timeout_ms));
      co_await http::async_read_header(stream, buffer, parser,
                                       net::redirect_error(net::use_awaitable, ec));
      if (!ec) {
        lowest.expires_after(std::chrono::milliseconds(options.io_timeout_ms));
        co_await http::async_read(stream, buffer, parser,
                                  net::redirect_error(net::use_awaitable, ec));
      }
      HttpResponse res;
      bool gzip_ok = false;
      bool keep_alive = false;
      unsigned version = 11;
      if (ec == http::error::body_limit) {
        res.status = 413;
        res.body = ErrorBody("request body too large: the limit is " +
                             std::to_string(options.max_body_bytes) + " bytes");
      } else if (ec == http::error::end_of_stream || ec == net::error::eof ||
                 ec == net::error::connection_reset || ec == beast::error::timeout ||
                 ec == net::error::operation_aborted ||
                 (ec && buffer.size() == 0 && !parser.got_some())) {
        co_return;  // the peer closed, or went quiet
      } else if (ec) {
        res.status = 400;
        res.body = ErrorBody("malformed HTTP request");
      } else {
        http::request<http::string_body> msg = parser.release();
        keep_alive = msg.keep_alive();
        version = msg.version();
        HttpRequest req;
        req.method = std::string(msg.method_string());
        req.target = std::string(msg.target());
        SplitTarget(req.target, req);
        for (const auto& field : msg) {
          std::string name(field.name_string());
          for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
          req.headers[name] = std::string(field.value());
        }
        req.body = std::move(msg.body());
        req.remote_addr = remote;
        gzip_ok = AcceptsGzip(req.header("accept-encoding"));
        res = co_await AsyncHandle(req, net::use_awaitable);
      }
      http::response<http::string_body> out{static_cast<http::status>(res.status), version};
      out.set(http::field::server, "gantryd");
      out.set(http::field::content_type, res.content_type);
      for (const auto& [k, v] : res.headers) out.set(k, v);
      out.keep_alive(keep_alive && !stopped.load());
      if (res.body.size() >= kGzipMinBytes &&
          out.find(http::field::content_encoding) == out.end()) {
        out.set(http::field::vary, "Accept-Encoding");
        if (gzip_ok) {
          if (std::optional<std::string> packed = Gzip(res.body)) {
            res.body = std::move(*packed);
            out.set(http::field::content_encoding, "gzip");
          }
        }
      }
      out.body() = std::move(res.body);
      out.prepare_payload();
      lowest.expires_after(std::chrono::milliseconds(options.io_timeout_ms));
      co_await http::async_write(stream, out, net::redirect_error(net::use_awaitable, ec));
      if (ec || !out.keep_alive()) break;
    }
    if constexpr (!std::is_same_v<Stream, beast::tcp_stream>) {
      beast::error_code ignored;
      lowest.expires_after(std::chrono::milliseconds(1000));
      co_await stream.async_shutdown(net::redirect_error(net::use_awaitable, ignored));
    } else {
      // A lingering close: a client still sending a refused body (413) would get a
      // reset, and lose our answer, if the socket closed with its data unread. Read and
      // drop what comes for a little while, as nginx does.
      beast::error_code ignored;
      stream.socket().shutdown(tcp::socket::shutdown_send, ignored);
      lowest.expires_after(std::chrono::milliseconds(2000));
      std::array<char, 16384> sink;
      for (size_t drained = 0; drained < (64u << 20);) {
        beast::error_code ec;
        const size_t n = co_await stream.async_read_some(
            net::buffer(sink), net::redirect_error(net::use_awaitable, ec));
        if (ec) break;
        drained += n;
      }
    }
  }

  net::awaitable<void> Connection(tcp::socket socket) {
    ++connections;
    beast::error_code ec;
    auto endpoint = socket.remote_endpoint(ec);
    const std::string remote = ec ? std::string() : endpoint.address().to_string();
    socket.set_option(tcp::no_delay(true), ec);
    try {
      if (ssl) {
        beast::ssl_stream<beast::tcp_stream> stream(std::move(socket), *ssl);
        beast::get_lowest_layer(stream).expires_after(
            std::chrono::milliseconds(options.io_timeout_ms));
        co_await stream.async_handshake(net::ssl::stream_base::server,
                                        net::redirect_error(net::use_awaitable, ec));
        if (!ec) co_await Session(stream, remote);
      } else {
        beast::tcp_stream stream(std::move(socket));
        co_await Session(stream, remote);
      }
    } catch (const std::exception&) {
      // A connection's failure ends that connection only.
    }
    --connections;
  }

  net::awaitable<void> Accept() {
    while (!stopped.load()) {
      beast::error_code ec;
      tcp::socket socket = co_await acceptor.async_accept(
          net::make_strand(ioc), net::redirect_error(net::use_awaitable, ec));
      if (ec) {
        if (ec == net::error::operation_aborted || !acceptor.is_open()) co_return;
        // Out of descriptors and the like: wait a little rather than spin.
        net::steady_timer t(ioc, std::chrono::milliseconds(50));
        co_await t.async_wait(net::redirect_error(net::use_awaitable, ec));
        continue;
      }
      auto ex = socket.get_executor();
      net::co_spawn(ex, Connection(std::move(socket)), net::detached);
    }
  }
};

HttpServer::HttpServer(HttpServerOptions options, Handler handler)
    : impl_(std::make_unique<Impl>(std::move(options), std::move(handler))) {}

HttpServer::~HttpServer() { Stop(); }

Result<int> HttpServer::Bind(const std::string& host, int port) {
  Impl& s = *impl_;
  beast::error_code ec;
  if (s.options.tls.enabled()) {
    s.ssl = std::make_unique<net::ssl::context>(net::ssl::context::tls_server);
    s.ssl->set_options(net::ssl::context::default_workarounds | net::ssl::context::no_sslv2 |
                       net::ssl::context::no_sslv3 | net::ssl::context::no_tlsv1 |
                       net::ssl::context::no_tlsv1_1);
    s.ssl->use_certificate_chain_file(s.options.tls.cert, ec);
    if (ec)
      return Error{"tls", "--tls-cert: cannot use " + s.options.tls.cert + ": " + ec.message()};
    s.ssl->use_private_key_file(s.options.tls.key, net::ssl::context::pem, ec);
    if (ec) return Error{"tls", "--tls-key: cannot use " + s.options.tls.key + ": " + ec.message()};
  }
  auto address = net::ip::make_address(host == "localhost" ? "127.0.0.1" : host, ec);
  if (ec) return Error{"listen", "cannot listen on " + host + ": not an IP address"};
  tcp::endpoint endpoint(address, static_cast<unsigned short>(port));
  s.acceptor.open(endpoint.protocol(), ec);
  if (!ec) s.acceptor.set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) s.acceptor.bind(endpoint, ec);
  if (!ec) s.acceptor.listen(net::socket_base::max_listen_connections, ec);
  if (ec)
    return Error{"listen",
                 "cannot listen on " + host + ":" + std::to_string(port) + ": " + ec.message()};
  return static_cast<int>(s.acceptor.local_endpoint().port());
}

void HttpServer::Serve() {
  Impl& s = *impl_;
  if (s.stopped.load()) return;
  net::co_spawn(s.ioc, s.Accept(), net::detached);
  std::vector<std::thread> more;
  for (int i = 1; i < std::max(1, s.options.threads); ++i) {
    more.emplace_back([&s] {
      pthread_setname_np(pthread_self(), "gantryd-http");
      s.ioc.run();
    });
  }
  s.ioc.run();
  for (std::thread& t : more) t.join();
}

void HttpServer::Stop() {
  Impl& s = *impl_;
  if (s.stopped.exchange(true)) return;
  net::post(s.ioc, [&s] {
    beast::error_code ec;
    s.acceptor.close(ec);
  });
  s.ioc.stop();
}

void HttpServer::Defer(std::function<void()> fn) { net::post(impl_->ioc, std::move(fn)); }

int64_t HttpServer::connections() const { return impl_->connections.load(); }

}  // namespace gantry::server
