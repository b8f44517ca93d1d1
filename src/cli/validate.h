// `gantry validate FILE...`: checks cluster configs, job specs, traces and failure files
// without running anything. Kinds are told apart by content: a YAML file with `pools`
// is a cluster config, other YAML is a job spec; a JSON Lines file whose first record has
// `down_s` is a failures file, otherwise a trace. Jobs are checked against the cluster
// config named in the same call (or the first one found); without one, against the
// built-in catalog with any queue name accepted.
#pragma once

#include <ostream>
#include <string>
#include <vector>

namespace gantry::cli {

// Returns the exit status: 0 all good, 2 problems (printed to `err`, all of them).
int Validate(const std::vector<std::string>& files, std::ostream& out, std::ostream& err);

}  // namespace gantry::cli
