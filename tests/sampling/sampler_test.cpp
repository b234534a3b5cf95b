#include "sampling/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>
#include <random>
#include <vector>

namespace cellm::sampling {
namespace {

// Logits whose softmax at temperature 1 is `probs`.
std::vector<float> logits_of(const std::vector<double>& probs) {
  std::vector<float> out;
  for (double p : probs) out.push_back(static_cast<float>(std::log(p)));
  return out;
}

const std::vector<float> kQuarter = logits_of({0.1, 0.2, 0.3, 0.4});

TEST(SampleRowTest, TemperatureZeroIsArgmax) {
  const std::vector<float> row = {0.5f, 3.0f, -1.0f, 3.0f, 2.0f};
  for (float t : {0.0f, -1.0f, std::nanf("")}) {
    for (float coin : {0.0f, 0.5f, 0.999f}) {
      EXPECT_EQ(sample_row(row, t, 0.5f, 2, coin), 1) << "temperature " << t;  // first max
    }
  }
  EXPECT_EQ(argmax_row(row), 1);
}

TEST(SampleRowTest, FullDistributionIsSampledInTokenOrder) {
  // Cumulative mass in id order: 0.1, 0.3, 0.6, 1.0. A rank-ordered draw would
  // pick token 3 for small coins instead.
  const std::vector<std::pair<float, std::int64_t>> cases = {{0.0f, 0},  {0.05f, 0}, {0.15f, 1},
                                                             {0.29f, 1}, {0.31f, 2}, {0.59f, 2},
                                                             {0.61f, 3}, {0.999f, 3}};
  for (const auto& [coin, token] : cases) {
    EXPECT_EQ(sample_row(kQuarter, 1.0f, 1.0f, 0, coin), token) << "coin " << coin;
  }
  // top_k >= V and top_p outside (0, 1) mean no truncation.
  EXPECT_EQ(sample_row(kQuarter, 1.0f, 0.0f, 4, 0.05f), 0);
  EXPECT_EQ(sample_row(kQuarter, 1.0f, 1.5f, 99, 0.15f), 1);
  EXPECT_EQ(sample_row(kQuarter, 1.0f, 1.0f, -3, 0.31f), 2);
}

TEST(SampleRowTest, TemperatureScalesTheLogits) {
  // logits {0, ln 2} at T = 0.5 -> weights {1, 4} -> p = {0.2, 0.8}.
  const std::vector<float> row = {0.0f, static_cast<float>(std::log(2.0))};
  EXPECT_EQ(sample_row(row, 0.5f, 1.0f, 0, 0.19f), 0);
  EXPECT_EQ(sample_row(row, 0.5f, 1.0f, 0, 0.21f), 1);
  // At T = 2: weights {1, sqrt 2} -> p0 = 0.4142.
  EXPECT_EQ(sample_row(row, 2.0f, 1.0f, 0, 0.41f), 0);
  EXPECT_EQ(sample_row(row, 2.0f, 1.0f, 0, 0.42f), 1);
}

TEST(SampleRowTest, TopKKeepsTheMostLikelyAndRenormalises) {
  // k = 2 keeps ids 3 (0.4) and 2 (0.3), mass 0.7: token 3 while coin*0.7 < 0.4.
  EXPECT_EQ(sample_row(kQuarter, 1.0f, 1.0f, 2, 0.0f), 3);
  EXPECT_EQ(sample_row(kQuarter, 1.0f, 1.0f, 2, 0.56f), 3);
  EXPECT_EQ(sample_row(kQuarter, 1.0f, 1.0f, 2, 0.58f), 2);
  EXPECT_EQ(sample_row(kQuarter, 1.0f, 1.0f, 2, 0.999f), 2);
  for (float coin = 0.0f; coin < 1.0f; coin += 0.01f) {
    EXPECT_EQ(sample_row(kQuarter, 1.0f, 1.0f, 1, coin), 3);
  }
}

TEST(SampleRowTest, TiesRankTheLowerIdFirst) {
  const std::vector<float> flat = {1.0f, 1.0f, 1.0f, 1.0f};
  // k = 2 keeps ids 0 and 1 only.
  EXPECT_EQ(sample_row(flat, 1.0f, 1.0f, 2, 0.4f), 0);
  EXPECT_EQ(sample_row(flat, 1.0f, 1.0f, 2, 0.6f), 1);
  for (float coin = 0.0f; coin < 1.0f; coin += 0.05f) {
    EXPECT_LT(sample_row(flat, 1.0f, 1.0f, 2, coin), 2);
  }
}

TEST(SampleRowTest, TopKTakesPrecedenceOverTopP) {
  // top_p = 0.3 alone keeps only id 3; with k = 3 the kept set is {3, 2, 1}
  // (mass 0.9) and coin 0.95 reaches id 1 (0.855 > 0.7).
  EXPECT_EQ(sample_row(kQuarter, 1.0f, 0.3f, 0, 0.95f), 3);
  EXPECT_EQ(sample_row(kQuarter, 1.0f, 0.3f, 3, 0.95f), 1);
}

TEST(SampleRowTest, TopPIncludesTheFirstTokenCrossingP) {
  // Ranked masses before each rank: 0, 0.4, 0.7, 0.9. top_p = 0.5 keeps ids 3
  // and 2 (id 2 is where the mass crosses 0.5).
  EXPECT_EQ(sample_row(kQuarter, 1.0f, 0.5f, 0, 0.5f), 3);
  EXPECT_EQ(sample_row(kQuarter, 1.0f, 0.5f, 0, 0.6f), 2);  // 0.42 >= 0.4
  EXPECT_EQ(sample_row(kQuarter, 1.0f, 0.5f, 0, 0.999f), 2);
  // top_p = 0.35: the mass already exceeds p after id 3.
  EXPECT_EQ(sample_row(kQuarter, 1.0f, 0.35f, 0, 0.999f), 3);
  // top_p = 0.75 keeps {3, 2, 1}, mass 0.9.
  EXPECT_EQ(sample_row(kQuarter, 1.0f, 0.75f, 0, 0.999f), 1);
  EXPECT_EQ(sample_row(kQuarter, 1.0f, 0.75f, 0, 0.76f), 2);  // 0.684 < 0.7
}

// The argmax's contract spelled out as a plain loop: the first index whose
// value is the largest non-NaN one; 0 when every entry is NaN.
std::int64_t reference_argmax(const std::vector<float>& row) {
  std::int64_t best = -1;
  for (std::size_t i = 0; i < row.size(); ++i) {
    if (std::isnan(row[i])) continue;
    if (best < 0 || row[i] > row[static_cast<std::size_t>(best)])
      best = static_cast<std::int64_t>(i);
  }
  return best < 0 ? 0 : best;
}

TEST(ArgmaxRowTest, MatchesTheFirstMaximumOnAwkwardRows) {
  // Lengths around the 4- and 16-wide blocks, and a Gemma-sized row; values
  // drawn from a few levels so that ties are common, with NaN, infinities
  // and both zeros mixed in; the maximum anywhere, the first or last entry
  // included.
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> specials = {std::nanf(""), -inf, inf, 0.0f, -0.0f};
  std::mt19937 rng(7);
  std::vector<std::size_t> sizes;
  for (std::size_t n = 1; n <= 70; ++n) sizes.push_back(n);
  sizes.push_back(262144);
  for (std::size_t n : sizes) {
    for (int trial = 0; trial < 40; ++trial) {
      std::vector<float> row(n);
      std::uniform_int_distribution<int> level(-3, 3);
      std::uniform_int_distribution<int> kind(0, 9);
      std::uniform_int_distribution<std::size_t> pick(0, specials.size() - 1);
      const int special_rate = trial % 5;  // 0: none, up to 4 in 10 entries
      for (float& v : row) {
        v = kind(rng) < special_rate ? specials[pick(rng)] : static_cast<float>(level(rng));
      }
      if (trial == 1) std::fill(row.begin(), row.end(), std::nanf(""));
      if (trial == 2) std::fill(row.begin(), row.end(), -inf);
      if (trial == 3) row.back() = 100.0f;
      if (trial == 4) row.front() = std::nanf("");
      ASSERT_EQ(argmax_row(row), reference_argmax(row)) << "size " << n << ", trial " << trial;
    }
  }
}

TEST(SampleRowTest, NonFiniteRowsNeverCrash) {
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> all_neg = {-inf, -inf, -inf};
  EXPECT_EQ(sample_row(all_neg, 1.0f, 0.9f, 0, 0.5f), 0);
  const std::vector<float> with_nan = {std::nanf(""), 0.0f, -inf};
  const std::int64_t t = sample_row(with_nan, 1.0f, 1.0f, 0, 0.5f);
  EXPECT_EQ(t, 1);  // NaN and -inf get no mass
  EXPECT_EQ(argmax_row(with_nan), 1);
  const std::vector<float> with_inf = {0.0f, inf, 1.0f};
  EXPECT_EQ(sample_row(with_inf, 1.0f, 0.9f, 2, 0.5f), 1);
}

// A direct transcription of §4.8 with a full stable sort, as an oracle.
std::int64_t reference_sample(const std::vector<float>& logits, float t, float top_p, int top_k,
                              float coin) {
  const std::size_t v = logits.size();
  std::vector<float> z(v);
  float m = -INFINITY;
  for (std::size_t i = 0; i < v; ++i) m = std::max(m, z[i] = logits[i] / t);
  double sum = 0;
  std::vector<float> p(v);
  for (std::size_t i = 0; i < v; ++i) sum += (p[i] = std::exp(z[i] - m));
  for (std::size_t i = 0; i < v; ++i) p[i] = static_cast<float>(p[i] / sum);
  std::vector<std::int32_t> order(v);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return p[a] > p[b]; });
  const bool use_k = top_k > 0 && static_cast<std::size_t>(top_k) < v;
  const bool use_p = !use_k && top_p > 0 && top_p < 1;
  if (!use_k && !use_p) {
    double cum = 0;
    std::size_t count = 0;
    for (std::size_t i = 0; i < v; ++i) count += (cum += p[i]) <= coin;
    return static_cast<std::int64_t>(std::min(count, v - 1));
  }
  std::vector<std::int32_t> kept;
  double before = 0;
  for (std::size_t r = 0; r < v; ++r) {
    const bool keep = use_k ? r < static_cast<std::size_t>(top_k) : before <= top_p;
    if (!keep) break;
    kept.push_back(order[r]);
    before += p[order[r]];
  }
  double cum = 0;
  for (int id : kept) {
    cum += p[id];
    if (static_cast<double>(coin) * before < cum) return id;
  }
  return kept.back();
}

