// Operator-facing server behaviour against FakeService: API keys (401 in the
// OpenAI error shape, public / and /health, /metrics behind the key unless
// metrics_open), CORS (preflights and Allow-Origin only for listed origins),
// GET /v1/models/{id}, and refusing a port another server listens on. Also
// the pure rules of access_control.h.
#include <cstdio>
#include <fstream>
#include <string>
#include <unistd.h>

#include <gtest/gtest.h>

#include "server/access_control.h"
#include "server_harness.h"

namespace cellm::server::testing {
namespace {

using nlohmann::json;

httplib::Result get_with(const TestServer& ts, const std::string& path,
                         const httplib::Headers& headers) {
  auto c = ts.client();
  return c.Get(path.c_str(), headers);
}

void expect_401(const httplib::Result& res, const std::string& message_part) {
  ASSERT_TRUE(res) << httplib::to_string(res.error());
  EXPECT_EQ(res->status, 401) << res->body;
  const json body = json::parse(res->body, nullptr, false);
  ASSERT_TRUE(body.is_object() && body.contains("error")) << res->body;
  EXPECT_EQ(body["error"]["type"], "authentication_error") << res->body;
  EXPECT_EQ(body["error"]["code"], "invalid_api_key") << res->body;
  EXPECT_TRUE(body["error"]["param"].is_null()) << res->body;
  EXPECT_NE(body["error"]["message"].get<std::string>().find(message_part), std::string::npos)
      << res->body;
  EXPECT_EQ(res->get_header_value("WWW-Authenticate").rfind("Bearer", 0), 0u)
      << res->get_header_value("WWW-Authenticate");
}

ServerOptions with_keys() {
  ServerOptions o;
  o.api_keys = {"key-one", "key-two"};
  return o;
}

TEST(ServerAuthTest, RoutesNeedABearerKeyExceptThePageAndHealth) {
  TestServer ts(with_keys());
  EXPECT_EQ(ts.get("/health").status, 200);
  auto page = ts.client().Get("/");
  ASSERT_TRUE(page);
  EXPECT_EQ(page->status, 200);
  EXPECT_NE(page->get_header_value("Content-Type").find("text/html"), std::string::npos);

  expect_401(get_with(ts, "/v1/models", {}), "Authorization: Bearer");
  expect_401(get_with(ts, "/v1/models/fake-model", {}), "Authorization: Bearer");
  expect_401(get_with(ts, "/metrics", {}), "Authorization: Bearer");
  expect_401(get_with(ts, "/v1/models", {{"Authorization", "Bearer key-three"}}), "not valid");
  expect_401(get_with(ts, "/v1/models", {{"Authorization", "Bearer key-on"}}), "not valid");
  expect_401(get_with(ts, "/v1/models", {{"Authorization", "Bearer key-one2"}}), "not valid");
  expect_401(get_with(ts, "/v1/models", {{"Authorization", "Basic key-one"}}), "not valid");
  expect_401(get_with(ts, "/v1/models", {{"Authorization", "key-one"}}), "not valid");

  for (const char* auth : {"Bearer key-one", "Bearer key-two", "bearer key-one"}) {
    auto ok = get_with(ts, "/v1/models", {{"Authorization", auth}});
    ASSERT_TRUE(ok);
    EXPECT_EQ(ok->status, 200) << auth << ": " << ok->body;
  }
  auto metrics = get_with(ts, "/metrics", {{"Authorization", "Bearer key-two"}});
  ASSERT_TRUE(metrics);
  EXPECT_EQ(metrics->status, 200);
}

TEST(ServerAuthTest, RefusedPostsChangeNothing) {
  TestServer ts(with_keys());
  auto c = ts.client();
  for (const char* path : {"/v1/completions", "/v1/chat/completions", "/tokenize", "/detokenize"}) {
    expect_401(c.Post(path, json{{"prompt", "hi"}}.dump(), "application/json"), "Bearer");
  }
  EXPECT_EQ(ts.service().specs().size(), 0u);
  httplib::Headers key = {{"Authorization", "Bearer key-one"}};
  auto ok = c.Post("/v1/completions", key, json{{"prompt", "hi"}}.dump(), "application/json");
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200) << ok->body;
  EXPECT_EQ(ts.service().specs().size(), 1u);
}

TEST(ServerAuthTest, MetricsOpenKeepsOnlyMetricsPublic) {
  ServerOptions o = with_keys();
  o.metrics_open = true;
  TestServer ts(o);
  auto metrics = get_with(ts, "/metrics", {});
  ASSERT_TRUE(metrics);
  EXPECT_EQ(metrics->status, 200);
  EXPECT_NE(metrics->body.find("cellm:"), std::string::npos);
  expect_401(get_with(ts, "/v1/models", {}), "Bearer");
}

TEST(ServerAuthTest, WithoutKeysNothingIsAsked) {
  TestServer ts;
  EXPECT_EQ(ts.get("/v1/models").status, 200);
  EXPECT_EQ(ts.get("/metrics").status, 200);
  EXPECT_EQ(ts.post("/v1/completions", json{{"prompt", "hi"}}).status, 200);
}

TEST(ServerModelsTest, GetOneModelByItsServedName) {
  ServerOptions o;
  o.model_name = "org/served";
  TestServer ts(o);
  JsonReply one = ts.get("/v1/models/org/served");
  ASSERT_EQ(one.status, 200) << one.raw;
  EXPECT_EQ(one.body["id"], "org/served");
  EXPECT_EQ(one.body["object"], "model");
  // The same object as the list's entry.
  EXPECT_EQ(ts.get("/v1/models").body["data"][0], one.body);

  JsonReply other = ts.get("/v1/models/fake-model");
  EXPECT_EQ(other.status, 404) << other.raw;
  ASSERT_TRUE(other.body.contains("error")) << other.raw;
  EXPECT_EQ(other.body["error"]["type"], "invalid_request_error");
  EXPECT_EQ(other.body["error"]["param"], "model");
  EXPECT_NE(other.body["error"]["message"].get<std::string>().find("'fake-model'"),
            std::string::npos)
      << other.raw;
  EXPECT_EQ(ts.get("/v1/models/org").status, 404);
}

TEST(ServerModelsTest, OneModelIs503WhileLoading) {
  TestServer ts({}, {}, /*ready=*/false);
  EXPECT_EQ(ts.get("/v1/models/fake-model").status, 503);
  ts.make_ready();
  EXPECT_EQ(ts.get("/v1/models/fake-model").status, 200);
}

httplib::Result preflight(const TestServer& ts, const std::string& origin,
                          const std::string& request_headers = "authorization, content-type") {
  auto c = ts.client();
  return c.Options("/v1/chat/completions", {{"Origin", origin},
                                            {"Access-Control-Request-Method", "POST"},
                                            {"Access-Control-Request-Headers", request_headers}});
}

TEST(ServerCorsTest, PreflightAndHeadersOnlyForListedOrigins) {
  ServerOptions o = with_keys();
  o.cors_origins = {"http://app.example:3000"};
  TestServer ts(o);

  // The preflight carries no key and is answered anyway.
  auto pre =
      preflight(ts, "http://app.example:3000", "authorization, content-type, x-stainless-os");
  ASSERT_TRUE(pre);
  EXPECT_EQ(pre->status, 204) << pre->body;
  EXPECT_EQ(pre->get_header_value("Access-Control-Allow-Origin"), "http://app.example:3000");
  EXPECT_EQ(pre->get_header_value("Vary"), "Origin");
  EXPECT_NE(pre->get_header_value("Access-Control-Allow-Methods").find("POST"), std::string::npos);
  const std::string allow = pre->get_header_value("Access-Control-Allow-Headers");
  EXPECT_NE(allow.find("Authorization"), std::string::npos) << allow;
  EXPECT_NE(allow.find("Content-Type"), std::string::npos) << allow;
  EXPECT_NE(allow.find("x-stainless-os"), std::string::npos) << allow;

  auto denied = preflight(ts, "http://evil.example");
  ASSERT_TRUE(denied);
  EXPECT_EQ(denied->status, 403);
  EXPECT_FALSE(denied->has_header("Access-Control-Allow-Origin"));

  // Real requests: the origin is named on success and on 401 alike.
  httplib::Headers h = {{"Origin", "http://app.example:3000"}, {"Authorization", "Bearer key-one"}};
  auto ok = get_with(ts, "/v1/models", h);
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200);
  EXPECT_EQ(ok->get_header_value("Access-Control-Allow-Origin"), "http://app.example:3000");
  auto unauth = get_with(ts, "/v1/models", {{"Origin", "http://app.example:3000"}});
  ASSERT_TRUE(unauth);
  EXPECT_EQ(unauth->status, 401);
  EXPECT_EQ(unauth->get_header_value("Access-Control-Allow-Origin"), "http://app.example:3000");
  auto other = get_with(ts, "/v1/models",
                        {{"Origin", "http://evil.example"}, {"Authorization", "Bearer key-one"}});
  ASSERT_TRUE(other);
  EXPECT_EQ(other->status, 200);
  EXPECT_FALSE(other->has_header("Access-Control-Allow-Origin"));

