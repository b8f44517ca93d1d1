#include "core/policy/consolidator.h"

#include <algorithm>
#include <tuple>

namespace gantry::core {
namespace {

// Of the indexed jobs: still running (a preemption since the index may have signaled
// it) and of `spec`'s tier or lower.
bool Movable(const JobRecord& r, const JobSpec& spec) {
  return r.phase == Phase::kRunning && r.spec.tier >= spec.tier && !r.shielded;
}

}  // namespace

void Consolidator::Index(const Scheduler& s, Ticks now) {
  by_node_.resize(s.cluster().nodes().size());
  for (uint32_t n : nodes_) by_node_[n].clear();
  nodes_.clear();
  const PolicyParams& p = s.params();
  for (JobId id : s.running()) {
    const JobRecord& r = s.job(id);
    if (r.phase != Phase::kRunning || r.spec.tier == Tier::kCritical || r.spec.replicas != 1 ||
        r.shielded)
      continue;
    // Not within min_run_before_repreempt of its start (else a job moved for another
    // that then finds its new place taken could move that one back, and so on).
    if (now - r.last_start < p.min_run_before_repreempt) continue;
    const Ticks run = now - r.last_start;
    if ((r.spec.checkpoint > 0 ? run % r.spec.checkpoint : run) > p.consolidate_within) continue;
    const uint32_t n = r.alloc[0].node.v;
    if (by_node_[n].empty()) nodes_.push_back(n);
    by_node_[n].push_back(id);
  }
  std::sort(nodes_.begin(), nodes_.end());
  // What each node's movable jobs hold, for every job and for best-effort ones (read
  // here once, not from each job's record at every look).
  held_.assign(nodes_.size(), {});
  for (size_t i = 0; i < nodes_.size(); ++i) {
    for (JobId m : by_node_[nodes_[i]]) {
      const JobRecord& r = s.job(m);
      for (int k = 0; k < 2; ++k) {
        if (k == 1 && r.spec.tier != Tier::kBestEffort) continue;
        held_[i][k].units += r.units;
        held_[i][k].cpus_milli += r.spec.cpus_milli;
        held_[i][k].memory_bytes += r.spec.memory_bytes;
        ++held_[i][k].count;
      }
    }
  }
  indexed_ = true;
}

bool Consolidator::Find(const Scheduler& s, WhatIf& w, const JobRecord& job, Ticks now,
                        Plan& plan) {
  if (job.spec.replicas != 1 || tries_ >= kJobsPerPass) return false;
  ++tries_;
  if (!indexed_) Index(s, now);
  const Ledger& ledger = w.ledger();
  const Cluster& cluster = s.cluster();
  const JobSpec& spec = job.spec;
  // Nodes where the job could fit were their movable jobs gone (as indexed: one that a
  // preemption signaled since still counts here, TryNode leaves it), closest to fitting
  // first.
  accepts_.assign(cluster.pools().size(), 2);  // per pool: 2 = not asked yet
  const int k = spec.tier == Tier::kBestEffort ? 1 : 0;
  candidates_.clear();
  for (size_t i = 0; i < nodes_.size(); ++i) {
    const NodeId node(nodes_[i]);
    const PoolId pool = cluster.node(node).pool;
    if (accepts_[pool.v] == 2) accepts_[pool.v] = PoolAccepts(cluster, spec, pool) ? 1 : 0;
    const Held& movable = held_[i][k];
    const NodeState& state = ledger.node(node);
    if (accepts_[pool.v] == 0 || !state.up || movable.count == 0 ||
        state.free_cpus_milli + movable.cpus_milli < spec.cpus_milli ||
        state.free_memory_bytes + movable.memory_bytes < spec.memory_bytes) {
      continue;
    }
    GpuUnits free = 0;
    for (int g = 0; g < cluster.pool(pool).spec.gpus; ++g)
      free += FreeUnits(ledger.gpu(ledger.gpu_id(node, g)));
    if (free + movable.units < job.min_units) continue;
    candidates_.emplace_back(-free, movable.count, nodes_[i]);
  }
  const size_t tried = std::min<size_t>(candidates_.size(), kNodesTried);
  std::partial_sort(candidates_.begin(), candidates_.begin() + static_cast<std::ptrdiff_t>(tried),
                    candidates_.end());
  bool found = false;
  GpuUnits best_units = 0;
  Plan trial;
  for (size_t i = 0; i < tried; ++i) {
    if (!TryNode(s, w, job, NodeId(std::get<2>(candidates_[i])), trial)) continue;
    GpuUnits units = 0;
    for (JobId m : trial.moved) units += s.job(m).units;
    if (!found || std::pair(trial.moved.size(), units) < std::pair(plan.moved.size(), best_units)) {
      std::swap(plan, trial);
      best_units = units;
      found = true;
      if (plan.moved.size() == 1 && units == 0) break;  // a CPU-only job moved: none cheaper
    }
  }
  return found;
}

bool Consolidator::TryNode(const Scheduler& s, WhatIf& w, const JobRecord& job, NodeId n,
                           Plan& plan) {
  const Ledger& ledger = w.ledger();
  std::vector<JobId> movers;
  for (JobId m : by_node_[n.v]) {
    if (Movable(s.job(m), job.spec)) movers.push_back(m);
  }
  // Put back the biggest first: the small ones find room elsewhere more easily.
  std::sort(movers.begin(), movers.end(), [&](JobId a, JobId b) {
    return std::pair(s.job(b).units, a) < std::pair(s.job(a).units, b);
  });
  const WhatIf::Mark what_if = w.Checkpoint();
  for (JobId m : movers) w.Release(s.job(m).alloc);
  plan.fit.clear();
  plan.moved.clear();
  plan.to.clear();
  bool ok = w.PlaceOn(job.spec, Fit::kBest, n, plan.fit);
  for (size_t i = 0; ok && i < movers.size(); ++i) {
    const Allocation& alloc = s.job(movers[i]).alloc;
    if (ledger.Fits(alloc[0])) {
      w.Allocate(alloc);
    } else {
      plan.moved.push_back(movers[i]);
      ok = plan.moved.size() <= static_cast<size_t>(kMaxMoves);
    }
  }
  ok = ok && !plan.moved.empty();  // (it fits as things are: not this class's business)
  for (size_t i = 0; ok && i < plan.moved.size(); ++i) {
    plan.to.emplace_back();
    ok = w.Place(s.job(plan.moved[i]).spec, Fit::kBest, plan.to.back());
  }
  w.Rollback(what_if);
  return ok;
}

}  // namespace gantry::core
