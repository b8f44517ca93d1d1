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
//      "minor": 3,                    // /dev/nvidia3; absent: the GPU's index
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
//               "ci_id": 0,     // its compute instance's id (its GPU instance's: its index)
//               "memory_bytes": ..., "memory_used_bytes": ..., "utilization": ...,
//               "processes": [...]}],  // present (even empty): the GPU is in MIG mode
//      "fail_create": "insufficient_resources",  // or "no_permission": what
//                                     // nvmlDeviceCreateGpuInstanceWithPlacement answers
//      "fail_compute": true,          // nvmlGpuInstanceCreateComputeInstance: insufficient
//      resources "busy": [6]}]}                 // instances made here starting at these memory
//      slices
//                                     // have processes: destroying them is NVML_ERROR_IN_USE
//
// MIG instances can be created and destroyed (the entry points of a driver with
// nvmlDeviceCreateGpuInstanceWithPlacement), as on an H100 80GB: GPU instance profiles
// 1g.10gb (and its +me twin), 1g.20gb, 2g.20gb, 3g.40gb, 4g.40gb and 7g.80gb at NVIDIA's
// placements, refused where they overlap an instance of the script's or one made here. A
// GPU instance with its compute instance is a MIG device, listed after the script's, named
// "MIG-<GPU uuid>-<GPU instance id>". Made instances live in the library's process (like
// the driver's, across nvmlShutdown/nvmlInit; a test process starts each test with none),
// or, when $GANTRY_FAKE_NVML_STATE names a file, in that file, so that they outlive the
// process as the driver's outlive an agent.
//
// Built four times (tests/agent/CMakeLists.txt), each as libnvidia-ml.so.1 in a directory
// of its own: in full; with FAKE_NVML_OLD, an old driver without the _v3 process lists, the
// MPS list, per-process utilization, MIG and NVLink (only _v2 process lists); with
// FAKE_NVML_NO_MIG_CREATE, a driver that lists MIG instances but cannot create them at a
// placement; and with FAKE_NVML_BROKEN, lacking an entry point the agent requires.
// The types are declared as NVML 12.2's nvml.h declares them, apart from the agent's.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

using nlohmann::json;

extern "C" {

typedef int nvmlReturn_t;
typedef struct nvmlDevice_st* nvmlDevice_t;
typedef struct nvmlGpuInstance_st* nvmlGpuInstance_t;
typedef struct nvmlComputeInstance_st* nvmlComputeInstance_t;
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
  unsigned int id, isP2pSupported, sliceCount, instanceCount, multiprocessorCount, copyEngineCount,
      decoderCount, encoderCount, jpegCount, ofaCount;
  unsigned long long memorySizeMB;
} nvmlGpuInstanceProfileInfo_t;
typedef struct {
  unsigned int id, sliceCount, instanceCount, multiprocessorCount, sharedCopyEngineCount,
      sharedDecoderCount, sharedEncoderCount, sharedJpegCount, sharedOfaCount;
} nvmlComputeInstanceProfileInfo_t;
typedef struct {
  unsigned int start, size;
} nvmlComputeInstancePlacement_t;
typedef struct {
  nvmlDevice_t device;
  nvmlGpuInstance_t gpuInstance;
  unsigned int id, profileId;
  nvmlComputeInstancePlacement_t placement;
} nvmlComputeInstanceInfo_t;
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
                       kNoPermission = 4, kNotFound = 6, kInsufficientSize = 7, kGpuIsLost = 15,
                       kInUse = 19, kInsufficientResources = 23, kUnknown = 999;

std::mutex mu;
json script;
bool initialized = false;
int64_t samples = 0;  // nvmlDeviceGetCount_v2 calls since nvmlInit_v2

// A GPU instance made by nvmlDeviceCreateGpuInstanceWithPlacement; with its compute
// instance (one at most here) it is a MIG device, described by `doc` as the script's are.
struct Made {
  unsigned gpu = 0, gi_id = 0, profile = 0, start = 0, size = 0;
  bool has_ci = false;
  json doc;  // uuid, profile, start, size, memory_bytes
};
std::vector<Made> made;
constexpr unsigned kFirstMadeId =
    20;  // GPU instance ids of made ones; the script's are their index

