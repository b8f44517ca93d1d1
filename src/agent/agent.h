// Agent: gantry-agent's loop. Heartbeats its node's GPUs and workers to gantryd, starts
// and stops workers as the answer says, uploads their output, and reports their exits.
//
// The protocol is declarative: every heartbeat answer lists the workers this node
// should have, each "run" or "stop" (with the grace left). The agent starts a "run"
// worker it does not have (and has not already seen end), signals a "stop" one
// (SIGTERM by default, then SIGKILL when its grace is up), and SIGKILLs any worker of
// its own that is not listed at all: a job moved elsewhere while this node was cut off
// never runs twice. Exits are reported until a heartbeat carrying them succeeds.
// Fencing: when no heartbeat has succeeded for the lease the server gave (shorter than
// the server's node timeout), the agent stops all its workers itself, so by the time the
// server declares the node down and requeues them, nothing of theirs is left running.
// The fence runs on a thread of its own, so a heartbeat stuck in a network call (a link
// that drops packets) cannot delay it.
// Push: a watch thread keeps a long poll open (GET /v1/agents/NODE/watch); its answer
// lists the node's workers as soon as they change, and wakes the main loop, so a job
// starts within milliseconds of the pass that placed it. Answers carry the node's
// version; an answer older than one already applied is dropped (a stale list would kill
// a worker just started). A worker's exit triggers a heartbeat at once.
// Workers outlive the agent under a shim each (launcher.h, ShimMain): worker records in the
// state directory let a restarted agent re-adopt those still running, report how the
// others ended, and kill what they left behind.
// MIG on mig_managed pools (the answer's alloc says "create"): the agent creates the
// worker's instance at exactly the placement the scheduler chose, unless one of that
// profile is there already (laid out by someone else: used, never destroyed), and refuses
// where another instance overlaps it; when the worker ends it destroys what it created
// (compute, then GPU instance) before reporting the exit, so the slices are free when the
// server frees them. A creation that fails ends the worker at once as lost, with the reason
// and a request to drain the node, so the server requeues the job and does not place it on
// that GPU again until someone looks. What it created is listed in the state directory
// (mig.json), so a restarted agent destroys what its previous run left.
// Its members are defined by what they do: agent.cc (the loop and the conversation with
// gantryd), agent_setup.cc (what Run sets up first), agent_start.cc and agent_resolve.cc
// (starting a desired worker, proto::DesiredWorker), agent_workers.cc (records, recovery, reaping,
// stopping), agent_mig.cc (the MIG instances it creates) and agent_usage.cc (what workers
// use of the GPUs).
// Thread-safety: Run() drives everything but the fence thread, which shares only
// `live_`/`fenced_` (under fence_mu_) and the atomics; `stop` may be set from a signal
// handler.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "agent/cgroup.h"
#include "agent/container.h"
#include "agent/gpu.h"
#include "agent/mig_caps.h"
#include "base/cpus.h"
#include "base/server_list.h"
#include "proto/node.h"

namespace httplib {
class Client;
}

