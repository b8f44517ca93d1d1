// Batch-job helpers shared by the job reader, gantryd and `gantry sbatch`: Slurm's
// output file patterns (`-o slurm-%j.out`) and signal names (`--signal=USR1`).
//
// A pattern is checked where it enters (the CLI, the job reader) and expanded by gantryd
// for each worker, when the job id, node and rank are known.
// Thread-safety: stateless functions.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace gantry::spec {

// What a pattern's fields stand for, for one worker.
// %a and SLURM_ARRAY_TASK_ID's value outside an array: Slurm's NO_VAL.
inline constexpr const char* kNoArrayTask = "4294967294";

struct OutputNames {
  std::string job;         // %j: the job's number (an array task's own), e.g. 43
  std::string name;        // %x: the job name (its id when it has none)
  std::string array_job;   // %A: the array's number (the job's when not an array task)
  std::string array_task;  // %a: the task index (kNoArrayTask as Slurm, when not a task)
  std::string node;        // %N: the worker's node
  std::string user;        // %u: the submitting user
  int rank = 0;            // %t: the worker's rank (Slurm's task id)
  int node_index = 0;      // %n: its node's index among the job's nodes
  std::string step;        // %s: a step's id (srun -o); %J is then JOB.STEP. Empty: none
};

// nullopt when `pattern` holds only known fields (%j %x %A %a %N %n %u %t %%), else why not.
std::optional<std::string> CheckOutputPattern(std::string_view pattern);
// `pattern` with its fields replaced; unknown fields are kept as written.
std::string ExpandOutputPattern(std::string_view pattern, const OutputNames& names);
// Whether each rank gets a file of its own (the pattern names %t): otherwise only rank 0
// writes to it, as only Slurm's batch step does.
bool PatternPerRank(std::string_view pattern);

// DIGITS or DIGITS_DIGITS: a job's number or an array task's, as Slurm writes them (what
// follows the j of an id gantryd gave: j12, j41_3).
bool IsJobNumber(std::string_view id);
// The number of an id gantryd gave ("j12" -> "12", "j41_3" -> "41_3"); nullopt for any
// other id (one its user named, a number already).
std::optional<std::string> NumberOfGivenId(std::string_view id);

// Node names as Slurm's compressed host list (SLURM_JOB_NODELIST): names that end in a
// number and share the rest are bracketed, in the order given: "h100-[0-2,5],cpu-0".
std::string HostList(const std::vector<std::string>& nodes);
// A host list back to its names, in order ("h100-[0-2,5],cpu-0", zero padding kept:
// "n[08-10]" gives n08 n09 n10); nullopt when it is malformed or names over 100,000 hosts.
std::optional<std::vector<std::string>> ExpandHostList(std::string_view list);
// Tasks per node in Slurm's form (SLURM_TASKS_PER_NODE): "2(x3),1".
std::string TasksPerNode(const std::vector<int>& counts);

// Why Gantry cannot honour sbatch's or srun's -m/--distribution=NODES[:SOCKETS[:CORES]][,Pack]
// (the reason alone, for the caller to put after the option; "" when it can): tasks go over the
// nodes block by block or cyclic (round-robin), as Slurm's; the levels within a node are CPU
// binding, which Gantry does not do, so any is accepted there; plane and arbitrary are refused.
std::string DistributionProblem(std::string_view value);
// Whether it lays tasks out over the nodes round-robin (cyclic).
bool DistributionCyclic(std::string_view value);

// A signal by name (TERM, SIGUSR1, ...) or number (1-64); -1 when unknown.
int SignalNumber(std::string_view name);
// Its name without "SIG" (USR1), or the number as text.
std::string SignalName(int number);

}  // namespace gantry::spec
