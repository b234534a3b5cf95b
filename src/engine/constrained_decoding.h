// ConstrainedDecoding: one generation's grammar, engine side. It owns the
// grammar state (TokenConstraintState) and the TokenMask the executor reads:
// before each draw refresh() writes the tokens the grammar allows, plus the
// generation's stop tokens while the text so far is a complete match;
// advance() consumes each drawn token. A state that allows nothing more is
// complete (the generation ends with a stop) or, when the text is not a
// complete match, a dead end (the generation fails with a clear message).
//
// defer_refresh() defers the mask's computation instead, to the moment the
// sampler settles the mask (TokenMask::settle) before reading it. The CUDA
// executor does that on the engine thread right after enqueueing the step's
// forward, so the mask costs the step nothing while the GPU is busy (measured
// faster than computing masks on worker threads, which was removed). settle()
// reports what the computation found. Only a state that is not a complete
// match is deferred: a complete match is refreshed at once, so a grammar that
// is done still ends the generation before another step, as refresh() does;
// a deferred dead end shows at settle().
//
// Thread-safety: engine thread only, like the Generation that holds it. The
// executor settles the mask on that thread too (every Executor method runs
// there), so the deferred computation needs no synchronization. The mask may
// outlive this object in an executor's policy: the destructor drops a
// computation still pending, so settling the mask afterwards is a no-op.
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
  ~ConstrainedDecoding();
  ConstrainedDecoding(const ConstrainedDecoding&) = delete;
  ConstrainedDecoding& operator=(const ConstrainedDecoding&) = delete;

  // The mask to install in the generation's sampling policy.
  TokenMaskPtr mask() const { return mask_; }
  // Rewrites the mask for the next draw.
  Next refresh();
  // Like refresh(), but a state that is not a complete match is left to be
  // computed when the mask is settled, and kContinue returned; settle()
  // tells the outcome.
  Next defer_refresh();
  // Finishes a deferred refresh (runs it now unless the mask's reader already
  // did) and returns its outcome, once; kContinue when none was deferred.
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
  bool deferred_ = false;  // defer_refresh left a computation settle() has not reported
  std::vector<Token> stop_tokens_;
  std::int64_t vocab_;
};

}  // namespace cellm::detail
