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
// code, extraction). Other proposers (a draft model, a head reading the
// forward's taps) implement the same interface.
//
// Thread-safety: called on the engine thread only, by the executor that
// owns it.
#pragma once

#include <cstddef>
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

// The proposers `cellm serve --speculate NAME` knows: "ngram". Others are
// refused naming the known ones.
Result<std::shared_ptr<DraftProposer>> make_proposer(const std::string& name);

}  // namespace cellm::executor
