#include "agent/nvml.h"

#include <dlfcn.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <optional>
#include <vector>

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

// Pre-fills the process buffer, so the entries' stride can be told from what the driver
// wrote: any value no real field takes.
constexpr unsigned char kUnwritten = 0xa5;
constexpr size_t kMaxStride = 32;

// Adds the processes `list` (a process list entry point) gives for `dev` to `out`; false
// when it fails. The driver fills n entries of 16 (nvmlProcessInfo_v1_t, reported from
// some _v3), 24 (v2, what nvml.h declares) or 32 bytes (drivers 535.43-535.86); each layout
// starts with pid and usedGpuMemory at the same offsets. The buffer has room for n 32-byte
// entries, so none overflows it, and the stride is the smallest one past whose n entries
// nothing was written: each layout's last 8 bytes are real fields (instance ids, protected
// memory), which never all read as kUnwritten.
bool ReadProcesses(nvml::Return (*list)(nvml::Device, unsigned*, void*), nvml::Device dev,
                   std::map<int, GpuProcess>& out, bool mps_clients = false) {
  unsigned capacity = 16;
  for (int attempt = 0; attempt < 4; ++attempt) {
    std::vector<unsigned char> buf(capacity * kMaxStride, kUnwritten);
    unsigned n = capacity;
    const nvml::Return rc = list(dev, &n, buf.data());
    if (rc == nvml::kErrorInsufficientSize) {  // more processes than room: ask again with more
      capacity = std::max(capacity * 2, n + 8);
      continue;
    }
    if (rc != nvml::kSuccess || n > capacity) return false;
    size_t stride = kMaxStride;
    for (size_t s : {size_t{16}, size_t{24}}) {
      if (std::all_of(buf.begin() + static_cast<std::ptrdiff_t>(s * n),
                      buf.begin() + static_cast<std::ptrdiff_t>(kMaxStride * n),
                      [](unsigned char c) { return c == kUnwritten; })) {
        stride = s;
        break;
      }
    }
    for (unsigned i = 0; i < n; ++i) {
      unsigned int pid = 0;
      unsigned long long used = 0;
      std::memcpy(&pid, buf.data() + i * stride + offsetof(nvml::ProcessInfo, pid), sizeof pid);
      std::memcpy(&used, buf.data() + i * stride + offsetof(nvml::ProcessInfo, used_gpu_memory),
                  sizeof used);
      GpuProcess& p = out[static_cast<int>(pid)];
      p.pid = static_cast<int>(pid);
      p.mps_client = p.mps_client || mps_clients;
      if (used != nvml::kValueNotAvailable) p.vram_bytes = static_cast<int64_t>(used);
    }
    return true;
  }
  return false;
}

// Sets each process's SM utilization from NVML's samples for `dev` newer than
// `*last_seen` (then advanced), adding processes sampled but not listed; false when NVML
// cannot tell. NVML samples only processes that were busy, so one without a sample (or no
// sample at all: NVML_ERROR_NOT_FOUND) was idle. A process sampled several times counts
// with its newest sample, as nvmlDeviceGetUtilizationRates gives the newest period. The
// buffer is passed from the first call (not sized by a call without one first), and grown
// when NVML says it is too small.
bool SampleProcesses(const NvmlApi& api, nvml::Device dev, unsigned long long* last_seen,
                     std::map<int, GpuProcess>& out) {
  if (!api.process_utilization) return false;
  unsigned capacity = 32;
  for (int attempt = 0; attempt < 4; ++attempt) {
    std::vector<nvml::ProcessUtilizationSample> samples(capacity);
    unsigned n = capacity;
    const nvml::Return rc = api.process_utilization(dev, samples.data(), &n, *last_seen);
    if (rc == nvml::kErrorInsufficientSize) {
      capacity = std::max(capacity * 2, n + 8);
      continue;
    }
    if (rc == nvml::kErrorNotFound) return true;  // no sample since: all idle
    if (rc != nvml::kSuccess || n > capacity) return false;
    std::map<int, unsigned long long> newest;
    unsigned long long seen = *last_seen;
    for (unsigned i = 0; i < n; ++i) {
      const nvml::ProcessUtilizationSample& s = samples[i];
      const int pid = static_cast<int>(s.pid);
      seen = std::max(seen, s.time_stamp);
      auto [it, fresh] = newest.emplace(pid, s.time_stamp);
      if (!fresh && it->second > s.time_stamp) continue;
      it->second = s.time_stamp;
      GpuProcess& p = out[pid];
      p.pid = pid;
      p.sm_util = std::clamp(s.sm_util / 100.0, 0.0, 1.0);
    }
    *last_seen = seen;
    return true;
  }
  return false;
}

