// The tensor-core quantized GEMV (qgemv_mma.cuh) for every block type at 1,
// 2, 3, 5 and 8 rows: against a float64 product over the weights
// launch_dequantize writes (the bf16 values the kernel must multiply: tight),
// and over the host's run of the same block decoders (quant_blocks.h, rounded
// to bf16: a reference that does not go through the GPU); row r of an m-row
// call against a one-row call on row r, bit for bit; bias, float and bf16
// output, stores inside [m, n] of a wider output, the same bits on every run,
// launches with and without PDL. Shapes: k at the type's minimum (one group:
// warps store their own sums), k ending inside a 256-weight group (the
// 32-weight types), n not a multiple of 16, rows padded by 4 bytes (the
// generic decoder) and by 16 (Q4_K, FP8, Q6_K_R8: the 16-byte sources), FP8
// scales per row, per 128 and per 32 columns, and Llama 3 8B-like shapes that
// split k over a cluster and give a warp several tiles. Refusals and the
// forward's choice run without a GPU.
#include "backend/cuda/kernels/qgemv_mma.cuh"

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "backend/cuda/kernels/qgemv.cuh"
#include "backend/cuda/resources.h"
#include "cellm/status.h"
#include "gpu_test_util.h"
#include "qgemv_test_util.h"

namespace cellm::cuda {
namespace {

using testing::DeviceArray;
using testing::kBf16Nmse;
using testing::nmse;
using testing::random_bf16;
using testing::to_float;
using namespace qgemv_test;  // NOLINT(google-build-using-namespace): the block builders

struct MmaCase {
  QuantType type;
  int m, n, k;
  bool f32_out;
  bool bias;
  int pad;             // bytes past each weight row (16: the 16-byte sources where rows allow)
  int scale_cols = 0;  // FP8: columns a scale (0: per row at odd m, else 32)
};

std::string case_name(const ::testing::TestParamInfo<MmaCase>& info) {
  const MmaCase& c = info.param;
  return fmt::format("{}_m{}_n{}_k{}_{}{}_pad{}{}", type_name(c.type), c.m, c.n, c.k,
                     c.f32_out ? "f32" : "bf16", c.bias ? "_bias" : "", c.pad,
                     c.scale_cols != 0 ? fmt::format("_scales{}", c.scale_cols) : "");
}

// One case's inputs on both sides and its launch parameters.
class QGemvMmaTest : public ::testing::TestWithParam<MmaCase> {
 protected:
  void SetUp() override {
    CELLM_REQUIRE_GPU();
    c_ = GetParam();
    std::mt19937 rng(
        static_cast<unsigned>(c_.m * 131 + c_.n * 7 + c_.k + c_.pad + static_cast<int>(c_.type)));
    ldw_bytes_ =
        static_cast<std::int64_t>(c_.k / quant_block_elems(c_.type)) * quant_block_bytes(c_.type) +
        c_.pad;
    lda_ = c_.k + 8;  // a column slice of a wider buffer
    ldc_ = c_.n + 3;  // the columns past n must stay untouched
    w_ = random_rows(file_type(c_.type), c_.n, c_.k, ldw_bytes_, rng);
    scales_ = random_scales(c_.n, c_.k,
                            c_.scale_cols != 0 ? c_.scale_cols : (c_.m % 2 == 1 ? c_.k : 32), rng);
    a_ = random_bf16(static_cast<std::size_t>(c_.m) * lda_, rng);
    bias_ = random_bf16(static_cast<std::size_t>(c_.n), rng, -4.0f, 4.0f);
    dscales_.assign(scales_.values);
    dw_.assign(device_rows(c_.type, w_, c_.n, c_.k, ldw_bytes_));
    da_.assign(a_);
    dbias_.assign(bias_);

    p_.a = da_.data();
    p_.w = dw_.data();
    p_.type = c_.type;
    p_.bias = c_.bias ? dbias_.data() : nullptr;
    p_.out_f32 = c_.f32_out;
    p_.m = c_.m;
    p_.n = c_.n;
    p_.k = c_.k;
    p_.lda = lda_;
    p_.ldw_bytes = ldw_bytes_;
    p_.ldc = ldc_;
    if (c_.type == QuantType::kF8_E4M3) p_.scales = {dscales_.data(), scales_.cols, scales_.ld};
    // The forward launches with PDL (and clusters where k is split): all
    // but the 3-row cases do too.
    p_.pdl = c_.m != 3;
  }

  // The kernel's [rows, ldc] output of `p` as raw bits (bf16 widened), from
  // a poisoned buffer.
  std::vector<std::uint32_t> run(QGemvParams p, int rows) const {
    const std::size_t count = static_cast<std::size_t>(rows) * ldc_;
    DeviceArray<float> out32(count);
    DeviceArray<bf16> out16(count);
    out32.poison();
    out16.poison();
    p.out = p.out_f32 ? static_cast<void*>(out32.data()) : out16.data();
    EXPECT_TRUE(validate_qgemv_mma(p).is_ok()) << validate_qgemv_mma(p).to_string();
    launch_qgemv_mma(p, nullptr);
    CELLM_CUDA_CHECK(cudaGetLastError());
    std::vector<std::uint32_t> bits(count);
    if (p.out_f32) {
      const std::vector<float> got = out32.download();
      std::memcpy(bits.data(), got.data(), count * sizeof(float));
    } else {
      const std::vector<bf16> got = out16.download();
      for (std::size_t i = 0; i < count; ++i) {
        std::uint16_t v;
        std::memcpy(&v, &got[i], 2);
        bits[i] = v;
      }
    }
    return bits;
  }

