// Decode attention v2 with the o projection fused (AttentionParams::o_weight):
// the attention output equals the unfused launch's bit for bit, the residual
// stream gets bf16(x + bf16(out @ o^T)) against a float64 product of that
// output, repeated launches give the same bits and leave the counters at
// zero, a padding row leaves the stream as it was; plus the shapes it takes
// and the calls it refuses (these last run without a GPU).
#include <cmath>
#include <cstddef>
#include <cstring>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "backend/cuda/kernels/attention.cuh"
#include "cellm/status.h"
#include "decode_reference.h"
#include "gpu_test_util.h"

namespace cellm::cuda {
namespace {

using testing::DecodeCase;
using testing::DecodeDevice;
using testing::DecodeScenario;
using testing::DeviceArray;
using testing::to_float;

constexpr int kCluster = 8;

struct FusedCase {
  int heads;
  int kv_heads;
  int head_dim;
  int history;  // keys of the one token, its own included
  int o_rows;
  int split_min_keys;
  bool padding;  // the token is a padding row
  std::uint32_t seed;
};

// Everything one fused launch reads and writes besides the attention's own.
struct FusedO {
  DeviceArray<bf16> weight, residual;
  DeviceArray<float> partials;
  DeviceArray<std::int32_t> counters;
  std::vector<bf16> weight_host, residual_host;

  FusedO(const FusedCase& c, std::mt19937& rng)
      : weight_host(testing::random_bf16(static_cast<std::size_t>(c.o_rows) * c.heads * c.head_dim,
                                         rng, -0.5f, 0.5f)),
        residual_host(testing::random_bf16(static_cast<std::size_t>(c.o_rows), rng, -2.0f, 2.0f)) {
    weight.assign(weight_host);
    residual.assign(residual_host);
    partials.assign(std::vector<float>(static_cast<std::size_t>(c.kv_heads) * c.o_rows, 0.0f));
    counters.assign(std::vector<std::int32_t>(kAttentionMaxCluster, 0));
  }

