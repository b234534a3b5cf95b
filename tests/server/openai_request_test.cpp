#include "server/openai_request.h"

#include <optional>
#include <string>
#include <utility>
#include <vector>

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

// Unset sampling settings are marked so the model's defaults can fill them.
TEST(RequestTest, SamplingSettingsTheBodySetsAreMarked) {
  Parsed p = completion(R"({"prompt":"x"})");
  ASSERT_TRUE(p.req);
  EXPECT_FALSE(p.req->given.temperature || p.req->given.top_p || p.req->given.top_k);
  p = completion(R"({"prompt":"x","temperature":0.3,"top_k":7})");
  ASSERT_TRUE(p.req);
  EXPECT_TRUE(p.req->given.temperature);
  EXPECT_FALSE(p.req->given.top_p);
  EXPECT_TRUE(p.req->given.top_k);
  SamplingDefaults model;
  model.temperature = 0.9f;
  model.top_p = 0.8f;
  model.top_k = 40;
  SamplingParams s;
  s.temperature = p.req->temperature;
  s.top_p = p.req->top_p;
  s.top_k = p.req->top_k;
  apply_sampling_defaults(model, p.req->given, s);
  EXPECT_FLOAT_EQ(s.temperature, 0.3f);  // the request's
  EXPECT_FLOAT_EQ(s.top_p, 0.8f);        // the model's
  EXPECT_EQ(s.top_k, 7);                 // the request's
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
  for (const char* field : {"logprobs\":true", "suffix\":\"x\"", "frobnicate\":1", "best_of\":3"}) {
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
  // What vLLM-style clients send by default.
  EXPECT_TRUE(completion(R"({"prompt":"x","repetition_penalty":1.0,"min_p":0,
                            "stop_token_ids":[]})")
                  .req);
}

TEST(RequestTest, TheSamplingSetIsParsed) {
  for (const auto& parse_kind : {completion, chat}) {
    const bool is_chat = parse_kind == chat;
    const std::string head =
        is_chat ? R"({"messages":[{"role":"user","content":"x"}],)" : R"({"prompt":"x",)";
    Parsed p = parse_kind(head + R"("presence_penalty":-1.5,"frequency_penalty":2,
        "repetition_penalty":1.3,"min_p":0.05,"logit_bias":{"17":-100,"3":2.5,"0":100},
        "stop_token_ids":[5,0,9],"ignore_eos":true})");
    ASSERT_TRUE(p.req) << p.error.status.to_string();
    const GenerationRequest& r = *p.req;
    EXPECT_FLOAT_EQ(r.presence_penalty, -1.5f);
    EXPECT_FLOAT_EQ(r.frequency_penalty, 2.0f);
    EXPECT_FLOAT_EQ(r.repetition_penalty, 1.3f);
    EXPECT_FLOAT_EQ(r.min_p, 0.05f);
    const std::vector<std::pair<std::int64_t, float>> bias = {
        {17, -100.0f}, {3, 2.5f}, {0, 100.0f}};
    EXPECT_EQ(r.logit_bias, bias);
    EXPECT_EQ(r.stop_token_ids, (std::vector<std::int64_t>{5, 0, 9}));
    EXPECT_TRUE(r.ignore_eos);
  }
  // Absent or null: the neutral values.
  Parsed p = completion(R"({"prompt":"x","presence_penalty":null,"logit_bias":null})");
  ASSERT_TRUE(p.req);
  EXPECT_EQ(p.req->presence_penalty, 0.0f);
  EXPECT_EQ(p.req->frequency_penalty, 0.0f);
  EXPECT_EQ(p.req->repetition_penalty, 1.0f);
  EXPECT_EQ(p.req->min_p, 0.0f);
  EXPECT_TRUE(p.req->logit_bias.empty());
  EXPECT_TRUE(p.req->stop_token_ids.empty());
}

