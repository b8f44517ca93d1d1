// SqliteStore: the Store in one SQLite file, in WAL mode with synchronous=FULL, so a
// committed transaction survives a kill -9 of gantryd and a power cut.
//
// Opening creates the schema when the file is new and refuses a file written by a newer
// schema version. The leader lease lives in meta (lease_holder, lease_epoch,
// lease_expires_ms): one machine needs no election, so AcquireLease always succeeds with
// the next epoch, and a second gantryd on the same file fences the first (Begin takes
// SQLite's write lock, then checks the epoch). Thread-safety: none (one connection, one
// owner).
#pragma once

#include <memory>
#include <string>
#include <unordered_map>

#include "server/store.h"

struct sqlite3;
struct sqlite3_stmt;

namespace gantry::server {

class SqliteStore final : public Store {
 public:
  // Opens or creates the database at `path`.
  static Result<std::unique_ptr<SqliteStore>> Open(const std::string& path);
  ~SqliteStore() override;
  // gantryd's: checkpoints the WAL into the database from a thread of its own (a second
  // connection, PASSIVE, every 200 ms) instead of inside every 1,000th page's commit,
  // where it wrote and synced megabytes on the controller thread (a 50-190 ms stall of
  // /healthz at 1,024 nodes). Commits stay synced as before.
  Status StartCheckpointer();

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

  // Prepared statements kept for reuse, by the address of their SQL text (a literal, or a
  // function-local static string): sqlite_store.cc's Stmt.
  struct CachedStmt {
    sqlite3_stmt* stmt = nullptr;
    bool in_use = false;
  };
  using StmtCache = std::unordered_map<const char*, CachedStmt>;

 private:
  explicit SqliteStore(sqlite3* db);
  Status ExecCached(const char* sql);  // one statement, prepared once (BEGIN, COMMIT, ...)
  Status Exec(const char* sql);
  bool InTransaction() const;
  bool HasColumn(const char* table, const char* column);
  // Runs `write` in the open transaction, or, once this store holds a lease, in a fenced
  // transaction of its own.
  template <typename F>
  Status Write(F&& write);

  sqlite3* db_;
  std::string path_;
  StmtCache stmts_;    // finalized before the connection closes
  int64_t epoch_ = 0;  // the lease epoch this store writes under; 0: no lease, no fencing
  struct Checkpointer;
  std::unique_ptr<Checkpointer> checkpointer_;
};

}  // namespace gantry::server
