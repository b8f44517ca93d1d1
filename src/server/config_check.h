// What a cluster config would break in gantryd's stored state (issue 16, bug 5): before
// gantryd starts on a changed config, and as `gantryd check-config`. Removing a queue, a
// pool or a GPU model that active jobs use would otherwise fail them for good at the
// next start. Thread-safety: none (it reads the store).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "base/result.h"
#include "core/model/job.h"
#include "server/state.h"
#include "server/store.h"
#include "spec/config_reader.h"

namespace gantry::server {

// A stored job's spec, read against `config` as at submission, with what was updated
// since (Job::time_limit_set); its problems (FILE:LINE: FIELD: MESSAGE) go to `problems`.
std::optional<core::JobSpec> ReadJobSpec(const Job& job, const spec::ClusterConfig& config,
                                         std::vector<std::string>* problems);

// `limit` (0: none) replaces the spec's time limit, and its run-time estimate where that
// was the time limit (the job reader's default).
void ApplyTimeLimit(core::JobSpec& spec, core::Ticks limit);

// A spec that no longer reads against the config (its queue, pool or model removed and
// gantryd started with --force-config): read against a stand-in with only its own queue
// and the built-in GPU catalog, so the job it fails still shows what it was (tier, GPUs,
// command) instead of an empty spec. nullopt where even that fails.
std::optional<core::JobSpec> ReadJobSpecAsWritten(const Job& job);

// One line per active job that `config` would break: its spec no longer reads (an
// unknown queue, model or pool), its allocation names nodes or GPUs the config lacks, or
// it could never run there. Empty: the config is compatible with the stored state.
Result<std::vector<std::string>> ConfigBreakage(const spec::ClusterConfig& config, Store& store);

}  // namespace gantry::server