// The processes on one device (GPU or MIG instance) with their memory and utilization.
DeviceProcesses ReadDevice(const NvmlApi& api, nvml::Device dev, const std::string& uuid,
                           SampleCursor* cursor) {
  DeviceProcesses d;
  std::map<int, GpuProcess> procs;
  if (api.compute_processes) d.listed = ReadProcesses(api.compute_processes, dev, procs);
  // Under MPS the clients are in the MPS list; the compute list may show only the MPS server.
  if (d.listed && api.mps_processes)
    ReadProcesses(api.mps_processes, dev, procs, /*mps_clients=*/true);
  unsigned long long from_start = 0;
  unsigned long long* last_seen = cursor ? &(*cursor)[uuid] : &from_start;
  d.sampled = SampleProcesses(api, dev, last_seen, procs);
  for (auto& [pid, p] : procs) d.list.push_back(p);
  return d;
}

// The GPU instance of MIG device `mig` (of `dev`): its id and placement; false where the
// driver does not say.
bool MigPlacementOf(const NvmlApi& api, nvml::Device dev, nvml::Device mig, unsigned* gi_id,
                    nvml::GpuInstancePlacement* placement) {
  nvml::GpuInstance gi = nullptr;
  nvml::GpuInstanceInfo info{};
  if (!api.gpu_instance_id || !api.gpu_instance_by_id || !api.gpu_instance_info ||
      api.gpu_instance_id(mig, gi_id) != nvml::kSuccess ||
      api.gpu_instance_by_id(dev, *gi_id, &gi) != nvml::kSuccess ||
      api.gpu_instance_info(gi, &info) != nvml::kSuccess) {
    return false;
  }
  *placement = info.placement;
  return true;
}

// "1g.10gb" -> {1, 10}: compute slices and GB; false when the name is not of that form.
bool ParseProfile(const std::string& name, int* compute_slices, double* gb) {
  const size_t g = name.find("g.");
  if (g == 0 || g == std::string::npos || name.size() < g + 5 ||
      name.compare(name.size() - 2, 2, "gb") != 0) {
    return false;
  }
  const std::string n = name.substr(0, g), m = name.substr(g + 2, name.size() - g - 4);
  const auto digits = [](const std::string& t, bool point) {
    return !t.empty() && std::all_of(t.begin(), t.end(), [&](char c) {
      return std::isdigit(static_cast<unsigned char>(c)) || (point && c == '.');
    });
  };
  if (!digits(n, false) || !digits(m, true) || n.size() > 2) return false;
  *compute_slices = std::stoi(n);
  *gb = std::strtod(m.c_str(), nullptr);
  return *compute_slices > 0 && *gb > 0;
}

// NVML_COMPUTE_INSTANCE_PROFILE_* covering `slices` compute slices; -1 for none.
int ComputeInstanceProfile(int slices) {
  switch (slices) {
    case 1:
      return nvml::kComputeInstanceProfile1Slice;
    case 2:
      return nvml::kComputeInstanceProfile2Slice;
    case 3:
      return nvml::kComputeInstanceProfile3Slice;
    case 4:
      return nvml::kComputeInstanceProfile4Slice;
    case 6:
      return nvml::kComputeInstanceProfile6Slice;
    case 7:
      return nvml::kComputeInstanceProfile7Slice;
    case 8:
      return nvml::kComputeInstanceProfile8Slice;
    default:
      return -1;
  }
}

