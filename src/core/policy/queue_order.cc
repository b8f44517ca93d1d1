#include "core/policy/queue_order.h"

#include <algorithm>
#include <queue>
#include <set>
#include <tuple>

#include "core/attained.h"

namespace gantry::core {

void ArrivalOrder(const Scheduler& s, bool all, std::vector<JobId>& out) {
  out.clear();
  if (all) {
    for (const auto& key : s.pending()) out.push_back(key.id);
    return;
  }
  for (JobId id : s.arrived_since_last_pass()) {
    if (s.job(id).phase == Phase::kPending) out.push_back(id);
  }
  std::sort(out.begin(), out.end(), [&](JobId a, JobId b) {
    const JobRecord& ja = s.job(a);
    const JobRecord& jb = s.job(b);
    return Scheduler::PendingKey{ja.spec.tier, ja.submit, a} <
           Scheduler::PendingKey{jb.spec.tier, jb.submit, b};
  });
}

void QueueOrdering::Init(const Scheduler& s) {
  if (orders_.size() == s.queues().size()) return;
  orders_.assign(s.queues().size(), QueueOrder::kFairShare);
  gittins_.assign(s.queues().size(), GittinsDist{});
  ranked_.assign(s.queues().size(), {});
  for (uint32_t i = 0; i < orders_.size(); ++i) {
    orders_[i] = s.queues().Nearest(QueueId(i), &QueueSpec::order).value_or(QueueOrder::kFairShare);
    any_by_rank_ |= orders_[i] != QueueOrder::kFairShare;
  }
}

double QueueOrdering::Gittins(const Scheduler& s, QueueId q, Ticks done) {
  GittinsDist& d = gittins_[q.v];
  if (d.count != s.observed_count(q)) {
    d.count = s.observed_count(q);
    d.sorted = s.observed_runs(q);
    std::sort(d.sorted.begin(), d.sorted.end());
    d.index.clear();
  }
  auto [it, fresh] = d.index.try_emplace(done, 0.0);
  if (fresh) it->second = GittinsIndex(d.sorted, done);
  return it->second;
}

double QueueOrdering::Rank(const Scheduler& s, const JobRecord& job, Ticks now) {
  const QueueOrder order = Of(job.spec.queue);
  if (order == QueueOrder::kFairShare) return 0;
  const Ticks running =
      job.phase == Phase::kRunning || job.phase == Phase::kSignaled ? now - job.last_start : 0;
  if (order == QueueOrder::kLas) {
    const double gpus = static_cast<double>(job.min_units) / static_cast<double>(kGpuUnits);
    const double seconds = static_cast<double>(job.run_total + running) / kTicksPerSecond;
    return LasLevel(s.params().las_thresholds_gpu_s, gpus * seconds);
  }
  // Gittins: the service had, in whole quanta (a running job's rank moves in steps, and
  // the indexes memoised per queue stay few); no history yet: all alike, by arrival.
  // Service, not progress: work lost to a preemption still counts, so a job's standing
  // moves only forward and two jobs cannot take each other's GPUs back and forth for
  // ever (with progress, a job preempted before its first checkpoint would rank as if
  // new again).
  if (s.observed_count(job.spec.queue) == 0) return 0;
  const Ticks quantum = std::max<Ticks>(1, s.params().attained_quantum);
  const Ticks had = (job.run_total + running) / quantum * quantum;
  return -Gittins(s, job.spec.queue, had);
}

void QueueOrdering::RankPending(const Scheduler& s, Tier tier, QueueId q, Ticks after, Ticks now) {
  const auto& jobs = s.pending_in(tier, q);
  std::vector<std::tuple<int, double, Ticks, JobId>> order;
  for (auto it = jobs.upper_bound({after, JobId(UINT32_MAX)}); it != jobs.end(); ++it) {
    const JobRecord& job = s.job(it->second);
    order.emplace_back(job.spec.nice, Rank(s, job, now), it->first, it->second);
  }
  std::sort(order.begin(), order.end());
  std::vector<JobId>& out = ranked_[q.v];
  out.clear();
  for (const auto& entry : order) out.push_back(std::get<3>(entry));
}

void QueueOrdering::Offer(const Scheduler& s, Tier tier, Ticks after, Ticks now,
                          const std::function<void(JobId)>& consider) {
  const size_t queue_count = s.queues().size();
  using Entry = std::tuple<int, double, uint32_t>;  // (band, usage per weight, queue)
  std::priority_queue<Entry, std::vector<Entry>, std::greater<>> heap;
  // Each queue offers its jobs by arrival (cursor), or by rank (ranked_, from pos).
  std::vector<std::set<std::pair<Ticks, JobId>>::const_iterator> cursor(queue_count);
  std::vector<size_t> pos(queue_count, 0);
  auto head = [&](uint32_t q) {
    if (Listed(s, QueueId(q))) return pos[q] < ranked_[q].size() ? ranked_[q][pos[q]] : JobId();
    return cursor[q] == s.pending_in(tier, QueueId(q)).end() ? JobId() : cursor[q]->second;
  };
  auto push = [&](uint32_t q) {
    const JobId first = head(q);
    if (!first.valid()) return;
    const QueueSpec& spec = s.queues().queue(QueueId(q)).spec;
    const GpuUnits usage = s.queue_usage(QueueId(q));
    const int band = s.GuaranteedModels(first) != 0 ? 0 : 1;
    const double standing =
        (s.decayed_usage(QueueId(q)) + static_cast<double>(usage)) / std::max(spec.weight, 1e-9);
    heap.emplace(band, standing, q);
  };
  for (uint32_t q = 0; q < queue_count; ++q) {
    const auto& jobs = s.pending_in(tier, QueueId(q));
    cursor[q] = jobs.upper_bound({after, JobId(UINT32_MAX)});
    if (Listed(s, QueueId(q))) RankPending(s, tier, QueueId(q), after, now);
    push(q);
  }
  while (!heap.empty()) {
    const uint32_t q = std::get<2>(heap.top());
    heap.pop();
    const JobId id = head(q);
    // Advance before consider: a start removes the job from the set.
    if (Listed(s, QueueId(q))) {
      ++pos[q];
    } else {
      ++cursor[q];
    }
    consider(id);
    push(q);
  }
}

}  // namespace gantry::core
