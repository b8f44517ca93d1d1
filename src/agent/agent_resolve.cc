// Agent: a desired worker's request resolved against this node: its GPUs, MIG instance or
// GPU share by the last discovery (what CUDA may see, and the variables that say it), its
// user's account, and the device files it may not open.
#include "agent/agent.h"

#include <grp.h>
#include <pwd.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <sstream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "agent/launcher.h"

namespace gantry::agent {

std::string Agent::ResolveGpus(const proto::Alloc& alloc, const std::string& key, int64_t now,
                               Worker& w, LaunchSpec& spec, std::string& problem, bool by_index) {
  // GPUs: what CUDA may see, by UUID (stable across reboots, unlike indexes).
  const std::string& sharing = alloc.sharing;
  std::string visible, indexes, visible_index;
  // Whether the worker's device rules hide the node's other GPUs from it.
  const auto rules = isolation_.find(proto::kIsolationGpuDevices);
  const bool fenced = rules != isolation_.end() && rules->second;
  auto gpu = [&](int index) -> const GpuInfo* {
    for (const GpuInfo& g : last_gpus_) {
      if (g.index != index) continue;
      indexes += (indexes.empty() ? "" : ",") + std::to_string(index);
      return &g;
    }
    problem = "GPU " + std::to_string(index) + " is not on this node";
    return nullptr;
  };
  if (sharing == "exclusive") {
    // By index (an sbatch job's, as Slurm's gres names them): where the worker's device
    // rules hide the node's other GPUs, CUDA numbers the ones it sees from 0, so they are
    // named from 0 in the order of their indexes, as Slurm does under ConstrainDevices
    // (gres_use_local_device_index); else by their indexes on the node.
    const bool local = by_index && fenced;
    std::vector<int> gpus = alloc.gpus;
    if (by_index) std::sort(gpus.begin(), gpus.end());
    int seen = 0;
    for (int i : gpus) {
      const GpuInfo* g = gpu(i);
      if (g == nullptr) continue;
      const std::string name = !by_index ? g->uuid : std::to_string(local ? seen++ : g->index);
      visible += (visible.empty() ? "" : ",") + name;
    }
  } else if (const GpuInfo* g = gpu(alloc.gpu)) {
    if (sharing == "mig") {
      const std::string& profile = alloc.mig;
      const int start = alloc.start;
      const std::string where = profile + " at memory slice " + std::to_string(start) + " on GPU " +
                                std::to_string(g->index) + " (" + g->uuid + ")";
      if (alloc.create) {  // a mig_managed pool: this agent lays the GPU out
        const MigPlacement want{.profile = profile,
                                .start = start,
                                .memory_slices = alloc.memory_slices,
                                .compute_slices = alloc.compute_slices};
        auto mig = MigFor(*g, want, key, w.job, now);
        if (mig) {
          visible = *mig;
        } else {
          problem = "cannot create MIG instance " + where + ": " + mig.error().message;
          w.drain = problem;  // the GPU cannot take it now: requeue the job, drain the node
        }
      } else {
        visible = gpus_->MigUuid(*g, profile, start);
        if (visible.empty()) {
          problem = "no MIG instance " + where +
                    " (its pool is not mig_managed: the agent uses instances laid out beforehand)";
        }
      }
      w.share.mig_uuid = visible;
      spec.env.emplace_back("GANTRY_MIG_PROFILE", profile);
    } else {
      visible = g->uuid;
      const int milli = alloc.share_milli;
      w.share.share_milli = milli;
      if (sharing == "mps") {
        // MPS: the share as a percentage of the GPU's threads, and the VRAM as a pinned
        // memory limit on (visible) device 0.
        spec.env.emplace_back(
            "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE",
            std::to_string(std::max(1, static_cast<int>(std::lround(milli / 10.0)))));
        const int64_t vram = alloc.vram_bytes;
        if (vram > 0) {
          spec.env.emplace_back("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT",
                                "0=" + std::to_string((vram + (1 << 20) - 1) >> 20) + "M");
        }
      }
      spec.env.emplace_back("GANTRY_GPU_SHARE", std::to_string(milli / 1000.0).substr(0, 5));
    }
  }
  // No GPUs: where the device rules hide every GPU, CUDA_VISIBLE_DEVICES is left unset, as
  // Slurm leaves it for a job without GPUs; elsewhere empty, so CUDA sees none. The names
  // for AMD's and OpenCL's runtimes go either way, as Slurm's gres/gpu unsets them (an
  // sbatch from inside a GPU job passed its own on: found side by side).
  if (visible.empty()) {
    std::erase_if(spec.env, [&](const auto& e) {
      return (fenced && e.first == "CUDA_VISIBLE_DEVICES") || e.first == "GPU_DEVICE_ORDINAL" ||
             e.first == "ROCR_VISIBLE_DEVICES";
    });
  }
  if (!visible.empty() || !fenced) spec.env.emplace_back("CUDA_VISIBLE_DEVICES", visible);
  spec.env.emplace_back(
      "GANTRY_GPUS", indexes);  // the node's GPU indexes (MIG, MPS: the parent), as SLURM_JOB_GPUS
  for (std::stringstream in(indexes); std::getline(in, visible_index, ',');) {
    w.share.gpus.push_back(std::stoi(visible_index));
  }
  w.share.sharing = sharing;
  spec.env.emplace_back("NVIDIA_VISIBLE_DEVICES", visible.empty() ? "void" : visible);
  return visible;
}

std::string Agent::ResolveUser(const std::string& user, LaunchSpec& spec) {
  if (user.empty()) {
    return "the job names no user (its token has none) and this agent runs jobs as their users "
           "(--run-as user)";
  }
  struct passwd pw {
  }, *found = nullptr;
  std::vector<char> buf(16384);
  if (::getpwnam_r(user.c_str(), &pw, buf.data(), buf.size(), &found) != 0 || found == nullptr) {
    return "user " + user + " has no Unix account on this node";
  }
  spec.as_user = true;
  spec.uid = pw.pw_uid;
  spec.gid = pw.pw_gid;
  int n = 64;
  spec.groups.resize(static_cast<size_t>(n));
  if (::getgrouplist(user.c_str(), pw.pw_gid, spec.groups.data(), &n) < 0) {
    spec.groups.resize(static_cast<size_t>(n));
    ::getgrouplist(user.c_str(), pw.pw_gid, spec.groups.data(), &n);
  }
  spec.groups.resize(static_cast<size_t>(std::max(n, 0)));
  // The user's, not the agent's (root's), unless the job set them.
  for (auto [k, v] : {std::pair<std::string, std::string>{"HOME", pw.pw_dir},
                      {"USER", user},
                      {"LOGNAME", user}}) {
    bool set = false;
    for (const auto& kv : spec.env) set |= kv.first == k;
    if (!set) spec.env.emplace_back(k, v);
  }
  return "";
}

std::vector<CharDevice> Agent::DeniedDevices(const WorkerShare& share, const std::string& job) {
  std::vector<CharDevice> denied;
  if (!cgroups_ || !cgroups_->constrains_devices()) return denied;  // said at start
  for (const GpuInfo& g : last_gpus_) {
    if (g.minor < 0) continue;  // no device file known (emulation)
    if (std::find(share.gpus.begin(), share.gpus.end(), g.index) == share.gpus.end()) {
      denied.push_back({kNvidiaMajor, g.minor});  // another GPU's /dev/nvidiaN
      continue;
    }
    // Its own GPU in MIG mode: every instance's access devices but its own instance's (a
    // worker given the whole GPU gets none: a GPU in MIG mode computes only in instances).
    // Instances made later for other workers are covered too: the driver lists all it could make.
    if (!g.mig_mode || !mig_caps_) continue;
    const std::vector<CharDevice> caps = mig_caps_->OnGpu(g.minor);
    const auto mine = MigDevices(g, share.mig_uuid);
    if (caps.empty() || (!share.mig_uuid.empty() && !mine)) {
      Say("job " + job + ": the MIG instances of GPU " + std::to_string(g.index) +
              " are NOT fenced from it" +
              (share.mig_uuid.empty() ? std::string() : " (in " + share.mig_uuid + ")") + ": " +
              (caps.empty()
                   ? "the driver's mig-minors lists no access devices for /dev/nvidia" +
                         std::to_string(g.minor)
                   : std::string(
                         "NVML or the driver did not tell its GPU and compute instance's devices")),
          true);
      continue;
    }
    for (const CharDevice& d : caps) {
      if (!mine || (d != mine->first && d != mine->second)) denied.push_back(d);
    }
  }
  return denied;
}

std::optional<std::pair<CharDevice, CharDevice>> Agent::MigDevices(const GpuInfo& gpu,
                                                                   const std::string& uuid) const {
  if (uuid.empty() || !mig_caps_ || gpu.minor < 0) return std::nullopt;
  int gi = -1, ci = -1;
  if (auto made = migs_.find(uuid); made != migs_.end()) {
    gi = static_cast<int>(made->second.made.gpu_instance);
    ci = static_cast<int>(made->second.made.compute_instance);
  } else {
    for (const MigInstance& m : gpu.mig) {
      if (m.uuid == uuid) std::tie(gi, ci) = std::pair{m.gpu_instance_id, m.compute_instance_id};
    }
  }
  if (gi < 0 || ci < 0) return std::nullopt;
  return mig_caps_->Instance(gpu.minor, gi, ci);
}
}  // namespace gantry::agent
