// The shared UTF-8 primitives against the Unicode standard: the encoding
// ranges of chapter 3, table 3-7 (well-formed sequences) and the worked
// example of U+FFFD substitution by maximal subparts (table 3-8).
#include "core/utf8.h"

#include <cstdint>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace cellm::utf8 {
namespace {

const std::string kFffd = "\xEF\xBF\xBD";

TEST(Utf8, EncodesKnownCodePoints) {
  EXPECT_EQ(encode(U'A'), "A");
  EXPECT_EQ(encode(0xE9), "\xC3\xA9");              // é
  EXPECT_EQ(encode(0x20AC), "\xE2\x82\xAC");        // €
  EXPECT_EQ(encode(0x1F600), "\xF0\x9F\x98\x80");   // 😀
  EXPECT_EQ(encode(0x10FFFF), "\xF4\x8F\xBF\xBF");  // last code point
  EXPECT_EQ(encode(kReplacementChar), kFffd);
}

// Every scalar value round-trips with the length its range prescribes.
TEST(Utf8, EveryScalarValueRoundTrips) {
  for (char32_t cp = 0; cp <= 0x10FFFF; ++cp) {
    if (cp >= 0xD800 && cp <= 0xDFFF) continue;
    const std::string s = encode(cp);
    const std::size_t want = cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
    ASSERT_EQ(s.size(), want) << std::hex << static_cast<std::uint32_t>(cp);
    char32_t got = 0;
    ASSERT_EQ(decode(s, 0, &got), want) << std::hex << static_cast<std::uint32_t>(cp);
    ASSERT_EQ(got, cp);
    ASSERT_TRUE(is_valid(s));
    ASSERT_EQ(incomplete_tail(s.substr(0, want - 1)), want - 1);
  }
}

TEST(Utf8, RefusesIllFormedSequences) {
  const std::vector<std::string> bad = {
      "\x80",              // lone continuation
      "\xC0\xAF",          // overlong '/'
      "\xC1\xBF",          // overlong
      "\xE0\x80\xAF",      // overlong
      "\xF0\x80\x80\xAF",  // overlong
      "\xED\xA0\x80",      // surrogate U+D800
      "\xED\xBF\xBF",      // surrogate U+DFFF
      "\xF4\x90\x80\x80",  // U+110000
      "\xF5\x80\x80\x80",  // lead byte past F4
      "\xFF",
      "\xE2\x82",  // truncated
  };
  for (const std::string& s : bad) {
    char32_t cp = 0;
    EXPECT_EQ(decode(s, 0, &cp), 0u) << s;
    EXPECT_FALSE(is_valid(s));
    EXPECT_EQ(find_invalid("ok" + s), 2u);
  }
  EXPECT_EQ(find_invalid("plain \xC3\xA9"), std::nullopt);
  EXPECT_EQ(find_invalid(""), std::nullopt);
}

// Table 3-8 of the standard: each maximal subpart becomes one U+FFFD.
TEST(Utf8, RepairFollowsMaximalSubparts) {
  const std::string in = "\x61\xF1\x80\x80\xE1\x80\xC2\x62\x80\x63\x80\xBF\x64";
  const std::string want = "a" + kFffd + kFffd + kFffd + "b" + kFffd + "c" + kFffd + kFffd + "d";
  EXPECT_EQ(repair(in), want);
  EXPECT_EQ(repair("\xED\xA0\x80"), kFffd + kFffd + kFffd);  // E0..ED second bytes refuse A0
  EXPECT_EQ(repair("valid \xE2\x82\xAC"), "valid \xE2\x82\xAC");
  EXPECT_EQ(invalid_span(in, 1), 3u);
  EXPECT_EQ(invalid_span(in, 4), 2u);
  EXPECT_EQ(invalid_span(in, 6), 1u);
}

// next() reads what repair() writes, one code point at a time.
TEST(Utf8, NextAgreesWithRepair) {
  const std::string in = "\x61\xF1\x80\x80\xE1\x80\xC2\x62\xE2\x82\xAC\xF0\x9F";
  std::string rebuilt;
  for (std::size_t i = 0; i < in.size();) {
    const std::size_t before = i;
    append(rebuilt, next(in, i));
    ASSERT_GT(i, before);
  }
  EXPECT_EQ(rebuilt, repair(in));
}

TEST(Utf8, IncompleteTailHoldsBackOnlyCompletablePrefixes) {
  EXPECT_EQ(incomplete_tail(""), 0u);
  EXPECT_EQ(incomplete_tail("abc"), 0u);
  EXPECT_EQ(incomplete_tail("a\xF0\x9F\x98"), 3u);
  EXPECT_EQ(incomplete_tail("a\xF0\x9F"), 2u);
  EXPECT_EQ(incomplete_tail("a\xE2"), 1u);
  EXPECT_EQ(incomplete_tail("a\xF0\x9F\x98\x80"), 0u);  // complete
  EXPECT_EQ(incomplete_tail("a\xED\xA0"), 0u);          // a surrogate never completes
  EXPECT_EQ(incomplete_tail("a\x80"), 0u);              // no lead byte
}

TEST(Utf8, BoundariesAndLengthCountCodePoints) {
  const std::string s = "a\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80";
  EXPECT_EQ(boundaries(s), (std::vector<std::size_t>{0, 1, 3, 6, 10}));
  EXPECT_EQ(length(s), 4u);
  EXPECT_EQ(boundaries(""), (std::vector<std::size_t>{0}));
  EXPECT_EQ(length(""), 0u);
}

}  // namespace
}  // namespace cellm::utf8
