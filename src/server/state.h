// The controller's in-memory records of jobs and nodes, and their JSON forms (the `doc`
// column of the store, and what agents report).
//
// A job's life on the server: pending -> running (one "run" per start; workers by rank)
// -> stopping (signalled: preempted, cancelled, failed, lost; waiting for every worker
// to exit or for the grace deadline) -> pending again or done. A run ends only when
// each of its workers has exited or can no longer be running (its node is down, so its
// agent has fenced it), so a job never runs twice at once.
// Thread-safety: plain values, owned by the controller thread.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/result.h"
#include "core/ledger.h"
#include "core/model/cluster.h"
#include "core/model/job.h"
#include "proto/node.h"
#include "spec/multi_prog.h"

namespace gantry::server {

using core::Ticks;

enum class JobState : uint8_t { kPending, kRunning, kStopping, kDone };
// How a done job ended: the words are what the API, the store and the metrics say.
enum class JobEnd : uint8_t { kNone, kFinished, kFailed, kCancelled, kRejected, kReclaimed };
inline constexpr JobEnd kJobEnds[] = {JobEnd::kFinished, JobEnd::kFailed, JobEnd::kCancelled,
                                      JobEnd::kRejected, JobEnd::kReclaimed};
std::string_view Word(JobEnd e);                           // "finished", ...; "" for kNone
std::optional<JobEnd> JobEndNamed(std::string_view word);  // the ended ones' words only
// Why a run is being stopped.
// kResize: an elastic job's run ends at a checkpoint so that the next starts at the size
// the scheduler gave it.
// kRelease: salloc's command ended with code 0: its allocation ends completed.
enum class StopKind : uint8_t {
  kNone,
  kPreempt,
  kCancel,
  kFail,
  kLost,
  kReclaim,
  kResize,
  kRelease
};

std::string_view Name(JobState s);
std::string_view Name(StopKind k);
// Where scancel --signal sends a signal: the steps' tasks (a batch job's default; a native
// job's workers), the batch script's shell alone (-b), or the script's process group and
// the steps (-f). The words are the API's and the store's: "steps", "batch", "full".
enum class SignalTo : uint8_t { kSteps, kBatch, kFull };
std::string_view Word(SignalTo t);
std::optional<SignalTo> SignalToNamed(std::string_view word);

struct Worker {
  int rank = 0;
  core::WorkerAlloc alloc;
  bool exited = false;
  int exit_code = 0;
  int signal = 0;
  bool lost = false;  // its process vanished without an exit status (node or agent lost)
  // Usage as its agent reports it (not kept across a gantryd restart).
  Ticks usage_at = -1;  // its last report
  Ticks busy_at = -1;   // its last report at or above the idle threshold, or its first
  double util = 0;      // 0..1, last report
  int64_t vram_used = 0;
  // This run's totals (the runs table gets them when it ends).
  double busy_gpu_ms = 0, reported_gpu_ms = 0;
  int64_t vram_peak = 0;
  double util_peak = 0;
  // What its agent is sent to run it (Controller::DesiredWorkers), built once per run: a
  // node's answer is rebuilt whenever anything on it changes, and most of its workers
  // did not (not kept across a gantryd restart).
  mutable std::shared_ptr<const proto::DesiredWorker> desired;
};

// What a job used over all its runs: GPUs held, how busy they were, VRAM. Reports
// cover the time from one heartbeat to the next (each sample holds until the next).
struct Usage {
  double gpu_ms = 0;           // GPUs held x time, runs that ended (the running one is added live)
  double busy_gpu_ms = 0;      // utilization x GPUs x time, where reported
  double reported_gpu_ms = 0;  // GPUs x time covered by reports
  double vram_ms = 0;          // VRAM used x time (byte-ms, per worker), where reported
  double reported_ms = 0;      // worker x time covered by reports
  int64_t vram_peak = 0;       // bytes, the most one worker used
  double util_peak = 0;        // 0..1, the highest one worker reported
  std::string model;           // the GPU model of the last report (right-sizing advice)
};

// A job step (`srun` in a batch job, as Slurm's steps 0, 1, ...): tasks launched on the
// job's nodes, inside its allocation, each ending on its own. A step whose tasks do not
// fit beside the running steps waits for them (Slurm's "step creation temporarily
// disabled"), unless it overlaps.
struct StepTask {
  int slot = 0;   // the job's worker (rank) whose node (and, bound, whose GPUs) it uses
  int local = 0;  // SLURM_LOCALID: its index among the step's tasks on its node
  int node = 0;   // SLURM_NODEID: its node's index among the step's nodes
  bool exited = false, lost = false;
  int exit_code = 0, signal = 0;
  std::string note;
  int64_t output_bytes = 0;  // uploaded so far (not kept across restarts)
  int64_t error_bytes = 0;   // of its stderr, the same
  // What its agent is sent (Controller::StepDesired), built once (not kept across restarts).
  mutable std::shared_ptr<const proto::DesiredWorker> desired;
};

// A container's mounts as JSON, [{"source", "target", "read_only"}]: srun's request and a
// step's stored record say them alike. MountsFromJson throws json::exception on a
// malformed one.
nlohmann::json MountsToJson(const std::vector<proto::DesiredWorker::Mount>& mounts);
std::vector<proto::DesiredWorker::Mount> MountsFromJson(const nlohmann::json& list);

struct Step {
  enum class State : uint8_t { kPending, kRunning, kEnded };
  int id = 0;
  std::string name;  // srun -J; the command's name by default
  std::vector<std::string> command;
  std::map<std::string, std::string> env;  // srun's environment (--export)
  std::string workdir;                     // srun's directory
  // As srun asked (0: its default): -N, -n, --ntasks-per-node, --cpus-per-task.
  int nodes = 0, ntasks = 0, per_node = 0, cpus_per_task = 0;
  std::vector<std::string> nodelist;  // -w: only these of the job's nodes (empty: any)
  bool bind_gpus = false;             // each task only its slot's GPUs (--gpus-per-task)
  std::string gpu_bind;               // srun --gpu-bind as given (GpuBinding reads it)
  bool cyclic = false;  // -m cyclic: tasks round-robin over the step's nodes (else block)
  // Fewer GPUs than the job's (srun --gres=gpu:N, --gpus-per-node, --gpus): this many of
  // the job's GPUs on each of its nodes, the lowest free ones, which each of its tasks there
  // sees, as Slurm's; 0: the job's. `gpu_masks`: once placed, its GPUs by step node.
  int own_gpus = 0;
  std::vector<uint64_t> gpu_masks;
  // srun --exact, --exclusive or an explicit -c: the step holds its tasks' CPUs (-c each, or
  // the batch script's SLURM_CPUS_PER_TASK) on each node, and SLURM_CPUS_ON_NODE says them;
  // without: all the job's CPUs on its nodes, so steps started together run one by one, as
  // Slurm 22.05's (bench/slurm_scripts/task_farm*.sbatch). `cpus`: once placed, by step
  // node, the positions it holds among the job's CPUs there (0 up to the job's CPUs on the
  // node, as gantry-agent lists them); empty for a step that overlaps (it may use them all).
  bool exact = false;
  std::vector<std::vector<int>> cpus;
  // srun --container-image and pyxis' other options: its tasks run in this image (empty:
  // the job's, if any), with these mounts, this working directory inside, and the user's
  // home mounted.
  std::string image;
  std::vector<proto::DesiredWorker::Mount> mounts;
  std::string container_workdir;
  bool mount_home = false;
  // srun --multi-prog: the configuration file's text (`command` is then the file and srun's
  // words after it); each task runs its line (spec::MultiProg). Empty: `command` for all.
  std::string multi_prog;
  mutable std::shared_ptr<const spec::MultiProg> programs;  // read from it (not stored)
  // srun's standard input (-i), base64, for every task or only task `input_task` (-1: all);
  // empty: none (/dev/null).
  std::string input;
  int input_task = -1;
  bool overlap = false;  // may share CPUs and GPUs with running steps (--overlap)
  // srun --mpi=pmix: placed, but its tasks start only once srun serves them PMIx and says so
  // (Controller::LaunchStep, with the variables they need to reach it); cancelled if that
  // has not come kStepHoldMs after it was placed.
  bool held = false;
  bool cancelled = false;  // srun was interrupted: its tasks are stopped
  bool killed = false;     // ... by SIGKILL at once (a task called MPI_Abort)
  // srun --time: past it (from its start) the step is cancelled as srun's interrupt
  // cancels it, and ends TIMEOUT. 0: none (the job's own limit holds).
  Ticks time_limit = 0;
  bool timed_out = false;
  State state = State::kPending;
  Ticks created = 0, started = -1, ended = -1;
  std::vector<StepTask> tasks;  // by task id (SLURM_PROCID)
  bool AllExited() const;
  // Each task's CPUs: -c, else the batch script's SLURM_CPUS_PER_TASK srun was started
  // with (Slurm 22.05's srun reads it as -c), else 1.
  int CpusPerTask() const;
  // Reads multi_prog for a step of `task_count` tasks into `programs`: "" when it gives
  // each task one line, else why not (naming the file as srun was given it, command[0]).
  std::string ReadPrograms(int task_count) const;
  // It has ended at `now`: what only its launch needed (srun's environment, input, CPUs)
  // goes, so a script that runs thousands of steps does not keep thousands of environments.
  void End(Ticks now);
};

// A dependency (`gantry submit --after NAME[:KIND]`, sbatch --dependency): the job is held
// out of the scheduler until NAME has finished with exit 0 (kOk, afterok), ended in any
// way (kAny, afterany), ended any other way: failed, cancelled, ... (kNotOk, afternotok),
// or started (kStarted, Slurm's `after`; an end without a start counts too).
struct Dependency {
  enum class Kind : uint8_t { kOk, kAny, kNotOk, kStarted };
  std::string job;
  Kind kind = Kind::kOk;
};
// The API's and the store's words for the kinds: "ok", "any", "notok", "started".
std::string_view DependencyWord(Dependency::Kind k);
std::optional<Dependency::Kind> DependencyKindNamed(std::string_view word);

struct Job {
  int64_t seq = 0;
  std::string name;
  std::string array;  // an array task: the array's id (tasks are named ARRAY_INDEX)
  int array_index = -1;
  // The whole array as submitted, for SLURM_ARRAY_TASK_COUNT/_MIN/_MAX/_STEP (the tasks in
  // memory are fewer once a restart has let the ended ones go). The step is the even
  // spacing of the indexes from min to max (0-15:4 is 4), else 1.
  struct ArrayShape {
    int count = 0, min = 0, max = 0, step = 1;
  };
  ArrayShape array_shape;
  // --array SPEC%N (Slurm's throttle): at most N of the array's tasks are given to the
  // scheduler at once (pending there, running or stopping); the rest are held, in index
  // order. 0: no limit.
  int array_limit = 0;
  // Numbers, as Slurm's (SLURM_JOB_ID, %j, squeue's and sacct's ids). Slurm gives an array
  // task its own id as it splits off the array, and the array's id stays with its last
  // task: tasks 0-3 of array 12 are 13, 14, 15 and 12. Gantry numbers an array's tasks at
  // submission the same way within the seqs they take (each task's is its seq + 1, the
  // last's the first's seq); 0 here: the seq (jobs stored before these were kept).
  int64_t number = 0;
  int64_t array_number = 0;  // an array task's array's number (%A): its first task's seq
  int64_t Number() const { return number > 0 ? number : seq; }
  // What its JSON spec gave for queue and tier (sbatch -A, --qos), read once
  // (Controller::SiteNames); reset when the spec changes.
  mutable std::optional<std::pair<std::string, std::string>> given_names;
  std::vector<Dependency> after;  // pending and held while not empty (not in the scheduler)
  bool after_or = false;          // any one of `after` met is enough (Slurm's '?' lists)
  // Why `after` can never be met (a job it waits to succeed failed), where the job waits on
  // all the same until cancelled, as Slurm's DependencyNeverSatisfied (KillsOnNeverMet:
  // else it is cancelled); empty otherwise.
  std::string never_met;
  // sbatch --kill-on-invalid-dep: 1 yes, 0 no, -1 not given (the site's kill_invalid_depend).
  int kill_invalid_dep = -1;
  // Held out of the scheduler while pending, as Slurm's: by `scontrol hold` or `sbatch -H`
  // ("user", or "admin" where an admin held it: only an admin releases that), and until
  // `begin_ms` (sbatch --begin; ms since the Unix epoch, 0: none).
  std::string hold;
  int64_t begin_ms = 0;
  // scontrol update TimeLimit: the time limit that replaces the spec's time_limit_s from
  // then on (0: none), applied wherever the spec is read (ReadJobSpec); -1: the spec's.
  Ticks time_limit_set = -1;
  std::string team;
  std::string user;  // the submitter, when their token names one (a Unix account name)
  std::string queue;
  std::string spec_format;  // "json" or "yaml": how spec_text is written
  std::string spec_text;    // as submitted; re-read against the config on restart
  std::string spec_file;    // the client's file name, for diagnostics
  std::string idem_key, idem_hash;
  core::JobSpec spec;  // resolved (not stored: re-read from spec_text)
  core::JobId core;    // in the scheduler; invalid once done

