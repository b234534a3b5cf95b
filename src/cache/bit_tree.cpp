#include "cache/bit_tree.h"

#include <bit>
#include <cstddef>

#include "core/check.h"

namespace cellm::cache {
namespace {

constexpr int kWordBits = 64;

std::size_t words_for(std::size_t bits) { return (bits + kWordBits - 1) / kWordBits; }

}  // namespace

BitTree::BitTree(std::int32_t size) : size_(size) {
  CELLM_CHECK(size >= 0, "BitTree size {} is negative", size);
  std::size_t words = words_for(static_cast<std::size_t>(size));
  // Always at least one level of at least one word, so lookups need no
  // special case for an empty tree.
  do {
    words = words == 0 ? 1 : words;
    levels_.emplace_back(words, 0);
    words = words_for(words);
  } while (levels_.back().size() > 1);
}

bool BitTree::contains(std::int32_t i) const {
  if (i < 0 || i >= size_) return false;
  const auto u = static_cast<std::size_t>(i);
  return (levels_[0][u / kWordBits] >> (u % kWordBits)) & 1U;
}

void BitTree::insert(std::int32_t i) {
  CELLM_CHECK(i >= 0 && i < size_, "BitTree index {} outside [0, {})", i, size_);
  auto u = static_cast<std::size_t>(i);
  for (auto& level : levels_) {
    std::uint64_t& word = level[u / kWordBits];
    const bool was_empty = word == 0;
    word |= std::uint64_t{1} << (u % kWordBits);
    // A parent bit only changes when its child word turns non-zero.
    if (!was_empty) return;
    u /= kWordBits;
  }
}

void BitTree::erase(std::int32_t i) {
  CELLM_CHECK(i >= 0 && i < size_, "BitTree index {} outside [0, {})", i, size_);
  auto u = static_cast<std::size_t>(i);
  for (auto& level : levels_) {
    std::uint64_t& word = level[u / kWordBits];
    word &= ~(std::uint64_t{1} << (u % kWordBits));
    if (word != 0) return;
    u /= kWordBits;
  }
}

void BitTree::fill(bool full) {
  std::size_t bits = static_cast<std::size_t>(size_);
  for (auto& level : levels_) {
    for (std::size_t w = 0; w < level.size(); ++w) {
      if (!full) {
        level[w] = 0;
        continue;
      }
      const std::size_t begin = w * kWordBits;
      const std::size_t count = bits > begin ? bits - begin : 0;
      level[w] = count >= kWordBits ? ~std::uint64_t{0}
                                    : (std::uint64_t{1} << count) - 1;
    }
    bits = words_for(bits);
  }
}

std::optional<std::int32_t> BitTree::lowest() const {
  if (levels_.back()[0] == 0) return std::nullopt;
  std::size_t u = 0;
  for (std::size_t k = levels_.size(); k-- > 0;) {
    const std::uint64_t word = levels_[k][u];
    CELLM_DCHECK(word != 0, "BitTree summary bit set over an empty word");
    u = u * kWordBits + static_cast<std::size_t>(std::countr_zero(word));
  }
  return static_cast<std::int32_t>(u);
}

std::optional<std::int32_t> BitTree::highest() const {
  if (levels_.back()[0] == 0) return std::nullopt;
  std::size_t u = 0;
  for (std::size_t k = levels_.size(); k-- > 0;) {
    const std::uint64_t word = levels_[k][u];
    CELLM_DCHECK(word != 0, "BitTree summary bit set over an empty word");
    u = u * kWordBits + static_cast<std::size_t>(kWordBits - 1 - std::countl_zero(word));
  }
  return static_cast<std::int32_t>(u);
}

}  // namespace cellm::cache
