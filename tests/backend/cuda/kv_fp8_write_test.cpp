// The K/V writers into FP8 (E4M3) pools: kv_scatter, rope_scatter and the
// q/k/v GEMV's rope epilogue (CUDA cores and tensor cores). Each runs twice
// on the same inputs, into poisoned bf16 pools and into poisoned FP8 pools;
// every element the bf16 run wrote must hold, in the FP8 run, exactly the
// code format/fp8.h's host encoder gives for that bf16 value, and every other
// element must keep the poison. Inputs include values past E4M3's range
// (saturated to +-448), infinities, ties between E4M3 neighbours and values
// small enough to be subnormal. The cell tables, and q where a writer
// rotates it, come out the same either way.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "backend/cuda/kernels/gemv.cuh"
#include "backend/cuda/kernels/gemv_mma.cuh"
#include "backend/cuda/kernels/kv_scatter.cuh"
#include "backend/cuda/kernels/rope_scatter.cuh"
#include "cellm/status.h"
#include "gpu_test_util.h"
#include "kv_fp8_pools.h"

namespace cellm::cuda {
namespace {

using testing::DeviceArray;
using testing::from_bf16;
using testing::random_bf16;
using testing::to_bf16;

// Poisoned memory: 0xffff in bf16 (NaN), 0xff in E4M3 (NaN as well).
constexpr std::uint16_t kPoison16 = 0xffff;
constexpr fp8_e4m3 kPoison8 = 0xff;

// Values with a known E4M3 fate, mixed into the random inputs: past the
// range, the largest, the tie past the largest (saturates), ties to even
// between neighbours, subnormals and zeros, 7 * 2^-9, normal values.
const std::vector<float>& edge_values() {
  static const std::vector<float> values = {
      500.0f, -1000.0f, 448.0f, 464.0f, 1.0625f,      1.1875f, -3.25f,
      0.001f, -0.0039f, 0.0f,   -0.0f,  0.013671875f, 240.0f,  -17.5f,
  };
  return values;
}

// `count` bf16 values in [lo, hi) with the edge values spread among them
// (and both infinities where the writer only converts: a rotation could turn
// an infinity times a zero sine into NaN, whose sign the encoders may differ on).
std::vector<bf16> inputs_with_edges(std::size_t count, std::mt19937& rng, float lo, float hi,
                                    bool infinities = false) {
  std::vector<bf16> out = random_bf16(count, rng, lo, hi);
  std::vector<float> edges = edge_values();
  if (infinities) {
    edges.push_back(std::numeric_limits<float>::infinity());
    edges.push_back(-std::numeric_limits<float>::infinity());
  }
  for (std::size_t i = 0; i < edges.size() && i * 7 < count; ++i) out[i * 7] = to_bf16(edges[i]);
  return out;
}

// Where the bf16 run wrote (anything but the poison).
std::vector<bool> written_by(const std::vector<bf16>& pool) {
  std::vector<bool> written(pool.size());
  for (std::size_t i = 0; i < pool.size(); ++i) {
    written[i] = std::bit_cast<std::uint16_t>(pool[i]) != kPoison16;
  }
  return written;
}

struct Pools {
  DeviceArray<bf16> k16, v16;
  DeviceArray<fp8_e4m3> k8, v8;
  explicit Pools(std::size_t elems) : k16(elems), v16(elems), k8(elems), v8(elems) {
    k16.poison();
    v16.poison();
    k8.poison();
    v8.poison();
  }
  void expect_codes(const std::string& what) const {
    const auto k = k16.download();
    const auto v = v16.download();
    testing::expect_codes_of(k8.download(), k, written_by(k), kPoison8, what + " k");
    testing::expect_codes_of(v8.download(), v, written_by(v), kPoison8, what + " v");
  }
};

// Tokens, cells and slots of the scatter cases: a padding row (cell 0, slot
// -1) and a cell outside the pool (nothing written) among them.
struct Rows {
  int max_cells = 0;
  std::vector<std::int32_t> cells, slots, positions;
};

Rows make_rows(int tokens, std::mt19937& rng) {
  Rows r;
  r.max_cells = 2 * tokens + 4;
  std::vector<std::int32_t> free_cells;
  for (int i = 1; i < r.max_cells; ++i) free_cells.push_back(i);
  std::shuffle(free_cells.begin(), free_cells.end(), rng);
  std::uniform_int_distribution<int> pos(0, 3000);
  for (int t = 0; t < tokens; ++t) {
    r.cells.push_back(free_cells[static_cast<std::size_t>(t)]);
    r.slots.push_back(t);
    r.positions.push_back(pos(rng));
  }
  if (tokens >= 3) {
    r.cells[1] = 0;
    r.slots[1] = -1;
    r.cells[2] = r.max_cells + 3;
  }
  return r;
}

constexpr int kTableStride = 4096;

// What a writer runs against, twice: the rows on the device, an empty cell
// table and poisoned pools for the bf16 run (table16, pools.k16 and v16)
// and for the FP8 run (table8, pools.k8 and v8).
struct Targets {
  int tokens;
  int max_cells;
  DeviceArray<std::int32_t> cells, slots, positions, table16, table8;
  Pools pools;
  // `row` elements a cell in each pool (kv heads x head dim).
  Targets(const Rows& r, std::int64_t row)
      : tokens(static_cast<int>(r.cells.size())),
        max_cells(r.max_cells),
        cells(r.cells),
        slots(r.slots),
        positions(r.positions),
        table16(std::vector<std::int32_t>(r.cells.size() * kTableStride, -1)),
        table8(std::vector<std::int32_t>(r.cells.size() * kTableStride, -1)),
        pools(static_cast<std::size_t>(r.max_cells) * static_cast<std::size_t>(row)) {}

