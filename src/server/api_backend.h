// ApiBackend: what gantryd's HTTP API (HttpApi, docs/api.yaml) asks of whoever answers
// it: the Controller, whose nodes run gantry-agent, or with --kubernetes the Kubernetes
// scheduler (kube/scheduler.h), which answers what a Kubernetes cluster has (jobs,
// queues, nodes) and refuses the rest with a message. Each call returns at once; `done`
// gets the reply later, on any thread.
// Thread-safety: implementations are thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace gantry::core {
class Cluster;
struct Node;
class QueueTree;
class Scheduler;
}  // namespace gantry::core

namespace gantry::server {

enum class Code : uint8_t {
  kOk,
  kCreated,
  kBadRequest,       // malformed or invalid input
  kUnauthenticated,  // no token, or an unknown one
  kForbidden,        // a valid token that may not do this
  kNotFound,
  kConflict,  // duplicate id, idempotency key reused with another request
  kTooLarge,
  kUnprocessable,    // well-formed but can never run (no GPU could hold it)
  kTooManyRequests,  // a team's submit rate limit (body.retry_after_s)
  kUnavailable,      // shutting down
};

struct Reply {
  Code code = Code::kOk;
  nlohmann::json body = nlohmann::json::object();
  std::string text;          // a text reply (logs, metrics) when not empty
  std::string content_type;  // for text replies
  bool deferred = false;     // internal: the operation kept its Done and answers later
  // When set, the JSON body is this function's result, built where the reply is written
  // (an HTTP I/O thread) rather than on the controller thread; it must capture values
  // only (the agents' answers: each worker's desired entry is shared and immutable).
  std::function<nlohmann::json()> encode;

