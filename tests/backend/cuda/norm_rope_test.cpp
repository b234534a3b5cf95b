// RMSNorm (+ fused residual, (1 + w) variant), per-head QK-norm and RoPE
// against float64 CPU references on random inputs of odd sizes.
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "backend/cuda/kernels/qk_norm.cuh"
#include "backend/cuda/kernels/rms_norm.cuh"
#include "backend/cuda/kernels/rope.cuh"
#include "cellm/status.h"
#include "gpu_test_util.h"

namespace cellm::cuda {
namespace {

using testing::DeviceArray;
using testing::kBf16Nmse;
using testing::nmse;
using testing::random_bf16;
using testing::to_float;

struct NormCase {
  int rows;
  int dim;
  bool residual;
  float offset;
};

class RmsNormTest : public ::testing::TestWithParam<NormCase> {};

TEST_P(RmsNormTest, MatchesReference) {
  CELLM_REQUIRE_GPU();
  const NormCase c = GetParam();
  std::mt19937 rng(c.rows * 131 + c.dim);
  const auto x = random_bf16(static_cast<std::size_t>(c.rows) * c.dim, rng, -2.0f, 2.0f);
  const auto res = random_bf16(x.size(), rng, -2.0f, 2.0f);
  const auto w = random_bf16(c.dim, rng, -1.0f, 1.0f);
  DeviceArray<bf16> dx(x), dres(res), dw(w), dout(x.size());
  dout.poison();
  RmsNormParams p{.x = dx.data(),
                  .residual = c.residual ? dres.data() : nullptr,
                  .weight = dw.data(),
                  .out = dout.data(),
                  .rows = c.rows,
                  .dim = c.dim,
                  .eps = 1e-6f,
                  .weight_offset = c.offset};
  ASSERT_TRUE(p.validate().is_ok()) << p.validate().to_string();
  launch_rms_norm(p, nullptr);

  const auto xf = to_float(x);
  const auto rf = to_float(res);
  const auto wf = to_float(w);
  std::vector<double> ref(x.size());
  std::vector<double> ref_res(x.size());
  for (int r = 0; r < c.rows; ++r) {
    double ss = 0.0;
    for (int i = 0; i < c.dim; ++i) {
      const std::size_t k = static_cast<std::size_t>(r) * c.dim + i;
      // The residual stream is bf16: the kernel rounds the sum before norming.
      const double h = c.residual ? testing::from_bf16(testing::to_bf16(xf[k] + rf[k])) : xf[k];
      ref_res[k] = h;
      ss += h * h;
    }
    const double inv = 1.0 / std::sqrt(ss / c.dim + 1e-6);
    for (int i = 0; i < c.dim; ++i) {
      const std::size_t k = static_cast<std::size_t>(r) * c.dim + i;
      ref[k] = ref_res[k] * inv * (wf[i] + c.offset);
    }
  }
  EXPECT_LT(nmse(to_float(dout.download()), ref), kBf16Nmse);
  if (c.residual) {
    EXPECT_LT(nmse(to_float(dres.download()), ref_res), 1e-12);  // exact
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, RmsNormTest,
                         ::testing::Values(NormCase{1, 8, false, 0.0f}, NormCase{3, 64, true, 0.0f},
                                           NormCase{111, 576, true, 1.0f},
                                           NormCase{17, 2048, false, 1.0f},
                                           NormCase{5, 8200, true, 0.0f}),
                         [](const auto& info) {
                           const NormCase& c = info.param;
                           return fmt::format("rows{}_dim{}{}{}", c.rows, c.dim,
                                              c.residual ? "_residual" : "",
                                              c.offset > 0 ? "_offset" : "");
                         });

TEST(QkNormTest, NormalisesEveryHeadInPlaceInsideAFusedBuffer) {
  CELLM_REQUIRE_GPU();
  for (const int hd : {16, 64, 128, 256}) {
    const int tokens = 7, heads = 4, kv_heads = 2;
    const int stride = (heads + 2 * kv_heads) * hd;  // fused q | k | v
    std::mt19937 rng(hd);
    const auto qkv = random_bf16(static_cast<std::size_t>(tokens) * stride, rng, -3.0f, 3.0f);
    const auto qw = random_bf16(hd, rng);
    const auto kw = random_bf16(hd, rng);
    DeviceArray<bf16> d(qkv), dqw(qw), dkw(kw);
    QkNormParams p{.q = d.data(),
                   .k = d.data() + heads * hd,
                   .q_weight = dqw.data(),
                   .k_weight = dkw.data(),
                   .q_stride = stride,
                   .k_stride = stride,
                   .num_tokens = tokens,
                   .num_heads = heads,
                   .num_kv_heads = kv_heads,
                   .head_dim = hd,
                   .eps = 1e-6f,
                   .weight_offset = 1.0f};
    ASSERT_TRUE(p.validate().is_ok());
    launch_qk_norm(p, nullptr);
    const auto in = to_float(qkv);
    const auto qwf = to_float(qw);
    const auto kwf = to_float(kw);
    std::vector<double> ref(in.begin(), in.end());
    for (int t = 0; t < tokens; ++t) {
      for (int h = 0; h < heads + kv_heads; ++h) {
        const std::size_t base = static_cast<std::size_t>(t) * stride + h * hd;
        double ss = 0.0;
        for (int i = 0; i < hd; ++i) ss += double(in[base + i]) * in[base + i];
        const double inv = 1.0 / std::sqrt(ss / hd + 1e-6);
        for (int i = 0; i < hd; ++i) {
          ref[base + i] = in[base + i] * inv * ((h < heads ? qwf[i] : kwf[i]) + 1.0);
        }
      }
    }
    const auto out = to_float(d.download());
    EXPECT_LT(nmse(out, ref), kBf16Nmse) << "head_dim " << hd;
    // v columns are untouched.
    for (int t = 0; t < tokens; ++t) {
      for (int i = (heads + kv_heads) * hd; i < stride; ++i) {
        ASSERT_EQ(out[static_cast<std::size_t>(t) * stride + i],
                  in[static_cast<std::size_t>(t) * stride + i]);
      }
    }
  }
}

struct RopeCase {
  int head_dim;
  int rotary_dim;
  double theta;
  int max_position;
};

class RopeTest : public ::testing::TestWithParam<RopeCase> {};

TEST_P(RopeTest, RotatesHalvesLikeHuggingFace) {
  CELLM_REQUIRE_GPU();
  const RopeCase c = GetParam();
  const int tokens = 37, heads = 3, kv_heads = 1;
  const int stride = (heads + 2 * kv_heads) * c.head_dim;
  std::mt19937 rng(c.head_dim + c.rotary_dim);
  const auto qkv = random_bf16(static_cast<std::size_t>(tokens) * stride, rng);
  std::vector<std::int32_t> positions(tokens);
  std::uniform_int_distribution<int> pos_dist(0, c.max_position);
  for (auto& p : positions) p = pos_dist(rng);
  positions[0] = 0;
  const int half = c.rotary_dim / 2;
  std::vector<float> inv_freq(half);
  for (int i = 0; i < half; ++i) {
    inv_freq[i] = static_cast<float>(1.0 / std::pow(c.theta, 2.0 * i / c.rotary_dim));
  }
  DeviceArray<bf16> d(qkv);
  DeviceArray<std::int32_t> dpos(positions);
  DeviceArray<float> dfreq(inv_freq);
  RopeParams p{.q = d.data(),
               .k = d.data() + heads * c.head_dim,
               .positions = dpos.data(),
               .inv_freq = dfreq.data(),
               .q_stride = stride,
               .k_stride = stride,
               .num_tokens = tokens,
               .num_heads = heads,
               .num_kv_heads = kv_heads,
               .head_dim = c.head_dim,
               .rotary_dim = c.rotary_dim};
  ASSERT_TRUE(p.validate().is_ok()) << p.validate().to_string();
  launch_rope(p, nullptr);
  const auto in = to_float(qkv);
  std::vector<double> ref(in.begin(), in.end());
  for (int t = 0; t < tokens; ++t) {
    for (int h = 0; h < heads + kv_heads; ++h) {
      const std::size_t base = static_cast<std::size_t>(t) * stride + h * c.head_dim;
      for (int i = 0; i < half; ++i) {
        // The angle is a float32 product, as in Hugging Face.
        const double angle = static_cast<float>(positions[t]) * inv_freq[i];
        const double x1 = in[base + i];
        const double x2 = in[base + i + half];
        ref[base + i] = x1 * std::cos(angle) - x2 * std::sin(angle);
        ref[base + i + half] = x2 * std::cos(angle) + x1 * std::sin(angle);
      }
    }
  }
  EXPECT_LT(nmse(to_float(d.download()), ref), kBf16Nmse);
}

INSTANTIATE_TEST_SUITE_P(Variants, RopeTest,
                         ::testing::Values(RopeCase{16, 16, 10000.0, 100},
                                           RopeCase{64, 64, 500000.0, 8191},
                                           RopeCase{128, 64, 10000.0, 4096},  // partial rotary
                                           RopeCase{96, 96, 1e6, 131071},     // long context
                                           RopeCase{256, 256, 1e6, 32768}),
                         [](const auto& info) {
                           const RopeCase& c = info.param;
                           return fmt::format("hd{}_rot{}_pos{}", c.head_dim, c.rotary_dim,
                                              c.max_position);
                         });

}  // namespace
}  // namespace cellm::cuda
