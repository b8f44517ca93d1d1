#include "base/bitset.h"

#include <gtest/gtest.h>
#include <random>
#include <vector>

namespace gantry {
namespace {

// Random sets and resets against a vector<bool>, at sizes around the summary's 4,096-id
// stretches: every FindNext over random ranges gives the lowest set id in range.
TEST(DynBitsetTest, FindNextGivesTheLowestSetIdInRangeAsAWalkWould) {
  std::mt19937 rng(11);
  auto uniform = [&](uint32_t lo, uint32_t hi) {
    return std::uniform_int_distribution<uint32_t>(lo, hi)(rng);
  };
  int found = 0;
  for (uint32_t size : {1u, 63u, 64u, 65u, 4095u, 4096u, 4097u, 12500u, 100000u}) {
    DynBitset bits(size);
    std::vector<bool> want(size, false);
    for (int round = 0; round < 400; ++round) {
      // Mostly sparse: a few ids set, then most of them reset again.
      for (int k = 0; k < 8; ++k) {
        const uint32_t i = uniform(0, size - 1);
        const bool on = uniform(0, 2) == 0;
        bits.assign(i, on);
        want[i] = on;
      }
      for (int q = 0; q < 20; ++q) {
        const uint32_t from = uniform(0, size), to = uniform(0, size);
        uint32_t expect = DynBitset::kNone;
        for (uint32_t i = from; i < to; ++i) {
          if (want[i]) {
            expect = i;
            break;
          }
        }
        ASSERT_EQ(bits.FindNext(from, to), expect)
            << "size " << size << " [" << from << ", " << to << ")";
        found += expect != DynBitset::kNone;
      }
      bool any = false;
      uint32_t count = 0;
      for (bool b : want) any = any || b, count += b;
      ASSERT_EQ(bits.Any(), any);
      ASSERT_EQ(bits.Count(), count);
    }
  }
  EXPECT_GT(found, 1000);  // the ranges found something often enough to test both ways
}

}  // namespace
}  // namespace gantry
