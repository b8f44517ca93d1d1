// QueueTree: team queues with guarantees, burst limits and fair-share weights.
//
// Queues form a forest; a parent's limits bound its children (a child's holding counts
// toward every ancestor). Quantities are GpuUnits. Ids are dense and parents come
// before children in id order is NOT assumed; use `ancestors` for walks.
// Thread-safety: immutable after Build.
#pragma once

#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "base/result.h"
#include "core/model/types.h"

namespace gantry::core {

struct QueueSpec {
  std::string name;
  std::string parent;             // empty: a root queue
  GpuUnits guaranteed = 0;
  GpuUnits burst = -1;            // -1: no cap
  double weight = 1.0;
};

struct Queue {
  QueueSpec spec;
  QueueId parent;                 // invalid for roots
  std::vector<QueueId> children;
  std::vector<QueueId> self_and_ancestors;  // self first, then parent, ..., root
};

class QueueTree {
 public:
  // Errors (Error::field is "queues[<name>].<field>"): duplicate name, unknown parent,
  // a cycle, burst below guarantee, negative values, children's guarantees above the
  // parent's guarantee. An empty spec list yields one queue named "default".
  // Also: an empty name, a weight that is not above 0. A cycle is reported once, at its
  // first queue in spec order, with the path ("a -> b -> a", each queue's parent after it).
  static Result<QueueTree> Build(std::vector<QueueSpec> specs);
  // Every problem Build would refuse, in spec order (Build returns the first).
  // Cost: O(queues log queues).
  static std::vector<Error> Check(const std::vector<QueueSpec>& specs);

  size_t size() const { return queues_.size(); }
  const Queue& queue(QueueId id) const { return queues_[id.v]; }
  std::optional<QueueId> Find(std::string_view name) const;

 private:
  std::vector<Queue> queues_;
  std::unordered_map<std::string, QueueId> by_name_;
};

}  // namespace gantry::core