  float value(std::uint32_t bits) const {
    if (c_.f32_out) {
      float f;
      std::memcpy(&f, &bits, 4);
      return f;
    }
    return testing::from_bf16(std::bit_cast<bf16>(static_cast<std::uint16_t>(bits)));
  }

  // float64 a @ w^T (+ bias) over [n, k] weights.
  std::vector<double> product(const std::vector<float>& w) const {
    const std::vector<float> af = to_float(a_);
    std::vector<double> ref(static_cast<std::size_t>(c_.m) * c_.n);
    for (int col = 0; col < c_.n; ++col) {
      const float* wr = w.data() + static_cast<std::size_t>(col) * c_.k;
      for (int row = 0; row < c_.m; ++row) {
        double sum = 0.0;
        for (int i = 0; i < c_.k; ++i) {
          sum += static_cast<double>(wr[i]) * af[static_cast<std::size_t>(row) * lda_ + i];
        }
        if (c_.bias) sum += testing::from_bf16(bias_[static_cast<std::size_t>(col)]);
        ref[static_cast<std::size_t>(row) * c_.n + col] = sum;
      }
    }
    return ref;
  }

  // The GPU's bf16 dequantization of the same rows, as floats [n, k].
  std::vector<float> dequantized_on_gpu() const {
    DeviceArray<bf16> out(static_cast<std::size_t>(c_.n) * c_.k);
    DequantParams d;
    d.w = dw_.data();
    d.type = c_.type;
    d.rows = c_.n;
    d.cols = c_.k;
    d.ldw_bytes = ldw_bytes_;
    d.out = out.data();
    d.ldo = c_.k;
    d.scales = p_.scales;
    EXPECT_TRUE(d.validate().is_ok()) << d.validate().to_string();
    launch_dequantize(d, nullptr);
    CELLM_CUDA_CHECK(cudaGetLastError());
    return to_float(out.download());
  }

