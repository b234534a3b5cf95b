// Every line of tokenizer_goldens/NAME.chat.jsonl rendered through the chat
// template of tokenizers/NAME/tokenizer_config.json must equal what
// transformers' apply_chat_template produced (or raise the same message).
// New NAME.chat.jsonl files are picked up with no code change.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "chat/chat_template.h"
#include "support/testdata.h"

namespace cellm::chat {
namespace {

using Json = nlohmann::ordered_json;
namespace fs = std::filesystem;

fs::path goldens_dir() {
  if (auto p = testing::env_path("CELLMDEV_TOKENIZER_GOLDENS")) return *p;
  return testing::testdata_dir() / "tokenizer_goldens";
}

// tokenizer_config.json holds the template as a string, or as a list of
// {name, template} where "default" is the chat template.
std::string template_of(const Json& config) {
  const Json& t = config.at("chat_template");
  if (t.is_string()) return t.get<std::string>();
  for (const Json& entry : t) {
    if (entry.at("name") == "default") return entry.at("template").get<std::string>();
  }
  return {};
}

TEST(ChatGoldenTest, EveryGoldenLineMatchesTransformers) {
  const fs::path dir = goldens_dir();
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (name.size() > 11 && name.substr(name.size() - 11) == ".chat.jsonl")
      files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());
  ASSERT_FALSE(files.empty()) << "no *.chat.jsonl under " << dir;
  std::size_t lines_checked = 0;
  for (const fs::path& file : files) {
    std::string name = file.filename().string();
    name.resize(name.size() - 11);
    SCOPED_TRACE(file.string());
    const fs::path config_path =
        testing::testdata_dir() / "tokenizers" / name / "tokenizer_config.json";
    std::ifstream config_in(config_path);
    ASSERT_TRUE(config_in) << "missing " << config_path;
    const Json config = Json::parse(config_in);
    auto tmpl = ChatTemplate::parse(template_of(config));
    ASSERT_TRUE(tmpl.ok()) << tmpl.status().to_string();
    std::ifstream in(file);
    std::string line;
    int line_no = 0;
    while (std::getline(in, line)) {
      ++line_no;
      if (line.empty()) continue;
      SCOPED_TRACE("line " + std::to_string(line_no));
      const Json g = Json::parse(line);
      auto out = apply_chat_template(
          *tmpl, g.at("messages"), g.at("add_generation_prompt").get<bool>(),
          g.value("extra", Json::object()), g.value("special_tokens", Json::object()));
      const Json& rendered = g.at("rendered");
      if (rendered.is_object() && rendered.contains("error")) {
        ASSERT_FALSE(out.ok()) << "expected the template to raise: " << rendered.dump();
        EXPECT_EQ(out.status().message(), rendered.at("error").get<std::string>());
      } else {
        ASSERT_TRUE(out.ok()) << out.status().to_string();
        EXPECT_EQ(*out, rendered.get<std::string>());
      }
      ++lines_checked;
    }
  }
  EXPECT_GT(lines_checked, 0u);
}

}  // namespace
}  // namespace cellm::chat
