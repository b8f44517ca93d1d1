// Agent: what its workers use of the GPUs (NVML's samples, or the emulation model the
// server sends), and the GPUs as heartbeats report them.
#include "agent/agent.h"

#include <sys/types.h>

#include <algorithm>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "agent/launcher.h"

namespace gantry::agent {

std::optional<proto::WorkerUsage> NvmlUsage(const WorkerShare& share,
                                            const std::vector<GpuInfo>& gpus,
                                            const std::function<bool(int)>& mine) {
  auto gpu = [&](int index) -> const GpuInfo* {
    for (const GpuInfo& g : gpus) {
      if (g.index == index) return g.lost ? nullptr : &g;  // a lost GPU tells nothing true
    }
    return nullptr;
  };
  if (share.gpus.empty()) return std::nullopt;
  if (share.sharing == "exclusive") {
    double util = 0;
    int64_t used = 0;
    for (int i : share.gpus) {
      const GpuInfo* g = gpu(i);
      if (!g) return std::nullopt;
      util += g->utilization;
      used += g->memory_used_bytes;
    }
    return proto::WorkerUsage{util / static_cast<double>(share.gpus.size()), used};
  }
  const GpuInfo* g = gpu(share.gpus.front());
  if (!g) return std::nullopt;
  if (share.sharing == "mig") {
    for (const MigInstance& m : g->mig) {
      if (m.uuid != share.mig_uuid || share.mig_uuid.empty()) continue;
      std::optional<double> util = m.utilization;
      if (!util && m.processes.sampled) {
        util = 0.0;
        for (const GpuProcess& p : m.processes.list) *util += p.sm_util;
      }
      int64_t used = m.memory_used_bytes;
      if (used < 0 && m.processes.listed) {
        used = 0;
        for (const GpuProcess& p : m.processes.list) used += std::max<int64_t>(0, p.vram_bytes);
      }
      if (!util || used < 0) return std::nullopt;
      return proto::WorkerUsage{std::min(1.0, *util), used};
    }
    return std::nullopt;
  }
  // MPS, time-slicing: the GPU's numbers are all its tenants'; its own processes tell.
  // Under an MPS daemon NVML's utilization samples name the MPS server, not its clients
  // (seen on an H100 with driver 580: the server sampled at 93-99%, the clients never), so
  // where no client has a sample, a worker whose processes are MPS clients counts as busy
  // as the GPU's processes that are not clients (its servers) together: an upper bound, so
  // that a busy share is never taken for idle; an idle share beside a busy one is reclaimed
  // once the server is idle.
  if (!g->processes.listed || !g->processes.sampled || share.share_milli <= 0) return std::nullopt;
  double sm = 0, servers = 0;
  bool client = false, clients_sampled = false;
  int64_t used = 0;
  for (const GpuProcess& p : g->processes.list) {
    clients_sampled = clients_sampled || (p.mps_client && p.sm_util > 0);
    if (!mine(p.pid)) {
      if (!p.mps_client) servers += p.sm_util;
      continue;
    }
    sm += p.sm_util;
    client = client || p.mps_client;
    used += std::max<int64_t>(0, p.vram_bytes);
  }
  if (client && !clients_sampled) sm = std::max(sm, servers);
  return proto::WorkerUsage{std::min(1.0, sm * 1000.0 / share.share_milli), used};
}

std::optional<proto::WorkerUsage> Agent::Usage(const Worker& w, int64_t now,
                                               const std::map<int, std::string>& owners) const {
  if (gpus_->emulated()) {
    // The job's emulation model, from the server: busy at `util` until idle_after_ms of
    // run time, then 0; its VRAM held throughout.
    if (!w.emulate) return std::nullopt;
    const proto::Emulate& m = *w.emulate;
    const bool idle = m.idle_after_ms >= 0 && now - w.started_ms >= m.idle_after_ms;
    return proto::WorkerUsage{idle ? 0.0 : m.util, m.vram_used_bytes};
  }
  const std::string key = Key(w);
  return NvmlUsage(w.share, last_gpus_, [&](int pid) {
    auto it = owners.find(pid);
    return it != owners.end() && it->second == key;
  });
}

std::map<int, std::string> Agent::GpuProcessOwners() const {
  std::set<int> pids;
  for (const GpuInfo& g : last_gpus_) {
    for (const GpuProcess& p : g.processes.list) pids.insert(p.pid);
    for (const MigInstance& m : g.mig) {
      for (const GpuProcess& p : m.processes.list) pids.insert(p.pid);
    }
  }
  std::map<int, std::string> owners;
  if (pids.empty()) return owners;
  std::map<pid_t, std::string> by_session;
  for (const auto& [key, w] : workers_) {
    if (!w.exited && w.pid > 1) by_session[w.pid] = key;
  }
  std::map<std::string, std::vector<pid_t>> in_cgroup;  // read when first needed
  for (int pid : pids) {
    if (auto it = by_session.find(SessionOf(pid)); it != by_session.end()) {
      owners[pid] = it->second;
      continue;
    }
    if (!cgroups_) continue;
    for (const auto& [key, w] : workers_) {
      if (w.exited || w.cgroup.empty()) continue;
      auto procs = in_cgroup.find(key);
      if (procs == in_cgroup.end()) procs = in_cgroup.emplace(key, cgroups_->Procs(w.cgroup)).first;
      if (std::find(procs->second.begin(), procs->second.end(), pid) != procs->second.end()) {
        owners[pid] = key;
        break;
      }
    }
  }
  return owners;
}

int64_t FirstBeatAfterJoining(const std::string& node, int64_t interval_ms) {
  uint64_t h = 14695981039346656037ull;  // FNV-1a: the same point on every build
  for (const unsigned char c : node) h = (h ^ c) * 1099511628211ull;
  return interval_ms / 2 + static_cast<int64_t>(h % 1000) * interval_ms / 1000;
}

proto::GpuReport WireGpu(const GpuInfo& g, int64_t idle_ms) {
  proto::GpuReport r;
  r.index = g.index;
  r.uuid = g.uuid;
  r.name = g.name;
  r.model = g.model;
  r.memory_bytes = g.memory_bytes;
  r.mig_mode = g.mig_mode;
  for (const MigInstance& m : g.mig)
    r.mig.push_back({m.uuid, m.profile, m.start, m.gpu_instance_id});
  r.utilization = g.utilization;
  r.memory_used_bytes = g.memory_used_bytes;
  r.idle_ms = idle_ms;
  r.lost = g.lost;
  r.nvlink_peers = g.nvlink_peers;
  return r;
}

}  // namespace gantry::agent
