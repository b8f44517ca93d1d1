#include "core/idle.h"

#include <algorithm>
#include <bit>
#include <tuple>
#include <vector>

#include "core/placement.h"

namespace gantry::core {

std::string_view Name(IdleCause c) {
  switch (c) {
    case IdleCause::kDown:
      return "down";
    case IdleCause::kNoDemand:
      return "nothing waits";
    case IdleCause::kWrongModel:
      return "wrong model";
    case IdleCause::kWrongPool:
      return "wrong pool or sharing";
    case IdleCause::kReservation:
      return "held for a reservation";
    case IdleCause::kFragmented:
      return "fragmented";
    case IdleCause::kLimits:
      return "queue limits";
    case IdleCause::kNotYetPlaced:
      return "not yet placed or other";
  }
  return "other";
}

namespace {

// What a pending job waiting for `cause` could say of GPUs it may use.
IdleCause DemandOf(WaitCause cause) {
  switch (cause) {
    case WaitCause::kReservation:
      return IdleCause::kReservation;
    case WaitCause::kCapacity:
    case WaitCause::kPreemption:
      return IdleCause::kFragmented;
    case WaitCause::kQuota:
    case WaitCause::kBudget:
    case WaitCause::kWindow:
      return IdleCause::kLimits;
    case WaitCause::kNotYetPlaced:
    case WaitCause::kOther:
      break;
  }
  return IdleCause::kNotYetPlaced;
}

}  // namespace

IdleGpus IdleByCause(const Scheduler& s) {
  const Cluster& cluster = s.cluster();
  const Ledger& ledger = s.ledger();
  const size_t pools = cluster.pools().size();
  // Per pool: the causes of the pending jobs that may use it (bit per IdleCause), and
  // whether any pending job accepts its model at all.
  std::vector<uint32_t> demand(pools, 0);
  std::vector<bool> model_wanted(pools, false);
  std::vector<ModelId> model(pools);
  std::vector<SharingMask> sharing(pools, 0);
  for (const Node& n : cluster.nodes()) {
    model[n.pool.v] = n.model;
    sharing[n.pool.v] |= n.sharing;
  }
  for (const auto& key : s.pending()) {
    const JobRecord& job = s.job(key.id);
    const uint32_t bit = 1u << static_cast<int>(DemandOf(job.wait.cause));
    for (size_t p = 0; p < pools; ++p) {
      if (!model[p].valid() || !(job.spec.models >> model[p].v & 1u)) continue;
      model_wanted[p] = true;
      if (!job.spec.MayUse(PoolId(static_cast<uint32_t>(p)))) continue;
      if (!(sharing[p] & Bit(job.spec.sharing))) continue;
      demand[p] |= bit;
    }
  }
  auto has = [](uint32_t bits, IdleCause c) { return (bits >> static_cast<int>(c) & 1u) != 0; };
  IdleGpus idle{};
  for (uint32_t i = 0; i < cluster.nodes().size(); ++i) {
    const Node& n = cluster.node(NodeId(i));
    if (!ledger.node(NodeId(i)).up) {
      idle[static_cast<int>(IdleCause::kDown)] += n.gpus;
      continue;
    }
    double free = 0;
    for (int g = 0; g < n.gpus; ++g) {
      free += static_cast<double>(FreeUnits(ledger.gpu(ledger.gpu_id(NodeId(i), g)))) /
              static_cast<double>(kGpuUnits);
    }
    if (free <= 0) continue;
    const size_t p = n.pool.v;
    const uint32_t d = demand[p];
    // The first explanation that holds, the most specific first.
    IdleCause c = s.pending().empty()               ? IdleCause::kNoDemand
                  : !model_wanted[p]                ? IdleCause::kWrongModel
                  : d == 0                          ? IdleCause::kWrongPool
                  : has(d, IdleCause::kReservation) ? IdleCause::kReservation
                  : has(d, IdleCause::kFragmented)  ? IdleCause::kFragmented
                  : has(d, IdleCause::kLimits)      ? IdleCause::kLimits
                                                    : IdleCause::kNotYetPlaced;
    idle[static_cast<int>(c)] += free;
  }
  return idle;
}

GpuUnits StrandedUnits(const Scheduler& s) {
  const Cluster& cluster = s.cluster();
  const Ledger& ledger = s.ledger();
  // One worker per distinct shape (a fill trace has thousands of jobs, a few hundred shapes).
  auto shape = [](const JobSpec& j) {
    return std::tie(j.sharing, j.gpus, j.share_milli, j.mig_index, j.models, j.pool.v, j.pools,
                    j.vram_bytes, j.cpus_milli, j.memory_bytes, j.tier);
  };
  std::vector<const JobSpec*> shapes;
  for (const auto& key : s.pending()) {
    const JobSpec& spec = s.job(key.id).spec;
    if (spec.uses_gpu()) shapes.push_back(&spec);
  }
  std::sort(shapes.begin(), shapes.end(), [&](auto a, auto b) { return shape(*a) < shape(*b); });
  shapes.erase(std::unique(shapes.begin(), shapes.end(),
                           [&](auto a, auto b) { return shape(*a) == shape(*b); }),
               shapes.end());
  std::vector<std::vector<const JobSpec*>> by_pool(cluster.pools().size());
  for (size_t p = 0; p < by_pool.size(); ++p) {
    for (const JobSpec* j : shapes) {
      if (PoolAccepts(cluster, *j, PoolId(static_cast<uint32_t>(p)))) by_pool[p].push_back(j);
    }
  }
  GpuUnits stranded = 0;
  for (uint32_t i = 0; i < cluster.nodes().size(); ++i) {
    const NodeId id(i);
    const Node& n = cluster.node(id);
    const NodeState& ns = ledger.node(id);
    if (!ns.up || n.gpus == 0) continue;
    auto state = [&](int g) -> const GpuState& { return ledger.gpu(ledger.gpu_id(id, g)); };
    uint64_t with_room = 0, whole = 0, usable = 0;
    for (int g = 0; g < n.gpus; ++g) {
      if (FreeUnits(state(g)) > 0) with_room |= uint64_t{1} << g;
      if (state(g).mode == GpuMode::kFree) whole |= uint64_t{1} << g;
    }
    for (const JobSpec* j : by_pool[n.pool.v]) {
      if (usable == with_room) break;
      if (ns.free_cpus_milli < j->cpus_milli || ns.free_memory_bytes < j->memory_bytes) continue;
      if (j->sharing == Sharing::kExclusive) {
        if (std::popcount(whole) >= j->gpus) usable |= whole;
        continue;
      }
      for (uint64_t left = with_room & ~usable; left != 0; left &= left - 1) {
        const int g = std::countr_zero(left);
        WorkerAlloc w;
        w.node = id;
        w.sharing = j->sharing;
        w.gpu = static_cast<int8_t>(g);
        w.share_milli = static_cast<int16_t>(j->share_milli);
        w.vram_bytes = j->vram_bytes;
        if (j->sharing == Sharing::kMig) {
          w.mig_profile = j->mig_index[n.model.v];
          w.mig_start = static_cast<int8_t>(ledger.MigStart(ledger.gpu_id(id, g), w.mig_profile));
          if (w.mig_start < 0) continue;
        }
        if (ledger.Fits(w)) usable |= uint64_t{1} << g;
      }
    }
    for (uint64_t left = with_room & ~usable; left != 0; left &= left - 1) {
      stranded += FreeUnits(state(std::countr_zero(left)));
    }
  }
  return stranded;
}

}  // namespace gantry::core
