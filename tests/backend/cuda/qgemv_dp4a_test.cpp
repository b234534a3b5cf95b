// The int8 quantized GEMV (kernels/qgemv_dp4a.cuh) for every type it
// decodes, 1 to 8 rows, n not a multiple of a warp's two rows, k that leave
// a warp's last iteration part-full, rows on 16-, 4- and 2-byte boundaries
// (each load width of the kernel), split-K shapes, bias, bf16 and float out:
//  - the quantized activations equal a host quantization with the same
//    rounding, code for code and bit for bit in the scales and sums;
//  - the product equals a float64 product of the reference dequantizer's
//    weights with those int8 activations (the same integer math; only
//    float rounding and summation order differ: NMSE < 1e-9 in float out);
//  - it stays within the int8 rounding of the activations of the float64
//    product with the bf16 activations (NMSE < 1e-4 in float out);
//  - row r of an m-row call has the bits of the one-row call on row r, the
//    pre-quantized entry point gives the bits of the fused one, and a rerun
//    the same bits;
//  - nothing is stored outside [m, n] of a wider output.
// Refusals run without a GPU.
#include "backend/cuda/kernels/qgemv_dp4a.cuh"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

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

using qgemv_test::HostQ8;
using qgemv_test::quantize_host;

// `rows` rows of `cols` elements, `ld` apart on the device.
template <typename T>
std::vector<T> download(const T* p, std::int64_t ld, int rows, std::size_t cols) {
  std::vector<T> out(static_cast<std::size_t>(rows) * cols);
  CELLM_CUDA_CHECK(cudaDeviceSynchronize());
  CELLM_CUDA_CHECK(cudaMemcpy2D(out.data(), cols * sizeof(T), p,
                                static_cast<std::size_t>(ld) * sizeof(T), cols * sizeof(T),
                                static_cast<std::size_t>(rows), cudaMemcpyDeviceToHost));
  return out;
}

struct Case {
  QuantType type;
  int m, n, k;
  bool f32_out;
  bool bias = false;
  int pad = 4;  // bytes past each weight row (0: packed)
};

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  const Case& c = info.param;
  return fmt::format("{}_m{}_n{}_k{}_{}{}_pad{}", qgemv_test::type_name(c.type), c.m, c.n, c.k,
                     c.f32_out ? "f32" : "bf16", c.bias ? "_bias" : "", c.pad);
}

// One problem on the device: weights, activations, scratch and output.
struct Problem {
  Case c;
  std::int64_t ldw_bytes = 0;
  int lda = 0, ldc = 0;
  std::vector<std::uint8_t> w;
  std::vector<bf16> a, bias;
  DeviceArray<std::uint8_t> dw;
  DeviceArray<bf16> da, dbias;
  DeviceArray<std::uint8_t> scratch;

  explicit Problem(const Case& cs) : c(cs) {
    std::mt19937 rng(static_cast<unsigned>(c.m * 131 + c.n * 7 + c.k + static_cast<int>(c.type)));
    ldw_bytes =
        static_cast<std::int64_t>(c.k / quant_block_elems(c.type)) * quant_block_bytes(c.type) +
        c.pad;
    lda = c.k + 8;  // a column slice of a wider buffer
    ldc = c.n + 3;  // the columns past n must stay untouched
    w = qgemv_test::random_rows(qgemv_test::file_type(c.type), c.n, c.k, ldw_bytes, rng);
    a = random_bf16(static_cast<std::size_t>(c.m) * lda, rng);
    bias = random_bf16(static_cast<std::size_t>(c.n), rng, -4.0f, 4.0f);
    dw.assign(qgemv_test::device_rows(c.type, w, c.n, c.k, ldw_bytes));
    da.assign(a);
    dbias.assign(bias);
    scratch.assign(std::vector<std::uint8_t>(q8_rows_bytes(c.m, c.k)));
  }

  Q8Rows rows() const { return q8_rows_in(scratch.data(), c.m, c.k); }

  QGemvParams params(void* out, int m, int row0) const {
    QGemvParams p;
    p.a = da.data() + static_cast<std::int64_t>(row0) * lda;
    p.w = dw.data();
    p.type = c.type;
    p.bias = c.bias ? dbias.data() : nullptr;
    p.out = out;
    p.out_f32 = c.f32_out;
    p.m = m;
    p.n = c.n;
    p.k = c.k;
    p.lda = lda;
    p.ldw_bytes = ldw_bytes;
    p.ldc = ldc;
    return p;
  }
};

// The output buffer of a case (bf16 or float), read back as floats.
struct Out {
  DeviceArray<bf16> b16;
  DeviceArray<float> f32;
  bool is_f32;
  Out(const Case& c, int rows, int ldc)
      : b16(static_cast<std::size_t>(rows) * ldc),
        f32(static_cast<std::size_t>(rows) * ldc),
        is_f32(c.f32_out) {
    b16.poison();
    f32.poison();
  }
  void* data() { return is_f32 ? static_cast<void*>(f32.data()) : b16.data(); }
  std::vector<float> get() const { return is_f32 ? f32.download() : to_float(b16.download()); }
};

