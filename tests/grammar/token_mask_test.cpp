// The token mask: a walk of the vocabulary trie must allow exactly the tokens
// whose bytes the matcher accepts from the current state (checked against a
// token-by-token brute force at every state along accepted texts), the cache
// must return what the walk computes, and a TokenConstraintState follows a
// tokenization of a valid text to an accepting end.
#include <random>

#include <gtest/gtest.h>

#include "grammar/json_schema.h"
#include "grammar/matcher.h"
#include "grammar/token_grammar.h"

namespace cellm::grammar {
namespace {

using json = nlohmann::ordered_json;

// A vocabulary with structural, word, whitespace, split-UTF-8 and empty
// (special) tokens, as byte-level BPE vocabularies have.
std::vector<std::string> toy_vocab() {
  std::vector<std::string> v = {
      "",       "{",     "}",    "\"",       ":",        ",",       "[",  "]",    " ",     "\n",
      "  ",     "{\"",   "\":",  "\",",      "\"}",      "a",       "ab", "abc",  "name",  "\"name",
      "\": \"", "1",     "12",   "0",        "-",        ".",       "5e", "true", "tr",    "ue",
      "null",   "\xc3",  "\xa9", "\xc3\xa9", "\xe6\x97", "\xa5",    "\\", "\\n",  "\\u00", "e9",
      "x\"",    "\"}\n", "red",  "green",    "blue",     "\"red\"", "}]", "\n  ", ""};
  return v;
}

std::vector<std::uint32_t> brute_force(const Matcher& m, const TokenVocabulary& vocab) {
  std::vector<std::uint32_t> words(vocab.mask_words(), 0);
  for (Token id = 0; id < static_cast<Token>(vocab.size()); ++id) {
    Matcher copy = m;
    if (!vocab.bytes(id).empty() && copy.advance(vocab.bytes(id))) {
      words[id / 32] |= 1u << (id % 32);
    }
  }
  return words;
}

TEST(TokenVocabulary, TrieHoldsEveryTokenOnce) {
  auto vocab = TokenVocabulary::create(toy_vocab());
  std::vector<int> seen(static_cast<std::size_t>(vocab->size()), 0);
  std::vector<std::string> path(vocab->max_depth() + 1);
  for (std::size_t i = 1; i < vocab->trie().size(); ++i) {
    const auto& node = vocab->trie()[i];
    ASSERT_GT(node.end, i);
    path[node.depth] = path[node.depth - 1] + static_cast<char>(node.byte);
    for (std::uint32_t k = 0; k < node.token_count; ++k) {
      const std::uint32_t id = vocab->trie_tokens()[node.first_token + k];
      EXPECT_EQ(vocab->bytes(id), path[node.depth]);
      ++seen[id];
    }
  }
  for (std::size_t id = 0; id < seen.size(); ++id) {
    EXPECT_EQ(seen[id], vocab->bytes(id).empty() ? 0 : 1) << id;
  }
}

TEST(TokenMask, WalkEqualsBruteForceAlongAcceptedTexts) {
  auto vocab = TokenVocabulary::create(toy_vocab());
  const char* schemas[] = {
      R"({"type":"object","properties":{"name":{"type":"string"},"n":{"type":"number"},
          "c":{"enum":["red","green"]},"l":{"type":"array","items":{"type":"boolean"}}},
          "required":["name","n","c","l"],"additionalProperties":false})",
      R"({"anyOf":[{"type":"object","properties":{"a":{"type":"null"}},"required":["a"]},
          {"type":"object","properties":{"ab":{"type":"integer"}},"required":["ab"]}]})"};
  const char* texts[][2] = {
      {"{\"name\": \"ab\\n\xc3\xa9\xe6\x97\xa5\", \"n\": -12.5e3, \"c\": \"red\", \"l\": [true, "
       "false]}",
       "{\"name\":\"\",\"n\":0,\"c\":\"green\",\"l\":[]}"},
      {"{\"a\": null}", "{\n  \"ab\": 12\n}"}};
  for (int s = 0; s < 2; ++s) {
    auto g = compile_json_schema(json::parse(schemas[s]));
    ASSERT_TRUE(g.ok()) << g.status().to_string();
    auto tg = TokenGrammar::create(*g, vocab);
    for (const char* text : texts[s]) {
      Matcher m(*g);
      const std::string t = text;
      for (std::size_t i = 0; i <= t.size(); ++i) {
        std::vector<std::uint32_t> walk(vocab->mask_words());
        tg->compute_mask(m, walk);
        EXPECT_EQ(walk, brute_force(m, *vocab)) << "at byte " << i << " of " << t;
        if (i < t.size()) {
          ASSERT_TRUE(m.advance(static_cast<std::uint8_t>(t[i]))) << t;
        }
      }
      EXPECT_TRUE(m.accepting());
    }
  }
}

TEST(TokenMask, CacheReturnsWhatTheWalkComputes) {
  auto vocab = TokenVocabulary::create(toy_vocab());
  auto g = compile_json_object();
  ASSERT_TRUE(g.ok());
  auto tg = TokenGrammar::create(*g, vocab);
  Matcher m(*g);
  const std::string text = "{\"ab\": \"abc abc abc\", \"a\": [1, 12, 0]}";
  for (int round = 0; round < 2; ++round) {
    Matcher walk = m;
    for (char c : text) {
      std::vector<std::uint32_t> cached(vocab->mask_words()), fresh(vocab->mask_words());
      tg->fill_mask(walk, cached);
      tg->compute_mask(walk, fresh);
      EXPECT_EQ(cached, fresh);
      ASSERT_TRUE(walk.advance(static_cast<std::uint8_t>(c)));
    }
  }
  const auto stats = tg->cache_stats();
  EXPECT_GT(stats.hits, text.size());  // the second round and repeated string states
  EXPECT_GT(stats.misses, 0u);
}

TEST(TokenMask, StateFollowsATokenizationToTheEnd) {
  auto vocab = TokenVocabulary::create(toy_vocab());
  auto g = compile_json_schema(json::parse(
      R"({"type":"object","properties":{"name":{"enum":["red","blue"]}},"required":["name"]})"));
  ASSERT_TRUE(g.ok());
  auto tg = TokenGrammar::create(*g, vocab);
  auto state = tg->start();
  std::vector<std::uint32_t> words(vocab->mask_words());
  // {"name": "red"} as {" name ": \" red \"}
  const std::vector<Token> ids = {11, 18, 20, 42, 14};
  for (Token id : ids) {
    state->fill_mask(words);
    ASSERT_TRUE((words[id / 32] >> (id % 32)) & 1u) << "token " << id << " not allowed";
    EXPECT_FALSE(state->accepting());
    ASSERT_TRUE(state->advance(id));
  }
  EXPECT_TRUE(state->accepting());
  state->fill_mask(words);
  for (std::uint32_t w : words) EXPECT_EQ(w, 0u);  // nothing may follow the root value
  EXPECT_FALSE(state->advance(8));                 // a space after the end
  EXPECT_FALSE(state->advance(0));                 // a token without bytes
}

}  // namespace
}  // namespace cellm::grammar