// Handles are small numbers, stable across re-reads of the script: GPU i is i + 1; of GPU i,
// MIG device k (the script's, then those made here) and the GPU instance of script entry k
// are (i + 1) * 1000 + k + 1, a made GPU instance (i + 1) * 1000 + 100 + its id, its compute
// instance (i + 1) * 1000 + 500 + that id.
struct Ref {
  const json* gpu = nullptr;
  const json* mig = nullptr;  // null for the GPU itself
  Made* made = nullptr;       // a made instance: `mig` is its doc
  bool compute = false;       // the handle is a made compute instance's
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

// Made instances from $GANTRY_FAKE_NVML_STATE, when set (else they stay as they are).
void LoadMade() {
  const char* path = std::getenv("GANTRY_FAKE_NVML_STATE");
  if (!path) return;
  std::ifstream in(path);
  const json j = json::parse(in, nullptr, false);
  made.clear();
  if (!j.is_array()) return;
  for (const json& e : j) {
    Made m;
    m.gpu = e.value("gpu", 0u);
    m.gi_id = e.value("gi_id", 0u);
    m.profile = e.value("profile", 0u);
    m.start = e.value("start", 0u);
    m.size = e.value("size", 0u);
    m.has_ci = e.value("has_ci", false);
    m.doc = e.value("doc", json::object());
    made.push_back(std::move(m));
  }
}

[[maybe_unused]] void SaveMade() {
  const char* path = std::getenv("GANTRY_FAKE_NVML_STATE");
  if (!path) return;
  json j = json::array();
  for (const Made& m : made) {
    j.push_back({{"gpu", m.gpu},
                 {"gi_id", m.gi_id},
                 {"profile", m.profile},
                 {"start", m.start},
                 {"size", m.size},
                 {"has_ci", m.has_ci},
                 {"doc", m.doc}});
  }
  const std::string tmp = std::string(path) + ".tmp";
  std::ofstream(tmp) << j.dump();
  std::rename(tmp.c_str(), path);
}

const json& Gpus() {
  static const json kNone = json::array();
  return script.contains("gpus") ? script["gpus"] : kNone;
}

// GPU g's MIG devices: the script's, then the made instances that have a compute instance.
std::vector<std::pair<const json*, Made*>> MigDevices(unsigned g) {
  std::vector<std::pair<const json*, Made*>> out;
  const json& gpu = Gpus()[g];
  if (gpu.contains("mig")) {
    for (const json& m : gpu["mig"]) out.emplace_back(&m, nullptr);
  }
  for (Made& m : made) {
    if (m.gpu == g && m.has_ci) out.emplace_back(&m.doc, &m);
  }
  return out;
}

[[maybe_unused]] size_t ScriptMigs(const json& gpu) {
  return gpu.contains("mig") ? gpu["mig"].size() : 0;
}

[[maybe_unused]] Made* FindMade(unsigned g, unsigned gi_id) {
  for (Made& m : made) {
    if (m.gpu == g && m.gi_id == gi_id) return &m;
  }
  return nullptr;
}

// A made GPU instance's handle, and its compute instance's.
[[maybe_unused]] nvmlGpuInstance_t GiHandle(unsigned gpu, unsigned gi_id) {
  return reinterpret_cast<nvmlGpuInstance_t>(
      static_cast<uintptr_t>((gpu + 1) * 1000 + 100 + gi_id));
}
[[maybe_unused]] nvmlComputeInstance_t CiHandle(unsigned gpu, unsigned gi_id) {
  return reinterpret_cast<nvmlComputeInstance_t>(
      static_cast<uintptr_t>((gpu + 1) * 1000 + 500 + gi_id));
}

nvmlReturn_t Find(const void* handle, Ref& ref) {
  if (!initialized) return kUninitialized;
  const auto id = reinterpret_cast<uintptr_t>(handle);
  const uintptr_t gpu = id >= 1000 ? id / 1000 - 1 : id - 1;
  if (id == 0 || gpu >= Gpus().size()) return kInvalidArgument;
  ref.gpu = &Gpus()[gpu];
  ref.gpu_index = static_cast<unsigned>(gpu);
  if (id >= 1000) {
    const uintptr_t r = id % 1000;
    if (r == 0) return kInvalidArgument;
    if (r < 100) {  // a MIG device, or the GPU instance of a script entry
      const auto devices = MigDevices(ref.gpu_index);
      const uintptr_t k = r - 1;
      if (k >= devices.size()) return kInvalidArgument;
      ref.mig = devices[k].first;
      ref.made = devices[k].second;
      ref.mig_index = static_cast<unsigned>(k);
    } else {  // a made GPU instance, or its compute instance
      ref.compute = r >= 500;
      ref.made = FindMade(ref.gpu_index, static_cast<unsigned>(r - (ref.compute ? 500 : 100)));
      if (!ref.made || (ref.compute && !ref.made->has_ci)) return kInvalidArgument;
      ref.mig = &ref.made->doc;
    }
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
    e.gpuInstanceId = r.made ? r.made->gi_id : r.mig ? r.mig_index : 0xffffffffu;
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
  if (std::getenv("GANTRY_FAKE_NVML_STATE")) {
    LoadMade();
  } else {
    made.clear();  // tests in one process start afresh
  }
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
    case kNoPermission:
      return "Insufficient Permissions";
    case kInUse:
      return "In use by another client";
    case kInsufficientResources:
      return "Insufficient Resources";
    default:
      return "Unknown Error (fake NVML: is GANTRY_FAKE_NVML a readable JSON file?)";
  }
}

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int* count) {
  std::lock_guard lk(mu);
  if (!initialized) return kUninitialized;
  Load();  // a test may have rewritten it; a half-written file keeps the previous script
  LoadMade();
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

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t dev, unsigned int* minor) {
  std::lock_guard lk(mu);
  Ref r;
  if (nvmlReturn_t rc = Find(dev, r); rc != kSuccess) return rc;
  if (r.mig) return kInvalidArgument;  // a MIG device has no /dev/nvidiaN of its own
  *minor = r.gpu->value("minor", r.gpu_index);
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
  if (index >= MigDevices(r.gpu_index).size()) return kNotFound;
  *mig =
      reinterpret_cast<nvmlDevice_t>(static_cast<uintptr_t>((r.gpu_index + 1) * 1000 + index + 1));
  return kSuccess;
}