  MmaCase c_{};
  std::int64_t ldw_bytes_ = 0;
  int lda_ = 0, ldc_ = 0;
  std::vector<std::uint8_t> w_;
  Fp8Scales scales_;
  std::vector<bf16> a_, bias_;
  DeviceArray<float> dscales_;
  DeviceArray<std::uint8_t> dw_;
  DeviceArray<bf16> da_, dbias_;
  QGemvParams p_;
};

TEST_P(QGemvMmaTest, MatchesTheProductOverTheDequantizedWeights) {
  const std::vector<std::uint32_t> bits = run(p_, c_.m);
  std::vector<float> inside(static_cast<std::size_t>(c_.m) * c_.n);
  for (int row = 0; row < c_.m; ++row) {
    for (int col = 0; col < ldc_; ++col) {
      const float v = value(bits[static_cast<std::size_t>(row) * ldc_ + col]);
      if (col < c_.n) {
        inside[static_cast<std::size_t>(row) * c_.n + col] = v;
      } else {
        EXPECT_TRUE(std::isnan(v)) << "store outside [m, n] at row " << row << " col " << col;
      }
    }
  }
  // The weights the kernel must multiply (launch_dequantize's bf16): only
  // the order of the float sums differs, far below bf16's rounding for a
  // float output.
  EXPECT_LT(nmse(inside, product(dequantized_on_gpu())), c_.f32_out ? 1e-9 : kBf16Nmse);
  // The host's decoding: the same values but where the device's fused
  // multiply-adds put a float on the other side of a bf16 rounding boundary
  // (rare: a weight one bf16 step off).
  EXPECT_LT(nmse(inside, product(host_decoded(c_.type, w_, c_.n, c_.k, ldw_bytes_, scales_))),
            c_.f32_out ? 1e-7 : kBf16Nmse);
  // Same inputs, same bits.
  EXPECT_EQ(bits, run(p_, c_.m));
}

TEST_P(QGemvMmaTest, RowsHaveTheBitsOfOneRowCalls) {
  const std::vector<std::uint32_t> all = run(p_, c_.m);
  for (int r = 0; r < c_.m; ++r) {
    QGemvParams one = p_;
    one.m = 1;
    one.a = da_.data() + static_cast<std::size_t>(r) * lda_;
    const std::vector<std::uint32_t> alone = run(one, 1);
    EXPECT_EQ(0, std::memcmp(all.data() + static_cast<std::size_t>(r) * ldc_, alone.data(),
                             static_cast<std::size_t>(c_.n) * sizeof(std::uint32_t)))
        << "row " << r << " of " << c_.m;
  }
}

std::vector<MmaCase> cases() {
  std::vector<MmaCase> out;
  const QuantType all[] = {QuantType::kQ4_0,   QuantType::kQ4_1,   QuantType::kQ5_0,
                           QuantType::kQ5_1,   QuantType::kQ8_0,   QuantType::kQ2_K,
                           QuantType::kQ3_K,   QuantType::kQ4_K,   QuantType::kQ5_K,
                           QuantType::kQ6_K,   QuantType::kIQ4_XS, QuantType::kF8_E4M3,
                           QuantType::kQ6_K_R8};
  for (QuantType t : all) {
    const int elems = quant_block_elems(t);
    // One block; SmolLM2's 576 (ends inside a group) or three super-blocks;
    // a longer k, split over blocks of a cluster.
    const int k_mid = elems == 32 ? 576 : elems == 256 ? 768 : 4096;
    const int k_long = elems == 32 ? 2080 : elems == 256 ? 2304 : 6144;
    for (int m : {1, 2, 3, 5, 8}) {
      out.push_back({t, m, 37, elems, m % 2 == 1, m == 3, 4});
      out.push_back({t, m, 64, k_mid, m % 2 == 0, m == 5, 16});
      out.push_back({t, m, 100, k_long, m % 2 == 1, m == 2, 4});
      out.push_back({t, m, 21, k_long, m % 2 == 0, false, 16});
    }
  }
  // Llama 3 8B-like shapes of the types a Q4_K_M or FP8 file holds: n = 640
  // (k over eight blocks of a cluster and two warps of each), o/q, down.
  for (QuantType t :
       {QuantType::kQ4_K, QuantType::kQ6_K_R8, QuantType::kF8_E4M3, QuantType::kQ8_0}) {
    out.push_back({t, 8, 640, 4096, false, true, 16});
    out.push_back({t, 5, 4096, 4096, true, false, 16});
  }
  out.push_back({QuantType::kQ6_K_R8, 2, 1000, 14336, true, false, 16});
  // FP8 scales read once a group (per-row and 128-column runs, both
  // sources) and a step at a time (128-column runs, generic source).
  for (int m : {2, 5}) {
    out.push_back({QuantType::kF8_E4M3, m, 100, 1024, true, false, 4, 1024});
    out.push_back({QuantType::kF8_E4M3, m, 64, 1024, false, true, 16, 128});
    out.push_back({QuantType::kF8_E4M3, m, 64, 1024, true, false, 4, 128});
  }
  // Partial sums with two tiles a warp; warps storing their own sums of
  // several tiles (one group, more tiles than warps).
  out.push_back({QuantType::kQ4_K, 2, 8192, 4096, true, false, 16});
  out.push_back({QuantType::kQ4_K, 3, 40000, 256, false, true, 16});
  return out;
}

INSTANTIATE_TEST_SUITE_P(Types, QGemvMmaTest, ::testing::ValuesIn(cases()), case_name);

TEST(QGemvMmaValidateTest, RefusesWhatTheKernelCannotRunAndPicksItFromTwoRows) {
  const QGemvParams p = valid_small_call(2);
  EXPECT_TRUE(validate_qgemv_mma(p).is_ok()) << validate_qgemv_mma(p).to_string();
  EXPECT_TRUE(qgemv_on_tensor_cores(p));
  QGemvParams one = p;
  one.m = 1;
  EXPECT_TRUE(validate_qgemv_mma(one).is_ok());
  EXPECT_FALSE(qgemv_on_tensor_cores(one));  // one row stays on CUDA cores for now

  QGemvParams bad = p;
  bad.k = kQGemvMmaMaxK + 256;  // longer than a cluster stages
  bad.lda = bad.k;
  bad.ldw_bytes = static_cast<std::int64_t>(bad.k / 256) * 144;
  ASSERT_TRUE(bad.validate().is_ok()) << bad.validate().to_string();
  EXPECT_NE(validate_qgemv_mma(bad).to_string().find("longer than"), std::string::npos)
      << validate_qgemv_mma(bad).to_string();
  EXPECT_FALSE(qgemv_on_tensor_cores(bad));
  bad = p;
  bad.m = kQGemvMaxRows + 1;  // more rows than B columns
  EXPECT_FALSE(validate_qgemv_mma(bad).is_ok());
  EXPECT_FALSE(qgemv_on_tensor_cores(bad));
  bad = p;
  bad.m = 0;
  EXPECT_FALSE(validate_qgemv_mma(bad).is_ok());
  bad = p;
  bad.k = 320;  // not whole super-blocks
  EXPECT_FALSE(validate_qgemv_mma(bad).is_ok());
  bad = p;
  bad.type = static_cast<QuantType>(9);  // Q8_1
  EXPECT_FALSE(validate_qgemv_mma(bad).is_ok());
  bad = p;
  bad.type = QuantType::kF8_E4M3;  // FP8 rows without their scales
  bad.ldw_bytes = 256;
  EXPECT_NE(validate_qgemv_mma(bad).to_string().find("FP8 rows need scales"), std::string::npos);
}

}  // namespace
}  // namespace cellm::cuda
