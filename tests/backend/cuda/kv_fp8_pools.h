// Host side of the FP8 K/V pool tests: the E4M3 codes a writer must store for
// the bf16 values a bf16 pool holds (format/fp8.h's encoder, the one FP8
// weights are quantized with), the bf16 values attention must read back
// (exact), and a comparison of written codes that names the first
// mismatches.
//
// Thread-safety: test-only helpers; call from the test thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "backend/cuda/cuda_types.h"
#include "format/fp8.h"
#include "gpu_test_util.h"

namespace cellm::cuda::testing {

// e4m3(x) of every bf16 value x (nearest even, +-448 beyond the range).
inline std::vector<fp8_e4m3> encode_e4m3(const std::vector<bf16>& values) {
  std::vector<fp8_e4m3> out(values.size());
  for (std::size_t i = 0; i < values.size(); ++i) {
    out[i] = format::f32_to_e4m3(from_bf16(values[i]));
  }
  return out;
}

// The bf16 value of every code (every E4M3 value is a bf16 value).
inline std::vector<bf16> decode_e4m3(const std::vector<fp8_e4m3>& codes) {
  std::vector<bf16> out(codes.size());
  for (std::size_t i = 0; i < codes.size(); ++i) out[i] = to_bf16(format::e4m3_to_f32(codes[i]));
  return out;
}

// Expects got[i] == encode(bf16_pool[i]) for every index in `written` and
// got[i] == `untouched` (the poison) everywhere else; reports the first few
// mismatches of each kind.
inline void expect_codes_of(const std::vector<fp8_e4m3>& got, const std::vector<bf16>& bf16_pool,
                            const std::vector<bool>& written, fp8_e4m3 untouched,
                            const std::string& what) {
  ASSERT_EQ(got.size(), bf16_pool.size()) << what;
  ASSERT_EQ(written.size(), got.size()) << what;
  int bad = 0;
  std::size_t checked = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const fp8_e4m3 want = written[i] ? format::f32_to_e4m3(from_bf16(bf16_pool[i])) : untouched;
    checked += written[i] ? 1 : 0;
    if (got[i] != want && bad++ < 5) {
      ADD_FAILURE() << what << " element " << i << (written[i] ? " (written)" : " (untouched)")
                    << ": code 0x" << std::hex << int{got[i]} << ", want 0x" << int{want}
                    << std::dec << " (bf16 pool value " << from_bf16(bf16_pool[i]) << ")";
    }
  }
  EXPECT_EQ(bad, 0) << what << ": " << bad << " codes differ";
  EXPECT_GT(checked, 0u) << what << ": nothing was written";
}

}  // namespace cellm::cuda::testing
