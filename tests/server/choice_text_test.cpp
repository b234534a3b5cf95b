// ChoiceText with min_tokens and stop strings, one byte per token: no stop
// string ends a choice before min_tokens, a match that begins in the first
// min_tokens tokens' text and ends after it does (vLLM's rule), and text a
// later match could still claim is never released early.
#include "server/choice_text.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace cellm::server {
namespace {

constexpr Token kSilent = 300;  // a token with no text (EOS-like)

class Bytes final : public TokenTextStream {
 public:
  std::string push(Token id) override { return id < 256 ? std::string(1, char(id)) : ""; }
  std::string finish() override { return {}; }
};

ChoiceText make(std::vector<std::string> stops, std::int64_t min_tokens) {
  Result<ChoiceText> t =
      ChoiceText::create(std::make_unique<Bytes>(), std::move(stops), min_tokens);
  EXPECT_TRUE(t.ok()) << t.status().to_string();
  return std::move(t).value();
}

std::vector<Token> tokens_of(std::string_view s) {
  return std::vector<Token>(s.begin(), s.end());
}

// Feeds `s` one token at a time and returns what each push released.
std::vector<std::string> drip(ChoiceText& t, std::string_view s) {
  std::vector<std::string> out;
  for (char ch : s) out.push_back(t.push(std::vector<Token>{Token(ch)}));
  return out;
}

TEST(ChoiceTextTest, AMatchStartingBeforeTheMinimumAndEndingAfterItStops) {
  ChoiceText t = make({"cd"}, 3);
  EXPECT_EQ(t.push(tokens_of("abcdef")), "ab");
  EXPECT_TRUE(t.stopped_by_string());
  EXPECT_EQ(t.tokens(), 4);  // up to the token that completed the match
  EXPECT_EQ(t.finish(), "");
  EXPECT_EQ(t.push(tokens_of("gh")), "");
  EXPECT_EQ(t.tokens(), 4);
}

TEST(ChoiceTextTest, EarlyTextThatMayBeginAStopIsHeldNotReleased) {
  ChoiceText t = make({"cd"}, 3);
  // 'c' arrives within the minimum; it is held because 'd' could follow.
  EXPECT_EQ(drip(t, "abcd"), (std::vector<std::string>{"a", "b", "", ""}));
  EXPECT_TRUE(t.stopped_by_string());

  // When the next letter does not complete it, the held letter goes out with it.
  ChoiceText u = make({"cd"}, 3);
  EXPECT_EQ(drip(u, "abcxcd"), (std::vector<std::string>{"a", "b", "", "cx", "", ""}));
  EXPECT_TRUE(u.stopped_by_string());
}

TEST(ChoiceTextTest, AMatchWhollyInsideTheMinimumDoesNotCount) {
  ChoiceText t = make({"bc"}, 3);
  EXPECT_EQ(t.push(tokens_of("abcdbcx")), "abcd");
  EXPECT_TRUE(t.stopped_by_string());
  // Nothing after it either: the whole text passes.
  ChoiceText u = make({"bc"}, 3);
  EXPECT_EQ(u.push(tokens_of("abcdef")), "abcdef");
  EXPECT_FALSE(u.stopped_by_string());
  EXPECT_EQ(u.finish(), "");
  EXPECT_EQ(u.tokens(), 6);
}

TEST(ChoiceTextTest, AStraddlingMatchMayCompleteSeveralTokensLater) {
  ChoiceText t = make({"wxyz"}, 2);
  EXPECT_EQ(drip(t, "wxyz"), (std::vector<std::string>{"", "", "", ""}));
  EXPECT_TRUE(t.stopped_by_string());

  ChoiceText u = make({"wxyz"}, 2);
  EXPECT_EQ(drip(u, "wxyq"), (std::vector<std::string>{"", "", "", "wxyq"}));
  EXPECT_FALSE(u.stopped_by_string());
  EXPECT_EQ(u.finish(), "");
}

TEST(ChoiceTextTest, ALongerStopIsFoundAroundAShorterOneInTheEarlyText) {
  // "ab" lies wholly in the first three tokens' text and does not count;
  // "xaby" begins there and ends after it, so it does.
  ChoiceText t = make({"ab", "xaby"}, 3);
  EXPECT_EQ(t.push(tokens_of("xaby")), "");
  EXPECT_TRUE(t.stopped_by_string());
  // After the minimum the earliest match wins as usual.
  ChoiceText u = make({"ab", "xaby"}, 3);
  EXPECT_EQ(u.push(tokens_of("xabqab")), "xabq");
}

TEST(ChoiceTextTest, TokensWithoutTextStillCountTowardsTheMinimum) {
  // 'c' and a silent token fill the minimum of 2; 'd' completes "cd".
  ChoiceText t = make({"cd"}, 2);
  EXPECT_EQ(t.push(std::vector<Token>{'c', kSilent}), "");
  EXPECT_EQ(t.push(std::vector<Token>{'d'}), "");
  EXPECT_TRUE(t.stopped_by_string());
}

TEST(ChoiceTextTest, HeldEarlyTextIsReleasedWhenTheGenerationEnds) {
  // Ended before the minimum was reached.
  ChoiceText t = make({"cd"}, 5);
  EXPECT_EQ(t.push(tokens_of("abc")), "ab");
  EXPECT_EQ(t.finish(), "c");
  EXPECT_FALSE(t.stopped_by_string());
  // Ended right after it, with the early tail still held.
  ChoiceText u = make({"cd"}, 3);
  EXPECT_EQ(u.push(tokens_of("abc")), "ab");
  EXPECT_EQ(u.push(std::vector<Token>{kSilent}), "");
  EXPECT_EQ(u.finish(), "c");
  EXPECT_EQ(u.tokens(), 4);
}

TEST(ChoiceTextTest, AfterTheBoundaryThePlainMatcherTakesOver) {
  ChoiceText t = make({"cd", "yz"}, 3);
  EXPECT_EQ(drip(t, "abcxy"), (std::vector<std::string>{"a", "b", "", "cx", ""}));
  EXPECT_EQ(t.push(tokens_of("q")), "yq");
  EXPECT_EQ(t.push(tokens_of("cyz")), "c");
  EXPECT_TRUE(t.stopped_by_string());
}

TEST(ChoiceTextTest, WithoutAMinimumStopsAreLookedForFromTheFirstToken) {
  ChoiceText t = make({"ab"}, 0);
  EXPECT_EQ(t.push(tokens_of("xaby")), "x");
  EXPECT_TRUE(t.stopped_by_string());
  // A minimum without stop strings passes everything.
  ChoiceText u = make({}, 4);
  EXPECT_EQ(u.push(tokens_of("abcdef")), "abcdef");
  EXPECT_EQ(u.finish(), "");
}

// A stream whose detokenizer releases its text only at the end.
class TailOnly final : public TokenTextStream {
 public:
  explicit TailOnly(std::string tail) : tail_(std::move(tail)) {}
  std::string push(Token) override { return {}; }
  std::string finish() override { return tail_; }

