// BitTree: a fixed-size set of indices [0, size) with O(log64 size) insert,
// erase, lowest and highest member. The CellCache uses one for free cells
// (lowest-free placement), one for used cells (the read extent) and one for
// free sequence slots. Hot paths are inline: a placement runs them per token.
//
// Thread-safety: a value type; not thread-safe.
#pragma once

#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "core/check.h"

namespace cellm::cache {

class BitTree {
 public:
  BitTree() : BitTree(0) {}
  // An empty set over [0, size).
  explicit BitTree(std::int32_t size);

  std::int32_t size() const { return size_; }

  bool contains(std::int32_t i) const {
    if (i < 0 || i >= size_) return false;
    const auto u = static_cast<std::size_t>(i);
    return (words_[u / kWordBits] >> (u % kWordBits)) & 1U;
  }

  // Insert and erase are idempotent; i must lie in [0, size) (checked in
  // debug builds: callers are internal and pass indices they own).
  void insert(std::int32_t i) {
    CELLM_DCHECK(i >= 0 && i < size_, "BitTree index {} outside [0, {})", i, size_);
    auto u = static_cast<std::size_t>(i);
    for (std::size_t k = 0; k < depth_; ++k) {
      std::uint64_t& word = words_[offsets_[k] + u / kWordBits];
      const bool was_empty = word == 0;
      word |= std::uint64_t{1} << (u % kWordBits);
      // A parent bit only changes when its child word turns non-zero.
      if (!was_empty) return;
      u /= kWordBits;
    }
  }
  void erase(std::int32_t i) {
    CELLM_DCHECK(i >= 0 && i < size_, "BitTree index {} outside [0, {})", i, size_);
    auto u = static_cast<std::size_t>(i);
    for (std::size_t k = 0; k < depth_; ++k) {
      std::uint64_t& word = words_[offsets_[k] + u / kWordBits];
      word &= ~(std::uint64_t{1} << (u % kWordBits));
      if (word != 0) return;
      u /= kWordBits;
    }
  }
  // Every index in [0, size) becomes a member (full) or none does.
  void fill(bool full);

  std::optional<std::int32_t> lowest() const {
    if (words_[offsets_[depth_ - 1]] == 0) return std::nullopt;
    std::size_t u = 0;
    for (std::size_t k = depth_; k-- > 0;) {
      u = u * kWordBits + static_cast<std::size_t>(std::countr_zero(words_[offsets_[k] + u]));
    }
    return static_cast<std::int32_t>(u);
  }

  std::optional<std::int32_t> highest() const {
    if (words_[offsets_[depth_ - 1]] == 0) return std::nullopt;
    std::size_t u = 0;
    for (std::size_t k = depth_; k-- > 0;) {
      u = u * kWordBits + (kWordBits - 1) -
          static_cast<std::size_t>(std::countl_zero(words_[offsets_[k] + u]));
    }
    return static_cast<std::int32_t>(u);
  }

  // Removes and returns the lowest member in one descent; nullopt if empty.
  std::optional<std::int32_t> pop_lowest() {
    if (words_[offsets_[depth_ - 1]] == 0) return std::nullopt;
    std::array<std::size_t, kMaxDepth> path{};  // word index per level
    std::size_t u = 0;
    for (std::size_t k = depth_; k-- > 0;) {
      path[k] = u;
      u = u * kWordBits + static_cast<std::size_t>(std::countr_zero(words_[offsets_[k] + u]));
    }
    // Clear upwards while words become empty; bit k of a level is the lowest
    // set bit of its word, so `w & (w - 1)` drops exactly it.
    for (std::size_t k = 0; k < depth_; ++k) {
      std::uint64_t& word = words_[offsets_[k] + path[k]];
      word &= word - 1;
      if (word != 0) break;
    }
    return static_cast<std::int32_t>(u);
  }

 private:
  static constexpr std::size_t kWordBits = 64;
  static constexpr std::size_t kMaxDepth = 8;  // 64^6 > 2^31 already

  // Level 0 holds one bit per index; bit b of word w at level k+1 says whether
  // word 64*w+b of level k is non-zero. The top level is one word. All levels
  // share one array: level k starts at offsets_[k].
  std::vector<std::uint64_t> words_;
  std::array<std::size_t, kMaxDepth> offsets_{};
  std::array<std::size_t, kMaxDepth> counts_{};
  std::size_t depth_ = 0;
  std::int32_t size_ = 0;
};

}  // namespace cellm::cache
