// DiscoverNvml against a fake NVML table: two GPUs joined by NVLink, one of them in MIG
// mode with two instances, and a third that has fallen off the bus.
#include "agent/nvml.h"

#include <gtest/gtest.h>

#include <cstring>

namespace gantry::agent {
namespace {

using nvml::Device;
using nvml::Return;

struct FakeGpu {
  const char* name;
  const char* uuid;
  unsigned long long memory;
  bool mig;
  const char* bus;
  bool lost;
};

// Devices are encoded as small integers: 1..3 for GPUs, 100 * gpu + k for MIG devices.
FakeGpu kGpus[] = {
    {"NVIDIA H100 80GB HBM3", "GPU-aaaa", 85'520'809'984ull, false, "00000000:17:00.0", false},
    {"NVIDIA H100 80GB HBM3", "GPU-bbbb", 85'520'809'984ull, true, "00000000:18:00.0", false},
    {"NVIDIA H100 80GB HBM3", "GPU-cccc", 85'520'809'984ull, false, "00000000:19:00.0", true},
};
Device Dev(uintptr_t i) { return reinterpret_cast<Device>(i); }
uintptr_t Id(Device d) { return reinterpret_cast<uintptr_t>(d); }

Return Count(unsigned* n) {
  *n = 3;
  return nvml::kSuccess;
}
Return ByIndex(unsigned i, Device* d) {
  *d = Dev(i + 1);
  return nvml::kSuccess;
}
const FakeGpu* Gpu(Device d) { return Id(d) >= 1 && Id(d) <= 3 ? &kGpus[Id(d) - 1] : nullptr; }
Return Name(Device d, char* buf, unsigned len) {
  if (Id(d) >= 100) {
    std::snprintf(buf, len, "NVIDIA H100 80GB HBM3 MIG %s", Id(d) % 100 == 0 ? "1g.10gb" : "3g.40gb");
    return nvml::kSuccess;
  }
  if (Gpu(d)->lost) return nvml::kErrorGpuIsLost;
  std::snprintf(buf, len, "%s", Gpu(d)->name);
  return nvml::kSuccess;
}
Return Uuid(Device d, char* buf, unsigned len) {
  if (Id(d) >= 100) {
    std::snprintf(buf, len, "MIG-%lu", static_cast<unsigned long>(Id(d)));
    return nvml::kSuccess;
  }
  if (Gpu(d)->lost) return nvml::kErrorGpuIsLost;
  std::snprintf(buf, len, "%s", Gpu(d)->uuid);
  return nvml::kSuccess;
}
Return Memory(Device d, nvml::Memory* m) {
  if (Gpu(d)->lost) return nvml::kErrorGpuIsLost;
  m->total = Gpu(d)->memory;
  return nvml::kSuccess;
}
Return MigMode(Device d, unsigned* current, unsigned* pending) {
  *current = *pending = Gpu(d)->mig ? 1 : 0;
  return nvml::kSuccess;
}
Return MaxMig(Device, unsigned* n) {
  *n = 7;
  return nvml::kSuccess;
}
Return MigByIndex(Device d, unsigned i, Device* out) {
  if (i >= 2) return nvml::kErrorNotFound;  // two instances exist
  *out = Dev(100 * Id(d) + i);
  return nvml::kSuccess;
}
Return GiId(Device mig, unsigned* id) {
  *id = static_cast<unsigned>(Id(mig) % 100);
  return nvml::kSuccess;
}
Return GiById(Device, unsigned id, nvml::GpuInstance* gi) {
  *gi = reinterpret_cast<nvml::GpuInstance>(static_cast<uintptr_t>(id + 1));
  return nvml::kSuccess;
}
Return GiInfo(nvml::GpuInstance gi, nvml::GpuInstanceInfo* info) {
  const auto id = reinterpret_cast<uintptr_t>(gi) - 1;
  info->placement.start = id == 0 ? 6 : 0;  // 1g.10gb at slice 6, 3g.40gb at slice 0
  info->placement.size = id == 0 ? 1 : 4;
  return nvml::kSuccess;
}
Return Util(Device d, nvml::Utilization* u) {
  u->gpu = Id(d) == 1 ? 75 : 0;
  return nvml::kSuccess;
}
Return Pci(Device d, nvml::PciInfo* p) {
  if (Gpu(d)->lost) return nvml::kErrorGpuIsLost;
  std::memset(p, 0, sizeof *p);
  std::snprintf(p->bus_id, sizeof p->bus_id, "%s", Gpu(d)->bus);
  return nvml::kSuccess;
}
// GPU 0 and GPU 1 share links 0 and 1; link 2 of GPU 0 goes to an NVSwitch.
Return LinkState(Device d, unsigned link, int* active) {
  *active = (Id(d) <= 2 && link <= 2) ? 1 : 0;
  return nvml::kSuccess;
}
Return LinkRemote(Device d, unsigned link, nvml::PciInfo* p) {
  std::memset(p, 0, sizeof *p);
  const char* bus = link == 2 ? "0000:99:00.0" : Id(d) == 1 ? "0000:18:00.0" : "0000:17:00.0";
  std::snprintf(p->bus_id, sizeof p->bus_id, "%s", bus);
  return nvml::kSuccess;
}

NvmlApi FakeApi() {
  NvmlApi api;
  api.device_count = Count;
  api.device_by_index = ByIndex;
  api.device_name = Name;
  api.device_uuid = Uuid;
  api.device_memory = Memory;
  api.mig_mode = MigMode;
  api.max_mig_devices = MaxMig;
  api.mig_device_by_index = MigByIndex;
  api.gpu_instance_id = GiId;
  api.gpu_instance_by_id = GiById;
  api.gpu_instance_info = GiInfo;
  api.utilization = Util;
  api.nvlink_state = LinkState;
  api.nvlink_remote_pci = LinkRemote;
  api.pci_info = Pci;
  return api;
}

TEST(Nvml, ParsesWhatNvmlReturns) {
  auto gpus = DiscoverNvml(FakeApi());
  ASSERT_TRUE(gpus.ok()) << gpus.error().message;
  ASSERT_EQ(gpus->size(), 3u);
  const GpuInfo& a = (*gpus)[0];
  EXPECT_EQ(a.uuid, "GPU-aaaa");
  EXPECT_EQ(a.name, "NVIDIA H100 80GB HBM3");
  EXPECT_EQ(a.memory_bytes, 85'520'809'984);
  EXPECT_DOUBLE_EQ(a.utilization, 0.75);
  EXPECT_FALSE(a.mig_mode);
  EXPECT_EQ(a.nvlink_peers, std::vector<int>{1});  // the NVSwitch link names no GPU
  const GpuInfo& b = (*gpus)[1];
  EXPECT_TRUE(b.mig_mode);
  ASSERT_EQ(b.mig.size(), 2u);
  EXPECT_EQ(b.mig[0].profile, "1g.10gb");
  EXPECT_EQ(b.mig[0].start, 6);
  EXPECT_EQ(b.mig[0].uuid, "MIG-200");
  EXPECT_EQ(b.mig[1].profile, "3g.40gb");
  EXPECT_EQ(b.mig[1].start, 0);
  EXPECT_EQ(b.nvlink_peers, std::vector<int>{0});
  const GpuInfo& c = (*gpus)[2];
  EXPECT_TRUE(c.lost);
  EXPECT_FALSE(a.lost);
}

TEST(Nvml, OptionalEntryPointsMayBeMissing) {
  NvmlApi api = FakeApi();
  api.mig_mode = nullptr;
  api.utilization = nullptr;
  api.nvlink_state = nullptr;
  api.pci_info = nullptr;
  auto gpus = DiscoverNvml(api);
  ASSERT_TRUE(gpus.ok());
  EXPECT_FALSE((*gpus)[1].mig_mode);
  EXPECT_TRUE((*gpus)[0].nvlink_peers.empty());
}

TEST(Nvml, MigProfileFromName) {
  EXPECT_EQ(MigProfileFromName("NVIDIA A100-SXM4-80GB MIG 1g.10gb"), "1g.10gb");
  EXPECT_EQ(MigProfileFromName("NVIDIA H100 80GB HBM3 MIG 3g.40gb"), "3g.40gb");
  EXPECT_EQ(MigProfileFromName("NVIDIA H100 80GB HBM3"), "");
}

TEST(Nvml, AMissingLibraryIsACleanError) {
  auto api = LoadNvml("libnvidia-ml-does-not-exist.so.1");
  ASSERT_FALSE(api.ok());
  EXPECT_NE(api.error().message.find("libnvidia-ml-does-not-exist.so.1"), std::string::npos) << api.error().message;
  auto gpus = NvmlGpus::Open("libnvidia-ml-does-not-exist.so.1");
  EXPECT_FALSE(gpus.ok());
}

}  // namespace
}  // namespace gantry::agent
