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
// reason). A job's cause is the first word of its wait reason (JobRecord::wait_reason).
// Thread-safety: pure function of the scheduler's state.
#pragma once

#include <array>
#include <string_view>

#include "core/scheduler.h"

namespace gantry::core {

enum class IdleCause : uint8_t {
  kDown, kNoDemand, kWrongModel, kWrongPool, kReservation, kFragmented, kLimits, kNotYetPlaced
};
inline constexpr int kIdleCauses = 8;
std::string_view Name(IdleCause c);  // "down", "nothing waits", "wrong model", ...
using IdleGpus = std::array<double, kIdleCauses>;  // GPUs per cause

// Free GPUs now by cause; the causes other than kDown add up to the up GPUs not allocated.
// Cost: O(GPUs + pending jobs x pools).
IdleGpus IdleByCause(const Scheduler& s);

}  // namespace gantry::core
