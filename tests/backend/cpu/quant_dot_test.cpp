// Unit tests of the fast CPU program's integer dot kernels (quant_dot.h):
// for every weight type, random blocks are decoded by the format library's
// own dequantizer (independent of the kernels), the activations are
// quantized, and the kernels must match the double-precision dot of the
// decoded values within float rounding; the AVX2 kernels must equal the
// scalar ones bit for bit.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "backend/cpu/qmatrix.h"
#include "backend/cpu/qmatrix_x8.h"
#include "backend/cpu/quant_dot.h"
#include "core/dtype.h"
#include "format/ggml_types.h"

namespace cellm::cpu {
namespace {

using format::GgmlType;

struct Case {
  GgmlType type;
  const char* name;
};

const Case kCases[] = {
    {GgmlType::kQ4_0, "Q4_0"}, {GgmlType::kQ4_1, "Q4_1"}, {GgmlType::kQ5_0, "Q5_0"},
    {GgmlType::kQ8_0, "Q8_0"}, {GgmlType::kQ4_K, "Q4_K"}, {GgmlType::kQ5_K, "Q5_K"},
    {GgmlType::kQ6_K, "Q6_K"},
};

// Random blocks of `type` for `cols` elements: random quant bytes, scales
// set to valid small f16 values.
std::vector<std::uint8_t> random_row(GgmlType type, std::int64_t cols, std::mt19937& rng) {
  const auto info = format::ggml_type_info(static_cast<std::uint32_t>(type));
  const std::int64_t blocks = cols / info->block_elems;
  std::vector<std::uint8_t> row(static_cast<std::size_t>(blocks) * info->block_bytes);
  for (auto& b : row) b = static_cast<std::uint8_t>(rng());
  std::uniform_real_distribution<float> scale(0.001f, 0.05f);
  auto put = [&](std::uint8_t* p) {
    const std::uint16_t h = f32_to_f16(scale(rng));
    std::memcpy(p, &h, 2);
  };
  for (std::int64_t b = 0; b < blocks; ++b) {
    std::uint8_t* blk = row.data() + static_cast<std::size_t>(b) * info->block_bytes;
    switch (type) {
      case GgmlType::kQ4_0:
      case GgmlType::kQ5_0:
      case GgmlType::kQ8_0: put(blk); break;
      case GgmlType::kQ4_1:
      case GgmlType::kQ4_K:
      case GgmlType::kQ5_K:
        put(blk);
        put(blk + 2);
        break;
      case GgmlType::kQ6_K: put(blk + offsetof(BlockQ6_K, d)); break;
      default: break;
    }
  }
  return row;
}

std::vector<float> dequant_acts(ActKind kind, const std::vector<std::uint8_t>& q,
                                std::int64_t cols) {
  std::vector<float> out(static_cast<std::size_t>(cols));
  const std::int64_t bs = act_block_elems(kind);
  for (std::int64_t b = 0; b < cols / bs; ++b) {
    float d;
    const std::int8_t* qs;
    if (kind == ActKind::kQ8) {
      const auto* blk = reinterpret_cast<const ActQ8*>(q.data()) + b;
      d = blk->d;
      qs = blk->qs;
    } else {
      const auto* blk = reinterpret_cast<const ActQ8K*>(q.data()) + b;
      d = blk->d;
      qs = blk->qs;
    }
    for (std::int64_t i = 0; i < bs; ++i) out[static_cast<std::size_t>(b * bs + i)] = d * qs[i];
  }
  return out;
}

class QuantDot : public ::testing::TestWithParam<Case> {};

TEST_P(QuantDot, MatchesDequantizedFloatDot) {
  const Case c = GetParam();
  std::mt19937 rng(1234 + static_cast<unsigned>(c.type));
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (const std::int64_t cols : {256, 768, 2048}) {
    for (int trial = 0; trial < 20; ++trial) {
      const std::vector<std::uint8_t> w = random_row(c.type, cols, rng);
      std::vector<float> wf(static_cast<std::size_t>(cols));
      ASSERT_TRUE(format::dequantize_f32(c.type, w, wf).is_ok());
      std::vector<float> x(static_cast<std::size_t>(cols));
      for (auto& v : x) v = normal(rng) * (trial % 3 == 0 ? 10.0f : 1.0f);
      const ActKind kind = act_kind(c.type);
      std::vector<std::uint8_t> a(act_row_bytes(kind, cols));
      quantize_act(kind, x.data(), cols, a.data());
      const std::vector<float> xq = dequant_acts(kind, a, cols);
      // Quantized activations are within half a step of the input.
      for (std::int64_t i = 0; i < cols; ++i) {
        const std::int64_t bs = act_block_elems(kind);
        float amax = 0.0f;
        for (std::int64_t j = (i / bs) * bs; j < (i / bs + 1) * bs; ++j) {
          amax = std::max(amax, std::fabs(x[static_cast<std::size_t>(j)]));
        }
        ASSERT_LE(std::fabs(xq[static_cast<std::size_t>(i)] - x[static_cast<std::size_t>(i)]),
                  amax / 127.0f * 0.5001f)
            << "element " << i;
      }
      double exact = 0.0, magnitude = 0.0;
      for (std::int64_t i = 0; i < cols; ++i) {
        const double p = static_cast<double>(wf[static_cast<std::size_t>(i)]) *
                         xq[static_cast<std::size_t>(i)];
        exact += p;
        magnitude += std::fabs(p);
      }
      const float s = dot_kernel(c.type, Isa::kScalar)(w.data(), a.data(), cols);
      // Float32 accumulation over blocks: a few ulps of the summed magnitude.
      EXPECT_NEAR(s, exact, 1e-5 * magnitude + 1e-6)
          << c.name << " cols " << cols << " trial " << trial;
      // The decode kernel (float vector accumulation where it has one).
      const float r = dot_row_kernel(c.type, best_isa())(w.data(), a.data(), cols);
      EXPECT_NEAR(r, exact, 1e-5 * magnitude + 1e-6)
          << c.name << " row kernel, cols " << cols << " trial " << trial;
      if (best_isa() == Isa::kAvx2) {
        const float v = dot_kernel(c.type, Isa::kAvx2)(w.data(), a.data(), cols);
        EXPECT_EQ(std::memcmp(&s, &v, sizeof(float)), 0)
            << c.name << ": AVX2 " << v << " vs scalar " << s << " cols " << cols;
      }
    }
  }
}

// A matrix of `rows` random rows of `type` (bytes owned by `all`).
QMatrix random_matrix(GgmlType type, std::int64_t rows, std::int64_t cols, std::mt19937& rng,
                      std::vector<std::uint8_t>& all) {
  all.clear();
  for (std::int64_t r = 0; r < rows; ++r) {
    const auto row = random_row(type, cols, rng);
    all.insert(all.end(), row.begin(), row.end());
  }
  QMatrix m;
  m.type = type;
  m.rows = rows;
  m.cols = cols;
  m.row_bytes = all.size() / static_cast<std::size_t>(rows);
  m.data = all.data();
  return m;
}

TEST_P(QuantDot, ThreadedMatmulEqualsRowDots) {
  const Case c = GetParam();
  std::mt19937 rng(99 + static_cast<unsigned>(c.type));
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const std::int64_t cols = 512, rows = 301, t = 5;
  std::vector<std::uint8_t> all;
  const QMatrix m = random_matrix(c.type, rows, cols, rng, all);
  std::vector<float> x(static_cast<std::size_t>(t * cols));
  for (auto& v : x) v = normal(rng);
  QuantActs acts;
  ThreadPool pool(3);
  quantize_rows(act_kind(c.type), x.data(), t, cols, pool, acts);
  const DotFn dot = dot_row_kernel(c.type, best_isa());
  std::vector<float> y(static_cast<std::size_t>(t * rows), -1.0f);
  // The summed magnitude of each product, sum |w| |x|: the scale of the
  // float rounding a tile may add.
  std::vector<float> wf(static_cast<std::size_t>(rows * cols));
  ASSERT_TRUE(format::dequantize_f32(c.type, all, wf).is_ok());
  auto magnitude = [&](std::int64_t i, std::int64_t r) {
    double sum = 0;
    for (std::int64_t k = 0; k < cols; ++k) {
      sum += std::fabs(wf[static_cast<std::size_t>(r * cols + k)] *
                       x[static_cast<std::size_t>(i * cols + k)]);
    }
    return sum;
  };
  // Without tiles every entry is exactly the row kernel's; with them (the
  // first 4 tokens) the same within float rounding of the summed magnitude.
  // Tiles of both widths where the processor has them: AVX2's one weight
  // row, AVX-512 VNNI's four (301 rows leave a remainder to the row kernel).
  std::vector<float> y_one_row;
  for (const int variant : {0, 1, 2}) {
    const bool tiled = variant > 0;
    const TileKernel tile = tiled ? dot_tile_kernel(c.type, best_isa(), variant == 2) : TileKernel{};
    if (tiled && tile.fn == nullptr) continue;
    if (variant == 2 && tile.rows == dot_tile_kernel(c.type, best_isa(), false).rows) continue;
    std::fill(y.begin(), y.end(), -1.0f);
    qmatmul(m, acts, dot, tile, pool, y.data(), rows);
    // The four-row tile does each pair's arithmetic as the one-row tile.
    if (variant == 1) y_one_row = y;
    if (variant == 2) {
      for (std::size_t k = 0; k < y.size(); ++k) ASSERT_EQ(y[k], y_one_row[k]) << "entry " << k;
    }
    for (std::int64_t i = 0; i < t; ++i) {
      std::vector<std::uint8_t> a(act_row_bytes(act_kind(c.type), cols));
      quantize_act(act_kind(c.type), x.data() + i * cols, cols, a.data());
      for (std::int64_t r = 0; r < rows; ++r) {
        const float want = dot(m.row(r), a.data(), cols);
        const float got = y[static_cast<std::size_t>(i * rows + r)];
        if (tiled && i < kTile) {
          EXPECT_NEAR(got, want, 1e-6 * (std::fabs(want) + 1.0) + 2e-6 * magnitude(i, r))
              << "tiled token " << i << " row " << r;
        } else {
          EXPECT_EQ(got, want) << "token " << i << " row " << r;
        }
      }
    }
  }
}

// Activation quantization writes the same bytes on every ISA: random rows
// with outliers, an all-zero block and exact ties at .5.
TEST(QuantAct, EveryIsaWritesTheSameBytes) {
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  const std::int64_t cols = 1024;
  std::vector<float> x(static_cast<std::size_t>(cols));
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = normal(rng) * (i % 61 == 0 ? 40.0f : 1.0f);
  for (int i = 0; i < 32; ++i) x[static_cast<std::size_t>(64 + i)] = 0.0f;
  for (int i = 0; i < 32; ++i) x[static_cast<std::size_t>(128 + i)] = (i % 2 ? 0.5f : 1.5f) * (i < 31 ? 1.0f : 127.0f / 1.5f);
  for (const ActKind kind : {ActKind::kQ8, ActKind::kQ8K}) {
    std::vector<std::uint8_t> want(act_row_bytes(kind, cols)), got(want.size(), 0xAB);
    quantize_act(kind, x.data(), cols, want.data(), Isa::kScalar);
    quantize_act(kind, x.data(), cols, got.data(), best_isa());
    EXPECT_EQ(got, want) << (kind == ActKind::kQ8 ? "Q8" : "Q8K");
  }
}

// The x8 layout (qmatrix_x8.h) on random blocks: the threaded product in
// groups of eight rows equals the exact row dots within float rounding of
// the summed magnitude, for a whole tile of tokens and a partial one; and
// each token's outputs have the bits of the same token multiplied alone
// (what makes a speculative verification row equal the plain decode row).
class QuantDotX8 : public ::testing::TestWithParam<Case> {};

TEST_P(QuantDotX8, InterleavedRowsEqualRowDots) {
  const Case c = GetParam();
  ASSERT_TRUE(x8_type(c.type));
  if (!has_avx512_vnni()) GTEST_SKIP() << "this processor has no AVX-512 VNNI: the x8 layout is not used";
  std::mt19937 rng(7 + static_cast<unsigned>(c.type));
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const std::int64_t cols = 512, rows = 40, t = kX8MaxActs + 3;
  std::vector<std::uint8_t> all;
  const QMatrix m = random_matrix(c.type, rows, cols, rng, all);
  std::vector<std::uint8_t> packed = repack_x8(c.type, all.data(), rows, cols, m.row_bytes);
  QMatrix x8 = m;
  x8.x8 = true;
  x8.group_bytes = packed.size() / (rows / kX8Rows);
  x8.data = packed.data();
  std::vector<float> x(static_cast<std::size_t>(t * cols));
  for (auto& v : x) v = normal(rng);
  std::vector<float> wf(static_cast<std::size_t>(rows * cols));
  ASSERT_TRUE(format::dequantize_f32(c.type, all, wf).is_ok());
  QuantActs acts;
  ThreadPool pool(3);
  quantize_rows(act_kind(c.type), x.data(), t, cols, pool, acts);
  std::vector<float> y(static_cast<std::size_t>(t * rows), -1.0f);
  qmatmul(x8, acts, nullptr, TileKernel{}, pool, y.data(), rows);
  const DotFn exact = dot_kernel(c.type, Isa::kScalar);
  for (std::int64_t i = 0; i < t; ++i) {
    for (std::int64_t r = 0; r < rows; ++r) {
      double magnitude = 0;
      for (std::int64_t k = 0; k < cols; ++k) {
        magnitude += std::fabs(wf[static_cast<std::size_t>(r * cols + k)] *
                               x[static_cast<std::size_t>(i * cols + k)]);
      }
      const float want = exact(m.row(r), acts.row(i), cols);
      EXPECT_NEAR(y[static_cast<std::size_t>(i * rows + r)], want, 2e-6 * magnitude + 1e-6)
          << "token " << i << " row " << r;
    }
  }
  for (std::int64_t i = 0; i < t; ++i) {
    QuantActs one;
    quantize_rows(act_kind(c.type), x.data() + i * cols, 1, cols, pool, one);
    std::vector<float> alone(static_cast<std::size_t>(rows), -1.0f);
    qmatmul(x8, one, nullptr, TileKernel{}, pool, alone.data(), rows);
    EXPECT_EQ(0, std::memcmp(alone.data(), y.data() + i * rows, sizeof(float) * rows))
        << "token " << i << " multiplied alone";
  }
}

INSTANTIATE_TEST_SUITE_P(Types, QuantDot, ::testing::ValuesIn(kCases),
                         [](const auto& info) { return std::string(info.param.name); });

const Case kX8Cases[] = {{GgmlType::kQ4_0, "Q4_0"},
                         {GgmlType::kQ4_1, "Q4_1"},
                         {GgmlType::kQ5_0, "Q5_0"},
                         {GgmlType::kQ8_0, "Q8_0"},
                         {GgmlType::kQ4_K, "Q4_K"},
                         {GgmlType::kQ6_K, "Q6_K"}};
INSTANTIATE_TEST_SUITE_P(Types, QuantDotX8, ::testing::ValuesIn(kX8Cases),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(QuantDotIsa, ThisMachineUsesAvx2WhenItHasIt) {
  // The x86-64 build machines have AVX2; a scalar choice there would be a
  // detection bug that silently costs most of the speed.
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
    EXPECT_EQ(active_isa(), Isa::kAvx2);
  }
#endif
  EXPECT_EQ(dot_kernel(GgmlType::kF32, Isa::kScalar), nullptr);
  EXPECT_FALSE(has_quant_kernel(GgmlType::kBF16));
}

}  // namespace
}  // namespace cellm::cpu