TEST(SampleRowTest, LargeVocabularyMatchesAFullSortOracle) {
  constexpr std::size_t kVocab = 262144;
  std::mt19937 gen(5);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<float> logits(kVocab);
  for (float& x : logits) x = std::round(normal(gen) * 4.0f) / 4.0f;  // many ties
  struct Case {
    float t, top_p;
    int top_k;
  };
  const std::vector<Case> cases = {{1.0f, 1.0f, 0},  {0.7f, 1.0f, 50}, {1.0f, 1.0f, 5000},
                                   {1.0f, 0.9f, 0},  {1.3f, 0.5f, 0},  {0.3f, 0.95f, 0},
                                   {2.0f, 0.99f, 0}, {1.0f, 0.001f, 0}};
  for (const Case& c : cases) {
    for (float coin : {0.01f, 0.37f, 0.5f, 0.93f}) {
      EXPECT_EQ(sample_row(logits, c.t, c.top_p, c.top_k, coin),
                reference_sample(logits, c.t, c.top_p, c.top_k, coin))
          << "T " << c.t << " top_p " << c.top_p << " top_k " << c.top_k << " coin " << coin;
    }
  }
}

// The exact distribution a policy samples from, in double precision.
std::vector<double> exact_distribution(const std::vector<float>& logits, double t, double top_p,
                                       int top_k) {
  const std::size_t v = logits.size();
  std::vector<double> p(v);
  double m = *std::max_element(logits.begin(), logits.end()) / t, sum = 0;
  for (std::size_t i = 0; i < v; ++i) sum += (p[i] = std::exp(logits[i] / t - m));
  for (double& x : p) x /= sum;
  std::vector<std::size_t> order(v);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](auto a, auto b) { return p[a] > p[b]; });
  std::vector<double> out(v, 0.0);
  double before = 0, mass = 0;
  for (std::size_t r = 0; r < v; ++r) {
    const bool keep =
        top_k > 0 ? r < static_cast<std::size_t>(top_k) : (top_p < 1 ? before <= top_p : true);
    if (!keep) break;
    out[order[r]] = p[order[r]];
    mass += p[order[r]];
    before += p[order[r]];
  }
  for (double& x : out) x /= mass;
  return out;
}

