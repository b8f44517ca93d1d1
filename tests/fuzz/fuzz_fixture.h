// The cluster the job fuzz targets decode against: every pool kind (MIG, MPS, timeslice,
// spot, CPU-only, a config-declared model) so the decoders' cluster checks and
// core::WhyInfeasible all run. Built once per process.
#pragma once

#include <cstdlib>
#include <string>

#include "core/model/feasibility.h"
#include "spec/config_reader.h"

namespace gantry::fuzz {

inline const spec::ClusterConfig& Fixture() {
  static const spec::ClusterConfig* config = [] {
    spec::Diagnostics diags;
    auto c = spec::ParseClusterConfig(R"(cluster: fuzz
gpu_models:
  - name: X100-96GB
    memory_gb: 96
    mig_profiles:
      - {name: 1g.12gb, compute_slices: 1, memory_slices: 1, memory_gb: 12, max_instances: 7, starts: [0, 1, 2, 3, 4, 5, 6]}
pools:
  - {name: h100, count: 8, gpus: 8, gpu_model: H100-80GB, leaf_size: 4, nvlink_domains: 2, cpus: 112, memory_gb: 2048, sharing: [mig, mps]}
  - {name: h200, count: 2, gpus: 8, gpu_model: H200-141GB, spot: true, cpus: 96, memory_gb: 1024, sharing: [mig, timeslice]}
  - {name: l40s, count: 3, gpus: 4, gpu_model: L40S-48GB, cpus: 64, memory_gb: 512, sharing: [timeslice]}
  - {name: x100, count: 1, gpus: 2, gpu_model: X100-96GB, cpus: 32, memory_gb: 256, sharing: [mig]}
  - {name: cpu, count: 2, gpus: 0, cpus: 224, memory_gb: 1024}
queues:
  - {name: default}
  - {name: ml, guaranteed_gpus: 8}
  - {name: research, parent: ml, guaranteed_gpus: 4, burst_gpus: 32}
)",
                                      "fixture.yaml", diags);
    if (!c) std::abort();
    return new spec::ClusterConfig(std::move(*c));  // lives for the process
  }();
  return *config;
}

// Invariants every accepted job spec keeps; a violation is a decoder bug.
inline void CheckJob(const core::JobSpec& j, const spec::ClusterConfig& config) {
  const core::Catalog& catalog = config.cluster.catalog();
  if (j.replicas < 1 || j.mig_index.size() != catalog.size()) __builtin_trap();
  if (!j.queue.valid() || j.queue.v >= config.queues.size()) __builtin_trap();
  switch (j.sharing) {
    case core::Sharing::kExclusive:
      if (j.gpus < 0 || j.share_milli != 0) __builtin_trap();
      break;
    case core::Sharing::kMps:
    case core::Sharing::kTimeslice:
      if (j.gpus != 0 || j.share_milli < 1 || j.share_milli > 999) __builtin_trap();
      break;
    case core::Sharing::kMig:
      if (j.gpus != 0 || j.mig_profile.empty()) __builtin_trap();
      for (size_t m = 0; m < catalog.size(); ++m) {
        if ((j.models >> m & 1u) && j.mig_index[m] < 0) __builtin_trap();
      }
      break;
  }
  if (j.uses_gpu() && (j.models == 0 || j.vram_bytes <= 0)) __builtin_trap();
  if (j.cpus_milli < 0 || j.memory_bytes < 0 || j.checkpoint < 0 || j.grace < 0) __builtin_trap();
  std::optional<std::string> why = core::WhyInfeasible(j, config.cluster);
  if (why && why->empty()) __builtin_trap();
  for (size_t m = 0; m < catalog.size(); ++m) {
    if (j.uses_gpu() && (j.models >> m & 1u)) {
      if (j.WorkerUnits(catalog, core::ModelId(static_cast<uint32_t>(m))) <= 0) __builtin_trap();
    }
  }
}

}  // namespace gantry::fuzz
