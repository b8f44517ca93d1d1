#include "harness.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sched.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <algorithm>

#include <gtest/gtest.h>
#include <httplib.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

namespace gantry::it {

namespace fs = std::filesystem;

namespace {

std::string Slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// Waits for `pid` up to `seconds`; true when it ended.
bool WaitPid(pid_t pid, double seconds, int* status = nullptr) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (true) {
    int st = 0;
    const pid_t r = ::waitpid(pid, &st, WNOHANG);
    if (r == pid || r < 0) {
      if (status) *status = st;
      return true;
    }
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

pid_t SpawnRaw(const std::vector<std::string>& argv, const std::string& out, const std::string& err,
               const std::map<std::string, std::string>& env) {
  std::vector<std::string> args = argv;
  std::vector<char*> cargv;
  for (auto& a : args) cargv.push_back(a.data());
  cargv.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::setpgid(0, 0);
    const int o = ::open(out.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    const int e = err == out ? o : ::open(err.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    const int in = ::open("/dev/null", O_RDONLY);
    ::dup2(in, 0);
    ::dup2(o, 1);
    ::dup2(e, 2);
    // Nothing else of the test's: a file another thread has open at the fork (the chaos
    // test's disk filler) would stay allocated, deleted, as long as the child runs (a
    // `gantry submit` retrying for 4 s held the full disk's filler past gantryd's restart,
    // which then found the disk still full: Chaos.OnSqliteAFullDisk... timed out).
    ::close_range(3, ~0U, 0);
    for (const auto& [k, v] : env) ::setenv(k.c_str(), v.c_str(), 1);
    ::execvp(cargv[0], cargv.data());
    std::perror("exec");
    ::_exit(127);
  }
  return pid;
}

}  // namespace

RunResult Run(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env,
              double timeout_s) {
  char tmpl[] = "/tmp/gantry-run-XXXXXX";
  const std::string dir = ::mkdtemp(tmpl);
  const pid_t pid = SpawnRaw(argv, dir + "/out", dir + "/err", env);
  RunResult r;
  int status = 0;
  if (!WaitPid(pid, timeout_s, &status)) {
    ::kill(pid, SIGKILL);
    WaitPid(pid, 5, &status);
    r.rc = -1;
  } else {
    r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }
  r.out = Slurp(dir + "/out");
  r.err = Slurp(dir + "/err");
  fs::remove_all(dir);
  return r;
}

std::map<std::string, std::string> ReadEnvFile(const std::string& path) {
  std::map<std::string, std::string> env;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    const size_t eq = line.find('=');
    if (eq != std::string::npos) env[line.substr(0, eq)] = line.substr(eq + 1);
  }
  return env;
}

// ------------------------------------------------------------------ Netns

bool Netns::Available(std::string* why) {
  if (::geteuid() != 0) {
    *why = "network namespaces need root";
    return false;
  }
  if (Run({"ip", "-V"}).rc != 0) {
    *why = "iproute2 (the ip command) is not installed";
    return false;
  }
  const std::string probe = "gantry-probe-" + std::to_string(::getpid());
  RunResult r = Run({"ip", "netns", "add", probe});
  if (r.rc != 0) {
    *why = "cannot create a network namespace: " + r.err;
    return false;
  }
  Run({"ip", "netns", "del", probe});
  return true;
}

Netns::Netns(int hosts) {
  tag_ = std::to_string(::getpid() % 100000);
  subnet_ = 100 + ::getpid() % 100;
  switch_ = "gsw" + tag_;
  auto sh = [](const std::vector<std::string>& argv) {
    RunResult r = Run(argv);
    if (r.rc != 0) ADD_FAILURE() << "netns setup: " << argv.back() << ": " << r.err;
  };
  sh({"ip", "netns", "add", switch_});
  sh({"ip", "netns", "exec", switch_, "ip", "link", "add", "br0", "type", "bridge"});
  sh({"ip", "netns", "exec", switch_, "ip", "link", "set", "br0", "up"});
  for (int i = 0; i < hosts; ++i) {
    const std::string ns = "gh" + tag_ + "-" + std::to_string(i);
    names_.push_back(ns);
    const std::string peer = "p" + std::to_string(i);
    sh({"ip", "netns", "add", ns});
    sh({"ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up"});
    // veth: eth0 in the host, pI in the switch.
    sh({"ip", "link", "add", "gv" + tag_ + "x" + std::to_string(i), "type", "veth", "peer", "name",
        "gp" + tag_ + "x" + std::to_string(i)});
    sh({"ip", "link", "set", "gv" + tag_ + "x" + std::to_string(i), "netns", ns});
    sh({"ip", "link", "set", "gp" + tag_ + "x" + std::to_string(i), "netns", switch_});
    sh({"ip", "netns", "exec", ns, "ip", "link", "set", "gv" + tag_ + "x" + std::to_string(i),
        "name", "eth0"});
    sh({"ip", "netns", "exec", switch_, "ip", "link", "set", "gp" + tag_ + "x" + std::to_string(i),
        "name", peer});
    sh({"ip", "netns", "exec", switch_, "ip", "link", "set", peer, "master", "br0"});
    sh({"ip", "netns", "exec", switch_, "ip", "link", "set", peer, "up"});
    sh({"ip", "netns", "exec", ns, "ip", "addr", "add", Address(i) + "/24", "dev", "eth0"});
    sh({"ip", "netns", "exec", ns, "ip", "link", "set", "eth0", "up"});
  }
}

Netns::~Netns() {
  for (const std::string& ns : names_) Run({"ip", "netns", "del", ns});
  Run({"ip", "netns", "del", switch_});
}

std::string Netns::Address(int host) const {
  return "10." + std::to_string(subnet_) + ".0." + std::to_string(host + 1);
}

void Netns::Within(int host, const std::function<void()>& fn) const {
  std::thread t([&] {
    const int fd = ::open(("/var/run/netns/" + Name(host)).c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0 || ::setns(fd, CLONE_NEWNET) != 0) {
      ADD_FAILURE() << "cannot enter network namespace " << Name(host);
    } else {
      fn();
    }
    if (fd >= 0) ::close(fd);
  });
  t.join();
}

void Netns::SetLink(int host, bool up) {
  RunResult r =
      Run({"ip", "netns", "exec", Name(host), "ip", "link", "set", "eth0", up ? "up" : "down"});
  EXPECT_EQ(r.rc, 0) << r.err;
}

// ------------------------------------------------------------------ Proxy

Proxy::Proxy(int target_port) : target_(target_port) {
  listen_fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
  int one = 1;
  ::setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  ::bind(listen_fd_, reinterpret_cast<sockaddr*>(&a), sizeof a);
  ::listen(listen_fd_, 64);
  socklen_t len = sizeof a;
  ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&a), &len);
  port_ = ntohs(a.sin_port);
  thread_ = std::thread([this] { Accept(); });
}

