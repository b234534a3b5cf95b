// Constrained decoding through the whole engine on the real SmolLM2-135M
// (CPU): a greedy generation under a JSON schema parses as JSON, matches the
// schema (checked here field by field from the schema's definition) and ends
// with a stop once the grammar is complete; json_object mode gives an
// object; every generated token's bytes are allowed by a fresh matcher.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "app/engine.h"
#include "grammar/json_schema.h"
#include "grammar/matcher.h"
#include "grammar/token_grammar.h"
#include "grammar/vocab_from_tokenizer.h"
#include "support/testdata.h"

namespace cellm::app {
namespace {

using json = nlohmann::ordered_json;

std::filesystem::path smollm2() {
  return cellm::testing::source_dir() / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf";
}

struct Outcome {
  std::vector<Token> tokens;
  FinishReason reason = FinishReason::kFailed;
  std::string error;
};

class StructuredE2eTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!std::filesystem::exists(smollm2())) return;
    EngineOptions options;
    options.model = smollm2();
    options.backend = "cpu";
    options.max_sessions = 4;
    options.max_session_tokens = 512;
    auto loaded = Engine::load(options);
    ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
    engine_ = std::move(loaded).value().release();
    vocab_ = new std::shared_ptr<const grammar::TokenVocabulary>(
        grammar::vocabulary_from_tokenizer(engine_->tokenizer(), engine_->spec().vocab_size));
  }
  static void TearDownTestSuite() {
    delete engine_;
    engine_ = nullptr;
    delete vocab_;
    vocab_ = nullptr;
  }
  void SetUp() override {
    ASSERT_TRUE(std::filesystem::exists(smollm2()))
        << smollm2() << " is missing: run scripts/fetch-model smollm2";
    ASSERT_NE(engine_, nullptr);
  }

  Outcome run(const std::string& user, std::shared_ptr<const grammar::Grammar> g, int max_tokens) {
    json messages = json::array();
    messages.push_back({{"role", "user"}, {"content", user}});
    auto text = engine_->render_chat(messages, true);
    EXPECT_TRUE(text.ok());
    auto prompt = engine_->encode(text.value_or(""), false);
    EXPECT_TRUE(prompt.ok());
    auto session = engine_->runner().open_session_async().get();
    EXPECT_TRUE(session.has_value());
    GenConfig config;
    config.max_new_tokens = max_tokens;
    config.stop_tokens = engine_->stop_tokens();
    config.constraint = grammar::TokenGrammar::create(std::move(g), *vocab_);
    auto outcome = std::make_shared<Outcome>();
    std::promise<void> done;
    session->generate_async(
        prompt.value_or(std::vector<Token>{}), config,
        [outcome](const GenerationUpdate& u) {
          outcome->tokens.insert(outcome->tokens.end(), u.tokens.begin(), u.tokens.end());
          if (u.finish_reason) {
            outcome->reason = *u.finish_reason;
            outcome->error = u.error_message;
          }
        },
        [&done] { done.set_value(); });
    done.get_future().wait();
    return *outcome;
  }

  // The generated text as the grammar saw it (token bytes).
  static std::string bytes_of(const std::vector<Token>& tokens) {
    std::string s;
    for (Token t : tokens) s += (*vocab_)->bytes(t);
    return s;
  }

  static Engine* engine_;
  static std::shared_ptr<const grammar::TokenVocabulary>* vocab_;
};
Engine* StructuredE2eTest::engine_ = nullptr;
std::shared_ptr<const grammar::TokenVocabulary>* StructuredE2eTest::vocab_ = nullptr;

TEST_F(StructuredE2eTest, GreedyGenerationMatchesTheSchema) {
  const json schema = json::parse(R"({"type":"object","properties":{
      "name":{"type":"string","maxLength":16},"age":{"type":"integer"},
      "color":{"enum":["red","green","blue"]},"pets":{"type":"array","items":{"type":"string",
      "maxLength":10},"maxItems":2}},"required":["name","age","color","pets"],
      "additionalProperties":false})");
  auto g = grammar::compile_json_schema(schema);
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  const Outcome out =
      run("Describe a person as JSON with name, age, favourite color and pets.", *g, 120);
  ASSERT_EQ(out.reason, FinishReason::kStopToken) << out.error << " after " << bytes_of(out.tokens);
  std::vector<Token> body = out.tokens;
  // The grammar ends the generation itself, or the model's EOS does right
  // after a complete value.
  if (!body.empty() && std::find(engine_->stop_tokens().begin(), engine_->stop_tokens().end(),
                                 body.back()) != engine_->stop_tokens().end()) {
    body.pop_back();
  }
  const std::string text = bytes_of(body);
  std::printf("generated under the schema: %s\n", text.c_str());
  EXPECT_TRUE(grammar::Matcher::matches(*g, text)) << text;
  const json v = json::parse(text, nullptr, false);
  ASSERT_FALSE(v.is_discarded()) << "not JSON: " << text;
  ASSERT_TRUE(v.is_object()) << text;
  EXPECT_EQ(v.size(), 4u) << text;
  ASSERT_TRUE(v.contains("name") && v["name"].is_string()) << text;
  EXPECT_LE(v["name"].get<std::string>().size(), 16u * 4u);
  ASSERT_TRUE(v.contains("age") && v["age"].is_number_integer()) << text;
  ASSERT_TRUE(v.contains("color") && v["color"].is_string()) << text;
  const std::string color = v["color"];
  EXPECT_TRUE(color == "red" || color == "green" || color == "blue") << text;
  ASSERT_TRUE(v.contains("pets") && v["pets"].is_array()) << text;
  EXPECT_LE(v["pets"].size(), 2u);
  for (const json& p : v["pets"]) EXPECT_TRUE(p.is_string()) << text;
  // What the engine delivered decodes to the same text.
  std::vector<std::int32_t> ids(body.begin(), body.end());
  EXPECT_EQ(engine_->tokenizer().decode(ids, true), text);
}

TEST_F(StructuredE2eTest, JsonObjectModeGivesAnObject) {
  auto g = grammar::compile_json_object();
  ASSERT_TRUE(g.ok());
  const Outcome out = run("Give me a JSON object with one key, city, set to Paris.", *g, 60);
  ASSERT_NE(out.reason, FinishReason::kFailed) << out.error;
  std::vector<Token> body = out.tokens;
  if (out.reason == FinishReason::kStopToken && !body.empty() &&
      std::find(engine_->stop_tokens().begin(), engine_->stop_tokens().end(), body.back()) !=
          engine_->stop_tokens().end()) {
    body.pop_back();
  }
  const std::string text = bytes_of(body);
  std::printf("generated as json_object: %s\n", text.c_str());
  // Every prefix the engine produced is a prefix the grammar accepts; a
  // finished one is a whole object.
  grammar::Matcher m(*g);
  ASSERT_TRUE(m.advance(text)) << text;
  if (out.reason == FinishReason::kStopToken) {
    const json v = json::parse(text, nullptr, false);
    ASSERT_FALSE(v.is_discarded()) << text;
    EXPECT_TRUE(v.is_object()) << text;
  }
}

}  // namespace
}  // namespace cellm::app
