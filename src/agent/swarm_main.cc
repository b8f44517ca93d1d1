// gantry-swarm: one process that speaks for many emulated nodes, each with its own
// connections to gantryd, as KWOK does for Kubernetes. For tests and benchmarks of the
// control plane at the sizes users run (256-1,024 nodes on a 2-core machine).
//
//   gantry-swarm --server URL --pool NAME:COUNT:8xH100-80GB [--pool ...] [--stats FILE]
//                [--duration-s S] [--in-step]
//
// Each node `NAME-i` (i < COUNT; the cluster config's pool naming) does what gantry-agent
// does, on the wire: heartbeats (GPUs from the same emulation as `gantry-agent
// --emulate`, running workers, exits) at the interval the server gives, spread over it
// as agents spread theirs (agent::FirstBeatAfterJoining; --in-step: all in step), a watch (long
// poll) on a second connection, a heartbeat at once when a worker ends, and the lease:
// a node that has heard nothing from the server for its lease "stops" its workers and
// counts a lease miss. Workers are not processes: a worker runs for the N seconds of a
// `sleep N` in its command (also `sh -c '... sleep N'`), or ends at once with exit code 0
// when there is none; a stop ends it at once, as by SIGTERM. Everything runs on one
// thread (Boost.Asio coroutines), so nodes cost memory, not threads.
//
// Stats (JSON, rewritten every second to --stats and printed at the end): heartbeats
// sent and failed, heartbeat round trips (p50/p99/max ms), lease misses, workers
// started, ended and stopped by the lease. Exit status: 0, or 2 on bad input.
#include <sys/resource.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <csignal>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "agent/agent.h"
#include "agent/emulated.h"
#include "base/atomic_file.h"
#include "proto/node.h"

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;
using nlohmann::json;
using namespace gantry;

namespace {

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// The seconds of the first `sleep N` in a command (argv, or words of a shell string).
double SleepSeconds(const std::vector<std::string>& argv) {
  std::vector<std::string> words;
  for (const std::string& a : argv) {
    std::istringstream in(a);
    std::string w;
    while (in >> w) {
      while (!w.empty() && (w.back() == ';' || w.back() == '\'' || w.back() == '"')) w.pop_back();
      words.push_back(w);
    }
  }
  for (size_t i = 0; i + 1 < words.size(); ++i) {
    if (words[i] != "sleep" && words[i] != "/bin/sleep" && words[i] != "/usr/bin/sleep") continue;
    try {
      size_t used = 0;
      const double s = std::stod(words[i + 1], &used);
      if (used == words[i + 1].size() && s >= 0) return s;
    } catch (const std::exception&) {
    }
  }
  return 0;
}

struct Stats {
  int64_t heartbeats = 0, heartbeat_failures = 0, watches = 0, lease_misses = 0;
  int64_t started = 0, ended = 0, fenced = 0, nodes_registered = 0;
  std::vector<double> rtt_ms;
  double Percentile(double p) const {
    if (rtt_ms.empty()) return 0;
    std::vector<double> v = rtt_ms;
    const size_t k = std::min(
        v.size() - 1, static_cast<size_t>(p / 100.0 * static_cast<double>(v.size() - 1) + 0.5));
    std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(k), v.end());
    return v[k];
  }
  json ToJson() const {
    double max = rtt_ms.empty() ? 0 : *std::max_element(rtt_ms.begin(), rtt_ms.end());
    return {{"heartbeats", heartbeats},
            {"heartbeat_failures", heartbeat_failures},
            {"watch_answers", watches},
            {"lease_misses", lease_misses},
            {"workers_started", started},
            {"workers_ended", ended},
            {"workers_stopped_by_lease", fenced},
            {"nodes_registered", nodes_registered},
            {"heartbeat_rtt_ms", {{"p50", Percentile(50)}, {"p99", Percentile(99)}, {"max", max}}}};
  }
};

