// The host reference of logprobs (sampling/logprobs.h): the values equal a
// log-softmax computed here independently, in long double and by a full
// sort; the top list is sorted, consistent with the drawn token's entry and
// never holds more mass than the whole row.
#include "sampling/logprobs.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include <gtest/gtest.h>

#include "sampling/sampler.h"
#include "sampling/xorshift.h"

namespace cellm::sampling {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

std::vector<float> random_row(std::size_t vocab, std::uint64_t seed, float scale) {
  Xorshift64Star rng(seed);
  std::vector<float> row(vocab);
  for (float& x : row) x = (rng.next_f32() * 2.0f - 1.0f) * scale;
  return row;
}

// log-softmax of x / t (t <= 0: x itself) in long double; excluded ids -inf.
std::vector<long double> expected_logprobs(const std::vector<float>& row, float t,
                                           const std::vector<Token>& excluded = {}) {
  std::vector<long double> z(row.size());
  for (std::size_t i = 0; i < row.size(); ++i) {
    const bool out = std::find(excluded.begin(), excluded.end(), i) != excluded.end();
    z[i] = out ? -static_cast<long double>(kInf)
               : (t > 0.0f ? static_cast<long double>(row[i] / t) : row[i]);
  }
  const long double m = *std::max_element(z.begin(), z.end());
  long double sum = 0.0L;
  for (long double v : z) sum += std::exp(v - m);
  for (long double& v : z) v = v - m - std::log(sum);
  return z;
}

// Ids by expected logprob descending, ties to the lower id (a full sort).
std::vector<Token> ranked(const std::vector<long double>& lp) {
  std::vector<Token> ids(lp.size());
  std::iota(ids.begin(), ids.end(), Token{0});
  std::stable_sort(ids.begin(), ids.end(), [&](Token a, Token b) { return lp[a] > lp[b]; });
  return ids;
}

void expect_consistent(const TokenLogprobs& got, std::size_t count) {
  ASSERT_EQ(got.top.size(), count);
  EXPECT_LE(got.logprob, 0.0f);
  double mass = 0.0;
  for (std::size_t j = 0; j < got.top.size(); ++j) {
    EXPECT_LE(got.top[j].logprob, 0.0f);
    if (j > 0) {
      EXPECT_TRUE(
          got.top[j - 1].logprob > got.top[j].logprob ||
          (got.top[j - 1].logprob == got.top[j].logprob && got.top[j - 1].token < got.top[j].token))
          << "rank " << j << " is out of order";
    }
    if (got.top[j].token == got.token) {
      EXPECT_EQ(got.top[j].logprob, got.logprob);
    }
    mass += std::exp(static_cast<double>(got.top[j].logprob));
  }
  EXPECT_LE(mass, 1.0 + 1e-5);
}

TEST(LogprobsTest, ValuesAreTheLogSoftmaxAtTheTemperature) {
  for (float t : {0.0f, 1.0f, 0.7f, 1.6f}) {
    const std::vector<float> row = random_row(5000, 11, 8.0f);
    const std::vector<long double> want = expected_logprobs(row, t);
    const std::vector<Token> order = ranked(want);
    for (Token chosen : {order[0], order[3], order[4000], Token{17}}) {
      TokenLogprobs got;
      row_logprobs(row, t, {}, chosen, 20, got);
      EXPECT_EQ(got.token, chosen);
      EXPECT_NEAR(got.logprob, static_cast<double>(want[chosen]),
                  1e-5 * std::max(1.0L, std::fabs(want[chosen])))
          << "t=" << t << " chosen=" << chosen;
      expect_consistent(got, 20);
      for (std::size_t j = 0; j < got.top.size(); ++j) {
        EXPECT_EQ(got.top[j].token, order[j]) << "t=" << t << " rank " << j;
        EXPECT_NEAR(got.top[j].logprob, static_cast<double>(want[order[j]]), 1e-5);
      }
    }
  }
}

TEST(LogprobsTest, GreedyDrawIsTheTopEntry) {
  const std::vector<float> row = random_row(3000, 5, 4.0f);
  const auto drawn = static_cast<Token>(argmax_row(row));
  TokenLogprobs got;
  row_logprobs(row, 0.0f, {}, drawn, 5, got);
  ASSERT_FALSE(got.top.empty());
  EXPECT_EQ(got.top[0].token, drawn);
  EXPECT_EQ(got.top[0].logprob, got.logprob);
  // Greedy rows report the raw distribution (not divided by any temperature).
  const std::vector<long double> raw = expected_logprobs(row, 1.0f);
  EXPECT_NEAR(got.logprob, static_cast<double>(raw[drawn]), 1e-5);
}

TEST(LogprobsTest, CountsFromZeroToTwentyAndTies) {
  // Ties: equal logits rank by id.
  std::vector<float> row(50, 1.0f);
  row[30] = 2.0f;
  for (int count : {0, 1, 7, 20}) {
    TokenLogprobs got;
    row_logprobs(row, 1.0f, {}, 30, count, got);
    expect_consistent(got, static_cast<std::size_t>(count));
    for (int j = 0; j < count; ++j) {
      EXPECT_EQ(got.top[static_cast<std::size_t>(j)].token, j == 0 ? Token{30} : Token(j - 1));
    }
  }
  // A count past the vocabulary is clamped to it.
  TokenLogprobs small;
  row_logprobs(std::vector<float>{0.0f, 1.0f, 2.0f}, 1.0f, {}, 2, 20, small);
  expect_consistent(small, 3);
  EXPECT_NEAR(std::exp(small.top[0].logprob) + std::exp(small.top[1].logprob) +
                  std::exp(small.top[2].logprob),
              1.0, 1e-6);
}

TEST(LogprobsTest, SuppressedAndNanIdsAreExcluded) {
  std::vector<float> row = random_row(400, 9, 3.0f);
  const auto best = static_cast<Token>(argmax_row(row));
  row[7] = std::numeric_limits<float>::quiet_NaN();
  const std::vector<Token> banned = {best, 123};
  const Token chosen = best == 5 ? 6 : 5;
  TokenLogprobs got;
  row_logprobs(row, 0.9f, banned, chosen, 20, got);
  std::vector<long double> want = expected_logprobs(row, 0.9f, {best, 123, 7});
  expect_consistent(got, 20);
  EXPECT_NEAR(got.logprob, static_cast<double>(want[chosen]), 1e-5);
  for (const TokenLogprob& t : got.top) {
    EXPECT_NE(t.token, best);
    EXPECT_NE(t.token, Token{123});
    EXPECT_NE(t.token, Token{7});
  }
  TokenLogprobs of_banned;
  row_logprobs(row, 0.9f, banned, best, 0, of_banned);
  EXPECT_EQ(of_banned.logprob, -kInf);
}

TEST(LogprobsTest, FewerLiveIdsThanTheCountFillWithMinusInfinity) {
  // Three live ids (as min_p leaves them), five asked for.
  std::vector<float> row(10, -kInf);
  row[8] = 1.0f;
  row[2] = 0.5f;
  row[5] = 0.5f;
  TokenLogprobs got;
  row_logprobs(row, 1.0f, {}, 2, 5, got);
  ASSERT_EQ(got.top.size(), 5u);
  EXPECT_EQ(got.top[0].token, Token{8});
  EXPECT_EQ(got.top[1].token, Token{2});
  EXPECT_EQ(got.top[2].token, Token{5});
  EXPECT_EQ(got.top[3].token, Token{0});
  EXPECT_EQ(got.top[3].logprob, -kInf);
  EXPECT_EQ(got.top[4].token, Token{1});
  const double live = std::exp(1.0) + 2 * std::exp(0.5);
  EXPECT_NEAR(got.logprob, 0.5 - std::log(live), 1e-6);
  EXPECT_NEAR(got.top[0].logprob, 1.0 - std::log(live), 1e-6);
}

TEST(LogprobsTest, ARowWithNothingLiveReportsCertainty) {
  const std::vector<float> row(6, -kInf);
  TokenLogprobs got;
  row_logprobs(row, 1.0f, {}, 0, 2, got);
  EXPECT_EQ(got.logprob, 0.0f);
  ASSERT_EQ(got.top.size(), 2u);
  EXPECT_EQ(got.top[0].logprob, -kInf);
}

TEST(LogprobsTest, CheckPolicyRefusesCountsOutsideTheRange) {
  SamplingParams p;
  p.logprobs = 21;
  EXPECT_FALSE(check_policy(p, 100).is_ok());
  p.logprobs = -2;
  EXPECT_FALSE(check_policy(p, 100).is_ok());
  for (int k : {-1, 0, 20}) {
    p.logprobs = k;
    EXPECT_TRUE(check_policy(p, 100).is_ok()) << k;
  }
}

}  // namespace
}  // namespace cellm::sampling