  // The fields every writer's params (KvScatterParams, RopeScatterParams)
  // take from the rows and the shape.
  template <class Params>
  void bind_rows(Params& p, int kv_heads, int head_dim) const {
    p.cells = cells.data();
    p.seq_slots = slots.data();
    p.positions = positions.data();
    p.num_tokens = tokens;
    p.num_kv_heads = kv_heads;
    p.head_dim = head_dim;
    p.max_cells = max_cells;
    p.max_seqs = tokens;
    p.table_stride = kTableStride;
  }

  // The FP8 run stored the codes of what the bf16 run stored, and nothing
  // else, through the same table entries.
  void expect_same_writes(const std::string& what) const {
    pools.expect_codes(what);
    EXPECT_EQ(table8.download(), table16.download()) << what;
  }
};

// RoPE's inverse frequencies of `rotary_dim` dimensions at `base`.
std::vector<float> inverse_frequencies(int rotary_dim, double base) {
  std::vector<float> out;
  for (int i = 0; i < rotary_dim / 2; ++i) {
    out.push_back(static_cast<float>(std::pow(base, -2.0 * i / static_cast<double>(rotary_dim))));
  }
  return out;
}

struct ScatterCase {
  int kv_heads;
  int head_dim;
  int tokens;
};

class KvScatterFp8Test : public ::testing::TestWithParam<ScatterCase> {};

TEST_P(KvScatterFp8Test, WritesTheCodesOfTheBf16Rows) {
  CELLM_REQUIRE_GPU();
  const ScatterCase c = GetParam();
  std::mt19937 rng(static_cast<unsigned>(500 + c.head_dim + c.tokens));
  const Rows r = make_rows(c.tokens, rng);
  const std::int64_t row = static_cast<std::int64_t>(c.kv_heads) * c.head_dim;
  const std::int64_t stride = 2 * row + 8;  // k and v in one buffer, a gap after
  const auto kv =
      inputs_with_edges(static_cast<std::size_t>(c.tokens * stride), rng, -6.0f, 6.0f, true);
  const DeviceArray<bf16> dkv(kv);
  Targets t(r, row);

  KvScatterParams p;
  t.bind_rows(p, c.kv_heads, c.head_dim);
  p.k = dkv.data();
  p.v = dkv.data() + row;
  p.k_stride = stride;
  p.v_stride = stride;
  p.k_pool = t.pools.k16.data();
  p.v_pool = t.pools.v16.data();
  p.cell_table = t.table16.data();
  ASSERT_TRUE(p.validate().is_ok()) << p.validate().to_string();
  launch_kv_scatter(p, nullptr);
  p.k_pool = t.pools.k8.data();
  p.v_pool = t.pools.v8.data();
  p.cell_table = t.table8.data();
  p.kv_dtype = KvDtype::kFp8;
  ASSERT_TRUE(p.validate().is_ok()) << p.validate().to_string();
  launch_kv_scatter(p, nullptr);

  t.expect_same_writes("kv_scatter");
}

INSTANTIATE_TEST_SUITE_P(Shapes, KvScatterFp8Test,
                         ::testing::Values(ScatterCase{8, 64, 5}, ScatterCase{8, 128, 33},
                                           ScatterCase{1, 256, 3}, ScatterCase{2, 16, 7},
                                           ScatterCase{3, 24, 4}),  // 8-element pieces
                         [](const auto& info) {
                           const ScatterCase& c = info.param;
                           return fmt::format("kv{}_hd{}_t{}", c.kv_heads, c.head_dim, c.tokens);
                         });

struct RopeCase {
  int heads;
  int kv_heads;
  int head_dim;
  int rotary_dim;
  int tokens;
};

class RopeScatterFp8Test : public ::testing::TestWithParam<RopeCase> {};

TEST_P(RopeScatterFp8Test, WritesTheCodesOfTheBf16Rows) {
  CELLM_REQUIRE_GPU();
  const RopeCase c = GetParam();
  std::mt19937 rng(static_cast<unsigned>(700 + c.head_dim + c.tokens));
  const Rows r = make_rows(c.tokens, rng);
  const std::int64_t stride = static_cast<std::int64_t>(c.heads + 2 * c.kv_heads) * c.head_dim;
  const auto qkv = inputs_with_edges(static_cast<std::size_t>(c.tokens * stride), rng, -6.0f, 6.0f);
  const DeviceArray<float> freq(inverse_frequencies(c.rotary_dim, 10000.0));
  DeviceArray<bf16> qkv16(qkv), qkv8(qkv);
  const std::int64_t row = static_cast<std::int64_t>(c.kv_heads) * c.head_dim;
  Targets t(r, row);

  RopeScatterParams p;
  t.bind_rows(p, c.kv_heads, c.head_dim);
  p.inv_freq = freq.data();
  p.q_stride = p.k_stride = p.v_stride = stride;
  p.num_heads = c.heads;
  p.rotary_dim = c.rotary_dim;
  const auto bind = [&](RopeScatterParams q, DeviceArray<bf16>& x, void* k_pool, void* v_pool,
                        DeviceArray<std::int32_t>& table, KvDtype dtype) {
    q.q = x.data();
    q.k = x.data() + static_cast<std::int64_t>(c.heads) * c.head_dim;
    q.v = q.k + row;
    q.k_pool = k_pool;
    q.v_pool = v_pool;
    q.cell_table = table.data();
    q.kv_dtype = dtype;
    return q;
  };
  const RopeScatterParams p16 =
      bind(p, qkv16, t.pools.k16.data(), t.pools.v16.data(), t.table16, KvDtype::kBF16);
  const RopeScatterParams p8 =
      bind(p, qkv8, t.pools.k8.data(), t.pools.v8.data(), t.table8, KvDtype::kFp8);
  ASSERT_TRUE(p16.validate().is_ok()) << p16.validate().to_string();
  ASSERT_TRUE(p8.validate().is_ok()) << p8.validate().to_string();
  launch_rope_scatter(p16, nullptr);
  launch_rope_scatter(p8, nullptr);

  t.expect_same_writes("rope_scatter");
  // q is rotated in place the same way whatever the pools hold.
  const auto q16 = qkv16.download();
  const auto q8 = qkv8.download();
  for (std::size_t i = 0; i < q16.size(); ++i) {
    ASSERT_EQ(std::bit_cast<std::uint16_t>(q8[i]), std::bit_cast<std::uint16_t>(q16[i]))
        << "q element " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, RopeScatterFp8Test,
                         ::testing::Values(RopeCase{32, 8, 64, 64, 3},    // 1B
                                           RopeCase{32, 8, 128, 128, 9},  // 8B
                                           RopeCase{4, 1, 256, 256, 40},  // gemma 270m
                                           RopeCase{8, 2, 64, 32, 5},     // partial rotary
                                           RopeCase{4, 2, 16, 16, 6}),    // the fixtures
                         [](const auto& info) {
                           const RopeCase& c = info.param;
                           return fmt::format("h{}_kv{}_hd{}_rot{}_t{}", c.heads, c.kv_heads,
                                              c.head_dim, c.rotary_dim, c.tokens);
                         });

struct GemvCase {
  int m;
  int heads;
  int kv_heads;
  int head_dim;
  int k;
  bool tensor_cores;
};

class GemvRopeFp8Test : public ::testing::TestWithParam<GemvCase> {};

// The rope epilogue stores each k and v element as it finishes; into FP8
// pools it stores the code of the bf16 value it would have stored.
TEST_P(GemvRopeFp8Test, WritesTheCodesOfTheBf16Rows) {
  CELLM_REQUIRE_GPU();
  const GemvCase c = GetParam();
  const int hd = c.head_dim;
  const int n = (c.heads + 2 * c.kv_heads) * hd;
  std::mt19937 rng(static_cast<unsigned>(c.m * 1000 + n + c.k));
  const auto a = random_bf16(static_cast<std::size_t>(c.m) * c.k, rng);
  const auto w = random_bf16(static_cast<std::size_t>(n) * c.k, rng, -1.0f, 1.0f);
  // Edge values in the bias: some k and v pass 448 and saturate.
  const auto bias = inputs_with_edges(static_cast<std::size_t>(n), rng, -0.5f, 0.5f);
  std::mt19937 cell_rng(3);
  const Rows r = make_rows(c.m, cell_rng);
  const DeviceArray<bf16> da(a), dw(w), dbias(bias);
  const DeviceArray<float> freq(inverse_frequencies(hd, 500000.0));
  const std::size_t out_count = static_cast<std::size_t>(c.m) * n;
  DeviceArray<bf16> out16(out_count), out8(out_count);
  Targets t(r, static_cast<std::int64_t>(c.kv_heads) * hd);

  GemvParams g = gemv_dense(da.data(), dw.data(), nullptr, c.m, n, c.k);
  g.bias = dbias.data();
  g.tensor_cores = c.tensor_cores;
  g.epilogue = GemvEpilogue::kRopeScatter;
  RopeScatterParams rs;
  t.bind_rows(rs, c.kv_heads, hd);
  rs.inv_freq = freq.data();
  rs.q_stride = rs.k_stride = rs.v_stride = n;
  rs.num_heads = c.heads;
  rs.rotary_dim = hd;
  const auto run = [&](DeviceArray<bf16>& out, void* k_pool, void* v_pool,
                       DeviceArray<std::int32_t>& table, KvDtype dtype) {
    GemvParams x = g;
    x.out = out.data();
    x.rope = rs;
    x.rope.q = out.data();
    x.rope.k = out.data() + static_cast<std::int64_t>(c.heads) * hd;
    x.rope.v = x.rope.k + static_cast<std::int64_t>(c.kv_heads) * hd;
    x.rope.k_pool = k_pool;
    x.rope.v_pool = v_pool;
    x.rope.cell_table = table.data();
    x.rope.kv_dtype = dtype;
    ASSERT_TRUE(x.validate().is_ok()) << x.validate().to_string();
    ASSERT_EQ(gemv_uses_tensor_cores(x), c.tensor_cores);
    launch_gemv(x, nullptr);
  };
  run(out16, t.pools.k16.data(), t.pools.v16.data(), t.table16, KvDtype::kBF16);
  run(out8, t.pools.k8.data(), t.pools.v8.data(), t.table8, KvDtype::kFp8);

  t.expect_same_writes(c.tensor_cores ? "gemv rope (tensor cores)" : "gemv rope");
  // The q rows (the product's first heads) are the same bits either way.
  const auto q16 = out16.download();
  const auto q8 = out8.download();
  for (int row = 0; row < c.m; ++row) {
    for (int col = 0; col < c.heads * hd; ++col) {
      const std::size_t i = static_cast<std::size_t>(row) * n + col;
      ASSERT_EQ(std::bit_cast<std::uint16_t>(q8[i]), std::bit_cast<std::uint16_t>(q16[i]))
          << "q row " << row << " column " << col;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, GemvRopeFp8Test,
                         ::testing::Values(GemvCase{1, 32, 8, 64, 2048, false},
                                           GemvCase{3, 4, 2, 64, 520, false},  // padding, outside
                                           GemvCase{4, 32, 8, 128, 512, false},
                                           GemvCase{1, 32, 8, 64, 2048, true},
                                           GemvCase{1, 32, 8, 128, 520, true},
                                           GemvCase{3, 14, 2, 16, 896, true}),
                         [](const auto& info) {
                           const GemvCase& c = info.param;
                           return fmt::format("m{}_h{}_kv{}_hd{}_k{}{}", c.m, c.heads, c.kv_heads,
                                              c.head_dim, c.k, c.tensor_cores ? "_mma" : "");
                         });

// NaN stays NaN (E4M3's S.1111.111), infinities and values past the range
// saturate to +-448 (0x7E / 0xFE): cvt.satfinite's rule, which the host
// encoder follows for everything but NaN's sign.
TEST(KvFp8EncodeTest, SaturatesAndKeepsNan) {
  CELLM_REQUIRE_GPU();
  const std::vector<float> values = {std::numeric_limits<float>::quiet_NaN(),
                                     std::numeric_limits<float>::infinity(),
                                     -std::numeric_limits<float>::infinity(),
                                     1e6f,
                                     -464.0f,
                                     448.0f,
                                     -448.0f,
                                     0x1p-9f};
  const std::vector<fp8_e4m3> want = {0x7f, 0x7e, 0xfe, 0x7e, 0xfe, 0x7e, 0xfe, 0x01};
  std::vector<bf16> row(16, to_bf16(0.0f));
  for (std::size_t i = 0; i < values.size(); ++i) row[i] = to_bf16(values[i]);
  const DeviceArray<bf16> kv(row);
  const DeviceArray<std::int32_t> cells(std::vector<std::int32_t>{1});
  DeviceArray<fp8_e4m3> k8(32), v8(32);
  KvScatterParams p;
  p.k = kv.data();
  p.v = kv.data();
  p.k_pool = k8.data();
  p.v_pool = v8.data();
  p.cells = cells.data();
  p.k_stride = p.v_stride = 16;
  p.num_tokens = 1;
  p.num_kv_heads = 1;
  p.head_dim = 16;
  p.max_cells = 2;
  p.kv_dtype = KvDtype::kFp8;
  ASSERT_TRUE(p.validate().is_ok()) << p.validate().to_string();
  launch_kv_scatter(p, nullptr);
  const auto got = v8.download();
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (std::isnan(values[i])) {
      EXPECT_EQ(got[16 + i] & 0x7f, 0x7f) << "NaN became 0x" << std::hex << int{got[16 + i]};
    } else {
      EXPECT_EQ(got[16 + i], want[i]) << values[i];
      EXPECT_EQ(got[16 + i], format::f32_to_e4m3(values[i])) << "host encoder, " << values[i];
    }
  }
}

}  // namespace
}  // namespace cellm::cuda