namespace gantry::agent {

struct LaunchSpec;

struct AgentOptions {
  std::string server;   // base URL, e.g. http://127.0.0.1:8080; several comma-separated
                        // (a leader and its standbys): the agent follows the leader
  std::string token;    // an agent (or admin) token
  std::string ca_cert;  // for https:// servers: a PEM CA certificate to trust (else the system's)
  std::string node;     // a node name from the cluster config
  // The directory of srun, scontrol, sbatch, ... (links to the gantry CLI), put first on
  // the PATH of batch jobs; empty: none.
  std::string slurm_commands;
  std::string address;          // advertised to gang peers; empty: what the server sees
  std::string state_dir;        // logs/, work/, workers/
  int preempt_signal = 15;      // SIGTERM
  int64_t heartbeat_ms = 1000;  // until the server says otherwise
  int64_t max_shutdown_grace_ms = 30000;
  std::string cgroups = "auto";  // auto, v1, v2 or off (agent/cgroup.h)
  // "user": each job runs as the Unix account its token names (a job without one, or a
  // name with no account here, is refused); "agent": as the agent's own user. Empty: "user"
  // when the agent is root, else "agent".
  std::string run_as;
  // How jobs that name an image run (agent/container.h): `podman run` unless the
  // site's podman needs more (--container-run).
  ContainerRuntime container;
  // Where the kernel's /proc is (tests point it elsewhere): MIG instances' access devices
  // are read from PROC/driver/nvidia-caps/mig-minors and PROC/devices (agent/mig_caps.h).
  std::string proc = "/proc";
  // Where the kernel's sysfs is (tests point it elsewhere): the sockets, cores and NUMA
  // nodes of the CPUs jobs are bound to (SYS/devices/system, base/cpus.h), and the NUMA
  // node of each GPU (SYS/bus/pci/devices/BUS/numa_node).
  std::string sys = "/sys";
};

// One GPU as the heartbeat reports it (proto::GpuReport).
proto::GpuReport WireGpu(const GpuInfo& gpu, int64_t idle_ms);

// How long after its first answered heartbeat (at start, or after the server was out of
// reach) a node beats again: between half an interval and one and a half, at a point its
// name fixes. Nodes that join together (all of them when gantryd restarts, a swarm) would
// otherwise beat in step for good and reach gantryd in waves of a whole cluster's
// answers; kubelet jitters its node updates for the same reason.
int64_t FirstBeatAfterJoining(const std::string& node, int64_t interval_ms);

// What a worker holds on its node's GPUs, as its alloc says.
struct WorkerShare {
  std::string sharing = "exclusive";  // exclusive, mig, mps or timeslice
  std::vector<int> gpus;              // node GPU indexes (mig, mps, timeslice: the parent)
  int share_milli = 1000;             // mps, timeslice: thousandths of the GPU
  std::string mig_uuid;               // mig: its instance
};

// What a worker uses now by NVML's last sample `gpus` (util: 0..1 of what it holds), or
// nullopt when NVML cannot tell (a lost GPU, an old driver, a MIG
// instance whose utilization NVML does not give). `mine` says whether a GPU process (pid as
// NVML gives it) is the worker's.
//  - Whole GPUs: the GPUs' own numbers (everything on them is the worker's; they hold the
//    driver's reservations too, and need no per-process support).
//  - A MIG instance: likewise the instance's own memory and utilization, else the sum of
//    its processes' sampled SM utilization.
//  - MPS and time-slicing: its own processes on the GPU: the sum of their memory, and the
//    sum of their SM utilization over its share (20% of the GPU on a 0.25 share is 0.8).
std::optional<proto::WorkerUsage> NvmlUsage(const WorkerShare& share,
                                            const std::vector<GpuInfo>& gpus,
                                            const std::function<bool(int pid)>& mine);

class Agent {
 public:
  Agent(AgentOptions options, std::unique_ptr<GpuSource> gpus);
  ~Agent();
  // Runs until `stop`; then stops every worker (signal, grace, SIGKILL), reports them
  // lost so the server requeues them at once, and returns 0 (1 on a fatal setup error).
  // With `leave` set by then, it returns at once, its workers left running under their
  // shims for the next agent on the state directory to re-adopt.
  int Run(const std::atomic<bool>& stop, const std::atomic<bool>* leave = nullptr);

