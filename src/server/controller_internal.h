// Helpers shared by the files of the Controller (controller*.cc); not a public header.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "core/model/types.h"
#include "server/metrics.h"

namespace gantry::server {

// A store failure: the database is the truth, so the process ends and a restart
// rebuilds from it.
[[noreturn]] inline void Fatal(const std::string& what) {
  std::fprintf(stderr, "gantryd: fatal: %s\n", what.c_str());
  std::fflush(stderr);
  std::_Exit(1);
}

// A wall time for people: "14:05 UTC (in 2 h 10 min)", with the date when it is not
// today ("2026-11-26 09:00 UTC (in 19 h 5 min)"), or "(3 min ago)" when past.
std::string HumanTime(int64_t at_ms, int64_t now_ms);

// `text` with the core's times ("t=12345.6 s", core seconds since `epoch_ms`) written
// as HumanTime: what a wait reason says to a person, at the edge (the core and the
// simulator keep seconds).
std::string HumanTimes(const std::string& text, int64_t epoch_ms, int64_t now_ms);

// GPU units as a GPU count for messages ("0.5", "8").
inline std::string GpusText(core::GpuUnits units) {
  return FormatValue(static_cast<double>(units) / static_cast<double>(core::kGpuUnits));
}

}  // namespace gantry::server
