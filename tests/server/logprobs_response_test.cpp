// The logprobs parts of response bodies (openai_response.h): OpenAI's
// completions and chat shapes, -inf shown as -9999, the chosen token added
// to a completions top list, bytes as the token's UTF-8, an echoed prompt's
// unscored first token as nulls; and the request side of echo (completions
// only, max_tokens 0 only with it).
#include <cmath>
#include <limits>
#include <vector>

#include <gtest/gtest.h>

#include "server/openai_request.h"
#include "server/openai_response.h"

namespace cellm::server {
namespace {

std::vector<TokenLogprobsText> entries() {
  TokenLogprobsText a;
  a.token = " h\xC3\xA9";  // " hé": 4 bytes, 3 code points
  a.bytes = a.token;
  a.logprob = -0.25f;
  a.top = {{a.token, a.bytes, -0.25f}, {" x", " x", -2.0f}};
  a.text_offset = 0;
  TokenLogprobsText b;
  b.token = "!";
  b.bytes = "!";
  b.logprob = -3.0f;  // not among its top entries
  // A token holding the first byte of "é" only: shown as U+FFFD, its byte kept.
  b.top = {{".", ".", -0.5f}, {"\xEF\xBF\xBD", "\xC3", -std::numeric_limits<float>::infinity()}};
  b.text_offset = 3;
  return {a, b};
}

TEST(LogprobsResponseTest, AbsentIsNull) {
  EXPECT_TRUE(logprobs_json(RequestKind::kChat, std::nullopt).is_null());
  EXPECT_TRUE(logprobs_json(RequestKind::kCompletion, std::nullopt).is_null());
  const nlohmann::json empty = logprobs_json(RequestKind::kChat, std::vector<TokenLogprobsText>{});
  ASSERT_TRUE(empty.contains("content"));
  EXPECT_TRUE(empty["content"].empty());
}

TEST(LogprobsResponseTest, ChatShape) {
  const nlohmann::json j = logprobs_json(RequestKind::kChat, entries());
  ASSERT_EQ(j["content"].size(), 2u);
  EXPECT_TRUE(j.contains("refusal") && j["refusal"].is_null());
  const nlohmann::json& first = j["content"][0];
  EXPECT_EQ(first["token"], " h\xC3\xA9");
  EXPECT_DOUBLE_EQ(first["logprob"].get<double>(), -0.25);
  EXPECT_EQ(first["bytes"], (std::vector<int>{0x20, 0x68, 0xC3, 0xA9}));
  ASSERT_EQ(first["top_logprobs"].size(), 2u);
  EXPECT_EQ(first["top_logprobs"][1]["token"], " x");
  EXPECT_EQ(first["top_logprobs"][1]["bytes"], (std::vector<int>{0x20, 0x78}));
  // -inf is not JSON: OpenAI's floor instead. A partial character's byte.
  const nlohmann::json& partial = j["content"][1]["top_logprobs"][1];
  EXPECT_DOUBLE_EQ(partial["logprob"].get<double>(), -9999.0);
  EXPECT_EQ(partial["token"], "\xEF\xBF\xBD");
  EXPECT_EQ(partial["bytes"], (std::vector<int>{0xC3}));
}

TEST(LogprobsResponseTest, CompletionsShape) {
  const nlohmann::json j = logprobs_json(RequestKind::kCompletion, entries());
  EXPECT_EQ(j["tokens"], (std::vector<std::string>{" h\xC3\xA9", "!"}));
  EXPECT_EQ(j["token_logprobs"], (std::vector<double>{-0.25, -3.0}));
  EXPECT_EQ(j["text_offset"], (std::vector<int>{0, 3}));
  ASSERT_EQ(j["top_logprobs"].size(), 2u);
  // The chosen token is part of its top list already: two keys.
  EXPECT_EQ(j["top_logprobs"][0].size(), 2u);
  // It is not: added beside the two alternatives.
  const nlohmann::json& second = j["top_logprobs"][1];
  EXPECT_EQ(second.size(), 3u);
  EXPECT_DOUBLE_EQ(second["!"].get<double>(), -3.0);
  EXPECT_DOUBLE_EQ(second["."].get<double>(), -0.5);
  EXPECT_DOUBLE_EQ(second["\xEF\xBF\xBD"].get<double>(), -9999.0);
}

TEST(LogprobsResponseTest, BodiesAndChunksCarryThem) {
  Choice c;
  c.text = " h\xC3\xA9!";
  c.finish_reason = "stop";
  c.logprobs = entries();
  const ResponseIds ids{"x", 1, "m"};
  const nlohmann::json body = response_json(RequestKind::kChat, ids, {c}, Usage{});
  EXPECT_EQ(body["choices"][0]["logprobs"]["content"].size(), 2u);
  const nlohmann::json chunk = chunk_json(RequestKind::kCompletion, ids, c, false);
  EXPECT_EQ(chunk["choices"][0]["logprobs"]["tokens"].size(), 2u);
  c.logprobs.reset();
  EXPECT_TRUE(response_json(RequestKind::kCompletion, ids, {c}, Usage{})["choices"][0]["logprobs"]
                  .is_null());
}

TEST(LogprobsResponseTest, AnEchoedPromptsFirstTokenShowsNulls) {
  std::vector<TokenLogprobsText> list = entries();
  TokenLogprobsText head;
  head.token = "The";
  head.bytes = "The";
  head.logprob = -1.0f;  // ignored: unscored
  head.scored = false;
  head.text_offset = 0;
  for (TokenLogprobsText& t : list) t.text_offset += 3;
  list.insert(list.begin(), head);
  const nlohmann::json j = logprobs_json(RequestKind::kCompletion, list);
  EXPECT_EQ(j["tokens"], (std::vector<std::string>{"The", " h\xC3\xA9", "!"}));
  ASSERT_EQ(j["token_logprobs"].size(), 3u);
  EXPECT_TRUE(j["token_logprobs"][0].is_null());
  EXPECT_DOUBLE_EQ(j["token_logprobs"][1].get<double>(), -0.25);
  ASSERT_EQ(j["top_logprobs"].size(), 3u);
  EXPECT_TRUE(j["top_logprobs"][0].is_null());
  EXPECT_EQ(j["top_logprobs"][1].size(), 2u);
  EXPECT_EQ(j["text_offset"], (std::vector<int>{0, 3, 6}));
}

std::optional<GenerationRequest> parse(RequestKind kind, const std::string& body,
                                       RequestError* error) {
  return parse_request(kind, body, RequestLimits{}, error);
}

TEST(LogprobsResponseTest, EchoIsACompletionsFieldAndAllowsMaxTokensZero) {
  RequestError error;
  auto echoed = parse(RequestKind::kCompletion,
                      R"({"prompt": "hi", "echo": true, "max_tokens": 0, "logprobs": 2})", &error);
  ASSERT_TRUE(echoed) << error.status.to_string();
  EXPECT_TRUE(echoed->echo);
  EXPECT_EQ(echoed->max_tokens, 0);
  EXPECT_EQ(echoed->logprobs, 2);
  auto plain = parse(RequestKind::kCompletion, R"({"prompt": "hi", "echo": false})", &error);
  ASSERT_TRUE(plain);
  EXPECT_FALSE(plain->echo);

  // max_tokens 0 means the prompt alone, which only echo shows.
  EXPECT_FALSE(parse(RequestKind::kCompletion, R"({"prompt": "hi", "max_tokens": 0})", &error));
  EXPECT_EQ(error.param, "max_tokens");
  EXPECT_FALSE(
      parse(RequestKind::kCompletion, R"({"prompt": "hi", "echo": "yes"})", &error));
  EXPECT_EQ(error.param, "echo");
  // Chat has no echo (OpenAI's neither): refused, naming it.
  EXPECT_FALSE(parse(RequestKind::kChat,
                     R"({"messages": [{"role": "user", "content": "hi"}], "echo": true})",
                     &error));
  EXPECT_EQ(error.param, "echo");
}

}  // namespace
}  // namespace cellm::server
