#include "core/model/types.h"

namespace gantry::core {

std::string_view Name(Tier t) {
  switch (t) {
    case Tier::kCritical:
      return "critical";
    case Tier::kStandard:
      return "standard";
    case Tier::kBestEffort:
      return "best-effort";
  }
  return "?";
}

std::optional<Tier> TierNamed(std::string_view name) {
  for (int t = 0; t < kTierCount; ++t) {
    if (Name(static_cast<Tier>(t)) == name) return static_cast<Tier>(t);
  }
  return std::nullopt;
}

std::string TierList(TierMask tiers) {
  std::string out;
  for (int t = 0; t < kTierCount; ++t) {
    if (tiers & Bit(static_cast<Tier>(t)))
      out += (out.empty() ? "" : ", ") + std::string(Name(static_cast<Tier>(t)));
  }
  return out.empty() ? "none" : out;
}

std::string_view Name(Sharing s) {
  switch (s) {
    case Sharing::kExclusive:
      return "exclusive";
    case Sharing::kMig:
      return "mig";
    case Sharing::kMps:
      return "mps";
    case Sharing::kTimeslice:
      return "timeslice";
  }
  return "?";
}

std::string_view Name(Topology t) {
  switch (t) {
    case Topology::kNvlink:
      return "nvlink";
    case Topology::kNode:
      return "node";
    case Topology::kLeaf:
      return "leaf";
    case Topology::kSpine:
      return "spine";
  }
  return "?";
}

}  // namespace gantry::core
