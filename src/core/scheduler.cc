#include "core/scheduler.h"

#include <algorithm>
#include <bit>
#include <cassert>
#include <charconv>
#include <cmath>
#include <utility>

#include "core/invariants.h"
#include "core/model/feasibility.h"

namespace gantry::core {

namespace {
std::string Gpus(GpuUnits units) {
  if (units % kGpuUnits == 0) return std::to_string(units / kGpuUnits);
  std::string s = std::to_string(static_cast<double>(units) / kGpuUnits);
  s.erase(s.find_last_not_of('0') + 1);
  return s;
}

// A figure for people: up to 6 significant digits, no trailing zeros.
std::string Number(double v) {
  char buf[32];
  const auto r = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::general, 6);
  return std::string(buf, r.ptr);
}

std::string Clock(int minutes) {
  std::string h = std::to_string(minutes / 60), m = std::to_string(minutes % 60);
  return (h.size() < 2 ? "0" + h : h) + ":" + (m.size() < 2 ? "0" + m : m);
}
}  // namespace

Ticks ReclaimIdleAfter(const JobSpec& spec, const QueueTree& queues, const PolicyParams& params) {
  if (!spec.keep_when_idle.empty()) return 0;
  if (spec.tier == Tier::kCritical && !params.reclaim_critical) return 0;
  if (spec.queue.valid()) {
    if (auto after = queues.Nearest(spec.queue, &QueueSpec::reclaim_idle_after)) return *after;
  }
  if (const auto& by_tier = params.reclaim_idle_after_by_tier[static_cast<size_t>(spec.tier)])
    return *by_tier;
  return params.reclaim_idle_after;
}

Ticks MaxWaitFor(QueueId q, const QueueTree& queues, const PolicyParams& params) {
  return queues.Nearest(q, &QueueSpec::max_wait).value_or(params.max_wait);
}

Scheduler::Scheduler(const Cluster& cluster, const QueueTree& queues,
                     std::unique_ptr<Policy> policy, PolicyParams params)
    : cluster_(cluster),
      queues_(queues),
      policy_(std::move(policy)),
      params_(params),
      ledger_(cluster),
      frag_(ledger_, params.fragmentation_by_gpus),
      placer_(ledger_, &frag_),
      queue_usage_(queues.size(), 0),
      pending_by_queue_(kTierCount * queues.size()),
      decayed_(queues.size(), 0.0),
      history_(queues.size()),
      history_next_(queues.size(), 0),
      history_sum_(queues.size(), 0),
      observed_(queues.size()),
      observed_count_(queues.size(), 0) {
  models_ = cluster.catalog().size();
  for (size_t q = 0; q < queues.size(); ++q) {
    if (queues.queue(QueueId(static_cast<uint32_t>(q))).spec.budget)
      budgeted_.push_back(QueueId(static_cast<uint32_t>(q)));
  }
  if (!budgeted_.empty()) budgets_.resize(queues.size());
  for (size_t q = 0; q < queues.size(); ++q) {
    if (!queues.queue(QueueId(static_cast<uint32_t>(q))).spec.guaranteed_by_model.empty()) {
      model_usage_.assign(queues.size() * models_, 0);
      break;
    }
  }
}

Scheduler::Shape Scheduler::ShapeOf(const JobSpec& s) {
  return Shape{s.sharing,
               s.tier == Tier::kCritical,
               s.topology,
               s.replicas,
               s.min_replicas,
               s.gpus,
               s.share_milli,
               s.models,
               0,
               s.vram_bytes,
               s.cpus_milli,
               s.memory_bytes,
               s.mig_profile,
               s.pool,
               s.pools};
}

Scheduler::Shape Scheduler::FitClassOf(const JobSpec& s, const Catalog& catalog) {
  Shape shape = ShapeOf(s);
  if (s.sharing == Sharing::kMps || s.sharing == Sharing::kTimeslice) return shape;
  for (size_t m = 0; m < catalog.size(); ++m) {  // as Placer::PoolAccepts reads the VRAM
    const GpuModel& model = catalog.model(ModelId(static_cast<uint32_t>(m)));
    int64_t memory = model.memory_bytes;
    if (s.sharing == Sharing::kMig) {
      const int idx = m < s.mig_index.size() ? s.mig_index[m] : -1;
      memory = idx >= 0 ? model.mig_profiles[static_cast<size_t>(idx)].memory_bytes : -1;
    }
    if (memory >= s.vram_bytes) shape.vram_fits |= ModelMask{1} << m;
  }
  shape.vram_bytes = 0;
  return shape;
}

void Scheduler::AddPending(JobId id) {
  const JobRecord& job = Rec(id);
  pending_.insert(PendingKey{job.spec.tier, job.submit, id});
  pending_by_queue_[static_cast<size_t>(job.spec.tier) * queues_.size() + job.spec.queue.v].emplace(
      job.submit, id);
}

void Scheduler::RemovePending(JobId id) {
  const JobRecord& job = Rec(id);
  pending_.erase(PendingKey{job.spec.tier, job.submit, id});
  pending_by_queue_[static_cast<size_t>(job.spec.tier) * queues_.size() + job.spec.queue.v].erase(
      {job.submit, id});
}

void Scheduler::DecayUsage(Ticks now) {
  if (now <= decayed_at_) return;
  // Exponentially weighted average of each queue's usage with the configured half-life:
  // a queue's past consumption fades, so fair share forgives old usage (Slurm's decay).
  // (In place: it runs at every start and end.)
  DecayTo(decayed_, now);
  decayed_at_ = now;
}

void Scheduler::DecayTo(std::vector<double>& usage, Ticks now) const {
  const double keep =
      std::exp2(-static_cast<double>(now - decayed_at_) /
                static_cast<double>(std::max<Ticks>(1, params_.fairshare_half_life)));
  for (size_t q = 0; q < usage.size(); ++q)
    usage[q] = usage[q] * keep + static_cast<double>(queue_usage_[q]) * (1.0 - keep);
}

std::vector<double> Scheduler::DecayedUsageAt(Ticks now) const {
  std::vector<double> out = decayed_;
  if (now > decayed_at_) DecayTo(out, now);
  return out;
}

void Scheduler::SeedDecayedUsage(std::vector<double> decayed, Ticks at) {
  decayed.resize(decayed_.size(), 0.0);
  decayed_ = std::move(decayed);
  decayed_at_ = at;
}

