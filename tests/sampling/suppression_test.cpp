// Suppressed ids (min_tokens keeps EOS out this way): never drawn, whatever
// the policy and wherever the probability mass sits. The reference for every
// sampled case is the same row with the suppressed logits set to -inf by hand.
#include <cmath>
#include <limits>
#include <vector>

#include <gtest/gtest.h>

#include "sampling/sampler.h"

namespace cellm::sampling {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

std::vector<float> logits_of(const std::vector<double>& probs) {
  std::vector<float> out;
  for (double p : probs) out.push_back(static_cast<float>(std::log(p)));
  return out;
}

std::vector<float> masked(std::vector<float> row, const std::vector<Token>& ids) {
  for (Token id : ids) row[id] = kNegInf;
  return row;
}

SamplingParams policy(float t, float top_p, int top_k, const std::vector<Token>& ids) {
  SamplingParams p{t, top_p, top_k};
  for (Token id : ids) EXPECT_TRUE(p.suppress(id));
  return p;
}

TEST(SuppressionTest, ParamsListIsBoundedAndDeduplicated) {
  SamplingParams p;
  EXPECT_TRUE(p.suppressed_tokens().empty());
  for (Token id = 10; id < 10 + kMaxSuppressedTokens; ++id) EXPECT_TRUE(p.suppress(id));
  EXPECT_TRUE(p.suppress(10));  // already there: no second slot
  EXPECT_EQ(p.suppressed_count, kMaxSuppressedTokens);
  const SamplingParams before = p;
  EXPECT_FALSE(p.suppress(99));
  EXPECT_EQ(p, before);  // a refused add changes nothing
  EXPECT_TRUE(p.suppresses(17));
  EXPECT_FALSE(p.suppresses(99));
  p.clear_suppressed();
  EXPECT_EQ(p, SamplingParams{});
  // A corrupt count never reads past the array.
  p.suppressed_count = 1000;
  EXPECT_EQ(p.suppressed_tokens().size(), kMaxSuppressedTokens);
}

TEST(SuppressionTest, GreedySkipsSuppressedArgmax) {
  const std::vector<float> row = {0.5f, 3.0f, -1.0f, 3.0f, 2.0f};
  EXPECT_EQ(argmax_row(row, std::vector<Token>{1}), 3);     // the tie that was second
  EXPECT_EQ(argmax_row(row, std::vector<Token>{1, 3}), 4);  // then the next value
  EXPECT_EQ(argmax_row(row, std::vector<Token>{0, 1, 3, 4}), 2);
  // Ids outside the row are harmless.
  EXPECT_EQ(argmax_row(row, std::vector<Token>{77}), 1);
  // Temperature <= 0 takes the same path.
  EXPECT_EQ(sample_row(row, 0.0f, 1.0f, 0, 0.3f, std::vector<Token>{1}), 3);
}

TEST(SuppressionTest, NanAndInfinityRowsStillAvoidSuppressedIds) {
  const float nan = std::nanf("");
  // Only the suppressed id is finite: the first other candidate is taken.
  const std::vector<float> row = {kNegInf, nan, 5.0f, kNegInf};
  EXPECT_EQ(argmax_row(row, std::vector<Token>{2}), 0);
  EXPECT_EQ(sample_row(row, 1.0f, 1.0f, 0, 0.5f, std::vector<Token>{2}), 0);
  EXPECT_EQ(argmax_row(row, std::vector<Token>{0, 2}), 3);  // -inf still beats NaN
  EXPECT_EQ(argmax_row(std::vector<float>{nan, nan, 1.0f}, std::vector<Token>{2}), 0);
}

TEST(SuppressionTest, AllTheMassOnASuppressedIdMovesToTheRest) {
  // Token 2 holds essentially all the probability.
  const std::vector<float> row = {0.0f, 0.0f, 60.0f, 0.0f};
  const std::vector<Token> ids = {2};
  for (float coin = 0.0f; coin < 1.0f; coin += 0.01f) {
    for (int top_k : {0, 1, 2, 3}) {
      for (float top_p : {1.0f, 0.5f, 0.99f}) {
        const std::int64_t t = sample_row(row, 1.0f, top_p, top_k, coin, ids);
        EXPECT_NE(t, 2) << "coin " << coin << " top_k " << top_k << " top_p " << top_p;
        EXPECT_EQ(t, sample_row(masked(row, ids), 1.0f, top_p, top_k, coin))
            << "coin " << coin << " top_k " << top_k << " top_p " << top_p;
      }
    }
  }
  // The remaining three share the mass equally: token order splits by thirds.
  EXPECT_EQ(sample_row(row, 1.0f, 1.0f, 0, 0.30f, ids), 0);
  EXPECT_EQ(sample_row(row, 1.0f, 1.0f, 0, 0.36f, ids), 1);
  EXPECT_EQ(sample_row(row, 1.0f, 1.0f, 0, 0.70f, ids), 3);
  // top_k 1 keeps the lowest id among the tied survivors.
  EXPECT_EQ(sample_row(row, 1.0f, 1.0f, 1, 0.99f, ids), 0);
}

TEST(SuppressionTest, RenormalisesOverTheSurvivors) {
  // p = {0.1, 0.2, 0.3, 0.4}; suppressing 3 leaves {1/6, 2/6, 3/6}.
  const std::vector<float> row = logits_of({0.1, 0.2, 0.3, 0.4});
  const std::vector<Token> ids = {3};
  EXPECT_EQ(sample_row(row, 1.0f, 1.0f, 0, 0.15f, ids), 0);
  EXPECT_EQ(sample_row(row, 1.0f, 1.0f, 0, 0.18f, ids), 1);
  EXPECT_EQ(sample_row(row, 1.0f, 1.0f, 0, 0.48f, ids), 1);
  EXPECT_EQ(sample_row(row, 1.0f, 1.0f, 0, 0.52f, ids), 2);
  EXPECT_EQ(sample_row(row, 1.0f, 1.0f, 0, 0.999f, ids), 2);
  // Last token suppressed and the coin at the very top: never clamped onto it.
  EXPECT_EQ(sample_row(row, 1.0f, 1.0f, 0, std::nextafter(1.0f, 0.0f), ids), 2);
  // top_p 0.6 over the survivors keeps ranks 2 (0.5) and 1 (0.33), mass 5/6.
  EXPECT_EQ(sample_row(row, 1.0f, 0.6f, 0, 0.55f, ids), 2);
  EXPECT_EQ(sample_row(row, 1.0f, 0.6f, 0, 0.65f, ids), 1);
}

TEST(SuppressionTest, SamplerNeverDrawsSuppressedAndAdvancesLikeTheMaskedRow) {
  const std::vector<float> row = {1.0f, 4.0f, 2.0f, 4.5f, 0.5f, 3.0f};
  const std::vector<Token> ids = {3, 1};
  for (const SamplingParams& base :
       {SamplingParams{}, SamplingParams{1.0f, 1.0f, 0}, SamplingParams{0.7f, 0.9f, 0},
        SamplingParams{1.3f, 1.0f, 2}}) {
    Sampler with(6, policy(base.temperature, base.top_p, base.top_k, ids), 42);
    Sampler reference(6, base, 42);
    for (int i = 0; i < 200; ++i) {
      const std::int64_t t = *with.sample(row);
      EXPECT_NE(t, 3);
      EXPECT_NE(t, 1);
      EXPECT_EQ(t, *reference.sample(masked(row, ids)));
    }
  }
}

TEST(SuppressionTest, CheckPolicyRefusesAnEmptyCandidateSet) {
  EXPECT_TRUE(check_policy(SamplingParams{}, 4).is_ok());
  EXPECT_TRUE(check_policy(policy(1.0f, 1.0f, 0, {0, 1, 2}), 4).is_ok());
  // Out-of-vocabulary and repeated ids do not count as covering the vocabulary.
  SamplingParams p = policy(1.0f, 1.0f, 0, {0, 1, 2, 9});
  EXPECT_TRUE(check_policy(p, 4).is_ok());
  p.suppressed[4] = 2;  // a duplicate slipped in by hand
  p.suppressed_count = 5;
  EXPECT_TRUE(check_policy(p, 4).is_ok());
  const Status all = check_policy(policy(0.0f, 1.0f, 0, {3, 2, 1, 0}), 4);
  EXPECT_EQ(all.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(all.message().find("every one of the 4 tokens"), std::string::npos) << all.message();
  SamplingParams corrupt;
  corrupt.suppressed_count = kMaxSuppressedTokens + 1;
  EXPECT_EQ(check_policy(corrupt, 100).code(), StatusCode::kInvalidArgument);
}

TEST(SuppressionTest, SampleRowsTakesPerRowLists) {
  Tensor logits = Tensor::empty(DType::kF32, {2, 4});
  const float values[8] = {1.0f, 5.0f, 2.0f, 0.0f, 1.0f, 5.0f, 2.0f, 0.0f};
  std::copy(values, values + 8, logits.data_as<float>());
  Tensor params = Tensor::empty(DType::kF32, {2, 4});
  const float p[8] = {0.0f, 1.0f, 0.0f, 0.0f, 0.0f, 1.0f, 0.0f, 0.0f};  // both greedy
  std::copy(p, p + 8, params.data_as<float>());
  Tensor banned = Tensor::empty(DType::kI64, {2, static_cast<std::int64_t>(kMaxSuppressedTokens)});
  auto ids = banned.span<std::int64_t>();
  std::fill(ids.begin(), ids.end(), -1);
  ids[0] = 1;  // row 0 loses its argmax; row 1 keeps it
  auto tokens = sample_rows(logits, params, &banned);
  ASSERT_TRUE(tokens.ok()) << tokens.status().to_string();
  EXPECT_EQ(*tokens, (std::vector<std::int64_t>{2, 1}));

  Tensor wrong = Tensor::empty(DType::kI64, {2, 3});
  auto refused = sample_rows(logits, params, &wrong);
  EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("suppressed ids"), std::string::npos);
}

}  // namespace
}  // namespace cellm::sampling
