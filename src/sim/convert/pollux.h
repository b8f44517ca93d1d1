// Pollux (OSDI'21) and Sia (SOSP'23) workloads: `name,time,application,num_replicas,
// batch_size`. The files carry no run time; it is computed from the applications'
// measured profiles (the Sia artifact's traces/<app>/ folders) the way Pollux's
// simulator does for a rigid job: iterations to reach the application's final epoch at
// the requested batch size, times the measured step time of the requested replicas
// packed four to a node. Without a usable profile a per-application default applies.
// See docs/traces.md "pollux and sia".
// Thread-safety: AppProfile is immutable after Load.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "base/result.h"

namespace gantry::convert {

class AppProfile {
 public:
  // Reads DIR/validation-*.csv, DIR/placements.csv and DIR/scalability.csv; with a GPU
  // type (Sia's "rtx", "dgx-ext"), DIR/placements-TYPE.csv and DIR/scalability-TYPE.csv,
  // whose placements pack `gpus_per_node` to a node.
  static Result<AppProfile> Load(const std::string& dir, const std::string& app,
                                 const std::string& gpu_type = "", int gpus_per_node = 4);
  // Run time in seconds of `replicas` GPUs at global batch size `batch`; empty when
  // the profile has no step time for that many replicas.
  std::optional<double> RunTime(int replicas, double batch) const;

 private:
  struct StepRow {
    double local_bsz = 0, step = 0, sync = 0;
  };
  static std::optional<std::pair<double, double>> Interpolate(const std::vector<StepRow>& rows,
                                                              double local_bsz);
  std::map<int, double> iterations_;  // validated batch size -> iterations to the last epoch
  std::map<std::string, std::vector<StepRow>> placements_;          // "24" -> rows by local_bsz
  std::map<int, std::map<int, std::vector<StepRow>>> scalability_;  // replicas -> nodes -> rows
  double max_local_bsz_ = 0;
  int gpus_per_node_ = 4;
};

// Seconds a job of `application` runs when no profile can say (docs/traces.md).
std::optional<double> DefaultRunTime(const std::string& application);

}  // namespace gantry::convert