double RunSpeed(const JobSpec& spec, const Allocation& alloc, const Cluster& cluster) {
  if (!spec.model_speed || alloc.empty()) return 1.0;
  double slowest = spec.ModelSpeed(cluster.node(alloc.front().node).model);
  for (const WorkerAlloc& w : alloc)
    slowest = std::min(slowest, spec.ModelSpeed(cluster.node(w.node).model));
  return slowest;
}

Ticks Scheduler::Estimate(JobId id) const {
  const JobRecord& job = Rec(id);
  if (job.spec.runtime_estimate) return *job.spec.runtime_estimate;
  const auto& h = history_[job.spec.queue.v];
  if (h.empty()) return params_.default_runtime_estimate;
  return history_sum_[job.spec.queue.v] / static_cast<Ticks>(h.size());
}

Ticks Scheduler::ExpectedEnd(JobId id) const {
  const JobRecord& job = Rec(id);
  if (job.phase == Phase::kSignaled) return job.signaled_at + job.spec.grace;
  const auto size = static_cast<Ticks>(job.alloc.size());
  const double speed = RunSpeed(job.spec, job.alloc, cluster_);    // on its models
  if (job.spec.elastic() && size > 0 && size < job.spec.replicas)  // slower below its size
    return job.last_start +
           JobSpec::AtSpeed(
               job.spec.TimeFor(Remaining(id) * job.spec.replicas, static_cast<int>(size)), speed);
  return job.last_start + JobSpec::AtSpeed(Remaining(id), speed);
}

Ticks Scheduler::Remaining(JobId id) const {
  const Ticks estimate = Estimate(id), done = Rec(id).progress_kept;
  return std::max<Ticks>(kTicksPerSecond, done < estimate ? estimate - done : done);
}

void Scheduler::SetExpectedEnd(JobId id, Ticks end) {
  JobRecord& job = Rec(id);
  if (job.expected_end >= 0) by_end_.erase({job.expected_end, id});
  job.expected_end = end;
  if (end >= 0) by_end_.emplace(end, id);
}

GpuUnits Scheduler::MinUnits(const JobSpec& spec) const {
  return core::MinUnits(spec, cluster_.catalog());
}

GpuUnits Scheduler::UnitsOf(const JobSpec& spec, const Allocation& alloc) const {
  GpuUnits units = 0;
  for (const WorkerAlloc& w : alloc)
    units += spec.WorkerUnits(cluster_.catalog(), cluster_.node(w.node).model);
  return units;
}

void Scheduler::InternShape(JobRecord& rec) {
  rec.min_units = MinUnits(rec.spec);
  rec.shape =
      shape_ids_.emplace(ShapeOf(rec.spec), static_cast<uint32_t>(shape_ids_.size())).first->second;
  rec.fit_class = class_ids_
                      .emplace(FitClassOf(rec.spec, cluster_.catalog()),
                               static_cast<uint32_t>(class_ids_.size()))
                      .first->second;
}

JobId Scheduler::Submit(JobSpec spec, Ticks now) {
  const JobId id(jobs_given_++);
  if ((id.v & (kChunk - 1)) == 0) chunks_.push_back(std::make_unique<Chunk>());
  JobRecord& rec = Rec(id);
  running_pos_.push_back(0);
  rec.spec = std::move(spec);
  rec.submit = now;
  rec.pending_since = now;
  rec.asked_tier = rec.spec.tier;
  any_nice_ |= rec.spec.nice != 0;
  // (A budget's demotion moves the tier between standard and best-effort only, so the
  // shape, which tells only critical work apart, never changes.)
  InternShape(rec);
  std::optional<std::string> why = WhyNeverStarts(rec.spec, cluster_, queues_);
  if (why) {
    rec.phase = Phase::kDone;
    rejects_.emplace_back(id, std::move(*why));
    return id;
  }
  AddPending(id);
  arrived_.push_back(id);
  frag_.Observe(rec.spec);
  if (!budgets_.empty()) budget_check_.push_back(id);
  return id;
}

bool Scheduler::KnownNotToFit(JobId id, uint8_t context) const {
  if (context == kNoShapeCache) return false;
  const size_t slot = size_t{Rec(id).fit_class} * kShapeContexts + context;
  return slot < failed_shapes_.size() && failed_shapes_[slot] == pass_;
}

void Scheduler::AddUsage(const JobSpec& spec, const Allocation& alloc, GpuUnits units, int sign,
                         Ticks now) {
  DecayUsage(now);  // the time since the last change at the usage it had
  const std::vector<QueueId>& chain = queues_.queue(spec.queue).self_and_ancestors;
  for (QueueId a : chain) queue_usage_[a.v] += sign * units;
  if (model_usage_.empty()) return;
  for (const WorkerAlloc& w : alloc) {
    const ModelId model = cluster_.node(w.node).model;
    if (!model.valid()) continue;  // a CPU-only worker
    const GpuUnits u = sign * spec.WorkerUnits(cluster_.catalog(), model);
    for (QueueId a : chain) model_usage_[a.v * models_ + model.v] += u;
  }
}

ModelMask Scheduler::GuaranteedModels(const JobSpec& job, GpuUnits extra, GpuUnits least) const {
  const QueueSpec& spec = queues_.queue(job.queue).spec;
  if (spec.guaranteed_by_model.empty()) {
    return queue_usage_[job.queue.v] + extra + least <= spec.guaranteed ? ~ModelMask{0} : 0;
  }
  const ModelMask models = job.models & cluster_.present_models();
  ModelMask inside = 0;
  for (const ModelGuarantee& g : spec.guaranteed_by_model) {
    const ModelMask bit = ModelMask{1} << g.model.v;
    if ((models & bit) == 0) continue;
    const GpuUnits units = job.WorkerUnits(cluster_.catalog(), g.model) * job.replicas;
    if (queue_usage_on(job.queue, g.model) + extra + units <= g.units) inside |= bit;
  }
  return inside;
}

bool Scheduler::Borrowed(QueueId q, ModelId model, GpuUnits units) const {
  const QueueSpec& spec = queues_.queue(q).spec;
  if (spec.guaranteed_by_model.empty()) return queue_usage_[q.v] - units >= spec.guaranteed;
  return queue_usage_on(q, model) - units >= QueueTree::GuaranteeOn(spec, model);
}