 private:
  std::string tail_;
};

TEST(ChoiceTextTest, TheFinalTailIsEarlyTextOnlyWithinAMinimum) {
  // Without a minimum the tail is searched even when no token came before it.
  Result<ChoiceText> t = ChoiceText::create(std::make_unique<TailOnly>("xab"), {"ab"}, 0);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->finish(), "x");
  EXPECT_TRUE(t->stopped_by_string());
  // Within the minimum it is early text: a match wholly inside it is shown.
  Result<ChoiceText> u = ChoiceText::create(std::make_unique<TailOnly>("xab"), {"ab"}, 2);
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(u->push(std::vector<Token>{kSilent}), "");
  EXPECT_EQ(u->finish(), "xab");
  EXPECT_FALSE(u->stopped_by_string());
  // Past the minimum it is later text again.
  Result<ChoiceText> w = ChoiceText::create(std::make_unique<TailOnly>("xab"), {"ab"}, 1);
  ASSERT_TRUE(w.ok());
  EXPECT_EQ(w->push(std::vector<Token>{kSilent, kSilent}), "");
  EXPECT_EQ(w->finish(), "x");
  EXPECT_TRUE(w->stopped_by_string());
}

TEST(ChoiceTextTest, MalformedStopStringsAreRefused) {
  EXPECT_EQ(ChoiceText::create(std::make_unique<Bytes>(), {""}, 2).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(ChoiceText::create(std::make_unique<Bytes>(), {"\xff"}, 0).status().code(),
            StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace cellm::server
