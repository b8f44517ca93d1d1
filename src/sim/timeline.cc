#include "sim/timeline.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <utility>

namespace gantry::sim {

using core::GpuUnits;
using core::Ticks;
using Json = nlohmann::ordered_json;

Timeline::Timeline(const core::QueueTree& queues)
    : queues_(queues),
      levels_(kFixedLevels + core::kTierCount + queues.size() + kWaitCauses),
      counters_(kCounters, std::vector<double>(kMaxBuckets, 0.0)),
      frag_sum_(kMaxBuckets, 0.0),
      idle_sum_(kIdleCauses, std::vector<double>(kMaxBuckets, 0.0)),
      frag_n_(kMaxBuckets, 0) {
  for (LevelSeries& s : levels_) s.sum.assign(kMaxBuckets, 0.0);
}

Ticks Timeline::BucketEnd(size_t i) const { return origin_ + static_cast<Ticks>(i + 1) * width_; }

void Timeline::Reach(Ticks t) {
  if (!started_) {
    started_ = true;
    origin_ = t;
    for (LevelSeries& s : levels_) s.since = t;
  }
  assert(t >= origin_);
  while (t - origin_ >= static_cast<Ticks>(kMaxBuckets) * width_) Merge();
  used_buckets_ = std::max(used_buckets_, Index(t) + 1);
}

void Timeline::Merge() {
  auto halve = [](auto& v) {
    for (size_t i = 0; i < kMaxBuckets / 2; ++i) v[i] = v[2 * i] + v[2 * i + 1];
    std::fill(v.begin() + kMaxBuckets / 2, v.end(), 0);
  };
  for (LevelSeries& s : levels_) halve(s.sum);
  for (auto& c : counters_) halve(c);
  halve(frag_sum_);
  for (auto& v : idle_sum_) halve(v);
  halve(frag_n_);
  width_ *= 2;
  used_buckets_ = (used_buckets_ + 1) / 2;
  if (last_sample_ != SIZE_MAX) last_sample_ /= 2;
}

void Timeline::Integrate(LevelSeries& s, Ticks t) {
  if (s.value != 0) {
    for (Ticks a = s.since; a < t;) {
      const size_t i = Index(a);
      const Ticks e = std::min(t, BucketEnd(i));
      s.sum[i] += s.value * static_cast<double>(e - a);
      a = e;
    }
  }
  s.since = t;
}

void Timeline::Add(uint32_t level, Ticks t, double delta) {
  LevelSeries& s = levels_[level];
  Integrate(s, t);
  s.value += delta;
}

void Timeline::SetState(Ticks t, GpuUnits up, GpuUnits used, size_t pending) {
  Reach(t);
  const double values[] = {static_cast<double>(up), static_cast<double>(used),
                           static_cast<double>(pending)};
  for (uint32_t l : {kUpUnits, kUsedUnits, kPending}) {
    if (levels_[l].value != values[l]) Add(l, t, values[l] - levels_[l].value);
  }
}

void Timeline::Waiting(Ticks t, std::optional<WaitCause> from, std::optional<WaitCause> to) {
  if (from == to) return;
  Reach(t);
  if (from) Add(CauseLevel(*from), t, -1);
  if (to) Add(CauseLevel(*to), t, 1);
}

namespace {
// The level of a sharing mode, or -1 for whole GPUs.
int SharingLevel(core::Sharing s) {
  switch (s) {
    case core::Sharing::kMig:
      return Timeline::kMigUnits;
    case core::Sharing::kMps:
      return Timeline::kMpsUnits;
    case core::Sharing::kTimeslice:
      return Timeline::kTimesliceUnits;
    case core::Sharing::kExclusive:
      return -1;
  }
  return -1;
}
}  // namespace

void Timeline::RunStarted(Ticks t, core::Tier tier, core::QueueId queue, core::Sharing sharing,
                          GpuUnits units) {
  if (units == 0) return;
  Reach(t);
  const auto u = static_cast<double>(units);
  Add(TierLevel(tier), t, u);
  Add(QueueLevel(queue), t, u);
  if (int l = SharingLevel(sharing); l >= 0) Add(static_cast<uint32_t>(l), t, u);
}

void Timeline::RunEnded(Ticks t, core::Tier tier, core::QueueId queue, core::Sharing sharing,
                        GpuUnits units, Ticks lost_ms, Ending how) {
  Reach(t);
  const size_t i = Index(t);
  const auto lost = static_cast<double>(units) * static_cast<double>(lost_ms);
  switch (how) {
    case Ending::kFinished:
      break;
    case Ending::kPreempted:
      counters_[kPreemptions][i] += 1;
      counters_[kLostPreempt][i] += lost;
      break;
    case Ending::kRequeued:
      counters_[kRequeues][i] += 1;
      counters_[kLostRequeue][i] += lost;
      break;
    case Ending::kReclaimed:
      counters_[kReclaims][i] += 1;
      counters_[kLostReclaim][i] += lost;
      break;
  }
  if (units == 0) return;
  const auto u = static_cast<double>(units);
  Add(TierLevel(tier), t, -u);
  Add(QueueLevel(queue), t, -u);
  if (int l = SharingLevel(sharing); l >= 0) Add(static_cast<uint32_t>(l), t, -u);
}

bool Timeline::WantsSample(Ticks t) const {
  if (!started_) return true;
  Ticks w = width_;
  size_t last = last_sample_;
  while (t - origin_ >= static_cast<Ticks>(kMaxBuckets) * w) {  // the merges Reach(t) would do
    w *= 2;
    if (last != SIZE_MAX) last /= 2;
  }
  return static_cast<size_t>((t - origin_) / w) != last;
}

void Timeline::SampleFragmentation(Ticks t, double fragmented_gpus, const IdleGpus& idle) {
  Reach(t);
  const size_t i = Index(t);
  frag_sum_[i] += fragmented_gpus;
  for (int c = 0; c < kIdleCauses; ++c) idle_sum_[c][i] += idle[c];
  ++frag_n_[i];
  last_sample_ = i;
}

void Timeline::Finish(Ticks t) {
  Reach(t);
  for (LevelSeries& s : levels_) Integrate(s, t);
  end_ = t;
  finished_ = true;
  // A run that ends on a bucket boundary would leave an empty last bucket: what was
  // counted at the very end goes to the bucket before.
  const size_t n = buckets();
  if (used_buckets_ > n) {
    for (auto& c : counters_) c[n - 1] += std::exchange(c[n], 0.0);
    // A sample taken at the very end shows the state after the run's last moment, which
    // no bucket covers: dropped (the last bucket keeps its own, or the one before holds).
    frag_sum_[n] = 0;
    for (auto& v : idle_sum_) v[n] = 0;
    frag_n_[n] = 0;
    if (last_sample_ == n) last_sample_ = n - 1;
  }
}

size_t Timeline::buckets() const {
  if (!started_) return 0;
  if (!finished_) return used_buckets_;
  // Every bucket covers some time, except the single bucket of a run with no span.
  return std::max<size_t>(1, static_cast<size_t>((end_ - origin_ + width_ - 1) / width_));
}

double Timeline::Mean(uint32_t level, size_t i) const {
  assert(finished_ && i < buckets());
  const Ticks start = origin_ + static_cast<Ticks>(i) * width_;
  const Ticks len = std::min(BucketEnd(i), end_) - start;
  // A run with no span has one bucket of no length: the value at the end.
  return len > 0 ? levels_[level].sum[i] / static_cast<double>(len) : levels_[level].value;
}

double Timeline::Mean(uint32_t level) const {
  assert(finished_);
  if (end_ <= origin_) return levels_[level].value;
  double total = 0;
  for (size_t i = 0; i < buckets(); ++i) total += levels_[level].sum[i];
  return total / static_cast<double>(end_ - origin_);
}

namespace {
// Four decimals are plenty on a plot and keep the HTML small.
double Round(double x) { return std::round(x * 1e4) / 1e4; }
}  // namespace

Timeline::IdleGpus Timeline::IdleMeans() const {
  IdleGpus out{};
  const size_t n = buckets();
  if (n == 0 || end_ <= origin_) return out;
  IdleGpus held{};
  for (size_t i = 0; i < n; ++i) {
    if (frag_n_[i] > 0) {
      for (int c = 0; c < kIdleCauses; ++c) held[c] = idle_sum_[c][i] / frag_n_[i];
    }
    const double span = static_cast<double>(std::min(BucketEnd(i), end_) -
                                            (origin_ + static_cast<Ticks>(i) * width_));
    for (int c = 0; c < kIdleCauses; ++c) out[c] += held[c] * span;
  }
  for (double& v : out) v /= static_cast<double>(end_ - origin_);
  return out;
}

Json Timeline::ToJson() const {
  const size_t n = buckets();
  auto level = [&](uint32_t l, double scale) {
    Json a = Json::array();
    for (size_t i = 0; i < n; ++i) a.push_back(Round(Mean(l, i) / scale));
    return a;
  };
  auto counter = [&](Counter c, double scale) {
    Json a = Json::array();
    for (size_t i = 0; i < n; ++i) a.push_back(Round(counters_[c][i] / scale));
    return a;
  };
  const auto gpu = static_cast<double>(core::kGpuUnits);
  Json j;
  j["t0_s"] = static_cast<double>(origin_) / core::kTicksPerSecond;
  j["bucket_s"] = static_cast<double>(width_) / core::kTicksPerSecond;
  j["end_s"] = static_cast<double>(end_) / core::kTicksPerSecond;
  j["capacity_gpus"] = level(kUpUnits, gpu);
  j["allocated_gpus"] = level(kUsedUnits, gpu);
  j["pending_jobs"] = level(kPending, 1);
  Json by_tier = Json::object();
  for (int t = 0; t < core::kTierCount; ++t) {
    const auto tier = static_cast<core::Tier>(t);
    by_tier[std::string(core::Name(tier))] = level(TierLevel(tier), gpu);
  }
  j["by_tier"] = by_tier;
  Json by_queue = Json::object();
  for (uint32_t q = 0; q < queues_.size(); ++q) {
    by_queue[queues_.queue(core::QueueId(q)).spec.name] = level(QueueLevel(core::QueueId(q)), gpu);
  }
  j["by_queue"] = by_queue;
  Json by_cause = Json::object();
  for (int c = 0; c < kWaitCauses; ++c) {
    const auto cause = static_cast<WaitCause>(c);
    by_cause[std::string(core::Name(cause))] = level(CauseLevel(cause), 1);
  }
  j["pending_by_cause"] = by_cause;
  j["sharing_gpus"] = {{"mig", level(kMigUnits, gpu)},
                       {"mps", level(kMpsUnits, gpu)},
                       {"timeslice", level(kTimesliceUnits, gpu)}};
  Json frag = nullptr;
  if (std::any_of(frag_n_.begin(), frag_n_.end(), [](uint32_t k) { return k > 0; })) {
    frag = Json::array();
    Json held = nullptr;  // a bucket without a sample had no state change: the value holds
    for (size_t i = 0; i < n; ++i) {
      if (frag_n_[i] > 0) held = Round(frag_sum_[i] / frag_n_[i]);
      frag.push_back(held);
    }
  }
  j["fragmented_gpus"] = frag;
  Json idle = nullptr;
  if (frag != nullptr) {
    idle = Json::object();
    for (int c = 0; c < kIdleCauses; ++c) {
      Json series = Json::array();
      Json held = nullptr;
      for (size_t i = 0; i < n; ++i) {
        if (frag_n_[i] > 0) held = Round(idle_sum_[c][i] / frag_n_[i]);
        series.push_back(held);
      }
      idle[std::string(core::Name(static_cast<core::IdleCause>(c)))] = series;
    }
  }
  j["idle_gpus_by_cause"] = idle;
  j["preemptions"] = counter(kPreemptions, 1);
  j["requeues"] = counter(kRequeues, 1);
  j["reclaims"] = counter(kReclaims, 1);
  j["lost_gpu_hours"] = {{"preempt", counter(kLostPreempt, core::kUnitTicksPerGpuHour)},
                         {"requeue", counter(kLostRequeue, core::kUnitTicksPerGpuHour)},
                         {"reclaim", counter(kLostReclaim, core::kUnitTicksPerGpuHour)}};
  // Per queue: mean GPUs held by its own jobs and by its subtree (what its guarantee
  // and burst limit bound), over the whole timeline.
  std::vector<double> subtree(queues_.size(), 0.0);
  for (uint32_t q = 0; q < queues_.size(); ++q) {
    const double own = started_ ? Mean(QueueLevel(core::QueueId(q))) : 0.0;
    for (core::QueueId a : queues_.queue(core::QueueId(q)).self_and_ancestors) subtree[a.v] += own;
  }
  Json queues = Json::array();
  for (uint32_t q = 0; q < queues_.size(); ++q) {
    const core::Queue& queue = queues_.queue(core::QueueId(q));
    Json e;
    e["name"] = queue.spec.name;
    e["parent"] = queue.spec.parent.empty() ? Json(nullptr) : Json(queue.spec.parent);
    e["guaranteed_gpus"] = static_cast<double>(queue.spec.guaranteed) / gpu;
    e["burst_gpus"] =
        queue.spec.burst >= 0 ? Json(static_cast<double>(queue.spec.burst) / gpu) : Json(nullptr);
    e["mean_gpus"] = Round(started_ ? Mean(QueueLevel(core::QueueId(q))) / gpu : 0.0);
    e["mean_subtree_gpus"] = Round(subtree[q] / gpu);
    queues.push_back(e);
  }
  j["queues"] = queues;
  return j;
}

}  // namespace gantry::sim
