// The wall clock, for what outlives a process or leaves it: stored times, lease ages,
// answers to clients. (The scheduling core reads no clock; its callers give it time.)
// Thread-safety: pure functions of the system clock.
#pragma once

#include <chrono>
#include <cstdint>

namespace gantry {

// Milliseconds since the Unix epoch.
inline int64_t WallMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// Seconds since the Unix epoch, to the millisecond.
inline double WallSeconds() { return static_cast<double>(WallMs()) / 1000.0; }

}  // namespace gantry
