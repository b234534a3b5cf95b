// Embedding gather, KV scatter into cells (+ cell-table writes), the gated
// MLP activation and the logit soft cap against CPU references.
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "backend/cuda/kernels/embedding.cuh"
#include "backend/cuda/kernels/gated_mlp.cuh"
#include "backend/cuda/kernels/kv_scatter.cuh"
#include "backend/cuda/kernels/soft_cap.cuh"
#include "cellm/status.h"
#include "gpu_test_util.h"

namespace cellm::cuda {
namespace {

using testing::DeviceArray;
using testing::from_bf16;
using testing::kBf16Nmse;
using testing::nmse;
using testing::random_bf16;
using testing::to_float;

TEST(EmbeddingTest, GathersScaledRowsAndZeroesBadIds) {
  CELLM_REQUIRE_GPU();
  const int vocab = 1001, dim = 136;
  std::mt19937 rng(7);
  const auto table = random_bf16(static_cast<std::size_t>(vocab) * dim, rng);
  const std::vector<std::int32_t> tokens = {0, 1000, 17, 17, -1, 1001, 512};
  DeviceArray<bf16> dtable(table), dout(tokens.size() * dim);
  DeviceArray<std::int32_t> dtokens(tokens);
  dout.poison();
  const float scale = 25.25f;
  EmbeddingParams p{.tokens = dtokens.data(),
                    .table = dtable.data(),
                    .out = dout.data(),
                    .num_tokens = static_cast<int>(tokens.size()),
                    .vocab = vocab,
                    .dim = dim,
                    .scale = scale};
  ASSERT_TRUE(p.validate().is_ok());
  launch_embedding(p, nullptr);
  const auto out = to_float(dout.download());
  for (std::size_t t = 0; t < tokens.size(); ++t) {
    const bool valid = tokens[t] >= 0 && tokens[t] < vocab;
    for (int i = 0; i < dim; ++i) {
      const float expect =
          valid ? from_bf16(testing::to_bf16(from_bf16(table[tokens[t] * dim + i]) * scale)) : 0.0f;
      ASSERT_EQ(out[t * dim + i], expect) << "token " << t << " dim " << i;
    }
  }
}

TEST(KvScatterTest, WritesCellsAndTableEntriesAndSkipsPadding) {
  CELLM_REQUIRE_GPU();
  const int tokens = 5, kv_heads = 2, hd = 64, max_cells = 9, max_seqs = 3, table_stride = 16;
  const int stride = (4 + 2 * kv_heads) * hd;  // fused q(4 heads) | k | v
  std::mt19937 rng(3);
  const auto qkv = random_bf16(static_cast<std::size_t>(tokens) * stride, rng);
  const std::vector<std::int32_t> cells = {5, 2, 7, 0, 1};
  const std::vector<std::int32_t> slots = {1, 1, 2, -1, 0};
  const std::vector<std::int32_t> positions = {3, 4, 0, 0, 15};
  DeviceArray<bf16> dqkv(qkv), kpool(static_cast<std::size_t>(max_cells) * kv_heads * hd),
      vpool(kpool.size());
  DeviceArray<std::int32_t> dcells(cells), dslots(slots), dpos(positions);
  std::vector<std::int32_t> table(static_cast<std::size_t>(max_seqs) * table_stride, -7);
  DeviceArray<std::int32_t> dtable(table);
  kpool.poison();
  vpool.poison();
  KvScatterParams p{.k = dqkv.data() + 4 * hd,
                    .v = dqkv.data() + (4 + kv_heads) * hd,
                    .k_pool = kpool.data(),
                    .v_pool = vpool.data(),
                    .cells = dcells.data(),
                    .seq_slots = dslots.data(),
                    .positions = dpos.data(),
                    .cell_table = dtable.data(),
                    .k_stride = stride,
                    .v_stride = stride,
                    .num_tokens = tokens,
                    .num_kv_heads = kv_heads,
                    .head_dim = hd,
                    .max_cells = max_cells,
                    .max_seqs = max_seqs,
                    .table_stride = table_stride};
  ASSERT_TRUE(p.validate().is_ok()) << p.validate().to_string();
  launch_kv_scatter(p, nullptr);
  const auto k = kpool.download();
  const auto v = vpool.download();
  const int row = kv_heads * hd;
  for (int t = 0; t < tokens; ++t) {
    for (int i = 0; i < row; ++i) {
      const std::size_t src = static_cast<std::size_t>(t) * stride;
      ASSERT_EQ(std::bit_cast<std::uint16_t>(k[cells[t] * row + i]),
                std::bit_cast<std::uint16_t>(qkv[src + 4 * hd + i]));
      ASSERT_EQ(std::bit_cast<std::uint16_t>(v[cells[t] * row + i]),
                std::bit_cast<std::uint16_t>(qkv[src + (4 + kv_heads) * hd + i]));
    }
  }
  // Cells nobody wrote keep their poison.
  EXPECT_TRUE(std::isnan(from_bf16(k[3 * row])));
  table[1 * table_stride + 3] = 5;
  table[1 * table_stride + 4] = 2;
  table[2 * table_stride + 0] = 7;
  table[0 * table_stride + 15] = 1;  // the padding row (slot -1) wrote no entry
  EXPECT_EQ(dtable.download(), table);
}

TEST(GatedMlpTest, FusedAndSeparateLayoutsBothActivations) {
  CELLM_REQUIRE_GPU();
  for (const auto act : {GateActivation::kSilu, GateActivation::kGeluTanh}) {
    for (const bool fused : {true, false}) {
      const int rows = 13, inter = 1544;
      std::mt19937 rng(rows + inter + fused);
      const auto gate_up =
          random_bf16(static_cast<std::size_t>(rows) * 2 * inter, rng, -4.0f, 4.0f);
      DeviceArray<bf16> d(gate_up), dout(static_cast<std::size_t>(rows) * inter);
      dout.poison();
      GatedMlpParams p;
      if (fused) {
        p = GatedMlpParams{.gate = d.data(),
                           .up = d.data() + inter,
                           .out = dout.data(),
                           .gate_stride = 2 * inter,
                           .up_stride = 2 * inter,
                           .out_stride = inter,
                           .rows = rows,
                           .inter = inter,
                           .activation = act};
      } else {  // gate = the first rows*inter values, up = the rest
        p = GatedMlpParams{.gate = d.data(),
                           .up = d.data() + static_cast<std::size_t>(rows) * inter,
                           .out = dout.data(),
                           .gate_stride = inter,
                           .up_stride = inter,
                           .out_stride = inter,
                           .rows = rows,
                           .inter = inter,
                           .activation = act};
      }
      ASSERT_TRUE(p.validate().is_ok());
      launch_gated_mlp(p, nullptr);
      const auto in = to_float(gate_up);
      std::vector<double> ref(static_cast<std::size_t>(rows) * inter);
      for (int r = 0; r < rows; ++r) {
        for (int i = 0; i < inter; ++i) {
          const double g = fused ? in[r * 2 * inter + i] : in[r * inter + i];
          const double u = fused ? in[r * 2 * inter + inter + i]
                                 : in[static_cast<std::size_t>(rows) * inter + r * inter + i];
          const double a =
              act == GateActivation::kSilu
                  ? g / (1.0 + std::exp(-g))
                  : 0.5 * g * (1.0 + std::tanh(0.7978845608028654 * (g + 0.044715 * g * g * g)));
          ref[r * inter + i] = a * u;
        }
      }
      EXPECT_LT(nmse(to_float(dout.download()), ref), kBf16Nmse)
          << "fused " << fused << " act " << static_cast<int>(act);
    }
  }
}

TEST(SoftCapTest, CapsInPlace) {
  CELLM_REQUIRE_GPU();
  std::mt19937 rng(11);
  std::normal_distribution<float> dist(0.0f, 40.0f);
  std::vector<float> logits(262144 + 3);
  for (auto& x : logits) x = dist(rng);
  DeviceArray<float> d(logits);
  SoftCapParams p{
      .logits = d.data(), .count = static_cast<std::int64_t>(logits.size()), .cap = 30.0f};
  ASSERT_TRUE(p.validate().is_ok());
  launch_soft_cap(p, nullptr);
  std::vector<double> ref(logits.size());
  for (std::size_t i = 0; i < logits.size(); ++i) ref[i] = 30.0 * std::tanh(logits[i] / 30.0);
  EXPECT_LT(nmse(d.download(), ref), 1e-12);
}

}  // namespace
}  // namespace cellm::cuda
