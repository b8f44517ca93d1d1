#include "sim/gen/generator.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <memory>
#include <utility>

#include "sim/convert/line_reader.h"
#include "sim/gen/random.h"

namespace gantry::gen {
namespace {

using convert::ClusterOut;
using convert::FailureOut;
using convert::JobOut;
using convert::PoolOut;
using convert::QueueOut;

constexpr double kHour = 3600;
constexpr double kDay = 86400;
constexpr double kPi = 3.141592653589793;

double Clamp(double x, double lo, double hi) { return std::min(hi, std::max(lo, x)); }
double Ms(double s) { return std::round(s * 1000) / 1000; }  // to the millisecond
double Tenth(double x) { return std::floor(x * 10) / 10; }   // GB to 0.1, down

// The cluster's shape, decided from the options.
struct Layout {
  int train = 0, infer = 0, spot = 0, cpu = 0;  // nodes per pool
  int train_leaf = 0, spot_leaf = 0;
  std::vector<std::string> teams;
  std::vector<double> team_weights;
  std::vector<int> gang_nodes;  // the gang kind's sizes
  std::vector<double> checkpoint_s;
  int max_gang_nodes() const { return std::max(1, std::min(16, train_leaf)); }
  int64_t gpus() const { return 8LL * (train + infer + spot); }
};

// Arrival intensity over the week, mean 1. Time 0 is Monday 00:00 UTC.
enum class Curve { kFlat, kDaily, kWorkWeek };

// Work-week curve: weekdays 09:00-18:00 eight times as busy as other hours.
constexpr double kWorkFraction = 5.0 * 9.0 / 168.0;
constexpr double kWorkRatio = 8;
constexpr double kWorkLow = 1.0 / (kWorkFraction * kWorkRatio + (1 - kWorkFraction));
constexpr double kWorkHigh = kWorkRatio * kWorkLow;

double CurveAt(Curve c, double t) {
  const double hour = std::fmod(t, kDay) / kHour;
  const int weekday = static_cast<int>(std::fmod(t, 7 * kDay) / kDay);  // 0 = Monday
  switch (c) {
    case Curve::kFlat:
      return 1;
    case Curve::kDaily:  // peaks at 14:00 UTC, lowest at 02:00; mean 1 over a day
      return 1 + 0.6 * std::cos(2 * kPi * (hour - 14) / 24);
    case Curve::kWorkWeek:
      return weekday < 5 && hour >= 9 && hour < 18 ? kWorkHigh : kWorkLow;
  }
  return 1;
}

const std::string& PickTeam(Random& rng, const Layout& l) {
  return l.teams[rng.Pick(l.team_weights)];
}

template <typename T>
T PickOf(Random& rng, const std::vector<std::pair<T, double>>& options) {
  std::vector<double> w;
  for (const auto& o : options) w.push_back(o.second);
  return options[rng.Pick(w)].first;
}

// What one arrival of each kind looks like: one job, or a sweep's burst of them. Ids
// and submit times are set by the caller.
using Arrival = std::vector<JobOut>;

// Real-time inference: critical, small, on the A100 pool.
Arrival DrawRealtime(Random& rng, const Layout&) {
  JobOut j;
  j.queue = "serving";
  j.tier = "critical";
  j.gpu_models = {"A100-80GB"};
  const size_t shape = rng.Pick(std::vector<double>{0.4, 0.25, 0.15, 0.2});
  static constexpr const char* kMig[] = {"1g.10gb", "2g.20gb", "3g.40gb"};
  static constexpr double kVram[][2] = {{4, 9.5}, {10, 19}, {20, 38}, {40, 75}};
  if (shape < 3) {
    j.mig = kMig[shape];
  } else {
    j.gpus = 1;
  }
  j.vram_gb = Tenth(rng.Uniform(kVram[shape][0], kVram[shape][1]));
  j.cpus = 4;
  j.memory_gb = 32;
  j.grace_s = 30;
  j.duration = Ms(Clamp(rng.LogNormal(2 * kHour, 0.8), 600, kDay));
  return {j};
}

// Batch inference: whole GPUs on any model (spot included), restartable.
Arrival DrawBatch(Random& rng, const Layout&) {
  JobOut j;
  j.queue = "batch";
  j.gpus = PickOf<int>(rng, {{1, 0.6}, {2, 0.25}, {4, 0.15}});
  j.vram_gb = Tenth(rng.Uniform(20, 60));
  j.cpus = 8 * j.gpus;
  j.memory_gb = 64 * j.gpus;
  j.checkpoint_s = 600;
  j.grace_s = 30;
  j.duration = Ms(Clamp(rng.LogNormal(40 * 60, 0.9), 300, 8 * kHour));
  return {j};
}

// A team's job of `nodes` whole 8-GPU H100 nodes (training and grid gangs): its queue,
// then its VRAM, drawn in that order.
JobOut WholeNodes(Random& rng, const Layout& l, int nodes) {
  JobOut j;
  j.queue = PickTeam(rng, l);
  j.replicas = nodes;
  j.gpus = 8;
  j.gpu_models = {"H100-80GB"};
  j.vram_gb = Tenth(rng.Uniform(50, 78));
  j.cpus = 96;
  j.memory_gb = 1000;
  return j;
}

// A gang's run time: lognormal around `median` (sigma 1), longer for more nodes, from 30
// minutes to 4 days.
double GangDuration(Random& rng, double median, int nodes) {
  const double scale = 1 + std::log2(static_cast<double>(nodes)) / 4;
  return Ms(Clamp(rng.LogNormal(median, 1.0) * scale, 1800, 4 * kDay));
}

// Training gangs: 1-16 nodes x 8 H100, within one node or one leaf, checkpointed.
Arrival DrawTraining(Random& rng, const Layout& l) {
  std::vector<std::pair<int, double>> sizes;
  for (auto [n, w] :
       std::vector<std::pair<int, double>>{{1, 0.45}, {2, 0.2}, {4, 0.17}, {8, 0.12}, {16, 0.06}}) {
    if (n <= l.max_gang_nodes()) sizes.emplace_back(n, w);
  }
  const int nodes = PickOf<int>(rng, sizes);
  JobOut j = WholeNodes(rng, l, nodes);
  j.topology = nodes == 1 ? "node" : "leaf";
  j.checkpoint_s = PickOf<double>(rng, {{900, 0.3}, {1800, 0.4}, {3600, 0.3}});
  j.grace_s = PickOf<double>(rng, {{60, 0.4}, {120, 0.4}, {300, 0.2}});
  j.duration = GangDuration(rng, 6 * kHour, nodes);
  return {j};
}

// Notebooks: best-effort GPU shares that go idle (and are reclaimed).
Arrival DrawNotebook(Random& rng, const Layout& l) {
  JobOut j;
  j.queue = PickTeam(rng, l);
  j.tier = "best-effort";
  j.sharing = rng.Chance(0.6) ? "mps" : "timeslice";
  j.gpus = PickOf<double>(rng, {{0.125, 0.15}, {0.25, 0.5}, {0.5, 0.35}});
  j.gpu_models = {"A100-80GB"};
  j.vram_gb = Tenth(j.gpus * 80 * 0.9);
  j.cpus = 4;
  j.memory_gb = 32;
  j.duration = Ms(rng.Uniform(2 * kHour, 10 * kHour));
  j.idle_after_s = Ms(j.duration * rng.Uniform(0.2, 0.7));
  return {j};
}

// Sweeps: a burst of 10-60 identical small jobs submitted at once.
Arrival DrawSweep(Random& rng, const Layout& l) {
  JobOut j;
  j.queue = PickTeam(rng, l);
  j.gpus = PickOf<int>(rng, {{1, 0.8}, {2, 0.2}});
  j.gpu_models = {"H100-80GB", "A100-80GB"};
  j.vram_gb = Tenth(rng.Uniform(10, 40));
  j.cpus = 8;
  j.memory_gb = 64;
  j.checkpoint_s = 600;
  j.grace_s = 30;
  const double base = Clamp(rng.LogNormal(30 * 60, 0.6), 300, 4 * kHour);
  Arrival burst(static_cast<size_t>(rng.Int(10, 60)), j);
  for (JobOut& b : burst) b.duration = Ms(base * rng.Uniform(0.9, 1.1));
  return burst;
}

// Fine-tuning: one node, may start only between 20:00 and 08:00 UTC.
Arrival DrawFinetune(Random& rng, const Layout& l) {
  JobOut j;
  j.queue = PickTeam(rng, l);
  j.gpus = rng.Chance(0.6) ? 8 : 4;
  j.gpu_models = {"H100-80GB"};
  j.vram_gb = Tenth(rng.Uniform(40, 78));
  j.cpus = 48;
  j.memory_gb = 500;
  j.topology = "node";
  j.window = convert::WindowOut{"20:00", "08:00"};
  j.checkpoint_s = 1800;
  j.grace_s = 120;
  j.duration = Ms(Clamp(rng.LogNormal(3 * kHour, 0.5), 1800, 10 * kHour));
  return {j};
}

// CPU-only data preparation.
Arrival DrawCpu(Random& rng, const Layout&) {
  JobOut j;
  j.queue = "batch";
  j.cpus = PickOf<double>(rng, {{8, 0.5}, {16, 0.3}, {32, 0.2}});
  j.memory_gb = j.cpus * 4;
  j.duration = Ms(Clamp(rng.LogNormal(30 * 60, 0.8), 60, 6 * kHour));
  return {j};
}

// The checkpoint interval of a grid kind's job: one of the options' list.
double DrawCheckpoint(Random& rng, const Layout& l) {
  return l.checkpoint_s[rng.Index(l.checkpoint_s.size())];
}

// Gangs for policy grids: nodes x 8 H100 GPUs, each size equally likely by GPU-hours,
// within a leaf where one holds them, else across the spine.
Arrival DrawGang(Random& rng, const Layout& l) {
  std::vector<double> weights;  // 1/size: each size about the same share of GPU-hours
  for (int n : l.gang_nodes) weights.push_back(1.0 / n);
  const int nodes = l.gang_nodes[rng.Pick(weights)];
  JobOut j = WholeNodes(rng, l, nodes);
  j.topology = nodes <= l.train_leaf ? "leaf" : "spine";
  j.checkpoint_s = DrawCheckpoint(rng, l);
  j.grace_s = PickOf<double>(rng, {{60, 0.5}, {120, 0.3}, {300, 0.2}});
  j.duration = GangDuration(rng, 4 * kHour, nodes);
  return {j};
}

// A grid job of a team on one H100 node, its GPUs drawn from `gpus`: its queue, GPUs,
// VRAM and checkpoint interval, drawn in that order (the caller draws its run time).
JobOut OnOneNode(Random& rng, const Layout& l, const std::vector<std::pair<int, double>>& gpus) {
  JobOut j;
  j.queue = PickTeam(rng, l);
  j.gpus = PickOf<int>(rng, gpus);
  j.gpu_models = {"H100-80GB"};
  j.vram_gb = Tenth(rng.Uniform(20, 70));
  j.cpus = 12 * j.gpus;
  j.memory_gb = 128 * j.gpus;
  j.topology = "node";
  j.checkpoint_s = DrawCheckpoint(rng, l);
  j.grace_s = 30;
  return j;
}

// Small jobs for policy grids: 1, 2 or 4 H100 GPUs on one node.
Arrival DrawSmall(Random& rng, const Layout& l) {
  JobOut j = OnOneNode(rng, l, {{1, 0.5}, {2, 0.3}, {4, 0.2}});
  j.duration = Ms(Clamp(rng.LogNormal(kHour, 1.0), 300, kDay));
  return {j};
}

// Best-effort work for policy grids: 1-8 H100 GPUs on one node, first to be preempted.
Arrival DrawScavenger(Random& rng, const Layout& l) {
  JobOut j = OnOneNode(rng, l, {{1, 0.4}, {2, 0.25}, {4, 0.2}, {8, 0.15}});
  j.tier = "best-effort";
  j.duration = Ms(Clamp(rng.LogNormal(2 * kHour, 1.0), 600, 2 * kDay));
  return {j};
}

struct Kind {
  std::string name;
  std::string id_prefix;
  Curve curve = Curve::kFlat;
  double share = 0;          // of the offered GPU-hours
  double rate_per_hour = 0;  // instead of a share: CPU work
  Arrival (*draw)(Random&, const Layout&) = nullptr;
};

std::vector<Kind> MakeKinds(const Mix& mix, const Layout& l) {
  return {
      {"realtime", "rt-", Curve::kDaily, mix.realtime, 0, DrawRealtime},
      {"batch", "bi-", Curve::kFlat, mix.batch, 0, DrawBatch},
      {"training", "tr-", Curve::kFlat, mix.training, 0, DrawTraining},
      {"notebook", "nb-", Curve::kWorkWeek, mix.notebook, 0, DrawNotebook},
      {"sweep", "sw-", Curve::kFlat, mix.sweep, 0, DrawSweep},
      {"finetune", "ft-", Curve::kFlat, mix.finetune, 0, DrawFinetune},
      // One CPU job per CPU node per hour; not part of the GPU load.
      {"cpu", "cpu-", Curve::kFlat, 0, static_cast<double>(l.cpu), DrawCpu},
      // Appended, so the kinds above keep their streams (MixSeed by position).
      {"gang", "gg-", Curve::kFlat, mix.gang, 0, DrawGang},
      {"small", "sm-", Curve::kFlat, mix.small, 0, DrawSmall},
      {"scavenger", "be-", Curve::kFlat, mix.scavenger, 0, DrawScavenger},
  };
}

double ArrivalGpuHours(const std::vector<JobOut>& jobs) {
  double h = 0;
  for (const JobOut& j : jobs) h += j.total_gpus() * j.duration / kHour;
  return h;
}

// The cumulative intensity of a curve over one week, per minute, to turn uniform
// draws into arrival times that follow the curve (inverse transform).
class CurveClock {
 public:
  explicit CurveClock(Curve c) : cum_(kMinutes + 1, 0) {
    for (int m = 0; m < kMinutes; ++m) cum_[m + 1] = cum_[m] + CurveAt(c, (m + 0.5) * 60);
  }
  double Cumulative(double t) const {  // in curve-minutes
    const double week = std::floor(t / kWeek);
    const double m = (t - week * kWeek) / 60;
    const auto i = std::min(kMinutes - 1, static_cast<int>(m));
    return week * cum_[kMinutes] + cum_[i] + (m - i) * (cum_[i + 1] - cum_[i]);
  }
  double Inverse(double x) const {
    const double week = std::floor(x / cum_[kMinutes]);
    const double r = x - week * cum_[kMinutes];
    const auto it = std::upper_bound(cum_.begin(), cum_.end(), r);
    const auto i = std::clamp(static_cast<int>(it - cum_.begin()) - 1, 0, kMinutes - 1);
    const double span = cum_[i + 1] - cum_[i];
    const double frac = span > 0 ? (r - cum_[i]) / span : 0;
    return week * kWeek + (i + frac) * 60;
  }

