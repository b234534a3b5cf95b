#include "engine/constrained_decoding.h"

#include <algorithm>
#include <atomic>

namespace cellm::detail {

// The pending computation of one generation's mask: queued by the engine
// thread, claimed once (compare-exchange) by a worker or by a reader's
// settle(), which waits only when another thread is already running it.
class ConstrainedDecoding::Fill final : public TokenMaskFill, public MaskJob {
 public:
  explicit Fill(ConstrainedDecoding& owner) : owner_(owner) {}

  // Engine thread, with nothing pending: publishes the grammar state (the
  // release pairs with the claim's acquire).
  void queue(MaskWorkers* pool) {
    pool_ = pool;
    outcome_ = Next::kContinue;
    state_.store(kQueued, std::memory_order_release);
  }
  bool try_run() override {
    int expected = kQueued;
    if (!state_.compare_exchange_strong(expected, kRunning, std::memory_order_acq_rel)) {
      return false;
    }
    run_();
    return true;
  }
  void settle() override {
    int s = state_.load(std::memory_order_acquire);
    while (s != kIdle) {
      if (s == kQueued) {
        if (state_.compare_exchange_weak(s, kRunning, std::memory_order_acq_rel)) {
          run_();
          return;
        }
        continue;  // s was reloaded
      }
      // Another thread runs this one: run queued ones meanwhile, and wait
      // only when none is left.
      if (pool_ == nullptr || !pool_->help_one()) state_.wait(kRunning, std::memory_order_acquire);
      s = state_.load(std::memory_order_acquire);
    }
  }
  // Drops a computation nobody has started, else waits for it.
  void cancel() {
    int expected = kQueued;
    if (!state_.compare_exchange_strong(expected, kIdle, std::memory_order_acq_rel)) settle();
  }
  // Valid after settle() on the thread that reads it.
  Next outcome() const { return outcome_; }

 private:
  enum : int { kIdle, kQueued, kRunning };
  void run_() {
    try {
      outcome_ = owner_.compute_();
    } catch (...) {
      // Nothing drawable: the engine fails the generation as a dead end.
      std::fill(owner_.mask_->words.begin(), owner_.mask_->words.end(), 0u);
      outcome_ = Next::kDeadEnd;
    }
    state_.store(kIdle, std::memory_order_release);
    state_.notify_all();
  }

  // Used only while a computation is pending; the owner settles it before it
  // goes, so a mask that outlives its generation never reaches the owner.
  ConstrainedDecoding& owner_;
  // The pool it was queued on (null: none, the reader runs it); only
  // settle() of a pending computation uses it (the engine, which owns the
  // pool, is running then).
  MaskWorkers* pool_ = nullptr;
  std::atomic<int> state_{kIdle};
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

ConstrainedDecoding::Next ConstrainedDecoding::refresh_async(MaskWorkers* workers) {
  fill_->settle();
  // A complete match may allow nothing more: know it now, so the generation
  // ends without another step (and the stop tokens join the mask).
  if (state_->accepting()) return compute_();
  fill_->queue(workers);
  deferred_ = true;
  if (workers != nullptr) workers->submit(fill_);
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
