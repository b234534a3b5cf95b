// Streaming (SSE framing, usage chunk, n choices, failures), the admission
// queue (waiting, 429), client disconnects and server shutdown, against
// FakeService.
#include <future>
#include <map>
#include <string>

#include <gtest/gtest.h>

#include "server_harness.h"

namespace cellm::server::testing {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;

struct Stream {
  int status = 0;
  bool well_formed = false;
  bool done = false;
  std::vector<json> events;  // every payload before [DONE]
  std::map<int, std::string> text;
  std::map<int, std::string> finish;
  std::string headers;
};

Stream read_stream(int port, const std::string& path, const json& body) {
  RawHttp h(port);
  EXPECT_TRUE(h.connected());
  h.post(path, body.dump());
  h.read_all();
  Stream s;
  s.status = h.status();
  s.headers = h.headers();
  const std::vector<std::string> payloads = sse_payloads(h.body(), &s.well_formed);
  for (std::size_t i = 0; i < payloads.size(); ++i) {
    if (payloads[i] == "[DONE]") {
      s.done = i + 1 == payloads.size();
      break;
    }
    json e = json::parse(payloads[i], nullptr, false);
    if (e.is_discarded()) {
      s.well_formed = false;
      continue;
    }
    for (const json& c : e.value("choices", json::array())) {
      const int idx = c["index"];
      if (c.contains("text")) s.text[idx] += c["text"].get<std::string>();
      if (c.contains("delta") && c["delta"].contains("content")) {
        s.text[idx] += c["delta"]["content"].get<std::string>();
      }
      if (!c["finish_reason"].is_null()) s.finish[idx] = c["finish_reason"];
    }
    s.events.push_back(std::move(e));
  }
  return s;
}

TEST(ServerStreamTest, CompletionStreamIsWellFormedSse) {
  TestServer ts;
  Stream s = read_stream(ts.port(), "/v1/completions", json{{"prompt", "a"}, {"stream", true}});
  EXPECT_EQ(s.status, 200);
  EXPECT_NE(s.headers.find("text/event-stream"), std::string::npos) << s.headers;
  EXPECT_TRUE(s.well_formed);
  EXPECT_TRUE(s.done);
  EXPECT_EQ(s.text[0], "Hello world! #0");
  EXPECT_EQ(s.finish[0], "stop");
  ASSERT_FALSE(s.events.empty());
  const std::string id = s.events[0]["id"];
  for (const json& e : s.events) {
    EXPECT_EQ(e["object"], "text_completion");
    EXPECT_EQ(e["id"], id);  // one id for the whole stream
    EXPECT_FALSE(e.contains("usage"));
  }
  // Exactly one event carries the finish reason, and it is the last.
  EXPECT_FALSE(s.events.back()["choices"][0]["finish_reason"].is_null());
}

TEST(ServerStreamTest, ChatStreamStartsWithTheRoleAndEndsWithUsage) {
  TestServer ts;
  Stream s =
      read_stream(ts.port(), "/v1/chat/completions",
                  json{{"messages", json::array({json{{"role", "user"}, {"content", "Hi"}}})},
                       {"stream", true},
                       {"stream_options", {{"include_usage", true}}},
                       {"max_tokens", 5}});
  EXPECT_EQ(s.status, 200);
  EXPECT_TRUE(s.well_formed);
  EXPECT_TRUE(s.done);
  ASSERT_GE(s.events.size(), 3u);
  EXPECT_EQ(s.events[0]["object"], "chat.completion.chunk");
  EXPECT_EQ(s.events[0]["choices"][0]["delta"]["role"], "assistant");
  for (std::size_t i = 1; i + 1 < s.events.size(); ++i) {
    EXPECT_FALSE(s.events[i]["choices"][0]["delta"].contains("role"));
    EXPECT_TRUE(s.events[i]["usage"].is_null());
  }
  const json& last = s.events.back();
  EXPECT_TRUE(last["choices"].empty());
  EXPECT_EQ(last["usage"]["completion_tokens"], 5);
  EXPECT_EQ(last["usage"]["prompt_tokens"], std::string("user: Hi\nassistant: ").size());
  EXPECT_EQ(s.text[0], "Hello");
  EXPECT_EQ(s.finish[0], "length");
}

TEST(ServerStreamTest, StreamedChoicesAndStopStrings) {
  TestServer ts;
  Stream s = read_stream(ts.port(), "/v1/completions",
                         json{{"prompt", "a"},
                              {"stream", true},
                              {"n", 2},
                              {"stop", "! #1"},
                              {"stream_options", {{"include_usage", true}}}});
  EXPECT_TRUE(s.well_formed);
  EXPECT_TRUE(s.done);
  // Choice 1 hits the stop string, choice 0 does not.
  EXPECT_EQ(s.text[0], "Hello world! #0");
  EXPECT_EQ(s.finish[0], "stop");
  EXPECT_EQ(s.text[1], "Hello world");
  EXPECT_EQ(s.finish[1], "stop");
  EXPECT_EQ(s.events.back()["usage"]["completion_tokens"], 16 + 15);
  EXPECT_TRUE(FakeService::eventually([&] { return ts.service().live_jobs() == 0; }));
}

TEST(ServerStreamTest, FailureMidStreamSendsAnErrorEventThenDone) {
  FakeService::Knobs k;
  k.fail_after = 4;
  TestServer ts({}, k);
  Stream s = read_stream(ts.port(), "/v1/completions", json{{"prompt", "a"}, {"stream", true}});
  EXPECT_EQ(s.status, 200);
  EXPECT_TRUE(s.well_formed);
  EXPECT_TRUE(s.done);
  EXPECT_EQ(s.text[0], "Hell");
  ASSERT_FALSE(s.events.empty());
  EXPECT_TRUE(s.events.back().contains("error")) << s.events.back().dump();
}

TEST(ServerStreamTest, ClientDisconnectCancelsTheStreamAndFreesCapacity) {
  FakeService::Knobs k;
  k.step = 20ms;
  k.context = 100000;
  k.reply = [](const GenerationSpec&, std::int32_t) { return std::string(500, 'z'); };
  ServerOptions o;
  o.max_running = 1;
  TestServer ts(o, k);
  {
    RawHttp h(ts.port());
    h.post("/v1/completions", json{{"prompt", "a"}, {"stream", true}}.dump());
    ASSERT_TRUE(h.read_until("\"z\""));
    EXPECT_EQ(ts.service().live_jobs(), 1);
    h.close();
  }
  const auto closed_at = std::chrono::steady_clock::now();
  ASSERT_TRUE(FakeService::eventually([&] { return ts.service().live_jobs() == 0; }, 5s));
  // Noticed by polling the socket, within a few engine steps.
  EXPECT_LT(std::chrono::steady_clock::now() - closed_at, 1s);
  EXPECT_EQ(ts.service().cancelled_choices(), 1);
  // The slot is free again: a new request is admitted at once.
  k.step = 1ms;
  JsonReply r = ts.post("/v1/completions", json{{"prompt", "a"}, {"max_tokens", 2}});
  EXPECT_EQ(r.status, 200) << r.raw;
  const std::string m = ts.get("/metrics").raw;
  EXPECT_NE(m.find("cellm:requests_total{endpoint=\"completions\",outcome=\"cancelled\"} 1\n"),
            std::string::npos)
      << m;
}

TEST(ServerStreamTest, ClientDisconnectCancelsANonStreamingRequest) {
  FakeService::Knobs k;
  k.step = 20ms;
  k.context = 100000;
  k.reply = [](const GenerationSpec&, std::int32_t) { return std::string(500, 'z'); };
  TestServer ts({}, k);
  {
    RawHttp h(ts.port());
    h.post("/v1/completions", json{{"prompt", "a"}}.dump());
    ASSERT_TRUE(FakeService::eventually([&] { return ts.service().live_jobs() == 1; }));
    h.close();
  }
  ASSERT_TRUE(FakeService::eventually([&] { return ts.service().live_jobs() == 0; }, 5s));
  EXPECT_EQ(ts.service().cancelled_choices(), 1);
}

TEST(ServerStreamTest, RequestsQueueAtCapacityAndOverflowIs429) {
  ServerOptions o;
  o.max_running = 1;
  o.max_queue = 1;
  TestServer ts(o);
  ts.service().hold();
  auto first = std::async(std::launch::async, [&] {
    return ts.post("/v1/completions", json{{"prompt", "1"}});
  });
  ASSERT_TRUE(FakeService::eventually([&] { return ts.service().live_jobs() == 1; }));
  auto second = std::async(std::launch::async, [&] {
    return ts.post("/v1/completions", json{{"prompt", "2"}});
  });
  ASSERT_TRUE(FakeService::eventually([&] {
    return ts.get("/metrics").raw.find("cellm:num_requests_waiting 1\n") != std::string::npos;
  }));
  JsonReply third = ts.post("/v1/completions", json{{"prompt", "3"}});
  EXPECT_EQ(third.status, 429) << third.raw;
  EXPECT_EQ(third.body["error"]["type"], "rate_limit_error");
  EXPECT_EQ(ts.service().specs().size(), 1u);  // the waiting one has not started
  ts.service().release();
  EXPECT_EQ(first.get().status, 200);
  EXPECT_EQ(second.get().status, 200);
  EXPECT_EQ(ts.service().specs().size(), 2u);
  const std::string m = ts.get("/metrics").raw;
  EXPECT_NE(m.find("outcome=\"queue_full\"} 1\n"), std::string::npos) << m;
  EXPECT_NE(m.find("cellm:num_requests_waiting 0\n"), std::string::npos);
}

TEST(ServerStreamTest, StopCancelsWhatOutlivesTheDrainAndRefusesNewWork) {
  FakeService::Knobs k;
  k.step = 10ms;
  k.context = 100000;
  k.reply = [](const GenerationSpec&, std::int32_t) { return std::string(2000, 'z'); };
  ServerOptions o;
  o.drain_timeout = 200ms;
  TestServer ts(o, k);
  RawHttp h(ts.port());
  h.post("/v1/completions", json{{"prompt", "a"}, {"stream", true}}.dump());
  ASSERT_TRUE(h.read_until("\"z\""));
  auto stopped = std::async(std::launch::async, [&] { ts.stop(); });
  h.read_all();
  stopped.get();
  bool well_formed = false;
  const auto payloads = sse_payloads(h.body(), &well_formed);
  EXPECT_TRUE(well_formed);
  ASSERT_GE(payloads.size(), 2u);
  EXPECT_EQ(payloads.back(), "[DONE]");
  const json last = json::parse(payloads[payloads.size() - 2]);
  EXPECT_EQ(last["choices"][0]["finish_reason"], "abort");
  EXPECT_TRUE(ts.serve_status().is_ok());
  EXPECT_EQ(ts.service().live_jobs(), 0);
}

TEST(ServerStreamTest, StopLetsShortRequestsFinish) {
  FakeService::Knobs k;
  k.step = 5ms;
  TestServer ts({}, k);
  ts.service().hold();
  auto inflight = std::async(std::launch::async, [&] {
    return ts.post("/v1/completions", json{{"prompt", "a"}});
  });
  ASSERT_TRUE(FakeService::eventually([&] { return ts.service().live_jobs() == 1; }));
  auto stopped = std::async(std::launch::async, [&] { ts.stop(); });
  std::this_thread::sleep_for(50ms);
  ts.service().release();
  JsonReply r = inflight.get();
  stopped.get();
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body["choices"][0]["finish_reason"], "stop");
}

// stop() that begins while a request is still starting (admitted, its
// generation being created) drains that request like a running one: before
// runs were registered ahead of their start, stop() found none, skipped the
// drain and aborted the request the moment it registered.
TEST(ServerStreamTest, StopDrainsARequestThatIsStillStarting) {
  TestServer ts;
  ts.service().hold_start();
  auto inflight = std::async(std::launch::async, [&] {
    return ts.post("/v1/completions", json{{"prompt", "a"}});
  });
  ASSERT_TRUE(FakeService::eventually([&] { return ts.service().starts_waiting() == 1; }));
  auto stopped = std::async(std::launch::async, [&] { ts.stop(); });
  // Draining: /health answers 503 while stop() waits for running requests.
  ASSERT_TRUE(FakeService::eventually([&] { return ts.get("/health").status == 503; }));
  ts.service().release_start();
  JsonReply r = inflight.get();
  stopped.get();
  EXPECT_EQ(r.status, 200) << r.raw;
  EXPECT_EQ(r.body["choices"][0]["finish_reason"], "stop") << r.raw;
  EXPECT_EQ(ts.service().live_jobs(), 0);
}

}  // namespace
}  // namespace cellm::server::testing
