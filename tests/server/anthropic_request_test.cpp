// The /v1/messages translation (anthropic_request.h): what each Anthropic
// field becomes in the chat body, that the result passes the chat parser,
// and that unknown fields, unsupported blocks and bad values are refused by
// name. Also the pure response shaping of anthropic_response.h.
#include "server/anthropic_request.h"

#include <string>

#include <gtest/gtest.h>

#include "server/anthropic_response.h"

namespace cellm::server {
namespace {

using nlohmann::json;
using ojson = nlohmann::ordered_json;

json base() {
  return json{{"model", "m"},
              {"max_tokens", 16},
              {"messages", json::array({json{{"role", "user"}, {"content", "Hi"}}})}};
}

AnthropicRequest parse_ok(const json& body) {
  RequestError error;
  std::optional<AnthropicRequest> r = parse_anthropic_request(body.dump(), &error);
  EXPECT_TRUE(r.has_value()) << error.param << ": " << error.status.to_string();
  return r.value_or(AnthropicRequest{});
}

RequestError parse_fail(const json& body) {
  RequestError error;
  std::optional<AnthropicRequest> r = parse_anthropic_request(body.dump(), &error);
  EXPECT_FALSE(r.has_value()) << body.dump();
  return error;
}

// The translated body must be one the chat parser accepts.
GenerationRequest through_chat(const AnthropicRequest& a) {
  RequestError error;
  std::optional<GenerationRequest> r =
      parse_request(RequestKind::kChat, a.chat.dump(), RequestLimits{}, &error);
  EXPECT_TRUE(r.has_value()) << error.param << ": " << error.status.to_string() << "\n"
                             << a.chat.dump();
  return r.value_or(GenerationRequest{});
}

TEST(AnthropicRequestTest, PlainFieldsMapToTheChatBody) {
  json body = base();
  body["system"] = "Be brief.";
  body["temperature"] = 0.5;
  body["top_p"] = 0.9;
  body["top_k"] = 7;
  body["stop_sequences"] = json::array({"END", "STOP"});
  body["metadata"] = json{{"user_id", "u1"}};
  body["thinking"] = json{{"type", "disabled"}};  // the neutral value
  const AnthropicRequest a = parse_ok(body);
  EXPECT_FALSE(a.stream);
  EXPECT_EQ(a.stop_sequences, (std::vector<std::string>{"END", "STOP"}));
  const GenerationRequest r = through_chat(a);
  EXPECT_EQ(r.model, "m");
  ASSERT_TRUE(r.max_tokens.has_value());
  EXPECT_EQ(*r.max_tokens, 16);
  EXPECT_FLOAT_EQ(r.temperature, 0.5f);
  EXPECT_FLOAT_EQ(r.top_p, 0.9f);
  EXPECT_EQ(r.top_k, 7);
  EXPECT_EQ(r.stop, a.stop_sequences);
  ASSERT_EQ(r.messages.size(), 2u);
  EXPECT_EQ(r.messages[0].role, "system");
  EXPECT_EQ(r.messages[0].content, "Be brief.");
  EXPECT_EQ(r.messages[1].role, "user");
  EXPECT_EQ(r.messages[1].content, "Hi");
  EXPECT_FALSE(r.stream);
}

TEST(AnthropicRequestTest, StreamingAsksForTheUsageChunk) {
  json body = base();
  body["stream"] = true;
  const AnthropicRequest a = parse_ok(body);
  EXPECT_TRUE(a.stream);
  const GenerationRequest r = through_chat(a);
  EXPECT_TRUE(r.stream);
  EXPECT_TRUE(r.include_usage);
}

TEST(AnthropicRequestTest, TextBlocksAndSystemBlocksAreJoined) {
  json body = base();
  body["system"] = json::array({json{{"type", "text"}, {"text", "A"}},
                                json{{"type", "text"}, {"text", "B"}, {"cache_control", {}}}});
  body["messages"] =
      json::array({json{{"role", "user"},
                        {"content", json::array({json{{"type", "text"}, {"text", "one "}},
                                                 json{{"type", "text"}, {"text", "two"}}})}},
                   json{{"role", "assistant"}, {"content", "ok"}},
                   json{{"role", "user"}, {"content", "three"}}});
  const GenerationRequest r = through_chat(parse_ok(body));
  ASSERT_EQ(r.messages.size(), 4u);
  EXPECT_EQ(r.messages[0].content, "AB");
  EXPECT_EQ(r.messages[1].content, "one two");
  EXPECT_EQ(r.messages[2].role, "assistant");
  EXPECT_EQ(r.messages[3].content, "three");
}

TEST(AnthropicRequestTest, ToolsToolUseAndToolResultsMapToTheChatForms) {
  json body = base();
  body["tools"] = json::array({json{
      {"name", "get_weather"},
      {"description", "Weather of a city"},
      {"input_schema", {{"type", "object"}, {"properties", {{"city", {{"type", "string"}}}}}}}}});
  body["tool_choice"] = json{{"type", "auto"}, {"disable_parallel_tool_use", false}};
  body["messages"] = json::array(
      {json{{"role", "user"}, {"content", "Weather in Paris?"}},
       json{{"role", "assistant"},
            {"content", json::array({json{{"type", "text"}, {"text", "Let me check."}},
                                     json{{"type", "tool_use"},
                                          {"id", "toolu_1"},
                                          {"name", "get_weather"},
                                          {"input", {{"city", "Paris"}}},
                                          // Echoed response fields: null or the direct caller.
                                          {"caller", {{"type", "direct"}}},
                                          {"toolset_name", nullptr}}})}},
       json{{"role", "user"},
            {"content",
             json::array(
                 {json{{"type", "tool_result"}, {"tool_use_id", "toolu_1"}, {"content", "18C"}},
                  json{{"type", "tool_result"},
                       {"tool_use_id", "toolu_1"},
                       {"is_error", true},
                       {"content", json::array({json{{"type", "text"}, {"text", "timeout"}}})}},
                  json{{"type", "text"}, {"text", "Thanks"}}})}}});
  const AnthropicRequest a = parse_ok(body);
  const ojson& tools = a.chat["tools"];
  ASSERT_EQ(tools.size(), 1u);
  EXPECT_EQ(tools[0]["type"], "function");
  EXPECT_EQ(tools[0]["function"]["name"], "get_weather");
  EXPECT_EQ(tools[0]["function"]["description"], "Weather of a city");
  EXPECT_EQ(tools[0]["function"]["parameters"]["properties"]["city"]["type"], "string");
  EXPECT_EQ(a.chat["tool_choice"], "auto");

  const GenerationRequest r = through_chat(a);
  ASSERT_EQ(r.messages.size(), 5u);
  EXPECT_EQ(r.messages[1].role, "assistant");
  EXPECT_EQ(r.messages[1].content, "Let me check.");
  const ojson& calls = r.messages[1].extra["tool_calls"];
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0]["id"], "toolu_1");
  EXPECT_EQ(calls[0]["function"]["name"], "get_weather");
  // The chat parser hands the template the arguments as an object.
  EXPECT_EQ(calls[0]["function"]["arguments"]["city"], "Paris");
  EXPECT_EQ(r.messages[2].role, "tool");
  EXPECT_EQ(r.messages[2].content, "18C");
  EXPECT_EQ(r.messages[2].extra["tool_call_id"], "toolu_1");
  EXPECT_EQ(r.messages[2].extra["name"], "get_weather");
  // An error result says so in its text.
  EXPECT_EQ(r.messages[3].role, "tool");
  EXPECT_EQ(r.messages[3].content, "Error: timeout");
  EXPECT_EQ(r.messages[4].role, "user");
  EXPECT_EQ(r.messages[4].content, "Thanks");
}

