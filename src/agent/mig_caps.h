// MIG instances' access devices. On a GPU in MIG mode, a process that opens the GPU's
// /dev/nvidiaN may use any of its MIG instances whose capability devices it can also open:
// one for the GPU instance and one for the compute instance
// (/dev/nvidia-caps/nvidia-capN, character devices of the driver's "nvidia-caps" major).
// The driver lists their minor numbers for every GPU and compute instance a GPU could
// have, made or not, in /proc/driver/nvidia-caps/mig-minors:
//   config 1
//   monitor 2
//   gpu0/gi1/access 12
//   gpu0/gi1/ci0/access 13
// where gpu0 is the GPU's minor number (/dev/nvidia0). Slurm's gres/gpu (AutoDetect=nvml)
// reads the same file to give a job its instance's two devices; the agent denies a worker
// the others of its GPU, so MIG workers sharing a GPU cannot reach each other's instances.
// (With capabilities exposed as /proc files instead, nv_cap_enable_devfs=0, there are no
// such devices and nothing to constrain: Load fails on the missing major and says so.)
// Thread-safety: a plain value.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "agent/cgroup.h"
#include "base/result.h"

namespace gantry::agent {

class MigCaps {
 public:
  // Reads `proc`/driver/nvidia-caps/mig-minors and the nvidia-caps major from
  // `proc`/devices (`proc` is /proc but in tests). An error names the file and line.
  static Result<MigCaps> Load(const std::string& proc = "/proc");
  // Parses mig-minors' text (`file` names it in errors).
  static Result<MigCaps> Parse(const std::string& text, const std::string& file, int major);

  int major_number() const { return major_; }  // nvidia-caps' major
  size_t size() const { return minors_.size(); }
  // The access devices of every GPU and compute instance the GPU /dev/nvidia<gpu_minor>
  // could have (none where the file lists none for it).
  std::vector<CharDevice> OnGpu(int gpu_minor) const;
  // The GPU instance's access device and its compute instance's; nullopt where the file
  // lists either not.
  std::optional<std::pair<CharDevice, CharDevice>> Instance(int gpu_minor, int gpu_instance,
                                                            int compute_instance) const;
  // The device file of one (/dev/nvidia-caps/nvidia-capN), for a container's --device.
  static std::string Path(const CharDevice& d) {
    return "/dev/nvidia-caps/nvidia-cap" + std::to_string(d.minor);
  }

 private:
  int major_ = 0;
  // (GPU minor, GPU instance, compute instance or -1 for the GPU instance's own) -> minor
  std::map<std::tuple<int, int, int>, int> minors_;
};

}  // namespace gantry::agent
