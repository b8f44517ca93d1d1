// Controller: gantryd's brain. One thread owns the scheduling core, the store and every
// record; HTTP threads call the public methods, which post a message to that thread and
// wait for its reply.
//
// The thread works in batches: it takes every waiting message, runs them inside one
// store transaction, then handles timers (silent agents, grace deadlines), runs a
// scheduling pass when anything changed or the pass timer fired, commits, and only then
// answers the callers, so an answer never promises what is not on disk. Events (spec
// section 4) are appended to the event log after the commit. A failed commit ends the
// process: the database is the truth, and a restart rebuilds everything from it.
//
// Time: the core counts ticks (ms) from the server epoch, a Monday 00:00 UTC stored in
// the database on first start, so job windows (UTC times of day) mean what they say.
//
// Restart: jobs are read back in submission order; running ones are re-adopted with
// their stored allocation (server/adopt.h), pending ones resubmitted with their original
// submit time. Nodes that were up get a full agent timeout to check in again.
// Thread-safety: every public method is thread-safe.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <ostream>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/scheduler.h"
#include "server/auth.h"
#include "server/metrics.h"
#include "server/state.h"
#include "server/store.h"
#include "sim/event_log.h"
#include "spec/config_reader.h"

namespace gantry::server {

// What went wrong, independent of HTTP; http_api.cc maps codes to statuses in one table.
enum class Code : uint8_t {
  kOk,
  kCreated,
  kBadRequest,       // malformed or invalid input
  kUnauthenticated,  // no token, or an unknown one
  kForbidden,        // a valid token that may not do this
  kNotFound,
  kConflict,         // duplicate id, idempotency key reused with another request
  kTooLarge,
  kUnprocessable,    // well-formed but can never run (no GPU could hold it)
  kUnavailable,      // shutting down
};

struct Reply {
  Code code = Code::kOk;
  nlohmann::json body = nlohmann::json::object();
  std::string text;          // a text reply (logs, metrics) when not empty
  std::string content_type;  // for text replies

  static Reply Error(Code code, std::string message, std::vector<std::string> problems = {});
  bool ok() const { return code == Code::kOk || code == Code::kCreated; }
};

struct ControllerOptions {
  std::string policy = "gantry";
  int64_t pass_interval_ms = 1000;  // scheduling pass timer
  int64_t node_timeout_ms = 30000;  // an agent silent this long: node down, jobs requeued
  int64_t heartbeat_ms = 2000;      // what agents are told to use
  int64_t lease_ms = 0;             // agents kill their jobs when cut off this long (0: 60% of timeout)
  int64_t kill_slack_ms = 5000;     // after a grace deadline, before assuming a worker is gone
  int64_t max_spec_bytes = 64 * 1024;
  int64_t recent_done = 10000;      // ended jobs kept in memory for `ls` and `show`
  std::string log_dir;              // job output uploaded by agents
};

struct SubmitRequest {
  std::string body;
  std::string format = "json";  // "json" or "yaml"
  std::string file;             // the client's file name, for diagnostics
  std::string idempotency_key;
};

class Controller {
 public:
  using WallClock = std::function<int64_t()>;  // ms since the Unix epoch

  Controller(const spec::ClusterConfig& config, Store& store, ControllerOptions options,
             std::ostream* events, WallClock clock);
  ~Controller();
  Controller(const Controller&) = delete;
  Controller& operator=(const Controller&) = delete;

  // Rebuilds the state from the store and starts the thread.
  Status Start();
  // Answers waiting callers with kUnavailable and joins the thread.
  void Stop();

  Reply Submit(const std::string& token, SubmitRequest req);
  Reply ListJobs(const std::string& token, const std::string& state_filter, bool all);
  Reply ShowJob(const std::string& token, const std::string& name);
  Reply Cancel(const std::string& token, const std::string& name);
  // The path of a worker's log (body.path), after checking the caller may read it.
  Reply LogPath(const std::string& token, const std::string& name, int run, int rank);
  Reply Nodes(const std::string& token);
  Reply Drain(const std::string& token, const std::string& node, bool drain, std::string reason);
  Reply Queues(const std::string& token);
  Reply Usage(const std::string& token, double from_s, double to_s);
  Reply Heartbeat(const std::string& token, const std::string& node, const nlohmann::json& body,
                  const std::string& remote_addr);
  Reply UploadLog(const std::string& token, const std::string& node, const std::string& job,
                  int run, int rank, int64_t offset, const std::string& data);
  std::string Metrics();
  nlohmann::json Health();
  // Runs a pass and the timers now and waits for them (tests).
  void Poke();

