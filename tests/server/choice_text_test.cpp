// ChoiceText, the text side of stop strings: while a choice streams, a tail
// that could still begin a stop string is held back (and released once it
// cannot); at the end the text is cut where the engine's match began, inside
// a token if need be, even when the detokenizer dropped a leading space the
// engine's bytes have. The matching itself (min_tokens included) is the
// engine's and is tested in tests/engine/stop_strings_test.cpp. Expected cuts
// are worked out with std::string::find on the same text the engine sees.
#include "server/choice_text.h"

#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace cellm::server {
namespace {

constexpr Token kSilent = 300;  // a token with no text (EOS-like)

// Token t < 256 is the byte t; tokens 1000 + i are pieces[i]. With
// `strip_first_space`, the stream drops a leading space of its first piece,
// as a SentencePiece detokenizer does at the start of text.
class Pieces final : public TokenTextStream {
 public:
  explicit Pieces(std::vector<std::string> pieces = {}, bool strip_first_space = false)
      : pieces_(std::move(pieces)), strip_(strip_first_space) {}
  static std::string bytes_of(const std::vector<std::string>& pieces, Token t) {
    if (t < 256) return std::string(1, static_cast<char>(t));
    if (t >= 1000 && t - 1000 < pieces.size()) return pieces[t - 1000];
    return "";
  }
  std::string push(Token t) override {
    std::string s = bytes_of(pieces_, t);
    if (strip_ && first_ && !s.empty() && s[0] == ' ') s.erase(0, 1);
    if (!s.empty()) first_ = false;
    return s;
  }
  std::string finish() override { return {}; }

 private:
  std::vector<std::string> pieces_;
  bool strip_;
  bool first_ = true;
};

std::vector<Token> tokens_of(std::string_view s) {
  return std::vector<Token>(s.begin(), s.end());
}

// Feeds `s` one byte token at a time and returns what each push released.
std::vector<std::string> drip(ChoiceText& t, std::string_view s) {
  std::vector<std::string> out;
  for (char ch : s) out.push_back(t.push(std::vector<Token>{Token(ch)}));
  return out;
}

// The engine's report for stop `stop` (index `index`) first found in the
// raw bytes `text` of every delivered token.
StopStringMatch match(const std::string& text, const std::string& stop, std::int32_t index) {
  const std::size_t at = text.find(stop);
  EXPECT_NE(at, std::string::npos);
  return StopStringMatch{index, static_cast<std::int64_t>(at),
                         static_cast<std::int64_t>(text.size())};
}

TEST(ChoiceTextTest, ATailThatMayBeginAStopIsHeldUntilItCannot) {
  ChoiceText t(std::make_unique<Pieces>(), {"cd"});
  EXPECT_EQ(drip(t, "abcx"), (std::vector<std::string>{"a", "b", "", "cx"}));
  // A longer stop holds more, and the longest prefix of any stop counts.
  ChoiceText u(std::make_unique<Pieces>(), {"xyz", "yq"});
  EXPECT_EQ(drip(u, "axy"), (std::vector<std::string>{"a", "", ""}));
  EXPECT_EQ(u.push(tokens_of("w")), "xyw");
  EXPECT_FALSE(u.stopped_by_string());
  // Without stop strings nothing is held.
  ChoiceText v(std::make_unique<Pieces>(), {});
  EXPECT_EQ(v.push(tokens_of("abc")), "abc");
}

TEST(ChoiceTextTest, TheEndReleasesWhatWasHeldWhenNoStopMatched) {
  ChoiceText t(std::make_unique<Pieces>(), {"cd"});
  EXPECT_EQ(t.push(tokens_of("abc")), "ab");
  EXPECT_EQ(t.finish(std::vector<Token>{kSilent}), "c");
  EXPECT_FALSE(t.stopped_by_string());
  EXPECT_EQ(t.stop_index(), -1);
  EXPECT_EQ(t.tokens(), 4);
  EXPECT_EQ(t.finish({}), "");  // once
}

TEST(ChoiceTextTest, TheTextIsCutAtTheEnginesMatchAcrossTokens) {
  // "wor" spans three byte tokens and completes on the last one.
  const std::string said = "Hello wor";
  ChoiceText t(std::make_unique<Pieces>(), {"zz", "wor"});
  std::string shown = t.push(tokens_of("Hello wo"));
  shown += t.finish(tokens_of("r"), match(said, "wor", 1));
  EXPECT_EQ(shown, said.substr(0, said.find("wor")));
  EXPECT_TRUE(t.stopped_by_string());
  EXPECT_EQ(t.stop_index(), 1);
  EXPECT_EQ(t.tokens(), static_cast<std::int64_t>(said.size()));
}

TEST(ChoiceTextTest, AStopInsideOneTokenCutsThatToken) {
  const std::vector<std::string> pieces = {"He", "llo", " world!", " more"};
  // The match begins inside " world!" and the bytes after it in that token
  // go too.
  std::string said = pieces[0] + pieces[1] + pieces[2];
  ChoiceText t(std::make_unique<Pieces>(pieces), {"orl"});
  std::string shown = t.push(std::vector<Token>{1000, 1001});
  shown += t.finish(std::vector<Token>{1002}, match(said, "orl", 0));
  EXPECT_EQ(shown, said.substr(0, said.find("orl")));
  // A whole stop in the last update of several tokens.
  ChoiceText u(std::make_unique<Pieces>(pieces), {"lo w"});
  EXPECT_EQ(u.finish(std::vector<Token>{1000, 1001, 1002}, match(said, "lo w", 0)),
            said.substr(0, said.find("lo w")));
}

TEST(ChoiceTextTest, TheCutIsRightWhenTheDetokenizerDroppedALeadingSpace) {
  const std::vector<std::string> pieces = {" Hi", " there", ". Bye"};
  const std::string said = pieces[0] + pieces[1] + pieces[2];  // the engine's bytes
  ChoiceText t(std::make_unique<Pieces>(pieces, /*strip_first_space=*/true), {"."});
  std::string shown = t.push(std::vector<Token>{1000, 1001});
  shown += t.finish(std::vector<Token>{1002}, match(said, ".", 0));
  EXPECT_EQ(shown, "Hi there");
  // A match at the very start, in the dropped space: nothing is shown.
  ChoiceText u(std::make_unique<Pieces>(pieces, true), {" Hi"});
  EXPECT_EQ(u.finish(std::vector<Token>{1000}, match(pieces[0], " Hi", 0)), "");
}

TEST(ChoiceTextTest, TextAfterAStopIsNeverShownAndNothingShownIsTakenBack) {
  // An earlier occurrence the engine passed over (min_tokens) was released
  // with the stream; the cut removes only the engine's match.
  const std::string said = "abcdbc";
  ChoiceText t(std::make_unique<Pieces>(), {"bc"});
  std::string shown;
  for (std::string piece : drip(t, "abcdb")) shown += piece;
  EXPECT_EQ(shown, "abcd");  // "b" held: it may begin "bc"
  StopStringMatch m{0, static_cast<std::int64_t>(said.rfind("bc")),
                    static_cast<std::int64_t>(said.size())};
  shown += t.finish(tokens_of("c"), m);
  EXPECT_EQ(shown, "abcd");
  EXPECT_EQ(t.push(tokens_of("zz")), "");  // after the end, nothing
}

}  // namespace
}  // namespace cellm::server
