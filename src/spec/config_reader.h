// Reads the cluster config (spec section 1) into core value types.
//
// Unknown fields, wrong types and impossible values are reported with file, line and
// field; reading goes on so every problem is reported at once. On any problem the
// result is empty.
// Thread-safety: stateless functions.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "core/model/cluster.h"
#include "core/model/queue.h"
#include "spec/diagnostics.h"

namespace gantry::spec {

struct PolicyConfig {
  core::Ticks reclaim_idle_after = 0;  // 0 = never
};

struct ClusterConfig {
  core::Cluster cluster;
  core::QueueTree queues;
  PolicyConfig policy;
};

std::optional<ClusterConfig> ReadClusterConfig(const std::string& path, Diagnostics& diags);
// `file` labels diagnostics.
std::optional<ClusterConfig> ParseClusterConfig(std::string_view yaml_text,
                                                const std::string& file, Diagnostics& diags);

}  // namespace gantry::spec
