// The fused rope + KV scatter kernel against the two kernels it replaces
// (rope, then kv_scatter, on the same inputs) and a float64 reference of the
// rotation: q in place, rotated k and plain v in their cells, table entries,
// padding rows, cells outside the pool, partial rotary and positions up to
// 1e5. Refusals of unsupported geometry run without a GPU.
#include "backend/cuda/kernels/rope_scatter.cuh"

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "backend/cuda/kernels/kv_scatter.cuh"
#include "backend/cuda/kernels/rope.cuh"
#include "cellm/status.h"
#include "gpu_test_util.h"

namespace cellm::cuda {
namespace {

using testing::DeviceArray;
using testing::from_bf16;
using testing::nmse;
using testing::random_bf16;
using testing::to_float;

struct RopeCase {
  int heads;
  int kv_heads;
  int head_dim;
  int rotary_dim;
  int tokens;
};

struct RopeData {
  int max_cells = 0;
  int max_seqs = 0;
  int table_stride = 0;
  std::int64_t stride = 0;  // fused qkv row
  std::vector<bf16> qkv, k_pool, v_pool;
  std::vector<std::int32_t> cells, slots, positions, table;
  std::vector<float> inv_freq;
};

RopeData make_data(const RopeCase& c, std::uint32_t seed) {
  std::mt19937 rng(seed);
  RopeData d;
  d.max_cells = 2 * c.tokens + 4;
  d.max_seqs = c.tokens;
  d.table_stride = 5001;  // position 100000 lies past it: no table entry, as kv_scatter
  d.stride = static_cast<std::int64_t>(c.heads + 2 * c.kv_heads) * c.head_dim;
  d.qkv = random_bf16(static_cast<std::size_t>(c.tokens) * d.stride, rng, -2.0f, 2.0f);
  const std::size_t pool = static_cast<std::size_t>(d.max_cells) * c.kv_heads * c.head_dim;
  // Untouched cells keep these values.
  d.k_pool = random_bf16(pool, rng, -4.0f, 4.0f);
  d.v_pool = random_bf16(pool, rng, -4.0f, 4.0f);
  std::vector<std::int32_t> free_cells;
  for (int i = 1; i < d.max_cells; ++i) free_cells.push_back(i);
  std::shuffle(free_cells.begin(), free_cells.end(), rng);
  std::uniform_int_distribution<int> pos_dist(0, 5000);
  for (int t = 0; t < c.tokens; ++t) {
    d.slots.push_back(t);
    d.positions.push_back(pos_dist(rng));
    d.cells.push_back(free_cells[static_cast<std::size_t>(t)]);
  }
  d.positions[0] = 100000;  // long-context angles
  if (c.tokens >= 3) {
    d.slots[1] = -1;  // padding row: scratch cell, no table entry
    d.positions[1] = 0;
    d.cells[1] = 0;
    d.cells[2] = d.max_cells + 3;  // outside the pool: nothing written
  }
  d.table.assign(static_cast<std::size_t>(d.max_seqs) * d.table_stride, -1);
  const int half = c.rotary_dim / 2;
  for (int i = 0; i < half; ++i) {
    d.inv_freq.push_back(
        1.0f / std::pow(10000.0f, static_cast<float>(2 * i) / static_cast<float>(c.rotary_dim)));
  }
  return d;
}

// Rotated values of one head vector, in double from the bf16 inputs.
std::vector<double> rotate_reference(const float* x, int head_dim, int rotary_dim, int position,
                                     const std::vector<float>& inv_freq) {
  std::vector<double> out(x, x + head_dim);
  const int half = rotary_dim / 2;
  for (int i = 0; i < half; ++i) {
    const float angle = static_cast<float>(position) * inv_freq[static_cast<std::size_t>(i)];
    const double cs = std::cos(static_cast<double>(angle));
    const double sn = std::sin(static_cast<double>(angle));
    out[static_cast<std::size_t>(i)] = x[i] * cs - x[i + half] * sn;
    out[static_cast<std::size_t>(i + half)] = x[i + half] * cs + x[i] * sn;
  }
  return out;
}

// Same value up to one bf16 rounding step (the two kernels may contract the
// rotation's multiply-adds differently).
void expect_within_one_ulp(const std::vector<bf16>& a, const std::vector<bf16>& b,
                           const char* what) {
  ASSERT_EQ(a.size(), b.size());
  int reported = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const float x = from_bf16(a[i]);
    const float y = from_bf16(b[i]);
    const float tol = std::ldexp(std::max(std::fabs(x), std::fabs(y)), -7) + 1e-30f;
    if (!(std::fabs(x - y) <= tol) && reported++ < 5) {
      ADD_FAILURE() << what << " element " << i << ": " << x << " vs " << y;
    }
  }
}

class RopeScatterTest : public ::testing::TestWithParam<RopeCase> {};

TEST_P(RopeScatterTest, MatchesRopeThenScatterAndTheReference) {
  CELLM_REQUIRE_GPU();
  const RopeCase c = GetParam();
  const RopeData d = make_data(c, 900 + c.head_dim + c.tokens);
  const DeviceArray<float> inv_freq(d.inv_freq);
  const DeviceArray<std::int32_t> cells(d.cells), slots(d.slots), positions(d.positions);
  const std::int64_t q_dim = static_cast<std::int64_t>(c.heads) * c.head_dim;
  const std::int64_t kv_dim = static_cast<std::int64_t>(c.kv_heads) * c.head_dim;

  // The established path: rope in place, then the scatter.
  DeviceArray<bf16> qkv_a(d.qkv), k_pool_a(d.k_pool), v_pool_a(d.v_pool);
  DeviceArray<std::int32_t> table_a(d.table);
  RopeParams rope;
  rope.q = qkv_a.data();
  rope.k = qkv_a.data() + q_dim;
  rope.positions = positions.data();
  rope.inv_freq = inv_freq.data();
  rope.q_stride = d.stride;
  rope.k_stride = d.stride;
  rope.num_tokens = c.tokens;
  rope.num_heads = c.heads;
  rope.num_kv_heads = c.kv_heads;
  rope.head_dim = c.head_dim;
  rope.rotary_dim = c.rotary_dim;
  ASSERT_TRUE(rope.validate().is_ok());
  launch_rope(rope, nullptr);
  KvScatterParams sc;
  sc.k = qkv_a.data() + q_dim;
  sc.v = qkv_a.data() + q_dim + kv_dim;
  sc.k_pool = k_pool_a.data();
  sc.v_pool = v_pool_a.data();
  sc.cells = cells.data();
  sc.seq_slots = slots.data();
  sc.positions = positions.data();
  sc.cell_table = table_a.data();
  sc.k_stride = d.stride;
  sc.v_stride = d.stride;
  sc.num_tokens = c.tokens;
  sc.num_kv_heads = c.kv_heads;
  sc.head_dim = c.head_dim;
  sc.max_cells = d.max_cells;
  sc.max_seqs = d.max_seqs;
  sc.table_stride = d.table_stride;
  ASSERT_TRUE(sc.validate().is_ok());
  launch_kv_scatter(sc, nullptr);

  // The fused kernel.
  DeviceArray<bf16> qkv_b(d.qkv), k_pool_b(d.k_pool), v_pool_b(d.v_pool);
  DeviceArray<std::int32_t> table_b(d.table);
  RopeScatterParams p;
  p.q = qkv_b.data();
  p.k = qkv_b.data() + q_dim;
  p.v = qkv_b.data() + q_dim + kv_dim;
  p.k_pool = k_pool_b.data();
  p.v_pool = v_pool_b.data();
  p.cells = cells.data();
  p.seq_slots = slots.data();
  p.positions = positions.data();
  p.cell_table = table_b.data();
  p.inv_freq = inv_freq.data();
  p.q_stride = d.stride;
  p.k_stride = d.stride;
  p.v_stride = d.stride;
  p.num_tokens = c.tokens;
  p.num_heads = c.heads;
  p.num_kv_heads = c.kv_heads;
  p.head_dim = c.head_dim;
  p.rotary_dim = c.rotary_dim;
  p.max_cells = d.max_cells;
  p.max_seqs = d.max_seqs;
  p.table_stride = d.table_stride;
  ASSERT_TRUE(p.validate().is_ok()) << p.validate().to_string();
  launch_rope_scatter(p, nullptr);

  const auto qkv_ref_path = qkv_a.download();
  const auto qkv_fused = qkv_b.download();
  const auto k_pool_ref_path = k_pool_a.download();
  const auto k_pool_fused = k_pool_b.download();
  // q: the same rotation in place (k in the activation rows is not compared:
  // the fused kernel leaves it unrotated by contract).
  std::vector<bf16> q_a, q_b;
  for (int t = 0; t < c.tokens; ++t) {
    for (std::int64_t i = 0; i < q_dim; ++i) {
      q_a.push_back(qkv_ref_path[static_cast<std::size_t>(t * d.stride + i)]);
      q_b.push_back(qkv_fused[static_cast<std::size_t>(t * d.stride + i)]);
    }
  }
  expect_within_one_ulp(q_a, q_b, "q");
  expect_within_one_ulp(k_pool_ref_path, k_pool_fused, "k_pool");
  EXPECT_EQ(v_pool_a.download(), v_pool_b.download());  // bytes only: exact
  EXPECT_EQ(table_a.download(), table_b.download());

  // Against the float64 rotation: q heads and the k rows in their cells.
  const auto input = to_float(d.qkv);
  const auto fused_q = to_float(q_b);
  const auto fused_k = to_float(k_pool_fused);
  std::vector<float> got;
  std::vector<double> want;
  for (int t = 0; t < c.tokens; ++t) {
    for (int h = 0; h < c.heads + c.kv_heads; ++h) {
      const bool is_q = h < c.heads;
      const float* x = input.data() + t * d.stride + static_cast<std::int64_t>(h) * c.head_dim;
      const auto ref = rotate_reference(x, c.head_dim, c.rotary_dim,
                                        d.positions[static_cast<std::size_t>(t)], d.inv_freq);
      const std::int32_t cell = d.cells[static_cast<std::size_t>(t)];
      if (!is_q && (cell < 0 || cell >= d.max_cells)) continue;
      for (int i = 0; i < c.head_dim; ++i) {
        want.push_back(ref[static_cast<std::size_t>(i)]);
        got.push_back(
            is_q ? fused_q[static_cast<std::size_t>(t * q_dim + h * c.head_dim + i)]
                 : fused_k[static_cast<std::size_t>(
                       (static_cast<std::int64_t>(cell) * c.kv_heads + h - c.heads) * c.head_dim +
                       i)]);
      }
    }
  }
  EXPECT_LT(nmse(got, want), testing::kBf16Nmse);
}

INSTANTIATE_TEST_SUITE_P(Shapes, RopeScatterTest,
                         ::testing::Values(RopeCase{32, 8, 64, 64, 1},     // 1B, batch 1
                                           RopeCase{32, 8, 128, 128, 7},   // 8B
                                           RopeCase{4, 1, 256, 256, 300},  // gemma 270m
                                           RopeCase{8, 2, 64, 32, 5},      // partial rotary
                                           RopeCase{9, 3, 64, 64, 64},     // smollm2, group 3
                                           RopeCase{16, 8, 128, 128, 256}  // qwen3, batch 256
                                           ),
                         [](const auto& info) {
                           const RopeCase& c = info.param;
                           return fmt::format("h{}_kv{}_hd{}_rot{}_t{}", c.heads, c.kv_heads,
                                              c.head_dim, c.rotary_dim, c.tokens);
                         });

// ---- host-only checks ----

RopeScatterParams fake_params() {
  alignas(16) static std::byte storage[64];
  auto* any = reinterpret_cast<bf16*>(storage);
  RopeScatterParams p;
  p.q = any;
  p.k = any;
  p.v = any;
  p.k_pool = any;
  p.v_pool = any;
  p.cells = reinterpret_cast<const std::int32_t*>(storage);
  p.seq_slots = p.cells;
  p.positions = p.cells;
  p.inv_freq = reinterpret_cast<const float*>(storage);
  p.q_stride = 12 * 64;
  p.k_stride = 12 * 64;
  p.v_stride = 12 * 64;
  p.num_tokens = 3;
  p.num_heads = 8;
  p.num_kv_heads = 2;
  p.head_dim = 64;
  p.rotary_dim = 64;
  p.max_cells = 10;
  return p;
}

TEST(RopeScatterValidateTest, AcceptsAWellFormedCall) {
  EXPECT_TRUE(fake_params().validate().is_ok()) << fake_params().validate().to_string();
}

TEST(RopeScatterValidateTest, RefusesRotaryDimsItCannotVectorise) {
  RopeScatterParams p = fake_params();
  p.rotary_dim = 24;  // rope.cu takes it, the fused kernel does not
  EXPECT_FALSE(rope_scatter_supported(64, 24));
  const Status status = p.validate();
  EXPECT_EQ(status.code(), StatusCode::kNotSupported);
  EXPECT_NE(status.message().find("rotary_dim=24"), std::string::npos) << status.to_string();
  EXPECT_TRUE(rope_scatter_supported(64, 32));
  EXPECT_FALSE(rope_scatter_supported(64, 80));
  EXPECT_FALSE(rope_scatter_supported(60, 32));
}

TEST(RopeScatterValidateTest, RefusesShortStridesAndMisalignedPools) {
  RopeScatterParams p = fake_params();
  p.k_stride = 64;  // two kv heads need 128
  EXPECT_EQ(p.validate().code(), StatusCode::kInvalidArgument);
  p = fake_params();
  p.v_pool = reinterpret_cast<bf16*>(reinterpret_cast<std::uintptr_t>(p.v_pool) + 2);
  EXPECT_EQ(p.validate().code(), StatusCode::kInvalidArgument);
  p = fake_params();
  p.cell_table = reinterpret_cast<std::int32_t*>(p.k_pool);
  EXPECT_EQ(p.validate().code(), StatusCode::kInvalidArgument);  // no max_seqs / table_stride
  p.max_seqs = 2;
  p.table_stride = 8;
  EXPECT_TRUE(p.validate().is_ok());
}

}  // namespace
}  // namespace cellm::cuda