class QGemvDp4aTest : public ::testing::TestWithParam<Case> {};

TEST_P(QGemvDp4aTest, MatchesTheIntegerAndTheFloatProducts) {
  CELLM_REQUIRE_GPU();
  const Case c = GetParam();
  const Problem pr(c);
  Out out(c, c.m, pr.ldc);
  const QGemvParams p = pr.params(out.data(), c.m, 0);
  const Q8Rows act = pr.rows();
  ASSERT_TRUE(validate_qgemv_dp4a(p, act).is_ok()) << validate_qgemv_dp4a(p, act).to_string();
  launch_qgemv_dp4a(p, act, nullptr);
  CELLM_CUDA_CHECK(cudaGetLastError());
  const std::vector<float> got = out.get();

  // The scratch holds the host's quantization exactly.
  const std::vector<float> af = to_float(pr.a);
  const HostQ8 hq = quantize_host(af, c.m, c.k, pr.lda);
  EXPECT_EQ(download(act.q, act.ldq, c.m, static_cast<std::size_t>(c.k)), hq.q);
  const auto bits = [](const std::vector<float>& v) {
    std::vector<std::uint32_t> out(v.size());
    std::memcpy(out.data(), v.data(), v.size() * 4);
    return out;
  };
  EXPECT_EQ(bits(download(act.d, act.lds, c.m, static_cast<std::size_t>(c.k / 32))), bits(hq.d));
  EXPECT_EQ(bits(download(act.s, act.lds, c.m, static_cast<std::size_t>(c.k / 32))), bits(hq.s));

  std::vector<double> ref_int(static_cast<std::size_t>(c.m) * c.n);
  std::vector<double> ref_float(ref_int.size());
  const qgemv_test::Fp8Scales no_scales;
  for (int col = 0; col < c.n; ++col) {
    const std::vector<float> wr =
        qgemv_test::dequantized_row(qgemv_test::file_type(c.type), pr.w, col, c.k, pr.ldw_bytes, no_scales);
    for (int row = 0; row < c.m; ++row) {
      double si = 0.0, sf = 0.0;
      for (int i = 0; i < c.k; ++i) {
        const std::size_t qa = static_cast<std::size_t>(row) * c.k + i;
        const double x8 = static_cast<double>(hq.d[qa / 32]) * hq.q[qa];
        si += static_cast<double>(wr[static_cast<std::size_t>(i)]) * x8;
        sf += static_cast<double>(wr[static_cast<std::size_t>(i)]) *
              af[static_cast<std::size_t>(row) * pr.lda + i];
      }
      const double b = c.bias ? testing::from_bf16(pr.bias[static_cast<std::size_t>(col)]) : 0.0;
      ref_int[static_cast<std::size_t>(row) * c.n + col] = si + b;
      ref_float[static_cast<std::size_t>(row) * c.n + col] = sf + b;
    }
  }
  const std::vector<float> inside = qgemv_test::inside_columns(got, c.m, c.n, pr.ldc);
  // The same integer math: float rounding of the scale products and the
  // order of the float sums only (bf16 out: its rounding).
  EXPECT_LT(nmse(inside, ref_int), c.f32_out ? 1e-9 : kBf16Nmse);
  // Against the bf16 activations: int8 rounding (a step of max/127 in each
  // 32-block; about 1.5e-5 in NMSE for these uniform activations) on top.
  EXPECT_LT(nmse(inside, ref_float), c.f32_out ? 1e-4 : 2e-4);

  // Same inputs, same bits; the pre-quantized entry point too.
  launch_qgemv_dp4a(p, act, nullptr);
  std::vector<float> again = out.get();
  EXPECT_EQ(0, std::memcmp(got.data(), again.data(), got.size() * sizeof(float)));
  launch_qgemv_dp4a_quantized(p, act, nullptr);
  again = out.get();
  EXPECT_EQ(0, std::memcmp(got.data(), again.data(), got.size() * sizeof(float)));

  // Row r of the m-row call is the one-row call on row r, bit for bit.
  if (c.m > 1) {
    for (int r = 0; r < c.m; ++r) {
      Out one(c, 1, pr.ldc);
      DeviceArray<std::uint8_t> scratch1(std::vector<std::uint8_t>(q8_rows_bytes(1, c.k)));
      const Q8Rows act1 = q8_rows_in(scratch1.data(), 1, c.k);
      const QGemvParams p1 = pr.params(one.data(), 1, r);
      ASSERT_TRUE(validate_qgemv_dp4a(p1, act1).is_ok());
      launch_qgemv_dp4a(p1, act1, nullptr);
      const std::vector<float> row = one.get();
      EXPECT_EQ(0, std::memcmp(row.data(), got.data() + static_cast<std::size_t>(r) * pr.ldc,
                               static_cast<std::size_t>(c.n) * sizeof(float)))
          << "row " << r << " of " << c.m;
    }
  }
}

