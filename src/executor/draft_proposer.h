// DraftProposer: where speculative decoding gets the tokens it verifies.
//
// The executor asks a proposer for up to k tokens that likely continue a
// session, feeds them after the session's real token in the same forward and
// keeps the prefix the target model agrees with (speculation.h). A proposer
// only guesses: a wrong guess costs a little compute and never changes what
// the session generates, so a proposer may return nothing at any time.
//
// NgramProposer is prompt lookup: the session's last n tokens (n from
// max_ngram down to min_ngram) are searched for in its earlier history, and
// the tokens that followed the latest earlier occurrence are proposed. It
// needs no weights and pays off where output repeats its context (editing,
// code, extraction). A draft model (draft_model_proposer.h) implements the
// same interface.
//
// A head that drafts from the target's hidden states (EAGLE-style) plugs in
// through wants_taps() and observe_taps(): when a proposer wants taps and
// the target's program exports them (ProgramOptions::taps) on the host, the
// executor hands it, after every step that sampled a session's output, the
// tap of the row that produced the session's last kept token: the final
// hidden state (the LM head's input) at the position before that token. Its
// next propose() for the session then sees that token as history.back(), so
// the head has the feature of position n - 1 and the token at n, which is
// what such a head reads to draft n + 1. Device taps are not copied back
// (a device-resident head would read them in place), so on the CUDA program
// observe_taps is not called yet.
//
// Thread-safety: called on the engine thread only, by the executor that
// owns it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "cellm/status.h"
#include "cellm/types.h"

namespace cellm::executor {

class DraftProposer {
 public:
  virtual ~DraftProposer() = default;
  // Appends at most `max_tokens` proposed continuations of `history` (the
  // session's tokens by position; the last is the token fed this step) to
  // `out`, which arrives empty.
  virtual void propose(SessionId session, std::span<const Token> history, std::size_t max_tokens,
                       std::vector<Token>& out) = 0;
  // The session is gone; drop anything kept for it.
  virtual void forget(SessionId /*session*/) {}
  // Once, from the owning executor's initialize(), on the engine thread:
  // where a proposer that runs forwards of its own loads them.
  virtual void initialize() {}
  // Whether observe_taps() should be called (see the header comment).
  virtual bool wants_taps() const { return false; }
  // `tap` (hidden-size floats, borrowed for the call) of the row that
  // produced the session's last kept token, at `position` (that row's own
  // position: the kept token sits at position + 1).
  virtual void observe_taps(SessionId /*session*/, std::int64_t /*position*/,
                            std::span<const float> /*tap*/) {}
};

class NgramProposer final : public DraftProposer {
 public:
  // 1 <= min_ngram <= max_ngram.
  NgramProposer(std::size_t min_ngram, std::size_t max_ngram);
  void propose(SessionId session, std::span<const Token> history, std::size_t max_tokens,
               std::vector<Token>& out) override;

 private:
  std::size_t min_ngram_;
  std::size_t max_ngram_;
};

// The proposers `cellm serve --speculate NAME` makes without a model:
// "ngram". "draft" needs its model (app/draft_factory.h) and is refused here
// with that advice; others are refused naming the known ones.
Result<std::shared_ptr<DraftProposer>> make_proposer(const std::string& name);

}  // namespace cellm::executor
