// QueueTree::Build: checks the queue specs and links the forest (see queue.h).

#include "core/model/queue.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

namespace gantry::core {

std::string GpusText(GpuUnits units) {
  const bool negative = units < 0;
  const int64_t mag = negative ? -units : units;
  const int64_t milli = (mag * 1000 + kGpuUnits / 2) / kGpuUnits;
  std::string out = (negative ? "-" : "") + std::to_string(milli / 1000);
  if (int64_t frac = milli % 1000; frac != 0) {
    std::string digits = std::to_string(frac);
    digits.insert(0, 3 - digits.size(), '0');
    while (digits.back() == '0') digits.pop_back();
    out += "." + digits;
  }
  return out;
}

std::string_view Name(QueueOrder order) {
  switch (order) {
    case QueueOrder::kFairShare:
      return "fair-share";
    case QueueOrder::kLas:
      return "las";
    case QueueOrder::kGittins:
      return "gittins";
  }
  return "fair-share";
}

namespace {

std::string Number(double x) {
  std::string s = std::to_string(x);
  if (s.find('.') != std::string::npos) {
    while (s.back() == '0') s.pop_back();
    if (s.back() == '.') s.pop_back();
  }
  return s;
}

std::string QueuePath(const QueueSpec& q, size_t index) {
  return "queues[" + (q.name.empty() ? std::to_string(index) : q.name) + "]";
}

}  // namespace

std::vector<Error> QueueTree::Check(const std::vector<QueueSpec>& specs) {
  std::vector<Error> errors;
  std::unordered_map<std::string, size_t> index;  // name -> first spec with it
  std::vector<bool> duplicate(specs.size(), false);
  for (size_t i = 0; i < specs.size(); ++i) {
    const QueueSpec& q = specs[i];
    const std::string path = QueuePath(q, i);
    auto add = [&](const char* field, std::string message) {
      errors.push_back(Error{path + "." + field, std::move(message)});
    };
    if (q.name.empty()) {
      add("name", "must not be empty");
    } else if (!index.emplace(q.name, i).second) {
      duplicate[i] = true;
      add("name", "duplicate queue name \"" + q.name + "\"");
    }
    if (q.guaranteed < 0)
      add("guaranteed_gpus", "must be at least 0, got " + GpusText(q.guaranteed));
    if (q.burst < -1) {
      add("burst_gpus", "must be at least 0, got " + GpusText(q.burst));
    } else if (q.burst >= 0 && q.burst < q.guaranteed) {
      add("burst_gpus", GpusText(q.burst) + " is below guaranteed_gpus " + GpusText(q.guaranteed));
    }
    if (!(q.weight > 0) || !std::isfinite(q.weight)) {
      add("weight", "must be above 0, got " + Number(q.weight));
    }
    if (!q.guaranteed_by_model.empty()) {
      GpuUnits sum = 0;
      for (size_t k = 0; k < q.guaranteed_by_model.size(); ++k) {
        const ModelGuarantee& g = q.guaranteed_by_model[k];
        const std::string field = "guaranteed_gpus_by_model." + g.name;
        if (g.units < 0) add(field.c_str(), "must be at least 0, got " + GpusText(g.units));
        for (size_t j = 0; j < k; ++j) {
          if (q.guaranteed_by_model[j].model == g.model) add(field.c_str(), "listed twice");
        }
        sum += std::max<GpuUnits>(g.units, 0);
      }
      if (sum != q.guaranteed) {
        add("guaranteed_gpus", GpusText(q.guaranteed) +
                                   " is not the sum of guaranteed_gpus_by_model, " + GpusText(sum));
      }
    }
  }
  // Parents: unknown names first, then cycles along the known links.
  const size_t n = specs.size();
  constexpr size_t kNone = SIZE_MAX;
  std::vector<size_t> parent(n, kNone);
  for (size_t i = 0; i < n; ++i) {
    if (specs[i].parent.empty() || duplicate[i] || specs[i].name.empty()) continue;
    auto it = index.find(specs[i].parent);
    if (it == index.end()) {
      errors.push_back(Error{QueuePath(specs[i], i) + ".parent",
                             "unknown parent queue \"" + specs[i].parent + "\""});
    } else {
      parent[i] = it->second;
    }
  }
  // 0 = unvisited, 1 = on the current walk, 2 = known to reach a root (or a reported cycle).
  std::vector<uint8_t> state(n, 0);
  std::vector<size_t> walk;
  std::vector<bool> in_cycle(n, false);
  for (size_t start = 0; start < n; ++start) {
    walk.clear();
    size_t at = start;
    while (at != kNone && state[at] == 0) {
      state[at] = 1;
      walk.push_back(at);
      at = parent[at];
    }
    if (at != kNone && state[at] == 1) {
      // The walk closed on itself: the cycle is the tail of the walk from `at`.
      auto from = std::find(walk.begin(), walk.end(), at);
      std::vector<size_t> cycle(from, walk.end());
      for (size_t q : cycle) in_cycle[q] = true;
      std::rotate(cycle.begin(), std::min_element(cycle.begin(), cycle.end()), cycle.end());
      std::string text;
      for (size_t q : cycle) text += specs[q].name + " -> ";
      text += specs[cycle.front()].name;
      errors.push_back(Error{QueuePath(specs[cycle.front()], cycle.front()) + ".parent",
                             "queue parents form a cycle: " + text});
    }
    for (size_t q : walk) state[q] = 2;
  }
  // Children's guarantees must fit in their parent's (the parent's guarantee is what
  // backs theirs). Summed in spec order so the message lists children deterministically.
  // Queues in a cycle are skipped: the cycle is the problem to fix first.
  std::vector<GpuUnits> child_sum(n, 0);
  std::vector<std::vector<size_t>> children(n);
  for (size_t i = 0; i < n; ++i) {
    if (parent[i] == kNone || in_cycle[i] || in_cycle[parent[i]]) continue;
    child_sum[parent[i]] += std::max<GpuUnits>(specs[i].guaranteed, 0);
    children[parent[i]].push_back(i);
  }
  for (size_t p = 0; p < n; ++p) {
    if (children[p].empty() || child_sum[p] <= specs[p].guaranteed) continue;
    std::string parts;
    for (size_t c : children[p]) {
      if (!parts.empty()) parts += ", ";
      parts += specs[c].name + " " + GpusText(specs[c].guaranteed);
    }
    errors.push_back(Error{QueuePath(specs[p], p) + ".guaranteed_gpus",
                           "children's guarantees add up to " + GpusText(child_sum[p]) + " (" +
                               parts + "), above this queue's " + GpusText(specs[p].guaranteed)});
  }
  // The same per model, where the parent's guarantee is per model: a child's guarantee
  // on a model is backed only by the parent's on that model. (A child counting any model
  // under such a parent is bounded by the totals above.)
  for (size_t p = 0; p < n; ++p) {
    if (children[p].empty() || specs[p].guaranteed_by_model.empty()) continue;
    std::vector<const ModelGuarantee*> models;  // every model a child lists, first seen first
    for (size_t c : children[p]) {
      for (const ModelGuarantee& g : specs[c].guaranteed_by_model) {
        if (std::none_of(models.begin(), models.end(),
                         [&](const ModelGuarantee* m) { return m->model == g.model; })) {
          models.push_back(&g);
        }
      }
    }
    for (const ModelGuarantee* m : models) {
      GpuUnits sum = 0;
      std::string parts;
      for (size_t c : children[p]) {
        const GpuUnits units = GuaranteeOn(specs[c], m->model);
        if (units == 0) continue;  // none listed (or a queue counting any model)
        sum += std::max<GpuUnits>(units, 0);
        parts += (parts.empty() ? "" : ", ") + specs[c].name + " " + GpusText(units);
      }
      const GpuUnits own = GuaranteeOn(specs[p], m->model);
      if (sum <= own) continue;
      errors.push_back(Error{QueuePath(specs[p], p) + ".guaranteed_gpus_by_model." + m->name,
                             "children's guarantees on " + m->name + " add up to " + GpusText(sum) +
                                 " (" + parts + "), above this queue's " + GpusText(own)});
    }
  }
  return errors;
}

std::optional<std::string> QueueTree::WhyTierRefused(QueueId q, Tier tier) const {
  for (QueueId a : queue(q).self_and_ancestors) {
    const QueueSpec& s = queue(a).spec;
    if (s.tiers && !(*s.tiers & Bit(tier))) {
      return "asks for tier " + std::string(Name(tier)) + ", which queue " + s.name +
             " may not use (its tiers: " + TierList(*s.tiers) + ")";
    }
  }
  return std::nullopt;
}

GpuUnits QueueTree::GuaranteeOn(const QueueSpec& q, ModelId model) {
  for (const ModelGuarantee& g : q.guaranteed_by_model) {
    if (g.model == model) return g.units;
  }
  return 0;
}

Result<QueueTree> QueueTree::Build(std::vector<QueueSpec> specs) {
  if (specs.empty()) {
    QueueSpec d;
    d.name = "default";
    specs.push_back(std::move(d));
  }
  if (std::vector<Error> errors = Check(specs); !errors.empty()) return std::move(errors.front());
  QueueTree tree;
  tree.queues_.reserve(specs.size());
  for (size_t i = 0; i < specs.size(); ++i) {
    tree.by_name_.emplace(specs[i].name, QueueId(static_cast<uint32_t>(i)));
    tree.queues_.push_back(Queue{std::move(specs[i]), QueueId(), {}, {}});
  }
  for (size_t i = 0; i < tree.queues_.size(); ++i) {
    Queue& q = tree.queues_[i];
    if (q.spec.parent.empty()) continue;
    q.parent = tree.by_name_.find(q.spec.parent)->second;  // Check() found every parent
    tree.queues_[q.parent.v].children.push_back(QueueId(static_cast<uint32_t>(i)));
  }
  for (size_t i = 0; i < tree.queues_.size(); ++i) {
    std::vector<QueueId>& chain = tree.queues_[i].self_and_ancestors;
    for (QueueId at(static_cast<uint32_t>(i)); at.valid(); at = tree.queues_[at.v].parent) {
      chain.push_back(at);
    }
  }
  return tree;
}

std::optional<QueueId> QueueTree::Find(std::string_view name) const {
  auto it = by_name_.find(std::string(name));
  if (it == by_name_.end()) return std::nullopt;
  return it->second;
}

}  // namespace gantry::core