TEST(AnthropicRequestTest, RefusalsNameTheField) {
  struct Case {
    const char* name;
    json body;
    std::string param;
    StatusCode code;
  };
  std::vector<Case> cases;
  auto with = [](const char* key, json value) {
    json b = base();
    b[key] = std::move(value);
    return b;
  };
  json no_max = base();
  no_max.erase("max_tokens");
  cases.push_back({"missing max_tokens", no_max, "max_tokens", StatusCode::kInvalidArgument});
  json no_model = base();
  no_model.erase("model");
  cases.push_back({"missing model", no_model, "model", StatusCode::kInvalidArgument});
  cases.push_back(
      {"max_tokens 0", with("max_tokens", 0), "max_tokens", StatusCode::kInvalidArgument});
  cases.push_back(
      {"max_tokens text", with("max_tokens", "5"), "max_tokens", StatusCode::kInvalidArgument});
  cases.push_back({"temperature 1.5 (Anthropic's range is 0..1)", with("temperature", 1.5),
                   "temperature", StatusCode::kInvalidArgument});
  cases.push_back({"top_p 2", with("top_p", 2), "top_p", StatusCode::kInvalidArgument});
  cases.push_back({"top_k -1", with("top_k", -1), "top_k", StatusCode::kInvalidArgument});
  cases.push_back({"stop_sequences string", with("stop_sequences", "x"), "stop_sequences",
                   StatusCode::kInvalidArgument});
  cases.push_back({"stream text", with("stream", "yes"), "stream", StatusCode::kInvalidArgument});
  cases.push_back({"unknown field", with("service_tier", "auto"), "service_tier",
                   StatusCode::kInvalidArgument});
  cases.push_back({"thinking enabled", with("thinking", json{{"type", "enabled"}}), "thinking",
                   StatusCode::kNotSupported});
  cases.push_back({"one tool call at most",
                   with("tool_choice", json{{"type", "auto"}, {"disable_parallel_tool_use", true}}),
                   "tool_choice.disable_parallel_tool_use", StatusCode::kNotSupported});
  cases.push_back({"empty messages", with("messages", json::array()), "messages",
                   StatusCode::kInvalidArgument});
  cases.push_back({"system role in messages",
                   with("messages", json::array({json{{"role", "system"}, {"content", "x"}}})),
                   "messages[0].role", StatusCode::kInvalidArgument});
  cases.push_back(
      {"image block",
       with("messages",
            json::array({json{
                {"role", "user"},
                {"content", json::array({json{{"type", "image"}, {"source", json::object()}}})}}})),
       "messages[0].content[0]", StatusCode::kNotSupported});
  cases.push_back(
      {"tool_use in a user turn",
       with("messages",
            json::array(
                {json{{"role", "user"},
                      {"content",
                       json::array({json{
                           {"type", "tool_use"}, {"id", "a"}, {"name", "f"}, {"input", {}}}})}}})),
       "messages[0].content[0]", StatusCode::kNotSupported});
  cases.push_back(
      {"tool_use called by a server tool",
       with("messages",
            json::array({json{{"role", "assistant"},
                              {"content", json::array({json{{"type", "tool_use"},
                                                            {"id", "a"},
                                                            {"name", "f"},
                                                            {"input", json::object()},
                                                            {"caller", {{"type", "code"}}}}})}}})),
       "messages[0].content[0].caller", StatusCode::kNotSupported});
  cases.push_back(
      {"unknown non-null block field",
       with("messages",
            json::array(
                {json{{"role", "user"},
                      {"content",
                       json::array({json{{"type", "text"}, {"text", "x"}, {"colour", "red"}}})}}})),
       "messages[0].content[0].colour", StatusCode::kInvalidArgument});
  cases.push_back({"final assistant turn (prefill)",
                   with("messages", json::array({json{{"role", "user"}, {"content", "Hi"}},
                                                 json{{"role", "assistant"}, {"content", "{"}}})),
                   "messages[1]", StatusCode::kNotSupported});
  cases.push_back({"tool without input_schema", with("tools", json::array({json{{"name", "f"}}})),
                   "tools[0].input_schema", StatusCode::kInvalidArgument});
  cases.push_back(
      {"server tool",
       with("tools", json::array({json{{"type", "web_search_20250305"}, {"name", "web_search"}}})),
       "tools[0].type", StatusCode::kNotSupported});
  cases.push_back({"forced tool", with("tool_choice", json{{"type", "any"}}), "tool_choice.type",
                   StatusCode::kNotSupported});
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const RequestError e = parse_fail(c.body);
    EXPECT_EQ(e.param, c.param) << e.status.to_string();
    EXPECT_EQ(e.status.code(), c.code) << e.status.to_string();
    EXPECT_FALSE(e.status.message().empty());
  }
  RequestError e;
  EXPECT_FALSE(parse_anthropic_request("{not json", &e).has_value());
  EXPECT_EQ(e.status.code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(parse_anthropic_request("[1]", &e).has_value());
  EXPECT_EQ(e.status.code(), StatusCode::kInvalidArgument);
}

