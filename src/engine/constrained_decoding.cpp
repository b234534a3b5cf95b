#include "engine/constrained_decoding.h"

#include <algorithm>

namespace cellm::detail {

// The pending computation of one generation's mask: left by the engine
// thread, run once by whichever settles it first (the executor reading the
// mask, or the engine itself), always on the engine thread.
class ConstrainedDecoding::Fill final : public TokenMaskFill {
 public:
  explicit Fill(ConstrainedDecoding& owner) : owner_(owner) {}

  // With nothing pending.
  void defer() {
    outcome_ = Next::kContinue;
    pending_ = true;
  }
  void settle() override {
    if (!pending_) return;
    pending_ = false;
    try {
      outcome_ = owner_.compute_();
    } catch (...) {
      // Nothing drawable: the engine fails the generation as a dead end.
      std::fill(owner_.mask_->words.begin(), owner_.mask_->words.end(), 0u);
      outcome_ = Next::kDeadEnd;
    }
  }
  // Drops a computation nobody has run.
  void cancel() { pending_ = false; }
  // Valid after settle().
  Next outcome() const { return outcome_; }

 private:
  // Used only while a computation is pending; the owner cancels it before it
  // goes, so a mask that outlives its generation never reaches the owner.
  ConstrainedDecoding& owner_;
  bool pending_ = false;
  Next outcome_ = Next::kContinue;
};

ConstrainedDecoding::ConstrainedDecoding(const TokenConstraint& constraint,
                                         std::vector<Token> stop_tokens, std::int64_t vocab)
    : state_(constraint.start()),
      mask_(std::make_shared<TokenMask>()),
      stop_tokens_(std::move(stop_tokens)),
      vocab_(vocab) {
  mask_->words.assign(static_cast<std::size_t>((std::max<std::int64_t>(vocab, 0) + 31) / 32), 0u);
  fill_ = std::make_shared<Fill>(*this);
  mask_->fill = fill_;
}

// The mask may outlive this (in a policy the executor still holds): nothing
// pending may reach the grammar state after it is gone.
ConstrainedDecoding::~ConstrainedDecoding() {
  fill_->cancel();
}

ConstrainedDecoding::Next ConstrainedDecoding::refresh() {
  fill_->settle();
  return compute_();
}

ConstrainedDecoding::Next ConstrainedDecoding::defer_refresh() {
  fill_->settle();
  // A complete match may allow nothing more: know it now, so the generation
  // ends without another step (and the stop tokens join the mask).
  if (state_->accepting()) return compute_();
  fill_->defer();
  deferred_ = true;
  return Next::kContinue;
}

ConstrainedDecoding::Next ConstrainedDecoding::settle() {
  fill_->settle();
  if (!deferred_) return Next::kContinue;
  deferred_ = false;
  return fill_->outcome();
}

bool ConstrainedDecoding::advance(Token token) {
  fill_->settle();
  return state_->advance(token);
}

ConstrainedDecoding::Next ConstrainedDecoding::compute_() {
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
