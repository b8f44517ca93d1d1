#include "server/store.h"

namespace gantry::server {

Status CheckLeaseArgs(const std::string& holder, int64_t ttl_ms) {
  if (holder.empty()) return Error{"holder", "must not be empty"};
  if (ttl_ms <= 0) return Error{"ttl_ms", "must be positive, got " + std::to_string(ttl_ms)};
  return Ok{};
}

Error DeposedError(const std::optional<LeaseInfo>& current, int64_t epoch) {
  if (!current) {
    return Error{"lease", "deposed: the database has no lease, and this store had epoch " +
                              std::to_string(epoch)};
  }
  return Error{"lease", "deposed: the lease is at epoch " + std::to_string(current->epoch) +
                            ", held by " + current->holder + "; this store had epoch " +
                            std::to_string(epoch)};
}

}  // namespace gantry::server