struct Worker {
  std::string job;
  int64_t seq = 0;
  int run = 0, rank = 0;
  int step = -1;       // a job step's task: rank is its id in the step
  int64_t end_at = 0;  // steady ms
  bool exited = false;
  int exit_code = 0, signal = 0;
  bool lost = false;
  std::string note;
};

// One keep-alive HTTP/1.1 connection to the server.
class Conn {
 public:
  Conn(net::io_context& ioc, tcp::endpoint ep, std::string host, std::string token)
      : stream_(ioc), ep_(ep), host_(std::move(host)), token_(std::move(token)) {}

  // The response, or nothing (connection closed, to be reopened by the next call).
  net::awaitable<std::optional<http::response<http::string_body>>> Call(http::verb verb,
                                                                        const std::string& target,
                                                                        std::string body,
                                                                        int64_t timeout_ms) {
    beast::error_code ec;
    if (!open_) {
      stream_.expires_after(std::chrono::milliseconds(timeout_ms));
      co_await stream_.async_connect(ep_, net::redirect_error(net::use_awaitable, ec));
      if (ec) {
        Close();
        co_return std::nullopt;
      }
      stream_.socket().set_option(tcp::no_delay(true), ec);
      open_ = true;
    }
    http::request<http::string_body> req{verb, target, 11};
    req.set(http::field::host, host_);
    if (!token_.empty()) req.set(http::field::authorization, "Bearer " + token_);
    if (!body.empty()) req.set(http::field::content_type, "application/json");
    req.body() = std::move(body);
    req.prepare_payload();
    stream_.expires_after(std::chrono::milliseconds(timeout_ms));
    co_await http::async_write(stream_, req, net::redirect_error(net::use_awaitable, ec));
    http::response<http::string_body> res;
    if (!ec)
      co_await http::async_read(stream_, buffer_, res, net::redirect_error(net::use_awaitable, ec));
    if (ec) {
      Close();
      co_return std::nullopt;
    }
    if (!res.keep_alive()) Close();
    co_return res;
  }

 private:
  void Close() {
    beast::error_code ignored;
    stream_.socket().close(ignored);
    buffer_.clear();
    open_ = false;
  }
  beast::tcp_stream stream_;
  beast::flat_buffer buffer_;
  tcp::endpoint ep_;
  std::string host_, token_;
  bool open_ = false;
};

class Node {
 public:
  Node(net::io_context& ioc, tcp::endpoint ep, const std::string& host, const std::string& token,
       std::string name, agent::EmulateSpec spec, bool in_step, Stats& stats)
      : name_(std::move(name)),
        in_step_(in_step),
        gpus_(name_, spec),
        beat_(ioc, ep, host, token),
        watch_(ioc, ep, host, token),
        wake_(ioc),
        stats_(stats),
        id_(agent::FakeUuid("", name_ + "-swarm").substr(0, 16)) {}

  net::awaitable<void> HeartbeatLoop(const bool& stop) {
    int64_t next = NowMs();
    while (!stop) {
      const int64_t now = NowMs();
      Progress(now);
      if (now >= next || exits_pending_) {
        exits_pending_ = false;
        const bool joining = !ok_ && !in_step_;
        co_await Heartbeat(now);
        next = NowMs() + (joining && ok_ ? agent::FirstBeatAfterJoining(name_, heartbeat_ms_)
                                         : heartbeat_ms_);
      }
      int64_t until = next;
      for (const auto& [key, w] : workers_) {
        if (!w.exited) until = std::min(until, w.end_at);
      }
      if (lease_ms_ > 0 && last_ok_ > 0 && !fenced_)
        until = std::min(until, last_ok_ + lease_ms_ + 1);
      wake_.expires_at(std::chrono::steady_clock::time_point(
          std::chrono::milliseconds(std::max(until, NowMs()))));
      beast::error_code ec;
      co_await wake_.async_wait(net::redirect_error(net::use_awaitable, ec));
    }
  }

