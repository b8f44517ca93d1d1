#include "pg_harness.h"

#include <fcntl.h>
#include <grp.h>
#include <libpq-fe.h>
#include <pwd.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <thread>
#include <vector>

namespace gantry::server::testing {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

bool NoPostgres() {
  const char* v = std::getenv("GANTRY_NO_POSTGRES");
  return v != nullptr && std::string(v) == "1";
}

namespace {

constexpr const char* kSuperuser = "gantry";

bool Executable(const fs::path& p) { return ::access(p.c_str(), X_OK) == 0; }

bool HasServer(const fs::path& dir) {
  return Executable(dir / "initdb") && Executable(dir / "postgres");
}

Result<std::string> FindBinDir() {
  if (const char* env = std::getenv("GANTRY_PG_BINDIR"); env != nullptr && *env != '\0') {
    if (HasServer(env)) return std::string(env);
    return Error{"GANTRY_PG_BINDIR", std::string("no initdb and postgres in ") + env};
  }
  // Debian: /usr/lib/postgresql/<major>/bin; take the newest major.
  std::optional<std::pair<int, std::string>> best;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator("/usr/lib/postgresql", ec)) {
    const std::string name = entry.path().filename().string();
    const int major = std::atoi(name.c_str());
    if (major > 0 && HasServer(entry.path() / "bin") && (!best || major > best->first)) {
      best = {major, (entry.path() / "bin").string()};
    }
  }
  if (best) return best->second;
  if (const char* path = std::getenv("PATH"); path != nullptr) {
    std::stringstream dirs(path);
    std::string dir;
    while (std::getline(dirs, dir, ':')) {
      if (!dir.empty() && HasServer(dir)) return dir;
    }
  }
  return Error{
      "postgres",
      "PostgreSQL server binaries (initdb, postgres) not found in /usr/lib/postgresql/*/bin "
      "or on PATH: install postgresql-15 (scripts/setup.sh does), set GANTRY_PG_BINDIR, or "
      "set GANTRY_NO_POSTGRES=1 to skip the PostgreSQL tests"};
}

// Who runs the server: nobody to switch to unless we are root.
struct RunAs {
  bool drop = false;
  uid_t uid = 0;
  gid_t gid = 0;
  std::string name;
};

Result<RunAs> PickUser() {
  RunAs who;
  if (::geteuid() != 0) return who;
  std::vector<std::string> names;
  if (const char* env = std::getenv("GANTRY_PG_USER"); env != nullptr && *env != '\0') {
    names.push_back(env);
  } else {
    names = {"postgres", "nobody"};
  }
  for (const std::string& n : names) {
    if (const passwd* pw = ::getpwnam(n.c_str()); pw != nullptr && pw->pw_uid != 0) {
      who.drop = true;
      who.uid = pw->pw_uid;
      who.gid = pw->pw_gid;
      who.name = n;
      return who;
    }
  }
  std::string tried;
  for (const std::string& n : names) tried += (tried.empty() ? "" : ", ") + n;
  return Error{"postgres", "running as root, and no non-root user among " + tried +
                               " exists to run the server as (postgres refuses root); set "
                               "GANTRY_PG_USER to one"};
}

// fork + exec `argv` with stdout and stderr appended to `log_fd`, as `who`, in `cwd`.
// Only async-signal-safe calls between fork and exec: the test process may have threads.
Result<pid_t> Spawn(const std::vector<std::string>& argv, int log_fd, const RunAs& who,
                    const std::string& cwd, bool die_with_parent) {
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) return Error{"postgres", std::string("fork: ") + std::strerror(errno)};
  if (pid == 0) {
    auto die = [&](const char* what) {
      const char* err = std::strerror(errno);
      (void)!::write(log_fd, what, std::strlen(what));
      (void)!::write(log_fd, ": ", 2);
      (void)!::write(log_fd, err, std::strlen(err));
      (void)!::write(log_fd, "\n", 1);
      ::_exit(127);
    };
    if (who.drop) {
      if (::setgroups(0, nullptr) != 0) die("setgroups");
      if (::setgid(who.gid) != 0) die("setgid");
      if (::setuid(who.uid) != 0) die("setuid");
    }
    // After the uid change, which clears the death signal.
    if (die_with_parent) {
      if (::prctl(PR_SET_PDEATHSIG, SIGQUIT) != 0) die("prctl");
      if (::getppid() != parent) ::_exit(1);  // the parent is already gone
    }
    if (::chdir(cwd.c_str()) != 0) die("chdir");
    const int null_fd = ::open("/dev/null", O_RDONLY);
    if (null_fd >= 0) ::dup2(null_fd, 0);
    ::dup2(log_fd, 1);
    ::dup2(log_fd, 2);
    ::execv(args[0], args.data());
    die(args[0]);
  }
  return pid;
}

