// Core benchmarks (issue 5): placement decisions per second and decision latency of the
// scheduling core, in memory, with no files, clocks or threads in the core itself.
//
// The cluster (MakeCluster): `gpus` / 8 nodes of 8 x H100-80GB, leaves of 16 nodes, in
// two pools: four fifths exclusive (whole GPUs, single-node jobs, gangs with topology
// leaf) and one fifth with sharing mig+mps (MIG instances and MPS shares). At 10,000
// GPUs that is the 1,250 nodes: 1,000 exclusive and 250 mig/mps nodes.
// 20 queues with guarantees (80% of the cluster in all, by weight) and burst limits.
// Jobs (JobMaker, std::mt19937_64 with fixed seeds): 40% one GPU, 10% one worker of
// 2/4/8 GPUs on one node, 10% gangs of 2-16 nodes x 8 GPUs in one leaf, 25% MIG
// instances (1g.10gb .. 7g.80gb), 15% MPS shares (0.1 .. 0.5 GPU); 5% critical,
// 75% standard, 20% best-effort; 80% carry a runtime estimate.
//
// Three ways to time one decision (a decision = one placement attempt of one job,
// started or not):
//   schedule/<policy>/...: whole Scheduler::Schedule passes over a pending backlog, each
//     after a churn step (finishes, requeues of preempted jobs, as many new arrivals as
//     finishes), so every pass is a full pass; per-decision cost = pass time divided by
//     the jobs the pass considered. `<policy>-timed` runs the same passes with a clock
//     read at every Scheduler::TryStart (Scheduler::set_decision_hook), for the latency
//     of single decisions, preemption and reservation what-ifs included.
//   place/<fit>/...: single Placer::Place calls on a ledger kept at ~85% of its GPU units
//     by releasing random running allocations after each success. `fgd` is best fit
//     scored by fragmentation with the job stream's mix, as the gantry policy places.
// Every iteration's time is taken with std::chrono::steady_clock (manual time); passes
// also record this thread's CPU time, since the machine may be shared. The churn and
// releases between decisions are not timed. Scale curve: scale/... and scale-place/...
// repeat both for 1k/10k/100k GPUs and 1k/10k/100k pending jobs. GANTRY_BENCH_TRACE=1
// prints each timed pass (CPU ms, jobs considered, starts, pending) on stderr: the first
// passes after the settle pass start the claimants of its preemptions.
// Never part of the test suite; scripts/bench.sh runs it and docs/benchmarks.md has the
// figures. Single-threaded.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/fragmentation.h"
#include "core/ledger.h"
#include "core/model/cluster.h"
#include "core/model/job.h"
#include "core/model/queue.h"
#include "core/placement.h"
#include "core/scheduler.h"

namespace gantry::bench {
namespace {

using core::Allocation;
using core::Catalog;
using core::Cluster;
using core::Decision;
using core::Fit;
using core::GpuUnits;
using core::JobId;
using core::JobSpec;
using core::kGB;
using core::kGpuUnits;
using core::Ledger;
using core::ModelId;
using core::Phase;
using core::Placer;
using core::PoolSpec;
using core::QueueId;
using core::QueueSpec;
using core::QueueTree;
using core::Scheduler;
using core::Sharing;
using core::Ticks;
using core::Tier;
using core::Topology;

using Clock = std::chrono::steady_clock;

constexpr int kGpusPerNode = 8;
constexpr int kLeafNodes = 16;
constexpr int kQueues = 20;
constexpr uint64_t kJobSeed = 0x6a6f62735f353231;    // the job stream
constexpr uint64_t kChurnSeed = 0x636875726e5f3035;  // which jobs finish, which are released
constexpr double kPlaceFill = 0.85;                  // place/...: held GPU units over capacity
constexpr Ticks kBacklogSpan = 8 * 3'600'000;        // the backlog arrived over 8 hours
constexpr Ticks kStep = 10'000;                      // virtual time between passes
constexpr int kChurn = 32;                           // finishes and arrivals between passes

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "core_bench: %s\n", what.c_str());
  std::abort();
}

