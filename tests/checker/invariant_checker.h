// Independent invariant checker for Gantry simulation runs.
//
// Replays a simulator event log (spec section 4) against the cluster config (section 1),
// the trace (section 3), the failures file and the report (section 6), and lists every
// broken invariant. It is a second implementation on purpose: it shares no code with
// src/ (no includes from there), parses the files itself (yaml-cpp, nlohmann-json) and
// keeps its own GPU catalog and MIG geometry, so a bug in the scheduler's model of the
// hardware is not silently repeated here.
//
// Thread-safety: CheckRun and CheckRunDetailed are pure functions of their files; they
// may run concurrently on different inputs.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace gantry::checker {

// Names of the invariants, as reported in Violation::invariant. Tests match on them.
namespace inv {
inline constexpr std::string_view kInput = "input";  // unreadable / invalid input files
inline constexpr std::string_view kEventFormat = "event_format";      // malformed event line
inline constexpr std::string_view kTimeOrder = "time_order";          // log time goes backwards
inline constexpr std::string_view kUnknownJob = "unknown_job";        // job not in the trace
inline constexpr std::string_view kLifecycle = "lifecycle";           // invalid state transition
inline constexpr std::string_view kSubmitTime = "submit_time";        // submit differs from trace
inline constexpr std::string_view kUnknownNode = "unknown_node";      // node not in the config
inline constexpr std::string_view kGpuIndex = "gpu_index";            // GPU index out of range
inline constexpr std::string_view kGang = "gang";                     // alloc size != replicas
inline constexpr std::string_view kAllocShape = "alloc_shape";        // worker shape != job shape
inline constexpr std::string_view kGpuModel = "gpu_model";            // node model not acceptable
inline constexpr std::string_view kVram = "vram";                     // vram_gb does not fit
inline constexpr std::string_view kSharingMode = "sharing_mode";      // mode not allowed on pool
inline constexpr std::string_view kMigPlacement = "mig_placement";    // profile/start invalid
inline constexpr std::string_view kTopology = "topology";             // topology domain broken
inline constexpr std::string_view kGpuExclusive = "gpu_exclusive";    // whole GPU shared/mixed
inline constexpr std::string_view kMigOverlap = "mig_overlap";        // MIG slices overlap / > 7
inline constexpr std::string_view kShareCapacity = "share_capacity";  // MPS/timeslice over 1/vram
inline constexpr std::string_view kNodeCapacity = "node_capacity";    // node cpus/memory exceeded
inline constexpr std::string_view kCriticalPreempted = "critical_preempted";
inline constexpr std::string_view kCriticalOnSpot = "critical_on_spot";
inline constexpr std::string_view kUnknownQueue = "unknown_queue";  // started job's queue unknown
inline constexpr std::string_view kBurst = "burst";                 // queue holding > burst_gpus
inline constexpr std::string_view kWindow = "window";               // start outside daily window
inline constexpr std::string_view kBudget = "budget";  // start while a wait budget is spent
inline constexpr std::string_view kNodeDownStart = "node_down_start";      // start on down node
inline constexpr std::string_view kNodeDownRelease = "node_down_release";  // not released at down
inline constexpr std::string_view kFailures = "failures";       // node_down/up vs failures file
inline constexpr std::string_view kProgress = "progress";       // progress does not add up
inline constexpr std::string_view kGrace = "grace";             // preempt later than grace_s
inline constexpr std::string_view kReclaim = "reclaim";         // reclaim not justified
inline constexpr std::string_view kFinalState = "final_state";  // job not final at end
inline constexpr std::string_view kReport = "report";           // report disagrees with log
}  // namespace inv

struct Violation {
  int64_t line = 0;       // 1-based line of the event log; 0 when not tied to one line
  double t = 0;           // time of the event (or of the discrepancy)
  std::string subject;    // job id or node name; empty when neither applies
  std::string invariant;  // one of inv::k*
  std::string message;
};

struct CheckStats {
  int64_t events = 0;  // event lines read
  int64_t jobs = 0;    // jobs in the trace
  int64_t finished = 0;
  int64_t rejected = 0;
  int64_t reclaimed = 0;
  int64_t cancelled = 0;
  int64_t unfinished = 0;  // jobs still waiting when the log ends (not a violation)
  int64_t starts = 0;
  int64_t preemptions = 0;
  int64_t resizes = 0;                       // elastic jobs' resize events
  std::vector<std::string> rejected_jobs;    // ids, in log order
  std::vector<std::string> unfinished_jobs;  // ids, sorted
};

struct CheckResult {
  std::vector<Violation> violations;
  CheckStats stats;
  // Non-empty when an input file could not be read or parsed; violations then also hold
  // one kInput entry. The command-line tool exits 2 on it.
  std::string input_error;
};

// Checks one run. `failures_path` and `report_path` may be empty (no failures file: no
// node may go down; no report: report agreement is not checked). Never throws.
// Cost: linear in the log, times the workers of a job for each start.
CheckResult CheckRunDetailed(const std::string& config_yaml_path, const std::string& trace_path,
                             const std::string& failures_path, const std::string& events_path,
                             const std::string& report_path);

// The violations of CheckRunDetailed.
std::vector<Violation> CheckRun(const std::string& config_yaml_path, const std::string& trace_path,
                                const std::string& failures_path, const std::string& events_path,
                                const std::string& report_path);

// One line: "line 12 t=900 j1 [progress] message" ("end" for whole-log findings).
std::string FormatViolation(const Violation& v);

}  // namespace gantry::checker
