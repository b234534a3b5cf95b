// Host sampler: the exact per-row algorithm of batching_spec §4.8 (the one a
// device sampler must reproduce), a per-session Sampler that feeds it coins
// from its own Xorshift64Star, and row-batched helpers for programs whose
// `sample`/`sample_argmax` methods run on the host.
//
// Arithmetic contract (what a device sampler must mirror): logits are float32
// (16-bit rows are widened first); z = logit / temperature in float32;
// p = exp(z - max z) / sum in float32 with the sum accumulated in double;
// ranks order p descending with ties to the lower token id; every cumulative
// mass is accumulated in double. A row whose scaled maximum is not finite
// (all -inf, NaN or overflow) falls back to argmax, and NaN logits never win.
// Suppressed ids are not candidates at all: greedy rows skip them and sampled
// rows give them zero probability before truncation.
//
// Thread-safety: free functions are reentrant; a Sampler has one owner.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "cellm/status.h"
#include "cellm/types.h"
#include "core/tensor.h"
#include "sampling/xorshift.h"

namespace cellm::sampling {

// Layout of one row of a device sampler's params [R, 4] float32.
inline constexpr int kParamTemperature = 0;
inline constexpr int kParamTopP = 1;
inline constexpr int kParamTopK = 2;
inline constexpr int kParamCoin = 3;
inline constexpr int kNumParams = 4;

// Index of the first maximal logit among the ids not suppressed (NaN never
// wins unless the row has nothing else, then the first candidate is taken).
// A list suppressing every id is ignored (check_policy refuses such a policy
// before it reaches a sampler). Precondition: logits is not empty.
std::int64_t argmax_row(std::span<const float> logits, std::span<const Token> suppressed = {});

// One token for one row (§4.8). temperature <= 0 (or NaN): argmax. Otherwise
// p = softmax(logits / temperature); 0 < top_k < V keeps the top_k most
// likely tokens, else 0 < top_p < 1 keeps every rank whose preceding mass is
// <= top_p (so the first token crossing top_p is kept); the kept rank chosen
// is the first with coin * kept_mass < kept_cumulative. Without truncation
// the full distribution is sampled in token order: the first id whose
// cumulative probability exceeds coin. When float rounding leaves no rank
// or id past the coin, the last candidate with nonzero probability is taken.
// Suppressed ids have probability 0 (and the argmax fallback skips them).
// Precondition: logits is not empty; coin in [0, 1).
std::int64_t sample_row(std::span<const float> logits, float temperature, float top_p, int top_k,
                        float coin, std::span<const Token> suppressed = {});

// Whether `params` can be installed for a vocabulary of `vocab` ids:
// InvalidArgument when suppressed_count exceeds kMaxSuppressedTokens, the
// suppressed ids cover the whole vocabulary (nothing could be drawn) or a
// penalty, min_p or logit_bias is out of range (check_adjustments), or the
// logprobs count lies outside [-1, kMaxTopLogprobs].
// Suppressed ids outside the vocabulary are allowed and have no effect.
Status check_policy(const SamplingParams& params, std::int64_t vocab);

// A session's sampling policy and generator. The generator advances once per
// non-greedy draw and never for greedy ones, which is what lets a device
// sampler fed the same coins (see SessionTable) draw the same tokens.
class Sampler {
 public:
  Sampler(std::int64_t vocab_size, const SamplingParams& params, std::uint64_t seed);

  const SamplingParams& params() const { return params_; }
  std::int64_t vocab_size() const { return vocab_size_; }
  bool greedy() const { return !(params_.temperature > 0.0f); }

  // Samples a row of exactly vocab_size logits; nullopt (and no coin drawn)
  // when the row has another length.
  std::optional<std::int64_t> sample(std::span<const float> logits);
  // Same for a 16-bit row (DType::kBF16 or kF16); nullopt for other dtypes.
  std::optional<std::int64_t> sample(std::span<const std::uint16_t> logits, DType dtype);

 private:
  std::int64_t vocab_size_;
  SamplingParams params_;
  Xorshift64Star rng_;
};

// Per-row sampling of host logits [R, V] (f32, f16 or bf16) with params
// [R, 4] f32 (temperature, top_p, top_k, coin) and, optionally, host i64
// [R, kMaxSuppressedTokens] suppressed ids per row (-1 = empty slot).
// InvalidArgument names the tensor and what is wrong with it.
Result<std::vector<std::int64_t>> sample_rows(const Tensor& logits, const Tensor& params,
                                              const Tensor* suppressed = nullptr);
// Per-row argmax of host logits [R, V] (f32, f16 or bf16).
Result<std::vector<std::int64_t>> argmax_rows(const Tensor& logits);

// Widens row `row` of host logits [R, V] into `out` (resized to V).
// Precondition: logits is a valid host float-like [R, V] tensor, row < R.
void row_to_f32(const Tensor& logits, std::int64_t row, std::vector<float>& out);

}  // namespace cellm::sampling
