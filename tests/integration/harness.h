// Integration harness: starts the real gantryd, gantry-agent and gantry binaries in a
// temporary directory, talks to them over HTTP, and stops everything it started (by
// pid) when it goes out of scope. By default everything binds to 127.0.0.1; with a
// Netns, gantryd and each agent run in a network namespace of their own ("separate
// hosts") joined by a bridge, so a host can be cut off by taking its link down.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

namespace gantry::it {

using nlohmann::json;

struct RunResult {
  int rc = -1;
  std::string out, err;
};

// Runs argv to completion (stdout and stderr captured), with `env` added.
RunResult Run(const std::vector<std::string>& argv,
              const std::map<std::string, std::string>& env = {}, double timeout_s = 30);

// Network namespaces for "separate hosts": one per host plus a switch namespace with a
// bridge. Available() says whether this machine allows it (root, iproute2) and why not.
class Netns {
 public:
  static bool Available(std::string* why);
  explicit Netns(int hosts);  // host 0 at 10.<x>.0.1, host i at 10.<x>.0.(i+1)
  ~Netns();
  std::string Name(int host) const { return names_[static_cast<size_t>(host)]; }
  std::string Address(int host) const;
  // Takes host's link down (cut off) or up (healed).
  void SetLink(int host, bool up);
  // Prefix for a command to run inside host's namespace.
  std::vector<std::string> Exec(int host) const { return {"ip", "netns", "exec", Name(host)}; }
  // Runs `fn` on a thread of its own inside host's namespace (setns moves one thread), so
  // the test's own HTTP calls reach the hosts.
  void Within(int host, const std::function<void()>& fn) const;

 private:
  std::string tag_;
  int subnet_ = 0;
  std::vector<std::string> names_;
  std::string switch_;
};

// A TCP proxy on 127.0.0.1 that can cut every connection through it and refuse new ones.
class Proxy {
 public:
  explicit Proxy(int target_port);
  ~Proxy();
  int port() const { return port_; }
  void Cut(bool cut);

 private:
  void Accept();
  int target_;
  int listen_fd_ = -1;
  int port_ = 0;
  std::atomic<bool> cut_{false};
  std::atomic<bool> stop_{false};
  std::thread thread_;
  std::mutex mu_;
  std::vector<int> fds_;
  std::vector<std::thread> pumps_;
};

class Harness {
 public:
  // `name` labels the temporary directory. With `netns`, host 0 is gantryd's and host
  // i + 1 is that of the i-th node given an agent (a restarted agent keeps its host).
  explicit Harness(const std::string& name, Netns* netns = nullptr);
  ~Harness();

  const std::string& dir() const { return dir_; }
  std::string Path(const std::string& rel) const { return dir_ + "/" + rel; }
  void Write(const std::string& rel, const std::string& text, bool executable = false) const;
  std::string Read(const std::string& rel) const;

  // The state database: a PostgreSQL URL instead of state.db (call before Setup).
  void UseDb(const std::string& db) { db_ = db; }
  // Serve HTTPS with this self-signed certificate and key (PEM); the CLI and agents are
  // given the certificate to trust (call before StartServer).
  void UseTls(const std::string& cert, const std::string& key) {
    tls_cert_ = cert;
    tls_key_ = key;
  }
  // Writes cluster.yaml, initialises the database and creates the tokens: admin_,
  // agent_, and one per team.
  void Setup(const std::string& cluster_yaml,
             const std::map<std::string, std::string>& team_queues);
  // `gantryd token create ARGS` (after Setup); token(who) is the result.
  void AddToken(const std::string& who, const std::vector<std::string>& args);
  const std::string& token(const std::string& who) const { return tokens_.at(who); }

  // Starts gantryd (on a free port the first time, on the same port after a restart)
  // and waits for /healthz.
  void StartServer(const std::vector<std::string>& extra = {});
  void KillServer(int sig);  // and waits for it
  // False once gantryd has exited on its own (it is then reaped; StartServer restarts it).
  bool ServerRunning();
  // Environment for gantryd (and its peer) from their next start, e.g. LD_PRELOAD.
  void ServerEnv(const std::map<std::string, std::string>& env) { server_env_ = env; }
  std::string ServerUrl() const;
  pid_t server_pid() const { return server_.pid; }
  int port() const { return port_; }
  // With a shared database (UseDb): a second gantryd on a port of its own (the same one
  // after a restart), which waits as a standby for the lease; returns once it listens.
  // Its log is gantryd-peer.log. SwapWithPeer makes it the server (after it took over)
  // and the old server the peer, so that Get, Post and Cli follow the leader.
  void StartPeer(const std::vector<std::string>& extra = {});
  void KillPeer(int sig);
  std::string PeerUrl() const;
  void SwapWithPeer();

  // Starts gantry-agent for node `node` (emulating 8 H100s) talking to `url` (default:
  // the server). Returns its index.
  int StartAgent(const std::string& node, const std::string& url = "",
                 const std::vector<std::string>& extra = {});
  pid_t agent_pid(int i) const { return agents_[static_cast<size_t>(i)].pid; }
  // Starts gantry-swarm: emulated nodes for each "NAME:COUNT:GPUS" pool, its stats
  // rewritten every second to `stats` (under dir()). Returns its index among the agents.
  int StartSwarm(const std::vector<std::string>& pools, const std::string& stats);
  void StopAgent(int i, int sig = 15);

  // Polls `cond` every 50 ms until it holds or `seconds` pass.
  static bool WaitFor(const std::function<bool()>& cond, double seconds);

  // HTTP GET/POST to gantryd; status in *status.
  json Get(const std::string& path, const std::string& token, int* status = nullptr) const;
  json Post(const std::string& path, const std::string& body, const std::string& token,
            int* status = nullptr, const std::string& type = "application/json") const;
  // Runs the gantry CLI against the server with `token` (GANTRY_TOKEN).
  RunResult Cli(const std::vector<std::string>& args, const std::string& token) const;

  json Jobs() const;                      // every job, as the admin sees them
  json Job(const std::string& id) const;  // one job's details
  bool NodesUp(int n) const;

  // Keeps the directory (and says where) instead of deleting it.
  void Keep() { keep_ = true; }

 private:
  struct Proc {
    pid_t pid = -1;
    std::string log;
  };
  pid_t Spawn(std::vector<std::string> argv, const std::string& log,
              const std::map<std::string, std::string>& env, int host);
  void Stop(Proc& p, int sig);
  // Spawns gantryd on `port` (0: any), waits for its port file and returns the port.
  int SpawnServer(Proc& p, int port, const std::string& name,
                  const std::vector<std::string>& extra);

  std::string dir_;
  Netns* netns_;
  std::map<std::string, std::string> tokens_;
  std::string db_, tls_cert_, tls_key_;
  std::map<std::string, std::string> server_env_;
  Proc server_, peer_;
  std::vector<Proc> agents_;
  std::map<std::string, int> agent_host_;  // node -> its network namespace host
  int port_ = 0, peer_port_ = 0;
  int restarts_ = 0;
  bool keep_ = false;
};

// Reads KEY=VALUE lines.
std::map<std::string, std::string> ReadEnvFile(const std::string& path);

}  // namespace gantry::it