Proxy::~Proxy() {
  stop_ = true;
  ::shutdown(listen_fd_, SHUT_RDWR);
  ::close(listen_fd_);
  thread_.join();
  Cut(true);
  std::vector<std::thread> pumps;
  {
    std::lock_guard lk(mu_);
    pumps.swap(pumps_);
  }
  for (auto& t : pumps) t.join();
}

void Proxy::Cut(bool cut) {
  cut_ = cut;
  if (!cut) return;
  std::lock_guard lk(mu_);
  for (int fd : fds_) ::shutdown(fd, SHUT_RDWR);
}

void Proxy::Accept() {
  while (!stop_) {
    const int client = ::accept(listen_fd_, nullptr, nullptr);
    if (client < 0) continue;
    if (cut_) {
      ::close(client);
      continue;
    }
    const int server = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(static_cast<uint16_t>(target_));
    if (::connect(server, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
      ::close(client);
      ::close(server);
      continue;
    }
    std::lock_guard lk(mu_);
    fds_.push_back(client);
    fds_.push_back(server);
    auto pump = [](int from, int to) {
      char buf[16384];
      while (true) {
        const ssize_t n = ::read(from, buf, sizeof buf);
        if (n <= 0) break;
        // MSG_NOSIGNAL: a peer that closed first must end this pump, not the test with a
        // SIGPIPE (seen once under a loaded machine).
        if (::send(to, buf, static_cast<size_t>(n), MSG_NOSIGNAL) != n) break;
      }
      ::shutdown(to, SHUT_RDWR);
      ::shutdown(from, SHUT_RDWR);
    };
    pumps_.emplace_back(pump, client, server);
    pumps_.emplace_back(pump, server, client);
  }
}

// ------------------------------------------------------------------ Harness

Harness::Harness(const std::string& name, Netns* netns) : netns_(netns) {
  const std::string base =
      fs::temp_directory_path() / ("gantry-it-" + name + "-" + std::to_string(::getpid()));
  fs::remove_all(base);
  fs::create_directories(base);
  dir_ = base;
  db_ = Path("state.db");
  if (const char* keep = std::getenv("GANTRY_IT_KEEP"); keep && *keep == '1')
    keep_ = true;  // for debugging
}

Harness::~Harness() {
  for (auto& a : agents_) Stop(a, SIGTERM);
  Stop(server_, SIGTERM);
  Stop(peer_, SIGTERM);
  if (keep_ || ::testing::Test::HasFailure() || std::uncaught_exceptions() > 0) {
    std::cerr << "integration: kept " << dir_
              << " (logs: gantryd.log, agent-*.log, events.jsonl)\n";
    std::cerr << "--- gantryd.log (tail)\n";
    const std::string log = Slurp(Path("gantryd.log"));
    std::cerr << log.substr(log.size() > 3000 ? log.size() - 3000 : 0) << "\n";
  } else {
    fs::remove_all(dir_);
  }
}

void Harness::Write(const std::string& rel, const std::string& text, bool executable) const {
  std::ofstream(Path(rel)) << text;
  if (executable) ::chmod(Path(rel).c_str(), 0755);
}

std::string Harness::Read(const std::string& rel) const { return Slurp(Path(rel)); }

void Harness::Setup(const std::string& cluster_yaml,
                    const std::map<std::string, std::string>& team_queues) {
  Write("cluster.yaml", cluster_yaml);
  RunResult init = Run({GANTRYD_BINARY, "init", "--db", db_});
  EXPECT_EQ(init.rc, 0) << init.err;
  AddToken("admin", {"--admin"});
  AddToken("agent", {"--agent", "--any-node"});
  for (const auto& [team, queues] : team_queues)
    AddToken(team, {"--team", team, "--queues", queues});
}

void Harness::AddToken(const std::string& who, const std::vector<std::string>& args) {
  std::vector<std::string> argv = {GANTRYD_BINARY,      "token", "create", "--db", db_, "--config",
                                   Path("cluster.yaml")};
  argv.insert(argv.end(), args.begin(), args.end());
  RunResult r = Run(argv);
  EXPECT_EQ(r.rc, 0) << r.err;
  std::string t = r.out;
  while (!t.empty() && (t.back() == '\n' || t.back() == ' ')) t.pop_back();
  tokens_[who] = t;
}

std::string Harness::ServerUrl() const {
  const std::string host = netns_ ? netns_->Address(0) : "127.0.0.1";
  return std::string(tls_cert_.empty() ? "http://" : "https://") + host + ":" +
         std::to_string(port_);
}

pid_t Harness::Spawn(std::vector<std::string> argv, const std::string& log,
                     const std::map<std::string, std::string>& env, int host) {
  if (netns_ && host >= 0) {
    std::vector<std::string> full = netns_->Exec(host);
    full.insert(full.end(), argv.begin(), argv.end());
    argv = full;
  }
  return SpawnRaw(argv, log, log, env);
}

int Harness::SpawnServer(Proc& p, int port, const std::string& name,
                         const std::vector<std::string>& extra) {
  const std::string host = netns_ ? netns_->Address(0) : "127.0.0.1";
  std::vector<std::string> argv = {GANTRYD_BINARY,
                                   "--config",
                                   Path("cluster.yaml"),
                                   "--db",
                                   db_,
                                   "--listen",
                                   host + ":" + std::to_string(port),
                                   "--events",
                                   Path("events.jsonl"),
                                   "--port-file",
                                   Path(name + ".port"),
                                   "--pass-interval-ms",
                                   "100",
                                   "--heartbeat-ms",
                                   "100",
                                   "--node-timeout-s",
                                   "3",
                                   "--kill-slack-s",
                                   "2",
                                   "--log-dir",
                                   Path("logs")};
  if (!tls_cert_.empty()) argv.insert(argv.end(), {"--tls-cert", tls_cert_, "--tls-key", tls_key_});
  // `extra` adds flags or replaces the value of one set above.
  for (size_t i = 0; i < extra.size(); ++i) {
    const bool has_value = i + 1 < extra.size() && extra[i + 1].rfind("--", 0) != 0;
    auto it = std::find(argv.begin() + 1, argv.end(), extra[i]);
    if (has_value && it != argv.end()) {
      *(it + 1) = extra[++i];
      continue;
    }
    argv.push_back(extra[i]);
    if (has_value) argv.push_back(extra[++i]);
  }
  fs::remove(Path(name + ".port"));
  std::ofstream(Path(name + ".log"), std::ios::app) << "=== start " << restarts_++ << "\n";
  p.pid = Spawn(argv, Path(name + ".log"), server_env_, 0);
  p.log = Path(name + ".log");
  if (!WaitFor([&] { return fs::exists(Path(name + ".port")); }, 10)) {
    ADD_FAILURE() << name << " did not start: " << Read(name + ".log");
    return 0;
  }
  return std::stoi(Read(name + ".port"));
}

void Harness::StartServer(const std::vector<std::string>& extra) {
  port_ = SpawnServer(server_, port_, "gantryd", extra);
  ASSERT_NE(port_, 0);
  // In a namespace the test reaches the server by running curl-free HTTP from inside it;
  // the port file alone says it is listening.
  if (!netns_) {
    ASSERT_TRUE(WaitFor(
        [&] {
          int status = 0;
          Get("/healthz", "", &status);
          return status == 200;
        },
        10));
  }
}

void Harness::StartPeer(const std::vector<std::string>& extra) {
  peer_port_ = SpawnServer(peer_, peer_port_, "gantryd-peer", extra);
  ASSERT_NE(peer_port_, 0);
}

void Harness::KillPeer(int sig) { Stop(peer_, sig); }

std::string Harness::PeerUrl() const {
  const std::string host = netns_ ? netns_->Address(0) : "127.0.0.1";
  return std::string(tls_cert_.empty() ? "http://" : "https://") + host + ":" +
         std::to_string(peer_port_);
}

void Harness::SwapWithPeer() {
  std::swap(server_, peer_);
  std::swap(port_, peer_port_);
}

void Harness::KillServer(int sig) { Stop(server_, sig); }

bool Harness::ServerRunning() {
  if (server_.pid <= 0) return false;
  if (!WaitPid(server_.pid, 0)) return true;
  server_.pid = -1;
  return false;
}

int Harness::StartAgent(const std::string& node, const std::string& url,
                        const std::vector<std::string>& extra) {
  const int i = static_cast<int>(agents_.size());
  std::vector<std::string> argv = {
      GANTRY_AGENT_BINARY, "--server",           url.empty() ? ServerUrl() : url, "--node", node,
      "--state-dir",       Path("agent-" + node)};
  // 8 emulated H100s unless `extra` says otherwise.
  if (std::find(extra.begin(), extra.end(), "--emulate") == extra.end()) {
    argv.insert(argv.end(), {"--emulate", "8xH100-80GB"});
  }
  if (!tls_cert_.empty()) argv.insert(argv.end(), {"--ca-cert", tls_cert_});
  // Jobs run as the test's user: the tests' tokens name no Unix account (the run-as-user
  // tests say --run-as user themselves).
  if (std::find(extra.begin(), extra.end(), "--run-as") == extra.end())
    argv.insert(argv.end(), {"--run-as", "agent"});
  argv.insert(argv.end(), extra.begin(), extra.end());
  Proc p;
  p.log = Path("agent-" + node + ".log");
  // A restarted agent comes back on its node's host.
  const int host =
      agent_host_.emplace(node, static_cast<int>(agent_host_.size()) + 1).first->second;
  p.pid = Spawn(argv, p.log, {{"GANTRY_TOKEN", token("agent")}}, netns_ ? host : -1);
  agents_.push_back(p);
  return i;
}

int Harness::StartSwarm(const std::vector<std::string>& pools, const std::string& stats) {
  const int i = static_cast<int>(agents_.size());
  std::vector<std::string> argv = {GANTRY_SWARM_BINARY, "--server", ServerUrl(), "--stats",
                                   Path(stats)};
  for (const std::string& p : pools) {
    argv.push_back("--pool");
    argv.push_back(p);
  }
  Proc p;
  p.log = Path("swarm-" + std::to_string(i) + ".log");
  p.pid = Spawn(argv, p.log, {{"GANTRY_TOKEN", token("agent")}}, -1);
  agents_.push_back(p);
  return i;
}

void Harness::StopAgent(int i, int sig) { Stop(agents_[static_cast<size_t>(i)], sig); }

void Harness::Stop(Proc& p, int sig) {
  if (p.pid <= 0) return;
  ::kill(p.pid, sig);
  if (!WaitPid(p.pid, 15)) {
    ::kill(p.pid, SIGKILL);
    WaitPid(p.pid, 5);
  }
  p.pid = -1;
}

bool Harness::WaitFor(const std::function<bool()>& cond, double seconds) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (true) {
    if (cond()) return true;
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

json Harness::Get(const std::string& path, const std::string& token, int* status) const {
  httplib::Client c(ServerUrl());
  if (!tls_cert_.empty()) c.set_ca_cert_path(tls_cert_);
  c.set_connection_timeout(2, 0);
  c.set_read_timeout(10, 0);
  httplib::Headers h;
  if (!token.empty()) h.emplace("Authorization", "Bearer " + token);
  auto res = c.Get(path.c_str(), h);
  if (status) *status = res ? res->status : 0;
  if (!res) return json();
  return json::parse(res->body, nullptr, false);
}

json Harness::Post(const std::string& path, const std::string& body, const std::string& token,
                   int* status, const std::string& type) const {
  httplib::Client c(ServerUrl());
  if (!tls_cert_.empty()) c.set_ca_cert_path(tls_cert_);
  c.set_connection_timeout(2, 0);
  c.set_read_timeout(10, 0);
  httplib::Headers h;
  if (!token.empty()) h.emplace("Authorization", "Bearer " + token);
  auto res = c.Post(path.c_str(), h, body, type.c_str());
  if (status) *status = res ? res->status : 0;
  if (!res) return json();
  return json::parse(res->body, nullptr, false);
}

RunResult Harness::Cli(const std::vector<std::string>& args, const std::string& token) const {
  std::vector<std::string> argv;
  if (netns_) argv = netns_->Exec(0);
  argv.push_back(GANTRY_BINARY);
  argv.push_back("--server");
  argv.push_back(ServerUrl());
  if (!tls_cert_.empty()) argv.insert(argv.end(), {"--ca-cert", tls_cert_});
  argv.insert(argv.end(), args.begin(), args.end());
  std::map<std::string, std::string> env;
  env["GANTRY_TOKEN"] = token;
  return Run(argv, env);
}

json Harness::Jobs() const {
  if (netns_) {
    RunResult r = Cli({"ls", "--all", "--json"}, token("admin"));
    json j = json::parse(r.out, nullptr, false);
    return j.is_array() ? j : json::array();
  }
  json j = Get("/v1/jobs?all=1", token("admin"));
  return j.is_object() ? j["jobs"] : json::array();
}

json Harness::Job(const std::string& id) const {
  if (netns_) {
    RunResult r = Cli({"show", "--json", id}, token("admin"));
    return json::parse(r.out, nullptr, false);
  }
  return Get("/v1/jobs/" + id, token("admin"));
}

bool Harness::NodesUp(int n) const {
  json nodes;
  if (netns_) {
    RunResult r = Cli({"nodes", "--json"}, token("admin"));
    nodes = json::parse(r.out, nullptr, false);
  } else {
    json j = Get("/v1/nodes", token("admin"));
    nodes = j.is_object() ? j["nodes"] : json();
  }
  if (!nodes.is_array()) return false;
  int up = 0;
  for (const auto& node : nodes) up += node.value("state", "") == "up";
  return up >= n;
}

}  // namespace gantry::it
