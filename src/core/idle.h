// Why free GPU capacity stays unused: the answer to "jobs wait and GPUs are free, why?"
// for the simulator's report and gantryd's console alike.
//
// Each pool's free capacity (whole free GPUs, free compute sevenths of MIG GPUs, the free
// part of shared GPUs) counts under the first of these that holds for it: its nodes are
// down; nothing waits; no pending job accepts the pool's model; none may use the pool (it
// names another, or a sharing mode the pool does not allow); of the jobs that could use
// it, one waits behind a reservation; one does not fit it (too few free GPUs together
// where it needs them, or CPUs or memory: fragmented); they are held by their queue's
// burst, budget or window; they have not had their first pass yet (or wait for another
// reason). A job's cause is its JobRecord::wait.
// Thread-safety: pure function of the scheduler's state.
#pragma once

#include <array>
#include <string_view>

#include "core/scheduler.h"

namespace gantry::core {

enum class IdleCause : uint8_t {
  kDown,
  kNoDemand,
  kWrongModel,
  kWrongPool,
  kReservation,
  kFragmented,
  kLimits,
  kNotYetPlaced
};
inline constexpr int kIdleCauses = 8;
std::string_view Name(IdleCause c);                // "down", "nothing waits", "wrong model", ...
using IdleGpus = std::array<double, kIdleCauses>;  // GPUs per cause

// Free GPUs now by cause; the causes other than kDown add up to the up GPUs not allocated.
// Cost: O(GPUs + pending jobs x pools).
IdleGpus IdleByCause(const Scheduler& s);

// Free GPU units on up nodes that no pending job could use now, each of its workers tried
// alone on each GPU (its pool, model, sharing mode, VRAM, MIG profile, and the node's free
// CPUs and memory; not its gang, topology, queue limits or reservations): the remnants of
// shared and MIG GPUs too small for every waiting share or profile, and free GPUs on
// nodes whose free CPUs or memory hold no waiting worker. However the pending jobs are
// placed from here, the allocation grows by at most the free units less these: the bound
// beside a fill experiment's allocation (issue 14). O(GPUs x distinct worker shapes).
GpuUnits StrandedUnits(const Scheduler& s);

}  // namespace gantry::core
