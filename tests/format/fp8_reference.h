// An FP8 E4M3FN encoder written for the tests, independent of the decoder
// under test (format/fp8.h): it rounds a float to the nearest E4M3 value
// (ties to even) from the float's exponent and std::nearbyint, without any
// table, and reports both the code and the value it stands for. Tests check
// the decoder against it on every code, and write FP8 checkpoints with it.
//
// Thread-safety: pure functions.
#pragma once

#include <cfenv>
#include <cmath>
#include <cstdint>

namespace cellm::testing {

struct E4M3 {
  std::uint8_t code = 0;
  double value = 0;  // the number `code` stands for (NaN for the NaN codes)
};

// Round-to-nearest-even to E4M3FN. Magnitudes that round past 448 (> 464)
// and NaN give the NaN code of their sign; there are no infinities.
inline E4M3 encode_e4m3(double x) {
  const std::uint8_t sign = std::signbit(x) ? 0x80 : 0x00;
  const double a = std::fabs(x);
  if (std::isnan(a)) return {static_cast<std::uint8_t>(sign | 0x7F), std::nan("")};
  // Values are multiples of a quantum that depends on the binade: 2^-9 below
  // the smallest normal 2^-6 (subnormals), else 2^(e-3) in [2^e, 2^(e+1)).
  int e = a == 0 ? -7 : std::ilogb(a);
  if (e < -6) e = -7;  // subnormal range: quantum 2^-9 = 2^(-6-3)
  const double quantum = std::ldexp(1.0, (e < -6 ? -6 : e) - 3);
  std::fesetround(FE_TONEAREST);
  double q = std::nearbyint(a / quantum);  // ties to even in the default rounding mode
  const double value = q * quantum;
  std::uint8_t code = 0;
  if (e < -6) {
    code = static_cast<std::uint8_t>(q);  // q = 8 is exactly the smallest normal, code 0x08
  } else {
    if (q == 16) {  // rounded up into the next binade
      ++e;
      q = 8;
    }
    const int biased = e + 7;
    const int mant = static_cast<int>(q) - 8;
    if (biased > 15 || (biased == 15 && mant == 7)) {
      return {static_cast<std::uint8_t>(sign | 0x7F), std::nan("")};
    }
    code = static_cast<std::uint8_t>((biased << 3) | mant);
  }
  return {static_cast<std::uint8_t>(sign | code), sign != 0 ? -value : value};
}

}  // namespace cellm::testing