int64_t Nanos(Clock::duration d) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(d).count();
}

// CPU time of this thread: on a shared machine, wall time also counts the time other
// processes held the core; CPU time is what the work itself cost.
int64_t ThreadCpuNanos() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
}

Cluster MakeCluster(int gpus) {
  Catalog catalog = Catalog::BuiltIn();
  const std::optional<ModelId> h100 = catalog.Find("H100-80GB");
  if (!h100) Die("no H100-80GB in the built-in catalog");
  const int nodes = gpus / kGpusPerNode;
  const int split_nodes = nodes / 5;
  PoolSpec whole;
  whole.name = "h100";
  whole.count = nodes - split_nodes;
  whole.gpus = kGpusPerNode;
  whole.model = *h100;
  whole.nvlink_domains = 1;
  whole.leaf_size = kLeafNodes;
  whole.cpus_milli = 224'000;
  whole.memory_bytes = 2048 * kGB;
  whole.sharing = core::Bit(Sharing::kExclusive);
  PoolSpec split = whole;
  split.name = "h100-shared";
  split.count = split_nodes;
  split.sharing = core::Bit(Sharing::kMig) | core::Bit(Sharing::kMps);
  auto cluster = Cluster::Build("bench", std::move(catalog), {whole, split});
  if (!cluster.ok()) Die(cluster.error().ToString());
  return std::move(cluster).value();
}

// 20 root queues, weights 1-4; guarantees share 80% of the GPUs by weight; each may burst
// to 30% of the cluster.
QueueTree MakeQueues(const Cluster& cluster) {
  const GpuUnits total = static_cast<GpuUnits>(cluster.gpu_count()) * kGpuUnits;
  std::vector<QueueSpec> specs;
  int weight_sum = 0;
  for (int q = 0; q < kQueues; ++q) weight_sum += 1 + q % 4;
  for (int q = 0; q < kQueues; ++q) {
    QueueSpec s;
    s.name = "team-" + std::to_string(q);
    s.weight = 1 + q % 4;
    s.guaranteed = total * 8 / 10 * (1 + q % 4) / weight_sum;
    s.burst = total * 3 / 10;
    specs.push_back(std::move(s));
  }
  auto queues = QueueTree::Build(std::move(specs));
  if (!queues.ok()) Die(queues.error().ToString());
  return std::move(queues).value();
}

// The job stream. Deterministic for a seed (the distributions are libstdc++'s).
class JobMaker {
 public:
  JobMaker(const Catalog& catalog, uint64_t seed) : catalog_(catalog), rng_(seed) {}

