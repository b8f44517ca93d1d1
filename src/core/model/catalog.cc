// Catalog: built-in GPU models and the checks a config-declared model must pass.
//
// The MIG tables follow NVIDIA's MIG user guide ("Supported MIG Profiles" for the
// profiles and instance counts, `nvidia-smi mig -lgipp` in "Getting Started with MIG"
// for the placements); docs/gpu-catalog.md lists the sources and where they differ from
// spec section 5.

#include "core/model/catalog.h"

#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

namespace gantry::core {
namespace {

// One profile row. `memory_gb` is the nominal size in the profile's name (decimal GB):
// that is what users ask for, and the driver's reported size varies by driver release.
MigProfile Profile(int compute_slices, int memory_slices, int64_t memory_gb, int max_instances,
                   std::vector<int> starts) {
  MigProfile p;
  p.name = std::to_string(compute_slices) + "g." + std::to_string(memory_gb) + "gb";
  p.compute_slices = compute_slices;
  p.memory_slices = memory_slices;
  p.memory_bytes = memory_gb * kGB;
  p.max_instances = max_instances;
  p.starts = std::move(starts);
  return p;
}

// Every MIG-capable built-in model (A100, H100, H200, B200) has the same geometry; only
// the memory per slice differs, so one function builds all their tables. The +me
// (media extension) variants are left out: they occupy the same slices as the plain
// 1g profile and only add decoders, which Gantry does not schedule.
//   small_1g_gb: 1g on one memory slice (7 per GPU, any start 0..6)
//   large_1g_gb: 1g on two memory slices, also the 2g's memory (starts 0, 2, 4, 6 / 0, 2, 4)
//   half_gb:     3g and 4g on four memory slices (3g at 0 or 4; 4g at 0 only)
//   full_gb:     7g on all eight memory slices
std::vector<MigProfile> SevenSliceTable(int64_t small_1g_gb, int64_t large_1g_gb, int64_t half_gb,
                                        int64_t full_gb) {
  std::vector<MigProfile> t;
  t.push_back(Profile(1, 1, small_1g_gb, 7, {0, 1, 2, 3, 4, 5, 6}));
  t.push_back(Profile(1, 2, large_1g_gb, 4, {0, 2, 4, 6}));
  t.push_back(Profile(2, 2, large_1g_gb, 3, {0, 2, 4}));
  t.push_back(Profile(3, 4, half_gb, 2, {0, 4}));
  t.push_back(Profile(4, 4, half_gb, 1, {0}));
  t.push_back(Profile(7, 8, full_gb, 1, {0}));
  return t;
}

GpuModel Model(std::string name, int64_t memory_gb, std::vector<MigProfile> mig = {}) {
  GpuModel m;
  m.name = std::move(name);
  m.memory_bytes = memory_gb * kGB;
  m.mig_profiles = std::move(mig);
  m.builtin = true;
  return m;
}

// Bytes as decimal GB without floating point, so "got 0.5" reads exactly.
std::string FormatGb(int64_t bytes) {
  const uint64_t ugb = static_cast<uint64_t>(kGB);
  const uint64_t mag = bytes < 0 ? 0 - static_cast<uint64_t>(bytes) : static_cast<uint64_t>(bytes);
  std::string out = bytes < 0 ? "-" : "";
  out += std::to_string(mag / ugb);
  uint64_t frac = mag % ugb;
  if (frac != 0) {
    std::string digits = std::to_string(frac);
    digits.insert(0, 9 - digits.size(), '0');
    while (digits.back() == '0') digits.pop_back();
    out += "." + digits;
  }
  return out;
}

Error ProfileError(const MigProfile& p, size_t index, std::string_view field, std::string message) {
  // An unnamed profile is named by its position so the error still points somewhere.
  std::string key = p.name.empty() ? std::to_string(index) : p.name;
  std::string path = "mig_profiles[" + key + "]";
  if (!field.empty()) path += "." + std::string(field);
  return Error{std::move(path), std::move(message)};
}

// The most instances of one profile that fit side by side. Starts are strictly
// increasing and every placement has the same width, so taking each start that clears
// the previous placement is optimal.
int MaxDisjointPlacements(const MigProfile& p) {
  int count = 0;
  int free_from = 0;
  for (int start : p.starts) {
    if (start >= free_from) {
      ++count;
      free_from = start + p.memory_slices;
    }
  }
  return count;
}

Status CheckProfile(const GpuModel& model, const MigProfile& p, size_t index) {
  const int c = p.compute_slices;
  if (c != 1 && c != 2 && c != 3 && c != 4 && c != kMigComputeSlices) {
    return ProfileError(p, index, "compute_slices",
                        "must be 1, 2, 3, 4 or 7, got " + std::to_string(c));
  }
  if (p.memory_slices < 1 || p.memory_slices > kMigMemorySlices) {
    return ProfileError(p, index, "memory_slices",
                        "must be 1 to 8, got " + std::to_string(p.memory_slices));
  }
  if (p.memory_bytes <= 0) {
    return ProfileError(p, index, "memory_gb", "must be positive, got " + FormatGb(p.memory_bytes));
  }
  if (p.memory_bytes > model.memory_bytes) {
    return ProfileError(p, index, "memory_gb",
                        "must not exceed the GPU's " + FormatGb(model.memory_bytes) + " GB, got " +
                            FormatGb(p.memory_bytes));
  }
  if (p.starts.empty()) {
    return ProfileError(p, index, "starts", "must list at least one placement");
  }
  for (size_t i = 0; i < p.starts.size(); ++i) {
    const int s = p.starts[i];
    if (s < 0 || s + p.memory_slices > kMigMemorySlices) {
      return ProfileError(p, index, "starts",
                          "start " + std::to_string(s) + " with " +
                              std::to_string(p.memory_slices) +
                              " memory slices does not fit in slices 0 to 7");
    }
    // Sorted and unique keeps placement search deterministic and cheap.
    if (i > 0 && s <= p.starts[i - 1]) {
      return ProfileError(p, index, "starts",
                          "must be strictly increasing, got " + std::to_string(s) + " after " +
                              std::to_string(p.starts[i - 1]));
    }
  }
  if (p.max_instances < 1) {
    return ProfileError(p, index, "max_instances",
                        "must be at least 1, got " + std::to_string(p.max_instances));
  }
  if (p.max_instances > kMigComputeSlices / c) {
    return ProfileError(p, index, "max_instances",
                        std::to_string(p.max_instances) + " instances of " + std::to_string(c) +
                            " compute slices exceed the GPU's 7");
  }
  const int fit = MaxDisjointPlacements(p);
  if (p.max_instances > fit) {
    return ProfileError(p, index, "max_instances",
                        std::to_string(p.max_instances) +
                            " instances cannot be placed without overlap; the starts fit " +
                            std::to_string(fit));
  }
  return Ok{};
}

}  // namespace

Catalog Catalog::BuiltIn() {
  std::vector<GpuModel> models;
  models.push_back(Model("A100-40GB", 40, SevenSliceTable(5, 10, 20, 40)));
  models.push_back(Model("A100-80GB", 80, SevenSliceTable(10, 20, 40, 80)));
  models.push_back(Model("H100-80GB", 80, SevenSliceTable(10, 20, 40, 80)));
  models.push_back(Model("H100-94GB", 94, SevenSliceTable(12, 24, 47, 94)));  // H100 NVL
  models.push_back(Model("H200-141GB", 141, SevenSliceTable(18, 35, 71, 141)));
  models.push_back(Model("B200-180GB", 180, SevenSliceTable(23, 45, 90, 180)));
  models.push_back(Model("L40S-48GB", 48));
  models.push_back(Model("L4-24GB", 24));
  models.push_back(Model("T4-16GB", 16));
  models.push_back(Model("A10-24GB", 24));
  models.push_back(Model("V100-16GB", 16));
  models.push_back(Model("V100-32GB", 32));

  Catalog catalog;
  for (GpuModel& m : models) {
    // The built-in table is an invariant: a bad entry is a bug, caught by the first test.
    if (!catalog.Add(std::move(m)).ok()) std::abort();
    catalog.models_.back().builtin = true;
  }
  return catalog;
}

Result<ModelId> Catalog::Add(GpuModel model) {
  if (model.name.empty()) return Error{"name", "must not be empty"};
  if (Find(model.name)) {
    return Error{"name", "duplicate GPU model \"" + model.name + "\""};
  }
  if (model.memory_bytes <= 0) {
    return Error{"memory_gb", "must be positive, got " + FormatGb(model.memory_bytes)};
  }
  if (Status s = CheckMigTable(model); !s.ok()) return s.error();
  if (models_.size() >= static_cast<size_t>(kMaxModels)) {
    return Error{"", "too many GPU models: at most " + std::to_string(kMaxModels) +
                         ", built-in ones included"};
  }
  model.builtin = false;
  models_.push_back(std::move(model));
  return ModelId(static_cast<uint32_t>(models_.size() - 1));
}

std::optional<ModelId> Catalog::Find(std::string_view name) const {
  for (size_t i = 0; i < models_.size(); ++i) {
    if (models_[i].name == name) return ModelId(static_cast<uint32_t>(i));
  }
  return std::nullopt;
}

int Catalog::FindProfile(ModelId id, std::string_view profile) const {
  if (!id.valid() || id.v >= models_.size()) return -1;
  const std::vector<MigProfile>& profiles = models_[id.v].mig_profiles;
  for (size_t i = 0; i < profiles.size(); ++i) {
    if (profiles[i].name == profile) return static_cast<int>(i);
  }
  return -1;
}

Status Catalog::CheckMigTable(const GpuModel& model) {
  const std::vector<MigProfile>& profiles = model.mig_profiles;
  if (profiles.size() > static_cast<size_t>(kMaxMigProfiles)) {
    return Error{"mig_profiles", "at most " + std::to_string(kMaxMigProfiles) + " profiles, got " +
                                     std::to_string(profiles.size())};
  }
  for (size_t i = 0; i < profiles.size(); ++i) {
    const MigProfile& p = profiles[i];
    if (p.name.empty()) return ProfileError(p, i, "name", "must not be empty");
    for (size_t j = 0; j < i; ++j) {
      if (profiles[j].name == p.name) {
        return ProfileError(p, i, "name", "duplicate MIG profile \"" + p.name + "\"");
      }
    }
    if (Status s = CheckProfile(model, p, i); !s.ok()) return s;
  }
  return Ok{};
}

}  // namespace gantry::core
