// The device sampler against a host transcription of batching_spec.md 4.8.
// The reference follows the spec step by step; cumulative sums are kept in
// a chosen precision (float for the literal host, double for the exact sums
// the device approximates in fixed point). A device token is accepted when
// its cumulative position (in the reference's order) lies within 1e-5 of the
// coin's, i.e. only float rounding (exp, Z, summation order) separates it
// from the reference token; most rows must match exactly.
#include "backend/cuda/kernels/sample.cuh"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "cellm/status.h"
#include "gpu_test_util.h"

namespace cellm::cuda {
namespace {

using testing::DeviceArray;

// Which draw kernel run_sampler and run_suppressed launch: one block a row,
// or a cluster of blocks (SampleParams::cluster); set by SampleTest's
// parameter.
bool g_cluster = false;

struct RowParams {
  float temperature;
  float top_p;
  float top_k;
  float coin;
};

int host_argmax(const float* x, int vocab) {
  int best = -1;
  for (int i = 0; i < vocab; ++i) {
    if (std::isnan(x[i])) continue;
    if (best < 0 || x[i] > x[best]) best = i;
  }
  return best < 0 ? 0 : best;
}

// One row's softmax and its stable descending order, computed once.
struct SpecRow {
  const float* x;
  int vocab;
  float temperature;
  int greedy;
  std::vector<float> p;
  std::vector<int> order;

  // `float_z`: sum Z sequentially in float as the literal host does; that sum
  // drifts by ~sqrt(V) ulps, so large vocabularies use a double Z instead.
  SpecRow(const float* logits, int v, float t, bool float_z) : x(logits), vocab(v), temperature(t) {
    greedy = host_argmax(x, vocab);
    if (!(temperature > 0.0f)) return;
    const float m = x[greedy] / temperature;
    p.resize(vocab);
    float z = 0.0f;
    double z_exact = 0.0;
    for (int i = 0; i < vocab; ++i) {
      p[i] = std::exp(x[i] / temperature - m);
      z += p[i];
      z_exact += p[i];
    }
    for (float& v2 : p) v2 = float_z ? v2 / z : static_cast<float>(v2 / z_exact);
    order.resize(vocab);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return p[a] > p[b]; });
  }

  template <typename Acc>
  int pick(const RowParams& r) const {
    if (!(temperature > 0.0f)) return greedy;
    const bool use_top_k = r.top_k > 0.0f && r.top_k < static_cast<float>(vocab);
    const bool use_top_p = !use_top_k && r.top_p > 0.0f && r.top_p < 1.0f;
    if (!use_top_k && !use_top_p) {
      Acc cum = 0;
      int count = 0;
      for (int i = 0; i < vocab; ++i) {
        cum += static_cast<Acc>(p[i]);
        if (cum <= static_cast<Acc>(r.coin)) ++count;
      }
      return std::min(count, vocab - 1);
    }
    int kept = 0;
    Acc cum = 0;
    for (int rank = 0; rank < vocab; ++rank) {
      const Acc pr = static_cast<Acc>(p[order[rank]]);
      cum += pr;
      const bool keep =
          use_top_k ? static_cast<float>(rank) < r.top_k : (cum - pr) <= static_cast<Acc>(r.top_p);
      if (!keep) break;
      kept = rank + 1;
    }
    Acc mass = 0;
    for (int rank = 0; rank < kept; ++rank) mass += static_cast<Acc>(p[order[rank]]);
    const Acc target = static_cast<Acc>(r.coin) * mass;
    Acc kept_cum = 0;
    for (int rank = 0; rank < kept; ++rank) {
      kept_cum += static_cast<Acc>(p[order[rank]]);
      if (target < kept_cum) return order[rank];
    }
    return order[kept - 1];
  }

