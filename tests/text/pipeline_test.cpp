// The pipeline parts on small hand-made inputs whose expected results follow
// from the HF definitions (worked out by hand in the comments).
#include <gtest/gtest.h>

#include "text/pre_tokenizer.h"
#include "text/tokenizer.h"
#include "text/unicode_nfc.h"

namespace cellm::text {
namespace {

using Words = std::vector<std::string>;

Words run(const PreTokenizer& p, const std::string& s, bool first = true) {
  Words w = {s};
  p.split(w, first);
  return w;
}

TEST(Nfc, ComposesReordersAndMapsSingletons) {
  EXPECT_EQ(nfc_normalize("caf"
                          "e\xCC\x81"),
            "caf\xC3\xA9");                                              // e + U+0301 → é
  EXPECT_EQ(nfc_normalize("\xE1\x84\x80\xE1\x85\xA1"), "\xEA\xB0\x80");  // jamo ᄀ + ᅡ → 가
  EXPECT_EQ(nfc_normalize("e\xCC\x82\xCC\xA3"), "\xE1\xBB\x87");         // e + ̂ + ̣ → ệ
  EXPECT_EQ(nfc_normalize("\xE2\x84\xAB"), "\xC3\x85");                  // Å (U+212B) → Å
  EXPECT_EQ(nfc_normalize("\xEF\xAC\x81"), "\xEF\xAC\x81");  // ﬁ is compatibility only
  EXPECT_EQ(nfc_normalize("plain ascii"), "plain ascii");
}

TEST(Split, Behaviours) {
  const std::string s = "a-b--c";
  EXPECT_EQ(run(*make_split_pre_tokenizer("-", std::nullopt, SplitBehavior::kRemoved, false), s),
            Words({"a", "b", "c"}));
  EXPECT_EQ(run(*make_split_pre_tokenizer("-", std::nullopt, SplitBehavior::kIsolated, false), s),
            Words({"a", "-", "b", "-", "-", "c"}));
  EXPECT_EQ(
      run(*make_split_pre_tokenizer("-", std::nullopt, SplitBehavior::kMergedWithPrevious, false),
          s),
      Words({"a-", "b-", "-", "c"}));
  EXPECT_EQ(
      run(*make_split_pre_tokenizer("-", std::nullopt, SplitBehavior::kMergedWithNext, false), s),
      Words({"a", "-b", "-", "-c"}));
  EXPECT_EQ(run(*make_split_pre_tokenizer("-", std::nullopt, SplitBehavior::kContiguous, false), s),
            Words({"a", "-", "b", "--", "c"}));
  // invert: the pattern matches the words, the rest is the delimiter.
  auto letters = Regex::create("[a-z]+");
  ASSERT_TRUE(letters.ok());
  EXPECT_EQ(run(*make_split_pre_tokenizer("", *letters, SplitBehavior::kRemoved, true), "ab, cd!"),
            Words({"ab", "cd"}));
}

TEST(Metaspace, ReplacesPrependsAndSplits) {
  const std::string bar = "\xE2\x96\x81";
  auto always = make_metaspace_pre_tokenizer(bar, PrependScheme::kAlways, true);
  EXPECT_EQ(run(*always, "Hey  friend"), Words({bar + "Hey", bar, bar + "friend"}));
  auto first = make_metaspace_pre_tokenizer(bar, PrependScheme::kFirst, false);
  EXPECT_EQ(run(*first, "Hey you", true), Words({bar + "Hey" + bar + "you"}));
  EXPECT_EQ(run(*first, "Hey you", false), Words({"Hey" + bar + "you"}));
}

TEST(ByteLevel, MapsEveryByteToAPrintableCharacter) {
  EXPECT_EQ(byte_level_char(' '), "\xC4\xA0");   // Ġ
  EXPECT_EQ(byte_level_char('\n'), "\xC4\x8A");  // Ċ
  EXPECT_EQ(byte_level_char('a'), "a");
  for (int b = 0; b < 256; ++b) {
    char32_t cp = 0;
    const std::string& s = byte_level_char(static_cast<unsigned char>(b));
    cp = s.size() == 1 ? static_cast<unsigned char>(s[0])
                       : ((static_cast<unsigned char>(s[0]) & 0x1F) << 6) |
                             (static_cast<unsigned char>(s[1]) & 0x3F);
    EXPECT_EQ(byte_level_byte(cp), b);
  }
}

// vocab: a b ab ␠ c; merges: a+b. Added tokens exercise the matcher flags.
std::string json_with(const std::string& added, const std::string& post = "null",
                      const std::string& decoder = "null", const std::string& pre = "null") {
  return R"({"added_tokens": [)" + added + R"(], "normalizer": null, "pre_tokenizer": )" + pre +
         R"(, "post_processor": )" + post + R"(, "decoder": )" + decoder +
         R"(, "model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2, " ": 3, "c": 4}, "merges": [["a", "b"]]}})";
}