  net::awaitable<void> WatchLoop(const bool& stop) {
    while (!stop) {
      if (last_ok_ == 0) {  // registered first
        net::steady_timer t(co_await net::this_coro::executor, std::chrono::milliseconds(100));
        co_await t.async_wait(net::use_awaitable);
        continue;
      }
      const std::string target = proto::WatchTarget(name_, instance_, version_, 20000);
      auto res = co_await watch_.Call(http::verb::get, target, "", 30000);
      Result<proto::WatchAnswer> answer = res && res->result_int() == 200
                                              ? proto::ParseWatchAnswer(res->body())
                                              : Result<proto::WatchAnswer>(Error{"", "no answer"});
      if (!answer) {
        net::steady_timer t(co_await net::this_coro::executor, std::chrono::milliseconds(500));
        co_await t.async_wait(net::use_awaitable);
        continue;
      }
      ++stats_.watches;
      Apply(*answer, NowMs());
      wake_.cancel();  // a heartbeat may be due (exits of stopped workers)
    }
  }

 private:
  void End(Worker& w, int exit_code, int signal, bool lost, std::string note) {
    if (w.exited) return;
    w.exited = true;
    w.exit_code = exit_code;
    w.signal = signal;
    w.lost = lost;
    w.note = std::move(note);
    exits_pending_ = true;
    ++stats_.ended;
  }

  void Progress(int64_t now) {
    for (auto& [key, w] : workers_) {
      if (!w.exited && now >= w.end_at) End(w, 0, 0, false, "");
    }
    // The lease: heard nothing for that long, so the server will soon requeue our work.
    if (lease_ms_ > 0 && last_ok_ > 0 && now - last_ok_ > lease_ms_ && !fenced_) {
      fenced_ = true;
      ++stats_.lease_misses;
      std::cerr << "gantry-swarm[" << name_ << "]: no answer from the server for " << now - last_ok_
                << " ms (lease " << lease_ms_ << " ms): stopping its workers\n";
      for (auto& [key, w] : workers_) {
        if (!w.exited) {
          ++stats_.fenced;
          End(w, 0, SIGTERM, true, "stopped by the agent when the server could not be reached");
        }
      }
    }
  }

  net::awaitable<void> Heartbeat(int64_t now) {
    proto::Heartbeat beat;
    beat.agent_id = id_;
    if (auto found = gpus_.Discover()) {
      for (const agent::GpuInfo& g : *found) beat.gpus.push_back(agent::WireGpu(g, 0));
    }
    std::vector<std::string> reported;
    for (const auto& [key, w] : workers_) {
      if (!w.exited) {
        beat.running.push_back({w.job, w.run, w.rank, 0, std::nullopt, w.step});
      } else {
        beat.exits.push_back(
            {w.job, w.run, w.rank, w.exit_code, w.signal, w.lost, w.note, "", w.step});
        reported.push_back(key);
      }
    }
    const json body = proto::Encode(beat);
    const int64_t timeout = std::clamp<int64_t>(lease_ms_ / 3, 300, 5000);
    const int64_t t0 = NowMs();
    auto res =
        co_await beat_.Call(http::verb::post, proto::HeartbeatTarget(name_), body.dump(), timeout);
    ++stats_.heartbeats;
    Result<proto::HeartbeatReply> reply = res && res->result_int() == 200
                                              ? proto::ParseHeartbeatReply(res->body())
                                              : Result<proto::HeartbeatReply>(Error{"", "refused"});
    ok_ = static_cast<bool>(reply);
    if (!reply) {
      ++stats_.heartbeat_failures;
      if (res && !failed_said_) {
        std::cerr << "gantry-swarm[" << name_ << "]: server said " << res->result_int() << ": "
                  << res->body();
        failed_said_ = true;
      }
      co_return;
    }
    stats_.rtt_ms.push_back(static_cast<double>(NowMs() - t0));
    if (last_ok_ == 0) ++stats_.nodes_registered;
    last_ok_ = NowMs();
    fenced_ = false;
    heartbeat_ms_ = std::clamp<int64_t>(
        reply->heartbeat_ms > 0 ? reply->heartbeat_ms : heartbeat_ms_, 10, 60000);
    lease_ms_ = reply->lease_ms;
    for (const std::string& key : reported) {
      workers_.erase(key);
      done_.insert(key);
    }
    Apply(reply->answer, now);
  }

