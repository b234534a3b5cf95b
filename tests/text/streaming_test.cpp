// StreamingDetokenizer: feeding ids one at a time must give exactly decode()
// of all of them, in pieces that are each complete UTF-8.
#include <fstream>
#include <random>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/utf8.h"
#include "text/detokenizer.h"
#include "text/fixtures.h"

namespace cellm::text {
namespace {

using testing::fixture_tokenizer;

// Streams `ids`, checking each piece, and returns the concatenation.
std::string stream(const Tokenizer& tok, const std::vector<std::int32_t>& ids, bool skip_special,
                   std::string* failure) {
  StreamingDetokenizer detok(tok, skip_special);
  std::string all;
  for (std::size_t i = 0; i < ids.size(); ++i) {
    const std::string piece = detok.push(ids[i]);
    if (!utf8::is_valid(piece) && failure->empty())
      *failure = "invalid UTF-8 after token " + std::to_string(i);
    all += piece;
  }
  const std::string tail = detok.finish();
  if (!utf8::is_valid(tail) && failure->empty()) *failure = "invalid UTF-8 from finish()";
  return all + tail;
}

class StreamingGolden : public ::testing::TestWithParam<std::string> {};

TEST_P(StreamingGolden, EqualsOneShotDecode) {
  const Tokenizer& tok = fixture_tokenizer(GetParam());
  std::ifstream in(cellm::testing::testdata_dir() / "tokenizer_goldens" /
                   (GetParam() + ".encode.jsonl"));
  ASSERT_TRUE(in);
  std::string line;
  int line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    const auto j = nlohmann::json::parse(line);
    for (const char* key : {"ids", "ids_special"}) {
      const auto ids = j[key].get<std::vector<std::int32_t>>();
      for (bool skip : {false, true}) {
        std::string failure;
        const std::string streamed = stream(tok, ids, skip, &failure);
        EXPECT_EQ(streamed, tok.decode(ids, skip))
            << "line " << line_no << " " << key << " skip=" << skip;
        EXPECT_TRUE(failure.empty()) << "line " << line_no << ": " << failure;
      }
    }
    // The golden's own decode is the reference for the non-skipping stream.
    std::string failure;
    EXPECT_EQ(stream(tok, j["ids"].get<std::vector<std::int32_t>>(), false, &failure),
              j["decoded"].get<std::string>())
        << "line " << line_no;
  }
}

// Arbitrary id sequences (random pieces, lots of byte tokens and split
// characters) must stream to the same text as decode, garbage included.
TEST_P(StreamingGolden, RandomIdsEqualOneShotDecode) {
  const Tokenizer& tok = fixture_tokenizer(GetParam());
  std::mt19937 rng(1234);
  std::vector<std::int32_t> byte_ids;
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    if (auto id = tok.token_to_id(name)) byte_ids.push_back(*id);
  }
  // Byte-level vocabularies: the single-byte tokens are the first 256 pieces.
  if (byte_ids.empty()) {
    for (int i = 0; i < 256; ++i) byte_ids.push_back(i);
  }
  std::uniform_int_distribution<std::int32_t> any(-5, tok.vocab_size() + 5);
  for (int round = 0; round < 300; ++round) {
    std::vector<std::int32_t> ids;
    const int n = 1 + static_cast<int>(rng() % 24);
    for (int i = 0; i < n; ++i) {
      ids.push_back(rng() % 3 == 0 ? any(rng) : byte_ids[rng() % byte_ids.size()]);
    }
    for (bool skip : {false, true}) {
      std::string failure;
      EXPECT_EQ(stream(tok, ids, skip, &failure), tok.decode(ids, skip))
          << "round " << round << " ids " << nlohmann::json(ids).dump();
      EXPECT_TRUE(failure.empty()) << failure;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, StreamingGolden, ::testing::ValuesIn(testing::fixture_names()),
                         [](const auto& info) { return info.param; });

TEST(Streaming, ByteFallbackRunIsHeldUntilItEnds) {
  const Tokenizer& tok = fixture_tokenizer("llama2");
  // U+1F9E0 is not a Llama 2 piece: it is spelled as four byte tokens.
  const std::vector<std::int32_t> ids = tok.encode("\xF0\x9F\xA7\xA0 ok", false);
  const std::vector<std::int32_t> bytes = {*tok.token_to_id("<0xF0>"), *tok.token_to_id("<0x9F>"),
                                           *tok.token_to_id("<0xA7>"), *tok.token_to_id("<0xA0>")};
  ASSERT_GE(ids.size(), 6u);
  ASSERT_EQ(std::vector<std::int32_t>(ids.begin() + 1, ids.begin() + 5), bytes);
  StreamingDetokenizer detok(tok);
  std::string out = detok.push(ids[0]);  // "▁"
  for (std::size_t i = 1; i < 5; ++i) {
    EXPECT_EQ(detok.push(ids[i]), "") << "byte token " << i << " released early";
  }
  EXPECT_GT(detok.pending_tokens(), 0u);
  for (std::size_t i = 5; i < ids.size(); ++i) out += detok.push(ids[i]);
  out += detok.finish();
  EXPECT_EQ(out, "\xF0\x9F\xA7\xA0 ok");
}

TEST(Streaming, InvalidByteRunBecomesReplacementPerByte) {
  const Tokenizer& tok = fixture_tokenizer("llama2");
  // E6 97 followed by 'a': HF replaces each byte of the broken run.
  const std::vector<std::int32_t> ids = {*tok.token_to_id("<0xE6>"), *tok.token_to_id("<0x97>"),
                                         *tok.token_to_id("a")};
  StreamingDetokenizer detok(tok);
  std::string out;
  for (auto id : ids) out += detok.push(id);
  out += detok.finish();
  EXPECT_EQ(out,
            "\xEF\xBF\xBD\xEF\xBF\xBD"
            "a");
  EXPECT_EQ(tok.decode(ids, false), out);
}

TEST(Streaming, MetaspaceLeadingSpaceOnlyStrippedForFirstToken) {
  const Tokenizer& tok = fixture_tokenizer("llama2");
  const auto hello = *tok.token_to_id("\xE2\x96\x81Hello");
  const auto world = *tok.token_to_id("\xE2\x96\x81world");
  StreamingDetokenizer detok(tok);
  EXPECT_EQ(detok.push(*tok.bos_id()), "");  // special, skipped
  EXPECT_EQ(detok.push(hello), "Hello");
  EXPECT_EQ(detok.push(world), " world");
  EXPECT_EQ(detok.push(world), " world");
  detok.reset();
  EXPECT_EQ(detok.push(world), "world");
}

TEST(Streaming, ByteLevelCharacterSplitAcrossTokens) {
  const Tokenizer& tok = fixture_tokenizer("llama3");
  const std::string emoji = "\xF0\x9F\x98\x80";
  const auto ids = tok.encode(emoji, false);
  ASSERT_GE(ids.size(), 2u) << "expected the emoji to span several tokens";
  StreamingDetokenizer detok(tok);
  for (std::size_t i = 0; i + 1 < ids.size(); ++i) EXPECT_EQ(detok.push(ids[i]), "");
  EXPECT_EQ(detok.push(ids.back()), emoji);
  EXPECT_EQ(detok.finish(), "");
}

TEST(Streaming, UnfinishedCharacterAtEndIsRepaired) {
  const Tokenizer& tok = fixture_tokenizer("llama3");
  const auto ids = tok.encode("\xF0\x9F\x98\x80", false);
  ASSERT_GE(ids.size(), 2u);
  StreamingDetokenizer detok(tok);
  EXPECT_EQ(detok.push(ids[0]), "");
  EXPECT_EQ(detok.finish(), tok.decode(std::vector<std::int32_t>{ids[0]}, false));
  EXPECT_TRUE(utf8::is_valid(tok.decode(std::vector<std::int32_t>{ids[0]}, false)));
}

}  // namespace
}  // namespace cellm::text
