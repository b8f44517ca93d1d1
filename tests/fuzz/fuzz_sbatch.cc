// Fuzzes gantry sbatch's reader (cli::ParseSbatch: a script's #SBATCH directives and the
// command line's options) and its --begin times (cli::ParseSlurmBeginTime). The first byte
// says how many of the rest are options (one a line); the others are the script. An
// accepted script gives a spec with its workers and the script as written; a refusal says
// something; a time that is not one says why; nothing may crash or throw.
#include <cstdint>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "cli/sbatch.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace gantry::cli;
  if (size == 0) return 0;
  const std::string_view rest(reinterpret_cast<const char*>(data + 1), size - 1);
  const size_t cut = data[0] < rest.size() ? data[0] : rest.size();
  std::vector<std::string> options;
  std::istringstream lines{std::string(rest.substr(0, cut))};
  for (std::string line; std::getline(lines, line);) options.push_back(line);
  const std::string script(rest.substr(cut));
  SbatchContext ctx;
  ctx.cwd = "/home/ann/run";
  ctx.host = "login1";
  ctx.env = {{"HOME", "/home/ann"}, {"SBATCH_TIMELIMIT", "10"}};
  ctx.now_s = 1796130327;
  const SbatchJob job = ParseSbatch("f.sh", script, options, {"a"}, ctx);
  if (job.errors.empty()) {
    if (!job.spec.contains("replicas") || job.spec["script"] != script) __builtin_trap();
  } else {
    for (const std::string& e : job.errors) {
      if (e.empty()) __builtin_trap();
    }
  }
  std::string why;
  const std::optional<int64_t> at = ParseSlurmBeginTime(std::string(rest), ctx.now_s, why);
  if (!at && why.empty()) __builtin_trap();
  return 0;
}
