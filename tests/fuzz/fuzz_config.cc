// Fuzzes the cluster config reader: any bytes must give either a config and no
// diagnostics, or no config and at least one diagnostic; never a crash or a throw.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "spec/config_reader.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace gantry;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  spec::Diagnostics diags;
  std::optional<spec::ClusterConfig> config = spec::ParseClusterConfig(text, "fuzz.yaml", diags);
  if (config.has_value() != diags.empty()) __builtin_trap();
  for (const spec::Diag& d : diags.items()) {
    if (d.file != "fuzz.yaml" || d.line < 0 || d.message.empty()) __builtin_trap();
    (void)d.ToString();
  }
  if (!config) return 0;
  // The built topology is consistent.
  const core::Cluster& c = config->cluster;
  size_t gpus = 0;
  for (size_t i = 0; i < c.nodes().size() && i < 4096; ++i) {
    const core::Node& n = c.node(core::NodeId(static_cast<uint32_t>(i)));
    auto found = c.FindNode(n.name);
    if (!found || found->v != i) __builtin_trap();
    if (n.gpus > 0 && (n.gpus_per_domain <= 0 || n.gpus % n.gpus_per_domain != 0)) __builtin_trap();
    if (c.leaf(n.leaf).pool != n.pool) __builtin_trap();
    gpus += static_cast<size_t>(n.gpus);
  }
  if (c.nodes().size() <= 4096 && gpus != c.gpu_count()) __builtin_trap();
  for (size_t i = 0; i < config->queues.size(); ++i) {
    const core::Queue& q = config->queues.queue(core::QueueId(static_cast<uint32_t>(i)));
    if (q.self_and_ancestors.empty() || q.self_and_ancestors.front().v != i) __builtin_trap();
    if (q.self_and_ancestors.size() > config->queues.size()) __builtin_trap();
  }
  return 0;
}
