// The fast mask (TokenGrammar::walk_mask: region tables and the one-item
// walk) against the plain trie walk (compute_mask, itself checked against a
// token-by-token brute force in token_mask_test.cpp): equal masks at every
// state along the example and along random generations of each schema in
// bench/schemas, for two real tokenizers (Gemma 3's 262k ids, Llama 3's
// 128k). One vocabulary per tokenizer serves every schema, so region tables
// are shared between grammars here as in the server. Two user (EBNF)
// grammars add ambiguous states and regions under a stack.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <random>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "grammar/ebnf.h"
#include "grammar/json_schema.h"
#include "grammar/matcher.h"
#include "grammar/token_grammar.h"
#include "grammar/vocab_from_tokenizer.h"
#include "support/testdata.h"
#include "text/tokenizer.h"

namespace cellm::grammar {
namespace {

using ojson = nlohmann::ordered_json;

struct Case {
  std::string name;
  std::shared_ptr<const Grammar> grammar;
  std::string example;
};

std::vector<Case> bench_schemas() {
  std::vector<Case> out;
  const auto dir = cellm::testing::source_dir() / "bench" / "schemas";
  std::vector<std::filesystem::path> files;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    if (e.path().extension() == ".json") files.push_back(e.path());
  std::sort(files.begin(), files.end());
  for (const auto& f : files) {
    std::ifstream in(f);
    const ojson doc = ojson::parse(in);
    auto g = doc["schema"].is_null() ? compile_json_object() : compile_json_schema(doc["schema"]);
    EXPECT_TRUE(g.ok()) << f << ": " << g.status().to_string();
    if (g.ok()) out.push_back({f.stem().string(), *g, doc["example"].dump()});
  }
  return out;
}

std::vector<Token> allowed(const std::vector<std::uint32_t>& words, std::int64_t n) {
  std::vector<Token> ids;
  for (Token id = 0; id < static_cast<Token>(n); ++id)
    if ((words[id / 32] >> (id % 32)) & 1u) ids.push_back(id);
  return ids;
}

// User grammars: ambiguous alternatives (several items at once), recursion
// (regions under a stack) and string-like loops.
std::vector<Case> user_grammars() {
  const char* src[][2] = {
      {R"g(root ::= item ("," ws item)*
           item ::= [a-z]+ | [a-z]+ "x" | [0-9]{1,3} | "\"" [^"]{0,20} "\""
           ws ::= [ \t\n]*)g",
       R"(abc, 12,"hi there", abx)"},
      {R"g(root ::= "(" root* ")" | "[" [^\]]* "]" | "'" ([^'\\] | "\\" .)* "'")g",
       R"(([a b](['it\'s'][])))"},
  };
  std::vector<Case> out;
  for (const auto& [text, example] : src) {
    auto g = compile_ebnf(text);
    EXPECT_TRUE(g.ok()) << text << ": " << g.status().to_string();
    if (g.ok()) {
      EXPECT_TRUE(Matcher::matches(*g, example)) << example;
      out.push_back({"ebnf", *g, example});
    }
  }
  return out;
}

void check_tokenizer(const std::string& name) {
  const auto path = cellm::testing::testdata_dir() / "tokenizers" / name / "tokenizer.json.gz";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "no fixture " << path;
  auto tok = text::Tokenizer::from_file(path);
  ASSERT_TRUE(tok.ok()) << tok.status().to_string();
  const auto vocab = vocabulary_from_tokenizer(*tok, tok->vocab_size());
  std::vector<Case> cases = bench_schemas();
  // Every file of bench/schemas compiled (a missing one would shrink the set).
  std::size_t files = 0;
  for (const auto& e :
       std::filesystem::directory_iterator(cellm::testing::source_dir() / "bench" / "schemas")) {
    files += e.path().extension() == ".json" ? 1 : 0;
  }
  ASSERT_GE(files, 17u);
  ASSERT_EQ(cases.size(), files);
  for (Case& c : user_grammars()) cases.push_back(std::move(c));
  std::mt19937 rng(1234);
  std::size_t compared = 0;
  for (const Case& c : cases) {
    const auto tg = TokenGrammar::create(c.grammar, vocab);
    // Path 0 follows the example (the longest allowed token that spells
    // what comes next); paths 1 and 2 draw allowed tokens at random, half
    // of the time among those with a structural byte so that strings end.
    for (int path = 0; path < 3; ++path) {
      Matcher m(c.grammar);
      std::size_t at = 0;
      for (int step = 0; step < 40; ++step) {
        std::vector<std::uint32_t> plain(vocab->mask_words()), fast(vocab->mask_words()),
            served(vocab->mask_words());
        tg->compute_mask(m, plain);
        tg->walk_mask(m, fast);
        tg->fill_mask(m, served);
        ++compared;
        ASSERT_EQ(fast, plain) << name << " " << c.name << " path " << path << " step " << step;
        ASSERT_EQ(served, plain) << name << " " << c.name << " path " << path << " step " << step;
        const std::vector<Token> ids = allowed(plain, vocab->size());
        if (ids.empty()) break;
        std::optional<Token> pick;
        if (path == 0) {
          std::size_t best = 0;
          for (Token id : ids) {
            const std::string& b = vocab->bytes(id);
            if (b.size() > best && c.example.compare(at, b.size(), b) == 0) {
              pick = id;
              best = b.size();
            }
          }
          if (!pick) break;  // the example is done
          at += best;
        } else {
          std::vector<Token> structural;
          if (rng() % 2 == 0) {
            for (Token id : ids)
              if (vocab->bytes(id).find_first_of("\"{}[],:") != std::string::npos)
                structural.push_back(id);
          }
          const std::vector<Token>& from = structural.empty() ? ids : structural;
          pick = from[rng() % from.size()];
        }
        ASSERT_TRUE(m.advance(vocab->bytes(*pick)));
      }
    }
  }
  EXPECT_GT(compared, 17u * 40u);
}

TEST(TokenMaskFast, EqualsThePlainWalkForGemma3) {
  check_tokenizer("gemma3");
}
TEST(TokenMaskFast, EqualsThePlainWalkForLlama3) {
  check_tokenizer("llama3");
}

}  // namespace
}  // namespace cellm::grammar