TEST(AddedTokens, LstripRstripAndSingleWord) {
  auto tok = Tokenizer::from_json(json_with(
      R"({"id": 5, "content": "<m>", "lstrip": true, "special": true},
         {"id": 6, "content": "<r>", "rstrip": true, "special": false, "normalized": false},
         {"id": 7, "content": "cc", "single_word": true, "normalized": false})"));
  ASSERT_TRUE(tok.ok()) << tok.status().to_string();
  // lstrip swallows the spaces before <m>; rstrip the spaces after <r>.
  EXPECT_EQ(tok->encode("ab  <m>a", false), std::vector<std::int32_t>({2, 5, 0}));
  EXPECT_EQ(tok->encode("a<r>  b", false), std::vector<std::int32_t>({0, 6, 1}));
  // "cc" only as a whole word.
  EXPECT_EQ(tok->encode("cc c", false), std::vector<std::int32_t>({7, 3, 4}));
  EXPECT_EQ(tok->encode("acc", false), std::vector<std::int32_t>({0, 4, 4}));
  // Longest match wins among overlapping added tokens.
  EXPECT_EQ(tok->token_to_id("<r>"), 6);
  EXPECT_FALSE(tok->is_special(6));
  EXPECT_TRUE(tok->is_added(6));
}

TEST(PostProcessor, RobertaAndTemplate) {
  auto roberta = Tokenizer::from_json(json_with(
      R"({"id": 5, "content": "<s>", "special": true}, {"id": 6, "content": "</s>", "special": true})",
      R"({"type": "RobertaProcessing", "sep": ["</s>", 6], "cls": ["<s>", 5]})"));
  ASSERT_TRUE(roberta.ok()) << roberta.status().to_string();
  EXPECT_EQ(roberta->encode("ab", true), std::vector<std::int32_t>({5, 2, 6}));
  EXPECT_EQ(roberta->encode("ab", false), std::vector<std::int32_t>({2}));
  auto tmpl = Tokenizer::from_json(json_with(
      R"({"id": 5, "content": "<s>", "special": true}, {"id": 6, "content": "</s>", "special": true})",
      R"({"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<s>"}}, {"Sequence": {"id": "A"}},
          {"SpecialToken": {"id": "</s>"}}], "special_tokens": {"<s>": {"ids": [5]}, "</s>": {"ids": [6]}}})"));
  ASSERT_TRUE(tmpl.ok()) << tmpl.status().to_string();
  EXPECT_EQ(tmpl->encode("c", true), std::vector<std::int32_t>({5, 4, 6}));
  EXPECT_EQ(tmpl->bos_id(), 5);
}

TEST(Decoders, MetaspaceDropsReplacementsOfTheFirstTokenOnly) {
  auto tok = Tokenizer::from_json(
      R"({"decoder": {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always", "split": true},
          "model": {"type": "BPE", "vocab": {"▁a": 0, "▁b": 1, "c": 2, "▁▁": 3}, "merges": []}})");
  ASSERT_TRUE(tok.ok()) << tok.status().to_string();
  EXPECT_EQ(tok->decode(std::vector<std::int32_t>{0, 1, 2}, false), "a bc");
  EXPECT_EQ(tok->decode(std::vector<std::int32_t>{2, 0}, false), "c a");
  // HF's rule: every ▁ of token 0 goes, later ones become spaces.
  EXPECT_EQ(tok->decode(std::vector<std::int32_t>{3, 0, 3}, false), " a  ");
  auto never = Tokenizer::from_json(
      R"({"decoder": {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "never"},
          "model": {"type": "BPE", "vocab": {"▁a": 0}, "merges": []}})");
  ASSERT_TRUE(never.ok()) << never.status().to_string();
  EXPECT_EQ(never->decode(std::vector<std::int32_t>{0, 0}, false), " a a");
}

}  // namespace
}  // namespace cellm::text

namespace cellm::text {
namespace {

// Long ▁-words are cut before each ▁ for caching, except where a vocabulary
// token (here ">▁<") spans the cut; the result must equal plain merging.
TEST(BpeModel, LongMetaspaceWordsKeepTokensThatSpanACut) {
  auto tok = Tokenizer::from_json(
      R"({"model": {"type": "BPE", "vocab": {"▁": 0, "a": 1, ">": 2, "<": 3, "▁a": 4, ">▁": 5, ">▁<": 6},
          "merges": [["▁", "a"], [">", "▁"], [">▁", "<"]]}})");
  ASSERT_TRUE(tok.ok()) << tok.status().to_string();
  std::string text;
  std::vector<std::int32_t> expected;
  for (int i = 0; i < 40; ++i) {
    text +=
        "\xE2\x96\x81"
        "a";
    expected.push_back(4);
  }
  text += ">\xE2\x96\x81<";
  expected.push_back(6);
  // "a▁a▁…a▁": ▁+a merges, leaving a leading "a" and a trailing "▁".
  expected.push_back(1);
  for (int i = 0; i < 30; ++i) {
    text += "a\xE2\x96\x81";
    if (i > 0) expected.push_back(4);
  }
  expected.push_back(0);
  EXPECT_EQ(tok->encode(text, false), expected);
}

}  // namespace
}  // namespace cellm::text