TEST(SamplerTest, EmpiricalFrequenciesMatchTheExactDistribution) {
  const std::vector<float> logits = {1.0f, 0.2f, -0.5f, 2.0f, 0.0f, 1.5f, -2.0f, 0.7f};
  struct Policy {
    SamplingParams params;
    std::uint64_t seed;
  };
  const std::vector<Policy> policies = {
      {{1.0f, 1.0f, 0}, 1}, {{0.7f, 1.0f, 3}, 2}, {{1.3f, 0.8f, 0}, 3}};
  constexpr int kDraws = 8000;
  for (const Policy& policy : policies) {
    Sampler sampler(static_cast<std::int64_t>(logits.size()), policy.params, policy.seed);
    std::vector<double> freq(logits.size(), 0.0);
    for (int i = 0; i < kDraws; ++i) freq[static_cast<std::size_t>(*sampler.sample(logits))] += 1;
    const std::vector<double> exact = exact_distribution(logits, policy.params.temperature,
                                                         policy.params.top_p, policy.params.top_k);
    double max_err = 0;
    for (std::size_t i = 0; i < logits.size(); ++i) {
      max_err = std::max(max_err, std::abs(freq[i] / kDraws - exact[i]));
      if (exact[i] == 0) {
        EXPECT_EQ(freq[i], 0) << "token " << i << " is outside the kept set";
      }
    }
    EXPECT_LT(max_err, 0.03) << "T " << policy.params.temperature;
  }
}

