// Agent: the MIG instances it creates on mig_managed pools, one per worker, destroyed when
// the worker ends, and listed in the state directory (mig.json) until they are.
#include "agent/agent.h"

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "base/atomic_file.h"

namespace gantry::agent {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// A worker's exit waits this long for its MIG instance to be destroyed (its processes,
// SIGKILLed, release the GPU within moments); then it is reported anyway, the instance
// still tried, and a worker placed over it fails saying why.
constexpr int64_t kMigReleaseWaitMs = 10000;
constexpr int64_t kMigRetryMs = 100;

}  // namespace

Result<std::string> Agent::MigFor(const GpuInfo& g, const MigPlacement& want,
                                  const std::string& key, const std::string& job, int64_t now) {
  const auto overlaps = [&](int start, int size) {
    return start < want.start + std::max(want.memory_slices, 1) &&
           want.start < start + std::max(size, 1);
  };
  ReleaseMigs(now, /*now_or_never=*/true);  // an ended worker's instance in the way goes first
  for (const auto& [uuid, h] : migs_) {
    if (h.made.gpu != g.index || !overlaps(h.made.start, h.made.size)) continue;
    return Error{"mig", "MIG instance " + uuid + " (" + h.made.profile + " at memory slice " +
                            std::to_string(h.made.start) + "), which this agent made for " +
                            (h.owner.empty() ? "a worker now gone" : "job " + h.job) +
                            ", is still there" + (h.error.empty() ? "" : ": " + h.error)};
  }
  if (const MigInstance* m = FindMig(g, want.profile, want.start)) {
    // Laid out by someone else (an administrator, a MIG manager): used as it is, never destroyed.
    for (const auto& [k, w] : workers_) {
      if (!w.exited && w.share.mig_uuid == m->uuid) {
        return Error{"mig", "MIG instance " + m->uuid + " is in use by job " + w.job + " here"};
      }
    }
    return m->uuid;
  }
  auto made = gpus_->CreateMig(g, want);
  if (!made) return made.error();
  HeldMig& h = migs_[made->uuid];
  h.made = *made;
  h.owner = key;
  h.job = job;
  SaveMigs();
  Say("created MIG instance " + made->uuid + " (" + made->profile + " at memory slice " +
      std::to_string(made->start) + ") on GPU " + std::to_string(g.index) + " for job " + job);
  return made->uuid;
}

void Agent::ReleaseMigs(int64_t now, bool now_or_never) {
  bool changed = false;
  for (auto it = migs_.begin(); it != migs_.end();) {
    HeldMig& h = it->second;
    if (!h.owner.empty()) {
      auto w = workers_.find(h.owner);
      if (w != workers_.end() && !w->second.exited) {
        ++it;
        continue;  // still running on it
      }
      if (h.ended_at < 0) h.ended_at = now;
    }
    if (!now_or_never && now < h.next_try) {
      ++it;
      continue;
    }
    if (Status s = gpus_->DestroyMig(h.made); !s) {
      if (h.error != s.error().message) {
        Say("cannot destroy MIG instance " + it->first + " yet: " + s.error().message, true);
      }
      h.error = s.error().message;
      h.next_try = now + kMigRetryMs;
      ++it;
      continue;
    }
    Say("destroyed MIG instance " + it->first + " (" + h.made.profile + " at memory slice " +
        std::to_string(h.made.start) + ") on GPU " + std::to_string(h.made.gpu));
    // Gone now, whatever the last sample says: never handed to the next worker.
    for (GpuInfo& g : last_gpus_) {
      std::erase_if(g.mig, [&](const MigInstance& m) { return m.uuid == it->first; });
    }
    if (!h.owner.empty()) exits_pending_ = true;  // its worker's exit can go now
    it = migs_.erase(it);
    changed = true;
  }
  if (changed) SaveMigs();
}

bool Agent::MigPending(const std::string& key, int64_t now, bool give_up, std::string* note) {
  for (auto& [uuid, h] : migs_) {
    if (h.owner != key) continue;
    if (!give_up && (h.ended_at < 0 || now - h.ended_at < kMigReleaseWaitMs)) return true;
    *note = "; its MIG instance " + uuid + " is not destroyed yet" +
            (h.error.empty() ? "" : ": " + h.error);
    Say("reporting job " + h.job + "'s worker ended, with its MIG instance " + uuid +
            " still there" + (h.error.empty() ? "" : ": " + h.error),
        true);
    h.owner.clear();  // still destroyed when it can be
    SaveMigs();
    return false;
  }
  return false;
}

void Agent::SaveMigs() const {
  json list = json::array();
  for (const auto& [uuid, h] : migs_) {
    const MadeMig& m = h.made;
    list.push_back({{"gpu", m.gpu},
                    {"gpu_uuid", m.gpu_uuid},
                    {"uuid", m.uuid},
                    {"profile", m.profile},
                    {"start", m.start},
                    {"size", m.size},
                    {"gpu_instance", m.gpu_instance},
                    {"compute_instance", m.compute_instance},
                    {"job", h.job}});
  }
  const fs::path path = fs::path(options_.state_dir) / "mig.json";
  std::error_code ec;
  if (list.empty()) {
    fs::remove(path, ec);
    return;
  }
  WriteFileAtomically(path.string(), list.dump() + "\n");
}

void Agent::LoadMigs(const std::map<std::string, std::string>& kept) {
  std::ifstream in(fs::path(options_.state_dir) / "mig.json");
  if (!in) return;
  const json list = json::parse(in, nullptr, false);
  if (!list.is_array()) return;
  for (const json& e : list) {
    if (!e.is_object()) continue;
    HeldMig h;
    h.made.gpu = e.value("gpu", -1);
    h.made.gpu_uuid = e.value("gpu_uuid", std::string());
    h.made.uuid = e.value("uuid", std::string());
    h.made.profile = e.value("profile", std::string());
    h.made.start = e.value("start", -1);
    h.made.size = e.value("size", 0);
    h.made.gpu_instance = e.value("gpu_instance", 0u);
    h.made.compute_instance = e.value("compute_instance", 0u);
    h.job = e.value("job", std::string());
    if (h.made.uuid.empty()) continue;
    if (auto k = kept.find(h.made.uuid); k != kept.end()) {
      h.owner = k->second;  // a re-adopted worker's: destroyed once it ends
      migs_[h.made.uuid] = std::move(h);
      continue;
    }
    Say("MIG instance " + h.made.uuid + " (" + h.made.profile + " at memory slice " +
        std::to_string(h.made.start) + ") on GPU " + std::to_string(h.made.gpu) +
        " was made by a previous gantry-agent: destroying it");
    migs_[h.made.uuid] = std::move(h);  // no owner: destroyed by the main loop
  }
}
}  // namespace gantry::agent
