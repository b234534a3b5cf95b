// The logit adjustments (sampling/penalties.h): each parameter changes the
// logits and the distribution as its definition says. Expected values are
// derived from the definitions here, never copied from an output.
#include "sampling/penalties.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include <gtest/gtest.h>

#include "sampling/sampler.h"
#include "sampling/xorshift.h"

namespace cellm::sampling {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

// Logits whose softmax at temperature 1 is `probs`.
std::vector<float> logits_of(const std::vector<double>& probs) {
  std::vector<float> out;
  for (double p : probs) out.push_back(static_cast<float>(std::log(p)));
  return out;
}

// softmax(logits / temperature) in double, -inf entries at 0.
std::vector<double> softmax(const std::vector<float>& logits, double temperature = 1.0) {
  double max = -kInf;
  for (float x : logits) max = std::max(max, x / temperature);
  std::vector<double> p;
  double sum = 0.0;
  for (float x : logits) {
    p.push_back(std::exp(x / temperature - max));
    sum += p.back();
  }
  for (double& v : p) v /= sum;
  return p;
}

// How often each id is drawn in `n` draws of the full distribution.
std::vector<double> frequencies(const std::vector<float>& logits, float temperature, int n,
                                std::uint64_t seed) {
  Xorshift64Star rng(seed);
  std::vector<double> f(logits.size(), 0.0);
  for (int i = 0; i < n; ++i) {
    f[static_cast<std::size_t>(sample_row(logits, temperature, 1.0f, 0, rng.next_f32()))] += 1.0;
  }
  for (double& v : f) v /= n;
  return f;
}

// Five standard deviations of a frequency of probability p over n draws.
double bound(double p, int n) {
  return 5.0 * std::sqrt(p * (1.0 - p) / n) + 1e-9;
}

SamplingParams with(float presence, float frequency, float repetition) {
  SamplingParams p;
  p.temperature = 1.0f;
  p.presence_penalty = presence;
  p.frequency_penalty = frequency;
  p.repetition_penalty = repetition;
  return p;
}

TEST(PenaltiesTest, SubtractIsFrequencyTimesCountPlusPresence) {
  EXPECT_EQ(penalty_subtract(0.5f, 0.25f, 0), 0.0f);
  EXPECT_EQ(penalty_subtract(0.5f, 0.25f, 1), 0.75f);
  EXPECT_EQ(penalty_subtract(0.5f, 0.25f, 3), 1.75f);
  EXPECT_EQ(penalty_subtract(-1.0f, 2.0f, 4), -2.0f);
  EXPECT_EQ(penalty_subtract(0.0f, 1.5f, 9), 1.5f);
}

TEST(PenaltiesTest, RepetitionDividesPositiveAndMultipliesNegativeLogits) {
  const PenaltyEntry repeated{0, 0.0f, 0.0f, kEntryRepeated};
  EXPECT_EQ(adjust_logit(3.0f, repeated, 2.0f), 1.5f);
  EXPECT_EQ(adjust_logit(-3.0f, repeated, 2.0f), -6.0f);
  EXPECT_EQ(adjust_logit(0.0f, repeated, 2.0f), 0.0f);
  // r < 1 rewards repeats: the logit moves up either way.
  EXPECT_EQ(adjust_logit(3.0f, repeated, 0.5f), 6.0f);
  EXPECT_EQ(adjust_logit(-3.0f, repeated, 0.5f), -1.5f);
  // Not repeated: untouched.
  EXPECT_EQ(adjust_logit(3.0f, PenaltyEntry{0, 0.0f, 0.0f, 0}, 2.0f), 3.0f);
}

TEST(PenaltiesTest, BiasComesFirstThenRepetitionThenSubtraction) {
  // -1 + 3 = 2 (now positive) -> 2 / 2 = 1 -> 1 - 0.75 = 0.25.
  EXPECT_EQ(adjust_logit(-1.0f, PenaltyEntry{0, 3.0f, 0.75f, kEntryRepeated}, 2.0f), 0.25f);
  // Bias -100 is (practically) a ban.
  EXPECT_EQ(adjust_logit(5.0f, PenaltyEntry{0, -100.0f, 0.0f, 0}, 1.0f), -95.0f);
  EXPECT_EQ(adjust_logit(5.0f, PenaltyEntry{0, 1.0f, 0.0f, kEntrySuppressed}, 1.0f), -kInf);
}

TEST(PenaltiesTest, EntriesFollowCountsAndBias) {
  TokenCounts counts;
  // Prompt: 1 1 2; output: 2 3 3 3.
  for (Token t : {1, 1, 2}) counts.add(t, false);
  for (Token t : {2, 3, 3, 3}) counts.add(t, true);
  SamplingParams p = with(0.25f, 0.5f, 2.0f);
  p.logit_bias = make_logit_bias({{4, -1.0f}, {2, 1.5f}, {99, 7.0f}});
  std::vector<PenaltyEntry> entries;
  build_entries(p, counts, 10, entries);  // id 99 is outside a vocabulary of 10
  std::sort(entries.begin(), entries.end(),
            [](const PenaltyEntry& a, const PenaltyEntry& b) { return a.token < b.token; });
  ASSERT_EQ(entries.size(), 4u);
  EXPECT_EQ(entries[0].token, 1);  // prompt only: repetition, nothing subtracted
  EXPECT_EQ(entries[0].flags, kEntryRepeated);
  EXPECT_EQ(entries[0].subtract, 0.0f);
  EXPECT_EQ(entries[1].token, 2);  // once in the output, with its bias
  EXPECT_EQ(entries[1].subtract, 0.5f * 1 + 0.25f);
  EXPECT_EQ(entries[1].bias, 1.5f);
  EXPECT_EQ(entries[2].token, 3);  // three times
  EXPECT_EQ(entries[2].subtract, 0.5f * 3 + 0.25f);
  EXPECT_EQ(entries[3].token, 4);  // bias only
  EXPECT_EQ(entries[3].flags, 0u);
  EXPECT_EQ(entries[3].bias, -1.0f);

  // Applied to a row: each id as the formula says, the others untouched.
  std::vector<float> row = {0.5f, 2.0f, -1.0f, 4.0f, 1.0f, 3.0f};
  apply_entries(row, entries, p.repetition_penalty);
  EXPECT_EQ(row[0], 0.5f);
  EXPECT_EQ(row[1], 2.0f / 2.0f);
  EXPECT_EQ(row[2], (-1.0f + 1.5f) / 2.0f - 0.75f);
  EXPECT_EQ(row[3], 4.0f / 2.0f - 1.75f);
  EXPECT_EQ(row[4], 1.0f - 1.0f);
  EXPECT_EQ(row[5], 3.0f);

  // Neutral policies build nothing.
  build_entries(SamplingParams{}, counts, 10, entries);
  EXPECT_TRUE(entries.empty());
  EXPECT_FALSE(needs_adjustment(SamplingParams{}));
}

TEST(PenaltiesTest, ForgettingOutputKeepsTheRepetitionCounts) {
  TokenCounts counts;
  counts.add(5, false);
  counts.add(5, true);
  counts.add(6, true);
  EXPECT_EQ(counts.count(5).all, 2);
  EXPECT_EQ(counts.count(5).output, 1);
  counts.forget_output();
  EXPECT_EQ(counts.count(5).all, 2);
  EXPECT_EQ(counts.count(5).output, 0);
  EXPECT_EQ(counts.count(6).output, 0);
  counts.remove(6, false);
  EXPECT_EQ(counts.count(6).all, 0);
  EXPECT_TRUE(counts.all().find(6) == counts.all().end());
}

TEST(PenaltiesTest, GreedyRowsSeeBiasAndPenalties) {
  const std::vector<float> logits = {1.0f, 3.0f, 2.5f};
  EXPECT_EQ(argmax_row(logits), 1);
  SamplingParams p;  // greedy
  p.logit_bias = make_logit_bias({{1, -100.0f}});
  std::vector<PenaltyEntry> entries;
  build_entries(p, TokenCounts{}, 3, entries);
  std::vector<float> row = logits;
  adjust_row(row, p, entries);
  EXPECT_EQ(argmax_row(row), 2);
  // A repetition penalty of 1.3 on id 1 (3 / 1.3 = 2.31 < 2.5) moves it too.
  TokenCounts seen;
  seen.add(1, false);
  build_entries(with(0.0f, 0.0f, 1.3f), seen, 3, entries);
  row = logits;
  adjust_row(row, with(0.0f, 0.0f, 1.3f), entries);
  EXPECT_EQ(argmax_row(row), 2);
}

TEST(PenaltiesTest, MinPDropsTokensBelowItsShareOfTheMaximum) {
  // p = {0.5, 0.3, 0.15, 0.05}; min_p 0.2 keeps p >= 0.1: ids 0, 1, 2.
  const std::vector<float> logits = logits_of({0.5, 0.3, 0.15, 0.05});
  std::vector<float> row = logits;
  apply_min_p(row, 1.0f, min_p_log_threshold(0.2f));
  EXPECT_EQ(row[0], logits[0]);
  EXPECT_EQ(row[1], logits[1]);
  EXPECT_EQ(row[2], logits[2]);
  EXPECT_EQ(row[3], -kInf);
  // After temperature: at T = 2, p ~ sqrt(p) and 0.05 is sqrt(0.1) = 0.32 of
  // the maximum, so min_p 0.3 keeps it and 0.35 drops it.
  row = logits;
  apply_min_p(row, 2.0f, min_p_log_threshold(0.3f));
  EXPECT_EQ(row[3], logits[3]);
  row = logits;
  apply_min_p(row, 2.0f, min_p_log_threshold(0.35f));
  EXPECT_EQ(row[3], -kInf);
  // min_p 1 keeps only the maximum; 0 keeps all; greedy rows are untouched.
  row = logits;
  apply_min_p(row, 1.0f, min_p_log_threshold(1.0f));
  EXPECT_EQ(std::count(row.begin(), row.end(), -kInf), 3);
  row = logits;
  apply_min_p(row, 1.0f, min_p_log_threshold(0.0f));
  EXPECT_EQ(row, logits);
  apply_min_p(row, 0.0f, min_p_log_threshold(0.9f));
  EXPECT_EQ(row, logits);
}

TEST(PenaltiesTest, MinPRenormalisesTheDraw) {
  // Kept {0.5, 0.3, 0.15} renormalise to {0.5263, 0.3158, 0.1579}; drawn in
  // token order, the coin boundaries move accordingly.
  SamplingParams p;
  p.temperature = 1.0f;
  p.min_p = 0.2f;
  std::vector<PenaltyEntry> entries;
  build_entries(p, TokenCounts{}, 4, entries);
  std::vector<float> row = logits_of({0.5, 0.3, 0.15, 0.05});
  adjust_row(row, p, entries);
  const double kept = 0.95;
  EXPECT_EQ(sample_row(row, 1.0f, 1.0f, 0, static_cast<float>(0.5 / kept - 0.01)), 0);
  EXPECT_EQ(sample_row(row, 1.0f, 1.0f, 0, static_cast<float>(0.5 / kept + 0.01)), 1);
  EXPECT_EQ(sample_row(row, 1.0f, 1.0f, 0, static_cast<float>(0.8 / kept + 0.01)), 2);
  EXPECT_EQ(sample_row(row, 1.0f, 1.0f, 0, 0.999f), 2);  // id 3 never
}

TEST(PenaltiesTest, SuppressedIdsLeaveMinPsMaximum) {
  // Id 0 holds the row maximum but is suppressed: min_p is relative to id 1.
  SamplingParams p;
  p.temperature = 1.0f;
  p.min_p = 0.5f;
  (void)p.suppress(0);
  std::vector<PenaltyEntry> entries;
  build_entries(p, TokenCounts{}, 3, entries);
  std::vector<float> row = logits_of({0.9, 0.06, 0.04});
  adjust_row(row, p, entries);
  EXPECT_EQ(row[0], -kInf);
  EXPECT_NE(row[1], -kInf);
  EXPECT_NE(row[2], -kInf);  // 0.04 / 0.06 = 0.67 >= 0.5
}

// Statistical checks: the drawn frequencies follow the adjusted
// distribution (computed here from the definition in double), and that
// distribution differs from the unadjusted one by far more than the noise.
void expect_draws_follow(const std::vector<float>& logits, const SamplingParams& p,
                         const TokenCounts& counts, std::size_t watched, bool drops) {
  constexpr int kDraws = 20000;
  std::vector<PenaltyEntry> entries;
  build_entries(p, counts, static_cast<std::int64_t>(logits.size()), entries);
  std::vector<float> adjusted = logits;
  adjust_row(adjusted, p, entries);
  const std::vector<double> before = softmax(logits);
  const std::vector<double> after = softmax(adjusted);
  const std::vector<double> f = frequencies(adjusted, 1.0f, kDraws, 1234);
  for (std::size_t i = 0; i < logits.size(); ++i) {
    EXPECT_NEAR(f[i], after[i], bound(after[i], kDraws)) << "token " << i;
  }
  const double gap = 4.0 * bound(before[watched], kDraws);
  if (drops) {
    EXPECT_LT(after[watched], before[watched] - gap);
  } else {
    EXPECT_GT(after[watched], before[watched] + gap);
  }
}

TEST(PenaltiesStatTest, FrequencyPenaltyLowersARepeatedToken) {
  const std::vector<float> logits = logits_of({0.4, 0.3, 0.2, 0.1});
  TokenCounts counts;
  for (int i = 0; i < 3; ++i) counts.add(0, true);
  // exp(-0.4 * 3) = 0.30 of its weight: 0.4 -> 0.167.
  expect_draws_follow(logits, with(0.0f, 0.4f, 1.0f), counts, 0, true);
  // A negative penalty raises it.
  expect_draws_follow(logits, with(0.0f, -0.3f, 1.0f), counts, 0, false);
}

TEST(PenaltiesStatTest, PresencePenaltyIgnoresTheCount) {
  const std::vector<float> logits = logits_of({0.4, 0.3, 0.2, 0.1});
  TokenCounts once;
  once.add(1, true);
  TokenCounts thrice;
  for (int i = 0; i < 3; ++i) thrice.add(1, true);
  expect_draws_follow(logits, with(1.0f, 0.0f, 1.0f), once, 1, true);
  std::vector<PenaltyEntry> a;
  std::vector<PenaltyEntry> b;
  build_entries(with(1.0f, 0.0f, 1.0f), once, 4, a);
  build_entries(with(1.0f, 0.0f, 1.0f), thrice, 4, b);
  ASSERT_EQ(a.size(), 1u);
  ASSERT_EQ(b.size(), 1u);
  EXPECT_EQ(a[0].subtract, b[0].subtract);
  // Prompt tokens are not output: no presence penalty for them.
  TokenCounts prompt;
  prompt.add(1, false);
  build_entries(with(1.0f, 0.0f, 1.0f), prompt, 4, a);
  EXPECT_TRUE(a.empty() || a[0].subtract == 0.0f);
}

TEST(PenaltiesStatTest, RepetitionPenaltyCoversPromptAndOutput) {
  // Logits both signs: id 0 (positive) and id 3 (negative) were seen.
  const std::vector<float> logits = {1.5f, 1.0f, 0.5f, -0.5f};
  TokenCounts counts;
  counts.add(0, false);
  counts.add(3, true);
  // Id 0 falls clearly (p 0.47 -> 0.36); id 3's logit -0.5 -> -0.75 moves
  // its p too little to tell from noise, so the formula test above covers it.
  expect_draws_follow(logits, with(0.0f, 0.0f, 1.5f), counts, 0, true);
}

TEST(PenaltiesStatTest, LogitBiasShiftsTheDistribution) {
  const std::vector<float> logits = logits_of({0.4, 0.3, 0.2, 0.1});
  SamplingParams p;
  p.temperature = 1.0f;
  p.logit_bias = make_logit_bias({{3, 1.0f}});
  expect_draws_follow(logits, p, TokenCounts{}, 3, false);
  p.logit_bias = make_logit_bias({{0, -100.0f}});
  std::vector<PenaltyEntry> entries;
  build_entries(p, TokenCounts{}, 4, entries);
  std::vector<float> row = logits;
  adjust_row(row, p, entries);
  const std::vector<double> f = frequencies(row, 1.0f, 5000, 77);
  EXPECT_EQ(f[0], 0.0);  // e^-100 is below float's smallest probability step
}

TEST(PenaltiesTest, PolicyRangesAreChecked) {
  EXPECT_TRUE(check_policy(with(2.0f, -2.0f, 0.1f), 10).is_ok());
  EXPECT_FALSE(check_policy(with(2.5f, 0.0f, 1.0f), 10).is_ok());
  EXPECT_FALSE(check_policy(with(0.0f, -2.5f, 1.0f), 10).is_ok());
  EXPECT_FALSE(check_policy(with(0.0f, 0.0f, 0.0f), 10).is_ok());
  SamplingParams p;
  p.min_p = 1.5f;
  EXPECT_FALSE(check_policy(p, 10).is_ok());
  p.min_p = 0.0f;
  p.logit_bias = make_logit_bias({{3, 101.0f}});
  EXPECT_FALSE(check_policy(p, 10).is_ok());
  p.logit_bias = make_logit_bias({{10, 1.0f}});
  const Status outside = check_policy(p, 10);
  EXPECT_FALSE(outside.is_ok());
  EXPECT_NE(outside.message().find("logit_bias"), std::string_view::npos);
  std::vector<LogitBias> many;
  for (Token t = 0; t <= kMaxLogitBias; ++t) many.push_back({t, 1.0f});
  p.logit_bias = make_logit_bias(many);
  EXPECT_FALSE(check_policy(p, 1000).is_ok());
}

TEST(PenaltiesTest, BiasListsAreSortedAndEqualByContent) {
  const LogitBiasList a = make_logit_bias({{5, 1.0f}, {2, 3.0f}, {5, -2.0f}});
  ASSERT_EQ(a->size(), 2u);
  EXPECT_EQ((*a)[0], (LogitBias{2, 3.0f}));
  EXPECT_EQ((*a)[1], (LogitBias{5, -2.0f}));  // the last repeat wins
  SamplingParams x;
  SamplingParams y;
  x.logit_bias = a;
  y.logit_bias = make_logit_bias({{2, 3.0f}, {5, -2.0f}});
  EXPECT_EQ(x, y);
  y.logit_bias = make_logit_bias({{2, 3.0f}});
  EXPECT_FALSE(x == y);
}

}  // namespace
}  // namespace cellm::sampling
