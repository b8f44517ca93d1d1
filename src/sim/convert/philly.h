// Philly (Microsoft, 2017) job list as shipped in the Sia artifact (philly.csv.gz):
// `timestamp,duration,num_gpus,gpu_time,cluster`. One queue per virtual cluster (VC),
// a cluster of 8-GPU V100 nodes sized from --nodes or the trace's peak; see
// docs/traces.md "philly".
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "sim/convert/convert.h"

namespace gantry::convert {

// "YYYY-MM-DD HH:MM:SS" (or "YYYY-MM-DDTHH:MM:SS"), taken as UTC -> seconds since
// 1970-01-01. Empty on anything else.
std::optional<int64_t> ParseTimestamp(std::string_view s);

// The Monday 00:00 UTC on or before `t` (seconds since the epoch): simulated time 0.
int64_t MondayOnOrBefore(int64_t t);

}  // namespace gantry::convert
