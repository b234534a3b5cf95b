// Streamed tool calls (tool_calls.h's streaming contract; the JSON prefix
// scanner under them is json_prefix_test.cpp's):
//   * recorded-style outputs of every format fed whole, split at every byte
//     position, byte by byte and at random splits (fixed seed): the argument
//     pieces of each call concatenate to the one-shot parse's arguments byte
//     for byte (the model's own text, found verbatim in the output), each
//     boundary leaves a valid JSON prefix and a whole UTF-8 text, names, ids
//     and indices agree, and the arguments mean what parse_tool_body reads;
//   * the documented fate of calls that start and then break or are cut.
#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "json_prefix_feed.h"
#include "server/json_prefix.h"
#include "server/tool_calls.h"

namespace cellm::server {
namespace {

using nlohmann::json;

bool valid_utf8(const std::string& s) {
  try {
    (void)json(s).dump();  // the default error handler throws on invalid UTF-8
    return true;
  } catch (const json::exception&) {
    return false;
  }
}

// ---- streamed calls -------------------------------------------------------------

struct StreamedCall {
  std::string id;
  std::string name;
  std::vector<std::string> pieces;  // argument pieces, in order
  std::string arguments() const {
    std::string all;
    for (const std::string& p : pieces) all += p;
    return all;
  }
};

struct Streamed {
  std::string content;
  std::vector<StreamedCall> calls;
  std::vector<bool> complete;  // from calls()
  bool all_complete = false;
};

// Feeds `pieces`, checking the event order and that each argument piece
// leaves the call's arguments a valid JSON prefix of whole UTF-8.
Streamed stream(ToolFormat format, const std::vector<std::string>& pieces) {
  ToolCallParser parser(format);
  Streamed out;
  std::vector<JsonPrefixScanner> scanners;
  const auto take = [&](const ToolParse& p) {
    for (const ToolEvent& e : p.events) {
      switch (e.kind) {
        case ToolEvent::Kind::kContent: out.content += e.text; break;
        case ToolEvent::Kind::kCallStart:
          EXPECT_EQ(e.index, static_cast<std::int32_t>(out.calls.size()));
          out.calls.push_back({e.id, e.name, {}});
          scanners.emplace_back();
          break;
        case ToolEvent::Kind::kArguments: {
          ASSERT_FALSE(out.calls.empty());
          ASSERT_EQ(e.index, static_cast<std::int32_t>(out.calls.size()) - 1)
              << "a piece after the next call started";
          EXPECT_FALSE(e.text.empty());
          EXPECT_TRUE(valid_utf8(e.text)) << "a piece splits a character";
          out.calls.back().pieces.push_back(e.text);
          EXPECT_EQ(accepted(e.text, &scanners.back()), e.text.size())
              << "not a JSON prefix: " << out.calls.back().arguments();
          break;
        }
      }
    }
  };
  for (const std::string& piece : pieces) take(parser.push(piece));
  take(parser.finish());
  EXPECT_EQ(out.calls.size(), parser.calls().size());
  for (std::size_t i = 0; i < out.calls.size() && i < parser.calls().size(); ++i) {
    const ToolCall& c = parser.calls()[i];
    EXPECT_EQ(c.index, static_cast<std::int32_t>(i));
    EXPECT_EQ(c.id, out.calls[i].id);
    EXPECT_EQ(c.name, out.calls[i].name);
    EXPECT_EQ(c.arguments, out.calls[i].arguments());
    out.complete.push_back(c.complete);
    // A complete call's arguments are a whole JSON object.
    if (c.complete) {
      EXPECT_TRUE(scanners[i].done()) << c.arguments;
      EXPECT_TRUE(json::parse(c.arguments, nullptr, false).is_object()) << c.arguments;
    }
  }
  out.all_complete = parser.all_calls_complete();
  return out;
}

std::vector<std::vector<std::string>> feeds(const std::string& output, int random_splits) {
  std::vector<std::vector<std::string>> all;
  all.push_back({output});
  std::vector<std::string> bytes;
  for (char c : output) bytes.emplace_back(1, c);
  all.push_back(bytes);
  for (std::size_t cut = 0; cut <= output.size(); ++cut) {
    all.push_back({output.substr(0, cut), output.substr(cut)});
  }
  std::mt19937_64 rng(20261207);
  for (int r = 0; r < random_splits; ++r) {
    std::vector<std::string> pieces;
    std::size_t at = 0;
    while (at < output.size()) {
      const std::size_t n = std::min<std::size_t>(1 + rng() % 7, output.size() - at);
      pieces.push_back(output.substr(at, n));
      at += n;
    }
    all.push_back(pieces);
  }
  return all;
}

// Every feed of `output` streams what the whole output does.
void check_stable(ToolFormat format, const std::string& output, const Streamed& whole) {
  for (const std::vector<std::string>& feed : feeds(output, 200)) {
    SCOPED_TRACE(::testing::Message() << feed.size() << " pieces, first '" << feed.front() << "'");
    const Streamed s = stream(format, feed);
    EXPECT_EQ(s.content, whole.content);
    ASSERT_EQ(s.calls.size(), whole.calls.size());
    for (std::size_t i = 0; i < s.calls.size(); ++i) {
      EXPECT_EQ(s.calls[i].name, whole.calls[i].name);
      EXPECT_EQ(s.calls[i].arguments(), whole.calls[i].arguments());
    }
    EXPECT_EQ(s.complete, whole.complete);
    EXPECT_EQ(s.all_complete, whole.all_complete);
  }
}

struct Recorded {
  ToolFormat format;
  std::string output;
  std::string content;
  // The block bodies parse_tool_body reads independently, in order; their
  // calls are the reply's.
  std::vector<std::string> bodies;
};

std::vector<Recorded> recorded() {
  return {
      {ToolFormat::kHermes,
       "<think>\nTwo cities; the tool takes one.\n</think>\n\n<tool_call>\n{\"name\": "
       "\"get_weather\", \"arguments\": {\"city\": \"São Paulo\", \"note\": \"say \\\"hi\\\" {not "
       "a brace} [nor this]\", \"days\": [1, 2, {\"x\": null}]}}\n</tool_call>\n<tool_call>\n"
       "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"東京\", \"emoji\": \"😀\"}}\n"
       "</tool_call>",
       "<think>\nTwo cities; the tool takes one.\n</think>",
       {"{\"name\": \"get_weather\", \"arguments\": {\"city\": \"São Paulo\", \"note\": \"say "
        "\\\"hi\\\" {not a brace} [nor this]\", \"days\": [1, 2, {\"x\": null}]}}",
        "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"東京\", \"emoji\": \"😀\"}}"}},
      {ToolFormat::kHermes,
       "Checking.\n<tool_call>\n{\"arguments\": {\"q\": \"a\\\\b\"}, \"name\": \"search\"}\n"
       "</tool_call>\nOne moment.",
       "Checking.\nOne moment.",
       {"{\"arguments\": {\"q\": \"a\\\\b\"}, \"name\": \"search\"}"}},
      {ToolFormat::kHermes,
       "<tool_call>{\"name\": \"set\", \"arguments\": \"{\\\"x\\\": [1, 2]}\"}</tool_call>"
       "<tool_call>{\"name\": \"now\"}</tool_call>",
       "",
       {"{\"name\": \"set\", \"arguments\": \"{\\\"x\\\": [1, 2]}\"}", "{\"name\": \"now\"}"}},
      {ToolFormat::kLlama3,
       "<|python_tag|>{\"name\": \"add\", \"parameters\": {\"a\": -12.5e1, \"b\": 40, \"opts\": "
       "{\"round\": true, \"tags\": [\"x\", \"}\"]}}}; {\"name\": \"get_time\", \"parameters\": "
       "{\"tz\": \"Europe/Paris\"}}",
       "",
       {"{\"name\": \"add\", \"parameters\": {\"a\": -12.5e1, \"b\": 40, \"opts\": {\"round\": "
        "true, \"tags\": [\"x\", \"}\"]}}}",
        "{\"name\": \"get_time\", \"parameters\": {\"tz\": \"Europe/Paris\"}}"}},
      {ToolFormat::kLlama3,
       "\n{\"name\": \"get_weather\", \"parameters\": {\"city\": \"San Francisco, CA\"}}\n",
       "",
       {"{\"name\": \"get_weather\", \"parameters\": {\"city\": \"San Francisco, CA\"}}"}},
      {ToolFormat::kMistral,
       "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": "
       "\"celsius\"}}, {\"name\": \"add\", \"arguments\": {\"a\": 2, \"b\": 40}}]",
       "",
       {"[{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": "
        "\"celsius\"}}, {\"name\": \"add\", \"arguments\": {\"a\": 2, \"b\": 40}}]"}},
      {ToolFormat::kMistral,
       "I will check.[TOOL_CALLS] [ {\"name\": \"f\", \"arguments\": {\"n\": [ ] , \"m\" : { } }} ]"
       " Done.",
       "I will check. Done.",
       {"[ {\"name\": \"f\", \"arguments\": {\"n\": [ ] , \"m\" : { } }} ]"}},
      {ToolFormat::kGemma,
       "I'll check both.\n```tool_code\n[get_weather(city='Paris'), get_time(tz='Europe/Paris')]"
       "\n```\n",
       "I'll check both.",
       {"\n[get_weather(city='Paris'), get_time(tz='Europe/Paris')]\n"}},
  };
}

TEST(ToolStreamTest, RecordedOutputsStreamTheOneShotCallsAtEverySplit) {
  for (const Recorded& r : recorded()) {
    SCOPED_TRACE(std::string(tool_format_name(r.format)) + ": " + r.output);
    const Streamed whole = stream(r.format, {r.output});
    EXPECT_EQ(whole.content, r.content);
    EXPECT_TRUE(whole.all_complete);
    // The calls mean what the one-shot body parser reads.
    std::vector<ParsedCall> want;
    for (const std::string& body : r.bodies) {
      auto parsed = parse_tool_body(r.format, body);
      ASSERT_TRUE(parsed.has_value()) << body;
      want.insert(want.end(), parsed->begin(), parsed->end());
    }
    ASSERT_EQ(whole.calls.size(), want.size());
    std::vector<std::string> ids;
    for (std::size_t i = 0; i < want.size(); ++i) {
      EXPECT_EQ(whole.calls[i].name, want[i].name);
      EXPECT_EQ(json::parse(whole.calls[i].arguments()), json::parse(want[i].arguments));
      ids.push_back(whole.calls[i].id);
      // JSON formats: the model's own text (object arguments appear verbatim).
      if (r.format != ToolFormat::kGemma && r.output.find("\"{") == std::string::npos) {
        EXPECT_NE(r.output.find(whole.calls[i].arguments()), std::string::npos)
            << whole.calls[i].arguments();
      }
    }
    std::sort(ids.begin(), ids.end());
    EXPECT_EQ(std::unique(ids.begin(), ids.end()), ids.end()) << "ids are unique";
    check_stable(r.format, r.output, whole);
  }
}

TEST(ToolStreamTest, ArgumentsArriveWhileTheyAreWritten) {
  for (const Recorded& r : recorded()) {
    SCOPED_TRACE(r.output);
    std::vector<std::string> bytes;
    for (char c : r.output) bytes.emplace_back(1, c);
    const Streamed s = stream(r.format, bytes);
    ASSERT_FALSE(s.calls.empty());
    const std::string& args = s.calls[0].arguments();
    if (r.format == ToolFormat::kGemma || args.find('"') == std::string::npos ||
        r.output.find("\"{") != std::string::npos) {
      // Python-style calls, and arguments given as a JSON string, come whole.
      EXPECT_EQ(s.calls[0].pieces.size(), 1u);
      continue;
    }
    // Byte by byte: one piece per whole character of the arguments (the
    // call started before them, when its name closed) or, when the name
    // comes after them, everything so far at once, then nothing.
    const bool name_first = r.output.find("\"name\"") < r.output.find(args);
    if (name_first) {
      std::size_t chars = 0;
      for (char c : args) chars += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
      EXPECT_EQ(s.calls[0].pieces.size(), chars);
    } else {
      EXPECT_EQ(s.calls[0].pieces.size(), 1u);
    }
  }
}

TEST(ToolStreamTest, CallStartsWhenItsNameCloses) {
  const std::string output =
      "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
      "\"Paris\"}}\n</tool_call>";
  const std::size_t name_end =
      output.find("\"get_weather\"") + std::string("\"get_weather\"").size();
  ToolCallParser parser(ToolFormat::kHermes);
  for (std::size_t i = 0; i < output.size(); ++i) {
    const ToolParse p = parser.push(output.substr(i, 1));
    const bool started = !parser.calls().empty();
    EXPECT_EQ(started, i + 1 >= name_end) << "after byte " << i;
    if (i + 1 == name_end) {
      ASSERT_EQ(p.events.size(), 1u);
      EXPECT_EQ(p.events[0].kind, ToolEvent::Kind::kCallStart);
      EXPECT_EQ(p.events[0].name, "get_weather");
    }
  }
}

// ---- calls that start and then break -----------------------------------------

struct Broken {
  ToolFormat format;
  std::string output;
  std::string content;
  std::vector<std::string> names;
  std::string last_arguments;  // what the broken (last) call got
};

TEST(ToolStreamTest, StartedCallsThatBreakStayAsStreamedAndEndTheReply) {
  const std::vector<Broken> cases = {
      // Bad JSON mid-arguments; the rest of the output is dropped.
      {ToolFormat::kHermes,
       "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": }\n</tool_call>\nLater text",
       "",
       {"f"},
       "{\"a\": "},
      // Cut by max_tokens mid-arguments; the text before the block stays.
      {ToolFormat::kHermes,
       "Sure. <tool_call>\n{\"name\": \"f\", \"arguments\": {\"city\": \"Par",
       "Sure.",
       {"f"},
       "{\"city\": \"Par"},
      // Cut right after the name: the call started with nothing yet.
      {ToolFormat::kHermes, "<tool_call>\n{\"name\": \"f\", \"argu", "", {"f"}, ""},
      // Arguments that are not an object, or a string that holds none.
      {ToolFormat::kHermes,
       "<tool_call>{\"name\": \"f\", \"arguments\": [1]}</tool_call>",
       "",
       {"f"},
       ""},
      {ToolFormat::kHermes,
       "<tool_call>{\"name\": \"f\", \"arguments\": \"[1]\"}</tool_call>",
       "",
       {"f"},
       ""},
      // A whole call, then one cut: the reply is not a finished set of calls.
      {ToolFormat::kLlama3,
       "{\"name\": \"a\", \"parameters\": {\"x\": 1}}; {\"name\": \"b\", \"parameters\": {\"y\": "
       "[1, 2",
       "",
       {"a", "b"},
       "{\"y\": [1, 2"},
      {ToolFormat::kMistral,
       "[TOOL_CALLS][{\"name\": \"a\", \"arguments\": {}}, {\"name\": \"b\", \"arguments\": "
       "{\"s\": \"é",
       "",
       {"a", "b"},
       "{\"s\": \"é"},
      // Closed, but a number beyond double's range: JSON parsers refuse it
      // (found by server_tool_stream_fuzz).
      {ToolFormat::kLlama3,
       "<|python_tag|>{\"name\": \"f\", \"parameters\": {\"a\": -2.5e400}}",
       "",
       {"f"},
       "{\"a\": -2.5e400}"},
  };
  for (const Broken& b : cases) {
    SCOPED_TRACE(b.output);
    const Streamed whole = stream(b.format, {b.output});
    EXPECT_EQ(whole.content, b.content);
    ASSERT_EQ(whole.calls.size(), b.names.size());
    for (std::size_t i = 0; i < b.names.size(); ++i) EXPECT_EQ(whole.calls[i].name, b.names[i]);
    EXPECT_EQ(whole.calls.back().arguments(), b.last_arguments);
    EXPECT_FALSE(whole.complete.back());
    for (std::size_t i = 0; i + 1 < whole.complete.size(); ++i) EXPECT_TRUE(whole.complete[i]);
    EXPECT_FALSE(whole.all_complete);
    check_stable(b.format, b.output, whole);
  }
}

// A reply that opens like a bare JSON call after leading whitespace, breaks
// off, then tags a real call. Found by fuzzing: with the whitespace as long
// as the broken text, the whole-reply feed read the marker test through a
// view the whitespace's removal had shifted, so it took the tag for the
// block's opening and released the real call as text, while split feeds
// streamed it.
TEST(ToolStreamTest, ABrokenBareCallAfterWhitespaceDoesNotHideATaggedCall) {
  const std::string output =
      "       {\"q\":x <|python_tag|>{\"name\": \"add\", \"parameters\": {\"a\": 1}}";
  const Streamed whole = stream(ToolFormat::kLlama3, {output});
  ASSERT_EQ(whole.calls.size(), 1u) << whole.content;
  EXPECT_EQ(whole.calls[0].name, "add");
  EXPECT_EQ(whole.calls[0].arguments(), "{\"a\": 1}");
  EXPECT_EQ(whole.complete, std::vector<bool>{true});
  EXPECT_EQ(whole.content, "       {\"q\":x");
  check_stable(ToolFormat::kLlama3, output, whole);
}

TEST(ToolStreamTest, AllCallsCompleteNeedsACall) {
  ToolCallParser parser(ToolFormat::kHermes);
  (void)parser.push("Just text.");
  (void)parser.finish();
  EXPECT_FALSE(parser.all_calls_complete());
}

}  // namespace
}  // namespace cellm::server
