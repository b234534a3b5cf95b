// app::probe_chat_template: the verdict `cellm chat` acts on before loading a
// model, from GGUF metadata (files built here) and from Hugging Face
// folders' template files.
#include "app/chat_probe.h"

#include <filesystem>
#include <fstream>
#include <string>
#include <unistd.h>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "format/test_writers.h"

namespace cellm::app {
namespace {

using cellm::testing::GgufBuilder;

constexpr const char* kTemplate =
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}";
constexpr const char* kBroken = "{% if messages %}never closed";

class ChatProbeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("cellm_chat_probe_test_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::filesystem::path gguf(const std::string& name, const std::string* chat_template) {
    GgufBuilder g;
    g.kv_str("general.architecture", "llama").kv_str("tokenizer.ggml.model", "gpt2");
    if (chat_template != nullptr) g.kv_str("tokenizer.chat_template", *chat_template);
    auto path = dir_ / name;
    cellm::testing::write_file(path, g.build());
    return path;
  }
  std::filesystem::path folder(const std::string& name) {
    auto path = dir_ / name;
    std::filesystem::create_directories(path);
    return path;
  }
  static void write(const std::filesystem::path& path, const std::string& text) {
    std::ofstream(path) << text;
  }

  std::filesystem::path dir_;
};

TEST_F(ChatProbeTest, GgufWithAUsableTemplate) {
  const std::string t = kTemplate;
  EXPECT_TRUE(probe_chat_template(gguf("ok.gguf", &t)).is_ok());
}

TEST_F(ChatProbeTest, GgufWithoutTemplateIsNotFoundAndNamed) {
  const Status s = probe_chat_template(gguf("plain.gguf", nullptr));
  EXPECT_EQ(s.code(), StatusCode::kNotFound) << s.to_string();
  EXPECT_NE(s.message().find("plain.gguf has no chat template"), std::string::npos)
      << s.to_string();
}

TEST_F(ChatProbeTest, GgufWithATemplateCellmCannotRun) {
  const std::string t = kBroken;
  const Status s = probe_chat_template(gguf("broken.gguf", &t));
  EXPECT_EQ(s.code(), StatusCode::kNotSupported) << s.to_string();
  EXPECT_NE(s.message().find("broken.gguf"), std::string::npos) << s.to_string();
}

TEST_F(ChatProbeTest, AFileThatIsNotGgufIsAReadError) {
  const auto path = dir_ / "notes.gguf";
  write(path, "this is not a model");
  const Status s = probe_chat_template(path);
  EXPECT_FALSE(s.is_ok());
  EXPECT_NE(s.code(), StatusCode::kNotFound);
  EXPECT_NE(s.code(), StatusCode::kNotSupported);
}

TEST_F(ChatProbeTest, HuggingFaceFolders) {
  const auto with_config = folder("config");
  write(with_config / "tokenizer_config.json", nlohmann::json{{"chat_template", kTemplate}}.dump());
  EXPECT_TRUE(probe_chat_template(with_config).is_ok());

  const auto with_jinja = folder("jinja");
  write(with_jinja / "tokenizer_config.json", "{}");
  write(with_jinja / "chat_template.jinja", kTemplate);
  EXPECT_TRUE(probe_chat_template(with_jinja).is_ok());

  const auto without = folder("base");
  write(without / "tokenizer_config.json", R"({"chat_template": null})");
  EXPECT_EQ(probe_chat_template(without).code(), StatusCode::kNotFound);
  EXPECT_EQ(probe_chat_template(folder("empty")).code(), StatusCode::kNotFound);

  const auto broken = folder("broken");
  write(broken / "chat_template.jinja", kBroken);
  EXPECT_EQ(probe_chat_template(broken).code(), StatusCode::kNotSupported);
}

}  // namespace
}  // namespace cellm::app
