// Controller: gantryd's brain. One thread owns the scheduling core, the store and every
// record; HTTP I/O threads call the public methods, which post a message to that thread
// and return at once: the reply comes later through the caller's Done callback, so no
// I/O thread ever waits for the controller (the synchronous overloads are for tests and
// tools). Parts that own their state, each its own type: the jobs in memory and their
// indexes (job_book.h), the nodes' agents, drains and unread stops (node_book.h), the
// mailbox (mailbox.h, shared with the Kubernetes mode), who a token is and the submit
// rate (authenticator.h, shared too), the agents' watches (node_watches.h), what
// /metrics counts (controller_metrics.h) and a thread for work that reads none of the
// controller's state (offload.h: sacct's stored jobs decoded). The code is split by
// concern:
//   controller.cc            the thread, batches, watch answers, restore, persistence
//   controller_lifecycle.cc  the job life cycle: passes, starts, stops, exits, node loss
//   controller_jobs.cc       the job API (submit, ls, show, cancel, logs); who may call
//                            (tokens and sessions are authenticator.h's)
//   controller_cluster.cc    nodes, drain, queues, usage, health
//   controller_metrics.cc    /metrics (Prometheus; the counts are controller_metrics.h's)
//   controller_agents.cc     the agent protocol: heartbeats, watches, log uploads
//
// The thread works in batches: it takes every waiting message, runs them inside one
// store transaction, then handles timers (silent agents, grace deadlines), runs a
// scheduling pass when anything changed or the pass timer fired, commits, and only then
// answers the callers, so an answer never promises what is not on disk (a group commit:
// a thousand submits in one batch cost one fsync). Events (spec section 4) are appended
// to the event log after the commit. A store call that fails (a lost database, a full
// disk) drops the batch unanswered and starts a store outage: calls get 503, heartbeats
// are told to hold, and once the store answers the state is read back from it (the
// database is the truth) before anything else is done (RunBatch, StoreLost, ReadBack).
//
// Push: every change to what a node should run bumps that node's version; an agent's
// watch (a long poll) is answered as soon as its node's version moves past the one it
// holds, right after the batch that moved it commits. Heartbeats stay for liveness.
//
// Time: the core counts ticks (ms) from the server epoch, a Monday 00:00 UTC stored in
// the database on first start, so job windows (UTC times of day) mean what they say.
//
// Restart: jobs are read back in submission order; running ones are re-adopted with
// their stored allocation (core::Scheduler::Adopt), pending ones resubmitted with their original
// submit time. Nodes that were up get a full agent timeout to check in again.
// Thread-safety: every public method is thread-safe; Done callbacks run on the
// controller thread and must not block (post the work elsewhere).
#pragma once

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

#include "core/idle.h"
#include "core/scheduler.h"
#include "server/api_backend.h"
#include "server/auth.h"
#include "server/authenticator.h"
#include "server/cluster_history.h"
#include "server/controller_metrics.h"
#include "server/job_book.h"
#include "server/mailbox.h"
#include "server/metrics.h"
#include "server/node_book.h"
#include "server/node_watches.h"
#include "server/offload.h"
#include "server/state.h"
#include "server/store.h"
#include "spec/batch.h"
#include "spec/config_reader.h"
#include "spec/event_log.h"