  void attach(AttentionParams& p, int o_rows) const {
    p.o_weight = weight.data();
    p.o_residual = residual.data();
    p.o_partials = partials.data();
    p.o_counters = counters.data();
    p.o_rows = o_rows;
  }
};

class FusedOTest : public ::testing::TestWithParam<FusedCase> {};

TEST_P(FusedOTest, AddsTheProjectionOfTheUnfusedOutput) {
  CELLM_REQUIRE_GPU();
  const FusedCase fc = GetParam();
  DecodeCase c{fc.heads, fc.kv_heads, fc.head_dim,       1,      fc.history, fc.history, 0,
               0.0f,     kCluster,    fc.split_min_keys, fc.seed};
  DecodeScenario s = testing::make_decode_scenario(c);
  if (fc.padding) s.slots[0] = -1;
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  DecodeDevice d(c, s);
  AttentionParams p = d.params(c, s, scale);
  p.cluster = kCluster;
  ASSERT_TRUE(p.validate_decode_v2().is_ok()) << p.validate_decode_v2().to_string();
  d.out.poison();
  launch_attention_decode_v2(p, nullptr);
  const std::vector<bf16> unfused = d.out.download();

  std::mt19937 rng(fc.seed + 100);
  FusedO o(fc, rng);
  o.attach(p, fc.o_rows);
  ASSERT_TRUE(p.validate_decode_v2().is_ok()) << p.validate_decode_v2().to_string();
  std::vector<bf16> first;
  for (int round = 0; round < 3; ++round) {
    o.residual.assign(o.residual_host);
    d.out.poison();
    launch_attention_decode_v2(p, nullptr);
    const std::vector<bf16> out = d.out.download();
    ASSERT_EQ(0, std::memcmp(out.data(), unfused.data(), out.size() * sizeof(bf16)))
        << "round " << round << ": the fused launch's attention output differs";
    const std::vector<bf16> x = o.residual.download();
    for (const std::int32_t counter : o.counters.download()) ASSERT_EQ(counter, 0);
    if (round == 0) {
      first = x;
    } else {
      ASSERT_EQ(0, std::memcmp(x.data(), first.data(), x.size() * sizeof(bf16)))
          << "round " << round << ": two launches of the same step differ";
    }
  }

  // x + bf16(out @ o^T) from the bf16 output, in float64; the kernel sums in
  // float in another order, so bf16(sum) may land one bf16 step away.
  const std::vector<float> out = to_float(unfused);
  const std::vector<float> w = to_float(o.weight_host);
  const std::vector<float> x0 = to_float(o.residual_host);
  const std::vector<float> got = to_float(first);
  const std::size_t cols = static_cast<std::size_t>(c.heads) * c.head_dim;
  int exact = 0;
  for (std::size_t i = 0; i < static_cast<std::size_t>(fc.o_rows); ++i) {
    double sum = 0.0;
    for (std::size_t j = 0; j < cols; ++j) sum += static_cast<double>(out[j]) * w[i * cols + j];
    const float rounded = __bfloat162float(__float2bfloat16_rn(static_cast<float>(sum)));
    const float want = __bfloat162float(__float2bfloat16_rn(x0[i] + rounded));
    if (fc.padding) {
      ASSERT_EQ(got[i], x0[i]) << "row " << i << ": a padding row changed the stream";
      continue;
    }
    const double bound = std::ldexp(std::fabs(sum) + std::fabs(x0[i]), -7) + 1e-6;
    ASSERT_LE(std::fabs(got[i] - want), bound) << "row " << i << " sum " << sum;
    if (got[i] == want) ++exact;
  }
  // Summation order moves a rounding now and then, not most of them.
  if (!fc.padding) EXPECT_GE(exact, fc.o_rows * 9 / 10);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, FusedOTest,
    ::testing::Values(
        // Llama-3.2-1B: 512 keys in four splits of 128; the others of the cluster hold none.
        FusedCase{32, 8, 64, 512, 2048, 128, false, 1},
        // One used split (its merge is the cluster's too), and the token's own key alone.
        FusedCase{32, 8, 64, 100, 2048, 128, false, 2},
        FusedCase{32, 8, 64, 1, 2048, 128, false, 3},
        // Every split used, blocks of more than one window of the cell table.
        FusedCase{32, 8, 64, 5000, 2048, 128, false, 4},
        // 128-wide heads, two a kv head (their three key stages leave room for 256 columns):
        // 128 and 160 rows a block.
        FusedCase{8, 4, 128, 700, 1024, 128, false, 5},
        FusedCase{10, 5, 128, 300, 1280, 128, false, 6},
        // A padding row attends nothing and adds zero.
        FusedCase{32, 8, 64, 512, 2048, 128, true, 7}),
    [](const auto& info) {
      const FusedCase& c = info.param;
      return fmt::format("h{}_kv{}_hd{}_len{}_rows{}{}", c.heads, c.kv_heads, c.head_dim, c.history,
                         c.o_rows, c.padding ? "_padding" : "");
    });

// ---- host-only checks (no device needed) ----

// One token of Llama-3.2-1B's heads on one cluster of 8 splits, with the o
// projection's pointers: what validate() accepts.
AttentionParams fused_params() {
  AttentionParams p = testing::unlaunched_decode_params();
  p.q_stride = 48 * 64;
  p.out_stride = 32 * 64;
  p.num_tokens = 1;
  p.num_heads = 32;
  p.num_kv_heads = 8;
  p.num_splits = kCluster;
  p.cluster = kCluster;
  p.o_weight = p.q;
  p.o_residual = p.out;
  p.o_partials = p.workspace;
  p.o_counters = p.counters;
  p.o_rows = 2048;
  return p;
}

void expect_refused(const AttentionParams& p, const char* word) {
  const Status status = p.validate_decode_v2();
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument) << word;
  EXPECT_NE(status.message().find(word), std::string::npos) << status.to_string();
}

TEST(FusedOValidateTest, AcceptsAOneTokenClusterLaunch) {
  EXPECT_TRUE(fused_params().validate_decode_v2().is_ok())
      << fused_params().validate_decode_v2().to_string();
}

TEST(FusedOValidateTest, RefusesWhatItDoesNotServe) {
  AttentionParams p = fused_params();
  p.num_tokens = 2;
  expect_refused(p, "one token");
  p = fused_params();
  p.num_splits = 16;
  expect_refused(p, "splits");
  p = fused_params();
  p.o_rows = 2048 + 32;  // not 32 rows for each of the cluster's blocks
  expect_refused(p, "hidden size");
  p = fused_params();
  p.o_partials = nullptr;
  expect_refused(p, "o_partials");
  p = fused_params();
  p.o_counters = nullptr;
  expect_refused(p, "o_counters");
  p = fused_params();
  p.num_kv_heads = 1;  // 32 q heads for one kv head: two head groups
  expect_refused(p, "q heads per kv head");
  p = fused_params();
  p.head_dim = 256;
  p.q_stride = 48 * 256;
  p.out_stride = 32 * 256;
  expect_refused(p, "head dim");
}

TEST(FusedOValidateTest, ShapesThatFitAnH200Block) {
  constexpr int kOptIn = 227 * 1024;
  // Llama-3.2-1B: 256 rows of 256 columns a block, 128 KiB of weights.
  EXPECT_STREQ(attention_fused_o_unsupported(2048, 32, 8, 64, kCluster, kOptIn), "");
  EXPECT_LE(attention_decode_v2_fused_o_smem_bytes(64, 32, 8, 2048, kCluster),
            static_cast<std::size_t>(kOptIn));
  // Qwen3-0.6B: 128 rows of 256 columns.
  EXPECT_STREQ(attention_fused_o_unsupported(1024, 16, 8, 128, kCluster, kOptIn), "");
  // Four 128-wide heads a kv head: 512 columns beside three key stages do not fit.
  EXPECT_STRNE(attention_fused_o_unsupported(1024, 8, 2, 128, kCluster, kOptIn), "");
  // Llama-3.1-8B: 512 rows of 512 columns, 512 KiB a block.
  EXPECT_STRNE(attention_fused_o_unsupported(4096, 32, 8, 128, kCluster, kOptIn), "");
  // Without clusters there is no merge to fuse into.
  EXPECT_STRNE(attention_fused_o_unsupported(2048, 32, 8, 64, 1, kOptIn), "");
}

}  // namespace
}  // namespace cellm::cuda
