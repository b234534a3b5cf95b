// Constrained decoding's vocabulary mask applied to logits (TokenMask in
// cellm/types.h): every id whose bit is clear gets logit -inf, so no sampler
// (greedy or not) can draw it. Applied before the logit adjustments
// (penalties.h): -inf stays -inf through bias and penalties, and min_p then
// measures against the largest allowed logit. The device kernel
// (sample_mask) does the same.
//
// Thread-safety: reentrant free functions.
#pragma once

#include <cstdint>
#include <span>

namespace cellm::sampling {

// Ids at or past words.size() * 32 count as disallowed.
void apply_token_mask(std::span<float> logits, std::span<const std::uint32_t> words);

// Whether any id below `vocab` is allowed.
bool mask_allows_any(std::span<const std::uint32_t> words, std::int64_t vocab);

}  // namespace cellm::sampling
