// What the decode-attention suites over the bf16 pools (attention_v2_test)
// and the FP8 pools (attention_fp8_test) share: the real models' shapes both
// run, their test names, the bf16 kernels' tolerance against the float64
// reference, and the check that rows with nothing to attend are zero.
//
// Thread-safety: test-only helpers; call from the test thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "decode_reference.h"

namespace cellm::cuda::testing {

// bf16 probabilities inside the kernels cost ~2^-9 relative per weight.
inline constexpr double kAttentionNmse = 2e-4;

inline std::vector<double> as_double(const std::vector<float>& values) {
  return {values.begin(), values.end()};
}

// The shapes of the models served, seeded `seed` onwards, followed by a
// suite's own cases.
inline std::vector<DecodeCase> model_decode_cases(std::uint32_t seed,
                                                  const std::vector<DecodeCase>& more) {
  std::vector<DecodeCase> cases = {
      // Llama-3.2-1B heads at batch 64, contexts up to 600, heuristic splits.
      {32, 8, 64, 64, 1, 600, 0, 0.0f, 0, 256, seed},
      // Llama-3.1-8B heads, batch 1, context 8192.
      {32, 8, 128, 1, 8192, 8192, 0, 0.0f, 0, 256, seed + 1},
      // Gemma head dim, group 8, window and soft cap.
      {8, 1, 256, 5, 1, 2000, 512, 50.0f, 0, 256, seed + 2},
      // MHA (group 1) with many short splits.
      {8, 8, 128, 16, 1, 100, 0, 0.0f, 16, 16, seed + 3},
      // Group 32: two head groups of 16.
      {32, 1, 64, 4, 1, 700, 0, 0.0f, 8, 64, seed + 4},
      // The fixtures' head dim 16, contexts 1..40, one split.
      {4, 2, 16, 4, 1, 40, 0, 0.0f, 1, 256, seed + 5},
  };
  cases.insert(cases.end(), more.begin(), more.end());
  return cases;
}

inline std::string decode_case_name(const DecodeCase& c) {
  return fmt::format("h{}_kv{}_hd{}_b{}_len{}to{}_win{}{}_split{}_min{}", c.heads, c.kv_heads,
                     c.head_dim, c.batch, c.min_len, c.max_len, c.window,
                     c.softcap > 0 ? "_softcap" : "", c.splits, c.split_min_keys);
}

// Rows the reference leaves at zero (nothing to attend) must be exactly zero.
inline void expect_empty_rows_zero(const DecodeCase& c, const DecodeScenario& s,
                                   const std::vector<float>& got, const std::string& which) {
  const std::size_t row = static_cast<std::size_t>(c.heads) * c.head_dim;
  for (std::size_t t = 0; t < s.slots.size(); ++t) {
    if (s.slots[t] >= 0 && s.positions[t] >= 0) continue;
    for (std::size_t i = 0; i < row; ++i) {
      ASSERT_EQ(got[t * row + i], 0.0f) << which << " token " << t << " element " << i;
    }
  }
}

}  // namespace cellm::cuda::testing
