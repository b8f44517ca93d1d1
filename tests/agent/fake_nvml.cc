// A fake libnvidia-ml.so.1 for the agent's tests: a real shared library exporting the NVML
// entry points the agent resolves, answering from a script, so that LoadNvml (dlopen and
// dlsym), DiscoverNvml and the per-process accounting run end to end without a GPU, in the
// test process or in a real gantry-agent (LD_LIBRARY_PATH).
//
// The script is the JSON file named by $GANTRY_FAKE_NVML, read again at each sample (each
// nvmlDeviceGetCount_v2 call: DiscoverNvml makes one per sample), so a test may rewrite
// it between samples:
//
//   {"process_stride": 24,            // bytes per entry the _v3 process lists write: 24
//                                     // (nvml.h), 32 (drivers 535.43-535.86) or 16
//    "gpus": [{
//      "name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-aaaa", "bus": "00000000:17:00.0",
//      "memory_bytes": 85520809984, "memory_used_bytes": 1048576,
//      "utilization": 75,             // percent; absent: NVML_ERROR_NOT_SUPPORTED
//      "nvlinks": ["0000:18:00.0"],   // the remote PCI bus id of each active link
//      "lost_after": 2,               // from the 3rd sample on: NVML_ERROR_GPU_IS_LOST
//      "process_utilization": true,   // false: NVML_ERROR_NOT_SUPPORTED (also per MIG device)
//      "processes": [{"pid": 123, "used_bytes": 1000,    // absent: NVML_VALUE_NOT_AVAILABLE
//                     "sm_util": 20,  // percent; 0: no sample (NVML samples busy processes)
//                     "sampled_at": 5,  // sample time stamp (us); absent: the sample number
//                     "mps": true}],  // listed by the MPS call, not the compute one
//      "mig": [{"uuid": "MIG-1", "profile": "1g.10gb", "start": 6, "size": 1,
//               "memory_bytes": ..., "memory_used_bytes": ..., "utilization": ...,
//               "processes": [...]}]}]}
//
// Built three times (tests/agent/CMakeLists.txt), each as libnvidia-ml.so.1 in a directory
// of its own: in full; with FAKE_NVML_OLD, an old driver without the _v3 process lists, the
// MPS list, per-process utilization, MIG and NVLink (only _v2 process lists); and with
// FAKE_NVML_BROKEN, lacking an entry point the agent requires.
// The types are declared as NVML 12.2's nvml.h declares them, apart from the agent's.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <string>

#include <nlohmann/json.hpp>

using nlohmann::json;

extern "C" {

typedef int nvmlReturn_t;
typedef struct nvmlDevice_st* nvmlDevice_t;
typedef struct nvmlGpuInstance_st* nvmlGpuInstance_t;
typedef struct {
  unsigned long long total, free, used;
} nvmlMemory_t;
typedef struct {
  unsigned int gpu, memory;
} nvmlUtilization_t;
typedef struct {
  char busIdLegacy[16];
  unsigned int domain, bus, device, pciDeviceId, pciSubSystemId;
  char busId[32];
} nvmlPciInfo_t;
typedef struct {
  unsigned int start, size;
} nvmlGpuInstancePlacement_t;
typedef struct {
  nvmlDevice_t device;
  unsigned int id, profileId;
  nvmlGpuInstancePlacement_t placement;
} nvmlGpuInstanceInfo_t;
typedef struct {
  unsigned int pid;
  unsigned long long usedGpuMemory;
  unsigned int gpuInstanceId, computeInstanceId;
} nvmlProcessInfo_v2_t;
typedef struct {  // what drivers 535.43-535.86 wrote from the _v3 process lists
  unsigned int pid;
  unsigned long long usedGpuMemory;
  unsigned int gpuInstanceId, computeInstanceId;
  unsigned long long usedGpuCcProtectedMemory;
} nvmlProcessInfo_v3_t;
typedef struct {
  unsigned int pid;
  unsigned long long usedGpuMemory;
} nvmlProcessInfo_v1_t;
typedef struct {
  unsigned int pid;
  unsigned long long timeStamp;
  unsigned int smUtil, memUtil, encUtil, decUtil;
} nvmlProcessUtilizationSample_t;

}  // extern "C"

#define FAKE_EXPORT extern "C" __attribute__((visibility("default")))

