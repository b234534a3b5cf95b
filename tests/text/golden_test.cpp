// Golden agreement with Hugging Face `tokenizers` on every NAME.encode.jsonl in
// $CELLMDEV_TOKENIZER_GOLDENS (default testdata/tokenizer_goldens), encoded with
// testdata/tokenizers/NAME. Every mismatching line is reported.
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "support/testdata.h"
#include "text/tokenizer.h"

namespace cellm::text {
namespace {

std::filesystem::path goldens_dir() {
  if (auto p = cellm::testing::env_path("CELLMDEV_TOKENIZER_GOLDENS")) return *p;
  return cellm::testing::testdata_dir() / "tokenizer_goldens";
}

std::vector<std::string> golden_names() {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(goldens_dir(), ec)) {
    const std::string f = e.path().filename().string();
    const std::string suffix = ".encode.jsonl";
    if (f.size() > suffix.size() &&
        f.compare(f.size() - suffix.size(), suffix.size(), suffix) == 0) {
      names.push_back(f.substr(0, f.size() - suffix.size()));
    }
  }
  std::sort(names.begin(), names.end());
  return names;
}

class TokenizerGolden : public ::testing::TestWithParam<std::string> {};

TEST_P(TokenizerGolden, MatchesHuggingFace) {
  const std::string name = GetParam();
  auto tok = Tokenizer::from_dir(cellm::testing::testdata_dir() / "tokenizers" / name);
  ASSERT_TRUE(tok.ok()) << tok.status().to_string();
  std::ifstream in(goldens_dir() / (name + ".encode.jsonl"));
  ASSERT_TRUE(in) << "cannot open golden file for " << name;
  std::string line;
  int line_no = 0, failures = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (line.empty()) continue;
    const auto j = nlohmann::json::parse(line);
    const std::string text = j["text"];
    const auto ids = j["ids"].get<std::vector<std::int32_t>>();
    const auto ids_special = j["ids_special"].get<std::vector<std::int32_t>>();
    const std::string decoded = j["decoded"];
    const auto got = tok->encode(text, false);
    const auto got_special = tok->encode(text, true);
    const std::string got_decoded = tok->decode(ids, false);
    const bool ok = got == ids && got_special == ids_special && got_decoded == decoded;
    if (!ok) {
      ++failures;
      ADD_FAILURE()
          << name << " line " << line_no << " text=" << nlohmann::json(text).dump()
          << "\n  ids:      expected " << nlohmann::json(ids).dump() << "\n            got      "
          << nlohmann::json(got).dump() << "\n  special:  "
          << (got_special == ids_special ? "ok" : "MISMATCH " + nlohmann::json(got_special).dump())
          << "\n  decoded:  "
          << (got_decoded == decoded ? "ok" : "MISMATCH " + nlohmann::json(got_decoded).dump());
    }
  }
  EXPECT_GT(line_no, 0) << "golden file for " << name << " is empty";
  EXPECT_EQ(failures, 0) << failures << " of " << line_no << " lines differ for " << name;
}

INSTANTIATE_TEST_SUITE_P(Goldens, TokenizerGolden, ::testing::ValuesIn(golden_names()),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace cellm::text
