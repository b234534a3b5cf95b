// Tools through POST /v1/messages against FakeService (scripted Hermes-style
// replies): tool_use blocks and stop_reason "tool_use", streamed tool_use
// blocks with input_json_delta, an Anthropic tool conversation rendered by
// Qwen3's real template, and the overloaded_error of a full queue.
#include <fstream>
#include <future>
#include <string>

#include <gtest/gtest.h>

#include "chat/chat_template.h"
#include "server/anthropic_request.h"
#include "server_harness.h"
#include "support/testdata.h"

namespace cellm::server::testing {
namespace {

using nlohmann::json;

const std::string kCall =
    "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n"
    "</tool_call>";

json anthropic_tools() {
  return json::array(
      {{{"name", "get_weather"},
        {"description", "Current weather of a city"},
        {"input_schema", {{"type", "object"}, {"properties", {{"city", {{"type", "string"}}}}}}}}});
}

json tool_request(bool stream) {
  return json{{"model", "fake-model"},
              {"max_tokens", 400},
              {"stream", stream},
              {"tools", anthropic_tools()},
              {"messages", json::array({{{"role", "user"}, {"content", "Weather in Paris?"}}})}};
}

FakeService::Knobs hermes(std::string reply) {
  FakeService::Knobs k;
  k.context = 1024;
  k.tool_format = ToolFormat::kHermes;
  k.reply = [reply](const GenerationSpec&, std::int32_t) { return reply; };
  return k;
}

TEST(AnthropicToolsTest, CallsBecomeToolUseBlocks) {
  TestServer ts({}, hermes("Checking.\n" + kCall));
  const JsonReply r = ts.post("/v1/messages", tool_request(false));
  ASSERT_EQ(r.status, 200) << r.raw;
  EXPECT_EQ(r.body["stop_reason"], "tool_use");
  const json& content = r.body["content"];
  ASSERT_EQ(content.size(), 2u) << r.raw;
  EXPECT_EQ(content[0], (json{{"type", "text"}, {"text", "Checking."}}));
  EXPECT_EQ(content[1]["type"], "tool_use");
  EXPECT_TRUE(content[1]["id"].get<std::string>().starts_with("toolu_")) << r.raw;
  EXPECT_EQ(content[1]["name"], "get_weather");
  EXPECT_EQ(content[1]["input"], (json{{"city", "Paris"}}));
  // The tools reached the template as function tools.
  const std::vector<GenerationSpec> specs = ts.service().specs();
  ASSERT_EQ(specs.size(), 1u);
  std::string prompt;
  for (Token t : specs[0].prompt) prompt += static_cast<char>(t);
  EXPECT_NE(prompt.find(R"("function":{"name":"get_weather","description")"), std::string::npos)
      << prompt;
}

TEST(AnthropicToolsTest, StreamedToolUseCarriesInputJsonDeltas) {
  TestServer ts({}, hermes(kCall));
  RawHttp h(ts.port());
  ASSERT_TRUE(h.connected());
  h.post("/v1/messages", tool_request(true).dump());
  h.read_all();
  EXPECT_EQ(h.status(), 200);
  const std::string body = h.body();
  std::vector<std::pair<std::string, json>> events;
  for (std::size_t pos = 0, end; (end = body.find("\n\n", pos)) != std::string::npos;
       pos = end + 2) {
    const std::string block = body.substr(pos, end - pos);
    const std::size_t nl = block.find('\n');
    events.emplace_back(block.substr(7, nl - 7), json::parse(block.substr(nl + 7)));
  }
  std::string partial;
  json start;
  std::string stop_reason;
  int tool_blocks = 0;
  for (const auto& [name, e] : events) {
    if (name == "content_block_start" && e["content_block"]["type"] == "tool_use") {
      start = e["content_block"];
      ++tool_blocks;
    }
    if (name == "content_block_delta" && e["delta"]["type"] == "input_json_delta") {
      partial += e["delta"]["partial_json"].get<std::string>();
    }
    if (name == "content_block_delta") {
      EXPECT_EQ(body.find("<tool_call>"), std::string::npos) << "markup leaked: " << body;
    }
    if (name == "message_delta") stop_reason = e["delta"]["stop_reason"];
  }
  EXPECT_EQ(tool_blocks, 1) << body;
  EXPECT_EQ(start["name"], "get_weather");
  EXPECT_TRUE(start["id"].get<std::string>().starts_with("toolu_"));
  EXPECT_EQ(start["input"], json::object());
  EXPECT_EQ(json::parse(partial), (json{{"city", "Paris"}})) << partial;
  EXPECT_EQ(stop_reason, "tool_use");
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.back().first, "message_stop");
}

TEST(AnthropicToolsTest, ToolConversationRendersThroughQwen3Template) {
  std::ifstream in(cellm::testing::testdata_dir() / "tokenizers" / "qwen3" /
                   "tokenizer_config.json");
  ASSERT_TRUE(in) << "the qwen3 tokenizer fixture is missing";
  const std::string source = json::parse(in).at("chat_template").get<std::string>();
  auto tmpl = chat::ChatTemplate::parse(source);
  ASSERT_TRUE(tmpl.ok()) << tmpl.status().to_string();

  json body = tool_request(false);
  body["messages"].push_back({{"role", "assistant"},
                              {"content", json::array({{{"type", "tool_use"},
                                                        {"id", "toolu_9"},
                                                        {"name", "get_weather"},
                                                        {"input", {{"city", "Paris"}}}}})}});
  body["messages"].push_back({{"role", "user"},
                              {"content", json::array({{{"type", "tool_result"},
                                                        {"tool_use_id", "toolu_9"},
                                                        {"content", "21 C, sunny"}}})}});
  RequestError error;
  std::optional<AnthropicRequest> a = parse_anthropic_request(body.dump(), &error);
  ASSERT_TRUE(a.has_value()) << error.param << ": " << error.status.to_string();
  std::optional<GenerationRequest> r =
      parse_request(RequestKind::kChat, a->chat.dump(), {}, &error);
  ASSERT_TRUE(r.has_value()) << error.param << ": " << error.status.to_string();
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  for (const ChatMessage& m : r->messages) {
    nlohmann::ordered_json msg{{"role", m.role}, {"content", m.content}};
    for (auto it = m.extra.begin(); it != m.extra.end(); ++it) msg[it.key()] = it.value();
    messages.push_back(msg);
  }
  nlohmann::ordered_json extra{{"tools", r->tools}};
  auto text =
      chat::apply_chat_template(*tmpl, messages, true, extra, nlohmann::ordered_json::object());
  ASSERT_TRUE(text.ok()) << text.status().to_string();
  EXPECT_NE(text->find("\"name\": \"get_weather\", \"description\": \"Current weather of a city\""),
            std::string::npos)
      << *text;
  EXPECT_NE(text->find("<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
                       "\"Paris\"}}\n</tool_call>"),
            std::string::npos)
      << *text;
  EXPECT_NE(text->find("<tool_response>\n21 C, sunny\n</tool_response>"), std::string::npos)
      << *text;
}

TEST(AnthropicToolsTest, AFullQueueIsOverloaded) {
  ServerOptions o;
  o.max_running = 1;
  o.max_queue = 0;
  TestServer ts(o);
  ts.service().hold();
  const json body{{"model", "fake-model"},
                  {"max_tokens", 8},
                  {"messages", json::array({{{"role", "user"}, {"content", "Hi"}}})}};
  auto first = std::async(std::launch::async, [&] { return ts.post("/v1/messages", body); });
  ASSERT_TRUE(FakeService::eventually([&] { return ts.service().live_jobs() == 1; }));
  const JsonReply second = ts.post("/v1/messages", body);
  EXPECT_EQ(second.status, 529) << second.raw;
  EXPECT_EQ(second.body["type"], "error");
  EXPECT_EQ(second.body["error"]["type"], "overloaded_error");
  ts.service().release();
  EXPECT_EQ(first.get().status, 200);
}

}  // namespace
}  // namespace cellm::server::testing
