// Defined behaviour on hostile input: invalid UTF-8, WTF-8 surrogates, huge
// strings, and malformed tokenizer.json files.
#include <chrono>
#include <fstream>
#include <random>

#include <gtest/gtest.h>

#include "core/utf8.h"
#include "text/fixtures.h"
#include "text/tokenizer.h"
#include "text/unicode_nfc.h"

namespace cellm::text {
namespace {

using testing::fixture_names;
using testing::fixture_tokenizer;

const std::string kFffd = "\xEF\xBF\xBD";

TEST(Utf8, RepairReplacesEachMaximalInvalidSubpart) {
  EXPECT_EQ(utf8::repair("a\xFF"
                         "b"),
            "a" + kFffd + "b");
  // A lone high surrogate in WTF-8 (ED A0 80): ED cannot start it, so every byte is replaced.
  EXPECT_EQ(utf8::repair("\xED\xA0\x80"), kFffd + kFffd + kFffd);
  // A truncated 3-byte sequence is one maximal subpart.
  EXPECT_EQ(utf8::repair("\xE6\x97"
                         "x"),
            kFffd + "x");
  // Overlong encodings are invalid.
  EXPECT_EQ(utf8::repair("\xC0\xAF"), kFffd + kFffd);
  EXPECT_EQ(utf8::repair("ok \xE6\x97\xA5"), "ok \xE6\x97\xA5");
  EXPECT_EQ(utf8::incomplete_tail("a\xF0\x9F\x98"), 3u);
  EXPECT_EQ(utf8::incomplete_tail("a\xF0\x9F\x98\x80"), 0u);
  EXPECT_EQ(utf8::incomplete_tail("a\xED\xA0"), 0u);  // can never complete
}

class BadInput : public ::testing::TestWithParam<std::string> {};

TEST_P(BadInput, InvalidUtf8EncodesAsItsRepair) {
  const Tokenizer& tok = fixture_tokenizer(GetParam());
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"abc\xFF\xFE def", "abc" + kFffd + kFffd + " def"},
      {"\xED\xA0\x80 lone surrogate", kFffd + kFffd + kFffd + " lone surrogate"},
      {"pair \xED\xA0\xBD\xED\xB8\x80", "pair " + kFffd + kFffd + kFffd + kFffd + kFffd + kFffd},
      {"cut \xE6\x97", "cut " + kFffd},
      {std::string("nul\0byte", 8), std::string("nul\0byte", 8)},
  };
  for (const auto& [bad, repaired] : cases) {
    const auto ids = tok.encode(bad, true);
    EXPECT_EQ(ids, tok.encode(repaired, true)) << GetParam();
    EXPECT_EQ(tok.decode(tok.encode(bad, false), false), repaired) << GetParam();
    for (auto id : ids) {
      EXPECT_GE(id, 0);
      EXPECT_LT(id, tok.vocab_size());
    }
  }
}

TEST_P(BadInput, OutOfRangeIdsAreSkippedByDecode) {
  const Tokenizer& tok = fixture_tokenizer(GetParam());
  const auto hello = tok.encode("hello", false);
  std::vector<std::int32_t> ids = {-1, tok.vocab_size(), 1 << 30};
  ids.insert(ids.end(), hello.begin(), hello.end());
  ids.push_back(-7);
  EXPECT_EQ(tok.decode(ids, false), tok.decode(hello, false));
  EXPECT_FALSE(tok.id_to_token(-1).has_value());
  EXPECT_FALSE(tok.id_to_token(tok.vocab_size()).has_value());
}

TEST_P(BadInput, MegabyteStringsRoundTrip) {
  const Tokenizer& tok = fixture_tokenizer(GetParam());
  std::mt19937 rng(7);
  std::string words;
  const char* vocab[] = {"the ",         "tokenizer ", "of ", "\xE6\x97\xA5\xE6\x9C\xAC ",
                         "caf\xC3\xA9 ", "42 ",        "\n",  "  "};
  while (words.size() < (1u << 20)) words += vocab[rng() % 8];
  std::string random_bytes(1u << 20, '\0');
  for (char& c : random_bytes) c = static_cast<char>(rng());
  const std::vector<std::string> inputs = {std::string(1u << 20, 'a'), std::string(1u << 20, ' '),
                                           std::string(1u << 20, '\n'), words, random_bytes};
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const auto start = std::chrono::steady_clock::now();
    const auto ids = tok.encode(inputs[i], false);
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_FALSE(ids.empty());
    EXPECT_LT(s, 60.0) << GetParam() << " input " << i << " took " << s << " s";
    // Qwen normalizes to NFC (random bytes hold combining marks).
    const std::string repaired = utf8::repair(inputs[i]);
    const std::string expected = GetParam() == "qwen3" ? nfc_normalize(repaired) : repaired;
    EXPECT_TRUE(tok.decode(ids, false) == expected)
        << GetParam() << " input " << i << " does not round-trip";
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, BadInput, ::testing::ValuesIn(fixture_names()),
                         [](const auto& info) { return info.param; });

