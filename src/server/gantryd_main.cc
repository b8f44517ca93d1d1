// gantryd: the Gantry control plane. Serves the HTTP/JSON API, /metrics and /healthz,
// keeps its state in SQLite (one machine) or PostgreSQL (a leader and standbys), and
// drives the scheduling core.
//
//   gantryd init --db STATE.db | postgresql://...
//   gantryd --config CLUSTER.yaml --db STATE.db --listen HOST:PORT [--events OUT.jsonl] [--init]
//   gantryd --config CLUSTER.yaml --db postgresql://... --listen HOST:PORT --advertise URL
//
// On PostgreSQL every gantryd waits as a standby (answering 503 with the leader's URL)
// until it holds the leader lease (--leader-ttl-s, 3 s), then restores the state and
// serves on the same address; it renews every ttl/3 and exits the moment it cannot.
//   gantryd check-config --config CLUSTER.yaml --db STATE.db   (what a config change would break)
//   gantryd token create --db STATE.db (--admin | --agent --node N | --team T --queues a,b)
//   gantryd token list --db STATE.db
//   gantryd token revoke --db STATE.db HASH_PREFIX
//
// A database is created only by `gantryd init` (or `--init`): a mistyped --db must not
// start an empty cluster whose agents, unknown to it, would then stop their jobs.
// Signals: TERM and INT stop gracefully; HUP reopens the event log (for log rotation).
// Exit status: 0 after a clean stop (SIGTERM, SIGINT), 1 on a run-time failure, 2 on bad
// input (config problems are printed as FILE:LINE: FIELD: MESSAGE).
#include <pthread.h>
#include <unistd.h>
#include <cctype>
#include <csignal>

#include <CLI/CLI.hpp>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "base/atomic_file.h"
#include "base/clock.h"
#include "base/log.h"
#include "kube/scheduler.h"
#include "server/auth.h"
#include "server/config_check.h"
#include "server/controller.h"
#include "server/http_api.h"
#include "server/http_server.h"
#include "server/pg_store.h"
#include "server/sqlite_store.h"
#include "spec/config_reader.h"

using namespace gantry;

