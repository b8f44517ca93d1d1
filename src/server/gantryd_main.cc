// gantryd: the Gantry control plane. Serves the HTTP/JSON API, /metrics and /healthz,
// keeps its state in SQLite, and drives the scheduling core.
//
//   gantryd init --db STATE.db
//   gantryd --config CLUSTER.yaml --db STATE.db --listen HOST:PORT [--events OUT.jsonl] [--init]
//   gantryd token create --db STATE.db (--admin | --agent | --team T --queues a,b)
//   gantryd token list --db STATE.db
//   gantryd token revoke --db STATE.db HASH_PREFIX
//
// A database is created only by `gantryd init` (or `--init`): a mistyped --db must not
// start an empty cluster whose agents, unknown to it, would then stop their jobs.
// Signals: TERM and INT stop gracefully; HUP reopens the event log (for log rotation).
// Exit status: 0 after a clean stop (SIGTERM, SIGINT), 1 on a run-time failure, 2 on bad
// input (config problems are printed as FILE:LINE: FIELD: MESSAGE).
#include <csignal>
#include <pthread.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <thread>

#include "server/auth.h"
#include "server/controller.h"
#include "server/http_api.h"
#include "server/sqlite_store.h"
#include "spec/config_reader.h"

using namespace gantry;

namespace {

constexpr int kExitRunFailure = 1;
constexpr int kExitBadInput = 2;

// Opens the database at `path`; creates it only when `create` (gantryd init, --init).
Result<std::unique_ptr<server::SqliteStore>> OpenStore(const std::string& path, bool create) {
  std::error_code ec;
  if (!create && !std::filesystem::exists(path, ec)) {
    return Error{"db", "no database at " + path + ": create one with `gantryd init --db " + path +
                           "` (or start with --init); a wrong path would otherwise start an empty cluster"};
  }
  return server::SqliteStore::Open(path);
}

int64_t WallMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
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
  std::string db, config, team, queues, label;
  bool admin = false, agent = false;
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
  if (t.role == "team" && t.queues.empty()) {
    std::cerr << "gantryd token create: --queues: a team token needs at least one queue\n";
    return kExitBadInput;
  }
  if (!a.config.empty()) {  // check the queue names when the config is at hand
    spec::Diagnostics diags;
    auto config = spec::ReadClusterConfig(a.config, diags);
    if (!config) {
      std::cerr << diags.ToString();
      return kExitBadInput;
    }
    for (const std::string& q : t.queues) {
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
  std::cout << "HASH          ROLE   TEAM         QUEUES                LABEL\n";
  for (const auto& t : *tokens) {
    std::string queues;
    for (const auto& q : t.queues) queues += (queues.empty() ? "" : ",") + q;
    std::printf("%-13s %-6s %-12s %-21s %s\n", t.hash.substr(0, 12).c_str(), t.role.c_str(),
                t.team.c_str(), queues.c_str(), t.label.c_str());
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
  if (std::filesystem::exists(db, ec)) {
    std::cerr << "gantryd init: " << db << " already exists; nothing done\n";
    return kExitBadInput;
  }
  auto store = OpenStore(db, true);
  if (!store) {
    std::cerr << "gantryd init: " << store.error().message << "\n";
    return kExitRunFailure;
  }
  std::cerr << "gantryd init: created " << db << "\n";
  return 0;
}

struct ServeArgs {
  bool init = false;
  std::string config, db, listen = "127.0.0.1:8080", events, policy = "gantry", log_dir, port_file;
  int64_t pass_interval_ms = 1000, heartbeat_ms = 2000;
  double node_timeout_s = 30, kill_slack_s = 5, lease_s = 0;
};

int Serve(const ServeArgs& a) {
  if (a.config.empty() || a.db.empty()) {
    std::cerr << "gantryd: --config and --db are required\n";
    return kExitBadInput;
  }
  spec::Diagnostics diags;
  auto config = spec::ReadClusterConfig(a.config, diags);
  if (!config) {
    std::cerr << diags.ToString();
    return kExitBadInput;
  }
  const size_t colon = a.listen.rfind(':');
  int port = -1;
  try {
    if (colon != std::string::npos) port = std::stoi(a.listen.substr(colon + 1));
  } catch (const std::exception&) {
  }
  if (port < 0 || port > 65535) {
    std::cerr << "gantryd: --listen: expected HOST:PORT, got " << a.listen << "\n";
    return kExitBadInput;
  }
  const std::string host = a.listen.substr(0, colon);
  auto store = OpenStore(a.db, a.init);
  if (!store) {
    std::cerr << "gantryd: --db: " << store.error().message << "\n";
    return kExitRunFailure;
  }
  std::ofstream events;
  if (!a.events.empty()) {
    events.open(a.events, std::ios::app | std::ios::binary);
    if (!events) {
      std::cerr << "gantryd: --events: cannot write " << a.events << "\n";
      return kExitRunFailure;
    }
  }
  server::ControllerOptions opts;
  opts.policy = a.policy;
  opts.pass_interval_ms = a.pass_interval_ms;
  opts.heartbeat_ms = a.heartbeat_ms;
  opts.node_timeout_ms = static_cast<int64_t>(a.node_timeout_s * 1000);
  opts.kill_slack_ms = static_cast<int64_t>(a.kill_slack_s * 1000);
  opts.lease_ms = static_cast<int64_t>(a.lease_s * 1000);
  opts.log_dir = a.log_dir.empty() ? a.db + ".logs" : a.log_dir;

  // SIGTERM, SIGINT and SIGHUP are taken by a thread of their own; every other thread
  // blocks them.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  std::signal(SIGPIPE, SIG_IGN);

  server::Controller controller(*config, **store, opts, a.events.empty() ? nullptr : &events, WallMs);
  if (Status s = controller.Start(); !s) {
    std::cerr << "gantryd: " << s.error().ToString() << "\n";
    return kExitRunFailure;
  }
  server::HttpApi api(controller, server::HttpOptions{});
  auto bound = api.Bind(host, port);
  if (!bound) {
    std::cerr << "gantryd: " << bound.error().message << "\n";
    controller.Stop();
    return kExitRunFailure;
  }
  if (!a.port_file.empty()) {
    std::ofstream(a.port_file + ".tmp") << *bound << "\n";
    std::rename((a.port_file + ".tmp").c_str(), a.port_file.c_str());
  }
  std::cerr << "gantryd: listening on " << host << ":" << *bound << " (cluster " << config->cluster.name()
            << ", " << config->cluster.nodes().size() << " nodes, policy " << a.policy << ")\n";
  std::thread waiter([&] {
    int sig = 0;
    while (sigwait(&stop_signals, &sig) == 0 && sig == SIGHUP) {
      // Log rotation: the event log is reopened (on the controller thread, between batches).
      if (a.events.empty()) {
        std::cerr << "gantryd: SIGHUP: no event log to reopen; nothing else is reloaded\n";
        continue;
      }
      controller.RunExclusive([&] {
        events.close();
        events.open(a.events, std::ios::app | std::ios::binary);
      });
      std::cerr << "gantryd: SIGHUP: reopened " << a.events << (events ? "" : " (FAILED: events are not written)")
                << "\n";
    }
    api.Stop();
  });
  api.Serve();
  controller.Stop();
  pthread_kill(waiter.native_handle(), SIGTERM);  // wakes the waiter if Serve ended by itself
  waiter.join();
  std::cerr << "gantryd: stopped\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"gantryd: the Gantry control plane"};
  ServeArgs serve;
  app.add_option("--config", serve.config, "Cluster config (YAML)");
  app.add_option("--db", serve.db, "State database (SQLite; made by `gantryd init`)");
  app.add_flag("--init", serve.init, "Create the database when it does not exist");
  app.add_option("--listen", serve.listen, "HOST:PORT to serve on (port 0: any free port)")->capture_default_str();
  app.add_option("--events", serve.events, "Append the event log (JSON Lines) here");
  app.add_option("--policy", serve.policy, "Scheduling policy")->capture_default_str();
  app.add_option("--log-dir", serve.log_dir, "Where job output uploaded by agents is kept (default: DB.logs)");
  app.add_option("--port-file", serve.port_file, "Write the bound port here once listening");
  app.add_option("--pass-interval-ms", serve.pass_interval_ms, "Scheduling pass timer")->capture_default_str();
  app.add_option("--heartbeat-ms", serve.heartbeat_ms, "Heartbeat interval agents are told to use")
      ->capture_default_str();
  app.add_option("--node-timeout-s", serve.node_timeout_s,
                 "An agent silent this long: its node is down, its jobs requeued")
      ->capture_default_str();
  app.add_option("--lease-s", serve.lease_s,
                 "Agents cut off this long kill their jobs (default: 60% of the node timeout)");
  app.add_option("--kill-slack-s", serve.kill_slack_s,
                 "After a grace period, how long to wait for exit reports")
      ->capture_default_str();

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
  create->add_option("--label", token.label, "Free text shown by `token list`");
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
  if (*create) return TokenCreate(token);
  if (*list) return TokenList(token);
  if (*revoke) return TokenRevoke(token);
  return Serve(serve);
}
