// JobSpec: what a job asks for, checked and resolved against a cluster.
//
// A job is a gang of `replicas` identical workers that start together or not at all.
// Each worker takes either `gpus` whole GPUs (0 = CPU-only), one MIG instance
// (`mig_profile` resolved per model in `mig_index`), or a fractional share
// (`share_milli` thousandths of one GPU, with Sharing kMps or kTimeslice).
// Specs reach the core only through the boundary readers, which have checked every
// field; the core trusts them.
// Thread-safety: plain values.
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/model/catalog.h"
#include "core/model/types.h"

namespace gantry::core {

// Daily window in minutes of the day (UTC). end < start wraps past midnight.
struct Window {
  int start_min = 0;
  int end_min = 0;
  bool Contains(Ticks now) const;
  // Earliest time >= now inside the window.
  Ticks NextOpen(Ticks now) const;
};

struct JobSpec {
  std::string id;
  QueueId queue;
  Tier tier = Tier::kStandard;
  int replicas = 1;
  // Elastic (0: rigid): the job may run with min_replicas..replicas workers. It starts
  // with as many as fit (at least min_replicas), grows at a checkpoint into GPUs no waiting
  // work could use, and shrinks back to min_replicas at a checkpoint when work waits for
  // room (Scheduler::Schedule). Whole-GPU and CPU-only jobs only; never with
  // workers_per_node.
  int min_replicas = 0;
  int least_replicas() const { return min_replicas > 0 ? min_replicas : replicas; }
  bool elastic() const { return min_replicas > 0 && min_replicas < replicas; }
  // An elastic job's throughput at each size, 1 to `replicas` workers (any unit; a
  // measured profile, as Pollux's and Sia's): null is linear in workers.
  std::shared_ptr<const std::vector<double>> speedup;
  // How fast it goes at `size` workers, in workers: `size` when linear, else the table's
  // throughput there as a share of its full size's, times `replicas`.
  double SpeedInWorkers(int size) const {
    if (!speedup || speedup->size() != static_cast<size_t>(replicas) || size < 1) return size;
    const double full = speedup->back();
    return full > 0
               ? replicas * (*speedup)[static_cast<size_t>(std::min(size, replicas) - 1)] / full
               : size;
  }
  // Progress in worker-time (work at full size is run time x replicas): what `t` at `size`
  // workers does (t x size when linear), and the time `work` takes there, rounded up. The
  // core's estimates, the simulator's runs and gantryd's kept progress all count so.
  int64_t WorkerTime(Ticks t, int size) const {
    return speedup ? std::llround(static_cast<double>(t) * SpeedInWorkers(size))
                   : t * int64_t{size};
  }
  Ticks TimeFor(int64_t work, int size) const {
    return speedup ? static_cast<Ticks>(std::ceil(static_cast<double>(work) / SpeedInWorkers(size)))
                   : (work + size - 1) / size;
  }
  // How fast its work goes on each GPU model (by ModelId), relative to its `duration` and
  // run-time estimates (a measured throughput per GPU type, as Sia's profiles give): on a
  // model of speed 2 it needs half the time. Null, or a model past its end: 1. A gang on
  // models of different speeds goes at its slowest worker's (synchronous steps).
  std::shared_ptr<const std::vector<double>> model_speed;
  double ModelSpeed(ModelId m) const {
    return model_speed && m.valid() && m.v < model_speed->size() ? (*model_speed)[m.v] : 1.0;
  }
  // The slowest speed among the models it may use: what an estimate assumes before it is
  // placed.
  double SlowestSpeed() const {
    if (!model_speed) return 1.0;
    double slowest = 0;
    for (ModelMask m = models; m != 0; m &= m - 1) {
      const double v = ModelSpeed(ModelId(static_cast<uint32_t>(std::countr_zero(m))));
      slowest = slowest == 0 ? v : std::min(slowest, v);
    }
    return slowest > 0 ? slowest : 1.0;
  }
  // The time `work` (time at speed 1) takes at `speed`, rounded up; and the work `t` does.
  static Ticks AtSpeed(Ticks work, double speed) {
    return speed == 1.0 ? work : static_cast<Ticks>(std::ceil(static_cast<double>(work) / speed));
  }
  static Ticks WorkAt(Ticks t, double speed) {
    return speed == 1.0 ? t : std::llround(static_cast<double>(t) * speed);
  }
  Sharing sharing = Sharing::kExclusive;
  int gpus = 0;                   // whole GPUs per worker (Sharing::kExclusive)
  int share_milli = 0;            // per worker (kMps, kTimeslice): 1..999
  std::string mig_profile;        // per worker (kMig)
  std::vector<int8_t> mig_index;  // by ModelId: profile index in that model, -1 = lacks it
  ModelMask models = 0;           // acceptable models; all models when the spec names none
  PoolId pool;                    // only this pool's nodes (sbatch --partition); invalid: any pool
  std::vector<PoolId> pools;      // only these pools' nodes, ascending (Kubernetes node
                                  // selection); empty: any pool
  // Only these nodes (sbatch --nodelist), and never these (sbatch --exclude): ascending;
  // empty: no such restriction. Placement skips the others (Placer::NodeHasRoom).
  std::vector<NodeId> only_nodes, not_nodes;
  // Nodes preferred, with their scores (ascending by node; a node not listed scores 0):
  // placement tries the nodes scoring the most first, then those scoring the next most,
  // down to every node it may use (Kubernetes' preferred node and pod affinities).
  std::vector<std::pair<NodeId, int32_t>> preferred_nodes;
  int64_t vram_bytes = 0;    // per worker, on each of its GPUs
  int64_t cpus_milli = 0;    // per worker
  int64_t memory_bytes = 0;  // per worker
  Topology topology = Topology::kSpine;
  // Exactly this many workers on each node the job uses, on distinct nodes (Slurm's
  // -N with --ntasks-per-node); 0: as placement finds room. Divides replicas.
  int workers_per_node = 0;
  // All workers on one node where one has room for them, else as placement finds room
  // (Slurm's -n without -N: as few nodes as it can).
  bool fewest_nodes = false;
  Ticks checkpoint = 0;  // 0 = never
  Ticks grace = 0;
  // Slurm's --nice: within its queue and tier, a pending job waits behind those of a lower
  // value, whatever their arrival (the gantry policy; fifo keeps arrival order). Negative
  // is ahead of the rest (gantryd lets admins only give it). Never a reason to preempt.
  int nice = 0;
  std::optional<Window> window;
  std::optional<Ticks> runtime_estimate;
  // Server mode: a run is stopped (checkpoint signal, grace, kill; the job fails) once it
  // has run this long, as Slurm's --time. Also the runtime estimate when none is given.
  std::optional<Ticks> time_limit;
  // Server mode only: what the agent runs.
  std::vector<std::string> command;
  std::vector<std::pair<std::string, std::string>> env;
  std::string workdir;
  // Server mode: a container image `command` runs in (the agent runs it through podman);
  // empty: on the node itself.
  std::string image;
  // Server mode (`gantry sbatch`): a display name (-J), a batch script the agent writes on
  // the node and runs with `command` as its arguments, the files its stdout and stderr go
  // to on the node (Slurm's %j %x ... patterns, expanded by gantryd; empty: the agent's log
  // only), and the signal its workers get first when stopped (0: the agent's default).
  std::string name;
  std::string script;
  std::string stdout_path, stderr_path;
  bool append_output = false;  // sbatch --open-mode=append: a run appends to them
  int stop_signal = 0;
  // A batch job's `signal: B:USR1` (sbatch --signal=B:USR1): the signal goes to the batch
  // script only; without B: to its steps only, as Slurm sends it.
  bool signal_batch = false;
  // A batch job's Slurm tasks per worker (sbatch, when a node's GPUs do not divide over its
  // tasks: one worker a node holds them, srun runs its tasks there): 1 otherwise.
  int tasks_per_worker = 1;
  // Server mode: idle reclamation leaves the job alone, for this reason (its queue must
  // allow it: allow_keep_when_idle), e.g. a serving job that idles at night.
  std::string keep_when_idle;
  // Emulated agents only (`gantry-agent --emulate`), a test aid and never a scheduling
  // input: how busy the job's GPUs look. Utilization while busy, VRAM used per worker
  // (-1: its vram_gb), and the run time after which it idles (none: never).
  struct Emulate {
    double util = 0.9;
    int64_t vram_used_bytes = -1;
    std::optional<Ticks> idle_after;
  };
  std::optional<Emulate> emulate;

