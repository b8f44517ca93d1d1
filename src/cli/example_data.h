// The example cluster, trace and failures from examples/, compiled in.
#pragma once

namespace gantry::cli {
extern const char* const kExampleCluster;
extern const char* const kExampleTrace;
extern const char* const kExampleFailures;
}  // namespace gantry::cli
