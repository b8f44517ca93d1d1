// Slurm's commands inside a Gantry batch job (docs/slurm.md, "Inside a job"): `srun` runs a
// job step on the job's allocation and forwards its tasks' output and exit status;
// `scontrol show hostnames|hostlist|job`. They speak to gantryd with the job's own
// credential ($GANTRY_TOKEN, $GANTRY_SERVER, set by gantry-agent for the batch script).
//
// The `gantry` binary answers to Slurm's names too (links in the agent's --slurm-commands
// directory, first on a batch job's PATH): srun, scontrol, sbatch, squeue, scancel, sacct.
// Thread-safety: none (a command-line front end).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace gantry::cli {

struct Globals;

// `srun [options] COMMAND [ARGS...]` (words after "srun"); its exit status is the highest
// of its tasks' (128 + the signal for one killed), 1 when the step could not run, 2 for bad
// options.
int Srun(const Globals& g, const std::vector<std::string>& words);
// `scontrol show hostnames [LIST] | hostlist LIST | job [ID]`.
int Scontrol(const Globals& g, const std::vector<std::string>& words);
// `sinfo [-p PART] [-t STATES] [-N | -R | -s] [-h]`: the nodes by partition and state in
// Slurm's words (idle, mix, alloc, drain, drng, down, down*), from GET /v1/nodes.
int Sinfo(const Globals& g, const std::vector<std::string>& words);

// When the program was called by a Slurm name (argv[0]'s file name), the gantry command
// line it stands for: {"sbatch", ...} as given, squeue's options as `ls`'s, scancel's as
// `cancel`'s, sacct's as `acct`'s; nullopt for any other name. `error` names an option
// with no Gantry equivalent (the result is then empty).
std::optional<std::vector<std::string>> SlurmCommandLine(std::string_view program,
                                                         const std::vector<std::string>& args,
                                                         std::string& error);

}  // namespace gantry::cli
