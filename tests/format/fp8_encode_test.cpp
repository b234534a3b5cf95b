// format::f32_to_e4m3 against a brute-force search: the nearest of the 254
// finite E4M3 values (in double), ties to the even code, the sign kept. The
// search alone saturates (nothing finite lies beyond 448), so it also checks
// the satfinite behaviour. Inputs: every code's own value, every midpoint
// between adjacent codes and a float on either side of it, a million random
// floats over the whole range, and the edges (±0, NaN, infinities,
// subnormals of both formats).
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>

#include <gtest/gtest.h>

#include "format/fp8.h"

namespace cellm::format {
namespace {

// The code a correct encoder returns for `x`, found without any rounding
// logic: scan every finite magnitude code.
std::uint8_t brute_force_e4m3(float x) {
  const std::uint8_t sign = std::signbit(x) ? 0x80 : 0x00;
  if (std::isnan(x)) return static_cast<std::uint8_t>(sign | 0x7F);
  const double a = std::fabs(static_cast<double>(x));
  int best = 0;
  double best_dist = std::numeric_limits<double>::infinity();
  for (int code = 0; code <= 0x7E; ++code) {
    const double d =
        std::fabs(static_cast<double>(e4m3_values()[static_cast<std::size_t>(code)]) - a);
    if (d < best_dist || (d == best_dist && (code & 1) == 0)) {
      best = code;
      best_dist = d;
    }
  }
  return static_cast<std::uint8_t>(sign | best);
}

TEST(Fp8Encode, EveryFiniteCodeRoundTrips) {
  for (int code = 0; code < 256; ++code) {
    if ((code & 0x7F) == 0x7F) continue;  // NaN
    const float v = e4m3_to_f32(static_cast<std::uint8_t>(code));
    EXPECT_EQ(f32_to_e4m3(v), code) << "value " << v;
  }
}

TEST(Fp8Encode, MidpointsTieToEvenAndNeighboursGoTheirWay) {
  int ties_checked = 0;
  for (int code = 0; code < 0x7E; ++code) {
    for (const float sign : {1.0f, -1.0f}) {
      const float lo = e4m3_to_f32(static_cast<std::uint8_t>(code));
      const float hi = e4m3_to_f32(static_cast<std::uint8_t>(code + 1));
      const float mid = sign * (lo + hi) / 2;  // exact: one bit more than E4M3 has
      ASSERT_EQ(static_cast<double>(mid), sign * (static_cast<double>(lo) + hi) / 2);
      const std::uint8_t want = brute_force_e4m3(mid);
      EXPECT_EQ(f32_to_e4m3(mid), want) << "midpoint " << mid;
      EXPECT_EQ(want & 1, 0) << "the reference picked an odd code at a tie";
      const float below = std::nextafter(mid, 0.0f);
      const float above = std::nextafter(mid, sign * 1000.0f);
      EXPECT_EQ(f32_to_e4m3(below), brute_force_e4m3(below)) << below;
      EXPECT_EQ(f32_to_e4m3(above), brute_force_e4m3(above)) << above;
      EXPECT_EQ(f32_to_e4m3(below) & 0x7F, code) << below;
      EXPECT_EQ(f32_to_e4m3(above) & 0x7F, code + 1) << above;
      ++ties_checked;
    }
  }
  EXPECT_EQ(ties_checked, 2 * 0x7E);
}

TEST(Fp8Encode, RandomFloatsMatchTheBruteForceSearch) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> exp(-30, 12);  // 2^-30 .. 2^12: zero-rounding to saturated
  std::uniform_real_distribution<float> mant(1.0f, 2.0f);
  for (int i = 0; i < 1'000'000; ++i) {
    const float x = std::ldexp(mant(rng), exp(rng)) * ((i & 1) != 0 ? -1.0f : 1.0f);
    ASSERT_EQ(f32_to_e4m3(x), brute_force_e4m3(x)) << "x = " << x;
  }
  // Random bit patterns: every float, NaNs and float subnormals included.
  std::uniform_int_distribution<std::uint32_t> bits;
  for (int i = 0; i < 1'000'000; ++i) {
    const float x = std::bit_cast<float>(bits(rng));
    if (std::isinf(x)) continue;
    ASSERT_EQ(f32_to_e4m3(x), brute_force_e4m3(x)) << "bits " << std::bit_cast<std::uint32_t>(x);
  }
}

TEST(Fp8Encode, SaturatesInsteadOfOverflowing) {
  for (const float x : {448.0f, 449.0f, 464.0f, 464.1f, 480.0f, 1e6f, 3.4e38f,
                        std::numeric_limits<float>::infinity()}) {
    EXPECT_EQ(f32_to_e4m3(x), 0x7E) << x;
    EXPECT_EQ(f32_to_e4m3(-x), 0xFE) << -x;
  }
  EXPECT_EQ(f32_to_e4m3(447.0f), 0x7E);  // nearest 448
  EXPECT_EQ(f32_to_e4m3(432.0f), 0x7E);  // tie 416 / 448 goes to the even code 0x7E
  EXPECT_EQ(f32_to_e4m3(431.0f), 0x7D);
}

TEST(Fp8Encode, NanZeroAndSubnormals) {
  EXPECT_EQ(f32_to_e4m3(std::numeric_limits<float>::quiet_NaN()), 0x7F);
  EXPECT_EQ(f32_to_e4m3(-std::numeric_limits<float>::quiet_NaN()), 0xFF);
  EXPECT_EQ(f32_to_e4m3(0.0f), 0x00);
  EXPECT_EQ(f32_to_e4m3(-0.0f), 0x80);
  EXPECT_EQ(f32_to_e4m3(std::numeric_limits<float>::denorm_min()), 0x00);
  EXPECT_EQ(f32_to_e4m3(-std::numeric_limits<float>::denorm_min()), 0x80);
  EXPECT_EQ(f32_to_e4m3(0x1p-10f), 0x00);                        // tie 0 / 2^-9: even 0
  EXPECT_EQ(f32_to_e4m3(std::nextafter(0x1p-10f, 1.0f)), 0x01);  // just past it
  EXPECT_EQ(f32_to_e4m3(0x1p-9f), 0x01);                         // smallest subnormal
  EXPECT_EQ(f32_to_e4m3(0x3p-10f), 0x02);                        // tie 1 / 2 × 2^-9: even 2
  EXPECT_EQ(f32_to_e4m3(0x7p-9f), 0x07);                         // largest subnormal
  EXPECT_EQ(f32_to_e4m3(0xFp-10f), 0x08);                        // tie 7 / 8: into the normals
  EXPECT_EQ(f32_to_e4m3(0x1p-6f), 0x08);                         // smallest normal
  EXPECT_EQ(f32_to_e4m3(-0x5p-9f), 0x85);
}

}  // namespace
}  // namespace cellm::format