std::optional<QueueId> Scheduler::BurstBlocker(QueueId q, GpuUnits units) const {
  for (QueueId a : queues_.queue(q).self_and_ancestors) {
    const GpuUnits burst = queues_.queue(a).spec.burst;
    if (burst >= 0 && queue_usage_[a.v] + units > burst) return a;
  }
  return std::nullopt;
}

GpuUnits Scheduler::BurstExcess(QueueId q, GpuUnits units) const {
  GpuUnits excess = 0;
  for (QueueId a : queues_.queue(q).self_and_ancestors) {
    const GpuUnits burst = queues_.queue(a).spec.burst;
    if (burst >= 0) excess = std::max(excess, queue_usage_[a.v] + units - burst);
  }
  return excess;
}

void Scheduler::Release(JobId id, Ticks now) {
  JobRecord& job = Rec(id);
  // Swap-remove from the dense running set.
  const uint32_t pos = running_pos_[id.v];
  running_pos_[running_.back().v] = pos;
  running_[pos] = running_.back();
  running_.pop_back();
  Stamp(pos);  // another job there now (or none)
  running_stamp_.pop_back();
  SetExpectedEnd(id, -1);
  ReleaseDraining(id);
  ledger_.Release(job.alloc);
  AddUsage(job.spec, job.alloc, job.units, -1, now);
  job.alloc.clear();
  job.units = 0;
  job.released = 0;
  if (job.spec.elastic()) elastic_.erase(id);
  freed_since_pass_ = true;
}

void Scheduler::VictimLeft(const JobRecord& victim) {
  const JobId by = victim.preempted_by;
  if (by.valid() && !Forgotten(by) && Rec(by).victims_pending > 0) --Rec(by).victims_pending;
}

bool Scheduler::Forgotten(JobId id) const {
  const Chunk* c = chunks_[id.v >> kChunkBits].get();
  return c == nullptr || c->forgotten[id.v & (kChunk - 1)];
}

bool Scheduler::Forget(JobId id) {
  if (Forgotten(id) || Rec(id).phase != Phase::kDone) return false;
  std::unique_ptr<Chunk>& c = chunks_[id.v >> kChunkBits];
  JobRecord& rec = c->records[id.v & (kChunk - 1)];
  // Moved out, so that its strings and vectors are freed here: assigning empty ones would
  // keep their buffers, and a chunk that a long-running job keeps would keep them all.
  { JobRecord gone = std::move(rec); }
  rec = kForgotten;
  c->forgotten[id.v & (kChunk - 1)] = true;
  ++forgotten_;
  if (c->forgotten.all()) c.reset();  // every id of the chunk given and forgotten
  return true;
}

const JobRecord Scheduler::kForgotten = [] {
  JobRecord r;
  r.phase = Phase::kDone;
  return r;
}();

void Scheduler::SetShielded(JobId id, bool shielded) {
  JobRecord& job = Rec(id);
  if (job.shielded == shielded) return;
  job.shielded = shielded;
  // Policies that keep what they read of running jobs read this one again.
  if (job.phase == Phase::kRunning || job.phase == Phase::kSignaled) Stamp(running_pos_[id.v]);
}

void Scheduler::Finish(JobId id, Ticks now, bool completed) {
  JobRecord& job = Rec(id);
  if (job.phase == Phase::kPending) RemovePending(id);
  if (job.phase == Phase::kSignaled) VictimLeft(job);  // it exited within its grace period
  if (job.phase == Phase::kRunning || job.phase == Phase::kSignaled) {
    job.run_total += now - job.last_start;
    if (completed) {  // its run time at speed 1, as estimates count
      auto& h = history_[job.spec.queue.v];
      size_t& next = history_next_[job.spec.queue.v];
      const Ticks ran =
          job.progress_kept +
          JobSpec::WorkAt(now - job.last_start, RunSpeed(job.spec, job.alloc, cluster_));
      if (h.size() < kHistory) {
        h.push_back(ran);
      } else {
        history_sum_[job.spec.queue.v] -= h[next];
        h[next] = ran;
      }
      history_sum_[job.spec.queue.v] += ran;
      next = (next + 1) % kHistory;
      auto& o = observed_[job.spec.queue.v];
      uint64_t& count = observed_count_[job.spec.queue.v];
      if (o.size() < kObserved) {
        o.push_back(ran);
      } else {
        o[count % kObserved] = ran;
      }
      ++count;
    }
    BudgetRun(id, now, -1);
    Release(id, now);
  }
  job.phase = Phase::kDone;
}

void Scheduler::Requeue(JobId id, Ticks now) {
  JobRecord& job = Rec(id);
  assert(job.phase == Phase::kRunning || job.phase == Phase::kSignaled);
  const double speed = RunSpeed(job.spec, job.alloc, cluster_);
  BudgetRun(id, now, -1);
  Release(id, now);
  const Ticks ran = now - job.last_start;
  job.run_total += ran;
  if (job.spec.checkpoint > 0)
    job.progress_kept += JobSpec::WorkAt(ran / job.spec.checkpoint * job.spec.checkpoint, speed);
  if (job.phase == Phase::kSignaled) {
    ++job.preemptions;
    VictimLeft(job);
  }
  job.phase = Phase::kPending;
  job.pending_since = now;
  job.signaled_at = -1;
  job.preempted_by = JobId();
  job.wait_reason.clear();
  job.wait = WaitReason{};
  // A requeued job keeps its place in line: it is ordered by its original submit.
  AddPending(id);
  if (!budgets_.empty()) budget_check_.push_back(id);
}

