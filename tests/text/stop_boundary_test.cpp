// StopMatcher with a boundary (ignore_matches_ending_by, the min_tokens rule):
// matches lying wholly within the first B bytes are passed over, matches that
// end past B stop the stream, and text is held back only while a match that
// would count could still grow out of it. Expected values are worked out by
// hand from byte offsets noted next to each case.
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/stop_matcher.h"

namespace cellm::text {
namespace {

StopMatcher make(std::vector<std::string> stops, std::size_t boundary) {
  auto m = StopMatcher::create(std::move(stops));
  EXPECT_TRUE(m.ok()) << m.status().to_string();
  StopMatcher matcher = std::move(m).value();
  matcher.ignore_matches_ending_by(boundary);
  return matcher;
}

// Pushes `pieces` in turn, collecting what is released until a stop.
struct Fed {
  std::string shown;
  bool stopped = false;
  int stop_index = -1;
};
Fed feed(StopMatcher& m, const std::vector<std::string>& pieces) {
  Fed fed;
  for (const std::string& piece : pieces) {
    StopMatcher::Output out = m.push(piece);
    fed.shown += out.text;
    if (out.stopped) {
      fed.stopped = true;
      fed.stop_index = out.stop_index;
      break;
    }
  }
  return fed;
}

TEST(StopBoundary, AMatchWhollyBeforeTheBoundaryIsPassedOver) {
  // "bc" at [1,3) ends at 3 = B; the second "bc" at [4,6) ends past it.
  StopMatcher m = make({"bc"}, 3);
  StopMatcher::Output out = m.push("abcdbcx");
  EXPECT_TRUE(out.stopped);
  EXPECT_EQ(out.stop_index, 0);
  EXPECT_EQ(out.text, "abcd");
  EXPECT_EQ(m.finish(), "");

  StopMatcher n = make({"bc"}, 3);
  EXPECT_EQ(n.push("abcd").text, "abcd");
  EXPECT_FALSE(n.stopped());
  EXPECT_EQ(n.finish(), "");
}

TEST(StopBoundary, AMatchStraddlingTheBoundaryStops) {
  // "cd" at [2,4) begins before B = 3 and ends after it.
  StopMatcher m = make({"cd"}, 3);
  Fed fed = feed(m, {"a", "b", "c", "d", "e"});
  EXPECT_TRUE(fed.stopped);
  EXPECT_EQ(fed.shown, "ab");
  EXPECT_EQ(m.push("f").text, "");
  EXPECT_TRUE(m.stopped());
}

TEST(StopBoundary, AMatchEndingExactlyAtTheBoundaryDoesNotCount) {
  // As in ChoiceText: a match is early text when it ends by the boundary.
  StopMatcher m = make({"cd"}, 4);
  // "c" could only begin "cd" at [2,4), which would not count: nothing held.
  EXPECT_EQ(m.push("abc").text, "abc");
  EXPECT_EQ(m.held_bytes(), 0u);
  EXPECT_EQ(m.push("d").text, "d");
  EXPECT_FALSE(m.stopped());

  // One byte earlier the same match ends past B, so "c" is held and it stops.
  StopMatcher n = make({"cd"}, 3);
  EXPECT_EQ(n.push("abc").text, "ab");
  EXPECT_EQ(n.held_bytes(), 1u);
  StopMatcher::Output out = n.push("d");
  EXPECT_TRUE(out.stopped);
  EXPECT_EQ(out.text, "");
}

TEST(StopBoundary, AnIgnoredMatchOverlapsALaterOneThatCounts) {
  // One stop string twice, overlapping: "aba" at [0,3) ends at B, at [2,5) past it.
  StopMatcher same = make({"aba"}, 3);
  StopMatcher::Output a = same.push("ababa");
  EXPECT_TRUE(a.stopped);
  EXPECT_EQ(a.text, "ab");

  // Two stops: "ab" [0,2) is ignored, "bxa" [1,4) counts and starts before
  // the later "ab" [3,5), so it wins.
  StopMatcher two = make({"ab", "bxa"}, 2);
  StopMatcher::Output b = two.push("abxab");
  EXPECT_TRUE(b.stopped);
  EXPECT_EQ(b.stop_index, 1);
  EXPECT_EQ(b.text, "a");

  // A longer stop around an ignored shorter one: "bc" [1,3), "abcd" [0,4).
  StopMatcher around = make({"bc", "abcd"}, 3);
  StopMatcher::Output c = around.push("abcd");
  EXPECT_TRUE(c.stopped);
  EXPECT_EQ(c.stop_index, 1);
  EXPECT_EQ(c.text, "");
}

TEST(StopBoundary, HeldTextMayHoldIgnoredMatches) {
  // "aa" is held as the start of "aab" although it holds two ignored "a".
  StopMatcher m = make({"a", "aab"}, 2);
  EXPECT_EQ(m.push("aa").text, "");
  EXPECT_EQ(m.held_bytes(), 2u);
  StopMatcher::Output out = m.push("b");  // "aab" [0,3) ends past B
  EXPECT_TRUE(out.stopped);
  EXPECT_EQ(out.stop_index, 1);
  EXPECT_EQ(out.text, "");

  StopMatcher n = make({"a", "aab"}, 2);
  EXPECT_EQ(n.push("aa").text, "");
  EXPECT_EQ(n.push("c").text, "aac");
  StopMatcher::Output late = n.push("xa");  // "a" at [4,5) counts
  EXPECT_TRUE(late.stopped);
  EXPECT_EQ(late.stop_index, 0);
  EXPECT_EQ(late.text, "x");
}

TEST(StopBoundary, MultiByteStopAcrossChunks) {
  const std::string stop = "\xE6\x97\xA5\xE6\x9C\xAC";  // "日本", 6 bytes
  // "日本x日本": the first match is [0,6), the second [7,13).
  const std::vector<std::string> bytes = {"\xE6", "\x97", "\xA5", "\xE6", "\x9C", "\xAC", "x",
                                          "\xE6", "\x97", "\xA5", "\xE6", "\x9C", "\xAC"};
  StopMatcher at_end = make({stop}, 6);
  Fed first = feed(at_end, bytes);
  EXPECT_TRUE(first.stopped);
  EXPECT_EQ(first.shown, stop + "x");

  // Boundary after "日" or inside the bytes of "本": the first match counts.
  const std::vector<std::string> split = {"\xE6\x97", "\xA5\xE6", "\x9C\xAC", "x"};
  for (std::size_t b : {3u, 4u, 5u}) {
    StopMatcher m = make({stop}, b);
    Fed fed = feed(m, split);
    EXPECT_TRUE(fed.stopped) << b;
    EXPECT_EQ(fed.shown, "") << b;
  }
}

TEST(StopBoundary, BoundaryMovedAfterTextWasFed) {
  StopMatcher later = make({"STOP"}, 0);
  EXPECT_EQ(later.push("xxST").text, "xx");
  EXPECT_EQ(later.held_bytes(), 2u);
  later.ignore_matches_ending_by(6);  // "STOP" at [2,6) would end at B
  EXPECT_EQ(later.push("OP").text, "STOP");
  StopMatcher::Output out = later.push("STOP");  // [6,10)
  EXPECT_TRUE(out.stopped);
  EXPECT_EQ(out.text, "");

  StopMatcher straddle = make({"STOP"}, 0);
  EXPECT_EQ(straddle.push("xxST").text, "xx");
  straddle.ignore_matches_ending_by(5);
  EXPECT_TRUE(straddle.push("OP").stopped);

  // Held text whose completion can no longer count goes with the next push.
  StopMatcher freed = make({"abc"}, 0);
  EXPECT_EQ(freed.push("ab").text, "");
  freed.ignore_matches_ending_by(3);
  EXPECT_EQ(freed.push("").text, "ab");
}

TEST(StopBoundary, BoundaryGrowingWithTheStreamAsChoiceTextDoes) {
  // The first three pieces are early text: B follows the end of each.
  StopMatcher m = make({"cd", "bc"}, 0);
  const std::vector<std::string> pieces = {"a", "b", "c", "x", "c", "d"};
  std::vector<std::string> shown;
  for (std::size_t i = 0; i < pieces.size() && !m.stopped(); ++i) {
    if (i < 3) m.ignore_matches_ending_by(m.bytes_pushed() + pieces[i].size());
    shown.push_back(m.push(pieces[i]).text);
  }
  // "b" is held as a start of "bc" until that match turns out early [1,3);
  // then "c" is held as a start of "cd" until "x" breaks it; "cd" [4,6) stops.
  EXPECT_EQ(shown, (std::vector<std::string>{"a", "", "b", "cx", "", ""}));
  EXPECT_TRUE(m.stopped());
  EXPECT_EQ(m.bytes_pushed(), 6u);
}

TEST(StopBoundaryDeathTest, TheBoundaryDoesNotMoveBack) {
  StopMatcher m = make({"cd"}, 4);
  EXPECT_DEATH(m.ignore_matches_ending_by(3), "stop boundary");
}

}  // namespace
}  // namespace cellm::text
