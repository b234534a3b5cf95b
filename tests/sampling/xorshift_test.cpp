#include "sampling/xorshift.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <set>

namespace cellm::sampling {
namespace {

// Reference values come from this independent Python transcription (run once):
//
//   M = (1 << 64) - 1
//   def splitmix(x):
//       x = (x + 0x9E3779B97F4A7C15) & M
//       x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & M
//       x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & M
//       return x ^ (x >> 31)
//   def draws(seed, n):
//       s = splitmix(seed) or 0x9E3779B97F4A7C15
//       out = []
//       for _ in range(n):
//           s ^= s >> 12; s ^= (s << 25) & M; s ^= s >> 27
//           u = ((s * 0x2545F4914F6CDD1D) & M) >> 32
//           out.append((u, (u >> 8) / 2**24))
//       return hex(splitmix(seed)), out
//
// splitmix(0) = 0xe220a8397b1dcdaf is also the published first splitmix64
// output for seed 0.

TEST(XorshiftTest, SeedsThroughSplitmix) {
  EXPECT_EQ(splitmix64(0), 0xe220a8397b1dcdafull);
  EXPECT_EQ(Xorshift64Star(0).state(), 0xe220a8397b1dcdafull);
  EXPECT_EQ(Xorshift64Star(42).state(), 0xbdd732262feb6e95ull);
}

TEST(XorshiftTest, MatchesTheIndependentTranscription) {
  Xorshift64Star a(0);
  EXPECT_EQ(a.next_u32(), 2075964429u);
  EXPECT_EQ(a.next_u32(), 3732923411u);
  EXPECT_EQ(a.next_u32(), 3016112181u);
  EXPECT_EQ(a.next_u32(), 3765678016u);

  Xorshift64Star b(42);
  EXPECT_FLOAT_EQ(b.next_f32(), 0.194105863571167f);
  EXPECT_FLOAT_EQ(b.next_f32(), 0.5626317858695984f);
  EXPECT_FLOAT_EQ(b.next_f32(), 0.48610609769821167f);
  EXPECT_FLOAT_EQ(b.next_f32(), 0.2711055278778076f);
}

TEST(XorshiftTest, CoinsAreOnTheTwoToTheMinus24GridBelowOne) {
  Xorshift64Star g(7);
  for (int i = 0; i < 10000; ++i) {
    const float c = g.next_f32();
    ASSERT_GE(c, 0.0f);
    ASSERT_LT(c, 1.0f);
    const double scaled = static_cast<double>(c) * 16777216.0;
    ASSERT_EQ(scaled, static_cast<double>(static_cast<std::uint32_t>(scaled)));
  }
}

TEST(XorshiftTest, SeedingReproducesSequencesAndSeedsDiffer) {
  Xorshift64Star a(123);
  Xorshift64Star b(123);
  Xorshift64Star c(124);
  std::set<std::uint32_t> seen;
  bool any_differs = false;
  for (int i = 0; i < 100; ++i) {
    const std::uint32_t x = a.next_u32();
    EXPECT_EQ(x, b.next_u32());
    any_differs |= x != c.next_u32();
    seen.insert(x);
  }
  EXPECT_TRUE(any_differs);
  EXPECT_GT(seen.size(), 95u);
}

}  // namespace
}  // namespace cellm::sampling
