// Helpers shared by the files of the Controller (controller*.cc, authenticator.cc); not a
// public header.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <stdexcept>
#include <string>

#include "base/log.h"
#include "base/result.h"
#include "core/model/types.h"
#include "server/metrics.h"
#include "server/store.h"

namespace gantry::server {

// A failure this process cannot carry on from (a fenced leader, a broken invariant): said
// in the operational log, in its format, and the process ends without answering the
// batch in hand (no answered request is lost); a restart (systemd's Restart=, or a
// standby) rebuilds from the database.
[[noreturn]] inline void Fatal(const std::string& what) {
  log::Error("fatal: " + what +
             "; exiting: nothing unsaved was answered, a restart rebuilds from the database");
  std::_Exit(1);
}

// A store call failed (StoreDown, store.h). A fenced store (field "lease": another
// gantryd has taken the lease) is no outage: this process ends at once.
[[noreturn]] inline void StoreFailed(const Error& e) {
  if (e.field == "lease") Fatal("deposed: " + e.message);
  throw StoreDown(e.message);
}

// A wall time for people: "14:05 UTC (in 2 h 10 min)", with the date when it is not
// today ("2026-11-26 09:00 UTC (in 19 h 5 min)"), or "(3 min ago)" when past.
std::string HumanTime(int64_t at_ms, int64_t now_ms);

// `text` with the core's times ("t=12345.6 s", core seconds since `epoch_ms`) written
// as HumanTime: what a wait reason says to a person, at the edge (the core and the
// simulator keep seconds).
std::string HumanTimes(const std::string& text, int64_t epoch_ms, int64_t now_ms);

// The file (in the job's log directory) of a worker's output, or with `step` >= 0 of
// that step's task `rank`: "RUN.RANK.log", "RUN.sSTEP.RANK.log"; with `err`, a step task's
// stderr (kept apart, as Slurm's srun forwards it): "RUN.sSTEP.RANK.err".
inline std::string LogFileName(int run, int rank, int step, bool err = false) {
  return std::to_string(run) + "." + (step >= 0 ? "s" + std::to_string(step) + "." : "") +
         std::to_string(rank) + (err ? ".err" : ".log");
}

// How long an interrupted srun's tasks have between SIGTERM and SIGKILL (Slurm's
// KillWait default is 30 s).
inline constexpr core::Ticks kStepKillWaitMs = 10000;
// How long a held step (srun --mpi=pmix) may wait for srun to launch its tasks once placed.
inline constexpr core::Ticks kStepHoldMs = 60000;
// Slurm's KillWait (its default): from SIGTERM at a batch job's time limit to SIGKILL.
inline constexpr core::Ticks kKillWaitMs = 30000;

// GPU units as a GPU count for messages ("0.5", "8").
inline std::string GpusText(core::GpuUnits units) {
  return FormatValue(static_cast<double>(units) / static_cast<double>(core::kGpuUnits));
}

}  // namespace gantry::server
