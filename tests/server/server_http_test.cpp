// The HTTP layer against FakeService: routes, request validation and error
// bodies, non-streaming completions and chat, n, stop strings, metrics.
#include <string>

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include "server/listen_socket.h"
#include "server_harness.h"

namespace cellm::server::testing {
namespace {

using nlohmann::json;

void expect_error(const JsonReply& r, int status, const std::string& param,
                  const std::string& message_part = {}) {
  EXPECT_EQ(r.status, status) << r.raw;
  ASSERT_TRUE(r.body.is_object()) << r.raw;
  ASSERT_TRUE(r.body.contains("error")) << r.raw;
  const json& e = r.body["error"];
  EXPECT_TRUE(e["message"].is_string());
  EXPECT_FALSE(e["message"].get<std::string>().empty());
  if (param.empty()) {
    EXPECT_TRUE(e["param"].is_null()) << r.raw;
  } else {
    EXPECT_EQ(e["param"], param) << r.raw;
  }
  if (!message_part.empty()) {
    EXPECT_NE(e["message"].get<std::string>().find(message_part), std::string::npos) << r.raw;
  }
}

TEST(ServerHttpTest, HealthIs503WhileLoadingAnd200WhenReady) {
  TestServer ts({}, {}, /*ready=*/false);
  JsonReply h = ts.get("/health");
  EXPECT_EQ(h.status, 503);
  EXPECT_EQ(h.body["status"], "loading");
  expect_error(ts.post("/v1/completions", json{{"prompt", "hi"}}), 503, "", "loading");
  expect_error(ts.get("/v1/models"), 503, "");
  EXPECT_EQ(ts.service().specs().size(), 0u);
  ts.make_ready();
  EXPECT_EQ(ts.get("/health").status, 200);
  EXPECT_EQ(ts.post("/v1/completions", json{{"prompt", "hi"}}).status, 200);
}

TEST(ServerHttpTest, FailedLoadIsReportedByHealth) {
  TestServer ts({}, {}, /*ready=*/false);
  ts.server().set_load_failed("weights file truncated");
  JsonReply h = ts.get("/health");
  EXPECT_EQ(h.status, 500);
  EXPECT_EQ(h.body["error"], "weights file truncated");
  expect_error(ts.post("/v1/chat/completions", json{{"messages", json::array()}}), 503, "",
               "weights file truncated");
}

TEST(ServerHttpTest, UnknownRouteIs404WithErrorBody) {
  TestServer ts;
  JsonReply r = ts.get("/v2/nothing");
  expect_error(r, 404, "", "/v2/nothing");
  EXPECT_EQ(r.body["error"]["type"], "invalid_request_error");
  expect_error(ts.post("/v1/embeddings", json::object()), 404, "");
}

TEST(ServerHttpTest, OversizedBodyIs413) {
  ServerOptions o;
  o.body_limit = 1024;
  TestServer ts(o);
  const std::string big = json{{"prompt", std::string(3000, 'a')}}.dump();
  JsonReply r = ts.post("/v1/completions", big);
  EXPECT_EQ(r.status, 413) << r.raw;
  EXPECT_NE(r.raw.find("1024"), std::string::npos) << r.raw;
  EXPECT_EQ(ts.service().specs().size(), 0u);
  // A body under the limit still works on the same server.
  EXPECT_EQ(ts.post("/v1/completions", json{{"prompt", "ok"}}).status, 200);
}

TEST(ServerHttpTest, MalformedAndMistypedBodiesAre400WithTheParam) {
  TestServer ts;
  expect_error(ts.post("/v1/completions", std::string("{\"prompt\": ")), 400, "", "JSON");
  expect_error(ts.post("/v1/completions", std::string("[1,2]")), 400, "");
  expect_error(ts.post("/v1/completions", json{{"prompt", "a"}, {"max_tokens", "ten"}}), 400,
               "max_tokens");
  expect_error(ts.post("/v1/completions", json{{"prompt", "a"}, {"temperature", 9}}), 400,
               "temperature");
  expect_error(ts.post("/v1/completions", json{{"prompt", "a"}, {"logprobs", 21}}), 400,
               "logprobs");
  expect_error(ts.post("/v1/completions", json{{"max_tokens", 3}}), 400, "prompt");
  expect_error(ts.post("/v1/chat/completions", json{{"messages", "hi"}}), 400, "messages");
  expect_error(ts.post("/v1/completions", json{{"prompt", "a"}, {"stop", json::array({1})}}), 400,
               "stop");
  expect_error(ts.post("/v1/completions", json{{"prompt", "a"}, {"n", 0}}), 400, "n");
  // Nothing reached the model.
  EXPECT_EQ(ts.service().specs().size(), 0u);
}

TEST(ServerHttpTest, PromptLongerThanTheContextIs400) {
  FakeService::Knobs k;
  k.context = 16;
  TestServer ts({}, k);
  // BOS + 15 bytes = 16 tokens: no room left.
  expect_error(ts.post("/v1/completions", json{{"prompt", std::string(15, 'a')}}), 400, "prompt",
               "16 tokens");
  expect_error(ts.post("/v1/completions", json{{"prompt", json::array({1, 2, 999})}}), 400,
               "prompt", "999");
  expect_error(ts.post("/v1/completions", json{{"prompt", "abc"}, {"max_tokens", 13}}), 400,
               "max_tokens", "at most 12");
  expect_error(
      ts.post("/v1/chat/completions",
              json{{"messages",
                    json::array({json{{"role", "user"}, {"content", std::string(20, 'q')}}})}}),
      400, "messages");
  EXPECT_EQ(ts.service().specs().size(), 0u);
  // Exactly filling the context is allowed.
  JsonReply ok = ts.post("/v1/completions", json{{"prompt", "abc"}, {"max_tokens", 12}});
  EXPECT_EQ(ok.status, 200) << ok.raw;
}

TEST(ServerHttpTest, MinTokensWrongModelAndTemplateErrorsAreRefused) {
  FakeService::Knobs k;
  k.context = 16;
  TestServer ts({}, k);
  // BOS + "abc" leaves 12 tokens: min_tokens may not ask for more.
  expect_error(ts.post("/v1/completions", json{{"prompt", "abc"}, {"min_tokens", 13}}), 400,
               "min_tokens", "exceeds the 12 tokens");
  expect_error(
      ts.post("/v1/completions", json{{"prompt", "abc"}, {"min_tokens", 5}, {"max_tokens", 4}}),
      400, "min_tokens");
  expect_error(ts.post("/v1/completions", json{{"prompt", "a"}, {"model", "gpt-9"}}), 404, "model",
               "gpt-9");
  expect_error(
      ts.post(
          "/v1/chat/completions",
          json{{"messages", json::array({json{{"role", "user"}, {"content", "BREAK_TEMPLATE"}}})}}),
      400, "messages", "template");
  EXPECT_EQ(ts.service().specs().size(), 0u);
  // min_tokens up to max_tokens and the served name are fine; min_tokens
  // reaches the service.
  EXPECT_EQ(
      ts.post("/v1/completions", json{{"prompt", "a"}, {"min_tokens", 0}, {"model", "fake-model"}})
          .status,
      200);
  EXPECT_EQ(ts.post("/v1/completions", json{{"prompt", "abc"}, {"min_tokens", 12}}).status, 200);
  ASSERT_EQ(ts.service().specs().size(), 2u);
  EXPECT_EQ(ts.service().specs()[0].min_new_tokens, 0);
  EXPECT_EQ(ts.service().specs()[1].min_new_tokens, 12);
  EXPECT_EQ(ts.service().specs()[1].max_new_tokens, 12);
}

TEST(ServerHttpTest, MinTokensWithMoreStopTokensThanCanBeSuppressedIsRefusedUpFront) {
  FakeService::Knobs k;
  for (Token t = 100; t < 100 + static_cast<Token>(kMaxSuppressedTokens) + 1; ++t) {
    k.stop_tokens.push_back(t);  // EOS and 9 more: 10 distinct stop tokens
  }
  TestServer ts({}, k);
  const json body = {{"prompt", "abc"}, {"min_tokens", 2}, {"max_tokens", 5}};
  JsonReply r = ts.post("/v1/completions", body);
  expect_error(r, 400, "min_tokens", "at most 8");
  EXPECT_EQ(r.body["error"]["type"], "invalid_request_error");
  expect_error(ts.post("/v1/chat/completions",
                       json{{"messages", json::array({json{{"role", "user"}, {"content", "x"}}})},
                            {"min_tokens", 1}}),
               400, "min_tokens", "10 stop tokens");
  // Refused before the service saw anything.
  EXPECT_TRUE(ts.service().specs().empty());
  EXPECT_EQ(ts.service().live_jobs(), 0);
  // Without a minimum, or with ignore_eos (nothing to suppress), it runs.
  json no_min = body;
  no_min.erase("min_tokens");
  EXPECT_EQ(ts.post("/v1/completions", no_min).status, 200);
  json ignoring = body;
  ignoring["ignore_eos"] = true;
  EXPECT_EQ(ts.post("/v1/completions", ignoring).status, 200);
  EXPECT_EQ(ts.service().specs().size(), 2u);
}

TEST(ServerHttpTest, RepeatedStopTokensCountOnceTowardsTheMinTokensLimit) {
  FakeService::Knobs k;
  k.stop_tokens.clear();
  for (int i = 0; i < 3; ++i) {
    for (Token t = 100; t < 100 + static_cast<Token>(kMaxSuppressedTokens); ++t) {
      k.stop_tokens.push_back(t);  // 24 entries, 8 distinct
    }
  }
  TestServer ts({}, k);
  JsonReply r = ts.post("/v1/completions", json{{"prompt", "abc"}, {"min_tokens", 2}});
  EXPECT_EQ(r.status, 200) << r.raw;
  ASSERT_EQ(ts.service().specs().size(), 1u);
  EXPECT_EQ(ts.service().specs()[0].min_new_tokens, 2);
}

TEST(ServerHttpTest, MinTokensIsRefusedUpFrontWhenTheSamplerCannotSuppressTokens) {
  FakeService::Knobs k;
  k.can_suppress_tokens = false;
  TestServer ts({}, k);
  const json body = {{"prompt", "abc"}, {"min_tokens", 2}, {"max_tokens", 5}};
  JsonReply r = ts.post("/v1/completions", body);
  expect_error(r, 400, "min_tokens", "cannot suppress token ids");
  EXPECT_EQ(r.body["error"]["type"], "invalid_request_error");
  // The message says what to do instead.
  EXPECT_NE(r.raw.find("drop min_tokens or set ignore_eos"), std::string::npos) << r.raw;
  expect_error(ts.post("/v1/chat/completions",
                       json{{"messages", json::array({json{{"role", "user"}, {"content", "x"}}})},
                            {"min_tokens", 1},
                            {"stream", true}}),
               400, "min_tokens", "min_tokens 1");
  // Refused before admission and before the service was asked to start.
  EXPECT_EQ(ts.service().start_calls(), 0);
  EXPECT_TRUE(ts.service().specs().empty());
  EXPECT_EQ(ts.service().live_jobs(), 0);

  // The same service still serves what needs no suppression: no minimum, a
  // zero minimum, or ignore_eos (no stop token is kept).
  json no_min = body;
  no_min.erase("min_tokens");
  JsonReply plain = ts.post("/v1/completions", no_min);
  EXPECT_EQ(plain.status, 200) << plain.raw;
  EXPECT_EQ(plain.body["choices"][0]["text"], "Hello");
  json zero = body;
  zero["min_tokens"] = 0;
  EXPECT_EQ(ts.post("/v1/completions", zero).status, 200);
  json ignoring = body;
  ignoring["ignore_eos"] = true;
  EXPECT_EQ(ts.post("/v1/completions", ignoring).status, 200);
  EXPECT_EQ(ts.service().start_calls(), 3);
  ASSERT_EQ(ts.service().specs().size(), 3u);
  EXPECT_EQ(ts.service().specs()[0].min_new_tokens, 0);
  EXPECT_EQ(ts.service().specs()[2].min_new_tokens, 2);
  EXPECT_TRUE(ts.service().specs()[2].ignore_eos);
}

TEST(ServerHttpTest, MinTokensOnAModelWithoutStopTokensNeedsNoSuppression) {
  FakeService::Knobs k;
  k.can_suppress_tokens = false;
  k.stop_tokens.clear();
  TestServer ts({}, k);
  JsonReply r =
      ts.post("/v1/completions", json{{"prompt", "abc"}, {"min_tokens", 2}, {"max_tokens", 5}});
  EXPECT_EQ(r.status, 200) << r.raw;
  ASSERT_EQ(ts.service().specs().size(), 1u);
  EXPECT_EQ(ts.service().specs()[0].min_new_tokens, 2);
}

TEST(ServerHttpTest, MinTokensRunsWhenTheSamplerCanSuppressTokens) {
  TestServer ts;  // the fake suppresses by default, as the interface does
  JsonReply r =
      ts.post("/v1/completions", json{{"prompt", "abc"}, {"min_tokens", 2}, {"max_tokens", 5}});
  EXPECT_EQ(r.status, 200) << r.raw;
  EXPECT_EQ(ts.service().start_calls(), 1);
  ASSERT_EQ(ts.service().specs().size(), 1u);
  EXPECT_EQ(ts.service().specs()[0].min_new_tokens, 2);
  EXPECT_EQ(ts.service().specs()[0].max_new_tokens, 5);
}

TEST(ServerHttpTest, CompletionReturnsTextFinishReasonAndUsage) {
  TestServer ts;
  JsonReply r = ts.post("/v1/completions", json{{"prompt", "Hi there"}, {"temperature", 0}});
  ASSERT_EQ(r.status, 200) << r.raw;
  EXPECT_EQ(r.body["object"], "text_completion");
  EXPECT_EQ(r.body["model"], "fake-model");
  EXPECT_EQ(r.body["id"].get<std::string>().rfind("cmpl-", 0), 0u);
  ASSERT_EQ(r.body["choices"].size(), 1u);
  EXPECT_EQ(r.body["choices"][0]["text"], "Hello world! #0");
  EXPECT_EQ(r.body["choices"][0]["finish_reason"], "stop");
  // BOS + 8 bytes; 15 text tokens + EOS.
  EXPECT_EQ(r.body["usage"]["prompt_tokens"], 9);
  EXPECT_EQ(r.body["usage"]["completion_tokens"], 16);
  EXPECT_EQ(r.body["usage"]["total_tokens"], 25);
  EXPECT_EQ(r.body["usage"]["prompt_tokens_details"]["cached_tokens"], 0);

  const auto specs = ts.service().specs();
  ASSERT_EQ(specs.size(), 1u);
  EXPECT_EQ(specs[0].prompt.size(), 9u);
  EXPECT_EQ(specs[0].prompt[0], kBos);
  EXPECT_EQ(specs[0].max_new_tokens, 64 - 9);  // default: the rest of the context
  EXPECT_EQ(specs[0].sampling.temperature, 0.0f);
  EXPECT_EQ(specs[0].n, 1);
  EXPECT_FALSE(specs[0].seed.has_value());
}

TEST(ServerHttpTest, TokenPromptsAndSamplingFieldsReachTheService) {
  TestServer ts;
  JsonReply r = ts.post("/v1/completions", json{{"prompt", json::array({72, 105})},
                                                {"max_tokens", 5},
                                                {"temperature", 0.7},
                                                {"top_p", 0.9},
                                                {"top_k", 40},
                                                {"seed", 1234},
                                                {"ignore_eos", true}});
  ASSERT_EQ(r.status, 200) << r.raw;
  EXPECT_EQ(r.body["choices"][0]["text"], "Hello");
  EXPECT_EQ(r.body["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(r.body["usage"]["completion_tokens"], 5);
  const auto specs = ts.service().specs();
  ASSERT_EQ(specs.size(), 1u);
  EXPECT_EQ(specs[0].prompt, (std::vector<Token>{72, 105}));
  EXPECT_EQ(specs[0].max_new_tokens, 5);
  EXPECT_FLOAT_EQ(specs[0].sampling.temperature, 0.7f);
  EXPECT_FLOAT_EQ(specs[0].sampling.top_p, 0.9f);
  EXPECT_EQ(specs[0].sampling.top_k, 40);
  EXPECT_EQ(specs[0].seed, 1234u);
  EXPECT_TRUE(specs[0].ignore_eos);
}

TEST(ServerHttpTest, IgnoreEosRunsToTheTokenLimit) {
  TestServer ts;
  JsonReply r =
      ts.post("/v1/completions", json{{"prompt", "a"}, {"max_tokens", 20}, {"ignore_eos", true}});
  ASSERT_EQ(r.status, 200) << r.raw;
  EXPECT_EQ(r.body["choices"][0]["text"], "Hello world! #0xxxxx");
  EXPECT_EQ(r.body["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(r.body["usage"]["completion_tokens"], 20);
}

TEST(ServerHttpTest, StopStringsCutTheTextAndEndTheChoice) {
  TestServer ts;
  // "wor" spans three byte tokens; text from the stop string on is dropped.
  JsonReply r =
      ts.post("/v1/completions", json{{"prompt", "a"}, {"stop", json::array({"zz", "wor"})}});
  ASSERT_EQ(r.status, 200) << r.raw;
  EXPECT_EQ(r.body["choices"][0]["text"], "Hello ");
  EXPECT_EQ(r.body["choices"][0]["finish_reason"], "stop");
  // Tokens up to and including the one that completed the stop string.
  EXPECT_EQ(r.body["usage"]["completion_tokens"], 9);
  // The engine (here the fake) ended the choice itself: nothing was cancelled.
  EXPECT_TRUE(FakeService::eventually([&] { return ts.service().live_jobs() == 0; }));
  EXPECT_EQ(ts.service().cancelled_choices(), 0);
  // A stop string that never appears changes nothing.
  JsonReply r2 = ts.post("/v1/completions", json{{"prompt", "a"}, {"stop", "nope"}});
  EXPECT_EQ(r2.body["choices"][0]["text"], "Hello world! #0");
}

TEST(ServerHttpTest, ChatRendersMessagesAndReturnsAnAssistantMessage) {
  TestServer ts;
  JsonReply r =
      ts.post("/v1/chat/completions",
              json{{"messages", json::array({json{{"role", "system"}, {"content", "Be brief."}},
                                             json{{"role", "user"}, {"content", "Hi"}}})},
                   {"max_completion_tokens", 8}});
  ASSERT_EQ(r.status, 200) << r.raw;
  EXPECT_EQ(r.body["object"], "chat.completion");
  EXPECT_EQ(r.body["id"].get<std::string>().rfind("chatcmpl-", 0), 0u);
  EXPECT_EQ(r.body["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(r.body["choices"][0]["message"]["content"], "Hello wo");
  EXPECT_EQ(r.body["choices"][0]["finish_reason"], "length");
  const std::string rendered = "system: Be brief.\nuser: Hi\nassistant: ";
  const auto specs = ts.service().specs();
  ASSERT_EQ(specs.size(), 1u);
  ASSERT_EQ(specs[0].prompt.size(), rendered.size());  // no BOS: the template owns specials
  EXPECT_EQ(r.body["usage"]["prompt_tokens"], rendered.size());
}

TEST(ServerHttpTest, NChoicesAreIndexedAndCounted) {
  TestServer ts;
  JsonReply r = ts.post("/v1/completions", json{{"prompt", "a"}, {"n", 3}, {"seed", 7}});
  ASSERT_EQ(r.status, 200) << r.raw;
  ASSERT_EQ(r.body["choices"].size(), 3u);
  std::int64_t tokens = 0;
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(r.body["choices"][i]["index"], i);
    EXPECT_EQ(r.body["choices"][i]["text"], "Hello world! #" + std::to_string(i));
    tokens += 16;
  }
  EXPECT_EQ(r.body["usage"]["completion_tokens"], tokens);
  EXPECT_EQ(r.body["usage"]["prompt_tokens"], 2);  // counted once, not per choice
  EXPECT_EQ(ts.service().specs().at(0).n, 3);
}

TEST(ServerHttpTest, NBeyondCapacityIs400) {
  FakeService::Knobs k;
  k.max_sequences = 2;
  TestServer ts({}, k);
  expect_error(ts.post("/v1/completions", json{{"prompt", "a"}, {"n", 3}}), 400, "n", "at most 2");
}

TEST(ServerHttpTest, FailedGenerationIs500AndCountedAsFailed) {
  FakeService::Knobs k;
  k.fail_after = 3;
  TestServer ts({}, k);
  JsonReply r = ts.post("/v1/completions", json{{"prompt", "a"}});
  EXPECT_EQ(r.status, 500) << r.raw;
  EXPECT_NE(r.raw.find("fake executor failure"), std::string::npos);
  const std::string m = ts.get("/metrics").raw;
  EXPECT_NE(m.find("cellm:requests_total{endpoint=\"completions\",outcome=\"failed\"} 1"),
            std::string::npos);
}

TEST(ServerHttpTest, StartErrorsMapToTheirStatus) {
  FakeService::Knobs k;
  k.start_error = out_of_resources("no free session");
  TestServer ts({}, k);
  expect_error(ts.post("/v1/completions", json{{"prompt", "a"}}), 429, "", "no free session");
}

TEST(ServerHttpTest, ModelsTokenizeDetokenizeAndPage) {
  TestServer ts;
  JsonReply m = ts.get("/v1/models");
  ASSERT_EQ(m.status, 200);
  EXPECT_EQ(m.body["object"], "list");
  EXPECT_EQ(m.body["data"][0]["id"], "fake-model");
  EXPECT_EQ(m.body["data"][0]["max_model_len"], 64);

  JsonReply t = ts.post("/tokenize", json{{"prompt", "Hi"}});
  ASSERT_EQ(t.status, 200) << t.raw;
  EXPECT_EQ(t.body["tokens"], json::array({256, 72, 105}));
  EXPECT_EQ(t.body["count"], 3);
  t = ts.post("/tokenize", json{{"prompt", "Hi"}, {"add_special_tokens", false}});
  EXPECT_EQ(t.body["tokens"], json::array({72, 105}));
  t = ts.post("/tokenize",
              json{{"messages", json::array({json{{"role", "user"}, {"content", "x"}}})}});
  EXPECT_EQ(t.body["count"], std::string("user: x\nassistant: ").size());
  expect_error(ts.post("/tokenize", json{{"prompt", 5}}), 400, "prompt");

  JsonReply d = ts.post("/detokenize", json{{"tokens", json::array({256, 72, 105, 257})}});
  ASSERT_EQ(d.status, 200) << d.raw;
  EXPECT_EQ(d.body["prompt"], "Hi");
  expect_error(ts.post("/detokenize", json{{"tokens", json::array({-1})}}), 400, "tokens");
  expect_error(ts.post("/detokenize", json{{"tokens", "x"}}), 400, "tokens");

  auto c = ts.client();
  auto page = c.Get("/");
  ASSERT_TRUE(page);
  EXPECT_EQ(page->status, 200);
  EXPECT_NE(page->get_header_value("Content-Type").find("text/html"), std::string::npos);
  EXPECT_NE(page->body.find("/v1/chat/completions"), std::string::npos);
}

TEST(ServerHttpTest, MetricsCountRequestsTokensAndPrefixHits) {
  FakeService::Knobs k;
  k.prefix_caching = true;
  k.cached_tokens = 4;
  TestServer ts({}, k);
  ASSERT_EQ(ts.post("/v1/completions", json{{"prompt", "abc"}}).status, 200);
  JsonReply r = ts.post("/v1/completions", json{{"prompt", "abcd"}, {"max_tokens", 3}});
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(r.body["usage"]["prompt_tokens_details"]["cached_tokens"], 4);
  ts.post("/v1/completions", json{{"prompt", "a"}, {"top_p", 7}});
  const std::string m = ts.get("/metrics").raw;
  auto has = [&](const std::string& line) {
    EXPECT_NE(m.find(line + "\n"), std::string::npos) << "missing: " << line << "\n" << m;
  };
  has("cellm:requests_total{endpoint=\"completions\",outcome=\"ok\"} 2");
  has("cellm:requests_total{endpoint=\"completions\",outcome=\"invalid\"} 1");
  has("cellm:requests_total{endpoint=\"chat_completions\",outcome=\"ok\"} 0");
  has("cellm:prompt_tokens_total 9");       // 4 + 5
  has("cellm:generation_tokens_total 19");  // 16 + 3
  has("cellm:prefix_cache_queries_total 2");
  has("cellm:prefix_cache_hits_total 2");
  has("cellm:prefix_cache_hit_tokens_total 8");
  has("cellm:e2e_request_latency_seconds_count 2");
  has("cellm:time_to_first_token_seconds_count 2");
  // 15 + 2 gaps between successive tokens.
  has("cellm:inter_token_latency_seconds_count 17");
  has("cellm:num_requests_running 0");
  has("cellm:num_requests_waiting 0");
  has("cellm:kv_cells_total 1000");
  has("# TYPE cellm:time_to_first_token_seconds histogram");
}

}  // namespace
}  // namespace cellm::server::testing

// The listening socket's options reach the connections it accepts: TCP_NODELAY
// above all, without which each streamed event after the first waited for the
// client's delayed acknowledgement (listen_socket.h).
TEST(ListenSocketTest, AcceptedConnectionsSendSmallWritesAtOnce) {
  const int listener = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(listener, 0);
  cellm::server::set_listen_socket_options(listener);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(::listen(listener, 1), 0);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(::getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  const int client = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_EQ(::connect(client, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  const int accepted = ::accept(listener, nullptr, nullptr);
  ASSERT_GE(accepted, 0);
  const auto option = [](int fd, int level, int name) {
    int value = 0;
    socklen_t size = sizeof(value);
    EXPECT_EQ(::getsockopt(fd, level, name, &value, &size), 0);
    return value;
  };
  EXPECT_NE(option(accepted, IPPROTO_TCP, TCP_NODELAY), 0) << "Nagle's algorithm is on";
  EXPECT_NE(option(listener, SOL_SOCKET, SO_REUSEADDR), 0);
  EXPECT_EQ(option(listener, SOL_SOCKET, SO_REUSEPORT), 0) << "a second server could share it";
  ::close(accepted);
  ::close(client);
  ::close(listener);
}