TEST(RequestTest, TheSamplingSetIsRangeChecked) {
  struct Case {
    std::string field;  // "name":value
    const char* param;
    const char* says;  // part of the message
  };
  std::string many_bias = R"("logit_bias":{"0":1)";
  for (int i = 1; i <= 300; ++i) {
    many_bias += ",\"";
    many_bias += std::to_string(i);
    many_bias += "\":1";
  }
  many_bias += "}";
  std::string many_ids = R"("stop_token_ids":[0)";
  for (int i = 1; i <= 64; ++i) {
    many_ids += ",";
    many_ids += std::to_string(i);
  }
  many_ids += "]";
  const std::vector<Case> cases = {
      {R"("presence_penalty":2.01)", "presence_penalty", "between -2 and 2"},
      {R"("presence_penalty":-2.5)", "presence_penalty", "between -2 and 2"},
      {R"("presence_penalty":"1")", "presence_penalty", "must be a number"},
      {R"("frequency_penalty":-3)", "frequency_penalty", "between -2 and 2"},
      {R"("repetition_penalty":0)", "repetition_penalty", "greater than 0"},
      {R"("repetition_penalty":-1)", "repetition_penalty", "between"},
      {R"("min_p":1.5)", "min_p", "between 0 and 1"},
      {R"("min_p":-0.1)", "min_p", "between 0 and 1"},
      {R"("logit_bias":[1,2])", "logit_bias", "must be an object"},
      {R"("logit_bias":{"x":1})", "logit_bias", "not a token id"},
      {R"("logit_bias":{"-1":1})", "logit_bias", "not a token id"},
      {R"("logit_bias":{"1":101})", "logit_bias", "between -100 and 100"},
      {R"("logit_bias":{"1":"5"})", "logit_bias", "between -100 and 100"},
      {R"("logit_bias":{"99999999999":1})", "logit_bias", "not a token id"},
      {many_bias, "logit_bias", "at most 300"},
      {R"("stop_token_ids":5)", "stop_token_ids", "must be a list"},
      {R"("stop_token_ids":[1,-2])", "stop_token_ids", "non-negative"},
      {R"("stop_token_ids":[1.5])", "stop_token_ids", "non-negative"},
      {many_ids, "stop_token_ids", "at most 64"},
  };
  for (const Case& c : cases) {
    Parsed p = completion(R"({"prompt":"x",)" + c.field + "}");
    ASSERT_FALSE(p.req) << c.field;
    EXPECT_EQ(p.error.status.code(), StatusCode::kInvalidArgument) << c.field;
    EXPECT_EQ(p.error.param, c.param) << c.field;
    EXPECT_NE(p.error.status.message().find(c.says), std::string_view::npos)
        << c.field << ": " << p.error.status.message();
  }
  // The edges are inside.
  EXPECT_TRUE(completion(R"({"prompt":"x","presence_penalty":-2,"frequency_penalty":2,
      "min_p":1,"repetition_penalty":0.01,"logit_bias":{"1":-100,"2":100}})")
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

TEST(RequestTest, LogprobsAreParsedPerEndpoint) {
  EXPECT_EQ(completion(R"({"prompt":"x"})").req->logprobs, -1);
  EXPECT_EQ(completion(R"({"prompt":"x","logprobs":false})").req->logprobs, -1);
  EXPECT_EQ(completion(R"({"prompt":"x","logprobs":null})").req->logprobs, -1);
  for (int k : {0, 5, 20}) {
    Parsed p = completion(R"({"prompt":"x","logprobs":)" + std::to_string(k) + "}");
    ASSERT_TRUE(p.req) << k << ": " << p.error.status.to_string();
    EXPECT_EQ(p.req->logprobs, k);
  }
  const std::string msgs = R"("messages":[{"role":"user","content":"hi"}])";
  EXPECT_EQ(chat("{" + msgs + "}").req->logprobs, -1);
  EXPECT_EQ(chat("{" + msgs + R"(,"logprobs":false})").req->logprobs, -1);
  EXPECT_EQ(chat("{" + msgs + R"(,"logprobs":true})").req->logprobs, 0);
  EXPECT_EQ(chat("{" + msgs + R"(,"logprobs":true,"top_logprobs":20})").req->logprobs, 20);
  EXPECT_EQ(chat("{" + msgs + R"(,"logprobs":true,"top_logprobs":0})").req->logprobs, 0);
}

TEST(RequestTest, BadLogprobsAreRefusedNamingTheField) {
  const std::vector<std::string> bad_completion = {"21", "-1", "true", "2.5", "\"3\""};
  for (const std::string& v : bad_completion) {
    Parsed p = completion(R"({"prompt":"x","logprobs":)" + v + "}");
    ASSERT_FALSE(p.req) << v;
    EXPECT_EQ(p.error.param, "logprobs") << v;
    EXPECT_EQ(p.error.status.code(), StatusCode::kInvalidArgument) << v;
  }
  const std::string msgs = R"({"messages":[{"role":"user","content":"hi"}],)";
  const std::vector<std::pair<std::string, std::string>> bad_chat = {
      {R"("logprobs":true,"top_logprobs":21})", "top_logprobs"},
      {R"("logprobs":true,"top_logprobs":-1})", "top_logprobs"},
      {R"("top_logprobs":3})", "top_logprobs"},
      {R"("logprobs":false,"top_logprobs":3})", "top_logprobs"},
      {R"("logprobs":3})", "logprobs"},
      {R"("logprobs":"yes"})", "logprobs"}};
  for (const auto& [body, param] : bad_chat) {
    Parsed p = chat(msgs + body);
    ASSERT_FALSE(p.req) << body;
    EXPECT_EQ(p.error.param, param) << body;
    EXPECT_NE(p.error.status.message().find(param), std::string_view::npos) << body;
  }
  // top_logprobs is a chat field only.
  Parsed p = completion(R"({"prompt":"x","logprobs":2,"top_logprobs":2})");
  ASSERT_FALSE(p.req);
  EXPECT_EQ(p.error.param, "top_logprobs");
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