namespace gantry::server {

// What went wrong, independent of HTTP; http_api.cc maps codes to statuses in one table.

struct ControllerOptions {
  std::string policy = "gantry";
  int64_t pass_interval_ms = 1000;  // scheduling pass timer
  int64_t node_timeout_ms = 30000;  // an agent silent this long: node down, jobs requeued
  int64_t heartbeat_ms = 2000;      // what agents are told to use
  int64_t lease_ms = 0;  // agents kill their jobs when cut off this long (0: 60% of timeout)
  int64_t kill_slack_ms = 5000;  // after a grace deadline, before assuming a worker is gone
  int64_t max_spec_bytes = 64 * 1024;
  int64_t recent_done = 10000;  // ended jobs kept in memory for `ls` and `show`
  int max_array_tasks = 10000;  // tasks in one --array
  std::string log_dir;          // job output uploaded by agents
  bool metrics_token = false;   // GET /metrics needs a token (--metrics-token)
  // Per-team submit rate limit (token bucket; admins are exempt): `submit_rate` requests a
  // second refill a bucket of `submit_burst`; past it, 429 with Retry-After. 0: no limit.
  double submit_rate = 0;
  double submit_burst = 0;  // 0: twice the rate
  // The usage time series (issue 12): a sample per running job this often, kept this long.
  int64_t usage_sample_ms = 300'000;
  int64_t usage_retention_ms = 14 * 86'400'000LL;
  // Ended jobs are deleted from the store (with their output) this long after they ended,
  // as Slurm's PurgeJobAfter; 0 keeps them. Their runs stay for usage accounting.
  int64_t job_retention_ms = 0;
  // The cluster's history for the console (kept in the store's cluster_history too, so a
  // restart or a standby taking over keeps the day): pending jobs by
  // why they wait and free GPUs by why nothing uses them, a sample this often, the last
  // history_samples kept (a day at the defaults).
  int64_t history_sample_ms = 60'000;
  size_t history_samples = 1440;
  std::string leader;  // this gantryd's name in the leader lease (its URL), for /healthz
  int64_t epoch = 0;   // the lease epoch it holds
};

// Called once with the reply, on the controller thread, after the batch committed.

// Why a job name a user chose cannot be used (characters outside [A-Za-z0-9._-], a
// leading '.' or '-', more than 100 characters, or the server's own j<digits>).
std::optional<std::string> BadJobName(const std::string& name);

// GET /v1/jobs: which jobs, how many. With `limit`, the active jobs come first (pending,
// then running and stopping, each oldest first), then the ended, latest first; at most
// `limit` are listed, while `total` and the counts cover every job that matches.

class Controller : public ApiBackend {
 public:
  using WallClock = std::function<int64_t()>;  // ms since the Unix epoch

  Controller(const spec::ClusterConfig& config, Store& store, ControllerOptions options,
             std::ostream* events, WallClock clock);
  ~Controller() override;
  Controller(const Controller&) = delete;
  Controller& operator=(const Controller&) = delete;

  // Rebuilds the state from the store and starts the thread.
  Status Start();
  // Answers waiting callers with kUnavailable and joins the thread.
  void Stop();

  // The API, asynchronous: `done` gets the reply.
  void Submit(std::string token, SubmitRequest req, Done done) override;
  // {jobs, total, waiting: [{cause, pool?, jobs}], values: {queue, state, user}}: the
  // pending jobs that match counted by what holds them (most first), and the values of
  // each filter among the jobs listed before filtering (a console's choices).
  void ListJobs(std::string token, JobQuery query, Done done) override;
  void ShowJob(std::string token, std::string name, Done done) override;
  // A job's usage time series: {"samples": [{t, run, gpus, util, vram_peak_gb}]}.
  void JobUsageSeries(std::string token, std::string name, Done done) override;
  // {job, number, env, token}: only its own user (or an admin), while its run is.
  void JobAllocation(std::string token, std::string name, Done done) override;
  void ReleaseAllocation(std::string token, std::string name, int exit_code, Done done) override;
  // `force`: a running or stopping job's grace ends now (its workers' process groups are
  // SIGKILLed, no checkpoint signal waited for), as scancel --signal=KILL.
  void Cancel(std::string token, std::string name, bool force, Done done) override;
  void Requeue(std::string token, std::string name, Done done) override;
  void Hold(std::string token, std::string name, bool hold, std::optional<bool> admin_hold,
            Done done) override;
  void SetBegin(std::string token, std::string name, int64_t begin_ms, Done done) override;
  void SetAfter(std::string token, std::string name, std::string after, Done done) override;
  void SetThrottle(std::string token, std::string name, int limit, Done done) override;
  void UpdateSpec(std::string token, std::string name, nlohmann::json fields, Done done) override;
  void SetTimeLimit(std::string token, std::string name, int64_t limit_ms, bool add,
                    Done done) override;
  void Signal(std::string token, std::string name, int signal, std::string to, Done done) override;
  // The path of a worker's log (body.path), after checking the caller may read it.
  void LogPath(std::string token, std::string name, int run, int rank, int step, bool err,
               Done done) override;
  // Job steps (controller_steps.cc): the job's own credential only.
  void CreateStep(std::string token, std::string job, nlohmann::json body, Done done) override;
  // With a version and a wait, srun's long poll (StepWatch).
  void ShowStep(std::string token, std::string job, int step, std::string version, int64_t wait_ms,
                Done done) override;
  void CancelStep(std::string token, std::string job, int step, bool kill, Done done) override;
  void LaunchStep(std::string token, std::string job, int step, nlohmann::json body,
                  Done done) override;
  void Nodes(std::string token, Done done) override;
  void Drain(std::string token, std::string node, bool drain, std::string reason,
             Done done) override;
  void Queues(std::string token, Done done) override;
  // Who `token` is (the console's session): principal, admin, team, queues, user.
  void WhoAmI(std::string token, Done done) override;
  void SignIn(std::string token, Done done) override;
  void SignOut(std::string session, Done done) override;
  void Usage(std::string token, double from_s, double to_s, Done done) override;
  // GET /v1/cluster/history: {interval_s, samples: [{t, up_gpus, used_gpus, pending:
  // {cause: jobs}, idle: {cause: GPUs}}]}, oldest first.
  void ClusterHistory(std::string token, double since_unix_s, Done done) override;
  void Heartbeat(std::string token, std::string node, nlohmann::json body, std::string remote_addr,
                 Done done) override;
  // A long poll: answered with the node's workers once its version differs from
  // `version` (or the server instance from `instance`), or after `timeout_ms`.
  void Watch(std::string token, std::string node, std::string instance, int64_t version,
             int64_t timeout_ms, Done done) override;
  void UploadLog(std::string token, std::string node, std::string job, int run, int rank, int step,
                 bool err, int64_t offset, std::string data, Done done) override;
  // reply.text. With options' metrics_token, any valid token is needed (the series name
  // jobs and users); else none.
  void Metrics(std::string token, Done done) override;
  void Health(Done done) override;