 private:
  struct Worker {
    std::string job;
    int64_t seq = 0;
    int run = 0, rank = 0;
    int step = -1;  // a task of this job step (`srun`): rank is its id in the step
    pid_t pid = 0;
    int64_t grace_ms = 0;
    bool stopping = false;
    int64_t kill_at = 0;  // steady ms; SIGKILL when still alive then
    bool killed = false;
    bool lose_on_exit = false;  // the agent itself ended it (fence, shutdown): report lost
    bool exited = false;
    int exit_code = 0, signal = 0;
    bool lost = false;
    std::string note;
    std::string log_path;
    std::string err_path;   // a step task's stderr (srun forwards it apart); empty: in log_path
    std::string out_path;   // sbatch -o: the file its stdout goes to, uploaded once it exists
    bool out_user = false;  // out_path is read as this user (it runs as them)
    uid_t uid = 0;
    gid_t gid = 0;
    std::vector<gid_t> groups;
    std::string script_path;  // sbatch: the script written for it, removed with its record
    std::string input_path;   // a step's task: its stdin (srun's), the same
    int stop_signal = 0;      // the job's own first signal when stopped (0: --preempt-signal)
    bool signal_script_only = false;  // that signal to the shim's child alone (sbatch B:)
    int signalled = 0;  // the last of its run's asked signals (DesiredWorker::signals) sent
    int64_t uploaded = 0, err_uploaded = 0;  // bytes of log (or out_path) and err_path sent
    std::string record_path;
    std::string status_path;    // where its shim writes how it ended (launcher.h, ShimMain)
    long long start_time = -1;  // its shim's (pid's) start time: tells it from a later process
    // Re-adopted from a previous agent: its shim is not this agent's child, so its end is
    // seen by polling (the shim gone, its status file read) instead of waitpid.
    bool adopted = false;
    std::string cgroup;        // its cgroup's name; empty without cgroups
    std::string container;     // its container's name; empty for a job without an image
    int64_t memory_bytes = 0;  // its memory limit, for the OOM note
    // For usage reports: what it holds of the GPUs, when it started (steady ms), and the
    // server's emulation model.
    WorkerShare share;
    int64_t started_ms = 0;
    std::optional<proto::Emulate> emulate;  // emulated GPUs: how busy to look
    std::string drain;  // a node problem that kept it from starting: the server drains the node
    // The job's CPUs on this node that it runs on (a batch job's, shared by its script and
    // its steps' tasks here: CpusFor); empty: all of the agent's. A step's task runs on
    // fewer of them where its step holds fewer (srun --exact) or it is bound (--cpu-bind).
    std::vector<int> cpus;
  };
  // A MIG instance this agent created, until it is destroyed.
  struct HeldMig {
    MadeMig made;
    std::string owner;      // the worker it was made for (Key); empty: its owner is gone
                            // (reported without it, or a previous agent's)
    std::string job;        // the owner's job, for messages
    int64_t ended_at = -1;  // steady ms its owner was first seen ended; -1 while it runs
    int64_t next_try = 0;   // steady ms of the next destroy attempt
    std::string error;      // why the last attempt failed
  };
  // The MIG UUID for a worker (`key`) on a mig_managed GPU: the instance of its profile at
  // its placement, created when there is none; an error saying why there cannot be one.
  Result<std::string> MigFor(const GpuInfo& gpu, const MigPlacement& mig, const std::string& key,
                             const std::string& job, int64_t now);
  // Destroys the instances whose workers have ended (each tried at most every 100 ms, or at
  // once with `now_or_never`).
  void ReleaseMigs(int64_t now, bool now_or_never = false);
  // Whether the exit of worker `key` waits for its instance to be destroyed (at most
  // kMigReleaseWaitMs, or not at all when `give_up`); when it waits no longer for one that
  // is still there, `*note` says so.
  bool MigPending(const std::string& key, int64_t now, bool give_up, std::string* note);
  void SaveMigs() const;
  // `kept`: instances of re-adopted workers (UUID -> the worker's Key), kept as theirs.
  void LoadMigs(const std::map<std::string, std::string>& kept);
  // What `w` uses now, or nullopt when it cannot be told (see
  // NvmlUsage). `owners`: GpuProcessOwners().
  std::optional<proto::WorkerUsage> Usage(const Worker& w, int64_t now,
                                          const std::map<int, std::string>& owners) const;
  // The running worker (its key) each GPU process in last_gpus_ belongs to: the one whose
  // session it is in (Launch makes each worker a session leader), else, with cgroups, the
  // one whose cgroup holds it (a process that left the session with setsid). NVML gives
  // pids of the host's pid namespace: an agent in a container of its own sees none of them.
  // Cost: a /proc read per GPU process, and a cgroup.procs read per worker when some
  // process is in no worker's session.
  std::map<int, std::string> GpuProcessOwners() const;
  static std::string Key(const Worker& w);
  // The size of the output the agent uploads for `w` (its log), 0 when there is none.
  static int64_t LogSize(const std::string& path);
  // Sends what is new of a worker's output (`err`: its stderr file) read from `fd`, which
  // it closes; false when the server could not be reached.
  bool Upload(Worker& w, int fd, bool err);