 private:
  static constexpr int kMinutes = 7 * 24 * 60;
  static constexpr double kWeek = 7 * kDay;
  std::vector<double> cum_;
};

// Jobs of one kind in submit order. The number of arrivals is fixed first: shapes are
// drawn (from their own stream) until their GPU-hours come closest to the kind's share
// of the load; the arrival times are then the order statistics of that many draws from
// the kind's curve over the period, i.e. a Poisson process conditioned on the count.
// They are produced one at a time from cumulative exponential spacings (two passes
// over the same seeded stream: one for the sum, one to emit), so nothing is stored.
class Stream {
 public:
  Stream(const Kind& kind, const Layout& layout, double target_gpu_hours, int64_t fixed_count,
         double horizon, uint64_t seed, bool observed_usage, double elastic)
      : kind_(kind),
        layout_(layout),
        clock_(kind.curve),
        shapes_(MixSeed(seed, 0)),
        times_(MixSeed(seed, 1)),
        usage_(MixSeed(seed, 2)),
        elastic_rng_(MixSeed(seed, 3)),
        observed_usage_(observed_usage),
        elastic_(elastic) {
    count_ = fixed_count;
    if (target_gpu_hours > 0) {
      Random probe(MixSeed(seed, 0));
      double sum = 0;
      count_ = 0;
      while (sum < target_gpu_hours) {
        const double w = ArrivalGpuHours(kind.draw(probe, layout));
        if (w <= 0) break;
        // Take the arrival that crosses the target only if that lands closer to it.
        if (sum + w - target_gpu_hours > target_gpu_hours - sum) break;
        sum += w;
        ++count_;
      }
    }
    Random probe(MixSeed(seed, 1));
    for (int64_t i = 0; i <= count_; ++i) spacing_sum_ += probe.Exp(1);
    span_ = clock_.Cumulative(horizon);
  }

