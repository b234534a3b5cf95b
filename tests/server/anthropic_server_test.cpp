// POST /v1/messages over HTTP against FakeService: the message body, stop
// reasons (end_turn, max_tokens, stop_sequence), the named SSE events of a
// stream, a failure mid-stream, Anthropic's error shape, and x-api-key auth.
#include <string>

#include <gtest/gtest.h>

#include "server_harness.h"

namespace cellm::server::testing {
namespace {

using nlohmann::json;

json message_body(int max_tokens = 20) {
  return json{{"model", "fake-model"},
              {"max_tokens", max_tokens},
              {"messages", json::array({json{{"role", "user"}, {"content", "Hi"}}})}};
}

// The (event name, payload) pairs of an Anthropic SSE body; fails on a block
// that is not "event: NAME\ndata: JSON" with a matching "type".
std::vector<std::pair<std::string, json>> events_of(const std::string& sse) {
  std::vector<std::pair<std::string, json>> out;
  std::size_t pos = 0;
  while (pos < sse.size()) {
    const std::size_t end = sse.find("\n\n", pos);
    EXPECT_NE(end, std::string::npos) << sse;
    if (end == std::string::npos) break;
    const std::string block = sse.substr(pos, end - pos);
    const std::size_t nl = block.find('\n');
    EXPECT_EQ(block.rfind("event: ", 0), 0u) << block;
    json payload = json::parse(block.substr(nl + 7), nullptr, false);
    EXPECT_EQ(payload["type"], block.substr(7, nl - 7)) << block;
    out.emplace_back(block.substr(7, nl - 7), std::move(payload));
    pos = end + 2;
  }
  return out;
}

TEST(AnthropicServerTest, MessageWithUsageAndEndTurn) {
  TestServer ts;
  const JsonReply r = ts.post("/v1/messages", message_body());
  ASSERT_EQ(r.status, 200) << r.raw;
  EXPECT_EQ(r.body["type"], "message");
  EXPECT_EQ(r.body["role"], "assistant");
  EXPECT_EQ(r.body["id"].get<std::string>().rfind("msg_", 0), 0u);
  EXPECT_EQ(r.body["model"], "fake-model");
  ASSERT_EQ(r.body["content"].size(), 1u);
  EXPECT_EQ(r.body["content"][0]["type"], "text");
  EXPECT_EQ(r.body["content"][0]["text"], "Hello world! #0");
  EXPECT_EQ(r.body["stop_reason"], "end_turn");
  EXPECT_TRUE(r.body["stop_sequence"].is_null());
  // FakeService tokenizes bytes: the rendered chat is the prompt.
  EXPECT_EQ(r.body["usage"]["input_tokens"], std::string("user: Hi\nassistant: ").size());
  // The text's tokens (one a byte) and the end-of-sequence token.
  EXPECT_EQ(r.body["usage"]["output_tokens"], std::string("Hello world! #0").size() + 1);
}

TEST(AnthropicServerTest, SystemPromptStopSequencesAndMaxTokens) {
  TestServer ts;
  json body = message_body();
  body["system"] = "S";
  body["stop_sequences"] = json::array({"zzz", " wor"});
  JsonReply r = ts.post("/v1/messages", body);
  ASSERT_EQ(r.status, 200) << r.raw;
  EXPECT_EQ(r.body["content"][0]["text"], "Hello");
  EXPECT_EQ(r.body["stop_reason"], "stop_sequence");
  EXPECT_EQ(r.body["stop_sequence"], " wor");
  EXPECT_EQ(r.body["usage"]["input_tokens"],
            std::string("system: S\nuser: Hi\nassistant: ").size());

  r = ts.post("/v1/messages", message_body(3));
  ASSERT_EQ(r.status, 200) << r.raw;
  EXPECT_EQ(r.body["content"][0]["text"], "Hel");
  EXPECT_EQ(r.body["stop_reason"], "max_tokens");
  EXPECT_EQ(r.body["usage"]["output_tokens"], 3);
}

TEST(AnthropicServerTest, StreamHasAnthropicsEventsAndTheSameText) {
  TestServer ts;
  json body = message_body();
  body["stream"] = true;
  body["stop_sequences"] = json::array({"#"});
  RawHttp h(ts.port());
  ASSERT_TRUE(h.connected());
  h.post("/v1/messages", body.dump());
  h.read_all();
  EXPECT_EQ(h.status(), 200);
  EXPECT_NE(h.headers().find("text/event-stream"), std::string::npos);
  const auto ev = events_of(h.body());
  ASSERT_GE(ev.size(), 7u) << h.body();
  EXPECT_EQ(ev[0].first, "message_start");
  EXPECT_TRUE(ev[0].second["message"]["content"].empty());
  EXPECT_EQ(ev[0].second["message"]["usage"]["input_tokens"],
            std::string("user: Hi\nassistant: ").size());
  EXPECT_EQ(ev[1].first, "ping");
  EXPECT_EQ(ev[2].first, "content_block_start");
  std::string text;
  std::size_t i = 3;
  for (; i < ev.size() && ev[i].first == "content_block_delta"; ++i) {
    EXPECT_EQ(ev[i].second["delta"]["type"], "text_delta");
    text += ev[i].second["delta"]["text"].get<std::string>();
  }
  EXPECT_EQ(text, "Hello world! ");
  ASSERT_EQ(ev.size(), i + 3) << h.body();
  EXPECT_EQ(ev[i].first, "content_block_stop");
  EXPECT_EQ(ev[i + 1].first, "message_delta");
  EXPECT_EQ(ev[i + 1].second["delta"]["stop_reason"], "stop_sequence");
  EXPECT_EQ(ev[i + 1].second["delta"]["stop_sequence"], "#");
  EXPECT_EQ(ev[i + 1].second["usage"]["output_tokens"], std::string("Hello world! #").size());
  EXPECT_EQ(ev[i + 2].first, "message_stop");
}

TEST(AnthropicServerTest, FailureMidStreamIsAnErrorEvent) {
  FakeService::Knobs k;
  k.fail_after = 4;
  TestServer ts({}, k);
  json body = message_body();
  body["stream"] = true;
  RawHttp h(ts.port());
  h.post("/v1/messages", body.dump());
  h.read_all();
  const auto ev = events_of(h.body());
  ASSERT_FALSE(ev.empty());
  EXPECT_EQ(ev.back().first, "error");
  EXPECT_EQ(ev.back().second["error"]["type"], "api_error");
}

TEST(AnthropicServerTest, RefusalsTakeAnthropicsErrorShape) {
  TestServer ts;
  json no_max = message_body();
  no_max.erase("max_tokens");
  JsonReply r = ts.post("/v1/messages", no_max);
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(r.body["type"], "error");
  EXPECT_EQ(r.body["error"]["type"], "invalid_request_error");
  EXPECT_NE(r.body["error"]["message"].get<std::string>().find("max_tokens"), std::string::npos);

  json image = message_body();
  image["messages"][0]["content"] = json::array({json{{"type", "image"}, {"source", {}}}});
  r = ts.post("/v1/messages", image);
  EXPECT_EQ(r.status, 400) << r.raw;
  EXPECT_EQ(r.body["error"]["type"], "invalid_request_error");

  // Checked by the chat path after translation: too long for the context.
  r = ts.post("/v1/messages", message_body(1000));
  EXPECT_EQ(r.status, 400) << r.raw;
  EXPECT_EQ(r.body["error"]["type"], "invalid_request_error");
  EXPECT_NE(r.body["error"]["message"].get<std::string>().find("max_tokens"), std::string::npos);

  json other_model = message_body();
  other_model["model"] = "claude-x";
  r = ts.post("/v1/messages", other_model);
  EXPECT_EQ(r.status, 404) << r.raw;
  EXPECT_EQ(r.body["error"]["type"], "not_found_error");
}

TEST(AnthropicServerTest, AnOversizedBodyIsRefusedInAnthropicsShape) {
  ServerOptions o;
  o.body_limit = 256;
  TestServer ts(o);
  json body = message_body();
  body["messages"][0]["content"] = std::string(1000, 'x');
  const JsonReply r = ts.post("/v1/messages", body);
  EXPECT_EQ(r.status, 413) << r.raw;
  EXPECT_EQ(r.body["type"], "error") << r.raw;
  EXPECT_EQ(r.body["error"]["type"], "request_too_large") << r.raw;
  EXPECT_NE(r.body["error"]["message"].get<std::string>().find("256"), std::string::npos);
}

TEST(AnthropicServerTest, XApiKeyIsAcceptedAndRefusalsAreAnthropicShaped) {
  ServerOptions o;
  o.api_keys = {"secret"};
  TestServer ts(o);
  auto c = ts.client();
  auto res = c.Post("/v1/messages", message_body().dump(), "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 401);
  json body = json::parse(res->body, nullptr, false);
  EXPECT_EQ(body["type"], "error");
  EXPECT_EQ(body["error"]["type"], "authentication_error");
  EXPECT_NE(body["error"]["message"].get<std::string>().find("x-api-key"), std::string::npos);

  res = c.Post("/v1/messages", {{"x-api-key", "wrong"}}, message_body().dump(), "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 401);
  res =
      c.Post("/v1/messages", {{"x-api-key", "secret"}}, message_body().dump(), "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200) << res->body;
  // The bearer form works here too, and x-api-key on the OpenAI routes.
  res = c.Post("/v1/messages", {{"Authorization", "Bearer secret"}}, message_body().dump(),
               "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200) << res->body;
  auto models = c.Get("/v1/models", {{"x-api-key", "secret"}});
  ASSERT_TRUE(models);
  EXPECT_EQ(models->status, 200);
}

}  // namespace
}  // namespace cellm::server::testing
