#include "core/policy/consolidator.h"

#include <algorithm>
#include <tuple>

namespace gantry::core {
namespace {

// Of the indexed jobs: still running (a preemption since the index may have signaled
// it) and of `spec`'s tier or lower.
bool Movable(const JobRecord& r, const JobSpec& spec) {
  return r.phase == Phase::kRunning && r.spec.tier >= spec.tier;
}

}  // namespace


void Consolidator::Index(const Scheduler& s, Ticks now) {
  by_node_.resize(s.cluster().nodes().size());
  for (uint32_t n : nodes_) by_node_[n].clear();
  nodes_.clear();
  const PolicyParams& p = s.params();
  for (JobId id : s.running()) {
    const JobRecord& r = s.job(id);
    if (r.phase != Phase::kRunning || r.spec.tier == Tier::kCritical || r.alloc.size() != 1) continue;
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
  indexed_ = true;
}

bool Consolidator::Find(Scheduler& s, const JobRecord& job, Ticks now, Plan& plan) {
  if (job.spec.replicas != 1 || tries_ >= kJobsPerPass) return false;
  ++tries_;
  if (!indexed_) Index(s, now);
  const Ledger& ledger = s.ledger();
  const Cluster& cluster = s.cluster();
  const JobSpec& spec = job.spec;
  // Nodes where the job could fit were their movable jobs gone, closest to fitting first.
  std::vector<std::tuple<GpuUnits, size_t, uint32_t>> candidates;
  for (uint32_t n : nodes_) {
    const NodeId node(n);
    const PoolId pool = cluster.node(node).pool;
    if (!ledger.node(node).up || !PoolAccepts(cluster, spec, pool)) continue;
    GpuUnits free = 0;
    for (int g = 0; g < cluster.pool(pool).spec.gpus; ++g) free += FreeUnits(ledger.gpu(ledger.gpu_id(node, g)));
    GpuUnits units = free;
    int64_t cpus = ledger.node(node).free_cpus_milli, memory = ledger.node(node).free_memory_bytes;
    size_t movable = 0;
    for (JobId m : by_node_[n]) {
      const JobRecord& r = s.job(m);
      if (!Movable(r, spec)) continue;
      units += r.units;
      cpus += r.spec.cpus_milli;
      memory += r.spec.memory_bytes;
      ++movable;
    }
    if (movable == 0 || units < job.min_units || cpus < spec.cpus_milli || memory < spec.memory_bytes) continue;
    candidates.emplace_back(-free, movable, n);
  }
  const size_t tried = std::min<size_t>(candidates.size(), kNodesTried);
  std::partial_sort(candidates.begin(), candidates.begin() + static_cast<std::ptrdiff_t>(tried), candidates.end());
  bool found = false;
  GpuUnits best_units = 0;
  Plan trial;
  for (size_t i = 0; i < tried; ++i) {
    if (!TryNode(s, job, NodeId(std::get<2>(candidates[i])), trial)) continue;
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

bool Consolidator::TryNode(Scheduler& s, const JobRecord& job, NodeId n, Plan& plan) {
  Ledger& ledger = s.mutable_ledger();
  std::vector<JobId> movers;
  for (JobId m : by_node_[n.v]) {
    if (Movable(s.job(m), job.spec)) movers.push_back(m);
  }
  // Put back the biggest first: the small ones find room elsewhere more easily.
  std::sort(movers.begin(), movers.end(), [&](JobId a, JobId b) {
    return std::pair(s.job(b).units, a) < std::pair(s.job(a).units, b);
  });
  const Ledger::Mark what_if = ledger.Checkpoint();
  for (JobId m : movers) ledger.Release(s.job(m).alloc);
  plan.fit.clear();
  plan.moved.clear();
  plan.to.clear();
  bool ok = s.placer().PlaceOn(job.spec, Fit::kBest, n, plan.fit);
  for (size_t i = 0; ok && i < movers.size(); ++i) {
    const Allocation& alloc = s.job(movers[i]).alloc;
    if (ledger.Fits(alloc[0])) {
      ledger.Allocate(alloc);
    } else {
      plan.moved.push_back(movers[i]);
      ok = plan.moved.size() <= static_cast<size_t>(kMaxMoves);
    }
  }
  ok = ok && !plan.moved.empty();  // (it fits as things are: not this class's business)
  for (size_t i = 0; ok && i < plan.moved.size(); ++i) {
    plan.to.emplace_back();
    ok = s.placer().Place(s.job(plan.moved[i]).spec, Fit::kBest, plan.to.back());
  }
  ledger.Rollback(what_if);
  return ok;
}

}  // namespace gantry::core