// waitpid with a deadline: the exit status, or nullopt if it still runs at the deadline.
std::optional<int> WaitFor(pid_t pid, Clock::duration timeout) {
  const auto deadline = Clock::now() + timeout;
  while (true) {
    int status = 0;
    const pid_t r = ::waitpid(pid, &status, WNOHANG);
    if (r == pid) return status;
    if (r < 0 && errno != EINTR) return -1;
    if (Clock::now() >= deadline) return std::nullopt;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

std::string Describe(int status) {
  if (WIFEXITED(status)) return "exit status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return std::string("signal ") + ::strsignal(WTERMSIG(status));
  return "status " + std::to_string(status);
}

std::string PercentEncode(const std::string& s) {
  static const char* kHex = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) != 0 || c == '-' || c == '_' || c == '.' || c == '~') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

}  // namespace

Result<std::unique_ptr<PgServer>> PgServer::Start() {
  auto bindir = FindBinDir();
  if (!bindir) return bindir.error();
  auto who = PickUser();
  if (!who) return who.error();

  std::unique_ptr<PgServer> server(new PgServer());
  server->bindir_ = *bindir;
  // Root's TMPDIR may sit under /root, which the server's user cannot reach.
  std::string base = "/tmp";
  if (const char* tmp = std::getenv("TMPDIR"); tmp != nullptr && *tmp != '\0' && !who->drop) {
    base = tmp;
  }
  std::string templ = base + "/gantry-pg-XXXXXX";
  if (::mkdtemp(templ.data()) == nullptr) {
    return Error{"postgres", "mkdtemp " + templ + ": " + std::strerror(errno)};
  }
  server->dir_ = templ;
  // 0711: the server's user owns it; anyone (the root test, another user) may reach the
  // socket inside; data/ is 0700 (initdb).
  if (who->drop && ::chown(templ.c_str(), who->uid, who->gid) != 0) {
    return Error{"postgres", "chown " + templ + " to " + who->name + ": " + std::strerror(errno)};
  }
  ::chmod(templ.c_str(), 0711);

  const std::string log = server->dir_ + "/postgres.log";
  const int log_fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (log_fd < 0) return Error{"postgres", "open " + log + ": " + std::strerror(errno)};
  struct CloseFd {
    int fd;
    ~CloseFd() { ::close(fd); }
  } close_log{log_fd};
  const std::string as = who->drop ? " (as user " + who->name + ")" : "";

  // --no-sync: the data directory is thrown away; --auth=trust: only reachable through
  // the socket in our own directory.
  auto initdb = Spawn({server->bindir_ + "/initdb", "-D", server->dir_ + "/data", "-U", kSuperuser,
                       "--auth=trust", "--no-locale", "-E", "UTF8", "--no-sync"},
                      log_fd, *who, server->dir_, false);
  if (!initdb) return initdb.error();
  const std::optional<int> done = WaitFor(*initdb, std::chrono::seconds(120));
  if (!done) {
    ::kill(*initdb, SIGKILL);
    ::waitpid(*initdb, nullptr, 0);
    return Error{"postgres", "initdb" + as + " took over 120 s:\n" + server->LogTail()};
  }
  if (*done != 0) {
    return Error{"postgres",
                 "initdb" + as + " failed (" + Describe(*done) + "):\n" + server->LogTail()};
  }

  if (Status s = server->Launch(); !s) return s.error();
  return server;
}

