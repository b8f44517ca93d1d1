// What an agent knows about its GPUs, and where it learns it: NVML (agent/nvml.h) on a
// GPU machine, or an emulation (agent/emulated.h) where there is none.
// Thread-safety: GpuSource implementations are used by the agent's one thread.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "base/result.h"

namespace gantry::agent {

// One process NVML sees on a device (a GPU or a MIG instance).
struct GpuProcess {
  int pid = 0;              // as NVML gives it: in the host's pid namespace
  int64_t vram_bytes = -1;  // its device memory; -1 where NVML cannot tell
  double sm_util = 0;       // 0..1 of the device's SMs: its newest sample since the previous
                            // Discover; 0 when it had none (NVML samples only busy processes)
  bool mps_client = false;  // in NVML's MPS list: a client of an MPS server
};

// What NVML tells of the processes on one device. `listed`: the process list was read
// (nvmlDeviceGetComputeRunningProcesses and the MPS variant); `sampled`: per-process SM
// utilization was read (nvmlDeviceGetProcessUtilization). Either false where the driver
// lacks the entry point or does not support it on this device; `list` then holds what is
// known. Ordered by pid.
struct DeviceProcesses {
  bool listed = false;
  bool sampled = false;
  std::vector<GpuProcess> list;
};

struct MigInstance {
  std::string uuid;              // "MIG-..." as CUDA_VISIBLE_DEVICES takes it
  std::string profile;           // e.g. "1g.10gb"
  int start = -1;                // first memory slice of its placement
  int size = 0;                  // memory slices it spans; 0 where NVML did not say
  int gpu_instance_id = -1;      // NVML's GPU instance id (dcgm-exporter's GPU_I_ID); -1: not told
  int compute_instance_id = -1;  // NVML's compute instance id within its GPU instance; -1: not told
  // Last sample (NVML; emulation leaves them unknown): the instance's own memory and
  // utilization (0..1, unknown where NVML does not give it for MIG devices) and processes.
  int64_t memory_bytes = 0;
  int64_t memory_used_bytes = -1;  // -1: unknown
  std::optional<double> utilization;
  DeviceProcesses processes;
};

struct GpuInfo {
  int index = 0;
  int minor = -1;    // /dev/nvidiaN's N (NVML's minor number); -1: no device file known (emulation)
  std::string uuid;  // "GPU-..."
  std::string name;  // NVML's product name, e.g. "NVIDIA H100 80GB HBM3"
  std::string model;  // catalog name when known (emulation), else empty
  int64_t memory_bytes = 0;
  int64_t memory_used_bytes = 0;  // last sample
  bool mig_mode = false;
  std::vector<MigInstance> mig;
  double utilization = 0;         // 0..1, last sample
  bool lost = false;              // fell off the bus (NVML_ERROR_GPU_IS_LOST)
  std::vector<int> nvlink_peers;  // indexes of GPUs with an active NVLink to this one
  std::string pci_bus_id;         // as sysfs names it ("0000:3b:00.0"); empty where not told
  DeviceProcesses processes;      // last sample (NVML; not read for a GPU in MIG mode)
};

// A worker's MIG instance as the scheduler placed it (the desired worker's alloc).
struct MigPlacement {
  std::string profile;     // catalog name, e.g. "1g.10gb"
  int start = -1;          // first memory slice
  int memory_slices = 0;   // the placement's size
  int compute_slices = 0;  // the "1" of 1g
};

// A MIG instance the agent created (GpuSource::CreateMig): where it is and NVML's ids for
// it, which find it again to destroy it, also in a restarted agent (the agent keeps these in
// its state directory).
struct MadeMig {
  int gpu = -1;          // node GPU index
  std::string gpu_uuid;  // the GPU's
  std::string uuid;      // the MIG device's, for CUDA_VISIBLE_DEVICES
  std::string profile;
  int start = -1, size = 0;                         // memory slices
  unsigned gpu_instance = 0, compute_instance = 0;  // ids on that GPU
};

// The instance of `profile` whose placement starts at memory slice `start`, in `gpu.mig`;
// null when there is none.
const MigInstance* FindMig(const GpuInfo& gpu, const std::string& profile, int start);

class GpuSource {
 public:
  virtual ~GpuSource() = default;
  virtual std::string Describe() const = 0;
  // The GPUs now, with fresh utilization, health and processes. Cost: a few NVML queries
  // per GPU and MIG instance.
  virtual Result<std::vector<GpuInfo>> Discover() = 0;
  // The CUDA_VISIBLE_DEVICES name of the MIG instance of `profile` at memory slice
  // `start` on `gpu`, on a GPU whose instances are laid out beforehand (not mig_managed).
  // NVML: the existing instance (an administrator or a MIG manager lays them out);
  // emulation: a stable made-up UUID. Empty when there is no such instance.
  virtual std::string MigUuid(const GpuInfo& gpu, const std::string& profile, int start) const;
  // On GPUs whose pool is mig_managed: creates a GPU instance at exactly `mig`'s placement
  // and a compute instance covering it; refuses (an error saying why, nothing created) where
  // an instance overlaps the placement, the GPU is not in MIG mode or the driver cannot.
  // Default: this source creates no instances.
  virtual Result<MadeMig> CreateMig(const GpuInfo& gpu, const MigPlacement& mig);
  // Destroys an instance CreateMig made (its compute instance, then its GPU instance); ok
  // when it is gone already. An error while processes still use it: try again later.
  virtual Status DestroyMig(const MadeMig& mig);
  // Emulated GPUs: the agent makes up their usage from each job's `emulate` model.
  virtual bool emulated() const { return false; }
};

}  // namespace gantry::agent
