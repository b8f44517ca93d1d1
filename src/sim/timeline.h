// Timeline: the time series of one simulated run, for the HTML report's plots, in
// bounded memory.
//
// Simulated time from the first observation on is cut into at most kMaxBuckets buckets
// of one width; when the run outgrows them the width doubles and neighbouring buckets
// merge, so a run of any length keeps between kMaxBuckets / 2 and kMaxBuckets buckets
// (widths 1 s, 2 s, 4 s, ...). Three kinds of series:
//   - levels (GPUs allocated by tier, by queue and by sharing mode, GPUs up, GPUs
//     allocated, pending jobs): piecewise-constant values; a bucket holds the integral
//     of the value over the bucket, so its figure is the time-weighted mean over the
//     bucket, never a point sample. A level is integrated only when it changes (or at
//     Finish), so an update costs O(1) plus the buckets its last value spanned;
//   - counters (preemptions, requeues, reclaims, lost GPU-time by cause): sums of the
//     amounts that fell in the bucket;
//   - point samples of figures too costly to compute at every change (fragmentation):
//     the first observation in each bucket asks for one (WantsSample); a bucket's figure
//     is the mean of its samples, and a bucket with none (no state change in it) holds
//     the previous bucket's figure.
// Memory: (levels + counters + samples) x kMaxBuckets doubles, whatever the run's length.
// Merging costs O(series x kMaxBuckets) and happens O(log(span)) times.
// Preconditions: times never go backwards. Thread-safety: none.
#pragma once

#include <array>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/idle.h"
#include "core/model/queue.h"
#include "core/model/types.h"

namespace gantry::sim {

class Timeline {
 public:
  static constexpr size_t kMaxBuckets = 2048;
  static constexpr core::Ticks kFirstWidth = core::kTicksPerSecond;

  // Level series; tiers and queues follow at TierLevel / QueueLevel.
  enum Level : uint32_t {
    kUpUnits,
    kUsedUnits,
    kPending,
    kMigUnits,
    kMpsUnits,
    kTimesliceUnits,
    kFixedLevels
  };
  static uint32_t TierLevel(core::Tier t) { return kFixedLevels + static_cast<uint32_t>(t); }
  static uint32_t QueueLevel(core::QueueId q) { return kFixedLevels + core::kTierCount + q.v; }
  enum Counter : uint32_t {
    kPreemptions,
    kRequeues,
    kReclaims,
    kLostPreempt,
    kLostRequeue,
    kLostReclaim,
    kCounters
  };
  // How a run ended (the lost-work counters are per cause).
  enum class Ending : uint8_t { kFinished, kPreempted, kRequeued, kReclaimed };
  // Why a pending job waits (the core's cause; not yet placed until its first pass).
  using WaitCause = core::WaitCause;
  static constexpr int kWaitCauses = core::kWaitCauses;
  // Free GPUs by why nothing uses them (core/idle.h), sampled with the fragmentation.
  using IdleGpus = core::IdleGpus;
  static constexpr int kIdleCauses = core::kIdleCauses;

  explicit Timeline(const core::QueueTree& queues);

  // From t on: GPU units up and allocated, and jobs pending.
  void SetState(core::Ticks t, core::GpuUnits up, core::GpuUnits used, size_t pending);
  void RunStarted(core::Ticks t, core::Tier tier, core::QueueId queue, core::Sharing sharing,
                  core::GpuUnits units);
  // `lost_ms` of the run's time was thrown away (counted per cause, in unit-ms).
  void RunEnded(core::Ticks t, core::Tier tier, core::QueueId queue, core::Sharing sharing,
                core::GpuUnits units, core::Ticks lost_ms, Ending how);
  // A pending job's cause changed at t (`from` or `to` null: it was not, or is no longer,
  // pending): the pending-jobs-by-cause levels.
  void Waiting(core::Ticks t, std::optional<WaitCause> from, std::optional<WaitCause> to);
  // True when t falls in a bucket that has no fragmentation sample yet.
  bool WantsSample(core::Ticks t) const;
  void SampleFragmentation(core::Ticks t, double fragmented_gpus, const IdleGpus& idle);
  // The run ended at t: levels are integrated up to t. Call once, last.
  void Finish(core::Ticks t);

  // Buckets covering [origin, end): the last may be partial (at least one bucket once
  // anything was observed).
  size_t buckets() const;
  core::Ticks origin() const { return origin_; }
  core::Ticks width() const { return width_; }
  // Time-weighted mean of a level over bucket i (units, or jobs for kPending).
  double Mean(uint32_t level, size_t i) const;
  // Time-weighted mean of a level over the whole timeline.
  double Mean(uint32_t level) const;
  double Count(Counter c, size_t i) const { return counters_[c][i]; }
  // Free GPUs by cause, time-weighted over the timeline (a bucket without a sample holds
  // the one before); zeros when nothing was sampled. Call after Finish.
  IdleGpus IdleMeans() const;

  // {"t0_s", "bucket_s", "end_s", "capacity_gpus", "allocated_gpus", "pending_jobs",
  //  "by_tier", "by_queue", "sharing_gpus", "fragmented_gpus", "preemptions",
  //  "requeues", "reclaims", "lost_gpu_hours", "queues", "pending_by_cause",
  //  "idle_gpus_by_cause"}; see
  //  docs/simulator.md.
  nlohmann::ordered_json ToJson() const;

 private:
  struct LevelSeries {
    double value = 0;         // in force since `since`
    core::Ticks since = 0;    // integrated up to here
    std::vector<double> sum;  // per bucket: value x ms
  };
  void Reach(core::Ticks t);  // makes t fall inside the buckets, merging as needed
  void Integrate(LevelSeries& s, core::Ticks t);  // adds [since, t) at `value`
  void Add(uint32_t level, core::Ticks t, double delta);
  void Merge();
  uint32_t CauseLevel(WaitCause c) const {
    return kFixedLevels + core::kTierCount + static_cast<uint32_t>(queues_.size()) +
           static_cast<uint32_t>(c);
  }
  size_t Index(core::Ticks t) const { return static_cast<size_t>((t - origin_) / width_); }
  core::Ticks BucketEnd(size_t i) const;

  const core::QueueTree& queues_;
  bool started_ = false, finished_ = false;
  core::Ticks origin_ = 0, width_ = kFirstWidth, end_ = 0;
  size_t used_buckets_ = 0;  // buckets touched so far
  std::vector<LevelSeries> levels_;
  std::vector<std::vector<double>> counters_;
  std::vector<double> frag_sum_;
  std::vector<std::vector<double>> idle_sum_;  // per IdleCause, per bucket
  std::vector<uint32_t> frag_n_;               // samples per bucket (of both)
  size_t last_sample_ = SIZE_MAX;              // bucket of the latest fragmentation sample
};

}  // namespace gantry::sim