  // The next job, or false when the kind has no more.
  bool Next(JobOut& out) {
    if (pending_.empty()) {
      if (emitted_ >= count_) return false;
      ++emitted_;
      spacing_ += times_.Exp(1);
      const double submit = Ms(clock_.Inverse(spacing_ / spacing_sum_ * span_));
      for (JobOut& j : kind_.draw(shapes_, layout_)) {
        j.id = kind_.id_prefix + std::to_string(++jobs_);
        j.submit = submit;
        if (observed_usage_ && j.uses_gpu()) DrawUsage(j);
        if (elastic_ > 0 && j.replicas > 1 && j.sharing.empty() && j.mig.empty() &&
            j.checkpoint_s > 0 && elastic_rng_.Uniform(0, 1) < elastic_)
          j.min_replicas = (j.replicas + 1) / 2;
        pending_.push_back(std::move(j));
      }
    }
    out = std::move(pending_.front());
    pending_.pop_front();
    return true;
  }

 private:
  // What a job of this kind was seen to use: utilization of what it holds while busy
  // and peak VRAM as a fraction of what it asked. Illustrative ranges: training and
  // fine-tuning keep their GPUs busy and full; inference, sweeps and notebooks often ask
  // far more than they use (the right-sizing case).
  void DrawUsage(JobOut& j) {
    struct Range {
      double util_lo, util_hi, vram_lo, vram_hi;
    };
    const Range r = kind_.name == "training"   ? Range{0.70, 0.97, 0.70, 1.00}
                    : kind_.name == "finetune" ? Range{0.55, 0.95, 0.60, 1.00}
                    : kind_.name == "realtime" ? Range{0.10, 0.60, 0.15, 0.60}
                    : kind_.name == "notebook" ? Range{0.05, 0.50, 0.10, 0.60}
                                               : Range{0.20, 0.90, 0.15, 0.90};
    j.util = std::round(usage_.Uniform(r.util_lo, r.util_hi) * 100) / 100;
    // vram_gb is per GPU for whole GPUs; vram_used_gb is what one worker used in all.
    j.vram_used_gb =
        Tenth(j.vram_gb * std::max(1.0, j.gpus) * usage_.Uniform(r.vram_lo, r.vram_hi));
  }