  JobSpec Next() {
    JobSpec j;
    j.id = "j" + std::to_string(count_++);
    j.queue = QueueId(static_cast<uint32_t>(Uniform(0, kQueues - 1)));
    const int tier = Uniform(0, 99);
    j.tier = tier < 5 ? Tier::kCritical : tier < 80 ? Tier::kStandard : Tier::kBestEffort;
    j.models = (core::ModelMask{1} << catalog_.size()) - 1;  // any model
    j.mig_index.assign(catalog_.size(), -1);
    if (Uniform(0, 99) < 80) {  // 5 min .. 24 h, log-uniform
      std::uniform_real_distribution<double> u(std::log(300e3), std::log(86'400e3));
      j.runtime_estimate = static_cast<Ticks>(std::exp(u(rng_)));
    }
    j.grace = 30'000;
    const int kind = Uniform(0, 99);
    if (kind < 40) {  // one GPU
      Whole(j, 1, 1, Topology::kSpine);
    } else if (kind < 50) {  // one worker of 2, 4 or 8 GPUs on one node
      Whole(j, 1, 2 << Uniform(0, 2), Topology::kNode);
    } else if (kind < 60) {  // gang of 2-16 nodes x 8 GPUs in one leaf
      Whole(j, Uniform(2, 16), kGpusPerNode, Topology::kLeaf);
      j.checkpoint = 1'800'000;
    } else if (kind < 85) {  // one MIG instance
      static constexpr const char* kProfiles[] = {"1g.10gb", "1g.10gb", "1g.10gb", "1g.10gb",
                                                  "2g.20gb", "2g.20gb", "2g.20gb", "3g.40gb",
                                                  "3g.40gb", "7g.80gb"};
      j.sharing = Sharing::kMig;
      j.mig_profile = kProfiles[Uniform(0, 9)];
      for (size_t m = 0; m < catalog_.size(); ++m) {
        j.mig_index[m] = static_cast<int8_t>(
            catalog_.FindProfile(ModelId(static_cast<uint32_t>(m)), j.mig_profile));
      }
      j.vram_bytes = 5 * kGB;
      j.cpus_milli = 4'000;
      j.memory_bytes = 32 * kGB;
    } else {  // one MPS share
      static constexpr int kShares[] = {100, 200, 250, 500};
      const int s = Uniform(0, 3);
      j.sharing = Sharing::kMps;
      j.share_milli = kShares[s];
      j.vram_bytes = (8 << s) * kGB;
      j.cpus_milli = 4'000;
      j.memory_bytes = 32 * kGB;
    }
    return j;
  }

 private:
  static void Whole(JobSpec& j, int replicas, int gpus, Topology topology) {
    j.replicas = replicas;
    j.gpus = gpus;
    j.topology = topology;
    j.vram_bytes = 40 * kGB;
    j.cpus_milli = 16'000 * gpus;
    j.memory_bytes = 128 * kGB * gpus;
  }
  int Uniform(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }

  const Catalog& catalog_;
  std::mt19937_64 rng_;
  uint64_t count_ = 0;
};

struct Percentiles {
  double p50 = 0, p99 = 0, p999 = 0, max = 0;
};

// Nearest-rank percentiles of `v` (reordered).
template <typename T>
Percentiles Summarize(std::vector<T>& v) {
  Percentiles p;
  if (v.empty()) return p;
  auto at = [&](double q) {
    const size_t k =
        std::min(v.size() - 1, static_cast<size_t>(std::ceil(q * static_cast<double>(v.size()))) -
                                   (q > 0 ? 1 : 0));
    std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(k), v.end());
    return static_cast<double>(v[k]);
  };
  p.p50 = at(0.50);
  p.p99 = at(0.99);
  p.p999 = at(0.999);
  p.max = static_cast<double>(*std::max_element(v.begin(), v.end()));
  return p;
}

// ---- schedule/...: whole passes ---------------------------------------------------

// Wraps a policy to count the jobs a pass considers: every pending job in a full pass,
// the new arrivals in an incremental one (the Scheduler decides which, see Policy).
class CountingPolicy final : public core::Policy {
 public:
  explicit CountingPolicy(std::unique_ptr<core::Policy> inner) : inner_(std::move(inner)) {}
  std::string_view name() const override { return inner_->name(); }
  void Schedule(Scheduler& s, Ticks now, bool full) override {
    considered_ = 0;
    if (full) {
      considered_ = s.pending().size();
    } else {
      for (JobId id : s.arrived_since_last_pass())
        considered_ += s.job(id).phase == Phase::kPending;
    }
    full_ = full;
    inner_->Schedule(s, now, full);
  }
  size_t considered() const { return considered_; }
  bool full() const { return full_; }

