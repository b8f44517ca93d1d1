// Store: gantryd's durable state, behind an interface: SQLite (one machine) or
// PostgreSQL (shared by a leader and its standbys).
//
// The controller keeps its working state in memory and writes every change through
// here inside a transaction (Begin .. Commit); a reply that promises durability (a job
// id) is sent only after Commit returned. A write outside Begin .. Commit is a
// transaction of its own. Records are small rows with the columns the
// store must index (name, team, idempotency key, active) and a JSON document with the
// rest, so the schema rarely changes when the controller learns something new.
// Where several gantryd processes share one database, a leader lease with an epoch
// (a fencing token) says which one may write: see AcquireLease.
// Thread-safety: none; the controller thread owns the store. Token lookups from HTTP
// threads go through the controller or a separate Store instance.
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "base/result.h"

namespace gantry::server {

// A store call failed where its caller cannot answer without it: a lost database
// connection, a full disk. The Controller abandons the batch in hand, none of it answered,
// and rides through the outage (Controller::RunBatch, docs/control-plane.md "Store
// outages"); the Kubernetes mode's API answers 503.
struct StoreDown : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct StoredJob {
  int64_t seq = 0;   // dense submission order; the primary key
  std::string name;  // the job id users see (unique)
  std::string team;  // the submitting token's team ("" for admin)
  std::string queue;
  bool active = true;     // pending, running or stopping; false once it ended
  std::string idem_key;   // "" when none; unique per team
  std::string idem_hash;  // hash of the request the key was first used with
  std::string doc;        // JSON: spec text and run state (the controller's format)
  int64_t ended_ms = -1;  // wall clock when it ended (ms since the Unix epoch); -1 while active
};

// The jobs table's columns as both stores select them, in the order they read a row.
inline constexpr const char* kJobColumns =
    "seq, name, team, queue, active, idem_key, idem_hash, doc, ended_ms";

struct StoredNode {
  std::string name;
  std::string doc;  // JSON: up, drained, reason, address, GPUs (the controller's format)
};

// One worker's time on GPUs, for `gantry usage`: end_ms < 0 while it runs.
struct StoredRun {
  int64_t job_seq = 0;
  int run = 0;
  int rank = 0;
  std::string queue;
  std::string model;
  double gpus = 0;       // GPUs held (fractions for MIG and shares)
  int64_t start_ms = 0;  // wall clock, ms since the Unix epoch
  int64_t end_ms = -1;
  std::string user;  // the submitter, when their token named one
  // What the worker used, as its agent reported it (set when the run ends): utilization
  // x GPUs x time, the GPU-time reports covered, its peak VRAM, and the GPU-equivalents
  // right-sizing says would have held it (-1: no reports).
  double busy_gpu_ms = 0;
  double reported_gpu_ms = 0;
  int64_t vram_peak = 0;
  double fit_gpus = -1;
};

// One point of a job's usage time series (issue 12): over the interval ending at t_ms,
// the GPUs it held, their mean utilization (0..1, where agents reported) and the most
// VRAM one worker used.
struct UsageSample {
  int64_t job_seq = 0;
  int run = 0;
  int64_t t_ms = 0;  // wall clock, ms since the Unix epoch
  double gpus = 0;
  double util = 0;
  int64_t vram_peak = 0;
  auto operator<=>(const UsageSample&) const = default;
};

// The leader lease as the database has it.
struct LeaseInfo {
  std::string holder;         // what the holder called itself (its advertised URL)
  int64_t epoch = 0;          // the fencing token: +1 at every successful AcquireLease
  int64_t expires_in_ms = 0;  // by the database's clock; <= 0 once expired
};

struct StoredToken {
  std::string hash;                 // hex SHA-256 of the token; the token itself is never stored
  std::string role;                 // "admin", "team" or "agent"
  std::string team;                 // role team
  std::vector<std::string> queues;  // role team: queues it may submit to and cancel in;
                                    // role agent: the node(s) it may speak for (empty: any)
  std::string
      user;  // role team: the person, a Unix account name (empty: none; jobs then run as no one)
  std::string label;  // free text shown by `gantryd token list`
  int64_t created_ms = 0;
};

class Store {
 public:
  virtual ~Store() = default;

  // After a successful AcquireLease, Begin checks (and keeps checked until the transaction
  // ends) that the lease still has this store's epoch; once another AcquireLease has
  // taken it, Begin and every write fail with field "lease", naming the newer epoch.
  virtual Status Begin() = 0;
  // Durable on return (SQLite syncs its write-ahead log; PostgreSQL runs with
  // synchronous_commit=on).
  virtual Status Commit() = 0;
  virtual void Rollback() = 0;

  virtual Result<std::optional<std::string>> GetMeta(const std::string& key) = 0;
  virtual Status SetMeta(const std::string& key, const std::string& value) = 0;

