// `gantry sim` and `gantry compare`: the command-line front of the simulator.
//
// Both read and check their inputs the same way (every problem at once as
// FILE:LINE: FIELD: MESSAGE, exit 2, before anything runs; no --config/--trace runs the
// bundled example). `sim` replays the trace through one policy and writes the event
// log, the JSON report and the HTML report; `compare` replays it through several
// policies one after another and prints their main figures side by side (and writes
// them, with each policy's plots, to HTML and JSON).
//
// AddSimCommands registers both subcommands; when one ran, its callback stores the exit
// status (0 done, 1 failure at run time, 2 bad input) in `exit_code`.
// Thread-safety: none (a command-line front end).
#pragma once

#include <CLI/CLI.hpp>

namespace gantry::cli {

void AddSimCommands(CLI::App& app, int& exit_code);

}  // namespace gantry::cli