void Scheduler::ReleaseWorkers(JobId id, const std::vector<size_t>& gone, Ticks now) {
  JobRecord& job = Rec(id);
  Require(job.phase == Phase::kRunning || job.phase == Phase::kSignaled,
          "Scheduler::ReleaseWorkers: the job is not running");
  Require(!gone.empty() && gone.size() < job.alloc.size() &&
              std::is_sorted(gone.begin(), gone.end()) &&
              std::adjacent_find(gone.begin(), gone.end()) == gone.end() &&
              gone.back() < job.alloc.size(),
          "Scheduler::ReleaseWorkers: not some of the job's workers, in order, one left");
  BudgetRun(id, now, -1);
  AddUsage(job.spec, job.alloc, job.units, -1, now);
  Allocation kept;
  kept.reserve(job.alloc.size() - gone.size());
  size_t g = 0;
  for (size_t i = 0; i < job.alloc.size(); ++i) {
    const WorkerAlloc& w = job.alloc[i];
    if (g < gone.size() && gone[g] == i) {
      ++g;
      ledger_.Release(w);
      continue;
    }
    kept.push_back(w);
  }
  job.alloc = std::move(kept);
  job.units = UnitsOf(job.spec, job.alloc);
  job.released += static_cast<int>(gone.size());
  AddUsage(job.spec, job.alloc, job.units, 1, now);
  BudgetRun(id, now, 1);
  Stamp(running_pos_[id.v]);  // policies that keep what they read of it read it again
  freed_since_pass_ = true;
}

std::vector<JobId> Scheduler::SetNodeUp(NodeId node, bool up) {
  std::vector<JobId> hit;
  ledger_.SetUp(node, up);
  if (up) {
    freed_since_pass_ = true;
    return hit;
  }
  for (JobId id : running_) {
    for (const WorkerAlloc& w : Rec(id).alloc) {
      if (w.node == node) {
        hit.push_back(id);
        break;
      }
    }
  }
  std::sort(hit.begin(), hit.end());
  return hit;
}

namespace {

// Per WaitCause, in its order: Name, Word and AtLabel.
struct CauseWords {
  std::string_view name, word, at;
};
constexpr CauseWords kCauseWords[kWaitCauses] = {
    {"not yet placed", "not yet placed", ""},
    {"capacity", "capacity", "estimated start"},
    {"held for a reservation", "reservation", "held GPUs' earliest start"},
    {"preemption under way", "preemption", "victims' GPUs free by"},
    {"queue at its burst", "quota", ""},
    {"budget spent", "budget", ""},
    {"outside its window", "window", ""},
    {"other", "other", ""},
};
static_assert(static_cast<int>(WaitCause::kOther) == kWaitCauses - 1);

const CauseWords& WordsOf(WaitCause c) { return kCauseWords[static_cast<int>(c)]; }

}  // namespace

std::string_view Name(WaitCause c) { return WordsOf(c).name; }
std::string_view Word(WaitCause c) { return WordsOf(c).word; }
std::string_view AtLabel(WaitCause c) { return WordsOf(c).at; }

std::string SecondsText(Ticks t) {
  std::string s = std::to_string(t / kTicksPerSecond);
  if (t % kTicksPerSecond) s += "." + std::to_string(1000 + t % kTicksPerSecond).substr(1);
  return s;
}

void Scheduler::Wait(JobId id, const WaitReason& wait, std::string_view reason) {
  JobRecord& job = Rec(id);
  job.wait = wait;  // its `at` may move while the text stays: no new decision for that
  if (job.wait_reason == reason) return;
  job.wait_reason = reason;
  decisions_.push_back(
      Decision{Decision::Kind::kWait, id, JobId(), std::string(reason), wait.cause, wait.at});
}

bool Scheduler::HeldBeforePlacement(JobId id, Ticks now) const {
  const JobSpec& spec = Rec(id).spec;  // TryStartJob's first three checks
  return WindowClosed(id, now) || BudgetHolds(spec.queue, spec.tier) ||
         BurstBlocker(spec.queue, Rec(id).min_units);
}

bool Scheduler::TryStart(JobId id, Ticks now, Fit fit, std::string* why, WaitReason* wait) {
  if (decision_hook_) decision_hook_();
  return TryStartJob(id, now, fit, why, wait);
}

bool Scheduler::TryStartJob(JobId id, Ticks now, Fit fit, std::string* why, WaitReason* wait) {
  JobRecord& job = Rec(id);
  const JobSpec& spec = job.spec;
  auto fail = [&](const WaitReason& block, auto&& reason) {  // a text made now, or kept
    if (wait) *wait = block;
    if (why) {
      *why = std::forward<decltype(reason)>(reason);
    } else {
      Wait(id, block, reason);
    }
    return false;
  };
  auto quota = [&](QueueId blocker) {  // without the queue's usage, which moves (AtLabel)
    const QueueSpec& q = queues_.queue(blocker).spec;
    return "quota: queue " + q.name + " would pass its burst_gpus " + Gpus(q.burst) +
           " with this job";
  };
  if (WindowClosed(id, now)) {
    pass_wakeup_ = std::min(pass_wakeup_, spec.window->NextOpen(now));
    // A job's window, so its text, never changes: written once, not at every pass (a
    // week's replay with fine-tuning windows spent 10% of its time here).
    const WaitReason window =
        WaitReason::Of(WaitCause::kWindow, QueueId(), JobId(), spec.window->NextOpen(now));
    if (job.wait.cause == WaitCause::kWindow) {
      job.wait = window;
      if (wait) *wait = window;
      if (why) *why = job.wait_reason;
      return false;
    }
    return fail(window, "window: may start only between " + Clock(spec.window->start_min) +
                            " and " + Clock(spec.window->end_min) + " UTC");
  }
  if (auto b = BudgetHolds(spec.queue, spec.tier)) {
    const BudgetSpec& budget = *queues_.queue(*b).spec.budget;
    const BudgetAccount& a = budgets_[b->v];
    return fail(WaitReason::Of(WaitCause::kBudget, *b),
                "budget: queue " + queues_.queue(*b).spec.name + " spent its " +
                    Number(budget.gpu_hours) + " GPU-hours of the " +
                    std::string(Name(budget.period)) + " from " + UtcMinute(a.start_unix_ms) +
                    "; new work waits until " + UtcMinute(a.end_unix_ms));
  }
  if (auto blocker = BurstBlocker(spec.queue, job.min_units)) {
    return fail(WaitReason::Of(WaitCause::kQuota, *blocker), quota(*blocker));
  }
  const bool cache = shape_context_ != kNoShapeCache;
  const size_t slot = size_t{job.fit_class} * kShapeContexts + (cache ? shape_context_ : 0);
  if (cache && KnownNotToFit(id, shape_context_)) {
    return fail(WaitReason::Of(WaitCause::kCapacity), std::as_const(no_room_text_[job.fit_class]));
  }
  const bool placed = placer_.Place(spec, fit, scratch_) ||
                      (spec.elastic() &&
                       PlaceLargest(spec, fit, spec.min_replicas, spec.replicas - 1, scratch_) > 0);
  if (!placed) {
    if (no_room_text_.size() <= job.fit_class) no_room_text_.resize(class_ids_.size());
    std::string& text = no_room_text_[job.fit_class];
    if (text.empty() && spec.elastic()) {
      JobSpec least = spec;
      least.replicas = spec.min_replicas;
      text = "capacity: no room now for " + Placer::Describe(least, cluster_.catalog()) +
             " (its least size)";
    } else if (text.empty()) {
      text = "capacity: no room now for " + Placer::Describe(spec, cluster_.catalog());
    }
    if (cache) {
      if (failed_shapes_.size() <= slot) failed_shapes_.resize(class_ids_.size() * kShapeContexts);
      failed_shapes_[slot] = pass_;
    }
    return fail(WaitReason::Of(WaitCause::kCapacity), std::as_const(text));
  }
  Require(scratch_.size() == static_cast<size_t>(spec.replicas) ||
              (spec.elastic() && scratch_.size() >= static_cast<size_t>(spec.min_replicas) &&
               scratch_.size() < static_cast<size_t>(spec.replicas)),
          "Scheduler: a gang placed with fewer or more workers than it has");
  const GpuUnits units = UnitsOf(spec, scratch_);
  if (auto blocker = BurstBlocker(spec.queue, units)) {  // MIG sizes differ by model
    ledger_.Release(scratch_);
    scratch_.clear();
    return fail(WaitReason::Of(WaitCause::kQuota, *blocker), quota(*blocker));
  }
  job.alloc.swap(scratch_);
  scratch_.clear();
  job.fit = fit;
  Begin(id, now, units);
  decisions_.push_back(Decision{Decision::Kind::kStart, id, JobId(), {}});
  if (wait) *wait = WaitReason{};
  return true;
}

