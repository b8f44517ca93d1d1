// Random: a seeded std::mt19937_64 with the few distributions Gantry's tools draw.
//
// The distributions are written out here rather than taken from <random>, whose
// std::uniform_int_distribution and friends may differ between standard libraries:
// these give the same numbers everywhere for a seed, so generated files are
// byte-identical across machines. Seeds are always explicit; nothing reads the clock.
// Thread-safety: none; one Random per user.
#pragma once

#include <cmath>
#include <cstdint>
#include <random>

namespace gantry::gen {

// SplitMix64: derives independent seeds for separate streams from one seed.
inline uint64_t MixSeed(uint64_t seed, uint64_t stream) {
  uint64_t z = seed + 0x9e3779b97f4a7c15ULL * (stream + 1);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

class Random {
 public:
  explicit Random(uint64_t seed) : rng_(seed) {}

  uint64_t Bits() { return rng_(); }
  // Uniform in [0, 1), 53 bits.
  double Uniform() { return static_cast<double>(rng_() >> 11) * 0x1.0p-53; }
  double Uniform(double lo, double hi) { return lo + (hi - lo) * Uniform(); }
  // Uniform integer in [0, n), n >= 1, without modulo bias.
  uint64_t Index(uint64_t n) {
    const uint64_t limit = UINT64_MAX - UINT64_MAX % n;
    uint64_t x = rng_();
    while (x >= limit) x = rng_();
    return x % n;
  }
  // Uniform integer in [lo, hi].
  int64_t Int(int64_t lo, int64_t hi) {
    return lo + static_cast<int64_t>(Index(static_cast<uint64_t>(hi - lo + 1)));
  }
  bool Chance(double p) { return Uniform() < p; }
  // Exponential with the given mean.
  double Exp(double mean) { return -mean * std::log1p(-Uniform()); }
  // Standard normal (Box-Muller; one of the pair).
  double Normal() {
    const double u1 = 1.0 - Uniform();  // (0, 1]
    const double u2 = Uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }
  // Log-normal with the given median and sigma of the underlying normal.
  double LogNormal(double median, double sigma) { return median * std::exp(sigma * Normal()); }
  // An index drawn with probability proportional to weights[i].
  template <typename Weights>
  size_t Pick(const Weights& weights) {
    double total = 0;
    for (double w : weights) total += w;
    double x = Uniform() * total;
    size_t i = 0;
    for (double w : weights) {
      if (x < w) return i;
      x -= w;
      ++i;
    }
    return i - 1;
  }

 private:
  std::mt19937_64 rng_;
};

}  // namespace gantry::gen
