// Exit statuses of the gantry command's subcommands, and Guard, which turns anything
// thrown out of a subcommand into a message and a run-time failure.
#pragma once

#include <exception>
#include <iostream>

namespace gantry::cli {

inline constexpr int kExitOk = 0;
inline constexpr int kExitRunFailure = 1;  // the run failed (an output cannot be written, ...)
inline constexpr int kExitBadInput = 2;    // bad input files or options; nothing ran

// Runs `body`, turning anything thrown into exit status 1 with a message.
template <typename F>
int Guard(const char* what, F&& body) {
  try {
    return body();
  } catch (const std::exception& e) {
    std::cerr << what << ": " << e.what() << "\n";
  } catch (...) {
    std::cerr << what << ": unexpected failure\n";
  }
  return kExitRunFailure;
}

}  // namespace gantry::cli