  int64_t Now() const;
  // Run's start (agent_setup.cc): the state directory (and its lock), cgroups, MIG
  // instances' access devices and whose user jobs run as. False, having said why, on a
  // fatal setup error.
  bool Setup();
  // Run's end: stops every worker (signal, grace bounded by max_shutdown_grace_ms, SIGKILL),
  // destroys their MIG instances for a while, and tells the server it is leaving.
  void Shutdown();
  void Recover();
  void ReapChildren();
  void Escalate(int64_t now);
  void FenceLoop(const std::atomic<bool>& stop);
  void WatchLoop(const std::atomic<bool>& stop);
  // Reconciles with the desired workers of `answer` (a heartbeat's or a watch's) unless a
  // newer one was applied already: from a server of a later lease epoch, or from the same
  // server with a higher version. An answer from a gantryd that has since died (a watch
  // reply TCP delivers late, after a link heals) is older than its successor's and
  // dropped: applied, it would kill the workers the successor started since.
  void Apply(const proto::WatchAnswer& answer, int64_t now);
  void UploadLogs();
  void Heartbeat(int64_t now, bool leaving = false);
  void Reconcile(const std::vector<std::shared_ptr<const proto::DesiredWorker>>& desired,
                 int64_t now);
  // Starts the worker `d` describes (Reconcile decodes it): resolves its request, launches
  // and records it; running then, or ended at once saying why it could not start.
  void StartWorker(const proto::DesiredWorker& d, int64_t now);
  // Sends a running worker the signals asked of it (scancel --signal) it has not had yet.
  void SendAskedSignals(Worker& w, const std::vector<proto::DesiredWorker::Signal>& asked);
  // StartWorker's steps (agent_start.cc, agent_resolve.cc), in this order. `w` is the
  // worker being started (`key`: its Key) and `spec` its launch description, both filled
  // in as they go. A `std::string` returned (or ResolveGpus' `problem`) says why the worker
  // cannot start, a line for its log; empty when it can.
  // The GPUs `alloc` holds, resolved against last_gpus_ (a MIG instance on a mig_managed
  // pool created by MigFor): w.share (w.drain where the node is at fault) and the GPU
  // variables in spec.env. Returns what CUDA may see (CUDA_VISIBLE_DEVICES' value): whole
  // GPUs by UUID, or by index with `by_index` (Slurm's way, for sbatch jobs).
  std::string ResolveGpus(const proto::Alloc& alloc, const std::string& key, int64_t now, Worker& w,
                          LaunchSpec& spec, std::string& problem, bool by_index = false);
  // --run-as user: `user`'s Unix account (uid, groups, HOME, USER, LOGNAME) into `spec`.
  static std::string ResolveUser(const std::string& user, LaunchSpec& spec);
  // sbatch: writes `script` to the state directory, given to the job's user, as argv[0].
  std::string WriteScript(const std::string& script, const std::string& stem, Worker& w,
                          LaunchSpec& spec) const;
  // A step's task's standard input (d.input, srun's) into a file of its user's, its stdin.
  std::string WriteInput(const proto::DesiredWorker& d, const std::string& stem, Worker& w,
                         LaunchSpec& spec) const;
  // The job's CPUs for `d` here (Worker::cpus): those its run holds already (a batch job's
  // script or another task of it on this node), else `d.limits`' count of them picked
  // from the least used, near its GPUs (`share`: their NUMA nodes) where sysfs tells
  // (PickCpus). Empty where the job asked no CPUs.
  std::vector<int> CpusFor(const proto::DesiredWorker& d, const WorkerShare& share) const;
  // srun --cpu-bind (the task's SLURM_CPU_BIND): the task's part of its step's CPUs
  // (spec.cpus) into spec.cpus, and its verbose report; "" or why it cannot be bound.
  std::string BindTask(const proto::DesiredWorker& d, LaunchSpec& spec) const;
  // Its cgroup (named `stem`) with its limits and the devices it may not open.
  std::string JoinCgroup(const proto::DesiredWorker& d, const std::string& stem, Worker& w,
                         LaunchSpec& spec);
  // d.image: `spec` becomes a `podman run` of it, with its GPUs (`visible`) as devices.
  std::string RunInContainer(const proto::DesiredWorker& d, const std::string& visible, Worker& w,
                             LaunchSpec& spec) const;
  // Launches `w` under its shim and records it (workers_[key]; a failure ends it at once).
  void LaunchWorker(const std::string& key, const std::string& visible, int64_t now, Worker& w,
                    LaunchSpec& spec);
  void Stop(Worker& w, int sig, int64_t grace_ms, int64_t now);
  void Remember(const std::string& key);
  void WriteRecord(const Worker& w);
  // A worker a previous agent left running, from its record `r`, when its shim still runs:
  // taken over as it is. False when it is gone (its end is then read from its status file).
  bool Readopt(const nlohmann::json& r, Worker& w);
  // Marks `w` ended as `e` says (exit code or signal) and cleans up after it.
  void Ended(Worker& w, int exit_code, int signal);
  // The operational log (base/log.h), with the node.
  void Say(const std::string& line, bool warning = false);
  // SIGKILL to the worker's process group and, with cgroups, to all of its cgroup.
  void Kill(pid_t pid, const std::string& cgroup) const;
  // Kills what ended workers left in their cgroups and removes those that are empty;
  // the rest (processes not reaped yet) on a later call.
  void RemoveCgroups();
  // A new HTTP client for servers_.current() (heartbeats and log uploads).
  void Connect();