std::string Slices(int start, int size) {
  return size <= 1
             ? "memory slice " + std::to_string(start)
             : "memory slices " + std::to_string(start) + "-" + std::to_string(start + size - 1);
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
  Resolve(lib, "nvmlDeviceGetComputeInstanceId", api.compute_instance_id);
  Resolve(lib, "nvmlDeviceGetGpuInstanceById", api.gpu_instance_by_id);
  Resolve(lib, "nvmlGpuInstanceGetInfo", api.gpu_instance_info);
  Resolve(lib, "nvmlDeviceGetUtilizationRates", api.utilization);
  Resolve(lib, "nvmlDeviceGetNvLinkState", api.nvlink_state);
  Resolve(lib, "nvmlDeviceGetNvLinkRemotePciInfo_v2", api.nvlink_remote_pci);
  Resolve(lib, "nvmlDeviceGetPciInfo_v3", api.pci_info);
  Resolve(lib, "nvmlDeviceGetMinorNumber", api.minor_number);
  Resolve(lib, "nvmlDeviceGetComputeRunningProcesses_v3", api.compute_processes);
  if (!api.compute_processes) {
    Resolve(lib, "nvmlDeviceGetComputeRunningProcesses_v2", api.compute_processes);
  }
  Resolve(lib, "nvmlDeviceGetMPSComputeRunningProcesses_v3", api.mps_processes);
  if (!api.mps_processes)
    Resolve(lib, "nvmlDeviceGetMPSComputeRunningProcesses_v2", api.mps_processes);
  Resolve(lib, "nvmlDeviceGetProcessUtilization", api.process_utilization);
  Resolve(lib, "nvmlDeviceGetGpuInstanceProfileInfo", api.gpu_instance_profile_info);
  Resolve(lib, "nvmlDeviceCreateGpuInstanceWithPlacement", api.create_gpu_instance);
  Resolve(lib, "nvmlGpuInstanceGetComputeInstanceProfileInfo", api.compute_instance_profile_info);
  Resolve(lib, "nvmlGpuInstanceCreateComputeInstance", api.create_compute_instance);
  Resolve(lib, "nvmlComputeInstanceGetInfo_v2", api.compute_instance_info);
  Resolve(lib, "nvmlGpuInstanceGetComputeInstanceById", api.compute_instance_by_id);
  Resolve(lib, "nvmlComputeInstanceDestroy", api.destroy_compute_instance);
  Resolve(lib, "nvmlGpuInstanceDestroy", api.destroy_gpu_instance);
  if (!api.init || !api.shutdown || !api.device_count || !api.device_by_index || !api.device_name ||
      !api.device_uuid || !api.device_memory) {
    dlclose(lib);
    return Error{"nvml", library + " lacks a required entry point (driver too old?)"};
  }
  return api;
}