namespace {

constexpr nvmlReturn_t kSuccess = 0, kUninitialized = 1, kInvalidArgument = 2, kNotSupported = 3,
                       kNotFound = 6, kInsufficientSize = 7, kGpuIsLost = 15, kUnknown = 999;

std::mutex mu;
json script;
bool initialized = false;
int64_t samples = 0;  // nvmlDeviceGetCount_v2 calls since nvmlInit_v2

// Handles are small numbers, stable across re-reads of the script: GPU i is i + 1, MIG
// device k of GPU i (and its GPU instance) (i + 1) * 1000 + k + 1.
struct Ref {
  const json* gpu = nullptr;
  const json* mig = nullptr;  // null for the GPU itself
  unsigned gpu_index = 0, mig_index = 0;
};

bool Load() {
  const char* path = std::getenv("GANTRY_FAKE_NVML");
  if (!path) return false;
  std::ifstream in(path);
  json j = json::parse(in, nullptr, false);
  if (!j.is_object()) return false;
  script = std::move(j);
  return true;
}

const json& Gpus() {
  static const json kNone = json::array();
  return script.contains("gpus") ? script["gpus"] : kNone;
}

nvmlReturn_t Find(const void* handle, Ref& ref) {
  if (!initialized) return kUninitialized;
  const auto id = reinterpret_cast<uintptr_t>(handle);
  const uintptr_t gpu = id >= 1000 ? id / 1000 - 1 : id - 1;
  if (id == 0 || gpu >= Gpus().size()) return kInvalidArgument;
  ref.gpu = &Gpus()[gpu];
  ref.gpu_index = static_cast<unsigned>(gpu);
  if (id >= 1000) {
    const json& migs = ref.gpu->contains("mig") ? (*ref.gpu)["mig"] : json::array();
    const uintptr_t k = id % 1000 - 1;
    if (id % 1000 == 0 || k >= migs.size()) return kInvalidArgument;
    ref.mig = &(*ref.gpu)["mig"][k];
    ref.mig_index = static_cast<unsigned>(k);
  }
  const int64_t lost_after = ref.gpu->value("lost_after", int64_t{-1});
  if (lost_after >= 0 && samples > lost_after) return kGpuIsLost;
  return kSuccess;
}

const json& Device(const Ref& r) { return r.mig ? *r.mig : *r.gpu; }

void Copy(char* out, unsigned length, const std::string& s) {
  if (length == 0) return;
  std::snprintf(out, length, "%s", s.c_str());
}

// The process lists. `v3`: entries at the script's process_stride, else as _v2 writes them;
// `mps`: the MPS list rather than the compute one.
nvmlReturn_t Processes(nvmlDevice_t dev, unsigned int* count, void* infos, bool v3, bool mps) {
  std::lock_guard lk(mu);
  size_t stride = sizeof(nvmlProcessInfo_v2_t);
  if (const size_t s = script.value("process_stride", stride); v3 && (s == 16 || s == 32))
    stride = s;
  Ref r;
  if (nvmlReturn_t rc = Find(dev, r); rc != kSuccess) return rc;
  if (!count) return kInvalidArgument;
  std::vector<json> listed;
  for (const json& p : Device(r).value("processes", json::array())) {
    if (p.value("mps", false) == mps) listed.push_back(p);
  }
  if (listed.size() > *count || (!infos && !listed.empty())) {
    *count = static_cast<unsigned>(listed.size());
    return kInsufficientSize;
  }
  auto* out = static_cast<unsigned char*>(infos);
  for (size_t i = 0; i < listed.size(); ++i) {
    nvmlProcessInfo_v3_t e{};  // the longest entry; `stride` bytes of it are written
    e.pid = listed[i].value("pid", 0u);
    e.usedGpuMemory = listed[i].contains("used_bytes")
                          ? listed[i]["used_bytes"].get<unsigned long long>()
                          : ~0ull;  // NVML_VALUE_NOT_AVAILABLE
    e.gpuInstanceId = r.mig ? r.mig_index : 0xffffffffu;
    e.computeInstanceId = r.mig ? 0 : 0xffffffffu;
    e.usedGpuCcProtectedMemory = 0;
    std::memcpy(out + i * stride, &e, stride);
  }
  *count = static_cast<unsigned>(listed.size());
  return kSuccess;
}

}  // namespace

static_assert(sizeof(nvmlProcessInfo_v1_t) == 16 && sizeof(nvmlProcessInfo_v2_t) == 24 &&
              sizeof(nvmlProcessInfo_v3_t) == 32 && sizeof(nvmlProcessUtilizationSample_t) == 32);

