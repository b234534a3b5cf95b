// The tokenizers the real GGUF files carry (scripts/fetch-model) against the
// Hugging Face tokenizer.json of the same vocabulary: Gemma 3's GGUF vocab
// must encode and decode every golden text exactly as tokenizer.json does
// (and so as Hugging Face does). SmolLM2's GGUF vocab must round-trip text.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "app/model_text.h"
#include "format/gguf.h"
#include "support/testdata.h"
#include "text/tokenizer.h"

namespace cellm::app {
namespace {

std::filesystem::path model_path(const char* file) {
  return cellm::testing::source_dir() / "models" / file;
}

Result<text::Tokenizer> gguf_tokenizer(const std::filesystem::path& path) {
  CELLM_ASSIGN_OR_RETURN(format::GgufFile gguf, format::GgufFile::open(path));
  CELLM_ASSIGN_OR_RETURN(text::GgufVocab vocab, gguf_vocab(gguf));
  return text::Tokenizer::from_gguf_vocab(vocab);
}

std::vector<std::string> golden_texts(const char* name) {
  std::vector<std::string> texts;
  std::ifstream in(cellm::testing::testdata_dir() / "tokenizer_goldens" /
                   (std::string(name) + ".encode.jsonl"));
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty()) texts.push_back(nlohmann::json::parse(line).at("text").get<std::string>());
  }
  return texts;
}

TEST(GgufTokenizerTest, Gemma3GgufVocabEncodesLikeItsTokenizerJson) {
  const auto path = model_path("gemma-3-270m-q4_k_m.gguf");
  ASSERT_TRUE(std::filesystem::exists(path))
      << path << " is missing: run scripts/fetch-model gemma3";
  auto from_gguf = gguf_tokenizer(path);
  ASSERT_TRUE(from_gguf.ok()) << from_gguf.status().to_string();
  auto from_json = text::Tokenizer::from_file(cellm::testing::testdata_dir() / "tokenizers" /
                                              "gemma3" / "tokenizer.json.gz");
  ASSERT_TRUE(from_json.ok()) << from_json.status().to_string();
  // tokenizer.json carries one added token past the model's 262,144 rows.
  EXPECT_EQ(from_gguf->vocab_size(), 262144);
  ASSERT_LE(from_gguf->vocab_size(), from_json->vocab_size());
  for (std::int32_t id = 0; id < from_gguf->vocab_size(); id += 997) {
    EXPECT_EQ(from_gguf->id_to_token(id), from_json->id_to_token(id)) << "id " << id;
  }
  const auto texts = golden_texts("gemma3");
  ASSERT_GT(texts.size(), 100u);
  int mismatches = 0;
  for (const std::string& t : texts) {
    for (bool special : {false, true}) {
      const auto a = from_gguf->encode(t, special);
      const auto b = from_json->encode(t, special);
      if (a != b && ++mismatches <= 5) {
        ADD_FAILURE() << "encode(" << nlohmann::json(t).dump() << ", special=" << special
                      << ") differs: GGUF " << nlohmann::json(a).dump() << " vs tokenizer.json "
                      << nlohmann::json(b).dump();
      }
      EXPECT_EQ(from_gguf->decode(b, false), from_json->decode(b, false));
    }
  }
  EXPECT_EQ(mismatches, 0);
}

TEST(GgufTokenizerTest, SmolLm2GgufVocabRoundTripsText) {
  const auto path = model_path("SmolLM2-135M-Instruct.Q4_1.gguf");
  ASSERT_TRUE(std::filesystem::exists(path))
      << path << " is missing: run scripts/fetch-model smollm2";
  auto tok = gguf_tokenizer(path);
  ASSERT_TRUE(tok.ok()) << tok.status().to_string();
  EXPECT_EQ(tok->vocab_size(), 49152);
  for (const std::string& t : golden_texts("llama3")) {
    const auto ids = tok->encode(t, false);
    EXPECT_EQ(tok->decode(ids, false), t) << nlohmann::json(t).dump();
  }
  const auto hello = tok->encode("Hello, world!", false);
  EXPECT_EQ(hello.size(), 4u) << nlohmann::json(hello).dump();
}

}  // namespace
}  // namespace cellm::app