Status PgServer::Launch() {
  auto who = PickUser();
  if (!who) return who.error();
  const std::string as = who->drop ? " (as user " + who->name + ")" : "";
  const std::string log = dir_ + "/postgres.log";
  const int log_fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (log_fd < 0) return Error{"postgres", "open " + log + ": " + std::strerror(errno)};
  auto pid = Spawn({bindir_ + "/postgres", "-D", dir_ + "/data", "-k", dir_, "-c",
                    "listen_addresses=", "-p", std::to_string(port_)},
                   log_fd, *who, dir_, true);
  ::close(log_fd);
  if (!pid) return pid.error();
  pid_ = *pid;

  const std::string ping = ConnString("postgres") + " connect_timeout=2";
  const auto deadline = Clock::now() + std::chrono::seconds(60);
  while (PQping(ping.c_str()) != PQPING_OK) {
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return Error{"postgres",
                   "postgres" + as + " exited (" + Describe(status) + "):\n" + LogTail()};
    }
    if (Clock::now() >= deadline) {
      return Error{"postgres",
                   "postgres" + as + " did not accept connections within 60 s:\n" + LogTail()};
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return Ok{};
}

Status PgServer::Stop() {
  if (pid_ <= 0) return Ok{};
  ::kill(pid_, SIGINT);  // fast shutdown: roll back sessions, checkpoint, exit
  if (!WaitFor(pid_, std::chrono::seconds(10))) {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }
  pid_ = -1;
  return Ok{};
}

Status PgServer::Resume() {
  if (pid_ > 0) return Error{"postgres", "the server is running"};
  return Launch();
}

Result<PgServer*> PgServer::Shared() {
  static std::unique_ptr<PgServer> server;
  static std::optional<Error> error;
  if (server) return server.get();
  if (error) return *error;
  auto started = Start();
  if (!started) {
    error = started.error();
    return *error;
  }
  server = std::move(*started);
  return server.get();
}

PgServer::~PgServer() {
  (void)Stop();
  if (!dir_.empty()) {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
}

Result<std::string> PgServer::NewDatabase() {
  const std::string name = "gantry_" + std::to_string(next_db_++);
  PGconn* conn = PQconnectdb(ConnString("postgres").c_str());
  std::string error;
  if (PQstatus(conn) != CONNECTION_OK) {
    error = PQerrorMessage(conn);
  } else {
    PGresult* r = PQexec(conn, ("CREATE DATABASE " + name).c_str());
    if (PQresultStatus(r) != PGRES_COMMAND_OK) error = PQresultErrorMessage(r);
    PQclear(r);
  }
  PQfinish(conn);
  if (!error.empty()) return Error{"postgres", "CREATE DATABASE " + name + ": " + error};
  return name;
}

std::string PgServer::ConnString(const std::string& db) const {
  return "host=" + dir_ + " port=" + std::to_string(port_) + " user=" + kSuperuser +
         " dbname=" + db;
}

std::string PgServer::Url(const std::string& db) const {
  return std::string("postgresql://") + kSuperuser + "@" + PercentEncode(dir_) + ":" +
         std::to_string(port_) + "/" + db;
}

std::string PgServer::LogTail() const {
  std::ifstream in(dir_ + "/postgres.log");
  std::stringstream ss;
  ss << in.rdbuf();
  std::string s = ss.str();
  constexpr size_t kTail = 4000;
  return s.size() > kTail ? "..." + s.substr(s.size() - kTail) : s;
}

}  // namespace gantry::server::testing