FAKE_EXPORT nvmlReturn_t nvmlInit_v2() {
  std::lock_guard lk(mu);
  if (!Load()) return kUnknown;
  initialized = true;
  samples = 0;
  return kSuccess;
}

FAKE_EXPORT nvmlReturn_t nvmlShutdown() {
  std::lock_guard lk(mu);
  initialized = false;
  return kSuccess;
}

FAKE_EXPORT const char* nvmlErrorString(nvmlReturn_t rc) {
  switch (rc) {
    case kSuccess:
      return "Success";
    case kUninitialized:
      return "Uninitialized";
    case kInvalidArgument:
      return "Invalid Argument";
    case kNotSupported:
      return "Not Supported";
    case kNotFound:
      return "Not Found";
    case kInsufficientSize:
      return "Insufficient Size";
    case kGpuIsLost:
      return "GPU is lost";
    default:
      return "Unknown Error (fake NVML: is GANTRY_FAKE_NVML a readable JSON file?)";
  }
}

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int* count) {
  std::lock_guard lk(mu);
  if (!initialized) return kUninitialized;
  Load();  // a test may have rewritten it; a half-written file keeps the previous script
  ++samples;
  *count = static_cast<unsigned>(Gpus().size());
  return kSuccess;
}

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t* dev) {
  std::lock_guard lk(mu);
  if (!initialized) return kUninitialized;
  if (index >= Gpus().size()) return kInvalidArgument;
  *dev = reinterpret_cast<nvmlDevice_t>(static_cast<uintptr_t>(index + 1));
  return kSuccess;
}

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t dev, char* name, unsigned int length) {
  std::lock_guard lk(mu);
  Ref r;
  if (nvmlReturn_t rc = Find(dev, r); rc != kSuccess) return rc;
  const std::string gpu = r.gpu->value("name", "NVIDIA Fake GPU");
  Copy(name, length, r.mig ? gpu + " MIG " + r.mig->value("profile", "1g.10gb") : gpu);
  return kSuccess;
}

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t dev, char* uuid, unsigned int length) {
  std::lock_guard lk(mu);
  Ref r;
  if (nvmlReturn_t rc = Find(dev, r); rc != kSuccess) return rc;
  Copy(uuid, length, Device(r).value("uuid", ""));
  return kSuccess;
}

#ifndef FAKE_NVML_BROKEN
FAKE_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t dev, nvmlMemory_t* memory) {
  std::lock_guard lk(mu);
  Ref r;
  if (nvmlReturn_t rc = Find(dev, r); rc != kSuccess) return rc;
  const json& d = Device(r);
  memory->total = d.value("memory_bytes", 0ull);
  memory->used = d.value("memory_used_bytes", 0ull);
  memory->free = memory->total - memory->used;
  return kSuccess;
}
#endif

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t dev, nvmlUtilization_t* util) {
  std::lock_guard lk(mu);
  Ref r;
  if (nvmlReturn_t rc = Find(dev, r); rc != kSuccess) return rc;
  if (!Device(r).contains("utilization")) return kNotSupported;  // as on MIG devices
  util->gpu = Device(r)["utilization"].get<unsigned>();
  util->memory = 0;
  return kSuccess;
}

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t dev, nvmlPciInfo_t* pci) {
  std::lock_guard lk(mu);
  Ref r;
  if (nvmlReturn_t rc = Find(dev, r); rc != kSuccess) return rc;
  std::memset(pci, 0, sizeof *pci);
  Copy(pci->busId, sizeof pci->busId, r.gpu->value("bus", ""));
  return kSuccess;
}

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t dev,
                                                                 unsigned int* count,
                                                                 nvmlProcessInfo_v2_t* infos) {
  return Processes(dev, count, infos, false, false);
}

