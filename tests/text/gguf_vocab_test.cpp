// The GGUF tokenizer paths against the Hugging Face goldens: each fixture's
// tokenizer.json is turned into the arrays a GGUF file would carry (tokens,
// merges or scores, token types) and encoded through from_gguf_vocab.
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <zlib.h>

#include "support/testdata.h"
#include "text/gguf_vocab.h"
#include "text/tokenizer.h"

namespace cellm::text {
namespace {

using nlohmann::json;

json load_tokenizer_json(const std::string& name) {
  const auto path = cellm::testing::testdata_dir() / "tokenizers" / name / "tokenizer.json.gz";
  gzFile f = gzopen(path.string().c_str(), "rb");
  EXPECT_NE(f, nullptr) << path;
  if (f == nullptr) return json();
  std::string data;
  char buf[1 << 16];
  int n;
  while ((n = gzread(f, buf, sizeof(buf))) > 0) data.append(buf, static_cast<std::size_t>(n));
  gzclose(f);
  return json::parse(data);
}

// tokens, types and (gpt2) merges or (llama) scores in GGUF form.
GgufVocab to_gguf(const json& tj, const std::string& model) {
  GgufVocab v;
  v.model = model;
  const json& vocab = tj["model"]["vocab"];
  std::size_t n = 0;
  for (auto it = vocab.begin(); it != vocab.end(); ++it)
    n = std::max(n, it.value().get<std::size_t>() + 1);
  for (const json& a : tj["added_tokens"]) n = std::max(n, a["id"].get<std::size_t>() + 1);
  v.tokens.resize(n);
  v.token_types.assign(n, static_cast<std::int32_t>(GgufTokenType::kNormal));
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    const auto id = it.value().get<std::size_t>();
    v.tokens[id] = it.key();
    const std::string& t = it.key();
    if (t.size() == 6 && t.rfind("<0x", 0) == 0 && t[5] == '>') {
      v.token_types[id] = static_cast<std::int32_t>(GgufTokenType::kByte);
    }
  }
  for (const json& a : tj["added_tokens"]) {
    const auto id = a["id"].get<std::size_t>();
    v.tokens[id] = a["content"];
    v.token_types[id] = static_cast<std::int32_t>(
        a["special"].get<bool>() ? GgufTokenType::kControl : GgufTokenType::kUserDefined);
  }
  std::vector<std::pair<std::string, std::string>> merges;
  for (const json& m : tj["model"]["merges"]) {
    if (m.is_string()) {
      const std::string s = m;
      const auto sp = s.find(' ');
      merges.emplace_back(s.substr(0, sp), s.substr(sp + 1));
    } else {
      merges.emplace_back(m[0].get<std::string>(), m[1].get<std::string>());
    }
  }
  if (model == "gpt2") {
    for (const auto& [a, b] : merges) v.merges.push_back(a + " " + b);
    return v;
  }
  // SentencePiece scores: a piece made by an earlier merge scores higher.
  std::map<std::string, std::size_t> first_rank;
  for (std::size_t r = 0; r < merges.size(); ++r)
    first_rank.emplace(merges[r].first + merges[r].second, r);
  v.scores.assign(n, -1e9f);
  for (std::size_t id = 0; id < n; ++id) {
    auto it = first_rank.find(v.tokens[id]);
    if (it != first_rank.end()) v.scores[id] = -static_cast<float>(it->second);
  }
  return v;
}

struct Case {
  std::string name;
  std::string model;
  std::string pre;
  bool add_bos;
  bool add_space_prefix;
  std::int32_t bos;
};

class GgufGolden : public ::testing::TestWithParam<Case> {};

TEST_P(GgufGolden, MatchesHuggingFace) {
  const Case& c = GetParam();
  GgufVocab v = to_gguf(load_tokenizer_json(c.name), c.model);
  v.pre = c.pre;
  v.add_bos = c.add_bos;
  v.add_space_prefix = c.add_space_prefix;
  v.bos = c.bos;
  auto tok = Tokenizer::from_gguf_vocab(v);
  ASSERT_TRUE(tok.ok()) << tok.status().to_string();
  std::ifstream in(cellm::testing::testdata_dir() / "tokenizer_goldens" /
                   (c.name + ".encode.jsonl"));
  ASSERT_TRUE(in);
  std::string line;
  int line_no = 0, failures = 0;
  while (std::getline(in, line)) {
    ++line_no;
    const auto j = json::parse(line);
    const std::string text = j["text"];
    const auto ids = j["ids"].get<std::vector<std::int32_t>>();
    const auto got = tok->encode(text, false);
    const auto got_special = tok->encode(text, true);
    const std::string decoded = tok->decode(ids, false);
    if (got != ids || got_special != j["ids_special"].get<std::vector<std::int32_t>>() ||
        decoded != j["decoded"].get<std::string>()) {
      ++failures;
      ADD_FAILURE() << c.name << " line " << line_no << " text=" << json(text).dump()
                    << "\n  expected " << json(ids).dump() << "\n  got      " << json(got).dump()
                    << "\n  decoded " << json(decoded).dump();
    }
  }
  EXPECT_EQ(failures, 0) << failures << " of " << line_no << " lines differ";
}

INSTANTIATE_TEST_SUITE_P(Fixtures, GgufGolden,
                         ::testing::Values(Case{"llama3", "gpt2", "llama-bpe", false, false,
                                                128000},
                                           Case{"qwen3", "gpt2", "qwen2", false, false, 151643},
                                           Case{"llama2", "llama", "", true, true, 1},
                                           Case{"gemma3", "llama", "", true, false, 2}),
                         [](const auto& info) { return info.param.name; });

TEST(GgufVocab, RejectsMalformedInput) {
  GgufVocab v;
  v.model = "gpt2";
  EXPECT_EQ(Tokenizer::from_gguf_vocab(v).status().code(),
            StatusCode::kInvalidArgument);  // no tokens
  v.tokens = {"a", "b", "ab"};
  v.merges = {"a b"};
  v.pre = "no-such-pre";
  EXPECT_EQ(Tokenizer::from_gguf_vocab(v).status().code(), StatusCode::kNotSupported);
  v.pre = "gpt2";
  v.merges = {"a c"};
  EXPECT_EQ(Tokenizer::from_gguf_vocab(v).status().code(), StatusCode::kInvalidArgument);
  v.merges = {"ab"};
  EXPECT_EQ(Tokenizer::from_gguf_vocab(v).status().code(), StatusCode::kInvalidArgument);
  v.merges = {"a b"};
  v.token_types = {1, 1};
  EXPECT_EQ(Tokenizer::from_gguf_vocab(v).status().code(), StatusCode::kInvalidArgument);
  v.token_types = {1, 1, 9};
  EXPECT_EQ(Tokenizer::from_gguf_vocab(v).status().code(), StatusCode::kInvalidArgument);
  v.token_types = {};
  v.bos = 7;
  EXPECT_EQ(Tokenizer::from_gguf_vocab(v).status().code(), StatusCode::kInvalidArgument);
  v.bos.reset();
  v.model = "bert";
  EXPECT_EQ(Tokenizer::from_gguf_vocab(v).status().code(), StatusCode::kNotSupported);
  v.model = "llama";
  v.scores = {0.0f};
  EXPECT_EQ(Tokenizer::from_gguf_vocab(v).status().code(), StatusCode::kInvalidArgument);
  v.model = "gpt2";
  auto ok = Tokenizer::from_gguf_vocab(v);
  ASSERT_TRUE(ok.ok()) << ok.status().to_string();
  EXPECT_EQ(ok->encode("ab", false), std::vector<std::int32_t>({2}));
}

TEST(GgufVocab, SentencePieceMergesByScore) {
  // "abc" can merge as (ab)c or a(bc); the higher-scoring pair wins first.
  GgufVocab v;
  v.model = "llama";
  v.add_space_prefix = false;
  v.tokens = {"<unk>", "a", "b", "c", "ab", "bc", "abc", "<0x41>"};
  v.token_types = {2, 1, 1, 1, 1, 1, 1, 6};
  v.scores = {0, 0, 0, 0, -5, -1, -2, 0};
  auto tok = Tokenizer::from_gguf_vocab(v);
  ASSERT_TRUE(tok.ok()) << tok.status().to_string();
  // bc (-1) outranks ab (-5), then a|bc makes abc (-2).
  EXPECT_EQ(tok->encode("abc", false), std::vector<std::int32_t>({6}));
  EXPECT_EQ(tok->encode("ab", false), std::vector<std::int32_t>({4}));
  EXPECT_EQ(tok->encode("cab", false), std::vector<std::int32_t>({3, 4}));
  // Unknown characters: byte fallback where a <0xXX> token exists, else <unk>.
  EXPECT_EQ(tok->encode("A", false), std::vector<std::int32_t>({7}));
  EXPECT_EQ(tok->encode("zz", false), std::vector<std::int32_t>({0}));  // fused unknowns
  EXPECT_EQ(tok->decode(std::vector<std::int32_t>{7, 4}, false), "Aab");
}

}  // namespace
}  // namespace cellm::text
