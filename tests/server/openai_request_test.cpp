#include "server/openai_request.h"

#include <optional>
#include <string>

#include <gtest/gtest.h>

namespace cellm::server {
namespace {

struct Parsed {
  std::optional<GenerationRequest> req;
  RequestError error;
};

Parsed parse(RequestKind kind, const std::string& body) {
  Parsed p;
  p.req = parse_request(kind, body, RequestLimits{}, &p.error);
  return p;
}

Parsed completion(const std::string& body) {
  return parse(RequestKind::kCompletion, body);
}
Parsed chat(const std::string& body) {
  return parse(RequestKind::kChat, body);
}

TEST(RequestTest, CompletionWithEveryField) {
  Parsed p = completion(R"({"model":"m","prompt":"Hi","max_tokens":5,"temperature":0.5,
      "top_p":0.9,"top_k":4,"seed":42,"stop":["a","bc"],"n":2,"ignore_eos":true,"min_tokens":1,
      "stream":true,"stream_options":{"include_usage":true},"user":"u"})");
  ASSERT_TRUE(p.req) << p.error.status.to_string();
  const GenerationRequest& r = *p.req;
  EXPECT_EQ(r.model, "m");
  EXPECT_EQ(*r.prompt_text, "Hi");
  EXPECT_EQ(*r.max_tokens, 5);
  EXPECT_FLOAT_EQ(r.temperature, 0.5f);
  EXPECT_FLOAT_EQ(r.top_p, 0.9f);
  EXPECT_EQ(r.top_k, 4);
  EXPECT_EQ(*r.seed, 42u);
  EXPECT_EQ(r.stop, (std::vector<std::string>{"a", "bc"}));
  EXPECT_EQ(r.n, 2);
  EXPECT_TRUE(r.ignore_eos);
  EXPECT_EQ(r.min_tokens, 1);
  EXPECT_TRUE(r.stream);
  EXPECT_TRUE(r.include_usage);
  EXPECT_EQ(r.user, "u");
}

TEST(RequestTest, DefaultsFollowOpenAI) {
  Parsed p = completion(R"({"prompt":"x"})");
  ASSERT_TRUE(p.req);
  EXPECT_FALSE(p.req->max_tokens.has_value());
  EXPECT_FLOAT_EQ(p.req->temperature, 1.0f);
  EXPECT_FLOAT_EQ(p.req->top_p, 1.0f);
  EXPECT_EQ(p.req->n, 1);
  EXPECT_FALSE(p.req->stream);
}

TEST(RequestTest, PromptAsTokenIds) {
  Parsed p = completion(R"({"prompt":[1,2,3]})");
  ASSERT_TRUE(p.req);
  EXPECT_EQ(*p.req->prompt_tokens, (std::vector<std::int64_t>{1, 2, 3}));
  EXPECT_FALSE(completion(R"({"prompt":[1,-2]})").req);
  EXPECT_FALSE(completion(R"({"prompt":[]})").req);
}

TEST(RequestTest, MalformedJsonAndNonObjects) {
  Parsed p = completion("{\"prompt\": ");
  ASSERT_FALSE(p.req);
  EXPECT_EQ(p.error.status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(p.error.status.message().find("not valid JSON"), std::string_view::npos);
  EXPECT_FALSE(completion("[1,2]").req);
  EXPECT_FALSE(completion("").req);
}

TEST(RequestTest, UnsupportedFieldsAreNamed) {
  for (const char* field : {"logit_bias\":{\"1\":5}", "presence_penalty\":0.5", "logprobs\":true",
                            "suffix\":\"x\"", "frobnicate\":1", "best_of\":3"}) {
    Parsed p = completion(std::string(R"({"prompt":"x",")") + field + "}");
    ASSERT_FALSE(p.req) << field;
    EXPECT_EQ(p.error.status.code(), StatusCode::kInvalidArgument) << field;
    std::string name(field, std::string_view(field).find('"'));
    EXPECT_EQ(p.error.param, name);
    EXPECT_NE(p.error.status.message().find(name), std::string_view::npos);
  }
}

TEST(RequestTest, NeutralValuesOfUnsupportedFieldsAreAccepted) {
  EXPECT_TRUE(completion(R"({"prompt":"x","presence_penalty":0,"frequency_penalty":0.0,
                            "logprobs":false,"best_of":1,"echo":false,"logit_bias":{}})")
                  .req);
}

TEST(RequestTest, WrongTypesAndRanges) {
  struct Case {
    const char* body;
    const char* param;
  };
  const Case cases[] = {
      {R"({"prompt":"x","max_tokens":0})", "max_tokens"},
      {R"({"prompt":"x","max_tokens":"5"})", "max_tokens"},
      {R"({"prompt":"x","max_tokens":1.5})", "max_tokens"},
      {R"({"prompt":"x","temperature":-1})", "temperature"},
      {R"({"prompt":"x","temperature":3})", "temperature"},
      {R"({"prompt":"x","top_p":0})", "top_p"},
      {R"({"prompt":"x","top_p":1.5})", "top_p"},
      {R"({"prompt":"x","top_k":-2})", "top_k"},
      {R"({"prompt":"x","n":0})", "n"},
      {R"({"prompt":"x","n":17})", "n"},
      {R"({"prompt":"x","stop":5})", "stop"},
      {R"({"prompt":"x","stop":[""]})", "stop"},
      {R"({"prompt":"x","stream":"yes"})", "stream"},
      {R"({"prompt":"x","stream_options":{"include_usage":true}})", "stream_options"},
      {R"({"prompt":"x","seed":"7"})", "seed"},
      {R"({"prompt":"x","max_tokens":2,"min_tokens":3})", "min_tokens"},
      {R"({"prompt":"x","max_tokens":99999999999})", "max_tokens"},
      {R"({"prompt":"x","max_tokens":18446744073709551615})", "max_tokens"},
      {R"({"prompt":7})", "prompt"},
      {R"({"max_tokens":3})", "prompt"},
  };
  for (const Case& c : cases) {
    Parsed p = completion(c.body);
    ASSERT_FALSE(p.req) << c.body;
    EXPECT_EQ(p.error.param, c.param) << c.body;
    EXPECT_FALSE(p.error.status.message().empty());
  }
}

TEST(RequestTest, ChatMessagesAndContentParts) {
  Parsed p = chat(R"({"messages":[{"role":"system","content":"Be brief."},
      {"role":"user","content":[{"type":"text","text":"Hel"},{"type":"text","text":"lo"}]},
      {"role":"assistant","content":null,"tool_calls":[{"id":"1","type":"function","function":{"name":"f","arguments":"{}"}}]}],
      "max_completion_tokens":7,"chat_template_kwargs":{"enable_thinking":false}})");
  ASSERT_TRUE(p.req) << p.error.status.to_string();
  ASSERT_EQ(p.req->messages.size(), 3u);
  EXPECT_EQ(p.req->messages[1].content, "Hello");
  EXPECT_TRUE(p.req->messages[2].extra.contains("tool_calls"));
  EXPECT_EQ(*p.req->max_tokens, 7);
  EXPECT_EQ(p.req->chat_template_kwargs["enable_thinking"], false);
}