  // The same, waiting for the reply (tests and tools; never from an I/O thread).
  Reply Submit(const std::string& token, SubmitRequest req);
  Reply ListJobs(const std::string& token, JobQuery query);
  Reply ListJobs(const std::string& token, const std::string& state_filter, bool all) {
    JobQuery q;
    q.state = state_filter;
    q.all = all;
    return ListJobs(token, std::move(q));
  }
  Reply ShowJob(const std::string& token, const std::string& name);
  Reply Cancel(const std::string& token, const std::string& name, bool force = false);
  Reply Requeue(const std::string& token, const std::string& name);
  Reply Hold(const std::string& token, const std::string& name, bool hold,
             std::optional<bool> admin_hold = std::nullopt);
  Reply SetBegin(const std::string& token, const std::string& name, int64_t begin_ms);
  Reply SetAfter(const std::string& token, const std::string& name, const std::string& after);
  Reply SetThrottle(const std::string& token, const std::string& name, int limit);
  Reply UpdateSpec(const std::string& token, const std::string& name, const nlohmann::json& fields);
  Reply SetTimeLimit(const std::string& token, const std::string& name, int64_t limit_ms,
                     bool add = false);
  Reply Signal(const std::string& token, const std::string& name, int signal,
               const std::string& to);
  Reply LogPath(const std::string& token, const std::string& name, int run, int rank, int step = -1,
                bool err = false);
  Reply CreateStep(const std::string& token, const std::string& job, const nlohmann::json& body);
  Reply ShowStep(const std::string& token, const std::string& job, int step);
  Reply LaunchStep(const std::string& token, const std::string& job, int step,
                   const nlohmann::json& body);
  Reply Nodes(const std::string& token);
  Reply Drain(const std::string& token, const std::string& node, bool drain, std::string reason);
  Reply Queues(const std::string& token);
  Reply Usage(const std::string& token, double from_s, double to_s);
  Reply Heartbeat(const std::string& token, const std::string& node, const nlohmann::json& body,
                  const std::string& remote_addr);
  Reply UploadLog(const std::string& token, const std::string& node, const std::string& job,
                  int run, int rank, int64_t offset, const std::string& data, int step = -1,
                  bool err = false);
  std::string Metrics(const std::string& token = "");
  nlohmann::json Health();
  // Runs fn on the controller thread between batches and waits for it (reopening the
  // event log's stream, which that thread writes).
  void RunExclusive(const std::function<void()>& fn);
  // Runs a pass and the timers now and waits for them (tests).
  void Poke();

