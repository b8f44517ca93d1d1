// EmulatedGpus: GPUs for machines without any, from `--emulate 8xH100-80GB`.
//
// UUIDs are stable functions of the node name and index (GPU-xxxxxxxx-...), so an agent
// that restarts reports the same GPUs. All GPUs of a node share one NVLink domain. MIG
// instances are made up on demand with stable UUIDs; on mig_managed pools they are
// "created" (CreateMig, kept in memory) and listed by Discover until destroyed. A GPU can be
// marked lost (tests of the drain-on-lost-GPU path) through a file listing lost indexes,
// one per line.
// Thread-safety: none.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "agent/gpu.h"

namespace gantry::agent {

struct EmulateSpec {
  int count = 0;
  std::string model;         // e.g. "H100-80GB"
  int64_t memory_bytes = 0;  // from the "<n>GB" at the end of the model name
};

// Parses "COUNTxMODEL", e.g. "8xH100-80GB".
Result<EmulateSpec> ParseEmulate(const std::string& text);

class EmulatedGpus final : public GpuSource {
 public:
  EmulatedGpus(std::string node, EmulateSpec spec, std::string lost_file = {});
  std::string Describe() const override;
  Result<std::vector<GpuInfo>> Discover() override;
  std::string MigUuid(const GpuInfo& gpu, const std::string& profile, int start) const override;
  Result<MadeMig> CreateMig(const GpuInfo& gpu, const MigPlacement& mig) override;
  Status DestroyMig(const MadeMig& mig) override;
  bool emulated() const override { return true; }

 private:
  std::string node_;
  EmulateSpec spec_;
  std::string lost_file_;
  std::map<int, std::vector<MigInstance>> made_;  // GPU index -> instances CreateMig made
  unsigned next_id_ = 1;
};

// "GPU-8-4-4-4-12 hex" from a hash of `seed`.
std::string FakeUuid(const std::string& prefix, const std::string& seed);

}  // namespace gantry::agent
