#include "engine/constrained_decoding.h"

#include <algorithm>

namespace cellm::detail {

ConstrainedDecoding::ConstrainedDecoding(const TokenConstraint& constraint,
                                         std::vector<Token> stop_tokens, std::int64_t vocab)
    : state_(constraint.start()),
      mask_(std::make_shared<TokenMask>()),
      stop_tokens_(std::move(stop_tokens)),
      vocab_(vocab) {
  mask_->words.assign(static_cast<std::size_t>((std::max<std::int64_t>(vocab, 0) + 31) / 32), 0u);
}

ConstrainedDecoding::Next ConstrainedDecoding::refresh() {
  std::vector<std::uint32_t>& words = mask_->words;
  state_->fill_mask(words);
  // Ids past the executor's vocabulary cannot be drawn: keep them out.
  if (vocab_ % 32 != 0 && !words.empty()) words.back() &= (1u << (vocab_ % 32)) - 1u;
  const bool any = std::any_of(words.begin(), words.end(), [](std::uint32_t w) { return w != 0; });
  const bool accepting = state_->accepting();
  if (!any) return accepting ? Next::kComplete : Next::kDeadEnd;
  if (accepting) {
    for (Token t : stop_tokens_) {
      if (t < static_cast<Token>(vocab_)) words[t / 32] |= 1u << (t % 32);
    }
  }
  return Next::kContinue;
}

}  // namespace cellm::detail