  bool uses_gpu() const { return sharing != Sharing::kExclusive || gpus > 0; }
  // Whether the job may use pool p's nodes (its `pool` and `pools` restrictions).
  bool MayUse(PoolId p) const {
    return (!pool.valid() || pool == p) &&
           (pools.empty() || std::binary_search(pools.begin(), pools.end(), p));
  }
  // Whether the job may use node n (its only_nodes and not_nodes). O(log nodes named).
  bool MayUseNode(NodeId n) const {
    return (only_nodes.empty() || std::binary_search(only_nodes.begin(), only_nodes.end(), n)) &&
           !std::binary_search(not_nodes.begin(), not_nodes.end(), n);
  }
  // GPU units one worker holds on `model` (whole: gpus*kGpuUnits; MIG: slices*1000;
  // share: share_milli*7). MIG needs the model to know the profile's compute slices.
  GpuUnits WorkerUnits(const Catalog& catalog, ModelId model) const;
  // Fills mig_index with mig_profile's index in each model of `catalog`; the models that
  // have the profile.
  ModelMask ResolveMigIndex(const Catalog& catalog);
};

// A trace line: the spec plus what only running reveals.
struct TraceJob {
  JobSpec spec;
  Ticks submit = 0;
  Ticks duration = 0;
  std::optional<Ticks> idle_after;  // run time after which the job stops using its GPUs
  std::optional<double> util;       // observed: utilization of what a worker holds while busy
  std::optional<int64_t> vram_used_bytes;  // observed: peak VRAM of one worker
  int line = 0;                            // 1-based line in the trace file
};

}  // namespace gantry::core
