// Catalog: the GPU models Gantry knows, with their memory and MIG profiles.
//
// Built-in models (spec section 5, extended with the models users run) plus models a
// cluster config declares. MIG data follows NVIDIA's MIG user guide: a MIG-capable GPU
// has 7 compute slices and 8 memory slices; each profile lists the first memory slices
// it may be placed at. Models are referred to by ModelId (index); a job's set of
// acceptable models is a ModelMask, so there are at most kMaxModels models.
// Thread-safety: immutable after construction; safe to share read-only.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"
#include "base/strong_id.h"

namespace gantry::core {

inline constexpr int64_t kGB = 1'000'000'000;  // sizes are decimal GB throughout
inline constexpr int kMigComputeSlices = 7;
inline constexpr int kMigMemorySlices = 8;
inline constexpr int kMaxModels = 64;
// A job's per-model profile index is an int8_t (JobSpec::mig_index); real GPUs have 7.
inline constexpr int kMaxMigProfiles = 32;

using ModelId = StrongId<struct ModelTag>;
using ModelMask = uint64_t;  // bit i set: ModelId(i) acceptable

struct MigProfile {
  std::string name;          // e.g. "1g.10gb"
  int compute_slices = 0;    // 1, 2, 3, 4 or 7
  int memory_slices = 0;     // of kMigMemorySlices
  int64_t memory_bytes = 0;  // nominal: the GB in the name (drivers report a bit less/more)
  int max_instances = 0;     // per GPU, per NVIDIA's table
  std::vector<int> starts;   // allowed first memory slice of a placement
};

struct GpuModel {
  std::string name;  // e.g. "H100-80GB"
  int64_t memory_bytes = 0;
  std::vector<MigProfile> mig_profiles;  // empty when the model has no MIG
  bool builtin = true;

  bool mig_capable() const { return !mig_profiles.empty(); }
};

class Catalog {
 public:
  // The built-in models: A100-40GB, A100-80GB, H100-80GB, H100-94GB (NVL),
  // H200-141GB, B200-180GB, L40S-48GB, L4-24GB, T4-16GB, A10-24GB, V100-16GB,
  // V100-32GB, with MIG profiles where the hardware has them.
  static Catalog BuiltIn();

  // Adds a model declared in a cluster config and marks it builtin = false. Errors:
  // empty or duplicate name, non-positive memory, a MIG profile breaking the slice
  // rules, too many models. Error fields are relative to the model ("memory_gb",
  // "mig_profiles[1g.5gb].starts"); the caller prefixes its own path.
  Result<ModelId> Add(GpuModel model);

  // Exact, case-sensitive match; no aliases. Linear in size() (at most kMaxModels).
  std::optional<ModelId> Find(std::string_view name) const;
  const GpuModel& model(ModelId id) const { return models_[id.v]; }
  size_t size() const { return models_.size(); }

  // Index of `profile` among model(id).mig_profiles, or -1 when the model lacks it (or
  // `id` is not a model of this catalog). Exact match on the profile name.
  int FindProfile(ModelId id, std::string_view profile) const;

  // Checks a model's MIG table against the slice rules (used by Add and by tests):
  // unique non-empty names, compute slices in {1,2,3,4,7}, memory slices 1..8, memory
  // in (0, model memory], starts strictly increasing with start + memory slices <= 8,
  // and max_instances >= 1 instances that fit both the 7 compute slices and, without
  // overlapping in memory, the listed starts. Reports the first problem found.
  static Status CheckMigTable(const GpuModel& model);

 private:
  std::vector<GpuModel> models_;
};

}  // namespace gantry::core
