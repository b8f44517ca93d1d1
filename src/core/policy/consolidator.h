// Consolidator: room for a job that fits nowhere, made by moving a few running jobs
// elsewhere (KAI's consolidation action; what the Kubernetes descheduler does after the
// fact). Off unless the site sets `policy.consolidate_within_s`.
//
// A pending job of one worker that found no room, no victims and nothing held for it
// looks for a node where it would fit if some running jobs there went elsewhere now: at
// most kMaxMoves of them, each of one worker, not critical, of the job's tier or lower,
// that would lose at most `consolidate_within` of its run (since its start or last
// checkpoint) and that did not start (or resume) less than `min_run_before_repreempt`
// ago. A what-if on the ledger releases the movable jobs of the node, places the job
// there, puts back where they were those that still fit (the biggest first) and places
// the rest anywhere (best fit); a node counts only when all of them find room. Of the
// kNodesTried nodes closest to fitting (most free GPU share, then fewest movable jobs,
// then lowest id), the plan with the fewest moves wins (then the fewest GPUs moved, then
// the first tried). At most kJobsPerPass jobs look per pass. The moves are preemptions:
// the job claims its place until the moved jobs are gone (their grace), and they are
// requeued and placed again in their turn; their places are not held for them, so work
// arriving during the grace may take one, and a moved job then waits.
// The ledger is left as found. Thread-safety: none; one per policy.
#pragma once

#include <array>
#include <cstdint>
#include <tuple>
#include <vector>

#include "core/policy/what_if.h"
#include "core/scheduler.h"

namespace gantry::core {

class Consolidator {
 public:
  static constexpr int kMaxMoves = 2;     // running jobs moved for one job
  static constexpr int kNodesTried = 16;  // nodes tried per job
  // Jobs that look for moves per pass, in the pass's order (KAI's queueDepthPerAction):
  // the what-ifs cost O(nodes) each, and after departures a full pass visits thousands of
  // waiting jobs.
  static constexpr int kJobsPerPass = 16;

  struct Plan {
    Allocation fit;              // where the job goes once the moved jobs are gone
    std::vector<JobId> moved;    // jobs to move (preempt)
    std::vector<Allocation> to;  // where each would go now (not held)
  };

  // A new pass: the movable jobs are indexed again on first use.
  void NewPass() {
    indexed_ = false;
    tries_ = 0;
  }
  // The index is stale (a preemption since), the pass goes on.
  void Reindex() { indexed_ = false; }
  // Moves that make room for pending job `job` (one worker), in `plan`; false if none.
  // Its what-ifs run in `w`.
  bool Find(const Scheduler& s, WhatIf& w, const JobRecord& job, Ticks now, Plan& plan);

 private:
  void Index(const Scheduler& s, Ticks now);
  // One node's what-if: true (and `plan`) where the job fits there after at most
  // kMaxMoves moves. The ledger is left as found.
  bool TryNode(const Scheduler& s, WhatIf& w, const JobRecord& job, NodeId n, Plan& plan);

  bool indexed_ = false;
  int tries_ = 0;  // this pass
  // This pass: movable jobs (running, one worker, not critical, within the limits) by
  // node, and the nodes that have any.
  std::vector<std::vector<JobId>> by_node_;
  std::vector<uint32_t> nodes_;
  // By place in nodes_: what its movable jobs hold, [0] all of them, [1] best-effort ones.
  struct Held {
    GpuUnits units = 0;
    int64_t cpus_milli = 0, memory_bytes = 0;
    uint32_t count = 0;
  };
  std::vector<std::array<Held, 2>> held_;
  std::vector<uint8_t> accepts_;  // Find's scratch: per pool, whether it accepts the job
  std::vector<std::tuple<GpuUnits, uint32_t, uint32_t>> candidates_;  // Find's scratch
};

}  // namespace gantry::core
