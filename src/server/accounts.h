// Gantry's own accounting, kept in the store's runs (one row per worker and run: queue,
// model, GPUs, start and end) and read back by both backends, the Controller over
// gantry-agents and the Kubernetes scheduler (kube/scheduler.h): `gantry usage`, each
// budgeted queue's spending in its period, and each queue's decayed fair-share usage, so
// a restart forgets none of them.
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/result.h"
#include "core/scheduler.h"
#include "server/store.h"

namespace gantry::server {

// Seeds a new scheduler (before its first pass, at core time `now`, Unix ms `now_ms`)
// from the stored runs: each queue's decayed usage (a run's GPU time weighed as the core
// weighs it, halving every fairshare_half_life back from now; runs older than ten
// half-lives ignored) and each budgeted queue's spending in its current period.
// `adopts_from_run_start`: the caller adopts running jobs from their runs' start, which
// counts what they spent so far in the budgets (the Controller); false: it adopts them at
// `now` (the Kubernetes scheduler), and the runs still open are counted here up to now.
Status SeedAccounts(Store& store, const core::QueueTree& queues, const core::Catalog& catalog,
                    const core::PolicyParams& params, core::Scheduler& sched, core::Ticks now,
                    int64_t now_ms, bool adopts_from_run_start);

// What a scheduler built anew over the same queues (a Kubernetes node joined) carries
// over from the one it replaces: decayed usage and budget spending as of `now`.
void CarryAccounts(core::Scheduler& from, core::Scheduler& to, const core::QueueTree& queues,
                   core::Ticks now);

// GET /v1/usage's body for [from_ms, to_ms) from the runs that overlap it: GPU-hours per
// queue, user and model, their cost, and where agents reported them, how busy they were
// and what right-sizing would have freed. `live` fills in a running row's usage so far
// (the Controller's workers; may be empty).
nlohmann::json UsageBody(std::vector<StoredRun> runs, int64_t from_ms, int64_t to_ms,
                         int64_t now_ms, const core::Catalog& catalog,
                         const core::PolicyParams& params, const std::string& currency,
                         const std::function<void(StoredRun&)>& live);

}  // namespace gantry::server
