// Slurm's propagated resource limits (slurm.conf's PropagateResourceLimits, ALL by default;
// sbatch --propagate): the submitter's soft limits travel in the job's environment as
// SLURM_RLIMIT_<NAME>=[U]VALUE (U where the user named the limit with --propagate;
// unlimited as RLIM_INFINITY's number), and the node sets them on the job's processes
// before they start, taking the variables out, as Slurm's slurmstepd does. sbatch and srun
// write them (cli/), gantry-agent applies them (agent/launcher.h).
// Thread-safety: pure functions, and getrlimit.
#pragma once

#include <sys/resource.h>

#include <cstdint>
#include <cstdlib>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

namespace gantry {

struct SlurmRlimit {
  const char* name;  // Slurm's: SLURM_RLIMIT_<name>, --propagate=<name>
  int resource;      // RLIMIT_*
};

inline constexpr SlurmRlimit kSlurmRlimits[] = {
    {"AS", RLIMIT_AS},         {"CORE", RLIMIT_CORE},   {"CPU", RLIMIT_CPU},
    {"DATA", RLIMIT_DATA},     {"FSIZE", RLIMIT_FSIZE}, {"MEMLOCK", RLIMIT_MEMLOCK},
    {"NOFILE", RLIMIT_NOFILE}, {"NPROC", RLIMIT_NPROC}, {"RSS", RLIMIT_RSS},
    {"STACK", RLIMIT_STACK}};

// Whether `name` is one of Slurm's limit names; all of them, for messages: "AS, CORE, ...".
inline bool IsSlurmRlimit(const std::string& name) {
  for (const SlurmRlimit& l : kSlurmRlimits) {
    if (name == l.name) return true;
  }
  return false;
}
inline std::string SlurmRlimitNames() {
  std::string names;
  for (const SlurmRlimit& l : kSlurmRlimits)
    names += (names.empty() ? "" : ", ") + std::string(l.name);
  return names;
}

// This process's soft limits by Slurm's names.
inline std::map<std::string, uint64_t> SoftRlimits() {
  std::map<std::string, uint64_t> soft;
  for (const SlurmRlimit& l : kSlurmRlimits) {
    rlimit r{};
    if (::getrlimit(l.resource, &r) == 0) soft[l.name] = static_cast<uint64_t>(r.rlim_cur);
  }
  return soft;
}

// The SLURM_RLIMIT_* variables of `soft` as `propagate` (--propagate's value) says: nullopt
// (not given): every limit, as Slurm's default; "" or "ALL": every one, asked for (U);
// "NONE": none; names ("NOFILE,STACK"): those, asked for. Unknown names are the caller's
// to refuse.
inline std::map<std::string, std::string> SlurmRlimitEnv(
    const std::map<std::string, uint64_t>& soft, const std::optional<std::string>& propagate) {
  std::map<std::string, std::string> env;
  std::map<std::string, bool> asked;  // name -> with U
  if (!propagate) {
    for (const auto& [name, v] : soft) asked[name] = false;
  } else {
    std::stringstream in(propagate->empty() ? std::string("ALL") : *propagate);
    for (std::string name; std::getline(in, name, ',');) {
      if (name == "ALL") {
        for (const auto& [n, v] : soft) asked[n] = true;
      } else if (soft.contains(name)) {
        asked[name] = true;
      }
    }
  }
  for (const auto& [name, u] : asked) {
    env["SLURM_RLIMIT_" + name] = (u ? "U" : "") + std::to_string(soft.at(name));
  }
  return env;
}

// Takes out of `env` the SLURM_RLIMIT_* of the limits in `except` that the user did not
// name with --propagate (no U): a site's PropagateResourceLimitsExcept.
inline void DropExceptedRlimits(std::map<std::string, std::string>& env,
                                const std::vector<std::string>& except) {
  for (const std::string& name : except) {
    auto it = env.find("SLURM_RLIMIT_" + name);
    if (it != env.end() && (it->second.empty() || it->second[0] != 'U')) env.erase(it);
  }
}

// A SLURM_RLIMIT_* value: the limit and whether the user asked for it (U); nullopt when
// malformed.
struct PropagatedRlimit {
  uint64_t value = 0;
  bool asked = false;
};
inline std::optional<PropagatedRlimit> ParseSlurmRlimit(const std::string& text) {
  PropagatedRlimit r;
  std::string digits = text;
  if (!digits.empty() && digits[0] == 'U') {
    r.asked = true;
    digits.erase(0, 1);
  }
  if (digits.empty() || digits.size() > 20 ||
      digits.find_first_not_of("0123456789") != std::string::npos)
    return std::nullopt;
  char* end = nullptr;
  r.value = std::strtoull(digits.c_str(), &end, 10);
  return r;
}

}  // namespace gantry
