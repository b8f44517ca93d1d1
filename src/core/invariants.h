// Invariants the core checks in every build, release included (issue 46): what no
// decision may break, checked where it is cheap (each allocation, each start) and in full
// at intervals (Ledger::Audit, Scheduler's audit every kAuditEvery passes). A broken one
// is a bug in the core, never bad input: it throws InvariantBroken, which no driver
// catches, so the process ends with the message instead of running on with a ledger
// that no longer says what is held (the driver's state, events and store are as they
// were after the last decision that held).
// Thread-safety: stateless.
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
