// NVML, loaded at run time with dlopen("libnvidia-ml.so.1"), so one agent binary works
// on machines with and without NVIDIA's driver (as Mesos' GPU isolator does).
//
// NvmlApi is a table of the few NVML entry points the agent uses, with just enough of
// NVML's types declared here to call them (nvml.h is not needed to build). LoadNvml
// fills it from the library; tests fill it with fakes, so DiscoverNvml (the parsing of
// what NVML returns) is tested without a GPU. Entry points marked optional may be null
// (older drivers): the agent then reports less (no MIG, no NVLink, no utilization).
// Thread-safety: NVML itself is thread-safe; NvmlGpus is used by one thread.
#pragma once

#include <memory>
#include <string>

#include "agent/gpu.h"

namespace gantry::agent {

namespace nvml {
using Return = int;  // nvmlReturn_t
inline constexpr Return kSuccess = 0;
inline constexpr Return kErrorNotSupported = 3;
inline constexpr Return kErrorNotFound = 6;
inline constexpr Return kErrorGpuIsLost = 15;
inline constexpr unsigned kMaxLinks = 18;  // NVML_NVLINK_MAX_LINKS
using Device = struct DeviceOpaque*;       // nvmlDevice_t
using GpuInstance = struct GpuInstanceOpaque*;  // nvmlGpuInstance_t
struct Memory {  // nvmlMemory_t
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
struct GpuInstancePlacement {
  unsigned int start, size;
};
struct GpuInstanceInfo {  // nvmlGpuInstanceInfo_t
  Device device;
  unsigned int id, profile_id;
  GpuInstancePlacement placement;
};
}  // namespace nvml

struct NvmlApi {
  nvml::Return (*init)() = nullptr;                      // nvmlInit_v2
  nvml::Return (*shutdown)() = nullptr;                  // nvmlShutdown
  const char* (*error_string)(nvml::Return) = nullptr;   // nvmlErrorString
  nvml::Return (*device_count)(unsigned*) = nullptr;     // nvmlDeviceGetCount_v2
  nvml::Return (*device_by_index)(unsigned, nvml::Device*) = nullptr;  // nvmlDeviceGetHandleByIndex_v2
  nvml::Return (*device_name)(nvml::Device, char*, unsigned) = nullptr;
  nvml::Return (*device_uuid)(nvml::Device, char*, unsigned) = nullptr;
  nvml::Return (*device_memory)(nvml::Device, nvml::Memory*) = nullptr;
  // Optional:
  nvml::Return (*mig_mode)(nvml::Device, unsigned*, unsigned*) = nullptr;
  nvml::Return (*max_mig_devices)(nvml::Device, unsigned*) = nullptr;
  nvml::Return (*mig_device_by_index)(nvml::Device, unsigned, nvml::Device*) = nullptr;
  nvml::Return (*gpu_instance_id)(nvml::Device, unsigned*) = nullptr;
  nvml::Return (*gpu_instance_by_id)(nvml::Device, unsigned, nvml::GpuInstance*) = nullptr;
  nvml::Return (*gpu_instance_info)(nvml::GpuInstance, nvml::GpuInstanceInfo*) = nullptr;
  nvml::Return (*utilization)(nvml::Device, nvml::Utilization*) = nullptr;
  nvml::Return (*nvlink_state)(nvml::Device, unsigned, int*) = nullptr;
  nvml::Return (*nvlink_remote_pci)(nvml::Device, unsigned, nvml::PciInfo*) = nullptr;
  nvml::Return (*pci_info)(nvml::Device, nvml::PciInfo*) = nullptr;
};

// Opens the library and resolves the table; an error says why ("libnvidia-ml.so.1: cannot
// open shared object file" on a machine without the driver). The library stays loaded.
Result<NvmlApi> LoadNvml(const std::string& library = "libnvidia-ml.so.1");

// Reads every GPU through `api` (nvmlInit must have succeeded). A GPU whose queries say
// NVML_ERROR_GPU_IS_LOST is reported with lost = true and what is known of it.
Result<std::vector<GpuInfo>> DiscoverNvml(const NvmlApi& api);

// The MIG profile in a MIG device's product name ("NVIDIA A100-SXM4-80GB MIG 1g.10gb"
// -> "1g.10gb"); empty when the name has none.
std::string MigProfileFromName(const std::string& name);

class NvmlGpus final : public GpuSource {
 public:
  // Loads and initializes NVML; an error when either fails.
  static Result<std::unique_ptr<NvmlGpus>> Open(const std::string& library = "libnvidia-ml.so.1");
  ~NvmlGpus() override;
  std::string Describe() const override { return "NVML"; }
  Result<std::vector<GpuInfo>> Discover() override { return DiscoverNvml(api_); }

 private:
  explicit NvmlGpus(NvmlApi api) : api_(api) {}
  NvmlApi api_;
};

}  // namespace gantry::agent