  // The same rules as gantry-agent's Reconcile.
  void Apply(const proto::WatchAnswer& answer, int64_t now) {
    if (answer.instance == instance_ && answer.version < version_) return;  // stale
    instance_ = answer.instance;
    version_ = answer.version;
    std::map<std::string, bool> wanted;
    for (const auto& e : answer.workers) {
      const std::string key = proto::WorkerKey(e->job, e->run, e->rank, e->step);
      wanted[key] = true;
      auto it = workers_.find(key);
      const bool run = e->action == proto::DesiredWorker::Action::kRun;
      if (run && it == workers_.end() && !done_.count(key)) {
        Worker w;
        w.job = e->job;
        w.seq = e->seq;
        w.run = e->run;
        w.rank = e->rank;
        w.step = e->step;
        w.end_at = now + static_cast<int64_t>(SleepSeconds(e->command) * 1000);
        workers_[key] = w;
        ++stats_.started;
      } else if (!run && it != workers_.end()) {
        End(it->second, 0, SIGTERM, false, "");
      } else if (!run && it == workers_.end() && !done_.count(key)) {
        Worker w;
        w.job = e->job;
        w.run = e->run;
        w.rank = e->rank;
        w.step = e->step;
        w.exited = true;
        w.note = "stopped before it started";
        workers_[key] = w;
        exits_pending_ = true;
      }
    }
    for (auto& [key, w] : workers_) {
      if (!w.exited && !wanted.count(key)) End(w, 0, SIGKILL, false, "");
    }
  }

