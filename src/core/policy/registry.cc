// The policies a user can name with --policy.
#include "core/policy/fifo.h"
#include "core/policy/gantry.h"
#include "core/scheduler.h"

namespace gantry::core {

std::unique_ptr<Policy> MakePolicy(std::string_view name) {
  if (name == "fifo") return std::make_unique<FifoPolicy>();
  if (name == "gantry") return std::make_unique<GantryPolicy>();
  return nullptr;
}

std::vector<std::string> PolicyNames() { return {"fifo", "gantry"}; }

}  // namespace gantry::core
