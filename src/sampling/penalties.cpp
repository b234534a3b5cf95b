// Built with -ffp-contract=off (CMakeLists.txt): every operation below must
// round on its own, as the device kernel's __f*_rn intrinsics do.
#include "sampling/penalties.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace cellm::sampling {

float penalty_subtract(float frequency, float presence, std::int32_t count) {
  if (count <= 0) return 0.0f;
  const float by_count = frequency * static_cast<float>(count);
  return by_count + presence;
}

float adjust_logit(float logit, const PenaltyEntry& entry, float repetition) {
  if ((entry.flags & kEntrySuppressed) != 0) return -std::numeric_limits<float>::infinity();
  float x = logit + entry.bias;
  if ((entry.flags & kEntryRepeated) != 0) x = x > 0.0f ? x / repetition : x * repetition;
  return x - entry.subtract;
}

void apply_entries(std::span<float> logits, std::span<const PenaltyEntry> entries,
                   float repetition) {
  for (const PenaltyEntry& e : entries) {
    if (e.token < 0 || static_cast<std::size_t>(e.token) >= logits.size()) continue;
    float& x = logits[static_cast<std::size_t>(e.token)];
    x = adjust_logit(x, e, repetition);
  }
}

float min_p_log_threshold(float min_p) {
  if (!(min_p > 0.0f)) return -std::numeric_limits<float>::infinity();
  return std::log(std::min(min_p, 1.0f));
}

void apply_min_p(std::span<float> logits, float temperature, float log_threshold) {
  if (!(temperature > 0.0f) || !(log_threshold > -std::numeric_limits<float>::infinity())) return;
  float max_y = -std::numeric_limits<float>::infinity();
  for (float x : logits) {
    const float y = x / temperature;
    if (y > max_y) max_y = y;  // NaN never compares greater
  }
  if (!std::isfinite(max_y)) return;
  for (float& x : logits) {
    const float below = x / temperature - max_y;
    if (!(below >= log_threshold)) x = -std::numeric_limits<float>::infinity();
  }
}

void TokenCounts::add(Token token, bool output) {
  Count& c = counts_[token];
  ++c.all;
  if (output) ++c.output;
}

void TokenCounts::remove(Token token, bool output) {
  const auto it = counts_.find(token);
  if (it == counts_.end()) return;
  --it->second.all;
  if (output && it->second.output > 0) --it->second.output;
  if (it->second.all <= 0) counts_.erase(it);
}

void TokenCounts::forget_output() {
  for (auto& [token, c] : counts_) c.output = 0;
}

TokenCounts::Count TokenCounts::count(Token token) const {
  const auto it = counts_.find(token);
  return it == counts_.end() ? Count{} : it->second;
}

bool needs_adjustment(const SamplingParams& params) {
  return params.adjusts_logits() || (params.temperature > 0.0f && params.min_p > 0.0f);
}

