// Adopt: puts a job that was running before gantryd restarted back into a fresh
// scheduler, holding exactly the resources it held before.
//
// The core has no "start with this allocation" call, and the server must not edit the
// core, so this works through the scheduler's public interface: it takes every node but
// the job's own out of the placer's view, fills every other free slot on the job's nodes
// with temporary blockers, and lets Scheduler::TryStart place the job: the only room
// left is the job's own. The blockers are then released and the nodes restored. The
// result is checked: per node, the job must hold the same GPUs, MIG slices, shares, CPUs
// and memory as before (identical workers may be split differently; the server keeps its
// own per-rank record), or the job is taken out of the scheduler again (Finish) and an
// error returned: the caller then resubmits it as pending.
// Preconditions: `job` was just Submitted (pending) without a window (a job's window
// only governs starting); every node of `alloc` is up in the ledger; no scheduling pass
// has been run between the Submit and this call, and no pending job other than
// adoptees is in the scheduler (a failed TryStart is cached by shape until the next
// pass). Call Scheduler::Schedule once after the last adoption to clear that state.
// Cost: O(nodes + GPUs of the job's nodes x MIG profiles).
// A core call Scheduler::Adopt(JobId, Allocation, Ticks started) doing what TryStart does
// after a successful placement (leave pending, hold in the ledger, add queue usage, mark
// running) would replace this file; it is kept out of the core only because the server
// must not edit it.
#pragma once

#include "base/result.h"
#include "core/ledger.h"
#include "core/scheduler.h"

namespace gantry::server {

Status Adopt(core::Scheduler& sched, core::JobId job, const core::Allocation& alloc,
             core::Ticks started);

}  // namespace gantry::server
