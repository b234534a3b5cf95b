// The logprobs parts of response bodies (openai_response.h): OpenAI's
// completions and chat shapes, -inf shown as -9999, the chosen token added
// to a completions top list, bytes as the token's UTF-8.
#include <cmath>
#include <limits>
#include <vector>

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace cellm::server