TEST(SamplerTest, DrawsCoinsOnlyForStochasticPolicies) {
  const std::vector<float> logits = {0.3f, 1.0f, 0.9f, -0.2f, 0.95f};
  const SamplingParams hot{1.1f, 0.9f, 0};
  Sampler sampler(5, hot, 99);
  Xorshift64Star coins(99);
  for (int i = 0; i < 50; ++i) {
    const float coin = coins.next_f32();
    EXPECT_EQ(*sampler.sample(logits), sample_row(logits, 1.1f, 0.9f, 0, coin));
  }
  Sampler greedy(5, SamplingParams{}, 99);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(*greedy.sample(logits), 1);
  EXPECT_TRUE(greedy.greedy());
  EXPECT_FALSE(sampler.greedy());
}

TEST(SamplerTest, SeedingReproducesTokenSequences) {
  const std::vector<float> logits = {0.1f, 0.2f, 0.3f, 0.4f, 0.5f, 0.6f};
  const SamplingParams params{1.0f, 1.0f, 0};
  Sampler a(6, params, 11), b(6, params, 11), c(6, params, 12);
  std::vector<std::int64_t> sa, sb, sc;
  for (int i = 0; i < 64; ++i) {
    sa.push_back(*a.sample(logits));
    sb.push_back(*b.sample(logits));
    sc.push_back(*c.sample(logits));
  }
  EXPECT_EQ(sa, sb);
  EXPECT_NE(sa, sc);
}

TEST(SamplerTest, RefusesRowsOfAnotherLengthWithoutDrawing) {
  Sampler sampler(4, SamplingParams{1.0f, 1.0f, 0}, 5);
  const std::vector<float> short_row = {1.0f, 2.0f};
  EXPECT_FALSE(sampler.sample(short_row).has_value());
  Xorshift64Star coins(5);
  EXPECT_EQ(*sampler.sample(kQuarter), sample_row(kQuarter, 1.0f, 1.0f, 0, coins.next_f32()));
}