void Scheduler::Stamp(uint32_t pos) {
  running_stamp_[pos] = ++stamps_;
  if (!stamped_all_) return;
  if (stamped_.size() > 2 * running_.size() + 1024) {  // nobody took them: read all instead
    stamped_all_ = false;
    stamped_.clear();
    return;
  }
  stamped_.push_back(pos);
}

bool Scheduler::TakeRunningChanges(const void* taker, std::vector<uint32_t>& out) {
  out.clear();
  out.swap(stamped_);
  const bool all = stamped_all_ && taker == stamps_taker_;
  stamps_taker_ = taker;
  stamped_all_ = true;
  return all;
}

void Scheduler::Begin(JobId id, Ticks now, GpuUnits units) {
  JobRecord& job = Rec(id);
  RemovePending(id);
  running_pos_[id.v] = static_cast<uint32_t>(running_.size());
  running_.push_back(id);
  running_stamp_.push_back(0);
  Stamp(static_cast<uint32_t>(running_.size() - 1));
  job.units = units;
  job.released = job.spec.replicas - static_cast<int>(job.alloc.size());
  if (job.spec.elastic()) elastic_.insert(id);
  AddUsage(job.spec, job.alloc, units, 1, now);
  BudgetRun(id, now, 1);
  job.phase = Phase::kRunning;
  job.last_start = now;
  if (job.first_start < 0) job.first_start = now;
  SetExpectedEnd(id, ExpectedEnd(id));
  job.wait_reason.clear();
  job.wait = WaitReason{};
}

bool Scheduler::Adopt(JobId id, const Allocation& alloc, Ticks started, std::string* why) {
  JobRecord& job = Rec(id);
  const JobSpec& spec = job.spec;
  assert(job.phase == Phase::kPending);
  auto refuse = [&](std::string reason) {
    if (why) *why = std::move(reason);
    return false;
  };
  // An elastic job runs at any of its sizes (in whole groups of workers_per_node).
  const size_t least = static_cast<size_t>(std::max(1, spec.least_replicas()));
  if (alloc.size() > static_cast<size_t>(std::max(1, spec.replicas)) || alloc.size() < least ||
      (spec.workers_per_node > 0 && alloc.size() % static_cast<size_t>(spec.workers_per_node))) {
    return refuse("it has " + std::to_string(alloc.size()) + " worker(s), its spec " +
                  (spec.elastic() ? std::to_string(spec.min_replicas) + "-" : "") +
                  std::to_string(std::max(1, spec.replicas)));
  }
  GpuUnits units = 0;
  for (const WorkerAlloc& w : alloc) {
    if (!w.node.valid() || w.node.v >= cluster_.nodes().size()) {
      return refuse("it names a node that is not in the cluster");
    }
    if (!ledger_.node(w.node).up)
      return refuse("node " + cluster_.node(w.node).name + " is not up");
    units += spec.WorkerUnits(cluster_.catalog(), cluster_.node(w.node).model);
  }
  // The limits TryStart applies (a window governs starting only: the caller drops it).
  if (auto b = BudgetHolds(spec.queue, spec.tier)) {
    return refuse("queue " + queues_.queue(*b).spec.name + " spent its GPU-hour budget");
  }
  if (auto blocker = BurstBlocker(spec.queue, units)) {
    return refuse("queue " + queues_.queue(*blocker).spec.name + " is at its burst_gpus");
  }
  Allocation taken;
  for (const WorkerAlloc& w : alloc) {
    if (!ledger_.Fits(w)) {
      ledger_.Release(taken);
      return refuse("it overlaps what another job holds on " + cluster_.node(w.node).name);
    }
    ledger_.Allocate(w);
    taken.push_back(w);
  }
  job.alloc = std::move(taken);
  Begin(id, started, units);
  return true;
}

void Scheduler::Preempt(JobId victim, JobId by, std::string reason, Ticks now) {
  JobRecord& job = Rec(victim);
  assert(job.phase == Phase::kRunning && job.spec.tier != Tier::kCritical);
  ++Rec(by).victims_pending;
  job.phase = Phase::kSignaled;
  Stamp(running_pos_[victim.v]);
  job.signaled_at = now;
  job.preempted_by = by;
  SetExpectedEnd(victim, ExpectedEnd(victim));
  decisions_.push_back(Decision{Decision::Kind::kPreempt, victim, by, std::move(reason)});
}

