#include "executor/draft_proposer.h"

#include <algorithm>

namespace cellm::executor {

NgramProposer::NgramProposer(std::size_t min_ngram, std::size_t max_ngram)
    : min_ngram_(std::max<std::size_t>(min_ngram, 1)),
      max_ngram_(std::max(max_ngram, std::max<std::size_t>(min_ngram, 1))) {}

void NgramProposer::propose(SessionId /*session*/, std::span<const Token> history,
                            std::size_t max_tokens, std::vector<Token>& out) {
  const std::size_t size = history.size();
  if (max_tokens == 0 || size < min_ngram_ + 1) return;
  // Longest pattern first: a longer match predicts better. The latest
  // earlier occurrence wins, since recent text is what an edit copies.
  for (std::size_t n = std::min(max_ngram_, size - 1); n >= min_ngram_; --n) {
    const std::span<const Token> pattern = history.subspan(size - n, n);
    // Occurrences start at s with s + n < size (strictly before the pattern
    // itself), so at least one token follows each.
    for (std::size_t s = size - n; s-- > 0;) {
      if (!std::equal(pattern.begin(), pattern.end(), history.begin() + static_cast<std::ptrdiff_t>(s))) {
        continue;
      }
      const std::size_t from = s + n;
      const std::size_t count = std::min(max_tokens, size - from);
      out.insert(out.end(), history.begin() + static_cast<std::ptrdiff_t>(from),
                 history.begin() + static_cast<std::ptrdiff_t>(from + count));
      return;
    }
    if (n == min_ngram_) break;
  }
}

Result<std::shared_ptr<DraftProposer>> make_proposer(const std::string& name) {
  if (name == "ngram") return std::shared_ptr<DraftProposer>(std::make_shared<NgramProposer>(2, 4));
  if (name == "draft") {
    return invalid_argument("speculation method 'draft' needs a draft model: give --draft-model PATH");
  }
  return invalid_argument("unknown speculation method '{}'; use ngram or draft (or off)", name);
}

}  // namespace cellm::executor
