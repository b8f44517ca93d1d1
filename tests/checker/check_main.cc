// gantry-check: checks a simulator run against the file contracts.
//
//   gantry-check --config C.yaml --trace T.jsonl [--failures F.jsonl] --events E.jsonl
//                [--report R.json] [--max N]
//
// Prints one line per violation (at most --max, default all) and a summary
// "N violations". Exit status: 0 none, 1 some, 2 bad usage or unreadable input.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "checker/invariant_checker.h"

namespace {

int Usage(const char* msg) {
  std::fprintf(stderr,
               "gantry-check: %s\nusage: gantry-check --config C.yaml --trace T.jsonl "
               "[--failures F.jsonl] --events E.jsonl [--report R.json] [--max N]\n",
               msg);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::string config, trace, failures, events, report;
  long max_lines = -1;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "-h" || arg == "--help") {
      Usage("checks an event log against the cluster config, trace, failures and report");
      return 0;
    }
    if (i + 1 >= argc) return Usage(("missing value for " + std::string(arg)).c_str());
    const std::string value = argv[++i];
    if (arg == "--config")
      config = value;
    else if (arg == "--trace")
      trace = value;
    else if (arg == "--failures")
      failures = value;
    else if (arg == "--events")
      events = value;
    else if (arg == "--report")
      report = value;
    else if (arg == "--max")
      max_lines = std::strtol(value.c_str(), nullptr, 10);
    else
      return Usage(("unknown option " + std::string(arg)).c_str());
  }
  if (config.empty() || trace.empty() || events.empty()) {
    return Usage("--config, --trace and --events are required");
  }
  const gantry::checker::CheckResult result =
      gantry::checker::CheckRunDetailed(config, trace, failures, events, report);
  if (!result.input_error.empty()) {
    std::fprintf(stderr, "gantry-check: %s\n", result.input_error.c_str());
    return 2;
  }
  long printed = 0;
  for (const gantry::checker::Violation& v : result.violations) {
    if (max_lines >= 0 && printed >= max_lines) break;
    std::printf("%s\n", gantry::checker::FormatViolation(v).c_str());
    ++printed;
  }
  const auto& s = result.stats;
  std::printf(
      "%zu violations (%lld jobs, %lld events, %lld finished, %lld rejected, "
      "%lld reclaimed, %lld unfinished)\n",
      result.violations.size(), static_cast<long long>(s.jobs), static_cast<long long>(s.events),
      static_cast<long long>(s.finished), static_cast<long long>(s.rejected),
      static_cast<long long>(s.reclaimed), static_cast<long long>(s.unfinished));
  return result.violations.empty() ? 0 : 1;
}
