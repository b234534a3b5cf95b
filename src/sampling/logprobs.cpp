#include "sampling/logprobs.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>

#include "core/check.h"

namespace cellm::sampling {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// z of id i: what the sampler ranks by.
float scaled(std::span<const float> logits, float temperature, std::span<const Token> suppressed,
             std::size_t i) {
  const float x = logits[i];
  if (std::isnan(x)) return kNegInf;
  for (Token t : suppressed) {
    if (t == i) return kNegInf;
  }
  return temperature > 0.0f ? x / temperature : x;
}

}  // namespace

void row_logprobs(std::span<const float> logits, float temperature,
                  std::span<const Token> suppressed, Token chosen, int count, TokenLogprobs& out) {
  CELLM_CHECK(!logits.empty(), "logprobs of an empty row");
  CELLM_CHECK(count >= 0 && count <= kMaxTopLogprobs, "top logprobs count {} outside [0, {}]",
              count, kMaxTopLogprobs);
  const std::size_t vocab = logits.size();
  const auto n =
      static_cast<std::size_t>(std::min<std::size_t>(static_cast<std::size_t>(count), vocab));
  // One pass: the maximum and the `n` best (value descending, id ascending),
  // kept sorted by insertion; ids rise, so an equal value never displaces.
  std::array<TokenLogprob, kMaxTopLogprobs> best{};
  std::size_t held = 0;
  float m = kNegInf;
  for (std::size_t i = 0; i < vocab; ++i) {
    const float z = scaled(logits, temperature, suppressed, i);
    m = std::max(m, z);
    if (n == 0) continue;
    if (held == n && !(z > best[held - 1].logprob)) continue;
    std::size_t at = held < n ? held++ : n - 1;
    while (at > 0 && z > best[at - 1].logprob) {
      best[at] = best[at - 1];
      --at;
    }
    best[at] = TokenLogprob{static_cast<Token>(i), z};
  }
  out.token = chosen;
  out.top.clear();
  if (!std::isfinite(m)) {
    out.logprob = 0.0f;
    for (std::size_t r = 0; r < held; ++r) out.top.push_back({best[r].token, kNegInf});
    return;
  }
  double sum = 0.0;
  for (std::size_t i = 0; i < vocab; ++i) {
    sum += std::exp(static_cast<double>(scaled(logits, temperature, suppressed, i) - m));
  }
  const double log_sum = std::log(sum);
  const auto logprob_of = [&](float z) {
    if (z == kNegInf) return kNegInf;
    return static_cast<float>(static_cast<double>(z - m) - log_sum);
  };
  out.logprob =
      chosen < vocab ? logprob_of(scaled(logits, temperature, suppressed, chosen)) : kNegInf;
  for (std::size_t r = 0; r < held; ++r)
    out.top.push_back({best[r].token, logprob_of(best[r].logprob)});
}

}  // namespace cellm::sampling