 private:
  // What a message is to a store outage (RunBatch): an agent's heartbeat is told to hold
  // (keep its workers, report again); a read (health, metrics, ls, show, nodes, queues,
  // a job's log, a step) still runs while memory is what the store last committed (the
  // outage began before a batch changed anything): it reads memory, and a read of the
  // store that fails is refused; every other call is refused with 503 and Retry-After.
  enum class Kind { kCall, kHeartbeat, kRead };
  struct Message {
    std::function<Reply()> run;  // on the controller thread, inside the batch's transaction
    Done done;
    Kind kind = Kind::kCall;
  };
  // Runs fn on the controller thread; done gets its reply after the batch commits.
  void Post(std::function<Reply()> fn, Done done, Kind kind = Kind::kCall);
  static Reply Wait(const std::function<void(Done)>& start);
  void Loop();
  void RunBatch(std::vector<Message>& batch);
  // Store outages (docs/control-plane.md, "Store outages"). StoreLost enters (or stays in)
  // one: parked watches are answered 503 and, when `ahead` (a batch that changed memory
  // could not be saved), the state is read back from the store once it answers again
  // (ReadBack). AnswerInOutage answers a batch that was not saved; `replies` says which
  // of its messages parked themselves (watches, answered by StoreLost).
  void StoreLost(const std::string& why, Ticks now, bool ahead);
  void AnswerInOutage(std::vector<Message>& batch, const std::vector<Reply>& replies, Ticks now);
  // A 503 saying the store is unavailable, since when and to try again in a second: what
  // every call gets during an outage (/healthz too, read-back or not).
  Reply OutageReply(const std::string& message, Ticks now) const;
  void StoreBack(Ticks now);
  void ReadBack();
  // How long after the last saved batch agents are told to hold their workers: short
  // enough that a standby that took over meanwhile finds them fenced before it declares
  // their nodes lost (hold + the agents' lease < the node timeout).
  Ticks HoldMs() const {
    return std::max<Ticks>(0, (options_.node_timeout_ms - options_.lease_ms) * 3 / 4);
  }
  // What a watch of node n is answered with now.
  Reply WatchReply(core::NodeId n, Ticks now);

  Ticks Now();
  int64_t WallMs(Ticks t) const { return epoch_ms_ + t; }
  double UnixSeconds(Ticks t) const { return static_cast<double>(WallMs(t)) / 1000.0; }
  // The caller `token` stands for at the batch's time (auth_), or nullopt and the error.
  std::optional<Principal> Authenticate(const std::string& token, Reply& error) {
    return auth_.Authenticate(token, WallMs(now_), error);
  }
  // Call() as a user (not an agent): fn runs on the controller thread with the caller,
  // or the reply is the authentication error.
  // CallAsAgent's checks once the token is known: an agent (or admin) token for this node.
  Reply AsAgent(const Principal& p, const std::string& node,
                const std::function<Reply(core::NodeId)>& fn);
  void CallAsUser(std::string token, Done done, std::function<Reply(const Principal&)> fn,
                  Kind kind = Kind::kCall);
  // Call() as an agent (or admin): fn gets the node, or the reply is the error.
  void CallAsAgent(std::string token, std::string node, Done done,
                   std::function<Reply(core::NodeId)> fn, Kind kind = Kind::kCall);