// What `of` says of MIG device `mig` (the two id getters below).
static nvmlReturn_t MigDeviceId(nvmlDevice_t mig, unsigned int* id, unsigned (*of)(const Ref&)) {
  std::lock_guard lk(mu);
  Ref r;
  if (nvmlReturn_t rc = Find(mig, r); rc != kSuccess) return rc;
  if (!r.mig || r.compute) return kInvalidArgument;
  *id = of(r);
  return kSuccess;
}

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetGpuInstanceId(nvmlDevice_t mig, unsigned int* id) {
  return MigDeviceId(mig, id, [](const Ref& r) { return r.made ? r.made->gi_id : r.mig_index; });
}

// A made instance's one compute instance is 0; a scripted one's its "ci_id" (default 0).
FAKE_EXPORT nvmlReturn_t nvmlDeviceGetComputeInstanceId(nvmlDevice_t mig, unsigned int* id) {
  return MigDeviceId(mig, id, [](const Ref& r) { return r.made ? 0u : r.mig->value("ci_id", 0u); });
}

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetGpuInstanceById(nvmlDevice_t dev, unsigned int id,
                                                      nvmlGpuInstance_t* gi) {
  std::lock_guard lk(mu);
  Ref r;
  if (nvmlReturn_t rc = Find(dev, r); rc != kSuccess) return rc;
  if (id < ScriptMigs(*r.gpu)) {
    *gi = reinterpret_cast<nvmlGpuInstance_t>(
        static_cast<uintptr_t>((r.gpu_index + 1) * 1000 + id + 1));
    return kSuccess;
  }
  if (!FindMade(r.gpu_index, id)) return kNotFound;
  *gi = GiHandle(r.gpu_index, id);
  return kSuccess;
}

