// Store: gantryd's durable state, behind an interface so that a networked database
// can replace SQLite later.
//
// The controller keeps its working state in memory and writes every change through
// here inside a transaction (Begin .. Commit); a reply that promises durability (a job
// id) is sent only after Commit returned. Records are small rows with the columns the
// store must index (name, team, idempotency key, active) and a JSON document with the
// rest, so the schema rarely changes when the controller learns something new.
// Thread-safety: none; the controller thread owns the store. Token lookups from HTTP
// threads go through the controller or a separate Store instance.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "base/result.h"

namespace gantry::server {

struct StoredJob {
  int64_t seq = 0;       // dense submission order; the primary key
  std::string name;      // the job id users see (unique)
  std::string team;      // the submitting token's team ("" for admin)
  std::string queue;
  bool active = true;    // pending, running or stopping; false once it ended
  std::string idem_key;  // "" when none; unique per team
  std::string idem_hash; // hash of the request the key was first used with
  std::string doc;       // JSON: spec text and run state (the controller's format)
};

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
  double gpus = 0;  // GPUs held (fractions for MIG and shares)
  int64_t start_ms = 0;  // wall clock, ms since the Unix epoch
  int64_t end_ms = -1;
};

struct StoredToken {
  std::string hash;    // hex SHA-256 of the token; the token itself is never stored
  std::string role;    // "admin", "team" or "agent"
  std::string team;    // role team
  std::vector<std::string> queues;  // role team: queues it may submit to and cancel in
  std::string label;   // free text shown by `gantryd token list`
  int64_t created_ms = 0;
};

class Store {
 public:
  virtual ~Store() = default;

  virtual Status Begin() = 0;
  // Durable on return (the SQLite store syncs its write-ahead log).
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
  virtual Result<std::optional<StoredJob>> FindIdempotent(const std::string& team,
                                                          const std::string& key) = 0;
  virtual Result<int64_t> MaxJobSeq() = 0;

  virtual Status PutNode(const StoredNode& node) = 0;
  virtual Result<std::vector<StoredNode>> LoadNodes() = 0;

  virtual Status StartRun(const StoredRun& run) = 0;
  virtual Status EndRun(int64_t job_seq, int run, int64_t end_ms) = 0;
  // Runs that overlap [from_ms, to_ms).
  virtual Result<std::vector<StoredRun>> Runs(int64_t from_ms, int64_t to_ms) = 0;

  virtual Status AddToken(const StoredToken& token) = 0;
  virtual Result<std::optional<StoredToken>> FindToken(const std::string& hash) = 0;
  virtual Result<std::vector<StoredToken>> ListTokens() = 0;
  virtual Status DeleteToken(const std::string& hash_prefix) = 0;
};

}  // namespace gantry::server