void Scheduler::Audit() const {
  ledger_.Audit();
  // Gangs all or nothing: every running job holds all its workers (but those released
  // while the rest runs on), each where the ledger says something is held.
  for (const JobId id : running_) {
    const JobRecord& job = Rec(id);
    Require(!job.alloc.empty() && job.alloc.size() + static_cast<size_t>(job.released) ==
                                      static_cast<size_t>(job.spec.replicas),
            "Scheduler::Audit: a running gang holds fewer or more workers than it has");
    for (const WorkerAlloc& w : job.alloc) {
      if (w.sharing != Sharing::kExclusive) {
        Require(ledger_.gpu(ledger_.gpu_id(w.node, w.gpu)).mode != GpuMode::kFree,
                "Scheduler::Audit: a running job's share or MIG instance on a free GPU");
        continue;
      }
      for (uint64_t m = w.gpu_mask; m != 0; m &= m - 1) {
        Require(ledger_.gpu(ledger_.gpu_id(w.node, std::countr_zero(m))).mode == GpuMode::kWhole,
                "Scheduler::Audit: a running job's whole GPU not held whole");
      }
    }
  }
}

const std::vector<Decision>& Scheduler::Schedule(Ticks now) {
  decisions_.clear();
  for (auto& [id, why] : rejects_) {
    decisions_.push_back(Decision{Decision::Kind::kReject, id, JobId(), std::move(why)});
  }
  rejects_.clear();
  pass_wakeup_ = kForever;
  ShrinkElastic(now);  // frees GPUs for this pass
  // Without a release, a node coming up or a window opening, capacity only shrank since
  // the last pass, so jobs that waited then still wait: try only the new arrivals.
  const bool budgets_changed = UpdateBudgets(now);
  bool full = freed_since_pass_ || budgets_changed || now >= next_wakeup_ || full_pass_owed_;
  // Full passes at most every full_pass_interval: one due sooner is owed, at the time the
  // interval allows, and until then only critical arrivals are tried (besides claims).
  const Ticks interval = params_.full_pass_interval;
  full_pass_owed_ =
      full && interval > 0 && last_full_pass_ >= 0 && now < last_full_pass_ + interval;
  if (full_pass_owed_) {
    full = false;
    // The others say why they are not tried yet.
    const Ticks at = last_full_pass_ + interval;
    std::erase_if(arrived_, [&](JobId id) {
      if (job(id).spec.tier == Tier::kCritical) return false;
      if (job(id).phase == Phase::kPending) {
        Wait(id, WaitReason::Of(WaitCause::kNotYetPlaced, QueueId(), JobId(), at),
             "not yet placed: GPUs were freed since the last full pass; it is tried at the next, "
             "at t=" +
                 SecondsText(at) + " s, after the jobs ahead of it (policy.full_pass_interval_s)");
      }
      return true;
    });
  }
  if (full) {
    next_wakeup_ = kForever;
    last_full_pass_ = now;
  }
  if (pass_ % AuditEvery() == 0) Audit();
  ++pass_;  // empties the shape cache
  DecayUsage(now);
  policy_->Schedule(*this, now, full);
  shape_context_ = 0;
  GrowElastic(now);
  next_wakeup_ = std::min({next_wakeup_, pass_wakeup_, BudgetWakeup(now)});
  // The owed full pass: any wakeup waits for it, and it sets them anew.
  if (full_pass_owed_) next_wakeup_ = last_full_pass_ + interval;
  freed_since_pass_ = false;
  arrived_.clear();
  return decisions_;
}

// ---------------------------------------------------------------- elastic jobs

int Scheduler::PlaceLargest(const JobSpec& spec, Fit fit, int lo, int hi, Allocation& out,
                            const Allocation* beside) {
  const auto place = [&](const JobSpec& s) {
    return beside ? placer_.PlaceBeside(s, fit, *beside, out) : placer_.Place(s, fit, out);
  };
  JobSpec s = spec;
  const int step = std::max(1, spec.workers_per_node);  // sizes in whole groups
  lo = (lo + step - 1) / step;
  hi /= step;
  int best = 0;
  while (lo <= hi) {
    const int mid = lo + (hi - lo) / 2;
    s.replicas = mid * step;
    out.clear();
    if (place(s)) {
      ledger_.Release(out);  // tried only: the largest is placed at the end
      best = mid;
      lo = mid + 1;
    } else {
      hi = mid - 1;
    }
  }
  out.clear();
  if (best == 0) return 0;
  best *= step;
  s.replicas = best;
  Require(place(s), "Scheduler: an elastic size that fitted no longer does");
  return best;
}

bool Scheduler::WorkWaitsForRoom() const {
  for (const PendingKey& k : pending_) {
    switch (Rec(k.id).wait.cause) {
      case WaitCause::kNotYetPlaced:
      case WaitCause::kCapacity:
      case WaitCause::kReservation:
      case WaitCause::kPreemption:
        return true;
      default:
        break;
    }
  }
  return false;
}

void Scheduler::Resize(JobId id, Allocation alloc, GpuUnits units, Ticks now) {
  JobRecord& job = Rec(id);
  const Ticks ran = now - job.last_start;
  job.run_total += ran;
  const Ticks ckpt = job.spec.checkpoint;
  // Progress is reckoned in time at the job's full size: a run at k of n workers does k/n.
  if (ckpt > 0) {
    job.progress_kept +=
        JobSpec::WorkAt(job.spec.WorkerTime(ran / ckpt * ckpt, static_cast<int>(job.alloc.size())),
                        RunSpeed(job.spec, job.alloc, cluster_)) /
        job.spec.replicas;
  }
  BudgetRun(id, now, -1);
  AddUsage(job.spec, job.alloc, job.units, -1, now);
  job.alloc = std::move(alloc);
  job.units = units;
  job.released = job.spec.replicas - static_cast<int>(job.alloc.size());
  AddUsage(job.spec, job.alloc, job.units, 1, now);
  BudgetRun(id, now, 1);
  job.last_start = now;
  SetExpectedEnd(id, ExpectedEnd(id));
  Stamp(running_pos_[id.v]);
  decisions_.push_back(Decision{Decision::Kind::kResize, id, JobId(), {}});
}