FAKE_EXPORT nvmlReturn_t nvmlGpuInstanceGetInfo(nvmlGpuInstance_t gi, nvmlGpuInstanceInfo_t* info) {
  std::lock_guard lk(mu);
  Ref r;
  if (nvmlReturn_t rc = Find(gi, r); rc != kSuccess) return rc;
  if (!r.mig || r.compute) return kInvalidArgument;
  std::memset(info, 0, sizeof *info);
  info->device = reinterpret_cast<nvmlDevice_t>(static_cast<uintptr_t>(r.gpu_index + 1));
  info->id = r.made ? r.made->gi_id : r.mig_index;
  info->profileId = r.made ? r.made->profile : 0;
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

#if !defined(FAKE_NVML_OLD) && !defined(FAKE_NVML_NO_MIG_CREATE)
namespace {

// The GPU instance profiles of an H100 80GB, with NVIDIA's placements (memory slices).
struct GiProfile {
  unsigned id, slices;
  unsigned long long memory_mb;
  unsigned size;
  std::vector<unsigned> starts;
  const char* name;
};
const std::vector<GiProfile>& GiProfiles() {
  static const std::vector<GiProfile> kProfiles = {
      {0x0, 1, 9856, 1, {0, 1, 2, 3, 4, 5, 6}, "1g.10gb"},
      {0x7, 1, 9856, 1, {0, 1, 2, 3, 4, 5, 6}, "1g.10gb+me"},
      {0x9, 1, 19968, 2, {0, 2, 4, 6}, "1g.20gb"},
      {0x1, 2, 19968, 2, {0, 2, 4}, "2g.20gb"},
      {0x2, 3, 40192, 4, {0, 4}, "3g.40gb"},
      {0x3, 4, 40192, 4, {0}, "4g.40gb"},
      {0x4, 7, 80384, 8, {0}, "7g.80gb"}};
  return kProfiles;
}
const GiProfile* GiProfileById(unsigned id) {
  for (const GiProfile& p : GiProfiles()) {
    if (p.id == id) return &p;
  }
  return nullptr;
}
// NVML_COMPUTE_INSTANCE_PROFILE_* -> compute slices.
unsigned CiSlices(unsigned profile) {
  static const unsigned kSlices[] = {1, 2, 3, 4, 7, 8, 6};
  return profile < 7 ? kSlices[profile] : 0;
}

bool Busy(const json& gpu, unsigned start) {
  for (const json& b : gpu.value("busy", json::array())) {
    if (b.is_number_unsigned() && b.get<unsigned>() == start) return true;
  }
  return false;
}

}  // namespace

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfo(nvmlDevice_t dev, unsigned int profile,
                                                             nvmlGpuInstanceProfileInfo_t* info) {
  std::lock_guard lk(mu);
  Ref r;
  if (nvmlReturn_t rc = Find(dev, r); rc != kSuccess) return rc;
  if (r.mig || !info) return kInvalidArgument;
  if (!r.gpu->contains("mig")) return kNotSupported;  // not in MIG mode
  const GiProfile* p = GiProfileById(profile);
  if (!p) return kNotSupported;
  std::memset(info, 0, sizeof *info);
  info->id = p->id;
  info->sliceCount = p->slices;
  info->instanceCount = static_cast<unsigned>(p->starts.size());
  info->memorySizeMB = p->memory_mb;
  return kSuccess;
}

FAKE_EXPORT nvmlReturn_t nvmlDeviceCreateGpuInstanceWithPlacement(
    nvmlDevice_t dev, unsigned int profile, const nvmlGpuInstancePlacement_t* placement,
    nvmlGpuInstance_t* gi) {
  std::lock_guard lk(mu);
  Load();  // what the test says now, as a driver answers from the GPU's state now
  Ref r;
  if (nvmlReturn_t rc = Find(dev, r); rc != kSuccess) return rc;
  if (r.mig || !placement || !gi) return kInvalidArgument;
  if (!r.gpu->contains("mig")) return kNotSupported;
  const GiProfile* p = GiProfileById(profile);
  if (!p || placement->size != p->size ||
      std::find(p->starts.begin(), p->starts.end(), placement->start) == p->starts.end()) {
    return kInvalidArgument;
  }
  const json fail = r.gpu->value("fail_create", json());
  if (fail == "no_permission") return kNoPermission;
  if (fail == "insufficient_resources" || fail == true) return kInsufficientResources;
  const unsigned start = placement->start, end = start + placement->size;
  for (const json& m : (*r.gpu)["mig"]) {
    const unsigned s0 = m.value("start", 0u), s1 = s0 + m.value("size", 1u);
    if (s0 < end && start < s1) return kInsufficientResources;
  }
  unsigned next = kFirstMadeId;
  for (const Made& m : made) {
    if (m.gpu == r.gpu_index && m.start < end && start < m.start + m.size)
      return kInsufficientResources;
    if (m.gpu == r.gpu_index) next = std::max(next, m.gi_id + 1);
  }
  Made m;
  m.gpu = r.gpu_index;
  m.gi_id = next;
  m.profile = p->id;
  m.start = start;
  m.size = placement->size;
  m.doc = {{"uuid", "MIG-" + r.gpu->value("uuid", std::string()) + "-" + std::to_string(next)},
           {"profile", p->name},
           {"start", start},
           {"size", placement->size},
           {"memory_bytes", p->memory_mb * 1048576ull},
           {"memory_used_bytes", 0}};
  made.push_back(std::move(m));
  SaveMade();
  *gi = GiHandle(r.gpu_index, next);
  return kSuccess;
}

FAKE_EXPORT nvmlReturn_t nvmlGpuInstanceGetComputeInstanceProfileInfo(
    nvmlGpuInstance_t gi, unsigned int profile, unsigned int eng_profile,
    nvmlComputeInstanceProfileInfo_t* info) {
  std::lock_guard lk(mu);
  Ref r;
  if (nvmlReturn_t rc = Find(gi, r); rc != kSuccess) return rc;
  if (!r.made || r.compute || !info || eng_profile != 0) return kInvalidArgument;
  const unsigned slices = CiSlices(profile);
  if (slices == 0 || slices > GiProfileById(r.made->profile)->slices) return kNotSupported;
  std::memset(info, 0, sizeof *info);
  info->id = profile;
  info->sliceCount = slices;
  info->instanceCount = GiProfileById(r.made->profile)->slices / slices;
  return kSuccess;
}

FAKE_EXPORT nvmlReturn_t nvmlGpuInstanceCreateComputeInstance(nvmlGpuInstance_t gi,
                                                              unsigned int profile,
                                                              nvmlComputeInstance_t* ci) {
  std::lock_guard lk(mu);
  Ref r;
  if (nvmlReturn_t rc = Find(gi, r); rc != kSuccess) return rc;
  if (!r.made || r.compute || !ci || CiSlices(profile) == 0) return kInvalidArgument;
  if (r.made->has_ci || r.gpu->value("fail_compute", false)) return kInsufficientResources;
  r.made->has_ci = true;
  SaveMade();
  *ci = CiHandle(r.gpu_index, r.made->gi_id);
  return kSuccess;
}

FAKE_EXPORT nvmlReturn_t nvmlComputeInstanceGetInfo_v2(nvmlComputeInstance_t ci,
                                                       nvmlComputeInstanceInfo_t* info) {
  std::lock_guard lk(mu);
  Ref r;
  if (nvmlReturn_t rc = Find(ci, r); rc != kSuccess) return rc;
  if (!r.compute || !info) return kInvalidArgument;
  std::memset(info, 0, sizeof *info);
  info->device = reinterpret_cast<nvmlDevice_t>(static_cast<uintptr_t>(r.gpu_index + 1));
  info->gpuInstance = GiHandle(r.gpu_index, r.made->gi_id);
  info->id = 0;
  info->profileId = 0;
  info->placement.start = 0;
  info->placement.size = GiProfileById(r.made->profile)->slices;
  return kSuccess;
}

FAKE_EXPORT nvmlReturn_t nvmlGpuInstanceGetComputeInstanceById(nvmlGpuInstance_t gi,
                                                               unsigned int id,
                                                               nvmlComputeInstance_t* ci) {
  std::lock_guard lk(mu);
  Ref r;
  if (nvmlReturn_t rc = Find(gi, r); rc != kSuccess) return rc;
  if (!r.made || r.compute || !ci) return kInvalidArgument;
  if (id != 0 || !r.made->has_ci) return kNotFound;
  *ci = CiHandle(r.gpu_index, r.made->gi_id);
  return kSuccess;
}

FAKE_EXPORT nvmlReturn_t nvmlComputeInstanceDestroy(nvmlComputeInstance_t ci) {
  std::lock_guard lk(mu);
  Ref r;
  if (nvmlReturn_t rc = Find(ci, r); rc != kSuccess) return rc;
  if (!r.compute) return kInvalidArgument;
  if (Busy(*r.gpu, r.made->start)) return kInUse;
  r.made->has_ci = false;
  SaveMade();
  return kSuccess;
}

FAKE_EXPORT nvmlReturn_t nvmlGpuInstanceDestroy(nvmlGpuInstance_t gi) {
  std::lock_guard lk(mu);
  Ref r;
  if (nvmlReturn_t rc = Find(gi, r); rc != kSuccess) return rc;
  if (!r.made || r.compute) return kInvalidArgument;  // the script's are not the fake's to destroy
  if (r.made->has_ci || Busy(*r.gpu, r.made->start)) return kInUse;
  const Made* gone = r.made;
  std::erase_if(made, [&](const Made& m) { return &m == gone; });
  SaveMade();
  return kSuccess;
}
#endif  // !FAKE_NVML_OLD && !FAKE_NVML_NO_MIG_CREATE
