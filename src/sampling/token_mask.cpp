#include "sampling/token_mask.h"

#include <algorithm>
#include <limits>

namespace cellm::sampling {

void apply_token_mask(std::span<float> logits, std::span<const std::uint32_t> words) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  const std::size_t n = logits.size();
  for (std::size_t w = 0; w * 32 < n; ++w) {
    const std::uint32_t bits = w < words.size() ? words[w] : 0u;
    if (bits == ~0u) continue;
    const std::size_t end = std::min(n, w * 32 + 32);
    for (std::size_t i = w * 32; i < end; ++i) {
      if (((bits >> (i - w * 32)) & 1u) == 0) logits[i] = kNegInf;
    }
  }
}

bool mask_allows_any(std::span<const std::uint32_t> words, std::int64_t vocab) {
  for (std::size_t w = 0; w < words.size(); ++w) {
    std::uint32_t bits = words[w];
    const std::int64_t base = static_cast<std::int64_t>(w) * 32;
    if (base >= vocab) break;
    if (vocab - base < 32) bits &= (1u << (vocab - base)) - 1u;
    if (bits != 0) return true;
  }
  return false;
}

}  // namespace cellm::sampling
