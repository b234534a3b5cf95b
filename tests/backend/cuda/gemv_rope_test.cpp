// The q/k/v GEMV's rope + scatter epilogue against the two-kernel path it
// replaces: the plain GEMV storing the product, then rope_scatter on it. Same
// operands (norm prologue and bias included), tokens at small and large
// positions, a token whose cell lies outside the pool (skipped) and a padding
// token (no table entry). Pools and tables start poisoned/known so a missing
// or stray write shows.
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "backend/cuda/kernels/gemv.cuh"
#include "backend/cuda/kernels/gemv_mma.cuh"
#include "backend/cuda/kernels/rope_scatter.cuh"
#include "cellm/status.h"
#include "gpu_test_util.h"

namespace cellm::cuda {
namespace {

using namespace testing;

struct RopeCase {
  int m;
  int heads;
  int kv_heads;
  int head_dim;
  int k;
  bool tensor_cores = false;  // GemvParams::tensor_cores, both paths (one-row cases)
};

class GemvRopeTest : public ::testing::TestWithParam<RopeCase> {};

constexpr int kCells = 8;
constexpr int kSeqs = 3;
constexpr int kTableStride = 40000;

// Elements of `got` at `index` against the same elements of `want`.
double nmse_at(const std::vector<bf16>& got, const std::vector<bf16>& want,
               const std::vector<std::size_t>& index) {
  std::vector<float> g;
  std::vector<double> w;
  for (const std::size_t i : index) {
    g.push_back(from_bf16(got[i]));
    w.push_back(from_bf16(want[i]));
  }
  return nmse(g, w);
}

TEST_P(GemvRopeTest, MatchesTheProductThenRopeScatter) {
  CELLM_REQUIRE_GPU();
  const RopeCase c = GetParam();
  const int hd = c.head_dim;
  const int n = (c.heads + 2 * c.kv_heads) * hd;
  const std::int64_t ldc = n + 8;
  std::mt19937 rng(static_cast<unsigned>(c.m * 1000 + n + c.k));
  const auto a = random_bf16(static_cast<std::size_t>(c.m) * c.k, rng);
  const auto w = random_bf16(static_cast<std::size_t>(n) * c.k, rng, -0.05f, 0.05f);
  const auto bias = random_bf16(static_cast<std::size_t>(n), rng, -0.5f, 0.5f);
  const auto norm_weight = random_bf16(static_cast<std::size_t>(c.k), rng, 0.5f, 1.5f);
  std::vector<float> inv_freq(static_cast<std::size_t>(hd / 2));
  for (int i = 0; i < hd / 2; ++i) {
    inv_freq[static_cast<std::size_t>(i)] =
        static_cast<float>(std::pow(500000.0, -2.0 * i / static_cast<double>(hd)));
  }
  // Token 1 (if any) is padding; token 2 (if any) has a cell outside the pool.
  const std::vector<std::int32_t> all_positions = {7, 31000, 5, 123};
  const std::vector<std::int32_t> all_cells = {3, 5, kCells + 2, 6};
  const std::vector<std::int32_t> all_slots = {0, -1, 1, 2};
  const std::vector<std::int32_t> positions(all_positions.begin(), all_positions.begin() + c.m);
  const std::vector<std::int32_t> cells(all_cells.begin(), all_cells.begin() + c.m);
  const std::vector<std::int32_t> slots(all_slots.begin(), all_slots.begin() + c.m);

  DeviceArray<bf16> da(a), dw(w), dbias(bias), dnorm(norm_weight);
  DeviceArray<float> dfreq(inv_freq);
  DeviceArray<std::int32_t> dpos(positions), dcells(cells), dslots(slots);
  const std::size_t pool = static_cast<std::size_t>(kCells) * c.kv_heads * hd;
  const std::size_t out_count = static_cast<std::size_t>(c.m) * ldc;
  const std::vector<std::int32_t> table0(static_cast<std::size_t>(kSeqs) * kTableStride, -7);
  struct Run {
    DeviceArray<bf16> out, k_pool, v_pool;
    DeviceArray<std::int32_t> table;
  };
  const auto make_run = [&] {
    Run r{DeviceArray<bf16>(out_count), DeviceArray<bf16>(pool), DeviceArray<bf16>(pool),
          DeviceArray<std::int32_t>(table0)};
    r.out.poison();
    r.k_pool.poison();
    r.v_pool.poison();
    return r;
  };
  Run fused = make_run();
  Run split = make_run();

  GemvParams g = gemv_dense(da.data(), dw.data(), nullptr, c.m, n, c.k);
  g.bias = dbias.data();
  g.ldc = ldc;
  g.prologue = GemvPrologue::kRmsNorm;
  g.norm_weight = dnorm.data();
  g.tensor_cores = c.tensor_cores;
  RopeScatterParams rs;
  rs.cells = dcells.data();
  rs.seq_slots = dslots.data();
  rs.positions = dpos.data();
  rs.inv_freq = dfreq.data();
  rs.q_stride = ldc;
  rs.k_stride = ldc;
  rs.v_stride = ldc;
  rs.num_tokens = c.m;
  rs.num_heads = c.heads;
  rs.num_kv_heads = c.kv_heads;
  rs.head_dim = hd;
  rs.rotary_dim = hd;
  rs.max_cells = kCells;
  rs.max_seqs = kSeqs;
  rs.table_stride = kTableStride;
  const auto bind = [&](RopeScatterParams p, Run& run) {
    p.q = run.out.data();
    p.k = run.out.data() + static_cast<std::int64_t>(c.heads) * hd;
    p.v = p.k + static_cast<std::int64_t>(c.kv_heads) * hd;
    p.k_pool = run.k_pool.data();
    p.v_pool = run.v_pool.data();
    p.cell_table = run.table.data();
    return p;
  };

  // The established path: store the product, then rope + scatter it.
  GemvParams plain = g;
  plain.out = split.out.data();
  ASSERT_TRUE(plain.validate().is_ok()) << plain.validate().to_string();
  launch_gemv(plain, nullptr);
  const RopeScatterParams after = bind(rs, split);
  ASSERT_TRUE(after.validate().is_ok()) << after.validate().to_string();
  launch_rope_scatter(after, nullptr);

  GemvParams with_rope = g;
  with_rope.out = fused.out.data();
  with_rope.epilogue = GemvEpilogue::kRopeScatter;
  with_rope.rope = bind(rs, fused);
  ASSERT_TRUE(with_rope.validate().is_ok()) << with_rope.validate().to_string();
  ASSERT_EQ(gemv_uses_tensor_cores(with_rope), c.tensor_cores);
  launch_gemv(with_rope, nullptr);

  const auto fused_out = fused.out.download();
  const auto split_out = split.out.download();
  std::vector<std::size_t> q_index;
  for (int r = 0; r < c.m; ++r) {
    for (int col = 0; col < c.heads * hd; ++col) {
      q_index.push_back(static_cast<std::size_t>(r * ldc + col));
    }
  }
  EXPECT_LT(nmse_at(fused_out, split_out, q_index), kBf16Nmse) << "q";
  // The stored (unrotated) product is far from the rotated q: the rotation ran.
  GemvParams unrotated = plain;
  DeviceArray<bf16> product(out_count);
  unrotated.out = product.data();
  launch_gemv(unrotated, nullptr);
  EXPECT_GT(nmse_at(fused_out, product.download(), q_index), 100 * kBf16Nmse);

  // K and V land in the cells of the valid tokens only; the rest stays poison.
  const auto fused_k = fused.k_pool.download();
  const auto split_k = split.k_pool.download();
  const auto fused_v = fused.v_pool.download();
  const auto split_v = split.v_pool.download();
  std::vector<std::size_t> written;
  std::size_t stray = 0;
  for (int cell = 0; cell < kCells; ++cell) {
    bool used = false;
    for (int r = 0; r < c.m; ++r) used = used || cells[static_cast<std::size_t>(r)] == cell;
    for (int i = 0; i < c.kv_heads * hd; ++i) {
      const std::size_t at = static_cast<std::size_t>(cell) * c.kv_heads * hd + i;
      if (used) {
        written.push_back(at);
      } else {
        stray += std::isfinite(from_bf16(fused_k[at])) || std::isfinite(from_bf16(fused_v[at]));
      }
    }
  }
  ASSERT_FALSE(written.empty());
  EXPECT_LT(nmse_at(fused_k, split_k, written), kBf16Nmse) << "k";
  EXPECT_LT(nmse_at(fused_v, split_v, written), kBf16Nmse) << "v";
  EXPECT_EQ(stray, 0u) << "cells no token owns were written";
  EXPECT_EQ(fused.table.download(), split.table.download());
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, GemvRopeTest,
    ::testing::Values(RopeCase{1, 32, 8, 64, 2048},  // Llama-3.2-1B's q/k/v
                      RopeCase{1, 32, 8, 128, 512},  // 8B heads, short k
                      RopeCase{3, 4, 2, 64, 520},    // padding and an out-of-pool cell
                      RopeCase{4, 14, 2, 64, 896},   // Qwen2-0.5B-like heads
                      RopeCase{1, 32, 8, 64, 2048, true},
                      RopeCase{1, 32, 8, 128, 520, true},  // a k tail
                      RopeCase{1, 14, 2, 16, 896, true}),  // heads of one 16-row group
    [](const auto& info) {
      const RopeCase& c = info.param;
      return fmt::format("m{}_h{}_kv{}_d{}{}", c.m, c.heads, c.kv_heads, c.head_dim,
                         c.tensor_cores ? "_mma" : "");
    });

TEST(GemvRopeValidateTest, RefusesAPartialRotaryAndAMismatchedQ) {
  bf16* fake = reinterpret_cast<bf16*>(std::uintptr_t{256});
  const auto* cells = reinterpret_cast<const std::int32_t*>(std::uintptr_t{512});
  const auto* freq = reinterpret_cast<const float*>(std::uintptr_t{1024});
  GemvParams g;
  g.a = fake;
  g.w = fake;
  g.out = fake + 4096;
  g.m = 1;
  g.k = 64;
  g.lda = 64;
  g.ldw = 64;
  g.epilogue = GemvEpilogue::kRopeScatter;
  g.rope.q = fake + 4096;
  g.rope.k = fake + 4096;
  g.rope.v = fake + 4096;
  g.rope.k_pool = fake;
  g.rope.v_pool = fake;
  g.rope.cells = cells;
  g.rope.positions = cells;
  g.rope.inv_freq = freq;
  g.rope.num_tokens = 1;
  g.rope.num_heads = 2;
  g.rope.num_kv_heads = 1;
  g.rope.head_dim = 64;
  g.rope.rotary_dim = 64;
  g.rope.max_cells = 4;
  g.n = 4 * 64;
  g.ldc = g.n;
  g.rope.q_stride = g.n;
  g.rope.k_stride = g.n;
  g.rope.v_stride = g.n;
  ASSERT_TRUE(g.validate().is_ok()) << g.validate().to_string();

  GemvParams partial = g;
  partial.rope.rotary_dim = 32;
  EXPECT_EQ(partial.validate().code(), StatusCode::kInvalidArgument);
  GemvParams wrong_n = g;
  wrong_n.n = 3 * 64;
  wrong_n.ldc = wrong_n.n;
  EXPECT_EQ(wrong_n.validate().code(), StatusCode::kInvalidArgument);
  GemvParams other_q = g;
  other_q.rope.q = fake + 8192;
  EXPECT_EQ(other_q.validate().code(), StatusCode::kInvalidArgument);
  GemvParams more_rows = g;
  more_rows.m = 2;
  EXPECT_EQ(more_rows.validate().code(), StatusCode::kInvalidArgument);
  GemvParams f32 = g;
  f32.out_f32 = true;
  EXPECT_EQ(f32.validate().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace cellm::cuda
