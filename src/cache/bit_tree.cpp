#include "cache/bit_tree.h"

#include "core/check.h"

namespace cellm::cache {
namespace {

std::size_t words_for(std::size_t bits, std::size_t word_bits) {
  return (bits + word_bits - 1) / word_bits;
}

}  // namespace

BitTree::BitTree(std::int32_t size) : size_(size) {
  CELLM_CHECK(size >= 0, "BitTree size {} is negative", size);
  std::size_t words = words_for(static_cast<std::size_t>(size), kWordBits);
  std::size_t total = 0;
  // Always at least one level of at least one word, so lookups need no
  // special case for an empty tree.
  do {
    words = words == 0 ? 1 : words;
    CELLM_CHECK(depth_ < kMaxDepth, "BitTree of {} indices is too deep", size);
    offsets_[depth_] = total;
    counts_[depth_] = words;
    total += words;
    ++depth_;
    words = words_for(words, kWordBits);
  } while (counts_[depth_ - 1] > 1);
  words_.assign(total, 0);
}

void BitTree::fill(bool full) {
  std::size_t bits = static_cast<std::size_t>(size_);
  for (std::size_t k = 0; k < depth_; ++k) {
    for (std::size_t w = 0; w < counts_[k]; ++w) {
      std::uint64_t value = 0;
      if (full) {
        const std::size_t begin = w * kWordBits;
        const std::size_t count = bits > begin ? bits - begin : 0;
        value = count >= kWordBits ? ~std::uint64_t{0} : (std::uint64_t{1} << count) - 1;
      }
      words_[offsets_[k] + w] = value;
    }
    bits = words_for(bits, kWordBits);
  }
}

}  // namespace cellm::cache