  // ---- state changes (controller thread) ----
  Status Restore();
  std::optional<core::JobSpec> ReadSpec(const Job& job, std::vector<std::string>* problems);
  // A job's record is written once per batch however often it changed in it (submitted
  // and started, exited and ended: two or three writes of the whole record before), by
  // SaveJobs before the commit; a lookup that must see this batch's jobs in the store
  // (an idempotency key) saves them first, and a job dropped from memory is saved then.
  void Persist(const Job& job);
  void SaveJobs();
  void SaveJob(const Job& job);
  std::set<int64_t> unsaved_;  // seqs Persist was called for in this batch
  void PersistNode(core::NodeId n);
  void Pass(Ticks now);
  void Housekeeping(Ticks now);
  // `resized`: the next run of an elastic job after a resize (logged as the resize was).
  void StartRun(Job& job, Ticks now, bool resized = false);
  // The scheduler resized an elastic job (a kResize decision): its run ends at this
  // checkpoint (the checkpoint signal, its grace) and the next starts at the new size.
  // (The GPUs of its old workers that the new size leaves out stay held in the scheduler
  // until the new run begins: PolicyParams::resize_waits_for_run.)
  void Resized(Job& job, Ticks now);
  void BeginStop(Job& job, StopKind kind, std::string reason, Ticks grace, Ticks now);
  void EndStop(Job& job, Ticks now);
  void FinishRun(Job& job, Ticks now);
  void EndRunRows(Job& job, Ticks now);
  void WorkerExited(Job& job, Worker& w, const ExitReport& e, Ticks now);
  // Node n is down (`why`: for the log; its running jobs are requeued as lost, `lost` the
  // reason they are given). The default: its heartbeats stopped.
  void NodeDown(core::NodeId n, Ticks now,
                std::string_view why = "no heartbeat within the node timeout",
                std::string_view lost = "failed");
  void SetCoreNodeUp(core::NodeId n);
  // A job failed at start because the config no longer reads it (--force-config) has its
  // workers stopped as a preemption would (UnreadStop, node_book.h). Kept in memory only:
  // a second restart within the grace leaves them to their agents, which kill what no
  // gantryd assigns.
  // (Restore only: it takes the held nodes out of the core once it has re-adopted what
  // runs there.)
  void StopUnreadJob(const Job& job, Ticks grace, Ticks now);
  // Drops node n's unread stops that `gone` selects and lets the node take work again.
  void EndUnreadStops(core::NodeId n, const std::function<bool(const UnreadStop&)>& gone);
  void EndJob(Job& job, JobEnd end, std::string reason, Ticks now);
  // The scheduler's record of an ended job goes (Scheduler::Forget), with the job's core id.
  void LetGoOfCore(Job& job);
  // Drops an ended job from memory (the store may still have it).
  void DropEnded(std::map<int64_t, Job>::iterator it);
  // Deletes ended jobs past options_.job_retention_ms from the store and memory; their
  // output goes once the batch has committed.
  void PurgeJobs(Ticks now);
  // Dependencies. Release hands a job whose dependencies are met to the scheduler;
  // Settle re-checks a held job's dependencies (releases it, or when one can never be met
  // cancels it, KillsOnNeverMet, else marks it to wait until cancelled: Job::never_met);
  // EndJob settles the jobs that wait on the one that ended.
  // (Release holds back an array task while its array's throttle is full; ReleaseThrottled
  // gives an array's held tasks to the scheduler, in index order, while it has room.)
  // (It also holds back a job held by `scontrol hold` or waiting for its --begin time:
  // HeldBack; BeginDue releases those whose time came.)
  void Release(Job& job, Ticks now);
  void GiveToScheduler(Job& job, Ticks now);
  bool HeldBack(const Job& job, Ticks now) const {
    return !job.hold.empty() || job.begin_ms > WallMs(now);
  }
  void BeginDue(Ticks now);
  // A pending job given to the scheduler comes out of it again (a hold, a later begin
  // time), as a cancelled pending job goes. True when that freed a place of its array's
  // throttle (the caller gives it to the next task: ReleaseThrottled).
  bool Withdraw(Job& job, Ticks now);
  bool ArrayHasRoom(const Job& job) const;
  int InScheduler(const std::string& array) const;  // its tasks given to the scheduler, active
  void ReleaseThrottled(const std::string& array, int limit, Ticks now);
  void ReleaseThrottledArrays(const std::set<std::string>& arrays, Ticks now);
  // A signal asked of a running job's run (scancel --signal; an sbatch --signal at its time
  // limit less the lead): its agents deliver each ask once, to `to`.
  void AskSignal(Job& job, int signal, SignalTo to);
  // Cancels an active job: a pending one ends now, a running one gets its grace (none
  // with `force`, which also cuts a stopping job's grace short).
  void CancelJob(Job& job, const std::string& reason, Ticks now, bool force = false);
  void Settle(Job& job, Ticks now);
  // Whether a job whose dependency can never be met is cancelled for it: a native job
  // always; a batch job as its sbatch --kill-on-invalid-dep says, else as the site's
  // kill_invalid_depend (Slurm's default: not, it waits DependencyNeverSatisfied).
  bool KillsOnNeverMet(const Job& job) const {
    if (!job.batch()) return true;
    return job.kill_invalid_dep >= 0 ? job.kill_invalid_dep == 1 : config_.site.kill_invalid_depend;
  }
  // The dependencies `text` asks (the API's after: "j12,j13:any", a '?' list, singleton) of
  // a job of `spec` (`job`: its user, team and seq, for singleton), as they stand now: those
  // not met yet in `after` (`after_or`: any one of them is enough); for a batch job one
  // never to be met, why in `never_met` (and it in `after`). An error reply when they
  // cannot be: malformed, an unknown job, a native job's dependency never to be met.
  std::optional<Reply> ResolveAfter(const std::string& text, const core::JobSpec& spec,
                                    const Job& job, std::vector<Dependency>& after, bool& after_or,
                                    std::string& never_met);
  // The jobs `name` means for scontrol update's pending-only fields (`field`, for the
  // message): the job, or an array's tasks, each one `user` may manage; an error reply
  // where there is none, one is another's, or the job named is no longer pending (with
  // `running_too`, has ended: a running job's name is changed too, as Slurm's).
  std::optional<Reply> PendingJobsToUpdate(const Principal& user, const std::string& name,
                                           const std::string& field, std::vector<Job*>& jobs,
                                           bool running_too = false);
  // Submit's refusals, which an update of a job's spec makes too: a queue `user` may not
  // submit to (403, naming its queues); a spec that could never run here (422: no pool
  // could hold it, its queue may not use its tier, or it is above its queue's burst limit).
  std::optional<Reply> MayNotSubmit(const Principal& user, const std::string& queue) const;
  std::optional<Reply> NeverRuns(const core::JobSpec& spec) const;
  // After an update of pending job `job`: handed to the scheduler where nothing holds it
  // back (Release), shown and saved.
  void Updated(Job& job);
  // Settle's end for a job whose dependency `never` can never be met: cancelled, or left to
  // wait with the reason (once).
  void NeverMet(Job& job, const std::string& never, Ticks now);
  // How job `name` stands for a dependency: kNone while it is active, else how it ended;
  // nullopt when there is no such job. Any team's job, as in Slurm (and as `show` shows
  // every job's state): a dependency reads its end, nothing of its spec.
  std::optional<JobEnd> EndStateOf(const std::string& name);
  // Where a dependency of `kind` on job `name` stands; `end` is how that job stands
  // (EndStateOf: nullopt when there is no such job, which reads as failed here).
  enum class DepState : uint8_t { kWaiting, kMet, kNever };
  DepState DependencyState(const std::string& name, Dependency::Kind kind,
                           std::optional<JobEnd>& end);
  // What a node should run changed: bump the versions of the job's nodes (watches).
  void Touch(const Job& job);
  // The job's run is over: out of the book's running jobs, its workers' entries dropped.
  void RemoveRunning(const Job& job);
  // What node n should run (a watch answer; a heartbeat's adds the timings): its
  // workers' cached entries, a stopping job's as `stop` with the grace left.
  proto::WatchAnswer NodeAnswer(core::NodeId n, Ticks now);
  // One worker's entry in it as when running (cached in Worker::desired for the run).
  proto::DesiredWorker DesiredWorker(const Job& job, const Worker& w);
  // Slurm's names for one worker (output patterns, SLURM_* variables; docs/slurm.md);
  // `nodes`: JobNodes(job), computed once by the caller.
  spec::OutputNames OutputNamesOf(const Job& job, const Worker& w,
                                  const std::vector<std::string>& nodes) const;
  // `a`: what the worker sees (its CPUs on the node: NodeLimits, SLURM_CPUS_ON_NODE).
  void SlurmEnv(const Job& job, const Worker& w, const core::WorkerAlloc& a, int local,
                const std::vector<std::string>& nodes, const spec::OutputNames& names,
                std::map<std::string, std::string>& env) const;
  nlohmann::json JobSummary(const Job& job, bool details, const Principal* viewer);
  // An ended job read back from the store (no longer in memory), for show.
  Job FromStore(const StoredJob& stored);
  // GET /v1/jobs's answer (ListJobs, `q` checked): the jobs in memory (the ended ones
  // `with_ended`), and with q.ended_since_ms the `stored` ended ones not in memory any more
  // (decoded on offload_; `truncated`: more were in the window).
  Reply ListJobsReply(const JobQuery& q, bool with_ended, const std::vector<Job>& stored,
                      bool truncated);
  // The pool a job is restricted to, else the pool it ran in; empty: neither.
  std::string PoolOf(const Job& job) const;
  // A job's partition, account and QoS as Slurm names them (the site mapping's names; the
  // job's SLURM_JOB_* and squeue's, sacct's and scontrol's columns): the partition of
  // `pool` ("" for none), the account and QoS it was given or the site's for its queue and
  // `tier`.
  struct SlurmNames {
    std::string partition, account, qos;
  };
  SlurmNames SiteNames(const Job& job, core::PoolId pool, core::Tier tier) const;
  // What a pending job waits for, in one word: the scheduler's cause, "held" (scontrol
  // hold), "begin" (its --begin time), "dependency" (held by --after), "throttle" (an
  // array task held by its array's %N), or "unscheduled" (not yet given to the scheduler).
  std::string WaitWord(const Job& job) const;
  // The nodes its workers are on, each once, in rank order.
  std::vector<std::string> JobNodes(const Job& job) const;
  bool MaySee(const Principal& p, const Job& job) const;
  // Whether `p` may cancel or requeue `job`: one of its queues; a job's credential only
  // its own job and its user's jobs.
  bool MayManage(const Principal& p, const Job& job) const;
  // MayManage's refusal of an update (403, naming the job and its queue), or nullopt.
  std::optional<Reply> MayNotUpdate(const Principal& user, const Job& job) const;
  // Whether `p` may use batch job `job`'s allocation (its user or an admin, while it runs):
  // an empty (kOk) reply, else why not.
  Reply AllocationUser(const Principal& p, const Job* job, const std::string& name) const;
  // Slurm's names for a pool: the site's partitions mapped to it, else the pool's own name.
  std::vector<std::string> PartitionsOf(core::PoolId pool) const;
  void WriteFinishEvent(Ticks t, const Job& job);
  // Batch jobs and their steps (controller_steps.cc). A new credential for the job's run
  // (its hash kept in the job; the token itself only in memory, for the script's env).
  // `another`: one more for the current run, the others staying valid (a gantryd that
  // restarted during the run knows their hashes only: Restore makes one for the script's
  // environment and salloc).
  std::string NewRunToken(Job& job, bool another = false);
  // The job whose run `token` is the credential of, while that run is active; nullopt
  // (and `error`) for a "gjt_" token that is not (any more).
  std::optional<Principal> JobPrincipal(const std::string& token, Reply& error);
  // Starts the job's pending steps that fit now, in order.
  void StartSteps(Job& job, Ticks now);
  // Places step `s` as it asks on the job's slots not used by running steps (its tasks'
  // slots, nodes, local ids); "" when placed, else why not, with `wait` set when the step
  // could run once running steps end. `tasks`, when given, is set to how many tasks the
  // step has (placed now or later; unset when it is refused).
  std::string PlaceStep(const Job& job, Step& s, bool& wait, int* tasks = nullptr) const;
  // A step asking fewer GPUs than the job holds (`per_node` a node, or `total`): sets
  // s.own_gpus; "" when the job's GPUs can give it, else why not.
  std::string OwnGpus(const Job& job, Step& s, int per_node, int total) const;
  // The step's nodes in its task order, each with its number of tasks; their names.
  std::vector<std::pair<std::string, int>> StepNodes(const Job& job, const Step& s) const;
  std::vector<std::string> StepNodeNames(const Job& job, const Step& s) const;
  nlohmann::json StepBody(const Job& job, const Step& s) const;
  // GET of step `step` of the job `seq` (in memory): its body with its version (a hash of
  // the rest: srun's long poll waits for it to change), or 404.
  Reply StepReply(int64_t seq, const std::string& name, int step);
  // srun's long polls: a step's GET parked until the step's body differs from `version`
  // or `deadline` passes. After each batch, the watches of jobs whose steps may have
  // changed in it (steps_changed_: Persist, Touch, TouchStep, a step's log upload) are
  // checked.
  struct StepWatch {
    int64_t seq = 0;
    std::string name;
    int step = 0;
    std::string version;
    Ticks deadline = 0;
    Done done;
  };
  std::vector<StepWatch> step_watches_;
  std::set<int64_t> steps_changed_;
  // Answers the step watches that are due; with `all`, every one with it.
  void AnswerStepWatches(Ticks now, const Reply* all = nullptr);
  // A step as job listings carry it (sacct's step rows): id, name, state, exit code (and
  // signal), start, end, tasks, nodes.
  nlohmann::json StepSummary(const Job& job, const Step& s) const;
  // Step s's tasks are stopped (srun interrupted, scancel of the step, its time limit):
  // their signal, then SIGKILL kStepKillWaitMs later, or with `kill` SIGKILL at once (a
  // task's MPI_Abort, also after the signal); a step not started yet never will.
  void StopStep(Job& job, Step& s, Ticks now, bool kill = false);
  // Job's running steps past their srun --time are stopped, and end TIMEOUT.
  void TimeOutSteps(Job& job, Ticks now);
  // A step task's entry for its agent (cached in StepTask::desired).
  proto::DesiredWorker StepDesired(const Job& job, const Step& s, int task) const;
  void StepTaskExited(Job& job, const ExitReport& e, core::NodeId n, Ticks now);
  // A batch job's usage report from node n (its script's, or a step task's): for the slots
  // it covers (the node's, or a bound task's own), each with its share of the memory; the
  // script's also says the slots on nodes where no step task runs are idle (nothing of
  // the job runs there), so an allocation left unused is reclaimed as any idle job.
  void RecordBatchUsage(Job& job, const RunningReport& r, core::NodeId n, Ticks now);
  // The batch script ended: the job's slots are released and its steps' tasks killed
  // (as Slurm does), so the run can end.
  void EndAllocation(Job& job, const std::string& why);
  // Bumps the versions of the nodes step `s` has tasks on.
  void TouchStep(const Job& job, const Step& s);
  // What one node's share of a batch job is: its workers there merged (exclusive GPUs,
  // CPUs, memory), or worker `rank`'s own where they are shares or MIG instances.
  core::WorkerAlloc NodeAlloc(const Job& job, core::NodeId n, int rank) const;
  // The node's indexes of the GPUs `a` holds (a MIG instance's or a share's: its GPU's), as
  // Slurm's SLURM_JOB_GPUS and SLURM_STEP_GPUS say them: "0,1,2,3".
  static std::string GpuIndexes(const core::WorkerAlloc& a);
  // The signals asked of job's run (Job::signals) sent to any of `to`, numbered as asked.
  static std::vector<proto::DesiredWorker::Signal> AskedSignals(const Job& job,
                                                                std::initializer_list<SignalTo> to);
  proto::Limits NodeLimits(const Job& job, core::NodeId n) const;
  std::unordered_map<int64_t, std::string> run_tokens_;  // by job seq: the current run's

