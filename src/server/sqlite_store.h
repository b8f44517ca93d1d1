// SqliteStore: the Store in one SQLite file, in WAL mode with synchronous=FULL, so a
// committed transaction survives a kill -9 of gantryd and a power cut.
//
// Opening creates the schema when the file is new and refuses a file written by a newer
// schema version. Thread-safety: none (one connection, one owner).
#pragma once

#include <memory>
#include <string>

#include "server/store.h"

struct sqlite3;

namespace gantry::server {

class SqliteStore final : public Store {
 public:
  // Opens or creates the database at `path`.
  static Result<std::unique_ptr<SqliteStore>> Open(const std::string& path);
  ~SqliteStore() override;

  Status Begin() override;
  Status Commit() override;
  void Rollback() override;

  Result<std::optional<std::string>> GetMeta(const std::string& key) override;
  Status SetMeta(const std::string& key, const std::string& value) override;

  Status PutJob(const StoredJob& job) override;
  Result<std::vector<StoredJob>> LoadJobs(int64_t recent_done) override;
  Result<std::optional<StoredJob>> FindJob(const std::string& name) override;
  Result<std::optional<StoredJob>> FindIdempotent(const std::string& team,
                                                  const std::string& key) override;
  Result<int64_t> MaxJobSeq() override;

  Status PutNode(const StoredNode& node) override;
  Result<std::vector<StoredNode>> LoadNodes() override;

  Status StartRun(const StoredRun& run) override;
  Status EndRun(int64_t job_seq, int run, int64_t end_ms) override;
  Result<std::vector<StoredRun>> Runs(int64_t from_ms, int64_t to_ms) override;

  Status AddToken(const StoredToken& token) override;
  Result<std::optional<StoredToken>> FindToken(const std::string& hash) override;
  Result<std::vector<StoredToken>> ListTokens() override;
  Status DeleteToken(const std::string& hash_prefix) override;

 private:
  explicit SqliteStore(sqlite3* db) : db_(db) {}
  Status Exec(const char* sql);

  sqlite3* db_;
};

}  // namespace gantry::server
