// Op-level checks of the CPU forward's building blocks against direct
// double-precision formulas.
#include <gtest/gtest.h>

#include <cmath>
#include <numbers>
#include <random>
#include <vector>

#include "backend/cpu/ops.h"

namespace cellm::cpu {
namespace {

std::vector<float> random_vec(std::size_t n, std::uint64_t seed, float scale = 1.0f) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(-scale, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

TEST(CpuOps, RmsNormMatchesFormula) {
  const int rows = 3, dim = 37;
  const std::vector<float> x = random_vec(rows * dim, 1, 3.0f);
  const std::vector<float> w = random_vec(dim, 2);
  for (bool offset : {false, true}) {
    std::vector<float> out(x.size());
    rms_norm(x.data(), w.data(), rows, dim, 1e-6f, offset, out.data());
    for (int r = 0; r < rows; ++r) {
      double ss = 0;
      for (int i = 0; i < dim; ++i) ss += double(x[r * dim + i]) * x[r * dim + i];
      const double inv = 1.0 / std::sqrt(ss / dim + 1e-6);
      for (int i = 0; i < dim; ++i) {
        const double want = x[r * dim + i] * inv * (offset ? 1.0 + w[i] : w[i]);
        EXPECT_NEAR(out[r * dim + i], want, 1e-5 * (1 + std::abs(want))) << r << "," << i;
      }
    }
  }
  // In place gives the same result.
  std::vector<float> a(x), b(x.size());
  rms_norm(x.data(), w.data(), rows, dim, 1e-6f, false, b.data());
  rms_norm(a.data(), w.data(), rows, dim, 1e-6f, false, a.data());
  EXPECT_EQ(a, b);
}

TEST(CpuOps, RopeDefaultAndLinearFrequencies) {
  model::RopeSpec rope;
  rope.theta = 10000.0;
  const std::vector<float> f = rope_inv_freq(rope, 64);
  ASSERT_EQ(f.size(), 32u);
  for (int i = 0; i < 32; ++i) {
    EXPECT_NEAR(f[i], std::pow(10000.0, -2.0 * i / 64), 1e-6 * std::pow(10000.0, -2.0 * i / 64));
  }
  rope.type = model::RopeType::kLinear;
  rope.factor = 4.0;
  const std::vector<float> lin = rope_inv_freq(rope, 64);
  for (int i = 0; i < 32; ++i) EXPECT_NEAR(lin[i], f[i] / 4.0, 1e-6 * f[i]);
  // Partial rotary: only rotary_dim / 2 pairs, with the exponent over rotary_dim.
  rope = {};
  rope.rotary_dim = 16;
  const std::vector<float> part = rope_inv_freq(rope, 64);
  ASSERT_EQ(part.size(), 8u);
  EXPECT_NEAR(part[1], std::pow(10000.0, -2.0 / 16), 1e-7);
}

TEST(CpuOps, RopeTableFollowsTheCheckpointDtype) {
  model::RopeSpec rope;
  rope.theta = 1000000.0;
  const std::vector<float> f32 = rope_inv_freq(rope, 16);
  const std::vector<float> bf = rope_inv_freq(rope, 16, DType::kBF16);
  const std::vector<float> hf = rope_inv_freq(rope, 16, DType::kF16);
  bool differs = false;
  for (std::size_t i = 0; i < f32.size(); ++i) {
    EXPECT_EQ(bf[i], bf16_to_f32(f32_to_bf16(f32[i])));
    EXPECT_EQ(hf[i], f16_to_f32(f32_to_f16(f32[i])));
    differs = differs || bf[i] != f32[i];
  }
  EXPECT_TRUE(differs);
}

TEST(CpuOps, RopeLlama3BandsFollowTheFormula) {
  model::RopeSpec rope;
  rope.type = model::RopeType::kLlama3;
  rope.theta = 500000.0;
  rope.factor = 8.0;
  rope.low_freq_factor = 1.0;
  rope.high_freq_factor = 4.0;
  rope.original_max_position = 8192;
  const int dim = 128;
  const std::vector<float> f = rope_inv_freq(rope, dim);
  int high = 0, low = 0, mid = 0;
  for (int i = 0; i < dim / 2; ++i) {
    const double base = std::pow(500000.0, -2.0 * i / dim);
    const double wavelen = 2 * std::numbers::pi / base;
    double want;
    if (wavelen < 8192.0 / 4.0) {
      want = base, ++high;
    } else if (wavelen > 8192.0) {
      want = base / 8.0, ++low;
    } else {
      const double s = (8192.0 / wavelen - 1.0) / 3.0;
      want = (1 - s) * base / 8.0 + s * base, ++mid;
    }
    EXPECT_NEAR(f[i], want, 2e-6 * want) << i;
  }
  EXPECT_GT(high, 0);  // every band is exercised
  EXPECT_GT(low, 0);
  EXPECT_GT(mid, 0);
}

TEST(CpuOps, ApplyRopeRotatesHalvesAndKeepsTheTail) {
  const int rows = 4, heads = 3, head_dim = 12;
  model::RopeSpec rope;
  rope.theta = 100.0;
  rope.rotary_dim = 8;  // partial: dims 8..11 pass through
  const std::vector<float> inv = rope_inv_freq(rope, head_dim);
  const std::vector<float> x = random_vec(rows * heads * head_dim, 3);
  const std::vector<std::int64_t> pos = {0, 1, 17, 300};
  std::vector<float> y(x);
  apply_rope(y.data(), rows, heads, head_dim, inv, pos.data());
  for (int r = 0; r < rows; ++r) {
    for (int h = 0; h < heads; ++h) {
      const float* a = x.data() + (r * heads + h) * head_dim;
      const float* b = y.data() + (r * heads + h) * head_dim;
      for (int i = 0; i < 4; ++i) {
        const double ang = double(pos[r]) * std::pow(100.0, -2.0 * i / 8);
        // (a_i + i a_{i+4}) * e^{i ang} in the rotate_half layout.
        const double re = a[i] * std::cos(ang) - a[i + 4] * std::sin(ang);
        const double im = a[i + 4] * std::cos(ang) + a[i] * std::sin(ang);
        EXPECT_NEAR(b[i], re, 1e-4);
        EXPECT_NEAR(b[i + 4], im, 1e-4);
      }
      for (int i = 8; i < head_dim; ++i) EXPECT_EQ(b[i], a[i]);
      if (pos[r] == 0) {
        for (int i = 0; i < head_dim; ++i) EXPECT_EQ(b[i], a[i]);
      }
    }
  }
}

TEST(CpuOps, Activations) {
  // Reference values of the tanh-approximated GELU and of SiLU.
  EXPECT_NEAR(gelu_tanh(1.0f), 0.841192, 1e-6);
  EXPECT_NEAR(gelu_tanh(-2.0f), -0.0454023, 1e-6);
  EXPECT_NEAR(silu(1.0f), 0.7310586, 1e-6);
  EXPECT_NEAR(silu(-3.0f), -0.1422776, 1e-6);
  std::vector<float> g = {1.0f, -3.0f}, u = {2.0f, 0.5f};
  gated_activation(g.data(), u.data(), 2, model::Activation::kSilu);
  EXPECT_NEAR(g[0], 2 * 0.7310586, 1e-6);
  EXPECT_NEAR(g[1], 0.5 * -0.1422776, 1e-6);
  std::vector<float> c = {0.0f, 100.0f, -1.0f};
  soft_cap(c.data(), 3, 30.0f);
  EXPECT_EQ(c[0], 0.0f);
  EXPECT_NEAR(c[1], 30 * std::tanh(100.0 / 30), 1e-5);
  EXPECT_NEAR(c[2], 30 * std::tanh(-1.0 / 30), 1e-6);
}

struct AttentionCase {
  bool softcap;
};

class CpuAttention : public ::testing::TestWithParam<AttentionCase> {};

TEST_P(CpuAttention, MatchesNaiveReferenceWithGqaAndArbitraryCells) {
  const int cells = 20, heads = 6, kv_heads = 2, dim = 8;
  const std::vector<float> k = random_vec(cells * kv_heads * dim, 10, 2.0f);
  const std::vector<float> v = random_vec(cells * kv_heads * dim, 11);
  // Rows read scattered, reordered, windowed lists and one reads nothing.
  const std::vector<std::vector<std::int32_t>> lists = {
      {3}, {0, 5, 9}, {19, 2, 7, 7, 11}, {}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}};
  std::vector<std::span<const std::int32_t>> spans(lists.begin(), lists.end());
  const int rows = static_cast<int>(lists.size());
  const std::vector<float> q = random_vec(rows * heads * dim, 12, 2.0f);
  AttentionParams p{heads, kv_heads, dim, 0.3f, std::nullopt};
  if (GetParam().softcap) p.softcap = 1.5f;
  std::vector<float> out(rows * heads * dim, -7.0f);
  attend_cells(q.data(), k.data(), v.data(), spans, p, out.data());
  for (int r = 0; r < rows; ++r) {
    for (int h = 0; h < heads; ++h) {
      const int g = h / (heads / kv_heads);
      std::vector<double> s;
      for (int c : lists[r]) {
        double dot = 0;
        for (int i = 0; i < dim; ++i)
          dot += double(q[(r * heads + h) * dim + i]) * k[(c * kv_heads + g) * dim + i];
        dot *= 0.3;
        if (p.softcap) dot = 1.5 * std::tanh(dot / 1.5);
        s.push_back(dot);
      }
      double mx = -1e300, tot = 0;
      for (double e : s) mx = std::max(mx, e);
      for (double& e : s) tot += (e = std::exp(e - mx));
      for (int i = 0; i < dim; ++i) {
        double want = 0;
        for (std::size_t j = 0; j < s.size(); ++j)
          want += s[j] / tot * v[(lists[r][j] * kv_heads + g) * dim + i];
        EXPECT_NEAR(out[(r * heads + h) * dim + i], want, 1e-5) << r << " " << h << " " << i;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Caps, CpuAttention,
                         ::testing::Values(AttentionCase{false}, AttentionCase{true}),
                         [](const auto& info) { return info.param.softcap ? "softcap" : "plain"; });

TEST(CpuOps, SingleCellAttentionReturnsItsValue) {
  const std::vector<float> k = random_vec(3 * 1 * 4, 20);
  const std::vector<float> v = random_vec(3 * 1 * 4, 21);
  const std::vector<float> q = random_vec(2 * 4, 22, 50.0f);
  const std::int32_t cell[] = {2};
  std::vector<std::span<const std::int32_t>> spans = {cell};
  std::vector<float> out(2 * 4);
  attend_cells(q.data(), k.data(), v.data(), spans, {2, 1, 4, 1.0f, std::nullopt}, out.data());
  for (int h = 0; h < 2; ++h) {
    for (int i = 0; i < 4; ++i) EXPECT_FLOAT_EQ(out[h * 4 + i], v[2 * 4 + i]);
  }
}

}  // namespace
}  // namespace cellm::cpu
