// Test aid for GPU device rules: NVIDIA device nodes (character devices 195:N) made in a
// test's folder, a shell loop that tries to open each, and how to read its answer. With no
// driver behind the nodes an allowed open fails with ENXIO ("No such device or address")
// and one the cgroup refuses with EPERM before the driver is asked.
#pragma once

#include <sys/stat.h>
#include <sys/sysmacros.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

namespace gantry::agent {

// Makes `dir`/NAME as character device MAJOR:MINOR for each node (195: NVIDIA's GPUs);
// empty, or why it could not (no CAP_MKNOD, a nodev mount).
inline std::string MakeGpuNodes(const std::filesystem::path& dir,
                                const std::vector<std::pair<std::string, int>>& nodes,
                                int major = 195) {
  for (const auto& [name, minor] : nodes) {
    if (::mknod((dir / name).c_str(), S_IFCHR | 0666, ::makedev(major, minor)) != 0)
      return std::strerror(errno);
  }
  return {};
}

// Shell: for each node (in the working directory) a line "NAME open" or "NAME <the shell's
// error opening it>".
inline std::string OpenEachCommand(const std::vector<std::string>& names) {
  std::string list;
  for (const std::string& n : names) list += (list.empty() ? "" : " ") + n;
  return "for d in " + list +
         "; do (exec 3< $d) 2>/dev/null && echo \"$d open\" || echo \"$d $(exec 2>&1; exec 3< "
         "$d)\"; done";
}

// Whether OpenEachCommand's output says the open of `dev` was refused (EPERM).
inline bool Refused(const std::string& output, const std::string& dev) {
  const size_t at = output.find(dev + " ");
  const std::string line =
      at == std::string::npos ? "" : output.substr(at, output.find('\n', at) - at);
  return line.find("ermission denied") != std::string::npos ||
         line.find("not permitted") != std::string::npos;
}

}  // namespace gantry::agent
