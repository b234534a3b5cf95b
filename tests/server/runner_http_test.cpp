// The HTTP path over a real Runner (RunnerService, ToyExecutor): a client
// that disconnects mid-stream has its session freed within one engine step,
// a request that fails inside the engine fails alone (the others' outputs do
// not change), and stop strings end choices in the engine. Built into the
// ThreadSanitizer step of CI: the HTTP threads, the engine thread and the
// test thread all meet here.
#include <chrono>
#include <functional>
#include <future>
#include <string>
#include <thread>

#include <gtest/gtest.h>
#include <httplib.h>
#include <nlohmann/json.hpp>

#include "runner_stack.h"
#include "server/http_server.h"
#include "server_harness.h"

namespace cellm::server::testing {
namespace {

using namespace std::chrono_literals;
using nlohmann::json;

// Polls `pred` every few ms for up to `timeout`.
bool within(const std::function<bool()>& pred, std::chrono::milliseconds timeout = 10s) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!pred()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(2ms);
  }
  return true;
}

// The server over a Stack's service on a free port, for the object's lifetime.
struct Served {
  explicit Served(Stack& stack) : server(options()) {
    EXPECT_TRUE(server.bind().is_ok());
    server.set_service(stack.service);
    thread = std::thread([this] { (void)server.serve(); });
  }
  ~Served() {
    server.stop();
    thread.join();
  }
  static ServerOptions options() {
    ServerOptions o;
    o.host = "127.0.0.1";
    o.port = 0;
    return o;
  }
  std::pair<int, json> post(const json& body) {
    httplib::Client c("127.0.0.1", server.port());
    c.set_read_timeout(30, 0);
    auto res = c.Post("/v1/completions", body.dump(), "application/json");
    if (!res) return {0, json()};
    return {res->status, json::parse(res->body, nullptr, false)};
  }
  std::string metrics() {
    httplib::Client c("127.0.0.1", server.port());
    auto res = c.Get("/metrics");
    return res ? res->body : std::string();
  }
  Server server;
  std::thread thread;
};

TEST(RunnerHttpTest, AClientLeavingMidStreamFreesItsSessionWithinOneEngineStep) {
  Stack s(0);  // never EOS
  Served served(s);
  // The prefill step goes through, the first decode parks; then the client
  // leaves.
  s.executor.hold();
  const std::size_t arrived = s.executor.arrivals();
  RawHttp h(served.server.port());
  ASSERT_TRUE(h.connected());
  h.post("/v1/completions",
         json{{"prompt", "go"}, {"stream", true}, {"max_tokens", 400}, {"temperature", 0}}.dump());
  ASSERT_TRUE(s.executor.wait_arrivals(arrived + 1, 10s));
  s.executor.allow(1);
  ASSERT_TRUE(h.read_until("\"text\""));
  ASSERT_TRUE(s.executor.wait_arrivals(arrived + 2, 10s));
  const std::size_t before = s.executor.executed().size();
  h.close();
  // The server notices on its next poll and cancels the request.
  ASSERT_TRUE(within([&] {
    return served.metrics().find(
               "cellm:requests_total{endpoint=\"completions\",outcome=\"cancelled\"} 1\n") !=
           std::string::npos;
  }));
  s.executor.release();
  ASSERT_TRUE(within([&] { return s.executor.open_sessions() == 0; }));
  // The parked step finished; no step after it ran for the session.
  EXPECT_EQ(s.executor.executed().size(), before + 1);
}

TEST(RunnerHttpTest, ARequestThatFailsInTheEngineFailsAlone) {
  Stack s(0);
  s.executor.fail_outputs_of('!');
  Served served(s);
  const json good = {{"prompt", "hello"}, {"max_tokens", 8}, {"temperature", 0}};
  auto [ref_status, ref] = served.post(good);
  ASSERT_EQ(ref_status, 200) << ref.dump();
  const std::string want = ref["choices"][0]["text"];
  ASSERT_EQ(want.size(), 8u);

  // Both in the engine at once: the good one's first step is parked until
  // the bad one has been admitted too.
  s.executor.hold();
  const std::size_t arrived = s.executor.arrivals();
  auto good_reply = std::async(std::launch::async, [&] { return served.post(good); });
  ASSERT_TRUE(s.executor.wait_arrivals(arrived + 1, 10s));
  auto bad_reply = std::async(std::launch::async, [&] {
    return served.post(json{{"prompt", "!bad"}, {"max_tokens", 8}, {"temperature", 0}});
  });
  ASSERT_TRUE(within([&] {
    return served.metrics().find("cellm:num_requests_running 2\n") != std::string::npos;
  }));
  s.executor.release();
  auto [bad_status, bad] = bad_reply.get();
  EXPECT_EQ(bad_status, 500) << bad.dump();
  EXPECT_NE(bad.dump().find("invalid output"), std::string::npos) << bad.dump();
  auto [good_status, got] = good_reply.get();
  ASSERT_EQ(good_status, 200) << got.dump();
  EXPECT_EQ(got["choices"][0]["text"], want);
  EXPECT_EQ(got["choices"][0]["finish_reason"], "length");
  EXPECT_TRUE(within([&] { return s.executor.open_sessions() == 0; }));
  // The server still serves.
  auto [again_status, again] = served.post(good);
  EXPECT_EQ(again_status, 200);
  EXPECT_EQ(again["choices"][0]["text"], want);
}

TEST(RunnerHttpTest, StopStringsEndChoicesInTheEngine) {
  Stack s(0);
  Served served(s);
  const json plain = {{"prompt", "abc"}, {"max_tokens", 12}, {"temperature", 0}, {"n", 2}};
  auto [status, base] = served.post(plain);
  ASSERT_EQ(status, 200) << base.dump();
  const std::string text = base["choices"][0]["text"];
  ASSERT_EQ(text.size(), 12u);
  // Two letters from the middle of the text: the choices stop at their
  // first occurrence, the usage counts the tokens up to the one completing
  // it, and the prompt's session and its clone are closed.
  const std::string stop = text.substr(5, 2);
  json with_stop = plain;
  with_stop["stop"] = {"@@", stop};
  auto [stop_status, r] = served.post(with_stop);
  ASSERT_EQ(stop_status, 200) << r.dump();
  const std::size_t at = text.find(stop);
  for (const auto& c : r["choices"]) {
    EXPECT_EQ(c["text"], text.substr(0, at));
    EXPECT_EQ(c["finish_reason"], "stop");
  }
  EXPECT_EQ(r["usage"]["completion_tokens"], static_cast<int>(2 * (at + stop.size())));
  EXPECT_TRUE(within([&] { return s.executor.open_sessions() == 0; }));
}

}  // namespace
}  // namespace cellm::server::testing