#ifndef FAKE_NVML_OLD
FAKE_EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t dev,
                                                                 unsigned int* count, void* infos) {
  return Processes(dev, count, infos, true, false);
}

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetMPSComputeRunningProcesses_v3(nvmlDevice_t dev,
                                                                    unsigned int* count,
                                                                    void* infos) {
  return Processes(dev, count, infos, true, true);
}

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetProcessUtilization(nvmlDevice_t dev,
                                                         nvmlProcessUtilizationSample_t* out,
                                                         unsigned int* count,
                                                         unsigned long long last_seen) {
  std::lock_guard lk(mu);
  Ref r;
  if (nvmlReturn_t rc = Find(dev, r); rc != kSuccess) return rc;
  if (!count) return kInvalidArgument;
  if (!r.gpu->value("process_utilization", true)) return kNotSupported;
  std::vector<nvmlProcessUtilizationSample_t> fresh;
  for (const json& p : Device(r).value("processes", json::array())) {
    nvmlProcessUtilizationSample_t s{};
    s.pid = p.value("pid", 0u);
    s.smUtil = p.value("sm_util", 0u);
    s.timeStamp = p.value("sampled_at", static_cast<unsigned long long>(samples));
    if (s.smUtil > 0 && s.timeStamp > last_seen) fresh.push_back(s);
  }
  if (fresh.empty()) return kNotFound;  // no sample newer than last_seen
  if (!out || fresh.size() > *count) {
    *count = static_cast<unsigned>(fresh.size());
    return kInsufficientSize;
  }
  std::memcpy(out, fresh.data(), fresh.size() * sizeof fresh[0]);
  *count = static_cast<unsigned>(fresh.size());
  return kSuccess;
}

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t dev, unsigned int* current,
                                              unsigned int* pending) {
  std::lock_guard lk(mu);
  Ref r;
  if (nvmlReturn_t rc = Find(dev, r); rc != kSuccess) return rc;
  *current = *pending = r.gpu->contains("mig") ? 1 : 0;
  return kSuccess;
}

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t dev, unsigned int* count) {
  std::lock_guard lk(mu);
  Ref r;
  if (nvmlReturn_t rc = Find(dev, r); rc != kSuccess) return rc;
  *count = 7;
  return kSuccess;
}

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t dev, unsigned int index,
                                                             nvmlDevice_t* mig) {
  std::lock_guard lk(mu);
  Ref r;
  if (nvmlReturn_t rc = Find(dev, r); rc != kSuccess) return rc;
  if (index >= r.gpu->value("mig", json::array()).size()) return kNotFound;
  *mig =
      reinterpret_cast<nvmlDevice_t>(static_cast<uintptr_t>((r.gpu_index + 1) * 1000 + index + 1));
  return kSuccess;
}

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetGpuInstanceId(nvmlDevice_t mig, unsigned int* id) {
  std::lock_guard lk(mu);
  Ref r;
  if (nvmlReturn_t rc = Find(mig, r); rc != kSuccess) return rc;
  if (!r.mig) return kInvalidArgument;
  *id = r.mig_index;
  return kSuccess;
}

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetGpuInstanceById(nvmlDevice_t dev, unsigned int id,
                                                      nvmlGpuInstance_t* gi) {
  std::lock_guard lk(mu);
  Ref r;
  if (nvmlReturn_t rc = Find(dev, r); rc != kSuccess) return rc;
  if (id >= r.gpu->value("mig", json::array()).size()) return kNotFound;
  *gi = reinterpret_cast<nvmlGpuInstance_t>(
      static_cast<uintptr_t>((r.gpu_index + 1) * 1000 + id + 1));
  return kSuccess;
}

FAKE_EXPORT nvmlReturn_t nvmlGpuInstanceGetInfo(nvmlGpuInstance_t gi, nvmlGpuInstanceInfo_t* info) {
  std::lock_guard lk(mu);
  Ref r;
  if (nvmlReturn_t rc = Find(gi, r); rc != kSuccess) return rc;
  if (!r.mig) return kInvalidArgument;
  std::memset(info, 0, sizeof *info);
  info->id = r.mig_index;
  info->placement.start = r.mig->value("start", 0u);
  info->placement.size = r.mig->value("size", 1u);
  return kSuccess;
}

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetNvLinkState(nvmlDevice_t dev, unsigned int link,
                                                  int* active) {
  std::lock_guard lk(mu);
  Ref r;
  if (nvmlReturn_t rc = Find(dev, r); rc != kSuccess) return rc;
  *active = link < r.gpu->value("nvlinks", json::array()).size() ? 1 : 0;
  return kSuccess;
}

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo_v2(nvmlDevice_t dev, unsigned int link,
                                                             nvmlPciInfo_t* pci) {
  std::lock_guard lk(mu);
  Ref r;
  if (nvmlReturn_t rc = Find(dev, r); rc != kSuccess) return rc;
  const json links = r.gpu->value("nvlinks", json::array());
  if (link >= links.size()) return kNotSupported;
  std::memset(pci, 0, sizeof *pci);
  Copy(pci->busId, sizeof pci->busId, links[link].get<std::string>());
  return kSuccess;
}
#endif  // FAKE_NVML_OLD