std::vector<Case> cases() {
  std::vector<Case> out;
  const QuantType r8 = QuantType::kQ6_K_R8;
  for (QuantType t : {QuantType::kQ4_0, QuantType::kQ4_1, QuantType::kQ8_0, QuantType::kQ4_K,
                      QuantType::kQ5_K, QuantType::kQ6_K, r8}) {
    const bool small = quant_block_elems(t) == 32;
    const bool k_quant = t == QuantType::kQ4_K || t == QuantType::kQ5_K;
    // A short k (a part-full iteration), an odd number of 32-blocks (Q4_0 /
    // Q8_0 end on an even-numbered block: the read of its last word stops at
    // the row's end), and a long one.
    const int k_short = t == r8 ? 2048 : small ? 576 : 768;
    const int k_odd = t == r8 ? 6144 : small ? 2080 : 2304;
    for (int m : {1, 2, 3, 5, 8}) {
      // Rows 4 bytes apart past their blocks (4-byte loads, or 2-byte ones
      // for Q6_K), packed rows (16-byte loads for Q4_K / Q5_K / Q6_K_R8),
      // and rows on 2-byte boundaries for the types that allow them.
      out.push_back({t, m, 37, k_short, m % 2 == 1, m == 3, 4});
      out.push_back({t, m, 64, k_odd, m % 2 == 0, m == 5, 0});
      out.push_back({t, m, 21, k_odd, true, m == 2, k_quant ? 16 : 2});
    }
    // Split-K: narrow n over long k (two warps a row pair for the K-quants
    // at k = 14336, four for the 32-weight types; four for every type at
    // k = 32768), and wider n at k = 4096 (two); 8B's o projection.
    out.push_back({t, 1, 6, 14336, true, true, 0});
    out.push_back({t, 3, 5, 32768, true, false, 0});
    out.push_back({t, 8, 640, 4096, true, false, 0});
    out.push_back({t, 1, 1024, 4096, false, true, 0});
    out.push_back({t, 1, 4096, 4096, true, false, 0});
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(Types, QGemvDp4aTest, ::testing::ValuesIn(cases()), case_name);

TEST(QGemvDp4aValidateTest, RefusesWhatTheKernelsCannotRun) {
  alignas(16) static std::uint8_t scratch[4096];
  const QGemvParams p = qgemv_test::valid_small_call(2);
  ASSERT_LE(q8_rows_bytes(2, 256), sizeof(scratch));
  const Q8Rows act = q8_rows_in(scratch, 2, 256);
  EXPECT_TRUE(validate_qgemv_dp4a(p, act).is_ok()) << validate_qgemv_dp4a(p, act).to_string();

  QGemvParams bad = p;
  bad.type = QuantType::kQ5_0;  // no int8 path
  bad.ldw_bytes = 176;          // eight 22-byte blocks
  EXPECT_NE(validate_qgemv_dp4a(bad, act).to_string().find("no int8 path"), std::string::npos)
      << validate_qgemv_dp4a(bad, act).to_string();
  bad = p;
  bad.ldw_bytes = 146;  // QGemvParams::validate: Q4_K rows in 4-byte words
  EXPECT_FALSE(validate_qgemv_dp4a(bad, act).is_ok());
  bad = p;
  bad.m = 3;  // more rows than the scratch holds
  EXPECT_NE(validate_qgemv_dp4a(bad, act).to_string().find("do not fit"), std::string::npos)
      << validate_qgemv_dp4a(bad, act).to_string();
  Q8Rows skew = act;
  skew.q += 8;  // off 16 bytes
  EXPECT_NE(validate_qgemv_dp4a(p, skew).to_string().find("16-byte aligned"), std::string::npos)
      << validate_qgemv_dp4a(p, skew).to_string();
  skew = act;
  skew.s = nullptr;
  EXPECT_NE(validate_qgemv_dp4a(p, skew).to_string().find("null"), std::string::npos);
  bad = p;
  bad.out = scratch;  // the product over its own scratch
  EXPECT_NE(validate_qgemv_dp4a(bad, act).to_string().find("overlap"), std::string::npos)
      << validate_qgemv_dp4a(bad, act).to_string();
  EXPECT_TRUE(qgemv_dp4a_supported(QuantType::kQ6_K_R8));
  EXPECT_FALSE(qgemv_dp4a_supported(QuantType::kF8_E4M3));

  QuantizeQ8Params q;
  q.a = static_cast<const bf16*>(p.a);
  q.lda = 256;
  q.m = 2;
  q.k = 256;
  q.out = act;
  EXPECT_TRUE(q.validate().is_ok()) << q.validate().to_string();
  QuantizeQ8Params qbad = q;
  qbad.k = 240;  // not whole 32-blocks
  EXPECT_NE(qbad.validate().to_string().find("multiple of 32"), std::string::npos)
      << qbad.validate().to_string();
  qbad = q;
  qbad.lda = 260;  // rows off 16 bytes
  EXPECT_FALSE(qbad.validate().is_ok());
  qbad = q;
  qbad.a = reinterpret_cast<const bf16*>(scratch);  // reads what it writes
  EXPECT_NE(qbad.validate().to_string().find("overlap"), std::string::npos)
      << qbad.validate().to_string();
}

}  // namespace
}  // namespace cellm::cuda
