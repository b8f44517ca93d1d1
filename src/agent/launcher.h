// Launching job workers as real processes, and signalling and reaping them.
//
// Each worker runs in a session (and so a process group) of its own, so a signal to the
// group reaches everything it started and nothing else, and it outlives the agent's
// terminal. stdout and stderr go to one log file (appended). The environment is built
// from scratch: a few harmless variables of the agent's (PATH, HOME, LANG, ...) plus the
// job's; nothing else of the agent's (its token above all) leaks into jobs.
// Thread-safety: functions only; Reap must be called by the thread that owns the children.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>

#include <string>
#include <utility>
#include <vector>

#include "base/clock.h"
#include "base/result.h"

namespace gantry::agent {

struct LaunchSpec {
  std::vector<std::string> argv;
  std::vector<std::pair<std::string, std::string>>
      env;              // added to the base environment; of a name given twice, the later value
  std::string workdir;  // created when missing (MakeWorkdir)
  // The workdir is the agent's own (its state directory's work/SEQ: the job named none),
  // not one the job asked for.
  bool own_workdir = false;
  std::string stdin_path;  // its standard input (a step's, srun's); empty: /dev/null
  std::string log_path;    // stdout and stderr, unless:
  // stderr to this file instead (a job step's task: srun forwards its stderr apart, as
  // Slurm's does); opened as log_path is.
  std::string err_log_path;
  // Files (absolute paths) stdout and stderr go to instead (sbatch -o/-e): truncated and
  // opened by the worker as its user; stderr follows stdout when only stdout is given. A
  // file that cannot be opened ends the worker with 127 and the reason in log_path.
  std::string stdout_path, stderr_path;
  bool append_output = false;  // sbatch --open-mode=append: appended to, not truncated
  // Files the child writes its pid to before anything else (its cgroup's cgroup.procs,
  // Cgroups::Create); a failure ends it with 127 and the reason in the log.
  std::vector<std::string> join;
  // Run as this user (Unix account) instead of the agent's: uid, primary gid and groups
  // are set in the child before exec.
  bool as_user = false;
  // The file mode creation mask the worker runs with (and opens stdout_path with), as
  // Slurm's job takes its submitter's (SLURM_UMASK); -1: the agent's.
  int umask = -1;
  // Soft limits set before the worker starts (SLURM_RLIMIT_*, base/rlimits.h), the hard one
  // raised to it where lower, as Slurm's slurmstepd sets them; a failure is written to the
  // log after `error` where the user asked for the limit (else nothing), and the worker
  // starts with the node's.
  struct Rlimit {
    int resource = 0;
    uint64_t value = 0;
    std::string error;
  };
  std::vector<Rlimit> rlimits;
  // The CPUs it may run on (sched_setaffinity before exec; empty: the agent's), and what
  // it writes to its stderr first: bind_report_head, its pid, bind_report_tail (srun
  // --cpu-bind=verbose; nothing when both are empty).
  std::vector<int> cpus;
  std::string bind_report_head, bind_report_tail;
  // The worker is given SLURM_TASK_PID, its own pid, as Slurm's tasks are.
  bool task_pid = false;
  // Without as_user: still open stdout_path and stderr_path as that user (a container's
  // `podman run` runs as the agent, the job in it as its user).
  bool files_as_user = false;
  uid_t uid = 0;
  gid_t gid = 0;
  std::vector<gid_t> groups;
  // A worker that outlives its agent (re-adopted by the next one): with shim_program set,
  // Launch's child becomes the session leader, forks the worker (which stays in its
  // session and process group) and execs `shim_program --shim-worker PID STATUS LEASE
  // AGENT SIGNAL GRACE_MS` (ShimMain), which waits for the worker. See ShimMain.
  std::string shim_program;   // "/proc/self/exe" for the agent
  std::string shim_status;    // where the shim writes how the worker ended
  std::string shim_lease;     // the agent's lease file (WriteLease)
  std::string shim_agent;     // the file naming the supervising agent: "PID START_TIME"
  int shim_signal = 15;       // the worker's first stop signal
  int64_t shim_grace_ms = 0;  // and its grace before SIGKILL
};

// Makes spec.workdir when it is missing. The agent's own (own_workdir) it makes and, for a
// worker run as its user, gives to that user; any other it makes as the worker's user (a
// child that becomes the user makes each missing directory), so that a job makes only
// what its user could: a root agent making and giving away /root/.ssh or /etc/cron.d for
// a job would hand root's files to its user. A directory that exists is never given away.
// Call from the thread that reaps the agent's children (it waits for its own child).
Status MakeWorkdir(const LaunchSpec& spec);

// Whether the worker's user (spec.as_user; else this process) can reach each of `paths`
// (access F_OK, every directory above it searchable): what a root agent may bind into a
// container for that user, who would otherwise see a path below a directory it may not
// enter (/root/public). The first that it cannot reach is the error. Called as MakeWorkdir.
Status Reachable(const LaunchSpec& spec, const std::vector<std::string>& paths);

// Opens `path` read-only with the permissions of uid/gid/groups (this thread's file-system
// identity only, put back before it returns), or -1 with errno: what the agent reads of a
// file a job named (sbatch -o) must be what the job's user could read.
int OpenAsUser(const std::string& path, uid_t uid, gid_t gid, const std::vector<gid_t>& groups);

// Forks and execs (MakeWorkdir first). The child's process group id equals its pid. An exec failure
// is written to the log and the child exits with 127, as a shell would. The worker gets
// PR_SET_PDEATHSIG=SIGKILL: it dies when the thread that launched it ends (the agent's
// main loop, or with shim_program its shim, which returns as the child).
Result<pid_t> Launch(const LaunchSpec& spec);

// gantry-agent --shim-worker PID STATUS LEASE AGENT SIGNAL GRACE_MS (argv[1] is
// "--shim-worker"): the parent of worker PID and leader of its session and process group,
// so a signal to the group reaches the worker as before (the shim ignores the catchable
// ones; SIGKILL takes both). It survives its agent, unlike the worker (PDEATHSIG to the
// shim): a restarted agent finds it by pid and start time and re-adopts the worker. It
// writes how the worker ended to STATUS ({"exit_code", "signal", "fenced"}) and then ends
// the same way, so an agent that reaps it reads the worker's own exit.
// While no agent supervises it (the process AGENT names is gone), the shim fences as the
// agent would: LEASE is rewritten after each heartbeat the server answered (WriteLease);
// once it has not been for the lease, the shim sends SIGNAL to its group, then SIGKILL
// after GRACE_MS (at most half of what is left of the server's node timeout), and writes
// "fenced", so nothing of the worker runs when the server requeues its job. Under an agent
// that is there but cannot act (frozen, stuck), the shim SIGKILLs the group once the lease
// file is older than when that agent's fence would have killed it (lease + budget) by half
// of what is left to the node timeout.
int ShimMain(int argc, char** argv);

// Writes the lease file the shims watch: the lease and the server's node timeout in ms,
// fresh as of now.
void WriteLease(const std::string& path, int64_t lease_ms, int64_t node_timeout_ms);

// The lease file as the agent last wrote it, and how long ago (by the wall clock); nullopt
// when there is none.
struct LeaseFile {
  int64_t lease_ms = 0;
  int64_t node_timeout_ms = 0;
  int64_t age_ms = 0;
};
std::optional<LeaseFile> ReadLease(const std::string& path);

// How a shim's worker ended, from its STATUS file; nullopt when it wrote none (it was
// killed, or its worker runs on).
struct ShimStatus {
  int exit_code = 0;
  int signal = 0;
  bool fenced = false;
};
std::optional<ShimStatus> ReadShimStatus(const std::string& path);

// Sends `sig` to the process group `pgid` (no-op when it is gone).
void SignalGroup(pid_t pgid, int sig);
// `sig` to the first child of process `parent` (a shim's worker), read from
// PROC/PARENT/task/PARENT/children; false when it has none (or the kernel does not say).
bool SignalChild(const std::string& proc, pid_t parent, int sig);

struct Exited {
  pid_t pid = 0;
  int exit_code = 0;  // when it exited
  int signal = 0;     // when a signal ended it
};
// Reaps every child that has ended, without blocking.
std::vector<Exited> Reap();

// The start time of a process (field 22 of /proc/PID/stat, clock ticks since boot), or
// -1 when there is no such process; tells a worker from a later process with its pid.
long long ProcessStartTime(pid_t pid);

// Whether process `pid` is alive (not a zombie) and is the one that started at `start` (a
// start time as above), not a later process with its number.
bool Running(pid_t pid, long long start);

// The session of a process (field 6 of /proc/PID/stat), or -1 when there is no such
// process. Launch makes each worker the leader of a session of its own, so a process whose
// session is a running worker's pid is that worker's (the leader, alive or not yet reaped,
// keeps the number from being reused); only a process that called setsid itself leaves it.
pid_t SessionOf(pid_t pid);

// The live (not zombie) processes in process group `pgid` that started at or after
// `since` (a start time as above): a worker's, leader included while it runs. The start time keeps
// a later, unrelated group that reused the number out of it.
std::vector<pid_t> GroupMembersSince(pid_t pgid, long long since);

}  // namespace gantry::agent
