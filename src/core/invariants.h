// Invariants the core checks in every build, release included (issue 46): what no
// decision may break, checked where it is cheap (each allocation, each start) and in full
// at intervals (Ledger::Audit, Scheduler's audit every Scheduler::AuditEvery() passes). A broken
// one is a bug in the core, never bad input: it throws InvariantBroken, so the process ends with
// the message (`gantry sim` prints it and exits 1; gantryd's scheduling thread does not catch it,
// so the daemon stops and a standby takes over) instead of running on with a ledger that no longer
// says what is held; the store keeps what was committed before. Thread-safety: stateless.
#pragma once

#include <stdexcept>
#include <string>

namespace gantry::core {

class InvariantBroken : public std::logic_error {
 public:
  using std::logic_error::logic_error;
};

inline void Require(bool holds, const char* what) {
  if (!holds) [[unlikely]]
    throw InvariantBroken(std::string("gantry core invariant broken: ") + what);
}

}  // namespace gantry::core
