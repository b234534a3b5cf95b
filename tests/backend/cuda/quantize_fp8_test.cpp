// The per-token activation quantizer of the FP8 wide-step path (issue 38,
// item 3; kernels/quantize_fp8.cuh) against the host's E4M3 encoder
// (format/fp8.h), bit for bit in codes and scales, on rows of every kind
// (zero, negative zero, tiny, huge, ties), and its refusals.
#include "backend/cuda/kernels/quantize_fp8.cuh"

#include <algorithm>
#include <bit>
#include <cmath>
#include <random>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "cellm/status.h"
#include "format/fp8.h"
#include "gpu_test_util.h"

namespace cellm::cuda {
namespace {

using testing::DeviceArray;
using testing::from_bf16;
using testing::random_bf16;
using testing::to_bf16;

// The quantizer's contract (quantize_fp8.cuh), computed on the host in the
// same float operations.
struct HostQuantized {
  std::vector<std::uint8_t> codes;  // [m, k]
  std::vector<float> scales;        // [m]
};
HostQuantized host_quantize(const std::vector<bf16>& a, int m, int k, int lda) {
  HostQuantized q;
  q.codes.resize(static_cast<std::size_t>(m) * k);
  q.scales.resize(static_cast<std::size_t>(m));
  for (int r = 0; r < m; ++r) {
    float amax = 0.0f;
    for (int c = 0; c < k; ++c) {
      amax = std::max(amax, std::fabs(from_bf16(a[static_cast<std::size_t>(r) * lda + c])));
    }
    amax = std::max(amax, kFp8MinAmax);
    const float inv = kFp8E4M3Max / amax;
    q.scales[static_cast<std::size_t>(r)] = amax / kFp8E4M3Max;
    for (int c = 0; c < k; ++c) {
      const float x = from_bf16(a[static_cast<std::size_t>(r) * lda + c]);
      q.codes[static_cast<std::size_t>(r) * k + c] = format::f32_to_e4m3(x * inv);
    }
  }
  return q;
}

// Rows of every kind the quantizer must get right: magnitudes from 1e-3 to
// 1e3, a zero row, a row of negative zeros, a row too small for 448 / amax
// (below kFp8MinAmax), one near bf16's largest values, and one whose every
// value ties halfway between two E4M3 codes after scaling.
std::vector<bf16> quantizer_rows(int m, int k, int lda, std::mt19937& rng) {
  std::vector<bf16> a = random_bf16(static_cast<std::size_t>(m) * lda, rng);
  for (int r = 0; r < m; ++r) {
    bf16* row = a.data() + static_cast<std::size_t>(r) * lda;
    const float gain = std::pow(10.0f, static_cast<float>(r % 7 - 3));
    for (int c = 0; c < k; ++c) row[c] = to_bf16(from_bf16(row[c]) * gain);
    switch (r) {
      case 1:
        for (int c = 0; c < k; ++c) row[c] = to_bf16(0.0f);
        break;
      case 2:
        for (int c = 0; c < k; ++c) row[c] = to_bf16(-0.0f);
        break;
      case 3:
        for (int c = 0; c < k; ++c) row[c] = to_bf16(((c % 2) != 0 ? -1e-35f : 3e-36f));
        break;
      case 4:
        for (int c = 0; c < k; ++c) row[c] = to_bf16(from_bf16(row[c]) * 1e36f);
        break;
      case 5:
        // amax 448 (inv 1): 1.0625 lies halfway between the codes for 1 and
        // 1.125, 1.1875 between 1.125 and 1.25: ties go to the even code.
        for (int c = 0; c < k; ++c)
          row[c] = to_bf16((c % 3 == 0) ? 448.0f : 1.0625f + 0.125f * (c % 2));
        break;
      default: break;
    }
  }
  return a;
}

struct QuantizeCase {
  int m, k, lda;
};

class QuantizeFp8Test : public ::testing::TestWithParam<QuantizeCase> {};

TEST_P(QuantizeFp8Test, MatchesTheHostEncoderBitForBit) {
  CELLM_REQUIRE_GPU();
  const QuantizeCase c = GetParam();
  std::mt19937 rng(static_cast<unsigned>(c.m * 31 + c.k));
  const std::vector<bf16> a = quantizer_rows(c.m, c.k, c.lda, rng);
  const int ldo = (c.k + 16 + 15) / 16 * 16;  // padded: the tail must stay untouched
  DeviceArray<bf16> da(a);
  DeviceArray<std::uint8_t> dout(static_cast<std::size_t>(c.m) * ldo);
  DeviceArray<float> dscales(static_cast<std::size_t>(c.m));
  dout.poison();
  dscales.poison();
  QuantizeFp8Params p;
  p.a = da.data();
  p.lda = c.lda;
  p.m = c.m;
  p.k = c.k;
  p.out = dout.data();
  p.ldo = ldo;
  p.scales = dscales.data();
  ASSERT_TRUE(p.validate().is_ok()) << p.validate().to_string();
  launch_quantize_fp8(p, nullptr);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  const std::vector<std::uint8_t> codes = dout.download();
  const std::vector<float> scales = dscales.download();
  const HostQuantized want = host_quantize(a, c.m, c.k, c.lda);
  int mismatches = 0;
  for (int r = 0; r < c.m; ++r) {
    EXPECT_EQ(std::bit_cast<std::uint32_t>(scales[static_cast<std::size_t>(r)]),
              std::bit_cast<std::uint32_t>(want.scales[static_cast<std::size_t>(r)]))
        << "row " << r << ": scale " << scales[static_cast<std::size_t>(r)] << " want "
        << want.scales[static_cast<std::size_t>(r)];
    for (int col = 0; col < ldo; ++col) {
      const std::uint8_t got = codes[static_cast<std::size_t>(r) * ldo + col];
      const std::uint8_t expected =
          col < c.k ? want.codes[static_cast<std::size_t>(r) * c.k + col] : std::uint8_t{0xff};
      if (got != expected && ++mismatches <= 10) {
        ADD_FAILURE() << "row " << r << " col " << col << ": code 0x" << std::hex << int{got}
                      << " want 0x" << int{expected} << std::dec;
      }
    }
  }
  EXPECT_EQ(mismatches, 0);
  // The special rows: zeros stay zeros (signed), ties went to even codes.
  if (c.m > 5) {
    EXPECT_EQ(codes[1 * static_cast<std::size_t>(ldo)], 0x00);
    EXPECT_EQ(codes[2 * static_cast<std::size_t>(ldo)], 0x80);
    EXPECT_EQ(codes[5 * static_cast<std::size_t>(ldo) + 1], 0x3A);  // 1.1875 -> 1.25
    EXPECT_EQ(codes[5 * static_cast<std::size_t>(ldo) + 2], 0x38);  // 1.0625 -> 1.0
    EXPECT_EQ(codes[5 * static_cast<std::size_t>(ldo)], 0x7E);      // 448
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, QuantizeFp8Test,
                         ::testing::Values(QuantizeCase{9, 4096, 4096},
                                           QuantizeCase{64, 14336, 2 * 14336},
                                           QuantizeCase{7, 160, 168}, QuantizeCase{512, 4096, 4104},
                                           QuantizeCase{3, 16, 16}),
                         [](const auto& info) {
                           return fmt::format("m{}_k{}_lda{}", info.param.m, info.param.k,
                                              info.param.lda);
                         });

TEST(QuantizeFp8Test, RefusesBadGeometry) {
  QuantizeFp8Params p;
  alignas(16) static bf16 a[64];
  alignas(16) static std::uint8_t out[64];
  static float scales[2];
  p.a = a;
  p.out = out;
  p.scales = scales;
  p.m = 2;
  p.k = 24;  // not a multiple of 16
  p.lda = 32;
  p.ldo = 32;
  EXPECT_EQ(p.validate().code(), StatusCode::kInvalidArgument);
  p.k = 32;
  p.ldo = 24;  // < k
  EXPECT_EQ(p.validate().code(), StatusCode::kInvalidArgument);
  p.ldo = 32;
  EXPECT_TRUE(p.validate().is_ok());
  p.out = out + 1;  // misaligned
  EXPECT_EQ(p.validate().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace cellm::cuda