  // Whether `token` is a valid draw for a coin within `slack` (relative to
  // the mass the coin scales) of the real one: the host and device compute p
  // with different exp roundings and sum orders, so tokens whose cumulative
  // position lies within rounding of the coin's are all correct answers.
  bool accepts(int token, const RowParams& r, double slack = 1e-5) const {
    if (!(temperature > 0.0f)) return token == greedy;
    if (token < 0 || token >= vocab) return false;
    const bool use_top_k = r.top_k > 0.0f && r.top_k < static_cast<float>(vocab);
    const bool use_top_p = !use_top_k && r.top_p > 0.0f && r.top_p < 1.0f;
    if (!use_top_k && !use_top_p) {
      double before = 0.0;
      for (int i = 0; i < token; ++i) before += p[i];
      const double through = before + p[token];
      return before <= r.coin + slack && (through > r.coin - slack || token == vocab - 1);
    }
    // The kept prefix may move by one boundary token under rounding of top_p:
    // accept a draw that is valid for any of the three prefixes.
    for (const double top_p_slack : {0.0, slack, -slack}) {
      int kept = 0;
      double cum = 0.0;
      for (int rank = 0; rank < vocab; ++rank) {
        const double pr = p[order[rank]];
        cum += pr;
        const bool keep =
            use_top_k ? static_cast<float>(rank) < r.top_k : (cum - pr) <= r.top_p + top_p_slack;
        if (!keep) break;
        kept = rank + 1;
      }
      double mass = 0.0;
      for (int rank = 0; rank < kept; ++rank) mass += p[order[rank]];
      const double target = r.coin * mass;
      double before = 0.0;
      for (int rank = 0; rank < kept; ++rank) {
        const double through = before + p[order[rank]];
        if (order[rank] == token) {
          if (before <= target + slack * mass &&
              (through > target - slack * mass || rank == kept - 1)) {
            return true;
          }
          break;
        }
        before = through;
      }
    }
    return false;  // not in the kept set
  }
};

std::vector<std::int32_t> run_sampler(const std::vector<float>& logits, int rows, int vocab,
                                      const std::vector<RowParams>& params) {
  DeviceArray<float> dl(logits);
  std::vector<float> flat;
  for (const auto& r : params) flat.insert(flat.end(), {r.temperature, r.top_p, r.top_k, r.coin});
  DeviceArray<float> dp(flat);
  DeviceArray<std::int32_t> out(rows);
  out.poison();
  SampleParams p{.logits = dl.data(),
                 .params = dp.data(),
                 .out = out.data(),
                 .logits_stride = vocab,
                 .rows = rows,
                 .vocab = vocab,
                 .cluster = g_cluster};
  EXPECT_TRUE(p.validate().is_ok());
  launch_sample(p, nullptr);
  return out.download();
}

// Same as run_sampler with per-row suppressed ids ([rows, kSampleMaxSuppressed],
// -1 = empty); `argmax` launches sample_argmax instead.
std::vector<std::int32_t> run_suppressed(const std::vector<float>& logits, int rows, int vocab,
                                         const std::vector<RowParams>& params,
                                         const std::vector<std::int32_t>& banned, bool argmax) {
  DeviceArray<float> dl(logits);
  std::vector<float> flat;
  for (const auto& r : params) flat.insert(flat.end(), {r.temperature, r.top_p, r.top_k, r.coin});
  DeviceArray<float> dp(flat);
  DeviceArray<std::int32_t> db(banned);
  DeviceArray<std::int32_t> out(rows);
  out.poison();
  SampleParams p{.logits = dl.data(),
                 .params = dp.data(),
                 .out = out.data(),
                 .suppressed = db.data(),
                 .logits_stride = vocab,
                 .rows = rows,
                 .vocab = vocab,
                 .cluster = g_cluster};
  EXPECT_TRUE(p.validate().is_ok());
  if (argmax) {
    launch_sample_argmax(p, nullptr);
  } else {
    launch_sample(p, nullptr);
  }
  return out.download();
}

