#include "core/attained.h"

#include <algorithm>

namespace gantry::core {

double GittinsIndex(std::span<const Ticks> sorted, Ticks attained) {
  const auto first = std::upper_bound(sorted.begin(), sorted.end(), attained);
  const auto m = static_cast<double>(sorted.end() - first);
  double best = 0, done = 0, work = 0;  // samples up to x, and their service past `attained`
  for (auto it = first; it != sorted.end(); ++it) {
    const auto d = static_cast<double>(*it - attained);
    done += 1;
    work += d;
    // P(S <= a+d | S > a) = done/m; E[min(S-a, d) | S > a] = (work + (m-done) d) / m.
    best = std::max(best, done / (work + (m - done) * d));
  }
  return best;
}

int LasLevel(std::span<const double> thresholds_gpu_s, double gpu_seconds) {
  return static_cast<int>(
      std::upper_bound(thresholds_gpu_s.begin(), thresholds_gpu_s.end(), gpu_seconds) -
      thresholds_gpu_s.begin());
}

}  // namespace gantry::core
