#include "core/model/job.h"

namespace gantry::core {

namespace {
constexpr Ticks kTicksPerMinute = 60 * kTicksPerSecond;

Ticks MinuteOfDay(Ticks now) { return (now % kTicksPerDay) / kTicksPerMinute; }
}  // namespace

bool Window::Contains(Ticks now) const {
  Ticks m = MinuteOfDay(now);
  if (start_min < end_min) return m >= start_min && m < end_min;
  return m >= start_min || m < end_min;  // wraps past midnight
}

Ticks Window::NextOpen(Ticks now) const {
  if (Contains(now)) return now;
  Ticks day = now - now % kTicksPerDay;
  Ticks open = day + start_min * kTicksPerMinute;
  return open > now ? open : open + kTicksPerDay;
}

ModelMask JobSpec::ResolveMigIndex(const Catalog& catalog) {
  mig_index.assign(catalog.size(), -1);
  ModelMask having = 0;
  for (size_t m = 0; m < catalog.size(); ++m) {
    const int idx = catalog.FindProfile(ModelId(static_cast<uint32_t>(m)), mig_profile);
    mig_index[m] = static_cast<int8_t>(idx);
    if (idx >= 0) having |= ModelMask{1} << m;
  }
  return having;
}

GpuUnits JobSpec::WorkerUnits(const Catalog& catalog, ModelId model) const {
  switch (sharing) {
    case Sharing::kExclusive:
      return GpuUnits{gpus} * kGpuUnits;
    case Sharing::kMps:
    case Sharing::kTimeslice:
      return GpuUnits{share_milli} * kUnitsPerShareMilli;
    case Sharing::kMig: {
      int p = mig_index[model.v];
      return GpuUnits{catalog.model(model).mig_profiles[p].compute_slices} * kUnitsPerMigSlice;
    }
  }
  return 0;
}

}  // namespace gantry::core
