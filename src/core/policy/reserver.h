// Reserver: when and where a pending job that finds no room could start, for the gantry
// policy's backfill reservations. (How many jobs get one is the policy's
// `backfill_depth`: 1 is EASY backfill, more is conservative backfill to that depth.)
//
// A what-if on the ledger, rolled back: running jobs are released in order of expected
// end until the job fits; the latest of their ends is its start, and where it fit, its
// GPUs. A job running past its estimate is expected to run as long again as it has run
// (an estimate it has already overrun says nothing, and holding GPUs for a start "now"
// that never comes would keep them idle); one that `ends_now` names (a backfilled job
// past its lease, for a job allowed to end leases) ends now. At most kMaxReserveSteps
// jobs are released; a request shape that found no start keeps failing for the rest of
// the pass. GPUs already held for earlier reservations stay held: a later reservation
// comes after theirs.
// Thread-safety: none; one per policy, driven by one Scheduler.
#pragma once

#include <functional>
#include <set>

#include "core/policy/what_if.h"
#include "core/scheduler.h"

namespace gantry::core {

class Reserver {
 public:
  static constexpr size_t kMaxReserveSteps = 512;  // bounds the what-if of one reservation

  void NewPass() { failed_.clear(); }
  // The earliest start of pending job `id` and its placement then; false if none is found.
  // Its what-if (running jobs released in order of expected end) runs in `w`.
  bool Earliest(const Scheduler& s, WhatIf& w, JobId id, Ticks now,
                const std::function<bool(JobId)>& ends_now, Ticks& start, Allocation& fit);

 private:
  std::set<uint32_t> failed_;  // this pass: shape ids (Scheduler::shape_id)
};

}  // namespace gantry::core
