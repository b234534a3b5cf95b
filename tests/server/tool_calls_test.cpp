// Tool-call parsing per format on hand-written outputs of each family (Llama
// 3.x JSON, Qwen/Hermes <tool_call>, Mistral [TOOL_CALLS], Gemma tool_code):
// single and parallel calls, calls with text around them, text that never
// became a call and must stay content, and every output fed whole, byte by
// byte and split at every boundary, which must all give the same content and
// calls. The streaming side (argument pieces, started calls that break) is in
// tool_stream_test.cpp.
#include "server/tool_calls.h"

#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace cellm::server {
namespace {

using nlohmann::json;

struct Outcome {
  std::string content;
  std::vector<ToolCall> calls;
};

// Feeds `pieces` and finish(); assembles what push/finish released (content,
// and each call from its start event and argument pieces) and checks that it
// agrees with calls() (indices in order, ids unique and "call_"-prefixed).
Outcome run(ToolFormat format, const std::vector<std::string>& pieces) {
  ToolCallParser parser(format);
  Outcome o;
  auto take = [&](const ToolParse& p) {
    for (const ToolEvent& e : p.events) {
      if (e.kind == ToolEvent::Kind::kContent) {
        o.content += e.text;
      } else if (e.kind == ToolEvent::Kind::kCallStart) {
        EXPECT_EQ(e.index, static_cast<std::int32_t>(o.calls.size()));
        EXPECT_TRUE(e.text.empty());
        ToolCall call;
        call.index = e.index;
        call.id = e.id;
        call.name = e.name;
        o.calls.push_back(call);
      } else {
        ASSERT_FALSE(o.calls.empty());
        EXPECT_EQ(e.index, o.calls.back().index) << "pieces of an earlier call";
        o.calls.back().arguments += e.text;
      }
    }
  };
  for (const std::string& piece : pieces) take(parser.push(piece));
  take(parser.finish());
  EXPECT_EQ(o.calls.size(), parser.calls().size());
  for (std::size_t i = 0; i < o.calls.size() && i < parser.calls().size(); ++i) {
    EXPECT_EQ(o.calls[i].index, static_cast<std::int32_t>(i));
    EXPECT_TRUE(o.calls[i].id.starts_with("call_")) << o.calls[i].id;
    EXPECT_GT(o.calls[i].id.size(), 5u + 16u);
    for (std::size_t j = 0; j < i; ++j) EXPECT_NE(o.calls[i].id, o.calls[j].id);
    EXPECT_EQ(o.calls[i].id, parser.calls()[i].id);
    EXPECT_EQ(o.calls[i].arguments, parser.calls()[i].arguments);
    o.calls[i].complete = parser.calls()[i].complete;
  }
  return o;
}

struct Expected {
  std::string content;
  std::vector<std::pair<std::string, json>> calls;  // name, arguments
};

// Whole, byte by byte, and split in two at every boundary.
void check(ToolFormat format, const std::string& output, const Expected& want) {
  std::vector<std::vector<std::string>> feeds;
  feeds.push_back({output});
  std::vector<std::string> bytes;
  for (char c : output) bytes.emplace_back(1, c);
  if (!bytes.empty()) feeds.push_back(bytes);
  for (std::size_t cut = 0; cut <= output.size(); ++cut) {
    feeds.push_back({output.substr(0, cut), output.substr(cut)});
  }
  for (const auto& feed : feeds) {
    SCOPED_TRACE(::testing::Message()
                 << "pieces: " << feed.size() << " first: '" << feed.front() << "'");
    const Outcome o = run(format, feed);
    EXPECT_EQ(o.content, want.content);
    ASSERT_EQ(o.calls.size(), want.calls.size());
    for (std::size_t i = 0; i < o.calls.size(); ++i) {
      EXPECT_TRUE(o.calls[i].complete);
      EXPECT_EQ(o.calls[i].name, want.calls[i].first);
      const json args = json::parse(o.calls[i].arguments, nullptr, false);
      EXPECT_EQ(args, want.calls[i].second) << o.calls[i].arguments;
    }
  }
}

// ---- format detection -------------------------------------------------------

TEST(ToolFormatTest, ChosenFromTemplateMarkersAndArchitecture) {
  EXPECT_EQ(detect_tool_format("{{ '<tool_call>\\n' }}{{ tool_call.name }}", "qwen3"),
            ToolFormat::kHermes);
  EXPECT_EQ(detect_tool_format("{%- if message.role == 'ipython' %}<|python_tag|>", "llama"),
            ToolFormat::kLlama3);
  EXPECT_EQ(detect_tool_format("{{ '[TOOL_CALLS]' + tool_calls|tojson }}", "llama"),
            ToolFormat::kMistral);
  EXPECT_EQ(detect_tool_format("Wrap calls in ```tool_code ... ```", "gemma3_text"),
            ToolFormat::kGemma);
  // The architecture breaks a tie between conventions a template mentions.
  EXPECT_EQ(detect_tool_format("```tool_code or <tool_call>", "gemma3_text"), ToolFormat::kGemma);
  EXPECT_EQ(detect_tool_format("```tool_code or <tool_call>", "qwen2"), ToolFormat::kHermes);
  // Templates without tool support: SmolLM2's ChatML, Gemma 3's, none.
  EXPECT_EQ(detect_tool_format("{% for message in messages %}{{'<|im_start|>' + message['role'] "
                               "+ '\\n' + message['content'] + '<|im_end|>'}}{% endfor %}",
                               "llama"),
            ToolFormat::kNone);
  EXPECT_EQ(detect_tool_format("{{ '<start_of_turn>' + role }}", "gemma3_text"), ToolFormat::kNone);
  EXPECT_EQ(detect_tool_format("", "qwen3"), ToolFormat::kNone);
}

// ---- Hermes / Qwen 2.5 / Qwen 3 ----------------------------------------------

TEST(HermesToolCallsTest, SingleCall) {
  check(ToolFormat::kHermes,
        "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", "
        "\"unit\": \"celsius\"}}\n</tool_call>",
        {"", {{"get_weather", {{"city", "Paris"}, {"unit", "celsius"}}}}});
}

TEST(HermesToolCallsTest, ParallelCallsAfterThinkingText) {
  check(ToolFormat::kHermes,
        "<think>\nThe user wants two cities.\n</think>\n\n<tool_call>\n{\"name\": "
        "\"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n<tool_call>\n"
        "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Tokyo\"}}\n</tool_call>",
        {"<think>\nThe user wants two cities.\n</think>",
         {{"get_weather", {{"city", "Paris"}}}, {"get_weather", {{"city", "Tokyo"}}}}});
}

TEST(HermesToolCallsTest, TextBeforeAndAfterStaysContent) {
  check(ToolFormat::kHermes,
        "Let me look that up.\n<tool_call>\n{\"name\": \"search\", \"arguments\": {\"q\": "
        "\"a < b\", \"n\": 3}}\n</tool_call>\nOne moment.",
        {"Let me look that up.\nOne moment.", {{"search", {{"q", "a < b"}, {"n", 3}}}}});
  check(ToolFormat::kHermes, "<tool_call>{\"name\": \"f\"}</tool_call>\n\nDone.  ",
        {"Done.", {{"f", json::object()}}});
}

TEST(HermesToolCallsTest, ArgumentsAsJsonStringAndNoArguments) {
  check(ToolFormat::kHermes,
        "<tool_call>\n{\"name\": \"set\", \"arguments\": \"{\\\"x\\\": [1, 2]}\"}\n</tool_call>"
        "<tool_call>{\"name\": \"now\"}</tool_call>",
        {"", {{"set", {{"x", {1, 2}}}}, {"now", json::object()}}});
}

TEST(HermesToolCallsTest, BlocksThatNeverNameACallStayContent) {
  // Not JSON, a missing name, a name that is not a string (a call whose name
  // was read and then broke is tool_stream_test's).
  const std::string prose = "<tool_call>\nI will call it now.\n</tool_call>";
  check(ToolFormat::kHermes, prose, {prose, {}});
  const std::string no_name = "<tool_call>{\"arguments\": {}}</tool_call>";
  check(ToolFormat::kHermes, no_name, {no_name, {}});
  const std::string number_name = "<tool_call>{\"name\": 5, \"arguments\": {}}</tool_call>";
  check(ToolFormat::kHermes, number_name, {number_name, {}});
  // A good call next to a bad one: the good one is a call.
  check(ToolFormat::kHermes,
        "<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>\n<tool_call>oops</tool_call>",
        {"<tool_call>oops</tool_call>", {{"f", json::object()}}});
}

TEST(HermesToolCallsTest, UnterminatedCallCountsWhenComplete) {
  // Stopped (EOS) right after the JSON, before the closing tag.
  check(ToolFormat::kHermes, "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1}}\n",
        {"", {{"f", {{"a", 1}}}}});
  // Cut by the token limit before the name was whole: content.
  const std::string cut = "Sure. <tool_call>\n{\"name\": \"get_wea";
  check(ToolFormat::kHermes, cut, {cut, {}});
}

TEST(HermesToolCallsTest, PlainRepliesKeepEveryByte) {
  check(ToolFormat::kHermes, "  Hello <tool and\n <tool_cal  \n",
        {"  Hello <tool and\n <tool_cal  \n", {}});
  check(ToolFormat::kHermes, "", {"", {}});
}

// ---- Llama 3.1 - 3.3 ----------------------------------------------------------

TEST(Llama3ToolCallsTest, PlainJsonCall) {
  check(ToolFormat::kLlama3,
        "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"San Francisco, CA\"}}",
        {"", {{"get_weather", {{"city", "San Francisco, CA"}}}}});
}

TEST(Llama3ToolCallsTest, PythonTagAndParallelCalls) {
  check(ToolFormat::kLlama3,
        "<|python_tag|>{\"name\": \"a\", \"parameters\": {\"x\": 1}}; {\"name\": \"b\", "
        "\"parameters\": {\"y\": \"}{\"}}",
        {"", {{"a", {{"x", 1}}}, {"b", {{"y", "}{"}}}}});
  check(ToolFormat::kLlama3,
        "\n{\"name\": \"a\", \"parameters\": {}}\n{\"name\": \"b\", \"parameters\": {\"z\": "
        "true}}\n",
        {"", {{"a", json::object()}, {"b", {{"z", true}}}}});
}

TEST(Llama3ToolCallsTest, TextFirstMeansNoCall) {
  // A reply that starts with prose is content even if JSON follows.
  const std::string prose = "Here it is: {\"name\": \"a\", \"parameters\": {}}";
  check(ToolFormat::kLlama3, prose, {prose, {}});
}

TEST(Llama3ToolCallsTest, JsonThatIsNotACallStaysContent) {
  const std::string data = "{\"city\": \"Paris\", \"temp\": 21}";
  check(ToolFormat::kLlama3, data, {data, {}});
  const std::string cut = "{\"name\": \"a";
  check(ToolFormat::kLlama3, cut, {cut, {}});
}

TEST(Llama3ToolCallsTest, ProseAfterTheCallsIsContent) {
  check(ToolFormat::kLlama3, "{\"name\": \"a\", \"parameters\": {}} and then some text",
        {"and then some text", {{"a", json::object()}}});
  // JSON after a call that is not one: content too.
  check(ToolFormat::kLlama3, "{\"name\": \"a\", \"parameters\": {}}; {\"x\": 1}",
        {"{\"x\": 1}", {{"a", json::object()}}});
}

// ---- Mistral ---------------------------------------------------------------------

TEST(MistralToolCallsTest, MarkerAndList) {
  check(ToolFormat::kMistral,
        "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}, "
        "{\"name\": \"get_time\", \"arguments\": {\"tz\": \"CET\"}}]",
        {"", {{"get_weather", {{"city", "Paris"}}}, {"get_time", {{"tz", "CET"}}}}});
}

TEST(MistralToolCallsTest, MarkerDroppedByDetokenization) {
  // [TOOL_CALLS] is a control token: skipped when decoding, the list remains.
  check(ToolFormat::kMistral, " [{\"name\": \"f\", \"arguments\": {\"n\": 2.5}}]",
        {"", {{"f", {{"n", 2.5}}}}});
}

TEST(MistralToolCallsTest, TextThenMarker) {
  check(ToolFormat::kMistral, "I will check.[TOOL_CALLS][{\"name\": \"f\", \"arguments\": {}}]",
        {"I will check.", {{"f", json::object()}}});
}

TEST(MistralToolCallsTest, ListsThatAreNotCallsStayContent) {
  const std::string list = "[1, 2, 3]";
  check(ToolFormat::kMistral, list, {list, {}});
  const std::string empty = "[TOOL_CALLS][]";
  check(ToolFormat::kMistral, empty, {empty, {}});
  // An unclosed list whose calls are whole (EOS before ']') still counts.
  check(ToolFormat::kMistral, "[TOOL_CALLS][{\"name\": \"f\", \"arguments\": {}}",
        {"", {{"f", json::object()}}});
}

// ---- Gemma 3 (```tool_code) ------------------------------------------------------

TEST(GemmaToolCallsTest, LiteralArguments) {
  check(ToolFormat::kGemma,
        "```tool_code\nget_weather(city=\"Paris\", days=3, scale=-1.5, metric=True, "
        "note=None, tags=['a', \"b\"], opts={'deep': False, \"n\": [1, (2, 3)]})\n```",
        {"",
         {{"get_weather",
           {{"city", "Paris"},
            {"days", 3},
            {"scale", -1.5},
            {"metric", true},
            {"note", nullptr},
            {"tags", {"a", "b"}},
            {"opts", {{"deep", false}, {"n", {1, {2, 3}}}}}}}}});
}

TEST(GemmaToolCallsTest, ParallelCallsWithText) {
  check(ToolFormat::kGemma,
        "I'll check both.\n```tool_code\n[get_weather(city='Paris'), get_time(tz='Europe/Paris')]"
        "\n```\n",
        {"I'll check both.",
         {{"get_weather", {{"city", "Paris"}}}, {"get_time", {{"tz", "Europe/Paris"}}}}});
  check(ToolFormat::kGemma, "```tool_code\nprint(a(x=1))\nb(s='it\\'s')\n```",
        {"", {{"a", {{"x", 1}}}, {"b", {{"s", "it's"}}}}});
}

TEST(GemmaToolCallsTest, NonCallsStayContent) {
  const std::string positional = "```tool_code\nget_weather('Paris')\n```";
  check(ToolFormat::kGemma, positional, {positional, {}});
  const std::string code = "```tool_code\nx = 1 + 2\n```";
  check(ToolFormat::kGemma, code, {code, {}});
  const std::string python = "```python\nprint(f(x=1))\n```";
  check(ToolFormat::kGemma, python, {python, {}});
  const std::string unclosed = "```tool_code\nf(x='abc";
  check(ToolFormat::kGemma, unclosed, {unclosed, {}});
}

TEST(ParseToolBodyTest, ArgumentsAreCompactJsonInOrder) {
  auto calls = parse_tool_body(ToolFormat::kHermes,
                               "{\"name\": \"f\", \"arguments\": {\"b\": 1, \"a\": \"x\"}}");
  ASSERT_TRUE(calls.has_value());
  ASSERT_EQ(calls->size(), 1u);
  EXPECT_EQ((*calls)[0].arguments, R"({"b":1,"a":"x"})");
}

}  // namespace
}  // namespace cellm::server
