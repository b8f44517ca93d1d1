#include "agent/emulated.h"

#include <cctype>
#include <cstdio>
#include <fstream>
#include <set>

namespace gantry::agent {

const MigInstance* FindMig(const GpuInfo& gpu, const std::string& profile, int start) {
  for (const MigInstance& m : gpu.mig) {
    if (m.profile == profile && m.start == start) return &m;
  }
  return nullptr;
}

std::string GpuSource::MigUuid(const GpuInfo& gpu, const std::string& profile, int start) const {
  const MigInstance* m = FindMig(gpu, profile, start);
  return m ? m->uuid : std::string();
}

Result<MadeMig> GpuSource::CreateMig(const GpuInfo&, const MigPlacement&) {
  return Error{"mig", Describe() + " cannot create MIG instances"};
}

Status GpuSource::DestroyMig(const MadeMig&) {
  return Error{"mig", Describe() + " cannot destroy MIG instances"};
}

std::string FakeUuid(const std::string& prefix, const std::string& seed) {
  // Two FNV-1a 64-bit hashes with different offsets: 128 bits, printed like a UUID.
  uint64_t a = 1469598103934665603ull, b = 1099511628211ull * 31;
  for (unsigned char c : seed) {
    a = (a ^ c) * 1099511628211ull;
    b = (b ^ c) * 1099511628211ull + 0x9e3779b97f4a7c15ull;
  }
  char buf[64];
  std::snprintf(buf, sizeof buf, "%08x-%04x-%04x-%04x-%012llx", static_cast<unsigned>(a >> 32),
                static_cast<unsigned>((a >> 16) & 0xffff), static_cast<unsigned>(a & 0xffff),
                static_cast<unsigned>(b >> 48),
                static_cast<unsigned long long>(b & 0xffffffffffffull));
  return prefix + buf;
}

Result<EmulateSpec> ParseEmulate(const std::string& text) {
  const size_t x = text.find('x');
  EmulateSpec spec;
  try {
    size_t used = 0;
    if (x == std::string::npos || x == 0) throw std::invalid_argument("no count");
    spec.count = std::stoi(text.substr(0, x), &used);
    if (used != x) throw std::invalid_argument("count");
  } catch (const std::exception&) {
    return Error{"emulate", "expected COUNTxMODEL such as 8xH100-80GB, got \"" + text + "\""};
  }
  if (spec.count < 1 || spec.count > 64) {
    return Error{"emulate", "GPU count must be 1..64, got " + std::to_string(spec.count)};
  }
  spec.model = text.substr(x + 1);
  // Memory from the model name's "<n>GB" suffix (every catalog name has one).
  const size_t gb = spec.model.rfind("GB");
  size_t digits = gb;
  while (digits > 0 && gb != std::string::npos &&
         std::isdigit(static_cast<unsigned char>(spec.model[digits - 1]))) {
    --digits;
  }
  if (gb == std::string::npos || gb + 2 != spec.model.size() || digits == gb) {
    return Error{"emulate",
                 "model must end in its memory, e.g. H100-80GB, got \"" + spec.model + "\""};
  }
  spec.memory_bytes = std::stoll(spec.model.substr(digits, gb - digits)) * 1'000'000'000;
  return spec;
}

EmulatedGpus::EmulatedGpus(std::string node, EmulateSpec spec, std::string lost_file)
    : node_(std::move(node)), spec_(std::move(spec)), lost_file_(std::move(lost_file)) {}

std::string EmulatedGpus::Describe() const {
  return "emulated " + std::to_string(spec_.count) + " x " + spec_.model;
}

Result<std::vector<GpuInfo>> EmulatedGpus::Discover() {
  std::set<int> lost;
  if (!lost_file_.empty()) {
    std::ifstream in(lost_file_);
    int i = 0;
    while (in >> i) lost.insert(i);
  }
  std::vector<GpuInfo> gpus;
  for (int i = 0; i < spec_.count; ++i) {
    GpuInfo g;
    g.index = i;
    g.uuid = FakeUuid("GPU-", node_ + "/" + std::to_string(i));
    g.name = "Emulated " + spec_.model;
    g.model = spec_.model;
    g.memory_bytes = spec_.memory_bytes;
    g.lost = lost.count(i) > 0;
    for (int j = 0; j < spec_.count; ++j) {
      if (j != i) g.nvlink_peers.push_back(j);
    }
    if (auto m = made_.find(i); m != made_.end()) g.mig = m->second;
    gpus.push_back(std::move(g));
  }
  return gpus;
}

std::string EmulatedGpus::MigUuid(const GpuInfo& gpu, const std::string& profile, int start) const {
  return FakeUuid("MIG-", gpu.uuid + "/" + profile + "@" + std::to_string(start));
}

// Named as MigUuid names the placement, so a worker sees one name for it either way.
Result<MadeMig> EmulatedGpus::CreateMig(const GpuInfo& gpu, const MigPlacement& mig) {
  if (mig.start < 0 || mig.memory_slices <= 0) {
    return Error{"mig", "no placement for " + mig.profile + " (start " + std::to_string(mig.start) +
                            ", " + std::to_string(mig.memory_slices) + " memory slices)"};
  }
  std::vector<MigInstance>& layout = made_[gpu.index];
  for (const MigInstance& m : layout) {
    if (m.start < mig.start + mig.memory_slices && mig.start < m.start + m.size) {
      return Error{"mig", "MIG instance " + m.uuid + " (" + m.profile + " at memory slice " +
                              std::to_string(m.start) + ") overlaps the placement"};
    }
  }
  MadeMig made;
  made.gpu = gpu.index;
  made.gpu_uuid = gpu.uuid;
  made.uuid = MigUuid(gpu, mig.profile, mig.start);
  made.profile = mig.profile;
  made.start = mig.start;
  made.size = mig.memory_slices;
  made.gpu_instance = next_id_++;
  MigInstance inst;
  inst.uuid = made.uuid;
  inst.profile = made.profile;
  inst.start = made.start;
  inst.size = made.size;
  layout.push_back(std::move(inst));
  return made;
}

Status EmulatedGpus::DestroyMig(const MadeMig& mig) {
  if (auto it = made_.find(mig.gpu); it != made_.end()) {
    std::erase_if(it->second, [&](const MigInstance& m) { return m.uuid == mig.uuid; });
  }
  return Ok{};
}

}  // namespace gantry::agent
