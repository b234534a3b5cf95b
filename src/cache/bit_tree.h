// BitTree: a fixed-size set of indices [0, size) with O(log64 size) insert,
// erase, lowest member and highest member. The CellCache uses one for free
// cells (lowest-free placement), one for used cells (the read extent) and one
// for free sequence slots.
//
// Thread-safety: a value type; not thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

namespace cellm::cache {

class BitTree {
 public:
  BitTree() = default;
  // An empty set over [0, size).
  explicit BitTree(std::int32_t size);

  std::int32_t size() const { return size_; }
  bool contains(std::int32_t i) const;
  // Insert and erase are idempotent.
  void insert(std::int32_t i);
  void erase(std::int32_t i);
  // Every index in [0, size) becomes a member (full) or none does.
  void fill(bool full);

  std::optional<std::int32_t> lowest() const;
  std::optional<std::int32_t> highest() const;

 private:
  // levels_[0] holds one bit per index; bit b of word w at level k+1 says
  // whether word 64*w+b of level k is non-zero. The last level is one word.
  std::vector<std::vector<std::uint64_t>> levels_;
  std::int32_t size_ = 0;
};

}  // namespace cellm::cache