 private:
  std::unique_ptr<core::Policy> inner_;
  size_t considered_ = 0;
  bool full_ = false;
};

// A scheduler with a backlog, driven the way the simulator drives it: between passes
// some running jobs finish, preempted jobs are requeued (their grace is over) and as
// many new jobs arrive as finished.
class Driver {
 public:
  Driver(int gpus, int backlog, std::unique_ptr<core::Policy> policy)
      : cluster_(MakeCluster(gpus)),
        queues_(MakeQueues(cluster_)),
        maker_(cluster_.catalog(), kJobSeed),
        rng_(kChurnSeed) {
    auto counting = std::make_unique<CountingPolicy>(std::move(policy));
    counter_ = counting.get();
    sched_ = std::make_unique<Scheduler>(cluster_, queues_, std::move(counting));
    // Fill the cluster from the job stream until fewer than a quarter of a batch still
    // fit, cancelling what does not fit after each pass: a saturated cluster with an
    // empty queue, whatever its size.
    const int batch = std::max(64, static_cast<int>(cluster_.gpu_count() / 64));
    std::vector<JobId> left;
    for (size_t started = SIZE_MAX; started >= static_cast<size_t>(batch / 4);) {
      for (int i = 0; i < batch; ++i) sched_->Submit(maker_.Next(), now_);
      started = Apply(sched_->Schedule(now_));
      left.clear();
      for (const auto& key : sched_->pending()) left.push_back(key.id);
      for (JobId id : left) sched_->Finish(id, now_);
    }
    // Then the backlog, arrived over the last 8 hours (half of it past gantry's aging).
    for (int i = 0; i < backlog; ++i) {
      sched_->Submit(maker_.Next(), kBacklogSpan * i / backlog);
    }
    now_ = kBacklogSpan;
    Apply(sched_->Schedule(now_));
  }

  // Finishes `k` random running jobs, requeues preempted ones, submits `k` new jobs.
  void Churn(int k) {
    now_ += kStep;
    for (JobId id : signaled_) {
      if (sched_->job(id).phase == Phase::kSignaled) sched_->Requeue(id, now_);
    }
    signaled_.clear();
    for (int done = 0; done < k && !running_.empty();) {
      const size_t i = rng_() % running_.size();
      const JobId id = running_[i];
      running_[i] = running_.back();
      running_.pop_back();
      if (sched_->job(id).phase != Phase::kRunning) continue;  // preempted meanwhile
      sched_->Finish(id, now_, /*completed=*/true);
      ++done;
    }
    for (int i = 0; i < k; ++i) sched_->Submit(maker_.Next(), now_);
  }

  // Times every decision of the following passes into `out` (nanoseconds): from one
  // TryStart to the next (the pass's set-up counts toward its first decision, and the
  // last decision ends with the pass). Costs a clock read per decision.
  void TimeDecisions(std::vector<int32_t>* out) {
    latencies_ = out;
    sched_->set_decision_hook([this] {
      const auto t = Clock::now();
      if (hook_calls_++ > 0) {
        latencies_->push_back(static_cast<int32_t>(Nanos(t - mark_)));
        mark_ = t;
      }
    });
  }

  // One timed pass; returns its wall time in nanoseconds (CPU time in cpu_ns()).
  int64_t Pass() {
    const int64_t c0 = ThreadCpuNanos();
    const auto t0 = Clock::now();
    mark_ = t0;
    hook_calls_ = 0;
    const std::vector<Decision>& decisions = sched_->Schedule(now_);
    const auto t1 = Clock::now();
    if (latencies_ && hook_calls_ > 0)
      latencies_->push_back(static_cast<int32_t>(Nanos(t1 - mark_)));
    const int64_t ns = Nanos(t1 - t0);
    cpu_ns_ = ThreadCpuNanos() - c0;
    starts_ = Apply(decisions);
    return ns;
  }
  int64_t cpu_ns() const { return cpu_ns_; }

  size_t considered() const { return counter_->considered(); }
  bool full() const { return counter_->full(); }
  size_t starts() const { return starts_; }
  size_t pending() const { return sched_->pending().size(); }
  double fill() const {
    return static_cast<double>(sched_->ledger().used_units()) /
           static_cast<double>(sched_->ledger().up_units());
  }

