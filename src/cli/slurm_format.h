// squeue's and sacct's output formats over Gantry's jobs (`gantry ls --format`, `gantry
// acct`): field letters and names mapped to the fields of GET /v1/jobs (docs/slurm.md).
//
// Pure: a job is the JSON object /v1/jobs gives, `now` is passed in, so tests give any
// job and time.
// Thread-safety: stateless functions.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace gantry::cli {

// One column of a format: a field (its canonical name, as in squeue -O / sacct
// --format), a width (0: as wide as the value) and alignment; or literal text.
struct Column {
  std::string field;  // empty: `literal`
  std::string literal;
  int width = 0;
  bool right = false;
};

// squeue -o "%.18i %.9P %8j %u": % [.] [width] letter; anything else is literal.
// nullopt and `error` set for an unknown letter.
std::optional<std::vector<Column>> ParseSqueueFormat(const std::string& format, std::string& error);
// squeue -O "JobID,Name:30,State:.10": names (case-insensitive), each :[.]width
// (default 20).
std::optional<std::vector<Column>> ParseSqueueNames(const std::string& format, std::string& error);
// sacct --format "JobID,JobName%30,State": names, each %width (default per field).
std::optional<std::vector<Column>> ParseSacctFormat(const std::string& format, std::string& error);

// The header of a column (squeue's or sacct's, from `sacct`).
std::string ColumnHeader(const Column& c, bool sacct);
// A field's value for one job.
std::string FieldValue(const nlohmann::json& job, const std::string& field, double now);
// Columns joined: with `pad`, padded or cut to their widths (squeue and sacct cut);
// `separator` between them (" " for sacct, "|" for --parsable2, "" for squeue, whose
// literals separate); `trailing` after the last too (sacct --parsable).
std::string RenderRow(const std::vector<Column>& cols, const std::vector<std::string>& values,
                      const std::string& separator, bool pad, bool trailing);

// Slurm's reason code for a job, as squeue's %r and scontrol's Reason= say it: a pending
// job's wait (Resources, Priority, Dependency, AssocGrpGRES, AssocGrpBillingMinutes,
// BeginTime, JobArrayTaskLimit, None), an ended one's (NonZeroExitCode, TimeLimit,
// OutOfMemory), else None. Gantry's own sentence is `reason` (gantry show, sacct's Reason).
std::string SlurmReason(const nlohmann::json& job);
// Slurm's state for a job (RUNNING, PENDING, COMPLETED, FAILED, TIMEOUT, CANCELLED,
// PREEMPTED, REQUEUED, OUT_OF_MEMORY, COMPLETING), and its compact code (R, PD, ...).
std::string SlurmState(const nlohmann::json& job);
std::string SlurmStateCode(const std::string& state);
// Slurm's duration format: M:SS, H:MM:SS, D-HH:MM:SS.
std::string SlurmDuration(double seconds);

// sacct's filters; empty lists match everything.
struct AcctFilter {
  double start = 0, end = 0;  // jobs that were pending or running at some time in [start, end]
  bool any_time = false;      // -j without -S: any time
  std::vector<std::string> users, accounts, states, jobs;
};
// Whether `job` passes (states as SlurmState names them).
bool AcctMatches(const nlohmann::json& job, const AcctFilter& f);
// sacct's rows for `job`: itself, and for a batch job that started its script's
// (ID.batch) and each step's (ID.0, ID.1, ...), as the job's own rows with the step's
// id, name, state, exit code, times, tasks and nodes.
std::vector<nlohmann::json> AcctRows(const nlohmann::json& job);
// Whether `job` is one of `ids` (empty: any): its id, its array's, or their numbers.
bool JobIsOneOf(const nlohmann::json& job, const std::vector<std::string>& ids);
// A job's number (SLURM_JOB_ID; an array task's own), and an array task's array's number
// (SLURM_ARRAY_JOB_ID; "" for a job not in an array), from gantryd's job JSON.
std::string NumberOf(const nlohmann::json& job);
std::string ArrayNumberOf(const nlohmann::json& job);
// A state given to -s, as SlurmState names it (CD -> COMPLETED); empty if unknown.
std::string NormalizeState(const std::string& s);

}  // namespace gantry::cli