void Scheduler::SetSizes(JobId id, int min_replicas, int replicas) {
  JobRecord& job = Rec(id);
  const auto size = static_cast<int>(job.alloc.size());
  Require(job.phase == Phase::kRunning && min_replicas >= 1 && min_replicas <= size &&
              size <= replicas && job.spec.sharing == Sharing::kExclusive &&
              job.spec.workers_per_node == 0,
          "Scheduler::SetSizes: sizes that do not hold the running gang");
  job.spec.replicas = replicas;
  job.spec.min_replicas = min_replicas < replicas ? min_replicas : 0;
  InternShape(job);
  job.released = replicas - size;
  if (job.spec.elastic()) {
    elastic_.insert(id);
  } else {
    elastic_.erase(id);
  }
  SetExpectedEnd(id, ExpectedEnd(id));
  Stamp(running_pos_[id.v]);
}

void Scheduler::SetRuntimeEstimate(JobId id, std::optional<Ticks> estimate) {
  JobRecord& job = Rec(id);
  job.spec.runtime_estimate = estimate;
  if (job.phase != Phase::kRunning) return;
  SetExpectedEnd(id, ExpectedEnd(id));
  Stamp(running_pos_[id.v]);
}

void Scheduler::ReleaseDraining(JobId id) {
  auto it = draining_.find(id.v);
  if (it == draining_.end()) return;
  ledger_.Release(it->second);
  draining_.erase(it);
  freed_since_pass_ = true;
}

void Scheduler::RunBegan(JobId id, Ticks now) {
  JobRecord& job = Rec(id);
  assert(job.phase == Phase::kRunning && now >= job.last_start);
  ReleaseDraining(id);                    // the old run's workers have all ended
  job.run_total += now - job.last_start;  // the stop between runs: time held, no progress
  job.last_start = now;
  SetExpectedEnd(id, ExpectedEnd(id));
  Stamp(running_pos_[id.v]);
}

namespace {
// Whether `job`'s run is at a checkpoint now: a whole number (at least one) of checkpoint
// intervals since it began, or at most `slack` past one; the next one otherwise.
bool AtCheckpoint(const JobRecord& job, Ticks now, Ticks slack) {
  const Ticks ran = now - job.last_start, ckpt = job.spec.checkpoint;
  return ckpt > 0 && ran >= ckpt && ran % ckpt <= slack;
}
Ticks NextCheckpoint(const JobRecord& job, Ticks now) {
  const Ticks ckpt = job.spec.checkpoint;
  return job.last_start + ((now - job.last_start) / ckpt + 1) * ckpt;
}
}  // namespace

void Scheduler::ShrinkElastic(Ticks now) {
  std::optional<bool> waits;  // read once, and only where a job could shrink: O(pending)
  for (const JobId id : elastic_) {
    JobRecord& job = Rec(id);
    const auto least = static_cast<size_t>(job.spec.min_replicas);
    if (job.phase != Phase::kRunning || job.spec.checkpoint <= 0 || job.alloc.size() <= least ||
        draining_.contains(id.v))  // mid-resize: its new run has not begun
      continue;
    if (!waits) waits = WorkWaitsForRoom();
    if (!*waits) return;
    if (!AtCheckpoint(job, now, params_.checkpoint_slack)) {
      pass_wakeup_ = std::min(pass_wakeup_, NextCheckpoint(job, now));
      continue;
    }
    Allocation keep(job.alloc.begin(), job.alloc.begin() + static_cast<std::ptrdiff_t>(least));
    Allocation dropped(job.alloc.begin() + static_cast<std::ptrdiff_t>(least), job.alloc.end());
    if (params_.resize_waits_for_run) {
      draining_[id.v] = std::move(dropped);  // in use until the driver's new run begins
    } else {
      ledger_.Release(dropped);
      freed_since_pass_ = true;
    }
    const GpuUnits units = UnitsOf(job.spec, keep);
    Resize(id, std::move(keep), units, now);
  }
}

void Scheduler::GrowElastic(Ticks now) {
  std::optional<bool> waits;
  for (const JobId id : elastic_) {
    JobRecord& job = Rec(id);
    const int size = static_cast<int>(job.alloc.size());
    if (job.phase != Phase::kRunning || job.spec.checkpoint <= 0 || size >= job.spec.replicas ||
        draining_.contains(id.v))
      continue;
    if (!waits) waits = WorkWaitsForRoom();
    if (*waits) return;
    if (BudgetHolds(job.spec.queue, job.spec.tier)) continue;  // no growth on a spent budget
    if (!AtCheckpoint(job, now, params_.checkpoint_slack)) {
      pass_wakeup_ = std::min(pass_wakeup_, NextCheckpoint(job, now));
      continue;
    }
    if (params_.resize_in_place) {  // more workers beside the ones it has, which stay
      Allocation more;
      if (PlaceLargest(job.spec, job.fit, 1, job.spec.replicas - size, more, &job.alloc) == 0)
        continue;
      Allocation grown = job.alloc;
      grown.insert(grown.end(), more.begin(), more.end());
      const GpuUnits units = UnitsOf(job.spec, grown);
      if (BurstBlocker(job.spec.queue, units - job.units)) {  // growth counts against burst
        ledger_.Release(more);
        continue;
      }
      Resize(id, std::move(grown), units, now);
      continue;
    }
    // Placed anew at the largest size that fits where it is and what is free (a resize is a
    // restart from the checkpoint, so workers may move); else it keeps what it holds.
    const Allocation old = job.alloc;
    ledger_.Release(old);
    Allocation grown;
    GpuUnits units = 0;
    if (PlaceLargest(job.spec, job.fit, size + 1, job.spec.replicas, grown) > 0) {
      units = UnitsOf(job.spec, grown);
      if (BurstBlocker(job.spec.queue, units - job.units)) {  // growth counts against burst
        ledger_.Release(grown);
        grown.clear();
      }
    }
    // Waiting for its new run (resize_waits_for_run), the old workers placed elsewhere
    // hold their GPUs until it begins; a placement that overlaps one of them in part is
    // not taken (a GPU cannot be held twice).
    Allocation drain;
    if (!grown.empty() && params_.resize_waits_for_run) {
      for (const WorkerAlloc& w : old) {
        if (std::find(grown.begin(), grown.end(), w) != grown.end()) continue;
        if (!ledger_.Fits(w, /*need_up=*/false)) {
          ledger_.Release(grown);
          grown.clear();
          break;
        }
        drain.push_back(w);
      }
    }
    if (grown.empty()) {
      for (const WorkerAlloc& w : old) ledger_.Allocate(w);
      continue;
    }
    if (!drain.empty()) {
      for (const WorkerAlloc& w : drain) ledger_.Allocate(w);
      draining_[id.v] = std::move(drain);
    }
    Resize(id, std::move(grown), units, now);
  }
}

