// gantry-propgen: writes one property-test workload to disk for debugging.
//
//   gantry-propgen --seed S [--jobs N] --out DIR
//
// Writes DIR/cluster.yaml, DIR/trace.jsonl, DIR/failures.jsonl and DIR/impossible.txt
// (the ids no GPU of the cluster can hold). Exit 0 on success, 2 on bad usage.
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <string_view>

#include "property/workload_gen.h"

namespace {

int Usage(const char* msg) {
  std::fprintf(stderr, "gantry-propgen: %s\nusage: gantry-propgen --seed S [--jobs N] --out DIR\n",
               msg);
  return 2;
}

bool ParseInt(const std::string& s, long long& out) {
  char* end = nullptr;
  out = std::strtoll(s.c_str(), &end, 10);
  return !s.empty() && end != nullptr && *end == '\0';
}

}  // namespace

int main(int argc, char** argv) {
  gantry::property::WorkloadOptions options;
  std::string out;
  bool have_seed = false;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (i + 1 >= argc) return Usage(("missing value for " + std::string(arg)).c_str());
    const std::string value = argv[++i];
    long long n = 0;
    if (arg == "--seed") {
      if (!ParseInt(value, n) || n < 0) return Usage("--seed: expected a non-negative integer");
      options.seed = static_cast<uint64_t>(n);
      have_seed = true;
    } else if (arg == "--jobs") {
      if (!ParseInt(value, n) || n < 0 || n > 10'000'000) {
        return Usage("--jobs: expected a count");
      }
      options.jobs = static_cast<int>(n);
    } else if (arg == "--out") {
      out = value;
    } else {
      return Usage(("unknown option " + std::string(arg)).c_str());
    }
  }
  if (!have_seed || out.empty()) return Usage("--seed and --out are required");
  try {
    const gantry::property::Workload w = gantry::property::GenerateWorkload(options);
    const gantry::property::WorkloadPaths paths = gantry::property::WriteWorkload(w, out);
    std::printf("%s\n%s\n%s\n%zu jobs, %zu impossible\n", paths.config.c_str(), paths.trace.c_str(),
                paths.failures.c_str(), w.job_ids.size(), w.impossible_jobs.size());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gantry-propgen: %s\n", e.what());
    return 1;
  }
  return 0;
}
