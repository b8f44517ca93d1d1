// DynBitset: a fixed-size bitset chosen at run time, with find-next.
//
// The ledger's free-capacity indexes are bitsets over a pool's nodes or GPUs: moving
// an element between buckets is O(1) and allocation-free, and "lowest id in range"
// scans 64 ids per instruction, which keeps decisions ordered by id (deterministic).
// A summary word per 64 words marks the words with any bit set, so a search past empty
// stretches skips 4,096 ids per instruction: a pool of 12,500 nodes has 196 words per
// bucket, which a search of a nearly empty bucket read one by one (the placement's
// cost grew with the cluster's size for that alone).
// Thread-safety: plain value.
#pragma once

#include <bit>
#include <cstdint>
#include <vector>

namespace gantry {

class DynBitset {
 public:
  static constexpr uint32_t kNone = UINT32_MAX;

  DynBitset() = default;
  explicit DynBitset(uint32_t size)
      : size_(size), words_((size + 63) / 64, 0), summary_((words_.size() + 63) / 64, 0) {}

  uint32_t size() const { return size_; }
  bool test(uint32_t i) const { return (words_[i >> 6] >> (i & 63)) & 1u; }
  void set(uint32_t i) {
    words_[i >> 6] |= uint64_t{1} << (i & 63);
    summary_[i >> 12] |= uint64_t{1} << ((i >> 6) & 63);
  }
  void reset(uint32_t i) {
    uint64_t& w = words_[i >> 6];
    w &= ~(uint64_t{1} << (i & 63));
    if (w == 0) summary_[i >> 12] &= ~(uint64_t{1} << ((i >> 6) & 63));
  }
  void assign(uint32_t i, bool v) { v ? set(i) : reset(i); }

  bool Any() const {
    for (uint64_t w : summary_) {
      if (w != 0) return true;
    }
    return false;
  }
  uint32_t Count() const {
    uint32_t n = 0;
    for (uint64_t w : words_) n += static_cast<uint32_t>(std::popcount(w));
    return n;
  }

  // Lowest set index in [from, to), or kNone.
  uint32_t FindNext(uint32_t from, uint32_t to) const {
    if (from >= to) return kNone;
    uint32_t w = from >> 6;
    uint64_t bits = words_[w] & (~uint64_t{0} << (from & 63));
    if (bits == 0) {  // the next word with a bit set, from the summary
      const uint32_t last = (to - 1) >> 6;
      if (++w > last) return kNone;
      uint32_t s = w >> 6;
      uint64_t marks = summary_[s] & (~uint64_t{0} << (w & 63));
      while (marks == 0) {
        if (++s > last >> 6) return kNone;
        marks = summary_[s];
      }
      w = (s << 6) + static_cast<uint32_t>(std::countr_zero(marks));
      if (w > last) return kNone;
      bits = words_[w];
    }
    const uint32_t i = (w << 6) + static_cast<uint32_t>(std::countr_zero(bits));
    return i < to ? i : kNone;
  }

 private:
  uint32_t size_ = 0;
  std::vector<uint64_t> words_;
  std::vector<uint64_t> summary_;  // bit j of word k: words_[64 k + j] != 0
};

}  // namespace gantry