Result<std::vector<GpuInfo>> DiscoverNvml(const NvmlApi& api, SampleCursor* cursor) {
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
      if (!g.lost)
        return Error{"nvml",
                     "nvmlDeviceGetHandleByIndex(" + std::to_string(i) + "): " + Why(api, rc)};
      g.uuid = "GPU-lost-" + std::to_string(i);
      gpus.push_back(g);
      devices.push_back(nullptr);
      continue;
    }
    char buf[256] = {};
    if (check(api.device_name(dev, buf, sizeof buf))) g.name = buf;
    std::memset(buf, 0, sizeof buf);
    if (check(api.device_uuid(dev, buf, sizeof buf))) g.uuid = buf;
    if (unsigned minor = 0; api.minor_number && check(api.minor_number(dev, &minor)))
      g.minor = static_cast<int>(minor);
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
          if (api.device_name(mig, mb, sizeof mb) == nvml::kSuccess)
            inst.profile = MigProfileFromName(mb);
          unsigned gi_id = 0;
          nvml::GpuInstancePlacement placement{};
          if (MigPlacementOf(api, dev, mig, &gi_id, &placement)) {
            inst.start = static_cast<int>(placement.start);
            inst.size = static_cast<int>(placement.size);
            inst.gpu_instance_id = static_cast<int>(gi_id);
          }
          if (unsigned ci_id = 0;
              api.compute_instance_id && api.compute_instance_id(mig, &ci_id) == nvml::kSuccess) {
            inst.compute_instance_id = static_cast<int>(ci_id);
          }
          nvml::Memory mig_mem{};
          if (api.device_memory(mig, &mig_mem) == nvml::kSuccess) {
            inst.memory_bytes = static_cast<int64_t>(mig_mem.total);
            inst.memory_used_bytes = static_cast<int64_t>(mig_mem.used);
          }
          // NVML documents utilization rates as not supported on MIG devices; taken where given.
          nvml::Utilization mig_util{};
          if (api.utilization && api.utilization(mig, &mig_util) == nvml::kSuccess) {
            inst.utilization = std::min(mig_util.gpu, 100u) / 100.0;
          }
          if (!inst.uuid.empty()) inst.processes = ReadDevice(api, mig, inst.uuid, cursor);
          g.mig.push_back(std::move(inst));
        }
      }
    }
    nvml::PciInfo pci{};
    if (api.pci_info && check(api.pci_info(dev, &pci))) {
      g.pci_bus_id = NormalizeBusId(pci.bus_id);
      by_bus[g.pci_bus_id] = g.index;
    }
    // A GPU in MIG mode runs nothing itself: its processes are its instances'.
    if (!g.lost && !g.mig_mode && !g.uuid.empty())
      g.processes = ReadDevice(api, dev, g.uuid, cursor);
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
        if (std::find(peers.begin(), peers.end(), it->second) == peers.end())
          peers.push_back(it->second);
      }
      std::sort(gpus[i].nvlink_peers.begin(), gpus[i].nvlink_peers.end());
    }
  }
  return gpus;
}

Result<unsigned> GpuInstanceProfileId(const NvmlApi& api, nvml::Device dev,
                                      const std::string& profile) {
  int slices = 0;
  double gb = 0;
  if (!ParseProfile(profile, &slices, &gb)) {
    return Error{"mig",
                 "MIG profile \"" + profile + "\" is not of the form <compute slices>g.<memory>gb"};
  }
  if (!api.gpu_instance_profile_info)
    return Error{"mig", "NVML lacks nvmlDeviceGetGpuInstanceProfileInfo"};
  std::vector<unsigned> candidates;
  switch (slices) {
    case 1:
      candidates = {nvml::kGpuInstanceProfile1Slice, nvml::kGpuInstanceProfile1SliceRev2};
      break;
    case 2:
      candidates = {nvml::kGpuInstanceProfile2Slice};
      break;
    case 3:
      candidates = {nvml::kGpuInstanceProfile3Slice};
      break;
    case 4:
      candidates = {nvml::kGpuInstanceProfile4Slice};
      break;
    case 6:
      candidates = {nvml::kGpuInstanceProfile6Slice};
      break;
    case 7:
      candidates = {nvml::kGpuInstanceProfile7Slice};
      break;
    case 8:
      candidates = {nvml::kGpuInstanceProfile8Slice};
      break;
    default:
      break;
  }
  std::optional<unsigned> best;
  double best_gap = 0;
  std::string last_error;
  for (unsigned c : candidates) {
    nvml::GpuInstanceProfileInfo info{};
    const nvml::Return rc = api.gpu_instance_profile_info(dev, c, &info);
    if (rc != nvml::kSuccess) {
      last_error = Why(api, rc);
      continue;
    }
    if (static_cast<int>(info.slice_count) != slices) continue;
    // NVML's "MBytes" are MiB; the name's GB are nominal. Only the nearest matters.
    const double gap = std::abs(static_cast<double>(info.memory_size_mb) * 1048576.0 / 1e9 - gb);
    if (!best || gap < best_gap) {
      best = info.id;
      best_gap = gap;
    }
  }
  if (!best) {
    return Error{"mig", "the GPU has no MIG profile with " + std::to_string(slices) +
                            " compute slice(s) for " + profile +
                            (last_error.empty() ? "" : " (NVML: " + last_error + ")")};
  }
  return *best;
}

