// The Store cases (store_cases.cc) on SQLite, and what only SQLite does.
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>

#include <sqlite3.h>

#include "server/sqlite_store.h"
#include "store_cases.h"

namespace gantry::server::testing {
namespace {

namespace fs = std::filesystem;

// One database file in a directory of its own, deleted with the home.
class SqliteHome final : public StoreHome {
 public:
  SqliteHome() {
    static std::atomic<int> next{0};
    dir_ = fs::temp_directory_path() /
           ("gantry-store-" + std::to_string(::getpid()) + "-" + std::to_string(next++));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  ~SqliteHome() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  Result<std::unique_ptr<Store>> Open() override {
    auto store = SqliteStore::Open((dir_ / "state.db").string());
    if (!store) return store.error();
    return std::unique_ptr<Store>(std::move(*store));
  }

 private:
  fs::path dir_;
};

INSTANTIATE_TEST_SUITE_P(Sqlite, StoreCases,
                         ::testing::Values(StoreKind{"Sqlite",
                                                     []() -> Result<std::unique_ptr<StoreHome>> {
                                                       return std::unique_ptr<StoreHome>(
                                                           new SqliteHome());
                                                     }}),
                         StoreKindName);

// Runs `sql` on the database file `db` itself, as an older gantryd left it.
void ExecRaw(const fs::path& db, const char* sql) {
  sqlite3* raw = nullptr;
  ASSERT_EQ(sqlite3_open(db.c_str(), &raw), SQLITE_OK);
  EXPECT_EQ(sqlite3_exec(raw, sql, nullptr, nullptr, nullptr), SQLITE_OK) << sqlite3_errmsg(raw);
  sqlite3_close(raw);
}

void RemoveDb(const fs::path& db) {
  fs::remove(db);
  fs::remove(db.string() + "-wal");
  fs::remove(db.string() + "-shm");
}

// A database of schema 1 (tokens and runs named no user, runs without usage) is upgraded
// in place, step by step, when opened; what it held stays.
TEST(SqliteStoreSchema, Version1IsUpgradedAndKeepsItsTokensAndRuns) {
  SqliteHome home;
  {
    auto store = home.Open();
    ASSERT_TRUE(store.ok());
  }
  const fs::path db =
      fs::temp_directory_path() / ("gantry-schema1-" + std::to_string(::getpid()) + ".db");
  fs::remove(db);
  ExecRaw(
      db,
      "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);"
      "INSERT INTO meta VALUES ('schema_version', '1');"
      "CREATE TABLE runs (job_seq INTEGER NOT NULL, run INTEGER NOT NULL, rank INTEGER NOT NULL,"
      " queue TEXT NOT NULL, model TEXT NOT NULL, gpus REAL NOT NULL, start_ms INTEGER NOT NULL,"
      " end_ms INTEGER NOT NULL, PRIMARY KEY (job_seq, run, rank));"
      "CREATE TABLE tokens (hash TEXT PRIMARY KEY, role TEXT NOT NULL, team TEXT NOT NULL,"
      " queues TEXT NOT NULL, label TEXT NOT NULL, created_ms INTEGER NOT NULL);"
      "INSERT INTO tokens VALUES ('00112233445566', 'team', 'nlp', '[\"nlp\"]', 'old', 1);"
      "INSERT INTO runs VALUES (7, 1, 0, 'nlp', 'H100-80GB', 8, 1000, 5000);");
  auto store = SqliteStore::Open(db.string());
  ASSERT_TRUE(store.ok()) << store.error().message;
  auto old = (*store)->FindToken("00112233445566");
  ASSERT_TRUE(old.ok() && old->has_value());
  EXPECT_EQ((**old).team, "nlp");
  EXPECT_EQ((**old).user, "");
  StoredToken t = **old;
  t.hash = "ffeeddccbbaa99";
  t.user = "bob";
  ASSERT_TRUE((*store)->AddToken(t).ok());
  EXPECT_EQ((**(*store)->FindToken("ffeeddccbbaa99")).user, "bob");
  auto runs = (*store)->Runs(0, 10000);
  ASSERT_TRUE(runs.ok()) << runs.error().message;
  ASSERT_EQ(runs->size(), 1u);
  EXPECT_EQ((*runs)[0].gpus, 8);
  EXPECT_EQ((*runs)[0].user, "");
  EXPECT_EQ((*runs)[0].fit_gpus, -1);  // no usage known for old runs
  StoredRun u = (*runs)[0];
  u.busy_gpu_ms = 42;
  ASSERT_TRUE((*store)->SetRunUsage(u).ok());
  EXPECT_EQ((*(*store)->Runs(0, 10000))[0].busy_gpu_ms, 42);
  EXPECT_EQ(*(*(*store)->GetMeta("schema_version")), "7");
  ASSERT_TRUE(
      (*store)->AddUsageSample(UsageSample{7, 1, 4000, 8, 0.9, 0}).ok());  // the table exists
  store->reset();
  RemoveDb(db);
}

// Schema 4 (jobs without ended_ms): jobs that had ended count as ended at the upgrade, so
// retention keeps them a full period from then; active ones are untouched.
TEST(SqliteStoreSchema, Version4JobsGetAnEndTimeAtTheUpgrade) {
  const fs::path db =
      fs::temp_directory_path() / ("gantry-schema4-" + std::to_string(::getpid()) + ".db");
  fs::remove(db);
  {
    auto store = SqliteStore::Open(db.string());
    ASSERT_TRUE(store.ok());
  }
  ExecRaw(
      db,
      "DROP INDEX jobs_ended; ALTER TABLE jobs DROP COLUMN ended_ms; DROP TABLE cluster_history;"
      "UPDATE meta SET value = '4' WHERE key = 'schema_version';"
      "INSERT INTO jobs (seq, name, team, queue, active, doc) VALUES (1, 'old', 'a', 'q', 0, '{}');"
      "INSERT INTO jobs (seq, name, team, queue, active, doc) VALUES (2, 'live', 'a', 'q', 1, "
      "'{}');");
  const int64_t before = std::chrono::duration_cast<std::chrono::milliseconds>(
                             std::chrono::system_clock::now().time_since_epoch())
                             .count();
  auto store = SqliteStore::Open(db.string());
  ASSERT_TRUE(store.ok()) << store.error().message;
  EXPECT_EQ(*(*(*store)->GetMeta("schema_version")), "7");
  auto jobs = (*store)->LoadJobs(-1);
  ASSERT_TRUE(jobs.ok()) << jobs.error().message;
  ASSERT_EQ(jobs->size(), 2u);
  EXPECT_GE((*jobs)[0].ended_ms, before - 1000);
  EXPECT_LE((*jobs)[0].ended_ms, before + 60'000);
  EXPECT_EQ((*jobs)[1].ended_ms, -1);
  EXPECT_TRUE((*store)->PurgeJobs(before - 1000, 10)->empty());
  EXPECT_EQ(*(*store)->PurgeJobs(before + 3'600'000, 10), std::vector<int64_t>{1});
  EXPECT_TRUE((*store)->AddClusterSample(1000, "{}").ok());  // schema 6's table was made
  EXPECT_TRUE((*store)->AddSession("s", "t", 1).ok());       // and schema 7's
  store->reset();
  RemoveDb(db);
}

// One machine, no election: a second gantryd on the same file takes the lease at once,
// unexpired or not, and the first can no longer write.
TEST(SqliteStoreLease, ASecondStoreTakesOverAtOnce) {
  SqliteHome home;
  auto first = home.Open();
  auto second = home.Open();
  ASSERT_TRUE(first.ok() && second.ok());
  auto e1 = (*first)->AcquireLease("a", 60000);
  ASSERT_TRUE(e1.ok());
  auto e2 = (*second)->AcquireLease("b", 60000);
  ASSERT_TRUE(e2.ok()) << e2.error().message;
  EXPECT_EQ(*e2, *e1 + 1);
  Status begin = (*first)->Begin();
  ASSERT_FALSE(begin.ok());
  EXPECT_EQ(begin.error().field, "lease");
  EXPECT_TRUE((*second)->Begin().ok());
  EXPECT_TRUE((*second)->Commit().ok());
}

}  // namespace
}  // namespace gantry::server::testing