TEST(AnthropicRequestTest, MissingMaxTokensMessageSaysWhatToSend) {
  json body = base();
  body.erase("max_tokens");
  const RequestError e = parse_fail(body);
  const auto [http, err] = anthropic_error(e.status, e.param);
  EXPECT_EQ(http, 400);
  EXPECT_EQ(err["type"], "error");
  EXPECT_EQ(err["error"]["type"], "invalid_request_error");
  EXPECT_NE(err["error"]["message"].get<std::string>().find("max_tokens"), std::string::npos);
}

TEST(AnthropicResponseTest, ErrorKindsFollowAnthropic) {
  // The kinds are C strings: compare their text, not their addresses.
  EXPECT_EQ(anthropic_error_kind(400).first, 400);
  EXPECT_EQ(anthropic_error_kind(400).second, std::string("invalid_request_error"));
  EXPECT_EQ(anthropic_error_kind(501).first, 400);
  EXPECT_EQ(anthropic_error_kind(404).second, std::string("not_found_error"));
  EXPECT_EQ(anthropic_error_kind(429).first, 529);
  EXPECT_EQ(anthropic_error_kind(429).second, std::string("overloaded_error"));
  EXPECT_EQ(anthropic_error_kind(503).second, std::string("overloaded_error"));
  EXPECT_EQ(anthropic_error_kind(500).second, std::string("api_error"));
  const auto [http, body] = anthropic_error(not_supported("no images"), "messages[0]");
  EXPECT_EQ(http, 400);
  EXPECT_EQ(body["error"]["message"], "messages[0]: no images");
  EXPECT_EQ(anthropic_param_name("stop"), "stop_sequences");
}