Result<MadeMig> CreateMigNvml(const NvmlApi& api, const GpuInfo& gpu, const MigPlacement& want) {
  const std::pair<bool, const char*> needed[] = {
      {api.gpu_instance_profile_info != nullptr, "nvmlDeviceGetGpuInstanceProfileInfo"},
      {api.create_gpu_instance != nullptr, "nvmlDeviceCreateGpuInstanceWithPlacement"},
      {api.compute_instance_profile_info != nullptr,
       "nvmlGpuInstanceGetComputeInstanceProfileInfo"},
      {api.create_compute_instance != nullptr, "nvmlGpuInstanceCreateComputeInstance"},
      {api.compute_instance_info != nullptr, "nvmlComputeInstanceGetInfo_v2"},
      {api.compute_instance_by_id != nullptr, "nvmlGpuInstanceGetComputeInstanceById"},
      {api.destroy_compute_instance != nullptr, "nvmlComputeInstanceDestroy"},
      {api.destroy_gpu_instance != nullptr, "nvmlGpuInstanceDestroy"},
      {api.mig_mode != nullptr, "nvmlDeviceGetMigMode"},
      {api.max_mig_devices != nullptr, "nvmlDeviceGetMaxMigDeviceCount"},
      {api.mig_device_by_index != nullptr, "nvmlDeviceGetMigDeviceHandleByIndex"},
      {api.gpu_instance_id != nullptr, "nvmlDeviceGetGpuInstanceId"},
      {api.gpu_instance_by_id != nullptr, "nvmlDeviceGetGpuInstanceById"},
      {api.gpu_instance_info != nullptr, "nvmlGpuInstanceGetInfo"}};
  for (const auto& [have, name] : needed) {
    if (!have) {
      return Error{"mig",
                   std::string("this driver's NVML lacks ") + name +
                       ": it cannot create MIG instances at a placement (a newer driver can)"};
    }
  }
  const int compute_slices = [&] {
    int n = 0;
    double gb = 0;
    return ParseProfile(want.profile, &n, &gb) ? n : 0;
  }();
  if (want.start < 0 || want.memory_slices <= 0 ||
      (want.compute_slices > 0 && compute_slices > 0 && want.compute_slices != compute_slices)) {
    return Error{"mig", "no valid placement for " + want.profile + " (start " +
                            std::to_string(want.start) + ", " + std::to_string(want.memory_slices) +
                            " memory slices)"};
  }
  nvml::Device dev = nullptr;
  if (nvml::Return rc = api.device_by_index(static_cast<unsigned>(gpu.index), &dev);
      rc != nvml::kSuccess) {
    return Error{"mig", "nvmlDeviceGetHandleByIndex: " + Why(api, rc)};
  }
  char uuid[256] = {};
  if (api.device_uuid(dev, uuid, sizeof uuid) != nvml::kSuccess || gpu.uuid != uuid) {
    return Error{"mig", "GPU " + std::to_string(gpu.index) + " is no longer " + gpu.uuid};
  }
  unsigned current = 0, pending = 0;
  if (nvml::Return rc = api.mig_mode(dev, &current, &pending);
      rc != nvml::kSuccess || current != 1) {
    return Error{"mig", "the GPU is not in MIG mode (" +
                            (rc != nvml::kSuccess
                                 ? "nvmlDeviceGetMigMode: " + Why(api, rc)
                                 : "enable it with nvidia-smi -i " + std::to_string(gpu.index) +
                                       " -mig 1; the agent does not, as that resets the GPU") +
                            ")"};
  }
  // The MIG devices there now: nothing may overlap the placement (NVML would refuse it
  // anyway; this says which instance is in the way).
  unsigned max = 0;
  if (nvml::Return rc = api.max_mig_devices(dev, &max); rc != nvml::kSuccess) {
    return Error{"mig", "nvmlDeviceGetMaxMigDeviceCount: " + Why(api, rc)};
  }
  auto mig_devices =
      [&](const std::function<bool(nvml::Device, unsigned, nvml::GpuInstancePlacement)>& each) {
        for (unsigned m = 0; m < max; ++m) {
          nvml::Device mig = nullptr;
          unsigned gi_id = 0;
          nvml::GpuInstancePlacement at{};
          if (api.mig_device_by_index(dev, m, &mig) != nvml::kSuccess) continue;  // an empty slot
          if (!MigPlacementOf(api, dev, mig, &gi_id, &at)) continue;
          if (!each(mig, gi_id, at)) return;
        }
      };
  const unsigned start = static_cast<unsigned>(want.start),
                 size = static_cast<unsigned>(want.memory_slices);
  std::string overlap;
  mig_devices([&](nvml::Device mig, unsigned, nvml::GpuInstancePlacement at) {
    if (at.start >= start + size || start >= at.start + at.size) return true;
    char name[256] = {}, id[256] = {};
    api.device_name(mig, name, sizeof name);
    api.device_uuid(mig, id, sizeof id);
    overlap = "MIG instance " + std::string(id) + " (" + MigProfileFromName(name) + " at " +
              Slices(static_cast<int>(at.start), static_cast<int>(at.size)) + ") overlaps " +
              Slices(want.start, want.memory_slices) +
              "; the agent creates only on free slices and moves no instance";
    return false;
  });
  if (!overlap.empty()) return Error{"mig", overlap};
  auto profile = GpuInstanceProfileId(api, dev, want.profile);
  if (!profile) return profile.error();
  const int ci_profile = ComputeInstanceProfile(compute_slices);
  if (ci_profile < 0) return Error{"mig", "no compute instance profile covers " + want.profile};

  const nvml::GpuInstancePlacement placement{start, size};
  nvml::GpuInstance gi = nullptr;
  if (nvml::Return rc = api.create_gpu_instance(dev, *profile, &placement, &gi);
      rc != nvml::kSuccess) {
    return Error{"mig", "nvmlDeviceCreateGpuInstanceWithPlacement: " + Why(api, rc)};
  }
  // From here a failure destroys what was made, so nothing is left half-made.
  nvml::ComputeInstance ci = nullptr;
  auto undo = [&](const std::string& why) -> Error {
    if (ci) api.destroy_compute_instance(ci);
    api.destroy_gpu_instance(gi);
    return Error{"mig", why};
  };
  nvml::GpuInstanceInfo gi_info{};
  if (nvml::Return rc = api.gpu_instance_info(gi, &gi_info); rc != nvml::kSuccess) {
    return undo("nvmlGpuInstanceGetInfo: " + Why(api, rc));
  }
  nvml::ComputeInstanceProfileInfo ci_info{};
  if (nvml::Return rc =
          api.compute_instance_profile_info(gi, static_cast<unsigned>(ci_profile),
                                            nvml::kComputeInstanceEngineProfileShared, &ci_info);
      rc != nvml::kSuccess) {
    return undo("nvmlGpuInstanceGetComputeInstanceProfileInfo: " + Why(api, rc));
  }
  if (nvml::Return rc = api.create_compute_instance(gi, ci_info.id, &ci); rc != nvml::kSuccess) {
    ci = nullptr;
    return undo("nvmlGpuInstanceCreateComputeInstance: " + Why(api, rc));
  }
  nvml::ComputeInstanceInfo info{};
  if (nvml::Return rc = api.compute_instance_info(ci, &info); rc != nvml::kSuccess) {
    return undo("nvmlComputeInstanceGetInfo: " + Why(api, rc));
  }
  MadeMig made;
  made.gpu = gpu.index;
  made.gpu_uuid = gpu.uuid;
  made.profile = want.profile;
  made.start = want.start;
  made.size = want.memory_slices;
  made.gpu_instance = gi_info.id;
  made.compute_instance = info.id;
  // Its MIG device (one per compute instance), for the UUID CUDA takes.
  mig_devices([&](nvml::Device mig, unsigned gi_id, nvml::GpuInstancePlacement) {
    if (gi_id != gi_info.id) return true;
    char id[256] = {};
    if (api.device_uuid(mig, id, sizeof id) == nvml::kSuccess) made.uuid = id;
    return false;
  });
  if (made.uuid.empty()) return undo("the new instance is not listed as a MIG device");
  return made;
}

