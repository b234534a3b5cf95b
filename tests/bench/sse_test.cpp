// The event-stream parser of `cellm bench serve` over HTTP: line ends of every
// kind, events split at every byte, comments and foreign fields, the bound on
// a line, and the interpretation of an OpenAI completion chunk.
#include "bench/sse.h"

#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "bench/http_client.h"

namespace cellm::bench {
namespace {

std::vector<std::string> parse_whole(std::string_view body, SseParser& parser) {
  std::vector<std::string> events;
  parser.feed(body, [&](std::string_view d) {
    events.emplace_back(d);
    return true;
  });
  return events;
}

std::vector<std::string> parse_whole(std::string_view body) {
  SseParser parser;
  return parse_whole(body, parser);
}

TEST(SseParserTest, DataLinesOfOneEventJoinWithNewlines) {
  const auto events = parse_whole("data: a\ndata:b\ndata:  c\n\ndata: second\n\n");
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0], "a\nb\n c");  // one leading space is dropped, not two
  EXPECT_EQ(events[1], "second");
}

TEST(SseParserTest, EveryLineEndIsALineEnd) {
  for (const char* body : {"data: x\n\ndata: y\n\n", "data: x\r\n\r\ndata: y\r\n\r\n",
                           "data: x\r\rdata: y\r\r", "data: x\r\n\ndata: y\n\r\n"}) {
    const auto events = parse_whole(body);
    ASSERT_EQ(events.size(), 2u) << body;
    EXPECT_EQ(events[0], "x");
    EXPECT_EQ(events[1], "y");
  }
}

TEST(SseParserTest, CommentsAndOtherFieldsAreIgnored) {
  const auto events =
      parse_whole(": keep-alive\n\nevent: message\nid: 7\nretry: 10\ndata: only\nfoo: bar\n\n");
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0], "only");
}

TEST(SseParserTest, AFieldWithoutColonAndAnEmptyDataAreKept) {
  const auto events = parse_whole("data\n\ndata:\n\n");
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0], "");
  EXPECT_EQ(events[1], "");
}

TEST(SseParserTest, SplittingAtEveryByteGivesTheSameEvents) {
  const std::string body =
      "data: {\"choices\":[{\"text\":\" hi\"}]}\r\n\r\n: ping\r\ndata: two\r\ndata: lines\r\n\r\n"
      "data: [DONE]\n\n";
  const auto whole = parse_whole(body);
  ASSERT_EQ(whole.size(), 3u);
  for (std::size_t a = 0; a <= body.size(); ++a) {
    for (std::size_t b = a; b <= body.size(); b += 3) {
      SseParser parser;
      std::vector<std::string> events;
      auto sink = [&](std::string_view d) {
        events.emplace_back(d);
        return true;
      };
      parser.feed(std::string_view(body).substr(0, a), sink);
      parser.feed(std::string_view(body).substr(a, b - a), sink);
      parser.feed(std::string_view(body).substr(b), sink);
      ASSERT_EQ(events, whole) << "split at " << a << " and " << b;
      EXPECT_TRUE(parser.finish());
    }
  }
}

TEST(SseParserTest, AnEventWithoutItsBlankLineIsDroppedAndReported) {
  SseParser parser;
  EXPECT_TRUE(parse_whole("data: whole\n\ndata: cut", parser).size() == 1);
  EXPECT_FALSE(parser.finish());  // ended inside a line
  SseParser complete_line;
  EXPECT_TRUE(parse_whole("data: whole\n\ndata: pending\n", complete_line).size() == 1);
  EXPECT_TRUE(complete_line.finish());  // the pending event is dropped, as SSE says
}

TEST(SseParserTest, ALineLongerThanTheLimitFailsInsteadOfGrowing) {
  SseParser parser(16);
  int events = 0;
  auto sink = [&](std::string_view) {
    ++events;
    return true;
  };
  EXPECT_TRUE(parser.feed("data: short\n\n", sink));
  EXPECT_TRUE(parser.feed("data: 0123456", sink));
  EXPECT_FALSE(parser.feed("789abcdef", sink));
  EXPECT_TRUE(parser.failed());
  EXPECT_NE(parser.error().find("16 bytes"), std::string::npos) << parser.error();
  EXPECT_FALSE(parser.feed("\n\ndata: more\n\n", sink));  // ignored once failed
  EXPECT_EQ(events, 1);
  // Many data lines of one event are bounded too.
  SseParser joined(16);
  EXPECT_FALSE(joined.feed("data: 0123456789\ndata: 0123456789\n", sink));
}

TEST(SseParserTest, ACallbackCanStopTheStream) {
  SseParser parser;
  int seen = 0;
  EXPECT_FALSE(parser.feed("data: 1\n\ndata: 2\n\n", [&](std::string_view) {
    ++seen;
    return false;
  }));
  EXPECT_EQ(seen, 1);
}

TEST(StreamEventTest, ReadsTextFinishUsageDoneAndErrors) {
  StreamEvent e = interpret_event(
      R"({"choices":[{"index":0,"text":" the","finish_reason":null}],"usage":null})");
  EXPECT_EQ(e.kind, StreamEvent::Kind::kChunk);
  EXPECT_TRUE(e.has_text);
  EXPECT_TRUE(e.finish_reason.empty());
  EXPECT_EQ(e.completion_tokens, -1);

  e = interpret_event(R"({"choices":[{"index":0,"text":"","finish_reason":"length"}]})");
  EXPECT_FALSE(e.has_text);
  EXPECT_EQ(e.finish_reason, "length");

  e = interpret_event(
      R"({"choices":[],"usage":{"prompt_tokens":16,"completion_tokens":8,"total_tokens":24}})");
  EXPECT_EQ(e.prompt_tokens, 16);
  EXPECT_EQ(e.completion_tokens, 8);

  EXPECT_EQ(interpret_event("[DONE]").kind, StreamEvent::Kind::kDone);
  e = interpret_event(R"({"error":{"message":"boom","type":"server_error"}})");
  EXPECT_EQ(e.kind, StreamEvent::Kind::kError);
  EXPECT_EQ(e.message, "boom");
  EXPECT_EQ(interpret_event("{not json").kind, StreamEvent::Kind::kMalformed);
  EXPECT_EQ(interpret_event("[1,2]").kind, StreamEvent::Kind::kMalformed);
  // Wrong types are ignored rather than trusted.
  e = interpret_event(
      R"({"choices":[{"text":5,"finish_reason":3}],"usage":{"completion_tokens":"8"}})");
  EXPECT_EQ(e.kind, StreamEvent::Kind::kChunk);
  EXPECT_FALSE(e.has_text);
  EXPECT_EQ(e.completion_tokens, -1);
}

}  // namespace
}  // namespace cellm::bench
