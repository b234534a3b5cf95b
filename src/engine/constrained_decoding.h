// ConstrainedDecoding: one generation's grammar, engine side. It owns the
// grammar state (TokenConstraintState) and the TokenMask the executor reads:
// before each draw refresh() writes the tokens the grammar allows, plus the
// generation's stop tokens while the text so far is a complete match;
// advance() consumes each drawn token. A state that allows nothing more is
// complete (the generation ends with a stop) or, when the text is not a
// complete match, a dead end (the generation fails with a clear message).
//
// Thread-safety: engine thread only, like the Generation that holds it.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "cellm/token_constraint.h"
#include "cellm/types.h"

namespace cellm::detail {

class ConstrainedDecoding {
 public:
  enum class Next { kContinue, kComplete, kDeadEnd };

  // `vocab`: the executor's vocabulary (the mask covers it).
  ConstrainedDecoding(const TokenConstraint& constraint, std::vector<Token> stop_tokens,
                      std::int64_t vocab);

  // The mask to install in the generation's sampling policy.
  TokenMaskPtr mask() const { return mask_; }
  // Rewrites the mask for the next draw.
  Next refresh();
  // Consumes a drawn token that is not a stop token; false when the grammar
  // refuses it (the mask should have prevented that).
  bool advance(Token token) { return state_->advance(token); }

 private:
  std::unique_ptr<TokenConstraintState> state_;
  std::shared_ptr<TokenMask> mask_;
  std::vector<Token> stop_tokens_;
  std::int64_t vocab_;
};

}  // namespace cellm::detail