TEST(SamplerTest, SixteenBitRowsAreWidened) {
  // bf16 holds 1, 3, 2 and -0.5 exactly.
  const std::vector<std::uint16_t> row = {f32_to_bf16(1.0f), f32_to_bf16(3.0f), f32_to_bf16(2.0f),
                                          f32_to_bf16(-0.5f)};
  Sampler greedy(4, SamplingParams{}, 0);
  EXPECT_EQ(*greedy.sample(row, DType::kBF16), 1);
  EXPECT_FALSE(greedy.sample(row, DType::kF32).has_value());
  Sampler hot(4, SamplingParams{1.0f, 1.0f, 0}, 3);
  Xorshift64Star coins(3);
  const std::vector<float> widened = {1.0f, 3.0f, 2.0f, -0.5f};
  for (int i = 0; i < 20; ++i) {
    EXPECT_EQ(*hot.sample(row, DType::kBF16), sample_row(widened, 1.0f, 1.0f, 0, coins.next_f32()));
  }
}

TEST(SampleRowsTest, EachRowHasItsOwnPolicy) {
  // Three copies of the quarter row.
  Tensor logits = Tensor::empty(DType::kF32, {3, 4});
  for (int r = 0; r < 3; ++r)
    std::copy(kQuarter.begin(), kQuarter.end(), logits.data_as<float>() + r * 4);
  Tensor params = Tensor::empty(DType::kF32, {3, 4});
  const float p[12] = {0.0f, 1.0f, 0.0f, 0.05f,   // greedy -> 3
                       1.0f, 1.0f, 0.0f, 0.05f,   // token order -> 0
                       1.0f, 1.0f, 2.0f, 0.58f};  // top-k 2 -> 2
  std::copy(p, p + 12, params.data_as<float>());
  auto tokens = sample_rows(logits, params);
  ASSERT_TRUE(tokens.ok()) << tokens.status().to_string();
  EXPECT_EQ(*tokens, (std::vector<std::int64_t>{3, 0, 2}));
  auto greedy = argmax_rows(logits);
  ASSERT_TRUE(greedy.ok());
  EXPECT_EQ(*greedy, (std::vector<std::int64_t>{3, 3, 3}));
}

TEST(SampleRowsTest, Bfloat16LogitsAreConverted) {
  Tensor logits = Tensor::empty(DType::kBF16, {2, 3});
  const float values[6] = {1.0f, 3.0f, 2.0f, 4.0f, -1.0f, 0.5f};
  for (int i = 0; i < 6; ++i) logits.data_as<std::uint16_t>()[i] = f32_to_bf16(values[i]);
  auto greedy = argmax_rows(logits);
  ASSERT_TRUE(greedy.ok());
  EXPECT_EQ(*greedy, (std::vector<std::int64_t>{1, 0}));
  Tensor params = Tensor::empty(DType::kF32, {2, 4});
  const float p[8] = {1.0f, 1.0f, 0.0f, 0.3f, 2.0f, 0.9f, 0.0f, 0.7f};
  std::copy(p, p + 8, params.data_as<float>());
  auto tokens = sample_rows(logits, params);
  ASSERT_TRUE(tokens.ok());
  const std::vector<float> r0 = {1.0f, 3.0f, 2.0f}, r1 = {4.0f, -1.0f, 0.5f};
  EXPECT_EQ((*tokens)[0], sample_row(r0, 1.0f, 1.0f, 0, 0.3f));
  EXPECT_EQ((*tokens)[1], sample_row(r1, 2.0f, 0.9f, 0, 0.7f));
}

TEST(SampleRowsTest, RefusesMalformedTensorsByName) {
  Tensor logits = Tensor::empty(DType::kF32, {2, 4});
  Tensor bad_params = Tensor::empty(DType::kF32, {3, 4});
  auto r = sample_rows(logits, bad_params);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("params"), std::string_view::npos);
  EXPECT_FALSE(argmax_rows(Tensor::empty(DType::kI64, {2, 4})).ok());
  EXPECT_FALSE(argmax_rows(Tensor::empty(DType::kF32, {8})).ok());
  EXPECT_FALSE(argmax_rows(Tensor::empty(DType::kF32, {2, 0})).ok());
  float dummy = 0;
  EXPECT_FALSE(argmax_rows(Tensor::view(&dummy, DType::kF32, {1, 1}, Device::kCuda)).ok());
  Tensor params = Tensor::empty(DType::kF32, {2, 4});
  params.data_as<float>()[0] = 1.0f;
  params.data_as<float>()[3] = 1.0f;  // coin 1 is outside [0, 1)
  EXPECT_FALSE(sample_rows(logits, params).ok());
}

}  // namespace
}  // namespace cellm::sampling