 private:
  size_t Apply(const std::vector<Decision>& decisions) {
    size_t starts = 0;
    for (const Decision& d : decisions) {
      if (d.kind == Decision::Kind::kStart) {
        running_.push_back(d.job);
        ++starts;
      } else if (d.kind == Decision::Kind::kPreempt) {
        signaled_.push_back(d.job);
      }
    }
    return starts;
  }

  const Cluster cluster_;
  const QueueTree queues_;
  JobMaker maker_;
  std::mt19937_64 rng_;
  CountingPolicy* counter_ = nullptr;
  std::unique_ptr<Scheduler> sched_;
  std::vector<JobId> running_;
  std::vector<JobId> signaled_;
  Ticks now_ = 0;
  size_t starts_ = 0;
  int64_t cpu_ns_ = 0;
  std::vector<int32_t>* latencies_ = nullptr;
  Clock::time_point mark_;
  size_t hook_calls_ = 0;
};

void BM_Schedule(benchmark::State& state, std::string policy, int gpus, int backlog) {
  // "<policy>-timed": the same passes with a clock read around every decision.
  const bool timed = policy.ends_with("-timed");
  const bool trace = std::getenv("GANTRY_BENCH_TRACE") != nullptr;
  if (timed) policy.resize(policy.size() - 6);
  std::unique_ptr<core::Policy> p = core::MakePolicy(policy);
  if (!p) Die("unknown policy " + policy);
  Driver driver(gpus, backlog, std::move(p));
  driver.Churn(kChurn);  // settle: the first full pass after the fill
  driver.Pass();
  std::vector<int32_t> latencies;
  if (timed) driver.TimeDecisions(&latencies);
  std::vector<double> per_decision_ns, pass_ms, cpu_per_decision_ns, cpu_pass_ms;
  int64_t total_ns = 0, total_cpu_ns = 0;
  size_t decisions = 0, starts = 0, pending = 0, full = 0;
  double fill = 0;
  for (auto _ : state) {
    state.PauseTiming();   // manual time: only the pass counts; this keeps the
    driver.Churn(kChurn);  // library's own CPU-time figures honest too
    state.ResumeTiming();
    const int64_t ns = driver.Pass();
    const int64_t cpu_ns = driver.cpu_ns();
    if (trace) {
      std::fprintf(stderr, "pass %.1f ms considered %zu starts %zu pending %zu\n",
                   static_cast<double>(cpu_ns) * 1e-6, driver.considered(), driver.starts(),
                   driver.pending());
    }
    state.SetIterationTime(static_cast<double>(ns) * 1e-9);
    const double considered = static_cast<double>(std::max<size_t>(1, driver.considered()));
    total_ns += ns;
    total_cpu_ns += cpu_ns;
    decisions += driver.considered();
    starts += driver.starts();
    pending += driver.pending();
    full += driver.full();
    fill += driver.fill();
    pass_ms.push_back(static_cast<double>(ns) * 1e-6);
    cpu_pass_ms.push_back(static_cast<double>(cpu_ns) * 1e-6);
    per_decision_ns.push_back(static_cast<double>(ns) / considered);
    cpu_per_decision_ns.push_back(static_cast<double>(cpu_ns) / considered);
  }
  const double passes = static_cast<double>(state.iterations());
  const double n = static_cast<double>(std::max<size_t>(1, decisions));
  const Percentiles per = Summarize(per_decision_ns);
  const Percentiles pass = Summarize(pass_ms);
  const Percentiles cpu_per = Summarize(cpu_per_decision_ns);
  const Percentiles cpu_pass = Summarize(cpu_pass_ms);
  // Wall-clock figures, then the same from this thread's CPU time.
  state.counters["decisions_per_s"] = n / (static_cast<double>(total_ns) * 1e-9);
  state.counters["decisions_per_pass"] = n / passes;
  state.counters["ns_per_decision"] = static_cast<double>(total_ns) / n;
  state.counters["ns_per_decision_p50"] = per.p50;
  state.counters["ns_per_decision_p99"] = per.p99;
  state.counters["pass_ms_p50"] = pass.p50;
  state.counters["pass_ms_p99"] = pass.p99;
  state.counters["pass_ms_max"] = pass.max;
  state.counters["cpu_decisions_per_s"] = n / (static_cast<double>(total_cpu_ns) * 1e-9);
  state.counters["cpu_ns_per_decision"] = static_cast<double>(total_cpu_ns) / n;
  state.counters["cpu_ns_per_decision_p50"] = cpu_per.p50;
  state.counters["cpu_ns_per_decision_p99"] = cpu_per.p99;
  state.counters["cpu_pass_ms_p50"] = cpu_pass.p50;
  state.counters["cpu_pass_ms_p99"] = cpu_pass.p99;
  state.counters["starts_per_pass"] = static_cast<double>(starts) / passes;
  state.counters["pending"] = static_cast<double>(pending) / passes;
  state.counters["full_passes"] = static_cast<double>(full) / passes;
  state.counters["fill"] = fill / passes;
  if (timed) {
    const Percentiles one = Summarize(latencies);
    state.counters["decision_ns_p50"] = one.p50;
    state.counters["decision_ns_p99"] = one.p99;
    state.counters["decision_ns_p999"] = one.p999;
    state.counters["decision_ns_max"] = one.max;
  }
}

// ---- place/...: single Placer::Place calls at ~85% fill ------------------------------

// `fgd`: the placer scores kBest placements with a Fragmentation whose mix is learned
// from the whole job stream (as the scheduler's would be).
void PlaceBench(benchmark::State& state, Fit fit, int gpus, bool fgd) {
  const Cluster cluster = MakeCluster(gpus);
  Ledger ledger(cluster);
  core::Fragmentation frag(ledger, false);
  Placer placer(ledger, fgd ? &frag : nullptr);
  JobMaker maker(cluster.catalog(), kJobSeed);
  std::vector<JobSpec> specs;
  for (int i = 0; i < 20'000; ++i) specs.push_back(maker.Next());
  if (fgd) {
    for (const JobSpec& spec : specs) frag.Observe(spec);
  }
  std::mt19937_64 rng(kChurnSeed);
  std::vector<Allocation> live;
  Allocation out;
  size_t next = 0;
  auto fill = [&] {
    return static_cast<double>(ledger.used_units()) / static_cast<double>(ledger.up_units());
  };
  auto release_one = [&] {
    const size_t i = rng() % live.size();
    for (auto it = live[i].rbegin(); it != live[i].rend(); ++it) ledger.Release(*it);
    std::swap(live[i], live.back());
    live.pop_back();
  };
  // Fill to the target before timing anything.
  for (size_t tries = 0; fill() < kPlaceFill && tries < 10 * specs.size(); ++tries) {
    if (placer.Place(specs[next++ % specs.size()], fit, out)) live.push_back(out);
  }
  std::vector<int32_t> latencies;
  latencies.reserve(static_cast<size_t>(state.max_iterations));
  size_t placed = 0;
  int64_t total_ns = 0;
  double fill_sum = 0;
  for (auto _ : state) {
    const JobSpec& spec = specs[next++ % specs.size()];
    fill_sum += fill();
    const auto t0 = Clock::now();
    const bool ok = placer.Place(spec, fit, out);
    const int64_t ns = Nanos(Clock::now() - t0);
    state.SetIterationTime(static_cast<double>(ns) * 1e-9);
    total_ns += ns;
    latencies.push_back(static_cast<int32_t>(ns));
    if (ok) {
      ++placed;
      live.push_back(out);
      while (fill() > kPlaceFill && !live.empty()) release_one();
    }
  }
  const double n = static_cast<double>(state.iterations());
  const Percentiles p = Summarize(latencies);
  state.counters["decisions_per_s"] = n / (static_cast<double>(total_ns) * 1e-9);
  state.counters["ns_per_decision"] = static_cast<double>(total_ns) / n;
  state.counters["ns_p50"] = p.p50;
  state.counters["ns_p99"] = p.p99;
  state.counters["ns_p999"] = p.p999;
  state.counters["ns_max"] = p.max;
  state.counters["placed_frac"] = static_cast<double>(placed) / n;
  state.counters["fill"] = fill_sum / n;
}

void BM_Place(benchmark::State& state, Fit fit, int gpus) { PlaceBench(state, fit, gpus, false); }
void BM_PlaceFgd(benchmark::State& state, int gpus) { PlaceBench(state, Fit::kBest, gpus, true); }

// Passes per benchmark: enough for a p99 over passes, few enough that the default set
// runs in a few minutes on two cores (gantry's passes are far slower than fifo's; see
// docs/benchmarks.md). GANTRY_BENCH_PASSES overrides the count (e.g. 1 under a profiler).
int64_t PassesFor(const std::string& policy, int backlog) {
  if (const char* env = std::getenv("GANTRY_BENCH_PASSES")) return std::max(1L, std::atol(env));
  if (policy.starts_with("gantry")) return backlog >= 100'000 ? 10 : backlog >= 10'000 ? 40 : 200;
  return backlog >= 100'000 ? 40 : backlog >= 10'000 ? 100 : 300;
}

void Register() {
  // The configuration: 1,250 nodes x 8 H100, 100,000 pending jobs.
  for (const char* policy : {"fifo", "gantry", "fifo-timed", "gantry-timed"}) {
    const std::string name = std::string("schedule/") + policy + "/gpus:10000/pending:100000";
    benchmark::RegisterBenchmark(name.c_str(), BM_Schedule, std::string(policy), 10'000, 100'000)
        ->UseManualTime()
        ->Unit(benchmark::kMillisecond)
        ->Iterations(PassesFor(policy, 100'000));
  }
  for (const auto& [fit, label] :
       {std::pair{Fit::kFirst, "first"}, std::pair{Fit::kBest, "best"}}) {
    const std::string name = std::string("place/") + label + "/gpus:10000";
    benchmark::RegisterBenchmark(name.c_str(), BM_Place, fit, 10'000)
        ->UseManualTime()
        ->Unit(benchmark::kMicrosecond)
        ->Iterations(200'000);
  }
  // Best fit scored by fragmentation (FGD), as the gantry policy's placements are.
  benchmark::RegisterBenchmark("place/fgd/gpus:10000", BM_PlaceFgd, 10'000)
      ->UseManualTime()
      ->Unit(benchmark::kMicrosecond)
      ->Iterations(200'000);
  // Scale curve: cluster size x queue length, both policies (10,000 x 100,000 is the
  // schedule/ benchmark above).
  for (const char* policy : {"fifo", "gantry"}) {
    for (int gpus : {1'000, 10'000, 100'000}) {
      for (int backlog : {1'000, 10'000, 100'000}) {
        if (gpus == 10'000 && backlog == 100'000) continue;
        const std::string name = std::string("scale/") + policy + "/gpus:" + std::to_string(gpus) +
                                 "/pending:" + std::to_string(backlog);
        benchmark::RegisterBenchmark(name.c_str(), BM_Schedule, std::string(policy), gpus, backlog)
            ->UseManualTime()
            ->Unit(benchmark::kMillisecond)
            ->Iterations(PassesFor(policy, backlog));
      }
    }
  }
  for (const auto& [fit, label] :
       {std::pair{Fit::kFirst, "first"}, std::pair{Fit::kBest, "best"}}) {
    for (int gpus : {1'000, 10'000, 100'000}) {
      const std::string name =
          std::string("scale-place/") + label + "/gpus:" + std::to_string(gpus);
      benchmark::RegisterBenchmark(name.c_str(), BM_Place, fit, gpus)
          ->UseManualTime()
          ->Unit(benchmark::kMicrosecond)
          ->Iterations(100'000);
    }
  }
}

}  // namespace
}  // namespace gantry::bench

int main(int argc, char** argv) {
  gantry::bench::Register();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