void build_entries(const SamplingParams& params, const TokenCounts& counts, std::int64_t vocab,
                   std::vector<PenaltyEntry>& out) {
  out.clear();
  if (!needs_adjustment(params)) return;
  const auto inside = [vocab](Token t) { return vocab <= 0 || t < static_cast<Token>(vocab); };
  const std::span<const LogitBias> bias = params.logit_bias_entries();
  const auto bias_of = [&bias](Token t) -> const LogitBias* {
    const auto it = std::lower_bound(bias.begin(), bias.end(), t,
                                     [](const LogitBias& b, Token id) { return b.token < id; });
    return it != bias.end() && it->token == t ? &*it : nullptr;
  };
  const bool repeats = params.repetition_penalty != 1.0f;
  const bool by_output = params.frequency_penalty != 0.0f || params.presence_penalty != 0.0f;
  if (repeats || by_output) {
    for (const auto& [token, c] : counts.all()) {
      if (!inside(token)) continue;
      PenaltyEntry e;
      e.token = static_cast<std::int32_t>(token);
      if (repeats && c.all > 0) e.flags |= kEntryRepeated;
      if (by_output) {
        e.subtract = penalty_subtract(params.frequency_penalty, params.presence_penalty, c.output);
      }
      if (const LogitBias* b = bias_of(token)) e.bias = b->bias;
      if (e.flags != 0 || e.subtract != 0.0f || e.bias != 0.0f) out.push_back(e);
    }
  }
  for (const LogitBias& b : bias) {
    if (!inside(b.token)) continue;
    // Ids with counts already carry their bias.
    if ((repeats || by_output) && counts.all().contains(b.token)) continue;
    PenaltyEntry e;
    e.token = static_cast<std::int32_t>(b.token);
    e.bias = b.bias;
    out.push_back(e);
  }
  for (Token t : params.suppressed_tokens()) {
    if (!inside(t)) continue;
    const auto id = static_cast<std::int32_t>(t);
    auto it =
        std::find_if(out.begin(), out.end(), [id](const PenaltyEntry& e) { return e.token == id; });
    if (it == out.end()) {
      out.push_back(PenaltyEntry{id, 0.0f, 0.0f, kEntrySuppressed});
    } else {
      it->flags |= kEntrySuppressed;
    }
  }
}

void adjust_row(std::span<float> logits, const SamplingParams& params,
                std::span<const PenaltyEntry> entries) {
  apply_entries(logits, entries, params.repetition_penalty);
  apply_min_p(logits, params.temperature, min_p_log_threshold(params.min_p));
}

Status check_adjustments(const SamplingParams& params, std::int64_t vocab) {
  const auto in = [](float v, float lo, float hi) { return v >= lo && v <= hi; };
  if (!in(params.presence_penalty, -2.0f, 2.0f)) {
    return invalid_argument("presence_penalty {} is outside [-2, 2]", params.presence_penalty);
  }
  if (!in(params.frequency_penalty, -2.0f, 2.0f)) {
    return invalid_argument("frequency_penalty {} is outside [-2, 2]", params.frequency_penalty);
  }
  if (!(params.repetition_penalty > 0.0f) || !std::isfinite(params.repetition_penalty)) {
    return invalid_argument("repetition_penalty {} must be a finite number above 0",
                            params.repetition_penalty);
  }
  if (!in(params.min_p, 0.0f, 1.0f)) {
    return invalid_argument("min_p {} is outside [0, 1]", params.min_p);
  }
  const std::span<const LogitBias> bias = params.logit_bias_entries();
  if (bias.size() > kMaxLogitBias) {
    return invalid_argument("logit_bias has {} entries; at most {} are allowed", bias.size(),
                            kMaxLogitBias);
  }
  for (std::size_t i = 0; i < bias.size(); ++i) {
    if (!in(bias[i].bias, -100.0f, 100.0f)) {
      return invalid_argument("logit_bias of token {} is {}; it must lie in [-100, 100]",
                              bias[i].token, bias[i].bias);
    }
    if (vocab > 0 && bias[i].token >= static_cast<Token>(vocab)) {
      return invalid_argument("logit_bias names token {}, outside the vocabulary of {}",
                              bias[i].token, vocab);
    }
    if (i > 0 && !(bias[i - 1].token < bias[i].token)) {
      return invalid_argument("logit_bias entries must be sorted by token without repeats");
    }
  }
  return Status::ok();
}

LogitBiasList make_logit_bias(std::vector<LogitBias> entries) {
  std::stable_sort(entries.begin(), entries.end(),
                   [](const LogitBias& a, const LogitBias& b) { return a.token < b.token; });
  std::vector<LogitBias> unique;
  unique.reserve(entries.size());
  for (const LogitBias& e : entries) {
    if (!unique.empty() && unique.back().token == e.token) {
      unique.back() = e;  // the last repeat wins
    } else {
      unique.push_back(e);
    }
  }
  return std::make_shared<const std::vector<LogitBias>>(std::move(unique));
}

}  // namespace cellm::sampling