std::vector<RowParams> policy_mix(int vocab, std::mt19937& rng) {
  std::uniform_real_distribution<float> coin(0.0f, 1.0f);
  std::vector<RowParams> rows = {
      {0.0f, 0.9f, 40.0f, 0.5f},                       // greedy regardless of the rest
      {-1.0f, 0.0f, 0.0f, 0.3f},                       // negative temperature: greedy
      {1.0f, 0.0f, 0.0f, 0.0f},                        // full distribution, coin 0
      {0.7f, 0.0f, 0.0f, 0.999f},                      // full distribution, high coin
      {1.0f, 1.0f, 0.0f, 0.42f},                       // top_p = 1: full distribution
      {1.0f, 0.0f, static_cast<float>(vocab), 0.42f},  // top_k = V: disabled
      {1.0f, 0.0f, 1.0f, 0.9f},                        // top-k 1 = argmax
      {0.8f, 0.0f, 40.0f, 0.0f},
      {1.3f, 0.0f, 40.0f, 0.77f},
      {1.0f, 0.0f, 2.5f, 0.95f},  // fractional k keeps ranks 0..2
      {1.0f, 0.0f, static_cast<float>(vocab - 1), 0.61f},
      {1.0f, 0.9f, 0.0f, 0.5f},
      {0.6f, 0.5f, 0.0f, 0.05f},
      {1.5f, 0.99f, 0.0f, 0.8f},
      {1.0f, 0.05f, 0.0f, 0.7f},  // tiny top_p: the first token only
      {1.0f, 0.3f, 5.0f, 0.6f},   // top-k takes precedence over top-p
  };
  for (int i = 0; i < 8; ++i) {
    rows.push_back({0.5f + coin(rng), i % 2 ? 0.0f : 0.2f + 0.75f * coin(rng),
                    i % 2 ? std::floor(1.0f + 100.0f * coin(rng)) : 0.0f, coin(rng)});
  }
  return rows;
}

void check_rows(const std::vector<float>& logits, int vocab, const std::vector<RowParams>& rows,
                bool float_reference) {
  const int n = static_cast<int>(rows.size());
  const auto got = run_sampler(logits, n, vocab, rows);
  int exact = 0;
  for (int r = 0; r < n; ++r) {
    const SpecRow spec(logits.data() + static_cast<std::size_t>(r) * vocab, vocab,
                       rows[r].temperature, float_reference);
    const int want = float_reference ? spec.pick<float>(rows[r]) : spec.pick<double>(rows[r]);
    exact += got[r] == want ? 1 : 0;
    EXPECT_TRUE(spec.accepts(got[r], rows[r]))
        << "row " << r << " got " << got[r] << " want " << want << " (T=" << rows[r].temperature
        << " top_p=" << rows[r].top_p << " top_k=" << rows[r].top_k << " coin=" << rows[r].coin
        << ")";
  }
  // Rounding may move a draw to a neighbour of equal cumulative position;
  // more than a few such rows would mean a real disagreement.
  EXPECT_GE(exact, n - 4) << "too many rows differ from the reference token";
}

std::vector<float> random_logits(int rows, int vocab, float stddev, std::mt19937& rng) {
  std::normal_distribution<float> dist(0.0f, stddev);
  std::vector<float> logits(static_cast<std::size_t>(rows) * vocab);
  for (auto& x : logits) x = dist(rng);
  return logits;
}

TEST(SampleArgmaxTest, FirstMaximumWinsAndNaNIsIgnored) {
  CELLM_REQUIRE_GPU();
  const int vocab = 262144, rows = 4;
  std::mt19937 rng(1);
  auto logits = random_logits(rows, vocab, 2.0f, rng);
  logits[0 * vocab + 70000] = 50.0f;
  logits[0 * vocab + 260000] = 50.0f;
  logits[1 * vocab + 5] = NAN;
  logits[1 * vocab + 6] = 40.0f;
  for (int i = 0; i < vocab; ++i) logits[2 * vocab + i] = -1.0f;  // all equal
  DeviceArray<float> dl(logits);
  DeviceArray<std::int32_t> out(rows);
  SampleParams p{
      .logits = dl.data(), .out = out.data(), .logits_stride = vocab, .rows = rows, .vocab = vocab};
  ASSERT_TRUE(p.validate_argmax().is_ok());
  launch_sample_argmax(p, nullptr);
  const auto got = out.download();
  EXPECT_EQ(got[0], 70000);
  EXPECT_EQ(got[1], 6);
  EXPECT_EQ(got[2], 0);
  EXPECT_EQ(got[3], host_argmax(logits.data() + 3 * vocab, vocab));
}