  AgentOptions options_;
  std::unique_ptr<GpuSource> gpus_;
  std::unique_ptr<Cgroups>
      cgroups_;  // null: workers are process groups only; read-only once running
  // This agent's own: its node and state directory (gantry-agent's cgroup subtree, the
  // gantry.agent label of its containers), so that agents of test clusters on one machine
  // leave each other's alone. Set by Setup.
  std::string scope_;
  // MIG instances' access devices (read at start); absent where there are none (no
  // MIG-capable driver, capabilities not device files).
  std::optional<MigCaps> mig_caps_;
  // What keeps workers apart here, as heartbeats report it: {"cgroups", "gpu_devices",
  // "mig" (with a MIG-capable driver)}, each true or false.
  std::map<std::string, bool> isolation_;
  // The devices a worker holding `share` may not open (CgroupLimits::denied_devices).
  std::vector<CharDevice> DeniedDevices(const WorkerShare& share, const std::string& job);
  // The access devices of the MIG instance `uuid` on `gpu` (made here or laid out before);
  // nullopt when NVML or the driver did not tell its ids or devices.
  std::optional<std::pair<CharDevice, CharDevice>> MigDevices(const GpuInfo& gpu,
                                                              const std::string& uuid) const;
  bool run_as_user_ = false;
  std::vector<std::string> unremoved_;  // cgroups of ended workers, until removed
  std::unique_ptr<httplib::Client> http_;
  ServerList servers_;
  std::string agent_id_;  // kept in the state directory: a restarted agent is the same agent
  int lock_fd_ = -1;      // the state directory's lock, held while running
  std::vector<GpuInfo> last_gpus_;
  CpuTopology cpu_topology_;        // the CPUs this agent may give jobs (Setup)
  size_t cpu_rotate_ = 0;           // where PickCpus starts: emulated nodes spread over one machine
  std::map<int, int64_t> busy_at_;  // GPU index -> last time it was seen busy (or first seen)
  std::map<std::string, Worker> workers_;  // key -> worker, until its exit is acknowledged
  std::set<std::string> done_;             // keys whose exit the server acknowledged
  std::deque<std::string> done_order_;     // bounded memory for done_
  std::map<std::string, HeldMig> migs_;    // MIG UUID -> an instance this agent created
  int64_t heartbeat_ms_;
  std::string last_error_;

  // Shared with the fence thread.
  struct Live {
    int64_t grace_ms = 0;
    int signal = 0;  // the first signal: the job's own, else --preempt-signal
    bool signalled = false;
    bool killed = false;
    int64_t kill_at = 0;
    std::string cgroup;
  };
  std::mutex fence_mu_;
  std::map<pid_t, Live> live_;  // running workers by pid (== process group)
  std::set<pid_t> fenced_;      // workers the fence stopped: reported lost
  std::atomic<int64_t> lease_ms_{0};
  std::atomic<int64_t> node_timeout_ms_{0};
  std::atomic<int64_t> last_ok_{0};  // steady ms of the last successful heartbeat

  // Shared with the watch thread (under watch_mu_).
  std::mutex watch_mu_;
  std::condition_variable watch_cv_;
  std::unique_ptr<httplib::Client> watch_http_;
  std::string server_now_;  // the server heartbeats go to; the watch follows it
  // The newest answer applied: its server's lease epoch and instance, and the version.
  int64_t applied_epoch_ = -1;
  std::string applied_instance_;
  int64_t applied_version_ = -1;
  std::optional<proto::WatchAnswer> watched_;  // an answer the main loop has not applied yet
  bool exits_pending_ = false;  // main loop only: a worker ended since the last heartbeat
};

}  // namespace gantry::agent
