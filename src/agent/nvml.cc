#include "agent/nvml.h"

#include <dlfcn.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <map>

namespace gantry::agent {

namespace {

std::string Why(const NvmlApi& api, nvml::Return rc) {
  const char* s = api.error_string ? api.error_string(rc) : nullptr;
  return s ? std::string(s) : "NVML error " + std::to_string(rc);
}

template <typename F>
void Resolve(void* lib, const char* name, F& slot) {
  slot = reinterpret_cast<F>(dlsym(lib, name));
}

// Lowercase bus id without leading zeros in the domain, so "00000000:17:00.0" and
// "0000:17:00.0" compare equal.
std::string NormalizeBusId(const char* id) {
  std::string s(id, strnlen(id, 32));
  const size_t colon = s.find(':');
  if (colon != std::string::npos && colon > 4) s = s.substr(colon - 4);
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

}  // namespace

std::string MigProfileFromName(const std::string& name) {
  const size_t mig = name.rfind("MIG ");
  if (mig == std::string::npos) return {};
  std::string rest = name.substr(mig + 4);
  const size_t space = rest.find(' ');
  return space == std::string::npos ? rest : rest.substr(0, space);
}

Result<NvmlApi> LoadNvml(const std::string& library) {
  void* lib = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char* err = dlerror();
    return Error{"nvml", err ? err : "cannot load " + library};
  }
  NvmlApi api;
  Resolve(lib, "nvmlInit_v2", api.init);
  Resolve(lib, "nvmlShutdown", api.shutdown);
  Resolve(lib, "nvmlErrorString", api.error_string);
  Resolve(lib, "nvmlDeviceGetCount_v2", api.device_count);
  Resolve(lib, "nvmlDeviceGetHandleByIndex_v2", api.device_by_index);
  Resolve(lib, "nvmlDeviceGetName", api.device_name);
  Resolve(lib, "nvmlDeviceGetUUID", api.device_uuid);
  Resolve(lib, "nvmlDeviceGetMemoryInfo", api.device_memory);
  Resolve(lib, "nvmlDeviceGetMigMode", api.mig_mode);
  Resolve(lib, "nvmlDeviceGetMaxMigDeviceCount", api.max_mig_devices);
  Resolve(lib, "nvmlDeviceGetMigDeviceHandleByIndex", api.mig_device_by_index);
  Resolve(lib, "nvmlDeviceGetGpuInstanceId", api.gpu_instance_id);
  Resolve(lib, "nvmlDeviceGetGpuInstanceById", api.gpu_instance_by_id);
  Resolve(lib, "nvmlGpuInstanceGetInfo", api.gpu_instance_info);
  Resolve(lib, "nvmlDeviceGetUtilizationRates", api.utilization);
  Resolve(lib, "nvmlDeviceGetNvLinkState", api.nvlink_state);
  Resolve(lib, "nvmlDeviceGetNvLinkRemotePciInfo_v2", api.nvlink_remote_pci);
  Resolve(lib, "nvmlDeviceGetPciInfo_v3", api.pci_info);
  if (!api.init || !api.shutdown || !api.device_count || !api.device_by_index || !api.device_name ||
      !api.device_uuid || !api.device_memory) {
    dlclose(lib);
    return Error{"nvml", library + " lacks a required entry point (driver too old?)"};
  }
  return api;
}

Result<std::vector<GpuInfo>> DiscoverNvml(const NvmlApi& api) {
  unsigned count = 0;
  if (nvml::Return rc = api.device_count(&count); rc != nvml::kSuccess) {
    return Error{"nvml", "nvmlDeviceGetCount: " + Why(api, rc)};
  }
  std::vector<GpuInfo> gpus;
  std::vector<nvml::Device> devices;
  std::map<std::string, int> by_bus;  // bus id -> index, for NVLink peers
  for (unsigned i = 0; i < count; ++i) {
    GpuInfo g;
    g.index = static_cast<int>(i);
    nvml::Device dev = nullptr;
    nvml::Return rc = api.device_by_index(i, &dev);
    auto check = [&](nvml::Return r) {
      if (r == nvml::kErrorGpuIsLost) g.lost = true;
      return r == nvml::kSuccess;
    };
    if (!check(rc)) {
      if (!g.lost) return Error{"nvml", "nvmlDeviceGetHandleByIndex(" + std::to_string(i) + "): " + Why(api, rc)};
      g.uuid = "GPU-lost-" + std::to_string(i);
      gpus.push_back(g);
      devices.push_back(nullptr);
      continue;
    }
    char buf[256] = {};
    if (check(api.device_name(dev, buf, sizeof buf))) g.name = buf;
    std::memset(buf, 0, sizeof buf);
    if (check(api.device_uuid(dev, buf, sizeof buf))) g.uuid = buf;
    nvml::Memory mem{};
    if (check(api.device_memory(dev, &mem))) {
      g.memory_bytes = static_cast<int64_t>(mem.total);
      g.memory_used_bytes = static_cast<int64_t>(mem.used);
    }
    nvml::Utilization util{};
    if (api.utilization && check(api.utilization(dev, &util))) g.utilization = util.gpu / 100.0;
    unsigned current = 0, pending = 0;
    if (api.mig_mode && check(api.mig_mode(dev, &current, &pending))) g.mig_mode = current == 1;
    if (g.mig_mode && api.max_mig_devices && api.mig_device_by_index) {
      unsigned max = 0;
      if (check(api.max_mig_devices(dev, &max))) {
        for (unsigned m = 0; m < max; ++m) {
          nvml::Device mig = nullptr;
          if (api.mig_device_by_index(dev, m, &mig) != nvml::kSuccess) continue;  // empty slot
          MigInstance inst;
          char mb[256] = {};
          if (api.device_uuid(mig, mb, sizeof mb) == nvml::kSuccess) inst.uuid = mb;
          std::memset(mb, 0, sizeof mb);
          if (api.device_name(mig, mb, sizeof mb) == nvml::kSuccess) inst.profile = MigProfileFromName(mb);
          unsigned gi_id = 0;
          nvml::GpuInstance gi = nullptr;
          nvml::GpuInstanceInfo info{};
          if (api.gpu_instance_id && api.gpu_instance_by_id && api.gpu_instance_info &&
              api.gpu_instance_id(mig, &gi_id) == nvml::kSuccess &&
              api.gpu_instance_by_id(dev, gi_id, &gi) == nvml::kSuccess &&
              api.gpu_instance_info(gi, &info) == nvml::kSuccess) {
            inst.start = static_cast<int>(info.placement.start);
          }
          g.mig.push_back(std::move(inst));
        }
      }
    }
    nvml::PciInfo pci{};
    if (api.pci_info && check(api.pci_info(dev, &pci))) by_bus[NormalizeBusId(pci.bus_id)] = g.index;
    gpus.push_back(std::move(g));
    devices.push_back(dev);
  }
  if (api.nvlink_state && api.nvlink_remote_pci) {
    for (size_t i = 0; i < gpus.size(); ++i) {
      if (!devices[i]) continue;
      for (unsigned link = 0; link < nvml::kMaxLinks; ++link) {
        int active = 0;
        if (api.nvlink_state(devices[i], link, &active) != nvml::kSuccess || active != 1) continue;
        nvml::PciInfo remote{};
        if (api.nvlink_remote_pci(devices[i], link, &remote) != nvml::kSuccess) continue;
        auto it = by_bus.find(NormalizeBusId(remote.bus_id));
        if (it == by_bus.end()) continue;  // an NVSwitch: the peers are not known from here
        std::vector<int>& peers = gpus[i].nvlink_peers;
        if (std::find(peers.begin(), peers.end(), it->second) == peers.end()) peers.push_back(it->second);
      }
      std::sort(gpus[i].nvlink_peers.begin(), gpus[i].nvlink_peers.end());
    }
  }
  return gpus;
}

Result<std::unique_ptr<NvmlGpus>> NvmlGpus::Open(const std::string& library) {
  auto api = LoadNvml(library);
  if (!api) return api.error();
  if (nvml::Return rc = api->init(); rc != nvml::kSuccess) {
    return Error{"nvml", "nvmlInit: " + Why(*api, rc)};
  }
  return std::unique_ptr<NvmlGpus>(new NvmlGpus(*api));
}

NvmlGpus::~NvmlGpus() {
  if (api_.shutdown) api_.shutdown();
}

}  // namespace gantry::agent