json chat_body(const std::string& text, const std::string& finish) {
  return json{{"id", "msg_1"},
              {"model", "m"},
              {"choices", json::array({json{{"index", 0},
                                            {"message", {{"role", "assistant"}, {"content", text}}},
                                            {"finish_reason", finish}}})},
              {"usage", {{"prompt_tokens", 11}, {"completion_tokens", 3}}}};
}

TEST(AnthropicResponseTest, MessageFromAChatBody) {
  auto [http, m] = anthropic_message_from_chat(chat_body("Hello", "stop"), std::nullopt);
  EXPECT_EQ(http, 200);
  EXPECT_EQ(m["id"], "msg_1");
  EXPECT_EQ(m["type"], "message");
  EXPECT_EQ(m["role"], "assistant");
  EXPECT_EQ(m["model"], "m");
  ASSERT_EQ(m["content"].size(), 1u);
  EXPECT_EQ(m["content"][0], (json{{"type", "text"}, {"text", "Hello"}}));
  EXPECT_EQ(m["stop_reason"], "end_turn");
  EXPECT_TRUE(m["stop_sequence"].is_null());
  EXPECT_EQ(m["usage"], (json{{"input_tokens", 11}, {"output_tokens", 3}}));

  std::tie(http, m) = anthropic_message_from_chat(chat_body("He", "stop"), "llo");
  EXPECT_EQ(m["stop_reason"], "stop_sequence");
  EXPECT_EQ(m["stop_sequence"], "llo");
  std::tie(http, m) = anthropic_message_from_chat(chat_body("Hel", "length"), std::nullopt);
  EXPECT_EQ(m["stop_reason"], "max_tokens");
  std::tie(http, m) = anthropic_message_from_chat(chat_body("", "abort"), std::nullopt);
  EXPECT_EQ(http, 529);
  EXPECT_EQ(m["error"]["type"], "overloaded_error");
}

TEST(AnthropicResponseTest, ToolCallsBecomeToolUseBlocks) {
  json chat = chat_body("", "tool_calls");
  chat["choices"][0]["message"]["tool_calls"] =
      json::array({json{{"id", "call_abc"},
                        {"type", "function"},
                        {"function", {{"name", "f"}, {"arguments", R"({"x": 1})"}}}}});
  auto [http, m] = anthropic_message_from_chat(chat, std::nullopt);
  EXPECT_EQ(http, 200);
  EXPECT_EQ(m["stop_reason"], "tool_use");
  ASSERT_EQ(m["content"].size(), 1u) << m.dump();
  EXPECT_EQ(m["content"][0]["type"], "tool_use");
  EXPECT_EQ(m["content"][0]["id"], "toolu_abc");
  EXPECT_EQ(m["content"][0]["name"], "f");
  EXPECT_EQ(m["content"][0]["input"], (json{{"x", 1}}));
}

// "event: NAME\ndata: JSON\n\n" blocks → (name, payload) pairs.
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
    EXPECT_EQ(block.compare(nl + 1, 6, "data: "), 0) << block;
    json payload = json::parse(block.substr(nl + 7), nullptr, false);
    EXPECT_FALSE(payload.is_discarded()) << block;
    EXPECT_EQ(payload["type"], block.substr(7, nl - 7)) << block;
    out.emplace_back(block.substr(7, nl - 7), std::move(payload));
    pos = end + 2;
  }
  return out;
}

std::string data(const json& j) {
  return "data: " + j.dump() + "\n\n";
}

json text_chunk(const std::string& text, const json& finish = nullptr) {
  return json{
      {"choices", json::array({json{
                      {"index", 0}, {"delta", {{"content", text}}}, {"finish_reason", finish}}})}};
}

