#include "core/scheduler.h"

#include <algorithm>
#include <cassert>

#include "core/model/feasibility.h"

namespace gantry::core {

namespace {
std::string Gpus(GpuUnits units) {
  if (units % kGpuUnits == 0) return std::to_string(units / kGpuUnits);
  std::string s = std::to_string(static_cast<double>(units) / kGpuUnits);
  s.erase(s.find_last_not_of('0') + 1);
  return s;
}

std::string Clock(int minutes) {
  std::string h = std::to_string(minutes / 60), m = std::to_string(minutes % 60);
  return (h.size() < 2 ? "0" + h : h) + ":" + (m.size() < 2 ? "0" + m : m);
}
}  // namespace

Scheduler::Scheduler(const Cluster& cluster, const QueueTree& queues,
                     std::unique_ptr<Policy> policy)
    : cluster_(cluster),
      queues_(queues),
      policy_(std::move(policy)),
      ledger_(cluster),
      placer_(ledger_),
      queue_usage_(queues.size(), 0) {}

Scheduler::Shape Scheduler::ShapeOf(const JobSpec& s) {
  return Shape{s.sharing,     s.tier == Tier::kCritical, s.topology,     s.replicas,
               s.gpus,        s.share_milli,             s.models,       s.vram_bytes,
               s.cpus_milli,  s.memory_bytes,            s.mig_profile};
}

GpuUnits Scheduler::MinUnits(const JobSpec& spec) const {
  if (spec.sharing != Sharing::kMig) return spec.WorkerUnits(cluster_.catalog(), ModelId()) * spec.replicas;
  GpuUnits best = kForever;
  for (size_t m = 0; m < cluster_.catalog().size(); ++m) {
    if (spec.mig_index[m] < 0 || !(spec.models >> m & 1u)) continue;
    best = std::min(best, spec.WorkerUnits(cluster_.catalog(), ModelId(static_cast<uint32_t>(m))));
  }
  return best == kForever ? 0 : best * spec.replicas;
}

JobId Scheduler::Submit(JobSpec spec, Ticks now) {
  JobId id(static_cast<uint32_t>(jobs_.size()));
  JobRecord& rec = jobs_.emplace_back();
  rec.spec = std::move(spec);
  rec.submit = now;
  std::optional<std::string> why = WhyInfeasible(rec.spec, cluster_);
  if (!why) {
    const GpuUnits need = MinUnits(rec.spec);
    for (QueueId q : queues_.queue(rec.spec.queue).self_and_ancestors) {
      const QueueSpec& qs = queues_.queue(q).spec;
      if (qs.burst >= 0 && need > qs.burst) {
        why = "needs " + Gpus(need) + " GPUs, above the burst_gpus " + Gpus(qs.burst) +
              " of queue " + qs.name;
        break;
      }
    }
  }
  if (why) {
    rec.phase = Phase::kDone;
    rejects_.emplace_back(id, std::move(*why));
    return id;
  }
  pending_.insert(PendingKey{rec.spec.tier, now, id});
  arrived_.push_back(id);
  return id;
}

void Scheduler::AddUsage(QueueId q, GpuUnits units) {
  for (QueueId a : queues_.queue(q).self_and_ancestors) queue_usage_[a.v] += units;
}

std::optional<QueueId> Scheduler::BurstBlocker(QueueId q, GpuUnits units) const {
  for (QueueId a : queues_.queue(q).self_and_ancestors) {
    const GpuUnits burst = queues_.queue(a).spec.burst;
    if (burst >= 0 && queue_usage_[a.v] + units > burst) return a;
  }
  return std::nullopt;
}

void Scheduler::Release(JobRecord& job) {
  for (auto it = job.alloc.rbegin(); it != job.alloc.rend(); ++it) ledger_.Release(*it);
  job.alloc.clear();
  AddUsage(job.spec.queue, -job.units);
  job.units = 0;
  freed_since_pass_ = true;
}

void Scheduler::Finish(JobId id, Ticks /*now*/) {
  JobRecord& job = jobs_[id.v];
  if (job.phase == Phase::kPending) pending_.erase(PendingKey{job.spec.tier, job.submit, id});
  if (job.phase == Phase::kRunning || job.phase == Phase::kSignaled) Release(job);
  job.phase = Phase::kDone;
}

void Scheduler::Requeue(JobId id, Ticks now) {
  JobRecord& job = jobs_[id.v];
  assert(job.phase == Phase::kRunning || job.phase == Phase::kSignaled);
  Release(job);
  job.phase = Phase::kPending;
  job.signaled_at = -1;
  job.preempted_by = JobId();
  job.wait_reason.clear();
  // A requeued job keeps its place in line: it is ordered by its original submit.
  pending_.insert(PendingKey{job.spec.tier, job.submit, id});
  (void)now;
}

std::vector<JobId> Scheduler::SetNodeUp(NodeId node, bool up) {
  std::vector<JobId> hit;
  ledger_.SetUp(node, up);
  if (up) {
    freed_since_pass_ = true;
    return hit;
  }
  for (size_t i = 0; i < jobs_.size(); ++i) {
    const JobRecord& job = jobs_[i];
    if (job.phase != Phase::kRunning && job.phase != Phase::kSignaled) continue;
    for (const WorkerAlloc& w : job.alloc) {
      if (w.node == node) {
        hit.push_back(JobId(static_cast<uint32_t>(i)));
        break;
      }
    }
  }
  return hit;
}

void Scheduler::Wait(JobId id, std::string reason) {
  JobRecord& job = jobs_[id.v];
  if (job.wait_reason == reason) return;
  job.wait_reason = reason;
  decisions_.push_back(Decision{Decision::Kind::kWait, id, JobId(), std::move(reason)});
}

bool Scheduler::TryStart(JobId id, Ticks now, Fit fit) {
  JobRecord& job = jobs_[id.v];
  const JobSpec& spec = job.spec;
  if (spec.window && !spec.window->Contains(now)) {
    pass_wakeup_ = std::min(pass_wakeup_, spec.window->NextOpen(now));
    Wait(id, "window: may start only between " + Clock(spec.window->start_min) + " and " +
                 Clock(spec.window->end_min) + " UTC");
    return false;
  }
  if (auto blocker = BurstBlocker(spec.queue, MinUnits(spec))) {
    const QueueSpec& q = queues_.queue(*blocker).spec;
    Wait(id, "quota: queue " + q.name + " holds " + Gpus(queue_usage_[blocker->v]) +
                 " of its burst_gpus " + Gpus(q.burst));
    return false;
  }
  const Shape shape = ShapeOf(spec);
  if (auto it = failed_shapes_.find(shape); it != failed_shapes_.end()) {
    Wait(id, it->second);
    return false;
  }
  if (!placer_.Place(spec, fit, scratch_)) {
    std::string why = "capacity: no room now for " + Placer::Describe(spec, cluster_.catalog());
    failed_shapes_.emplace(shape, why);
    Wait(id, std::move(why));
    return false;
  }
  GpuUnits units = 0;
  for (const WorkerAlloc& w : scratch_) {
    units += spec.WorkerUnits(cluster_.catalog(), cluster_.node(w.node).model);
  }
  if (auto blocker = BurstBlocker(spec.queue, units)) {  // MIG sizes differ by model
    for (auto it = scratch_.rbegin(); it != scratch_.rend(); ++it) ledger_.Release(*it);
    const QueueSpec& q = queues_.queue(*blocker).spec;
    Wait(id, "quota: queue " + q.name + " holds " + Gpus(queue_usage_[blocker->v]) +
                 " of its burst_gpus " + Gpus(q.burst));
    return false;
  }
  pending_.erase(PendingKey{spec.tier, job.submit, id});
  job.alloc.swap(scratch_);
  scratch_.clear();
  job.units = units;
  AddUsage(spec.queue, units);
  job.phase = Phase::kRunning;
  job.last_start = now;
  if (job.first_start < 0) job.first_start = now;
  job.wait_reason.clear();
  decisions_.push_back(Decision{Decision::Kind::kStart, id, JobId(), {}});
  return true;
}

void Scheduler::Preempt(JobId victim, JobId by, std::string reason, Ticks now) {
  JobRecord& job = jobs_[victim.v];
  assert(job.phase == Phase::kRunning && job.spec.tier != Tier::kCritical);
  job.phase = Phase::kSignaled;
  job.signaled_at = now;
  job.preempted_by = by;
  decisions_.push_back(Decision{Decision::Kind::kPreempt, victim, by, std::move(reason)});
}

const std::vector<Decision>& Scheduler::Schedule(Ticks now) {
  decisions_.clear();
  for (auto& [id, why] : rejects_) {
    decisions_.push_back(Decision{Decision::Kind::kReject, id, JobId(), std::move(why)});
  }
  rejects_.clear();
  // Without a release, a node coming up or a window opening, capacity only shrank since
  // the last pass, so jobs that waited then still wait: try only the new arrivals.
  const bool full = freed_since_pass_ || now >= next_wakeup_;
  if (full) next_wakeup_ = kForever;
  pass_wakeup_ = kForever;
  failed_shapes_.clear();
  policy_->Schedule(*this, now, full);
  next_wakeup_ = std::min(next_wakeup_, pass_wakeup_);
  freed_since_pass_ = false;
  arrived_.clear();
  return decisions_;
}

}  // namespace gantry::core
