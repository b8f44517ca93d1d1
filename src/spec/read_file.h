// ReadWholeFile: a small input file (config, job spec) as one string, or a diagnostic.
// Thread-safety: stateless.
#pragma once

#include <optional>
#include <string>

#include "spec/diagnostics.h"

namespace gantry::spec {

// Files above this size are refused: configs and job specs are a few kilobytes.
inline constexpr size_t kMaxSpecFileBytes = 64u << 20;

// Problems ("cannot open: No such file or directory") go to diags as "PATH: ...".
std::optional<std::string> ReadWholeFile(const std::string& path, Diagnostics& diags);

}  // namespace gantry::spec
