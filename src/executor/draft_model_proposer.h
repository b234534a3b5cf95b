// DraftModelProposer: speculative drafts from a smaller model that shares the
// target's tokenizer (Llama-3.2-1B for Llama-3.1-8B; in tests, the same model
// as its own draft, which every draft of a greedy run then matches).
//
// It owns a second executor over the draft model (built by the app's loading
// code on the target's backend, with a cell cache of its own) and keeps one
// draft session per target session, with the tokens that session holds. A
// proposal rewinds the draft session to the longest prefix it shares with the
// target's history (the executor rewinds an input that starts below a
// session's length), feeds the rest in one step and decodes k tokens by
// argmax one step at a time. The drafted tokens stay in the draft cache: the
// next call keeps those the target accepted and rewinds the others, so the
// draft's KV follows acceptance without a step of its own.
//
// Failures never reach the request: an error (the draft's initialize or a
// failed step) stops proposals for that session, or for all sessions when
// the draft cannot start, and is logged once per proposer. Sessions the
// draft cache cannot hold (too long, or more live sessions than the draft
// was sized for, after evicting the least recently used one) get no drafts.
//
// Thread-safety: the engine thread alone drives it. initialize() runs from
// the target executor's initialize(), on the engine thread, so the draft's
// methods load (and CUDA graphs are captured) on the thread that runs them;
// propose() and forget() are called by that executor on the same thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "cellm/raw_step.h"
#include "cellm/status.h"
#include "executor/draft_proposer.h"

namespace cellm::executor {

class DraftModelProposer final : public DraftProposer {
 public:
  // `draft` must not be initialized yet (initialize() does it on the engine
  // thread). `resources` (the draft's program and loaded weights) is kept
  // alive until after the executor is destroyed. A draft whose vocabulary
  // size differs from `target_vocab` is refused, naming both sizes.
  static Result<std::shared_ptr<DraftModelProposer>> create(
      std::unique_ptr<RawStepExecutor> draft, std::shared_ptr<void> resources,
      std::int64_t target_vocab, std::string label);
  ~DraftModelProposer() override;

  void initialize() override;
  void propose(SessionId session, std::span<const Token> history, std::size_t max_tokens,
               std::vector<Token>& out) override;
  void forget(SessionId session) override;

  // For tests and reports: draft sessions open, steps the draft ran, and
  // whether it failed to start.
  std::size_t open_sessions() const { return states_.size(); }
  std::uint64_t draft_steps() const { return steps_; }
  bool broken() const { return broken_; }
  // The draft executor (tests check its cache after runs). Engine thread.
  RawStepExecutor& draft() { return *draft_; }
  // The tokens the draft session of `session` holds (empty if none).
  std::span<const Token> held(SessionId session) const;

 private:
  struct State {
    SessionId sid = 0;
    std::vector<Token> fed;  // the draft session's tokens, by position
    std::uint64_t used = 0;  // last use, for eviction
  };
  DraftModelProposer(std::unique_ptr<RawStepExecutor> draft, std::shared_ptr<void> resources,
                     std::string label);
  // The draft session of `session`, opened (evicting the least recently
  // used one when the draft is full) if need be; null when none can be.
  State* state_for(SessionId session);
  // Runs one input of the draft session; the greedy token it predicts.
  std::optional<Token> step(State& state, std::span<const Token> tokens, std::size_t position);
  // Drops the session's draft state after an error and logs the first one.
  void fail(SessionId session, const std::string& what);

  // Declared first so they are destroyed last, after the executor.
  std::shared_ptr<void> resources_;
  std::unique_ptr<RawStepExecutor> draft_;
  std::string label_;
  bool initialized_ = false;
  bool broken_ = false;  // the draft could not start: no proposals at all
  bool logged_ = false;  // one failure message per proposer
  std::unordered_map<SessionId, State> states_;
  std::unordered_set<SessionId> failed_;  // sessions decoding without drafts
  std::uint64_t clock_ = 0;
  std::uint64_t steps_ = 0;
};

}  // namespace cellm::executor
