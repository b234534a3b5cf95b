// The GEMV's rows (1..8) on tensor cores and the CUDA-core path's split of
// 5..8 rows:
//  - row r of an m-row tensor-core call has the bits of a one-row call on
//    that row alone (out, the K/V pools and the cell table compared with
//    memcmp), for every epilogue and the norm prologue, on the projections
//    of Llama-3.2-1B and Gemma 3 270M and on odd n and k;
//  - each row agrees with the float64 reference of gemv_reference.h, and not
//    with another row's;
//  - the rope epilogue at 5..8 rows on CUDA cores (two launches of up to 4
//    rows) rotates and scatters each token with its own position and cell.
// gemv_row_slice's offsets are checked without a GPU.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "backend/cuda/kernels/gemv.cuh"
#include "backend/cuda/kernels/gemv_mma.cuh"
#include "cellm/status.h"
#include "gemv_reference.h"
#include "gpu_test_util.h"

namespace cellm::cuda {
namespace {

using namespace testing;  // NOLINT(google-build-using-namespace): the test helpers

// Per row, bf16 outputs: the output's own rounding (2^-9 relative at most)
// and up to two roundings inside the epilogues (the gate and up, the product
// before the rotation), each of the same size, plus the float sums' error
// far below them: (4 * 2^-9)^2 bounds the row's mean squared error relative
// to its mean square with room.
constexpr double kRowBf16Nmse = (4.0 / 512) * (4.0 / 512);

constexpr int kRows = kGemvMaxRows;

struct RowsCase {
  const char* name;
  int n, k;
  bool norm;
  float offset;
  GemvEpilogue epilogue;
  bool bias;
  bool f32_out;
  int heads = 0;  // kRopeScatter: n = (heads + 2 kv_heads) * head_dim
  int kv_heads = 0;
  int head_dim = 0;
  // The most rows that must fit the tensor cores' shared memory.
  int min_fit = 2;
};

// Token r decodes sequence slot r at positions spread from 1 to 65,000;
// token 1 is padding (no table entry) and token 2's cell lies outside the
// pool (nothing stored). The cells are distinct, so the order in which a
// call's rows store never matters.
constexpr int kCells = 12;
constexpr int kSeqs = kRows;
constexpr int kTableStride = 65536;
const std::vector<std::int32_t> kPositions = {7, 31000, 5, 123, 4000, 65000, 1, 777};
const std::vector<std::int32_t> kTokenCells = {3, 5, kCells + 2, 6, 0, 9, 11, 2};
const std::vector<std::int32_t> kSlots = {0, -1, 1, 2, 3, 4, 5, 6};

std::vector<float> llama_inv_freq(int head_dim, double theta) {
  std::vector<float> f(static_cast<std::size_t>(head_dim / 2));
  for (int i = 0; i < head_dim / 2; ++i) {
    f[static_cast<std::size_t>(i)] =
        static_cast<float>(std::pow(theta, -2.0 * i / static_cast<double>(head_dim)));
  }
  return f;
}

// A call's operands and every output it may write, on the device, with the
// host copies the references read.
struct Fixture {
  RowsCase c;
  std::int64_t lda = 0;
  std::int64_t ldc = 0;
  std::vector<bf16> a, w, bias, norm_weight;
  std::vector<bf16> init16;  // out's first contents (the residual stream)
  std::vector<float> init32;
  HostGemv host;
  HostRope rope;
  DeviceArray<bf16> da, dw, dbias, dnorm, out16, k_pool, v_pool;
  DeviceArray<float> out32, dfreq;
  DeviceArray<std::int32_t> dpos, dcells, dslots, table;

  bool rope_epilogue() const { return c.epilogue == GemvEpilogue::kRopeScatter; }
  std::size_t pool_size() const {
    return static_cast<std::size_t>(kCells) * c.kv_heads * c.head_dim;
  }
  std::vector<std::int32_t> table0() const {
    return std::vector<std::int32_t>(static_cast<std::size_t>(kSeqs) * kTableStride, -7);
  }

