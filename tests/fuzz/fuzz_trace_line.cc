// Fuzzes the JSON job decoders: a trace line (ParseTraceLine) and an API body
// (ParseJobJson) from the same bytes. Accepted jobs must keep the spec's invariants and
// go through core::WhyInfeasible; nothing may crash or throw.
#include <cstdint>
#include <string_view>

#include "fuzz_fixture.h"
#include "spec/job_reader.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace gantry;
  const spec::ClusterConfig& config = fuzz::Fixture();
  const std::string_view text(reinterpret_cast<const char*>(data), size);

  spec::Diagnostics diags;
  std::optional<core::TraceJob> job = spec::ParseTraceLine(text, "fuzz.jsonl", 7, config, diags);
  if (job.has_value() != diags.empty()) __builtin_trap();
  for (const spec::Diag& d : diags.items()) {
    if (d.file != "fuzz.jsonl" || d.line < 7 || d.message.empty()) __builtin_trap();
  }
  if (job) {
    if (job->submit < 0 || job->duration <= 0 || job->line != 7 || job->spec.id.empty())
      __builtin_trap();
    if (job->idle_after && *job->idle_after < 0) __builtin_trap();
    fuzz::CheckJob(job->spec, config);
  }

  spec::Diagnostics body_diags;
  std::optional<core::JobSpec> body = spec::ParseJobJson(text, "body", config, body_diags);
  if (body.has_value() != body_diags.empty()) __builtin_trap();
  if (body) fuzz::CheckJob(*body, config);
  return 0;
}