 private:
  struct Message {
    std::function<void()> run;
    std::function<void()> done;
    std::function<void()> cancel;
  };
  Reply Call(std::function<Reply()> fn);
  void Loop();
  void RunBatch(std::vector<Message>& batch);

  Ticks Now();
  int64_t WallMs(Ticks t) const { return epoch_ms_ + t; }
  double UnixSeconds(Ticks t) const { return static_cast<double>(WallMs(t)) / 1000.0; }
  std::optional<Principal> Authenticate(const std::string& token, Reply& error);
  std::optional<Principal> AuthenticateUser(const std::string& token, Reply& error);
  // Call() as a user (not an agent): fn runs on the controller thread with the caller,
  // or the reply is the authentication error.
  Reply CallAsUser(const std::string& token, const std::function<Reply(const Principal&)>& fn);

  // ---- state changes (controller thread) ----
  Status Restore();
  std::optional<core::JobSpec> ReadSpec(const Job& job, std::vector<std::string>* problems);
  void Persist(const Job& job);
  void PersistNode(core::NodeId n);
  void Pass(Ticks now);
  void Housekeeping(Ticks now);
  void StartRun(Job& job, Ticks now);
  void BeginStop(Job& job, StopKind kind, std::string reason, Ticks grace, Ticks now);
  void EndStop(Job& job, Ticks now);
  void FinishRun(Job& job, Ticks now);
  void EndRunRows(Job& job, Ticks now);
  void WorkerExited(Job& job, Worker& w, const ExitReport& e, Ticks now);
  void NodeDown(core::NodeId n, Ticks now);
  void SetCoreNodeUp(core::NodeId n);
  void Done(Job& job, std::string end, std::string reason, Ticks now);
  nlohmann::json DesiredWorkers(core::NodeId n, Ticks now);
  nlohmann::json JobSummary(const Job& job, bool details, const Principal* viewer);
  Job* FindJob(const std::string& name);
  bool MaySee(const Principal& p, const Job& job) const;
  void WriteFinishEvent(Ticks t, const Job& job);

  const spec::ClusterConfig& config_;
  const core::Cluster& cluster_;
  Store& store_;
  ControllerOptions options_;
  std::ostream* events_out_;
  WallClock clock_;

  // Owned by the controller thread once started.
  std::unique_ptr<core::Scheduler> sched_;
  int64_t epoch_ms_ = 0;
  Ticks last_now_ = 0;
  Ticks now_ = 0;  // the current batch's time: every change in a batch happens at it
  int64_t next_seq_ = 1;
  std::map<int64_t, Job> jobs_;                       // by seq
  std::unordered_map<std::string, int64_t> by_name_;  // name -> seq
  std::vector<int64_t> core_to_seq_;                  // core JobId -> seq
  std::set<int64_t> running_;                         // seqs of running or stopping jobs
  std::deque<int64_t> done_order_;                    // ended jobs in memory, oldest first
  std::vector<NodeInfo> nodes_;                       // by core NodeId
  std::unordered_map<std::string, Principal> tokens_; // cache: hash -> principal
  Ticks tokens_flushed_ = 0;                          // the cache is dropped every 10 s (revocations)
  std::ostringstream event_buf_;
  sim::EventLog log_;
  bool dirty_ = true;                                 // something changed: run a pass
  Ticks next_pass_ = 0;
  std::string instance_;                              // random per process start

  // Metrics.
  Histogram sched_latency_{{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                            0.1, 0.25, 0.5, 1}};
  std::vector<Histogram> queue_wait_;  // per tier
  std::vector<uint64_t> preemptions_;  // per queue
  uint64_t submitted_ = 0, requeued_ = 0;
  std::map<std::string, uint64_t> ended_;  // by end

  // The mailbox.
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Message> inbox_;
  bool stopping_ = false;
  bool poke_ = false;
  std::thread thread_;
};

}  // namespace gantry::server