TEST(RequestTest, ChatRefusals) {
  EXPECT_EQ(chat(R"({"messages":[]})").error.param, "messages");
  EXPECT_EQ(chat(R"({"messages":[{"role":"robot","content":"x"}]})").error.param,
            "messages[0].role");
  EXPECT_EQ(chat(R"({"messages":[{"role":"user","content":[{"type":"image_url"}]}]})").error.param,
            "messages[0].content");
  EXPECT_EQ(chat(R"({"messages":[{"role":"user","content":"x"}],"prompt":"y"})").error.param,
            "prompt");
  Parsed tool_choice =
      chat(R"({"messages":[{"role":"user","content":"x"}],"tool_choice":"required"})");
  EXPECT_EQ(tool_choice.error.param, "tool_choice");
  EXPECT_EQ(tool_choice.error.status.code(), StatusCode::kInvalidArgument);
}

TEST(RequestTest, BatchedPromptsAreRefusedAsUnsupported) {
  Parsed p = completion(R"({"prompt":["a","b"]})");
  ASSERT_FALSE(p.req);
  EXPECT_EQ(p.error.status.code(), StatusCode::kNotSupported);
  EXPECT_TRUE(completion(R"({"prompt":["a"]})").req);
}

}  // namespace
}  // namespace cellm::server
