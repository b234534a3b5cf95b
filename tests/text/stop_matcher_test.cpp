// StopMatcher on its own and behind the streaming detokenizer.
#include <gtest/gtest.h>

#include "text/fixtures.h"
#include "text/detokenizer.h"
#include "core/stop_matcher.h"

namespace cellm::text {
namespace {

StopMatcher make(std::vector<std::string> stops) {
  auto m = StopMatcher::create(std::move(stops));
  EXPECT_TRUE(m.ok()) << m.status().to_string();
  return std::move(m).value();
}

TEST(StopMatcher, HoldsPossiblePrefixAcrossPushes) {
  StopMatcher m = make({"</s>"});
  auto a = m.push("Hello <");
  EXPECT_EQ(a.text, "Hello ");
  EXPECT_FALSE(a.stopped);
  EXPECT_EQ(m.held_bytes(), 1u);
  auto b = m.push("/");
  EXPECT_EQ(b.text, "");
  EXPECT_EQ(m.held_bytes(), 2u);
  auto c = m.push("s> and more");
  EXPECT_EQ(c.text, "");
  EXPECT_TRUE(c.stopped);
  EXPECT_EQ(c.stop_index, 0);
  // After the stop nothing more comes out.
  auto d = m.push("x");
  EXPECT_TRUE(d.stopped);
  EXPECT_EQ(d.text, "");
  EXPECT_EQ(m.finish(), "");
}

TEST(StopMatcher, ReleasesWhenThePrefixBreaks) {
  StopMatcher m = make({"abc"});
  EXPECT_EQ(m.push("xab").text, "x");
  EXPECT_EQ(m.push("d").text, "abd");
  EXPECT_EQ(m.held_bytes(), 0u);
  EXPECT_EQ(m.push("aab").text, "a");  // "ab" may still start "abc"
  EXPECT_EQ(m.finish(), "ab");
}

TEST(StopMatcher, EarliestStopWinsAndTextBeforeItIsKept) {
  StopMatcher m = make({"world", "lo w"});
  auto out = m.push("hello world");
  EXPECT_TRUE(out.stopped);
  EXPECT_EQ(out.stop_index, 1);
  EXPECT_EQ(out.text, "hel");
}

TEST(StopMatcher, StopInsideOnePush) {
  StopMatcher m = make({"\n\n"});
  auto out = m.push("line one\n\nline two");
  EXPECT_TRUE(out.stopped);
  EXPECT_EQ(out.text, "line one");
}

TEST(StopMatcher, NoStopsPassesEverythingThrough) {
  StopMatcher m = make({});
  EXPECT_EQ(m.push("abc").text, "abc");
  EXPECT_EQ(m.finish(), "");
}

TEST(StopMatcher, RejectsBadStopStrings) {
  EXPECT_EQ(StopMatcher::create({"ok", ""}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(StopMatcher::create({"\xFF"}).status().code(), StatusCode::kInvalidArgument);
}

TEST(StopMatcher, MultiByteStopSplitAcrossTokens) {
  const Tokenizer& tok = testing::fixture_tokenizer("llama3");
  const std::string text = "result: \xE6\x97\xA5\xE6\x9C\xAC tail";  // "result: 日本 tail"
  const auto ids = tok.encode(text, false);
  StreamingDetokenizer detok(tok);
  StopMatcher m = make({"\xE6\x97\xA5\xE6\x9C\xAC"});
  std::string shown;
  bool stopped = false;
  for (auto id : ids) {
    auto out = m.push(detok.push(id));
    shown += out.text;
    if (out.stopped) {
      stopped = true;
      break;
    }
  }
  EXPECT_TRUE(stopped);
  EXPECT_EQ(shown, "result: ");
}

TEST(StopMatcher, StopAcrossTokenBoundariesWithEveryTokenizer) {
  for (const std::string& name : testing::fixture_names()) {
    const Tokenizer& tok = testing::fixture_tokenizer(name);
    const auto ids = tok.encode("The answer is 42.\nUser: what else?", false);
    StreamingDetokenizer detok(tok);
    StopMatcher m = make({"\nUser:"});
    std::string shown;
    bool stopped = false;
    for (auto id : ids) {
      auto out = m.push(detok.push(id));
      shown += out.text;
      if (out.stopped) {
        stopped = true;
        break;
      }
      // Nothing of the stop string is ever shown.
      EXPECT_EQ(shown.find('\n'), std::string::npos) << name;
    }
    EXPECT_TRUE(stopped) << name;
    EXPECT_EQ(shown, "The answer is 42.") << name;
  }
}

}  // namespace
}  // namespace cellm::text