// ---------------------------------------------------------------- budgets

double Scheduler::CostPerHour(const JobSpec& spec, const Allocation& alloc) const {
  double cost = 0;
  for (const WorkerAlloc& w : alloc) {
    const ModelId model = cluster_.node(w.node).model;
    if (!model.valid()) continue;
    cost += static_cast<double>(spec.WorkerUnits(cluster_.catalog(), model)) / kGpuUnits *
            GpuHourPrice(params_, model);
  }
  return cost;
}

void Scheduler::AdvanceBudget(QueueId q, Ticks t) {
  BudgetAccount& a = budgets_[q.v];
  const int64_t unix_ms = params_.epoch_unix_ms + t;
  if (a.at >= 0 && t <= a.at) return;
  if (a.at < 0 || unix_ms >= a.end_unix_ms) {
    // A new period (or the first): work still running spends from its start on.
    const auto [start, end] = BudgetPeriodAt(queues_.queue(q).spec.budget->period, unix_ms);
    a.spent = a.at < 0 ? 0 : a.rate * static_cast<double>(unix_ms - start);
    a.start_unix_ms = start;
    a.end_unix_ms = end;
  } else {
    a.spent += a.rate * static_cast<double>(t - a.at);
  }
  a.at = t;
}

void Scheduler::AddBudgetSpent(QueueId q, double gpu_hours, Ticks at) {
  if (budgets_.empty() || !queues_.queue(q).spec.budget) return;
  AdvanceBudget(q, at);
  BudgetAccount& a = budgets_[q.v];
  const int64_t unix_ms = params_.epoch_unix_ms + at;
  if (unix_ms >= a.start_unix_ms && unix_ms < a.end_unix_ms) a.spent += gpu_hours;
}

double Scheduler::BudgetSpentAt(QueueId q, Ticks now) {
  if (budgets_.empty() || !queues_.queue(q).spec.budget) return 0;
  AdvanceBudget(q, now);
  return budgets_[q.v].spent;
}

void Scheduler::BudgetRun(JobId id, Ticks t, int sign) {
  if (budgets_.empty()) return;
  JobRecord& job = Rec(id);
  if (sign > 0) job.cost_rate = CostPerHour(job.spec, job.alloc) / 3.6e6;
  for (QueueId b : queues_.queue(job.spec.queue).self_and_ancestors) {
    if (!queues_.queue(b).spec.budget) continue;
    AdvanceBudget(b, t);
    BudgetAccount& a = budgets_[b.v];
    // A run that started (or stopped) before the account's time, as a restarted server
    // adopting its running jobs: count (or take back) what it spent since then.
    const Ticks from = std::max(t, a.start_unix_ms - params_.epoch_unix_ms);
    if (a.at > from)
      a.spent = std::max(0.0, a.spent + sign * job.cost_rate * static_cast<double>(a.at - from));
    a.rate = std::max(0.0, a.rate + sign * job.cost_rate);
  }
  if (sign < 0) job.cost_rate = 0;
}

std::optional<QueueId> Scheduler::BudgetHolds(QueueId q, Tier tier) const {
  if (budgets_.empty()) return std::nullopt;
  for (QueueId b : queues_.queue(q).self_and_ancestors) {
    const auto& budget = queues_.queue(b).spec.budget;
    // Critical work never runs as best-effort: a spent budget that covers it holds it.
    if (budget && (budget->applies_to & Bit(tier)) && budgets_[b.v].out &&
        (budget->when_spent == WhenSpent::kWait || tier == Tier::kCritical)) {
      return b;
    }
  }
  return std::nullopt;
}

std::optional<QueueId> Scheduler::BudgetDemotes(QueueId q) const {
  if (budgets_.empty()) return std::nullopt;
  for (QueueId b : queues_.queue(q).self_and_ancestors) {
    const auto& budget = queues_.queue(b).spec.budget;
    if (budget && budget->when_spent == WhenSpent::kBestEffort &&
        (budget->applies_to & Bit(Tier::kStandard)) && budgets_[b.v].out) {
      return b;
    }
  }
  return std::nullopt;
}

void Scheduler::Retier(JobId id) {
  JobRecord& job = Rec(id);
  if (job.phase != Phase::kPending) return;
  Tier want = job.asked_tier;
  if (want == Tier::kStandard && BudgetDemotes(job.spec.queue)) want = Tier::kBestEffort;
  if (want == job.spec.tier) return;
  RemovePending(id);
  job.spec.tier = want;
  AddPending(id);
}

// Spent within a part in a billion of the budget counts as spent (rates times ticks
// round).
bool Scheduler::UpdateBudgets(Ticks now) {
  if (budgets_.empty()) return false;
  bool changed = false;
  for (QueueId q : budgeted_) {
    AdvanceBudget(q, now);
    BudgetAccount& a = budgets_[q.v];
    const double budget = queues_.queue(q).spec.budget->gpu_hours;
    const bool out = a.spent >= budget * (1 - 1e-9);
    changed |= out != a.out;
    a.out = out;
  }
  if (changed) {
    std::vector<JobId> pending;
    pending.reserve(pending_.size());
    for (const PendingKey& k : pending_) pending.push_back(k.id);
    for (JobId id : pending) Retier(id);
  }
  for (JobId id : budget_check_) {
    if (!Forgotten(id)) Retier(id);  // a driver may take a job back before the pass
  }
  budget_check_.clear();
  return changed;
}

Ticks Scheduler::BudgetWakeup(Ticks now) const {
  Ticks wake = kForever;
  for (QueueId q : budgeted_) {
    const BudgetAccount& a = budgets_[q.v];
    if (a.out) {  // the next period
      wake = std::min(wake, a.end_unix_ms - params_.epoch_unix_ms);
    } else if (a.rate > 0) {  // when the running work will have spent it
      const double left = queues_.queue(q).spec.budget->gpu_hours * (1 - 1e-9) - a.spent;
      const double ticks = std::ceil(left / a.rate);
      wake = std::min(wake, now + std::max<Ticks>(1, static_cast<Ticks>(std::min(ticks, 1e15))));
    }
  }
  return wake;
}

}  // namespace gantry::core
