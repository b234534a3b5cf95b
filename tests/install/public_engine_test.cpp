// cellm::Engine (include/cellm/engine.h), the embedders' API, on the real
// SmolLM2-135M-Instruct on the CPU: refusals of bad options, the tokenizer
// round trip, streaming text equal to whole decoding, the two chat-template
// entries agreeing, the generation config built from the model, and one
// request through the Runner. Only public headers are included, as an
// embedder would.
#include <cellm/engine.h>

#include <filesystem>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "support/testdata.h"

namespace cellm {
namespace {

std::filesystem::path smollm2() {
  return testing::source_dir() / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf";
}

class PublicEngineTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ASSERT_TRUE(std::filesystem::exists(smollm2()))
        << smollm2() << " is missing: run scripts/fetch-model smollm2";
    ASSERT_TRUE(set_log_level("warn").is_ok());
    EngineOptions options;
    options.model = smollm2();
    options.backend = "cpu";
    options.max_sessions = 2;
    options.max_session_tokens = 512;
    auto opened = Engine::open(options);
    ASSERT_TRUE(opened.ok()) << opened.status().to_string();
    engine_ = std::move(opened).value();
  }
  static void TearDownTestSuite() { engine_.reset(); }
  void SetUp() override { ASSERT_NE(engine_, nullptr) << "the engine did not open (see above)"; }

  static std::unique_ptr<Engine> engine_;
};
std::unique_ptr<Engine> PublicEngineTest::engine_;

TEST(PublicEngineOpenTest, RefusesAnEmptyOrMissingModelPath) {
  auto empty = Engine::open(EngineOptions{});
  ASSERT_FALSE(empty.ok());
  EXPECT_EQ(empty.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(empty.status().message().find("model"), std::string_view::npos);

  EngineOptions missing;
  missing.model = testing::source_dir() / "models" / "no-such-model.gguf";
  auto absent = Engine::open(missing);
  ASSERT_FALSE(absent.ok());
  EXPECT_EQ(absent.status().code(), StatusCode::kNotFound);
  EXPECT_NE(absent.status().message().find("no-such-model.gguf"), std::string_view::npos);
}

TEST(PublicEngineOpenTest, RefusesNegativeSizesAndUnknownBackends) {
  EngineOptions negative;
  negative.model = smollm2();
  negative.max_sessions = -1;
  auto refused = Engine::open(negative);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);

  EngineOptions backend;
  backend.model = smollm2();
  backend.backend = "tpu";
  auto unknown = Engine::open(backend);
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.status().message().find("tpu"), std::string_view::npos);
}

TEST(PublicEngineOpenTest, SetLogLevelRefusesUnknownNames) {
  Status bad = set_log_level("loud");
  EXPECT_EQ(bad.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.message().find("loud"), std::string_view::npos);
  EXPECT_TRUE(set_log_level("warn").is_ok());
}

TEST_F(PublicEngineTest, EncodeThenDecodeGivesTheTextBack) {
  const std::string text = "Streaming déjà vu: 42 tokens, naïve café ☕.";
  auto ids = engine_->encode(text, /*add_special=*/false);
  ASSERT_TRUE(ids.ok()) << ids.status().to_string();
  ASSERT_FALSE(ids->empty());
  for (Token t : *ids) EXPECT_LT(t, static_cast<Token>(engine_->vocab_size()));
  EXPECT_EQ(engine_->decode(*ids), text);
}

TEST_F(PublicEngineTest, TextStreamPiecesConcatenateToTheWholeDecode) {
  auto ids = engine_->encode("Multi-byte: 日本語 and emoji 🙂 split across tokens.", false);
  ASSERT_TRUE(ids.ok());
  TextStream stream = engine_->text_stream();
  std::string streamed;
  for (Token t : *ids) streamed += stream.push(t);
  streamed += stream.finish();
  EXPECT_EQ(streamed, engine_->decode(*ids));
  // An id outside every vocabulary is skipped, as decode skips it.
  TextStream other = engine_->text_stream();
  EXPECT_EQ(other.push(~Token{0}), "");
  EXPECT_EQ(engine_->decode(std::vector<Token>{~Token{0}}), "");
}