namespace {

constexpr int kExitRunFailure = 1;
constexpr int kExitBadInput = 2;

bool IsPostgres(const std::string& db) {
  return db.rfind("postgresql://", 0) == 0 || db.rfind("postgres://", 0) == 0;
}

// The URL as safe to print: without a password.
std::string Redacted(const std::string& db) {
  const size_t scheme = db.find("://");
  const size_t at = db.find('@');
  if (scheme == std::string::npos || at == std::string::npos) return db;
  const size_t colon = db.find(':', scheme + 3);
  if (colon == std::string::npos || colon > at) return db;
  return db.substr(0, colon) + ":***" + db.substr(at);
}

// Marks a database made by `gantryd init` (PostgreSQL: the schema alone is made by any
// connection, so the mark is what says the database was meant to hold a cluster).
constexpr const char* kInitKey = "initialized_ms";

// Opens the database at `db` (a SQLite file, or a postgresql:// URL); creates or marks it
// only when `create` (gantryd init, --init).
Result<std::unique_ptr<server::Store>> OpenStore(const std::string& db, bool create) {
  const std::string fix =
      "create one with `gantryd init --db " + Redacted(db) +
      "` (or start with --init); a wrong --db would otherwise start an empty cluster";
  if (!IsPostgres(db)) {
    std::error_code ec;
    if (!create && !std::filesystem::exists(db, ec))
      return Error{"db", "no database at " + db + ": " + fix};
    auto store = server::SqliteStore::Open(db);
    if (!store) return store.error();
    return std::unique_ptr<server::Store>(std::move(*store));
  }
  auto store = server::PgStore::Open(db);
  if (!store) return store.error();
  auto mark = (*store)->GetMeta(kInitKey);
  if (!mark) return mark.error();
  if (!*mark) {
    if (!create) return Error{"db", Redacted(db) + " holds no Gantry state: " + fix};
    if (Status s = (*store)->SetMeta(kInitKey, std::to_string(WallMs())); !s) return s.error();
  }
  return std::unique_ptr<server::Store>(std::move(*store));
}

// OpenStore for a server starting: a PostgreSQL server that cannot be reached yet (a boot
// where gantryd comes up first, a database restarting) is tried again every 2 s, with a
// warning at the first try and every 30 s, rather than ended on: the process would only be
// restarted by its supervisor, and its standby could take no lease either. Anything else
// (no such database, refused login, no Gantry state) is an error at once.
Result<std::unique_ptr<server::Store>> OpenStoreWaiting(const std::string& db, bool create) {
  for (int tries = 1;; ++tries) {
    auto store = OpenStore(db, create);
    if (store || !IsPostgres(db)) return store;
    const std::string& why = store.error().message;
    bool unreachable = false;
    for (const char* said : {"Is the server running", "Connection refused", "could not connect",
                             "the database system is starting up",
                             "the database system is shutting down", "timeout expired"}) {
      unreachable = unreachable || why.find(said) != std::string::npos;
    }
    if (!unreachable) return store;
    if (tries % 15 == 1) {
      log::Warn("the store cannot be reached yet; gantryd waits for it",
                {{"db", Redacted(db)}, {"error", why}, {"tries", std::to_string(tries)}});
    }
    std::this_thread::sleep_for(std::chrono::seconds(2));
  }
}

std::vector<std::string> Split(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size()) {
    size_t end = s.find(',', start);
    if (end == std::string::npos) end = s.size();
    if (end > start) out.push_back(s.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

struct TokenArgs {
  std::string db, config, team, queues, label, nodes, user;
  bool admin = false, agent = false, any_node = false;
  std::string prefix;
};

int TokenCreate(const TokenArgs& a) {
  const int roles = (a.admin ? 1 : 0) + (a.agent ? 1 : 0) + (a.team.empty() ? 0 : 1);
  if (roles != 1) {
    std::cerr << "gantryd token create: give exactly one of --admin, --agent, --team\n";
    return kExitBadInput;
  }
  server::StoredToken t;
  t.role = a.admin ? "admin" : a.agent ? "agent" : "team";
  t.team = a.team;
  t.queues = Split(a.queues);
  t.label = a.label;
  t.user = a.user;
  if (!t.user.empty()) {
    // A Unix account name as useradd takes it (the agents look it up by name).
    bool valid = t.user.size() <= 32 &&
                 (std::islower(static_cast<unsigned char>(t.user[0])) || t.user[0] == '_');
    for (char c : t.user) {
      valid &= std::islower(static_cast<unsigned char>(c)) ||
               std::isdigit(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.';
    }
    if (!valid || t.role == "agent") {
      std::cerr << "gantryd token create: --user " << t.user
                << (t.role == "agent"
                        ? ": agent tokens name no user\n"
                        : ": expected a Unix account name (lower-case letters, digits, _ - .; "
                          "at most 32, starting with a letter or _)\n");
      return kExitBadInput;
    }
  }
  if (t.role == "team" && t.queues.empty()) {
    std::cerr << "gantryd token create: --queues: a team token needs at least one queue\n";
    return kExitBadInput;
  }
  if (t.role == "agent") {
    // Bound to its node, so that one node's credential cannot speak for another.
    if (a.nodes.empty() == !a.any_node) {
      std::cerr
          << "gantryd token create: an agent token needs --node NAME (one token per node; several "
             "comma-separated) or --any-node (for a swarm of emulated nodes, or a trusted "
             "bootstrap)\n";
      return kExitBadInput;
    }
    t.queues = Split(a.nodes);  // an agent token's scope is its nodes
  } else if (!a.nodes.empty() || a.any_node) {
    std::cerr << "gantryd token create: --node and --any-node are for --agent tokens\n";
    return kExitBadInput;
  }
  if (!a.config.empty()) {  // check the queue names when the config is at hand
    spec::Diagnostics diags;
    auto config = spec::ReadClusterConfig(a.config, diags);
    if (!config) {
      std::cerr << diags.ToString();
      return kExitBadInput;
    }
    for (const std::string& node : t.role == "agent" ? t.queues : std::vector<std::string>{}) {
      if (!config->cluster.FindNode(node)) {
        std::cerr << "gantryd token create: --node: no node " << node << " in " << a.config << "\n";
        return kExitBadInput;
      }
    }
    for (const std::string& q : t.role == "team" ? t.queues : std::vector<std::string>{}) {
      if (!config->queues.Find(q)) {
        std::cerr << "gantryd token create: --queues: no queue " << q << " in " << a.config << "\n";
        return kExitBadInput;
      }
    }
  }
  auto store = OpenStore(a.db, false);
  if (!store) {
    std::cerr << "gantryd: --db: " << store.error().message << "\n";
    return kExitRunFailure;
  }
  const std::string token = server::NewToken();
  t.hash = server::Sha256Hex(token);
  t.created_ms = WallMs();
  if (Status s = (*store)->AddToken(t); !s) {
    std::cerr << "gantryd: " << s.error().message << "\n";
    return kExitRunFailure;
  }
  // The only time the token is shown: the store keeps its hash.
  std::cout << token << "\n";
  return 0;
}

int TokenList(const TokenArgs& a) {
  auto store = OpenStore(a.db, false);
  if (!store) {
    std::cerr << "gantryd: --db: " << store.error().message << "\n";
    return kExitRunFailure;
  }
  auto tokens = (*store)->ListTokens();
  if (!tokens) {
    std::cerr << "gantryd: " << tokens.error().message << "\n";
    return kExitRunFailure;
  }
  std::cout << "HASH          ROLE   TEAM         USER         QUEUES/NODES          LABEL\n";
  for (const auto& t : *tokens) {
    std::string queues;
    for (const auto& q : t.queues) queues += (queues.empty() ? "" : ",") + q;
    if (t.role == "agent" && queues.empty()) queues = "(any node)";
    std::printf("%-13s %-6s %-12s %-12s %-21s %s\n", t.hash.substr(0, 12).c_str(), t.role.c_str(),
                t.team.c_str(), t.user.empty() ? "-" : t.user.c_str(), queues.c_str(),
                t.label.c_str());
  }
  return 0;
}

int TokenRevoke(const TokenArgs& a) {
  auto store = OpenStore(a.db, false);
  if (!store) {
    std::cerr << "gantryd: --db: " << store.error().message << "\n";
    return kExitRunFailure;
  }
  if (Status s = (*store)->DeleteToken(a.prefix); !s) {
    std::cerr << "gantryd token revoke: " << s.error().message << "\n";
    return kExitBadInput;
  }
  return 0;
}

int Init(const std::string& db) {
  std::error_code ec;
  if (!IsPostgres(db) && std::filesystem::exists(db, ec)) {
    std::cerr << "gantryd init: " << db << " already exists; nothing done\n";
    return kExitBadInput;
  }
  if (IsPostgres(db) && OpenStore(db, false)) {
    std::cerr << "gantryd init: " << Redacted(db) << " already holds Gantry state; nothing done\n";
    return kExitBadInput;
  }
  auto store = OpenStore(db, true);
  if (!store) {
    std::cerr << "gantryd init: " << store.error().message << "\n";
    return kExitRunFailure;
  }
  std::cerr << "gantryd init: created " << Redacted(db) << "\n";
  return 0;
}

struct ServeArgs {
  bool init = false, force_config = false, metrics_token = false;
  std::string config, db, listen = "127.0.0.1:8080", events, policy = "gantry", log_dir, port_file,
                          advertise, tls_cert, tls_key, log_format = "text", kubernetes,
                          kubernetes_lease = "kube-system/gantry-scheduler";
  int kubernetes_lease_duration_s = 15;
  int64_t pass_interval_ms = 1000, heartbeat_ms = 2000;
  double usage_sample_s = 300, usage_retention_days = 14, history_sample_s = 60,
         job_retention_days = 0;
  int64_t recent_done = 10000;
  double node_timeout_s = 30, kill_slack_s = 5, lease_s = 0, leader_ttl_s = 3, submit_rate = 0,
         submit_burst = 0;
};

// A gantryd that does not hold the leader lease: it answers every request 503 with
// {"role": "standby", "leader": URL} (the CLI and agents then go to the leader), /healthz
// included, so a load balancer's health check sends traffic to the leader only.
class Standby {
 public:
  explicit Standby(const server::TlsFiles& tls)
      : server_(Options(tls), [this](server::HttpRequest&, server::HttpServer::Respond respond) {
          std::string leader;
          {
            std::lock_guard lk(mu_);
            leader = leader_;
          }
          server::HttpResponse r;
          r.status = 503;
          r.headers.emplace_back("Retry-After", "1");
          r.body = nlohmann::json{
              {"error", "this gantryd is a standby; " +
                            (leader.empty() ? "no leader yet" : "the leader is " + leader)},
              {"role", "standby"},
              {"leader",
               leader}}.dump();
          respond(std::move(r));
        }) {}
  Result<int> Bind(const std::string& host, int port) { return server_.Bind(host, port); }
  void Start() {
    thread_ = std::thread([this] { server_.Serve(); });
  }
  void Stop() {
    server_.Stop();
    if (thread_.joinable()) thread_.join();
  }
  void SetLeader(const std::string& url) {
    std::lock_guard lk(mu_);
    leader_ = url;
  }

 private:
  static server::HttpServerOptions Options(const server::TlsFiles& tls) {
    server::HttpServerOptions o;
    o.threads = 1;
    o.tls = tls;
    return o;
  }
  std::mutex mu_;
  std::string leader_;
  server::HttpServer server_;
  std::thread thread_;
};

// Sleeps `ms`, or less once `stopping` is set.
void Nap(int64_t ms, const std::atomic<bool>& stopping) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
  while (!stopping.load() && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

// As a standby, tries for the lease every ttl/6 until it is taken (its epoch) or the
// process is told to stop (nullopt). A store failure other than "someone else leads" is
// an error.
Result<std::optional<int64_t>> WaitForLease(server::Store& store, const std::string& me,
                                            int64_t ttl_ms, Standby& standby,
                                            const std::atomic<bool>& stopping) {
  std::string said;
  bool out = false;  // the database is unavailable: said once, tried again every ttl
  auto unavailable = [&](const Error& e) {
    if (!out) log::Warn("standby: the store is unavailable (" + e.message + "); trying again");
    out = true;
    Nap(std::max<int64_t>(ttl_ms, 50), stopping);
  };
  while (!stopping.load()) {
    auto epoch = store.AcquireLease(me, ttl_ms);
    if (epoch) return std::optional<int64_t>(*epoch);
    if (epoch.error().field == "holder" || epoch.error().field == "ttl_ms") return epoch.error();
    if (epoch.error().field != "lease") {
      unavailable(epoch.error());
      continue;
    }
    auto leader = store.Leader();
    if (!leader) {
      unavailable(leader.error());
      continue;
    }
    if (out) log::Info("standby: the store is available again");
    out = false;
    const std::string holder = *leader ? (*leader)->holder : "";
    standby.SetLeader(holder);
    if (holder != said) {  // one line per leader, not one per try
      log::Info("standby: " + epoch.error().message);
      said = holder;
    }
    Nap(std::max<int64_t>(ttl_ms / 6, 50), stopping);
  }
  return std::optional<int64_t>();
}

// The leader's renewal, on a connection of its own (a renewal does not wait for the
// controller's transactions): every ttl/3. Losing the lease ends the process at once: a
// deposed leader never carries on from memory (its writes are fenced anyway), and a
// restart comes back as a standby. Losing the database does not: the renewal is tried
// every 100 ms until it answers (the controller rides through the outage meanwhile), and
// a database that restarted gives its leader one ttl to renew before a standby may take
// the lease (PgStore::AcquireLease).
class Renewer {
 public:
  Renewer(std::unique_ptr<server::Store> store, std::string me, int64_t epoch, int64_t ttl_ms)
      : store_(std::move(store)), me_(std::move(me)), epoch_(epoch), ttl_ms_(ttl_ms) {
    thread_ = std::thread([this] { Loop(); });
  }
  ~Renewer() {
    stop_ = true;
    thread_.join();
  }

 private:
  void Loop() {
    bool out = false;
    while (!stop_.load()) {
      Nap(out ? 100 : ttl_ms_ / 3, stop_);
      if (stop_.load()) return;
      Status s = store_->RenewLease(me_, epoch_, ttl_ms_);
      if (!s && s.error().field != "lease") {
        if (!out) log::Warn("cannot renew the leader lease: " + s.error().message + "; retrying");
        out = true;
        continue;
      }
      if (out && s) log::Info("leader lease renewed after a store outage");
      out = false;
      if (!s) {
        std::fprintf(
            stderr,
            "gantryd: fatal: the leader lease was lost (%s); exiting, a standby takes over\n",
            s.error().message.c_str());
        std::fflush(stderr);
        std::_Exit(kExitRunFailure);
      }
    }
  }
  std::unique_ptr<server::Store> store_;
  std::string me_;
  int64_t epoch_, ttl_ms_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// `text` without its last newline (a log line adds its own).
std::string Chomp(std::string text) {
  while (!text.empty() && text.back() == '\n') text.pop_back();
  return text;
}

// What `config` would break among the stored active jobs, logged; 0 when nothing (or
// when `force`: they are failed, each logged by the controller), else kExitBadInput.
int CheckConfig(const spec::ClusterConfig& config, server::Store& store, const std::string& path,
                bool force) {
  auto broken = server::ConfigBreakage(config, store);
  if (!broken) {
    log::Error("--db: " + broken.error().message);
    return kExitRunFailure;
  }
  if (broken->empty()) return 0;
  // In the log's form (--log-format json too): one line for the refusal, one per job.
  log::Error(path + " would break " + std::to_string(broken->size()) + " active job(s):");
  for (const std::string& line : *broken) log::Error("  " + line);
  if (force) {
    log::Warn("--force-config: they are failed now");
    return 0;
  }
  log::Error(
      "nothing was changed; restore what they use (or cancel them) and start again, or start "
      "with --force-config to fail them");
  return kExitBadInput;
}

int CheckConfigCommand(const std::string& config_path, const std::string& db) {
  spec::Diagnostics diags;
  auto config = spec::ReadClusterConfig(config_path, diags);
  if (!config) {
    std::cerr << diags.ToString();
    return kExitBadInput;
  }
  auto store = OpenStore(db, false);
  if (!store) {
    std::cerr << "gantryd: --db: " << store.error().message << "\n";
    return kExitRunFailure;
  }
  const int rc = CheckConfig(*config, **store, config_path, false);
  if (rc == 0)
    std::cerr << "gantryd check-config: " << config_path << " reads back every active job\n";
  return rc;
}

// gantryd --kubernetes: pods that name Gantry's scheduler are placed by the core
// (kube/scheduler.h); TERM and INT stop it.
int ServeKubernetes(const ServeArgs& a) {
  spec::Diagnostics diags;
  auto config = spec::ReadClusterConfig(a.config, diags);
  if (!config) {
    log::Error("the cluster config is not valid:\n" + Chomp(diags.ToString()));
    return kExitBadInput;
  }
  auto creds = kube::LoadCredentials(a.kubernetes);
  if (!creds) {
    log::Error("--kubernetes: " + creds.error().ToString());
    return kExitBadInput;
  }
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  std::signal(SIGPIPE, SIG_IGN);
  std::atomic<bool> stop{false};
  std::thread waiter([&] {
    int sig = 0;
    sigwait(&stop_signals, &sig);
    stop = true;
  });
  waiter.detach();
  kube::SchedulerOptions options;
  options.policy = a.policy;
  options.elect = a.kubernetes_lease != "none";
  options.listen = a.listen;
  // With --db: its tokens let gantry ls, show and queues read this mode's jobs (/v1), and
  // the scheduling thread keeps the runs' accounting in it over its own connection.
  std::unique_ptr<server::Store> store, ledger;
  if (!a.db.empty()) {
    auto opened = OpenStoreWaiting(a.db, a.init);
    if (!opened) {
      log::Error("--db: " + opened.error().message);
      return kExitBadInput;
    }
    store = std::move(*opened);
    options.store = store.get();
    auto second = OpenStore(a.db, false);
    if (!second) {
      log::Error("--db: " + second.error().message);
      return kExitBadInput;
    }
    ledger = std::move(*second);
    options.ledger = ledger.get();
  }
  if (options.elect) {
    const size_t slash = a.kubernetes_lease.find('/');
    if (slash == std::string::npos || slash == 0 || slash + 1 == a.kubernetes_lease.size()) {
      log::Error("--kubernetes-lease: expected NAMESPACE/NAME or none, got " + a.kubernetes_lease);
      return kExitBadInput;
    }
    options.lease.ns = a.kubernetes_lease.substr(0, slash);
    options.lease.name = a.kubernetes_lease.substr(slash + 1);
    char host[256] = {};
    gethostname(host, sizeof host - 1);
    std::random_device rd;
    char suffix[16];
    std::snprintf(suffix, sizeof suffix, "_%08x", rd());
    options.lease.identity = std::string(host) + suffix;
    options.lease.duration_s = a.kubernetes_lease_duration_s;
    options.lease.retry_s = std::max(1, a.kubernetes_lease_duration_s / 7);
    options.lease.renew_deadline_s =
        std::max(options.lease.retry_s + 1, a.kubernetes_lease_duration_s * 2 / 3);
  }
  const int rc = kube::RunScheduler(*config, *creds, options, stop);
  log::Info("stopped");
  return rc;
}

int Serve(const ServeArgs& a) {
  if (!log::Configure("gantryd", a.log_format)) {
    std::cerr << "gantryd: --log-format: expected text or json, got " << a.log_format << "\n";
    return kExitBadInput;
  }
  if (!a.kubernetes.empty()) {
    if (a.config.empty()) {
      log::Error("--kubernetes needs --config (queues, tiers, the kubernetes section)");
      return kExitBadInput;
    }
    return ServeKubernetes(a);
  }
  if (a.config.empty() || a.db.empty()) {
    log::Error("--config and --db are required");
    return kExitBadInput;
  }
  if (a.tls_cert.empty() != a.tls_key.empty()) {
    log::Error("--tls-cert and --tls-key go together");
    return kExitBadInput;
  }
  if (a.leader_ttl_s < 0.3) {
    log::Error("--leader-ttl-s: at least 0.3");
    return kExitBadInput;
  }
  spec::Diagnostics diags;
  auto config = spec::ReadClusterConfig(a.config, diags);
  if (!config) {
    log::Error("the cluster config is not valid:\n" + Chomp(diags.ToString()));
    return kExitBadInput;
  }
  const size_t colon = a.listen.rfind(':');
  int port = -1;
  try {
    if (colon != std::string::npos) port = std::stoi(a.listen.substr(colon + 1));
  } catch (const std::exception&) {
  }
  if (port < 0 || port > 65535) {
    log::Error("--listen: expected HOST:PORT, got " + a.listen);
    return kExitBadInput;
  }
  const std::string host = a.listen.substr(0, colon);
  auto store = OpenStoreWaiting(a.db, a.init);
  if (!store) {
    log::Error("--db: " + store.error().message);
    return kExitRunFailure;
  }
  std::ofstream events;
  if (!a.events.empty()) {
    events.open(a.events, std::ios::app | std::ios::binary);
    if (!events) {
      log::Error("--events: cannot write " + a.events);
      return kExitRunFailure;
    }
  }
  server::TlsFiles tls{a.tls_cert, a.tls_key};

  // SIGTERM, SIGINT and SIGHUP are taken by a thread of their own; every other thread
  // blocks them.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  std::signal(SIGPIPE, SIG_IGN);
  if (auto* sqlite = dynamic_cast<server::SqliteStore*>(store->get())) {
    if (Status s = sqlite->StartCheckpointer(); !s) {
      log::Error("--db: " + s.error().message);
      return kExitRunFailure;
    }
  }

  std::atomic<bool> stopping{false};
  std::mutex serving_mu;
  std::function<void()> stop_serving;  // stops what serves now (standby or API)
  server::Controller* live = nullptr;  // the running controller, for SIGHUP
  std::thread waiter([&] {
    int sig = 0;
    while (sigwait(&stop_signals, &sig) == 0) {
      if (sig != SIGHUP) break;
      // Log rotation: the event log is reopened (on the controller thread, between batches).
      std::lock_guard lk(serving_mu);
      if (a.events.empty() || !live) {
        log::Info("SIGHUP: no event log to reopen; nothing else is reloaded");
        continue;
      }
      live->RunExclusive([&] {
        events.close();
        events.open(a.events, std::ios::app | std::ios::binary);
      });
      if (events) {
        log::Info("SIGHUP: reopened the event log", {{"file", a.events}});
      } else {
        log::Error("SIGHUP: cannot reopen the event log: events are not written",
                   {{"file", a.events}});
      }
    }
    stopping = true;
    std::lock_guard lk(serving_mu);
    if (stop_serving) stop_serving();
  });
  auto finish = [&](int rc) {
    {
      std::lock_guard lk(serving_mu);
      stop_serving = nullptr;
      live = nullptr;
    }
    if (!stopping.load()) pthread_kill(waiter.native_handle(), SIGTERM);  // wakes the waiter
    waiter.join();
    return rc;
  };

  auto write_port_file = [&](int bound) {
    if (a.port_file.empty()) return;
    WriteFileAtomically(a.port_file, std::to_string(bound) + "\n");
  };

  // The leader lease. With PostgreSQL, wait as a standby until it is ours (serving 503s
  // that name the leader on the same address meanwhile); with SQLite it is always free,
  // and taking it fences a gantryd started earlier on the same file.
  const int64_t ttl_ms = static_cast<int64_t>(a.leader_ttl_s * 1000);
  int64_t epoch = 0;
  std::string me = a.advertise;
  std::unique_ptr<Renewer> renewer;
  if (IsPostgres(a.db)) {
    Standby standby(tls);
    auto bound = standby.Bind(host, port);
    if (!bound) {
      log::Error(bound.error().message);
      return finish(kExitRunFailure);
    }
    port = *bound;
    write_port_file(port);  // a standby listens too (its 503s name the leader)
    if (me.empty())
      me = std::string(tls.enabled() ? "https://" : "http://") + host + ":" + std::to_string(port);
    {
      std::lock_guard lk(serving_mu);
      stop_serving = [&standby] { standby.Stop(); };
    }
    standby.Start();
    auto got = WaitForLease(**store, me, ttl_ms, standby, stopping);
    {
      std::lock_guard lk(serving_mu);
      stop_serving = nullptr;
    }
    standby.Stop();
    if (!got) {
      log::Error("--db: " + got.error().message);
      return finish(kExitRunFailure);
    }
    if (!*got) return finish(0);  // stopped while a standby
    epoch = **got;
    auto second = OpenStore(a.db, false);
    if (!second) {
      log::Error("--db: " + second.error().message);
      return finish(kExitRunFailure);
    }
    renewer = std::make_unique<Renewer>(std::move(*second), me, epoch, ttl_ms);
  } else {
    if (me.empty()) me = "gantryd pid " + std::to_string(::getpid());
    auto got = (*store)->AcquireLease(me, ttl_ms);
    if (!got) {
      log::Error("--db: " + got.error().message);
      return finish(kExitRunFailure);
    }
    epoch = *got;
  }

  // A config that would fail active jobs is refused, not applied (issue 16, bug 5).
  if (int rc = CheckConfig(*config, **store, a.config, a.force_config); rc != 0) return finish(rc);

  server::ControllerOptions opts;
  opts.policy = a.policy;
  opts.pass_interval_ms = a.pass_interval_ms;
  opts.heartbeat_ms = a.heartbeat_ms;
  opts.node_timeout_ms = static_cast<int64_t>(a.node_timeout_s * 1000);
  opts.kill_slack_ms = static_cast<int64_t>(a.kill_slack_s * 1000);
  opts.usage_sample_ms = static_cast<int64_t>(a.usage_sample_s * 1000);
  opts.history_sample_ms = static_cast<int64_t>(a.history_sample_s * 1000);
  opts.usage_retention_ms = static_cast<int64_t>(a.usage_retention_days * 86'400'000);
  opts.job_retention_ms = static_cast<int64_t>(a.job_retention_days * 86'400'000);
  opts.recent_done = a.recent_done;
  opts.lease_ms = static_cast<int64_t>(a.lease_s * 1000);
  opts.log_dir =
      a.log_dir.empty() ? (IsPostgres(a.db) ? "gantryd.logs" : a.db + ".logs") : a.log_dir;
  opts.submit_rate = a.submit_rate;
  opts.metrics_token = a.metrics_token;
  opts.submit_burst = a.submit_burst;
  opts.leader = me;
  opts.epoch = epoch;

  server::Controller controller(*config, **store, opts, a.events.empty() ? nullptr : &events,
                                WallMs);
  if (Status s = controller.Start(); !s) {
    log::Error(s.error().ToString());
    return finish(kExitRunFailure);
  }
  server::HttpOptions http;
  http.tls = tls;
  server::HttpApi api(controller, http);
  auto bound = api.Bind(host, port);
  if (!bound) {
    log::Error(bound.error().message);
    controller.Stop();
    return finish(kExitRunFailure);
  }
  write_port_file(*bound);
  bool tiers_set = false;
  for (uint32_t q = 0; q < config->queues.size(); ++q)
    tiers_set |= config->queues.queue(core::QueueId(q)).spec.tiers.has_value();
  if (!tiers_set) {
    log::Warn(
        "no queue sets tiers: every team may submit critical work (never preempted, it preempts "
        "others); "
        "set queues[].tiers to keep it to the queues that need it");
  }
  log::Info("listening on " + host + ":" + std::to_string(*bound) + (tls.enabled() ? " (TLS)" : ""),
            {{"cluster", config->cluster.name()},
             {"nodes", std::to_string(config->cluster.nodes().size())},
             {"policy", a.policy},
             {"role", "leader"},
             {"leader", IsPostgres(a.db) ? me : std::string()},
             {"epoch", std::to_string(epoch)}});
  {
    std::lock_guard lk(serving_mu);
    stop_serving = [&api] { api.Stop(); };
    live = &controller;
  }
  if (!stopping.load()) api.Serve();
  {
    std::lock_guard lk(serving_mu);
    stop_serving = nullptr;
    live = nullptr;
  }
  controller.Stop();
  renewer.reset();
  const int rc = finish(0);
  log::Info("stopped");
  return rc;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"gantryd: the Gantry control plane"};
  ServeArgs serve;
  app.add_option("--config", serve.config, "Cluster config (YAML)");
  app.add_option(
      "--db", serve.db,
      "State database: a SQLite file, or postgresql://... shared by a leader and its standbys "
      "(made by `gantryd init`)");
  app.add_flag("--init", serve.init, "Create the database when it does not exist");
  app.add_option("--kubernetes", serve.kubernetes,
                 "Schedule the pods of a Kubernetes cluster instead of agents' nodes: a "
                 "kubeconfig file, or in-cluster (docs/kubernetes.md)");
  app.add_option("--kubernetes-lease", serve.kubernetes_lease,
                 "With --kubernetes: the coordination.k8s.io Lease (NAMESPACE/NAME) replicas elect "
                 "their leader through; none: no election")
      ->capture_default_str();
  app.add_option("--kubernetes-lease-duration-s", serve.kubernetes_lease_duration_s,
                 "With --kubernetes: how long a silent leader keeps the Lease (renewed every "
                 "duration/7, given up after 2/3 of it without a renewal)")
      ->capture_default_str()
      ->check(CLI::Range(2, 3600));
  app.add_option("--listen", serve.listen, "HOST:PORT to serve on (port 0: any free port)")
      ->capture_default_str();
  app.add_option("--events", serve.events, "Append the event log (JSON Lines) here");
  app.add_option("--policy", serve.policy, "Scheduling policy")->capture_default_str();
  app.add_option("--log-format", serve.log_format,
                 "Operational log on stderr: text (time level gantryd: message key=value ...) or "
                 "json (JSON "
                 "Lines); with a syslog priority prefix under journald")
      ->capture_default_str();
  app.add_option("--log-dir", serve.log_dir,
                 "Where job output uploaded by agents is kept (default: DB.logs)");
  app.add_option("--port-file", serve.port_file, "Write the bound port here once listening");
  app.add_option("--pass-interval-ms", serve.pass_interval_ms, "Scheduling pass timer")
      ->capture_default_str();
  app.add_option("--heartbeat-ms", serve.heartbeat_ms, "Heartbeat interval agents are told to use")
      ->capture_default_str();
  app.add_option("--node-timeout-s", serve.node_timeout_s,
                 "An agent silent this long: its node is down, its jobs requeued")
      ->capture_default_str();
  app.add_option("--lease-s", serve.lease_s,
                 "Agents cut off this long kill their jobs (default: 60% of the node timeout)");
  app.add_option(
      "--advertise", serve.advertise,
      "With PostgreSQL: the URL clients and agents use for this gantryd (default: http://LISTEN)");
  app.add_option(
         "--leader-ttl-s", serve.leader_ttl_s,
         "With PostgreSQL: the leader lease; a standby takes over this long after the leader stops")
      ->capture_default_str();
  app.add_option("--submit-rate", serve.submit_rate,
                 "Per-team limit on submit requests a second (429 past it; admins exempt; 0: none)")
      ->capture_default_str();
  app.add_option("--submit-burst", serve.submit_burst,
                 "Per-team submit burst (default: twice --submit-rate)");
  app.add_flag("--metrics-token", serve.metrics_token,
               "GET /metrics needs a token (any valid one), as the API does: its series name "
               "jobs and users (default: open to anyone who can reach it)");
  app.add_option("--tls-cert", serve.tls_cert,
                 "Serve HTTPS with this PEM certificate chain (with --tls-key)");
  app.add_option("--tls-key", serve.tls_key, "The PEM private key for --tls-cert");
  app.add_option("--history-sample-s", serve.history_sample_s,
                 "The console's cluster history (pending jobs by why, idle GPUs by why): a sample "
                 "this often, "
                 "the last 1,440 kept in memory")
      ->capture_default_str()
      ->check(CLI::Range(0.1, 86400.0));
  app.add_option(
         "--usage-sample-s", serve.usage_sample_s,
         "One usage sample per running job this often (the time series of gantry show --series)")
      ->capture_default_str()
      ->check(CLI::Range(0.1, 86400.0));
  app.add_option("--usage-retention-days", serve.usage_retention_days,
                 "Usage samples older than this are deleted")
      ->capture_default_str()
      ->check(CLI::Range(0.001, 36500.0));
  app.add_option(
         "--job-retention-days", serve.job_retention_days,
         "Ended jobs (and their output) are deleted this long after they ended; their usage "
         "stays for accounting. 0: kept forever")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 36500.0));
  app.add_option("--recent-done", serve.recent_done,
                 "Ended jobs kept in memory for ls and show; older ones are read from the store "
                 "(show, acct)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{10'000'000}));
  app.add_option("--kill-slack-s", serve.kill_slack_s,
                 "After a grace period, how long to wait for exit reports")
      ->capture_default_str();

  app.add_flag("--force-config", serve.force_config,
               "Start even when the config breaks active jobs (they are failed; see check-config)");
  std::string check_config, check_db;
  CLI::App* check = app.add_subcommand(
      "check-config", "Say which active jobs a config would break (exit 2 if any)");
  check->add_option("--config", check_config, "The cluster config to check")->required();
  check->add_option("--db", check_db, "The state database")->required();

  std::string init_db;
  CLI::App* init = app.add_subcommand("init", "Create an empty state database");
  init->add_option("--db", init_db, "State database to create")->required();

  TokenArgs token;
  CLI::App* tok = app.add_subcommand("token", "Manage API tokens (only their SHA-256 is stored)");
  tok->require_subcommand(1);
  CLI::App* create = tok->add_subcommand("create", "Create a token and print it (once)");
  create->add_option("--db", token.db, "State database")->required();
  create->add_option("--config", token.config, "Cluster config, to check queue names");
  create->add_flag("--admin", token.admin, "Cluster operations and every queue");
  create->add_flag("--agent", token.agent, "For gantry-agent");
  create->add_option("--team", token.team, "Team name");
  create->add_option("--queues", token.queues, "Queues the team submits to, comma-separated");
  create->add_option("--node", token.nodes,
                     "With --agent: the node it may speak for (several: comma-separated)");
  create->add_flag("--any-node", token.any_node,
                   "With --agent: any node (emulated swarms; not for real nodes)");
  create->add_option("--label", token.label, "Free text shown by `token list`");
  create->add_option(
      "--user", token.user,
      "The person (a Unix account name): shown as the USER of their jobs, counted in usage, and "
      "the account their jobs run as on agents with --run-as user");
  CLI::App* list = tok->add_subcommand("list", "List tokens (hash prefixes, roles, teams)");
  list->add_option("--db", token.db, "State database")->required();
  CLI::App* revoke = tok->add_subcommand("revoke", "Revoke a token by the start of its hash");
  revoke->add_option("--db", token.db, "State database")->required();
  revoke->add_option("hash", token.prefix, "At least 8 hex digits of the hash")->required();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : kExitBadInput;
  }
  if (*init) return Init(init_db);
  if (*check) return CheckConfigCommand(check_config, check_db);
  if (*create) return TokenCreate(token);
  if (*list) return TokenList(token);
  if (*revoke) return TokenRevoke(token);
  return Serve(serve);
}