  explicit Fixture(const RowsCase& rc) : c(rc) {
    std::mt19937 rng(static_cast<unsigned>(c.n * 7 + c.k) + 101);
    lda = c.k + 24;  // a column slice of a wider buffer
    ldc = c.n + 24;  // and out's rows wider than n
    const int w_rows = gated(c.epilogue) ? 2 * c.n : c.n;
    a = random_bf16(static_cast<std::size_t>(kRows * lda), rng);
    w = random_bf16(static_cast<std::size_t>(w_rows) * c.k, rng, -0.05f, 0.05f);
    if (c.bias) bias = random_bf16(static_cast<std::size_t>(c.n), rng, -0.5f, 0.5f);
    if (c.norm) {
      norm_weight = c.offset == 0.0f ? random_bf16(static_cast<std::size_t>(c.k), rng, 0.5f, 1.5f)
                                     : random_bf16(static_cast<std::size_t>(c.k), rng, -0.5f, 0.5f);
    }
    // A spare row past the last: nothing may write it.
    init16 = random_bf16(static_cast<std::size_t>((kRows + 1) * ldc), rng);
    init32 = to_float(init16);
    host.m = kRows;
    host.n = c.n;
    host.k = c.k;
    host.lda = lda;
    host.a = to_float(a);
    host.w = to_float(w);
    host.bias = to_float(bias);
    host.norm_weight = to_float(norm_weight);
    host.offset = c.offset;
    host.epilogue = c.epilogue;
    host.residual = init32;
    host.ldc = ldc;
    // Every output buffer is allocated here, once: params() may be taken
    // before reset() and must stay valid after it.
    out16.assign(init16);
    out32.assign(init32);
    da.assign(a);
    dw.assign(w);
    dbias.assign(bias);
    dnorm.assign(norm_weight);
    if (rope_epilogue()) {
      rope.heads = c.heads;
      rope.kv_heads = c.kv_heads;
      rope.head_dim = c.head_dim;
      rope.max_cells = kCells;
      rope.inv_freq = llama_inv_freq(c.head_dim, 500000.0);
      rope.positions = kPositions;
      rope.cells = kTokenCells;
      dfreq.assign(rope.inv_freq);
      dpos.assign(kPositions);
      dcells.assign(kTokenCells);
      dslots.assign(kSlots);
      k_pool = DeviceArray<bf16>(pool_size());
      v_pool = DeviceArray<bf16>(pool_size());
      table.assign(table0());
    }
  }

  // Every output back to its first contents (the pools poisoned), in the
  // same allocations.
  void reset() {
    out16.assign(init16);
    out32.assign(init32);
    if (rope_epilogue()) {
      k_pool.poison();
      v_pool.poison();
      table.assign(table0());
    }
  }

  GemvParams params(int m, bool tensor_cores) const {
    GemvParams p;
    p.a = da.data();
    p.w = dw.data();
    p.bias = c.bias ? dbias.data() : nullptr;
    p.out = c.f32_out ? static_cast<void*>(out32.data()) : out16.data();
    p.out_f32 = c.f32_out;
    p.m = m;
    p.n = c.n;
    p.k = c.k;
    p.lda = lda;
    p.ldw = c.k;
    p.ldc = ldc;
    p.prologue = c.norm ? GemvPrologue::kRmsNorm : GemvPrologue::kNone;
    p.norm_weight = c.norm ? dnorm.data() : nullptr;
    p.norm_eps = host.eps;
    p.norm_weight_offset = c.offset;
    p.epilogue = c.epilogue;
    p.tensor_cores = tensor_cores;
    if (rope_epilogue()) {
      RopeScatterParams& r = p.rope;
      r.q = out16.data();
      r.k = out16.data() + static_cast<std::int64_t>(c.heads) * c.head_dim;
      r.v = r.k + static_cast<std::int64_t>(c.kv_heads) * c.head_dim;
      r.k_pool = k_pool.data();
      r.v_pool = v_pool.data();
      r.cells = dcells.data();
      r.seq_slots = dslots.data();
      r.positions = dpos.data();
      r.cell_table = table.data();
      r.inv_freq = dfreq.data();
      r.q_stride = ldc;
      r.k_stride = ldc;
      r.v_stride = ldc;
      r.num_tokens = m;
      r.num_heads = c.heads;
      r.num_kv_heads = c.kv_heads;
      r.head_dim = c.head_dim;
      r.rotary_dim = c.head_dim;
      r.max_cells = kCells;
      r.max_seqs = kSeqs;
      r.table_stride = kTableStride;
    }
    return p;
  }

  // Everything a call may write, as bytes.
  std::vector<unsigned char> outputs() const {
    std::vector<unsigned char> bytes;
    const auto append = [&](const auto& values) {
      const auto* first = reinterpret_cast<const unsigned char*>(values.data());
      bytes.insert(bytes.end(), first, first + values.size() * sizeof(values[0]));
    };
    if (c.f32_out) {
      append(out32.download());
    } else {
      append(out16.download());
    }
    if (rope_epilogue()) {
      append(k_pool.download());
      append(v_pool.download());
      append(table.download());
    }
    return bytes;
  }