Status DestroyMigNvml(const NvmlApi& api, const MadeMig& mig) {
  if (!api.gpu_instance_by_id || !api.gpu_instance_info || !api.compute_instance_by_id ||
      !api.destroy_compute_instance || !api.destroy_gpu_instance) {
    return Error{"mig", "this driver's NVML cannot destroy MIG instances"};
  }
  // The GPU by UUID: an index can name another GPU after a reboot.
  nvml::Device dev = nullptr;
  unsigned count = 0;
  if (nvml::Return rc = api.device_count(&count); rc != nvml::kSuccess) {
    return Error{"mig", "nvmlDeviceGetCount: " + Why(api, rc)};
  }
  for (unsigned i = 0; i < count && !dev; ++i) {
    nvml::Device d = nullptr;
    char uuid[256] = {};
    if (api.device_by_index(i, &d) == nvml::kSuccess &&
        api.device_uuid(d, uuid, sizeof uuid) == nvml::kSuccess && mig.gpu_uuid == uuid) {
      dev = d;
    }
  }
  if (!dev) return Ok{};  // the GPU is gone, and its instances with it
  nvml::GpuInstance gi = nullptr;
  nvml::Return rc = api.gpu_instance_by_id(dev, mig.gpu_instance, &gi);
  if (rc == nvml::kErrorNotFound) return Ok{};
  if (rc != nvml::kSuccess) return Error{"mig", "nvmlDeviceGetGpuInstanceById: " + Why(api, rc)};
  nvml::GpuInstanceInfo info{};
  if (rc = api.gpu_instance_info(gi, &info); rc != nvml::kSuccess) {
    return Error{"mig", "nvmlGpuInstanceGetInfo: " + Why(api, rc)};
  }
  // Its id now names an instance at another placement: made by someone else since. Not ours.
  if (static_cast<int>(info.placement.start) != mig.start ||
      static_cast<int>(info.placement.size) != mig.size) {
    return Ok{};
  }
  nvml::ComputeInstance ci = nullptr;
  rc = api.compute_instance_by_id(gi, mig.compute_instance, &ci);
  if (rc == nvml::kSuccess) {
    rc = api.destroy_compute_instance(ci);
    if (rc != nvml::kSuccess) {
      return Error{"mig", "nvmlComputeInstanceDestroy: " + Why(api, rc) +
                              (rc == nvml::kErrorInUse ? " (processes still run on it)" : "")};
    }
  } else if (rc != nvml::kErrorNotFound) {
    return Error{"mig", "nvmlGpuInstanceGetComputeInstanceById: " + Why(api, rc)};
  }
  rc = api.destroy_gpu_instance(gi);
  if (rc != nvml::kSuccess) {
    return Error{
        "mig",
        "nvmlGpuInstanceDestroy: " + Why(api, rc) +
            (rc == nvml::kErrorInUse ? " (it still has a compute instance or processes)" : "")};
  }
  return Ok{};
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