  JobState state = JobState::kPending;
  Ticks submit = 0;
  int run = 0;  // runs started so far; the current run's number
  // Signals asked of this run (scancel --signal), the n-th numbered n.
  struct SignalAsk {
    int signal = 0;
    SignalTo to = SignalTo::kSteps;
  };
  std::vector<SignalAsk> signals;
  // An sbatch --signal job (LimitSignalFirst): the run whose signal came at its time limit
  // (Slurm's --time less the lead); at the end of the lead the run is stopped with SIGTERM
  // to all of it, as Slurm's at its limit. 0: none.
  int limit_signaled_run = 0;
  Ticks run_start = -1;
  Ticks first_start = -1;
  // The tier the current run started at where it is not the asked one (a spent budget made
  // it best-effort): a restarted gantryd adopts the run at this tier.
  std::optional<core::Tier> run_tier;
  std::vector<Worker> workers;  // the current run's, by rank
  // An elastic job (spec.min_replicas): the workers the scheduler gives it now, which a
  // resize changes before the run at that size starts (memory only: a restarted gantryd
  // adopts the run as its workers are).
  int size = 0;
  // A batch job (`gantry sbatch`) runs as Slurm's: its workers are an allocation (task
  // slots); only rank 0 runs the script, and `srun` runs steps on the rest. The current
  // run's steps, and the SHA-256 of its credentials: the first is the script's
  // (GANTRY_TOKEN in its environment: what srun and the other Slurm commands inside the job
  // present); a gantryd that restarted during the run, knowing only hashes, made the others
  // (for salloc, and a script started after the restart). All end with the run.
  std::vector<Step> steps;
  std::vector<std::string> run_token_hashes;
  bool batch() const { return !spec.script.empty(); }
  // sbatch --signal=[B:]SIG@LEAD with --time (spec: stop_signal, grace_s = LEAD, time_limit_s
  // = --time less LEAD): at time_limit_s SIG alone, as Slurm sends it LEAD before the limit;
  // the run is stopped at the limit itself, SIGTERM to all and SIGKILL a KillWait later.
  bool LimitSignalFirst() const { return batch() && spec.stop_signal > 0 && spec.time_limit; }
  // How much longer Slurm's --time is than time_limit_s: an sbatch --signal's lead (grace_s),
  // else 0.
  Ticks SignalLead() const { return batch() && spec.stop_signal > 0 ? spec.grace : 0; }
  // Slurm's tasks: a worker each, or tasks_per_worker each (a batch job's whole-node workers).
  int64_t tasks() const { return static_cast<int64_t>(workers.size()) * spec.tasks_per_worker; }