  static Reply Error(Code code, std::string message, std::vector<std::string> problems = {});
  bool ok() const { return code == Code::kOk || code == Code::kCreated; }
};

using Done = std::function<void(Reply)>;

struct JobQuery {
  std::string state, queue, user;  // filters; empty: any
  bool all = false;                // ended jobs too (an ended `state` implies it)
  int64_t limit = -1;              // -1: every job, in submission order
  // With `all`: also the ended jobs no longer in memory that ended at or after this (ms
  // since the Unix epoch), read from the store (sacct's window); -1: memory only.
  int64_t ended_since_ms = -1;
  std::string array;  // only this array's tasks (its id, "j41"); empty: any
};

struct SubmitRequest {
  std::string body;
  std::string format = "json";  // "json" or "yaml"
  std::string file;             // the client's file name, for diagnostics
  std::string idempotency_key;
  std::string array;  // "0-999", "1,3,5-7", "0-15:4": one job per index (tasks NAME_INDEX)
  std::string after;  // "j12,j13:any": held until those end (default :ok, finished; :any, any end)
  int64_t begin_ms = 0;  // held until then (ms since the Unix epoch; sbatch --begin); 0: none
  bool hold = false;     // held until released (sbatch -H; POST /v1/jobs/ID/unhold)
  // sbatch --kill-on-invalid-dep: 1 yes, 0 no, -1 not given (Job::kill_invalid_dep).
  int kill_invalid_dep = -1;
};

class ApiBackend {
 public:
  virtual ~ApiBackend() = default;
  virtual void Submit(std::string token, SubmitRequest req, Done done) = 0;
  virtual void ListJobs(std::string token, JobQuery query, Done done) = 0;
  virtual void ShowJob(std::string token, std::string name, Done done) = 0;
  virtual void JobUsageSeries(std::string token, std::string name, Done done) = 0;
  // A running batch job's allocation, for salloc's command on the submit host: the
  // environment of its script (less what is its node's own) and its run's credential.
  virtual void JobAllocation(std::string token, std::string name, Done done) = 0;
  // salloc's command ended with `exit_code`: the allocation is given back, its job ending
  // completed (0) or failed with that code, as Slurm's salloc ends it.
  virtual void ReleaseAllocation(std::string token, std::string name, int exit_code, Done done) = 0;
  virtual void Cancel(std::string token, std::string name, bool force, Done done) = 0;
  // A running job's run ends and the job waits again, keeping its checkpointed progress
  // (Slurm's `scontrol requeue`; a stopping job is requeued instead of ending).
  virtual void Requeue(std::string token, std::string name, Done done) = 0;
  // A pending job (an array's id: its pending tasks) is held out of the scheduler
  // (`hold`), or its hold is lifted (scontrol hold, uhold and release). `admin_hold`: an
  // admin's hold, which only an admin lifts (Slurm's JobHeldAdmin); nullopt: an admin's
  // when an admin asks, else the user's (as scontrol hold).
  virtual void Hold(std::string token, std::string name, bool hold, std::optional<bool> admin_hold,
                    Done done) = 0;
  // A pending job's begin time (scontrol update JobId=ID StartTime=TIME): held until
  // `begin_ms` (ms since the Unix epoch; 0, or a time gone by: eligible now). An array's id:
  // its pending tasks.
  virtual void SetBegin(std::string token, std::string name, int64_t begin_ms, Done done) = 0;
  // A pending job's dependencies (scontrol update JobId=ID Dependency=...), replaced by
  // `after` (the submit's after= syntax; empty: none), resolved as at submission: it waits
  // on them outside the scheduler, or is handed to it when none is left. An array's id: its
  // pending tasks.
  virtual void SetAfter(std::string token, std::string name, std::string after, Done done) = 0;
  // An array's throttle (scontrol update JobId=ARRAY ArrayTaskThrottle=N): at most `limit`
  // of its tasks in the scheduler at once (pending there, running or stopping); 0: none.
  // Raised, held tasks are handed over at once; lowered, tasks pending in the scheduler
  // above it come out of it (the last by index first), running ones run on.
  virtual void SetThrottle(std::string token, std::string name, int limit, Done done) = 0;
  // A pending job's spec fields (scontrol update JobId=ID JobName=, Partition=, QOS=,
  // Account=): `fields` an object of "name", "pool", "tier", "queue" (strings, as a job
  // spec takes them: a partition, QoS or account of the site mapping too), written into its
  // spec and read again as at submission (its queue and tier must be its user's to ask).
  // A new pool, tier or queue hands it to the scheduler anew. An array's id: its pending
  // tasks. All are checked before any is changed.
  virtual void UpdateSpec(std::string token, std::string name, nlohmann::json fields,
                          Done done) = 0;
  // A pending or running job's time limit (scontrol update JobId=ID TimeLimit=[+-]TIME), in
  // ms as its submitter wrote it (an sbatch job's --time, its --signal's lead included; else
  // time_limit_s), 0: none; `add`: `limit_ms` (signed) added to the one it has. It replaces
  // the spec's from then on: a running job past it is stopped as at its limit. Only an admin
  // raises a limit or takes it away (Slurm's rule). An array's id: its active tasks.
  virtual void SetTimeLimit(std::string token, std::string name, int64_t limit_ms, bool add,
                            Done done) = 0;
  // scancel --signal: `signal` to a running job's steps' tasks ("steps"; a native job's
  // workers), its batch script's shell ("batch") or both with the script's children
  // ("full"); an array's id: every running task.
  virtual void Signal(std::string token, std::string name, int signal, std::string to,
                      Done done) = 0;
  // `step` >= 0: task `rank` of that job step (srun), its stderr with `err`; -1: worker
  // `rank` (stdout and stderr together).
  virtual void LogPath(std::string token, std::string name, int run, int rank, int step, bool err,
                       Done done) = 0;
  // Job steps: `srun` inside a batch job, with the job's own credential (docs/slurm.md,
  // "Inside a job"). The body: {command, env, workdir, name, nodes, ntasks,
  // ntasks_per_node, cpus_per_task, gpus_per_task, overlap}; the reply: the step.
  virtual void CreateStep(std::string token, std::string job, nlohmann::json body, Done done) = 0;
  // With `version` (the body's own, from an earlier answer) and `wait_ms` > 0, a long poll:
  // answered once the step's body differs from that version, or after `wait_ms`.
  virtual void ShowStep(std::string token, std::string job, int step, std::string version,
                        int64_t wait_ms, Done done) = 0;
  // srun was interrupted: the step's tasks are stopped (SIGTERM, SIGKILL 10 s later); with
  // `kill`, SIGKILLed at once (a task called MPI_Abort: slurmstepd ends the step so).
  virtual void CancelStep(std::string token, std::string job, int step, bool kill, Done done) = 0;
  // A step created with {"held": true} (srun --mpi=pmix) is placed but not started: its
  // tasks start now, with body.env's variables added to the step's (what they need to reach
  // srun's PMIx server). The job's own credential only.
  virtual void LaunchStep(std::string token, std::string job, int step, nlohmann::json body,
                          Done done) = 0;
  virtual void Nodes(std::string token, Done done) = 0;
  virtual void Drain(std::string token, std::string node, bool drain, std::string reason,
                     Done done) = 0;
  virtual void Queues(std::string token, Done done) = 0;
  virtual void WhoAmI(std::string token, Done done) = 0;
  // The console's sign-in (POST /v1/session): WhoAmI's answer plus, in `session`, a secret
  // for the cookie that stands for the token until it expires or SignOut ends it. A
  // backend without a store of sessions (Kubernetes mode) answers WhoAmI, and the cookie
  // then holds the token itself.
  static constexpr int kSessionSeconds = 12 * 3600;  // a console session's life
  virtual void SignIn(std::string token, Done done) { WhoAmI(std::move(token), std::move(done)); }
  virtual void SignOut(std::string session, Done done) {
    (void)session;
    done(Reply{});
  }
  virtual void Usage(std::string token, double from_s, double to_s, Done done) = 0;
  virtual void ClusterHistory(std::string token, double since_unix_s, Done done) = 0;
  virtual void Heartbeat(std::string token, std::string node, nlohmann::json body,
                         std::string remote_addr, Done done) = 0;
  virtual void Watch(std::string token, std::string node, std::string instance, int64_t version,
                     int64_t timeout_ms, Done done) = 0;
  // `step` >= 0: the output of task `rank` of that job step (its stderr with `err`).
  virtual void UploadLog(std::string token, std::string node, std::string job, int run, int rank,
                         int step, bool err, int64_t offset, std::string data, Done done) = 0;
  virtual void Metrics(std::string token, Done done) = 0;
  virtual void Health(Done done) = 0;
};

// GET /v1/queues's body: each queue's guarantee, burst, weight, GPUs used (by model where
// it has guarantees by model) and budget, with the jobs waiting and running in its
// subtree as the caller counted them (by QueueId).
nlohmann::json QueuesBody(const core::QueueTree& queues, const core::Scheduler& sched,
                          const std::vector<int>& pending, const std::vector<int>& running);

// One node of GET /v1/nodes's body, the fields both backends give: its name, pool, model,
// GPUs and free whole GPUs, state ("up", "down", ...) with the reason, and address.
nlohmann::json NodeBody(const core::Cluster& cluster, const core::Node& node, int free_gpus,
                        const std::string& state, const std::string& reason,
                        const std::string& address);

}  // namespace gantry::server
