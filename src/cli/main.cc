// gantry: the command line. `sim` replays a trace through the scheduling core and
// `compare` through several policies (sim_commands.h); `validate` checks input files;
// `trace convert` and `gen` make traces; the client commands talk to gantryd.
// Exit status: 0 success, 1 failure at run time, 2 bad input (with a message naming
// file, line and field).
#include <CLI/CLI.hpp>
#include <iostream>

#include "cli/client.h"
#include "cli/exit_codes.h"
#include "cli/sim_commands.h"
#include "cli/srun.h"
#include "cli/trace_commands.h"
#include "cli/validate.h"

using namespace gantry;

int main(int argc, char** argv) {
  // Called as srun, sbatch, squeue, scancel, sacct or scontrol (a link to this program):
  // the gantry command line that name stands for.
  std::vector<std::string> words;
  std::vector<char*> args;
  {
    const std::string_view self = argv[0];
    const std::string_view program = self.substr(self.rfind('/') + 1);
    std::string error;
    auto line =
        cli::SlurmCommandLine(program, std::vector<std::string>(argv + 1, argv + argc), error);
    if (!error.empty()) {
      std::cerr << program << ": error: " << error << "\n";
      return cli::kExitBadInput;
    }
    if (line) {
      words.emplace_back("gantry");
      words.insert(words.end(), line->begin(), line->end());
      for (std::string& w : words) args.push_back(w.data());
      argc = static_cast<int>(args.size());
      args.push_back(nullptr);
      argv = args.data();
    }
  }
  CLI::App app{"gantry: GPU cluster scheduler"};
  app.require_subcommand(1);
  std::vector<std::string> files;
  CLI::App* validate = app.add_subcommand("validate", "Check input files without running");
  validate->add_option("files", files, "Cluster configs, job specs, traces, failure files")
      ->required();
  int tool_exit = -1;  // set by the subcommands registered below when they ran
  cli::AddSimCommands(app, tool_exit);
  cli::AddTraceCommands(app, tool_exit);
  cli::AddClientCommands(app, tool_exit);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);
    return rc == 0 ? 0 : cli::kExitBadInput;
  }
  if (*validate) return cli::Validate(files, std::cout, std::cerr);
  if (tool_exit >= 0) return tool_exit;
  return cli::kExitBadInput;
}
