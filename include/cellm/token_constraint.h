// Constrained decoding as the engine sees it: a TokenConstraint (a compiled
// grammar bound to one vocabulary, e.g. a JSON schema) starts one
// TokenConstraintState per generation; before every step that samples, the
// engine asks the state which tokens may come next (a bitmask over the
// vocabulary) and, once a token is drawn, advances the state with it. The
// grammar library (src/grammar) implements both; the engine depends only on
// this interface.
//
// Thread-safety: a TokenConstraint is immutable to its users and may be shared
// by any number of generations on any thread (implementations lock their own
// caches). A TokenConstraintState belongs to one generation and is used by
// one thread at a time (the engine thread).
#pragma once

#include <cstdint>
#include <memory>
#include <span>

#include "cellm/types.h"

namespace cellm {

class TokenConstraintState {
 public:
  virtual ~TokenConstraintState() = default;
  // Overwrites `words` (bit t % 32 of words[t / 32] set = token t allowed;
  // at least ceil(vocab / 32) words) with the tokens the grammar allows next.
  // End-of-sequence is not a grammar token: callers allow their stop tokens
  // themselves exactly when accepting() holds.
  virtual void fill_mask(std::span<std::uint32_t> words) = 0;
  // Whether the text consumed so far is a complete match.
  virtual bool accepting() const = 0;
  // Consumes one drawn token. False (state unchanged) when the grammar does
  // not allow it here.
  virtual bool advance(Token token) = 0;
};

class TokenConstraint {
 public:
  virtual ~TokenConstraint() = default;
  // A fresh state at the start of the grammar.
  virtual std::unique_ptr<TokenConstraintState> start() const = 0;
  // The vocabulary the masks cover.
  virtual std::int64_t vocab_size() const = 0;
};
using TokenConstraintPtr = std::shared_ptr<const TokenConstraint>;

}  // namespace cellm