  StopKind stop = StopKind::kNone;
  Ticks signaled_at = -1;
  Ticks stop_deadline = -1;
  std::string stop_reason;
  std::string preempted_by;

  Ticks progress = 0;  // checkpointed run time kept across runs
  int preemptions = 0;
  int requeues = 0;
  int resizes = 0;             // an elastic job's, grown or shrunk
  JobEnd end = JobEnd::kNone;  // done: how
  std::string end_reason;
  int exit_code = 0;
  Ticks end_time = -1;
  Usage usage;
  Ticks usage_saved = -1;  // when usage was last written (in memory)
  // What happened to it, oldest first (the console's job page): submitted, each start,
  // preemption and requeue, its end; at most kHistory entries (the first and the latest).
  struct Happened {
    Ticks t = 0;
    std::string what;
  };
  std::vector<Happened> history;
  static constexpr size_t kHistory = 64;
  void Note(Ticks t, std::string what);
  // The usage time series: the interval since the last sample (its start, the job's busy
  // and reported GPU-ms then, the most VRAM a worker reported in it).
  Ticks sample_at = -1;
  double sample_busy = 0, sample_reported = 0;
  int64_t sample_vram = 0;

  bool active() const { return state != JobState::kDone; }
  // As the API and `gantry ls` show it: pending, running, stopping, or how it ended.
  std::string state_word() const {
    return std::string(state == JobState::kDone ? Word(end) : Name(state));
  }
  // Every worker exited; a batch job: its script and every step task (its other workers
  // are slots that run nothing of their own).
  bool AllExited() const;
};

// What agents report (the node protocol's messages, proto/node.h).
using GpuReport = proto::GpuReport;
using ExitReport = proto::ExitReport;
using RunningReport = proto::RunningReport;
using AgentReport = proto::Heartbeat;

struct NodeInfo {
  bool up = false;  // an agent heartbeats
  bool drained = false;
  std::string drain_reason;
  // Who drained it (a person's account, "admin", or "gantryd" for a node it drained itself)
  // and when (wall ms; -1 unknown): sinfo -R.
  std::string drained_by;
  int64_t drained_at_ms = -1;
  // Drained now, for `reason`, by `by`, at wall time `at_ms`.
  void Drain(std::string reason, std::string by, int64_t at_ms) {
    drained = true;
    drain_reason = std::move(reason);
    drained_by = std::move(by);
    drained_at_ms = at_ms;
  }
  Ticks last_seen = -1;
  std::string address;
  std::string agent_id;
  std::vector<GpuReport> gpus;
  std::string refused;                    // why the agent's report was refused (inventory mismatch)
  std::map<std::string, bool> isolation;  // as its agent last reported it (empty: not said)
};

// A worker's holding as the wire, the store and the API write it (proto::Alloc), and back.
proto::Alloc WireAlloc(const core::WorkerAlloc& w, const core::Cluster& cluster);
Result<core::WorkerAlloc> CoreAlloc(const proto::Alloc& a, const core::Cluster& cluster);
nlohmann::json WorkerAllocToJson(const core::WorkerAlloc& w, const core::Cluster& cluster);
Result<core::WorkerAlloc> WorkerAllocFromJson(const nlohmann::json& j,
                                              const core::Cluster& cluster);
// A worker's cgroup limits (0 = none): what its job asked for (memory_gb, cpus), else its
// pool's default_*_per_gpu times the GPUs it holds (a share counts as its fraction, a MIG
// instance as its compute slices out of 7).
proto::Limits WorkerLimits(const core::WorkerAlloc& w, const core::Cluster& cluster);

// The job's `doc` in the store: everything but the indexed columns and the resolved spec.
// GPUs one worker holds: whole GPUs, a MIG instance's compute share, an MPS share.
double WorkerGpus(const core::WorkerAlloc& w, const core::Cluster& cluster);
nlohmann::json UsageToJson(const Usage& u);
Usage UsageFromJson(const nlohmann::json& j);
nlohmann::json JobToDoc(const Job& job, const core::Cluster& cluster);
Result<Ok> JobFromDoc(const nlohmann::json& doc, const core::Cluster& cluster, Job& job);
nlohmann::json NodeToDoc(const NodeInfo& node);
void NodeFromDoc(const nlohmann::json& doc, NodeInfo& node);

// Whether a GPU an agent reports is the model the config gives its node: the catalog
// name when the agent names one, else the model's family (the part before '-', e.g.
// "H100") in NVML's product name and memory within 12% of the catalog's.
bool GpuMatchesModel(const GpuReport& gpu, const core::GpuModel& model);

}  // namespace gantry::server
