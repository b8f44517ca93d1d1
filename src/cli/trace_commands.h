// `gantry trace convert` and `gantry gen`: the command-line front of the trace
// converters (src/sim/convert) and the workload generator (src/sim/gen).
//
// AddTraceCommands registers both subcommands on the gantry app; when one of them ran,
// its callback stores the exit status (0 done, 1 cannot write the output, 2 bad input
// or options) in `exit_code`, which stays -1 otherwise.
// Thread-safety: none (a command-line front end).
#pragma once

#include <CLI/CLI.hpp>

namespace gantry::cli {

void AddTraceCommands(CLI::App& app, int& exit_code);

}  // namespace gantry::cli
