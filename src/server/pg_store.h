// PgStore: the Store in a PostgreSQL database, so that a leader gantryd and its standbys
// share one durable state; a leader lease with fencing decides which of them may write.
//
// Schema and semantics are SqliteStore's (tables meta, jobs, nodes, runs, tokens, and
// leader for the lease); opening creates the schema when the database is empty (under
// an advisory lock, so gantryds starting together do not race) and refuses one written
// by a newer schema version. Commit is durable on return: the session runs with
// synchronous_commit=on. Where PostgreSQL differs from SQLite:
//   - a statement that fails inside Begin .. Commit aborts the whole transaction
//     (PostgreSQL's rule): Commit then fails and nothing of the transaction lands;
//   - PutJob replaces by seq only: a name or idempotency key that another seq has is an
//     error (SQLite's INSERT OR REPLACE would delete that other job instead);
//   - text orderings use the "C" collation, so they match SQLite's whatever the
//     database's locale.
//
// The lease is the one row of `leader` (holder, epoch, expires_at by the database's
// clock). AcquireLease locks that row (SELECT ... FOR UPDATE) to decide and bump the
// epoch. Once this store holds epoch E, Begin opens the transaction with
// `SELECT epoch FROM leader FOR KEY SHARE` and refuses unless it reads E; the row lock is
// held until Commit or Rollback, and it conflicts with AcquireLease's FOR UPDATE but not
// with RenewLease's plain UPDATE. So a takeover waits for the old leader's in-flight
// transaction to end (its writes land before the new epoch exists, and the new leader
// reads them), and after the takeover the old leader's next Begin, and every write it
// tries outside a transaction, fails with field "lease". The wait is bounded: after a
// successful AcquireLease the session's idle_in_transaction_session_timeout is the ttl,
// so a leader frozen inside a transaction is cut off by the server, and AcquireLease
// gives up (field "lease") after ttl_ms of waiting.
//
// A lost connection (the server restarted, or the network failed) fails the call in
// progress, with field "store", and a transaction open on it is gone. The next call made
// outside a transaction connects again (PQreset; at most connect_timeout, 3 s unless the
// URL says) and sets the session up as Open and AcquireLease did; Begin checks the epoch
// as always, so a store that was fenced meanwhile learns it there. gantryd rides through
// such an outage (docs/control-plane.md, "Store outages").
// Thread-safety: none (one connection, one owner). Two PgStore objects are two
// connections and may be used from two threads.
#pragma once

#include <memory>
#include <string>

#include "server/store.h"

struct pg_conn;

namespace gantry::server {

class PgRows;
class PgParams;

class PgStore final : public Store {
 public:
  // Connects to `url`: a libpq URI (postgresql://user:password@host:port/dbname?...) or a
  // keyword string (host=... dbname=...). Errors name the server and database, never the
  // password. Blocks for at most 3 s unless the URL sets connect_timeout.
  static Result<std::unique_ptr<PgStore>> Open(const std::string& url);
  ~PgStore() override;  // an open transaction is rolled back by the server

  Status Begin() override;
  Status Commit() override;
  void Rollback() override;

  Result<std::optional<std::string>> GetMeta(const std::string& key) override;
  Status SetMeta(const std::string& key, const std::string& value) override;

  Status PutJob(const StoredJob& job) override;
  Result<std::vector<StoredJob>> LoadJobs(int64_t recent_done) override;
  Result<std::optional<StoredJob>> FindJob(const std::string& name) override;
  Result<std::vector<StoredJob>> EndedJobs(int64_t from_ms, int64_t limit) override;
  Result<std::optional<StoredJob>> FindIdempotent(const std::string& team,
                                                  const std::string& key) override;
  Result<int64_t> MaxJobSeq() override;
  Result<std::vector<int64_t>> PurgeJobs(int64_t ended_before_ms, int64_t limit) override;

  Status PutNode(const StoredNode& node) override;
  Result<std::vector<StoredNode>> LoadNodes() override;

  Status StartRun(const StoredRun& run) override;
  Status EndRun(int64_t job_seq, int run, int64_t end_ms) override;
  Status SetRunUsage(const StoredRun& run) override;
  Result<std::vector<StoredRun>> Runs(int64_t from_ms, int64_t to_ms) override;
  Status AddUsageSample(const UsageSample& sample) override;
  Result<std::vector<UsageSample>> UsageSamples(int64_t job_seq) override;
  Result<int64_t> PruneUsageSamples(int64_t before_ms) override;
  Status AddClusterSample(int64_t t_ms, const std::string& sample) override;
  Result<std::vector<std::pair<int64_t, std::string>>> ClusterSamples(int64_t limit) override;
  Status PruneClusterSamples(int64_t before_ms) override;

  Status AddToken(const StoredToken& token) override;
  Result<std::optional<StoredToken>> FindToken(const std::string& hash) override;
  Result<std::vector<StoredToken>> ListTokens() override;
  Status DeleteToken(const std::string& hash_prefix) override;
  Status AddSession(const std::string& hash, const std::string& token_hash,
                    int64_t expires_ms) override;
  Result<std::optional<std::pair<std::string, int64_t>>> FindSession(
      const std::string& hash) override;
  Status DeleteSession(const std::string& hash) override;
  Status PruneSessions(int64_t now_ms) override;

  Result<int64_t> AcquireLease(const std::string& holder, int64_t ttl_ms) override;
  Status RenewLease(const std::string& holder, int64_t epoch, int64_t ttl_ms) override;
  Result<std::optional<LeaseInfo>> Leader() override;

 private:
  explicit PgStore(pg_conn* conn) : conn_(conn) {}

  // One statement with $1.. parameters (sent as text; the server infers their types).
  Result<PgRows> Query(const char* sql, const PgParams& params);
  Result<PgRows> Query(const char* sql);
  // Several statements without parameters; the result is the last one's.
  Result<PgRows> ExecScript(const std::string& sql);
  // `rows` if its statement succeeded; else the server's message, also noted in
  // tx_error_ when inside a transaction.
  Result<PgRows> Checked(PgRows rows);
  Status BeginUnfenced();
  // Outside a transaction, a connection found lost is made again and set up (the session
  // settings Open and AcquireLease made); an error when that fails.
  Status Reconnect();
  Status SetUpSession();
  // Runs `write` in the open transaction, or in a (fenced) transaction of its own.
  template <typename F>
  Status Write(F&& write);

  pg_conn* conn_;
  bool in_tx_ = false;
  std::string tx_error_;       // the first failure inside the open transaction; "" if none
  std::string last_sqlstate_;  // SQLSTATE of the last failed statement
  int64_t epoch_ = 0;          // the lease epoch this store writes under; 0: no lease, no fencing
  int64_t lease_ttl_ms_ = 0;   // since AcquireLease: the session's idle-in-transaction timeout
};

}  // namespace gantry::server
