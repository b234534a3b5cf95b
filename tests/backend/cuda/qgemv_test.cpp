// The quantized decode GEMV against a float64 product of the weights as the
// CPU's reference dequantizer (format::dequantize_f32) decodes the same
// blocks: every block type (Q6_K_R8: Q6_K rows repacked as the upload
// repacks them, against the reference's decoding of the file's Q6_K rows),
// rows 1..8, n not a multiple of a warp's rows,
// k tails that end inside a 256-weight group (the 32-weight types), padded
// weight rows, column-slice activations, bf16 and float output, stores that
// stay inside [m, n] of a wider output, and the same bits on every run.
// Refusals run without a GPU.
#include "backend/cuda/kernels/qgemv.cuh"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <span>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "backend/cuda/kernels/quant_blocks_q6r8.h"
#include "backend/cuda/resources.h"
#include "cellm/status.h"
#include "format/fp8.h"
#include "format/ggml_types.h"
#include "gpu_test_util.h"
#include "model/gguf_model.h"
#include "qgemv_test_blocks.h"

namespace cellm::cuda {
namespace {

using testing::DeviceArray;
using testing::kBf16Nmse;
using testing::nmse;
using testing::random_bf16;
using testing::to_float;

using qtest::dequantized_row;
using qtest::device_rows;
using qtest::file_type;
using qtest::Fp8Scales;
using qtest::random_rows;
using qtest::random_scales;
using qtest::type_name;

struct Case {
  QuantType type;
  int m, n, k;
  bool f32_out;
  bool bias = false;
  bool packed = false;  // rows back to back (no padding between them)
  int pad = 4;          // otherwise, bytes past each row
};

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  const Case& c = info.param;
  return fmt::format("{}_m{}_n{}_k{}_{}{}{}{}", type_name(c.type), c.m, c.n, c.k,
                     c.f32_out ? "f32" : "bf16", c.bias ? "_bias" : "", c.packed ? "_packed" : "",
                     !c.packed && c.pad != 4 ? fmt::format("_pad{}", c.pad) : "");
}

class QGemvTest : public ::testing::TestWithParam<Case> {};

TEST_P(QGemvTest, MatchesTheReferenceDequantizersProduct) {
  CELLM_REQUIRE_GPU();
  const Case c = GetParam();
  std::mt19937 rng(static_cast<unsigned>(c.m * 131 + c.n * 7 + c.k + static_cast<int>(c.type)));
  const std::int64_t row_bytes =
      static_cast<std::int64_t>(c.k / quant_block_elems(c.type)) * quant_block_bytes(c.type);
  // Padded rows, except where a case asks for packed ones (Q4_K's wide
  // kernel takes rows on 16-byte boundaries, the generic one the others).
  const std::int64_t ldw_bytes = c.packed ? row_bytes : row_bytes + c.pad;
  const int lda = c.k + 8;  // a column slice of a wider buffer
  const int ldc = c.n + 3;  // the columns past n must stay untouched
  const auto w = random_rows(file_type(c.type), c.n, c.k, ldw_bytes, rng);
  // FP8: per-row scales for odd m over an even n, else 32-column blocks.
  const Fp8Scales scales = random_scales(c.n, c.k, c.m % 2 == 1 && c.n % 2 == 0 ? c.k : 32, rng);
  DeviceArray<float> dscales(scales.values);
  const auto a = random_bf16(static_cast<std::size_t>(c.m) * lda, rng);
  const auto bias = random_bf16(static_cast<std::size_t>(c.n), rng, -4.0f, 4.0f);
  DeviceArray<std::uint8_t> dw(device_rows(c.type, w, c.n, c.k, ldw_bytes));
  DeviceArray<bf16> da(a), dbias(bias);
  DeviceArray<bf16> out16(static_cast<std::size_t>(c.m) * ldc);
  DeviceArray<float> out32(static_cast<std::size_t>(c.m) * ldc);
  out16.poison();
  out32.poison();

  QGemvParams p;
  p.a = da.data();
  p.w = dw.data();
  p.type = c.type;
  p.bias = c.bias ? dbias.data() : nullptr;
  p.out = c.f32_out ? static_cast<void*>(out32.data()) : out16.data();
  p.out_f32 = c.f32_out;
  p.m = c.m;
  p.n = c.n;
  p.k = c.k;
  p.lda = lda;
  p.ldw_bytes = ldw_bytes;
  p.ldc = ldc;
  if (c.type == QuantType::kF8_E4M3) p.scales = {dscales.data(), scales.cols, scales.ld};
  ASSERT_TRUE(p.validate().is_ok()) << p.validate().to_string();
  launch_qgemv(p, nullptr);
  CELLM_CUDA_CHECK(cudaGetLastError());
  const std::vector<float> got = c.f32_out ? out32.download() : to_float(out16.download());

  const std::vector<float> af = to_float(a);
  std::vector<double> ref(static_cast<std::size_t>(c.m) * c.n);
  for (int col = 0; col < c.n; ++col) {
    const std::vector<float> wr =
        dequantized_row(file_type(c.type), w, col, c.k, ldw_bytes, scales);
    for (int row = 0; row < c.m; ++row) {
      double sum = 0.0;
      for (int i = 0; i < c.k; ++i) {
        sum += static_cast<double>(wr[static_cast<std::size_t>(i)]) *
               af[static_cast<std::size_t>(row) * lda + i];
      }
      if (c.bias) sum += testing::from_bf16(bias[static_cast<std::size_t>(col)]);
      ref[static_cast<std::size_t>(row) * c.n + col] = sum;
    }
  }
  const std::vector<float> inside = qtest::inside_columns(got, c.m, c.n, ldc);
  // Float sums in another order than the float64 reference (and the scale
  // products fused): far below bf16's rounding when the output is float.
  EXPECT_LT(nmse(inside, ref), c.f32_out ? 1e-9 : kBf16Nmse);

  // Same inputs, same bits.
  launch_qgemv(p, nullptr);
  const std::vector<float> again = c.f32_out ? out32.download() : to_float(out16.download());
  EXPECT_EQ(0, std::memcmp(got.data(), again.data(), got.size() * sizeof(float)));
}

std::vector<Case> cases() {
  std::vector<Case> out;
  for (QuantType t :
       {QuantType::kQ4_0, QuantType::kQ4_1, QuantType::kQ5_0, QuantType::kQ5_1, QuantType::kQ8_0,
        QuantType::kQ2_K, QuantType::kQ3_K, QuantType::kQ4_K, QuantType::kQ5_K, QuantType::kQ6_K,
        QuantType::kIQ4_XS, QuantType::kF8_E4M3}) {
    const bool small_blocks = quant_block_elems(t) == 32;
    for (int m : {1, 2, 3, 4, 5, 8}) {
      out.push_back({t, m, 37, 512, m % 2 == 1, m == 3 || m == 4});
      // SmolLM2's hidden size (576) ends inside a 256-weight group.
      out.push_back({t, m, 64, small_blocks ? 576 : 768, m % 2 == 0});
    }
    // Few rows over a long k: split-K (warps of a pair add in shared
    // memory), an odd n and, for the 32-weight types, a last group cut short.
    out.push_back({t, 3, 37, small_blocks ? 2080 : 2048, true, true});
    out.push_back({t, 1, 6, 4096, false});
    // Packed rows (Q4_K at one row: the wide-load kernel), with and without
    // split-K, a k whose last iteration holds fewer than four super-blocks,
    // odd n.
    for (int m : {1, 2, 3, 8}) {
      out.push_back({t, m, 37, small_blocks ? 576 : 768, m % 2 == 1, m == 3, true});
      out.push_back({t, m, 21, small_blocks ? 2080 : 4352, m % 2 == 0, m == 2, true});
    }
    out.push_back({t, 1, 512, 2048, false, false, true});
    // Projection shapes of Llama 3: 8B's o/q (4096 x 4096) and 1B's down (2048 x 8192).
    out.push_back({t, 1, 4096, 4096, false, false, true});
    out.push_back({t, 8, 2048, 8192, true, false, true});
  }
  // Q6_K_R8 (k a multiple of 2048). The wide-load kernel at one row on
  // 16-byte boundaries (packed rows, or rows padded by 16): one group, three
  // (the last load holds one live group), seven (split-K in two, a dead
  // load) and eight (split in four), one row and odd n, Llama 3 8B's v/o and
  // down shapes. The generic decoder over the same layout at two to eight
  // rows, and at one row when the stride (padded by 4) is off 16 bytes.
  const QuantType r8 = QuantType::kQ6_K_R8;
  for (int m = 1; m <= kQGemvMaxRows; ++m) {
    out.push_back({r8, m, 37, 2048, m % 2 == 1, m == 3, true});
    out.push_back({r8, m, 21, 6144, m % 2 == 0, m == 2});
  }
  out.push_back({r8, 1, 21, 6144, true, false, true});
  out.push_back({r8, 1, 21, 14336, false, true, false, 16});
  out.push_back({r8, 1, 6, 16384, true, false, true});
  out.push_back({r8, 1, 1, 2048, true, false, true});
  out.push_back({r8, 1, 1024, 4096, false, false, true});
  out.push_back({r8, 1, 4096, 4096, false, false, true});
  out.push_back({r8, 1, 4096, 14336, false, false, true});
  out.push_back({r8, 8, 2048, 8192, true, false, true});
  return out;
}

INSTANTIATE_TEST_SUITE_P(Types, QGemvTest, ::testing::ValuesIn(cases()), case_name);

// The bf16 rows prefill multiplies: each weight as the reference dequantizer
// gives it, rounded to bf16 (one bf16 step apart at most, where the kernel's
// fused multiply-add lands the float on the other side of a rounding
// boundary), and nothing written past the columns.
class DequantizeTest : public ::testing::TestWithParam<QuantType> {};

TEST_P(DequantizeTest, GivesTheReferenceWeightsInBf16) {
  CELLM_REQUIRE_GPU();
  const QuantType type = GetParam();
  std::mt19937 rng(static_cast<unsigned>(type) * 17u);
  const int rows = 19;
  const int cols = type == QuantType::kQ6_K_R8 ? 4096 : quant_block_elems(type) == 32 ? 576 : 768;
  const std::int64_t ldw_bytes =
      static_cast<std::int64_t>(cols / quant_block_elems(type)) * quant_block_bytes(type) + 4;
  const int ldo = cols + 8;
  const auto w = random_rows(file_type(type), rows, cols, ldw_bytes, rng);
  const Fp8Scales scales = random_scales(rows, cols, 64, rng);
  DeviceArray<float> dscales(scales.values);
  DeviceArray<std::uint8_t> dw(device_rows(type, w, rows, cols, ldw_bytes));
  DeviceArray<bf16> out(static_cast<std::size_t>(rows) * ldo);
  out.poison();
  DequantParams p;
  p.w = dw.data();
  p.type = type;
  p.rows = rows;
  p.cols = cols;
  p.ldw_bytes = ldw_bytes;
  p.out = out.data();
  p.ldo = ldo;
  if (type == QuantType::kF8_E4M3) p.scales = {dscales.data(), scales.cols, scales.ld};
  ASSERT_TRUE(p.validate().is_ok()) << p.validate().to_string();
  launch_dequantize(p, nullptr);
  CELLM_CUDA_CHECK(cudaGetLastError());
  const std::vector<float> got = to_float(out.download());
  int off_by_one = 0;
  for (int r = 0; r < rows; ++r) {
    const std::vector<float> ref = dequantized_row(file_type(type), w, r, cols, ldw_bytes, scales);
    for (int c = 0; c < ldo; ++c) {
      const float v = got[static_cast<std::size_t>(r) * ldo + c];
      if (c >= cols) {
        EXPECT_TRUE(std::isnan(v)) << "row " << r << " col " << c << " written";
        continue;
      }
      const float want = testing::from_bf16(testing::to_bf16(ref[static_cast<std::size_t>(c)]));
      if (v == want) continue;
      ++off_by_one;
      EXPECT_LE(std::fabs(v - want), std::fabs(want) * (1.0f / 128.0f))
          << "row " << r << " col " << c << ": " << v << " against " << want;
    }
  }
  // A rounding boundary is rarely straddled: at most 1% of the weights.
  EXPECT_LE(off_by_one, rows * cols / 100);
}

INSTANTIATE_TEST_SUITE_P(Types, DequantizeTest,
                         ::testing::Values(QuantType::kQ4_0, QuantType::kQ4_1, QuantType::kQ5_0,
                                           QuantType::kQ5_1, QuantType::kQ8_0, QuantType::kQ2_K,
                                           QuantType::kQ3_K, QuantType::kQ4_K, QuantType::kQ5_K,
                                           QuantType::kQ6_K, QuantType::kIQ4_XS,
                                           QuantType::kF8_E4M3, QuantType::kQ6_K_R8),
                         [](const ::testing::TestParamInfo<QuantType>& info) {
                           return type_name(info.param);
                         });

TEST(QGemvValidateTest, RefusesShapesTheKernelCannotRun) {
  alignas(16) static bf16 a[4096];
  alignas(16) static std::uint8_t w[8192];
  alignas(16) static float out[64];
  const QGemvParams p = qtest::q4k_params(a, w, out, 1);
  EXPECT_TRUE(p.validate().is_ok()) << p.validate().to_string();

  QGemvParams bad = p;
  bad.k = 320;  // not whole super-blocks
  EXPECT_NE(bad.validate().to_string().find("multiple of the block's 256"), std::string::npos)
      << bad.validate().to_string();
  bad = p;
  bad.m = kQGemvMaxRows + 1;
  EXPECT_FALSE(bad.validate().is_ok());
  bad = p;
  bad.ldw_bytes = 143;  // shorter than a row
  EXPECT_NE(bad.validate().to_string().find("144 bytes"), std::string::npos)
      << bad.validate().to_string();
  bad = p;
  bad.ldw_bytes = 146;  // Q4_K rows are read in 4-byte words
  EXPECT_FALSE(bad.validate().is_ok());
  bad = p;
  bad.type = static_cast<QuantType>(9);  // Q8_1
  EXPECT_NE(bad.validate().to_string().find("not one the kernel decodes"), std::string::npos);
  bad = p;
  bad.out = a;  // the product over its own input
  bad.out_f32 = false;
  EXPECT_NE(bad.validate().to_string().find("overlap"), std::string::npos);
  EXPECT_TRUE(quant_type_supported(14));
  EXPECT_FALSE(quant_type_supported(9));

  // FP8 rows without their scales, or with scales that split a lane's run.
  QGemvParams f8 = p;
  f8.type = QuantType::kF8_E4M3;
  f8.ldw_bytes = 256;
  EXPECT_NE(f8.validate().to_string().find("FP8 rows need scales"), std::string::npos)
      << f8.validate().to_string();
  alignas(16) static float scales[8];
  f8.scales = {scales, 128, 2};
  EXPECT_TRUE(f8.validate().is_ok()) << f8.validate().to_string();
  f8.scales.cols = 12;
  EXPECT_FALSE(f8.validate().is_ok());
  f8.scales = {scales, 128, 1};  // 256 columns need two a row
  EXPECT_FALSE(f8.validate().is_ok());

  // Repacked Q6_K rows: whole 2048-weight groups of 1680 bytes.
  QGemvParams r8 = p;
  r8.type = QuantType::kQ6_K_R8;
  r8.k = 2048;
  r8.lda = 2048;
  r8.ldw_bytes = 1680;
  EXPECT_TRUE(r8.validate().is_ok()) << r8.validate().to_string();
  EXPECT_TRUE(quant_type_supported(static_cast<std::uint32_t>(QuantType::kQ6_K_R8)));
  bad = r8;
  bad.k = 768;  // Q6_K super-blocks, but not whole groups
  EXPECT_NE(bad.validate().to_string().find("multiple of the block's 2048"), std::string::npos)
      << bad.validate().to_string();
  bad = r8;
  bad.ldw_bytes = 1679;  // shorter than a row
  EXPECT_NE(bad.validate().to_string().find("1680 bytes"), std::string::npos)
      << bad.validate().to_string();
}

// `cellm inspect` predicts the GPU's resident bytes from the model layer's
// list of block types the GPU keeps; it must be the kernel's list.
TEST(QGemvValidateTest, TheModelLayersListOfKeptTypesIsTheKernels) {
  for (std::uint32_t raw = 0; raw < 64; ++raw) {
    EXPECT_EQ(model::gguf_type_kept_on_gpu(static_cast<format::GgmlType>(raw)),
              quant_type_supported(raw))
        << "GGUF type " << raw;
  }
}

}  // namespace
}  // namespace cellm::cuda