// A tiny tokenizer.json that the malformed variants below start from.
std::string tiny_json(const std::string& model_type = "\"BPE\"", const std::string& extra = "") {
  return R"({"version": "1.0", "added_tokens": [{"id": 5, "content": "<s>", "special": true}],)"
         R"("normalizer": null, "pre_tokenizer": {"type": "Split", "pattern": {"String": " "},)"
         R"("behavior": "Isolated", "invert": false}, "post_processor": null, "decoder": null,)" +
         extra + R"("model": {"type": )" + model_type +
         R"(, "vocab": {"a": 0, "b": 1, "ab": 2, " ": 3, "c": 4}, "merges": ["a b"]}})";
}

TEST(TokenizerJson, TinyTokenizerWorks) {
  auto tok = Tokenizer::from_json(tiny_json());
  ASSERT_TRUE(tok.ok()) << tok.status().to_string();
  EXPECT_EQ(tok->encode("ab c<s>ba", false), std::vector<std::int32_t>({2, 3, 4, 5, 1, 0}));
  EXPECT_EQ(tok->vocab_size(), 6);
  EXPECT_TRUE(tok->is_special(5));
  EXPECT_FALSE(tok->is_special(2));
  // No decoder: HF joins the tokens with spaces.
  EXPECT_EQ(tok->decode(std::vector<std::int32_t>{2, 4, 5}, false), "ab c <s>");
  EXPECT_EQ(tok->decode(std::vector<std::int32_t>{2, 4, 5}, true), "ab c");
}

void expect_error(const std::string& json, StatusCode code, const std::string& needle) {
  auto tok = Tokenizer::from_json(json);
  ASSERT_FALSE(tok.ok()) << "accepted: " << json;
  EXPECT_EQ(tok.status().code(), code) << tok.status().to_string();
  EXPECT_NE(tok.status().message().find(needle), std::string_view::npos)
      << "message '" << tok.status().message() << "' does not mention '" << needle << "'";
}

TEST(TokenizerJson, MalformedFilesGiveClearErrors) {
  expect_error("{not json", StatusCode::kInvalidArgument, "not valid JSON");
  expect_error("[1, 2]", StatusCode::kInvalidArgument, "top level");
  expect_error(R"({"added_tokens": []})", StatusCode::kInvalidArgument, "model");
  expect_error(tiny_json("\"Unigram\""), StatusCode::kNotSupported, "Unigram");
  expect_error(tiny_json("\"WordPiece\""), StatusCode::kNotSupported, "WordPiece");
  expect_error(R"({"model": {"type": "BPE", "merges": []}})", StatusCode::kInvalidArgument,
               "model.vocab");
  expect_error(R"({"model": {"type": "BPE", "vocab": {"a": 0}}})", StatusCode::kInvalidArgument,
               "model.merges");
  expect_error(R"({"model": {"type": "BPE", "vocab": {"a": "x"}, "merges": []}})",
               StatusCode::kInvalidArgument, "model.vocab['a']");
  expect_error(R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": ["a z"]}})",
               StatusCode::kInvalidArgument, "merges");
  expect_error(R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": ["abc"]}})",
               StatusCode::kInvalidArgument, "merges[0]");
  expect_error(tiny_json("\"BPE\"", R"("normalizer": {"type": "NFKD"},)"),
               StatusCode::kNotSupported, "NFKD");
  expect_error(tiny_json("\"BPE\"", R"("decoder": {"type": "WordPiece"},)"),
               StatusCode::kNotSupported, "WordPiece");
  expect_error(
      tiny_json("\"BPE\"",
                R"("normalizer": {"type": "Replace", "pattern": {"Regex": "("}, "content": ""},)"),
      StatusCode::kInvalidArgument, "does not compile");
  expect_error(
      tiny_json(
          "\"BPE\"",
          R"("post_processor": {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<x>"}}], "special_tokens": {}},)"),
      StatusCode::kInvalidArgument, "<x>");
  expect_error(
      R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": [], "unk_token": "<unk>"}})",
      StatusCode::kInvalidArgument, "unk_token");
}

TEST(TokenizerJson, FileErrors) {
  EXPECT_EQ(Tokenizer::from_file("/nonexistent/tokenizer.json").status().code(),
            StatusCode::kNotFound);
  EXPECT_EQ(Tokenizer::from_dir("/nonexistent").status().code(), StatusCode::kNotFound);
  // A gzip stream cut short.
  const auto src = cellm::testing::testdata_dir() / "tokenizers" / "llama2" / "tokenizer.json.gz";
  std::ifstream in(src, std::ios::binary);
  std::string gz((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_GT(gz.size(), 1000u);
  const auto tmp = std::filesystem::temp_directory_path() / "cellm_text_truncated.json.gz";
  std::ofstream(tmp, std::ios::binary).write(gz.data(), 1000);
  auto tok = Tokenizer::from_file(tmp);
  EXPECT_EQ(tok.status().code(), StatusCode::kDataLoss) << tok.status().to_string();
  std::filesystem::remove(tmp);
}

}  // namespace
}  // namespace cellm::text
