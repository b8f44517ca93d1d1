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

// GPU units as a GPU count for messages ("0.5", "8").
inline std::string GpusText(core::GpuUnits units) {
  return FormatValue(static_cast<double>(units) / static_cast<double>(core::kGpuUnits));
}

}  // namespace gantry::server