  // Inserts or replaces by seq.
  virtual Status PutJob(const StoredJob& job) = 0;
  // Active jobs, and the last `recent_done` ended jobs, in seq order.
  virtual Result<std::vector<StoredJob>> LoadJobs(int64_t recent_done) = 0;
  // An ended job that is no longer in memory, by name.
  virtual Result<std::optional<StoredJob>> FindJob(const std::string& name) = 0;
  // Ended jobs that ended at or after `from_ms`, in seq order, at most `limit` (sacct's
  // window reaches past the jobs kept in memory).
  virtual Result<std::vector<StoredJob>> EndedJobs(int64_t from_ms, int64_t limit) = 0;
  virtual Result<std::optional<StoredJob>> FindIdempotent(const std::string& team,
                                                          const std::string& key) = 0;
  // The highest seq ever stored, purged jobs' included (a seq is never given twice).
  virtual Result<int64_t> MaxJobSeq() = 0;
  // Deletes at most `limit` ended jobs that ended before `ended_before_ms`, oldest first,
  // and returns their seqs (retention, as Slurm's PurgeJobAfter). Their runs stay (usage
  // accounting keeps them); their usage samples go by their own retention.
  virtual Result<std::vector<int64_t>> PurgeJobs(int64_t ended_before_ms, int64_t limit) = 0;

  virtual Status PutNode(const StoredNode& node) = 0;
  virtual Result<std::vector<StoredNode>> LoadNodes() = 0;

  virtual Status StartRun(const StoredRun& run) = 0;
  virtual Status EndRun(int64_t job_seq, int run, int64_t end_ms) = 0;
  // Sets one worker's usage fields (busy_gpu_ms .. fit_gpus) of run (job_seq, run, rank).
  virtual Status SetRunUsage(const StoredRun& run) = 0;
  // Runs that overlap [from_ms, to_ms).
  virtual Result<std::vector<StoredRun>> Runs(int64_t from_ms, int64_t to_ms) = 0;

  // The usage time series: one sample per job and interval; a job's samples by time;
  // samples older than `before_ms` deleted (retention), returning how many.
  virtual Status AddUsageSample(const UsageSample& sample) = 0;
  virtual Result<std::vector<UsageSample>> UsageSamples(int64_t job_seq) = 0;
  virtual Result<int64_t> PruneUsageSamples(int64_t before_ms) = 0;

  // The console's cluster history (GET /v1/cluster/history): one sample per interval as
  // JSON text, at its Unix time in ms (kept across restarts and shared with a standby);
  // the latest `limit`, oldest first; those older than `before_ms` deleted.
  virtual Status AddClusterSample(int64_t t_ms, const std::string& sample) = 0;
  virtual Result<std::vector<std::pair<int64_t, std::string>>> ClusterSamples(int64_t limit) = 0;
  virtual Status PruneClusterSamples(int64_t before_ms) = 0;

  virtual Status AddToken(const StoredToken& token) = 0;
  virtual Result<std::optional<StoredToken>> FindToken(const std::string& hash) = 0;
  virtual Result<std::vector<StoredToken>> ListTokens() = 0;
  virtual Status DeleteToken(const std::string& hash_prefix) = 0;

  // Console sessions (POST /v1/session), so that the cookie is not the API token and a
  // standby that takes over knows them: the hash of a session's secret, the hash of the
  // token it was opened with (a revoked token ends its sessions), and when it expires
  // (Unix ms). FindSession gives (token hash, expires_ms).
  virtual Status AddSession(const std::string& hash, const std::string& token_hash,
                            int64_t expires_ms) = 0;
  virtual Result<std::optional<std::pair<std::string, int64_t>>> FindSession(
      const std::string& hash) = 0;
  virtual Status DeleteSession(const std::string& hash) = 0;
  virtual Status PruneSessions(int64_t now_ms) = 0;

  // ---- Leader lease and fencing. Preconditions: not inside Begin .. Commit.
  //
  // Takes the lease for `holder` for `ttl_ms` by the database's clock if it is free,
  // expired or already held by `holder`, and returns the new epoch. Every success
  // increments the epoch, also for the same holder, so an earlier process that used the
  // same name (a hung gantryd that was restarted) is fenced too. From then on this
  // store's writes are fenced by that epoch (see Begin). Errors: field "lease" when
  // another holder has an unexpired lease (the message says who, and until when) or the
  // current leader's transaction did not end within ttl_ms; "store" for database
  // failures. SQLite is one machine: its lease is always free, so a second gantryd on
  // the same file takes it over at once and fences the first.
  virtual Result<int64_t> AcquireLease(const std::string& holder, int64_t ttl_ms) = 0;
  // Extends the lease to `ttl_ms` from now if `holder` still holds `epoch`; field
  // "lease" ("deposed: ...") when it does not. A leader renews well within its ttl and
  // stops serving on any error.
  virtual Status RenewLease(const std::string& holder, int64_t epoch, int64_t ttl_ms) = 0;
  // Who holds, or last held, the lease (a standby's way to find the leader); nullopt
  // when nobody ever took it.
  virtual Result<std::optional<LeaseInfo>> Leader() = 0;
};

// For Store implementations: the lease arguments' checks (a holder name, a positive
// ttl), and the error of a store whose epoch `epoch` was taken over (`current` is the
// lease the database has now).
Status CheckLeaseArgs(const std::string& holder, int64_t ttl_ms);
Error DeposedError(const std::optional<LeaseInfo>& current, int64_t epoch);

}  // namespace gantry::server