// The draw's tests run on both kernels: one block a row and a cluster of
// blocks a row.
class SampleTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override { g_cluster = GetParam(); }
  void TearDown() override { g_cluster = false; }
};
INSTANTIATE_TEST_SUITE_P(Kernels, SampleTest, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? "Cluster" : "OneBlock";
                         });

// The argmax split over blocks (argmax_partials set) against the one-block
// kernel and a host reference, on vocabularies that give one part, a ragged
// last part and the 64-part cap; maxima repeated across parts, NaNs, rows of
// -inf or all NaN, and suppressed ids (the row maximum and id 0 among them);
// at 128256 ids with 20 rows, which leaves each row 12 parts.
// Each split launch runs three times on the same workspace: the counters
// must come back to zero for the next launch to merge at all.
TEST(SampleArgmaxTest, SplitOverBlocksMatchesOneBlock) {
  CELLM_REQUIRE_GPU();
  for (const int vocab : {1, 5, 4095, 4097, 32000, 128256, 262144, 300001}) {
    // 20 rows leave 12 parts a row instead of 32 (the launch's block budget).
    const int rows = vocab == 128256 ? 20 : 6;
    std::mt19937 rng(static_cast<unsigned>(vocab));
    auto logits = random_logits(rows, vocab, 3.0f, rng);
    auto at = [&](int r, int i) -> float& {
      return logits[static_cast<std::size_t>(r) * vocab + static_cast<std::size_t>(i)];
    };
    // Row 1: the same maximum early and late (the early one wins).
    at(1, vocab / 3) = 90.0f;
    at(1, vocab - 1) = 90.0f;
    // Row 2: NaNs around a maximum that is not first.
    at(2, 0) = NAN;
    at(2, vocab / 2) = 80.0f;
    at(2, vocab - 1) = NAN;
    for (int i = 0; i < vocab; ++i) {
      at(3, i) = -INFINITY;
      at(4, i) = NAN;
      at(5, i) = -2.0f;
    }
    std::vector<std::int32_t> banned(static_cast<std::size_t>(rows) * kSampleMaxSuppressed, -1);
    banned[0] = host_argmax(&at(0, 0), vocab);
    banned[1] = vocab + 7;  // outside the vocabulary: suppresses nothing
    banned[3 * kSampleMaxSuppressed] = 0;
    banned[5 * kSampleMaxSuppressed] = 0;
    banned[5 * kSampleMaxSuppressed + 1] = vocab > 2 ? 2 : 0;
    DeviceArray<float> dl(logits);
    DeviceArray<std::int32_t> db(banned);
    DeviceArray<std::int64_t> partials(argmax_partials_bytes(rows) / sizeof(std::int64_t));
    DeviceArray<std::int32_t> counters(std::vector<std::int32_t>(rows, 0));
    for (const bool suppress : {false, true}) {
      auto run = [&](bool split) {
        DeviceArray<std::int32_t> out(rows);
        out.poison();
        SampleParams p{.logits = dl.data(),
                       .out = out.data(),
                       .suppressed = suppress ? db.data() : nullptr,
                       .logits_stride = vocab,
                       .rows = rows,
                       .vocab = vocab};
        if (split) {
          p.argmax_partials = partials.data();
          p.argmax_counters = counters.data();
        }
        EXPECT_TRUE(p.validate_argmax().is_ok());
        launch_sample_argmax(p, nullptr);
        return out.download();
      };
      const auto one_block = run(false);
      for (int repeat = 0; repeat < 3; ++repeat) {
        EXPECT_EQ(run(true), one_block)
            << "vocab " << vocab << " suppress " << suppress << " launch " << repeat;
        EXPECT_EQ(counters.download(), std::vector<std::int32_t>(rows, 0));
      }
      for (int r = 0; r < rows; ++r) {
        // Host reference: suppressed ids are no candidates; with none left
        // (all NaN or suppressed) the first id that is not suppressed.
        std::vector<float> row(&at(r, 0), &at(r, 0) + vocab);
        std::vector<bool> off(static_cast<std::size_t>(vocab), false);
        for (int j = 0; suppress && j < kSampleMaxSuppressed; ++j) {
          const int id = banned[static_cast<std::size_t>(r) * kSampleMaxSuppressed + j];
          if (id >= 0 && id < vocab) off[static_cast<std::size_t>(id)] = true;
        }
        int want = -1;
        for (int i = 0; i < vocab; ++i) {
          if (off[static_cast<std::size_t>(i)] || std::isnan(row[static_cast<std::size_t>(i)]))
            continue;
          if (want < 0 || row[static_cast<std::size_t>(i)] > row[static_cast<std::size_t>(want)])
            want = i;
        }
        if (want < 0) {
          want = 0;
          while (want < vocab && off[static_cast<std::size_t>(want)]) ++want;
          if (want >= vocab) want = 0;
        }
        EXPECT_EQ(one_block[static_cast<std::size_t>(r)], want)
            << "vocab " << vocab << " row " << r << " suppress " << suppress;
      }
    }
  }
}

