// Conformance against the real implementations: conformance.jsonl holds
// hand-written templates with the output (or error) of Jinja2 configured as
// transformers configures it; conversations.jsonl holds whole conversations
// (tools, tool calls, reasoning, multimodal content, macros, role errors)
// rendered by transformers' own render_jinja_template. Both files are written
// by make_reference.py, never from cellm's output.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "chat/chat_template.h"
#include "support/testdata.h"

namespace cellm::chat {
namespace {

using Json = nlohmann::ordered_json;
using ::testing::HasSubstr;

std::vector<Json> read_jsonl(const std::string& name) {
  std::ifstream in(std::string(CELLMDEV_CHAT_TEST_DIR) + "/" + name);
  EXPECT_TRUE(in) << "missing " << name;
  std::vector<Json> rows;
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty()) rows.push_back(Json::parse(line));
  }
  return rows;
}

TEST(ChatConformanceTest, ConstructsMatchJinja) {
  const std::vector<Json> rows = read_jsonl("conformance.jsonl");
  ASSERT_GT(rows.size(), 50u);
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const Json& row = rows[i];
    const std::string source = row.at("template").get<std::string>();
    SCOPED_TRACE("case " + std::to_string(i + 1) + ": " + source);
    auto tmpl = ChatTemplate::parse(source);
    if (!tmpl.ok()) {
      ADD_FAILURE() << tmpl.status().to_string();
      continue;
    }
    auto out = tmpl->render(row.at("context"));
    if (row.contains("out")) {
      if (!out.ok()) {
        ADD_FAILURE() << out.status().to_string();
      } else {
        EXPECT_EQ(*out, row.at("out").get<std::string>());
      }
      continue;
    }
    if (out.ok()) {
      ADD_FAILURE() << "Jinja raised " << row.at("error_type") << ": " << row.at("error")
                    << " but we rendered '" << *out << "'";
      continue;
    }
    const std::string type = row.at("error_type").get<std::string>();
    const std::string jinja_message = row.at("error").get<std::string>();
    if (type == "TemplateError") {
      EXPECT_EQ(out.status().message(), jinja_message);  // raise_exception: exactly the message
    } else if (type == "UndefinedError") {
      EXPECT_THAT(std::string(out.status().message()), HasSubstr(jinja_message));
      EXPECT_THAT(std::string(out.status().message()), HasSubstr("chat template 1:"));
    } else {
      EXPECT_THAT(std::string(out.status().message()), HasSubstr("chat template 1:"));
    }
  }
}

TEST(ChatConformanceTest, ConversationsMatchTransformers) {
  const std::vector<Json> rows = read_jsonl("conversations.jsonl");
  ASSERT_GE(rows.size(), 8u);
  std::map<std::string, std::string> loaded;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const Json& row = rows[i];
    SCOPED_TRACE("conversation " + std::to_string(i + 1));
    std::string source;
    if (row.contains("template")) {
      source = row.at("template").get<std::string>();
    } else {
      const std::string name = row.at("template_name").get<std::string>();
      if (!loaded.count(name)) {  // gemma3's config is 1 MB: read each once
        std::ifstream in(testing::testdata_dir() / "tokenizers" / name / "tokenizer_config.json");
        ASSERT_TRUE(in) << name;
        loaded[name] = Json::parse(in).at("chat_template").get<std::string>();
      }
      source = loaded[name];
    }
    auto tmpl = ChatTemplate::parse(source);
    if (!tmpl.ok()) {
      ADD_FAILURE() << tmpl.status().to_string();
      continue;
    }
    auto out =
        apply_chat_template(*tmpl, row.at("messages"), row.at("add_generation_prompt").get<bool>(),
                            row.at("extra"), row.at("special_tokens"));
    const Json& rendered = row.at("rendered");
    if (rendered.is_string()) {
      if (!out.ok()) {
        ADD_FAILURE() << out.status().to_string();
      } else {
        EXPECT_EQ(*out, rendered.get<std::string>());
      }
    } else if (out.ok()) {
      ADD_FAILURE() << "transformers raised " << rendered.dump() << " but we rendered " << *out;
    } else {
      EXPECT_THAT(std::string(out.status().message()),
                  HasSubstr(rendered.at("error").get<std::string>()));
    }
  }
}

}  // namespace
}  // namespace cellm::chat
