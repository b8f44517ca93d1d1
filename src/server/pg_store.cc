#include "server/pg_store.h"

#include <libpq-fe.h>

#include <algorithm>
#include <charconv>
#include <cstring>
#include <nlohmann/json.hpp>
#include <system_error>

namespace gantry::server {

// 2: tokens.username and runs.username; 3: runs' usage columns; 4: usage_samples.
// As SQLite's up to 6 (5: jobs.ended_ms; 6: cluster_history); 7: leader.renewed_at; 8:
// sessions (SQLite's 7).
constexpr int kPgSchemaVersion = 8;

// The schema in one implicit transaction, under an advisory lock: CREATE ... IF NOT EXISTS
// is not safe against a concurrent CREATE of the same table. Types follow the SQLite
// schema; `leader` has exactly one row, epoch 0 meaning that nobody ever took the lease.
constexpr const char* kPgSchema = R"sql(
SELECT pg_advisory_xact_lock(4775484934171223089);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS jobs (
  seq BIGINT PRIMARY KEY,
  name TEXT NOT NULL UNIQUE,
  team TEXT NOT NULL,
  queue TEXT NOT NULL,
  active BOOLEAN NOT NULL,
  idem_key TEXT,
  idem_hash TEXT,
  doc TEXT NOT NULL);
CREATE UNIQUE INDEX IF NOT EXISTS jobs_idem ON jobs (team, idem_key) WHERE idem_key IS NOT NULL;
CREATE INDEX IF NOT EXISTS jobs_active ON jobs (active, seq);
-- 5: when each job ended (retention); jobs that had ended count from the upgrade.
ALTER TABLE jobs ADD COLUMN IF NOT EXISTS ended_ms BIGINT;
UPDATE jobs SET ended_ms = (extract(epoch FROM now()) * 1000)::bigint WHERE NOT active AND ended_ms IS NULL;
CREATE INDEX IF NOT EXISTS jobs_ended ON jobs (ended_ms) WHERE ended_ms IS NOT NULL;
CREATE TABLE IF NOT EXISTS nodes (name TEXT PRIMARY KEY, doc TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS runs (
  job_seq BIGINT NOT NULL,
  run INTEGER NOT NULL,
  rank INTEGER NOT NULL,
  queue TEXT NOT NULL,
  model TEXT NOT NULL,
  gpus DOUBLE PRECISION NOT NULL,
  start_ms BIGINT NOT NULL,
  end_ms BIGINT NOT NULL,
  username TEXT NOT NULL DEFAULT '',
  PRIMARY KEY (job_seq, run, rank));
CREATE INDEX IF NOT EXISTS runs_time ON runs (start_ms);
CREATE TABLE IF NOT EXISTS tokens (
  hash TEXT PRIMARY KEY,
  role TEXT NOT NULL,
  team TEXT NOT NULL,
  queues TEXT NOT NULL,
  label TEXT NOT NULL,
  created_ms BIGINT NOT NULL);
ALTER TABLE tokens ADD COLUMN IF NOT EXISTS username TEXT NOT NULL DEFAULT '';
CREATE TABLE IF NOT EXISTS sessions (
  hash TEXT PRIMARY KEY,
  token_hash TEXT NOT NULL,
  expires_ms BIGINT NOT NULL);
ALTER TABLE runs ADD COLUMN IF NOT EXISTS username TEXT NOT NULL DEFAULT '';
ALTER TABLE runs ADD COLUMN IF NOT EXISTS busy_gpu_ms DOUBLE PRECISION NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN IF NOT EXISTS reported_gpu_ms DOUBLE PRECISION NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN IF NOT EXISTS vram_peak BIGINT NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN IF NOT EXISTS fit_gpus DOUBLE PRECISION NOT NULL DEFAULT -1;
CREATE TABLE IF NOT EXISTS usage_samples (
  job_seq BIGINT NOT NULL,
  run INTEGER NOT NULL,
  t_ms BIGINT NOT NULL,
  gpus DOUBLE PRECISION NOT NULL,
  util DOUBLE PRECISION NOT NULL,
  vram_peak BIGINT NOT NULL,
  PRIMARY KEY (job_seq, t_ms, run));
CREATE INDEX IF NOT EXISTS usage_samples_time ON usage_samples (t_ms);
CREATE TABLE IF NOT EXISTS cluster_history (t_ms BIGINT PRIMARY KEY, sample TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS leader (
  id INTEGER PRIMARY KEY CHECK (id = 1),
  holder TEXT NOT NULL,
  epoch BIGINT NOT NULL,
  expires_at TIMESTAMPTZ NOT NULL);
INSERT INTO leader (id, holder, epoch, expires_at) VALUES (1, '', 0, 'epoch')
  ON CONFLICT DO NOTHING;
-- 7: when the lease was last taken or renewed (a restarted database's grace for its leader).
ALTER TABLE leader ADD COLUMN IF NOT EXISTS renewed_at TIMESTAMPTZ;
)sql";

// A query's rows; values are text (libpq's text format), NULL reads as "".
class PgRows {
 public:
  explicit PgRows(PGresult* r) : r_(r, &PQclear) {}
  PGresult* get() const { return r_.get(); }
  int size() const { return PQntuples(r_.get()); }
  std::string Text(int row, int col) const {
    return std::string(PQgetvalue(r_.get(), row, col),
                       static_cast<size_t>(PQgetlength(r_.get(), row, col)));
  }
  bool IsNull(int row, int col) const { return PQgetisnull(r_.get(), row, col) != 0; }
  int64_t Int(int row, int col) const {
    int64_t v = 0;
    const char* s = PQgetvalue(r_.get(), row, col);
    std::from_chars(s, s + std::strlen(s), v);
    return v;
  }
  double Real(int row, int col) const {
    double v = 0;
    const char* s = PQgetvalue(r_.get(), row, col);
    std::from_chars(s, s + std::strlen(s), v);
    return v;
  }
  bool Bool(int row, int col) const { return PQgetvalue(r_.get(), row, col)[0] == 't'; }
  // The command tag, e.g. "COMMIT", or "ROLLBACK" for a COMMIT of a failed transaction.
  std::string Command() const { return PQcmdStatus(r_.get()); }
  // Rows an INSERT, UPDATE or DELETE touched.
  int64_t Affected() const {
    int64_t v = 0;
    const char* s = PQcmdTuples(r_.get());
    std::from_chars(s, s + std::strlen(s), v);
    return v;
  }

 private:
  std::unique_ptr<PGresult, decltype(&PQclear)> r_;
};

// Statement parameters, as text. Ints and doubles are written exactly (shortest
// round-trip form for doubles).
class PgParams {
 public:
  PgParams& Add(std::string v) {
    values_.push_back(std::move(v));
    null_.push_back(false);
    return *this;
  }
  // "" is stored as NULL (idempotency keys: unique only where present).
  PgParams& AddOrNull(const std::string& v) {
    if (!v.empty()) return Add(v);
    values_.emplace_back();
    null_.push_back(true);
    return *this;
  }
  PgParams& Add(int64_t v) { return Add(std::to_string(v)); }
  PgParams& Add(double v) {
    char buf[64];
    auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), v);
    return Add(std::string(buf, ec == std::errc() ? end : buf));
  }
  PgParams& AddBool(bool v) { return Add(std::string(v ? "true" : "false")); }

  int size() const { return static_cast<int>(values_.size()); }
  std::vector<const char*> Pointers() const {
    std::vector<const char*> p;
    for (size_t i = 0; i < values_.size(); ++i)
      p.push_back(null_[i] ? nullptr : values_[i].c_str());
    return p;
  }

 private:
  std::vector<std::string> values_;
  std::vector<bool> null_;
};

namespace {

std::string Trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

// user@host:port/dbname of a connection (attempt): for messages, without the password.
std::string Describe(PGconn* conn) {
  auto str = [](const char* s) { return std::string(s ? s : ""); };
  std::string host = str(PQhost(conn));
  return str(PQuser(conn)) + "@" + (host.empty() ? "localhost" : host) + ":" + str(PQport(conn)) +
         "/" + str(PQdb(conn));
}

StoredJob JobFrom(const PgRows& r, int row) {
  StoredJob j;
  j.seq = r.Int(row, 0);
  j.name = r.Text(row, 1);
  j.team = r.Text(row, 2);
  j.queue = r.Text(row, 3);
  j.active = r.Bool(row, 4);
  j.idem_key = r.Text(row, 5);
  j.idem_hash = r.Text(row, 6);
  j.doc = r.Text(row, 7);
  j.ended_ms = r.IsNull(row, 8) ? -1 : r.Int(row, 8);
  return j;
}

constexpr const char* kTokenColumns = "hash, role, team, queues, label, created_ms, username";

StoredToken TokenFrom(const PgRows& r, int row) {
  StoredToken t;
  t.hash = r.Text(row, 0);
  t.role = r.Text(row, 1);
  t.team = r.Text(row, 2);
  auto q = nlohmann::json::parse(r.Text(row, 3), nullptr, false);
  if (q.is_array()) {
    for (const auto& e : q) {
      if (e.is_string()) t.queues.push_back(e.get<std::string>());
    }
  }
  t.label = r.Text(row, 4);
  t.created_ms = r.Int(row, 5);
  t.user = r.Text(row, 6);
  return t;
}

// SQLSTATE lock_not_available: lock_timeout expired.
constexpr const char* kLockNotAvailable = "55P03";

// The lease row, with times by the database's clock. clock_timestamp(), not now(): now()
// is when the transaction began, which may be long before a lock wait ended.
constexpr const char* kLeaseColumns =
    "holder, epoch, "
    "FLOOR(EXTRACT(EPOCH FROM expires_at - clock_timestamp()) * 1000)::bigint, "
    "to_char(expires_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"')";

LeaseInfo LeaseFrom(const PgRows& r) { return LeaseInfo{r.Text(0, 0), r.Int(0, 1), r.Int(0, 2)}; }

}  // namespace

// ---------------------------------------------------------------- connection

Result<std::unique_ptr<PgStore>> PgStore::Open(const std::string& url) {
  // With expand_dbname, the URL's own settings override the defaults listed before it.
  const char* const keys[] = {"connect_timeout", "fallback_application_name", "dbname", nullptr};
  // 3 s: a reconnect (after a lost connection) blocks the controller thread that long.
  const char* const values[] = {"3", "gantryd", url.c_str(), nullptr};
  PGconn* conn = PQconnectdbParams(keys, values, 1);
  if (conn == nullptr) return Error{"db", "cannot connect to PostgreSQL: out of memory"};
  std::unique_ptr<PgStore> store(new PgStore(conn));
  if (PQstatus(conn) != CONNECTION_OK) {
    return Error{
        "db", "cannot connect to PostgreSQL " + Describe(conn) + ": " + Trim(PQerrorMessage(conn))};
  }
  // Notices (CREATE ... IF NOT EXISTS, "already exists, skipping") would go to stderr.
  PQsetNoticeProcessor(
      conn, [](void*, const char*) {}, nullptr);
  const std::string where = "PostgreSQL " + Describe(conn) + ": ";
  auto fail = [&](const Error& e) { return Error{"db", where + e.message}; };
  if (Status s = store->SetUpSession(); !s) return fail(s.error());
  // The schema's DDL only when it is missing or older: CREATE INDEX and ALTER TABLE lock
  // whole tables even when there is nothing to do, and a standby opening its store
  // beside a leader's writes deadlocked with them (found by the long chaos run).
  auto current = [&]() -> Result<int> {
    auto exists = store->Query("SELECT to_regclass('meta') IS NOT NULL");
    if (!exists) return exists.error();
    if (exists->Text(0, 0) != "t") return 0;
    auto version = store->GetMeta("schema_version");
    if (!version) return version.error();
    return *version ? std::atoi((*version)->c_str()) : 0;
  };
  auto version = current();
  if (!version) return fail(version.error());
  if (*version > kPgSchemaVersion) {
    return Error{"db",
                 where + "written by a newer gantryd (schema " + std::to_string(*version) + ")"};
  }
  if (*version < kPgSchemaVersion) {
    if (auto r = store->ExecScript(kPgSchema); !r) return fail(r.error());
    if (auto r = store->Query("INSERT INTO meta (key, value) VALUES ('schema_version', $1) "
                              "ON CONFLICT (key) DO UPDATE SET value = GREATEST(meta.value::int, "
                              "excluded.value::int)::text",
                              PgParams().Add(std::to_string(kPgSchemaVersion)));
        !r) {
      return fail(r.error());
    }
  }
  return store;
}

PgStore::~PgStore() { PQfinish(conn_); }

Status PgStore::SetUpSession() {
  std::string sql = "SET synchronous_commit = on; SET TIME ZONE 'UTC'";
  if (lease_ttl_ms_ > 0) {
    sql += "; SET idle_in_transaction_session_timeout = " + std::to_string(lease_ttl_ms_);
  }
  if (auto r = ExecScript(sql); !r) return r.error();
  return Ok{};
}

Status PgStore::Reconnect() {
  if (in_tx_ || PQstatus(conn_) == CONNECTION_OK) return Ok{};
  PQreset(conn_);
  if (PQstatus(conn_) != CONNECTION_OK) {
    return Error{"store", "postgres: cannot connect again to " + Describe(conn_) + ": " +
                              Trim(PQerrorMessage(conn_))};
  }
  return SetUpSession();
}

Result<PgRows> PgStore::Query(const char* sql, const PgParams& params) {
  if (Status s = Reconnect(); !s) return s.error();
  std::vector<const char*> values = params.Pointers();
  PgRows rows(PQexecParams(conn_, sql, params.size(), nullptr, values.data(), nullptr, nullptr, 0));
  return Checked(std::move(rows));
}

Result<PgRows> PgStore::Query(const char* sql) { return Query(sql, PgParams()); }

Result<PgRows> PgStore::ExecScript(const std::string& sql) {
  if (Status s = Reconnect(); !s) return s.error();
  return Checked(PgRows(PQexec(conn_, sql.c_str())));
}

Result<PgRows> PgStore::Checked(PgRows rows) {
  const ExecStatusType status = PQresultStatus(rows.get());  // a null result: fatal
  if (status == PGRES_COMMAND_OK || status == PGRES_TUPLES_OK) return rows;
  const char* state = rows.get() ? PQresultErrorField(rows.get(), PG_DIAG_SQLSTATE) : nullptr;
  last_sqlstate_ = state ? state : "";
  std::string message = Trim(rows.get() ? PQresultErrorMessage(rows.get()) : PQerrorMessage(conn_));
  if (message.empty()) message = Trim(PQerrorMessage(conn_));
  if (in_tx_ && tx_error_.empty()) tx_error_ = message;
  return Error{"store", "postgres: " + message};
}

// ---------------------------------------------------------------- transactions

Status PgStore::BeginUnfenced() {
  if (in_tx_) return Error{"store", "Begin inside a transaction"};
  if (auto r = Query("BEGIN"); !r) return r.error();
  in_tx_ = true;
  tx_error_.clear();
  return Ok{};
}

// The fence: FOR KEY SHARE keeps the leader row locked against AcquireLease's FOR UPDATE
// until this transaction ends, so the epoch read here stays the lease's epoch until the
// commit (see the header). BEGIN and the check go in one round trip.
Status PgStore::Begin() {
  if (epoch_ == 0) return BeginUnfenced();
  if (in_tx_) return Error{"store", "Begin inside a transaction"};
  if (Status s = Reconnect(); !s) return s;
  in_tx_ = true;  // from here Rollback() ends whatever BEGIN started
  tx_error_.clear();
  auto r = ExecScript(std::string("BEGIN; SELECT ") + kLeaseColumns +
                      " FROM leader WHERE id = 1 FOR KEY SHARE");
  if (!r) {
    Rollback();
    return r.error();
  }
  std::optional<LeaseInfo> lease;
  if (r->size() == 1 && r->Int(0, 1) != 0) lease = LeaseFrom(*r);
  if (!lease || lease->epoch != epoch_) {
    Rollback();
    return DeposedError(lease, epoch_);
  }
  return Ok{};
}

Status PgStore::Commit() {
  if (!in_tx_) return Error{"store", "Commit without Begin"};
  if (!tx_error_.empty()) {
    const std::string first = tx_error_;
    Rollback();
    return Error{"store", "postgres: transaction rolled back after an error: " + first};
  }
  auto r = Query("COMMIT");
  in_tx_ = false;
  // A failed COMMIT (a lost connection) has an unknown outcome; the caller must treat the
  // database as the truth and reload, as after a crash.
  if (!r) return Error{"store", r.error().message + " (the commit's outcome is unknown)"};
  if (r->Command() != "COMMIT") {
    return Error{"store", "postgres: the transaction was rolled back (" + r->Command() + ")"};
  }
  return Ok{};
}

void PgStore::Rollback() {
  if (!in_tx_) return;
  (void)Query("ROLLBACK");
  in_tx_ = false;
  tx_error_.clear();
}

template <typename F>
Status PgStore::Write(F&& write) {
  if (in_tx_) return write();
  if (Status s = Begin(); !s) return s;
  if (Status s = write(); !s) {
    Rollback();
    return s;
  }
  return Commit();
}

// ---------------------------------------------------------------- records

Result<std::optional<std::string>> PgStore::GetMeta(const std::string& key) {
  auto r = Query("SELECT value FROM meta WHERE key = $1", PgParams().Add(key));
  if (!r) return r.error();
  std::optional<std::string> v;
  if (r->size() > 0) v = r->Text(0, 0);
  return v;
}

Status PgStore::SetMeta(const std::string& key, const std::string& value) {
  return Write([&]() -> Status {
    auto r = Query(
        "INSERT INTO meta (key, value) VALUES ($1, $2) "
        "ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value",
        PgParams().Add(key).Add(value));
    if (!r) return r.error();
    return Ok{};
  });
}

Status PgStore::PutJob(const StoredJob& j) {
  return Write([&]() -> Status {
    auto r = Query(
        "INSERT INTO jobs (seq, name, team, queue, active, idem_key, idem_hash, doc, ended_ms) "
        "VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) "
        "ON CONFLICT (seq) DO UPDATE SET name = EXCLUDED.name, team = EXCLUDED.team, "
        "queue = EXCLUDED.queue, active = EXCLUDED.active, idem_key = EXCLUDED.idem_key, "
        "idem_hash = EXCLUDED.idem_hash, doc = EXCLUDED.doc, ended_ms = EXCLUDED.ended_ms",
        PgParams()
            .Add(j.seq)
            .Add(j.name)
            .Add(j.team)
            .Add(j.queue)
            .AddBool(j.active)
            .AddOrNull(j.idem_key)
            .AddOrNull(j.idem_hash)
            .Add(j.doc)
            .AddOrNull(j.ended_ms >= 0 ? std::to_string(j.ended_ms) : ""));
    if (!r) return r.error();
    return Ok{};
  });
}

Result<std::vector<StoredJob>> PgStore::LoadJobs(int64_t recent_done) {
  // LIMIT NULL is no limit, as a negative LIMIT is in SQLite.
  const std::string sql = std::string("SELECT ") + kJobColumns +
                          " FROM jobs WHERE active OR seq IN (SELECT seq FROM jobs WHERE NOT "
                          "active ORDER BY seq DESC LIMIT $1) ORDER BY seq";
  PgParams params;
  if (recent_done >= 0) {
    params.Add(recent_done);
  } else {
    params.AddOrNull("");
  }
  auto r = Query(sql.c_str(), params);
  if (!r) return r.error();
  std::vector<StoredJob> out;
  for (int i = 0; i < r->size(); ++i) out.push_back(JobFrom(*r, i));
  return out;
}

Result<std::optional<StoredJob>> PgStore::FindJob(const std::string& name) {
  const std::string sql = std::string("SELECT ") + kJobColumns + " FROM jobs WHERE name = $1";
  auto r = Query(sql.c_str(), PgParams().Add(name));
  if (!r) return r.error();
  std::optional<StoredJob> j;
  if (r->size() > 0) j = JobFrom(*r, 0);
  return j;
}

Result<std::vector<StoredJob>> PgStore::EndedJobs(int64_t from_ms, int64_t limit) {
  const std::string sql = std::string("SELECT ") + kJobColumns +
                          " FROM jobs WHERE ended_ms >= $1 AND NOT active ORDER BY seq LIMIT $2";
  auto r = Query(sql.c_str(), PgParams().Add(from_ms).Add(limit));
  if (!r) return r.error();
  std::vector<StoredJob> out;
  for (int i = 0; i < r->size(); ++i) out.push_back(JobFrom(*r, i));
  return out;
}

Result<std::optional<StoredJob>> PgStore::FindIdempotent(const std::string& team,
                                                         const std::string& key) {
  const std::string sql =
      std::string("SELECT ") + kJobColumns + " FROM jobs WHERE team = $1 AND idem_key = $2";
  auto r = Query(sql.c_str(), PgParams().Add(team).Add(key));
  if (!r) return r.error();
  std::optional<StoredJob> j;
  if (r->size() > 0) j = JobFrom(*r, 0);
  return j;
}

Result<int64_t> PgStore::MaxJobSeq() {
  auto r = Query(
      "SELECT GREATEST(COALESCE((SELECT MAX(seq) FROM jobs), 0), "
      "COALESCE((SELECT value::bigint FROM meta WHERE key = 'purged_seq'), 0))");
  if (!r) return r.error();
  return r->Int(0, 0);
}

Result<std::vector<int64_t>> PgStore::PurgeJobs(int64_t ended_before_ms, int64_t limit) {
  std::vector<int64_t> seqs;
  Status st = Write([&]() -> Status {
    auto r = Query(
        "DELETE FROM jobs WHERE seq IN (SELECT seq FROM jobs WHERE ended_ms < $1 "
        "ORDER BY ended_ms LIMIT $2) RETURNING seq",
        PgParams().Add(ended_before_ms).Add(limit));
    if (!r) return r.error();
    for (int i = 0; i < r->size(); ++i) seqs.push_back(r->Int(i, 0));
    if (seqs.empty()) return Ok{};
    // The highest seq purged, so that MaxJobSeq never goes back.
    auto m = Query(
        "INSERT INTO meta (key, value) VALUES ('purged_seq', $1) ON CONFLICT (key) DO UPDATE SET "
        "value = GREATEST(meta.value::bigint, excluded.value::bigint)::text",
        PgParams().Add(*std::max_element(seqs.begin(), seqs.end())));
    if (!m) return m.error();
    return Ok{};
  });
  if (!st) return st.error();
  return seqs;
}

Status PgStore::PutNode(const StoredNode& n) {
  return Write([&]() -> Status {
    auto r = Query(
        "INSERT INTO nodes (name, doc) VALUES ($1, $2) "
        "ON CONFLICT (name) DO UPDATE SET doc = EXCLUDED.doc",
        PgParams().Add(n.name).Add(n.doc));
    if (!r) return r.error();
    return Ok{};
  });
}

Result<std::vector<StoredNode>> PgStore::LoadNodes() {
  auto r = Query("SELECT name, doc FROM nodes ORDER BY name COLLATE \"C\"");
  if (!r) return r.error();
  std::vector<StoredNode> out;
  for (int i = 0; i < r->size(); ++i) out.push_back(StoredNode{r->Text(i, 0), r->Text(i, 1)});
  return out;
}

Status PgStore::StartRun(const StoredRun& run) {
  return Write([&]() -> Status {
    auto r = Query(
        "INSERT INTO runs (job_seq, run, rank, queue, model, gpus, start_ms, end_ms, username) "
        "VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) "
        "ON CONFLICT (job_seq, run, rank) DO UPDATE SET queue = EXCLUDED.queue, "
        "model = EXCLUDED.model, gpus = EXCLUDED.gpus, start_ms = EXCLUDED.start_ms, "
        "end_ms = EXCLUDED.end_ms, username = EXCLUDED.username",
        PgParams()
            .Add(run.job_seq)
            .Add(int64_t{run.run})
            .Add(int64_t{run.rank})
            .Add(run.queue)
            .Add(run.model)
            .Add(run.gpus)
            .Add(run.start_ms)
            .Add(run.end_ms)
            .Add(run.user));
    if (!r) return r.error();
    return Ok{};
  });
}

Status PgStore::EndRun(int64_t job_seq, int run, int64_t end_ms) {
  return Write([&]() -> Status {
    auto r = Query("UPDATE runs SET end_ms = $1 WHERE job_seq = $2 AND run = $3 AND end_ms < 0",
                   PgParams().Add(end_ms).Add(job_seq).Add(int64_t{run}));
    if (!r) return r.error();
    return Ok{};
  });
}

Status PgStore::AddUsageSample(const UsageSample& u) {
  return Write([&]() -> Status {
    auto r = Query(
        "INSERT INTO usage_samples VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (job_seq, t_ms, "
        "run) DO UPDATE "
        "SET gpus = EXCLUDED.gpus, util = EXCLUDED.util, vram_peak = EXCLUDED.vram_peak",
        PgParams()
            .Add(u.job_seq)
            .Add(int64_t{u.run})
            .Add(u.t_ms)
            .Add(u.gpus)
            .Add(u.util)
            .Add(u.vram_peak));
    if (!r) return r.error();
    return Ok{};
  });
}

Result<std::vector<UsageSample>> PgStore::UsageSamples(int64_t job_seq) {
  auto r = Query(
      "SELECT job_seq, run, t_ms, gpus, util, vram_peak FROM usage_samples WHERE job_seq = $1 "
      "ORDER BY t_ms, run",
      PgParams().Add(job_seq));
  if (!r) return r.error();
  std::vector<UsageSample> out;
  for (int i = 0; i < r->size(); ++i) {
    out.push_back(UsageSample{r->Int(i, 0), static_cast<int>(r->Int(i, 1)), r->Int(i, 2),
                              r->Real(i, 3), r->Real(i, 4), r->Int(i, 5)});
  }
  return out;
}

Status PgStore::AddClusterSample(int64_t t_ms, const std::string& sample) {
  return Write([&]() -> Status {
    auto r = Query(
        "INSERT INTO cluster_history VALUES ($1, $2) ON CONFLICT (t_ms) DO UPDATE SET sample = "
        "EXCLUDED.sample",
        PgParams().Add(t_ms).Add(sample));
    if (!r) return r.error();
    return Ok{};
  });
}

Result<std::vector<std::pair<int64_t, std::string>>> PgStore::ClusterSamples(int64_t limit) {
  auto r = Query(
      "SELECT t_ms, sample FROM (SELECT t_ms, sample FROM cluster_history ORDER BY t_ms DESC LIMIT "
      "$1) "
      "AS latest ORDER BY t_ms",
      PgParams().Add(limit));
  if (!r) return r.error();
  std::vector<std::pair<int64_t, std::string>> out;
  for (int i = 0; i < r->size(); ++i) out.emplace_back(r->Int(i, 0), r->Text(i, 1));
  return out;
}

Status PgStore::PruneClusterSamples(int64_t before_ms) {
  return Write([&]() -> Status {
    auto r = Query("DELETE FROM cluster_history WHERE t_ms < $1", PgParams().Add(before_ms));
    if (!r) return r.error();
    return Ok{};
  });
}

Result<int64_t> PgStore::PruneUsageSamples(int64_t before_ms) {
  int64_t n = 0;
  Status st = Write([&]() -> Status {
    auto r = Query("DELETE FROM usage_samples WHERE t_ms < $1", PgParams().Add(before_ms));
    if (!r) return r.error();
    n = r->Affected();
    return Ok{};
  });
  if (!st) return st.error();
  return n;
}

Status PgStore::SetRunUsage(const StoredRun& run) {
  return Write([&]() -> Status {
    auto r = Query(
        "UPDATE runs SET busy_gpu_ms = $1, reported_gpu_ms = $2, vram_peak = $3, fit_gpus = $4 "
        "WHERE job_seq = $5 AND run = $6 AND rank = $7",
        PgParams()
            .Add(run.busy_gpu_ms)
            .Add(run.reported_gpu_ms)
            .Add(run.vram_peak)
            .Add(run.fit_gpus)
            .Add(run.job_seq)
            .Add(int64_t{run.run})
            .Add(int64_t{run.rank}));
    if (!r) return r.error();
    return Ok{};
  });
}

Result<std::vector<StoredRun>> PgStore::Runs(int64_t from_ms, int64_t to_ms) {
  auto r = Query(
      "SELECT job_seq, run, rank, queue, model, gpus, start_ms, end_ms, username, busy_gpu_ms, "
      "reported_gpu_ms, vram_peak, fit_gpus FROM runs "
      "WHERE start_ms < $1 AND (end_ms < 0 OR end_ms > $2) ORDER BY job_seq, run, rank",
      PgParams().Add(to_ms).Add(from_ms));
  if (!r) return r.error();
  std::vector<StoredRun> out;
  for (int i = 0; i < r->size(); ++i) {
    StoredRun run;
    run.job_seq = r->Int(i, 0);
    run.run = static_cast<int>(r->Int(i, 1));
    run.rank = static_cast<int>(r->Int(i, 2));
    run.queue = r->Text(i, 3);
    run.model = r->Text(i, 4);
    run.gpus = r->Real(i, 5);
    run.start_ms = r->Int(i, 6);
    run.end_ms = r->Int(i, 7);
    run.user = r->Text(i, 8);
    run.busy_gpu_ms = r->Real(i, 9);
    run.reported_gpu_ms = r->Real(i, 10);
    run.vram_peak = r->Int(i, 11);
    run.fit_gpus = r->Real(i, 12);
    out.push_back(std::move(run));
  }
  return out;
}

Status PgStore::AddToken(const StoredToken& t) {
  return Write([&]() -> Status {
    auto r = Query(
        "INSERT INTO tokens (hash, role, team, queues, label, created_ms, username) "
        "VALUES ($1, $2, $3, $4, $5, $6, $7)",
        PgParams()
            .Add(t.hash)
            .Add(t.role)
            .Add(t.team)
            .Add(nlohmann::json(t.queues).dump())
            .Add(t.label)
            .Add(t.created_ms)
            .Add(t.user));
    if (!r) return r.error();
    return Ok{};
  });
}

Result<std::optional<StoredToken>> PgStore::FindToken(const std::string& hash) {
  const std::string sql = std::string("SELECT ") + kTokenColumns + " FROM tokens WHERE hash = $1";
  auto r = Query(sql.c_str(), PgParams().Add(hash));
  if (!r) return r.error();
  std::optional<StoredToken> t;
  if (r->size() > 0) t = TokenFrom(*r, 0);
  return t;
}

Result<std::vector<StoredToken>> PgStore::ListTokens() {
  const std::string sql = std::string("SELECT ") + kTokenColumns +
                          " FROM tokens ORDER BY created_ms, hash COLLATE \"C\"";
  auto r = Query(sql.c_str());
  if (!r) return r.error();
  std::vector<StoredToken> out;
  for (int i = 0; i < r->size(); ++i) out.push_back(TokenFrom(*r, i));
  return out;
}

Status PgStore::DeleteToken(const std::string& hash_prefix) {
  if (hash_prefix.size() < 8) return Error{"hash", "give at least 8 hex digits of the hash"};
  return Write([&]() -> Status {
    const PgParams params =
        PgParams().Add(static_cast<int64_t>(hash_prefix.size())).Add(hash_prefix);
    auto count = Query("SELECT COUNT(*) FROM tokens WHERE left(hash, $1) = $2", params);
    if (!count) return count.error();
    const int64_t n = count->Int(0, 0);
    if (n != 1) {
      return Error{"hash", n == 0 ? "no token hash starts with " + hash_prefix
                                  : "more than one token hash starts with " + hash_prefix};
    }
    auto r = Query("DELETE FROM tokens WHERE left(hash, $1) = $2", params);
    if (!r) return r.error();
    return Ok{};
  });
}

Status PgStore::AddSession(const std::string& hash, const std::string& token_hash,
                           int64_t expires_ms) {
  return Write([&]() -> Status {
    auto r = Query("INSERT INTO sessions (hash, token_hash, expires_ms) VALUES ($1, $2, $3)",
                   PgParams().Add(hash).Add(token_hash).Add(expires_ms));
    if (!r) return r.error();
    return Ok{};
  });
}

Result<std::optional<std::pair<std::string, int64_t>>> PgStore::FindSession(
    const std::string& hash) {
  auto r =
      Query("SELECT token_hash, expires_ms FROM sessions WHERE hash = $1", PgParams().Add(hash));
  if (!r) return r.error();
  std::optional<std::pair<std::string, int64_t>> found;
  if (r->size() > 0) found = std::pair(r->Text(0, 0), r->Int(0, 1));
  return found;
}

Status PgStore::DeleteSession(const std::string& hash) {
  return Write([&]() -> Status {
    auto r = Query("DELETE FROM sessions WHERE hash = $1", PgParams().Add(hash));
    if (!r) return r.error();
    return Ok{};
  });
}

Status PgStore::PruneSessions(int64_t now_ms) {
  return Write([&]() -> Status {
    auto r = Query("DELETE FROM sessions WHERE expires_ms <= $1", PgParams().Add(now_ms));
    if (!r) return r.error();
    return Ok{};
  });
}

// ---------------------------------------------------------------- leader lease

Result<std::optional<LeaseInfo>> PgStore::Leader() {
  const std::string sql = std::string("SELECT ") + kLeaseColumns + " FROM leader WHERE id = 1";
  auto r = Query(sql.c_str());
  if (!r) return r.error();
  std::optional<LeaseInfo> lease;
  if (r->size() == 1 && r->Int(0, 1) != 0) lease = LeaseFrom(*r);
  return lease;
}

Result<int64_t> PgStore::AcquireLease(const std::string& holder, int64_t ttl_ms) {
  if (Status s = CheckLeaseArgs(holder, ttl_ms); !s) return s.error();
  if (in_tx_) return Error{"lease", "AcquireLease inside a transaction"};
  // Not Begin(): taking the lease is the one write that the old epoch must not fence.
  if (Status s = BeginUnfenced(); !s) return s.error();
  auto fail = [&](Error e) -> Result<int64_t> {
    Rollback();
    return e;
  };
  const std::string ttl = std::to_string(ttl_ms);
  // Wait at most ttl_ms for the current leader's in-flight transaction (its FOR KEY SHARE).
  if (auto r = Query("SELECT set_config('lock_timeout', $1, true)", PgParams().Add(ttl + "ms"));
      !r) {
    return fail(r.error());
  }
  const std::string sql =
      std::string("SELECT ") + kLeaseColumns +
      ", expires_at > clock_timestamp(), "
      "COALESCE(renewed_at < pg_postmaster_start_time() AND clock_timestamp() < "
      "pg_postmaster_start_time() + $1::float8 * interval '1 millisecond', false), "
      "FLOOR(EXTRACT(EPOCH FROM clock_timestamp() - pg_postmaster_start_time()) * 1000)::bigint "
      "FROM leader WHERE id = 1 FOR UPDATE";
  auto row = Query(sql.c_str(), PgParams().Add(ttl_ms));
  if (!row) {
    if (last_sqlstate_ == kLockNotAvailable) {
      return fail(Error{"lease", "the current leader's transaction did not end within " + ttl +
                                     " ms; try again"});
    }
    return fail(row.error());
  }
  if (row->size() != 1) return fail(Error{"store", "postgres: the leader row is missing"});
  const std::string current = row->Text(0, 0);
  if (row->Bool(0, 4) && current != holder) {
    return fail(Error{"lease", "held by " + current + " (epoch " + row->Text(0, 1) + ") until " +
                                   row->Text(0, 3) + ", " + row->Text(0, 2) +
                                   " ms from now by the database's clock"});
  }
  // A database that restarted may have let the lease run out while it was down: a leader
  // that renewed before the restart, still up through the outage, gets one ttl from the
  // database's start to renew before anyone else may take over.
  if (row->Bool(0, 5) && current != holder) {
    return fail(Error{"lease", "held by " + current + " (epoch " + row->Text(0, 1) +
                                   "), which may renew: the database started " + row->Text(0, 6) +
                                   " ms ago"});
  }
  auto up = Query(
      "UPDATE leader SET holder = $1, epoch = epoch + 1, renewed_at = clock_timestamp(), "
      "expires_at = clock_timestamp() + $2::float8 * interval '1 millisecond' "
      "WHERE id = 1 RETURNING epoch",
      PgParams().Add(holder).Add(ttl_ms));
  if (!up) return fail(up.error());
  const int64_t epoch = up->Int(0, 0);
  if (Status s = Commit(); !s) return s.error();
  epoch_ = epoch;
  lease_ttl_ms_ = ttl_ms;  // set again on every reconnect (SetUpSession)
  // A leader frozen inside a transaction holds the fence; the server ends such a
  // transaction after ttl_ms, so a takeover waits no longer than that for it.
  if (auto r = Query("SELECT set_config('idle_in_transaction_session_timeout', $1, false)",
                     PgParams().Add(ttl + "ms"));
      !r) {
    return r.error();
  }
  return epoch;
}

Status PgStore::RenewLease(const std::string& holder, int64_t epoch, int64_t ttl_ms) {
  if (Status s = CheckLeaseArgs(holder, ttl_ms); !s) return s;
  if (in_tx_) return Error{"lease", "RenewLease inside a transaction"};
  // A plain UPDATE: it does not wait for this leader's own transactions on other
  // connections (FOR KEY SHARE), but does wait for a takeover in progress (FOR UPDATE)
  // and then finds the new epoch.
  auto r = Query(
      "UPDATE leader SET renewed_at = clock_timestamp(), "
      "expires_at = clock_timestamp() + $3::float8 * interval '1 millisecond' "
      "WHERE id = 1 AND holder = $1 AND epoch = $2",
      PgParams().Add(holder).Add(epoch).Add(ttl_ms));
  if (!r) return r.error();
  if (r->Affected() == 1) return Ok{};
  auto lease = Leader();
  if (!lease) return lease.error();
  return DeposedError(*lease, epoch);
}

}  // namespace gantry::server
