#include "agent/mig_caps.h"

#include <charconv>
#include <fstream>
#include <sstream>

namespace gantry::agent {

namespace {

std::optional<std::string> ReadAll(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// "12" -> 12; nullopt unless all of `s` is a number in [0, 2^20).
std::optional<int> Number(std::string_view s) {
  int v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size() || v < 0 || v >= (1 << 20))
    return std::nullopt;
  return v;
}

// "gpu0/gi1/ci0/access" -> (0, 1, 0); "gpu0/gi1/access" -> (0, 1, -1); else nullopt (config,
// monitor, or a name a later driver adds).
std::optional<std::tuple<int, int, int>> AccessName(std::string_view name) {
  std::vector<std::string_view> parts;
  for (size_t at = 0;;) {
    const size_t slash = name.find('/', at);
    parts.push_back(
        name.substr(at, slash == std::string_view::npos ? std::string_view::npos : slash - at));
    if (slash == std::string_view::npos) break;
    at = slash + 1;
  }
  if (parts.size() < 3 || parts.size() > 4 || parts.back() != "access") return std::nullopt;
  auto id = [](std::string_view part, std::string_view prefix) -> std::optional<int> {
    if (!part.starts_with(prefix)) return std::nullopt;
    return Number(part.substr(prefix.size()));
  };
  const auto gpu = id(parts[0], "gpu"), gi = id(parts[1], "gi");
  const auto ci = parts.size() == 4 ? id(parts[2], "ci") : std::optional<int>(-1);
  if (!gpu || !gi || !ci) return std::nullopt;
  return std::tuple{*gpu, *gi, *ci};
}

}  // namespace

Result<MigCaps> MigCaps::Parse(const std::string& text, const std::string& file, int major) {
  MigCaps caps;
  caps.major_ = major;
  std::istringstream in(text);
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    std::istringstream fields(line);
    std::string name, minor, extra;
    if (!(fields >> name)) continue;  // a blank line
    const auto value = fields >> minor ? Number(minor) : std::nullopt;
    if (!value || fields >> extra) {
      return Error{file + ":" + std::to_string(n),
                   "expected NAME MINOR (e.g. gpu0/gi1/access 12), got \"" + line + "\""};
    }
    if (const auto key = AccessName(name)) caps.minors_[*key] = *value;
  }
  return caps;
}

Result<MigCaps> MigCaps::Load(const std::string& proc) {
  const std::string minors_path = proc + "/driver/nvidia-caps/mig-minors",
                    devices_path = proc + "/devices";
  const auto minors = ReadAll(minors_path);
  if (!minors) return Error{minors_path, "cannot read it (no MIG-capable NVIDIA driver loaded?)"};
  // /proc/devices: "Character devices:", then "MAJOR NAME" lines, then block devices.
  const auto devices = ReadAll(devices_path);
  if (!devices) return Error{devices_path, "cannot read it"};
  std::istringstream in(*devices);
  std::string line;
  std::optional<int> major;
  while (std::getline(in, line) && !line.starts_with("Block")) {
    std::istringstream fields(line);
    std::string number, name;
    if (fields >> number >> name && name == "nvidia-caps") major = Number(number);
  }
  if (!major) {
    return Error{devices_path,
                 "no nvidia-caps character device (MIG capabilities are not device files: "
                 "nv_cap_enable_devfs=0?)"};
  }
  return Parse(*minors, minors_path, *major);
}

std::vector<CharDevice> MigCaps::OnGpu(int gpu_minor) const {
  std::vector<CharDevice> out;
  for (auto it = minors_.lower_bound({gpu_minor, -1, -1});
       it != minors_.end() && std::get<0>(it->first) == gpu_minor; ++it) {
    out.push_back({major_, it->second});
  }
  return out;
}

std::optional<std::pair<CharDevice, CharDevice>> MigCaps::Instance(int gpu_minor, int gpu_instance,
                                                                   int compute_instance) const {
  const auto gi = minors_.find({gpu_minor, gpu_instance, -1});
  const auto ci = minors_.find({gpu_minor, gpu_instance, compute_instance});
  if (gi == minors_.end() || ci == minors_.end() || compute_instance < 0) return std::nullopt;
  return std::pair{CharDevice{major_, gi->second}, CharDevice{major_, ci->second}};
}

}  // namespace gantry::agent
