// Pools as bits of a mask, for the gantry policy's pieces.
#pragma once

#include <algorithm>
#include <cstdint>

#include "core/scheduler.h"

namespace gantry::core {

// Pools beyond the 63rd share the last bit (a superset test).
inline uint64_t PoolBit(PoolId p) { return uint64_t{1} << std::min<uint32_t>(p.v, 63); }

// The pools a worker of `spec` may use, as PoolBits.
inline uint64_t AcceptedPools(const Scheduler& s, const JobSpec& spec) {
  uint64_t pools = 0;
  for (uint32_t p = 0; p < s.cluster().pools().size(); ++p) {
    if (s.placer().PoolAccepts(spec, PoolId(p))) pools |= PoolBit(PoolId(p));
  }
  return pools;
}

}  // namespace gantry::core