  std::string name_;
  const bool in_step_;  // --in-step
  agent::EmulatedGpus gpus_;
  Conn beat_, watch_;
  net::steady_timer wake_;
  Stats& stats_;
  std::string id_;
  std::map<std::string, Worker> workers_;
  std::set<std::string> done_;
  std::string instance_;
  int64_t version_ = -1;
  int64_t heartbeat_ms_ = 1000, lease_ms_ = 0, last_ok_ = 0;
  bool ok_ = false;  // the last heartbeat was answered
  bool exits_pending_ = false, fenced_ = false, failed_said_ = false;
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"gantry-swarm: many emulated nodes in one process (tests and benchmarks)"};
  std::string server, token_file, stats_path;
  std::vector<std::string> pools;
  double duration_s = 0;
  bool in_step = false;
  std::string token = std::getenv("GANTRY_TOKEN") ? std::getenv("GANTRY_TOKEN") : "";
  if (const char* s = std::getenv("GANTRY_SERVER")) server = s;
  app.add_option("--server", server, "gantryd URL, http://HOST:PORT (default: $GANTRY_SERVER)");
  app.add_option("--token-file", token_file, "Agent token file (default: $GANTRY_TOKEN)");
  app.add_option("--pool", pools,
                 "NAME:COUNT:GPUS, e.g. h100:256:8xH100-80GB (nodes NAME-0 .. NAME-COUNT-1)")
      ->required();
  app.add_option("--stats", stats_path, "Rewrite these stats (JSON) every second");
  app.add_option("--duration-s", duration_s,
                 "Stop after this long (default: at SIGTERM or SIGINT)");
  app.add_flag("--in-step", in_step,
               "Nodes keep beating in step with their first heartbeat (the worst case for "
               "gantryd; agents, and the swarm by default, spread their beats over the interval)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  if (!token_file.empty()) {
    std::ifstream in(token_file);
    if (!(in >> token)) {
      std::cerr << "gantry-swarm: --token-file: cannot read " << token_file << "\n";
      return 2;
    }
  }
  std::string hostport =
      server.substr(server.find("://") == std::string::npos ? 0 : server.find("://") + 3);
  while (!hostport.empty() && hostport.back() == '/') hostport.pop_back();
  const size_t colon = hostport.rfind(':');
  if (colon == std::string::npos) {
    std::cerr << "gantry-swarm: --server: expected http://HOST:PORT, got " << server << "\n";
    return 2;
  }
  net::io_context ioc(1);
  beast::error_code ec;
  const std::string host = hostport.substr(0, colon);
  auto address = net::ip::make_address(host == "localhost" ? "127.0.0.1" : host, ec);
  if (ec) {
    std::cerr << "gantry-swarm: --server: " << host << " is not an IP address\n";
    return 2;
  }
  tcp::endpoint ep(address, static_cast<unsigned short>(std::stoi(hostport.substr(colon + 1))));
  // Two connections a node: raise the descriptor limit to what the system allows.
  rlimit lim{};
  if (getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur < lim.rlim_max) {
    lim.rlim_cur = lim.rlim_max;
    setrlimit(RLIMIT_NOFILE, &lim);
  }

  Stats stats;
  std::vector<std::unique_ptr<Node>> nodes;
  for (const std::string& p : pools) {
    const size_t a = p.find(':'), b = p.find(':', a == std::string::npos ? 0 : a + 1);
    int count = 0;
    try {
      count = a == std::string::npos || b == std::string::npos
                  ? 0
                  : std::stoi(p.substr(a + 1, b - a - 1));
    } catch (const std::exception&) {
    }
    auto spec = b == std::string::npos ? Result<agent::EmulateSpec>(Error{"pool", "missing GPUS"})
                                       : agent::ParseEmulate(p.substr(b + 1));
    if (count <= 0 || !spec) {
      std::cerr
          << "gantry-swarm: --pool: expected NAME:COUNT:GPUS (e.g. h100:256:8xH100-80GB), got " << p
          << "\n";
      return 2;
    }
    for (int i = 0; i < count; ++i) {
      nodes.push_back(std::make_unique<Node>(ioc, ep, hostport, token,
                                             p.substr(0, a) + "-" + std::to_string(i), *spec,
                                             in_step, stats));
    }
  }
  bool stop = false;
  for (auto& n : nodes) {
    net::co_spawn(ioc, n->HeartbeatLoop(stop), net::detached);
    net::co_spawn(ioc, n->WatchLoop(stop), net::detached);
  }
  auto write_stats = [&] {
    if (stats_path.empty()) return;
    WriteFileAtomically(stats_path, stats.ToJson().dump() + "\n");
  };
  net::steady_timer ticker(ioc);
  const int64_t start = NowMs();
  std::function<void()> tick = [&] {
    write_stats();
    if (duration_s > 0 && static_cast<double>(NowMs() - start) >= duration_s * 1000)
      return ioc.stop();
    ticker.expires_after(std::chrono::seconds(1));
    ticker.async_wait([&](beast::error_code e) {
      if (!e) tick();
    });
  };
  tick();
  net::signal_set signals(ioc, SIGINT, SIGTERM);
  signals.async_wait([&](beast::error_code, int) { ioc.stop(); });
  std::signal(SIGPIPE, SIG_IGN);
  std::cerr << "gantry-swarm: " << nodes.size() << " nodes joining " << server << "\n";
  ioc.run();
  stop = true;
  write_stats();
  std::cout << stats.ToJson().dump(2) << "\n";
  std::cout.flush();
  // Suspended coroutines reference the nodes and the sockets the io_context owns; no
  // order of destruction suits both, and there is nothing left to release.
  std::_Exit(0);
}
