// Fuzzes the YAML job decoder (ParseJobYaml): accepted jobs keep the spec's invariants
// and go through core::WhyInfeasible; nothing may crash or throw.
#include <cstdint>
#include <string_view>

#include "fuzz_fixture.h"
#include "spec/job_reader.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace gantry;
  const spec::ClusterConfig& config = fuzz::Fixture();
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  spec::Diagnostics diags;
  std::optional<core::JobSpec> job = spec::ParseJobYaml(text, "job.yaml", config, diags);
  if (job.has_value() != diags.empty()) __builtin_trap();
  for (const spec::Diag& d : diags.items()) {
    if (d.file != "job.yaml" || d.line < 0 || d.message.empty()) __builtin_trap();
  }
  if (job) fuzz::CheckJob(*job, config);
  return 0;
}
