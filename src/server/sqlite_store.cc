#include "server/sqlite_store.h"

#include <sqlite3.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "base/clock.h"

namespace gantry::server {

namespace {

// 2: tokens.username, runs.username; 3: runs' usage; 4: usage_samples; 5: jobs.ended_ms;
// 6: cluster_history
constexpr int kSchemaVersion = 7;

constexpr const char* kSchema = R"sql(
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS jobs (
  seq INTEGER PRIMARY KEY,
  name TEXT NOT NULL UNIQUE,
  team TEXT NOT NULL,
  queue TEXT NOT NULL,
  active INTEGER NOT NULL,
  idem_key TEXT,
  idem_hash TEXT,
  doc TEXT NOT NULL,
  ended_ms INTEGER);
CREATE UNIQUE INDEX IF NOT EXISTS jobs_idem ON jobs (team, idem_key) WHERE idem_key IS NOT NULL;
CREATE INDEX IF NOT EXISTS jobs_active ON jobs (active, seq);
CREATE TABLE IF NOT EXISTS nodes (name TEXT PRIMARY KEY, doc TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS runs (
  job_seq INTEGER NOT NULL,
  run INTEGER NOT NULL,
  rank INTEGER NOT NULL,
  queue TEXT NOT NULL,
  model TEXT NOT NULL,
  gpus REAL NOT NULL,
  start_ms INTEGER NOT NULL,
  end_ms INTEGER NOT NULL,
  username TEXT NOT NULL DEFAULT '',
  busy_gpu_ms REAL NOT NULL DEFAULT 0,
  reported_gpu_ms REAL NOT NULL DEFAULT 0,
  vram_peak INTEGER NOT NULL DEFAULT 0,
  fit_gpus REAL NOT NULL DEFAULT -1,
  PRIMARY KEY (job_seq, run, rank));
CREATE INDEX IF NOT EXISTS runs_time ON runs (start_ms);
CREATE TABLE IF NOT EXISTS tokens (
  hash TEXT PRIMARY KEY,
  role TEXT NOT NULL,
  team TEXT NOT NULL,
  queues TEXT NOT NULL,
  label TEXT NOT NULL,
  created_ms INTEGER NOT NULL,
  username TEXT NOT NULL DEFAULT '');
CREATE TABLE IF NOT EXISTS sessions (
  hash TEXT PRIMARY KEY,
  token_hash TEXT NOT NULL,
  expires_ms INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS usage_samples (
  job_seq INTEGER NOT NULL,
  run INTEGER NOT NULL,
  t_ms INTEGER NOT NULL,
  gpus REAL NOT NULL,
  util REAL NOT NULL,
  vram_peak INTEGER NOT NULL,
  PRIMARY KEY (job_seq, t_ms, run)) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS usage_samples_time ON usage_samples (t_ms);
CREATE TABLE IF NOT EXISTS cluster_history (t_ms INTEGER PRIMARY KEY, sample TEXT NOT NULL);
)sql";

// A prepared statement. Bind indexes are 1-based. With a cache (the store's), it is
// prepared once per SQL text (the literal's address) and reset for the next use instead of
// finalized: preparing parsed the SQL at every call, a tenth of gantryd's time on a submit
// (the parser's allocations included). A statement already in use (a nested call) gets one
// of its own.
class Stmt {
 public:
  Stmt(sqlite3* db, const char* sql) : db_(db) {
    rc_ = sqlite3_prepare_v2(db, sql, -1, &s_, nullptr);
  }
  Stmt(SqliteStore::StmtCache& cache, sqlite3* db, const char* sql) : db_(db) {
    SqliteStore::CachedStmt& c = cache[sql];
    if (c.in_use) {
      rc_ = sqlite3_prepare_v2(db, sql, -1, &s_, nullptr);
      return;
    }
    if (!c.stmt) rc_ = sqlite3_prepare_v2(db, sql, -1, &c.stmt, nullptr);
    s_ = c.stmt;
    cached_ = &c;
    c.in_use = true;
  }
  ~Stmt() {
    if (!cached_) {
      sqlite3_finalize(s_);
      return;
    }
    sqlite3_reset(s_);
    sqlite3_clear_bindings(s_);
    cached_->in_use = false;
  }
  Stmt(const Stmt&) = delete;
  Stmt& operator=(const Stmt&) = delete;

  Stmt& Bind(int i, const std::string& v) {
    Check(sqlite3_bind_text(s_, i, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT));
    return *this;
  }
  Stmt& BindOrNull(int i, const std::string& v) {
    if (v.empty()) {
      Check(sqlite3_bind_null(s_, i));
      return *this;
    }
    return Bind(i, v);
  }
  Stmt& Bind(int i, int64_t v) {
    Check(sqlite3_bind_int64(s_, i, v));
    return *this;
  }
  Stmt& Bind(int i, double v) {
    Check(sqlite3_bind_double(s_, i, v));
    return *this;
  }
  // SQLITE_ROW: true; SQLITE_DONE: false; an error sets error().
  bool Step() {
    if (rc_ != SQLITE_OK) return false;
    int rc = sqlite3_step(s_);
    if (rc == SQLITE_ROW) return true;
    if (rc != SQLITE_DONE) rc_ = rc;
    return false;
  }
  std::string Text(int col) const {
    const unsigned char* t = sqlite3_column_text(s_, col);
    return t ? std::string(reinterpret_cast<const char*>(t),
                           static_cast<size_t>(sqlite3_column_bytes(s_, col)))
             : std::string();
  }
  int64_t Int(int col) const { return sqlite3_column_int64(s_, col); }
  bool Null(int col) const { return sqlite3_column_type(s_, col) == SQLITE_NULL; }
  double Real(int col) const { return sqlite3_column_double(s_, col); }
  Status status() const {
    if (rc_ == SQLITE_OK) return Ok{};
    return Error{"store", std::string("sqlite: ") + sqlite3_errmsg(db_)};
  }

 private:
  void Check(int rc) {
    if (rc != SQLITE_OK && rc_ == SQLITE_OK) rc_ = rc;
  }
  sqlite3* db_;
  sqlite3_stmt* s_ = nullptr;
  int rc_ = SQLITE_OK;
  SqliteStore::CachedStmt* cached_ = nullptr;
};

Status Run(Stmt& s) {
  s.Step();
  return s.status();
}

StoredJob JobFrom(const Stmt& s) {
  StoredJob j;
  j.seq = s.Int(0);
  j.name = s.Text(1);
  j.team = s.Text(2);
  j.queue = s.Text(3);
  j.active = s.Int(4) != 0;
  j.idem_key = s.Text(5);
  j.idem_hash = s.Text(6);
  j.doc = s.Text(7);
  j.ended_ms = s.Null(8) ? -1 : s.Int(8);
  return j;
}

StoredToken TokenFrom(const Stmt& s) {
  StoredToken t;
  t.hash = s.Text(0);
  t.role = s.Text(1);
  t.team = s.Text(2);
  auto q = nlohmann::json::parse(s.Text(3), nullptr, false);
  if (q.is_array()) {
    for (const auto& e : q) {
      if (e.is_string()) t.queues.push_back(e.get<std::string>());
    }
  }
  t.label = s.Text(4);
  t.created_ms = s.Int(5);
  t.user = s.Text(6);
  return t;
}

}  // namespace

Result<std::unique_ptr<SqliteStore>> SqliteStore::Open(const std::string& path) {
  sqlite3* db = nullptr;
  int rc = sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nullptr);
  if (rc != SQLITE_OK) {
    std::string msg = db ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
    sqlite3_close(db);
    return Error{"db", "cannot open " + path + ": " + msg};
  }
  std::unique_ptr<SqliteStore> store(new SqliteStore(db));
  store->path_ = path;
  sqlite3_busy_timeout(db, 5000);  // `gantryd token create` may write while gantryd runs
  // WAL: readers never block the writer; FULL: the log is synced at every commit, so an
  // id handed out is on disk.
  for (const char* pragma :
       {"PRAGMA journal_mode=WAL", "PRAGMA synchronous=FULL", "PRAGMA foreign_keys=ON"}) {
    if (Status s = store->Exec(pragma); !s) return Error{"db", path + ": " + s.error().message};
  }
  if (Status s = store->Exec(kSchema); !s) return Error{"db", path + ": " + s.error().message};
  auto version = store->GetMeta("schema_version");
  if (!version) return version.error();
  if (!*version) {
    if (Status s = store->SetMeta("schema_version", std::to_string(kSchemaVersion)); !s) {
      return s.error();
    }
  } else if (std::stoi(**version) > kSchemaVersion) {
    return Error{"db", path + ": written by a newer gantryd (schema " + **version + ")"};
  } else if (const int old = std::stoi(**version); old < kSchemaVersion) {
    // Upgrades in place, each from the schema before it.
    const char* steps[] = {
        "",
        // 2: tokens name a user.
        "ALTER TABLE tokens ADD COLUMN username TEXT NOT NULL DEFAULT '';"
        "ALTER TABLE runs ADD COLUMN username TEXT NOT NULL DEFAULT ''",
        // 3: what each run's workers used.
        "ALTER TABLE runs ADD COLUMN busy_gpu_ms REAL NOT NULL DEFAULT 0;"
        "ALTER TABLE runs ADD COLUMN reported_gpu_ms REAL NOT NULL DEFAULT 0;"
        "ALTER TABLE runs ADD COLUMN vram_peak INTEGER NOT NULL DEFAULT 0;"
        "ALTER TABLE runs ADD COLUMN fit_gpus REAL NOT NULL DEFAULT -1",
        // 4: usage_samples, made by kSchema's CREATE ... IF NOT EXISTS, which runs first.
        "",
        // 5: when each job ended (retention); jobs that had ended count from the upgrade.
        // (kSchema made the column where it made the table.)
        "",
        // 6: cluster_history, made by kSchema.
        "",
        // 7: sessions, made by kSchema.
        ""};
    for (int v = std::max(old, 1) + 1; v <= kSchemaVersion; ++v) {
      Status s = store->Exec(steps[v - 1]);
      if (s && v == 5 && !store->HasColumn("jobs", "ended_ms")) {
        s = store->Exec("ALTER TABLE jobs ADD COLUMN ended_ms INTEGER");
      }
      if (s && v == 5) {
        s = store->Exec(
            "UPDATE jobs SET ended_ms = CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER) "
            "WHERE active = 0 AND ended_ms IS NULL");
      }
      if (!s)
        return Error{
            "db", path + ": upgrading to schema " + std::to_string(v) + ": " + s.error().message};
    }
    if (Status s = store->SetMeta("schema_version", std::to_string(kSchemaVersion)); !s)
      return s.error();
  }
  // After the upgrades: the column is new in schema 5.
  if (Status s = store->Exec(
          "CREATE INDEX IF NOT EXISTS jobs_ended ON jobs (ended_ms) WHERE ended_ms IS NOT NULL");
      !s) {
    return Error{"db", path + ": " + s.error().message};
  }
  return store;
}

struct SqliteStore::Checkpointer {
  std::mutex mu;
  std::condition_variable cv;
  bool stop = false;
  std::thread thread;
};

SqliteStore::SqliteStore(sqlite3* db) : db_(db) {}

Status SqliteStore::StartCheckpointer() {
  if (checkpointer_) return Ok{};
  sqlite3* db = nullptr;
  if (sqlite3_open_v2(path_.c_str(), &db, SQLITE_OPEN_READWRITE, nullptr) != SQLITE_OK) {
    std::string msg = db ? sqlite3_errmsg(db) : "cannot open";
    sqlite3_close(db);
    return Error{"db", "checkpointer: cannot open " + path_ + ": " + msg};
  }
  sqlite3_busy_timeout(db, 1000);
  if (Status s = Exec("PRAGMA wal_autocheckpoint=0"); !s) {
    sqlite3_close(db);
    return s;
  }
  checkpointer_ = std::make_unique<Checkpointer>();
  checkpointer_->thread = std::thread([c = checkpointer_.get(), db] {
    std::unique_lock lk(c->mu);
    while (!c->cv.wait_for(lk, std::chrono::milliseconds(200), [c] { return c->stop; })) {
      lk.unlock();
      // PASSIVE: copies what no reader still needs, never waits for the writer or blocks it.
      int log = 0, done = 0;
      sqlite3_wal_checkpoint_v2(db, nullptr, SQLITE_CHECKPOINT_PASSIVE, &log, &done);
      lk.lock();
    }
    sqlite3_close(db);
  });
  return Ok{};
}

SqliteStore::~SqliteStore() {
  if (checkpointer_) {
    {
      std::lock_guard lk(checkpointer_->mu);
      checkpointer_->stop = true;
    }
    checkpointer_->cv.notify_all();
    checkpointer_->thread.join();
  }
  for (auto& [sql, c] : stmts_) sqlite3_finalize(c.stmt);
  sqlite3_close(db_);
}

Status SqliteStore::ExecCached(const char* sql) {
  Stmt s(stmts_, db_, sql);
  s.Step();
  return s.status();
}

Status SqliteStore::Exec(const char* sql) {
  char* err = nullptr;
  if (sqlite3_exec(db_, sql, nullptr, nullptr, &err) != SQLITE_OK) {
    std::string msg = err ? err : "unknown error";
    sqlite3_free(err);
    return Error{"store", "sqlite: " + msg};
  }
  return Ok{};
}

bool SqliteStore::HasColumn(const char* table, const char* column) {
  Stmt s(stmts_, db_, "SELECT 1 FROM pragma_table_info(?) WHERE name = ?");
  s.Bind(1, std::string(table)).Bind(2, std::string(column));
  return s.Step();
}

bool SqliteStore::InTransaction() const { return sqlite3_get_autocommit(db_) == 0; }

template <typename F>
Status SqliteStore::Write(F&& write) {
  if (epoch_ == 0 || InTransaction()) return write();
  if (Status s = Begin(); !s) return s;
  if (Status s = write(); !s) {
    Rollback();
    return s;
  }
  return Commit();
}

// IMMEDIATE: take the write lock at the start, so a concurrent `gantryd token create`
// waits (busy timeout) instead of failing the commit. The lock is also the fence: no
// other connection can move the lease epoch until this transaction ends.
Status SqliteStore::Begin() {
  if (Status s = ExecCached("BEGIN IMMEDIATE"); !s) return s;
  if (epoch_ == 0) return Ok{};
  auto lease = Leader();
  if (!lease) {
    Rollback();
    return lease.error();
  }
  if (!*lease || (*lease)->epoch != epoch_) {
    Rollback();
    return DeposedError(*lease, epoch_);
  }
  return Ok{};
}

Status SqliteStore::Commit() { return ExecCached("COMMIT"); }
void SqliteStore::Rollback() { (void)ExecCached("ROLLBACK"); }

Result<std::optional<std::string>> SqliteStore::GetMeta(const std::string& key) {
  Stmt s(stmts_, db_, "SELECT value FROM meta WHERE key = ?");
  s.Bind(1, key);
  std::optional<std::string> v;
  if (s.Step()) v = s.Text(0);
  if (Status st = s.status(); !st) return st.error();
  return v;
}

Status SqliteStore::SetMeta(const std::string& key, const std::string& value) {
  return Write([&] {
    Stmt s(stmts_, db_, "INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)");
    s.Bind(1, key).Bind(2, value);
    return Run(s);
  });
}

Status SqliteStore::PutJob(const StoredJob& j) {
  return Write([&] {
    Stmt s(stmts_, db_,
           "INSERT OR REPLACE INTO jobs (seq, name, team, queue, active, idem_key, idem_hash, doc, "
           "ended_ms) "
           "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)");
    s.Bind(1, j.seq).Bind(2, j.name).Bind(3, j.team).Bind(4, j.queue);
    s.Bind(5, int64_t{j.active ? 1 : 0}).BindOrNull(6, j.idem_key).BindOrNull(7, j.idem_hash);
    s.Bind(8, j.doc);
    if (j.ended_ms >= 0) {
      s.Bind(9, j.ended_ms);
    } else {
      s.BindOrNull(9, "");
    }
    return Run(s);
  });
}

Result<std::vector<StoredJob>> SqliteStore::LoadJobs(int64_t recent_done) {
  std::vector<StoredJob> out;
  static const std::string sql =
      std::string("SELECT ") + kJobColumns +
      " FROM jobs WHERE active = 1 OR seq IN (SELECT seq FROM jobs WHERE active = 0 "
      "ORDER BY seq DESC LIMIT ?) ORDER BY seq";
  Stmt s(stmts_, db_, sql.c_str());
  s.Bind(1, recent_done);
  while (s.Step()) out.push_back(JobFrom(s));
  if (Status st = s.status(); !st) return st.error();
  return out;
}

Result<std::optional<StoredJob>> SqliteStore::FindJob(const std::string& name) {
  static const std::string sql = std::string("SELECT ") + kJobColumns + " FROM jobs WHERE name = ?";
  Stmt s(stmts_, db_, sql.c_str());
  s.Bind(1, name);
  std::optional<StoredJob> j;
  if (s.Step()) j = JobFrom(s);
  if (Status st = s.status(); !st) return st.error();
  return j;
}

Result<std::vector<StoredJob>> SqliteStore::EndedJobs(int64_t from_ms, int64_t limit) {
  static const std::string sql =
      std::string("SELECT ") + kJobColumns +
      " FROM jobs WHERE ended_ms >= ? AND active = 0 ORDER BY seq LIMIT ?";
  Stmt s(stmts_, db_, sql.c_str());
  s.Bind(1, from_ms).Bind(2, limit);
  std::vector<StoredJob> out;
  while (s.Step()) out.push_back(JobFrom(s));
  if (Status st = s.status(); !st) return st.error();
  return out;
}

Result<std::optional<StoredJob>> SqliteStore::FindIdempotent(const std::string& team,
                                                             const std::string& key) {
  static const std::string sql =
      std::string("SELECT ") + kJobColumns + " FROM jobs WHERE team = ? AND idem_key = ?";
  Stmt s(stmts_, db_, sql.c_str());
  s.Bind(1, team).Bind(2, key);
  std::optional<StoredJob> j;
  if (s.Step()) j = JobFrom(s);
  if (Status st = s.status(); !st) return st.error();
  return j;
}

Result<int64_t> SqliteStore::MaxJobSeq() {
  Stmt s(stmts_, db_,
         "SELECT MAX(COALESCE((SELECT MAX(seq) FROM jobs), 0), "
         "COALESCE((SELECT CAST(value AS INTEGER) FROM meta WHERE key = 'purged_seq'), 0))");
  int64_t v = 0;
  if (s.Step()) v = s.Int(0);
  if (Status st = s.status(); !st) return st.error();
  return v;
}

Result<std::vector<int64_t>> SqliteStore::PurgeJobs(int64_t ended_before_ms, int64_t limit) {
  std::vector<int64_t> seqs;
  Status st = Write([&] {
    Stmt s(stmts_, db_,
           "DELETE FROM jobs WHERE seq IN (SELECT seq FROM jobs WHERE ended_ms < ? "
           "ORDER BY ended_ms LIMIT ?) RETURNING seq");
    s.Bind(1, ended_before_ms).Bind(2, limit);
    while (s.Step()) seqs.push_back(s.Int(0));
    if (Status r = s.status(); !r || seqs.empty()) return r;
    // The highest seq purged, so that MaxJobSeq never goes back.
    Stmt m(stmts_, db_,
           "INSERT INTO meta (key, value) VALUES ('purged_seq', ?) ON CONFLICT (key) DO UPDATE SET "
           "value = MAX(CAST(value AS INTEGER), CAST(excluded.value AS INTEGER))");
    m.Bind(1, std::to_string(*std::max_element(seqs.begin(), seqs.end())));
    return Run(m);
  });
  if (!st) return st.error();
  return seqs;
}

Status SqliteStore::PutNode(const StoredNode& n) {
  return Write([&] {
    Stmt s(stmts_, db_, "INSERT OR REPLACE INTO nodes (name, doc) VALUES (?, ?)");
    s.Bind(1, n.name).Bind(2, n.doc);
    return Run(s);
  });
}

Result<std::vector<StoredNode>> SqliteStore::LoadNodes() {
  Stmt s(stmts_, db_, "SELECT name, doc FROM nodes ORDER BY name");
  std::vector<StoredNode> out;
  while (s.Step()) out.push_back(StoredNode{s.Text(0), s.Text(1)});
  if (Status st = s.status(); !st) return st.error();
  return out;
}

Status SqliteStore::StartRun(const StoredRun& r) {
  return Write([&] {
    Stmt s(stmts_, db_,
           "INSERT OR REPLACE INTO runs (job_seq, run, rank, queue, model, gpus, start_ms, end_ms, "
           "username) "
           "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)");
    s.Bind(1, r.job_seq).Bind(2, int64_t{r.run}).Bind(3, int64_t{r.rank}).Bind(4, r.queue);
    s.Bind(5, r.model).Bind(6, r.gpus).Bind(7, r.start_ms).Bind(8, r.end_ms).Bind(9, r.user);
    return Run(s);
  });
}

Status SqliteStore::EndRun(int64_t job_seq, int run, int64_t end_ms) {
  return Write([&] {
    Stmt s(stmts_, db_, "UPDATE runs SET end_ms = ? WHERE job_seq = ? AND run = ? AND end_ms < 0");
    s.Bind(1, end_ms).Bind(2, job_seq).Bind(3, int64_t{run});
    return Run(s);
  });
}

Status SqliteStore::SetRunUsage(const StoredRun& r) {
  return Write([&] {
    Stmt s(stmts_, db_,
           "UPDATE runs SET busy_gpu_ms = ?, reported_gpu_ms = ?, vram_peak = ?, fit_gpus = ? "
           "WHERE job_seq = ? AND run = ? AND rank = ?");
    s.Bind(1, r.busy_gpu_ms).Bind(2, r.reported_gpu_ms).Bind(3, r.vram_peak).Bind(4, r.fit_gpus);
    s.Bind(5, r.job_seq).Bind(6, int64_t{r.run}).Bind(7, int64_t{r.rank});
    return Run(s);
  });
}

Status SqliteStore::AddUsageSample(const UsageSample& u) {
  return Write([&] {
    Stmt s(stmts_, db_, "INSERT OR REPLACE INTO usage_samples VALUES (?, ?, ?, ?, ?, ?)");
    s.Bind(1, u.job_seq)
        .Bind(2, int64_t{u.run})
        .Bind(3, u.t_ms)
        .Bind(4, u.gpus)
        .Bind(5, u.util)
        .Bind(6, u.vram_peak);
    return Run(s);
  });
}

Result<std::vector<UsageSample>> SqliteStore::UsageSamples(int64_t job_seq) {
  Stmt s(stmts_, db_,
         "SELECT job_seq, run, t_ms, gpus, util, vram_peak FROM usage_samples WHERE job_seq = ? "
         "ORDER BY t_ms, run");
  s.Bind(1, job_seq);
  std::vector<UsageSample> out;
  while (s.Step()) {
    out.push_back(UsageSample{s.Int(0), static_cast<int>(s.Int(1)), s.Int(2), s.Real(3), s.Real(4),
                              s.Int(5)});
  }
  if (Status st = s.status(); !st) return st.error();
  return out;
}

Status SqliteStore::AddClusterSample(int64_t t_ms, const std::string& sample) {
  return Write([&] {
    Stmt s(stmts_, db_, "INSERT OR REPLACE INTO cluster_history VALUES (?, ?)");
    s.Bind(1, t_ms).Bind(2, sample);
    return Run(s);
  });
}

Result<std::vector<std::pair<int64_t, std::string>>> SqliteStore::ClusterSamples(int64_t limit) {
  Stmt s(stmts_, db_,
         "SELECT t_ms, sample FROM (SELECT t_ms, sample FROM cluster_history ORDER BY t_ms DESC "
         "LIMIT ?) ORDER BY t_ms");
  s.Bind(1, limit);
  std::vector<std::pair<int64_t, std::string>> out;
  while (s.Step()) out.emplace_back(s.Int(0), s.Text(1));
  if (Status st = s.status(); !st) return st.error();
  return out;
}

Status SqliteStore::PruneClusterSamples(int64_t before_ms) {
  return Write([&] {
    Stmt s(stmts_, db_, "DELETE FROM cluster_history WHERE t_ms < ?");
    s.Bind(1, before_ms);
    return Run(s);
  });
}

Result<int64_t> SqliteStore::PruneUsageSamples(int64_t before_ms) {
  int64_t n = 0;
  Status st = Write([&] {
    Stmt s(stmts_, db_, "DELETE FROM usage_samples WHERE t_ms < ?");
    s.Bind(1, before_ms);
    Status r = Run(s);
    n = sqlite3_changes(db_);
    return r;
  });
  if (!st) return st.error();
  return n;
}

Result<std::vector<StoredRun>> SqliteStore::Runs(int64_t from_ms, int64_t to_ms) {
  Stmt s(stmts_, db_,
         "SELECT job_seq, run, rank, queue, model, gpus, start_ms, end_ms, username, busy_gpu_ms, "
         "reported_gpu_ms, vram_peak, fit_gpus FROM runs "
         "WHERE start_ms < ? AND (end_ms < 0 OR end_ms > ?) ORDER BY job_seq, run, rank");
  s.Bind(1, to_ms).Bind(2, from_ms);
  std::vector<StoredRun> out;
  while (s.Step()) {
    StoredRun r;
    r.job_seq = s.Int(0);
    r.run = static_cast<int>(s.Int(1));
    r.rank = static_cast<int>(s.Int(2));
    r.queue = s.Text(3);
    r.model = s.Text(4);
    r.gpus = s.Real(5);
    r.start_ms = s.Int(6);
    r.end_ms = s.Int(7);
    r.user = s.Text(8);
    r.busy_gpu_ms = s.Real(9);
    r.reported_gpu_ms = s.Real(10);
    r.vram_peak = s.Int(11);
    r.fit_gpus = s.Real(12);
    out.push_back(std::move(r));
  }
  if (Status st = s.status(); !st) return st.error();
  return out;
}

Status SqliteStore::AddToken(const StoredToken& t) {
  return Write([&] {
    Stmt s(stmts_, db_,
           "INSERT INTO tokens (hash, role, team, queues, label, created_ms, username) "
           "VALUES (?, ?, ?, ?, ?, ?, ?)");
    s.Bind(1, t.hash).Bind(2, t.role).Bind(3, t.team).Bind(4, nlohmann::json(t.queues).dump());
    s.Bind(5, t.label).Bind(6, t.created_ms).Bind(7, t.user);
    return Run(s);
  });
}

Result<std::optional<StoredToken>> SqliteStore::FindToken(const std::string& hash) {
  Stmt s(stmts_, db_,
         "SELECT hash, role, team, queues, label, created_ms, username FROM tokens WHERE hash = ?");
  s.Bind(1, hash);
  std::optional<StoredToken> t;
  if (s.Step()) t = TokenFrom(s);
  if (Status st = s.status(); !st) return st.error();
  return t;
}

Result<std::vector<StoredToken>> SqliteStore::ListTokens() {
  Stmt s(stmts_, db_,
         "SELECT hash, role, team, queues, label, created_ms, username FROM tokens ORDER BY "
         "created_ms");
  std::vector<StoredToken> out;
  while (s.Step()) out.push_back(TokenFrom(s));
  if (Status st = s.status(); !st) return st.error();
  return out;
}

Status SqliteStore::DeleteToken(const std::string& hash_prefix) {
  if (hash_prefix.size() < 8) return Error{"hash", "give at least 8 hex digits of the hash"};
  return Write([&]() -> Status {
    Stmt count(stmts_, db_, "SELECT COUNT(*) FROM tokens WHERE substr(hash, 1, ?) = ?");
    count.Bind(1, static_cast<int64_t>(hash_prefix.size())).Bind(2, hash_prefix);
    int64_t n = count.Step() ? count.Int(0) : 0;
    if (Status st = count.status(); !st) return st;
    if (n != 1) {
      return Error{"hash", n == 0 ? "no token hash starts with " + hash_prefix
                                  : "more than one token hash starts with " + hash_prefix};
    }
    Stmt s(stmts_, db_, "DELETE FROM tokens WHERE substr(hash, 1, ?) = ?");
    s.Bind(1, static_cast<int64_t>(hash_prefix.size())).Bind(2, hash_prefix);
    return Run(s);
  });
}

Status SqliteStore::AddSession(const std::string& hash, const std::string& token_hash,
                               int64_t expires_ms) {
  return Write([&] {
    Stmt s(stmts_, db_, "INSERT INTO sessions (hash, token_hash, expires_ms) VALUES (?, ?, ?)");
    s.Bind(1, hash).Bind(2, token_hash).Bind(3, expires_ms);
    return Run(s);
  });
}

Result<std::optional<std::pair<std::string, int64_t>>> SqliteStore::FindSession(
    const std::string& hash) {
  Stmt s(stmts_, db_, "SELECT token_hash, expires_ms FROM sessions WHERE hash = ?");
  s.Bind(1, hash);
  std::optional<std::pair<std::string, int64_t>> found;
  if (s.Step()) found = std::pair(s.Text(0), s.Int(1));
  if (Status st = s.status(); !st) return st.error();
  return found;
}

Status SqliteStore::DeleteSession(const std::string& hash) {
  return Write([&] {
    Stmt s(stmts_, db_, "DELETE FROM sessions WHERE hash = ?");
    s.Bind(1, hash);
    return Run(s);
  });
}

Status SqliteStore::PruneSessions(int64_t now_ms) {
  return Write([&] {
    Stmt s(stmts_, db_, "DELETE FROM sessions WHERE expires_ms <= ?");
    s.Bind(1, now_ms);
    return Run(s);
  });
}

// ---------------------------------------------------------------- leader lease

Result<std::optional<LeaseInfo>> SqliteStore::Leader() {
  Stmt s(stmts_, db_,
         "SELECT (SELECT value FROM meta WHERE key = 'lease_holder'), "
         "(SELECT value FROM meta WHERE key = 'lease_epoch'), "
         "(SELECT value FROM meta WHERE key = 'lease_expires_ms')");
  std::optional<LeaseInfo> info;
  if (s.Step() && !s.Text(1).empty()) {
    info.emplace();
    info->holder = s.Text(0);
    info->epoch = std::strtoll(s.Text(1).c_str(), nullptr, 10);
    info->expires_in_ms = std::strtoll(s.Text(2).c_str(), nullptr, 10) - WallMs();
  }
  if (Status st = s.status(); !st) return st.error();
  return info;
}

Result<int64_t> SqliteStore::AcquireLease(const std::string& holder, int64_t ttl_ms) {
  if (Status s = CheckLeaseArgs(holder, ttl_ms); !s) return s.error();
  if (InTransaction()) return Error{"lease", "AcquireLease inside a transaction"};
  // Not Begin(): taking the lease is the one write that the old epoch must not fence.
  if (Status s = Exec("BEGIN IMMEDIATE"); !s) return s.error();
  auto lease = Leader();
  if (!lease) {
    Rollback();
    return lease.error();
  }
  const int64_t epoch = (*lease ? (*lease)->epoch : 0) + 1;
  for (const auto& [key, value] : {std::pair<const char*, std::string>{"lease_holder", holder},
                                   {"lease_epoch", std::to_string(epoch)},
                                   {"lease_expires_ms", std::to_string(WallMs() + ttl_ms)}}) {
    if (Status s = SetMeta(key, value); !s) {
      Rollback();
      return s.error();
    }
  }
  if (Status s = Commit(); !s) return s.error();
  epoch_ = epoch;
  return epoch;
}

Status SqliteStore::RenewLease(const std::string& holder, int64_t epoch, int64_t ttl_ms) {
  if (Status s = CheckLeaseArgs(holder, ttl_ms); !s) return s;
  if (InTransaction()) return Error{"lease", "RenewLease inside a transaction"};
  if (Status s = Exec("BEGIN IMMEDIATE"); !s) return s;
  auto lease = Leader();
  if (!lease) {
    Rollback();
    return lease.error();
  }
  if (!*lease || (*lease)->holder != holder || (*lease)->epoch != epoch) {
    Rollback();
    return DeposedError(*lease, epoch);
  }
  if (Status s = SetMeta("lease_expires_ms", std::to_string(WallMs() + ttl_ms)); !s) {
    Rollback();
    return s;
  }
  return Commit();
}

}  // namespace gantry::server
