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
#include "core/budget.h"
#include "core/model/catalog.h"
#include "core/model/types.h"

namespace gantry::core {

// A queue's guarantee on one GPU model (Kueue: a flavor's nominal quota).
struct ModelGuarantee {
  ModelId model;
  std::string name;  // the model's name, for messages
  GpuUnits units = 0;
};

// How a queue orders its own pending jobs: by arrival (fair share decides between
// queues), or by attained service (core/attained.h).
enum class QueueOrder : uint8_t { kFairShare, kLas, kGittins };
std::string_view Name(QueueOrder order);

struct QueueSpec {
  std::string name;
  std::string parent;  // empty: a root queue
  GpuUnits guaranteed = 0;
  GpuUnits burst = -1;  // -1: no cap
  double weight = 1.0;
  // Empty: the guarantee counts GPUs of any model. Else the guarantee is per model
  // (`guaranteed` is the sum): what the queue holds on a model past that model's count,
  // or on a model not listed, is borrowed. One entry per model.
  std::vector<ModelGuarantee> guaranteed_by_model;
  // Idle reclamation for this queue and the queues under it (nearest setting wins; none:
  // the policy's reclaim_idle_after_s). 0: never.
  std::optional<Ticks> reclaim_idle_after;
  // Jobs of this queue may opt out of idle reclamation (keep_when_idle: REASON).
  bool allow_keep_when_idle = false;
  // GPU-hours this queue and those under it may spend per period (core/budget.h).
  std::optional<BudgetSpec> budget;
  // For this queue and those under it (nearest setting wins; none: fair-share).
  std::optional<QueueOrder> order;
  // A job of this queue (or under it) pending this long drains (policy max_wait; 0: never).
  std::optional<Ticks> max_wait;
  // The tiers jobs of this queue and those under it may ask for: every queue on the way up
  // that sets it must list the tier (none sets it: every tier). A site keeps `critical` (never
  // preempted, it preempts others) to the teams it trusts with it, as Slurm's allowed QoS per
  // account.
  std::optional<TierMask> tiers;
};

struct Queue {
  QueueSpec spec;
  QueueId parent;  // invalid for roots
  std::vector<QueueId> children;
  std::vector<QueueId> self_and_ancestors;  // self first, then parent, ..., root
};

// GPU units as GPUs for messages: whole numbers plainly, fractions to thousandths ("8.5").
std::string GpusText(GpuUnits units);

class QueueTree {
 public:
  // Errors (Error::field is "queues[<name>].<field>"): duplicate name, unknown parent,
  // a cycle, burst below guarantee, negative values, children's guarantees above the
  // parent's guarantee. An empty spec list yields one queue named "default".
  // Also: an empty name, a weight that is not above 0, per-model guarantees that do not
  // add up to `guaranteed` or list a model twice, children's guarantees on a model above
  // the parent's on it (where both are per model). A cycle is reported once, at its
  // first queue in spec order, with the path ("a -> b -> a", each queue's parent after it).
  static Result<QueueTree> Build(std::vector<QueueSpec> specs);
  // Every problem Build would refuse, in spec order (Build returns the first).
  // Cost: O(queues log queues).
  static std::vector<Error> Check(const std::vector<QueueSpec>& specs);

  size_t size() const { return queues_.size(); }
  const Queue& queue(QueueId id) const { return queues_[id.v]; }
  // The queue's own guarantee on `model` (per-model queues only; 0 when not listed).
  static GpuUnits GuaranteeOn(const QueueSpec& q, ModelId model);
  // Why queue q's jobs may not ask for `tier` (naming the queue whose `tiers` rules it),
  // or nullopt when they may.
  std::optional<std::string> WhyTierRefused(QueueId q, Tier tier) const;
  std::optional<QueueId> Find(std::string_view name) const;
  // A per-queue setting as it applies to queue q: q's own, else the nearest ancestor's
  // (reclaim_idle_after, order, max_wait); nullopt when no queue on the way up sets it.
  template <typename T>
  std::optional<T> Nearest(QueueId q, std::optional<T> QueueSpec::*setting) const {
    for (QueueId a : queue(q).self_and_ancestors) {
      if (const std::optional<T>& v = queue(a).spec.*setting) return v;
    }
    return std::nullopt;
  }

 private:
  std::vector<Queue> queues_;
  std::unordered_map<std::string, QueueId> by_name_;
};

}  // namespace gantry::core
