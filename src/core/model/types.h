// Small shared vocabulary of the core: time, GPU share units, ids, enums.
//
// Time is integer milliseconds (`Ticks`); the simulator and the server hand the core
// `now`. GPU quantities that may be fractional (quotas, usage) are integer units of
// 1/kGpuUnits GPU: 7000 divides evenly by MIG's 7 compute slices and by MPS's 1/1000
// shares, so no decision ever compares floats.
// Thread-safety: plain values.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "base/strong_id.h"

namespace gantry::core {

using Ticks = int64_t;  // milliseconds
inline constexpr Ticks kTicksPerSecond = 1000;
inline constexpr Ticks kTicksPerDay = 86'400 * kTicksPerSecond;
inline constexpr Ticks kForever = INT64_MAX / 4;

using GpuUnits = int64_t;  // 1/kGpuUnits of a GPU
inline constexpr GpuUnits kGpuUnits = 7000;
inline constexpr int kShareScale = 1000;  // fractional shares are in thousandths
inline constexpr GpuUnits kUnitsPerShareMilli = kGpuUnits / kShareScale;  // 7
inline constexpr GpuUnits kUnitsPerMigSlice = kGpuUnits / 7;              // 1000
// GPU units x ticks in one GPU-hour: what usage sums divide by for GPU-hours.
inline constexpr double kUnitTicksPerGpuHour = double{kGpuUnits} * kTicksPerSecond * 3600;

using NodeId = StrongId<struct NodeTag>;
using GpuId = StrongId<struct GpuTag>;
using PoolId = StrongId<struct PoolTag>;
using LeafId = StrongId<struct LeafTag>;
using QueueId = StrongId<struct QueueTag>;
using JobId = StrongId<struct JobTag>;

enum class Tier : uint8_t { kCritical = 0, kStandard = 1, kBestEffort = 2 };
inline constexpr int kTierCount = 3;
using TierMask = uint8_t;  // bit (1 << Tier) set: that tier included
inline constexpr TierMask Bit(Tier t) { return TierMask(1u << static_cast<int>(t)); }
inline constexpr TierMask kAllTiers = 0b111;

// How a worker uses its GPUs. Exclusive covers whole GPUs and CPU-only workers.
enum class Sharing : uint8_t { kExclusive = 0, kMig = 1, kMps = 2, kTimeslice = 3 };
using SharingMask = uint8_t;  // bit (1 << Sharing) set: mode allowed on a pool
inline constexpr SharingMask Bit(Sharing s) { return SharingMask(1u << static_cast<int>(s)); }

// The smallest domain that must hold a whole job.
enum class Topology : uint8_t { kNvlink = 0, kNode = 1, kLeaf = 2, kSpine = 3 };

std::string_view Name(Tier t);
std::optional<Tier> TierNamed(std::string_view name);  // "critical", "standard", "best-effort"
// "critical, standard" (in tier order), "none" for an empty mask.
std::string TierList(TierMask tiers);
std::string_view Name(Sharing s);
std::string_view Name(Topology t);

}  // namespace gantry::core
