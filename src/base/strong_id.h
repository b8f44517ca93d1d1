// StrongId<Tag>: a dense integer id that cannot be mixed up with another kind of id.
//
// Ids index vectors (jobs, nodes, GPUs, queues), so they are small and contiguous.
// Comparison orders by value, which is how every tie in the core is broken.
// Thread-safety: plain values.
#pragma once

#include <compare>
#include <cstdint>
#include <functional>
#include <limits>

namespace gantry {

template <typename Tag>
struct StrongId {
  static constexpr uint32_t kInvalid = std::numeric_limits<uint32_t>::max();
  uint32_t v = kInvalid;

  constexpr StrongId() = default;
  constexpr explicit StrongId(uint32_t value) : v(value) {}
  constexpr bool valid() const { return v != kInvalid; }
  constexpr auto operator<=>(const StrongId&) const = default;
};

}  // namespace gantry

template <typename Tag>
struct std::hash<gantry::StrongId<Tag>> {
  size_t operator()(gantry::StrongId<Tag> id) const noexcept { return std::hash<uint32_t>()(id.v); }
};