TEST_P(SampleTest, MatchesSpecOnFixtureVocabularyWithFloatSums) {
  CELLM_REQUIRE_GPU();
  const int vocab = 384;
  std::mt19937 rng(2);
  auto rows = policy_mix(vocab, rng);
  check_rows(random_logits(static_cast<int>(rows.size()), vocab, 2.0f, rng), vocab, rows, true);
}

TEST_P(SampleTest, MatchesSpecOnLargeVocabularies) {
  CELLM_REQUIRE_GPU();
  for (const int vocab : {32000, 262144}) {
    for (const float stddev : {4.0f, 0.05f}) {  // peaked and nearly flat
      std::mt19937 rng(vocab + static_cast<int>(stddev * 100));
      auto rows = policy_mix(vocab, rng);
      check_rows(random_logits(static_cast<int>(rows.size()), vocab, stddev, rng), vocab, rows,
                 false);
    }
  }
}

TEST_P(SampleTest, TiesInProbabilityGoToTheLowerId) {
  CELLM_REQUIRE_GPU();
  const int vocab = 5000;
  std::mt19937 rng(3);
  auto rows = policy_mix(vocab, rng);
  std::uniform_int_distribution<int> level(0, 7);
  std::vector<float> logits(rows.size() * vocab);
  for (auto& x : logits) x = 0.5f * static_cast<float>(level(rng));  // heavy exact ties
  check_rows(logits, vocab, rows, false);
}

TEST_P(SampleTest, EmpiricalDistributionMatchesSoftmax) {
  CELLM_REQUIRE_GPU();
  const int vocab = 16, draws = 4000;
  std::mt19937 rng(4);
  const auto one = random_logits(1, vocab, 1.0f, rng);
  std::vector<float> logits;
  std::vector<RowParams> rows;
  std::uniform_real_distribution<float> coin(0.0f, 1.0f);
  for (int i = 0; i < draws; ++i) {
    logits.insert(logits.end(), one.begin(), one.end());
    rows.push_back({1.0f, 0.0f, 0.0f, coin(rng)});
  }
  const auto got = run_sampler(logits, draws, vocab, rows);
  std::vector<double> freq(vocab, 0.0);
  for (int t : got) {
    ASSERT_GE(t, 0);
    ASSERT_LT(t, vocab);
    freq[t] += 1.0 / draws;
  }
  double z = 0.0;
  for (float x : one) z += std::exp(double(x));
  for (int i = 0; i < vocab; ++i) EXPECT_NEAR(freq[i], std::exp(double(one[i])) / z, 0.03);
}

