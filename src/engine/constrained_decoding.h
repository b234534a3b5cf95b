// ConstrainedDecoding: one generation's grammar, engine side. It owns the
// grammar state (TokenConstraintState) and the TokenMask the executor reads:
// before each draw refresh() writes the tokens the grammar allows, plus the
// generation's stop tokens while the text so far is a complete match;
// advance() consumes each drawn token. A state that allows nothing more is
// complete (the generation ends with a stop) or, when the text is not a
// complete match, a dead end (the generation fails with a clear message).
//
// refresh_async() defers the mask's computation instead, so it runs while
// the next step's forward does: on MaskWorkers when given, else on the
// thread that settles it, which is the engine thread when the sampler reads
// the mask right after enqueueing the forward (the CUDA executor), so the
// mask costs the step nothing while the GPU is busy. The mask is settled
// (finished, on the reading thread if no worker began it) when the sampler
// reads it, and settle() reports what the computation found. Only a state that is not a
// complete match is deferred: a complete match is refreshed at once, so a
// grammar that is done still ends the generation before another step, as
// refresh() does; a deferred dead end shows at settle().
//
// Thread-safety: engine thread only, like the Generation that holds it, except
// that one deferred computation runs on a mask worker (or the executor's
// thread) while the engine thread does not touch the grammar state: every
// member that does settles first, and so does the destructor.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "cellm/token_constraint.h"
#include "cellm/types.h"
#include "engine/mask_workers.h"

namespace cellm::detail {

class ConstrainedDecoding {
 public:
  enum class Next { kContinue, kComplete, kDeadEnd };

  // `vocab`: the executor's vocabulary (the mask covers it).
  ConstrainedDecoding(const TokenConstraint& constraint, std::vector<Token> stop_tokens,
                      std::int64_t vocab);
  ~ConstrainedDecoding();
  ConstrainedDecoding(const ConstrainedDecoding&) = delete;
  ConstrainedDecoding& operator=(const ConstrainedDecoding&) = delete;

  // The mask to install in the generation's sampling policy.
  TokenMaskPtr mask() const { return mask_; }
  // Rewrites the mask for the next draw.
  Next refresh();
  // Like refresh(), but a state that is not a complete match is deferred
  // (handed to `workers` when not null) and kContinue returned; settle()
  // tells the outcome.
  Next refresh_async(MaskWorkers* workers);
  // Finishes a deferred refresh (runs it here when no worker has started it)
  // and returns its outcome, once; kContinue when none was deferred.
  Next settle();
  // Consumes a drawn token that is not a stop token; false when the grammar
  // refuses it (the mask should have prevented that).
  bool advance(Token token);

 private:
  class Fill;
  Next compute_();

  std::unique_ptr<TokenConstraintState> state_;
  std::shared_ptr<TokenMask> mask_;
  std::shared_ptr<Fill> fill_;
  bool deferred_ = false;  // refresh_async queued a computation settle() has not reported
  std::vector<Token> stop_tokens_;
  std::int64_t vocab_;
};

}  // namespace cellm::detail