  // A streamed answer gets the header too (it is set before the headers go out).
  auto c = ts.client();
  auto stream = c.Post("/v1/completions", h, json{{"prompt", "a"}, {"stream", true}}.dump(),
                       "application/json");
  ASSERT_TRUE(stream);
  EXPECT_EQ(stream->status, 200);
  EXPECT_NE(stream->body.find("[DONE]"), std::string::npos);
  EXPECT_EQ(stream->get_header_value("Access-Control-Allow-Origin"), "http://app.example:3000");
}

TEST(ServerCorsTest, StarAllowsAnyOrigin) {
  ServerOptions o;
  o.cors_origins = {"*"};
  TestServer ts(o);
  auto pre = preflight(ts, "https://anything.example");
  ASSERT_TRUE(pre);
  EXPECT_EQ(pre->status, 204);
  EXPECT_EQ(pre->get_header_value("Access-Control-Allow-Origin"), "*");
  auto r = get_with(ts, "/v1/models", {{"Origin", "https://anything.example"}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->get_header_value("Access-Control-Allow-Origin"), "*");
}

TEST(ServerCorsTest, NoCorsHeadersWithoutOrigins) {
  TestServer ts;
  auto r = get_with(ts, "/v1/models", {{"Origin", "http://app.example:3000"}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_FALSE(r->has_header("Access-Control-Allow-Origin"));
  auto pre = preflight(ts, "http://app.example:3000");
  ASSERT_TRUE(pre);
  EXPECT_NE(pre->status, 204);
  EXPECT_FALSE(pre->has_header("Access-Control-Allow-Origin"));
  EXPECT_FALSE(pre->has_header("Access-Control-Allow-Headers"));
}

TEST(ServerListenTest, ABusyPortIsRefusedAndTheFirstServerKeepsServing) {
  auto first = std::make_unique<TestServer>();
  const int port = first->port();
  ServerOptions o;
  o.host = "127.0.0.1";
  o.port = port;
  Server second(o);
  const Status s = second.bind();
  ASSERT_FALSE(s.is_ok()) << "a second server bound port " << port;
  const std::string message(s.message());
  EXPECT_NE(message.find("127.0.0.1:" + std::to_string(port)), std::string::npos) << message;
  EXPECT_NE(message.find("another process is listening there"), std::string::npos) << message;
  EXPECT_NE(message.find("--port"), std::string::npos) << message;
  EXPECT_EQ(second.port(), -1);
  for (int i = 0; i < 8; ++i) EXPECT_EQ(first->get("/health").status, 200);

  // Once the first has stopped the port can be taken again at once, though
  // its old connections may linger in TIME_WAIT.
  first.reset();
  Server third(o);
  const Status again = third.bind();
  EXPECT_TRUE(again.is_ok()) << again.to_string();
  EXPECT_EQ(third.port(), port);
}

TEST(AccessControlTest, ConstantTimeEqual) {
  EXPECT_TRUE(constant_time_equal("", ""));
  EXPECT_TRUE(constant_time_equal("abc", "abc"));
  EXPECT_FALSE(constant_time_equal("abc", "abd"));
  EXPECT_FALSE(constant_time_equal("abc", "ab"));
  EXPECT_FALSE(constant_time_equal("ab", "abc"));
  EXPECT_FALSE(constant_time_equal("", "a"));
  EXPECT_FALSE(constant_time_equal(std::string_view("a\0", 2), "a"));
}

TEST(AccessControlTest, AuthorizationHeader) {
  const AccessControl none;
  EXPECT_FALSE(none.requires_key());
  EXPECT_EQ(none.check_authorization(""), AccessControl::KeyCheck::kOk);
  const AccessControl ac({"k1", "k2"}, {});
  EXPECT_EQ(ac.check_authorization(""), AccessControl::KeyCheck::kMissing);
  EXPECT_EQ(ac.check_authorization("Bearer k1"), AccessControl::KeyCheck::kOk);
  EXPECT_EQ(ac.check_authorization("BEARER   k2 "), AccessControl::KeyCheck::kOk);
  EXPECT_EQ(ac.check_authorization("Bearer"), AccessControl::KeyCheck::kInvalid);
  EXPECT_EQ(ac.check_authorization("Bearer "), AccessControl::KeyCheck::kInvalid);
  EXPECT_EQ(ac.check_authorization("Bearer k3"), AccessControl::KeyCheck::kInvalid);
  EXPECT_EQ(ac.check_authorization("Token k1"), AccessControl::KeyCheck::kInvalid);
}

TEST(AccessControlTest, Origins) {
  const AccessControl listed({}, {"http://a.example", "https://b.example:8443"});
  EXPECT_EQ(listed.allowed_origin("http://a.example"), "http://a.example");
  EXPECT_EQ(listed.allowed_origin("https://b.example:8443"), "https://b.example:8443");
  EXPECT_EQ(listed.allowed_origin("https://b.example"), "");
  EXPECT_EQ(listed.allowed_origin("http://a.example.evil"), "");
  EXPECT_EQ(listed.allowed_origin(""), "");
  EXPECT_EQ(AccessControl({}, {}).allowed_origin("http://a.example"), "");

  EXPECT_EQ(*normalize_cors_origin("*"), "*");
  EXPECT_EQ(*normalize_cors_origin("http://localhost:3000/"), "http://localhost:3000");
  for (const char* bad :
       {"localhost:3000", "ftp://x", "http://", "http://a/b", "", "https://a b"}) {
    Result<std::string> r = normalize_cors_origin(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().message().find("--cors"), std::string_view::npos);
  }
}

TEST(AccessControlTest, LoopbackHosts) {
  for (const char* h : {"127.0.0.1", "127.1.2.3", "localhost", "::1", "[::1]"}) {
    EXPECT_TRUE(is_loopback_host(h)) << h;
  }
  for (const char* h : {"0.0.0.0", "::", "192.168.1.4", "10.0.0.1", "example.com", ""}) {
    EXPECT_FALSE(is_loopback_host(h)) << h;
  }
}

TEST(AccessControlTest, AllowHeadersKeepOnlyHeaderNames) {
  EXPECT_EQ(cors_allow_headers(""), "Authorization, Content-Type");
  EXPECT_EQ(cors_allow_headers("authorization, X-Trace-Id"),
            "Authorization, Content-Type, X-Trace-Id");
  EXPECT_EQ(cors_allow_headers("bad header, ok-one,,"), "Authorization, Content-Type, ok-one");
}

class KeyFileTest : public ::testing::Test {
 protected:
  void TearDown() override { std::remove(path_.c_str()); }
  std::string write(const std::string& text) {
    std::ofstream(path_) << text;
    return path_;
  }
  // One file per test and process: ctest runs this suite's tests as parallel
  // processes, and a shared name let one test read the other's keys.
  std::string path_ = ::testing::TempDir() + "cellm_key_file_" +
                      ::testing::UnitTest::GetInstance()->current_test_info()->name() + "_" +
                      std::to_string(::getpid()) + ".txt";
};

TEST_F(KeyFileTest, ReadsOneKeyPerLine) {
  Result<std::vector<std::string>> keys =
      read_api_key_file(write("# ops keys\nalpha\n\n  beta \n"));
  ASSERT_TRUE(keys.ok()) << keys.status().to_string();
  EXPECT_EQ(*keys, (std::vector<std::string>{"alpha", "beta"}));
}

TEST_F(KeyFileTest, EmptyMissingOrMalformedFilesAreErrors) {
  Result<std::vector<std::string>> empty = read_api_key_file(write("\n# nothing\n   \n"));
  ASSERT_FALSE(empty.ok());
  EXPECT_NE(empty.status().message().find("no key"), std::string_view::npos);
  EXPECT_NE(empty.status().message().find(path_), std::string_view::npos);
  Result<std::vector<std::string>> missing = read_api_key_file("/nonexistent/cellm/keys");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("/nonexistent/cellm/keys"), std::string_view::npos);
  Result<std::vector<std::string>> spaced = read_api_key_file(write("good\nbad key\n"));
  ASSERT_FALSE(spaced.ok());
  EXPECT_NE(spaced.status().message().find("line 2"), std::string_view::npos);
  EXPECT_FALSE(validate_api_key("").is_ok());
  EXPECT_FALSE(validate_api_key("caf\xc3\xa9").is_ok());
  EXPECT_TRUE(validate_api_key("sk-abc_123").is_ok());
}

}  // namespace
}  // namespace cellm::server::testing