// Suppressed ids (min_tokens): never drawn, and otherwise the same draw as
// the row with those logits set to -inf by hand, even when the suppressed ids
// hold nearly all the mass or the argmax.
TEST_P(SampleTest, SuppressedIdsAreNeverDrawn) {
  CELLM_REQUIRE_GPU();
  for (const int vocab : {384, 262144}) {
    std::mt19937 rng(6 + vocab);
    auto rows = policy_mix(vocab, rng);
    const int n = static_cast<int>(rows.size());
    auto logits = random_logits(n, vocab, 2.0f, rng);
    std::vector<std::int32_t> banned(static_cast<std::size_t>(n) * kSampleMaxSuppressed, -1);
    std::uniform_int_distribution<int> any_id(0, vocab - 1);
    auto masked = logits;
    for (int r = 0; r < n; ++r) {
      float* row = logits.data() + static_cast<std::size_t>(r) * vocab;
      const int slots = r % (kSampleMaxSuppressed + 1);
      for (int j = 0; j < slots; ++j) {
        // Slot 0 takes the row's argmax; odd rows also pile the mass there.
        const int id = j == 0 ? host_argmax(row, vocab) : any_id(rng);
        if (j == 0 && r % 2 == 1) row[id] = 60.0f;
        banned[static_cast<std::size_t>(r) * kSampleMaxSuppressed + j] = id;
      }
      if (r == n - 1) banned[static_cast<std::size_t>(r) * kSampleMaxSuppressed] = vocab + 5;
    }
    masked = logits;
    for (int r = 0; r < n; ++r) {
      for (int j = 0; j < kSampleMaxSuppressed; ++j) {
        const int id = banned[static_cast<std::size_t>(r) * kSampleMaxSuppressed + j];
        if (id >= 0 && id < vocab) masked[static_cast<std::size_t>(r) * vocab + id] = -INFINITY;
      }
    }
    const auto got = run_suppressed(logits, n, vocab, rows, banned, false);
    const auto reference = run_sampler(masked, n, vocab, rows);
    const auto greedy = run_suppressed(logits, n, vocab, rows, banned, true);
    for (int r = 0; r < n; ++r) {
      for (int j = 0; j < kSampleMaxSuppressed; ++j) {
        const int id = banned[static_cast<std::size_t>(r) * kSampleMaxSuppressed + j];
        EXPECT_NE(got[r], id) << "row " << r << " vocab " << vocab;
        EXPECT_NE(greedy[r], id) << "row " << r << " vocab " << vocab;
      }
      EXPECT_EQ(got[r], reference[r]) << "row " << r << " vocab " << vocab;
      EXPECT_EQ(greedy[r], host_argmax(masked.data() + static_cast<std::size_t>(r) * vocab, vocab))
          << "row " << r << " vocab " << vocab;
      const SpecRow spec(masked.data() + static_cast<std::size_t>(r) * vocab, vocab,
                         rows[r].temperature, false);
      EXPECT_TRUE(spec.accepts(got[r], rows[r])) << "row " << r << " vocab " << vocab;
    }
  }
}

TEST_P(SampleTest, SameInputsGiveSameTokens) {
  CELLM_REQUIRE_GPU();
  const int vocab = 262144;
  std::mt19937 rng(5);
  auto rows = policy_mix(vocab, rng);
  const auto logits = random_logits(static_cast<int>(rows.size()), vocab, 0.3f, rng);
  const int n = static_cast<int>(rows.size());
  EXPECT_EQ(run_sampler(logits, n, vocab, rows), run_sampler(logits, n, vocab, rows));
}

}  // namespace
}  // namespace cellm::cuda
