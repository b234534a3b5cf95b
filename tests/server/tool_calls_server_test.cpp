// Tool calls through the server against FakeService (which replies with
// scripted text): message.tool_calls, null content and finish_reason
// "tool_calls" in non-streamed replies; streamed delta.tool_calls that never
// leak the call markup as content; tool_choice handling; tool results and
// assistant tool_calls in the request, rendered through real templates
// (Qwen3's from the fixtures, a Llama 3.1-style one written here).
#include <fstream>
#include <map>
#include <string>

#include <gtest/gtest.h>

#include "chat/chat_template.h"
#include "server/openai_request.h"
#include "server_harness.h"
#include "support/testdata.h"

namespace cellm::server::testing {
namespace {

using nlohmann::json;

const std::string kTwoCalls =
    "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n"
    "</tool_call>\n<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"tz\": \"CET\", "
    "\"24h\": true}}\n</tool_call>";

json weather_tools() {
  return json::array({
      {{"type", "function"},
       {"function",
        {{"name", "get_weather"},
         {"parameters", {{"type", "object"}, {"properties", {{"city", {{"type", "string"}}}}}}}}}},
      {{"type", "function"}, {"function", {{"name", "get_time"}, {"parameters", json::object()}}}},
  });
}

json chat_body(json extra = json::object()) {
  json body{{"messages", json::array({{{"role", "user"}, {"content", "Weather and time?"}}})},
            {"max_tokens", 400}};
  for (auto it = extra.begin(); it != extra.end(); ++it) body[it.key()] = it.value();
  return body;
}

FakeService::Knobs hermes_knobs(std::string reply) {
  FakeService::Knobs k;
  k.context = 1024;
  k.tool_format = ToolFormat::kHermes;
  k.reply = [reply](const GenerationSpec&, std::int32_t) { return reply; };
  return k;
}

TEST(ToolCallsServerTest, NonStreamedReplyCarriesParallelCalls) {
  TestServer ts({}, hermes_knobs(kTwoCalls));
  JsonReply r = ts.post("/v1/chat/completions", chat_body({{"tools", weather_tools()}}));
  ASSERT_EQ(r.status, 200) << r.raw;
  const json& choice = r.body["choices"][0];
  EXPECT_EQ(choice["finish_reason"], "tool_calls");
  EXPECT_TRUE(choice["message"]["content"].is_null()) << r.raw;
  const json& calls = choice["message"]["tool_calls"];
  ASSERT_EQ(calls.size(), 2u) << r.raw;
  EXPECT_EQ(calls[0]["type"], "function");
  EXPECT_EQ(calls[0]["function"]["name"], "get_weather");
  EXPECT_EQ(json::parse(calls[0]["function"]["arguments"].get<std::string>()),
            json({{"city", "Paris"}}));
  EXPECT_EQ(calls[1]["function"]["name"], "get_time");
  EXPECT_EQ(json::parse(calls[1]["function"]["arguments"].get<std::string>()),
            json({{"tz", "CET"}, {"24h", true}}));
  EXPECT_TRUE(calls[0]["id"].get<std::string>().starts_with("call_"));
  EXPECT_NE(calls[0]["id"], calls[1]["id"]);
}

TEST(ToolCallsServerTest, TextBesideACallIsContent) {
  TestServer ts({}, hermes_knobs("Checking.\n" + kTwoCalls));
  JsonReply r = ts.post("/v1/chat/completions", chat_body({{"tools", weather_tools()}}));
  ASSERT_EQ(r.status, 200) << r.raw;
  EXPECT_EQ(r.body["choices"][0]["message"]["content"], "Checking.");
  EXPECT_EQ(r.body["choices"][0]["message"]["tool_calls"].size(), 2u);
}

TEST(ToolCallsServerTest, NoParsingWithoutToolsOrWithToolChoiceNone) {
  std::vector<json> extras;
  extras.push_back(json::object());
  extras.push_back(json{{"tools", weather_tools()}, {"tool_choice", "none"}});
  for (const json& extra : extras) {
    TestServer ts({}, hermes_knobs(kTwoCalls));
    JsonReply r = ts.post("/v1/chat/completions", chat_body(extra));
    ASSERT_EQ(r.status, 200) << r.raw;
    EXPECT_EQ(r.body["choices"][0]["message"]["content"], kTwoCalls);
    EXPECT_FALSE(r.body["choices"][0]["message"].contains("tool_calls"));
    EXPECT_EQ(r.body["choices"][0]["finish_reason"], "stop");
    // With "none" the tools are not rendered into the prompt either.
    const std::vector<GenerationSpec> specs = ts.service().specs();
    ASSERT_EQ(specs.size(), 1u);
    std::string text;
    for (Token t : specs[0].prompt) text += static_cast<char>(t);
    EXPECT_EQ(text.find("tools:"), std::string::npos) << text;
  }
}

TEST(ToolCallsServerTest, ModelWithoutToolFormatIsNotParsed) {
  FakeService::Knobs k = hermes_knobs(kTwoCalls);
  k.tool_format = ToolFormat::kNone;
  TestServer ts({}, k);
  JsonReply r = ts.post("/v1/chat/completions", chat_body({{"tools", weather_tools()}}));
  ASSERT_EQ(r.status, 200) << r.raw;
  EXPECT_EQ(r.body["choices"][0]["message"]["content"], kTwoCalls);
  EXPECT_FALSE(r.body["choices"][0]["message"].contains("tool_calls"));
}

TEST(ToolCallsServerTest, StreamedCallsAccumulateAndNeverLeakMarkup) {
  TestServer ts({}, hermes_knobs("Checking.\n" + kTwoCalls));
  RawHttp h(ts.port());
  ASSERT_TRUE(h.connected());
  h.post("/v1/chat/completions", chat_body({{"tools", weather_tools()}, {"stream", true}}).dump());
  h.read_all();
  bool well_formed = false;
  const std::vector<std::string> payloads = sse_payloads(h.body(), &well_formed);
  ASSERT_TRUE(well_formed);
  ASSERT_FALSE(payloads.empty());
  EXPECT_EQ(payloads.back(), "[DONE]");
  std::string content;
  std::map<int, json> calls;  // by index: id, name, arguments so far
  std::string finish;
  for (std::size_t i = 0; i + 1 < payloads.size(); ++i) {
    const json e = json::parse(payloads[i]);
    const json& c = e["choices"][0];
    EXPECT_TRUE(finish.empty()) << "a chunk after the finish reason: " << payloads[i];
    if (!c["finish_reason"].is_null()) finish = c["finish_reason"];
    const json& d = c["delta"];
    if (d.contains("content")) content += d["content"].get<std::string>();
    if (!d.contains("tool_calls")) continue;
    for (const json& t : d["tool_calls"]) {
      const int index = t["index"];
      if (!calls.contains(index)) {
        // The first chunk of a call names it.
        EXPECT_TRUE(t.contains("id")) << t;
        EXPECT_EQ(t["type"], "function");
        calls[index] = {{"id", t["id"]}, {"name", t["function"]["name"]}, {"arguments", ""}};
      } else {
        EXPECT_FALSE(t.contains("id")) << t;
      }
      if (t["function"].contains("arguments")) {
        calls[index]["arguments"] = calls[index]["arguments"].get<std::string>() +
                                    t["function"]["arguments"].get<std::string>();
      }
    }
  }
  EXPECT_EQ(content, "Checking.");
  EXPECT_EQ(finish, "tool_calls");
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_EQ(calls[0]["name"], "get_weather");
  EXPECT_EQ(json::parse(calls[0]["arguments"].get<std::string>()), json({{"city", "Paris"}}));
  EXPECT_EQ(calls[1]["name"], "get_time");
  EXPECT_EQ(json::parse(calls[1]["arguments"].get<std::string>()),
            json({{"tz", "CET"}, {"24h", true}}));
  EXPECT_NE(calls[0]["id"], calls[1]["id"]);
}

TEST(ToolCallsServerTest, UnknownToolChoicesAreRefusedWithTheSupportedValues) {
  TestServer ts({}, hermes_knobs(kTwoCalls));
  const json unknown{{"type", "function"}, {"function", {{"name", "launch"}}}};
  for (const json& choice : {json("sometimes"), json(3)}) {
    JsonReply r = ts.post("/v1/chat/completions",
                          chat_body({{"tools", weather_tools()}, {"tool_choice", choice}}));
    EXPECT_EQ(r.status, 400) << r.raw;
    EXPECT_EQ(r.body["error"]["param"], "tool_choice") << r.raw;
    const std::string message = r.body["error"]["message"];
    for (const char* value : {"\"auto\"", "\"none\"", "\"required\""}) {
      EXPECT_NE(message.find(value), std::string::npos) << message;
    }
  }
  JsonReply r = ts.post("/v1/chat/completions",
                        chat_body({{"tools", weather_tools()}, {"tool_choice", unknown}}));
  EXPECT_EQ(r.status, 400) << r.raw;
  EXPECT_EQ(r.body["error"]["param"], "tool_choice");
  EXPECT_NE(r.body["error"]["message"].get<std::string>().find("launch"), std::string::npos);
  // "required" without tools has nothing to call.
  r = ts.post("/v1/chat/completions", chat_body({{"tool_choice", "required"}}));
  EXPECT_EQ(r.status, 400) << r.raw;
  EXPECT_EQ(r.body["error"]["param"], "tool_choice");
  EXPECT_EQ(ts.service().start_calls(), 0);
}

// A forced call needs constrained decoding; a service without a token
// vocabulary (this fake) cannot do it and says so before starting anything.
TEST(ToolCallsServerTest, ForcedCallsNeedAServiceThatConstrainsDecoding) {
  TestServer ts({}, hermes_knobs(kTwoCalls));
  const json named{{"type", "function"}, {"function", {{"name", "get_weather"}}}};
  for (const json& choice : {json("required"), named}) {
    JsonReply r = ts.post("/v1/chat/completions",
                          chat_body({{"tools", weather_tools()}, {"tool_choice", choice}}));
    EXPECT_EQ(r.status, 400) << r.raw;
    EXPECT_EQ(r.body["error"]["param"], "tool_choice") << r.raw;
    EXPECT_NE(r.body["error"]["message"].get<std::string>().find("constrain"), std::string::npos)
        << r.raw;
  }
  EXPECT_EQ(ts.service().start_calls(), 0);
}

TEST(ToolCallsServerTest, MalformedToolsAndToolCallsAreRefusedByField) {
  TestServer ts({}, hermes_knobs(kTwoCalls));
  JsonReply r = ts.post("/v1/chat/completions",
                        chat_body({{"tools", json::array({{{"type", "function"}}})}}));
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(r.body["error"]["param"], "tools[0]") << r.raw;
  // Wrongly typed fields are refused, not thrown on.
  r = ts.post("/v1/chat/completions", chat_body({{"tools", json::array({{{"type", 5}}})}}));
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(r.body["error"]["param"], "tools[0]") << r.raw;
  r = ts.post("/v1/chat/completions",
              chat_body({{"tools", weather_tools()},
                         {"tool_choice", {{"type", 1}, {"function", {{"name", 2}}}}}}));
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(r.body["error"]["param"], "tool_choice") << r.raw;
  json messages =
      json::array({{{"role", "user"}, {"content", "x"}},
                   {{"role", "assistant"},
                    {"content", nullptr},
                    {"tool_calls",
                     json::array({{{"id", "call_1"},
                                   {"type", "function"},
                                   {"function", {{"name", "f"}, {"arguments", "not json"}}}}})}}});
  r = ts.post("/v1/chat/completions", json{{"messages", messages}});
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(r.body["error"]["param"], "messages[1].tool_calls[0].function.arguments") << r.raw;
}

// A tool round trip as an agent sends it (assistant tool_calls with string
// arguments and null content, then the tool's result).
json round_trip_messages() {
  return json::array(
      {{{"role", "user"}, {"content", "Weather in Paris?"}},
       {{"role", "assistant"},
        {"content", nullptr},
        {"tool_calls",
         json::array(
             {{{"id", "call_abc"},
               {"type", "function"},
               {"function", {{"name", "get_weather"}, {"arguments", "{\"city\": \"Paris\"}"}}}}})}},
       {{"role", "tool"}, {"tool_call_id", "call_abc"}, {"content", "21 C, sunny"}}});
}

nlohmann::ordered_json rendered_messages() {
  RequestError error;
  std::optional<GenerationRequest> r = parse_request(
      RequestKind::kChat, json{{"messages", round_trip_messages()}}.dump(), {}, &error);
  EXPECT_TRUE(r.has_value()) << error.status.to_string();
  if (!r) return nlohmann::ordered_json::array();
  // Arguments reach the template as an object whatever the client sent.
  EXPECT_TRUE(r->messages[1].extra["tool_calls"][0]["function"]["arguments"].is_object());
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  for (const ChatMessage& m : r->messages) {
    nlohmann::ordered_json msg{{"role", m.role}, {"content", m.content}};
    for (auto it = m.extra.begin(); it != m.extra.end(); ++it) msg[it.key()] = it.value();
    out.push_back(msg);
  }
  return out;
}

TEST(ToolRoundTripTest, Qwen3TemplateRendersCallsAndResults) {
  std::ifstream in(cellm::testing::testdata_dir() / "tokenizers" / "qwen3" /
                   "tokenizer_config.json");
  ASSERT_TRUE(in) << "the qwen3 tokenizer fixture is missing";
  const std::string source = json::parse(in).at("chat_template").get<std::string>();
  EXPECT_EQ(detect_tool_format(source, "qwen3"), ToolFormat::kHermes);
  auto tmpl = chat::ChatTemplate::parse(source);
  ASSERT_TRUE(tmpl.ok()) << tmpl.status().to_string();
  nlohmann::ordered_json extra{{"tools", weather_tools()}};
  auto text = chat::apply_chat_template(*tmpl, rendered_messages(), true, extra,
                                        nlohmann::ordered_json::object());
  ASSERT_TRUE(text.ok()) << text.status().to_string();
  EXPECT_NE(text->find("<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
                       "\"Paris\"}}\n</tool_call>"),
            std::string::npos)
      << *text;
  EXPECT_NE(text->find("<tool_response>\n21 C, sunny\n</tool_response>"), std::string::npos)
      << *text;
  // What the template shows the model parses back into the same call.
  const auto calls = parse_tool_body(ToolFormat::kHermes,
                                     "\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
                                     "\"Paris\"}}\n");
  ASSERT_TRUE(calls.has_value());
  EXPECT_EQ((*calls)[0].arguments, R"({"city":"Paris"})");
}

TEST(ToolRoundTripTest, Llama31StyleTemplateGetsObjectArguments) {
  // The tool-call part of Llama 3.1's template: it applies tojson to the
  // arguments, so a string would be printed quoted.
  const std::string source =
      "{%- for message in messages %}{%- if message.tool_calls %}"
      "{%- set tool_call = message.tool_calls[0].function %}"
      "{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}"
      "{{- '{\"name\": \"' + tool_call.name + '\", \"parameters\": ' + "
      "tool_call.arguments | tojson + '}' + '<|eot_id|>' }}"
      "{%- elif message.role == 'tool' or message.role == 'ipython' %}"
      "{{- '<|start_header_id|>ipython<|end_header_id|>\\n\\n' + message.content + "
      "'<|eot_id|>' }}"
      "{%- else %}{{- '<|start_header_id|>' + message.role + '<|end_header_id|>\\n\\n' + "
      "message.content + '<|eot_id|>' }}{%- endif %}{%- endfor %}";
  EXPECT_EQ(detect_tool_format(source, "llama"), ToolFormat::kLlama3);
  auto tmpl = chat::ChatTemplate::parse(source);
  ASSERT_TRUE(tmpl.ok()) << tmpl.status().to_string();
  auto text =
      chat::apply_chat_template(*tmpl, rendered_messages(), false, nlohmann::ordered_json::object(),
                                nlohmann::ordered_json::object());
  ASSERT_TRUE(text.ok()) << text.status().to_string();
  EXPECT_NE(text->find("{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}"),
            std::string::npos)
      << *text;
  EXPECT_NE(text->find("ipython<|end_header_id|>\n\n21 C, sunny"), std::string::npos) << *text;
}

}  // namespace
}  // namespace cellm::server::testing