  // Usage and idle reclamation (controller_usage.cc).
  double JobGpus(const Job& job) const;
  void RecordUsage(Job& job, Worker& w, const RunningReport& r, Ticks now);
  void ReclaimIdle(Ticks now);
  // At start, fair share and budgets from the stored runs (server/accounts.h) and which
  // budgets were already said spent; events for budgets spent or renewed by a pass.
  Status SeedFromRuns(Ticks now);
  void NoteBudgets(Ticks now);
  std::vector<char> budget_out_;  // by queue, as of the last pass (or said before a restart)
  // Active jobs per team (site.max_active_jobs_per_team): up at each submit and restore,
  // down in EndJob.
  std::map<std::string, int64_t> active_by_team_;
  // The store's meta key holding the start (Unix ms) of the period queue's budget was last
  // said spent in (an event and a log line), empty once renewed.
  static std::string BudgetSaidKey(const std::string& queue);
  // The runs table's usage columns for the current run's workers (when it ends).
  void SaveRunUsage(const Job& job);
  nlohmann::json UsageSummary(const Job& job, Ticks now) const;

  const spec::ClusterConfig& config_;
  const core::Cluster& cluster_;
  Store& store_;
  ControllerOptions options_;
  std::ostream* events_out_;
  WallClock clock_;
  // Tokens, sessions, job credentials (JobPrincipal) and the submit rate limit.
  Authenticator auth_;

