#include "core/advice.h"

#include <algorithm>
#include <charconv>
#include <cmath>

namespace gantry::core {

namespace {

bool PoolAllows(const Cluster& cluster, ModelId model, Sharing mode) {
  return std::any_of(cluster.pools().begin(), cluster.pools().end(), [&](const Pool& p) {
    return p.spec.model == model && (p.spec.sharing & Bit(mode)) != 0;
  });
}

// `v` with `digits` decimals, or the shortest form when digits < 0.
std::string Num(double v, int digits) {
  char buf[64];
  const auto r = digits < 0
                     ? std::to_chars(buf, buf + sizeof buf, v)
                     : std::to_chars(buf, buf + sizeof buf, v, std::chars_format::fixed, digits);
  return std::string(buf, r.ptr);
}

}  // namespace

Advice RightSize(const Cluster& cluster, ModelId model, const JobSpec& spec, const Observed& seen) {
  Advice a;
  if (!model.valid() || !spec.uses_gpu()) return a;
  const GpuModel& m = cluster.catalog().model(model);
  switch (spec.sharing) {
    case Sharing::kExclusive:
      a.gpus = spec.gpus;
      break;
    case Sharing::kMig: {
      const int p = model.v < spec.mig_index.size() ? spec.mig_index[model.v] : -1;
      a.gpus = p >= 0 ? m.mig_profiles[static_cast<size_t>(p)].compute_slices / 7.0 : 1.0;
      break;
    }
    case Sharing::kMps:
    case Sharing::kTimeslice:
      a.gpus = spec.share_milli / 1000.0;
      break;
  }
  a.fit_gpus = a.gpus;
  const double vram = static_cast<double>(seen.vram_peak_bytes) * kAdviceHeadroom;
  const double compute = seen.util_peak * a.gpus * kAdviceHeadroom;  // in GPUs
  const double memory = static_cast<double>(m.memory_bytes);
  if (memory <= 0) return a;

  if (compute > 1 || vram > memory) {
    // More than one GPU's worth: whole GPUs, fewer than asked if they would do.
    const double n = std::max({1.0, std::ceil(compute - 1e-9), std::ceil(vram / memory - 1e-9)});
    if (spec.sharing == Sharing::kExclusive && n < a.gpus) {
      a.fit_gpus = n;
      a.shape = Num(n, 0) + (n == 1 ? " GPU" : " GPUs");
    }
  } else {
    // Fits in one GPU: the smallest MIG instance or MPS share of this model that holds it.
    if (m.mig_capable() && PoolAllows(cluster, model, Sharing::kMig)) {
      const MigProfile* best = nullptr;
      for (const MigProfile& p : m.mig_profiles) {
        if (p.compute_slices / 7.0 + 1e-9 < compute || static_cast<double>(p.memory_bytes) < vram)
          continue;
        if (!best || p.compute_slices < best->compute_slices ||
            (p.compute_slices == best->compute_slices && p.memory_bytes < best->memory_bytes)) {
          best = &p;
        }
      }
      if (best && best->compute_slices / 7.0 < a.fit_gpus - 1e-9) {
        a.fit_gpus = best->compute_slices / 7.0;
        a.shape = "MIG " + best->name;
      }
    }
    // A MIG job stays on MIG (its isolation); others may move to MPS.
    if (spec.sharing != Sharing::kMig && PoolAllows(cluster, model, Sharing::kMps)) {
      const double share =
          std::max(0.125, std::ceil(std::max(compute, vram / memory) * 8 - 1e-9) / 8);
      if (share < a.fit_gpus - 1e-9 && share < 1) {
        a.fit_gpus = share;
        a.shape = "MPS share " + Num(share, -1);
      }
    }
    if (a.shape.empty() && a.gpus > 1 && spec.sharing == Sharing::kExclusive) {
      a.fit_gpus = 1;
      a.shape = "1 GPU";
    }
  }
  if (a.shape.empty()) return a;
  a.text = "used at most " + Num(static_cast<double>(seen.vram_peak_bytes) / 1e9, 1) +
           " GB of VRAM and " + Num(100 * seen.util_peak, 0) + "% of its " +
           (a.gpus > 1 ? "GPUs" : "GPU") + " (" + m.name + "): " + a.shape +
           " would hold it with " + Num(100 * (kAdviceHeadroom - 1), 0) + "% headroom, " +
           Num(100 * (1 - a.fit_gpus / a.gpus), 0) + "% fewer GPU-hours";
  return a;
}

}  // namespace gantry::core
