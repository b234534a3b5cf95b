// The device draw's candidate sets (SampleParams::candidates): top-k and
// top-p drawn over the tokens a block compacts into shared memory must give
// exactly the token of the draw over the whole row, on one block and on a
// cluster, and must actually be taken where the kept set is small. The row
// draw itself is checked against the spec in sample_test.cpp.
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "backend/cuda/kernels/sample.cuh"
#include "cellm/status.h"
#include "gpu_test_util.h"

namespace cellm::cuda {
namespace {

using testing::DeviceArray;

struct Draw {
  std::vector<std::int32_t> tokens;
  std::vector<std::int32_t> from_candidates;
};

struct Case {
  std::vector<float> logits;         // [rows, vocab]
  std::vector<float> params;         // [rows, 4]
  std::vector<std::int32_t> banned;  // [rows, kSampleMaxSuppressed] or empty
  int vocab = 0;
  int rows() const { return static_cast<int>(params.size() / kSampleParamsPerRow); }
};

Draw draw(const Case& c, bool cluster, bool candidates) {
  DeviceArray<float> logits(c.logits);
  DeviceArray<float> params(c.params);
  DeviceArray<std::int32_t> banned(c.banned);
  DeviceArray<std::int32_t> out(static_cast<std::size_t>(c.rows()));
  DeviceArray<std::int32_t> from(static_cast<std::size_t>(c.rows()));
  out.poison();
  from.poison();
  SampleParams p{.logits = logits.data(),
                 .params = params.data(),
                 .out = out.data(),
                 .suppressed = c.banned.empty() ? nullptr : banned.data(),
                 .logits_stride = c.vocab,
                 .rows = c.rows(),
                 .vocab = c.vocab,
                 .cluster = cluster,
                 .candidates = candidates,
                 .drawn_from_candidates = from.data()};
  EXPECT_TRUE(p.validate().is_ok());
  launch_sample(p, nullptr);
  return {out.download(), from.download()};
}

// Rows of every policy the candidates serve, and a few they must hand back
// to the row (top_p close to 1, k close to the vocabulary).
std::vector<float> policies(int vocab, int rows, std::mt19937& rng) {
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  const float fixed[][3] = {
      {0.8f, 0.95f, 0.0f},   {1.0f, 0.9f, 0.0f},   {0.6f, 0.5f, 0.0f},
      {1.0f, 0.05f, 0.0f},   {1.0f, 0.0f, 40.0f},  {1.3f, 0.0f, 1.0f},
      {0.8f, 0.0f, 2.5f},    {1.0f, 0.999f, 0.0f}, {1.0f, 0.0f, static_cast<float>(vocab / 2)},
      {1.0f, 0.9999f, 0.0f}, {2.0f, 0.3f, 5.0f}};
  std::vector<float> out;
  for (int r = 0; r < rows; ++r) {
    const std::size_t n = sizeof(fixed) / sizeof(fixed[0]);
    const float* f = fixed[static_cast<std::size_t>(r) % n];
    float t = f[0], top_p = f[1], top_k = f[2];
    if (r >= static_cast<int>(n)) {  // random policies past the fixed ones
      t = 0.3f + 1.5f * unit(rng);
      top_p = r % 2 ? 0.0f : 0.1f + 0.89f * unit(rng);
      top_k = r % 2 ? std::floor(1.0f + 200.0f * unit(rng)) : 0.0f;
    }
    out.insert(out.end(), {t, top_p, top_k, unit(rng)});
  }
  return out;
}

Case make_case(int vocab, int rows, float stddev, unsigned seed) {
  std::mt19937 rng(seed);
  Case c;
  c.vocab = vocab;
  std::normal_distribution<float> dist(0.0f, stddev);
  c.logits.resize(static_cast<std::size_t>(rows) * vocab);
  for (float& x : c.logits) x = dist(rng);
  c.params = policies(vocab, rows, rng);
  return c;
}

void expect_same_tokens(const Case& c, bool cluster, const char* what) {
  const Draw fast = draw(c, cluster, true);
  const Draw row = draw(c, cluster, false);
  EXPECT_EQ(fast.tokens, row.tokens) << what << " vocab " << c.vocab << " cluster " << cluster;
  EXPECT_EQ(row.from_candidates, std::vector<std::int32_t>(row.tokens.size(), 0)) << what;
  for (std::size_t r = 0; r < fast.tokens.size(); ++r) {
    EXPECT_GE(fast.tokens[r], 0);
    EXPECT_LT(fast.tokens[r], c.vocab);
  }
}

class SampleCandidatesTest : public ::testing::TestWithParam<bool> {};
INSTANTIATE_TEST_SUITE_P(Kernels, SampleCandidatesTest, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? "Cluster" : "OneBlock";
                         });

// Peaked, moderate and nearly flat rows over small, odd and large
// vocabularies: the same token with and without candidates.
TEST_P(SampleCandidatesTest, SameTokenAsTheRowDraw) {
  CELLM_REQUIRE_GPU();
  for (const int vocab : {4097, 32000, 128256, 300001}) {
    for (const float stddev : {0.05f, 1.0f, 3.0f, 8.0f}) {
      const Case c = make_case(vocab, 24, stddev, static_cast<unsigned>(vocab + 100 * stddev));
      expect_same_tokens(c, GetParam(), "normal logits");
    }
  }
}

// The same on a vocabulary narrower than a block (small enough for
// compute-sanitizer's racecheck).
TEST_P(SampleCandidatesTest, SameTokenOnASmallVocabulary) {
  CELLM_REQUIRE_GPU();
  const int vocab = 384;
  for (const float stddev : {0.05f, 1.0f, 3.0f, 8.0f}) {
    const Case c = make_case(vocab, 24, stddev, static_cast<unsigned>(vocab + 100 * stddev));
    expect_same_tokens(c, GetParam(), "normal logits");
  }
}

// Exact ties in p across the candidates' edge and inside the kept set (few
// logit levels), and suppressed ids holding the argmax or most of the mass.
TEST_P(SampleCandidatesTest, TiesAndSuppressedIdsGiveTheRowsToken) {
  CELLM_REQUIRE_GPU();
  for (const int vocab : {5000, 128256}) {
    Case c = make_case(vocab, 22, 1.0f, static_cast<unsigned>(vocab));
    std::mt19937 rng(11);
    std::uniform_int_distribution<int> level(0, 7);
    for (float& x : c.logits) x = 1.5f * static_cast<float>(level(rng));
    expect_same_tokens(c, GetParam(), "tied logits");

    c = make_case(vocab, 22, 3.0f, static_cast<unsigned>(vocab + 1));
    c.banned.assign(static_cast<std::size_t>(c.rows()) * kSampleMaxSuppressed, -1);
    std::uniform_int_distribution<int> any(0, vocab - 1);
    for (int r = 0; r < c.rows(); ++r) {
      float* row = c.logits.data() + static_cast<std::size_t>(r) * vocab;
      int best = 0;
      for (int i = 1; i < vocab; ++i) best = row[i] > row[best] ? i : best;
      if (r % 2 == 1) row[best] = 60.0f;  // the suppressed id holds nearly all the mass
      std::int32_t* slots = c.banned.data() + static_cast<std::size_t>(r) * kSampleMaxSuppressed;
      slots[0] = best;
      for (int j = 1; j < r % kSampleMaxSuppressed; ++j) slots[j] = any(rng);
    }
    expect_same_tokens(c, GetParam(), "suppressed ids");
  }
}

// Where the kept set is a few hundred tokens the draw must take the
// candidates (so the tests above compare two paths), and where it is most
// of a large vocabulary it must fall back to the row.
TEST_P(SampleCandidatesTest, CandidatesAreTakenWhenTheKeptSetIsSmall) {
  CELLM_REQUIRE_GPU();
  const int vocab = 128256;
  Case c;
  c.vocab = vocab;
  std::mt19937 rng(5);
  std::normal_distribution<float> peaked(0.0f, 3.0f);
  const int rows = 4;
  c.logits.resize(static_cast<std::size_t>(rows) * vocab);
  for (float& x : c.logits) x = peaked(rng);
  c.params = {0.8f, 0.95f, 0.0f,  0.3f,   // ~1,200 kept
              1.0f, 0.0f,  40.0f, 0.7f,   // top-k 40
              1.0f, 0.5f,  0.0f,  0.1f,   // a few dozen kept
              1.0f, 0.0f,  0.0f,  0.5f};  // no top-k or top-p: the row's coin walk
  const Draw d = draw(c, GetParam(), true);
  EXPECT_EQ(d.from_candidates, (std::vector<std::int32_t>{1, 1, 1, 0}));
  EXPECT_EQ(d.tokens, draw(c, GetParam(), false).tokens);

  // Nearly flat: top-p 0.95 keeps ~120K ids, more than one block holds (a
  // cluster gathers its candidates in one block too).
  std::normal_distribution<float> flat(0.0f, 0.05f);
  for (float& x : c.logits) x = flat(rng);
  const Draw f = draw(c, GetParam(), true);
  EXPECT_EQ(f.from_candidates, (std::vector<std::int32_t>{0, 0, 0, 0}));
  EXPECT_EQ(f.tokens, draw(c, GetParam(), false).tokens);
}

}  // namespace
}  // namespace cellm::cuda