  const Kind& kind_;
  const Layout& layout_;
  CurveClock clock_;
  Random shapes_, times_, usage_, elastic_rng_;
  bool observed_usage_ = false;
  double elastic_ = 0;
  int64_t count_ = 0, emitted_ = 0, jobs_ = 0;
  double spacing_sum_ = 0, spacing_ = 0, span_ = 0;
  std::deque<JobOut> pending_;
};

Layout MakeLayout(const GenOptions& o, const Mix& mix) {
  Layout l;
  const int nodes = std::max(2, static_cast<int>(std::lround(o.gpus / 8.0)));
  if (o.spot > 0 && nodes >= 3) {
    l.spot = std::clamp(static_cast<int>(std::lround(nodes * o.spot)), 1, nodes - 2);
  }
  const double infer_share = mix.realtime + mix.notebook + 0.5 * mix.batch;
  // No inference pool where no kind needs one (a grid's all-H100 cluster).
  l.infer =
      infer_share == 0 && mix.sweep == 0
          ? 0
          : std::clamp(static_cast<int>(std::lround(nodes * infer_share)), 1, nodes - l.spot - 1);
  l.train = nodes - l.spot - l.infer;
  l.cpu = o.cpu_nodes >= 0 ? o.cpu_nodes : std::max(1, o.gpus / 128);
  l.train_leaf = std::min(o.leaf_nodes, l.train);
  l.spot_leaf = std::min(o.leaf_nodes, std::max(1, l.spot));
  for (int i = 0; i < o.teams; ++i) {
    l.teams.push_back(std::string("team-") + static_cast<char>('a' + i));
    l.team_weights.push_back(o.equal_teams ? 1 : o.teams - i);  // else a is the largest
  }
  l.gang_nodes = o.gang_nodes;
  if (l.gang_nodes.empty()) {
    const int half = std::max(2, l.train / 2);
    for (int n = 2; n < half; n *= 2) l.gang_nodes.push_back(n);
    l.gang_nodes.push_back(half);
  }
  l.checkpoint_s = o.checkpoint_s.empty() ? std::vector<double>{0} : o.checkpoint_s;
  return l;
}

ClusterOut MakeCluster(const GenOptions& o, const Layout& l) {
  ClusterOut c;
  c.name = "gen";
  c.comments = {"Generated by `gantry gen --seed " + std::to_string(o.seed) + " --gpus " +
                std::to_string(o.gpus) + " --days " + convert::Num(o.days) + " --load " +
                convert::Num(o.load) + (o.guarantees_by_model ? " --guarantees-by-model" : "") +
                "`; see docs/traces.md."};
  auto gpu_pool = [](std::string name, int count, std::string model, int leaf, double cpus,
                     double mem) {
    PoolOut p;
    p.name = std::move(name);
    p.count = count;
    p.gpus = 8;
    p.gpu_model = std::move(model);
    p.nvlink_domains = 1;
    p.leaf_size = leaf;
    p.cpus = cpus;
    p.memory_gb = mem;
    return p;
  };
  c.pools.push_back(gpu_pool("h100", l.train, "H100-80GB", l.train_leaf, 224, 2048));
  if (l.infer > 0) {
    PoolOut a100 =
        gpu_pool("a100", l.infer, "A100-80GB", std::min(o.leaf_nodes, l.infer), 128, 1024);
    a100.sharing = {"mig", "mps", "timeslice"};
    c.pools.push_back(a100);
  }
  if (l.spot > 0) {
    PoolOut spot = gpu_pool("h100-spot", l.spot, "H100-80GB", l.spot_leaf, 224, 2048);
    spot.spot = true;
    c.pools.push_back(spot);
  }
  if (l.cpu > 0) {
    PoolOut cpu;
    cpu.name = "cpu";
    cpu.count = l.cpu;
    cpu.cpus = 64;
    cpu.memory_gb = 256;
    c.pools.push_back(cpu);
  }
  // Queues: serving holds most of the inference pool, batch a tenth of the cluster;
  // research (the teams' parent) 80% of the training pool, split by team weight.
  // Every burst is at least the largest job its queue can receive.
  const double n = static_cast<double>(l.gpus());
  const double infer = 8.0 * l.infer;
  if (l.infer > 0) {
    c.queues.push_back({"serving", "", std::floor(0.6 * infer), infer, 2});
    if (o.guarantees_by_model)
      c.queues.back().guaranteed_by_model = {{"A100-80GB", std::floor(0.6 * infer)}};
  }
  c.queues.push_back({"batch", "", std::floor(0.1 * n), std::max(8.0, std::floor(n / 2)), 1});
  const double research = std::floor(0.8 * 8 * l.train);
  c.queues.push_back({"research", "", research, n, 1});
  if (o.guarantees_by_model) c.queues.back().guaranteed_by_model = {{"H100-80GB", research}};
  std::vector<double> weights(l.team_weights.begin(), l.team_weights.end());
  const std::vector<double> g =
      convert::ProportionalGuarantees(weights, static_cast<int64_t>(research));
  for (size_t i = 0; i < l.teams.size(); ++i) {
    c.queues.push_back({l.teams[i], "research", g[i], n, l.team_weights[i]});
    if (o.guarantees_by_model) c.queues.back().guaranteed_by_model = {{"H100-80GB", g[i]}};
  }
  c.reclaim_idle_after_s = o.reclaim_idle_after_s;
  return c;
}

std::vector<FailureOut> MakeFailures(const GenOptions& o, const Layout& l, double horizon) {
  std::vector<FailureOut> out;
  Random rng(MixSeed(o.seed, 50));
  auto node_failures = [&](const std::string& pool, int count) {
    if (o.node_failures_per_day <= 0) return;
    const double mean_gap = kDay / o.node_failures_per_day;
    for (int i = 0; i < count; ++i) {
      for (double t = rng.Exp(mean_gap); t < horizon; t += rng.Exp(mean_gap)) {
        out.push_back({Ms(t), pool + "-" + std::to_string(i),
                       Ms(Clamp(rng.LogNormal(kHour, 0.8), 300, kDay))});
      }
    }
  };
  node_failures("h100", l.train);
  node_failures("a100", l.infer);
  if (l.spot > 0 && o.spot_revocations_per_day > 0) {
    const double mean_gap = kDay / o.spot_revocations_per_day;
    for (double t = rng.Exp(mean_gap); t < horizon; t += rng.Exp(mean_gap)) {
      const auto node = static_cast<int>(rng.Index(static_cast<uint64_t>(l.spot)));
      out.push_back({Ms(t), "h100-spot-" + std::to_string(node), Ms(rng.Uniform(1800, 4 * kHour))});
    }
  }
  return out;
}

}  // namespace

Result<Mix> ParseMix(const std::string& text) {
  Mix mix;
  if (text.empty()) return mix;
  for (std::string_view item : convert::SplitFields(text, ',')) {
    const size_t eq = item.find('=');
    const std::string key(item.substr(0, eq));
    std::optional<double> v =
        eq == std::string_view::npos ? std::nullopt : convert::ParseDouble(item.substr(eq + 1));
    if (!v || *v < 0) {
      return Error{"--mix", "expected KIND=SHARE with a share of at least 0, got \"" +
                                std::string(item) + "\""};
    }
    double* slot = key == "realtime"    ? &mix.realtime
                   : key == "batch"     ? &mix.batch
                   : key == "training"  ? &mix.training
                   : key == "notebook"  ? &mix.notebook
                   : key == "sweep"     ? &mix.sweep
                   : key == "finetune"  ? &mix.finetune
                   : key == "gang"      ? &mix.gang
                   : key == "small"     ? &mix.small
                   : key == "scavenger" ? &mix.scavenger
                                        : nullptr;
    if (slot == nullptr) {
      return Error{"--mix", "unknown kind \"" + key +
                                "\" (known: realtime, batch, training, notebook, sweep, "
                                "finetune, gang, small, scavenger)"};
    }
    *slot = *v;
  }
  return mix;
}

Result<GenSummary> Generate(const GenOptions& o) {
  if (o.gpus < 16 || o.gpus > 1'000'000) return Error{"--gpus", "must be between 16 and 1000000"};
  if (!(o.days > 0) || o.days > 3650) return Error{"--days", "must be above 0 and at most 3650"};
  if (!(o.load >= 0) || o.load > 100) return Error{"--load", "must be between 0 and 100"};
  if (o.teams < 1 || o.teams > 26) return Error{"--teams", "must be between 1 and 26"};
  if (!(o.spot >= 0) || o.spot >= 1) return Error{"--spot", "must be at least 0 and below 1"};
  if (o.out.empty()) return Error{"--out", "required: the folder to write to"};
  if (o.leaf_nodes < 1) return Error{"--leaf-nodes", "must be at least 1"};
  for (int n : o.gang_nodes) {
    if (n < 2) return Error{"--gang-nodes", "each size must be at least 2 nodes"};
  }
  for (double c : o.checkpoint_s) {
    if (!(c >= 0)) return Error{"--checkpoint-s", "each interval must be at least 0"};
  }
  Mix mix = o.mix;
  const std::vector<double*> shares = {&mix.realtime, &mix.batch, &mix.training,
                                       &mix.notebook, &mix.sweep, &mix.finetune,
                                       &mix.gang,     &mix.small, &mix.scavenger};
  double total = 0;
  for (const double* s : shares) total += *s;
  if (!(total > 0)) return Error{"--mix", "the shares add up to 0"};
  for (double* s : shares) *s /= total;

  const Layout layout = MakeLayout(o, mix);
  if (mix.gang > 0 &&
      *std::max_element(layout.gang_nodes.begin(), layout.gang_nodes.end()) > layout.train) {
    return Error{"--gang-nodes", "a gang of more nodes than the " + std::to_string(layout.train) +
                                     " of the H100 pool"};
  }
  const ClusterOut cluster = MakeCluster(o, layout);
  const double horizon = o.days * kDay;
  GenSummary summary;
  summary.gpus = layout.gpus();
  summary.nodes = layout.train + layout.infer + layout.spot + layout.cpu;
  summary.capacity_gpu_hours = static_cast<double>(summary.gpus) * horizon / kHour;

  // Each kind offers its share of the load; CPU work comes at a fixed rate.
  const std::vector<Kind> kinds = MakeKinds(mix, layout);
  std::vector<std::unique_ptr<Stream>> streams;
  for (size_t k = 0; k < kinds.size(); ++k) {
    const double target = kinds[k].share * o.load * summary.capacity_gpu_hours;
    const auto fixed = static_cast<int64_t>(std::llround(kinds[k].rate_per_hour * horizon / kHour));
    streams.push_back(std::make_unique<Stream>(kinds[k], layout, target,
                                               kinds[k].share > 0 ? 0 : fixed, horizon,
                                               MixSeed(o.seed, k), o.observed_usage, o.elastic));
  }

  auto cluster_path = convert::OutPath(o.out, "cluster.yaml");
  if (!cluster_path.ok()) return cluster_path.error();
  if (Status s = convert::WriteCluster(*cluster_path, cluster); !s.ok()) return s.error();
  auto trace_path = convert::OutPath(o.out, "trace.jsonl");
  if (!trace_path.ok()) return trace_path.error();
  convert::TraceWriter writer;
  if (Status s = writer.Open(*trace_path); !s.ok()) return s.error();
  // Merge the streams by (submit, kind order): one head per stream.
  std::vector<std::optional<JobOut>> heads(streams.size());
  for (size_t k = 0; k < streams.size(); ++k) {
    JobOut j;
    if (streams[k]->Next(j)) heads[k] = std::move(j);
  }
  while (true) {
    size_t best = heads.size();
    for (size_t k = 0; k < heads.size(); ++k) {
      if (heads[k] && (best == heads.size() || heads[k]->submit < heads[best]->submit)) best = k;
    }
    if (best == heads.size()) break;
    KindStats& ks = summary.kinds[kinds[best].name];
    ++ks.jobs;
    ks.gpu_hours += heads[best]->total_gpus() * heads[best]->duration / kHour;
    if (Status s = writer.Add(*heads[best]); !s.ok()) return s.error();
    JobOut j;
    if (streams[best]->Next(j)) {
      heads[best] = std::move(j);
    } else {
      heads[best].reset();
    }
  }
  if (Status s = writer.Close(); !s.ok()) return s.error();
  summary.trace = writer.stats();

  std::vector<FailureOut> failures = MakeFailures(o, layout, horizon);
  summary.failures = static_cast<int64_t>(failures.size());
  auto failures_path = convert::OutPath(o.out, "failures.jsonl");
  if (!failures_path.ok()) return failures_path.error();
  if (Status s = convert::WriteFailures(*failures_path, std::move(failures)); !s.ok()) {
    return s.error();
  }
  summary.files = {*cluster_path, *trace_path, *failures_path};
  return summary;
}

}  // namespace gantry::gen