TEST_F(PublicEngineTest, ChatMessagesAndJsonRenderTheSamePrompt) {
  ASSERT_TRUE(engine_->has_chat_template());
  const std::vector<ChatMessage> messages = {{"system", "Be brief."}, {"user", "Hi \"there\""}};
  auto from_structs = engine_->render_chat(messages);
  ASSERT_TRUE(from_structs.ok()) << from_structs.status().to_string();
  auto from_json = engine_->render_chat_json(
      R"([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi \"there\""}])");
  ASSERT_TRUE(from_json.ok()) << from_json.status().to_string();
  EXPECT_EQ(*from_structs, *from_json);
  EXPECT_NE(from_structs->find("Hi \"there\""), std::string::npos);

  // Without the generation prompt the rendering is a strict prefix.
  auto closed = engine_->render_chat(messages, /*add_generation_prompt=*/false);
  ASSERT_TRUE(closed.ok());
  EXPECT_LT(closed->size(), from_structs->size());
  EXPECT_EQ(from_structs->substr(0, closed->size()), *closed);
}

TEST_F(PublicEngineTest, MalformedChatJsonIsRefusedNamingWhatWasWrong) {
  auto broken = engine_->render_chat_json("[{\"role\": ");
  ASSERT_FALSE(broken.ok());
  EXPECT_EQ(broken.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(broken.status().message().find("messages"), std::string_view::npos);

  auto object = engine_->render_chat_json(R"({"role": "user"})");
  ASSERT_FALSE(object.ok());
  EXPECT_NE(object.status().message().find("array"), std::string_view::npos);

  auto variables = engine_->render_chat_json(R"([{"role": "user", "content": "x"}])", true, "[]");
  ASSERT_FALSE(variables.ok());
  EXPECT_NE(variables.status().message().find("variables"), std::string_view::npos);
}

TEST_F(PublicEngineTest, GenerationConfigCarriesTheModelsStopTokensAndDefaults) {
  const GenConfig config = engine_->generation_config(7);
  EXPECT_EQ(config.max_new_tokens, 7);
  EXPECT_FALSE(engine_->stop_tokens().empty());
  EXPECT_EQ(config.stop_tokens, engine_->stop_tokens());
  const SamplingDefaults& defaults = engine_->sampling_defaults();
  EXPECT_EQ(config.sampling.temperature, defaults.temperature.value_or(SamplingParams{}.temperature));
  EXPECT_EQ(config.sampling.top_p, defaults.top_p.value_or(SamplingParams{}.top_p));
  EXPECT_EQ(config.sampling.top_k, defaults.top_k.value_or(SamplingParams{}.top_k));
}

TEST_F(PublicEngineTest, ARequestThroughTheRunnerStreamsTextAndEnds) {
  auto prompt = engine_->encode("The capital of France is");
  ASSERT_TRUE(prompt.ok());
  Request request;
  request.prompt = *prompt;
  request.config = engine_->generation_config(6);
  std::vector<Token> tokens;  // engine thread until on_done
  std::promise<RequestOutcome> done;
  RequestCallbacks callbacks;
  callbacks.on_update = [&tokens](std::int32_t, const GenerationUpdate& u) {
    tokens.insert(tokens.end(), u.tokens.begin(), u.tokens.end());
  };
  callbacks.on_done = [&done](const RequestOutcome& o) { done.set_value(o); };
  auto handle = engine_->runner().submit(std::move(request), std::move(callbacks));
  ASSERT_TRUE(handle.ok()) << handle.status().to_string();
  const RequestOutcome outcome = done.get_future().get();
  ASSERT_EQ(outcome.finish_reasons.size(), 1u);
  EXPECT_TRUE(outcome.finish_reasons[0] == FinishReason::kNewTokenLimit ||
              outcome.finish_reasons[0] == FinishReason::kStopToken)
      << finish_reason_name(outcome.finish_reasons[0]);
  ASSERT_FALSE(tokens.empty());
  EXPECT_LE(tokens.size(), 6u);
  EXPECT_EQ(outcome.usage.completion_tokens, static_cast<std::int64_t>(tokens.size()));
  EXPECT_EQ(outcome.usage.prompt_tokens, static_cast<std::int64_t>(prompt->size()));
  EXPECT_FALSE(engine_->decode(tokens).empty());
}

}  // namespace
}  // namespace cellm
