// `gantry sbatch`: a Slurm batch script and sbatch options turned into a Gantry job spec.
//
// The script's #SBATCH directives are read as Slurm reads them: from the lines after
// the #! line, up to the first line that is neither blank nor a comment; options on the
// command line override them. Every option maps to a job spec field (docs/slurm.md has
// the table); one Gantry cannot express is refused, naming the script, the line and the
// directive. Pure: no files, no environment, no network (the caller passes them in), so
// tests feed it any text.
// Thread-safety: stateless functions.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace gantry::cli {

// What the parse needs from the submitting machine.
struct SbatchContext {
  std::string cwd;    // the default --chdir, and what relative ones start from
  std::string host;   // SLURM_SUBMIT_HOST
  std::string umask;  // SLURM_UMASK, "0022"; empty: not known
  std::string nice;   // SLURM_PRIO_PROCESS, the submitter's nice value; empty: not known
  std::map<std::string, uint64_t> rlimits;  // soft limits (base/rlimits.h): SLURM_RLIMIT_*
  std::map<std::string, std::string> env;   // the submit environment (--export)
  std::string default_name;  // the job's name without -J; empty: the script's file name
  int64_t now_s = 0;         // the time (Unix seconds) --begin's relative forms count from
};

struct SbatchJob {
  nlohmann::json spec = nlohmann::json::object();  // the job spec, for POST /v1/jobs
  std::string array;                               // ?array= (--array), empty if none
  std::string after;                               // ?after= (--dependency), empty if none
  bool parsable = false;                           // --parsable: print just the id
  bool wait = false;  // -W, --wait: sbatch returns when the job (every array task) has ended
  bool hold = false;  // -H, --hold: submitted held, until scontrol release (?hold=true)
  // --kill-on-invalid-dep: 1 yes, 0 no, -1 not given (?kill_invalid_dep=true|false).
  int kill_invalid_dep = -1;
  int64_t begin_s = 0;              // --begin: held until then, Unix seconds (?begin=); 0: none
  std::vector<std::string> errors;  // "FILE:LINE: --opt: message"; spec unusable if any
  std::vector<std::string> notes;   // options accepted that Gantry does nothing with, and why
  // Where each spec field gantryd resolves came from ("job.sh:4: --qos=regular"), so its
  // refusals are shown at the script's line.
  std::map<std::string, std::string> origin;
};

// This process's umask as Slurm writes SLURM_UMASK ("0022"): what sbatch and srun send, for
// the job's processes to run with.
std::string UmaskText();

// sbatch --wrap=COMMAND's script, as Slurm writes it (its job is named "wrap"); nullopt
// when `options` (the command line's) give no --wrap.
std::optional<std::string> WrapScript(const std::vector<std::string>& options);

// `script_name` labels errors; `text` is the script; `options` the sbatch options given
// before it on the command line; `args` what follows it (the script's arguments).
SbatchJob ParseSbatch(const std::string& script_name, const std::string& text,
                      const std::vector<std::string>& options, const std::vector<std::string>& args,
                      const SbatchContext& ctx);

// The command line after `sbatch`: the options, the script (the first word that is
// neither an option nor an option's value) and its arguments. False when there is no
// script.
bool SplitSbatchArgs(const std::vector<std::string>& words, std::vector<std::string>& options,
                     std::string& script, std::vector<std::string>& args);

// A Slurm time ("MM", "MM:SS", "HH:MM:SS", "D-HH", "D-HH:MM", "D-HH:MM:SS"; "UNLIMITED" and
// "INFINITE" are none) in seconds; nullopt and `error` set when malformed. 0 means none.
std::optional<long long> ParseSlurmTime(const std::string& text, std::string& error);
// --nice's (and scontrol update Nice='s) value: 100 when none is given, as Slurm's; nullopt
// when it is not an integer in Slurm's range (+/- 2147483645).
std::optional<int> ParseSlurmNice(const std::string& text);

// An sbatch --begin time, as Slurm 22.05 reads it, in Unix seconds (nullopt and `error` set
// when malformed): now[+-]N[seconds|minutes|hours|days|weeks] (N seconds without a unit),
// and words that are each a time of day (HH:MM[:SS] with an optional AM or PM, midnight,
// noon, fika (15:00), teatime (16:00)) or a date (today, tomorrow, YYYY-MM-DD, MM/DD[/YY],
// MM.DD[.YY], MMDDYY), or YYYY-MM-DDTHH:MM[:SS]. A time without a date is today's, or
// tomorrow's once it has gone by; a date without a time is its midnight; a date without
// a year this year's, or next year's once it has gone by. In the local time zone (TZ),
// from `now_s`. The result may be in the past (the job is not held then).
std::optional<int64_t> ParseSlurmBeginTime(const std::string& text, int64_t now_s,
                                           std::string& error);

// A Slurm memory size ("4096", "500M", "16G", "1T"; MB without a unit) in MiB; nullopt
// and `error` set when malformed.
std::optional<long long> ParseSlurmMemory(const std::string& text, std::string& error);

}  // namespace gantry::cli
