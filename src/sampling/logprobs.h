// Log probabilities of a drawn token and of the most likely alternatives:
// the host reference a device kernel (the program's `sample_logprobs`
// method) must agree with, and what host sampling reports directly.
//
// The distribution is the one the sampler drew from before truncation: the
// row as the sampler saw it (after logit_bias, penalties, min_p and token
// masks, which the caller has already applied), suppressed ids at -inf, NaN
// logits at -inf, divided by the temperature when it is above 0 (greedy rows
// are not divided, so they report the model's own log-softmax). top-k and
// top-p truncation are not applied: a drawn token's logprob is its share of
// the whole row. Arithmetic: z = x / T in float32 (as sample_row does),
// m = max z, S = sum exp(z - m) accumulated in double, logprob = (z - m) -
// log S in double, rounded to float32. A row without a finite maximum (all
// ids excluded) reports logprob 0 for the chosen id and -inf elsewhere.
//
// Top alternatives: the `count` largest z, most likely first, ties to the
// lower id (the order sample_row ranks by); count is clamped to the row.
//
// Thread-safety: reentrant.
#pragma once

#include <cstdint>
#include <span>

#include "cellm/types.h"

namespace cellm::sampling {

// Fills `out` (token, logprob, top) for `chosen` drawn from `logits`.
// Precondition: logits is not empty; count in [0, kMaxTopLogprobs].
void row_logprobs(std::span<const float> logits, float temperature,
                  std::span<const Token> suppressed, Token chosen, int count, TokenLogprobs& out);

}  // namespace cellm::sampling
