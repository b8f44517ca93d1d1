#include "agent/desired.h"

namespace gantry::agent {

DesiredWorker DecodeDesiredWorker(const nlohmann::json& e) {
  using nlohmann::json;
  DesiredWorker d;
  d.job = e.at("job").get<std::string>();
  d.seq = e.value("seq", int64_t{0});
  d.run = e.at("run").get<int>();
  d.rank = e.at("rank").get<int>();
  d.start = e.value("action", std::string("run")) == "run";
  d.grace_ms = e.value("grace_ms", int64_t{0});
  d.command = e.value("command", std::vector<std::string>{});
  const json env = e.value("env", json::object());
  for (const auto& [k, v] : env.items()) {
    if (v.is_string()) d.env.emplace_back(k, v.get<std::string>());
  }
  d.workdir = e.value("workdir", std::string());
  d.signal = e.value("signal", 0);
  d.stdout_path = e.value("stdout", std::string());
  d.stderr_path = e.value("stderr", std::string());
  const json alloc = e.value("alloc", json::object());
  d.alloc.sharing = alloc.value("sharing", std::string("exclusive"));
  d.alloc.gpus = alloc.value("gpus", std::vector<int>{});
  d.alloc.gpu = alloc.value("gpu", -1);
  d.alloc.mig = alloc.value("mig", std::string());
  d.alloc.start = alloc.value("start", -1);
  d.alloc.create = alloc.value("create", false);
  d.alloc.memory_slices = alloc.value("memory_slices", 0);
  d.alloc.compute_slices = alloc.value("compute_slices", 0);
  d.alloc.share_milli = alloc.value("share_milli", 0);
  d.alloc.vram_bytes = alloc.value("vram_bytes", int64_t{0});
  d.user = e.value("user", std::string());
  d.script = e.value("script", std::string());
  const json limits = e.value("limits", json::object());
  d.memory_bytes = limits.value("memory_bytes", int64_t{0});
  d.cpus_milli = limits.value("cpus_milli", int64_t{0});
  d.image = e.value("image", std::string());
  d.emulate = e.value("emulate", json());
  return d;
}

}  // namespace gantry::agent
