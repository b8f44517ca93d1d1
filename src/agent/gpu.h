// What an agent knows about its GPUs, and where it learns it: NVML (agent/nvml.h) on a
// GPU machine, or an emulation (agent/emulated.h) where there is none.
// Thread-safety: GpuSource implementations are used by the agent's one thread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/result.h"

namespace gantry::agent {

struct MigInstance {
  std::string uuid;     // "MIG-..." as CUDA_VISIBLE_DEVICES takes it
  std::string profile;  // e.g. "1g.10gb"
  int start = -1;       // first memory slice of its placement
};

struct GpuInfo {
  int index = 0;
  std::string uuid;      // "GPU-..."
  std::string name;      // NVML's product name, e.g. "NVIDIA H100 80GB HBM3"
  std::string model;     // catalog name when known (emulation), else empty
  int64_t memory_bytes = 0;
  int64_t memory_used_bytes = 0;  // last sample
  bool mig_mode = false;
  std::vector<MigInstance> mig;
  double utilization = 0;  // 0..1, last sample
  bool lost = false;       // fell off the bus (NVML_ERROR_GPU_IS_LOST)
  std::vector<int> nvlink_peers;  // indexes of GPUs with an active NVLink to this one
};

class GpuSource {
 public:
  virtual ~GpuSource() = default;
  virtual std::string Describe() const = 0;
  // The GPUs now, with fresh utilization and health. Cost: one NVML query per GPU.
  virtual Result<std::vector<GpuInfo>> Discover() = 0;
  // The CUDA_VISIBLE_DEVICES name of the MIG instance of `profile` at memory slice
  // `start` on `gpu`. NVML: the existing instance (the agent does not create MIG
  // instances; an administrator or a MIG manager lays them out); emulation: a stable
  // made-up UUID. Empty when there is no such instance.
  virtual std::string MigUuid(const GpuInfo& gpu, const std::string& profile, int start) const;
  // Emulated GPUs: the agent makes up their usage from each job's `emulate` model.
  virtual bool emulated() const { return false; }
};

}  // namespace gantry::agent
