#include "core/model/types.h"

namespace gantry::core {

std::string_view Name(Tier t) {
  switch (t) {
    case Tier::kCritical: return "critical";
    case Tier::kStandard: return "standard";
    case Tier::kBestEffort: return "best-effort";
  }
  return "?";
}

std::string_view Name(Sharing s) {
  switch (s) {
    case Sharing::kExclusive: return "exclusive";
    case Sharing::kMig: return "mig";
    case Sharing::kMps: return "mps";
    case Sharing::kTimeslice: return "timeslice";
  }
  return "?";
}

std::string_view Name(Topology t) {
  switch (t) {
    case Topology::kNvlink: return "nvlink";
    case Topology::kNode: return "node";
    case Topology::kLeaf: return "leaf";
    case Topology::kSpine: return "spine";
  }
  return "?";
}

}  // namespace gantry::core
