// Streamed tool calls through the server against FakeService (one byte per
// token, so every call is written in many steps): /v1/chat/completions
// streams each call's header then its arguments in several pieces that
// concatenate to exactly the non-streamed reply's arguments string; a call
// cut by max_tokens ends the reply with "length" and the call as far as it
// got, streamed and not, without leaking markup as content; /v1/messages
// streams the same pieces as input_json_delta events.
#include <map>
#include <string>

#include <gtest/gtest.h>

#include "server_harness.h"

namespace cellm::server::testing {
namespace {

using nlohmann::json;

// Arguments long and nested enough to need many tokens, with braces and
// escaped quotes inside strings and model-style spacing the server keeps.
const std::string kArgs =
    "{\"city\": \"Paris\", \"note\": \"say \\\"hi\\\" {not a brace}\", \"days\": [1, 2, "
    "{\"x\": null}],  \"unit\" : \"celsius\"}";
const std::string kReply =
    "Checking.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": " + kArgs +
    "}\n</tool_call>\n<tool_call>\n{\"name\": \"get_time\", " +
    "\"arguments\": {\"tz\": \"CET\"}}\n</tool_call>";

FakeService::Knobs hermes_knobs(std::string reply) {
  FakeService::Knobs k;
  k.context = 1024;
  k.tool_format = ToolFormat::kHermes;
  k.reply = [reply](const GenerationSpec&, std::int32_t) { return reply; };
  return k;
}

json chat_body(bool stream, int max_tokens) {
  const json tools =
      json::array({{{"type", "function"},
                    {"function", {{"name", "get_weather"}, {"parameters", json::object()}}}},
                   {{"type", "function"},
                    {"function", {{"name", "get_time"}, {"parameters", json::object()}}}}});
  return json{{"messages", json::array({{{"role", "user"}, {"content", "Weather?"}}})},
              {"max_tokens", max_tokens},
              {"stream", stream},
              {"tools", tools}};
}

struct StreamedReply {
  std::string content;
  std::string finish;
  std::map<int, json> calls;  // by index: id, name, arguments
  std::map<int, int> pieces;  // by index: chunks carrying arguments
};

StreamedReply stream_chat(const TestServer& ts, const json& body) {
  RawHttp h(ts.port());
  EXPECT_TRUE(h.connected());
  h.post("/v1/chat/completions", body.dump());
  h.read_all();
  bool well_formed = false;
  const std::vector<std::string> payloads = sse_payloads(h.body(), &well_formed);
  EXPECT_TRUE(well_formed);
  StreamedReply out;
  for (const std::string& p : payloads) {
    if (p == "[DONE]") break;
    const json e = json::parse(p);
    const json& c = e["choices"][0];
    EXPECT_TRUE(out.finish.empty()) << "a chunk after the finish reason: " << p;
    if (!c["finish_reason"].is_null()) out.finish = c["finish_reason"];
    const json& d = c["delta"];
    if (d.contains("content")) out.content += d["content"].get<std::string>();
    if (!d.contains("tool_calls")) continue;
    for (const json& t : d["tool_calls"]) {
      const int index = t["index"];
      const std::string piece = t["function"]["arguments"];
      if (!out.calls.contains(index)) {
        // The header: id, type, name and empty arguments, as vLLM sends it.
        EXPECT_EQ(t["type"], "function") << t;
        EXPECT_TRUE(t["id"].get<std::string>().starts_with("call_")) << t;
        EXPECT_EQ(piece, "") << t;
        out.calls[index] = {{"id", t["id"]}, {"name", t["function"]["name"]}, {"arguments", ""}};
        continue;
      }
      EXPECT_FALSE(t.contains("id")) << t;
      EXPECT_FALSE(t["function"].contains("name")) << t;
      out.calls[index]["arguments"] = out.calls[index]["arguments"].get<std::string>() + piece;
      out.pieces[index] += 1;
    }
  }
  return out;
}

TEST(ToolStreamServerTest, ArgumentsStreamInPiecesThatMakeTheNonStreamedString) {
  TestServer ts({}, hermes_knobs(kReply));
  const JsonReply r = ts.post("/v1/chat/completions", chat_body(false, 400));
  ASSERT_EQ(r.status, 200) << r.raw;
  const json& message = r.body["choices"][0]["message"];
  ASSERT_EQ(message["tool_calls"].size(), 2u) << r.raw;
  const std::string args0 = message["tool_calls"][0]["function"]["arguments"];
  // The model's own text, spacing included.
  EXPECT_EQ(args0, kArgs);
  EXPECT_EQ(r.body["choices"][0]["finish_reason"], "tool_calls");

  const StreamedReply s = stream_chat(ts, chat_body(true, 400));
  EXPECT_EQ(s.content, "Checking.");
  EXPECT_EQ(s.finish, "tool_calls");
  ASSERT_EQ(s.calls.size(), 2u);
  for (int i = 0; i < 2; ++i) {
    const json& want = message["tool_calls"][static_cast<std::size_t>(i)];
    EXPECT_EQ(s.calls.at(i)["name"], want["function"]["name"]);
    EXPECT_EQ(s.calls.at(i)["arguments"], want["function"]["arguments"]);
  }
  // Written over many tokens, the long arguments come in many pieces.
  EXPECT_GT(s.pieces.at(0), 10) << "arguments streamed in " << s.pieces.at(0) << " pieces";
  EXPECT_NE(s.calls.at(0)["id"], s.calls.at(1)["id"]);
}

TEST(ToolStreamServerTest, ACallCutByMaxTokensEndsTheReplyWithLength) {
  // The budget ends inside the first call's arguments.
  const std::size_t cut = kReply.find("[1, 2");
  const int max_tokens = static_cast<int>(cut);
  TestServer ts({}, hermes_knobs(kReply));
  const JsonReply r = ts.post("/v1/chat/completions", chat_body(false, max_tokens));
  ASSERT_EQ(r.status, 200) << r.raw;
  const json& choice = r.body["choices"][0];
  EXPECT_EQ(choice["finish_reason"], "length");
  EXPECT_EQ(choice["message"]["content"], "Checking.");
  ASSERT_EQ(choice["message"]["tool_calls"].size(), 1u) << r.raw;
  const std::string partial = choice["message"]["tool_calls"][0]["function"]["arguments"];
  // As far as the model got: the arguments' text up to the cut.
  const std::size_t args_at = kReply.find(kArgs);
  EXPECT_EQ(partial, kReply.substr(args_at, cut - args_at));

  const StreamedReply s = stream_chat(ts, chat_body(true, max_tokens));
  EXPECT_EQ(s.finish, "length");
  EXPECT_EQ(s.content, "Checking.");
  ASSERT_EQ(s.calls.size(), 1u);
  EXPECT_EQ(s.calls.at(0)["arguments"], partial);
}

TEST(ToolStreamServerTest, MessagesStreamTheSamePiecesAsInputJsonDeltas) {
  TestServer ts({}, hermes_knobs(kReply));
  const json tools = json::array({{{"name", "get_weather"}, {"input_schema", {{"type", "object"}}}},
                                  {{"name", "get_time"}, {"input_schema", {{"type", "object"}}}}});
  json req{{"model", "fake-model"},
           {"max_tokens", 400},
           {"tools", tools},
           {"messages", json::array({{{"role", "user"}, {"content", "Weather?"}}})}};
  const JsonReply whole = ts.post("/v1/messages", req);
  ASSERT_EQ(whole.status, 200) << whole.raw;
  req["stream"] = true;
  RawHttp h(ts.port());
  ASSERT_TRUE(h.connected());
  h.post("/v1/messages", req.dump());
  h.read_all();
  EXPECT_EQ(h.status(), 200);
  const std::string body = h.body();
  std::map<int, std::string> partial;  // by block index
  std::map<int, int> deltas;
  std::map<int, std::string> names;
  for (std::size_t pos = 0, end; (end = body.find("\n\n", pos)) != std::string::npos;
       pos = end + 2) {
    const std::string block = body.substr(pos, end - pos);
    const std::size_t nl = block.find('\n');
    const std::string name = block.substr(7, nl - 7);
    const json e = json::parse(block.substr(nl + 7));
    if (name == "content_block_start" && e["content_block"]["type"] == "tool_use") {
      names[e["index"]] = e["content_block"]["name"];
    }
    if (name == "content_block_delta" && e["delta"]["type"] == "input_json_delta") {
      partial[e["index"]] += e["delta"]["partial_json"].get<std::string>();
      deltas[e["index"]] += 1;
    }
  }
  // Block 0 is the text, then one tool_use block per call.
  ASSERT_EQ(names.size(), 2u) << body;
  EXPECT_EQ(names[1], "get_weather");
  EXPECT_EQ(partial[1], kArgs);
  EXPECT_GT(deltas[1], 10) << body;
  const json& content = whole.body["content"];
  ASSERT_EQ(content.size(), 3u) << whole.raw;
  EXPECT_EQ(json::parse(partial[1]), content[1]["input"]);
  EXPECT_EQ(json::parse(partial[2]), content[2]["input"]);
}

}  // namespace
}  // namespace cellm::server::testing