TEST(AnthropicResponseTest, StreamRewritesChunksIntoNamedEvents) {
  int asked = 0;
  AnthropicStream s("msg_9", "m", 12, [&] {
    ++asked;
    return std::optional<std::string>("END");
  });
  std::string sse;
  sse += s.feed(
      data(json{{"choices", json::array({json{{"index", 0},
                                              {"delta", {{"role", "assistant"}, {"content", ""}}},
                                              {"finish_reason", nullptr}}})}}));
  sse += s.feed(data(text_chunk("Hel")));
  sse += s.feed(data(text_chunk("lo")));
  sse += s.feed(data(text_chunk("", "stop")));
  sse += s.feed(data(json{{"choices", json::array()},
                          {"usage", {{"prompt_tokens", 12}, {"completion_tokens", 4}}}}));
  sse += s.feed("data: [DONE]\n\n");
  EXPECT_EQ(asked, 1);
  const auto ev = events_of(sse);
  std::vector<std::string> names;
  for (const auto& [n, p] : ev) names.push_back(n);
  EXPECT_EQ(names,
            (std::vector<std::string>{"message_start", "ping", "content_block_start",
                                      "content_block_delta", "content_block_delta",
                                      "content_block_stop", "message_delta", "message_stop"}));
  ASSERT_EQ(ev.size(), 8u);
  const json& msg = ev[0].second["message"];
  EXPECT_EQ(msg["id"], "msg_9");
  EXPECT_TRUE(msg["content"].empty());
  EXPECT_EQ(msg["usage"]["input_tokens"], 12);
  EXPECT_EQ(ev[2].second["index"], 0);
  EXPECT_EQ(ev[2].second["content_block"], (json{{"type", "text"}, {"text", ""}}));
  EXPECT_EQ(ev[3].second["delta"], (json{{"type", "text_delta"}, {"text", "Hel"}}));
  EXPECT_EQ(ev[4].second["delta"]["text"], "lo");
  EXPECT_EQ(ev[5].second["index"], 0);
  EXPECT_EQ(ev[6].second["delta"]["stop_reason"], "stop_sequence");
  EXPECT_EQ(ev[6].second["delta"]["stop_sequence"], "END");
  EXPECT_EQ(ev[6].second["usage"]["output_tokens"], 4);
}

TEST(AnthropicResponseTest, StreamedToolCallsAndErrors) {
  AnthropicStream s("msg_1", "m", 1, [] { return std::optional<std::string>(); });
  std::string sse;
  sse += s.feed(data(text_chunk("Sure")));
  json call{{"index", 0},
            {"id", "call_7"},
            {"type", "function"},
            {"function", {{"name", "f"}, {"arguments", ""}}}};
  auto tool_chunk = [](const json& entry) {
    return json{{"choices", json::array({json{{"index", 0},
                                              {"delta", {{"tool_calls", json::array({entry})}}},
                                              {"finish_reason", nullptr}}})}};
  };
  sse += s.feed(data(tool_chunk(call)));
  sse += s.feed(data(tool_chunk(json{{"index", 0}, {"function", {{"arguments", "{\"a\":1}"}}}})));
  sse += s.feed(data(text_chunk("", "tool_calls")));
  sse += s.feed("data: [DONE]\n\n");
  const auto ev = events_of(sse);
  // start, ping, text block (3), tool block (3), message_delta, message_stop.
  ASSERT_EQ(ev.size(), 10u) << sse;
  EXPECT_EQ(ev[2].second["content_block"]["type"], "text");
  EXPECT_EQ(ev[4].first, "content_block_stop");
  EXPECT_EQ(ev[4].second["index"], 0);
  EXPECT_EQ(ev[5].second["index"], 1);
  EXPECT_EQ(
      ev[5].second["content_block"],
      (json{{"type", "tool_use"}, {"id", "toolu_7"}, {"name", "f"}, {"input", json::object()}}));
  EXPECT_EQ(ev[6].second["delta"],
            (json{{"type", "input_json_delta"}, {"partial_json", "{\"a\":1}"}}));
  EXPECT_EQ(ev[7].first, "content_block_stop");
  EXPECT_EQ(ev[8].first, "message_delta");
  EXPECT_EQ(ev[8].second["delta"]["stop_reason"], "tool_use");

  AnthropicStream f("msg_2", "m", 1, nullptr);
  std::string failed = f.feed(data(text_chunk("Hi")));
  failed += f.feed(data(json{{"error", {{"message", "boom"}, {"type", "server_error"}}}}));
  failed += f.feed("data: [DONE]\n\n");
  const auto fev = events_of(failed);
  ASSERT_FALSE(fev.empty());
  EXPECT_EQ(fev.back().first, "error");
  EXPECT_EQ(fev.back().second["error"]["type"], "api_error");
  EXPECT_EQ(fev.back().second["error"]["message"], "boom");
}

}  // namespace
}  // namespace cellm::server
