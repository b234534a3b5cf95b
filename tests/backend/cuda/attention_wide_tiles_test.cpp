// Decode attention v2 with wide tiles (AttentionParams::warp_keys = 32: four
// warps of two 16-key groups, 128-key tiles) against the float64 reference
// and the 16-key launch of the same data: 64- and 128-wide heads and an
// 80-wide one in the 128 bucket, groups 1 to 16, soft caps and windows,
// histories from one key to several table windows, and the counter, pull
// and push merges (keys read before the programmatic-launch wait are run
// with both widths in attention_v2_test.cpp). Launches the wide tiles do not
// serve (too wide for one block an SM, no spread, 256-wide heads) must give
// the 16-key launch's bits.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "backend/cuda/kernels/attention.cuh"
#include "decode_reference.h"
#include "gpu_test_util.h"

namespace cellm::cuda {
namespace {

using testing::DecodeCase;
using testing::DecodeDevice;
using testing::DecodeScenario;
using testing::nmse;
using testing::to_float;

constexpr double kAttentionNmse = 2e-4;  // as attention_v2_test.cpp
// Wide and narrow tiles sum the same keys in another order.
constexpr double kOrderNmse = 1e-5;

// Launches `p` as asked and with 32 keys a warp; returns both outputs.
struct Pair {
  std::vector<bf16> narrow;
  std::vector<bf16> wide;
};
Pair launch_both(DecodeDevice& d, AttentionParams p) {
  Pair out;
  p.warp_keys = 16;
  d.out.poison();
  launch_attention_decode_v2(p, nullptr);
  out.narrow = d.out.download();
  p.warp_keys = 32;
  d.out.poison();
  launch_attention_decode_v2(p, nullptr);
  out.wide = d.out.download();
  return out;
}

TEST(DecodeWideTilesTest, MatchTheReferenceOverShapesAndMerges) {
  CELLM_REQUIRE_GPU();
  const DecodeCase cases[] = {
      // Llama-3.2-1B heads at batch 1: 513-700 keys, the benchmark's shape.
      DecodeCase{32, 8, 64, 1, 513, 700, 0, 0.0f, 8, 128, 201},
      // Two tokens, from one key to three table windows (1600 keys).
      DecodeCase{32, 8, 64, 2, 1, 1600, 0, 0.0f, 8, 128, 202},
      // Llama-3.1-8B heads (128 wide) at batch 1.
      DecodeCase{32, 8, 128, 1, 300, 1200, 0, 0.0f, 8, 128, 203},
      // Group 16 (one full block of rows), a soft cap and a window.
      DecodeCase{16, 1, 64, 3, 1, 900, 200, 30.0f, 8, 64, 204},
      // MHA at an 80-wide head (the 128 bucket).
      DecodeCase{8, 8, 80, 2, 1, 500, 0, 0.0f, 8, 64, 205},
  };
  int compared = 0;
  for (const DecodeCase& c : cases) {
    const DecodeScenario s = testing::make_decode_scenario(c);
    const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
    const auto ref = testing::decode_reference(c, s, scale);
    DecodeDevice d(c, s);
    for (const int cluster : {1, 8}) {
      for (const bool push : {false, true}) {
        AttentionParams p = d.params(c, s, scale);
        p.cluster = cluster;
        p.spread = true;
        p.push_merge = push;
        p.pdl = true;
        ASSERT_TRUE(p.validate_decode_v2().is_ok()) << p.validate_decode_v2().to_string();
        const std::string where = fmt::format("h{}/{} hd {} batch {} cluster {} push {}", c.heads,
                                              c.kv_heads, c.head_dim, c.batch, cluster, push);
        const Pair out = launch_both(d, p);
        const auto wide = to_float(out.wide);
        EXPECT_LT(nmse(wide, ref), kAttentionNmse) << where;
        const auto narrow = to_float(out.narrow);
        EXPECT_LT(nmse(wide, std::vector<double>(narrow.begin(), narrow.end())), kOrderNmse)
            << where;
        // Deterministic: the same launch again gives the same bits.
        p.warp_keys = 32;
        d.out.poison();
        launch_attention_decode_v2(p, nullptr);
        const auto again = d.out.download();
        ASSERT_EQ(0, std::memcmp(out.wide.data(), again.data(), again.size() * sizeof(bf16)))
            << where;
        for (const std::int32_t counter : d.counters.download()) ASSERT_EQ(counter, 0) << where;
        ++compared;
      }
    }
  }
  EXPECT_EQ(compared, 20);
}

// Where the wide tiles do not apply, asking for them changes nothing.
TEST(DecodeWideTilesTest, LaunchesTheyDoNotServeKeepTheNarrowBits) {
  CELLM_REQUIRE_GPU();
  struct Case {
    DecodeCase c;
    bool spread;
    const char* why;
  };
  const Case cases[] = {
      {DecodeCase{32, 8, 64, 64, 1, 700, 0, 0.0f, 8, 128, 221}, true, "4096 blocks"},
      {DecodeCase{32, 8, 64, 1, 1, 700, 0, 0.0f, 8, 128, 222}, false, "no spread"},
      {DecodeCase{8, 1, 256, 2, 1, 900, 0, 50.0f, 8, 128, 223}, true, "256-wide heads"},
  };
  for (const auto& [c, spread, why] : cases) {
    const DecodeScenario s = testing::make_decode_scenario(c);
    const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
    DecodeDevice d(c, s);
    AttentionParams p = d.params(c, s, scale);
    p.cluster = 8;
    p.spread = spread;
    ASSERT_TRUE(p.validate_decode_v2().is_ok()) << p.validate_decode_v2().to_string();
    const Pair out = launch_both(d, p);
    ASSERT_EQ(0, std::memcmp(out.narrow.data(), out.wide.data(), out.wide.size() * sizeof(bf16)))
        << why;
    EXPECT_LT(nmse(to_float(out.wide), testing::decode_reference(c, s, scale)), kAttentionNmse)
        << why;
  }
}

// validate_decode_v2 takes 16 or 32 keys a warp and nothing else.
TEST(DecodeWideTilesTest, ValidateRefusesOtherWarpKeyCounts) {
  AttentionParams p = testing::unlaunched_decode_params();
  for (const int keys : {16, 32}) {
    p.warp_keys = keys;
    EXPECT_TRUE(p.validate_decode_v2().is_ok()) << keys;
  }
  for (const int keys : {0, 8, 24, 64}) {
    p.warp_keys = keys;
    const Status status = p.validate_decode_v2();
    ASSERT_FALSE(status.is_ok()) << keys;
    EXPECT_NE(status.to_string().find("warp_keys"), std::string::npos) << status.to_string();
  }
}

}  // namespace
}  // namespace cellm::cuda
