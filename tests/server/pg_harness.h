// PgServer: a throwaway PostgreSQL server for tests. Start() runs initdb into a new
// temporary directory and starts `postgres` there, listening only on a Unix socket in
// that directory (no TCP port, so nothing to collide with); the destructor stops it
// (SIGINT, a fast shutdown; SIGKILL after 10 s) by the pid it started, and deletes the
// directory. Each test takes a fresh database from it.
//
// Binaries: $GANTRY_PG_BINDIR, else the newest /usr/lib/postgresql/*/bin (Debian's
// postgresql-NN), else initdb and postgres on PATH. None found is an error saying what to
// install: CI installs postgresql-15 (scripts/setup.sh), so a missing server fails the
// tests; only GANTRY_NO_POSTGRES=1 turns them into skips (see NoPostgres()).
//
// Root: postgres refuses to run as root, so when the effective uid is 0 the server runs
// as $GANTRY_PG_USER, else `postgres` (Debian's package creates it), else `nobody`. The
// child drops to that user itself (setgroups, setgid, setuid between fork and exec; no
// runuser or sudo needed), and the directory is made under /tmp and given to that user,
// since root's own TMPDIR may not be reachable for it. The client side (the test) stays
// root and connects over the socket, which postgres creates world-accessible.
//
// The server child gets PR_SET_PDEATHSIG=SIGQUIT, so it shuts down at once if the test
// process dies without running the destructor (a crash, ctest's timeout kill).
// Thread-safety: none; create and destroy on one thread. The connection strings may be
// used from any thread.
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>

#include "base/result.h"

namespace gantry::server::testing {

// True when GANTRY_NO_POSTGRES=1: tests that need a server skip instead of failing.
bool NoPostgres();

class PgServer {
 public:
  // initdb + start, waiting until the server accepts connections. Takes about a second.
  static Result<std::unique_ptr<PgServer>> Start();
  // One server per test process, started at first use and stopped at exit. The error
  // is remembered: a second call does not retry.
  static Result<PgServer*> Shared();

  ~PgServer();
  PgServer(const PgServer&) = delete;
  PgServer& operator=(const PgServer&) = delete;

  // Creates an empty database with a new name ("gantry_1", "gantry_2", ...) and returns
  // its name.
  Result<std::string> NewDatabase();
  // libpq keyword string and URI for database `db`: the same place, two spellings.
  std::string ConnString(const std::string& db) const;
  std::string Url(const std::string& db) const;

  // A restart in two halves, for outage tests: Stop shuts the server down (fast: sessions
  // rolled back, their connections cut); Resume starts it again on the same data and
  // waits until it accepts connections.
  Status Stop();
  Status Resume();

  pid_t pid() const { return pid_; }
  const std::string& dir() const { return dir_; }
  // The server's log (stderr), for failure messages.
  std::string LogTail() const;

 private:
  PgServer() = default;
  Status Launch();  // postgres on dir_/data, waited for

  std::string dir_;  // the temporary directory: data/, the socket, postgres.log
  std::string bindir_;
  pid_t pid_ = -1;
  int port_ = 5432;  // only names the socket file (.s.PGSQL.5432)
  int next_db_ = 1;
};

}  // namespace gantry::server::testing