  // Row r of out as floats (the first n columns).
  std::vector<float> out_row(int r) const {
    const std::vector<float> all = c.f32_out ? out32.download() : to_float(out16.download());
    const auto first = all.begin() + static_cast<std::ptrdiff_t>(r * ldc);
    return std::vector<float>(first, first + c.n);
  }
};

// Checks the first m rows of what the fixture's outputs hold against the
// float64 references (rows [0, 8) computed once), and rows past m untouched.
void check_against_reference(const Fixture& f, int m, const std::vector<double>& plain,
                             const RopeReference* rope) {
  const RowsCase& c = f.c;
  const double tolerance = c.f32_out ? kNormF32Nmse : kRowBf16Nmse;
  if (rope == nullptr) {
    const auto row_ref = [&](int r) {
      const auto first = plain.begin() + static_cast<std::ptrdiff_t>(r) * c.n;
      return std::vector<double>(first, first + c.n);
    };
    for (int r = 0; r < m; ++r) {
      const auto got = f.out_row(r);
      EXPECT_LT(nmse(got, row_ref(r)), tolerance) << "m=" << m << " row " << r;
      if (m > 1) {
        EXPECT_GT(nmse(got, row_ref((r + 1) % m)), 100 * tolerance)
            << "m=" << m << " row " << r << " also matches another row's reference";
      }
    }
  } else {
    const int q_cols = c.heads * c.head_dim;
    const auto q_ref = [&](int r) {
      const auto first = rope->q.begin() + static_cast<std::ptrdiff_t>(r) * q_cols;
      return std::vector<double>(first, first + q_cols);
    };
    for (int r = 0; r < m; ++r) {
      auto got = f.out_row(r);
      got.resize(static_cast<std::size_t>(q_cols));
      EXPECT_LT(nmse(got, q_ref(r)), tolerance) << "m=" << m << " q of token " << r;
      if (m > 1) {
        EXPECT_GT(nmse(got, q_ref((r + 1) % m)), 100 * tolerance) << "m=" << m << " token " << r;
      }
    }
    // K and V in the cells of tokens < m that lie in the pool; every other
    // cell still poisoned (NaN).
    const auto k_pool = to_float(f.k_pool.download());
    const auto v_pool = to_float(f.v_pool.download());
    const std::size_t per_cell = static_cast<std::size_t>(c.kv_heads) * c.head_dim;
    for (int cell = 0; cell < kCells; ++cell) {
      int owner = -1;
      for (int r = 0; r < m; ++r)
        owner = kTokenCells[static_cast<std::size_t>(r)] == cell ? r : owner;
      const auto slice = [&](const auto& pool) {
        const auto first = pool.begin() + static_cast<std::ptrdiff_t>(cell * per_cell);
        return std::vector<typename std::decay_t<decltype(pool)>::value_type>(first,
                                                                              first + per_cell);
      };
      if (owner < 0) {
        std::size_t written = 0;
        for (const float v : slice(k_pool)) written += std::isfinite(v);
        for (const float v : slice(v_pool)) written += std::isfinite(v);
        EXPECT_EQ(written, 0u) << "m=" << m << " cell " << cell << " belongs to no token";
        continue;
      }
      EXPECT_LT(nmse(slice(k_pool), slice(rope->k_pool)), tolerance)
          << "m=" << m << " k of token " << owner;
      EXPECT_LT(nmse(slice(v_pool), slice(rope->v_pool)), tolerance)
          << "m=" << m << " v of token " << owner;
    }
    // The table: an entry for each live token < m at its position.
    auto want = f.table0();
    for (int r = 0; r < m; ++r) {
      const auto u = static_cast<std::size_t>(r);
      const std::int32_t cell = kTokenCells[u];
      if (kSlots[u] >= 0 && cell >= 0 && cell < kCells) {
        want[static_cast<std::size_t>(kSlots[u]) * kTableStride +
             static_cast<std::size_t>(kPositions[u])] = cell;
      }
    }
    EXPECT_EQ(f.table.download(), want) << "m=" << m;
  }
  // Rows m.. of out keep their first contents (the rope epilogue writes only
  // q's columns of out).
  const std::vector<float> all = c.f32_out ? f.out32.download() : to_float(f.out16.download());
  std::size_t changed = 0;
  for (std::size_t i = static_cast<std::size_t>(m * f.ldc); i < all.size(); ++i) {
    changed += std::memcmp(&all[i], &f.init32[i], sizeof(float)) != 0;
  }
  EXPECT_EQ(changed, 0u) << "m=" << m << ": rows past m were written";
}

class GemvRowsTest : public ::testing::TestWithParam<RowsCase> {};

TEST_P(GemvRowsTest, EachRowHasTheBitsOfItsOneRowCallAndMatchesTheReference) {
  CELLM_REQUIRE_GPU();
  Fixture f(GetParam());
  const RowsCase& c = f.c;
  const std::vector<double> plain = reference(f.host);
  RopeReference rope;
  if (f.rope_epilogue()) rope = rope_reference(f.host, f.rope);
  int fitted = 0;
  for (int m = 1; m <= kRows; ++m) {
    SCOPED_TRACE(fmt::format("m={}", m));
    const GemvParams p = f.params(m, true);
    ASSERT_TRUE(p.validate().is_ok()) << p.validate().to_string();
    if (!gemv_uses_tensor_cores(p)) {
      EXPECT_GT(gemv_mma_smem_bytes(p), gemv_mma_max_smem_bytes(m)) << "refused, yet it fits";
      EXPECT_GT(m, c.min_fit) << "rows the case means to cover were refused";
      continue;
    }
    ++fitted;
    // The bits each row must have: one-row calls, one per row.
    f.reset();
    for (int r = 0; r < m; ++r) {
      const GemvParams one = gemv_row_slice(f.params(m, true), r, 1);
      ASSERT_TRUE(one.validate().is_ok()) << one.validate().to_string();
      ASSERT_TRUE(gemv_uses_tensor_cores(one)) << "every one-row case runs on tensor cores";
      launch_gemv(one, nullptr);
    }
    const auto expected = f.outputs();

    f.reset();
    launch_gemv(p, nullptr);
    const auto got = f.outputs();
    ASSERT_EQ(got.size(), expected.size());
    EXPECT_EQ(std::memcmp(got.data(), expected.data(), got.size()), 0)
        << "the m-row call's outputs differ from the one-row calls' bits";
    check_against_reference(f, m, plain, f.rope_epilogue() ? &rope : nullptr);
  }
  EXPECT_GE(fitted, c.min_fit);
}

// Llama-3.2-1B: hidden 2048, 32 q heads and 8 kv heads of 64, intermediate
// 8192. Gemma 3 270M: hidden 640, 4 q heads and 1 kv head of 256,
// intermediate 2048, norm weights stored as w - 1, GELU-tanh. Then odd n and
// k (k tails within a step, n past a whole group, gated groups cut short).
// min_fit: the rows whose staged inputs and partials fit 48 KB a block.
INSTANTIATE_TEST_SUITE_P(
    Shapes, GemvRowsTest,
    ::testing::Values(RowsCase{"llama1b_qkv_rope", 3072, 2048, true, 0.0f,
                               GemvEpilogue::kRopeScatter, false, false, 32, 8, 64, 5},
                      RowsCase{"llama1b_qkv_bias", 3072, 2048, true, 0.0f, GemvEpilogue::kStore,
                               true, false, 0, 0, 0, 5},
                      RowsCase{"llama1b_o_residual", 2048, 2048, false, 0.0f,
                               GemvEpilogue::kResidualAdd, false, false, 0, 0, 0, 8},
                      RowsCase{"llama1b_gate_up_silu", 8192, 2048, true, 0.0f,
                               GemvEpilogue::kGatedSilu, false, false, 0, 0, 0, 4},
                      RowsCase{"llama1b_down_residual", 2048, 8192, false, 0.0f,
                               GemvEpilogue::kResidualAdd, false, false, 0, 0, 0, 2},
                      RowsCase{"gemma270m_qkv_rope", 1536, 640, true, 1.0f,
                               GemvEpilogue::kRopeScatter, false, false, 4, 1, 256, 8},
                      RowsCase{"gemma270m_o_residual", 640, 1024, false, 0.0f,
                               GemvEpilogue::kResidualAdd, false, false, 0, 0, 0, 8},
                      RowsCase{"gemma270m_gate_up_gelu", 2048, 640, true, 1.0f,
                               GemvEpilogue::kGatedGeluTanh, false, false, 0, 0, 0, 8},
                      RowsCase{"gemma270m_down_residual", 640, 2048, false, 0.0f,
                               GemvEpilogue::kResidualAdd, false, false, 0, 0, 0, 8},
                      RowsCase{"odd_store_bias", 1001, 520, false, 0.0f, GemvEpilogue::kStore, true,
                               false, 0, 0, 0, 8},
                      RowsCase{"odd_norm_f32", 1027, 2056, true, 0.0f, GemvEpilogue::kStore, false,
                               true, 0, 0, 0, 5},
                      RowsCase{"odd_silu", 999, 1032, false, 0.0f, GemvEpilogue::kGatedSilu, false,
                               false, 0, 0, 0, 8},
                      RowsCase{"odd_residual_bias", 2047, 1032, false, 0.0f,
                               GemvEpilogue::kResidualAdd, true, false, 0, 0, 0, 8},
                      // The remaining prologue/epilogue pairs the kernel takes.
                      RowsCase{"odd_norm_residual", 1001, 520, true, 1.0f,
                               GemvEpilogue::kResidualAdd, false, false, 0, 0, 0, 8},
                      RowsCase{"odd_gelu", 1003, 776, false, 0.0f, GemvEpilogue::kGatedGeluTanh,
                               false, false, 0, 0, 0, 8},
                      RowsCase{"odd_f32_bias", 1001, 1032, false, 0.0f, GemvEpilogue::kStore, true,
                               true, 0, 0, 0, 8},
                      RowsCase{"small_heads_rope_bias", 160, 264, false, 0.0f,
                               GemvEpilogue::kRopeScatter, true, false, 3, 1, 32, 8}),
    [](const auto& info) { return std::string(info.param.name); });

// The rope epilogue at 5..8 rows on CUDA cores runs as two launches of up to
// four rows; each token keeps its own position, cell and slot.
class GemvRowsRopeTest : public ::testing::TestWithParam<RowsCase> {};

TEST_P(GemvRowsRopeTest, CudaCoreRowsPastFourUseTheirOwnPositionsAndCells) {
  CELLM_REQUIRE_GPU();
  Fixture f(GetParam());
  const RopeReference rope = rope_reference(f.host, f.rope);
  const std::vector<double> plain = reference(f.host);
  for (int m = 5; m <= kRows; ++m) {
    SCOPED_TRACE(fmt::format("m={}", m));
    f.reset();
    const GemvParams p = f.params(m, false);
    ASSERT_TRUE(p.validate().is_ok()) << p.validate().to_string();
    ASSERT_FALSE(gemv_uses_tensor_cores(p));
    launch_gemv(p, nullptr);
    check_against_reference(f, m, plain, &rope);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, GemvRowsRopeTest,
    ::testing::Values(RowsCase{"llama1b", 3072, 2048, true, 0.0f, GemvEpilogue::kRopeScatter, false,
                               false, 32, 8, 64},
                      RowsCase{"gemma270m", 1536, 640, true, 1.0f, GemvEpilogue::kRopeScatter, true,
                               false, 4, 1, 256}),
    [](const auto& info) { return std::string(info.param.name); });

// gemv_row_slice moves every per-row pointer by its own stride. Host only:
// the pointers are never dereferenced.
TEST(GemvRowSliceTest, OffsetsEveryPerRowPointer) {
  alignas(16) static bf16 a[8 * 64];
  alignas(16) static float out[8 * 40];
  alignas(16) static std::int32_t tokens[3][8];
  GemvParams p = gemv_dense(a, a, out, 8, 32, 64);
  p.ldc = 40;
  p.out_f32 = true;
  GemvParams s = gemv_row_slice(p, 4, 3);
  EXPECT_EQ(s.m, 3);
  EXPECT_EQ(s.a, a + 4 * 64);
  EXPECT_EQ(s.out, out + 4 * 40);
  EXPECT_EQ(s.w, p.w);

  alignas(16) static bf16 q[8 * 48];
  p = gemv_dense(a, a, q, 8, 48, 64);
  p.epilogue = GemvEpilogue::kRopeScatter;
  p.rope.q = q;
  p.rope.k = q + 16;
  p.rope.v = q + 32;
  p.rope.q_stride = 48;
  p.rope.k_stride = 48;
  p.rope.v_stride = 48;
  p.rope.positions = tokens[0];
  p.rope.cells = tokens[1];
  p.rope.seq_slots = tokens[2];
  p.rope.num_tokens = 8;
  s = gemv_row_slice(p, 4, 4);
  EXPECT_EQ(s.out, q + 4 * 48);
  EXPECT_EQ(s.rope.q, s.out) << "q is out";
  EXPECT_EQ(s.rope.k, q + 16 + 4 * 48);
  EXPECT_EQ(s.rope.v, q + 32 + 4 * 48);
  EXPECT_EQ(s.rope.positions, tokens[0] + 4);
  EXPECT_EQ(s.rope.cells, tokens[1] + 4);
  EXPECT_EQ(s.rope.seq_slots, tokens[2] + 4);
  EXPECT_EQ(s.rope.num_tokens, 4);
  p.rope.seq_slots = nullptr;  // no table: no slots
  EXPECT_EQ(gemv_row_slice(p, 4, 4).rope.seq_slots, nullptr);
}

}  // namespace
}  // namespace cellm::cuda