  // Owned by the controller thread once started.
  std::unique_ptr<core::Scheduler> sched_;
  int64_t epoch_ms_ = 0;
  Ticks last_now_ = 0;
  Ticks now_ = 0;  // the current batch's time: every change in a batch happens at it
  // The jobs in memory and their indexes (by name, array, core id, node, dependency).
  JobBook book_;
  // Pending jobs waiting for their --begin time: (begin_ms, seq), soonest first. An entry
  // whose job has gone, started or changed its time is dropped when its time comes.
  std::set<std::pair<int64_t, int64_t>> begins_;
  NodeWatches watches_;        // the nodes' versions (bumped by Touch) and parked watches
  NodeBook nodes_;             // the nodes' agents, drains and unread stops
  Ticks samples_pruned_ = -1;  // the usage time series is pruned hourly
  // Housekeeping's timers (node timeouts, time limits, idle reclaim, overdue stops) run
  // at most this often.
  static constexpr Ticks kTimersEveryMs = 100;
  Ticks next_timers_ = 0;
  Ticks jobs_purged_ = -1;            // and ended jobs past their retention, in batches
  bool purge_more_ = false;           // the last batch was full: another at the next batch
  bool restoring_ = false;            // inside Restore
  std::vector<int64_t> purged_logs_;  // seqs whose output goes after the commit
  server::ClusterHistory history_;    // the console's cluster history (server/cluster_history.h)
  std::ostringstream event_buf_;
  spec::EventLog log_;
  bool dirty_ = true;  // something changed: run a pass
  Ticks next_pass_ = 0;
  std::string instance_;  // random per process start (and per read-back after an outage)
  // A store outage: since when (-1: none), why, whether memory is ahead of the store, and
  // when the store is tried next (backing off from 250 ms to 1 s).
  struct Outage {
    Ticks since = -1;
    std::string why;
    bool ahead = false;
    Ticks next_try = 0, backoff = 0;
  } outage_;
  Ticks last_saved_ = 0;  // the last batch committed

  ControllerMetrics metrics_;  // what /metrics counts

  // Calls for the controller thread: opened by Start, closed by Stop.
  Mailbox<Message> inbox_{/*open=*/false};
  Offload offload_;  // work that reads no controller state; stopped first, answers through inbox_
  std::thread thread_;
};

}  // namespace gantry::server
