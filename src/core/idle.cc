#include "core/idle.h"

#include <vector>

namespace gantry::core {

std::string_view Name(IdleCause c) {
  switch (c) {
    case IdleCause::kDown: return "down";
    case IdleCause::kNoDemand: return "nothing waits";
    case IdleCause::kWrongModel: return "wrong model";
    case IdleCause::kWrongPool: return "wrong pool or sharing";
    case IdleCause::kReservation: return "held for a reservation";
    case IdleCause::kFragmented: return "fragmented";
    case IdleCause::kLimits: return "queue limits";
    case IdleCause::kNotYetPlaced: return "not yet placed or other";
  }
  return "other";
}

namespace {

// What a pending job waiting for `reason` could say of GPUs it may use.
IdleCause DemandOf(std::string_view reason) {
  const std::string_view word = reason.substr(0, reason.find(':'));
  if (word == "reservation") return IdleCause::kReservation;
  if (word == "capacity" || word == "preemption") return IdleCause::kFragmented;
  if (word == "quota" || word == "budget" || word == "window") return IdleCause::kLimits;
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
    const uint32_t bit = 1u << static_cast<int>(DemandOf(job.wait_reason));
    for (size_t p = 0; p < pools; ++p) {
      if (!model[p].valid() || !(job.spec.models >> model[p].v & 1u)) continue;
      model_wanted[p] = true;
      if (job.spec.pool.valid() && job.spec.pool.v != p) continue;
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
      const GpuState& st = ledger.gpu(GpuId(n.first_gpu.v + static_cast<uint32_t>(g)));
      if (st.mode == GpuMode::kFree) free += 1;
      if (st.mode == GpuMode::kMig) free += (7.0 - st.mig_compute) / 7.0;
      if (st.mode == GpuMode::kShared) free += (1000.0 - st.share_used) / 1000.0;
    }
    if (free <= 0) continue;
    const size_t p = n.pool.v;
    const uint32_t d = demand[p];
    // The first explanation that holds, the most specific first.
    IdleCause c = s.pending().empty()                 ? IdleCause::kNoDemand
                  : !model_wanted[p]                  ? IdleCause::kWrongModel
                  : d == 0                            ? IdleCause::kWrongPool
                  : has(d, IdleCause::kReservation)   ? IdleCause::kReservation
                  : has(d, IdleCause::kFragmented)    ? IdleCause::kFragmented
                  : has(d, IdleCause::kLimits)        ? IdleCause::kLimits
                                                      : IdleCause::kNotYetPlaced;
    idle[static_cast<int>(c)] += free;
  }
  return idle;
}

}  // namespace gantry::core
