// NVML, loaded at run time with dlopen("libnvidia-ml.so.1"), so one agent binary works
// on machines with and without NVIDIA's driver (as Mesos' GPU isolator does).
//
// NvmlApi is a table of the few NVML entry points the agent uses, with just enough of
// NVML's types declared here to call them (nvml.h is not needed to build; the layouts are
// those of NVML 12.2's nvml.h). LoadNvml fills it from a library: the driver's, or in tests
// a fake libnvidia-ml.so.1 the tests build (tests/agent/fake_nvml.cc), so that loading,
// DiscoverNvml and the per-process accounting run end to end without a GPU. Entry points
// marked optional may be missing (older drivers): the agent then reports less (no MIG, no
// NVLink, no utilization, no per-process accounting), never fails for it; only creating a
// MIG instance (mig_managed pools) then fails, with the missing entry point named.
// Thread-safety: NVML itself is thread-safe; NvmlGpus is used by one thread.
#pragma once

#include <map>
#include <memory>
#include <string>

#include "agent/gpu.h"

namespace gantry::agent {

namespace nvml {
using Return = int;  // nvmlReturn_t
inline constexpr Return kSuccess = 0;
inline constexpr Return kErrorNotSupported = 3;
inline constexpr Return kErrorNotFound = 6;
inline constexpr Return kErrorInsufficientSize = 7;
inline constexpr Return kErrorGpuIsLost = 15;
inline constexpr Return kErrorInUse = 19;                  // NVML_ERROR_IN_USE
inline constexpr Return kErrorInsufficientResources = 23;  // NVML_ERROR_INSUFFICIENT_RESOURCES
inline constexpr unsigned kMaxLinks = 18;                  // NVML_NVLINK_MAX_LINKS
using Device = struct DeviceOpaque*;                       // nvmlDevice_t
using GpuInstance = struct GpuInstanceOpaque*;             // nvmlGpuInstance_t
using ComputeInstance = struct ComputeInstanceOpaque*;     // nvmlComputeInstance_t
struct Memory {                                            // nvmlMemory_t
  unsigned long long total, free, used;
};
struct Utilization {  // nvmlUtilization_t
  unsigned int gpu, memory;
};
struct PciInfo {  // nvmlPciInfo_t
  char bus_id_legacy[16];
  unsigned int domain, bus, device, pci_device_id, pci_subsystem_id;
  char bus_id[32];
};
struct GpuInstancePlacement {  // nvmlGpuInstancePlacement_t: memory slices
  unsigned int start, size;
};
struct GpuInstanceInfo {  // nvmlGpuInstanceInfo_t
  Device device;
  unsigned int id, profile_id;
  GpuInstancePlacement placement;
};
// MIG instance creation. GPU instance profiles (NVML_GPU_INSTANCE_PROFILE_*) are named by
// compute slices; the _REV1 ones (0x7, 0x8) are the +me (media extension) variants, left
// out as the catalog leaves them out, and 1_SLICE_REV2 (0x9) is the 1g on two memory
// slices (1g.20gb on an H100-80GB). Compute instance profiles likewise
// (NVML_COMPUTE_INSTANCE_PROFILE_*), with all engines but the SMs shared.
inline constexpr unsigned kGpuInstanceProfile1Slice = 0x0;
inline constexpr unsigned kGpuInstanceProfile2Slice = 0x1;
inline constexpr unsigned kGpuInstanceProfile3Slice = 0x2;
inline constexpr unsigned kGpuInstanceProfile4Slice = 0x3;
inline constexpr unsigned kGpuInstanceProfile7Slice = 0x4;
inline constexpr unsigned kGpuInstanceProfile8Slice = 0x5;
inline constexpr unsigned kGpuInstanceProfile6Slice = 0x6;
inline constexpr unsigned kGpuInstanceProfile1SliceRev2 = 0x9;
inline constexpr unsigned kComputeInstanceProfile1Slice = 0x0;
inline constexpr unsigned kComputeInstanceProfile2Slice = 0x1;
inline constexpr unsigned kComputeInstanceProfile3Slice = 0x2;
inline constexpr unsigned kComputeInstanceProfile4Slice = 0x3;
inline constexpr unsigned kComputeInstanceProfile7Slice = 0x4;
inline constexpr unsigned kComputeInstanceProfile8Slice = 0x5;
inline constexpr unsigned kComputeInstanceProfile6Slice = 0x6;
inline constexpr unsigned kComputeInstanceEngineProfileShared = 0x0;
struct GpuInstanceProfileInfo {  // nvmlGpuInstanceProfileInfo_t (v1)
  unsigned int id, is_p2p_supported, slice_count, instance_count, multiprocessor_count,
      copy_engine_count, decoder_count, encoder_count, jpeg_count, ofa_count;
  unsigned long long memory_size_mb;
};
static_assert(sizeof(GpuInstanceProfileInfo) == 48);
struct ComputeInstanceProfileInfo {  // nvmlComputeInstanceProfileInfo_t (v1)
  unsigned int id, slice_count, instance_count, multiprocessor_count, shared_copy_engine_count,
      shared_decoder_count, shared_encoder_count, shared_jpeg_count, shared_ofa_count;
};
static_assert(sizeof(ComputeInstanceProfileInfo) == 36);
struct ComputeInstancePlacement {  // nvmlComputeInstancePlacement_t: compute slices
  unsigned int start, size;
};
struct ComputeInstanceInfo {  // nvmlComputeInstanceInfo_t, as nvmlComputeInstanceGetInfo_v2 fills
                              // it
  Device device;
  GpuInstance gpu_instance;
  unsigned int id, profile_id;
  ComputeInstancePlacement placement;
};
static_assert(sizeof(ComputeInstanceInfo) == 32);
// nvmlProcessInfo_v2_t, which nvmlDeviceGetComputeRunningProcesses_v2 fills, and _v3 too
// as NVML 12.2's nvml.h declares it (nvmlProcessInfo_t is the same struct). But drivers
// 535.43 to 535.86 wrote 32-byte entries from _v3 (a usedGpuCcProtectedMemory after these
// fields, without a version bump), so entries are read at the stride the driver wrote
// (ReadProcesses in nvml.cc), from a buffer with room for the larger ones.
struct ProcessInfo {
  unsigned int pid;
  unsigned long long used_gpu_memory;  // kValueNotAvailable where not known
  unsigned int gpu_instance_id, compute_instance_id;
};
static_assert(sizeof(ProcessInfo) == 24);
inline constexpr unsigned long long kValueNotAvailable = ~0ull;  // NVML_VALUE_NOT_AVAILABLE
struct ProcessUtilizationSample {                                // nvmlProcessUtilizationSample_t
  unsigned int pid;
  unsigned long long time_stamp;                       // CPU time, microseconds
  unsigned int sm_util, mem_util, enc_util, dec_util;  // percent
};
static_assert(sizeof(ProcessUtilizationSample) == 32);
}  // namespace nvml

struct NvmlApi {
  nvml::Return (*init)() = nullptr;                     // nvmlInit_v2
  nvml::Return (*shutdown)() = nullptr;                 // nvmlShutdown
  const char* (*error_string)(nvml::Return) = nullptr;  // nvmlErrorString
  nvml::Return (*device_count)(unsigned*) = nullptr;    // nvmlDeviceGetCount_v2
  nvml::Return (*device_by_index)(unsigned,
                                  nvml::Device*) = nullptr;  // nvmlDeviceGetHandleByIndex_v2
  nvml::Return (*device_name)(nvml::Device, char*, unsigned) = nullptr;
  nvml::Return (*device_uuid)(nvml::Device, char*, unsigned) = nullptr;
  nvml::Return (*device_memory)(nvml::Device, nvml::Memory*) = nullptr;
  // Optional:
  nvml::Return (*mig_mode)(nvml::Device, unsigned*, unsigned*) = nullptr;
  nvml::Return (*max_mig_devices)(nvml::Device, unsigned*) = nullptr;
  nvml::Return (*mig_device_by_index)(nvml::Device, unsigned, nvml::Device*) = nullptr;
  nvml::Return (*gpu_instance_id)(nvml::Device, unsigned*) = nullptr;
  nvml::Return (*compute_instance_id)(nvml::Device,
                                      unsigned*) = nullptr;  // nvmlDeviceGetComputeInstanceId
  nvml::Return (*gpu_instance_by_id)(nvml::Device, unsigned, nvml::GpuInstance*) = nullptr;
  nvml::Return (*gpu_instance_info)(nvml::GpuInstance, nvml::GpuInstanceInfo*) = nullptr;
  nvml::Return (*utilization)(nvml::Device, nvml::Utilization*) = nullptr;
  nvml::Return (*nvlink_state)(nvml::Device, unsigned, int*) = nullptr;
  nvml::Return (*nvlink_remote_pci)(nvml::Device, unsigned, nvml::PciInfo*) = nullptr;
  nvml::Return (*pci_info)(nvml::Device, nvml::PciInfo*) = nullptr;
  nvml::Return (*minor_number)(nvml::Device, unsigned*) = nullptr;  // nvmlDeviceGetMinorNumber
  // Per-process accounting (optional). The process lists take an untyped buffer: see
  // nvml::ProcessInfo for why.
  nvml::Return (*compute_processes)(nvml::Device, unsigned*, void*) = nullptr;  // _v3, else _v2
  nvml::Return (*mps_processes)(nvml::Device, unsigned*,
                                void*) = nullptr;  // MPS clients: _v3, else _v2
  nvml::Return (*process_utilization)(nvml::Device, nvml::ProcessUtilizationSample*, unsigned*,
                                      unsigned long long) =
      nullptr;  // nvmlDeviceGetProcessUtilization
  // Creating and destroying MIG instances (optional; all of them, with the MIG lookups
  // above, are needed to create any).
  nvml::Return (*gpu_instance_profile_info)(nvml::Device, unsigned, nvml::GpuInstanceProfileInfo*) =
      nullptr;  // nvmlDeviceGetGpuInstanceProfileInfo
  nvml::Return (*create_gpu_instance)(nvml::Device, unsigned, const nvml::GpuInstancePlacement*,
                                      nvml::GpuInstance*) =
      nullptr;  // nvmlDeviceCreateGpuInstanceWithPlacement
  nvml::Return (*compute_instance_profile_info)(nvml::GpuInstance, unsigned, unsigned,
                                                nvml::ComputeInstanceProfileInfo*) =
      nullptr;  // nvmlGpuInstanceGetComputeInstanceProfileInfo
  nvml::Return (*create_compute_instance)(nvml::GpuInstance, unsigned, nvml::ComputeInstance*) =
      nullptr;  // nvmlGpuInstanceCreateComputeInstance
  nvml::Return (*compute_instance_info)(nvml::ComputeInstance, nvml::ComputeInstanceInfo*) =
      nullptr;  // nvmlComputeInstanceGetInfo_v2
  nvml::Return (*compute_instance_by_id)(nvml::GpuInstance, unsigned, nvml::ComputeInstance*) =
      nullptr;  // nvmlGpuInstanceGetComputeInstanceById
  nvml::Return (*destroy_compute_instance)(nvml::ComputeInstance) =
      nullptr;                                                        // nvmlComputeInstanceDestroy
  nvml::Return (*destroy_gpu_instance)(nvml::GpuInstance) = nullptr;  // nvmlGpuInstanceDestroy
};

// Opens the library and resolves the table; an error says why ("libnvidia-ml.so.1: cannot
// open shared object file" on a machine without the driver). The library stays loaded.
Result<NvmlApi> LoadNvml(const std::string& library = "libnvidia-ml.so.1");

// Per device (GPU or MIG instance UUID), the NVML time stamp of the newest per-process
// utilization sample read, so that each sample reads only newer ones.
using SampleCursor = std::map<std::string, unsigned long long>;

// Reads every GPU through `api` (nvmlInit must have succeeded): identity, memory,
// utilization, MIG instances (each with its own memory, and utilization where NVML gives
// it), NVLink peers, and per GPU not in MIG mode and per MIG instance the processes with
// their memory and their SM utilization since `cursor` (advanced; null: every sample NVML
// still holds). A GPU whose queries say NVML_ERROR_GPU_IS_LOST is reported with
// lost = true and what is known of it, and no processes. Cost: a few NVML calls per
// device; NVML reads the driver, no sleeping.
Result<std::vector<GpuInfo>> DiscoverNvml(const NvmlApi& api, SampleCursor* cursor = nullptr);

// The MIG profile in a MIG device's product name ("NVIDIA A100-SXM4-80GB MIG 1g.10gb"
// -> "1g.10gb"); empty when the name has none.
std::string MigProfileFromName(const std::string& name);

// The GPU instance profile id for a catalog profile name ("1g.10gb": one compute slice,
// 10 GB) on `dev`: of the profiles with that many compute slices the device supports, the
// one whose memory is nearest the name's (1g.10gb and 1g.20gb both have one). An error
// naming the profile when the name is not of that form or the device has none.
Result<unsigned> GpuInstanceProfileId(const NvmlApi& api, nvml::Device dev,
                                      const std::string& profile);

// Creates, on GPU `gpu` (its index and UUID), a GPU instance of `mig.profile` at exactly
// memory slices [mig.start, mig.start + mig.memory_slices) and a compute instance covering
// all of it, and returns it with its MIG device UUID. Refuses, creating nothing, when the
// driver lacks an entry point, the GPU is not in MIG mode, or any instance overlaps the
// placement (creating at an explicit placement never moves another instance). Whatever NVML
// refuses comes back with NVML's reason, and what was made of it is destroyed again. Cost:
// a few NVML calls per MIG device of the GPU.
Result<MadeMig> CreateMigNvml(const NvmlApi& api, const GpuInfo& gpu, const MigPlacement& mig);

// Destroys an instance CreateMigNvml made: its compute instance, then its GPU instance. Ok
// when it is gone already (or its ids now name an instance at another placement, which is
// not touched); an error while processes still use it (NVML_ERROR_IN_USE), to be tried again.
Status DestroyMigNvml(const NvmlApi& api, const MadeMig& mig);

class NvmlGpus final : public GpuSource {
 public:
  // Loads and initializes NVML; an error when either fails.
  static Result<std::unique_ptr<NvmlGpus>> Open(const std::string& library = "libnvidia-ml.so.1");
  ~NvmlGpus() override;
  std::string Describe() const override { return "NVML"; }
  Result<std::vector<GpuInfo>> Discover() override { return DiscoverNvml(api_, &cursor_); }
  Result<MadeMig> CreateMig(const GpuInfo& gpu, const MigPlacement& mig) override {
    return CreateMigNvml(api_, gpu, mig);
  }
  Status DestroyMig(const MadeMig& mig) override { return DestroyMigNvml(api_, mig); }

 private:
  explicit NvmlGpus(NvmlApi api) : api_(api) {}
  NvmlApi api_;
  SampleCursor cursor_;
};

}  // namespace gantry::agent
