// Logit adjustments before a draw: logit_bias, the repetition penalty, the
// frequency and presence penalties (applied to the raw logits, in that
// order), then min_p (after temperature). This is the reference arithmetic a
// device kernel must mirror bit for bit, so every step is spelled out:
//
//   x = logit + bias                          (bias 0 when the id has none)
//   x = x > 0 ? x / r : x * r                 (ids the session holds, r != 1)
//   x = x - subtract                          (subtract = penalty_subtract())
//
// each a separately rounded float32 operation (this file is built without
// floating-point contraction; the device uses __fadd_rn/__fdiv_rn/...).
// `subtract` is computed once on the host and shipped as a value, so its own
// rounding cannot differ between paths. An adjusted row's suppressed ids
// get logit -inf (they can never be drawn anyway; this keeps them out of
// min_p's maximum). min_p keeps an id iff (x / T - max_y) >= log_threshold
// in float32, where max_y is the largest non-NaN x / T and log_threshold =
// min_p_log_threshold(min_p): exactly "p >= min_p * p_max" up to rounding,
// and computed the same way on both paths (no exp whose last bits could
// differ). A dropped id's logit becomes -inf, so the sampler that follows
// renormalises over what is left. Greedy rows skip min_p (the maximum always
// survives it) but see bias and penalties.
//
// Session counts (TokenCounts) say, per token, how often it occurs in the
// session (prompt and output: repetition) and in this generation's output
// (frequency, presence); build_entries turns them and the policy's bias list
// into one entry per affected id, the sparse form a device row is given.
//
// Thread-safety: free functions are reentrant; a TokenCounts has one owner.
#pragma once

#include <bit>
#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "cellm/status.h"
#include "cellm/types.h"

namespace cellm::sampling {

// Entry flags.
inline constexpr std::uint32_t kEntryRepeated = 1u;    // the repetition penalty applies
inline constexpr std::uint32_t kEntrySuppressed = 2u;  // a suppressed id: logit -inf

// One id's adjustment. 16 bytes; a device receives rows of these as i32[N, 4]
// (token, bias bits, subtract bits, flags).
struct PenaltyEntry {
  std::int32_t token = 0;
  float bias = 0.0f;
  float subtract = 0.0f;
  std::uint32_t flags = 0;
};
static_assert(sizeof(PenaltyEntry) == 16);

// An entry from its four i32 words as a device row carries them.
inline PenaltyEntry entry_from_words(const std::int32_t* w) {
  return PenaltyEntry{w[0], std::bit_cast<float>(w[1]), std::bit_cast<float>(w[2]),
                      std::bit_cast<std::uint32_t>(w[3])};
}

// frequency * count + presence * (count > 0), in float32.
float penalty_subtract(float frequency, float presence, std::int32_t count);

// The adjusted logit of one entry's id (the formula above).
float adjust_logit(float logit, const PenaltyEntry& entry, float repetition);

// Applies every entry to `logits` in place (kEntrySuppressed: -inf); ids
// outside the row are skipped.
void apply_entries(std::span<float> logits, std::span<const PenaltyEntry> entries,
                   float repetition);

// log(min_p) in float32; -inf for min_p <= 0 (or NaN): nothing is dropped.
float min_p_log_threshold(float min_p);

// Sets to -inf every logit min_p drops at `temperature` (see above). Does
// nothing for temperature <= 0, an infinite-negative threshold or a row
// without a finite maximum.
void apply_min_p(std::span<float> logits, float temperature, float log_threshold);

// Per-token counts of one session.
class TokenCounts {
 public:
  struct Count {
    std::int32_t all = 0;     // occurrences in the session (prompt and output)
    std::int32_t output = 0;  // occurrences in this generation's output
  };

  void add(Token token, bool output);
  // Removes one occurrence added with the same `output`.
  void remove(Token token, bool output);
  // Turns every output occurrence into a prompt one (a new generation).
  void forget_output();
  void clear() { counts_.clear(); }

  Count count(Token token) const;
  const std::unordered_map<Token, Count>& all() const { return counts_; }

 private:
  std::unordered_map<Token, Count> counts_;
};

// One entry per id that bias or penalties change, or that the policy
// suppresses (ids >= vocab skipped); empty when !needs_adjustment(params).
// `out` is cleared first; order is unspecified.
void build_entries(const SamplingParams& params, const TokenCounts& counts, std::int64_t vocab,
                   std::vector<PenaltyEntry>& out);

// Whether a row under `params` needs any adjustment at all (bias, a
// penalty, or min_p on a sampled row).
bool needs_adjustment(const SamplingParams& params);

// The whole reference adjustment of one row: entries, then min_p.
void adjust_row(std::span<float> logits, const SamplingParams& params,
                std::span<const PenaltyEntry> entries);

// InvalidArgument naming the field when a value is outside its range:
// presence/frequency in [-2, 2], repetition > 0 and finite, min_p in [0, 1],
// at most kMaxLogitBias bias entries, each in [-100, 100], sorted by token
// without repeats, and (vocab > 0) every biased id inside the vocabulary.
Status check_adjustments(const SamplingParams& params, std::int64_t vocab);

// A sorted, de-duplicated list from (token, bias) pairs (the last of
// repeated tokens wins).
LogitBiasList make_logit_bias(std::vector<LogitBias> entries);

}  // namespace cellm::sampling
